//! The batched writes around an effect ([`secureclaw_core::store::EffectStore`], issue 14
//! items 2 and 3): the pre-effect records and the reservation in one `BEGIN IMMEDIATE`
//! transaction, and group commits of audit records and ledger outcomes.
//!
//! The audit chain head is read inside the transaction, exactly as
//! [`SqliteStore::append_audit`] does, so appends from this path, from single appends and from
//! other processes on the same file still form one gap-free chain.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use secureclaw_core::audit::{self, AuditEvent, AuditRecord, GENESIS};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::store::{ActionRecord, GroupOutcome, GroupWrite};
use secureclaw_core::{ActionId, UnixMillis};

/// The chain head as stored: `(seq, mac)` of the last record, or `(0, GENESIS)`.
fn audit_head(conn: &Connection) -> Result<(u64, String), StoreError> {
    let last: Option<(i64, String)> = conn
        .query_row_cached(
            "SELECT seq, mac FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql)?;
    Ok(last.map_or((0, GENESIS.to_owned()), |(s, m)| (uint(s), m)))
}

/// Insert `action`; an id already stored is a [`StoreError::Conflict`].
fn insert_action(conn: &Connection, action: &ActionRecord) -> Result<(), StoreError> {
    let inserted = conn
            .execute_cached(
                "INSERT INTO actions (action_id, session, caller, tool, binding_kid, binding, needs_confirmation,
                                      created_at, request_json, display)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (action_id) DO NOTHING",
                params![
                    action.action_id.0,
                    action.session,
                    action.caller,
                    action.tool,
                    action.binding.kid.0,
                    action.binding.digest,
                    action.needs_confirmation,
                    int(action.created_at.0),
                    action.request_json,
                    action.display,
                ],
            )
            .map_err(sql)?;
    if inserted != 1 {
        return Err(StoreError::Conflict(format!(
            "action `{}` already exists",
            action.action_id
        )));
    }
    Ok(())
}

impl SqliteStore {
    /// Chain `event` after `head` and insert it; `head` becomes the new record's.
    fn append_in(
        &self,
        conn: &Connection,
        head: &mut (u64, String),
        event: AuditEvent,
    ) -> Result<AuditRecord, StoreError> {
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
        let record = audit::chain(&self.keys, &head.1, seq, event)?;
        conn.execute_cached(
            "INSERT INTO audit (seq, kid, prev, mac, kind, at, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![int(seq), record.kid.0, record.prev, record.mac, kind, at, event_json],
        )
        .map_err(sql)?;
        *head = (seq, record.mac.clone());
        Ok(record)
    }

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
        let reserved = tx
            .execute_cached(
                "INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at)
                 VALUES (?1, ?2, ?3, 'reserved', ?4)
                 ON CONFLICT (action_id) DO NOTHING",
                params![action.action_id.0, binding.kid.0, binding.digest, int(at.0)],
            )
            .map_err(sql)?;
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
                    let reserved = tx
                        .execute_cached(
                            "INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at)
                             VALUES (?1, ?2, ?3, 'reserved', ?4)
                             ON CONFLICT (action_id) DO NOTHING",
                            params![id.0, binding.kid.0, binding.digest, int(at.0)],
                        )
                        .map_err(sql)?;
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
                    tx.execute_cached(
                        "UPDATE ledger SET state = 'executed', finished_at = ?2, result_digest = ?3
                         WHERE action_id = ?1 AND state = 'reserved'",
                        params![id.0, int(at.0), result_digest],
                    ),
                ),
                GroupWrite::Failed { id, reason, at } => (
                    id,
                    tx.execute_cached(
                        "UPDATE ledger SET state = 'failed', finished_at = ?2, failure = ?3
                         WHERE action_id = ?1 AND state = 'reserved'",
                        params![id.0, int(at.0), reason],
                    ),
                ),
                GroupWrite::OutcomeUnknown { id, reason, at } => (
                    id,
                    tx.execute_cached(
                        "UPDATE ledger SET state = 'outcome_unknown', finished_at = ?2, failure = ?3
                         WHERE action_id = ?1 AND state = 'reserved'",
                        params![id.0, int(at.0), reason],
                    ),
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
