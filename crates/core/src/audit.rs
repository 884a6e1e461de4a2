//! Audit records and their keyed hash chain.
//!
//! Every preview, decision, confirmation, commit, denial, handle issue and resolution is an
//! [`AuditEvent`]: metadata only (ids, tool names, reason codes, digests), never a protected
//! value or a raw argument. Records are chained: `mac_n = HMAC(k_audit[kid], mac_{n-1} ‖
//! JCS(seq, event))`, so deleting, reordering or editing any record breaks verification from
//! that point on, and rebuilding the chain needs the audit key, not just write access to the
//! database.
//!
//! **Archiving** (issue 14 item 5): a prefix of the log can be exported to a file and pruned
//! from the database. What was pruned is attested by an [`AuditCheckpoint`] — the last
//! archived record's sequence number and MAC, the record count, the file's SHA-256 — MACed
//! under the audit key in its own domain and chained to the previous checkpoint. The log then
//! verifies from the latest checkpoint ([`verify_log`]): the first record kept must follow it
//! (sequence number and `prev`), so deleting more records, editing a checkpoint or forging one
//! is detected; an archive file verifies against its checkpoint ([`archive_start`],
//! [`check_archive_end`]), so archive files and the records kept form one chain.

use crate::keys::{KeyError, KeyId, KeyPurpose, KeyRing, hmac_parts, mac_eq};
use crate::recovery::ReasonCode;
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};
use serde_json::Value;

const DOMAIN: &[u8] = b"secureclaw.audit.v1";

/// MAC of the (virtual) record before the first.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A session was opened with a task envelope.
    Session,
    /// A read-only call was forwarded and its result declassified.
    Read,
    /// An effectful call was previewed (binding digest, action id).
    Preview,
    /// The policy decided.
    Decision,
    /// A trusted confirmer approved or declined.
    Confirmation,
    /// The executor committed (result digest).
    Commit,
    /// Something was denied (reason code).
    Denial,
    /// A handle was issued.
    HandleIssue,
    /// A handle was resolved for a sink.
    HandleResolve,
    /// A handle was revoked.
    HandleRevoke,
    /// A ledger entry was found `reserved` without `executed` at start-up.
    CrashRecovery,
    /// An effect was dispatched to its upstream but no outcome came back (transport closed,
    /// upstream exited, session expired, timeout after dispatch): it may have run. Carries
    /// the binding digest and the error class; the action is never retried.
    OutcomeUnknown,
    /// An issue-time privacy contract decided a call (the trace event: decision and fields
    /// as dispatched, never raw pre-commit arguments), or a branch was promoted or abandoned.
    Speculation,
    /// A request was refused before it became a tool call: by a front end (not JSON, too
    /// deep, too large, a duplicate key, a duplicate in-flight id, a batch, a
    /// re-initialization, a connection or session limit) or by the gateway's per-session
    /// limits (`front_end` = `gateway`: held calls, pending actions, rates; a rate
    /// rejection record stands for `count` rejections of its session within a second).
    /// `detail` holds the front end and a reason code, never the request.
    Rejection,
    /// Tool-definition pins (issue 16 item 4): an upstream's tools were pinned (on first use
    /// or by the operator), or its listing differs from its pins (`reason`
    /// `tool_definition_changed`; `detail` names the changed, unpinned and removed tools).
    ToolPins,
    /// A standing grant (issue 15 item 1) was created by a trusted approver, covered a call
    /// instead of a human, or was revoked: `detail.event` is `created`, `used` or `revoked`,
    /// `detail.grant` its id, plus the approver (`by`) or the covered action (`action_id`).
    Grant,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Kind.
    pub kind: AuditKind,
    /// When.
    pub at: UnixMillis,
    /// Session id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Caller, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// Namespaced tool, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Action id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// Reason code for denials and holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReasonCode>,
    /// Further metadata (digests, counts, ids). Never protected values.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

