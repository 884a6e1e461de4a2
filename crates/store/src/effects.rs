//! The batched writes around an effect ([`secureclaw_core::store::EffectStore`], issue 14
//! items 2 and 3): the pre-effect records and the reservation in one `BEGIN IMMEDIATE`
//! transaction, and group commits of audit records and ledger outcomes.
//!
//! The audit chain head is read inside the transaction, exactly as
//! [`SqliteStore::append_audit`] does, so appends from this path, from single appends and from
//! other processes on the same file still form one gap-free chain.

use crate::actions::insert_action;
use crate::audit::audit_head;
use crate::ledger::{MARK_EXECUTED, MARK_FAILED, MARK_OUTCOME_UNKNOWN, insert_reservation};
use crate::{Cached, SqliteStore, StoreError, int, sql};
use rusqlite::{TransactionBehavior, params};
use secureclaw_core::audit::AuditEvent;
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::store::{ActionRecord, GroupOutcome, GroupWrite};
use secureclaw_core::{ActionId, UnixMillis};

impl SqliteStore {
    /// [`EffectStore::record_and_reserve`](secureclaw_core::store::EffectStore::record_and_reserve):
    /// the action, its audit records and the reservation in one immediate transaction (one
    /// fsync). Rolled back whole on any failure, and when the id was already reserved.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the action id is stored; [`StoreError::Key`];
    /// [`StoreError::Unavailable`].
    pub fn record_and_reserve(
        &self,
        action: &ActionRecord,
        events: &[AuditEvent],
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        insert_action(&tx, action)?;
        let mut head = audit_head(&tx)?;
        for event in events {
            self.append_in(&tx, &mut head, event.clone())?;
        }
        let reserved = insert_reservation(&tx, &action.action_id, binding, at).map_err(sql)?;
        if reserved != 1 {
            // Dropping the transaction rolls it back: nothing of this call is stored.
            return Ok(false);
        }
        tx.commit().map_err(sql)?;
        Ok(true)
    }

    /// [`EffectStore::apply_group`](secureclaw_core::store::EffectStore::apply_group): every
    /// write in one immediate transaction (one fsync).
    ///
    /// # Errors
    /// [`StoreError::Key`]; [`StoreError::Unavailable`] (nothing is stored).
    pub fn apply_group(&self, writes: &[GroupWrite]) -> Result<GroupOutcome, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut outcome = GroupOutcome::default();
        let mut head: Option<(u64, String)> = None;
        for write in writes {
            let (id, changed) = match write {
                GroupWrite::Action(action) => {
                    insert_action(&tx, action)?;
                    continue;
                }
                GroupWrite::Reserve { id, binding, at } => {
                    let reserved = insert_reservation(&tx, id, binding, *at).map_err(sql)?;
                    if reserved != 1 {
                        return Err(StoreError::Conflict(format!(
                            "ledger entry `{id}` is already reserved"
                        )));
                    }
                    continue;
                }
                GroupWrite::Audit(event) => {
                    let mut h = match head.take() {
                        Some(h) => h,
                        None => audit_head(&tx)?,
                    };
                    let record = self.append_in(&tx, &mut h, event.clone())?;
                    head = Some(h);
                    outcome.audit.push(record);
                    continue;
                }
                GroupWrite::Executed {
                    id,
                    result_digest,
                    at,
                } => (
                    id,
                    tx.execute_cached(MARK_EXECUTED, params![id.0, int(at.0), result_digest]),
                ),
                GroupWrite::Failed { id, reason, at } => (
                    id,
                    tx.execute_cached(MARK_FAILED, params![id.0, int(at.0), reason]),
                ),
                GroupWrite::OutcomeUnknown { id, reason, at } => (
                    id,
                    tx.execute_cached(MARK_OUTCOME_UNKNOWN, params![id.0, int(at.0), reason]),
                ),
            };
            if changed.map_err(sql)? != 1 {
                outcome.unchanged.push(ActionId::clone(id));
            }
        }
        tx.commit().map_err(sql)?;
        Ok(outcome)
    }
}
