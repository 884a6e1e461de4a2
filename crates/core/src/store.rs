//! Storage interfaces and the records they hold (DESIGN.md §2, §3 "Single use and crash
//! safety").
//!
//! The gateway reaches its durable state only through the traits here; `secureclaw-store`
//! implements them (embedded SQLite, and PostgreSQL for several gateway replicas), and one
//! conformance suite holds every implementation to the contracts written on each method.
//!
//! - [`SessionStore`]: sessions and their trusted task envelopes;
//! - [`VaultStore`]: protected values encrypted at rest, and the handle records that stand for
//!   them;
//! - [`ActionStore`]: previewed actions and their approvals;
//! - [`LedgerStore`]: the single-use ledger behind acceptance check 11
//!   ([`SingleUseLedger`]) with its `reserved → executed | failed | outcome_unknown`
//!   transitions;
//! - [`AuditSink`]: the hash-chained audit log;
//! - [`SpeculationStore`]: speculation state shared by replicas (the per-session disclosure
//!   budget, held speculative calls and branch states);
//! - [`RateLimitStore`]: the per-session and per-(session, tool) rate-limit token buckets,
//!   shared by replicas;
//! - [`TaskStateStore`]: per-session authorization state shared by replicas (uses of limited
//!   task grants, amounts anchored reads returned, the values the session wrote);
//! - [`EffectStore`]: the batched writes around an effect (issue 14 items 2–3): the pre-effect
//!   records and the reservation in one transaction, and group commits of audit records and
//!   ledger outcomes;
//! - [`RetentionStore`]: the retention sweep of expired session state (issue 14 item 5);
//! - [`StandingGrantStore`]: standing grants a trusted approver created when approving an
//!   action (issue 15 item 1), with their use counts, shared by replicas;
//! - [`Store`]: all of them, as the gateway holds them (`Arc<dyn Store>`).
//!
//! The traits are asynchronous because the implementations do I/O; they are object safe
//! (`async_trait`), and every future they return is `Send`. Core itself does no I/O.
//!
//! Every failure to reach, read or write the storage is an error ([`StoreError::Unavailable`]
//! in the main); callers fail closed. An implementation never answers from memory when its
//! storage fails.

use crate::acceptance::SingleUseLedger;
use crate::artifact::ActionId;
use crate::audit::{
    ArchiveSegment, AuditCheckpoint, AuditError, AuditEvent, AuditRecord, LogVerified,
};
use crate::binding::BindingDigest;
use crate::canonical::TaskEnvelope;
use crate::confirmation::Confirmation;
use crate::contract::BranchState;
use crate::handle::{HandleId, HandleRecord};
use crate::keys::KeyError;
use crate::recovery::Limit;
use crate::time::UnixMillis;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Errors from a store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached, read or written (I/O, a driver error, a lock
    /// timeout, a poisoned connection lock). Callers report `store_unavailable` and fail
    /// closed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The database was written by a newer build.
    #[error("database schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// Version found in the database.
        found: u32,
        /// Highest version this build knows.
        supported: u32,
    },
    /// A record the operation needs does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The record exists but is in a state that forbids the operation (already decided,
    /// already finished, id already taken).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data does not decode, or a vault value does not decrypt (tampered ciphertext,
    /// wrong key). Never answered with a plaintext fallback.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The caller passed inconsistent input (a reused nonce, a confirmation for another action).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The key ring has no usable key for the operation.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The audit chain does not verify.
    #[error("audit log does not verify: {0}")]
    Audit(#[from] AuditError),
}

// ------------------------------------------------------------------------------- records

/// A gateway session: who it belongs to and what the user asked for. The envelope comes from
/// the trusted side only (operator API, CLI flags, host integration), never from the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Gateway-issued session id.
    pub id: String,
    /// Authenticated caller the session belongs to.
    pub caller: String,
    /// The task envelope (stored as JSON).
    pub envelope: TaskEnvelope,
    /// Creation time.
    pub created_at: UnixMillis,
    /// Last instant of validity (inclusive).
    pub expires_at: UnixMillis,
}

/// A previewed effectful call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The action id issued at preview.
    pub action_id: ActionId,
    /// Session it was previewed in.
    pub session: String,
    /// Authenticated caller.
    pub caller: String,
    /// Namespaced tool (`upstream__tool`).
    pub tool: String,
    /// Binding digest of the canonical request.
    pub binding: BindingDigest,
    /// Whether a trusted confirmation is required before commit.
    pub needs_confirmation: bool,
    /// Preview time.
    pub created_at: UnixMillis,
    /// The canonical request JSON (trusted store only; shown to approvers).
    pub request_json: String,
    /// One-line human-readable description for approvers.
    pub display: String,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for a trusted confirmer.
    Pending,
    /// Approved.
    Approved,
    /// Declined.
    Denied,
}

impl ApprovalState {
    /// `pending`, `approved`, `denied`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
        }
    }

    /// Inverse of [`ApprovalState::as_str`].
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for any other text.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "pending" => Ok(ApprovalState::Pending),
            "approved" => Ok(ApprovalState::Approved),
            "denied" => Ok(ApprovalState::Denied),
            other => Err(StoreError::Corrupt(format!("approval state `{other}`"))),
        }
    }
}

/// The approval of one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The action awaiting (or having received) a decision.
    pub action_id: ActionId,
    /// State.
    pub state: ApprovalState,
    /// When the approval was requested.
    pub created_at: UnixMillis,
    /// When it was decided.
    pub decided_at: Option<UnixMillis>,
    /// Who decided (operator token name, `cli`, `elicitation`).
    pub decided_by: Option<String>,
    /// The sealed confirmation recorded with an approval (stored as JSON).
    pub confirmation: Option<Confirmation>,
}

/// State of a ledger entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// Marked by the acceptance predicate; the effect may or may not have happened.
    Reserved,
    /// The executor recorded the upstream result.
    Executed,
    /// The executor recorded a failure. Still spent: never re-executable.
    Failed,
    /// The request was dispatched but its outcome is unknown (transport closed, upstream
    /// exited, session expired, timeout after dispatch). Still spent: never retried.
    OutcomeUnknown,
}