impl AuditEvent {
    /// An event of `kind` at `at` with everything else empty.
    #[must_use]
    pub fn new(kind: AuditKind, at: UnixMillis) -> Self {
        Self {
            kind,
            at,
            session: None,
            caller: None,
            tool: None,
            action_id: None,
            reason: None,
            detail: Value::Null,
        }
    }
}

/// A chained record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Sequence number, from 1, without gaps.
    pub seq: u64,
    /// The event.
    pub event: AuditEvent,
    /// Audit key id.
    pub kid: KeyId,
    /// MAC of the previous record (hex), [`GENESIS`] for the first.
    pub prev: String,
    /// This record's MAC (hex).
    pub mac: String,
}

fn record_mac(
    keys: &KeyRing,
    kid: &KeyId,
    prev: &str,
    seq: u64,
    event: &AuditEvent,
) -> Result<String, KeyError> {
    let key = keys.verifying(KeyPurpose::Audit, kid)?;
    let body = serde_json_canonicalizer::to_vec(&(seq, event)).unwrap_or_default();
    Ok(hex::encode(hmac_parts(
        key,
        &[DOMAIN, prev.as_bytes(), &body],
    )))
}

/// Chain `event` after a record whose MAC is `prev` and sequence `seq - 1`.
///
/// # Errors
/// [`KeyError::NoActiveKey`] if there is no audit key.
pub fn chain(
    keys: &KeyRing,
    prev: &str,
    seq: u64,
    event: AuditEvent,
) -> Result<AuditRecord, KeyError> {
    let kid = keys.active(KeyPurpose::Audit)?.id.clone();
    let mac = record_mac(keys, &kid, prev, seq, &event)?;
    Ok(AuditRecord {
        seq,
        event,
        kid,
        prev: prev.to_owned(),
        mac,
    })
}

/// Why a chain does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// A sequence number is missing or out of order.
    #[error("audit record {found} follows {expected_prev}: a record is missing or out of order")]
    Gap {
        /// Sequence number expected before.
        expected_prev: u64,
        /// Found.
        found: u64,
    },
    /// A record does not link to its predecessor or its MAC is wrong.
    #[error("audit record {0} was altered or its chain is broken")]
    Broken(u64),
    /// An archive checkpoint does not verify (altered, forged, out of order, or not
    /// continuing the previous one).
    #[error("audit checkpoint at seq {seq} {reason}")]
    Checkpoint {
        /// The checkpoint's last archived sequence number.
        seq: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// An archive file does not match its checkpoint.
    #[error("audit archive does not match its checkpoint: {0}")]
    Archive(String),
    /// A record's key id is unknown.
    #[error("audit record {seq}: {err}")]
    Key {
        /// Record.
        seq: u64,
        /// Key problem.
        err: KeyError,
    },
}

/// Verify records in order from the first. Returns the number verified.
///
/// # Errors
/// The first problem found.
pub fn verify_chain<'a>(
    keys: &KeyRing,
    records: impl IntoIterator<Item = &'a AuditRecord>,
) -> Result<u64, AuditError> {
    let mut v = ChainVerifier::from_genesis();
    for r in records {
        v.push(keys, r)?;
    }
    Ok(v.last_seq())
}

/// Verifies a chain one record at a time, from the genesis or from a checkpoint (the record
/// before the first is `(seq, mac)`), so that a long log or archive file is verified as it
/// is read, without holding it in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainVerifier {
    prev: String,
    last: u64,
    count: u64,
}

impl ChainVerifier {
    /// Expect record 1, chained after [`GENESIS`].
    #[must_use]
    pub fn from_genesis() -> Self {
        Self::after(0, GENESIS)
    }

    /// Expect record `seq + 1`, chained after the MAC `mac` (a checkpoint's [`AuditCheckpoint::mac`]).
    #[must_use]
    pub fn after(seq: u64, mac: &str) -> Self {
        Self {
            prev: mac.to_owned(),
            last: seq,
            count: 0,
        }
    }

