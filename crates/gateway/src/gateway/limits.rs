//! Per-session limits the gateway enforces for every front end (issue 12 item 6): how many
//! actions a session may have waiting (previews not yet committed or expired, approvals not
//! yet settled), and how fast a session may call, in all and per tool.
//!
//! Rates are token buckets kept in the store
//! ([`secureclaw_core::store::RateLimitStore`]): a session's bucket holds up to
//! `session_burst` tokens and gains `session_rate_per_s` per second; each call takes one from
//! the session's bucket and one from the bucket of the (session, tool) pair, or from neither
//! when either is empty, in one store transaction. Every gateway on one database shares the
//! buckets, so N replicas together allow the configured rate (not N times it); the only slack
//! is the replicas' clock skew (a replica whose clock runs δ ms ahead refills δ × rate early).
//! Time comes from the gateway's injected clock, so tests drive the buckets without sleeping.
//! What stays in this process's memory is only the coalescing of rejection audit records
//! ([`RateLimiter::rejected`]) and the waiting-action slots ([`PendingSlots`]).

use super::{CallOutcome, Gateway, class};
use secureclaw_core::UnixMillis;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::AuditKind;
use secureclaw_core::recovery::{Limit, ReasonCode, Recovery};
use secureclaw_core::store::{ApprovalState, RateTake, SessionRecord};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Rejections of one session are audited at most once per this many milliseconds; the record
/// carries how many rejections it stands for.
pub(crate) const AUDIT_EVERY_MS: u64 = 1000;

/// The rates a [`RateLimiter`] enforces (through the store).
pub(crate) type Rates = secureclaw_core::store::RateLimits;

/// When a rejection of one session was last audited, and how many were not since.
#[derive(Debug, Clone, Copy)]
struct AuditState {
    last_audit: Option<UnixMillis>,
    unaudited: u64,
}

/// The configured rates, and the per-process coalescing of rate-limit rejection audit records.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rates: Rates,
    audits: Mutex<HashMap<String, AuditState>>,
}

impl RateLimiter {
    pub(crate) fn new(rates: Rates) -> Self {
        Self {
            rates,
            audits: Mutex::default(),
        }
    }

