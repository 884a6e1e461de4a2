//! Held speculative calls, branch states and rate-limit token buckets shared by every process
//! on the database ([`secureclaw_core::store::SpeculationStore`],
//! [`secureclaw_core::store::RateLimitStore`]). Held calls carry the runtime's raw pre-commit
//! arguments: they are stored sealed under the vault key, never in clear, and deleted when
//! their branch settles.

use crate::Cached;
use crate::task_state::{bound, count};
use crate::vault::{open_text, seal_text, sealed_at};
use crate::{SqliteStore, StoreError, int, sql, uint};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use secureclaw_core::KeyRing;
use secureclaw_core::contract::BranchState;
use secureclaw_core::recovery::Limit;
use secureclaw_core::store::{
    HeldBounds, HeldCall, HoldOutcome, RateLimits, RateTake, TokenBucket, take_tokens,
};
use secureclaw_core::time::UnixMillis;
use secureclaw_core::vault::SealedValue;

/// The associated data of a sealed held call: its session, branch and sequence number, so
/// that a ciphertext moved to another row, branch or session does not decrypt.
pub(crate) fn held_aad(session: &str, branch: &str, seq: i64) -> String {
    format!("held:{session}#{branch}#{seq}")
}

/// Seal the JSON of a held call with a fresh random nonce.
pub(crate) fn seal_held(
    keys: &KeyRing,
    session: &str,
    branch: &str,
    seq: i64,
    call: &str,
) -> Result<SealedValue, StoreError> {
    seal_text(keys, &held_aad(session, branch, seq), call, "held call")
}

/// Open a sealed held call.
pub(crate) fn open_held(
    keys: &KeyRing,
    session: &str,
    branch: &str,
    seq: i64,
    sealed: &SealedValue,
) -> Result<String, StoreError> {
    open_text(keys, &held_aad(session, branch, seq), sealed, "held call")
}

/// A stored branch state.
pub(crate) fn branch_state(s: &str) -> Result<BranchState, StoreError> {
    BranchState::parse(s).ok_or_else(|| StoreError::Corrupt(format!("branch state `{s}`")))
}

/// Whether settling a branch in state `cur` as `to` is allowed (`Ok(true)`: a change,
/// `Ok(false)`: already so).
pub(crate) fn settle_check(
    branch: &str,
    cur: BranchState,
    to: BranchState,
) -> Result<bool, StoreError> {
    if to == BranchState::Pending {
        return Err(StoreError::Invalid(
            "a branch cannot be settled as pending".into(),
        ));
    }
    match cur {
        BranchState::Pending => Ok(true),
        c if c == to => Ok(false),
        c => Err(StoreError::Conflict(format!(
            "branch `{branch}` is already {}",
            c.as_str()
        ))),
    }
}

/// Which bound a new call of `bytes` would break, given the session's totals.
pub(crate) fn held_limit(calls: i64, held: i64, bytes: i64, bounds: HeldBounds) -> Option<Limit> {
    if calls >= bound(bounds.max_calls) {
        Some(Limit::HeldCalls)
    } else if held.saturating_add(bytes) > bound(bounds.max_bytes) {
        Some(Limit::HeldBytes)
    } else {
        None
    }
}

/// The scope key of a tool bucket (the session bucket's is `*`).
pub(crate) fn tool_scope(tool: &str) -> String {
    format!("t:{tool}")
}

/// The scope key of a session's bucket.
pub(crate) const SESSION_SCOPE: &str = "*";

/// A stored bucket.
pub(crate) fn bucket(milli_tokens: i64, at: i64) -> Result<TokenBucket, StoreError> {
    Ok(TokenBucket {
        milli_tokens: count(milli_tokens)?,
        at: UnixMillis(uint(at)),
    })
}

impl SqliteStore {
    /// State of `branch` of `session` (pending if never settled).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn branch_state(&self, session: &str, branch: &str) -> Result<BranchState, StoreError> {
        let conn = self.conn()?;
        let s: Option<String> = conn
            .query_row_cached(
                "SELECT state FROM spec_branches WHERE session = ?1 AND branch = ?2",
                params![session, branch],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        s.map_or(Ok(BranchState::Pending), |s| branch_state(&s))
    }