impl LedgerState {
    /// `reserved`, `executed`, `failed`, `outcome_unknown`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerState::Reserved => "reserved",
            LedgerState::Executed => "executed",
            LedgerState::Failed => "failed",
            LedgerState::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// Inverse of [`LedgerState::as_str`].
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for any other text.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "reserved" => Ok(LedgerState::Reserved),
            "executed" => Ok(LedgerState::Executed),
            "failed" => Ok(LedgerState::Failed),
            "outcome_unknown" => Ok(LedgerState::OutcomeUnknown),
            other => Err(StoreError::Corrupt(format!("ledger state `{other}`"))),
        }
    }
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The spent action id.
    pub action_id: ActionId,
    /// The binding digest the reservation was made for.
    pub binding: BindingDigest,
    /// State.
    pub state: LedgerState,
    /// When it was reserved.
    pub reserved_at: UnixMillis,
    /// When `executed`, `failed` or `outcome_unknown` was recorded.
    pub finished_at: Option<UnixMillis>,
    /// Digest of the upstream result (`executed` only).
    pub result_digest: Option<String>,
    /// Failure reason (`failed` and `outcome_unknown`).
    pub failure: Option<String>,
}

// -------------------------------------------------------------------------------- traits

/// Sessions and their trusted task envelopes.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Store a new session. Sessions are immutable: a second record with the same id is
    /// refused rather than overwriting the trusted envelope.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    async fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError>;

    /// The session `id`, if stored (expired ones included: the caller checks expiry).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`] if the envelope does not decode.
    async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;

    /// Record `keys` (keyed digests, [`crate::protect::protection_digests`]) as protected
    /// objects of session `session`. Idempotent: a key already recorded stays recorded. Keys
    /// are never removed while the store lives (a session's protections outlive a restart and
    /// are seen by every gateway sharing the store).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn protect_objects(&self, session: &str, keys: &[String]) -> Result<(), StoreError>;

    /// Whether any of `keys` is recorded as a protected object of `session` (`false` for no
    /// keys).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn any_protected(&self, session: &str, keys: &[String]) -> Result<bool, StoreError>;
}

/// The vault (protected values, encrypted at rest under the ring's vault key with a fresh
/// nonce per record and the object id and version as associated data) and the handle records
/// that stand for them. Whether a caller may use a record is decided by the core
/// ([`crate::handle::check_resolution`]), never by the store.
#[async_trait]
pub trait VaultStore: Send + Sync {
    /// Encrypt `plaintext` under the active vault key and store it as `version` of
    /// `object_id`. `nonce` must be 12 fresh random bytes. Versions are immutable.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version exists; [`StoreError::Invalid`] if `nonce` was
    /// already used under the active vault key; [`StoreError::Key`] without a vault key;
    /// [`StoreError::Unavailable`].
    async fn put_object(
        &self,
        object_id: &str,
        version: u64,
        plaintext: &[u8],
        nonce: [u8; 12],
    ) -> Result<(), StoreError>;

    /// The plaintext of the highest stored version of `object_id`, or `None`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if the ciphertext does not decrypt (tampered, moved, wrong
    /// key); [`StoreError::Key`] if its vault key is unknown or retired;
    /// [`StoreError::Unavailable`].
    async fn object_value(&self, object_id: &str)
    -> Result<Option<Zeroizing<Vec<u8>>>, StoreError>;

    /// The plaintext of exactly `version` of `object_id`, or `None`.
    ///
    /// # Errors
    /// As [`VaultStore::object_value`].
    async fn object_value_at(
        &self,
        object_id: &str,
        version: u64,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError>;

    /// Store a new handle record, under `reuse_key` if given (see
    /// [`crate::handle::handle_reuse_key`]) so that [`VaultStore::reusable_handle`] finds it.
    /// Records are never overwritten; only [`VaultStore::revoke_handle`] changes one.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    async fn put_handle_keyed(
        &self,
        record: &HandleRecord,
        reuse_key: Option<&str>,
    ) -> Result<(), StoreError>;

    /// Store a new handle record without a reuse key.
    ///
    /// # Errors
    /// As [`VaultStore::put_handle_keyed`].
    async fn put_handle(&self, record: &HandleRecord) -> Result<(), StoreError> {
        self.put_handle_keyed(record, None).await
    }

    /// The record of handle `id`, if known (revoked and expired ones included).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn handle(&self, id: &HandleId) -> Result<Option<HandleRecord>, StoreError>;

    /// The newest handle of `session` stored under `reuse_key` that is not revoked and stays
    /// valid at least until `valid_until`, if any.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn reusable_handle(
        &self,
        session: &str,
        reuse_key: &str,
        valid_until: UnixMillis,
    ) -> Result<Option<HandleRecord>, StoreError>;

    /// Revoke handle `id`: `true` if this call revoked a live record, `false` if the id is
    /// unknown or already revoked. Permanent.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn revoke_handle(&self, id: &HandleId) -> Result<bool, StoreError>;

    /// Every handle record of `session` (revoked and expired ones included), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn handles_for_session(&self, session: &str) -> Result<Vec<HandleRecord>, StoreError>;
}

/// Previewed actions and their approvals (DESIGN.md §3 "Confirmation").
#[async_trait]
pub trait ActionStore: Send + Sync {
    /// Store a previewed action. Action ids are unique; a record is never overwritten.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    async fn put_action(&self, record: &ActionRecord) -> Result<(), StoreError>;

    /// The action `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn action(&self, id: &ActionId) -> Result<Option<ActionRecord>, StoreError>;

    /// Open a pending approval for action `id` at `at`. Idempotent: an existing approval (in
    /// any state) is left as it is.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the action was never stored; [`StoreError::Unavailable`].
    async fn create_approval(&self, id: &ActionId, at: UnixMillis) -> Result<(), StoreError>;

    /// The approval of action `id`, if one was created.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn approval(&self, id: &ActionId) -> Result<Option<ApprovalRecord>, StoreError>;

    /// The newest action of `session` bound to `binding` whose approval was approved at or
    /// after `decided_since` and that was never committed (it has no ledger entry): the
    /// approval that an identical re-issue without `_meta` stands for (a model-driven client
    /// cannot set `_meta`). `None` if there is none.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn approved_unused(
        &self,
        session: &str,
        binding: &BindingDigest,
        decided_since: UnixMillis,
    ) -> Result<Option<ActionId>, StoreError>;

    /// Whether an approval of an action of `session` bound to `binding` was denied: the
    /// exact call a human (or the approval timeout) refused in this session. A standing grant
    /// never covers such a call (finding of 2026-12-04: a call the user had denied ran under a
    /// grant the user then approved for a similar one).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn denied_binding(
        &self,
        session: &str,
        binding: &BindingDigest,
    ) -> Result<bool, StoreError>;

    /// Approvals with their actions, oldest first; all, or only those in `state`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<(ApprovalRecord, ActionRecord)>, StoreError>;

    /// Decide the pending approval of `id` once, atomically: approve (with the sealed
    /// `confirmation`, if any) or deny, by `by` at `at`. Returns the decided record.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] without an approval for `id`; [`StoreError::Conflict`] if it
    /// is not pending; [`StoreError::Invalid`] if a denial carries a confirmation or the
    /// confirmation names another action; [`StoreError::Unavailable`].
    async fn decide_approval(
        &self,
        id: &ActionId,
        approve: bool,
        by: &str,
        at: UnixMillis,
        confirmation: Option<Confirmation>,
    ) -> Result<ApprovalRecord, StoreError>;
}

