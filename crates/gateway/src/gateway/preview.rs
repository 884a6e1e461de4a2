//! The write path's first half (SecureClaw paper §3.4; DESIGN.md §3 "Canonicalization and
//! binding"): PREVIEW canonicalizes an effect, asks the policy, enforces at-most-once for
//! effects whose outcome is unknown and the task's limited grants, seals the authorization
//! artifact and records the action (and a pending approval when a human must confirm).

use super::{
    CallOutcome, Deferred, Gateway, Prepared, PreviewDecision, PreviewOutcome, Refused, class,
    display::describe_call, fill_random,
};
use crate::catalog::ToolEntry;
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::{BindingDigest, bind};
use secureclaw_core::keys::KeyId;
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyRequest, Provenance};
use secureclaw_core::recovery::{ActionClass, Limit, ReasonCode, Recovery};
use secureclaw_core::store::{ActionRecord, GroupWrite, SessionRecord};
use secureclaw_core::time::UnixMillis;
use serde_json::{Map, Value, json};

/// What [`Gateway::preview_records`] builds.
struct PreviewRecords {
    action: ActionRecord,
    /// The preview and decision audit records, in that order.
    events: Vec<AuditEvent>,
    /// The reason code of a confirmation, if one is asked for.
    confirm_reason: ReasonCode,
}

