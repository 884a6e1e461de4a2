//! The write path's second half (SecureClaw paper §3.4; DESIGN.md §3 "Single use and crash
//! safety"): COMMIT rebuilds the canonical request, records what the effect will protect,
//! write or release, runs the acceptance predicate (whose check 11 reserves the action id in
//! the single-use ledger, together with a deferred preview's records: issue 14 item 2), hands
//! the proof to the executor, and records the outcome; and the re-issue of an approved call.

use super::{CallOutcome, Deferred, Gateway, Prepared, group, state::ObjectMark};
use crate::catalog::ToolEntry;
use crate::upstream::ToolOutput;
use secureclaw_core::acceptance::{
    CommitAttempt, LedgerError, SingleUseLedger, accept, check_binding,
};
use secureclaw_core::anchor::collect_targets;
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::audit::AuditKind;
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::canonical::CanonicalRequest;
use secureclaw_core::confirmation::Confirmation;
use secureclaw_core::handle::{HandleId, HandleRecord, SinkKind, find_handles};
use secureclaw_core::keys::KeyId;
use secureclaw_core::policy::EffectClass;
use secureclaw_core::recovery::{ActionClass, ReasonCode};
use secureclaw_core::store::{ApprovalState, GroupWrite, SessionRecord, StoreError};
use secureclaw_core::time::UnixMillis;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The single-use ledger of the acceptance predicate for a [`Deferred`] preview: the
/// reservation (check 11) writes the preview's records in the same transaction, so an effect
/// costs one durable write before it is dispatched, and that write is group-committed with
/// other callers' (the same writes as
/// [`EffectStore::record_and_reserve`](secureclaw_core::store::EffectStore::record_and_reserve),
/// batched). `Ok(true)` only once the transaction holding the reservation committed. Any
/// failure (the id taken, the store down, another action id) is an error: the predicate fails
/// closed and nothing is dispatched.
struct PreEffect<'a> {
    writer: &'a group::GroupWriter,
    deferred: &'a Deferred,
}

#[async_trait::async_trait]
impl SingleUseLedger for PreEffect<'_> {
    async fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        if action_id != &self.deferred.action.action_id {
            return Err(LedgerError("not the deferred action".into()));
        }
        let mut writes = Vec::with_capacity(self.deferred.events.len().saturating_add(2));
        writes.push(GroupWrite::Action(self.deferred.action.clone()));
        writes.extend(self.deferred.events.iter().cloned().map(GroupWrite::Audit));
        writes.push(GroupWrite::Reserve {
            id: action_id.clone(),
            binding: binding.clone(),
            at,
        });
        self.writer
            .write(writes)
            .await
            .map(|_| true)
            .map_err(|e| LedgerError(e.to_string()))
    }
}

/// The single-use ledger of the acceptance predicate for an explicit commit (issue 14 item
/// 3): the reservation is queued through the group writer, so the reservations of concurrent
/// commits share one transaction and one fsync. `Ok(true)` only once the transaction holding
/// it committed. A reservation refused because the ledger already holds the id (an earlier or
/// concurrent commit of the same action, on this gateway or another replica) is `Ok(false)`,
/// which the predicate answers with `replay`, as a single-statement
/// [`SingleUseLedger::reserve`] would: the group writer retries a failed group's jobs alone,
/// and a job that is nothing but this reservation can only conflict on its ledger key. Any
/// other failure is an error (fail closed: nothing is dispatched).
struct GroupedReservation<'a> {
    writer: &'a group::GroupWriter,
}

#[async_trait::async_trait]
impl SingleUseLedger for GroupedReservation<'_> {
    async fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        let write = GroupWrite::Reserve {
            id: action_id.clone(),
            binding: binding.clone(),
            at,
        };
        match self.writer.write(vec![write]).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(LedgerError(e.to_string())),
        }
    }
}

/// Whether `arguments` carry a handle anywhere but as the whole value of a target field: in
/// content (a file's text, an edit's replacement), where the executor resolves it into the
/// object written. A handle that is exactly a target's value names a record or a destination.
fn content_handles(arguments: &Map<String, Value>, fields: &[String]) -> bool {
    let all = find_handles(&Value::Object(arguments.clone()));
    if all.is_empty() {
        return false;
    }
    let named = collect_targets(arguments, fields, false)
        .into_iter()
        .filter(|t| t.origin == secureclaw_core::anchor::TargetOrigin::NamedField)
        .filter(|t| {
            matches!(find_handles(&Value::String(t.value.clone())).as_slice(),
                [(_, id)] if id.0 == t.value.trim())
        })
        .count();
    all.len() > named
}

