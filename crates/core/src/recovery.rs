//! Reason codes and deny-aware recovery (SecureClaw paper §3.5).
//!
//! Every denial carries a [`ReasonCode`] and a fixed template: the action class, the reason and
//! safe next steps. Templates are static text with at most an action id or tool name filled
//! in — never exception text, upstream error bodies, user request text or protected values (the
//! authors' templates echoed raw exceptions and the user request:
//! `research/secureclaw-reference.md` §6 item 10).

use serde::{Deserialize, Serialize};

/// Why something was denied or held. Stable snake_case strings on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    // -- executor acceptance predicate, in check order --
    /// No artifact was presented.
    ArtifactMissing,
    /// The artifact is not a well-formed token.
    ArtifactMalformed,
    /// Unsupported artifact version.
    ArtifactVersion,
    /// Unknown key id (artifact or binding key).
    KeyUnknown,
    /// Retired key id.
    KeyRetired,
    /// Artifact MAC does not verify.
    ArtifactMac,
    /// The artifact belongs to another action.
    ActionMismatch,
    /// The call to execute differs from the one previewed.
    BindingMismatch,
    /// The policy set changed since preview.
    PolicyChanged,
    /// The artifact's freshness window has passed.
    ArtifactExpired,
    /// The artifact is dated in the future beyond the allowed skew.
    ArtifactNotYetValid,
    /// The recorded decision is not allow.
    DecisionNotAllow,
    /// Confirmation required but absent.
    ConfirmationMissing,
    /// A confirmation is present but bound to another action or request, forged or expired.
    ConfirmationInvalid,
    /// The action id was already used.
    Replay,
    /// The store could not be reached; nothing was executed (fail closed).
    StoreUnavailable,
    // -- policy and gateway decisions --
    /// The policy denied the call.
    PolicyDeny,
    /// A trusted confirmation is needed before this call can run.
    ConfirmationRequired,
    /// A trusted confirmation is needed because the call changes a protected object: one
    /// whose content this session saw only as handles (a read of it withheld protected
    /// values) or into which a handle was resolved. An edit, dry run, move or overwrite of
    /// such an object could show the runtime those values (a diff, a match/no-match answer,
    /// a value mangled past the detectors).
    ProtectedObject,
    /// A trusted confirmation is needed because the call would change, by matching against
    /// its existing content, an object this session has not read: its result ("found" / "not
    /// found", a diff) would answer questions about content the runtime was never shown (the
    /// match oracle). Reading the object first lets the gateway withhold its protected values.
    ObjectUnread,
    /// A trusted confirmation is needed because an identical call (same tool, same canonical
    /// arguments) of this session ended `outcome_unknown`: it may already have run, so the
    /// user must check before it is sent again (issue 12, "at most once"; red-team F8).
    OutcomeUnknownRepeat,
    /// The human (or operator) declined.
    ConfirmationDenied,
    /// A trusted client accepted a confirmation prompt without a well-formed answer; nothing
    /// was decided and the action stays pending.
    ConfirmationMalformed,
    /// The tool is not known to the gateway or not visible to this caller.
    UnknownTool,
    /// A handle is unknown, expired, revoked or belongs to another session.
    HandleUnavailable,
    /// A handle may not flow to this sink.
    HandleSinkForbidden,
    /// Arguments are malformed, too large, too deep or not exactly representable.
    InvalidArguments,
    /// The upstream tool failed or returned an error.
    UpstreamError,
    /// The upstream tool did not answer in time.
    UpstreamTimeout,
    /// An effectful call was sent to the upstream, and no outcome came back (connection
    /// closed, upstream exited, session expired, timeout after dispatch): it may have run.
    /// The action is spent and is never retried.
    OutcomeUnknown,
    /// The session is unknown or closed.
    SessionUnknown,
    /// An internal error; nothing was executed.
    Internal,
    /// The effect ran, but its result could not be recorded or declassified; it is withheld
    /// and the action will not run again.
    ResultWithheld,
    // -- issue-time privacy contracts (Ghost Tool Calls) --
    /// A pre-commit call is held until its branch is promoted (or dropped when abandoned).
    Deferred,
    /// The issue-time privacy contract blocked the call before anything was sent.
    ContractBlocked,
    // -- resource limits --
    /// A per-session limit of the gateway was reached (held calls, pending approvals, rate);
    /// nothing was sent or recorded for this call.
    LimitExceeded,
    /// The arguments of one call hold more distinct targets (recipients, paths, accounts,
    /// identifiers) than the gateway checks per call; nothing was sent or recorded.
    TooManyTargets,
    /// A search (a read matching the call's text against content) with search text the task
    /// does not name, past the session's `max_unanchored_match_reads`: each such search
    /// answers "found / not found" about content the runtime may hold only as handles, so
    /// their number is bounded (the search oracle). Nothing was sent.
    MatchBudget,
    /// An approval was presented by a session other than the one that asked for it (a
    /// restarted client, another `wrap` process). The approval stays usable by its own
    /// session; nothing ran.
    ApprovalSessionMismatch,
    /// An explicit commit whose tool, in this session, had an effect of unknown outcome after
    /// the preview was issued (or an identical call is still running): the preview no longer
    /// stands; nothing was sent. Previewing again asks the user.
    OutcomeUnknownSincePreview,
    /// The upstream's definition of this tool (description, schemas, annotations) differs
    /// from the one the operator pinned, or the tool was never pinned: it is hidden and its
    /// calls are refused until the operator reviews the difference and pins it again
    /// (`secureclaw tools diff` / `tools pin`; issue 16 item 4, rug pulls). Nothing was sent.
    ToolDefinitionChanged,
    /// An MCP 2026-07-28 retry carried a `requestState` the gateway did not seal, or sealed
    /// for another session, tool or action, or that was altered (MRTR, SEP-2322: the state is
    /// attacker-controlled input). Nothing was decided or sent.
    RequestStateInvalid,
    /// An MCP 2026-07-28 retry carried a `requestState` past its lifetime. Nothing was decided
    /// or sent; the pending action, if any, is unchanged.
    RequestStateExpired,
}

