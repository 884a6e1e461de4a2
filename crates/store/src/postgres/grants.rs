//! Standing grants on PostgreSQL ([`StandingGrantStore`]; issue 15 item 1): a use is one
//! conditional `UPDATE`, atomic across every replica.

use super::{PgCached, PgStore, db, get};
use crate::grants::GRANT_COLUMNS;
use crate::{int, uint};
use async_trait::async_trait;
use secureclaw_core::UnixMillis;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::store::{StandingGrant, StandingGrantStore, StoreError};

fn from_row(r: &tokio_postgres::Row) -> Result<StandingGrant, StoreError> {
    const W: &str = "standing grant";
    Ok(StandingGrant {
        id: get(r, 0, W)?,
        session: get(r, 1, W)?,
        task_digest: get(r, 2, W)?,
        upstream: get(r, 3, W)?,
        tool: get(r, 4, W)?,
        action_id: ActionId(get(r, 5, W)?),
        arguments_json: get(r, 6, W)?,
        display: get(r, 7, W)?,
        max_amount: get::<Option<i64>>(r, 8, W)?.map(uint),
        created_by: get(r, 9, W)?,
        created_at: UnixMillis(uint(get(r, 10, W)?)),
        expires_at: UnixMillis(uint(get(r, 11, W)?)),
        max_uses: get::<Option<i64>>(r, 12, W)?.map(uint),
        used: uint(get(r, 13, W)?),
        revoked_by: get(r, 14, W)?,
        revoked_at: get::<Option<i64>>(r, 15, W)?.map(|v| UnixMillis(uint(v))),
    })
}

/// `WHERE` clause of the grants live at `$n` (`now`).
fn live(n: usize) -> String {
    format!("revoked_at IS NULL AND expires_at > ${n} AND (max_uses IS NULL OR used < max_uses)")
}

impl PgStore {
    async fn grants_where(
        &self,
        clause: &str,
        args: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<StandingGrant>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM standing_grants {clause} ORDER BY created_at, id"
                ),
                args,
            )
            .await
            .map_err(db)?;
        rows.iter().map(from_row).collect()
    }
}

#[async_trait]
impl StandingGrantStore for PgStore {
    async fn create_grant(&self, g: &StandingGrant) -> Result<(), StoreError> {
        let inserted = self
            .client()
            .await?
            .execute_c(
                &format!(
                    "INSERT INTO standing_grants ({GRANT_COLUMNS})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0, NULL, NULL)
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[
                    &g.id,
                    &g.session,
                    &g.task_digest,
                    &g.upstream,
                    &g.tool,
                    &g.action_id.0,
                    &g.arguments_json,
                    &g.display,
                    &g.max_amount.map(int),
                    &g.created_by,
                    &int(g.created_at.0),
                    &int(g.expires_at.0),
                    &g.max_uses.map(int),
                ],
            )
            .await
            .map_err(db)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "grant `{}` already exists",
                g.id
            )));
        }
        Ok(())
    }

    async fn grant(&self, id: &str) -> Result<Option<StandingGrant>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {GRANT_COLUMNS} FROM standing_grants WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(from_row).transpose()
    }

    async fn list_grants(
        &self,
        live_at: Option<UnixMillis>,
    ) -> Result<Vec<StandingGrant>, StoreError> {
        match live_at {
            Some(now) => {
                self.grants_where(&format!("WHERE {}", live(1)), &[&int(now.0)])
                    .await
            }
            None => self.grants_where("", &[]).await,
        }
    }

    async fn session_grants(
        &self,
        session: &str,
        tool: &str,
        now: UnixMillis,
    ) -> Result<Vec<StandingGrant>, StoreError> {
        self.grants_where(
            &format!("WHERE session = $1 AND tool = $2 AND {}", live(3)),
            &[&session, &tool, &int(now.0)],
        )
        .await
    }

    async fn take_standing_grant_use(&self, id: &str, now: UnixMillis) -> Result<bool, StoreError> {
        let n = self
            .client()
            .await?
            .execute_c(
                &format!(
                    "UPDATE standing_grants SET used = used + 1 WHERE id = $1 AND {}",
                    live(2)
                ),
                &[&id, &int(now.0)],
            )
            .await
            .map_err(db)?;
        Ok(n == 1)
    }

    async fn revoke_grant(
        &self,
        id: &str,
        by: &str,
        now: UnixMillis,
    ) -> Result<Option<StandingGrant>, StoreError> {
        self.client()
            .await?
            .execute_c(
                "UPDATE standing_grants SET revoked_by = $2, revoked_at = $3
                 WHERE id = $1 AND revoked_at IS NULL",
                &[&id, &by, &int(now.0)],
            )
            .await
            .map_err(db)?;
        StandingGrantStore::grant(self, id).await
    }
}
