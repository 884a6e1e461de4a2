//! The audit log: append-only, hash-chained with the audit key ([`secureclaw_core::audit`]).
//!
//! Appending reads the last (seq, MAC) and inserts the next record inside one `BEGIN IMMEDIATE`
//! transaction, so writers in several processes still produce one gap-free chain. The store
//! offers no update, and deletes only an archived segment ([`SqliteStore::archive_audit`]), in
//! the transaction that stores its checkpoint; triggers refuse every update and the deletion
//! of any record not covered by a checkpoint. With every record archived, the head is the
//! latest checkpoint's, so new records keep the sequence. Events are stored as JSON and
//! re-canonicalized for verification.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use secureclaw_core::KeyRing;
use secureclaw_core::audit::{
    self, ArchiveSegment, AuditCheckpoint, AuditEvent, AuditRecord, GENESIS, LogVerified,
};
use secureclaw_core::keys::KeyId;
use secureclaw_core::store::check_segment;

const COLUMNS: &str = "seq, kid, prev, mac, event, kind, at";

/// The chain head as stored: `(seq, mac)` of the last record; with no record (a new log, or
/// every record archived), the latest checkpoint's last archived `(seq, mac)`; else
/// `(0, GENESIS)`.
pub(crate) fn audit_head(conn: &Connection) -> Result<(u64, String), StoreError> {
    let last: Option<(i64, String)> = conn
        .query_row_cached(
            "SELECT seq, mac FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql)?;
    if let Some((s, m)) = last {
        return Ok((uint(s), m));
    }
    let archived: Option<(i64, String)> = conn
        .query_row_cached(
            "SELECT seq, mac FROM audit_checkpoints ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql)?;
    Ok(archived.map_or((0, GENESIS.to_owned()), |(s, m)| (uint(s), m)))
}

const CHECKPOINT_COLUMNS: &str =
    "first_seq, seq, mac, count, archive_sha256, archive, at, prev, kid, checkpoint_mac";

fn checkpoint_row(r: &Row<'_>) -> rusqlite::Result<AuditCheckpoint> {
    Ok(AuditCheckpoint {
        segment: ArchiveSegment {
            first_seq: uint(r.get(0)?),
            seq: uint(r.get(1)?),
            mac: r.get(2)?,
            count: uint(r.get(3)?),
            archive_sha256: r.get(4)?,
            archive: r.get(5)?,
            at: secureclaw_core::UnixMillis(uint(r.get(6)?)),
        },
        prev: r.get(7)?,
        kid: KeyId(r.get(8)?),
        checkpoint_mac: r.get(9)?,
    })
}

/// Every checkpoint, oldest first.
fn checkpoints(conn: &Connection) -> Result<Vec<AuditCheckpoint>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq"
        ))
        .map_err(sql)?;
    stmt.query_map([], checkpoint_row)
        .map_err(sql)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql)
}

/// A record chained after a head, with the columns stored beside it (both stores).
pub(crate) struct Chained {
    /// The record (its `seq` is the head's plus one).
    pub(crate) record: AuditRecord,
    /// The event's kind, as its JSON name.
    pub(crate) kind: String,
    /// The event's time, as the stored integer.
    pub(crate) at: i64,
    /// The event as JSON.
    pub(crate) event_json: String,
}