/// The single-use ledger with its outcomes. [`SingleUseLedger::reserve`] is one atomic
/// insert-if-absent of state `reserved`; an entry then moves once to `executed`, `failed` or
/// `outcome_unknown` and never back; entries are never deleted.
#[async_trait]
pub trait LedgerStore: SingleUseLedger {
    /// `reserved → executed`, with the digest of the upstream result.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if `id` was never reserved; [`StoreError::Conflict`] if it is
    /// no longer `reserved`; [`StoreError::Unavailable`].
    async fn mark_executed(
        &self,
        id: &ActionId,
        result_digest: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError>;

    /// `reserved → failed`. `reason` is stored in clear: a reason code, never a value.
    ///
    /// # Errors
    /// As [`LedgerStore::mark_executed`].
    async fn mark_failed(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError>;

    /// `reserved → outcome_unknown`: dispatched, outcome unknown, never retried. `reason` is an
    /// error class, never a value.
    ///
    /// # Errors
    /// As [`LedgerStore::mark_executed`].
    async fn mark_outcome_unknown(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError>;

    /// The ledger entry of `id`, if it was ever reserved.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn ledger_entry(&self, id: &ActionId) -> Result<Option<LedgerEntry>, StoreError>;

    /// Whether an action of `session` for `tool` (the exposed tool name, as in
    /// [`ActionRecord::tool`]) has a ledger entry in state `outcome_unknown` (red-team F8, R7:
    /// that effect may already have run, so any further effect of the same tool in the
    /// session needs a human — not only a byte-identical one, whose spelling the runtime
    /// controls).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn outcome_unknown_tool(&self, session: &str, tool: &str) -> Result<bool, StoreError>;

    /// Entries still `reserved` that no live writer holds, oldest first: at start-up, actions
    /// whose effect may or may not have happened before a crash — reported, never executed
    /// again. A store shared by several gateways returns only reservations whose writer's
    /// lease has lapsed, so a starting replica never reports (or closes) another replica's
    /// commit in flight.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn dangling_reservations(&self) -> Result<Vec<LedgerEntry>, StoreError>;
}

/// The audit log: append-only, one keyed hash chain ([`crate::audit`]) even with several
/// writers.
#[async_trait]
pub trait AuditSink: Send + Sync {
    /// Append `event` and return the stored record (sequence numbers from 1, gap-free; MAC
    /// over the previous MAC and this event under the active audit key).
    ///
    /// # Errors
    /// [`StoreError::Key`] without an audit key; [`StoreError::Unavailable`].
    async fn append_audit(&self, event: AuditEvent) -> Result<AuditRecord, StoreError>;

    /// Up to `limit` records with `seq >= from_seq`, in order.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError>;

    /// Verify the whole chain; the number of records verified (0 for an empty log). After an
    /// archive, the records kept are verified from the latest checkpoint
    /// ([`AuditSink::verify_audit_log`], which also says from which).
    ///
    /// # Errors
    /// [`StoreError::Audit`] naming the first bad record or checkpoint;
    /// [`StoreError::Corrupt`]; [`StoreError::Unavailable`].
    async fn verify_audit(&self) -> Result<u64, StoreError> {
        Ok(self.verify_audit_log().await?.records)
    }

    /// Verify the log in one snapshot: the archive checkpoints, then the records kept from the
    /// latest checkpoint ([`crate::audit::verify_log`]).
    ///
    /// # Errors
    /// [`StoreError::Audit`] naming the first bad record or checkpoint;
    /// [`StoreError::Corrupt`]; [`StoreError::Unavailable`].
    async fn verify_audit_log(&self) -> Result<LogVerified, StoreError>;

    /// The archive checkpoints, oldest first (empty if the log was never archived).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn audit_checkpoints(&self) -> Result<Vec<AuditCheckpoint>, StoreError>;

    /// Record that `segment` was archived and prune it, in **one** transaction under the lock
    /// appenders take: check that it starts right after the latest checkpoint (record 1 if
    /// none), that the stored records `first_seq..=seq` are exactly `count` records and that
    /// record `seq` has the MAC `mac`; seal a checkpoint after the latest one under the active
    /// audit key ([`crate::audit::seal_checkpoint`]); store it; delete those records. Records
    /// appended afterwards chain after the checkpoint even when none is kept (sequence number
    /// `seq + 1`, `prev` = `mac`). The caller must have written the segment out and verified
    /// it first; nothing else is ever deleted.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the log was archived past `first_seq - 1` meanwhile (another
    /// archiver); [`StoreError::Invalid`] if the segment does not match the stored records
    /// (nothing is deleted); [`StoreError::Key`] without an audit key;
    /// [`StoreError::Unavailable`] (the outcome may be unknown if the commit itself failed).
    async fn archive_audit(&self, segment: &ArchiveSegment) -> Result<AuditCheckpoint, StoreError>;
}

/// Check a segment against the stored records `first_seq..=seq` (both stores): `count` rows,
/// none outside the range missing, the last one's MAC. `found` is `(rows in range, MAC of
/// record seq)`; `latest` the latest checkpoint's `seq` (0 if none).
///
/// # Errors
/// [`StoreError::Conflict`] or [`StoreError::Invalid`] as [`AuditSink::archive_audit`] says.
pub fn check_segment(
    segment: &ArchiveSegment,
    latest: u64,
    found: (u64, Option<&str>),
) -> Result<(), StoreError> {
    if Some(segment.first_seq) != latest.checked_add(1) {
        return Err(StoreError::Conflict(format!(
            "the audit log is archived through seq {latest} (not {}): archive again from seq {}",
            segment.first_seq.saturating_sub(1),
            latest.saturating_add(1)
        )));
    }
    let expected = segment
        .seq
        .checked_sub(segment.first_seq)
        .and_then(|d| d.checked_add(1));
    if expected != Some(segment.count) || found.0 != segment.count {
        return Err(StoreError::Invalid(format!(
            "the archive segment {}..={} ({} records) does not match the {} stored records",
            segment.first_seq, segment.seq, segment.count, found.0
        )));
    }
    if found.1 != Some(segment.mac.as_str()) {
        return Err(StoreError::Invalid(format!(
            "audit record {} does not have the archived MAC",
            segment.seq
        )));
    }
    Ok(())
}

/// Speculation state shared by every gateway on the store (Ghost Tool Calls §4; issue 13
/// item 4): the per-session disclosure budget, the held (DEFER) speculative calls and the
/// branch states. Kept in the store, not in a gateway's memory, so that a budget is spent once
/// across replicas and survives a restart (a replica cannot re-spend what another, or its own
/// earlier process, spent; budget counters only ever grow), a call held through one replica is
/// released exactly once when its branch is promoted through any replica, and the per-session
/// held-call bounds hold for all replicas together.
#[async_trait]
pub trait SpeculationStore: Send + Sync {
    /// Budgeted dispatches charged to `session` so far; 0 for a session never charged.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn budget_spent(&self, session: &str) -> Result<u32, StoreError>;

    /// Charge one budgeted dispatch to `session` if fewer than `limit` are charged, in one
    /// atomic step across every connection and replica: of callers racing for the last unit,
    /// exactly one is charged. Returns the count after charging, or `None` when `limit` was
    /// already reached (nothing is charged; `limit` 0 never charges).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn charge_budget(&self, session: &str, limit: u32) -> Result<Option<u32>, StoreError>;

    /// State of `branch` of `session`: [`BranchState::Pending`] for a branch never settled
    /// (or never seen).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn branch_state(&self, session: &str, branch: &str) -> Result<BranchState, StoreError>;

    /// Hold a speculative call of `session` for `branch` until the branch settles, in one
    /// transaction serialized per session across every connection and replica: refused with
    /// [`HoldOutcome::Settled`] if the branch is promoted or abandoned, with
    /// [`HoldOutcome::Limit`] if the session already holds `bounds.max_calls` calls or the
    /// call would take its held bytes past `bounds.max_bytes` (so replicas together never
    /// exceed either); otherwise stored with the session's next sequence number. `call` is the
    /// call's JSON (tool and arguments, as the caller encodes it); it is stored sealed under the
    /// vault key (AEAD, fresh random nonce, session, branch and sequence as associated data),
    /// never in clear. `bytes` is what the call counts against `bounds.max_bytes`.
    ///
    /// # Errors
    /// [`StoreError::Key`] without a vault key; [`StoreError::Unavailable`];
    /// [`StoreError::Corrupt`].
    async fn hold_call(
        &self,
        session: &str,
        branch: &str,
        call: &str,
        bytes: u64,
        bounds: HeldBounds,
    ) -> Result<HoldOutcome, StoreError>;

    /// Settle `branch` of `session` as [`BranchState::Promoted`] or [`BranchState::Abandoned`]
    /// and take its held calls, in one transaction serialized per session across every
    /// connection and replica: the calls are removed as they are returned (unsealed, in the
    /// order they were held), so of replicas settling one branch at once exactly one gets
    /// them and the others get none. Settling a branch again in the state it already has
    /// returns no calls (a retried promotion); settling it in the other state is refused.
    /// The freed calls and bytes no longer count against the session's bounds.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the branch was settled in the other state;
    /// [`StoreError::Invalid`] for `to` = [`BranchState::Pending`];
    /// [`StoreError::Corrupt`] if a held call does not decrypt; [`StoreError::Key`];
    /// [`StoreError::Unavailable`].
    async fn settle_branch(
        &self,
        session: &str,
        branch: &str,
        to: BranchState,
    ) -> Result<Vec<HeldCall>, StoreError>;

    /// Calls and bytes `session` holds now (0, 0 for none).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn held_totals(&self, session: &str) -> Result<(u64, u64), StoreError>;
}

/// Bounds of one session's held speculative calls (`max_held_calls_per_session`,
/// `max_held_bytes_per_session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBounds {
    /// Most calls one session holds at once.
    pub max_calls: u64,
    /// Most bytes (sum of the held calls' `bytes`) one session holds at once.
    pub max_bytes: u64,
}

/// What [`SpeculationStore::hold_call`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldOutcome {
    /// Held, with this per-session sequence number.
    Held(u64),
    /// Not held: the session is at this bound ([`Limit::HeldCalls`] or [`Limit::HeldBytes`]).
    Limit(Limit),
    /// Not held: the branch is already promoted or abandoned.
    Settled(BranchState),
}

/// A held call taken by [`SpeculationStore::settle_branch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCall {
    /// Per-session sequence number it was held with.
    pub seq: u64,
    /// The call's JSON, as given to [`SpeculationStore::hold_call`].
    pub call: String,
    /// The bytes it counted.
    pub bytes: u64,
}