    /// The configured rates.
    pub(crate) fn rates(&self) -> Rates {
        self.rates
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, AuditState>> {
        self.audits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A call of `session` was refused at `now`: `Some(n)` to audit this rejection, standing
    /// for `n` rejections (itself included); `None` when an audit record of this session was
    /// written less than [`AUDIT_EVERY_MS`] ago.
    pub(crate) fn rejected(&self, session: &str, now: UnixMillis) -> Option<u64> {
        let mut audits = self.lock();
        if audits.len() >= 4096 && !audits.contains_key(session) {
            // Entries whose interval has passed hold nothing that matters any more.
            audits.retain(|_, a| {
                a.last_audit
                    .is_some_and(|t| now.0.saturating_sub(t.0) < AUDIT_EVERY_MS)
            });
        }
        let entry = audits.entry(session.to_owned()).or_insert(AuditState {
            last_audit: None,
            unaudited: 0,
        });
        entry.unaudited = entry.unaudited.saturating_add(1);
        let due = entry
            .last_audit
            .is_none_or(|t| now.0.saturating_sub(t.0) >= AUDIT_EVERY_MS);
        due.then(|| {
            entry.last_audit = Some(now);
            std::mem::take(&mut entry.unaudited)
        })
    }
}

/// One waiting action of a session.
#[derive(Debug, Clone)]
struct Slot {
    action: ActionId,
    /// When the slot frees itself (a preview's artifact expiry); `None` while an approval
    /// waits, which only the store can say is settled.
    expires: Option<UnixMillis>,
}

/// Actions each session has waiting (`max_pending_per_session`).
#[derive(Debug, Default)]
pub(crate) struct PendingSlots {
    sessions: Mutex<HashMap<String, Vec<Slot>>>,
}

/// Outcome of [`PendingSlots::try_take`].
#[derive(Debug)]
pub(crate) enum SlotTake {
    /// The slot is taken.
    Taken,
    /// The session is at its limit; these waiting approvals may have been settled by a
    /// confirmer in another process and should be checked against the store.
    Full(Vec<ActionId>),
}

impl PendingSlots {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Slot>>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take a slot for `action` of `session` if fewer than `cap` are waiting, after dropping
    /// those that expired and those in `settled`.
    pub(crate) fn try_take(
        &self,
        session: &str,
        action: &ActionId,
        expires: Option<UnixMillis>,
        cap: usize,
        now: UnixMillis,
        settled: &[ActionId],
    ) -> SlotTake {
        let mut sessions = self.lock();
        let slots = sessions.entry(session.to_owned()).or_default();
        slots.retain(|s| s.expires.is_none_or(|e| e > now) && !settled.contains(&s.action));
        if slots.len() < cap {
            slots.push(Slot {
                action: action.clone(),
                expires,
            });
            return SlotTake::Taken;
        }
        let waiting = slots
            .iter()
            .filter(|s| s.expires.is_none())
            .map(|s| s.action.clone())
            .collect();
        SlotTake::Full(waiting)
    }

    /// Free the slot of `action` (committed, declined, or never stored).
    pub(crate) fn release(&self, session: &str, action: &ActionId) {
        let mut sessions = self.lock();
        if let Some(slots) = sessions.get_mut(session) {
            slots.retain(|s| &s.action != action);
            if slots.is_empty() {
                sessions.remove(session);
            }
        }
    }

    /// Free the slot of `action` whichever session holds it (a confirmer declined it).
    pub(crate) fn release_any(&self, action: &ActionId) {
        let mut sessions = self.lock();
        sessions.retain(|_, slots| {
            slots.retain(|s| &s.action != action);
            !slots.is_empty()
        });
    }

    /// Actions `session` has waiting, counting expired ones not yet dropped.
    #[cfg(test)]
    fn count(&self, session: &str) -> usize {
        self.lock().get(session).map_or(0, Vec::len)
    }
}

impl Gateway {
    /// Refuse a call because a per-session `limit` was reached: nothing was stored or sent.
    /// Audited as a rejection when `audit` is `Some(count)` (metadata only: the limit, the
    /// retry hint and how many rejections the record stands for).
    pub(super) async fn refuse_limit(
        &self,
        session: &SessionRecord,
        tool: &str,
        limit: Limit,
        retry_after_ms: Option<u64>,
        audit: Option<u64>,
    ) -> CallOutcome {
        let entry = self.inner.catalog.get(tool);
        if let Some(count) = audit {
            let mut ev = self.event(AuditKind::Rejection, session, tool);
            ev.reason = Some(ReasonCode::LimitExceeded);
            ev.detail = json!({"front_end": "gateway", "reason": "limit_exceeded",
                "limit": limit.config_key(), "retry_after_ms": retry_after_ms, "count": count});
            let _ = self.audit(ev).await;
        }
        tracing::debug!(tool, limit = limit.config_key(), "limit exceeded");
        CallOutcome::Denied(Recovery::limit_exceeded(
            limit,
            class(entry),
            tool,
            retry_after_ms,
        ))
    }

    /// Take one call of `session` to `tool` from the rate limits (token buckets in the store,
    /// shared by every replica), or refuse it ([`Limit::SessionRate`], [`Limit::ToolRate`])
    /// with a retry hint. A tool the catalog does not know takes from one shared bucket, so
    /// invented names cannot grow the table. A store error refuses the call
    /// ([`ReasonCode::StoreUnavailable`]): fail closed.
    pub(super) async fn throttle(
        &self,
        session: &SessionRecord,
        tool: &str,
    ) -> Option<CallOutcome> {
        let known = self
            .inner
            .catalog
            .get(tool)
            .map_or("", |e| e.exposed.as_str());
        let now = self.now();
        match self
            .inner
            .store
            .take_rate(&session.id, known, self.inner.rates.rates(), now)
            .await
        {
            Ok(RateTake::Taken) => None,
            Ok(RateTake::Refused {
                limit,
                retry_after_ms,
            }) => {
                let audit = self.inner.rates.rejected(&session.id, now);
                Some(
                    self.refuse_limit(session, tool, limit, retry_after_ms, audit)
                        .await,
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "rate limit store unavailable");
                Some(
                    self.deny_call(session, tool, ReasonCode::StoreUnavailable)
                        .await,
                )
            }
        }
    }

    /// Take a waiting-action slot of `session` for `action` (`max_pending_per_session`).
    /// `expires` is when an uncommitted preview frees it by itself; `None` for an approval,
    /// which frees it when decided against, used, or its confirmation expires — also when a
    /// confirmer in another process decided it, which is checked against the store once the
    /// session is at its limit. Store errors count as "still waiting" (fail closed).
    pub(super) async fn take_pending(
        &self,
        session: &SessionRecord,
        action: &ActionId,
        expires: Option<UnixMillis>,
    ) -> bool {
        let cap = self.inner.config.limits.max_pending_per_session;
        let now = self.now();
        let waiting = match self
            .inner
            .pending
            .try_take(&session.id, action, expires, cap, now, &[])
        {
            SlotTake::Taken => return true,
            SlotTake::Full(waiting) => waiting,
        };
        let mut settled = Vec::new();
        for id in waiting {
            if self.approval_settled(&id, now).await {
                settled.push(id);
            }
        }
        if settled.is_empty() {
            return false;
        }
        matches!(
            self.inner
                .pending
                .try_take(&session.id, action, expires, cap, now, &settled),
            SlotTake::Taken
        )
    }

    /// Whether the approval of `action` no longer waits: its action ran (or was attempted),
    /// it was declined, or its confirmation expired unused.
    async fn approval_settled(&self, action: &ActionId, now: UnixMillis) -> bool {
        if matches!(self.inner.store.ledger_entry(action).await, Ok(Some(_))) {
            return true;
        }
        match self.inner.store.approval(action).await {
            Ok(Some(a)) => match a.state {
                ApprovalState::Pending => false,
                ApprovalState::Denied => true,
                ApprovalState::Approved => a.decided_at.is_some_and(|at| {
                    at.plus_millis(self.inner.config.limits.confirmation_ttl_ms) <= now
                }),
            },
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_audited_once_per_interval_with_their_count() {
        let l = RateLimiter::new(Rates {
            session_rate_per_s: 1,
            session_burst: 1,
            tool_rate_per_s: 1,
            tool_burst: 1,
        });
        assert_eq!(l.rejected("s", UnixMillis(1_000)), Some(1));
        assert_eq!(l.rejected("s", UnixMillis(1_500)), None);
        assert_eq!(l.rejected("s", UnixMillis(1_999)), None);
        // Another session is audited on its own.
        assert_eq!(l.rejected("other", UnixMillis(1_999)), Some(1));
        assert_eq!(
            l.rejected("s", UnixMillis(1_000 + AUDIT_EVERY_MS)),
            Some(3),
            "stands for itself and the two not audited"
        );
    }

    #[test]
    fn slots_are_bounded_expire_and_free_on_release() {
        let p = PendingSlots::default();
        let id = |n: u32| ActionId(format!("act_{n}"));
        let t = UnixMillis(0);
        assert!(matches!(
            p.try_take("s", &id(1), Some(UnixMillis(100)), 2, t, &[]),
            SlotTake::Taken
        ));
        assert!(matches!(
            p.try_take("s", &id(2), None, 2, t, &[]),
            SlotTake::Taken
        ));
        match p.try_take("s", &id(3), None, 2, t, &[]) {
            SlotTake::Full(waiting) => assert_eq!(waiting, vec![id(2)]),
            SlotTake::Taken => panic!("over the cap"),
        }
        // Another session is not affected.
        assert!(matches!(
            p.try_take("other", &id(4), None, 2, t, &[]),
            SlotTake::Taken
        ));
        // The preview expires at 100.
        assert!(matches!(
            p.try_take("s", &id(3), None, 2, UnixMillis(100), &[]),
            SlotTake::Taken
        ));
        // Settled approvals are dropped.
        assert!(matches!(
            p.try_take("s", &id(5), None, 2, UnixMillis(100), &[id(2)]),
            SlotTake::Taken
        ));
        p.release("s", &id(3));
        p.release_any(&id(5));
        assert_eq!(p.count("s"), 0);
    }
}