impl ReasonCode {
    /// The wire string (`binding_mismatch`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::ArtifactMissing => "artifact_missing",
            ReasonCode::ArtifactMalformed => "artifact_malformed",
            ReasonCode::ArtifactVersion => "artifact_version",
            ReasonCode::KeyUnknown => "key_unknown",
            ReasonCode::KeyRetired => "key_retired",
            ReasonCode::ArtifactMac => "artifact_mac",
            ReasonCode::ActionMismatch => "action_mismatch",
            ReasonCode::BindingMismatch => "binding_mismatch",
            ReasonCode::PolicyChanged => "policy_changed",
            ReasonCode::ArtifactExpired => "artifact_expired",
            ReasonCode::ArtifactNotYetValid => "artifact_not_yet_valid",
            ReasonCode::DecisionNotAllow => "decision_not_allow",
            ReasonCode::ConfirmationMissing => "confirmation_missing",
            ReasonCode::ConfirmationInvalid => "confirmation_invalid",
            ReasonCode::Replay => "replay",
            ReasonCode::StoreUnavailable => "store_unavailable",
            ReasonCode::PolicyDeny => "policy_deny",
            ReasonCode::ConfirmationRequired => "confirmation_required",
            ReasonCode::ProtectedObject => "protected_object",
            ReasonCode::ObjectUnread => "object_unread",
            ReasonCode::OutcomeUnknownRepeat => "outcome_unknown_repeat",
            ReasonCode::ConfirmationDenied => "confirmation_denied",
            ReasonCode::ConfirmationMalformed => "confirmation_malformed",
            ReasonCode::UnknownTool => "unknown_tool",
            ReasonCode::HandleUnavailable => "handle_unavailable",
            ReasonCode::HandleSinkForbidden => "handle_sink_forbidden",
            ReasonCode::InvalidArguments => "invalid_arguments",
            ReasonCode::UpstreamError => "upstream_error",
            ReasonCode::UpstreamTimeout => "upstream_timeout",
            ReasonCode::OutcomeUnknown => "outcome_unknown",
            ReasonCode::SessionUnknown => "session_unknown",
            ReasonCode::Internal => "internal",
            ReasonCode::ResultWithheld => "result_withheld",
            ReasonCode::Deferred => "deferred",
            ReasonCode::ContractBlocked => "contract_blocked",
            ReasonCode::LimitExceeded => "limit_exceeded",
            ReasonCode::TooManyTargets => "too_many_targets",
            ReasonCode::MatchBudget => "match_budget",
            ReasonCode::ApprovalSessionMismatch => "approval_session_mismatch",
            ReasonCode::OutcomeUnknownSincePreview => "outcome_unknown_since_preview",
            ReasonCode::ToolDefinitionChanged => "tool_definition_changed",
            ReasonCode::RequestStateInvalid => "request_state_invalid",
            ReasonCode::RequestStateExpired => "request_state_expired",
        }
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A per-session limit of the gateway (issue 12 item 6), named in a
/// [`ReasonCode::LimitExceeded`] recovery by its configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Speculative calls held until their branch settles (count).
    HeldCalls,
    /// Speculative calls held until their branch settles (bytes of arguments).
    HeldBytes,
    /// Previews not yet committed or expired, and approvals not yet settled.
    PendingActions,
    /// Calls per second of one session.
    SessionRate,
    /// Calls per second of one session to one tool.
    ToolRate,
    /// Bytes of call arguments one session has in flight at once.
    InFlightBytes,
    /// Bytes of call arguments every session of the gateway process has in flight at once.
    GatewayInFlightBytes,
}