/// Chain `event` after `head` (`(seq, mac)` of the last record) under the active audit key.
///
/// # Errors
/// [`StoreError::Corrupt`] if the event does not serialize; [`StoreError::Unavailable`] if the
/// sequence is exhausted; [`StoreError::Key`].
pub(crate) fn chain_next(
    keys: &KeyRing,
    head: &(u64, String),
    event: AuditEvent,
) -> Result<Chained, StoreError> {
    let event_json = serde_json::to_string(&event).map_err(|e| corrupt("audit event", e))?;
    let kind = serde_json::to_value(event.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let at = int(event.at.0);
    let seq = head
        .0
        .checked_add(1)
        .filter(|s| i64::try_from(*s).is_ok())
        .ok_or_else(|| StoreError::Unavailable("audit sequence exhausted".into()))?;
    let record = audit::chain(keys, &head.1, seq, event)?;
    Ok(Chained {
        record,
        kind,
        at,
        event_json,
    })
}

struct RawRecord {
    seq: i64,
    kid: String,
    prev: String,
    mac: String,
    event: String,
    kind: String,
    at: i64,
}

impl RawRecord {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: r.get(0)?,
            kid: r.get(1)?,
            prev: r.get(2)?,
            mac: r.get(3)?,
            event: r.get(4)?,
            kind: r.get(5)?,
            at: r.get(6)?,
        })
    }

    fn decode(self) -> Result<AuditRecord, StoreError> {
        decode_stored(StoredAudit {
            seq: uint(self.seq),
            kid: self.kid,
            prev: self.prev,
            mac: self.mac,
            event: &self.event,
            kind: &self.kind,
            at: self.at,
        })
    }
}

/// One audit row as stored (both stores): the chained fields, the event's text and the two
/// columns indexed beside it.
pub(crate) struct StoredAudit<'a> {
    pub(crate) seq: u64,
    pub(crate) kid: String,
    pub(crate) prev: String,
    pub(crate) mac: String,
    pub(crate) event: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) at: i64,
}

