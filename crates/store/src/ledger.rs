//! The single-use ledger (DESIGN.md §3 "Single use and crash safety"; SecureClaw paper §3.4,
//! acceptance check 11).
//!
//! [`SingleUseLedger::reserve`] is one `INSERT … ON CONFLICT (action_id) DO NOTHING`: the
//! primary key makes the mark atomic across threads, connections and processes, and the row
//! is written in state `reserved` by that same statement. The executor then records `executed`
//! (with the result digest), `failed` (the upstream answered with an error, or the request was
//! never sent) or `outcome_unknown` (the request was sent and no answer came back: the effect
//! may or may not have happened, and it is never retried). Entries never go back to `reserved` and are never
//! deleted (both enforced by triggers), so an id is marked at most once, ever. A crash between
//! reservation and outcome leaves `reserved`: reported by
//! [`SqliteStore::dangling_reservations`], never executed again.

use crate::Cached;
use crate::{SqliteStore, StoreError, int, sql, uint};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use secureclaw_core::acceptance::LedgerError;
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::keys::KeyId;
use secureclaw_core::store::{LedgerEntry, LedgerState};
use secureclaw_core::{ActionId, UnixMillis};

const COLUMNS: &str =
    "action_id, binding_kid, binding, state, reserved_at, finished_at, result_digest, failure";

/// Marks a `reserved` entry `executed` (`?1` id, `?2` time, `?3` result digest).
pub(crate) const MARK_EXECUTED: &str =
    "UPDATE ledger SET state = 'executed', finished_at = ?2, result_digest = ?3
     WHERE action_id = ?1 AND state = 'reserved'";

/// Marks a `reserved` entry `failed` (`?1` id, `?2` time, `?3` reason).
pub(crate) const MARK_FAILED: &str =
    "UPDATE ledger SET state = 'failed', finished_at = ?2, failure = ?3
     WHERE action_id = ?1 AND state = 'reserved'";

/// Marks a `reserved` entry `outcome_unknown` (`?1` id, `?2` time, `?3` reason).
pub(crate) const MARK_OUTCOME_UNKNOWN: &str =
    "UPDATE ledger SET state = 'outcome_unknown', finished_at = ?2, failure = ?3
     WHERE action_id = ?1 AND state = 'reserved'";

/// The reservation statement: inserts the `reserved` row of `id` unless one exists; the
/// number of rows inserted (1, or 0 if the id was already reserved).
pub(crate) fn insert_reservation(
    conn: &Connection,
    id: &ActionId,
    binding: &BindingDigest,
    at: UnixMillis,
) -> rusqlite::Result<usize> {
    conn.execute_cached(
        "INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at)
         VALUES (?1, ?2, ?3, 'reserved', ?4)
         ON CONFLICT (action_id) DO NOTHING",
        params![id.0, binding.kid.0, binding.digest, int(at.0)],
    )
}

struct RawEntry {
    action_id: String,
    binding_kid: String,
    binding: String,
    state: String,
    reserved_at: i64,
    finished_at: Option<i64>,
    result_digest: Option<String>,
    failure: Option<String>,
}

impl RawEntry {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            action_id: r.get(0)?,
            binding_kid: r.get(1)?,
            binding: r.get(2)?,
            state: r.get(3)?,
            reserved_at: r.get(4)?,
            finished_at: r.get(5)?,
            result_digest: r.get(6)?,
            failure: r.get(7)?,
        })
    }

    fn decode(self) -> Result<LedgerEntry, StoreError> {
        let state = LedgerState::parse(&self.state)?;
        Ok(LedgerEntry {
            action_id: ActionId(self.action_id),
            binding: BindingDigest {
                kid: KeyId(self.binding_kid),
                digest: self.binding,
            },
            state,
            reserved_at: UnixMillis(uint(self.reserved_at)),
            finished_at: self.finished_at.map(|t| UnixMillis(uint(t))),
            result_digest: self.result_digest,
            failure: self.failure,
        })
    }
}