    /// Check that `r` is the next record: its sequence number follows, its `prev` is the last
    /// MAC, and its MAC verifies under its key id (retired audit keys still verify).
    ///
    /// # Errors
    /// [`AuditError::Gap`], [`AuditError::Broken`], [`AuditError::Key`].
    pub fn push(&mut self, keys: &KeyRing, r: &AuditRecord) -> Result<(), AuditError> {
        if Some(r.seq) != self.last.checked_add(1) {
            return Err(AuditError::Gap {
                expected_prev: self.last,
                found: r.seq,
            });
        }
        let mac = record_mac(keys, &r.kid, &self.prev, r.seq, &r.event)
            .map_err(|err| AuditError::Key { seq: r.seq, err })?;
        if r.prev != self.prev || !mac_eq(mac.as_bytes(), r.mac.as_bytes()) {
            return Err(AuditError::Broken(r.seq));
        }
        self.prev.clone_from(&r.mac);
        self.last = r.seq;
        self.count = self.count.saturating_add(1);
        Ok(())
    }

    /// Sequence number of the last record verified (or of the starting point).
    #[must_use]
    pub fn last_seq(&self) -> u64 {
        self.last
    }

    /// MAC of the last record verified (or of the starting point).
    #[must_use]
    pub fn last_mac(&self) -> &str {
        &self.prev
    }

    /// Number of records verified.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }
}

// ------------------------------------------------------------------------- archiving

const CHECKPOINT_DOMAIN: &[u8] = b"secureclaw.audit.checkpoint.v1";

/// A segment of the log written to an archive file, as the archiver hands it to the store
/// (issue 14 item 5): records `first_seq..=seq`, whose last MAC is `mac`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveSegment {
    /// First archived sequence number (the previous checkpoint's `seq` + 1, or 1).
    pub first_seq: u64,
    /// Last archived sequence number.
    pub seq: u64,
    /// MAC of record `seq` (hex): the `prev` of the first record kept.
    pub mac: String,
    /// Number of records archived (`seq - first_seq + 1`).
    pub count: u64,
    /// SHA-256 of the archive file's bytes (lower-case hex).
    pub archive_sha256: String,
    /// The archive file's name (informational; the digest identifies it).
    pub archive: String,
    /// When the segment was archived.
    pub at: UnixMillis,
}

/// A signed archive checkpoint: the segment it covers, chained to the checkpoint before it
/// (`prev`, [`GENESIS`] for the first) and MACed under the audit key with its own domain
/// (`secureclaw.audit.checkpoint.v1`), so that it can be neither forged nor edited without
/// the key, nor confused with a record MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditCheckpoint {
    /// What was archived.
    #[serde(flatten)]
    pub segment: ArchiveSegment,
    /// The previous checkpoint's `checkpoint_mac`, or [`GENESIS`].
    pub prev: String,
    /// Audit key id.
    pub kid: KeyId,
    /// MAC over everything above (hex).
    pub checkpoint_mac: String,
}

impl AuditCheckpoint {
    /// Last archived sequence number.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.segment.seq
    }

    /// MAC of the last archived record.
    #[must_use]
    pub fn mac(&self) -> &str {
        &self.segment.mac
    }
}

fn checkpoint_mac(
    keys: &KeyRing,
    kid: &KeyId,
    prev: &str,
    s: &ArchiveSegment,
) -> Result<String, KeyError> {
    let key = keys.verifying(KeyPurpose::Audit, kid)?;
    let body = serde_json_canonicalizer::to_vec(&serde_json::json!({
        "first_seq": s.first_seq,
        "seq": s.seq,
        "mac": s.mac,
        "count": s.count,
        "archive_sha256": s.archive_sha256,
        "archive": s.archive,
        "at": s.at.0,
        "prev": prev,
        "kid": kid.0,
    }))
    .unwrap_or_default();
    Ok(hex::encode(hmac_parts(key, &[CHECKPOINT_DOMAIN, &body])))
}

