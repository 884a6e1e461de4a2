//! [`EffectStore`] for [`PgStore`] (issue 14 items 2 and 3): the pre-effect records and the
//! reservation in one transaction, and group commits of audit records and ledger outcomes.
//!
//! Audit records are chained under the advisory lock [`AUDIT_LOCK`] with the head read inside
//! the transaction, as [`AuditSink::append_audit`](secureclaw_core::store::AuditSink::append_audit)
//! does, so every replica's appends still form one gap-free chain. The lock is taken last,
//! after the action and ledger rows, so it is held only for the audit inserts and the commit.

use super::{AUDIT_LOCK, PgCached, PgError, PgStore, db, get};
use crate::audit::chain_next;
use crate::{int, uint};
use async_trait::async_trait;
use secureclaw_core::audit::{AuditEvent, AuditRecord, GENESIS};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::store::{ActionRecord, EffectStore, GroupOutcome, GroupWrite, StoreError};
use secureclaw_core::{ActionId, UnixMillis};

/// Marks a `reserved` entry `executed` (`$1` id, `$2` time, `$3` result digest).
pub(super) const MARK_EXECUTED: &str =
    "UPDATE ledger SET state = 'executed', finished_at = $2, result_digest = $3
     WHERE action_id = $1 AND state = 'reserved'";

/// Marks a `reserved` entry `failed` (`$1` id, `$2` time, `$3` reason).
pub(super) const MARK_FAILED: &str =
    "UPDATE ledger SET state = 'failed', finished_at = $2, failure = $3
     WHERE action_id = $1 AND state = 'reserved'";

/// Marks a `reserved` entry `outcome_unknown` (`$1` id, `$2` time, `$3` reason).
pub(super) const MARK_OUTCOME_UNKNOWN: &str =
    "UPDATE ledger SET state = 'outcome_unknown', finished_at = $2, failure = $3
     WHERE action_id = $1 AND state = 'reserved'";

