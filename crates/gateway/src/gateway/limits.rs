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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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

/// Bytes of call arguments each session, and the whole process, has running
/// (`max_in_flight_bytes_per_session`, `max_in_flight_bytes`; issue 12 item 6). Parsing,
/// checking, canonicalizing and binding a call copies its arguments several times, so what
/// may run at once is bounded by bytes, not only by count.
#[derive(Debug, Default)]
pub(crate) struct InFlightBytes {
    running: Mutex<Running>,
}

/// What [`InFlightBytes`] counts, under one lock.
#[derive(Debug, Default)]
struct Running {
    /// Bytes per session with something running.
    sessions: HashMap<String, usize>,
    /// Their sum.
    total: usize,
}

/// One call's bytes counted in [`InFlightBytes`] until it is dropped (the call ended, or its
/// task did).
#[derive(Debug)]
pub(crate) struct BytesGuard {
    owner: Arc<InFlightBytes>,
    session: String,
    bytes: usize,
}

impl InFlightBytes {
    fn lock(&self) -> MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Count `bytes` for `session`, unless that takes the session past `session_cap` while it
    /// already has something running ([`Limit::InFlightBytes`]), or the process past
    /// `gateway_cap` while anything runs ([`Limit::GatewayInFlightBytes`]). A lone call is
    /// always admitted: its size is bounded by `max_argument_bytes`.
    pub(crate) fn admit(
        self: &Arc<Self>,
        session: &str,
        bytes: usize,
        session_cap: usize,
        gateway_cap: usize,
    ) -> Result<BytesGuard, Limit> {
        let mut running = self.lock();
        let mine = running.sessions.get(session).copied().unwrap_or(0);
        if mine > 0 && mine.saturating_add(bytes) > session_cap {
            return Err(Limit::InFlightBytes);
        }
        if running.total > 0 && running.total.saturating_add(bytes) > gateway_cap {
            return Err(Limit::GatewayInFlightBytes);
        }
        running
            .sessions
            .insert(session.to_owned(), mine.saturating_add(bytes));
        running.total = running.total.saturating_add(bytes);
        Ok(BytesGuard {
            owner: Arc::clone(self),
            session: session.to_owned(),
            bytes,
        })
    }

    /// Bytes `session` has running.
    #[cfg(test)]
    fn running(&self, session: &str) -> usize {
        self.lock().sessions.get(session).copied().unwrap_or(0)
    }

    /// Bytes the process has running.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.lock().total
    }
}

impl Drop for BytesGuard {
    fn drop(&mut self) {
        let mut running = self.owner.lock();
        running.total = running.total.saturating_sub(self.bytes);
        if let Some(mine) = running.sessions.get_mut(&self.session) {
            *mine = mine.saturating_sub(self.bytes);
            if *mine == 0 {
                running.sessions.remove(&self.session);
            }
        }
    }
}

/// The length in bytes of `value` serialized as compact JSON, counted without building the
/// text (`usize::MAX` if it cannot be serialized).
pub(crate) fn serialized_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Bytes each JSON value of a call's arguments counts for beyond its text
/// ([`argument_weight`]): about what one parsed value costs in the copies a call makes.
pub(crate) const VALUE_WEIGHT_BYTES: usize = 512;

