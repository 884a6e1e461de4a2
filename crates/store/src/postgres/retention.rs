//! Retention of session-scoped state on PostgreSQL ([`RetentionStore`]; issue 14 item 5).
//!
//! One batch is one transaction: delete at most `limit` expired sessions (picked oldest first
//! with `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once take disjoint batches), then
//! every per-session row of those sessions (the no-delete triggers of the grow-only tables let
//! a row go only once its session's record is gone), their handles and the vault objects no
//! remaining handle references; then at most `limit` handles expired on their own. A database
//! with nothing expired is only read. As in SQLite, an expiry at or above 2^63 ms (stored
//! negative) is never swept.

use super::{PgStore, db, get};
use crate::int;
use crate::retention::{SESSION_TABLES, counter, rows};
use async_trait::async_trait;
use secureclaw_core::UnixMillis;
use secureclaw_core::store::{RetentionStore, StoreError, SweepReport};
use tokio_postgres::Transaction;

/// `expires_at < $1`, for an expiry below 2^63.
const EXPIRED: &str = "(expires_at >= 0 AND expires_at < $1)";

#[async_trait]
impl RetentionStore for PgStore {
    async fn sweep_expired(
        &self,
        before: UnixMillis,
        limit: u32,
    ) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::default();
        if limit == 0 {
            return Ok(report);
        }
        let cutoff = int(before.0);
        let limit = i64::from(limit);
        let mut client = self.client().await?;
        let any: bool = get(
            &client
                .query_one(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM sessions WHERE {EXPIRED})
                             OR EXISTS (SELECT 1 FROM handles WHERE {EXPIRED})"
                    ),
                    &[&cutoff],
                )
                .await
                .map_err(db)?,
            0,
            "sweep check",
        )?;
        if !any {
            return Ok(report);
        }
        let tx = client.transaction().await.map_err(db)?;
        let swept = tx
            .query(
                &format!(
                    "DELETE FROM sessions WHERE id IN (
                         SELECT id FROM sessions WHERE {EXPIRED}
                         ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                     RETURNING id"
                ),
                &[&cutoff, &limit],
            )
            .await
            .map_err(db)?;
        let ids = swept
            .iter()
            .map(|r| get::<String>(r, 0, "swept session"))
            .collect::<Result<Vec<_>, _>>()?;
        report.sessions = rows(ids.len());
        if !ids.is_empty() {
            for table in SESSION_TABLES {
                let n = tx
                    .execute(
                        &format!("DELETE FROM {table} WHERE session = ANY($1)"),
                        &[&ids],
                    )
                    .await
                    .map_err(db)?;
                if let Some(c) = counter(&mut report, table) {
                    *c = n;
                }
            }
            let gone = tx
                .query(
                    "DELETE FROM handles WHERE session = ANY($1) RETURNING object_id",
                    &[&ids],
                )
                .await
                .map_err(db)?;
            report.handles = rows(gone.len());
            report.vault_objects = delete_unreferenced(&tx, &gone).await?;
        }
        let gone = tx
            .query(
                &format!(
                    "DELETE FROM handles WHERE id IN (
                         SELECT id FROM handles WHERE {EXPIRED}
                         ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                     RETURNING object_id"
                ),
                &[&cutoff, &limit],
            )
            .await
            .map_err(db)?;
        report.handles = report.handles.saturating_add(rows(gone.len()));
        report.vault_objects = report
            .vault_objects
            .saturating_add(delete_unreferenced(&tx, &gone).await?);
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn expired_counts(&self, before: UnixMillis) -> Result<SweepReport, StoreError> {
        let cutoff = int(before.0);
        let mut client = self.client().await?;
        // One snapshot for every count.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db)?;
        let swept = format!("(SELECT id FROM sessions WHERE {EXPIRED})");
        let goes = |h: &str| {
            format!("(({h}.expires_at >= 0 AND {h}.expires_at < $1) OR {h}.session IN {swept})")
        };
        let mut report = SweepReport {
            sessions: count(
                &tx,
                &format!("SELECT count(*) FROM sessions WHERE {EXPIRED}"),
                cutoff,
            )
            .await?,
            ..SweepReport::default()
        };
        for table in SESSION_TABLES {
            let n = count(
                &tx,
                &format!("SELECT count(*) FROM {table} WHERE session IN {swept}"),
                cutoff,
            )
            .await?;
            if let Some(c) = counter(&mut report, table) {
                *c = n;
            }
        }
        report.handles = count(
            &tx,
            &format!("SELECT count(*) FROM handles h WHERE {}", goes("h")),
            cutoff,
        )
        .await?;
        report.vault_objects = count(
            &tx,
            &format!(
                "SELECT count(*) FROM vault_objects v
                 WHERE v.object_id IN (SELECT h.object_id FROM handles h WHERE {})
                   AND NOT EXISTS (SELECT 1 FROM handles k
                                   WHERE k.object_id = v.object_id AND NOT {})",
                goes("h"),
                goes("k")
            ),
            cutoff,
        )
        .await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }
}

/// `SELECT count(*) …` with the cutoff as `$1`.
async fn count(tx: &Transaction<'_>, query: &str, cutoff: i64) -> Result<u64, StoreError> {
    let n: i64 = get(
        &tx.query_one(query, &[&cutoff]).await.map_err(db)?,
        0,
        "count",
    )?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Delete every version of the vault objects named in the first column of `handles` (rows of
/// deleted handles) that no handle references any more; the number of rows deleted.
async fn delete_unreferenced(
    tx: &Transaction<'_>,
    handles: &[tokio_postgres::Row],
) -> Result<u64, StoreError> {
    if handles.is_empty() {
        return Ok(0);
    }
    let mut objects = handles
        .iter()
        .map(|r| get::<String>(r, 0, "swept handle"))
        .collect::<Result<Vec<_>, _>>()?;
    objects.sort_unstable();
    objects.dedup();
    tx.execute(
        "DELETE FROM vault_objects v WHERE v.object_id = ANY($1)
           AND NOT EXISTS (SELECT 1 FROM handles h WHERE h.object_id = v.object_id)",
        &[&objects],
    )
    .await
    .map_err(db)
}