/// The rates of the shared token buckets (`[gateway.limits]`): a session's bucket holds up
/// to `session_burst` tokens and gains `session_rate_per_s` per second; each (session, tool)
/// pair has a bucket of `tool_burst` gaining `tool_rate_per_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    /// Tokens per second of a session's bucket.
    pub session_rate_per_s: u32,
    /// Size of a session's bucket.
    pub session_burst: u32,
    /// Tokens per second of a (session, tool) bucket.
    pub tool_rate_per_s: u32,
    /// Size of a (session, tool) bucket.
    pub tool_burst: u32,
}

/// Milli-tokens per token: buckets count in thousandths so that a rate of a few calls per
/// second refills smoothly at millisecond resolution.
pub const MILLI_TOKENS: u64 = 1000;

/// One token bucket as stored: milli-tokens left at instant `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Milli-tokens in the bucket at `at`.
    pub milli_tokens: u64,
    /// When the bucket was last refilled.
    pub at: UnixMillis,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens at `now`.
    #[must_use]
    pub fn full(burst: u32, now: UnixMillis) -> Self {
        Self {
            milli_tokens: u64::from(burst).saturating_mul(MILLI_TOKENS),
            at: now,
        }
    }

    /// Refill up to `burst` for the time since `at` (a clock that went back adds nothing and
    /// leaves `at` where it was).
    pub fn refill(&mut self, rate_per_s: u32, burst: u32, now: UnixMillis) {
        let elapsed = now.0.saturating_sub(self.at.0);
        // `rate` tokens per second = `rate` milli-tokens per millisecond.
        let gained = elapsed.saturating_mul(u64::from(rate_per_s));
        self.milli_tokens = self
            .milli_tokens
            .saturating_add(gained)
            .min(u64::from(burst).saturating_mul(MILLI_TOKENS));
        if now.0 > self.at.0 {
            self.at = now;
        }
    }

    /// Milliseconds until one token is available (`None`: never, a rate of zero).
    #[must_use]
    pub fn wait_ms(&self, rate_per_s: u32) -> Option<u64> {
        let missing = MILLI_TOKENS.saturating_sub(self.milli_tokens);
        if missing == 0 {
            return Some(0);
        }
        let rate = u64::from(rate_per_s);
        if rate == 0 {
            return None;
        }
        Some(missing.div_ceil(rate))
    }
}