/// What a call's arguments weigh against `max_in_flight_bytes_per_session`: their serialized
/// length plus [`VALUE_WEIGHT_BYTES`] for every value (scalar, array, object) in them. A 4 MB
/// string weighs about 4 MB; 100,000 tiny values weigh about 51 MB, as they cost in memory
/// (red-team round 3: 16 concurrent calls of 560 KB of tiny values from one session took the
/// gateway to 1.9 GB under a bytes-only cap).
pub(crate) fn argument_weight(arguments: &serde_json::Map<String, serde_json::Value>) -> usize {
    let mut values: usize = 0;
    let mut stack: Vec<&serde_json::Value> = arguments.values().collect();
    while let Some(v) = stack.pop() {
        values = values.saturating_add(1);
        match v {
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    serialized_len(arguments).saturating_add(values.saturating_mul(VALUE_WEIGHT_BYTES))
}

/// How long a session refused for [`Limit::InFlightBytes`] is told to wait.
const IN_FLIGHT_RETRY_MS: u64 = 1000;

impl Gateway {
    /// Count the arguments of a call, preview or commit of `session` against
    /// `max_in_flight_bytes_per_session` for as long as the returned guard lives, or refuse it
    /// ([`Limit::InFlightBytes`], audited like a rate-limit rejection); nothing was stored or
    /// sent.
    pub(super) async fn admit_arguments(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<BytesGuard, CallOutcome> {
        let bytes = argument_weight(arguments);
        let limits = &self.inner.config.limits;
        match self.inner.in_flight_bytes.admit(
            &session.id,
            bytes,
            limits.max_in_flight_bytes_per_session,
            limits.max_in_flight_bytes,
        ) {
            Ok(guard) => Ok(guard),
            Err(limit) => {
                let audit = self.inner.rates.rejected(&session.id, self.now());
                Err(self
                    .refuse_limit(session, tool, limit, Some(IN_FLIGHT_RETRY_MS), audit)
                    .await)
            }
        }
    }

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

    /// Regression (issue 12 item 6, red-team round 2: 60 concurrent 4 MiB calls of one
    /// session): a session's running argument bytes are bounded; a lone call always runs; the
    /// bytes are freed when a call ends; other sessions are not affected.
    #[test]
    fn in_flight_bytes_are_bounded_per_session() {
        const G: usize = 1000;
        let b = Arc::new(InFlightBytes::default());
        let big = b
            .admit("s", 40, 16, G)
            .expect("a lone call runs whatever its size");
        assert_eq!(
            b.admit("s", 1, 16, G).unwrap_err(),
            Limit::InFlightBytes,
            "over the cap while one runs"
        );
        assert!(
            b.admit("other", 10, 16, G).is_ok(),
            "another session is not affected"
        );
        drop(big);
        assert_eq!(b.running("s"), 0);
        let a = b.admit("s", 8, 16, G).unwrap();
        let c = b.admit("s", 8, 16, G).expect("exactly at the cap");
        assert!(b.admit("s", 1, 16, G).is_err());
        drop(a);
        assert_eq!(b.running("s"), 8);
        assert!(b.admit("s", 8, 16, G).is_ok());
        drop(c);
        assert_eq!(b.total(), 0);
        assert_eq!(serialized_len(&serde_json::json!({"a": [1, "x"]})), 13);
        let args = serde_json::json!({"a": [1, "x"]});
        let args = args.as_object().unwrap();
        assert_eq!(argument_weight(args), 13 + 3 * VALUE_WEIGHT_BYTES);
    }

    /// Many sessions, each within its own budget, cannot together take the process past
    /// `max_in_flight_bytes`; a lone call still runs, and the budget frees as calls end.
    #[test]
    fn in_flight_bytes_are_bounded_across_sessions() {
        let b = Arc::new(InFlightBytes::default());
        let lone = b.admit("a", 50, 16, 30).expect("a lone call runs");
        assert_eq!(
            b.admit("b", 1, 16, 30).unwrap_err(),
            Limit::GatewayInFlightBytes,
            "a fresh session is refused while the process is over its budget"
        );
        drop(lone);
        let guards: Vec<_> = (0..3)
            .map(|i| b.admit(&format!("s{i}"), 10, 16, 30).unwrap())
            .collect();
        assert_eq!(b.total(), 30);
        assert_eq!(
            b.admit("s9", 1, 16, 30).unwrap_err(),
            Limit::GatewayInFlightBytes
        );
        drop(guards);
        assert_eq!(b.total(), 0);
        assert!(b.admit("s9", 30, 16, 30).is_ok());
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
