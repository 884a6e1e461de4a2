//! Per-session limits the gateway enforces for every front end (issue 12 item 6): how many
//! actions a session may have waiting (previews not yet committed or expired, approvals not
//! yet settled), and how fast a session may call, in all and per tool.
//!
//! Both live in this process's memory, like the held speculative calls: with several gateways
//! on one PostgreSQL database each counts what it issued. Time comes from the gateway's
//! injected clock, so tests drive the buckets without sleeping.
//!
//! Rates are token buckets: a session's bucket holds up to `session_burst` tokens and gains
//! `session_rate_per_s` per second; each call takes one from the session's bucket and one
//! from the bucket of the (session, tool) pair, or from neither when either is empty. A bucket
//! that has refilled to its size is the same as no bucket, so idle entries are dropped when
//! the table grows.

use secureclaw_core::UnixMillis;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::recovery::Limit;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Milli-tokens per token: buckets count in thousandths so that a rate of a few calls per
/// second refills smoothly at millisecond resolution.
const MILLI: u64 = 1000;

/// Rejections of one session are audited at most once per this many milliseconds; the record
/// carries how many rejections it stands for.
pub(crate) const AUDIT_EVERY_MS: u64 = 1000;

/// One token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    milli_tokens: u64,
    at: UnixMillis,
}

impl Bucket {
    fn full(burst: u32, now: UnixMillis) -> Self {
        Self {
            milli_tokens: u64::from(burst).saturating_mul(MILLI),
            at: now,
        }
    }

    /// Refill up to `burst` for the time since the last look (a clock that went back adds
    /// nothing).
    fn refill(&mut self, rate_per_s: u32, burst: u32, now: UnixMillis) {
        let elapsed = now.0.saturating_sub(self.at.0);
        // `rate` tokens per second = `rate` milli-tokens per millisecond.
        let gained = elapsed.saturating_mul(u64::from(rate_per_s));
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(gained)
            .min(u64::from(burst).saturating_mul(MILLI));
        if now.0 > self.at.0 {
            self.at = now;
        }
    }

    fn is_full(&self, burst: u32) -> bool {
        self.milli_tokens >= u64::from(burst).saturating_mul(MILLI)
    }

    /// Milliseconds until one token is available (`None`: never, a rate of zero).
    fn wait_ms(&self, rate_per_s: u32) -> Option<u64> {
        let missing = MILLI.saturating_sub(self.milli_tokens);
        if missing == 0 {
            return Some(0);
        }
        let rate = u64::from(rate_per_s);
        if rate == 0 {
            return None;
        }
        Some(missing.div_ceil(rate))
    }
}

/// The rates a [`RateLimiter`] enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    pub session_rate_per_s: u32,
    pub session_burst: u32,
    pub tool_rate_per_s: u32,
    pub tool_burst: u32,
}

#[derive(Debug)]
struct SessionBuckets {
    all: Bucket,
    tools: HashMap<String, Bucket>,
    /// When a rejection of this session was last audited, and how many were not since.
    last_audit: Option<UnixMillis>,
    unaudited: u64,
}

/// A refused call: which limit, and when the next call can be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttled {
    pub limit: Limit,
    pub retry_after_ms: Option<u64>,
    /// `Some(n)`: audit this rejection, standing for `n` rejections (itself included);
    /// `None`: an audit record of this session was written less than a second ago.
    pub audit: Option<u64>,
}

/// Token buckets per session and per (session, tool).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rates: Rates,
    sessions: Mutex<HashMap<String, SessionBuckets>>,
    /// Table size after the last pruning; the next pruning runs at twice this.
    pruned_at: Mutex<usize>,
}

