//! The audit log: append-only, hash-chained with the audit key ([`secureclaw_core::audit`]).
//!
//! Appending reads the last (seq, MAC) and inserts the next record inside one `BEGIN IMMEDIATE`
//! transaction, so writers in several processes still produce one gap-free chain. The store
//! offers no update or delete, and triggers refuse both in SQL. Events are stored as JSON and
//! re-canonicalized for verification.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use secureclaw_core::audit::{self, AuditEvent, AuditRecord, GENESIS};
use secureclaw_core::keys::KeyId;

const COLUMNS: &str = "seq, kid, prev, mac, event";

struct RawRecord {
    seq: i64,
    kid: String,
    prev: String,
    mac: String,
    event: String,
}

impl RawRecord {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: r.get(0)?,
            kid: r.get(1)?,
            prev: r.get(2)?,
            mac: r.get(3)?,
            event: r.get(4)?,
        })
    }

    fn decode(self) -> Result<AuditRecord, StoreError> {
        let seq = uint(self.seq);
        Ok(AuditRecord {
            seq,
            event: serde_json::from_str(&self.event)
                .map_err(|e| corrupt(&format!("audit record {seq}"), e))?,
            kid: KeyId(self.kid),
            prev: self.prev,
            mac: self.mac,
        })
    }
}

impl SqliteStore {
    /// Append `event` to the audit chain and return the stored record (sequence number from 1,
    /// MAC over the previous MAC and this event under the active audit key).
    ///
    /// # Errors
    /// [`StoreError::Key`] if the ring has no audit key; [`StoreError::Unavailable`].
    pub fn append_audit(&self, event: AuditEvent) -> Result<AuditRecord, StoreError> {
        let event_json = serde_json::to_string(&event).map_err(|e| corrupt("audit event", e))?;
        let kind = serde_json::to_value(event.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let at = int(event.at.0);
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let last: Option<(i64, String)> = tx
            .query_row_cached(
                "SELECT seq, mac FROM audit ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(sql)?;
        let (prev_seq, prev_mac) = last.map_or((0, GENESIS.to_owned()), |(s, m)| (uint(s), m));
        let seq = prev_seq
            .checked_add(1)
            .filter(|s| i64::try_from(*s).is_ok())
            .ok_or_else(|| StoreError::Unavailable("audit sequence exhausted".into()))?;
        let record = audit::chain(&self.keys, &prev_mac, seq, event)?;
        tx.execute_cached(
            "INSERT INTO audit (seq, kid, prev, mac, kind, at, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![int(seq), record.kid.0, record.prev, record.mac, kind, at, event_json],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(record)
    }

    /// Up to `limit` records with `seq >= from_seq`, in order.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] if an event does not decode.
    pub fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM audit WHERE seq >= ?1 ORDER BY seq LIMIT ?2"
            ))
            .map_err(sql)?;
        let raws = stmt
            .query_map(params![from, limit], RawRecord::from_row)
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        drop(stmt);
        drop(conn);
        raws.into_iter().map(RawRecord::decode).collect()
    }

    /// Verify the whole chain from the first record; returns the number of records verified
    /// (the last sequence number, 0 for an empty log).
    ///
    /// Holds the connection for the duration and keeps the decoded records in memory
    /// (the core verifier takes the chain as one sequence).
    ///
    /// # Errors
    /// [`StoreError::Audit`] naming the first record that is missing, altered or out of order,
    /// or whose key is unknown or retired; [`StoreError::Corrupt`] if an event does not decode;
    /// [`StoreError::Unavailable`].
    pub fn verify_audit(&self) -> Result<u64, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM audit ORDER BY seq"))
            .map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        let mut records = Vec::new();
        while let Some(row) = rows.next().map_err(sql)? {
            records.push(RawRecord::from_row(row).map_err(sql)?.decode()?);
        }
        Ok(audit::verify_chain(&self.keys, &records)?)
    }
}
