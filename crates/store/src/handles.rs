//! Handle records (DESIGN.md §3 "Handles"). The values they stand for live in the vault.
//!
//! The store answers lookups by id only; whether a caller may see or use a record (owner,
//! session, expiry, sinks) is decided by [`secureclaw_core::handle::check_resolution`] and the
//! gateway, which must also check ownership before revoking.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{OptionalExtension, Row, params};
use secureclaw_core::UnixMillis;
use secureclaw_core::handle::{HandleId, HandleRecord, Sensitivity};

const COLUMNS: &str = "id, caller, session, object_id, version, label, sensitivity, source, anchored, \
                       allowed_sinks, created_at, expires_at, revoked";

/// A handle row as SQLite returns it, before decoding.
struct RawHandle {
    id: String,
    caller: String,
    session: String,
    object_id: String,
    version: i64,
    label: String,
    sensitivity: String,
    source: String,
    anchored: bool,
    allowed_sinks: String,
    created_at: i64,
    expires_at: i64,
    revoked: bool,
}

impl RawHandle {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            caller: r.get(1)?,
            session: r.get(2)?,
            object_id: r.get(3)?,
            version: r.get(4)?,
            label: r.get(5)?,
            sensitivity: r.get(6)?,
            source: r.get(7)?,
            anchored: r.get(8)?,
            allowed_sinks: r.get(9)?,
            created_at: r.get(10)?,
            expires_at: r.get(11)?,
            revoked: r.get(12)?,
        })
    }

    fn decode(self) -> Result<HandleRecord, StoreError> {
        let sensitivity = match self.sensitivity.as_str() {
            "low" => Sensitivity::Low,
            "medium" => Sensitivity::Medium,
            "high" => Sensitivity::High,
            other => return Err(StoreError::Corrupt(format!("handle sensitivity `{other}`"))),
        };
        Ok(HandleRecord {
            allowed_sinks: serde_json::from_str(&self.allowed_sinks)
                .map_err(|e| corrupt("handle allowed sinks", e))?,
            id: HandleId(self.id),
            caller: self.caller,
            session: self.session,
            object_id: self.object_id,
            version: uint(self.version),
            label: self.label,
            sensitivity,
            source: self.source,
            anchored: self.anchored,
            created_at: UnixMillis(uint(self.created_at)),
            expires_at: UnixMillis(uint(self.expires_at)),
            revoked: self.revoked,
        })
    }
}

impl SqliteStore {
    /// Store a new handle record. Records are never overwritten (a handle id is minted once);
    /// only [`SqliteStore::revoke_handle`] changes one.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    pub fn put_handle(&self, record: &HandleRecord) -> Result<(), StoreError> {
        self.put_handle_keyed(record, None)
    }

    /// Store a new handle record under `reuse_key` (see
    /// [`secureclaw_core::handle::handle_reuse_key`]), so that
    /// [`SqliteStore::reusable_handle`] finds it when the same value is read again in its
    /// session with the same classification. `None` stores it without a key, as
    /// [`SqliteStore::put_handle`].
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    pub fn put_handle_keyed(
        &self,
        record: &HandleRecord,
        reuse_key: Option<&str>,
    ) -> Result<(), StoreError> {
        let sinks = serde_json::to_string(&record.allowed_sinks)
            .map_err(|e| corrupt("handle allowed sinks", e))?;
        let conn = self.conn()?;
        let inserted = conn
            .execute_cached(
                &format!(
                    "INSERT INTO handles ({COLUMNS}, reuse_key)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                     ON CONFLICT (id) DO NOTHING"
                ),
                params![
                    record.id.0,
                    record.caller,
                    record.session,
                    record.object_id,
                    int(record.version),
                    record.label,
                    record.sensitivity.as_str(),
                    record.source,
                    record.anchored,
                    sinks,
                    int(record.created_at.0),
                    int(record.expires_at.0),
                    record.revoked,
                    reuse_key,
                ],
            )
            .map_err(sql)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "handle `{}` already exists",
                record.id
            )));
        }
        Ok(())
    }

    /// The record of handle `id`, if known (revoked and expired records included; the caller
    /// applies [`HandleRecord::usable`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn handle(&self, id: &HandleId) -> Result<Option<HandleRecord>, StoreError> {
        let conn = self.conn()?;
        let raw = conn
            .query_row_cached(
                &format!("SELECT {COLUMNS} FROM handles WHERE id = ?1"),
                [&id.0],
                RawHandle::from_row,
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        raw.map(RawHandle::decode).transpose()
    }

    /// The newest live handle of `session` stored under `reuse_key` that is not revoked and
    /// stays valid at least until `valid_until` (so a reused handle does not expire right
    /// after the read that returned it), if any.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn reusable_handle(
        &self,
        session: &str,
        reuse_key: &str,
        valid_until: UnixMillis,
    ) -> Result<Option<HandleRecord>, StoreError> {
        let conn = self.conn()?;
        let raw = conn
            .query_row_cached(
                &format!(
                    "SELECT {COLUMNS} FROM handles
                     WHERE session = ?1 AND reuse_key = ?2 AND revoked = 0 AND expires_at >= ?3
                     ORDER BY created_at DESC, id LIMIT 1"
                ),
                params![session, reuse_key, int(valid_until.0)],
                RawHandle::from_row,
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        raw.map(RawHandle::decode).transpose()
    }

    /// Revoke handle `id`. Returns `true` if this call revoked a live record, `false` if the id
    /// is unknown or was already revoked. Revocation is permanent.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn revoke_handle(&self, id: &HandleId) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let changed = conn
            .execute_cached(
                "UPDATE handles SET revoked = 1 WHERE id = ?1 AND revoked = 0",
                [&id.0],
            )
            .map_err(sql)?;
        Ok(changed == 1)
    }

    /// Every handle record of `session` (revoked and expired ones included), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn handles_for_session(&self, session: &str) -> Result<Vec<HandleRecord>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM handles WHERE session = ?1 ORDER BY created_at, id"
            ))
            .map_err(sql)?;
        let raws = stmt
            .query_map([session], RawHandle::from_row)
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        drop(stmt);
        drop(conn);
        raws.into_iter().map(RawHandle::decode).collect()
    }
}
