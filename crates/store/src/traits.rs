//! The storage traits of [`secureclaw_core::store`] for [`SqliteStore`]: each method calls the
//! synchronous inherent method of the same name inline, so behaviour is exactly that of the
//! inherent API (documented there).

use crate::SqliteStore;
use async_trait::async_trait;
use secureclaw_core::acceptance::{LedgerError, SingleUseLedger};
use secureclaw_core::audit::{
    ArchiveSegment, AuditCheckpoint, AuditEvent, AuditRecord, LogVerified,
};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::confirmation::Confirmation;
use secureclaw_core::contract::BranchState;
use secureclaw_core::handle::{HandleId, HandleRecord};
use secureclaw_core::store::{
    ActionRecord, ActionStore, ApprovalRecord, ApprovalState, AuditSink, EffectStore, GroupOutcome,
    GroupWrite, HeldBounds, HeldCall, HoldOutcome, LedgerEntry, LedgerStore, RateLimitStore,
    RateLimits, RateTake, SessionRecord, SessionStore, SpeculationStore, StoreError,
    TaskStateStore, ToolPin, ToolPinStore, VaultStore, WrittenBounds, WrittenRows, WrittenValue,
};
use secureclaw_core::{ActionId, UnixMillis};
use zeroize::Zeroizing;

#[async_trait]
impl SessionStore for SqliteStore {
    async fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        SqliteStore::put_session(self, record)
    }

    async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        SqliteStore::session(self, id)
    }

    async fn protect_objects(&self, session: &str, keys: &[String]) -> Result<(), StoreError> {
        SqliteStore::protect_objects(self, session, keys)
    }

    async fn any_protected(&self, session: &str, keys: &[String]) -> Result<bool, StoreError> {
        SqliteStore::any_protected(self, session, keys)
    }
}

#[async_trait]
impl VaultStore for SqliteStore {
    async fn put_object(
        &self,
        object_id: &str,
        version: u64,
        plaintext: &[u8],
        nonce: [u8; 12],
    ) -> Result<(), StoreError> {
        SqliteStore::put_object(self, object_id, version, plaintext, nonce)
    }

    async fn object_value(
        &self,
        object_id: &str,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        SqliteStore::object_value(self, object_id)
    }

    async fn object_value_at(
        &self,
        object_id: &str,
        version: u64,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        SqliteStore::object_value_at(self, object_id, version)
    }

    async fn put_handle_keyed(
        &self,
        record: &HandleRecord,
        reuse_key: Option<&str>,
    ) -> Result<(), StoreError> {
        SqliteStore::put_handle_keyed(self, record, reuse_key)
    }

    async fn handle(&self, id: &HandleId) -> Result<Option<HandleRecord>, StoreError> {
        SqliteStore::handle(self, id)
    }

    async fn reusable_handle(
        &self,
        session: &str,
        reuse_key: &str,
        valid_until: UnixMillis,
    ) -> Result<Option<HandleRecord>, StoreError> {
        SqliteStore::reusable_handle(self, session, reuse_key, valid_until)
    }

    async fn revoke_handle(&self, id: &HandleId) -> Result<bool, StoreError> {
        SqliteStore::revoke_handle(self, id)
    }

    async fn handles_for_session(&self, session: &str) -> Result<Vec<HandleRecord>, StoreError> {
        SqliteStore::handles_for_session(self, session)
    }
}

#[async_trait]
impl ActionStore for SqliteStore {
    async fn put_action(&self, record: &ActionRecord) -> Result<(), StoreError> {
        SqliteStore::put_action(self, record)
    }

    async fn action(&self, id: &ActionId) -> Result<Option<ActionRecord>, StoreError> {
        SqliteStore::action(self, id)
    }

    async fn create_approval(&self, id: &ActionId, at: UnixMillis) -> Result<(), StoreError> {
        SqliteStore::create_approval(self, id, at)
    }

    async fn approval(&self, id: &ActionId) -> Result<Option<ApprovalRecord>, StoreError> {
        SqliteStore::approval(self, id)
    }

    async fn approved_unused(
        &self,
        session: &str,
        binding: &BindingDigest,
        decided_since: UnixMillis,
    ) -> Result<Option<ActionId>, StoreError> {
        SqliteStore::approved_unused(self, session, binding, decided_since)
    }

    async fn denied_binding(
        &self,
        session: &str,
        binding: &BindingDigest,
    ) -> Result<bool, StoreError> {
        SqliteStore::denied_binding(self, session, binding)
    }

    async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<(ApprovalRecord, ActionRecord)>, StoreError> {
        SqliteStore::list_approvals(self, state)
    }

    async fn decide_approval(
        &self,
        id: &ActionId,
        approve: bool,
        by: &str,
        at: UnixMillis,
        confirmation: Option<Confirmation>,
    ) -> Result<ApprovalRecord, StoreError> {
        SqliteStore::decide_approval(self, id, approve, by, at, confirmation)
    }
}

#[async_trait]
impl SingleUseLedger for SqliteStore {
    async fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        SqliteStore::reserve(self, action_id, binding, at)
    }
}

#[async_trait]
impl LedgerStore for SqliteStore {
    async fn mark_executed(
        &self,
        id: &ActionId,
        result_digest: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        SqliteStore::mark_executed(self, id, result_digest, at)
    }

    async fn mark_failed(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        SqliteStore::mark_failed(self, id, reason, at)
    }

    async fn mark_outcome_unknown(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        SqliteStore::mark_outcome_unknown(self, id, reason, at)
    }