/// SHA-256 over the result's JSON (structured content and blocks), hex.
fn result_digest(output: &ToolOutput) -> String {
    let v = json!({"content": output.content, "structured": output.structured, "is_error": output.is_error});
    hex::encode(Sha256::digest(
        serde_json_canonicalizer::to_vec(&v).unwrap_or_default(),
    ))
}

impl Gateway {
    /// COMMIT (explicit two-phase mode): rebuild the canonical request from `arguments`, run
    /// the acceptance predicate against `artifact`, and execute.
    ///
    /// Cancellation-safe like [`Gateway::call`]: the commit runs on its own task.
    pub async fn commit(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        action_id: &ActionId,
        artifact: Option<&str>,
    ) -> CallOutcome {
        use tracing::Instrument as _;
        let span = self.call_span("commit", tool);
        let outcome = async {
            let admitted = match self.admit_arguments(session, tool, &arguments).await {
                Ok(guard) => guard,
                Err(refused) => return refused,
            };
            let (gw, session, name, action_id, artifact) = (
                self.clone(),
                session.clone(),
                tool.to_owned(),
                action_id.clone(),
                artifact.map(str::to_owned),
            );
            self.detached(
                async move {
                    let outcome = gw
                        .commit_attached(
                            &session,
                            &name,
                            arguments,
                            &action_id,
                            artifact.as_deref(),
                        )
                        .await;
                    drop(admitted);
                    outcome
                },
                || Self::task_failed(tool),
            )
            .await
        }
        .instrument(span.clone())
        .await;
        Self::record_outcome(&span, &outcome);
        outcome
    }

    /// [`Gateway::commit`] on the caller's task.
    async fn commit_attached(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        action_id: &ActionId,
        artifact: Option<&str>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let outcome = self
            .commit_throttled(session, tool, arguments, action_id, artifact)
            .await;
        self.observe_call(session, tool, &outcome, started);
        outcome
    }

    async fn commit_throttled(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        action_id: &ActionId,
        artifact: Option<&str>,
    ) -> CallOutcome {
        if let Some(refused) = self.throttle(session, tool).await {
            return refused;
        }
        let arguments = match self.monitor_explicit(session, tool, arguments).await {
            Ok(arguments) => arguments,
            Err(reason) => {
                let entry = self.inner.catalog.get(tool);
                return self
                    .deny(session, tool, entry, reason, Some(action_id))
                    .await;
            }
        };
        match self.prepare(session, tool, &arguments).await {
            Ok((prepared, _)) => {
                self.commit_prepared(session, prepared, action_id, artifact, None)
                    .await
            }
            Err(reason) => {
                self.deny(
                    session,
                    tool,
                    self.inner.catalog.get(tool),
                    reason,
                    Some(action_id),
                )
                .await
            }
        }
    }