impl Gateway {
    /// PREVIEW: canonicalize, decide, seal an artifact, record the action (and a pending
    /// approval when confirmation is needed). Read tools cannot be previewed.
    ///
    /// An allowed or confirmable preview waits until committed, expired (`artifact_ttl_ms`)
    /// or, for an approval, decided and used: a session has at most
    /// `max_pending_per_session` waiting. Rate limits apply as for [`Gateway::call`].
    ///
    /// # Errors
    /// A [`Recovery`] for calls that cannot be previewed at all (unknown tool, invalid
    /// arguments, unavailable handles, store down, a per-session limit reached).
    pub async fn preview(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<PreviewOutcome, Recovery> {
        use tracing::Instrument as _;
        let span = self.call_span("preview", tool);
        let result = async {
            let _admitted = match self.admit_arguments(session, tool, arguments).await {
                Ok(guard) => guard,
                Err(CallOutcome::Denied(refused)) => return Err(refused),
                Err(_) => {
                    let entry = self.inner.catalog.get(tool);
                    return Err(self.recovery(ReasonCode::LimitExceeded, class(entry), tool, None));
                }
            };
            let started = std::time::Instant::now();
            let result = self.preview_throttled(session, tool, arguments).await;
            self.observe_preview(session, tool, &result, started);
            result
        }
        .instrument(span.clone())
        .await;
        Self::record_preview(&span, &result);
        result
    }

    async fn preview_throttled(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<PreviewOutcome, Recovery> {
        if let Some(CallOutcome::Denied(r)) = self.throttle(session, tool).await {
            return Err(r);
        }
        let entry = self.inner.catalog.get(tool);
        let result = match self
            .monitor_explicit(session, tool, arguments.clone())
            .await
        {
            Err(reason) => Err(Refused::Deny(reason)),
            Ok(arguments) => match self.prepare(session, tool, &arguments).await {
                Ok((prepared, _)) if prepared.entry.effect == EffectClass::Read => {
                    Err(Refused::Deny(ReasonCode::PolicyDeny))
                }
                Ok((prepared, policy_request)) => self
                    .preview_prepared(session, &prepared, &policy_request, true)
                    .await
                    .map(|(preview, _)| preview),
                Err(reason) => Err(Refused::Deny(reason)),
            },
        };
        match result {
            Ok(preview) => Ok(preview),
            Err(Refused::Limit(limit)) => {
                match self.refuse_limit(session, tool, limit, None, Some(1)).await {
                    CallOutcome::Denied(r) => Err(r),
                    _ => Err(self.recovery(ReasonCode::LimitExceeded, class(entry), tool, None)),
                }
            }
            Err(Refused::Deny(reason)) => {
                if let CallOutcome::Denied(r) = self.deny(session, tool, entry, reason, None).await
                {
                    Err(r)
                } else {
                    Err(self.recovery(reason, class(entry), tool, None))
                }
            }
        }
    }

    /// [`Gateway::preview_staged`] in its `preview` span.
    pub(super) async fn preview_prepared(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        explicit: bool,
    ) -> Result<(PreviewOutcome, Option<Deferred>), Refused> {
        use tracing::Instrument as _;
        self.preview_staged(session, prepared, policy_request, explicit)
            .instrument(tracing::info_span!("preview"))
            .await
    }

    /// PREVIEW of a prepared request: decide, seal, record.
    async fn preview_staged(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        explicit: bool,
    ) -> Result<(PreviewOutcome, Option<Deferred>), Refused> {
        let _timer = self.inner.metrics.preview_timer();
        let entry = &prepared.entry;
        let policy_span = tracing::info_span!(
            "policy",
            decision = tracing::field::Empty,
            reason = tracing::field::Empty
        );
        let mut decision = policy_span.in_scope(|| self.inner.policy.decide(policy_request));
        let mut grant_withheld = prepared.grant_withheld;
        let binding =
            bind(&self.inner.keys, &prepared.request).map_err(|_| ReasonCode::InvalidArguments)?;
        // At most once (issue 12, red-team F8, R7): an effect of this tool in this session
        // whose outcome is unknown may already have run; any further effect of the tool — the
        // same call respelt (`"INV-42 "`, an extra empty argument) included — needs a human,
        // whatever the policy or a grant says. A failed lookup counts as a repeat (fail
        // closed).
        let unknown_before = self
            .inner
            .store
            .outcome_unknown_tool(&session.id, &entry.exposed)
            .await
            .unwrap_or(true);
        // An identical effect still running (a retry after a client timeout, concurrent
        // copies) may repeat it as well: it waits for the user too. A call that will run at
        // once enters the dispatching set here, so that of concurrent copies one runs.
        let binding_key = super::repeat_key(&prepared.request);
        let mut dispatching = None;
        let running = if explicit {
            super::Dispatching::running(&self.inner.dispatching, &session.id, &binding_key)
        } else {
            dispatching =
                super::Dispatching::enter(&self.inner.dispatching, &session.id, &binding_key);
            dispatching.is_none()
        };
        let repeat = unknown_before || running;
        if repeat && let PolicyDecision::Allow { policies } = &decision {
            decision = PolicyDecision::Confirm {
                policies: policies.clone(),
            };
        }
        // A grant is used when the gateway issues an artifact that needs no human for a
        // destructive or financial effect; when it is used up, the call goes to a human. A
        // financial effect always takes one use per object it pays, also under a grant of any
        // number (`#*`): "any number" means any number of distinct objects, never the same
        // invoice twice (red-team round 3).
        if let (PolicyDecision::Allow { .. }, Some((key, limit))) = (&decision, &prepared.grant)
            && policy_request.granted
            && (entry.destructive || entry.financial)
            && !(self
                .take_object_grant(session, entry, key, &prepared.request.inputs.arguments)
                .await
                && match limit {
                    Some(limit) => self.take_grant(session, key, *limit).await,
                    None => true,
                })
        {
            let mut without = policy_request.clone();
            without.granted = false;
            decision = policy_span.in_scope(|| self.inner.policy.decide(&without));
            grant_withheld = Some("grant_exhausted");
        }
        // A standing grant (issue 15 item 1) stands in for the human's confirmation, and for
        // nothing else: only when the policy asks for one (see `grants`).
        let confirm_policies = match &decision {
            PolicyDecision::Confirm { policies } => Some(policies.clone()),
            _ => None,
        };
        // Only for a call committed in this same request: an explicit preview's artifact
        // would outlive the grant's revocation or expiry until it is committed (red-team F2:
        // five previews taken under a grant were all committed after it was revoked). An
        // explicit preview of such a call goes to a human, as without a grant.
        let mut standing = None;
        if !explicit
            && let Some(policies) = confirm_policies
            && let Some(id) = self
                .standing_grant_for(session, prepared, policy_request, repeat)
                .await
        {
            decision = PolicyDecision::Allow { policies };
            standing = Some(id);
        }
        policy_span.record("decision", PreviewDecision::of(&decision).as_str());
        if let PolicyDecision::Deny { reason, .. } = &decision {
            policy_span.record("reason", reason.as_str());
        }
        drop(policy_span);
        let now = self.now();
        let action_id = ActionId::generate(&mut fill_random);
        let label = PreviewDecision::of(&decision);
        let (artifact_decision, needs_confirmation) = match label {
            PreviewDecision::Allow => (ArtifactDecision::Allow, false),
            PreviewDecision::Confirm => (ArtifactDecision::Allow, true),
            PreviewDecision::Deny => (ArtifactDecision::Deny, false),
        };
        let allowed = matches!(artifact_decision, ArtifactDecision::Allow);
        let artifact = AuthorizationArtifact {
            version: ARTIFACT_VERSION,
            action_id: action_id.clone(),
            binding: binding.clone(),
            policy_digest: prepared.request.ctx.policy_digest.clone(),
            decision: artifact_decision,
            needs_confirmation,
            issued_at: now,
            not_after: now.plus_millis(self.inner.config.limits.artifact_ttl_ms),
            kid: KeyId(String::new()),
        }
        .seal(&self.inner.keys)
        .map_err(|_| ReasonCode::Internal)?;
        // An action that will wait (an explicit preview to commit later, or an approval)
        // takes one of the session's slots before anything is stored; an ordinary call the
        // policy allows is committed at once and waits for nothing.
        let waits = allowed && (needs_confirmation || explicit);
        if waits {
            let expires = (!needs_confirmation)
                .then(|| now.plus_millis(self.inner.config.limits.artifact_ttl_ms));
            if !self.take_pending(session, &action_id, expires).await {
                return Err(Refused::Limit(Limit::PendingActions));
            }
        }
        // An ordinary call the policy allows at once is committed next: its records are
        // written with the reservation, in one transaction (issue 14 item 2).
        if !explicit && label == PreviewDecision::Allow {
            let records = self.preview_records(
                session,
                prepared,
                policy_request,
                &decision,
                &action_id,
                &binding,
                now,
                grant_withheld,
                repeat,
                standing.as_deref(),
            );
            let deferred = Deferred {
                action: records.action,
                events: records.events,
                dispatching,
            };
            let preview = PreviewOutcome {
                action_id,
                artifact,
                decision: label,
                binding,
                recovery: None,
            };
            return Ok((preview, Some(deferred)));
        }
        let stored = self
            .store_preview(
                session,
                prepared,
                policy_request,
                &decision,
                &action_id,
                &binding,
                now,
                grant_withheld,
                repeat,
                standing.as_deref(),
            )
            .await;
        let recovery = match stored {
            Ok(r) => r,
            Err(reason) => {
                if waits {
                    self.inner.pending.release(&session.id, &action_id);
                }
                return Err(reason.into());
            }
        };
        Ok((
            PreviewOutcome {
                action_id,
                artifact,
                decision: label,
                binding,
                recovery,
            },
            None,
        ))
    }

    /// Write the records of a [`Deferred`] preview on their own (the commit was refused before
    /// its reservation could write them).
    async fn store_deferred(&self, deferred: Deferred) -> Result<(), ReasonCode> {
        self.store_records(deferred.action, deferred.events).await
    }

    /// The action record and its audit records, in one write of a group commit.
    async fn store_records(
        &self,
        action: ActionRecord,
        events: Vec<AuditEvent>,
    ) -> Result<(), ReasonCode> {
        let mut writes = Vec::with_capacity(events.len().saturating_add(1));
        writes.push(GroupWrite::Action(action));
        writes.extend(events.into_iter().map(GroupWrite::Audit));
        self.inner
            .writer
            .write(writes)
            .await
            .map(|_| ())
            .map_err(|e| {
                self.inner.metrics.audit_append_failed();
                tracing::error!(error = %e, "preview records not written");
                ReasonCode::StoreUnavailable
            })
    }

    /// A commit refused before anything ran: the deferred preview's records (if any) first,
    /// then the refusal.
    pub(super) async fn refuse_commit(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        reason: ReasonCode,
        action_id: &ActionId,
        deferred: Option<Deferred>,
    ) -> CallOutcome {
        if let Some(d) = deferred
            && self.store_deferred(d).await.is_err()
        {
            tracing::error!(action = %action_id, "could not record the preview of a refused commit");
        }
        self.deny(
            session,
            &entry.exposed,
            Some(entry),
            reason,
            Some(action_id),
        )
        .await
    }

    /// The action record and the preview and decision audit records of a preview.
    #[expect(clippy::too_many_arguments, reason = "the preview's full context")]
    fn preview_records(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        decision: &PolicyDecision,
        action_id: &ActionId,
        binding: &BindingDigest,
        now: UnixMillis,
        grant_withheld: Option<&'static str>,
        repeat: bool,
        standing: Option<&str>,
    ) -> PreviewRecords {
        let entry = &prepared.entry;
        let label = PreviewDecision::of(decision);
        let (needs_confirmation, policies, deny_reason) = match decision {
            PolicyDecision::Allow { policies } => (false, policies, None),
            PolicyDecision::Confirm { policies } => (true, policies, None),
            PolicyDecision::Deny { reason, policies } => (false, policies, Some(*reason)),
        };
        let mut display = describe_call(
            entry,
            &prepared.request.inputs.arguments,
            &policy_request.targets,
        );
        if let Some(why) = grant_withheld {
            display.push_str(&format!("\n  grant: does not cover this call ({why})"));
        }
        if let Some(grant) = standing {
            display.push_str(&format!("\n  confirmed by standing grant {grant}"));
        }
        if repeat {
            display.push_str(
                "\n  outcome_unknown_repeat: an identical call may already have run (its outcome is unknown); the user must check before approving",
            );
        }
        let action = ActionRecord {
            action_id: action_id.clone(),
            session: session.id.clone(),
            caller: session.caller.clone(),
            tool: entry.exposed.clone(),
            binding: binding.clone(),
            needs_confirmation,
            created_at: now,
            request_json: serde_json::to_string(&prepared.request).unwrap_or_default(),
            display,
        };
        let mut preview = self.event(AuditKind::Preview, session, &entry.exposed);
        preview.action_id = Some(action_id.0.clone());
        preview.detail = json!({"binding": binding, "handles": prepared.handle_records.len(),
            "effect": entry.effect, "destructive": entry.destructive});
        // A confirmation asked for because the call names a protected object gets its own
        // reason code, in the decision record and in the recovery.
        let names = |p: Provenance| policy_request.targets.iter().any(|t| t.provenance == p);
        let confirm_reason = if repeat {
            ReasonCode::OutcomeUnknownRepeat
        } else if names(Provenance::ProtectedObject) {
            ReasonCode::ProtectedObject
        } else if names(Provenance::UnreadObject) {
            ReasonCode::ObjectUnread
        } else {
            ReasonCode::ConfirmationRequired
        };
        let mut decided = self.event(AuditKind::Decision, session, &entry.exposed);
        decided.action_id = Some(action_id.0.clone());
        decided.reason = deny_reason.or(needs_confirmation.then_some(confirm_reason));
        decided.detail = json!({"decision": label, "policies": policies,
            "targets": policy_request.targets, "handle_sink_violation": policy_request.handle_sink_violation(),
            "grant_withheld": grant_withheld, "confirmation": standing.map(|g| json!({"standing_grant": g}))});
        let mut events = vec![preview, decided];
        if let Some(grant) = standing {
            let mut used = self.event(AuditKind::Grant, session, &entry.exposed);
            used.action_id = Some(action_id.0.clone());
            used.detail = json!({"event": "used", "grant": grant});
            events.push(used);
        }
        PreviewRecords {
            action,
            events,
            confirm_reason,
        }
    }

    /// Record a preview: the action, its audit records (preview and decision) and, when
    /// confirmation is needed, a pending approval. Returns the recovery to show, if any.
    #[expect(clippy::too_many_arguments, reason = "the preview's full context")]
    async fn store_preview(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        decision: &PolicyDecision,
        action_id: &ActionId,
        binding: &BindingDigest,
        now: UnixMillis,
        grant_withheld: Option<&'static str>,
        repeat: bool,
        standing: Option<&str>,
    ) -> Result<Option<Recovery>, ReasonCode> {
        let entry = &prepared.entry;
        let needs_confirmation = matches!(decision, PolicyDecision::Confirm { .. });
        let records = self.preview_records(
            session,
            prepared,
            policy_request,
            decision,
            action_id,
            binding,
            now,
            grant_withheld,
            repeat,
            standing,
        );
        let confirm_reason = records.confirm_reason;
        self.store_records(records.action, records.events).await?;
        let recovery = match (decision, needs_confirmation) {
            (PolicyDecision::Deny { reason, .. }, _) => Some(self.recovery(
                *reason,
                ActionClass::Effect,
                &entry.exposed,
                Some(&action_id.0),
            )),
            (_, true) => {
                self.inner
                    .store
                    .create_approval(action_id, now)
                    .await
                    .map_err(|_| ReasonCode::StoreUnavailable)?;
                Some(self.recovery(
                    confirm_reason,
                    ActionClass::Effect,
                    &entry.exposed,
                    Some(&action_id.0),
                ))
            }
            _ => None,
        };
        Ok(recovery)
    }
}