    async fn ledger_entry(&self, id: &ActionId) -> Result<Option<LedgerEntry>, StoreError> {
        SqliteStore::ledger_entry(self, id)
    }

    async fn outcome_unknown_tool(&self, session: &str, tool: &str) -> Result<bool, StoreError> {
        SqliteStore::outcome_unknown_tool(self, session, tool)
    }

    /// Every `reserved` entry: one SQLite file serves one gateway, so none is in flight at
    /// start-up.
    async fn dangling_reservations(&self) -> Result<Vec<LedgerEntry>, StoreError> {
        SqliteStore::dangling_reservations(self)
    }
}

#[async_trait]
impl AuditSink for SqliteStore {
    async fn append_audit(&self, event: AuditEvent) -> Result<AuditRecord, StoreError> {
        SqliteStore::append_audit(self, event)
    }

    async fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        SqliteStore::audit_records(self, from_seq, limit)
    }

    async fn verify_audit(&self) -> Result<u64, StoreError> {
        SqliteStore::verify_audit(self)
    }

    async fn verify_audit_log(&self) -> Result<LogVerified, StoreError> {
        SqliteStore::verify_audit_log(self)
    }

    async fn audit_checkpoints(&self) -> Result<Vec<AuditCheckpoint>, StoreError> {
        SqliteStore::audit_checkpoints(self)
    }

    async fn archive_audit(&self, segment: &ArchiveSegment) -> Result<AuditCheckpoint, StoreError> {
        SqliteStore::archive_audit(self, segment)
    }
}

#[async_trait]
impl SpeculationStore for SqliteStore {
    async fn budget_spent(&self, session: &str) -> Result<u32, StoreError> {
        SqliteStore::budget_spent(self, session)
    }

    async fn charge_budget(&self, session: &str, limit: u32) -> Result<Option<u32>, StoreError> {
        SqliteStore::charge_budget(self, session, limit)
    }

    async fn branch_state(&self, session: &str, branch: &str) -> Result<BranchState, StoreError> {
        SqliteStore::branch_state(self, session, branch)
    }

    async fn hold_call(
        &self,
        session: &str,
        branch: &str,
        call: &str,
        bytes: u64,
        bounds: HeldBounds,
    ) -> Result<HoldOutcome, StoreError> {
        SqliteStore::hold_call(self, session, branch, call, bytes, bounds)
    }

    async fn settle_branch(
        &self,
        session: &str,
        branch: &str,
        to: BranchState,
    ) -> Result<Vec<HeldCall>, StoreError> {
        SqliteStore::settle_branch(self, session, branch, to)
    }

    async fn held_totals(&self, session: &str) -> Result<(u64, u64), StoreError> {
        SqliteStore::held_totals(self, session)
    }
}

#[async_trait]
impl RateLimitStore for SqliteStore {
    async fn take_rate(
        &self,
        session: &str,
        tool: &str,
        rates: RateLimits,
        now: UnixMillis,
    ) -> Result<RateTake, StoreError> {
        SqliteStore::take_rate(self, session, tool, rates, now)
    }
}

#[async_trait]
impl TaskStateStore for SqliteStore {
    async fn grant_uses(&self, session: &str, grant: &str) -> Result<u64, StoreError> {
        SqliteStore::grant_uses(self, session, grant)
    }

    async fn take_grant_use(
        &self,
        session: &str,
        grant: &str,
        limit: u64,
    ) -> Result<bool, StoreError> {
        SqliteStore::take_grant_use(self, session, grant, limit)
    }

    async fn note_amounts(&self, session: &str, digests: &[String]) -> Result<(), StoreError> {
        SqliteStore::note_amounts(self, session, digests)
    }

    async fn amount_known(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        SqliteStore::amount_known(self, session, digests)
    }

    async fn add_written(
        &self,
        session: &str,
        values: &[WrittenValue],
        bounds: WrittenBounds,
    ) -> Result<bool, StoreError> {
        SqliteStore::add_written(self, session, values, bounds)
    }

    async fn mark_written_full(&self, session: &str) -> Result<(), StoreError> {
        SqliteStore::mark_written_full(self, session)
    }

    async fn wrote_any(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        SqliteStore::wrote_any(self, session, digests)
    }

    async fn written_since(
        &self,
        session: &str,
        after_seq: u64,
    ) -> Result<WrittenRows, StoreError> {
        SqliteStore::written_since(self, session, after_seq)
    }
}

#[async_trait]
impl EffectStore for SqliteStore {
    async fn record_and_reserve(
        &self,
        action: &ActionRecord,
        events: &[AuditEvent],
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, StoreError> {
        SqliteStore::record_and_reserve(self, action, events, binding, at)
    }

    async fn apply_group(&self, writes: &[GroupWrite]) -> Result<GroupOutcome, StoreError> {
        SqliteStore::apply_group(self, writes)
    }
}

#[async_trait]
impl ToolPinStore for SqliteStore {
    async fn tool_pins(&self, upstream: &str) -> Result<Vec<ToolPin>, StoreError> {
        SqliteStore::tool_pins(self, upstream)
    }

    async fn pinned_upstreams(&self) -> Result<Vec<String>, StoreError> {
        SqliteStore::pinned_upstreams(self)
    }

    async fn put_tool_pins(
        &self,
        upstream: &str,
        pins: &[ToolPin],
        unpin: &[String],
    ) -> Result<(), StoreError> {
        SqliteStore::put_tool_pins(self, upstream, pins, unpin)
    }
}
