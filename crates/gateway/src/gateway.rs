//! The gateway proper: sessions, read path, write path and operator operations.

use crate::catalog::{Catalog, ToolEntry};
use crate::config::GatewayConfig;
use crate::executor::{ExecError, Executor};
use crate::upstream::{Connector, ToolOutput};
use display::describe_call;
use secureclaw_core::acceptance::{
    CommitAttempt, LedgerError, SingleUseLedger, accept, check_binding,
};
use secureclaw_core::anchor::collect_targets;
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::{BindingDigest, bind};
use secureclaw_core::canonical::CanonicalRequest;
use secureclaw_core::classify::Classifier;
use secureclaw_core::confirmation::Confirmation;
use secureclaw_core::handle::{HandleDenial, HandleId, HandleRecord, SinkKind, find_handles};
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::policy::{
    EffectClass, PolicyDecision, PolicyEngine, PolicyRequest, Provenance,
};
use secureclaw_core::recovery::{ActionClass, Limit, ReasonCode, Recovery};
use secureclaw_core::store::{ActionRecord, ApprovalState, GroupWrite, SessionRecord, Store};
use secureclaw_core::time::UnixMillis;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use state::ObjectMark;
use state::WrittenCache;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod amounts;
pub mod approvals;
mod audit;
mod display;
mod group;
mod limits;
mod read;
mod sessions;
mod speculation;
mod state;
mod targets;
mod telemetry;
pub use approvals::decide_approval;
pub use audit::audit_session_id;
pub use display::{describe_handles, reveal_for_approver};
pub use speculation::{
    ABANDON_TOOL, CallMeta, META_APPROVAL, META_BRANCH, META_CONFIDENCE, META_MODE, PROMOTE_TOOL,
    Released, session_exposure, session_trace, valid_branch,
};
pub(crate) use telemetry::UpstreamLatency;

/// Source of the current time (injected so tests can move it).
pub type Clock = Arc<dyn Fn() -> UnixMillis + Send + Sync>;

/// The system clock.
#[must_use]
pub fn system_clock() -> Clock {
    Arc::new(|| {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        UnixMillis(ms)
    })
}

/// Errors of operator operations and start-up (tool calls never return `Err`: they return a
/// [`CallOutcome`] with a recovery).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// An upstream failed at start-up.
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// The store failed.
    #[error("store unavailable: {0}")]
    Store(String),
    /// Not found.
    #[error("`{0}` not found")]
    NotFound(String),
    /// A state conflict (approval already decided, …).
    #[error("{0}")]
    Conflict(String),
    /// Keys are missing.
    #[error("key ring: {0}")]
    Keys(String),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The tool catalog cannot be built (colliding or confusable names, invalid upstream id).
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
}

/// Result of a tool call as the runtime sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran; the output is declassified.
    Completed {
        /// Declassified output.
        output: ToolOutput,
        /// Action id for effectful calls.
        action_id: Option<ActionId>,
    },
    /// Waiting for a trusted confirmation; the recovery names the action id.
    Pending(Recovery),
    /// Denied, with a recovery.
    Denied(Recovery),
    /// A pre-commit call held by the privacy contract until its branch is promoted (then it
    /// runs as committed) or abandoned (then it is discarded unsent); the recovery names the
    /// branch. Nothing was sent.
    Deferred(Recovery),
    /// A pre-commit call answered by the trusted local substitute (SHADOW): the provider saw
    /// nothing; the output is not the provider's answer.
    Shadowed {
        /// The substitute's (declassified) output.
        output: ToolOutput,
    },
}

impl CallOutcome {
    /// JSON form for the wire:
    /// `{"status":"completed","content":[…],"structured_content":…,"is_error":…,"action_id":…}`,
    /// `{"status":"shadowed",…same fields…}`, or `{"status":"pending_confirmation"|"denied"|
    /// "deferred","recovery":{…}}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            CallOutcome::Completed { output, action_id } => json!({
                "status": "completed",
                "content": output.content,
                "structured_content": output.structured,
                "is_error": output.is_error,
                "action_id": action_id,
            }),
            CallOutcome::Shadowed { output } => json!({
                "status": "shadowed",
                "content": output.content,
                "structured_content": output.structured,
                "is_error": output.is_error,
            }),
            CallOutcome::Pending(r) => json!({"status": "pending_confirmation", "recovery": r}),
            CallOutcome::Denied(r) => json!({"status": "denied", "recovery": r}),
            CallOutcome::Deferred(r) => json!({"status": "deferred", "recovery": r}),
        }
    }
}

