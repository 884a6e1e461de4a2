//! Previewed actions and their approvals (DESIGN.md §3 "Confirmation").
//!
//! An [`ActionRecord`] is written at preview: the binding digest, the canonical request JSON
//! (kept in the trusted store only, for approvers) and a one-line display text. An approval is
//! created when a preview needs confirmation; a trusted confirmer decides it exactly once —
//! `UPDATE … WHERE state = 'pending'` is the atomic check, and a trigger refuses any later
//! change to a decided approval.

use crate::Cached;
use crate::{SqliteStore, StoreError, corrupt, int, sql, uint};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::confirmation::Confirmation;
use secureclaw_core::keys::KeyId;
use secureclaw_core::store::{ActionRecord, ApprovalRecord, ApprovalState};
use secureclaw_core::{ActionId, UnixMillis};

const ACTION_COLUMNS: &str = "a.action_id, a.session, a.caller, a.tool, a.binding_kid, a.binding, a.needs_confirmation, a.created_at, \
     a.request_json, a.display";
const APPROVAL_COLUMNS: &str =
    "p.action_id, p.state, p.created_at, p.decided_at, p.decided_by, p.confirmation";

struct RawAction {
    action_id: String,
    session: String,
    caller: String,
    tool: String,
    binding_kid: String,
    binding: String,
    needs_confirmation: bool,
    created_at: i64,
    request_json: String,
    display: String,
}

impl RawAction {
    /// Reads [`ACTION_COLUMNS`] starting at column `at`.
    fn from_row(r: &Row<'_>, at: usize) -> rusqlite::Result<Self> {
        Ok(Self {
            action_id: r.get(at)?,
            session: r.get(at + 1)?,
            caller: r.get(at + 2)?,
            tool: r.get(at + 3)?,
            binding_kid: r.get(at + 4)?,
            binding: r.get(at + 5)?,
            needs_confirmation: r.get(at + 6)?,
            created_at: r.get(at + 7)?,
            request_json: r.get(at + 8)?,
            display: r.get(at + 9)?,
        })
    }

    fn decode(self) -> ActionRecord {
        ActionRecord {
            action_id: ActionId(self.action_id),
            session: self.session,
            caller: self.caller,
            tool: self.tool,
            binding: BindingDigest {
                kid: KeyId(self.binding_kid),
                digest: self.binding,
            },
            needs_confirmation: self.needs_confirmation,
            created_at: UnixMillis(uint(self.created_at)),
            request_json: self.request_json,
            display: self.display,
        }
    }
}

struct RawApproval {
    action_id: String,
    state: String,
    created_at: i64,
    decided_at: Option<i64>,
    decided_by: Option<String>,
    confirmation: Option<String>,
}

impl RawApproval {
    /// Reads [`APPROVAL_COLUMNS`] starting at column 0.
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            action_id: r.get(0)?,
            state: r.get(1)?,
            created_at: r.get(2)?,
            decided_at: r.get(3)?,
            decided_by: r.get(4)?,
            confirmation: r.get(5)?,
        })
    }

    fn decode(self) -> Result<ApprovalRecord, StoreError> {
        Ok(ApprovalRecord {
            action_id: ActionId(self.action_id),
            state: ApprovalState::parse(&self.state)?,
            created_at: UnixMillis(uint(self.created_at)),
            decided_at: self.decided_at.map(|t| UnixMillis(uint(t))),
            decided_by: self.decided_by,
            confirmation: self
                .confirmation
                .map(|c| serde_json::from_str(&c))
                .transpose()
                .map_err(|e| corrupt("approval confirmation", e))?,
        })
    }
}

