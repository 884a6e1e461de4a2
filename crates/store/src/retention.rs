//! Retention of session-scoped state on SQLite ([`RetentionStore`]; issue 14 item 5).
//!
//! One batch is one `BEGIN IMMEDIATE` transaction: pick at most `limit` expired sessions
//! (index `sessions_expiry`), delete their records first and then every per-session row (the
//! no-delete triggers of the grow-only tables let a row go only once its session's record is
//! gone), their handles, and the vault objects no remaining handle references (index
//! `handles_object`); then at most `limit` handles expired on their own (index
//! `handles_expiry`). A store with nothing expired is only read.
//!
//! Times are stored bit-for-bit (`u64 as i64`): an expiry at or above 2^63 ms reads negative,
//! so every query also asks `expires_at >= 0` and such a "never" is never swept.

use crate::{SqliteStore, StoreError, int, sql};
use async_trait::async_trait;
use rusqlite::{Transaction, TransactionBehavior, params};
use secureclaw_core::UnixMillis;
use secureclaw_core::store::{RetentionStore, SweepReport};

/// The tables keyed by `session` (besides `handles`), each with the report counter it feeds.
pub(crate) const SESSION_TABLES: &[&str] = &[
    "protected_objects",
    "grant_uses",
    "read_amounts",
    "written_sets",
    "written_values",
    "speculation_budget",
    "spec_branches",
    "held_sessions",
    "held_calls",
    "rate_buckets",
    "standing_grants",
];

/// The counter of `report` that rows of `table` (one of [`SESSION_TABLES`]) feed.
pub(crate) fn counter<'r>(report: &'r mut SweepReport, table: &str) -> Option<&'r mut u64> {
    Some(match table {
        "protected_objects" => &mut report.protected_objects,
        "grant_uses" => &mut report.grant_uses,
        "read_amounts" => &mut report.read_amounts,
        "written_sets" => &mut report.written_sets,
        "written_values" => &mut report.written_values,
        "speculation_budget" => &mut report.speculation_budgets,
        "spec_branches" => &mut report.spec_branches,
        "held_sessions" => &mut report.held_sessions,
        "held_calls" => &mut report.held_calls,
        "rate_buckets" => &mut report.rate_buckets,
        "standing_grants" => &mut report.standing_grants,
        _ => return None,
    })
}