/// Result of an explicit preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviewOutcome {
    /// The action id to commit.
    pub action_id: ActionId,
    /// The sealed authorization artifact (also issued for denials; it authorizes nothing).
    pub artifact: String,
    /// `allow`, `confirm` or `deny`.
    pub decision: PreviewDecision,
    /// Binding digest of the canonical request.
    pub binding: BindingDigest,
    /// Recovery for `confirm` and `deny`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// The policy's answer to a preview, as the runtime sees it (serialized `allow`, `confirm`,
/// `deny`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviewDecision {
    /// The artifact authorizes the commit as is.
    Allow,
    /// The artifact authorizes the commit once a trusted confirmer approves it.
    Confirm,
    /// The artifact authorizes nothing; the recovery says why.
    Deny,
}

impl PreviewDecision {
    /// The decision a policy answer gives.
    #[must_use]
    pub fn of(decision: &PolicyDecision) -> Self {
        match decision {
            PolicyDecision::Allow { .. } => Self::Allow,
            PolicyDecision::Confirm { .. } => Self::Confirm,
            PolicyDecision::Deny { .. } => Self::Deny,
        }
    }

    /// `allow`, `confirm` or `deny` (the wire and audit form).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Confirm => "confirm",
            Self::Deny => "deny",
        }
    }
}

impl std::fmt::Display for PreviewDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a preview was not issued: a reason to deny with, or a per-session limit.
#[derive(Debug, Clone, Copy)]
enum Refused {
    Deny(ReasonCode),
    Limit(Limit),
}

impl From<ReasonCode> for Refused {
    fn from(reason: ReasonCode) -> Self {
        Refused::Deny(reason)
    }
}

/// Everything a preview computed, for the commit that may follow in the same call.
struct Prepared {
    entry: ToolEntry,
    request: CanonicalRequest,
    handle_records: Vec<HandleRecord>,
    /// The task's grant this call would use: its key (the grant entry) and how many
    /// unconfirmed uses it allows (`None`: unlimited).
    grant: Option<(String, Option<u64>)>,
    /// Why a grant that names this tool does not cover this call (shown to the approver and
    /// recorded with the decision): `grant_exhausted`, `amount_unanchored`,
    /// `amount_over_ceiling`.
    grant_withheld: Option<&'static str>,
    /// A store effect naming a protected object (or the lookup failed: fail closed). Its
    /// objects are all recorded protected before it runs (protection spreads to a move's
    /// destination, a copy, …).
    names_protected: bool,
    /// The protected-object lookup failed for some object of a store effect: the call is held
    /// at preview and refused (`store_unavailable`) at commit, and nothing is recorded.
    protection_unknown: bool,
}

/// The records of a preview that the policy allowed at once, written together with the
/// reservation ([`secureclaw_core::store::EffectStore::record_and_reserve`], issue 14 item 2):
/// the action record and its preview and decision audit records. If the commit is refused
/// before the reservation, they are written on their own before the refusal is audited.
struct Deferred {
    action: ActionRecord,
    events: Vec<AuditEvent>,
}

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

/// What [`Gateway::preview_records`] builds.
struct PreviewRecords {
    action: ActionRecord,
    /// The preview and decision audit records, in that order.
    events: Vec<AuditEvent>,
    /// The reason code of a confirmation, if one is asked for.
    confirm_reason: ReasonCode,
}

/// The gateway. Cheap to clone (shared state behind an `Arc`).
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Arc<KeyRing>,
    store: Arc<dyn Store>,
    policy: Arc<dyn PolicyEngine>,
    config: GatewayConfig,
    classifier: Classifier,
    clock: Clock,
    catalog: Catalog,
    executor: Executor,
    speculation: speculation::Speculation,
    /// Actions each session has waiting (`max_pending_per_session`).
    pending: limits::PendingSlots,
    /// Call rates per session and per (session, tool).
    rates: limits::RateLimiter,
    /// Per session: this process's copy of the session's written set, refreshed from the
    /// store (only the rows after `seq`) before every decision that reads it. The store is the
    /// truth, shared by every replica ([`secureclaw_core::store::TaskStateStore`]): grant uses,
    /// read amounts and written values live there, not in this process.
    written_cache: std::sync::Mutex<std::collections::HashMap<String, WrittenCache>>,
    /// Prometheus metrics and the approve command (see `telemetry`).
    metrics: telemetry::Metrics,
    /// The group-commit writer: audit appends and ledger outcomes of concurrent callers share
    /// one transaction (issue 14 item 3).
    writer: group::GroupWriter,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("executor", &self.inner.executor)
            .finish_non_exhaustive()
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if getrandom::fill(&mut b).is_err() {
        tracing::error!("operating system random source failed");
    }
    b
}

fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        tracing::error!("operating system random source failed");
    }
}

fn class(entry: Option<&ToolEntry>) -> ActionClass {
    match entry.map(|e| e.effect) {
        Some(EffectClass::Read) => ActionClass::Read,
        _ => ActionClass::Effect,
    }
}

impl Gateway {
    /// Start a gateway: connect every upstream of `upstreams` with `connector`, list their
    /// tools and build the catalog.
    ///
    /// The executor owns the connections the connector builds (SecureClaw paper §3.4;
    /// issue 13 item 5): the gateway hands none of them out, so nothing outside the executor
    /// can reach an upstream. Production passes [`crate::RmcpConnector`]. Reports dangling
    /// ledger reservations (crash between mark and execution) to the audit log; they are never
    /// executed again.
    ///
    /// # Errors
    /// [`GatewayError::Upstream`] if an upstream cannot be connected, cannot list its tools
    /// within `limits.upstream_startup_timeout_ms` or advertises a schema beyond the limits of
    /// [`crate::upstream::startup_tools`]; [`GatewayError::Catalog`] if two tools would share
    /// an exposed name, names are confusable or an upstream id is invalid; store errors.
    pub async fn start(
        keys: Arc<KeyRing>,
        store: Arc<dyn Store>,
        policy: Arc<dyn PolicyEngine>,
        config: GatewayConfig,
        upstreams: Vec<crate::config::UpstreamSpec>,
        connector: &dyn Connector,
        clock: Clock,
    ) -> Result<Self, GatewayError> {
        let startup = Duration::from_millis(config.limits.upstream_startup_timeout_ms);
        let metrics = telemetry::Metrics::new();
        let executor = Executor::new(
            upstreams,
            connector,
            startup,
            Duration::from_millis(config.limits.upstream_timeout_ms),
        )
        .await?
        .with_latency(metrics.upstream.clone());
        let mut listings = executor.startup_listings(startup).await?;
        for (spec, _, tools) in &mut listings {
            for tool in tools.iter_mut() {
                let scrubbed =
                    crate::upstream::scrub_tool_metadata(tool, &config.summary.injection_markers);
                if scrubbed > 0 {
                    tracing::warn!(upstream = %spec.id, tool = %tool.name, replaced = scrubbed,
                        "tool description carried identifiers, secrets or injection markers; scrubbed before listing");
                }
            }
        }
        let catalog = Catalog::build(&listings, &config.tools)?;
        let classifier = Classifier {
            rules: config.classify.clone(),
        };
        config.validate().map_err(GatewayError::Config)?;
        for s in &config.speculation.substitutes {
            if let Some(with) = &s.with
                && catalog.get(with).is_none()
            {
                return Err(GatewayError::Config(format!(
                    "speculation substitute `{}` names `{with}`, which no upstream provides",
                    s.tool
                )));
            }
        }
        let speculation = speculation::Speculation::new(secureclaw_core::labeler::Labeler::new(
            config.speculation.labeler.clone(),
        ));
        let rates = limits::RateLimiter::new(limits::Rates {
            session_rate_per_s: config.limits.session_rate_per_s,
            session_burst: config.limits.session_burst,
            tool_rate_per_s: config.limits.tool_rate_per_s,
            tool_burst: config.limits.tool_burst,
        });
        let writer = group::GroupWriter::new(Arc::clone(&store));
        let gw = Self {
            inner: Arc::new(Inner {
                keys,
                store,
                policy,
                config,
                classifier,
                clock,
                catalog,
                executor,
                speculation,
                pending: limits::PendingSlots::default(),
                rates,
                written_cache: std::sync::Mutex::default(),
                metrics,
                writer,
            }),
        };
        let dangling = gw
            .inner
            .store
            .dangling_reservations()
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        for entry in dangling {
            tracing::warn!(action = %entry.action_id, "reserved action was never marked executed (crash?); it will not run again");
            let mut ev = AuditEvent::new(AuditKind::CrashRecovery, gw.now());
            ev.action_id = Some(entry.action_id.0.clone());
            gw.audit(ev)
                .await
                .map_err(|()| GatewayError::Store("audit append failed".into()))?;
        }
        Ok(gw)
    }

