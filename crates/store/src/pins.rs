//! Tool-definition pins ([`secureclaw_core::store::ToolPinStore`]; issue 16 item 4).

use crate::Cached;
use crate::{SqliteStore, StoreError, int, sql, uint};
use rusqlite::params;
use secureclaw_core::UnixMillis;
use secureclaw_core::store::ToolPin;

impl SqliteStore {
    /// The pins of `upstream`, ordered by tool name.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn tool_pins(&self, upstream: &str) -> Result<Vec<ToolPin>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT tool, digest, definition, pinned_at FROM tool_pins
                 WHERE upstream = ?1 ORDER BY tool",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map(params![upstream], |r| {
                Ok(ToolPin {
                    upstream: upstream.to_owned(),
                    tool: r.get(0)?,
                    digest: r.get(1)?,
                    definition: r.get(2)?,
                    pinned_at: UnixMillis(uint(r.get(3)?)),
                })
            })
            .map_err(sql)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql)
    }

    /// The upstream ids with pins, sorted.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn pinned_upstreams(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached("SELECT DISTINCT upstream FROM tool_pins ORDER BY upstream")
            .map_err(sql)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(sql)?;
        rows.collect::<Result<Vec<String>, _>>().map_err(sql)
    }

    /// Store `pins` of `upstream` and remove those of the tools in `unpin`, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn put_tool_pins(
        &self,
        upstream: &str,
        pins: &[ToolPin],
        unpin: &[String],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(sql)?;
        for pin in pins {
            tx.execute_cached(
                "INSERT INTO tool_pins (upstream, tool, digest, definition, pinned_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (upstream, tool) DO UPDATE SET digest = excluded.digest,
                     definition = excluded.definition, pinned_at = excluded.pinned_at",
                params![
                    upstream,
                    pin.tool,
                    pin.digest,
                    pin.definition,
                    int(pin.pinned_at.0)
                ],
            )
            .map_err(sql)?;
        }
        for tool in unpin {
            tx.execute_cached(
                "DELETE FROM tool_pins WHERE upstream = ?1 AND tool = ?2",
                params![upstream, tool],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }
}