/// Take the audit lock and read the chain head: `(seq, mac)` of the last record; with no
/// record, the latest checkpoint's last archived `(seq, mac)`; else `(0, GENESIS)`.
pub(super) async fn lock_head(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<(u64, String), StoreError> {
    tx.execute_c("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK])
        .await
        .map_err(db)?;
    let last = tx
        .query_opt_c("SELECT seq, mac FROM audit ORDER BY seq DESC LIMIT 1", &[])
        .await
        .map_err(db)?;
    if let Some(row) = last {
        return Ok((
            uint(get(&row, 0, "audit head")?),
            get::<String>(&row, 1, "audit head")?,
        ));
    }
    // No record: a new log, or every record archived (chain after the latest checkpoint).
    let archived = tx
        .query_opt_c(
            "SELECT seq, mac FROM audit_checkpoints ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await
        .map_err(db)?;
    Ok(match archived {
        Some(row) => (
            uint(get(&row, 0, "audit checkpoint")?),
            get::<String>(&row, 1, "audit checkpoint")?,
        ),
        None => (0, GENESIS.to_owned()),
    })
}

/// Insert `action` (on a pooled connection or in a transaction); an id already stored is a
/// [`StoreError::Conflict`].
pub(super) async fn insert_action<C: deadpool_postgres::GenericClient>(
    c: &C,
    action: &ActionRecord,
) -> Result<(), StoreError> {
    let inserted = c
        .execute_c(
            "INSERT INTO actions (action_id, session, caller, tool, binding_kid, binding,
                                  needs_confirmation, created_at, request_json, display)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (action_id) DO NOTHING",
            &[
                &action.action_id.0,
                &action.session,
                &action.caller,
                &action.tool,
                &action.binding.kid.0,
                &action.binding.digest,
                &action.needs_confirmation,
                &int(action.created_at.0),
                &action.request_json,
                &action.display,
            ],
        )
        .await
        .map_err(db)?;
    if inserted != 1 {
        return Err(StoreError::Conflict(format!(
            "action `{}` already exists",
            action.action_id
        )));
    }
    Ok(())
}

/// The reservation statement: inserts the `reserved` row of `id`, made by `replica`, unless
/// one exists; the number of rows inserted (1, or 0 if the id was already reserved).
pub(super) async fn insert_reservation<C: deadpool_postgres::GenericClient>(
    c: &C,
    id: &ActionId,
    binding: &BindingDigest,
    at: UnixMillis,
    replica: &str,
) -> Result<u64, PgError> {
    c.execute_c(
        "INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at, replica)
         VALUES ($1, $2, $3, 'reserved', $4, $5)
         ON CONFLICT (action_id) DO NOTHING",
        &[&id.0, &binding.kid.0, &binding.digest, &int(at.0), &replica],
    )
    .await
}

impl PgStore {
    /// Chain `event` after `head` and insert it; `head` becomes the new record's.
    pub(super) async fn append_in(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        head: &mut (u64, String),
        event: AuditEvent,
    ) -> Result<AuditRecord, StoreError> {
        let next = chain_next(&self.keys, head, event)?;
        tx.execute_c(
            "INSERT INTO audit (seq, kid, prev, mac, kind, at, event)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &int(next.record.seq),
                &next.record.kid.0,
                &next.record.prev,
                &next.record.mac,
                &next.kind,
                &next.at,
                &next.event_json,
            ],
        )
        .await
        .map_err(db)?;
        *head = (next.record.seq, next.record.mac.clone());
        Ok(next.record)
    }
}

#[async_trait]
impl EffectStore for PgStore {
    async fn record_and_reserve(
        &self,
        action: &ActionRecord,
        events: &[AuditEvent],
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        insert_action(&tx, action).await?;
        let reserved = insert_reservation(&tx, &action.action_id, binding, at, &self.replica)
            .await
            .map_err(db)?;
        if reserved != 1 {
            // Dropping the transaction rolls it back: nothing of this call is stored.
            return Ok(false);
        }
        if !events.is_empty() {
            let mut head = lock_head(&tx).await?;
            for event in events {
                self.append_in(&tx, &mut head, event.clone()).await?;
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(true)
    }

    async fn apply_group(&self, writes: &[GroupWrite]) -> Result<GroupOutcome, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let mut outcome = GroupOutcome::default();
        // Actions and ledger outcomes first (row locks on distinct rows), then the audit records under
        // the audit lock, so the lock is held only for the inserts and the commit. Within the
        // one transaction the order does not change what is stored.
        for write in writes {
            let (id, changed) = match write {
                GroupWrite::Audit(_) => continue,
                GroupWrite::Action(action) => {
                    insert_action(&tx, action).await?;
                    continue;
                }
                GroupWrite::Reserve { id, binding, at } => {
                    let reserved = insert_reservation(&tx, id, binding, *at, &self.replica)
                        .await
                        .map_err(db)?;
                    if reserved != 1 {
                        return Err(StoreError::Conflict(format!(
                            "ledger entry `{id}` is already reserved"
                        )));
                    }
                    continue;
                }
                GroupWrite::Executed {
                    id,
                    result_digest,
                    at,
                } => (
                    id,
                    tx.execute_c(MARK_EXECUTED, &[&id.0, &int(at.0), result_digest])
                        .await,
                ),
                GroupWrite::Failed { id, reason, at } => (
                    id,
                    tx.execute_c(MARK_FAILED, &[&id.0, &int(at.0), reason])
                        .await,
                ),
                GroupWrite::OutcomeUnknown { id, reason, at } => (
                    id,
                    tx.execute_c(MARK_OUTCOME_UNKNOWN, &[&id.0, &int(at.0), reason])
                        .await,
                ),
            };
            if changed.map_err(db)? != 1 {
                outcome.unchanged.push(ActionId::clone(id));
            }
        }
        if writes.iter().any(|w| matches!(w, GroupWrite::Audit(_))) {
            let mut head = lock_head(&tx).await?;
            for write in writes {
                if let GroupWrite::Audit(event) = write {
                    let record = self.append_in(&tx, &mut head, event.clone()).await?;
                    outcome.audit.push(record);
                }
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(outcome)
    }
}
