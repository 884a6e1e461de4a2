//! Sessions and their trusted task envelopes.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{OptionalExtension, params};
use secureclaw_core::UnixMillis;
use secureclaw_core::store::SessionRecord;

impl SqliteStore {
    /// Store a new session. Sessions are immutable: a second record with the same id is
    /// refused rather than overwriting the trusted envelope.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    pub fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let envelope =
            serde_json::to_string(&record.envelope).map_err(|e| corrupt("task envelope", e))?;
        let conn = self.conn()?;
        let inserted = conn
            .execute_cached(
                "INSERT INTO sessions (id, caller, envelope, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (id) DO NOTHING",
                params![record.id, record.caller, envelope, int(record.created_at.0), int(record.expires_at.0)],
            )
            .map_err(sql)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "session `{}` already exists",
                record.id
            )));
        }
        Ok(())
    }

    /// The session `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] if the envelope does not decode.
    pub fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let conn = self.conn()?;
        let row = conn
            .query_row_cached(
                "SELECT caller, envelope, created_at, expires_at FROM sessions WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                },
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        let Some((caller, envelope, created_at, expires_at)) = row else {
            return Ok(None);
        };
        Ok(Some(SessionRecord {
            id: id.to_owned(),
            caller,
            envelope: serde_json::from_str(&envelope).map_err(|e| corrupt("task envelope", e))?,
            created_at: UnixMillis(uint(created_at)),
            expires_at: UnixMillis(uint(expires_at)),
        }))
    }

    /// Record `keys` as protected objects of `session` (idempotent).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn protect_objects(&self, session: &str, keys: &[String]) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(sql)?;
        for key in keys {
            tx.execute_cached(
                "INSERT INTO protected_objects (session, key) VALUES (?1, ?2)
                 ON CONFLICT (session, key) DO NOTHING",
                params![session, key],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Whether any of `keys` is a protected object of `session`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn any_protected(&self, session: &str, keys: &[String]) -> Result<bool, StoreError> {
        if keys.is_empty() {
            return Ok(false);
        }
        let list = serde_json::to_string(keys).map_err(|e| corrupt("protected-object keys", e))?;
        let conn = self.conn()?;
        conn.query_row_cached(
            "SELECT EXISTS (SELECT 1 FROM protected_objects
                            WHERE session = ?1 AND key IN (SELECT value FROM json_each(?2)))",
            params![session, list],
            |r| r.get::<_, bool>(0),
        )
        .map_err(sql)
    }
}
