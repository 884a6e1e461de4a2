//! Approvals (DESIGN.md §3 "Confirmation"; SecureClaw paper §3.4 "trusted confirmation"): a
//! trusted confirmer's decision on a pending approval (a confirmation sealed to the action id
//! and binding digest), the prompt a trusted MCP client shows its human, and the approval
//! listing as a trusted approver sees it: one function for every front end that shows
//! approvals to a human (the CLI's `approvals list`, the operator API's
//! `GET /v1/approvals`, the approvals page).

use super::{
    CallMeta, CallOutcome, Gateway, GatewayError, audit_session_id, describe_handles,
    reveal_for_approver,
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
use serde_json::{Map, Value, json};

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
    /// Whether the action's session has expired (or is gone) at the time of listing: its
    /// runtime can no longer re-issue the call, so approving it achieves nothing. Listings
    /// mark such entries (issue 15: pending entries of dead sessions looked live). `false`
    /// when the store could not say (the entry is then shown as live, never hidden).
    pub session_ended: bool,
}

/// Pending (or all, or those in `state`) approvals of `store`, oldest first, each with its
/// action's call revealed for the approver, its session named as in the audit log, and
/// whether that session has ended by `now`.
///
/// # Errors
/// The store's error listing the approvals.
pub async fn list_for_approver(
    store: &dyn Store,
    state: Option<ApprovalState>,
    now: UnixMillis,
) -> Result<Vec<ApprovalView>, StoreError> {
    let mut views = Vec::new();
    let mut ended: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for (approval, action) in store.list_approvals(state).await? {
        let call = reveal_for_approver(store, &action.display).await;
        let session_ended = match ended.get(&action.session) {
            Some(e) => *e,
            None => {
                let e = match store.session(&action.session).await {
                    Ok(Some(s)) => now > s.expires_at,
                    Ok(None) => true,
                    Err(_) => false,
                };
                ended.insert(action.session.clone(), e);
                e
            }
        };
        views.push(ApprovalView {
            session_ended,
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
        list_for_approver(self.inner.store.as_ref(), state, self.now())
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

/// The decider recorded for a human approving through `channel` (`cli`, `operator-api`,
/// `web`) who named themselves `name`: `channel:name`, or `channel` alone when no name was
/// given. The name is what the holder of the channel's credential declares (the operator
/// token, the CLI's access to the state directory): it tells approvers apart in the audit log,
/// it does not authenticate them.
///
/// # Errors
/// A message when `name` is longer than 64 characters or has a character outside ASCII
/// letters, digits and `. _ @ + -` (it lands in logs, the audit log and webhook bodies).
pub fn approver_identity(channel: &str, name: Option<&str>) -> Result<String, String> {
    let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(channel.to_owned());
    };
    if name.chars().count() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '+' | '-'))
    {
        return Err("an approver name is 1 to 64 ASCII letters, digits or `. _ @ + -`".to_owned());
    }
    Ok(format!("{channel}:{name}"))
}

/// What the human behind a [`Confirmer`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmerAnswer {
    /// Approve this exact call: the gateway seals a confirmation and commits it once.
    Approve,
    /// Declined or dismissed: the action is declined and never runs.
    Decline,
    /// The channel answered "accept" without a well-formed answer: nothing is decided, the
    /// approval stays pending, and the runtime is told `confirmation_malformed`.
    Malformed,
    /// The human could not be asked (the channel failed): the approval stays pending.
    Unavailable,
}

/// A channel to a human the operator trusts to confirm actions while the call waits (DESIGN.md
/// §3 "Confirmation"; issue 11 item 1, issue 13 "confirmer interface"): today the MCP client's
/// elicitation, only when the operator declared that client a trusted host. Out-of-band
/// confirmers (the CLI, the operator API, the approvals page) decide later through
/// [`decide_approval`] instead.
///
/// The confirmer only carries the question and the answer: the gateway builds the question
/// ([`Gateway::client_confirmation_prompt`]: the stored, previewed call with every handle
/// described, never revealed, because the channel passes through the runtime's client) and
/// seals, audits and commits the decision itself. Front ends never touch the store.
#[async_trait::async_trait]
pub trait Confirmer: Send + Sync {
    /// Whether the channel can ask at all (an MCP client without the elicitation capability
    /// cannot); `false` leaves the action pending without asking.
    fn available(&self) -> bool;
    /// The confirmer recorded in the approval and the audit log (e.g.
    /// `mcp-elicitation (trusted client)`).
    fn label(&self) -> &str;
    /// Ask the human `question` and return the answer.
    async fn ask(&self, question: String) -> ConfirmerAnswer;
}

impl Gateway {
    /// [`Gateway::call`], then, if this very call created a pending action (never for a
    /// re-issue naming an approval, `meta.approval`), ask `confirmer`'s human while the call
    /// waits: an approval is sealed, audited and committed at once through the ordinary
    /// re-issue path (binding and single use checked as for any commit); a decline declines
    /// the action; a malformed answer leaves it pending with reason `confirmation_malformed`;
    /// an unavailable channel leaves it pending.
    pub async fn call_with_confirmer(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        meta: &CallMeta,
        confirmer: &dyn Confirmer,
    ) -> CallOutcome {
        let outcome = self.call(session, tool, arguments.clone(), meta).await;
        let CallOutcome::Pending(rec) = &outcome else {
            return outcome;
        };
        let (Some(action), None, true) = (
            rec.action_id.clone(),
            meta.approval.as_ref(),
            confirmer.available(),
        ) else {
            return outcome;
        };
        let action = ActionId(action);
        let Ok(Some(question)) = self.client_confirmation_prompt(&action).await else {
            return outcome;
        };
        let approve = match confirmer.ask(question).await {
            ConfirmerAnswer::Approve => true,
            ConfirmerAnswer::Decline => false,
            ConfirmerAnswer::Malformed => {
                return self.confirmation_malformed(session, tool, &action).await;
            }
            ConfirmerAnswer::Unavailable => return outcome,
        };
        if self
            .decide_approval(&action, approve, confirmer.label())
            .await
            .is_err()
        {
            return outcome;
        }
        self.call(
            session,
            tool,
            arguments,
            &CallMeta::committed(Some(&action)),
        )
        .await
    }
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