impl SqliteStore {
    /// [`SingleUseLedger::reserve`](secureclaw_core::acceptance::SingleUseLedger::reserve): one atomic statement; `Ok(true)` iff this call inserted
    /// the row. Any SQLite failure (lock timeout, I/O, missing table, poisoned lock) is an
    /// error, never `Ok(true)`.
    ///
    /// # Errors
    /// [`LedgerError`] if SQLite fails.
    pub fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        let conn = self.conn().map_err(|e| LedgerError(e.to_string()))?;
        let inserted = insert_reservation(&conn, action_id, binding, at)
            .map_err(|e| LedgerError(e.to_string()))?;
        Ok(inserted == 1)
    }
}

impl SqliteStore {
    /// Record that the reserved action `id` was executed, with the digest of its result.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if `id` was never reserved; [`StoreError::Conflict`] if it is
    /// no longer `reserved`; [`StoreError::Unavailable`].
    pub fn mark_executed(
        &self,
        id: &ActionId,
        result_digest: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(id, MARK_EXECUTED, params![id.0, int(at.0), result_digest])
    }

    /// Record that the reserved action `id` failed (upstream error, crash recovery). The id stays
    /// spent. `reason` is stored in clear: pass a reason code or short message, never a value.
    ///
    /// # Errors
    /// As [`SqliteStore::mark_executed`].
    pub fn mark_failed(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(id, MARK_FAILED, params![id.0, int(at.0), reason])
    }

    /// Record that the reserved action `id` was dispatched but its outcome is unknown: the
    /// effect may or may not have happened. The id stays spent and the effect is never
    /// retried. `reason` is stored in clear: pass an error class, never a value.
    ///
    /// # Errors
    /// As [`SqliteStore::mark_executed`].
    pub fn mark_outcome_unknown(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(id, MARK_OUTCOME_UNKNOWN, params![id.0, int(at.0), reason])
    }

    fn finish(
        &self,
        id: &ActionId,
        update: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let changed = tx.execute_cached(update, params).map_err(sql)?;
        if changed == 1 {
            return tx.commit().map_err(sql);
        }
        let state: Option<String> = tx
            .query_row_cached(
                "SELECT state FROM ledger WHERE action_id = ?1",
                [&id.0],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        match state {
            None => Err(StoreError::NotFound(format!("ledger entry `{id}`"))),
            Some(state) => Err(StoreError::Conflict(format!(
                "ledger entry `{id}` is already {state}"
            ))),
        }
    }

    /// The ledger entry of `id`, if it was ever reserved.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn ledger_entry(&self, id: &ActionId) -> Result<Option<LedgerEntry>, StoreError> {
        let conn = self.conn()?;
        let raw = conn
            .query_row_cached(
                &format!("SELECT {COLUMNS} FROM ledger WHERE action_id = ?1"),
                [&id.0],
                RawEntry::from_row,
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        raw.map(RawEntry::decode).transpose()
    }

    /// Whether an action of `session` whose binding is `binding` has a ledger entry in state
    /// `outcome_unknown` (see
    /// [`secureclaw_core::store::LedgerStore::outcome_unknown_tool`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn outcome_unknown_tool(&self, session: &str, tool: &str) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let found = conn
            .query_row_cached(
                "SELECT 1 FROM ledger l JOIN actions a ON a.action_id = l.action_id
                 WHERE a.session = ?1 AND a.tool = ?2
                   AND l.state = 'outcome_unknown' LIMIT 1",
                params![session, tool],
                |_| Ok(()),
            )
            .optional()
            .map_err(sql)?;
        Ok(found.is_some())
    }

    /// Entries still `reserved`, oldest first. At start-up these are actions whose effect may or
    /// may not have happened before a crash: report them (audit `crash_recovery`), never
    /// re-execute them; [`SqliteStore::mark_failed`] then closes them. While the gateway runs,
    /// the list also contains commits in flight.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn dangling_reservations(&self) -> Result<Vec<LedgerEntry>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM ledger WHERE state = 'reserved' ORDER BY reserved_at, action_id"))
            .map_err(sql)?;
        let raws = stmt
            .query_map([], RawEntry::from_row)
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        drop(stmt);
        drop(conn);
        raws.into_iter().map(RawEntry::decode).collect()
    }
}