impl Limit {
    /// The key of `[gateway.limits]` that sets this limit.
    #[must_use]
    pub fn config_key(self) -> &'static str {
        match self {
            Limit::HeldCalls => "max_held_calls_per_session",
            Limit::HeldBytes => "max_held_bytes_per_session",
            Limit::PendingActions => "max_pending_per_session",
            Limit::SessionRate => "session_rate_per_s",
            Limit::ToolRate => "tool_rate_per_s",
            Limit::InFlightBytes => "max_in_flight_bytes_per_session",
            Limit::GatewayInFlightBytes => "max_in_flight_bytes",
        }
    }
}

/// Coarse class of the action that was denied, shown to the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// A read-only tool.
    Read,
    /// An effectful tool.
    Effect,
}

/// A deny-aware recovery message: reason, action class and safe next steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// `"denied"`, `"pending_confirmation"` or `"deferred"`.
    pub status: &'static str,
    /// Reason code.
    pub reason: ReasonCode,
    /// Action class.
    pub action_class: ActionClass,
    /// Tool (namespaced) the runtime called; echoes the runtime's own input only.
    pub tool: String,
    /// Action id when one exists (needed to ask for approval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// Branch a deferred call waits on (echoes the runtime's own `_meta` input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// For [`ReasonCode::LimitExceeded`]: the configuration key of the limit reached
    /// (`max_pending_per_session`, `session_rate_per_s`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// For a rate limit: milliseconds after which the next call can be accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// One-line fixed explanation.
    pub message: &'static str,
    /// Safe next steps.
    pub next_steps: Vec<String>,
}

/// The safe next step that offers a draft, as the templates word it.
const DRAFT_STEP: &str = "save a draft instead";

impl Recovery {
    /// Name the tool that saves a draft in the "save a draft instead" step, or drop that step
    /// when the gateway has no such tool (a step the runtime cannot take only sends it looking
    /// for one). `tool` is an exposed tool name the operator declared target-less
    /// (`targets = []`), such as `office__save_draft`.
    #[must_use]
    pub fn with_draft_tool(mut self, tool: Option<&str>) -> Self {
        match tool {
            Some(tool) => {
                for step in &mut self.next_steps {
                    if step.ends_with(DRAFT_STEP) {
                        step.push_str(&format!(" with {tool}"));
                    }
                }
            }
            None => {
                self.next_steps.retain(|s| !s.ends_with(DRAFT_STEP));
            }
        }
        self
    }

