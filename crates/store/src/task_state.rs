//! Per-session authorization state shared by every process on the database
//! ([`secureclaw_core::store::TaskStateStore`]): uses of limited task grants, keyed digests of
//! the amounts anchored reads returned, and the bounded written set with its values sealed
//! under the vault key.

use crate::Cached;
use crate::vault::{open_text, seal_text, sealed_at};
use crate::{SqliteStore, StoreError, sql, uint};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use secureclaw_core::KeyRing;
use secureclaw_core::store::{WrittenBounds, WrittenRows, WrittenValue};
use secureclaw_core::vault::SealedValue;

/// The associated data of a sealed written value: its session and digest, so that a
/// ciphertext moved to another row or session does not decrypt.
pub(crate) fn written_aad(session: &str, digest: &str) -> String {
    format!("written:{session}#{digest}")
}

/// Seal `value` of `session` under the active vault key with a fresh random nonce.
pub(crate) fn seal_written(
    keys: &KeyRing,
    session: &str,
    value: &WrittenValue,
) -> Result<SealedValue, StoreError> {
    seal_text(
        keys,
        &written_aad(session, &value.digest),
        &value.value,
        "written value",
    )
}

/// Open a sealed written value of `session`.
pub(crate) fn open_written(
    keys: &KeyRing,
    session: &str,
    digest: &str,
    sealed: &SealedValue,
) -> Result<String, StoreError> {
    open_text(keys, &written_aad(session, digest), sealed, "written value")
}

/// Whether one more value of `size` bytes would take a written set holding `n` values of
/// `bytes` bytes past `bounds` (the set is then full).
pub(crate) fn past_bounds(n: i64, bytes: i64, size: i64, bounds: WrittenBounds) -> bool {
    n >= bound(bounds.max_values) || bytes.saturating_add(size) > bound(bounds.max_bytes)
}

/// A `u64` limit or bound as a SQL integer (saturating: no stored count reaches `i64::MAX`).
pub(crate) fn bound(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored counter as `u64`.
pub(crate) fn count(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("counter `{v}`")))
}

