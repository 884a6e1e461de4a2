//! Approvals (DESIGN.md §3 "Confirmation"; SecureClaw paper §3.4 "trusted confirmation"): a
//! trusted confirmer's decision on a pending approval (a confirmation sealed to the action id
//! and binding digest), the prompt a trusted MCP client shows its human, and the approval
//! listing as a trusted approver sees it: one function for every front end that shows
//! approvals to a human (the CLI's `approvals list`, the operator API's
//! `GET /v1/approvals`, the approvals page).

use super::{
    CallOutcome, Gateway, GatewayError, audit_session_id, describe_handles, reveal_for_approver,
};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::confirmation::{Confirmation, ConfirmationClaims};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::{
    ActionRecord, ApprovalRecord, ApprovalState, SessionRecord, Store, StoreError,
};
use secureclaw_core::time::UnixMillis;
use serde_json::json;

/// One approval with the action it concerns, ready to show to a trusted approver.
#[derive(Debug, Clone)]
pub struct ApprovalView {
    /// The approval record.
    pub approval: ApprovalRecord,
    /// The tool of the action.
    pub tool: String,
    /// The caller that previewed the action.
    pub caller: String,
    /// The session as the audit log names it ([`audit_session_id`]): never the raw session id,
    /// which is the runtime's bearer credential.
    pub session: String,
    /// The previewed call with its handles revealed ([`reveal_for_approver`]).
    pub call: String,
}

/// Pending (or all, or those in `state`) approvals of `store`, oldest first, each with its
/// action's call revealed for the approver and its session named as in the audit log.
///
/// # Errors
/// The store's error listing the approvals.
pub async fn list_for_approver(
    store: &dyn Store,
    state: Option<ApprovalState>,
) -> Result<Vec<ApprovalView>, StoreError> {
    let mut views = Vec::new();
    for (approval, action) in store.list_approvals(state).await? {
        let call = reveal_for_approver(store, &action.display).await;
        views.push(ApprovalView {
            approval,
            tool: action.tool,
            caller: action.caller,
            session: audit_session_id(&action.session),
            call,
        });
    }
    Ok(views)
}

impl Gateway {
    /// [`list_for_approver`] on this gateway's store.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn approvals_for_approver(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<ApprovalView>, GatewayError> {
        list_for_approver(self.inner.store.as_ref(), state)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))
    }
}

/// A trusted confirmer (operator API, CLI, MCP elicitation) decides a pending approval.
/// Approving seals a confirmation bound to (action id, binding digest) that lives
/// `confirmation_ttl_ms`, independent of the artifact's freshness window. Works directly on a
/// store, so the CLI can decide approvals for a gateway running in another process.
///
/// # Errors
/// [`GatewayError::NotFound`] for unknown action ids, [`GatewayError::Conflict`] if the
/// approval is not pending, [`GatewayError::Keys`] without a confirmation key, store errors.
pub async fn decide_approval(
    keys: &KeyRing,
    store: &dyn Store,
    now: UnixMillis,
    confirmation_ttl_ms: u64,
    action_id: &ActionId,
    approve: bool,
    confirmer: &str,
) -> Result<ApprovalRecord, GatewayError> {
    let action = store
        .action(action_id)
        .await
        .map_err(|e| GatewayError::Store(e.to_string()))?
        .ok_or_else(|| GatewayError::NotFound(action_id.0.clone()))?;
    let confirmation = if approve {
        let claims = ConfirmationClaims {
            action_id: action_id.clone(),
            binding: action.binding.clone(),
            confirmer: confirmer.to_owned(),
            confirmed_at: now,
            expires_at: now.plus_millis(confirmation_ttl_ms),
        };
        Some(Confirmation::seal(claims, keys).map_err(|e| GatewayError::Keys(e.to_string()))?)
    } else {
        None
    };
    let record = store
        .decide_approval(action_id, approve, confirmer, now, confirmation)
        .await
        .map_err(|e| GatewayError::Conflict(e.to_string()))?;
    let mut ev = AuditEvent::new(AuditKind::Confirmation, now);
    ev.session = Some(audit_session_id(&action.session));
    ev.caller = Some(action.caller.clone());
    ev.tool = Some(action.tool.clone());
    ev.action_id = Some(action_id.0.clone());
    ev.reason = (!approve).then_some(ReasonCode::ConfirmationDenied);
    ev.detail = json!({"approved": approve, "confirmer": confirmer});
    store
        .append_audit(ev)
        .await
        .map_err(|e| GatewayError::Store(e.to_string()))?;
    Ok(record)
}

impl Gateway {
    /// Pending (or all) approvals with the action each concerns.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<(ApprovalRecord, ActionRecord)>, GatewayError> {
        self.inner
            .store
            .list_approvals(state)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))
    }

    /// A trusted confirmer decides a pending approval; see [`decide_approval`].
    ///
    /// # Errors
    /// As [`decide_approval`].
    pub async fn decide_approval(
        &self,
        action_id: &ActionId,
        approve: bool,
        confirmer: &str,
    ) -> Result<ApprovalRecord, GatewayError> {
        let record = decide_approval(
            &self.inner.keys,
            self.inner.store.as_ref(),
            self.now(),
            self.inner.config.limits.confirmation_ttl_ms,
            action_id,
            approve,
            confirmer,
        )
        .await?;
        if !approve {
            // Declined: the action will never run, so it no longer waits.
            self.inner.pending.release_any(action_id);
        }
        Ok(record)
    }

    /// The question a trusted MCP client shows its human for a pending action: the stored,
    /// previewed call with every handle described by label, sensitivity and source — never
    /// its value, because the channel passes through the MCP client (DESIGN.md §3
    /// "Confirmation"). `None` for an unknown action.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn client_confirmation_prompt(
        &self,
        action_id: &ActionId,
    ) -> Result<Option<String>, GatewayError> {
        let action = self
            .inner
            .store
            .action(action_id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let Some(a) = action else {
            return Ok(None);
        };
        let call = describe_handles(self.inner.store.as_ref(), &a.display).await;
        Ok(Some(format!(
            "SecureClaw: allow this call?\n{call}\n(action {action_id})"
        )))
    }

    /// A trusted client accepted a confirmation prompt without a well-formed answer: audited,
    /// nothing decided (the approval stays pending), and the runtime told so with reason
    /// `confirmation_malformed`.
    pub async fn confirmation_malformed(
        &self,
        session: &SessionRecord,
        tool: &str,
        action_id: &ActionId,
    ) -> CallOutcome {
        self.deny(
            session,
            tool,
            self.inner.catalog.get(tool),
            ReasonCode::ConfirmationMalformed,
            Some(action_id),
        )
        .await
    }
}
