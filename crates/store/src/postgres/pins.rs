//! Tool-definition pins on PostgreSQL ([`ToolPinStore`]; issue 16 item 4).

use super::{PgCached, PgStore, db, get};
use crate::{int, uint};
use async_trait::async_trait;
use secureclaw_core::UnixMillis;
use secureclaw_core::store::{StoreError, ToolPin, ToolPinStore};

#[async_trait]
impl ToolPinStore for PgStore {
    async fn tool_pins(&self, upstream: &str) -> Result<Vec<ToolPin>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                "SELECT tool, digest, definition, pinned_at FROM tool_pins
                 WHERE upstream = $1 ORDER BY tool",
                &[&upstream],
            )
            .await
            .map_err(db)?;
        rows.iter()
            .map(|r| {
                Ok(ToolPin {
                    upstream: upstream.to_owned(),
                    tool: get(r, 0, "tool pin")?,
                    digest: get(r, 1, "tool pin")?,
                    definition: get(r, 2, "tool pin")?,
                    pinned_at: UnixMillis(uint(get(r, 3, "tool pin")?)),
                })
            })
            .collect()
    }

    async fn pinned_upstreams(&self) -> Result<Vec<String>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                "SELECT DISTINCT upstream FROM tool_pins ORDER BY upstream",
                &[],
            )
            .await
            .map_err(db)?;
        rows.iter()
            .map(|r| get(r, 0, "tool pin upstream"))
            .collect()
    }

    async fn put_tool_pins(
        &self,
        upstream: &str,
        pins: &[ToolPin],
        unpin: &[String],
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        for pin in pins {
            tx.execute_c(
                "INSERT INTO tool_pins (upstream, tool, digest, definition, pinned_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (upstream, tool) DO UPDATE SET digest = excluded.digest,
                     definition = excluded.definition, pinned_at = excluded.pinned_at",
                &[
                    &upstream,
                    &pin.tool,
                    &pin.digest,
                    &pin.definition,
                    &int(pin.pinned_at.0),
                ],
            )
            .await
            .map_err(db)?;
        }
        for tool in unpin {
            tx.execute_c(
                "DELETE FROM tool_pins WHERE upstream = $1 AND tool = $2",
                &[&upstream, tool],
            )
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }
}