/// What a take from the rate limits decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateTake {
    /// One token was taken from the session's bucket and one from the (session, tool) bucket.
    Taken,
    /// Nothing was taken: `limit` ([`Limit::SessionRate`] or [`Limit::ToolRate`]) is
    /// exhausted; a token is back after `retry_after_ms` (`None`: never, a rate of zero).
    Refused {
        /// The exhausted limit.
        limit: Limit,
        /// When the next call can be accepted.
        retry_after_ms: Option<u64>,
    },
}

/// The token-bucket step shared by every implementation of [`RateLimitStore::take_rate`]:
/// refill the session bucket `all` and the tool bucket `tool` (absent: full) to `now`, then take
/// one token from each, or from neither when either is empty. Returns the buckets to store and
/// the decision.
#[must_use]
pub fn take_tokens(
    all: Option<TokenBucket>,
    tool: Option<TokenBucket>,
    rates: RateLimits,
    now: UnixMillis,
) -> (TokenBucket, TokenBucket, RateTake) {
    let mut all = all.unwrap_or_else(|| TokenBucket::full(rates.session_burst, now));
    let mut tool = tool.unwrap_or_else(|| TokenBucket::full(rates.tool_burst, now));
    all.refill(rates.session_rate_per_s, rates.session_burst, now);
    tool.refill(rates.tool_rate_per_s, rates.tool_burst, now);
    let decision = if all.milli_tokens < MILLI_TOKENS {
        RateTake::Refused {
            limit: Limit::SessionRate,
            retry_after_ms: all.wait_ms(rates.session_rate_per_s),
        }
    } else if tool.milli_tokens < MILLI_TOKENS {
        RateTake::Refused {
            limit: Limit::ToolRate,
            retry_after_ms: tool.wait_ms(rates.tool_rate_per_s),
        }
    } else {
        all.milli_tokens -= MILLI_TOKENS;
        tool.milli_tokens -= MILLI_TOKENS;
        RateTake::Taken
    };
    (all, tool, decision)
}

/// Rate-limit token buckets shared by every gateway on the store (issue 12 item 6, issue 13
/// item 4): one bucket per session and one per (session, tool), so that N replicas together
/// allow the configured rate, not N times it.
#[async_trait]
pub trait RateLimitStore: Send + Sync {
    /// Take one token for a call of `session` to `tool` ([`take_tokens`] on the stored
    /// buckets), in one transaction serialized per session across every connection and
    /// replica: of callers racing for the last token exactly one gets it. `now` is the
    /// caller's clock; a bucket whose stored time is later than `now` (another replica's clock
    /// ahead) is not refilled until `now` passes it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn take_rate(
        &self,
        session: &str,
        tool: &str,
        rates: RateLimits,
        now: UnixMillis,
    ) -> Result<RateTake, StoreError>;
}

/// Bounds of one session's written set (`max_written_values_per_session`,
/// `max_written_bytes_per_session` in the gateway's limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenBounds {
    /// Most values one session's set holds.
    pub max_values: u64,
    /// Most bytes (sum of the values' UTF-8 lengths) one session's set holds.
    pub max_bytes: u64,
}

/// One value to add to a session's written set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenValue {
    /// Its keyed digest under the active handle key
    /// ([`crate::task_state::state_digest`] with [`crate::task_state::StateDigest::Written`]).
    pub digest: String,
    /// The value itself; stored sealed, never in clear.
    pub value: String,
}

/// Values of a session's written set, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WrittenRows {
    /// `(seq, value)`: per-session sequence numbers from 1, gap-free, in increasing order.
    pub values: Vec<(u64, String)>,
    /// The set reached a bound (or was marked full): every value counts as written.
    pub full: bool,
}

/// Per-session authorization state shared by every gateway on the store (issue 11 findings
/// F1 and F11, issue 13 item 4), kept in the store so that a replica cannot grant, anchor or
/// reuse what another replica's decisions already used up ([`crate::task_state`]):
///
/// - **grant uses**: unconfirmed uses of a limited task grant, counted once across replicas;
/// - **read amounts**: keyed digests of the amounts that anchored reads returned;
/// - the **written set**: the values the session's store effects wrote, bounded per session;
///   membership by keyed digest, the values sealed with the vault key (AEAD, a fresh random
///   nonce per value, the session and digest as associated data) and readable incrementally
///   for the gateway's substring tests.
///
/// Everything here only grows: counters never decrease, digests and values are never removed,
/// and a full written set never becomes un-full. Callers fail closed on every error (a grant
/// not taken needs a human; an unknown written set counts as full).
#[async_trait]
pub trait TaskStateStore: Send + Sync {
    /// Unconfirmed uses of grant `grant` (the task's `granted_tools` entry) taken in `session`
    /// so far; 0 if none.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn grant_uses(&self, session: &str, grant: &str) -> Result<u64, StoreError>;

    /// Take one unconfirmed use of grant `grant` in `session` if fewer than `limit` are taken,
    /// in one atomic step across every connection and replica (insert-if-absent and
    /// conditional increment in one statement): of callers racing for the last use, exactly
    /// one gets `true`. `false` when `limit` uses are taken (nothing is counted; `limit` 0
    /// never grants).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn take_grant_use(
        &self,
        session: &str,
        grant: &str,
        limit: u64,
    ) -> Result<bool, StoreError>;

    /// Record `digests` as values reads of `session` returned that the gateway must recognise
    /// later: amounts of anchored reads ([`crate::task_state::StateDigest::Amount`]) and
    /// directory entries ([`crate::task_state::StateDigest::Directory`]; the domain tags keep
    /// the kinds apart). Idempotent.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn note_amounts(&self, session: &str, digests: &[String]) -> Result<(), StoreError>;

    /// Whether any of `digests` (one amount under every live key,
    /// [`crate::task_state::state_lookup_digests`]) is recorded for `session`; `false` for none.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn amount_known(&self, session: &str, digests: &[String]) -> Result<bool, StoreError>;

    /// Add `values` to the written set of `session`, in order, atomically (one transaction,
    /// serialized per session across replicas). A value whose digest is already in the set is
    /// skipped. Once adding a value would exceed `bounds` the set becomes full and nothing more
    /// is added, ever. Returns whether the set is full afterwards.
    ///
    /// # Errors
    /// [`StoreError::Key`] without a vault key; [`StoreError::Unavailable`];
    /// [`StoreError::Corrupt`].
    async fn add_written(
        &self,
        session: &str,
        values: &[WrittenValue],
        bounds: WrittenBounds,
    ) -> Result<bool, StoreError>;

    /// Mark the written set of `session` full (its values could not all be recorded): from now
    /// on every value counts as written.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn mark_written_full(&self, session: &str) -> Result<(), StoreError>;

    /// Whether the written set of `session` is full or holds any of `digests` (one value under
    /// every live key, [`crate::task_state::state_lookup_digests`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn wrote_any(&self, session: &str, digests: &[String]) -> Result<bool, StoreError>;

    /// The values of the written set of `session` with `seq > after_seq`, unsealed, and whether
    /// the set is full. A caller that keeps the values it has seen asks only for the rows after
    /// its last `seq`: rows are appended with the next `seq` under a per-session lock, so
    /// whoever sees `seq` n sees every row below n.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if a value does not decrypt (tampered, moved to another row or
    /// session, wrong key); [`StoreError::Key`] if its vault key is unknown or retired;
    /// [`StoreError::Unavailable`].
    async fn written_since(&self, session: &str, after_seq: u64)
    -> Result<WrittenRows, StoreError>;
}