impl RateLimiter {
    pub(crate) fn new(rates: Rates) -> Self {
        Self {
            rates,
            sessions: Mutex::default(),
            pruned_at: Mutex::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, SessionBuckets>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take one token for a call of `session` to `tool` (`None` for a tool the catalog does
    /// not know: those share one bucket, so invented names cannot grow the table).
    pub(crate) fn take(
        &self,
        session: &str,
        tool: Option<&str>,
        now: UnixMillis,
    ) -> Result<(), Throttled> {
        let r = self.rates;
        let mut sessions = self.lock();
        if !sessions.contains_key(session) {
            self.prune(&mut sessions, now);
        }
        let entry = sessions
            .entry(session.to_owned())
            .or_insert_with(|| SessionBuckets {
                all: Bucket::full(r.session_burst, now),
                tools: HashMap::new(),
                last_audit: None,
                unaudited: 0,
            });
        entry.all.refill(r.session_rate_per_s, r.session_burst, now);
        let tool_key = tool.unwrap_or("");
        let tool_bucket = entry
            .tools
            .entry(tool_key.to_owned())
            .or_insert_with(|| Bucket::full(r.tool_burst, now));
        tool_bucket.refill(r.tool_rate_per_s, r.tool_burst, now);
        let refused = if entry.all.milli_tokens < MILLI {
            Some((Limit::SessionRate, entry.all.wait_ms(r.session_rate_per_s)))
        } else if tool_bucket.milli_tokens < MILLI {
            Some((Limit::ToolRate, tool_bucket.wait_ms(r.tool_rate_per_s)))
        } else {
            None
        };
        match refused {
            None => {
                tool_bucket.milli_tokens -= MILLI;
                entry.all.milli_tokens -= MILLI;
                Ok(())
            }
            Some((limit, retry_after_ms)) => {
                entry.unaudited = entry.unaudited.saturating_add(1);
                let due = entry
                    .last_audit
                    .is_none_or(|t| now.0.saturating_sub(t.0) >= AUDIT_EVERY_MS);
                let audit = due.then(|| {
                    entry.last_audit = Some(now);
                    std::mem::take(&mut entry.unaudited)
                });
                Err(Throttled {
                    limit,
                    retry_after_ms,
                    audit,
                })
            }
        }
    }

    /// Drop the sessions whose buckets have all refilled (the same as having none), once the
    /// table has doubled since the last pruning.
    fn prune(&self, sessions: &mut HashMap<String, SessionBuckets>, now: UnixMillis) {
        let mut pruned_at = self
            .pruned_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sessions.len() < (*pruned_at).max(64).saturating_mul(2) {
            return;
        }
        let r = self.rates;
        sessions.retain(|_, s| {
            s.all.refill(r.session_rate_per_s, r.session_burst, now);
            s.tools.retain(|_, b| {
                b.refill(r.tool_rate_per_s, r.tool_burst, now);
                !b.is_full(r.tool_burst)
            });
            !(s.all.is_full(r.session_burst) && s.tools.is_empty())
        });
        *pruned_at = sessions.len();
    }

    /// Sessions with live buckets.
    #[cfg(test)]
    fn sessions(&self) -> usize {
        self.lock().len()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rate: u32, burst: u32, tool_rate: u32, tool_burst: u32) -> RateLimiter {
        RateLimiter::new(Rates {
            session_rate_per_s: rate,
            session_burst: burst,
            tool_rate_per_s: tool_rate,
            tool_burst,
        })
    }

    #[test]
    fn a_bucket_refuses_past_its_burst_and_refills_at_its_rate() {
        let l = limiter(10, 3, 100, 100);
        let t = UnixMillis(1_000);
        for _ in 0..3 {
            l.take("s", Some("t"), t).unwrap();
        }
        let e = l.take("s", Some("t"), t).unwrap_err();
        assert_eq!(e.limit, Limit::SessionRate);
        assert_eq!(
            e.retry_after_ms,
            Some(100),
            "10 per second: one every 100 ms"
        );
        assert_eq!(e.audit, Some(1));
        // A second rejection within the audit interval is counted, not audited.
        assert_eq!(l.take("s", Some("t"), t).unwrap_err().audit, None);
        // 99 ms later: not yet.
        assert!(l.take("s", Some("t"), UnixMillis(1_099)).is_err());
        l.take("s", Some("t"), UnixMillis(1_100)).unwrap();
        // Another session has its own bucket.
        l.take("other", Some("t"), t).unwrap();
        // The next rejection a second after the audited one is audited again, standing for
        // itself and the three not audited since.
        assert!(l.take("s", Some("t"), UnixMillis(1_100)).is_err());
        let later = UnixMillis(1_000 + AUDIT_EVERY_MS);
        for _ in 0..3 {
            l.take("s", Some("t"), later).unwrap();
        }
        let e = l.take("s", Some("t"), later).unwrap_err();
        assert_eq!(e.audit, Some(4));
    }

    #[test]
    fn a_tool_bucket_refuses_without_spending_the_session_bucket() {
        let l = limiter(1, 10, 1, 2);
        let t = UnixMillis(0);
        l.take("s", Some("a"), t).unwrap();
        l.take("s", Some("a"), t).unwrap();
        let e = l.take("s", Some("a"), t).unwrap_err();
        assert_eq!(e.limit, Limit::ToolRate);
        assert_eq!(e.retry_after_ms, Some(1000));
        // Eight session tokens remain: the refused call took none.
        for _ in 0..2 {
            l.take("s", Some("b"), t).unwrap();
        }
        for _ in 0..2 {
            l.take("s", Some("c"), t).unwrap();
        }
        for _ in 0..2 {
            l.take("s", Some("d"), t).unwrap();
        }
        for _ in 0..2 {
            l.take("s", None, t).unwrap();
        }
        assert_eq!(
            l.take("s", Some("e"), t).unwrap_err().limit,
            Limit::SessionRate
        );
    }

    #[test]
    fn a_zero_rate_never_refills_and_says_so() {
        let l = limiter(0, 1, 0, 1);
        l.take("s", None, UnixMillis(0)).unwrap();
        let e = l.take("s", None, UnixMillis(u64::MAX)).unwrap_err();
        assert_eq!(e.retry_after_ms, None);
    }

    #[test]
    fn refilled_sessions_are_pruned_when_the_table_grows() {
        let l = limiter(1000, 1, 1000, 1);
        for i in 0..100 {
            l.take(&format!("s{i}"), None, UnixMillis(0)).unwrap();
        }
        assert_eq!(l.sessions(), 100);
        // One second later those buckets have refilled; new sessions grow the table to 128,
        // which prunes the refilled ones and keeps the busy ones.
        for i in 100..130 {
            l.take(&format!("s{i}"), None, UnixMillis(1_000)).unwrap();
        }
        assert_eq!(l.sessions(), 30);
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