    pub(super) async fn commit_prepared(
        &self,
        session: &SessionRecord,
        prepared: Prepared,
        action_id: &ActionId,
        artifact: Option<&str>,
        mut deferred: Option<Deferred>,
    ) -> CallOutcome {
        let _timer = self.inner.metrics.commit_timer();
        let entry = prepared.entry;
        if entry.effect == EffectClass::Read {
            return self
                .refuse_commit(
                    session,
                    &entry,
                    ReasonCode::PolicyDeny,
                    action_id,
                    deferred.take(),
                )
                .await;
        }
        // The confirmation comes from the trusted approval store, never from the runtime. A
        // deferred preview was allowed without confirmation a moment ago and its action id is
        // not stored yet: it has no approval to look up.
        let confirmation: Option<Confirmation> = match deferred {
            Some(_) => None,
            None => match self.inner.store.approval(action_id).await {
                Ok(Some(a)) if a.state == ApprovalState::Approved => a.confirmation,
                Ok(_) => None,
                Err(_) => {
                    return self
                        .deny(
                            session,
                            &entry.exposed,
                            Some(&entry),
                            ReasonCode::StoreUnavailable,
                            Some(action_id),
                        )
                        .await;
                }
            },
        };
        // Before anything is reserved or sent: a store effect on a protected object makes every
        // object it names protected (a move's destination, a copy), and so does one that
        // carries a handle in its content (the value lands in the object in clear). Recorded
        // before dispatch, since an effect whose outcome is unknown may have happened; if it
        // cannot be recorded, nothing runs.
        if entry.sink == SinkKind::Store && prepared.protection_unknown {
            return self
                .refuse_commit(
                    session,
                    &entry,
                    ReasonCode::StoreUnavailable,
                    action_id,
                    deferred.take(),
                )
                .await;
        }
        let records: BTreeMap<HandleId, HandleRecord> = prepared
            .handle_records
            .iter()
            .map(|r| (r.id.clone(), r.clone()))
            .collect();
        // A store effect naming several objects (a move, a copy) carries content from one to
        // another: every object it names becomes protected, so content moved onto a name the
        // session had seen is never taken for what it saw (red-team F2).
        let protects = entry.sink == SinkKind::Store
            && (prepared.names_protected
                || content_handles(&prepared.request.inputs.arguments, &entry.targets)
                || self
                    .object_identifiers(
                        &entry,
                        entry.matches_content,
                        &prepared.request.inputs.arguments,
                        &records,
                    )
                    .await
                    .iter()
                    // Objects a move or copy carries content between are named by paths or
                    // URIs; the parts of a postal address in a record update are not.
                    .filter(|(_, values)| values.iter().any(|v| v.contains('/')))
                    .count()
                    > 1);
        if protects
            && self
                .mark(
                    ObjectMark::Protected,
                    session,
                    &entry,
                    &prepared.request.inputs.arguments,
                    &records,
                )
                .await
                .is_err()
        {
            return self
                .refuse_commit(
                    session,
                    &entry,
                    ReasonCode::StoreUnavailable,
                    action_id,
                    deferred.take(),
                )
                .await;
        }
        let current_policy = self.inner.policy.digest();
        let attempt = CommitAttempt {
            artifact,
            action_id,
            request: &prepared.request,
            current_policy_digest: &current_policy,
            confirmation: confirmation.as_ref(),
            now: self.now(),
            max_skew_ms: self.inner.config.limits.max_skew_ms,
            max_confirmation_age_ms: self.inner.config.limits.confirmation_ttl_ms,
        };
        // Check 11 reserves the action id; for a deferred preview the same transaction writes
        // the action and its preview and decision records: one durable write before dispatch.
        use tracing::Instrument as _;
        let accept_span = tracing::info_span!("accept", outcome = tracing::field::Empty);
        let accepted = match deferred.as_ref() {
            Some(d) => {
                let ledger = PreEffect {
                    writer: &self.inner.writer,
                    deferred: d,
                };
                accept(&self.inner.keys, &ledger, &attempt)
                    .instrument(accept_span.clone())
                    .await
            }
            None => {
                let ledger = GroupedReservation {
                    writer: &self.inner.writer,
                };
                accept(&self.inner.keys, &ledger, &attempt)
                    .instrument(accept_span.clone())
                    .await
            }
        };
        accept_span.record(
            "outcome",
            accepted
                .as_ref()
                .map_or_else(|r| r.reason.as_str(), |_| "accepted"),
        );
        let proof = match accepted {
            Ok(p) => p,
            Err(rejection) => {
                // Refused: the reservation did not happen, so neither did the deferred writes.
                return self
                    .refuse_commit(
                        session,
                        &entry,
                        rejection.reason,
                        action_id,
                        deferred.take(),
                    )
                    .await;
            }
        };
        // The action is spent (the ledger marked it): it no longer waits.
        self.inner.pending.release(&session.id, action_id);
        let binding = proof.binding().clone();
        // An explicit commit's preview was issued earlier: what happened since is checked
        // again, now that this action is reserved (a second commit of it was `replay`). An
        // effect of this tool whose outcome became unknown, or an identical effect still
        // running, means this one may repeat it (red-team round 3: a second artifact of the
        // same call ran after the first ended `outcome_unknown`). The action is then spent
        // without running (`failed`). A call that runs at once entered the dispatching set at
        // its preview; a confirmed commit was decided by a human shown the unknown outcome.
        let _dispatching = if deferred.is_none() && confirmation.is_none() {
            let unknown = self
                .inner
                .store
                .outcome_unknown_tool(&session.id, &entry.exposed)
                .await
                .unwrap_or(true);
            let entered = super::Dispatching::enter(
                &self.inner.dispatching,
                &session.id,
                &super::repeat_key(&prepared.request),
            );
            if unknown || entered.is_none() {
                let reason = ReasonCode::OutcomeUnknownSincePreview;
                return self.spend_unrun(session, &entry, action_id, reason).await;
            }
            entered
        } else {
            None
        };
        // What is written is what the executor sends: the bound canonical form. If the store
        // cannot record it, nothing is sent (the action is spent: `failed`).
        let arguments = &proof.request().inputs.arguments;
        let noted = if entry.sink == SinkKind::Store {
            self.note_written(session, &entry, arguments).await
        } else {
            self.note_released(session, arguments).await
        };
        if noted.is_err() {
            return self
                .spend_unrun(session, &entry, action_id, ReasonCode::StoreUnavailable)
                .await;
        }
        let (mut resolver, pairs) = self
            .resolve_handles(
                session,
                &entry,
                Some(action_id),
                &proof.request().inputs.arguments,
            )
            .await;
        let mut resolve = |id: &HandleId| resolver.next(id);
        let runtime_args = proof.request().inputs.arguments.clone();
        let result = self.inner.executor.commit(proof, &mut resolve).await;
        match result {
            Ok(output) => {
                let digest = result_digest(&output);
                // The commit record and the `executed` mark are one write of a group commit
                // (one transaction) that the caller does not wait for (issue 14 item 2: no
                // durable write after the effect on the caller's path). The reservation made
                // before the effect is durable, so the effect can never run twice; if this
                // write is lost (a crash, a store failure) the entry stays `reserved`, which the
                // next start reports as `crash_recovery` with the action's record, so no effect
                // goes unreported (README "What survives a crash").
                let mut ev = self.event(AuditKind::Commit, session, &entry.exposed);
                ev.action_id = Some(action_id.0.clone());
                ev.detail = json!({"binding": binding, "result_digest": digest, "is_error": output.is_error});
                let executed = GroupWrite::Executed {
                    id: action_id.clone(),
                    result_digest: digest,
                    at: self.now(),
                };
                self.write_later(vec![GroupWrite::Audit(ev), executed])
                    .await;
                // A store effect marks nothing seen: an append, a partial write or a write
                // under another spelling leaves content the session has not been shown (a
                // later content-matching edit reads the object first).
                self.finish(
                    session,
                    &entry,
                    None,
                    output,
                    Some(action_id.clone()),
                    &pairs,
                    &runtime_args,
                )
                .await
            }
            Err(err) if err.outcome_unknown() => {
                // Dispatched, no outcome: recorded (audit first, then the ledger, as for a
                // commit) and never retried. If the ledger update fails the entry stays
                // `reserved` and the next start reports it.
                let mut ev = self.event(AuditKind::OutcomeUnknown, session, &entry.exposed);
                ev.action_id = Some(action_id.0.clone());
                ev.detail = json!({"binding": binding, "error": err.class()});
                let marked = GroupWrite::OutcomeUnknown {
                    id: action_id.clone(),
                    reason: err.class().to_owned(),
                    at: self.now(),
                };
                let recorded = match self
                    .inner
                    .writer
                    .write(vec![GroupWrite::Audit(ev), marked.clone()])
                    .await
                {
                    Ok(done) => done.unchanged.is_empty(),
                    // As before: the mark does not depend on the audit record being written.
                    Err(_) => {
                        self.inner.metrics.audit_append_failed();
                        self.inner
                            .writer
                            .write(vec![marked])
                            .await
                            .is_ok_and(|done| done.unchanged.is_empty())
                    }
                };
                if !recorded {
                    tracing::error!(action = %action_id, "could not mark outcome_unknown; entry stays reserved and will be reported");
                }
                self.exec_failure(session, &entry, &err, Some(action_id))
                    .await
            }
            Err(err) => {
                let _ = self
                    .inner
                    .store
                    .mark_failed(action_id, err.class(), self.now())
                    .await;
                self.exec_failure(session, &entry, &err, Some(action_id))
                    .await
            }
        }
    }