/// A pinned tool definition (issue 16 item 4: tool-definition pinning against rug pulls).
///
/// The operator trusts an upstream's tools as they were when pinned; a tool whose definition
/// (name, title, description, input and output schema, annotations) differs from its pin is
/// hidden from the runtime and its calls are denied `tool_definition_changed` until the
/// operator reviews the difference and pins again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPin {
    /// The configured upstream id.
    pub upstream: String,
    /// The tool's name at the upstream.
    pub tool: String,
    /// SHA-256 (lower-case hex) of `definition`.
    pub digest: String,
    /// The definition as pinned: RFC 8785 canonical JSON, so that a later difference can be
    /// shown to the operator.
    pub definition: String,
    /// When it was pinned.
    pub pinned_at: UnixMillis,
}

/// A standing grant (issue 15 item 1; DESIGN.md §3 "Confirmation"): created only by a trusted
/// confirmer when approving a pending action, it stands in for the human's confirmation of
/// later calls of the same session that match the approved one (same task, upstream and tool,
/// every target among the approved call's targets, amounts at most the ceiling), until it
/// expires, its uses are taken or it is revoked. It replaces the confirmation step only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingGrant {
    /// Its id (`grant-` and 32 hex digits).
    pub id: String,
    /// The session it was created in (the raw session id; never shown to approvers).
    pub session: String,
    /// The digest of the session's task envelope when the action was approved.
    pub task_digest: String,
    /// The upstream id of the approved call.
    pub upstream: String,
    /// The tool as the runtime names it (the exposed name of the approved action).
    pub tool: String,
    /// The approved action.
    pub action_id: ActionId,
    /// The approved call's arguments, as canonical JSON (RFC 8785): the targets (and, for a
    /// financial tool, the default amount ceiling) of the grant are those of this call.
    pub arguments_json: String,
    /// The approved call as the approver saw it (the action's display, handles unrevealed).
    pub display: String,
    /// An amount ceiling the approver set, in minor units (hundredths); `None`: the approved
    /// call's own amounts are the ceiling.
    pub max_amount: Option<u64>,
    /// Who created it (the approver identity: `cli:…`, `web:operator`, an operator token name).
    pub created_by: String,
    /// When it was created.
    pub created_at: UnixMillis,
    /// When it stops matching (exclusive: a call at `expires_at` or later is not covered).
    pub expires_at: UnixMillis,
    /// Most calls it covers; `None`: any number until it expires.
    pub max_uses: Option<u64>,
    /// Calls it has covered so far.
    pub used: u64,
    /// Who revoked it, if anyone.
    pub revoked_by: Option<String>,
    /// When it was revoked.
    pub revoked_at: Option<UnixMillis>,
}

impl StandingGrant {
    /// Whether it may still cover a call at `now`: not revoked, not expired, uses left.
    #[must_use]
    pub fn live(&self, now: UnixMillis) -> bool {
        self.revoked_at.is_none()
            && now < self.expires_at
            && self.max_uses.is_none_or(|m| self.used < m)
    }
}

/// Standing grants (issue 15 item 1), shared by every replica of one store. A use is taken in
/// one conditional statement, so that replicas racing for the last use cannot both take it.
#[async_trait]
pub trait StandingGrantStore: Send + Sync {
    /// Store a new grant (`used` 0, not revoked).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] for an id already stored; [`StoreError::Unavailable`].
    async fn create_grant(&self, grant: &StandingGrant) -> Result<(), StoreError>;

    /// The grant `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn grant(&self, id: &str) -> Result<Option<StandingGrant>, StoreError>;

    /// Every grant, oldest first, or (`live_at` set) only those live at that time
    /// ([`StandingGrant::live`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn list_grants(
        &self,
        live_at: Option<UnixMillis>,
    ) -> Result<Vec<StandingGrant>, StoreError>;

    /// The grants of `session` for `tool` live at `now`, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn session_grants(
        &self,
        session: &str,
        tool: &str,
        now: UnixMillis,
    ) -> Result<Vec<StandingGrant>, StoreError>;

    /// Take one use of grant `id` at `now` if it is live then, in one atomic statement
    /// (increment where not revoked, not expired and under `max_uses`): of callers racing for
    /// the last use, exactly one gets `true`. `false` for an unknown, revoked, expired or used
    /// up grant (nothing is counted).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn take_standing_grant_use(&self, id: &str, now: UnixMillis) -> Result<bool, StoreError>;

    /// Revoke grant `id` by `by` at `now`; a grant already revoked keeps its first revocation.
    /// Returns the grant as stored afterwards; `None` for an unknown id.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn revoke_grant(
        &self,
        id: &str,
        by: &str,
        now: UnixMillis,
    ) -> Result<Option<StandingGrant>, StoreError>;
}

/// Tool-definition pins, per upstream (issue 16 item 4). Shared by every replica of one store.
#[async_trait]
pub trait ToolPinStore: Send + Sync {
    /// The pins of `upstream`, by tool name; empty if it was never pinned.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    async fn tool_pins(&self, upstream: &str) -> Result<Vec<ToolPin>, StoreError>;

    /// The upstream ids that have pins (or a first-use marker), sorted: for an operator who
    /// names an upstream by another id than the gateway used.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn pinned_upstreams(&self) -> Result<Vec<String>, StoreError>;

    /// In one transaction: store `pins` (replacing earlier pins of the same upstream and tool)
    /// and remove the pins of `upstream`'s tools named in `unpin` (tools the upstream no longer
    /// lists, removed by the operator's re-pin).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn put_tool_pins(
        &self,
        upstream: &str,
        pins: &[ToolPin],
        unpin: &[String],
    ) -> Result<(), StoreError>;
}

