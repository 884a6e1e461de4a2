//! Audit records and their keyed hash chain.
//!
//! Every preview, decision, confirmation, commit, denial, handle issue and resolution is an
//! [`AuditEvent`]: metadata only (ids, tool names, reason codes, digests), never a protected
//! value or a raw argument. Records are chained: `mac_n = HMAC(k_audit[kid], mac_{n-1} ‖
//! JCS(seq, event))`, so deleting, reordering or editing any record breaks verification from
//! that point on, and rebuilding the chain needs the audit key, not just write access to the
//! database.

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
    let mut prev = GENESIS.to_owned();
    let mut last = 0u64;
    for r in records {
        if r.seq != last + 1 {
            return Err(AuditError::Gap {
                expected_prev: last,
                found: r.seq,
            });
        }
        // Retired audit keys still verify old records: look the key up regardless of
        // retirement by trying the verifying path first.
        let mac = record_mac(keys, &r.kid, &prev, r.seq, &r.event)
            .map_err(|err| AuditError::Key { seq: r.seq, err })?;
        if r.prev != prev || !mac_eq(mac.as_bytes(), r.mac.as_bytes()) {
            return Err(AuditError::Broken(r.seq));
        }
        prev.clone_from(&r.mac);
        last = r.seq;
    }
    Ok(last)
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
}