    /// The template for `reason`.
    #[must_use]
    pub fn new(
        reason: ReasonCode,
        action_class: ActionClass,
        tool: &str,
        action_id: Option<&str>,
    ) -> Self {
        let approve = |id: Option<&str>| match id {
            Some(id) => format!(
                "ask the user to approve action {id} (secureclaw approvals approve {id}), then issue the identical call again: it runs once (_meta \"dev.secureclaw/approval\": \"{id}\" names the approval, optionally)"
            ),
            None => "ask the user to approve this action".to_owned(),
        };
        let (message, steps): (&'static str, Vec<String>) = match reason {
            ReasonCode::ConfirmationRequired => (
                "this action needs the user's confirmation before it can run",
                vec![approve(action_id), "or save a draft instead".into()],
            ),
            ReasonCode::ProtectedObject => (
                "this action changes an object whose content you were shown only as handles (protected values were withheld from it); its result or the changed object could reveal them, so the user must confirm it",
                vec![
                    approve(action_id),
                    "do not retry it under another spelling of the object's name or with another tool: every effect on this object is held the same way".into(),
                    "to produce new content, write it to a new object from what you were shown".into(),
                    "or save a draft instead".into(),
                ],
            ),
            ReasonCode::ObjectUnread => (
                "this action matches against the existing content of an object you have not read in this session; its answer could reveal content you were never shown, so it waits for the user",
                vec![
                    "read the object first with a read tool (protected values come back as handles), then issue the same call again".into(),
                    approve(action_id),
                    "or write new content to a new object instead".into(),
                ],
            ),
            ReasonCode::OutcomeUnknownRepeat => (
                "an identical call in this session may already have run (its outcome is unknown); the user must check whether it took effect before it is sent again",
                vec![
                    "tell the user the earlier identical call may already have run and ask them to check".into(),
                    approve(action_id),
                ],
            ),
            ReasonCode::ConfirmationDenied => (
                "the user declined this action",
                vec!["do not retry; tell the user what you intended and ask how to proceed".into()],
            ),
            ReasonCode::ConfirmationMalformed => (
                "the confirmation answer was not a well-formed yes or no; nothing was decided",
                vec![approve(action_id)],
            ),
            ReasonCode::ConfirmationMissing | ReasonCode::ConfirmationInvalid => (
                "no valid confirmation is bound to this exact request",
                vec![
                    approve(action_id),
                    "re-issue exactly the approved call; any change needs a new approval".into(),
                ],
            ),
            ReasonCode::PolicyDeny => (
                "the policy does not allow this action for this task",
                vec![
                    "use only recipients, paths and accounts named by the user".into(),
                    "save a draft instead".into(),
                    "ask the user to add the target to the task".into(),
                ],
            ),
            ReasonCode::HandleSinkForbidden => (
                "a protected value cannot flow into this tool: sensitive values go only to the tools their source allows, and no handle is written into a file, document or record unless the operator allows that store for its source",
                vec![
                    "send a summary without the protected value".into(),
                    "save a draft instead".into(),
                    "ask the operator to allow this destination for the value's source (allowed_sinks) if the user needs it".into(),
                ],
            ),
            ReasonCode::HandleUnavailable => (
                "a referenced handle is not available in this session",
                vec!["read the source again to obtain a fresh handle".into()],
            ),
            ReasonCode::UnknownTool => (
                "this tool is not available",
                vec!["call tools/list and pick an available tool".into()],
            ),
            ReasonCode::InvalidArguments => (
                "the arguments are malformed, too large, too deeply nested or contain numbers that cannot be represented exactly",
                vec![
                    "send plain JSON arguments within the limits; pass large numbers as strings"
                        .into(),
                ],
            ),
            ReasonCode::UpstreamError => (
                "the tool reported an error",
                vec!["check the arguments and try again once".into()],
            ),
            ReasonCode::UpstreamTimeout => (
                "the tool did not answer in time; the call may or may not have taken effect",
                vec!["check the result with a read-only tool before retrying".into()],
            ),
            ReasonCode::OutcomeUnknown => (
                "the action was sent to the tool, but no outcome came back; it may have run",
                vec![
                    "do not repeat this action".into(),
                    "ask the user to check whether it took effect".into(),
                ],
            ),
            ReasonCode::SessionUnknown => (
                "the session is unknown or closed",
                vec!["ask the operator to start a new session".into()],
            ),
            ReasonCode::StoreUnavailable | ReasonCode::Internal => (
                "the gateway could not complete the check; nothing was executed",
                vec!["retry later".into()],
            ),
            ReasonCode::ResultWithheld => (
                "the action was executed, but its result is withheld because it could not be recorded",
                vec!["do not retry it; check the outcome with a read-only tool".into()],
            ),
            ReasonCode::Deferred => (
                "this speculative call was not sent; it waits until its branch is promoted",
                vec![
                    "call secureclaw.promote_branch with this branch when you use it; the call then runs as committed and its result is returned".into(),
                    "call secureclaw.abandon_branch if you drop the branch; the call is then discarded unsent".into(),
                ],
            ),
            ReasonCode::ContractBlocked => (
                "the privacy contract does not allow this call to this destination",
                vec![
                    "use another tool or destination the deployment allows".into(),
                    "ask the operator if this call is needed for the task".into(),
                ],
            ),
            ReasonCode::LimitExceeded => (
                "a limit of this session was reached; this call was not sent or held",
                vec![
                    "settle what is waiting first: promote or abandon held branches, or ask the user to decide pending approvals".into(),
                    "ask the operator if the task needs a higher limit".into(),
                ],
            ),
            ReasonCode::TooManyTargets => (
                "this call names more targets (recipients, paths, accounts, identifiers) than one call may; it was not sent",
                vec![
                    "split the call into several smaller calls, each with fewer targets".into(),
                    "ask the operator if the task needs a higher max_targets_per_call".into(),
                ],
            ),
            ReasonCode::OutcomeUnknownSincePreview => (
                "since this preview was issued, a call of this tool in this session ended with an unknown outcome or an identical call is still running; it may already have taken effect, so this commit was not sent",
                vec![
                    "do not retry: tell the user the earlier call may already have run and ask them to check".into(),
                    "preview the call again if the user wants it: it then waits for their approval".into(),
                ],
            ),
            ReasonCode::ToolDefinitionChanged => (
                "this tool's definition at its server differs from the one the operator approved (pinned), or it was never approved; it may have been changed to do something else, so it is hidden and nothing was sent",
                vec![
                    "use another tool from tools/list, or tell the user the tool needs the operator's review".into(),
                    "the operator reviews the change with `secureclaw tools diff` and approves it with `secureclaw tools pin`".into(),
                ],
            ),
            ReasonCode::RequestStateInvalid => (
                "the requestState of this retry was not issued by the gateway for this session, tool and action, or was altered; nothing was decided or sent",
                vec![
                    "echo the requestState exactly as the gateway returned it, with the same tool call".into(),
                    "or issue the call again without requestState: it is previewed afresh and waits for the user".into(),
                ],
            ),
            ReasonCode::RequestStateExpired => (
                "the requestState of this retry has expired; nothing was decided or sent",
                vec![
                    "issue the call again without requestState: it is previewed afresh and waits for the user".into(),
                ],
            ),
            ReasonCode::ApprovalSessionMismatch => (
                "this approval was given to another session (a restarted client or another wrap process); an approval is used only by the session that asked for it, and nothing ran",
                vec![
                    "issue the call again without the approval: it waits for a new approval in this session".into(),
                    "keep one client connection open while an approval is pending".into(),
                ],
            ),
            ReasonCode::MatchBudget => (
                "this session has used its searches by text the task does not name; search answers can reveal protected values the gateway withholds, so their number is bounded. Nothing was sent",
                vec![
                    "search by words the user's request names, or read the objects you need directly".into(),
                    "ask the user to name the search terms in the task".into(),
                    "ask the operator if the task needs a higher max_unanchored_match_reads".into(),
                ],
            ),
            ReasonCode::Replay => (
                "this action was already executed or attempted",
                vec!["do not repeat it; if the user wants another effect, make a new call for it (it is decided afresh)".into()],
            ),
            ReasonCode::ArtifactExpired | ReasonCode::ArtifactNotYetValid => (
                "the authorization is not fresh",
                vec!["preview the action again".into()],
            ),
            ReasonCode::ArtifactMissing
            | ReasonCode::ArtifactMalformed
            | ReasonCode::ArtifactVersion
            | ReasonCode::KeyUnknown
            | ReasonCode::KeyRetired
            | ReasonCode::ArtifactMac
            | ReasonCode::ActionMismatch
            | ReasonCode::BindingMismatch
            | ReasonCode::PolicyChanged
            | ReasonCode::DecisionNotAllow => (
                "the commit does not match an authorized preview",
                vec![
                    "issue the call again without an approval or artifact (over MCP: a plain tools/call): it is previewed afresh and runs or waits for the user".into(),
                    "with the HTTP API, preview the exact call again and commit it unchanged".into(),
                ],
            ),
        };
        Self {
            status: match reason {
                ReasonCode::ConfirmationRequired
                | ReasonCode::ProtectedObject
                | ReasonCode::ObjectUnread
                | ReasonCode::OutcomeUnknownRepeat => "pending_confirmation",
                ReasonCode::Deferred => "deferred",
                _ => "denied",
            },
            reason,
            action_class,
            tool: tool.to_owned(),
            action_id: action_id.map(str::to_owned),
            branch: None,
            limit: None,
            retry_after_ms: None,
            message,
            next_steps: steps,
        }
    }