/// One write of a group commit ([`EffectStore::apply_group`]).
#[derive(Debug, Clone, PartialEq)]
pub enum GroupWrite {
    /// Store a previewed action ([`ActionStore::put_action`]). An id already stored fails the
    /// whole group with [`StoreError::Conflict`].
    Action(ActionRecord),
    /// Append this event to the audit chain.
    Audit(AuditEvent),
    /// Reserve `id` for `binding` at `at` (state `reserved`, as [`SingleUseLedger::reserve`]).
    /// An id already reserved fails the whole group with [`StoreError::Conflict`]: a group
    /// that commits made every reservation it holds.
    Reserve {
        /// The action to reserve.
        id: ActionId,
        /// The binding digest the reservation is made for.
        binding: BindingDigest,
        /// When.
        at: UnixMillis,
    },
    /// `reserved → executed` ([`LedgerStore::mark_executed`]).
    Executed {
        /// The reserved action.
        id: ActionId,
        /// Digest of the upstream result.
        result_digest: String,
        /// When.
        at: UnixMillis,
    },
    /// `reserved → failed` ([`LedgerStore::mark_failed`]).
    Failed {
        /// The reserved action.
        id: ActionId,
        /// A reason code, never a value.
        reason: String,
        /// When.
        at: UnixMillis,
    },
    /// `reserved → outcome_unknown` ([`LedgerStore::mark_outcome_unknown`]).
    OutcomeUnknown {
        /// The reserved action.
        id: ActionId,
        /// An error class, never a value.
        reason: String,
        /// When.
        at: UnixMillis,
    },
}

/// What a group commit wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupOutcome {
    /// The audit records appended, in the order of their [`GroupWrite::Audit`] writes.
    pub audit: Vec<AuditRecord>,
    /// Ledger outcomes that changed nothing because the entry was not (or no longer)
    /// `reserved`. The rest of the group was still committed; the caller reports these.
    pub unchanged: Vec<ActionId>,
}

/// The durable writes around an effect, batched (issue 14 items 2 and 3).
///
/// - [`EffectStore::record_and_reserve`]: everything that must be durable before an effect is
///   dispatched (the action record, its preview and decision audit records, and the single-use
///   reservation) in **one** transaction, so one fsync.
/// - [`EffectStore::apply_group`]: many callers' audit appends and ledger outcomes in one
///   transaction (a group commit); a single writer in the gateway batches them.
///
/// Both keep the audit chain one gap-free chain with every other appender: the chain head is
/// read inside the transaction, under the same lock as [`AuditSink::append_audit`].
#[async_trait]
pub trait EffectStore: Send + Sync {
    /// In one transaction: store `action`, append `events` in order, and reserve
    /// `action.action_id` for `binding` at `at` (state `reserved`, as
    /// [`SingleUseLedger::reserve`]). All or nothing. `Ok(true)` iff this call made the
    /// reservation (and stored everything); `Ok(false)` if the id was already reserved
    /// (nothing is stored).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the action id is already stored (nothing is reserved);
    /// [`StoreError::Key`] without an audit key; [`StoreError::Unavailable`]. Never `Ok(true)`
    /// unless the transaction committed.
    async fn record_and_reserve(
        &self,
        action: &ActionRecord,
        events: &[AuditEvent],
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, StoreError>;

    /// Apply `writes` in order in one transaction (one fsync): all or nothing, except that a
    /// ledger outcome for an entry that is not `reserved` changes nothing and is listed in
    /// [`GroupOutcome::unchanged`].
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if a [`GroupWrite::Action`] id is already stored or a
    /// [`GroupWrite::Reserve`] id already reserved;
    /// [`StoreError::Key`] without an audit key; [`StoreError::Unavailable`]. On any error
    /// nothing of the group is stored.
    async fn apply_group(&self, writes: &[GroupWrite]) -> Result<GroupOutcome, StoreError>;
}

/// Rows a retention sweep removed ([`RetentionStore::sweep_expired`]) or would remove
/// ([`RetentionStore::expired_counts`]), per kind. Counts are rows, not bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Session records (`sessions`).
    pub sessions: u64,
    /// Handle records: those of swept sessions and those whose own expiry passed.
    pub handles: u64,
    /// Vault objects (encrypted values) that no remaining handle references.
    pub vault_objects: u64,
    /// Protected-object digests of swept sessions.
    pub protected_objects: u64,
    /// Grant-use counters of swept sessions.
    pub grant_uses: u64,
    /// Read-amount digests of swept sessions.
    pub read_amounts: u64,
    /// Written-set headers of swept sessions.
    pub written_sets: u64,
    /// Written values (sealed) of swept sessions.
    pub written_values: u64,
    /// Speculation budget counters of swept sessions.
    pub speculation_budgets: u64,
    /// Branch states of swept sessions.
    pub spec_branches: u64,
    /// Held-call totals of swept sessions.
    pub held_sessions: u64,
    /// Held speculative calls (sealed, never dispatched) of swept sessions.
    pub held_calls: u64,
    /// Rate-limit token buckets of swept sessions.
    pub rate_buckets: u64,
    /// Standing grants of swept sessions (live or not: a grant never outlives its session's
    /// use, since it covers calls of that session only).
    pub standing_grants: u64,
}

