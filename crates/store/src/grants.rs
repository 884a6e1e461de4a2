//! Standing grants ([`secureclaw_core::store::StandingGrantStore`]; issue 15 item 1): created
//! by a trusted approver, a use taken by one conditional `UPDATE` (atomic across connections
//! and processes), revocation keeping the first revoker.

use crate::Cached;
use crate::{SqliteStore, StoreError, int, sql, uint};
use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};
use secureclaw_core::UnixMillis;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::store::{StandingGrant, StandingGrantStore};

/// The columns [`from_row`] reads, in order.
pub(crate) const GRANT_COLUMNS: &str = "id, session, task_digest, upstream, tool, action_id, \
     arguments_json, display, max_amount, created_by, created_at, expires_at, max_uses, used, \
     revoked_by, revoked_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<StandingGrant> {
    Ok(StandingGrant {
        id: r.get(0)?,
        session: r.get(1)?,
        task_digest: r.get(2)?,
        upstream: r.get(3)?,
        tool: r.get(4)?,
        action_id: ActionId(r.get(5)?),
        arguments_json: r.get(6)?,
        display: r.get(7)?,
        max_amount: r.get::<_, Option<i64>>(8)?.map(uint),
        created_by: r.get(9)?,
        created_at: UnixMillis(uint(r.get(10)?)),
        expires_at: UnixMillis(uint(r.get(11)?)),
        max_uses: r.get::<_, Option<i64>>(12)?.map(uint),
        used: uint(r.get(13)?),
        revoked_by: r.get(14)?,
        revoked_at: r.get::<_, Option<i64>>(15)?.map(|v| UnixMillis(uint(v))),
    })
}

impl SqliteStore {
    fn grants_where(
        &self,
        clause: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<StandingGrant>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {GRANT_COLUMNS} FROM standing_grants {clause} ORDER BY created_at, id"
            ))
            .map_err(sql)?;
        let rows = stmt.query_map(args, from_row).map_err(sql)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql)
    }
}

/// `WHERE` clause of the grants live at `?n` (`now`), `n` the placeholder number.
fn live(n: usize) -> String {
    format!("revoked_at IS NULL AND expires_at > ?{n} AND (max_uses IS NULL OR used < max_uses)")
}

#[async_trait]
impl StandingGrantStore for SqliteStore {
    async fn create_grant(&self, g: &StandingGrant) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let inserted = conn
            .execute_cached(
                &format!(
                    "INSERT INTO standing_grants ({GRANT_COLUMNS})
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 0, NULL, NULL)
                     ON CONFLICT (id) DO NOTHING"
                ),
                params![
                    g.id,
                    g.session,
                    g.task_digest,
                    g.upstream,
                    g.tool,
                    g.action_id.0,
                    g.arguments_json,
                    g.display,
                    g.max_amount.map(int),
                    g.created_by,
                    int(g.created_at.0),
                    int(g.expires_at.0),
                    g.max_uses.map(int),
                ],
            )
            .map_err(sql)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "grant `{}` already exists",
                g.id
            )));
        }
        Ok(())
    }

    async fn grant(&self, id: &str) -> Result<Option<StandingGrant>, StoreError> {
        let conn = self.conn()?;
        conn.query_row_cached(
            &format!("SELECT {GRANT_COLUMNS} FROM standing_grants WHERE id = ?1"),
            params![id],
            from_row,
        )
        .optional()
        .map_err(sql)
    }

    async fn list_grants(
        &self,
        live_at: Option<UnixMillis>,
    ) -> Result<Vec<StandingGrant>, StoreError> {
        match live_at {
            Some(now) => self.grants_where(&format!("WHERE {}", live(1)), &[&int(now.0)]),
            None => self.grants_where("", &[]),
        }
    }

    async fn session_grants(
        &self,
        session: &str,
        tool: &str,
        now: UnixMillis,
    ) -> Result<Vec<StandingGrant>, StoreError> {
        self.grants_where(
            &format!("WHERE session = ?1 AND tool = ?2 AND {}", live(3)),
            &[&session, &tool, &int(now.0)],
        )
    }

    async fn take_standing_grant_use(&self, id: &str, now: UnixMillis) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute_cached(
                &format!(
                    "UPDATE standing_grants SET used = used + 1 WHERE id = ?1 AND {}",
                    live(2)
                ),
                params![id, int(now.0)],
            )
            .map_err(sql)?;
        Ok(n == 1)
    }

    async fn revoke_grant(
        &self,
        id: &str,
        by: &str,
        now: UnixMillis,
    ) -> Result<Option<StandingGrant>, StoreError> {
        {
            let conn = self.conn()?;
            conn.execute_cached(
                "UPDATE standing_grants SET revoked_by = ?2, revoked_at = ?3
                 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, by, int(now.0)],
            )
            .map_err(sql)?;
        }
        StandingGrantStore::grant(self, id).await
    }
}