/// Decode a stored audit row, refusing one whose text is not exactly what
/// [`chain_next`] wrote: the MAC covers the parsed event, so without this a row with unknown
/// fields, a duplicated key (the last one wins when parsed) or `kind`/`at` columns that
/// disagree with the event would still verify while a reader of the raw table saw the forgery
/// (red-team finding F4). The check re-serializes the parsed event: serialization is
/// deterministic (object keys sorted, absent options skipped), so a genuine row always
/// matches.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the record: the text does not parse, is not in its written
/// form, or the columns disagree with it.
pub(crate) fn decode_stored(row: StoredAudit<'_>) -> Result<AuditRecord, StoreError> {
    let seq = row.seq;
    let what = format!("audit record {seq}");
    let event: AuditEvent = serde_json::from_str(row.event).map_err(|e| corrupt(&what, e))?;
    let written = serde_json::to_string(&event).map_err(|e| corrupt(&what, e))?;
    let kind = serde_json::to_value(event.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    if written != row.event {
        return Err(StoreError::Corrupt(format!(
            "{what}: the stored event is not in the form it was written in (altered: unknown \
             fields, duplicated keys or re-encoded text)"
        )));
    }
    if kind != row.kind || int(event.at.0) != row.at {
        return Err(StoreError::Corrupt(format!(
            "{what}: the stored `kind`/`at` columns do not match the event (altered)"
        )));
    }
    Ok(AuditRecord {
        seq,
        event,
        kid: KeyId(row.kid),
        prev: row.prev,
        mac: row.mac,
    })
}

impl SqliteStore {
    /// Append `event` to the audit chain and return the stored record (sequence number from 1,
    /// MAC over the previous MAC and this event under the active audit key).
    ///
    /// # Errors
    /// [`StoreError::Key`] if the ring has no audit key; [`StoreError::Unavailable`].
    pub fn append_audit(&self, event: AuditEvent) -> Result<AuditRecord, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut head = audit_head(&tx)?;
        let record = self.append_in(&tx, &mut head, event)?;
        tx.commit().map_err(sql)?;
        Ok(record)
    }

    /// Chain `event` after `head` and insert it; `head` becomes the new record's.
    pub(crate) fn append_in(
        &self,
        conn: &Connection,
        head: &mut (u64, String),
        event: AuditEvent,
    ) -> Result<AuditRecord, StoreError> {
        let next = chain_next(&self.keys, head, event)?;
        conn.execute_cached(
            "INSERT INTO audit (seq, kid, prev, mac, kind, at, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                int(next.record.seq),
                next.record.kid.0,
                next.record.prev,
                next.record.mac,
                next.kind,
                next.at,
                next.event_json
            ],
        )
        .map_err(sql)?;
        *head = (next.record.seq, next.record.mac.clone());
        Ok(next.record)
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

    /// [`AuditSink::verify_audit_log`](secureclaw_core::store::AuditSink::verify_audit_log):
    /// the checkpoints, then the records kept from the latest one, read in one read
    /// transaction (one snapshot).
    ///
    /// Holds the connection for the duration and keeps the decoded records in memory
    /// (the core verifier takes the chain as one sequence).
    ///
    /// # Errors
    /// [`StoreError::Audit`] naming the first record that is missing, altered or out of order,
    /// or whose key is unknown or retired, or the first checkpoint that does not verify;
    /// [`StoreError::Corrupt`] if an event does not decode; [`StoreError::Unavailable`].
    pub fn verify_audit_log(&self) -> Result<LogVerified, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(sql)?;
        let cps = checkpoints(&tx)?;
        let mut records = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM audit ORDER BY seq"))
                .map_err(sql)?;
            let mut rows = stmt.query([]).map_err(sql)?;
            while let Some(row) = rows.next().map_err(sql)? {
                records.push(RawRecord::from_row(row).map_err(sql)?.decode()?);
            }
        }
        tx.commit().map_err(sql)?;
        Ok(audit::verify_log(&self.keys, &cps, &records)?)
    }

    /// Verify the whole chain (from the latest checkpoint, if the log was archived); returns
    /// the number of records verified (0 for an empty log).
    ///
    /// # Errors
    /// As [`SqliteStore::verify_audit_log`].
    pub fn verify_audit(&self) -> Result<u64, StoreError> {
        Ok(self.verify_audit_log()?.records)
    }

    /// The archive checkpoints, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn audit_checkpoints(&self) -> Result<Vec<AuditCheckpoint>, StoreError> {
        let conn = self.conn()?;
        checkpoints(&conn)
    }

    /// [`AuditSink::archive_audit`](secureclaw_core::store::AuditSink::archive_audit): in one
    /// `BEGIN IMMEDIATE` transaction (the lock appenders take), check the segment against the
    /// stored records, store its checkpoint and delete its records.
    ///
    /// # Errors
    /// [`StoreError::Conflict`], [`StoreError::Invalid`] (nothing changed);
    /// [`StoreError::Key`]; [`StoreError::Unavailable`].
    pub fn archive_audit(&self, segment: &ArchiveSegment) -> Result<AuditCheckpoint, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let latest: Option<AuditCheckpoint> = tx
            .query_row(
                &format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq DESC LIMIT 1"
                ),
                [],
                checkpoint_row,
            )
            .optional()
            .map_err(sql)?;
        let (first, last) = (int(segment.first_seq), int(segment.seq));
        let rows: i64 = tx
            .query_row(
                "SELECT count(*) FROM audit WHERE seq >= ?1 AND seq <= ?2",
                params![first, last],
                |r| r.get(0),
            )
            .map_err(sql)?;
        let mac: Option<String> = tx
            .query_row("SELECT mac FROM audit WHERE seq = ?1", [last], |r| r.get(0))
            .optional()
            .map_err(sql)?;
        check_segment(
            segment,
            latest.as_ref().map_or(0, AuditCheckpoint::seq),
            (u64::try_from(rows).unwrap_or(0), mac.as_deref()),
        )?;
        let cp = audit::seal_checkpoint(&self.keys, latest.as_ref(), segment.clone())?;
        tx.execute(
            &format!(
                "INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                first,
                last,
                cp.segment.mac,
                int(cp.segment.count),
                cp.segment.archive_sha256,
                cp.segment.archive,
                int(cp.segment.at.0),
                cp.prev,
                cp.kid.0,
                cp.checkpoint_mac
            ],
        )
        .map_err(sql)?;
        tx.execute(
            "DELETE FROM audit WHERE seq >= ?1 AND seq <= ?2",
            params![first, last],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(cp)
    }
}
