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
//!   budget);
//! - [`TaskStateStore`]: per-session authorization state shared by replicas (uses of limited
//!   task grants, amounts anchored reads returned, the values the session wrote);
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
use crate::audit::{AuditError, AuditEvent, AuditRecord};
use crate::binding::BindingDigest;
use crate::canonical::TaskEnvelope;
use crate::confirmation::Confirmation;
use crate::handle::{HandleId, HandleRecord};
use crate::keys::KeyError;
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

    /// Whether an action of `session` with exactly this binding digest (same key id, same
    /// digest: the same canonical request) has a ledger entry in state `outcome_unknown`
    /// (red-team finding F8: an identical call may already have run, so repeating it needs a
    /// human).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn outcome_unknown_binding(
        &self,
        session: &str,
        binding: &BindingDigest,
    ) -> Result<bool, StoreError>;

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

    /// Verify the whole chain; the number of records verified (0 for an empty log).
    ///
    /// # Errors
    /// [`StoreError::Audit`] naming the first bad record; [`StoreError::Corrupt`];
    /// [`StoreError::Unavailable`].
    async fn verify_audit(&self) -> Result<u64, StoreError>;
}

/// Speculation state shared by every gateway on the store (Ghost Tool Calls §4; issue 13
/// item 4): the per-session disclosure budget. Kept in the store, not in a gateway's memory,
/// so that a budget is spent once across replicas and survives a restart: a replica cannot
/// re-spend what another (or its own earlier process) spent. Counters only ever grow.
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

    /// Record `digests` ([`crate::task_state::StateDigest::Amount`]) as amounts that anchored
    /// reads of `session` returned. Idempotent.
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

/// Everything the gateway stores, as one object (`Arc<dyn Store>`). Implemented for every
/// type that implements the parts.
pub trait Store:
    SessionStore
    + VaultStore
    + ActionStore
    + LedgerStore
    + AuditSink
    + SpeculationStore
    + TaskStateStore
{
}

impl<T> Store for T where
    T: SessionStore
        + VaultStore
        + ActionStore
        + LedgerStore
        + AuditSink
        + SpeculationStore
        + TaskStateStore
{
}
