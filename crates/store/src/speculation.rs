//! Speculation state shared by every process on the database: the per-session disclosure
//! budget ([`secureclaw_core::store::SpeculationStore`]).

use crate::Cached;
use crate::{SqliteStore, StoreError, sql};
use rusqlite::{OptionalExtension, params};

/// A stored counter as `u32`.
fn spent(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("budget counter `{v}`")))
}

impl SqliteStore {
    /// Budgeted dispatches charged to `session`; 0 if never charged.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] for a counter out of range.
    pub fn budget_spent(&self, session: &str) -> Result<u32, StoreError> {
        let conn = self.conn()?;
        let v: Option<i64> = conn
            .query_row_cached(
                "SELECT spent FROM speculation_budget WHERE session = ?1",
                params![session],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        v.map_or(Ok(0), spent)
    }

    /// Charge one dispatch to `session` if fewer than `limit` are charged: one statement
    /// (insert, or increment under the limit), atomic across connections and processes.
    /// The count after charging, or `None` when the limit was reached (nothing charged).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] for a counter out of range.
    pub fn charge_budget(&self, session: &str, limit: u32) -> Result<Option<u32>, StoreError> {
        if limit == 0 {
            return Ok(None);
        }
        let conn = self.conn()?;
        let v: Option<i64> = conn
            .query_row_cached(
                "INSERT INTO speculation_budget (session, spent) VALUES (?1, 1)
                 ON CONFLICT (session) DO UPDATE SET spent = spent + 1 WHERE spent < ?2
                 RETURNING spent",
                params![session, i64::from(limit)],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        v.map(spent).transpose()
    }
}