    /// The recovery template for `reason`, with its draft step naming the draft tool of the
    /// denied tool's own upstream (a visible effect tool the operator declared target-less and
    /// that is not destructive, so the policy lets it run without a human) or dropped if that
    /// upstream has none: a mail denied by one upstream is never steered into another
    /// provider's drafts, which would carry its content to a third party.
    fn recovery(
        &self,
        reason: ReasonCode,
        class: ActionClass,
        tool: &str,
        action_id: Option<&str>,
    ) -> Recovery {
        let upstream = self.inner.catalog.get(tool).map(|e| e.upstream.as_str());
        let draft = self
            .inner
            .catalog
            .iter()
            .filter(|e| {
                Some(e.upstream.as_str()) == upstream
                    && e.effect != EffectClass::Read
                    && !e.hidden
                    && !e.destructive
                    && e.targets_declared
                    && e.targets.is_empty()
            })
            .map(|e| e.exposed.as_str())
            .min();
        // The runtime is told which action to have approved, never where the gateway keeps
        // its state or which database it uses (new-user trial: an agent with a shell could
        // run the command itself); the operator's log line carries the full command.
        Recovery::new(reason, class, tool, action_id).with_draft_tool(draft)
    }

    fn now(&self) -> UnixMillis {
        (self.inner.clock)()
    }

    /// The policy set's digest.
    #[must_use]
    pub fn policy_digest(&self) -> String {
        self.inner.policy.digest()
    }