/// Seal a checkpoint for `segment` after `previous` (the latest checkpoint, if any) under the
/// active audit key. The caller (the store) checks that the segment starts where `previous`
/// ended and matches the stored records.
///
/// # Errors
/// [`KeyError::NoActiveKey`] if there is no audit key.
pub fn seal_checkpoint(
    keys: &KeyRing,
    previous: Option<&AuditCheckpoint>,
    segment: ArchiveSegment,
) -> Result<AuditCheckpoint, KeyError> {
    let kid = keys.active(KeyPurpose::Audit)?.id.clone();
    let prev = previous.map_or_else(|| GENESIS.to_owned(), |p| p.checkpoint_mac.clone());
    let checkpoint_mac = checkpoint_mac(keys, &kid, &prev, &segment)?;
    Ok(AuditCheckpoint {
        segment,
        prev,
        kid,
        checkpoint_mac,
    })
}

/// Verify the checkpoints in order from the first: each MAC, each link to the one before
/// ([`GENESIS`] for the first), and contiguous segments from record 1 (`first_seq` is the
/// previous `seq` + 1, `count` = `seq - first_seq + 1`). Returns a verifier positioned after
/// the last checkpoint (after the genesis when there is none), ready for the records kept.
///
/// # Errors
/// [`AuditError::Checkpoint`] naming the first bad checkpoint; [`AuditError::Key`].
pub fn verify_checkpoints<'a>(
    keys: &KeyRing,
    checkpoints: impl IntoIterator<Item = &'a AuditCheckpoint>,
) -> Result<ChainVerifier, AuditError> {
    let mut prev = GENESIS.to_owned();
    let mut v = ChainVerifier::from_genesis();
    for c in checkpoints {
        let s = &c.segment;
        let bad = |reason: &'static str| AuditError::Checkpoint { seq: s.seq, reason };
        if c.prev != prev {
            return Err(bad("does not follow the previous checkpoint"));
        }
        if Some(s.first_seq) != v.last_seq().checked_add(1) || s.seq < s.first_seq {
            return Err(bad(
                "its segment does not start where the previous one ended",
            ));
        }
        if s.seq
            .checked_sub(s.first_seq)
            .and_then(|d| d.checked_add(1))
            != Some(s.count)
        {
            return Err(bad("its record count does not match its sequence numbers"));
        }
        let mac = checkpoint_mac(keys, &c.kid, &c.prev, s)
            .map_err(|err| AuditError::Key { seq: s.seq, err })?;
        if !mac_eq(mac.as_bytes(), c.checkpoint_mac.as_bytes()) {
            return Err(bad("was altered or forged (its MAC does not verify)"));
        }
        prev.clone_from(&c.checkpoint_mac);
        v = ChainVerifier::after(s.seq, &s.mac);
    }
    Ok(v)
}

/// What [`verify_log`] verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogVerified {
    /// Records verified (those kept, after the latest checkpoint).
    pub records: u64,
    /// Sequence number of the last record (of the checkpoint when no record is kept; 0 for
    /// an empty log).
    pub last_seq: u64,
    /// MAC of that record (the checkpoint's when no record is kept; [`GENESIS`] for an empty
    /// log): with `last_seq`, the head an operator keeps outside the store to detect a tail
    /// cut and regrown later (`audit verify --expect-head SEQ:MAC`).
    pub last_mac: String,
    /// The latest checkpoint the records were verified from, if the log was ever archived.
    pub checkpoint: Option<AuditCheckpoint>,
}

/// Verify a log that may have been archived: the checkpoints ([`verify_checkpoints`]), then
/// the records kept, which must continue the chain from the latest checkpoint (the first
/// one's `seq` is the checkpoint's + 1 and its `prev` the checkpoint's `mac`), or from the
/// genesis when there is no checkpoint.
///
/// # Errors
/// The first problem found.
pub fn verify_log<'a>(
    keys: &KeyRing,
    checkpoints: &[AuditCheckpoint],
    records: impl IntoIterator<Item = &'a AuditRecord>,
) -> Result<LogVerified, AuditError> {
    let mut v = verify_checkpoints(keys, checkpoints)?;
    for r in records {
        v.push(keys, r)?;
    }
    Ok(LogVerified {
        records: v.count(),
        last_seq: v.last_seq(),
        last_mac: v.last_mac().to_owned(),
        checkpoint: checkpoints.last().cloned(),
    })
}