    /// Spend a reserved action without running it: the ledger records it `failed` with
    /// `reason` (best effort: a reservation the store cannot mark stays `reserved` and is
    /// reported at the next start), and the runtime is denied for `reason`. Nothing was sent.
    async fn spend_unrun(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        action_id: &ActionId,
        reason: ReasonCode,
    ) -> CallOutcome {
        let _ = self
            .inner
            .store
            .mark_failed(action_id, reason.as_str(), self.now())
            .await;
        self.deny(
            session,
            &entry.exposed,
            Some(entry),
            reason,
            Some(action_id),
        )
        .await
    }

    /// Re-issue of a call the user approved: the artifact is re-sealed for the approved
    /// binding with a fresh freshness window (a slow human must not expire it), and the
    /// acceptance predicate then checks that the re-issued call is exactly that request.
    pub(super) async fn commit_approved(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        action_id: &ActionId,
    ) -> CallOutcome {
        let entry = self.inner.catalog.get(tool);
        let (action, approval) = match (
            self.inner.store.action(action_id).await,
            self.inner.store.approval(action_id).await,
        ) {
            (Ok(Some(a)), Ok(Some(p))) => (a, p),
            (Ok(_), Ok(_)) => {
                return self
                    .deny(
                        session,
                        tool,
                        entry,
                        ReasonCode::ConfirmationInvalid,
                        Some(action_id),
                    )
                    .await;
            }
            _ => {
                return self
                    .deny(
                        session,
                        tool,
                        entry,
                        ReasonCode::StoreUnavailable,
                        Some(action_id),
                    )
                    .await;
            }
        };
        // An approval belongs to the session that asked for it: presented by another one (a
        // restarted client), it is refused with its own reason, so the runtime asks again
        // instead of "previewing the exact call again" forever.
        if action.session != session.id {
            return self
                .deny(
                    session,
                    tool,
                    entry,
                    ReasonCode::ApprovalSessionMismatch,
                    None,
                )
                .await;
        }
        // The re-issued call must be exactly the approved one — checked before anything else,
        // so that an approval id cannot be attached to a different call (not even to obtain a
        // "pending" answer naming the approval).
        let Ok(original) = serde_json::from_str::<CanonicalRequest>(&action.request_json) else {
            return self
                .deny(session, tool, entry, ReasonCode::Internal, Some(action_id))
                .await;
        };
        let (prepared, _) = match self.prepare(session, tool, &arguments).await {
            Ok(p) => p,
            Err(reason) => {
                return self
                    .deny(session, tool, entry, reason, Some(action_id))
                    .await;
            }
        };
        // The acceptance predicate's own binding check (check 6), run first here; the
        // re-issued call then goes through the whole predicate in `commit_prepared`.
        if let Err(rejection) = check_binding(
            &self.inner.keys,
            &action.binding,
            &original.ctx.policy_digest,
            &prepared.request,
        ) {
            return self
                .deny(session, tool, entry, rejection.reason, Some(action_id))
                .await;
        }
        match approval.state {
            ApprovalState::Pending => {
                return CallOutcome::Pending(self.recovery(
                    ReasonCode::ConfirmationRequired,
                    ActionClass::Effect,
                    tool,
                    Some(&action_id.0),
                ));
            }
            ApprovalState::Denied => {
                return self
                    .deny(
                        session,
                        tool,
                        entry,
                        ReasonCode::ConfirmationDenied,
                        Some(action_id),
                    )
                    .await;
            }
            ApprovalState::Approved => {}
        }
        let now = self.now();
        let artifact = AuthorizationArtifact {
            version: ARTIFACT_VERSION,
            action_id: action_id.clone(),
            binding: action.binding.clone(),
            policy_digest: original.ctx.policy_digest.clone(),
            decision: ArtifactDecision::Allow,
            needs_confirmation: true,
            issued_at: now,
            not_after: now.plus_millis(self.inner.config.limits.artifact_ttl_ms),
            kid: KeyId(String::new()),
        }
        .seal(&self.inner.keys);
        match artifact {
            Ok(token) => {
                self.commit_prepared(session, prepared, action_id, Some(&token), None)
                    .await
            }
            Err(_) => {
                self.deny(session, tool, entry, ReasonCode::Internal, Some(action_id))
                    .await
            }
        }
    }
}