    /// Hold a call in one immediate transaction (see
    /// [`secureclaw_core::store::SpeculationStore::hold_call`]).
    ///
    /// # Errors
    /// [`StoreError::Key`]; [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn hold_call(
        &self,
        session: &str,
        branch: &str,
        call: &str,
        bytes: u64,
        bounds: HeldBounds,
    ) -> Result<HoldOutcome, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let state = tx_branch_state(&tx, session, branch)?;
        if state != BranchState::Pending {
            return Ok(HoldOutcome::Settled(state));
        }
        tx.execute_cached(
            "INSERT INTO held_sessions (session, calls, bytes, next_seq) VALUES (?1, 0, 0, 0)
             ON CONFLICT (session) DO NOTHING",
            params![session],
        )
        .map_err(sql)?;
        let (calls, held, last): (i64, i64, i64) = tx
            .query_row_cached(
                "SELECT calls, bytes, next_seq FROM held_sessions WHERE session = ?1",
                params![session],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(sql)?;
        let size = bound(bytes);
        if let Some(limit) = held_limit(calls, held, size, bounds) {
            return Ok(HoldOutcome::Limit(limit));
        }
        let seq = last.saturating_add(1);
        let sealed = seal_held(&self.keys, session, branch, seq, call)?;
        tx.execute_cached(
            "INSERT INTO spec_branches (session, branch, state) VALUES (?1, ?2, 'pending')
             ON CONFLICT (session, branch) DO NOTHING",
            params![session, branch],
        )
        .map_err(sql)?;
        tx.execute_cached(
            "INSERT INTO held_calls (session, seq, branch, bytes, kid, nonce, ciphertext)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                session,
                seq,
                branch,
                size,
                sealed.kid.0,
                sealed.nonce,
                sealed.ciphertext
            ],
        )
        .map_err(sql)?;
        tx.execute_cached(
            "UPDATE held_sessions SET calls = calls + 1, bytes = bytes + ?2, next_seq = ?3
             WHERE session = ?1",
            params![session, size, seq],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(HoldOutcome::Held(uint(seq)))
    }

    /// Settle a branch and take its held calls in one immediate transaction (see
    /// [`secureclaw_core::store::SpeculationStore::settle_branch`]).
    ///
    /// # Errors
    /// [`StoreError::Conflict`]; [`StoreError::Invalid`]; [`StoreError::Corrupt`];
    /// [`StoreError::Key`]; [`StoreError::Unavailable`].
    pub fn settle_branch(
        &self,
        session: &str,
        branch: &str,
        to: BranchState,
    ) -> Result<Vec<HeldCall>, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let cur = tx_branch_state(&tx, session, branch)?;
        if !settle_check(branch, cur, to)? {
            return Ok(Vec::new());
        }
        tx.execute_cached(
            "INSERT INTO spec_branches (session, branch, state) VALUES (?1, ?2, ?3)
             ON CONFLICT (session, branch) DO UPDATE SET state = excluded.state",
            params![session, branch, to.as_str()],
        )
        .map_err(sql)?;
        let rows = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT seq, bytes, kid, nonce, ciphertext FROM held_calls
                     WHERE session = ?1 AND branch = ?2 ORDER BY seq",
                )
                .map_err(sql)?;
            stmt.query_map(params![session, branch], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, sealed_at(r, 2)?))
            })
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?
        };
        let mut calls = Vec::with_capacity(rows.len());
        let mut freed = 0i64;
        for (seq, bytes, sealed) in rows {
            calls.push(HeldCall {
                seq: uint(seq),
                call: open_held(&self.keys, session, branch, seq, &sealed)?,
                bytes: count(bytes)?,
            });
            freed = freed.saturating_add(bytes);
        }
        if !calls.is_empty() {
            tx.execute_cached(
                "DELETE FROM held_calls WHERE session = ?1 AND branch = ?2",
                params![session, branch],
            )
            .map_err(sql)?;
            let n = i64::try_from(calls.len()).unwrap_or(i64::MAX);
            tx.execute_cached(
                "UPDATE held_sessions SET calls = calls - ?2, bytes = bytes - ?3
                 WHERE session = ?1",
                params![session, n, freed],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(calls)
    }

    /// Calls and bytes `session` holds.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn held_totals(&self, session: &str) -> Result<(u64, u64), StoreError> {
        let conn = self.conn()?;
        let v: Option<(i64, i64)> = conn
            .query_row_cached(
                "SELECT calls, bytes FROM held_sessions WHERE session = ?1",
                params![session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(sql)?;
        match v {
            Some((c, b)) => Ok((count(c)?, count(b)?)),
            None => Ok((0, 0)),
        }
    }

    /// Take one token for `session` and `tool` in one immediate transaction (see
    /// [`secureclaw_core::store::RateLimitStore::take_rate`]), committed without waiting for
    /// fsync ([`crate::without_fsync`]): a crash may forget the last takes, which only refills
    /// a bucket.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn take_rate(
        &self,
        session: &str,
        tool: &str,
        rates: RateLimits,
        now: UnixMillis,
    ) -> Result<RateTake, StoreError> {
        let mut conn = self.conn()?;
        crate::without_fsync(&mut conn, |conn| {
            Self::take_rate_tx(conn, session, tool, rates, now)
        })
    }

    fn take_rate_tx(
        conn: &mut Connection,
        session: &str,
        tool: &str,
        rates: RateLimits,
        now: UnixMillis,
    ) -> Result<RateTake, StoreError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let scope = tool_scope(tool);
        let read = |scope: &str| -> Result<Option<TokenBucket>, StoreError> {
            tx.query_row_cached(
                "SELECT milli_tokens, at FROM rate_buckets WHERE session = ?1 AND scope = ?2",
                params![session, scope],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map_err(sql)?
            .map(|(m, at)| bucket(m, at))
            .transpose()
        };
        let all = read(SESSION_SCOPE)?;
        let one = read(&scope)?;
        let (all, one, decision) = take_tokens(all, one, rates, now);
        for (s, b) in [(SESSION_SCOPE, all), (scope.as_str(), one)] {
            tx.execute_cached(
                "INSERT INTO rate_buckets (session, scope, milli_tokens, at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, scope) DO UPDATE
                 SET milli_tokens = excluded.milli_tokens, at = excluded.at",
                params![session, s, bound(b.milli_tokens), int(b.at.0)],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(decision)
    }
}

/// The state of `branch` inside a transaction.
fn tx_branch_state(
    tx: &Transaction<'_>,
    session: &str,
    branch: &str,
) -> Result<BranchState, StoreError> {
    let s: Option<String> = tx
        .query_row_cached(
            "SELECT state FROM spec_branches WHERE session = ?1 AND branch = ?2",
            params![session, branch],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql)?;
    s.map_or(Ok(BranchState::Pending), |s| branch_state(&s))
}