/// Insert `action`; an id already stored is a [`StoreError::Conflict`].
pub(crate) fn insert_action(conn: &Connection, action: &ActionRecord) -> Result<(), StoreError> {
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
    /// Store a previewed action. Action ids are unique; a record is never overwritten.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the id exists; [`StoreError::Unavailable`].
    pub fn put_action(&self, record: &ActionRecord) -> Result<(), StoreError> {
        let conn = self.conn()?;
        insert_action(&conn, record)
    }

    /// The action `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn action(&self, id: &ActionId) -> Result<Option<ActionRecord>, StoreError> {
        let conn = self.conn()?;
        let raw = conn
            .query_row_cached(
                &format!("SELECT {ACTION_COLUMNS} FROM actions a WHERE a.action_id = ?1"),
                [&id.0],
                |r| RawAction::from_row(r, 0),
            )
            .optional()
            .map_err(sql)?;
        Ok(raw.map(RawAction::decode))
    }

    /// Open a pending approval for action `id` at `at`. Idempotent: if an approval exists (in
    /// any state) nothing changes.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the action was never stored; [`StoreError::Unavailable`].
    pub fn create_approval(&self, id: &ActionId, at: UnixMillis) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let known = tx
            .query_row_cached(
                "SELECT 1 FROM actions WHERE action_id = ?1",
                [&id.0],
                |_| Ok(()),
            )
            .optional()
            .map_err(sql)?
            .is_some();
        if !known {
            return Err(StoreError::NotFound(format!("action `{id}`")));
        }
        tx.execute_cached(
            "INSERT INTO approvals (action_id, state, created_at) VALUES (?1, 'pending', ?2)
             ON CONFLICT (action_id) DO NOTHING",
            params![id.0, int(at.0)],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// The approval of action `id`, if one was created.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn approval(&self, id: &ActionId) -> Result<Option<ApprovalRecord>, StoreError> {
        let conn = self.conn()?;
        let raw = conn
            .query_row_cached(
                &format!("SELECT {APPROVAL_COLUMNS} FROM approvals p WHERE p.action_id = ?1"),
                [&id.0],
                RawApproval::from_row,
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        raw.map(RawApproval::decode).transpose()
    }

    /// See [`secureclaw_core::store::ActionStore::approved_unused`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn approved_unused(
        &self,
        session: &str,
        binding: &BindingDigest,
        decided_since: UnixMillis,
    ) -> Result<Option<ActionId>, StoreError> {
        let conn = self.conn()?;
        let id: Option<String> = conn
            .query_row_cached(
                "SELECT a.action_id FROM actions a JOIN approvals p ON p.action_id = a.action_id
                 WHERE a.session = ?1 AND a.binding_kid = ?2 AND a.binding = ?3
                   AND p.state = 'approved' AND p.decided_at >= ?4
                   AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.action_id = a.action_id)
                 ORDER BY p.decided_at DESC, a.action_id LIMIT 1",
                params![
                    session,
                    binding.kid.0,
                    binding.digest,
                    i64::try_from(decided_since.0).unwrap_or(i64::MAX)
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        Ok(id.map(ActionId))
    }

    /// See [`secureclaw_core::store::ActionStore::denied_binding`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn denied_binding(
        &self,
        session: &str,
        binding: &BindingDigest,
    ) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let found = conn
            .query_row_cached(
                "SELECT 1 FROM actions a JOIN approvals p ON p.action_id = a.action_id
                 WHERE a.session = ?1 AND a.binding_kid = ?2 AND a.binding = ?3
                   AND p.state = 'denied'
                 LIMIT 1",
                params![session, binding.kid.0, binding.digest],
                |_| Ok(()),
            )
            .optional()
            .map_err(sql)?
            .is_some();
        Ok(found)
    }

    /// Approvals with their actions, oldest first; all of them, or only those in `state`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    pub fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<(ApprovalRecord, ActionRecord)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {APPROVAL_COLUMNS}, {ACTION_COLUMNS} FROM approvals p JOIN actions a ON a.action_id = p.action_id
                 WHERE ?1 IS NULL OR p.state = ?1
                 ORDER BY p.created_at, p.action_id"
            ))
            .map_err(sql)?;
        let raws = stmt
            .query_map([state.map(ApprovalState::as_str)], |r| {
                Ok((RawApproval::from_row(r)?, RawAction::from_row(r, 6)?))
            })
            .map_err(sql)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql)?;
        drop(stmt);
        drop(conn);
        raws.into_iter()
            .map(|(p, a)| Ok((p.decode()?, a.decode())))
            .collect()
    }

    /// Decide the pending approval of action `id`: approve (with the sealed `confirmation`, if
    /// the caller has one) or deny, by `by` at `at`. Atomic and once only: a decided approval
    /// cannot be decided again. Returns the decided record.
    ///
    /// The confirmation is stored as given; the acceptance predicate verifies its seal and
    /// binding at commit. An approval without a confirmation leaves a commit that needs one
    /// failing with `confirmation_missing`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if there is no approval for `id`; [`StoreError::Conflict`] if it
    /// is not pending; [`StoreError::Invalid`] if a denial carries a confirmation or the
    /// confirmation names another action; [`StoreError::Unavailable`].
    pub fn decide_approval(
        &self,
        id: &ActionId,
        approve: bool,
        by: &str,
        at: UnixMillis,
        confirmation: Option<Confirmation>,
    ) -> Result<ApprovalRecord, StoreError> {
        check_decision(id, approve, confirmation.as_ref())?;
        let state = if approve {
            ApprovalState::Approved
        } else {
            ApprovalState::Denied
        };
        let confirmation_json = confirmation
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| corrupt("confirmation", e))?;
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let changed = tx
            .execute_cached(
                "UPDATE approvals SET state = ?2, decided_at = ?3, decided_by = ?4, confirmation = ?5
                 WHERE action_id = ?1 AND state = 'pending'",
                params![id.0, state.as_str(), int(at.0), by, confirmation_json],
            )
            .map_err(sql)?;
        let raw = tx
            .query_row_cached(
                &format!("SELECT {APPROVAL_COLUMNS} FROM approvals p WHERE p.action_id = ?1"),
                [&id.0],
                RawApproval::from_row,
            )
            .optional()
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
        drop(conn);
        let Some(raw) = raw else {
            return Err(StoreError::NotFound(format!("approval for `{id}`")));
        };
        if changed != 1 {
            return Err(StoreError::Conflict(format!(
                "approval for `{id}` is already {}",
                raw.state
            )));
        }
        raw.decode()
    }
}

/// The input checks of a decision, before any store is touched: a denial carries no
/// confirmation, and a confirmation approves only its own action.
pub(crate) fn check_decision(
    id: &ActionId,
    approve: bool,
    confirmation: Option<&Confirmation>,
) -> Result<(), StoreError> {
    if let Some(c) = confirmation {
        if !approve {
            return Err(StoreError::Invalid(
                "a denial carries no confirmation".into(),
            ));
        }
        if &c.claims.action_id != id {
            return Err(StoreError::Invalid(format!(
                "confirmation for `{}` cannot approve `{id}`",
                c.claims.action_id
            )));
        }
    }
    Ok(())
}