/// A row count as the report's `u64`.
pub(crate) fn rows(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `expires_at < ?1`, for an expiry below 2^63 (see the module docs).
const EXPIRED: &str = "(expires_at >= 0 AND expires_at < ?1)";

impl SqliteStore {
    /// [`RetentionStore::sweep_expired`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; nothing of the batch is removed.
    pub fn sweep_expired(&self, before: UnixMillis, limit: u32) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::default();
        if limit == 0 {
            return Ok(report);
        }
        let cutoff = int(before.0);
        let mut conn = self.conn()?;
        let any: bool = conn
            .query_row(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE {EXPIRED})
                         OR EXISTS (SELECT 1 FROM handles WHERE {EXPIRED})"
                ),
                [cutoff],
                |r| r.get(0),
            )
            .map_err(sql)?;
        if !any {
            return Ok(report);
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let sessions: Vec<String> = select_strings(
            &tx,
            &format!("SELECT id FROM sessions WHERE {EXPIRED} ORDER BY expires_at LIMIT ?2"),
            params![cutoff, i64::from(limit)],
        )?;
        if !sessions.is_empty() {
            let ids = json_list(&sessions)?;
            report.sessions = rows(
                tx.execute(
                    "DELETE FROM sessions WHERE id IN (SELECT value FROM json_each(?1))",
                    [&ids],
                )
                .map_err(sql)?,
            );
            for table in SESSION_TABLES {
                let n = tx
                    .execute(
                        &format!(
                            "DELETE FROM {table} WHERE session IN (SELECT value FROM json_each(?1))"
                        ),
                        [&ids],
                    )
                    .map_err(sql)?;
                if let Some(c) = counter(&mut report, table) {
                    *c = rows(n);
                }
            }
            let objects = select_strings(
                &tx,
                "SELECT DISTINCT object_id FROM handles
                 WHERE session IN (SELECT value FROM json_each(?1))",
                [&ids],
            )?;
            report.handles = rows(
                tx.execute(
                    "DELETE FROM handles WHERE session IN (SELECT value FROM json_each(?1))",
                    [&ids],
                )
                .map_err(sql)?,
            );
            report.vault_objects = delete_unreferenced(&tx, &objects)?;
        }
        let handles = select_strings(
            &tx,
            &format!("SELECT id FROM handles WHERE {EXPIRED} ORDER BY expires_at LIMIT ?2"),
            params![cutoff, i64::from(limit)],
        )?;
        if !handles.is_empty() {
            let ids = json_list(&handles)?;
            let objects = select_strings(
                &tx,
                "SELECT DISTINCT object_id FROM handles WHERE id IN (SELECT value FROM json_each(?1))",
                [&ids],
            )?;
            let n = tx
                .execute(
                    "DELETE FROM handles WHERE id IN (SELECT value FROM json_each(?1))",
                    [&ids],
                )
                .map_err(sql)?;
            report.handles = report.handles.saturating_add(rows(n));
            report.vault_objects = report
                .vault_objects
                .saturating_add(delete_unreferenced(&tx, &objects)?);
        }
        tx.commit().map_err(sql)?;
        Ok(report)
    }

    /// [`RetentionStore::expired_counts`], in one read transaction (one snapshot).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn expired_counts(&self, before: UnixMillis) -> Result<SweepReport, StoreError> {
        let cutoff = int(before.0);
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(sql)?;
        let count = |query: &str| -> Result<u64, StoreError> {
            let n: i64 = tx.query_row(query, [cutoff], |r| r.get(0)).map_err(sql)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let swept = format!("(SELECT id FROM sessions WHERE {EXPIRED})");
        let mut report = SweepReport {
            sessions: count(&format!("SELECT count(*) FROM sessions WHERE {EXPIRED}"))?,
            ..SweepReport::default()
        };
        for table in SESSION_TABLES {
            let n = count(&format!(
                "SELECT count(*) FROM {table} WHERE session IN {swept}"
            ))?;
            if let Some(c) = counter(&mut report, table) {
                *c = n;
            }
        }
        // A handle goes if it expired or its session goes.
        let goes = |h: &str| {
            format!("(({h}.expires_at >= 0 AND {h}.expires_at < ?1) OR {h}.session IN {swept})")
        };
        report.handles = count(&format!(
            "SELECT count(*) FROM handles h WHERE {}",
            goes("h")
        ))?;
        report.vault_objects = count(&format!(
            "SELECT count(*) FROM vault_objects v
             WHERE v.object_id IN (SELECT h.object_id FROM handles h WHERE {})
               AND NOT EXISTS (SELECT 1 FROM handles k WHERE k.object_id = v.object_id AND NOT {})",
            goes("h"),
            goes("k")
        ))?;
        tx.commit().map_err(sql)?;
        Ok(report)
    }
}

/// The first column of every row of `query`, as text.
fn select_strings<P: rusqlite::Params>(
    tx: &Transaction<'_>,
    query: &str,
    params: P,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = tx.prepare(query).map_err(sql)?;
    stmt.query_map(params, |r| r.get::<_, String>(0))
        .map_err(sql)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql)
}

/// `values` as a JSON array, for `json_each`.
fn json_list(values: &[String]) -> Result<String, StoreError> {
    serde_json::to_string(values)
        .map_err(|e| StoreError::Invalid(format!("cannot list ids for a sweep: {e}")))
}

/// Delete every version of the vault objects `objects` that no handle references any more;
/// the number of rows deleted.
fn delete_unreferenced(tx: &Transaction<'_>, objects: &[String]) -> Result<u64, StoreError> {
    if objects.is_empty() {
        return Ok(0);
    }
    let list = json_list(objects)?;
    let n = tx
        .execute(
            "DELETE FROM vault_objects
             WHERE object_id IN (SELECT value FROM json_each(?1))
               AND NOT EXISTS (SELECT 1 FROM handles h WHERE h.object_id = vault_objects.object_id)",
            [&list],
        )
        .map_err(sql)?;
    Ok(rows(n))
}

#[async_trait]
impl RetentionStore for SqliteStore {
    async fn sweep_expired(
        &self,
        before: UnixMillis,
        limit: u32,
    ) -> Result<SweepReport, StoreError> {
        SqliteStore::sweep_expired(self, before, limit)
    }

    async fn expired_counts(&self, before: UnixMillis) -> Result<SweepReport, StoreError> {
        SqliteStore::expired_counts(self, before)
    }
}