/// The length of a value as a SQL integer.
pub(crate) fn len(value: &str) -> i64 {
    i64::try_from(value.len()).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Unconfirmed uses of grant `grant` taken in `session`; 0 if none.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] for a counter out of range.
    pub fn grant_uses(&self, session: &str, grant: &str) -> Result<u64, StoreError> {
        let conn = self.conn()?;
        let v: Option<i64> = conn
            .query_row_cached(
                "SELECT used FROM grant_uses WHERE session = ?1 AND grant_key = ?2",
                params![session, grant],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        v.map_or(Ok(0), count)
    }

    /// Take one use of grant `grant` in `session` if fewer than `limit` are taken: one
    /// statement (insert, or increment under the limit), atomic across connections and
    /// processes.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn take_grant_use(
        &self,
        session: &str,
        grant: &str,
        limit: u64,
    ) -> Result<bool, StoreError> {
        if limit == 0 {
            return Ok(false);
        }
        let conn = self.conn()?;
        let v: Option<i64> = conn
            .query_row_cached(
                "INSERT INTO grant_uses (session, grant_key, used) VALUES (?1, ?2, 1)
                 ON CONFLICT (session, grant_key) DO UPDATE SET used = used + 1 WHERE used < ?3
                 RETURNING used",
                params![session, grant, bound(limit)],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        Ok(v.is_some())
    }

    /// Record `digests` as amounts anchored reads of `session` returned (idempotent).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn note_amounts(&self, session: &str, digests: &[String]) -> Result<(), StoreError> {
        if digests.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(sql)?;
        for d in digests {
            tx.execute_cached(
                "INSERT INTO read_amounts (session, digest) VALUES (?1, ?2)
                 ON CONFLICT (session, digest) DO NOTHING",
                params![session, d],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Whether any of `digests` is a recorded amount of `session`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn amount_known(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        self.any_of("read_amounts", session, digests)
    }

    /// `SELECT EXISTS` of any of `digests` for `session` in `table` (a fixed table name).
    fn any_of(&self, table: &str, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        if digests.is_empty() {
            return Ok(false);
        }
        let list = serde_json::to_string(digests)
            .map_err(|e| StoreError::Invalid(format!("digests: {e}")))?;
        let conn = self.conn()?;
        conn.query_row_cached(
            &format!(
                "SELECT EXISTS (SELECT 1 FROM {table}
                                WHERE session = ?1 AND digest IN (SELECT value FROM json_each(?2)))"
            ),
            params![session, list],
            |r| r.get::<_, bool>(0),
        )
        .map_err(sql)
    }

    /// Add `values` to the written set of `session` in one immediate transaction; whether the
    /// set is full afterwards (see [`secureclaw_core::store::TaskStateStore::add_written`]).
    ///
    /// # Errors
    /// [`StoreError::Key`] without a vault key; [`StoreError::Unavailable`];
    /// [`StoreError::Corrupt`].
    pub fn add_written(
        &self,
        session: &str,
        values: &[WrittenValue],
        bounds: WrittenBounds,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        tx.execute_cached(
            "INSERT INTO written_sets (session, count, bytes, full) VALUES (?1, 0, 0, 0)
             ON CONFLICT (session) DO NOTHING",
            params![session],
        )
        .map_err(sql)?;
        let (mut n, mut bytes, mut full): (i64, i64, bool) = tx
            .query_row_cached(
                "SELECT count, bytes, full FROM written_sets WHERE session = ?1",
                params![session],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(sql)?;
        for v in values {
            if full {
                break;
            }
            let known = tx
                .query_row_cached(
                    "SELECT 1 FROM written_values WHERE session = ?1 AND digest = ?2",
                    params![session, v.digest],
                    |_| Ok(()),
                )
                .optional()
                .map_err(sql)?
                .is_some();
            if known {
                continue;
            }
            let size = len(&v.value);
            if past_bounds(n, bytes, size, bounds) {
                full = true;
                break;
            }
            let sealed = seal_written(&self.keys, session, v)?;
            n += 1;
            bytes += size;
            tx.execute_cached(
                "INSERT INTO written_values (session, seq, digest, kid, nonce, ciphertext)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    session,
                    n,
                    v.digest,
                    sealed.kid.0,
                    sealed.nonce,
                    sealed.ciphertext
                ],
            )
            .map_err(sql)?;
        }
        tx.execute_cached(
            "UPDATE written_sets SET count = ?2, bytes = ?3, full = ?4 WHERE session = ?1",
            params![session, n, bytes, full],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(full)
    }

    /// Mark the written set of `session` full.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn mark_written_full(&self, session: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        conn.execute_cached(
            "INSERT INTO written_sets (session, count, bytes, full) VALUES (?1, 0, 0, 1)
             ON CONFLICT (session) DO UPDATE SET full = 1",
            params![session],
        )
        .map_err(sql)?;
        Ok(())
    }

    /// Whether the written set of `session` is full or holds any of `digests`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn wrote_any(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        if self.written_full(session)? {
            return Ok(true);
        }
        self.any_of("written_values", session, digests)
    }

    fn written_full(&self, session: &str) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let full: Option<bool> = conn
            .query_row_cached(
                "SELECT full FROM written_sets WHERE session = ?1",
                params![session],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        Ok(full.unwrap_or(false))
    }

    /// The values of the written set of `session` after `after_seq`, unsealed, and whether it
    /// is full.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`]; [`StoreError::Key`]; [`StoreError::Unavailable`].
    pub fn written_since(&self, session: &str, after_seq: u64) -> Result<WrittenRows, StoreError> {
        let full = self.written_full(session)?;
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, digest, kid, nonce, ciphertext FROM written_values
                 WHERE session = ?1 AND seq > ?2 ORDER BY seq",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map(params![session, bound(after_seq)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    sealed_at(r, 2)?,
                ))
            })
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        drop(stmt);
        drop(conn);
        let mut values = Vec::with_capacity(rows.len());
        for (seq, digest, sealed) in rows {
            values.push((
                uint(seq),
                open_written(&self.keys, session, &digest, &sealed)?,
            ));
        }
        Ok(WrittenRows { values, full })
    }
}