    /// The key ring.
    #[must_use]
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.inner.keys
    }

    /// Tools visible to `caller`: the policy decides visibility with the same rules as calls
    /// (a tool whose every call would be denied is not listed).
    #[must_use]
    pub fn list_tools(&self, caller: &str) -> Vec<ToolEntry> {
        self.inner
            .catalog
            .iter()
            .filter(|e| {
                let req = PolicyRequest {
                    caller: caller.to_owned(),
                    upstream: e.upstream.clone(),
                    tool: e.name.clone(),
                    effect: e.effect,
                    known_tool: true,
                    destructive: e.destructive,
                    financial: e.financial,
                    granted: false,
                    sink: e.sink,
                    targets_declared: e.targets_declared,
                    targets: vec![],
                    handles: vec![],
                    listing: true,
                };
                !matches!(self.inner.policy.decide(&req), PolicyDecision::Deny { .. })
            })
            .cloned()
            .collect()
    }

    async fn deny(
        &self,
        session: &SessionRecord,
        tool: &str,
        entry: Option<&ToolEntry>,
        reason: ReasonCode,
        action: Option<&ActionId>,
    ) -> CallOutcome {
        let mut ev = self.event(AuditKind::Denial, session, tool);
        ev.reason = Some(reason);
        ev.action_id = action.map(|a| a.0.clone());
        // A failed audit append cannot make a denial less safe; it is logged.
        let _ = self.audit(ev).await;
        tracing::debug!(tool, reason = %reason, "denied");
        CallOutcome::Denied(self.recovery(reason, class(entry), tool, action.map(|a| a.0.as_str())))
    }

    /// [`Gateway::deny`] of a call to `tool` (with its catalog entry, if any) before any action
    /// was recorded for it.
    async fn deny_call(
        &self,
        session: &SessionRecord,
        tool: &str,
        reason: ReasonCode,
    ) -> CallOutcome {
        self.deny(session, tool, self.inner.catalog.get(tool), reason, None)
            .await
    }

    async fn exec_failure(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        err: &ExecError,
        action: Option<&ActionId>,
    ) -> CallOutcome {
        let reason = match err {
            // An effect that was sent and never answered may have run: never "try again".
            e if e.outcome_unknown() && entry.effect != EffectClass::Read => {
                ReasonCode::OutcomeUnknown
            }
            ExecError::Handle(HandleDenial::SinkForbidden) => ReasonCode::HandleSinkForbidden,
            ExecError::Handle(HandleDenial::Unavailable) => ReasonCode::HandleUnavailable,
            ExecError::Store => ReasonCode::StoreUnavailable,
            ExecError::Timeout => ReasonCode::UpstreamTimeout,
            ExecError::Upstream(_) | ExecError::UnknownUpstream(_) => ReasonCode::UpstreamError,
        };
        // Only the error class: an upstream message may quote arguments after handles were
        // resolved, i.e. protected values.
        tracing::warn!(tool = %entry.exposed, error = err.class(), "execution failed");
        self.deny(session, &entry.exposed, Some(entry), reason, action)
            .await
    }

    /// Dispatch of a call the privacy monitor let through ([`Gateway::call`], the only public
    /// entry point for a tool call): read tools are forwarded and declassified; effectful
    /// tools are previewed and, if the policy allows without confirmation, committed at once.
    /// With `approval` (the action id of an approved confirmation, from
    /// `_meta["dev.secureclaw/approval"]`), the call is committed only if it is exactly the
    /// approved request.
    ///
    /// Every call first takes a token from the session's rate limits (`session_rate_per_s`,
    /// `tool_rate_per_s`); past them it is refused with [`ReasonCode::LimitExceeded`] and a
    /// retry hint, and nothing is sent or stored.
    async fn dispatch(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        approval: Option<&ActionId>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let outcome = match self.throttle(session, tool).await {
            Some(refused) => refused,
            None => {
                self.call_unthrottled(session, tool, arguments, approval)
                    .await
            }
        };
        self.observe_call(session, tool, &outcome, started);
        outcome
    }

    /// [`Gateway::dispatch`] for a call whose rate was already accounted for.
    pub(crate) async fn call_unthrottled(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        approval: Option<&ActionId>,
    ) -> CallOutcome {
        if let Some(action_id) = approval {
            return self
                .commit_approved(session, tool, arguments, action_id)
                .await;
        }
        let (prepared, policy_request) = match self.prepare(session, tool, &arguments).await {
            Ok(p) => p,
            Err(reason) => {
                return self
                    .deny(session, tool, self.inner.catalog.get(tool), reason, None)
                    .await;
            }
        };
        let entry = prepared.entry.clone();
        if entry.effect == EffectClass::Read {
            return self
                .read_call(
                    session,
                    tool,
                    &entry,
                    &prepared,
                    &policy_request,
                    &arguments,
                )
                .await;
        }
        let (preview, deferred) = match self
            .preview_prepared(session, &prepared, &policy_request, false)
            .await
        {
            Ok(p) => p,
            Err(Refused::Deny(reason)) => {
                return self.deny(session, tool, Some(&entry), reason, None).await;
            }
            Err(Refused::Limit(limit)) => {
                return self.refuse_limit(session, tool, limit, None, Some(1)).await;
            }
        };
        match preview.decision {
            PreviewDecision::Allow => {
                self.commit_prepared(
                    session,
                    prepared,
                    &preview.action_id,
                    Some(&preview.artifact),
                    deferred,
                )
                .await
            }
            _ => match preview.recovery {
                Some(r)
                    if matches!(
                        r.reason,
                        ReasonCode::ConfirmationRequired
                            | ReasonCode::ProtectedObject
                            | ReasonCode::ObjectUnread
                            | ReasonCode::OutcomeUnknownRepeat
                    ) =>
                {
                    CallOutcome::Pending(r)
                }
                Some(r) => CallOutcome::Denied(r),
                None => {
                    self.deny(
                        session,
                        tool,
                        Some(&entry),
                        ReasonCode::Internal,
                        Some(&preview.action_id),
                    )
                    .await
                }
            },
        }
    }

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
        let started = std::time::Instant::now();
        let result = self.preview_throttled(session, tool, arguments).await;
        self.observe_preview(session, tool, &result, started);
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
        let result = match self.prepare(session, tool, arguments).await {
            Ok((prepared, _)) if prepared.entry.effect == EffectClass::Read => {
                Err(Refused::Deny(ReasonCode::PolicyDeny))
            }
            Ok((prepared, policy_request)) => self
                .preview_prepared(session, &prepared, &policy_request, true)
                .await
                .map(|(preview, _)| preview),
            Err(reason) => Err(Refused::Deny(reason)),
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

    async fn preview_prepared(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        explicit: bool,
    ) -> Result<(PreviewOutcome, Option<Deferred>), Refused> {
        let _timer = self.inner.metrics.preview_timer();
        let entry = &prepared.entry;
        let mut decision = self.inner.policy.decide(policy_request);
        let mut grant_withheld = prepared.grant_withheld;
        let binding =
            bind(&self.inner.keys, &prepared.request).map_err(|_| ReasonCode::InvalidArguments)?;
        // At most once (issue 12, red-team F8, R7): an effect of this tool in this session
        // whose outcome is unknown may already have run; any further effect of the tool — the
        // same call respelt (`"INV-42 "`, an extra empty argument) included — needs a human,
        // whatever the policy or a grant says. A failed lookup counts as a repeat (fail
        // closed).
        let repeat = self
            .inner
            .store
            .outcome_unknown_tool(&session.id, &entry.exposed)
            .await
            .unwrap_or(true);
        if repeat && let PolicyDecision::Allow { policies } = &decision {
            decision = PolicyDecision::Confirm {
                policies: policies.clone(),
            };
        }
        // A limited grant is used when the gateway issues an artifact that needs no human for
        // a destructive or financial effect; when it is used up, the call goes to a human.
        if let (PolicyDecision::Allow { .. }, Some((key, Some(limit)))) =
            (&decision, &prepared.grant)
            && policy_request.granted
            && (entry.destructive || entry.financial)
            && !(self
                .take_object_grant(session, entry, key, &prepared.request.inputs.arguments)
                .await
                && self.take_grant(session, key, *limit).await)
        {
            let mut without = policy_request.clone();
            without.granted = false;
            decision = self.inner.policy.decide(&without);
            grant_withheld = Some("grant_exhausted");
        }
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
            );
            let deferred = Deferred {
                action: records.action,
                events: records.events,
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
    async fn refuse_commit(
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
            "grant_withheld": grant_withheld});
        PreviewRecords {
            action,
            events: vec![preview, decided],
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

    /// COMMIT (explicit two-phase mode): rebuild the canonical request from `arguments`, run
    /// the acceptance predicate against `artifact`, and execute.
    pub async fn commit(
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

    async fn commit_prepared(
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
        };
        // Check 11 reserves the action id; for a deferred preview the same transaction writes
        // the action and its preview and decision records: one durable write before dispatch.
        let accepted = match deferred.as_ref() {
            Some(d) => {
                let ledger = PreEffect {
                    writer: &self.inner.writer,
                    deferred: d,
                };
                accept(&self.inner.keys, &ledger, &attempt).await
            }
            None => accept(&self.inner.keys, self.inner.store.as_ref(), &attempt).await,
        };
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
        // What is written is what the executor sends: the bound canonical form. If the store
        // cannot record it, nothing is sent (the action is spent: `failed`).
        let arguments = &proof.request().inputs.arguments;
        let noted = if entry.sink == SinkKind::Store {
            self.note_written(session, &entry, arguments).await
        } else {
            self.note_released(session, arguments).await
        };
        if noted.is_err() {
            let _ = self
                .inner
                .store
                .mark_failed(action_id, "store_unavailable", self.now())
                .await;
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
                // (one transaction): if it is lost (a crash, an audit failure) the entry stays
                // `reserved`, which the next start reports as `crash_recovery`, so no effect is
                // ever unaudited.
                let mut ev = self.event(AuditKind::Commit, session, &entry.exposed);
                ev.action_id = Some(action_id.0.clone());
                ev.detail = json!({"binding": binding, "result_digest": digest, "is_error": output.is_error});
                let executed = GroupWrite::Executed {
                    id: action_id.clone(),
                    result_digest: digest,
                    at: self.now(),
                };
                match self
                    .inner
                    .writer
                    .write(vec![GroupWrite::Audit(ev), executed])
                    .await
                {
                    Ok(done) if done.unchanged.is_empty() => {}
                    Ok(_) => {
                        tracing::error!(action = %action_id, "could not mark executed; the entry is no longer reserved");
                    }
                    Err(e) => {
                        self.inner.metrics.audit_append_failed();
                        tracing::error!(error = %e, action = %action_id, "commit record not written; entry stays reserved and will be reported");
                        return self
                            .deny(
                                session,
                                &entry.exposed,
                                Some(&entry),
                                ReasonCode::ResultWithheld,
                                Some(action_id),
                            )
                            .await;
                    }
                }
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

    /// Re-issue of a call the user approved: the artifact is re-sealed for the approved
    /// binding with a fresh freshness window (a slow human must not expire it), and the
    /// acceptance predicate then checks that the re-issued call is exactly that request.
    async fn commit_approved(
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