    /// The template for a per-session `limit` that was reached ([`ReasonCode::LimitExceeded`]):
    /// the recovery names the limit and says how to proceed; a rate limit also says after how
    /// many milliseconds (`retry_after_ms`) the next call can be accepted.
    #[must_use]
    pub fn limit_exceeded(
        limit: Limit,
        action_class: ActionClass,
        tool: &str,
        retry_after_ms: Option<u64>,
    ) -> Self {
        let mut r = Self::new(ReasonCode::LimitExceeded, action_class, tool, None);
        let operator = "ask the operator if the task needs a higher limit".to_owned();
        let (message, steps): (&'static str, Vec<String>) = match limit {
            Limit::InFlightBytes => (
                "this session has as many bytes of call arguments in flight as it may; this call was not sent",
                vec![
                    match retry_after_ms {
                        Some(ms) => format!("wait {ms} ms for the session's running calls to finish, then send the call again"),
                        None => "wait for the session's running calls to finish, then send the call again".to_owned(),
                    },
                    "send large arguments one call at a time".into(),
                    operator.clone(),
                ],
            ),
            Limit::GatewayInFlightBytes => (
                "the gateway has as many bytes of call arguments in flight as it may; this call was not sent",
                vec![
                    match retry_after_ms {
                        Some(ms) => format!("wait {ms} ms, then send the call again"),
                        None => "wait a moment, then send the call again".to_owned(),
                    },
                    "send large arguments one call at a time".into(),
                    operator.clone(),
                ],
            ),
            Limit::HeldCalls | Limit::HeldBytes => (
                "this session holds as many speculative calls as it may; this call was not sent or held",
                vec![
                    "settle what is waiting first: promote or abandon held branches".into(),
                    operator,
                ],
            ),
            Limit::PendingActions => (
                "this session has as many previewed actions and approvals waiting as it may; this call was not previewed or sent",
                vec![
                    "commit or drop the previews already issued (an uncommitted preview frees its place when its authorization expires)".into(),
                    "ask the user to decide the pending approvals".into(),
                    operator,
                ],
            ),
            Limit::SessionRate | Limit::ToolRate => (
                if limit == Limit::SessionRate {
                    "this session sent calls faster than its rate limit; this call was not sent"
                } else {
                    "this session called this tool faster than its rate limit; this call was not sent"
                },
                vec![
                    match retry_after_ms {
                        Some(ms) => format!("wait {ms} ms, then send the call again"),
                        None => "wait a moment, then send the call again".to_owned(),
                    },
                    "send fewer calls".into(),
                    operator,
                ],
            ),
        };
        r.message = message;
        r.next_steps = steps;
        r.limit = Some(limit.config_key().to_owned());
        r.retry_after_ms = retry_after_ms;
        r
    }