impl SweepReport {
    /// Every count with its name (the names are the report's field names), in a fixed order,
    /// for logs and the CLI.
    #[must_use]
    pub fn kinds(&self) -> [(&'static str, u64); 14] {
        [
            ("sessions", self.sessions),
            ("handles", self.handles),
            ("vault_objects", self.vault_objects),
            ("protected_objects", self.protected_objects),
            ("grant_uses", self.grant_uses),
            ("read_amounts", self.read_amounts),
            ("written_sets", self.written_sets),
            ("written_values", self.written_values),
            ("speculation_budgets", self.speculation_budgets),
            ("spec_branches", self.spec_branches),
            ("held_sessions", self.held_sessions),
            ("held_calls", self.held_calls),
            ("rate_buckets", self.rate_buckets),
            ("standing_grants", self.standing_grants),
        ]
    }

    /// Sum of every count (saturating).
    #[must_use]
    pub fn total(&self) -> u64 {
        self.kinds()
            .iter()
            .fold(0u64, |t, (_, n)| t.saturating_add(*n))
    }

    /// Whether nothing was (or would be) removed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// Add `other`'s counts to these (saturating): the total of several batches.
    pub fn add(&mut self, other: &SweepReport) {
        let fields: [(&mut u64, u64); 14] = [
            (&mut self.sessions, other.sessions),
            (&mut self.handles, other.handles),
            (&mut self.vault_objects, other.vault_objects),
            (&mut self.protected_objects, other.protected_objects),
            (&mut self.grant_uses, other.grant_uses),
            (&mut self.read_amounts, other.read_amounts),
            (&mut self.written_sets, other.written_sets),
            (&mut self.written_values, other.written_values),
            (&mut self.speculation_budgets, other.speculation_budgets),
            (&mut self.spec_branches, other.spec_branches),
            (&mut self.held_sessions, other.held_sessions),
            (&mut self.held_calls, other.held_calls),
            (&mut self.standing_grants, other.standing_grants),
            (&mut self.rate_buckets, other.rate_buckets),
        ];
        for (mine, theirs) in fields {
            *mine = mine.saturating_add(theirs);
        }
    }
}

/// The non-zero counts, `name n` separated by `, ` (`sessions 3, handles 12`), or `nothing`.
impl std::fmt::Display for SweepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (name, n) in self.kinds().iter().filter(|(_, n)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{name} {n}")?;
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

/// Retention of session-scoped state (issue 14 item 5): without it the database grows with
/// every call and never shrinks.
///
/// A session is **swept** when its `expires_at` is before the cutoff: its record goes, with
/// everything stored per session — handles, protected objects, grant uses, read amounts, the
/// written set, the speculation budget, branch states, held calls and their totals, rate
/// buckets — and every vault object that only its handles referenced. A handle whose own
/// `expires_at` is before the cutoff goes too (with its vault object, unless another handle
/// still references it) even while its session lives. The callers already refuse all of this
/// (an expired session or handle gets the same answer as an unknown one), so sweeping changes
/// no decision.
///
/// **Kept**: the single-use ledger, actions, approvals (a pending approval of a swept session
/// can never be used; listings mark it ended) and the audit chain, which stays verifiable.
/// Expiry times at or above 2^63 ms (a saturated "never") are never swept.
///
/// The per-session counters that otherwise only grow (budget, grant uses, written set, branch
/// states) can be deleted only once their session's record is gone, in the same transaction
/// (the schema enforces this where it can): a session that still exists never gets a budget or
/// a grant back.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Sweep one bounded batch, in one transaction: at most `limit` sessions whose
    /// `expires_at < before` (oldest first) with all their state, then at most `limit` handles
    /// whose own `expires_at < before`. Returns what was removed; call again until the report
    /// [`SweepReport::is_empty`] to clear a backlog (each batch holds the write lock only
    /// briefly). Several callers (replicas) may sweep at once: each row is removed once.
    /// An idle store (nothing expired) takes no write lock. `limit` 0 removes nothing.
    ///
    /// The rows of one session are not bounded by `limit` (a session with very many handles is
    /// swept whole, in one batch).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]: nothing of the batch was removed.
    async fn sweep_expired(
        &self,
        before: UnixMillis,
        limit: u32,
    ) -> Result<SweepReport, StoreError>;

    /// What sweeping everything with the cutoff `before` would remove now, without removing
    /// anything (a dry run; read-only).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn expired_counts(&self, before: UnixMillis) -> Result<SweepReport, StoreError>;
}

/// Everything the gateway stores, as one object (`Arc<dyn Store>`). Implemented for every
/// type that implements the parts.
pub trait Store:
    SessionStore
    + VaultStore
    + ActionStore
    + LedgerStore
    + AuditSink
    + SpeculationStore
    + RateLimitStore
    + TaskStateStore
    + EffectStore
    + ToolPinStore
    + RetentionStore
    + StandingGrantStore
{
}

impl<T> Store for T where
    T: SessionStore
        + VaultStore
        + ActionStore
        + LedgerStore
        + AuditSink
        + SpeculationStore
        + RateLimitStore
        + TaskStateStore
        + EffectStore
        + ToolPinStore
        + RetentionStore
        + StandingGrantStore
{
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn rates(rate: u32, burst: u32, tool_rate: u32, tool_burst: u32) -> RateLimits {
        RateLimits {
            session_rate_per_s: rate,
            session_burst: burst,
            tool_rate_per_s: tool_rate,
            tool_burst,
        }
    }

    /// Take repeatedly, carrying the buckets like a store does.
    struct Buckets(Option<TokenBucket>, Option<TokenBucket>, RateLimits);

    impl Buckets {
        fn take(&mut self, now: u64) -> RateTake {
            let (a, t, d) = take_tokens(self.0, self.1, self.2, UnixMillis(now));
            self.0 = Some(a);
            self.1 = Some(t);
            d
        }
    }

    #[test]
    fn a_bucket_refuses_past_its_burst_and_refills_at_its_rate() {
        let mut b = Buckets(None, None, rates(10, 3, 100, 100));
        for _ in 0..3 {
            assert_eq!(b.take(1_000), RateTake::Taken);
        }
        assert_eq!(
            b.take(1_000),
            RateTake::Refused {
                limit: Limit::SessionRate,
                retry_after_ms: Some(100)
            },
            "10 per second: one every 100 ms"
        );
        assert_ne!(b.take(1_099), RateTake::Taken, "99 ms later: not yet");
        assert_eq!(b.take(1_100), RateTake::Taken);
        // A clock that goes back adds nothing.
        assert_ne!(b.take(500), RateTake::Taken);
    }

    #[test]
    fn a_tool_bucket_refuses_without_spending_the_session_bucket() {
        let r = rates(1, 3, 1, 1);
        let (all, _, d) = take_tokens(None, None, r, UnixMillis(0));
        assert_eq!(d, RateTake::Taken);
        let (_, tool, _) = take_tokens(None, None, r, UnixMillis(0));
        let (all2, _, d) = take_tokens(Some(all), Some(tool), r, UnixMillis(0));
        assert_eq!(
            d,
            RateTake::Refused {
                limit: Limit::ToolRate,
                retry_after_ms: Some(1000)
            }
        );
        assert_eq!(all2, all, "the refused call took no session token");
    }

    #[test]
    fn a_zero_rate_never_refills_and_says_so() {
        let mut b = Buckets(None, None, rates(0, 1, 0, 1));
        assert_eq!(b.take(0), RateTake::Taken);
        assert_eq!(
            b.take(u64::MAX),
            RateTake::Refused {
                limit: Limit::SessionRate,
                retry_after_ms: None
            }
        );
    }

    #[test]
    fn branch_states_round_trip() {
        for s in [
            BranchState::Pending,
            BranchState::Promoted,
            BranchState::Abandoned,
        ] {
            assert_eq!(BranchState::parse(s.as_str()), Some(s));
        }
        assert_eq!(BranchState::parse("open"), None);
    }
}