/// Where an archive file's records start: after the checkpoint before `checkpoint` in
/// `checkpoints` (after the genesis for the first). `None` if `checkpoint` is not in the list.
#[must_use]
pub fn archive_start(
    checkpoints: &[AuditCheckpoint],
    checkpoint: &AuditCheckpoint,
) -> Option<ChainVerifier> {
    let at = checkpoints.iter().position(|c| c == checkpoint)?;
    Some(match at.checked_sub(1).and_then(|i| checkpoints.get(i)) {
        Some(before) => ChainVerifier::after(before.seq(), before.mac()),
        None => ChainVerifier::from_genesis(),
    })
}

/// Check that an archive file's records, verified with the verifier [`archive_start`] gave,
/// end exactly where `checkpoint` says: the same last sequence number, MAC and count.
///
/// # Errors
/// [`AuditError::Archive`] saying what differs.
pub fn check_archive_end(
    verified: &ChainVerifier,
    checkpoint: &AuditCheckpoint,
) -> Result<(), AuditError> {
    let s = &checkpoint.segment;
    if verified.count() != s.count
        || verified.last_seq() != s.seq
        || !mac_eq(verified.last_mac().as_bytes(), s.mac.as_bytes())
    {
        return Err(AuditError::Archive(format!(
            "the archive holds {} records ending at seq {}, the checkpoint {} ending at seq {}",
            verified.count(),
            verified.last_seq(),
            s.count,
            s.seq
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_detects_edit_delete_reorder() {
        let keys = KeyRing::generate(&mut |b: &mut [u8]| b.fill(3));
        let mut recs = Vec::new();
        let mut prev = GENESIS.to_owned();
        for i in 1..=4 {
            let r = chain(
                &keys,
                &prev,
                i,
                AuditEvent::new(AuditKind::Preview, UnixMillis(i)),
            )
            .unwrap();
            prev.clone_from(&r.mac);
            recs.push(r);
        }
        assert_eq!(verify_chain(&keys, &recs).unwrap(), 4);
        let mut edited = recs.clone();
        edited[1].event.reason = Some(ReasonCode::Replay);
        assert_eq!(
            verify_chain(&keys, &edited).unwrap_err(),
            AuditError::Broken(2)
        );
        let mut deleted = recs.clone();
        deleted.remove(2);
        assert!(matches!(
            verify_chain(&keys, &deleted).unwrap_err(),
            AuditError::Gap { .. }
        ));
        let mut reordered = recs.clone();
        reordered.swap(1, 2);
        assert!(verify_chain(&keys, &reordered).is_err());
        let other = KeyRing::generate(&mut |b: &mut [u8]| b.fill(4));
        assert_eq!(
            verify_chain(&other, &recs).unwrap_err(),
            AuditError::Broken(1)
        );
    }

    fn records(keys: &KeyRing, n: u64) -> Vec<AuditRecord> {
        let mut recs: Vec<AuditRecord> = Vec::new();
        for i in 1..=n {
            let prev = recs.last().map_or(GENESIS.to_owned(), |r| r.mac.clone());
            recs.push(
                chain(
                    keys,
                    &prev,
                    i,
                    AuditEvent::new(AuditKind::Read, UnixMillis(i)),
                )
                .unwrap(),
            );
        }
        recs
    }

    fn segment(recs: &[AuditRecord], first: u64, last: u64) -> ArchiveSegment {
        ArchiveSegment {
            first_seq: first,
            seq: last,
            mac: recs[usize::try_from(last).unwrap() - 1].mac.clone(),
            count: last - first + 1,
            archive_sha256: "ab".repeat(32),
            archive: format!("audit-{first}-{last}.jsonl"),
            at: UnixMillis(99),
        }
    }

    #[test]
    fn log_verifies_from_chained_checkpoints() {
        let keys = KeyRing::generate(&mut |b: &mut [u8]| b.fill(3));
        let recs = records(&keys, 10);
        let c1 = seal_checkpoint(&keys, None, segment(&recs, 1, 4)).unwrap();
        let c2 = seal_checkpoint(&keys, Some(&c1), segment(&recs, 5, 7)).unwrap();
        let cps = vec![c1.clone(), c2.clone()];
        let got = verify_log(&keys, &cps, &recs[7..]).unwrap();
        assert_eq!((got.records, got.last_seq), (3, 10));
        assert_eq!(got.checkpoint.as_ref(), Some(&c2));
        // All archived: the log verifies as 0 records from the checkpoint.
        let got = verify_log(&keys, &cps, &[]).unwrap();
        assert_eq!((got.records, got.last_seq), (0, 7));
        // The archive segments verify against their checkpoints.
        for (c, part) in [(&c1, &recs[..4]), (&c2, &recs[4..7])] {
            let mut v = archive_start(&cps, c).unwrap();
            for r in part {
                v.push(&keys, r).unwrap();
            }
            check_archive_end(&v, c).unwrap();
        }
        // An archive of the wrong length does not.
        let mut v = archive_start(&cps, &c2).unwrap();
        v.push(&keys, &recs[4]).unwrap();
        assert!(matches!(
            check_archive_end(&v, &c2),
            Err(AuditError::Archive(_))
        ));
    }

    #[test]
    fn deleting_past_a_checkpoint_or_editing_it_is_detected() {
        let keys = KeyRing::generate(&mut |b: &mut [u8]| b.fill(3));
        let recs = records(&keys, 10);
        let c1 = seal_checkpoint(&keys, None, segment(&recs, 1, 4)).unwrap();
        let cps = vec![c1.clone()];
        assert!(
            verify_log(&keys, &cps, &recs[4..]).is_ok(),
            "positive control"
        );
        // One more record deleted after the checkpoint.
        assert_eq!(
            verify_log(&keys, &cps, &recs[5..]).unwrap_err(),
            AuditError::Gap {
                expected_prev: 4,
                found: 6
            }
        );
        // The checkpoint removed: the kept records do not start at 1.
        assert!(matches!(
            verify_log(&keys, &[], &recs[4..]).unwrap_err(),
            AuditError::Gap {
                expected_prev: 0,
                found: 5
            }
        ));
        // The checkpoint edited to cover one more record (its MAC no longer verifies).
        let mut edited = c1.clone();
        edited.segment = segment(&recs, 1, 5);
        assert!(matches!(
            verify_log(&keys, &[edited], &recs[5..]).unwrap_err(),
            AuditError::Checkpoint { seq: 5, .. }
        ));
        // A checkpoint forged under another key.
        let other = KeyRing::generate(&mut |b: &mut [u8]| b.fill(4));
        let forged = seal_checkpoint(&other, None, segment(&recs, 1, 5)).unwrap();
        let forged = AuditCheckpoint {
            kid: c1.kid.clone(),
            ..forged
        };
        assert!(matches!(
            verify_log(&keys, &[forged], &recs[5..]).unwrap_err(),
            AuditError::Checkpoint { seq: 5, .. }
        ));
        // A checkpoint whose MAC names another record: the first kept record does not link.
        let mut wrong = segment(&recs, 1, 4);
        wrong.mac = recs[2].mac.clone();
        let wrong = seal_checkpoint(&keys, None, wrong).unwrap();
        assert_eq!(
            verify_log(&keys, &[wrong], &recs[4..]).unwrap_err(),
            AuditError::Broken(5)
        );
        // A second checkpoint dropped, or not chained to the first.
        let c2 = seal_checkpoint(&keys, Some(&c1), segment(&recs, 5, 7)).unwrap();
        assert!(verify_log(&keys, &[c1.clone(), c2.clone()], &recs[7..]).is_ok());
        assert!(verify_log(&keys, std::slice::from_ref(&c1), &recs[7..]).is_err());
        let unchained = seal_checkpoint(&keys, None, segment(&recs, 5, 7)).unwrap();
        assert!(matches!(
            verify_log(&keys, &[c1, unchained], &recs[7..]).unwrap_err(),
            AuditError::Checkpoint { seq: 7, .. }
        ));
    }
}