    /// The template for a speculative call deferred until `branch` is promoted.
    #[must_use]
    pub fn deferred(action_class: ActionClass, tool: &str, branch: &str) -> Self {
        let mut r = Self::new(ReasonCode::Deferred, action_class, tool, None);
        r.branch = Some(branch.to_owned());
        r
    }

    /// Human/LLM-readable one-paragraph rendering.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = format!(
            "SecureClaw {} `{}` ({}): {}.",
            self.status, self.tool, self.reason, self.message
        );
        if let Some(b) = &self.branch {
            out.push_str(&format!(" Branch: `{b}`."));
        }
        if let Some(l) = &self.limit {
            out.push_str(&format!(" Limit: `{l}`."));
        }
        if let Some(ms) = self.retry_after_ms {
            out.push_str(&format!(" Retry after: {ms} ms."));
        }
        for step in &self.next_steps {
            out.push_str("\n- ");
            out.push_str(step);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_never_include_foreign_text() {
        let r = Recovery::new(
            ReasonCode::PolicyDeny,
            ActionClass::Effect,
            "mail__send_email",
            Some("act_x"),
        );
        let text = r.render();
        assert!(text.contains("policy_deny"));
        assert!(text.contains("save a draft instead"));
        let r = Recovery::new(
            ReasonCode::ConfirmationRequired,
            ActionClass::Effect,
            "t",
            Some("act_abc"),
        );
        assert!(r.render().contains("act_abc"));
        assert_eq!(r.status, "pending_confirmation");
    }

    /// Issue 12: an effect whose outcome is unknown must never be answered with "try again".
    #[test]
    fn outcome_unknown_never_invites_a_retry() {
        let r = Recovery::new(
            ReasonCode::OutcomeUnknown,
            ActionClass::Effect,
            "bank__pay",
            Some("act_x"),
        );
        let text = r.render().to_lowercase();
        assert!(text.contains("outcome_unknown"), "{text}");
        assert!(text.contains("may have run"), "{text}");
        assert!(text.contains("do not repeat"), "{text}");
        assert!(text.contains("ask the user to check"), "{text}");
        for bad in ["try again", "retry", "re-issue", "preview the"] {
            assert!(!text.contains(bad), "`{bad}` in {text}");
        }
        assert_eq!(r.status, "denied");
    }

    /// Red-team F8: repeating a call whose outcome was unknown is a pending confirmation
    /// that tells the user to check first.
    #[test]
    fn outcome_unknown_repeat_is_pending_and_asks_to_check() {
        let r = Recovery::new(
            ReasonCode::OutcomeUnknownRepeat,
            ActionClass::Effect,
            "bank__pay",
            Some("act_r"),
        );
        assert_eq!(r.status, "pending_confirmation");
        let text = r.render();
        assert!(text.contains("outcome_unknown_repeat"), "{text}");
        assert!(text.contains("may already have run"), "{text}");
        assert!(text.contains("act_r"), "{text}");
        assert_eq!(
            serde_json::to_value(ReasonCode::OutcomeUnknownRepeat).ok(),
            Some(serde_json::json!("outcome_unknown_repeat"))
        );
    }

    /// The protected-object template is a pending confirmation, names the action to approve
    /// and warns against respelling the object.
    #[test]
    fn protected_object_is_pending_and_names_the_action() {
        let r = Recovery::new(
            ReasonCode::ProtectedObject,
            ActionClass::Effect,
            "fs__edit_file",
            Some("act_p"),
        );
        assert_eq!(r.status, "pending_confirmation");
        let text = r.render();
        assert!(text.contains("protected_object"), "{text}");
        assert!(text.contains("act_p"), "{text}");
        assert!(text.contains("another spelling"), "{text}");
    }

    #[test]
    fn draft_step_names_the_tool_or_disappears() {
        for reason in [
            ReasonCode::ConfirmationRequired,
            ReasonCode::ProtectedObject,
            ReasonCode::PolicyDeny,
            ReasonCode::HandleSinkForbidden,
        ] {
            let r = Recovery::new(reason, ActionClass::Effect, "mail__send", Some("act_x"));
            assert!(r.render().contains("save a draft instead"), "{reason}");
            let named = r
                .clone()
                .with_draft_tool(Some("office__save_draft"))
                .render();
            assert!(
                named.contains("save a draft instead with office__save_draft"),
                "{named}"
            );
            let none = r.clone().with_draft_tool(None);
            assert!(!none.render().contains("draft"), "{}", none.render());
            // Every other step survives.
            assert_eq!(none.next_steps.len() + 1, r.next_steps.len(), "{reason}");
        }
    }
}
