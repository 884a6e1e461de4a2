//! The retention sweep (issue 14 item 5): session-scoped state is removed some time after its
//! session or handle expired, in bounded batches, by a background task of `serve` and `wrap`
//! (and on demand by `secureclaw store sweep`). What goes and what stays is the store's
//! contract ([`RetentionStore`]); this module decides when, and how much per transaction.

use super::{Clock, Gateway};
use secureclaw_core::store::{RetentionStore, StoreError, SweepReport};
use secureclaw_core::time::UnixMillis;
use std::sync::Arc;
use std::time::Duration;

/// Pause between two batches of one sweep, so that calls waiting for the store get it.
const BATCH_PAUSE: Duration = Duration::from_millis(5);

/// When and how much the gateway sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// How long state is kept after its session (or handle) expired, in milliseconds; 0 turns
    /// the sweep off (the database then grows with every call).
    pub retention_ms: u64,
    /// Time between two sweeps of the background task (the first runs at start-up).
    pub interval: Duration,
    /// Sessions, and handles, per batch (one transaction each).
    pub batch: u32,
}

impl RetentionPolicy {
    /// Default retention: 7 days (604 800 000 ms).
    pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 60 * 60 * 1000;
    /// Default interval between sweeps: 1 hour.
    pub const DEFAULT_INTERVAL_MS: u64 = 60 * 60 * 1000;
    /// Default batch: 500 sessions (and 500 handles) per transaction.
    pub const DEFAULT_BATCH: u32 = 500;

    /// The cutoff at `now`: state that expired before it goes. `None` when the sweep is off
    /// (`retention_ms` 0).
    #[must_use]
    pub fn cutoff(&self, now: UnixMillis) -> Option<UnixMillis> {
        (self.retention_ms > 0).then(|| UnixMillis(now.0.saturating_sub(self.retention_ms)))
    }
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            retention_ms: Self::DEFAULT_RETENTION_MS,
            interval: Duration::from_millis(Self::DEFAULT_INTERVAL_MS),
            batch: Self::DEFAULT_BATCH,
        }
    }
}

/// Sweep everything that expired before `before`, batch after batch of at most `batch`
/// sessions (and handles), until a batch finds nothing; each batch's counts are added to
/// `swept` as soon as it commits, so that after an error `swept` still says what went.
///
/// # Errors
/// The first store error; the batches before it stay swept.
pub async fn sweep_backlog(
    store: &dyn RetentionStore,
    before: UnixMillis,
    batch: u32,
    swept: &mut SweepReport,
) -> Result<(), StoreError> {
    loop {
        let report = store.sweep_expired(before, batch).await?;
        if report.is_empty() {
            return Ok(());
        }
        swept.add(&report);
        tokio::time::sleep(BATCH_PAUSE).await;
    }
}

/// Automatic audit archiving (`[store] audit_archive_dir`): every `interval` (the first time
/// at start-up), records older than `older_than_ms` are archived to a new file in `dir`
/// ([`crate::archive::archive_audit`]), checkpointed and pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditArchivePolicy {
    /// Directory of the archive files (created if missing, mode 0700).
    pub dir: std::path::PathBuf,
    /// Records whose event is older than this many milliseconds are archived.
    pub older_than_ms: u64,
    /// Time between two archive runs.
    pub interval: Duration,
}

impl Gateway {
    /// Start automatic audit archiving with `policy`: at start-up and then every
    /// `policy.interval`, the group writer is flushed and the records older than
    /// `policy.older_than_ms` are archived to a new file in `policy.dir`. What was archived is
    /// logged at info (target `secureclaw::audit_archive`), a failure at warn (a log that does
    /// not verify is never archived); neither stops the task or the gateway. Abort the handle
    /// to stop it.
    #[must_use]
    pub fn spawn_audit_archive(&self, policy: AuditArchivePolicy) -> tokio::task::JoinHandle<()> {
        let gw = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(policy.interval.max(Duration::from_millis(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                gw.inner.writer.flush().await;
                let now = (gw.inner.clock)();
                let cutoff = UnixMillis(now.0.saturating_sub(policy.older_than_ms));
                let store: Arc<dyn secureclaw_core::store::Store> = gw.inner.store.clone();
                let result = crate::archive::archive_audit(
                    store.as_ref(),
                    &gw.inner.keys,
                    crate::archive::ArchiveBound::OlderThan(cutoff),
                    &crate::archive::ArchiveTarget::Dir(policy.dir.clone()),
                    now,
                )
                .await;
                match result {
                    Ok(Some(a)) => tracing::info!(
                        target: "secureclaw::audit_archive",
                        first_seq = a.checkpoint.segment.first_seq,
                        seq = a.checkpoint.seq(),
                        records = a.checkpoint.segment.count,
                        sha256 = %a.checkpoint.segment.archive_sha256,
                        file = %a.path.display(),
                        "audit records {}..={} archived to {} and pruned",
                        a.checkpoint.segment.first_seq,
                        a.checkpoint.seq(),
                        a.path.display()
                    ),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(
                        target: "secureclaw::audit_archive",
                        error = %e,
                        "audit archive failed; it runs again at the next interval"
                    ),
                }
            }
        })
    }

    /// Start the background sweep of this gateway's store: at start-up and then every
    /// `policy.interval`, [`sweep_backlog`] with the cutoff `now - retention_ms`. What was
    /// swept is logged at info (target `secureclaw::retention`), a failure at warn; neither
    /// stops the task or the gateway. `None` (no task) when `retention_ms` is 0. Abort the
    /// handle to stop it.
    #[must_use]
    pub fn spawn_retention(&self, policy: RetentionPolicy) -> Option<tokio::task::JoinHandle<()>> {
        policy.cutoff(self.now())?;
        let store: Arc<dyn RetentionStore> = self.inner.store.clone();
        let clock: Clock = self.inner.clock.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(policy.interval.max(Duration::from_millis(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(before) = policy.cutoff(clock()) else {
                    return;
                };
                let mut swept = SweepReport::default();
                let result = sweep_backlog(store.as_ref(), before, policy.batch, &mut swept).await;
                if !swept.is_empty() {
                    tracing::info!(
                        target: "secureclaw::retention",
                        sessions = swept.sessions,
                        handles = swept.handles,
                        vault_objects = swept.vault_objects,
                        rows = swept.total(),
                        cutoff_ms = before.0,
                        "retention sweep removed expired session state: {swept}"
                    );
                }
                if let Err(e) = result {
                    tracing::warn!(
                        target: "secureclaw::retention",
                        error = %e,
                        "retention sweep failed; it runs again at the next interval"
                    );
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_now_minus_retention_and_zero_turns_it_off() {
        let p = RetentionPolicy::default();
        assert_eq!(p.retention_ms, 604_800_000);
        assert_eq!(
            p.cutoff(UnixMillis(604_800_010)),
            Some(UnixMillis(10)),
            "7 days before now"
        );
        assert_eq!(p.cutoff(UnixMillis(5)), Some(UnixMillis(0)), "saturates");
        let off = RetentionPolicy {
            retention_ms: 0,
            ..p
        };
        assert_eq!(off.cutoff(UnixMillis(5)), None);
    }
}
