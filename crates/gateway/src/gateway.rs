//! The gateway proper: sessions, read path, write path and operator operations.

use crate::catalog::{Catalog, ToolEntry};
use crate::config::GatewayConfig;
use crate::declassify::Declassifier;
use crate::executor::{ExecError, Executor, Resolution, ResolveError};
use crate::permit::ReadPermit;
use crate::upstream::{Connector, ToolOutput};
use secureclaw_core::acceptance::{CommitAttempt, accept, check_binding};
use secureclaw_core::acceptance::{LedgerError, SingleUseLedger};
use secureclaw_core::anchor::{
    anchor_provenance, collect_targets, collect_targets_bounded, is_anchored, object_id_targets,
};
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::{BindingDigest, bind};
use secureclaw_core::canonical::{
    CanonicalRequest, HandleBinding, Inputs, Intent, RequestContext, TaskEnvelope, validate_value,
};
use secureclaw_core::classify::Classifier;
use secureclaw_core::confirmation::{Confirmation, ConfirmationClaims};
use secureclaw_core::detect::IdentifierKind;
use secureclaw_core::handle::{
    HandleDenial, HandleId, HandleRecord, Sink, SinkKind, check_resolution, find_handles,
};
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::policy::{
    EffectClass, HandleFact, PolicyDecision, PolicyEngine, PolicyRequest, Provenance, TargetFact,
};
use secureclaw_core::recovery::{ActionClass, Limit, ReasonCode, Recovery};
use secureclaw_core::store::{
    ActionRecord, ApprovalRecord, ApprovalState, GroupWrite, RateTake, SessionRecord, Store,
    StoreError, VaultStore,
};
use secureclaw_core::time::UnixMillis;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod amounts;
pub mod approvals;
mod group;
mod limits;
mod speculation;
mod telemetry;
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

/// The read a result answers (for [`Gateway::finish`]).
struct ReadOf<'a> {
    /// The read was anchored (its authoritative fields yield anchored handles).
    anchored: bool,
    /// Its arguments (the objects it named).
    arguments: &'a Map<String, Value>,
    /// The records of the handles in its arguments.
    records: &'a [HandleRecord],
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

/// What a session's record of an object says (crates/core `protect`): its content was seen
/// only as handles (protected), or the session has seen it (read it, or wrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectMark {
    Protected,
    Seen,
}

impl ObjectMark {
    fn digests(
        self,
        ring: &KeyRing,
        session: &str,
        keys: &[String],
        all_keys: bool,
    ) -> Result<Vec<String>, secureclaw_core::keys::KeyError> {
        match self {
            Self::Protected => {
                secureclaw_core::protect::protection_digests(ring, session, keys, all_keys)
            }
            Self::Seen => secureclaw_core::protect::seen_digests(ring, session, keys, all_keys),
        }
    }
}

/// The values one session's store effects wrote, as far as this process has read them from
/// the store. Bounded in the store (`max_written_values_per_session`,
/// `max_written_bytes_per_session`; red-team F13): once a bound is reached the set is `full`
/// and stops growing, and every later value counts as written — a read of the session is then
/// never anchored and every value it returns gets a fresh handle. That fails closed:
/// forgetting a written value could let the session anchor it by reading it back; treating
/// unknown values as written only costs the session anchoring. Rows are only ever appended and
/// `full` never clears, so this copy is always a prefix of the store's set.
#[derive(Debug, Default)]
struct WrittenCache {
    /// The highest `seq` read so far.
    seq: u64,
    values: Vec<String>,
    full: bool,
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

    /// Append `event` through the group-commit writer and wait until it is durable.
    async fn audit(&self, event: AuditEvent) -> Result<(), ()> {
        self.inner
            .writer
            .write(vec![GroupWrite::Audit(event)])
            .await
            .map(|_| ())
            .map_err(|e| {
                self.inner.metrics.audit_append_failed();
                tracing::error!(error = %e, "audit append failed");
            })
    }

    fn event(&self, kind: AuditKind, session: &SessionRecord, tool: &str) -> AuditEvent {
        let mut ev = AuditEvent::new(kind, self.now());
        ev.session = Some(audit_session_id(&session.id));
        ev.caller = Some(session.caller.clone());
        ev.tool = Some(tool.to_owned());
        ev
    }

    /// Audit a request a front end refused before it became a tool call (issue 12 item 8):
    /// `front_end` (`mcp-stdio`, `mcp-http`, `http-api`), a `reason` code, the session if
    /// known and the tool if named. Metadata only; a failed append is logged.
    pub async fn audit_rejection(
        &self,
        front_end: &str,
        reason: &str,
        session: Option<&SessionRecord>,
        tool: Option<&str>,
    ) {
        let mut ev = AuditEvent::new(AuditKind::Rejection, self.now());
        ev.session = session.map(|s| audit_session_id(&s.id));
        ev.caller = session.map(|s| s.caller.clone());
        ev.tool = tool.map(str::to_owned);
        ev.detail = json!({"front_end": front_end, "reason": reason});
        let _ = self.audit(ev).await;
    }

    /// Audit a request a front end refused before any session was known — no token, an
    /// unknown or expired one, a wrong operator token (issue 12 item 8): `front_end` and a
    /// `reason` code, nothing from the request. An unauthenticated peer must not be able to
    /// grow the audit log at will, so at most one such record is written per front end and
    /// second; it carries `count`, how many refusals it stands for (itself included).
    pub async fn audit_unauthenticated_rejection(&self, front_end: &str, reason: &str) {
        let now = self.now();
        // Session ids start with `ses_`: this key cannot be one.
        let key = format!("unauthenticated {front_end}");
        let Some(count) = self.inner.rates.rejected(&key, now) else {
            return;
        };
        let mut ev = AuditEvent::new(AuditKind::Rejection, now);
        ev.detail = json!({"front_end": front_end, "reason": reason, "count": count});
        let _ = self.audit(ev).await;
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

    // ----------------------------------------------------------------- sessions

    /// Open a session for `caller` with a task envelope from the trusted side.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn open_session(
        &self,
        caller: &str,
        envelope: TaskEnvelope,
    ) -> Result<SessionRecord, GatewayError> {
        let now = self.now();
        let record = SessionRecord {
            id: format!("ses_{}", secureclaw_core::encoding::base32(&random::<16>())),
            caller: caller.to_owned(),
            envelope,
            created_at: now,
            expires_at: now.plus_millis(self.inner.config.limits.session_ttl_ms),
        };
        self.inner
            .store
            .put_session(&record)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let mut ev = self.event(AuditKind::Session, &record, "");
        ev.tool = None;
        ev.detail = json!({"task_digest": record.envelope.digest(), "trusted_targets": record.envelope.trusted_targets.len()});
        self.audit(ev)
            .await
            .map_err(|()| GatewayError::Store("audit append failed".into()))?;
        Ok(record)
    }

    /// Look a live session up.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, GatewayError> {
        let s = self
            .inner
            .store
            .session(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        Ok(s.filter(|s| self.now() <= s.expires_at))
    }

    // ----------------------------------------------------------------- listing

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

    // ----------------------------------------------------------------- calls

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

    /// Refuse a call because a per-session `limit` was reached: nothing was stored or sent.
    /// Audited as a rejection when `audit` is `Some(count)` (metadata only: the limit, the
    /// retry hint and how many rejections the record stands for).
    async fn refuse_limit(
        &self,
        session: &SessionRecord,
        tool: &str,
        limit: Limit,
        retry_after_ms: Option<u64>,
        audit: Option<u64>,
    ) -> CallOutcome {
        let entry = self.inner.catalog.get(tool);
        if let Some(count) = audit {
            let mut ev = self.event(AuditKind::Rejection, session, tool);
            ev.reason = Some(ReasonCode::LimitExceeded);
            ev.detail = json!({"front_end": "gateway", "reason": "limit_exceeded",
                "limit": limit.config_key(), "retry_after_ms": retry_after_ms, "count": count});
            let _ = self.audit(ev).await;
        }
        tracing::debug!(tool, limit = limit.config_key(), "limit exceeded");
        CallOutcome::Denied(Recovery::limit_exceeded(
            limit,
            class(entry),
            tool,
            retry_after_ms,
        ))
    }

    /// Take one call of `session` to `tool` from the rate limits (token buckets in the store,
    /// shared by every replica), or refuse it ([`Limit::SessionRate`], [`Limit::ToolRate`])
    /// with a retry hint. A tool the catalog does not know takes from one shared bucket, so
    /// invented names cannot grow the table. A store error refuses the call
    /// ([`ReasonCode::StoreUnavailable`]): fail closed.
    async fn throttle(&self, session: &SessionRecord, tool: &str) -> Option<CallOutcome> {
        let known = self
            .inner
            .catalog
            .get(tool)
            .map_or("", |e| e.exposed.as_str());
        let now = self.now();
        match self
            .inner
            .store
            .take_rate(&session.id, known, self.inner.rates.rates(), now)
            .await
        {
            Ok(RateTake::Taken) => None,
            Ok(RateTake::Refused {
                limit,
                retry_after_ms,
            }) => {
                let audit = self.inner.rates.rejected(&session.id, now);
                Some(
                    self.refuse_limit(session, tool, limit, retry_after_ms, audit)
                        .await,
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "rate limit store unavailable");
                Some(
                    self.deny_call(session, tool, ReasonCode::StoreUnavailable)
                        .await,
                )
            }
        }
    }

    /// Take a waiting-action slot of `session` for `action` (`max_pending_per_session`).
    /// `expires` is when an uncommitted preview frees it by itself; `None` for an approval,
    /// which frees it when decided against, used, or its confirmation expires — also when a
    /// confirmer in another process decided it, which is checked against the store once the
    /// session is at its limit. Store errors count as "still waiting" (fail closed).
    async fn take_pending(
        &self,
        session: &SessionRecord,
        action: &ActionId,
        expires: Option<UnixMillis>,
    ) -> bool {
        let cap = self.inner.config.limits.max_pending_per_session;
        let now = self.now();
        let waiting = match self
            .inner
            .pending
            .try_take(&session.id, action, expires, cap, now, &[])
        {
            limits::SlotTake::Taken => return true,
            limits::SlotTake::Full(waiting) => waiting,
        };
        let mut settled = Vec::new();
        for id in waiting {
            if self.approval_settled(&id, now).await {
                settled.push(id);
            }
        }
        if settled.is_empty() {
            return false;
        }
        matches!(
            self.inner
                .pending
                .try_take(&session.id, action, expires, cap, now, &settled),
            limits::SlotTake::Taken
        )
    }

    /// Whether the approval of `action` no longer waits: its action ran (or was attempted),
    /// it was declined, or its confirmation expired unused.
    async fn approval_settled(&self, action: &ActionId, now: UnixMillis) -> bool {
        if matches!(self.inner.store.ledger_entry(action).await, Ok(Some(_))) {
            return true;
        }
        match self.inner.store.approval(action).await {
            Ok(Some(a)) => match a.state {
                ApprovalState::Pending => false,
                ApprovalState::Denied => true,
                ApprovalState::Approved => a.decided_at.is_some_and(|at| {
                    at.plus_millis(self.inner.config.limits.confirmation_ttl_ms) <= now
                }),
            },
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Validate arguments and build the canonical request and policy facts.
    async fn prepare(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<(Prepared, PolicyRequest), ReasonCode> {
        let entry = self
            .inner
            .catalog
            .get(tool)
            .ok_or(ReasonCode::UnknownTool)?
            .clone();
        let size = serde_json::to_vec(arguments)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > self.inner.config.limits.max_argument_bytes {
            return Err(ReasonCode::InvalidArguments);
        }
        let value = Value::Object(arguments.clone());
        validate_value(&value).map_err(|_| ReasonCode::InvalidArguments)?;
        let now = self.now();
        let sink = Sink {
            upstream: &entry.upstream,
            tool: &entry.name,
            kind: entry.sink,
        };
        // Handles referenced anywhere in the arguments.
        let mut records: BTreeMap<HandleId, HandleRecord> = BTreeMap::new();
        for (_, id) in find_handles(&value) {
            if records.contains_key(&id) {
                continue;
            }
            let rec = self
                .inner
                .store
                .handle(&id)
                .await
                .map_err(|_| ReasonCode::StoreUnavailable)?;
            let rec = rec.ok_or(ReasonCode::HandleUnavailable)?;
            rec.usable(&session.caller, &session.id, now)
                .map_err(|_| ReasonCode::HandleUnavailable)?;
            records.insert(id, rec);
        }
        let handles: Vec<HandleFact> = records
            .values()
            .map(|r| HandleFact {
                label: r.label.clone(),
                sensitivity: r.sensitivity,
                sink_allowed: r.sink_allowed(&sink),
            })
            .collect();
        // Target collection runs the detectors over every argument: linear, bounded by
        // `max_targets_per_call`, and off the async workers so a large call cannot stall other
        // sessions (red-team F13).
        let found = if entry.targets_declared && entry.targets.is_empty() {
            Vec::new()
        } else {
            let (args, fields) = (arguments.clone(), entry.targets.clone());
            let egress = entry.sink == SinkKind::Egress;
            let limit = self.inner.config.limits.max_targets_per_call;
            tokio::task::spawn_blocking(move || {
                collect_targets_bounded(&args, &fields, egress, limit)
            })
            .await
            .map_err(|_| ReasonCode::Internal)?
            .map_err(|_| ReasonCode::TooManyTargets)?
        };
        let mut targets = self.targets(session, &entry, arguments, found, &records);
        let mut names_protected = false;
        let mut protection_unknown = false;
        if entry.effect == EffectClass::Effect && entry.sink == SinkKind::Store {
            // A content-matching effect names its object by its id fields too (F10).
            let named = self
                .object_identifiers(&entry, entry.matches_content, arguments, &records)
                .await;
            // A content-matching effect whose object the gateway cannot identify can be
            // neither seen nor protected: it waits (fail closed; red-team F10).
            if named.is_empty() && entry.matches_content {
                targets.push(TargetFact {
                    field: "(unidentified object)".into(),
                    anchored: false,
                    via_handle: false,
                    provenance: Provenance::UnreadObject,
                });
            }
            for (field, values) in named {
                // A failed lookup is held like a protected object (fail closed: the call needs
                // a human), but it does not make the objects protected: a transient store
                // error must not protect a session's objects for good.
                let held = match self
                    .marked(ObjectMark::Protected, session, &entry.upstream, &values)
                    .await
                {
                    Ok(true) => {
                        names_protected = true;
                        true
                    }
                    Ok(false) => false,
                    Err(()) => {
                        protection_unknown = true;
                        true
                    }
                };
                if held && !entry.allow_protected_objects {
                    targets.push(TargetFact {
                        field,
                        anchored: false,
                        via_handle: values.len() > 1,
                        provenance: Provenance::ProtectedObject,
                    });
                    continue;
                }
                // A content-matching effect (an edit with old text, a dry run) on an object
                // the session has not read would answer questions about content it was never
                // shown: it waits until the session reads the object, or for a human. A
                // failed lookup holds it the same way (fail closed).
                if !held
                    && entry.matches_content
                    && !self
                        .marked(ObjectMark::Seen, session, &entry.upstream, &values)
                        .await
                        .unwrap_or(false)
                {
                    targets.push(TargetFact {
                        field,
                        anchored: false,
                        via_handle: values.len() > 1,
                        provenance: Provenance::UnreadObject,
                    });
                }
            }
        }
        let qualified = format!("{}__{}", entry.upstream, entry.name);
        let (grant, grant_withheld) = self.grant_for(session, &entry, &qualified, arguments).await;
        let granted = grant.is_some() && grant_withheld.is_none();
        let policy_request = PolicyRequest {
            caller: session.caller.clone(),
            upstream: entry.upstream.clone(),
            tool: entry.name.clone(),
            effect: entry.effect,
            known_tool: true,
            destructive: entry.destructive,
            financial: entry.financial,
            granted,
            sink: entry.sink,
            targets_declared: entry.targets_declared,
            targets,
            handles,
            listing: false,
        };
        let request = CanonicalRequest {
            intent: Intent {
                upstream: entry.upstream.clone(),
                tool: entry.name.clone(),
            },
            caller: session.caller.clone(),
            session: session.id.clone(),
            inputs: Inputs {
                arguments: arguments.clone(),
                handles: records
                    .values()
                    .map(|r| HandleBinding {
                        handle: r.id.0.clone(),
                        object_id: r.object_id.clone(),
                        version: r.version,
                    })
                    .collect(),
            },
            ctx: RequestContext {
                destination: self
                    .inner
                    .executor
                    .destination(&entry.upstream)
                    .unwrap_or_default()
                    .to_owned(),
                task_digest: session.envelope.digest(),
                policy_digest: self.inner.policy.digest(),
            },
        };
        Ok((
            Prepared {
                entry,
                request,
                handle_records: records.into_values().collect(),
                names_protected,
                protection_unknown,
                grant,
                grant_withheld,
            },
            policy_request,
        ))
    }

    /// Every target of a call with its anchoring and provenance (DESIGN.md §3 "Targets,
    /// anchoring and provenance"): the strings in the tool's target fields, every identifier
    /// found anywhere in the arguments (values and keys), numbers in account-like fields,
    /// object references sent by an `egress` tool, and every handle whose label is an
    /// identifier kind wherever it appears — except for a tool the operator declared
    /// target-less (`targets = []`). A target is anchored only by the task envelope, the
    /// operator's trusted targets, or a handle from an authoritative field of an anchored read.
    fn targets(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
        found: Vec<secureclaw_core::anchor::Target>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Vec<TargetFact> {
        // The operator declared the tool target-less (`targets = []`, e.g. saving a draft):
        // nothing in its arguments is a destination.
        if entry.targets_declared && entry.targets.is_empty() {
            return Vec::new();
        }
        let mut seen_handles: std::collections::HashSet<&HandleId> =
            std::collections::HashSet::new();
        let mut out: Vec<TargetFact> = Vec::new();
        let mut found = found;
        if entry.destructive
            || entry.financial
            || (entry.effect == EffectClass::Effect && entry.sink == SinkKind::Egress)
        {
            // The objects a destructive or financial effect acts on are targets too (F11), and
            // so are the ids an egress tool sends out (a contact id designates a recipient:
            // red-team F5).
            let seen: std::collections::HashSet<(String, String)> = found
                .iter()
                .map(|t| (t.field.clone(), t.value.clone()))
                .collect();
            found.extend(
                object_id_targets(arguments, &[])
                    .into_iter()
                    .filter(|t| !seen.contains(&(t.field.clone(), t.value.clone()))),
            );
        }
        for t in found {
            let refs = find_handles(&Value::String(t.value.clone()));
            let (anchored, provenance) = match refs.as_slice() {
                [] => anchor_provenance(
                    &t.value,
                    &session.envelope,
                    &self.inner.config.trusted_targets,
                )
                .map_or((false, Provenance::Literal), |p| (true, p)),
                [(_, id)] if id.0 == t.value.trim() => {
                    seen_handles.extend(records.get_key_value(id).map(|(k, _)| k));
                    handle_provenance(records.get(id))
                }
                // Text around a handle, or several handles: the runtime composed it.
                _ => (false, Provenance::Literal),
            };
            out.push(TargetFact {
                field: t.field,
                anchored,
                via_handle: !refs.is_empty(),
                provenance,
            });
        }
        // A handle outside the target fields may be a destination too (`reply_to`, a header,
        // a nested object): one that is not anchored, and whose record does not name this tool
        // as a sink the operator allows it into, is an unanchored target. (An anchored one is
        // not counted: it must not turn a call with no recognised target into an anchored
        // one.)
        for (path, id) in find_handles(&Value::Object(arguments.clone())) {
            if seen_handles.contains(&id) {
                continue;
            }
            let Some(rec) = records.get(&id) else {
                continue;
            };
            // Every handle but a credential's: an operator label (`counterparty_email`,
            // `payee_iban`) names an identifier as surely as a detector's does, and a tool may
            // treat any argument (`reply_to`, `forward_to`) as a destination.
            if rec.label == IdentifierKind::Secret.as_str() {
                continue;
            }
            seen_handles.extend(records.get_key_value(&id).map(|(k, _)| k));
            let (anchored, provenance) = handle_provenance(Some(rec));
            let qualified = format!("{}__{}", entry.upstream, entry.name);
            let sanctioned = rec
                .allowed_sinks
                .iter()
                .any(|p| secureclaw_core::handle::glob_match(p, &qualified));
            if anchored || sanctioned {
                continue;
            }
            let field = path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            out.push(TargetFact {
                field,
                anchored,
                via_handle: true,
                provenance,
            });
        }
        out
    }

    /// Resolve, in order, every handle that the executor's substitution will meet in
    /// `arguments` for this sink, stopping at the first failure (as the substitution does):
    /// the record is checked with [`check_resolution`], the value read from the vault and the
    /// resolution audited — before anything is sent. Returns a resolver for the executor that
    /// hands out these results in the same order (fail closed on any mismatch), and the
    /// (plaintext, handle) pairs resolved.
    async fn resolve_handles(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        action: Option<&ActionId>,
        arguments: &Map<String, Value>,
    ) -> (Resolver, Vec<(String, HandleId)>) {
        let mut ids: Vec<HandleId> = Vec::new();
        let mut probe = Value::Object(arguments.clone());
        let _ = secureclaw_core::handle::substitute_handles::<()>(&mut probe, &mut |id| {
            ids.push(id.clone());
            Ok(id.0.clone())
        });
        // Each distinct handle is checked, read and audited once per call, with the number of
        // its occurrences (red-team F10: one record per occurrence let one call write 10k
        // audit records); every occurrence gets the same result.
        let mut counts: BTreeMap<&HandleId, u64> = BTreeMap::new();
        for id in &ids {
            *counts.entry(id).or_default() += 1;
        }
        let mut done: BTreeMap<HandleId, Resolution> = BTreeMap::new();
        let mut results = std::collections::VecDeque::with_capacity(ids.len());
        let mut resolved = Vec::new();
        for id in &ids {
            let result = match done.get(id) {
                Some(r) => r.clone(),
                None => {
                    let count = counts.get(id).copied().unwrap_or(1);
                    let r = self.resolve_one(session, entry, action, id, count).await;
                    if let Ok(plain) = &r {
                        resolved.push((plain.clone(), id.clone()));
                    }
                    done.insert(id.clone(), r.clone());
                    r
                }
            };
            let failed = result.is_err();
            results.push_back((id.clone(), result));
            if failed {
                break;
            }
        }
        (Resolver(results), resolved)
    }

    async fn resolve_one(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        action: Option<&ActionId>,
        id: &HandleId,
        occurrences: u64,
    ) -> Resolution {
        let now = self.now();
        let rec = self
            .inner
            .store
            .handle(id)
            .await
            .map_err(|_| ResolveError::Store)?;
        let sink = Sink {
            upstream: &entry.upstream,
            tool: &entry.name,
            kind: entry.sink,
        };
        check_resolution(rec.as_ref(), &session.caller, &session.id, &sink, now)
            .map_err(ResolveError::Denied)?;
        let rec = rec.ok_or(ResolveError::Denied(HandleDenial::Unavailable))?;
        let value = self
            .inner
            .store
            .object_value_at(&rec.object_id, rec.version)
            .await
            .map_err(|_| ResolveError::Store)?
            .ok_or(ResolveError::Denied(HandleDenial::Unavailable))?;
        let mut ev = self.event(AuditKind::HandleResolve, session, &entry.exposed);
        ev.action_id = action.map(|a| a.0.clone());
        ev.detail = json!({"handle": id, "sink": format!("{}__{}", entry.upstream, entry.name),
                           "occurrences": occurrences});
        self.audit(ev).await.map_err(|()| ResolveError::Store)?;
        Ok(String::from_utf8_lossy(&value).into_owned())
    }

    /// The identifiers naming objects in a call's arguments
    /// ([`secureclaw_core::protect::object_identifiers`]), each with its argument name and the
    /// spellings to match: the value as written and, for a value that is exactly one handle
    /// id, the handle's plaintext too (the same object named by value or by handle).
    async fn object_identifiers(
        &self,
        entry: &ToolEntry,
        with_ids: bool,
        arguments: &Map<String, Value>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for o in secureclaw_core::protect::object_identifiers(arguments, &entry.targets, with_ids) {
            let mut values = vec![o.value.clone()];
            let trimmed = o.value.trim();
            if let [(_, id)] = find_handles(&Value::String(o.value.clone())).as_slice()
                && id.0 == trimmed
            {
                let record = match records.get(id) {
                    Some(r) => Some(r.clone()),
                    None => self.inner.store.handle(id).await.ok().flatten(),
                };
                if let Some(r) = record {
                    values.extend(self.handle_plaintext(&r).await);
                }
            }
            out.push((o.field, values));
        }
        out
    }

    /// Whether any of `values` (spellings of one object, named through `upstream`) names an
    /// object of the session marked `mark` (protected, on any upstream; or seen, through this
    /// upstream). `Err(())` if the keys or the store fail (callers fail closed).
    async fn marked(
        &self,
        mark: ObjectMark,
        session: &SessionRecord,
        upstream: &str,
        values: &[String],
    ) -> Result<bool, ()> {
        let keys: Vec<String> = values
            .iter()
            .flat_map(|v| match mark {
                ObjectMark::Protected => secureclaw_core::protect::match_keys(v),
                ObjectMark::Seen => secureclaw_core::protect::seen_key(upstream, v)
                    .into_iter()
                    .collect(),
            })
            .collect();
        if keys.is_empty() {
            return Ok(false);
        }
        let digests = mark
            .digests(&self.inner.keys, &session.id, &keys, true)
            .map_err(|_| ())?;
        self.inner
            .store
            .any_protected(&session.id, &digests)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, ?mark, "object lookup failed");
            })
    }

    /// Mark every object a call names (its object identifiers and, for handles, their
    /// plaintext) as `mark` for the session: protected objects, or objects the session has
    /// seen. `Err(())` if the keys or the store fail.
    async fn mark(
        &self,
        mark: ObjectMark,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Result<(), ()> {
        // A read marks seen by id fields too (the content-matching check looks there, F10);
        // protection stays on target and reference fields, so a record read by its id and
        // updated by an ordinary write (the retail chain) is not a protected object — a
        // content-matching effect on it still waits, as unread.
        let named = self
            .object_identifiers(entry, mark == ObjectMark::Seen, arguments, records)
            .await;
        // Only a read of one whole object by a tool that returns content marks it seen (see
        // `secureclaw_core::protect`): a read of several objects may answer some of them with
        // an error line (red-team R1), and an `info`/`list` tool shows no content.
        if mark == ObjectMark::Seen
            && (entry.effect == EffectClass::Effect
                || named.len() != 1
                || !secureclaw_core::protect::content_read_name(&entry.name)
                || !secureclaw_core::protect::whole_object_read(arguments, &entry.targets))
        {
            return Ok(());
        }
        let keys: Vec<String> = named
            .into_iter()
            .flat_map(|(_, values)| values)
            .flat_map(|v| match mark {
                ObjectMark::Protected => secureclaw_core::protect::protect_keys(&v),
                ObjectMark::Seen => secureclaw_core::protect::seen_key(&entry.upstream, &v)
                    .into_iter()
                    .collect(),
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let digests = mark
            .digests(&self.inner.keys, &session.id, &keys, false)
            .map_err(|_| ())?;
        self.inner
            .store
            .protect_objects(&session.id, &digests)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, ?mark, "recording objects failed");
            })
    }

    /// The grant entry of the task that names this tool, with its limit, and why it does not
    /// cover this call, if it does not (red-team finding F11). A `granted_tools` entry may carry
    /// a count, `office__pay_invoice#2`, or `#*` for no limit; without one a financial tool's
    /// grant covers one unconfirmed use per task and any other tool's is unlimited (its
    /// targets and object ids must still be anchored). A granted financial effect's amounts
    /// must be at most the task's `max_amount` when it has one; otherwise each must be named in
    /// the request text or come from a read the task anchored (the invoice's own amount).
    /// Uses are counted in the store, once across every replica; if the store cannot say how
    /// many were taken, the grant counts as exhausted (fail closed: a human decides).
    async fn grant_for(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        qualified: &str,
        arguments: &Map<String, Value>,
    ) -> (Option<(String, Option<u64>)>, Option<&'static str>) {
        let matched = session.envelope.granted_tools.iter().find_map(|p| {
            let (pattern, count) = match p.rsplit_once('#') {
                Some((pat, "*")) => (pat, Some(None)),
                Some((pat, n)) => match n.parse::<u64>() {
                    Ok(n) => (pat, Some(Some(n))),
                    Err(_) => (p.as_str(), None),
                },
                None => (p.as_str(), None),
            };
            (secureclaw_core::handle::glob_match(pattern, qualified) || pattern == entry.exposed)
                .then(|| {
                    let limit = count.unwrap_or(if entry.financial { Some(1) } else { None });
                    (p.clone(), limit)
                })
        });
        let Some((key, limit)) = matched else {
            return (None, None);
        };
        if let Some(limit) = limit {
            let used = self
                .inner
                .store
                .grant_uses(&session.id, &key)
                .await
                .unwrap_or(u64::MAX);
            if used >= limit {
                return (Some((key, Some(limit))), Some("grant_exhausted"));
            }
        }
        let withheld = if entry.financial {
            self.amount_withheld(session, entry, arguments).await
        } else {
            None
        };
        (Some((key, limit)), withheld)
    }

    /// Why a granted financial effect's amounts are not covered by the task, if they are not.
    /// Every number and money-looking string outside object ids and target fields is an
    /// amount, and text below an amount-like key that is not a plain number is never covered
    /// (red-team F4; [`amounts::financial_amounts`]). Amounts anchored reads returned are
    /// looked up in the store by keyed digest; a failed lookup leaves the amount unanchored
    /// (fail closed).
    async fn amount_withheld(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Option<&'static str> {
        let found = amounts::financial_amounts(arguments, &entry.targets);
        if found.contains(&amounts::Amount::Unparsed) {
            return Some("amount_unanchored");
        }
        // Named amounts are compared in major units and in the call's currency (red-team R5c:
        // "EUR 50" does not cover `amount_cents: 50`, nor "USD 1,299.00" a payment in EUR).
        let named_amounts = amounts::task_amounts(&session.envelope.request);
        let currencies = amounts::argument_currencies(arguments);
        let objects = amounts::payment_objects(arguments);
        for a in found {
            if let Some(max) = session.envelope.max_amount {
                // The ceiling is in minor units (cents): anything that is not a number at most
                // the ceiling needs a human.
                let ok = a
                    .minor_units()
                    .is_some_and(|v| (0.0..=max as f64).contains(&v));
                if !ok {
                    return Some("amount_over_ceiling");
                }
                continue;
            }
            let Some(major) = a.major() else {
                return Some("amount_unanchored");
            };
            // Only money written as money in the task counts (red-team R5).
            let named = named_amounts.iter().any(|t| t.covers(&major, &currencies));
            let read = !named
                && self
                    .amount_known(
                        session,
                        &amounts::amount_lookup_keys(&major, &currencies, &objects),
                    )
                    .await;
            if !(named || read) {
                return Some("amount_unanchored");
            }
        }
        None
    }

    /// Whether an anchored read of this session returned an amount recorded as one of `keys`
    /// ([`amounts::amount_lookup_keys`]; keyed digests under every live handle key); `false`
    /// if the store or the key ring fails.
    async fn amount_known(&self, session: &SessionRecord, keys: &[String]) -> bool {
        let mut digests = Vec::new();
        for key in keys {
            match secureclaw_core::task_state::state_lookup_digests(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Amount,
                &session.id,
                key,
            ) {
                Ok(d) => digests.extend(d),
                Err(_) => return false,
            }
        }
        self.inner
            .store
            .amount_known(&session.id, &digests)
            .await
            .unwrap_or(false)
    }

    /// Count one unconfirmed use of a limited grant in the store; `false` if it is used up or
    /// the store fails (two concurrent previews, on one replica or two, cannot both take the
    /// last use).
    async fn take_grant(&self, session: &SessionRecord, key: &str, limit: u64) -> bool {
        match self
            .inner
            .store
            .take_grant_use(&session.id, key, limit)
            .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::error!(error = %e, "taking a grant use failed; the call needs a human");
                false
            }
        }
    }

    /// A granted financial effect pays each object once without a human (red-team M2: a grant
    /// of two payments paid INV-42 twice): one use of the grant per object the call names
    /// ([`amounts::payment_objects`], counted in the store like every grant use). `true` for
    /// another effect or one that names no object; `false` if the object was paid under this
    /// grant before or the store fails.
    async fn take_object_grant(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        key: &str,
        arguments: &Map<String, Value>,
    ) -> bool {
        if !entry.financial {
            return true;
        }
        let mut objects = amounts::payment_objects(arguments);
        if objects.is_empty() {
            return true;
        }
        objects.sort();
        objects.dedup();
        let object_key = format!("{key}\u{1f}objects\u{1f}{}", objects.join("\u{1f}"));
        self.take_grant(session, &object_key, 1).await
    }

    /// Whether a search (a read whose tool matches the call's text against content) may run:
    /// always when every search text is named by the task (each of its words, split at
    /// whitespace and glob/regex wildcards, anchors as a target would, and has three or more
    /// characters); otherwise it takes one
    /// of the session's `max_unanchored_match_reads` uses, counted in the store across
    /// replicas. The count depends only on what the runtime sent, never on what the search
    /// would find, so the refusal itself answers nothing. A store failure refuses (fail
    /// closed).
    async fn take_match_read(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
    ) -> bool {
        let texts = crate::known::search_texts(arguments);
        let trusted = &self.inner.config.trusted_targets;
        // Named means the user wrote the text itself: a trusted `@domain` or directory is a
        // pattern, and a search that only ends in one still probes what is below it (red-team
        // R4).
        let named = |text: &str| {
            secureclaw_core::anchor::named_exactly(text, &session.envelope, trusted) || {
                let mut words = text
                    .split(|c: char| c.is_whitespace() || "*?[]{}()|^$+\\\"'".contains(c))
                    .filter(|w| !w.is_empty())
                    .peekable();
                // Words of one or two characters (digits, initials) never count as named:
                // strung together they would probe withheld values freely.
                words.peek().is_some()
                    && words.all(|w| {
                        w.chars().count() >= 3
                            && secureclaw_core::anchor::named_exactly(w, &session.envelope, trusted)
                    })
            }
        };
        if texts.iter().all(|t| t.trim().is_empty() || named(t)) {
            return true;
        }
        self.take_grant(
            session,
            MATCH_READS_KEY,
            self.inner.config.limits.max_unanchored_match_reads,
        )
        .await
    }

    /// Remember the amounts an anchored read returned (see [`Self::amount_withheld`]), as keyed
    /// digests in the store. A failure is logged and otherwise harmless: an amount the store
    /// does not know needs a human.
    async fn note_read_amounts(
        &self,
        session: &SessionRecord,
        output: &ToolOutput,
        arguments: &Map<String, Value>,
    ) {
        // The objects the read named: the scalars of its arguments.
        fn scalars(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(amounts::object_binding(s)),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|i| scalars(i, out)),
                Value::Object(map) => map.values().for_each(|i| scalars(i, out)),
                Value::Null | Value::Bool(_) => {}
            }
        }
        let mut objects = Vec::new();
        arguments.values().for_each(|v| scalars(v, &mut objects));
        objects.retain(|o| !o.is_empty());
        let mut amounts = Vec::new();
        if let Some(v) = &output.structured {
            amounts::read_amounts(v, &objects, &mut amounts);
        }
        for block in &output.content {
            if let Some(v) = block
                .get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
            {
                amounts::read_amounts(&v, &objects, &mut amounts);
            }
        }
        if amounts.is_empty() {
            return;
        }
        let digests: Result<Vec<String>, _> = amounts
            .iter()
            .map(|a| {
                secureclaw_core::task_state::state_digest(
                    &self.inner.keys,
                    secureclaw_core::task_state::StateDigest::Amount,
                    &session.id,
                    a,
                )
            })
            .collect();
        let noted = match digests {
            Ok(d) => self
                .inner
                .store
                .note_amounts(&session.id, &d)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = noted {
            tracing::warn!(error = %e, "recording read amounts failed; they will need a human");
        }
    }

    /// Remember the objects a store effect of this session is about to write (the strings in
    /// its target fields and the identifiers in its arguments): a later read of them is never
    /// anchored, so the session cannot anchor a value by writing it and reading it back
    /// (DESIGN.md §3: objects the session itself wrote never confer anchoring). Recorded in the
    /// store, for every replica, before dispatch, since a write whose outcome is unknown may
    /// have happened. `Err` if the store could not record them: the effect must not run.
    async fn note_written(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Result<(), ()> {
        let mut values: Vec<String> = Vec::new();
        // The call passed `max_targets_per_call` in prepare(); past it (not expected), the
        // session's written set is marked full below, which fails closed.
        let limit = self.inner.config.limits.max_targets_per_call;
        let (args, fields) = (arguments.clone(), entry.targets.clone());
        let found = tokio::task::spawn_blocking(move || {
            collect_targets_bounded(&args, &fields, false, limit)
        })
        .await
        .ok()
        .and_then(Result::ok);
        let overflow = found.is_none();
        for t in found.unwrap_or_default() {
            let value = t.value.trim().to_owned();
            // A handle written to: its plaintext is written too, so that neither the handle
            // nor the literal value anchors a later read of what the session wrote.
            if let [(_, id)] = find_handles(&Value::String(value.clone())).as_slice()
                && id.0 == value
                && let Some(r) = self.inner.store.handle(id).await.ok().flatten()
            {
                values.extend(self.handle_plaintext(&r).await);
            }
            values.push(value);
        }
        // Each value's path keys too, so that a respelt path (`a//b`, `./b`, `a/./b`, a
        // relative suffix) of an object the session wrote is still its own (red-team H1: a
        // read of `reports/x.json` anchored what the session wrote as `reports//x.json`).
        let keys: Vec<String> = values.iter().flat_map(|v| written_path_keys(v)).collect();
        values.extend(keys);
        let store = &self.inner.store;
        let recorded = if overflow {
            store.mark_written_full(&session.id).await
        } else {
            let mut rows = Vec::with_capacity(values.len());
            for value in values {
                let digest = secureclaw_core::task_state::state_digest(
                    &self.inner.keys,
                    secureclaw_core::task_state::StateDigest::Written,
                    &session.id,
                    &value,
                )
                .map_err(|e| {
                    tracing::error!(error = %e, "no handle key for the written set");
                })?;
                rows.push(secureclaw_core::store::WrittenValue { digest, value });
            }
            let limits = &self.inner.config.limits;
            let bounds = secureclaw_core::store::WrittenBounds {
                max_values: u64::try_from(limits.max_written_values_per_session)
                    .unwrap_or(u64::MAX),
                max_bytes: u64::try_from(limits.max_written_bytes_per_session).unwrap_or(u64::MAX),
            };
            store
                .add_written(&session.id, &rows, bounds)
                .await
                .map(|_| ())
        };
        recorded.map_err(|e| {
            tracing::error!(error = %e, "recording the written set failed; the effect does not run");
        })
    }

    /// Remember the handles an egress effect of this session is about to resolve (every
    /// handle id in its arguments), so that their plaintext is turned back into the handle in
    /// every later result of the session (red-team H2: a value posted to a channel came back in
    /// clear when the channel was read; an API echoed it upper-cased). Kept in the session's
    /// written set, in the store, before dispatch; `Err` if the store could not record them:
    /// the effect must not run.
    async fn note_released(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
    ) -> Result<(), ()> {
        let ids = find_handles(&Value::Object(arguments.clone()));
        if ids.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(ids.len());
        for (_, id) in ids {
            let value = format!("{RELEASED_HANDLE}{}", id.0);
            let digest = secureclaw_core::task_state::state_digest(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Written,
                &session.id,
                &value,
            )
            .map_err(|e| {
                tracing::error!(error = %e, "no handle key for the released set");
            })?;
            rows.push(secureclaw_core::store::WrittenValue { digest, value });
        }
        let limits = &self.inner.config.limits;
        let bounds = secureclaw_core::store::WrittenBounds {
            max_values: u64::try_from(limits.max_written_values_per_session).unwrap_or(u64::MAX),
            max_bytes: u64::try_from(limits.max_written_bytes_per_session).unwrap_or(u64::MAX),
        };
        self.inner
            .store
            .add_written(&session.id, &rows, bounds)
            .await
            .map(|_| ())
            .map_err(|e| {
                tracing::error!(error = %e, "recording released handles failed; the effect does not run");
            })
    }

    /// The plaintexts of the handles this session released into egress effects
    /// ([`Self::note_released`]), each with its handle: (plaintext, handle). Handles whose
    /// record or value is gone are skipped (their plaintext is no longer known here).
    async fn released_values(&self, session: &SessionRecord) -> Vec<(String, HandleId)> {
        let (written, _) = self.written_values(session).await;
        let mut out = Vec::new();
        for value in written {
            let Some(id) = value.strip_prefix(RELEASED_HANDLE) else {
                continue;
            };
            let id = HandleId(id.to_owned());
            let Some(record) = self.inner.store.handle(&id).await.ok().flatten() else {
                continue;
            };
            if record.session != session.id {
                continue;
            }
            if let Some(plain) = self.handle_plaintext(&record).await {
                out.push((plain, id));
            }
        }
        out
    }

    /// This session's written set as the store holds it now (this process's copy, refreshed
    /// with the rows it has not seen): its values and whether it is full. Full if the store
    /// fails (fail closed: every value then counts as the session's own).
    async fn written_values(&self, session: &SessionRecord) -> (Vec<String>, bool) {
        let seen = self
            .inner
            .written_cache
            .lock()
            .ok()
            .map(|c| c.get(&session.id).map_or(0, |w| w.seq));
        let Some(seen) = seen else {
            return (Vec::new(), true);
        };
        let rows = match self.inner.store.written_since(&session.id, seen).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reading the written set failed; treated as full");
                return (Vec::new(), true);
            }
        };
        let Ok(mut cache) = self.inner.written_cache.lock() else {
            return (Vec::new(), true);
        };
        if rows.values.is_empty() && !rows.full && !cache.contains_key(&session.id) {
            return (Vec::new(), false);
        }
        let w = cache.entry(session.id.clone()).or_default();
        for (seq, value) in rows.values {
            // Another refresh may have appended these rows meanwhile.
            if seq > w.seq {
                w.seq = seq;
                w.values.push(value);
            }
        }
        w.full |= rows.full;
        (w.values.clone(), w.full)
    }

    /// The text the runtime supplied for this call (F1): every string and key of its
    /// arguments (as sent and normalized, handle ids aside) and the values the session wrote
    /// before; `fresh_all` when the arguments hold anything address-like.
    async fn runtime_text(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
    ) -> crate::declassify::RuntimeText {
        fn strings(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
                Value::Object(map) => {
                    for (k, i) in map {
                        out.push(k.clone());
                        strings(i, out);
                    }
                }
                Value::Null | Value::Bool(_) => {}
            }
        }
        let mut out = Vec::new();
        strings(&Value::Object(arguments.clone()), &mut out);
        let normalized: Vec<String> = out
            .iter()
            .filter_map(|s| match secureclaw_core::normalize::normalize(s) {
                std::borrow::Cow::Owned(n) => Some(n),
                std::borrow::Cow::Borrowed(_) => None,
            })
            .collect();
        out.extend(normalized);
        out.retain(|s| !s.trim().is_empty());
        // A full written set stands for "anything may be the session's own text": every value
        // of the result gets a fresh handle (fail closed, like its reads being unanchored).
        let (written, written_full) = self.written_values(session).await;
        out.extend(written);
        // Past this much text a substring test per vaulted value costs too much: treat every
        // value of the result as the runtime's (fresh handles only).
        const MAX_RUNTIME_TEXT: usize = 64 * 1024;
        let fresh_all = written_full
            || out.iter().map(String::len).sum::<usize>() > MAX_RUNTIME_TEXT
            || !collect_targets(arguments, &[], false).is_empty();
        crate::declassify::RuntimeText {
            strings: out,
            fresh_all,
        }
    }

    /// Whether this session wrote `value` (keyed digests under every live handle key, looked up
    /// in the store), or its written set is full; `true` if the store or key ring fails.
    /// The value is looked up as written and by its path keys (`a//b.json` is `a/b.json`, and a
    /// relative spelling matches an absolute path ending in it; [`written_lookup_keys`]).
    async fn wrote(&self, session: &SessionRecord, value: &str) -> bool {
        let mut digests = Vec::new();
        for key in std::iter::once(value.trim().to_owned()).chain(written_lookup_keys(value)) {
            match secureclaw_core::task_state::state_lookup_digests(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Written,
                &session.id,
                &key,
            ) {
                Ok(d) => digests.extend(d),
                Err(_) => return true,
            }
        }
        self.inner
            .store
            .wrote_any(&session.id, &digests)
            .await
            .unwrap_or(true)
    }

    /// A read is anchored when every scalar in its arguments — strings and numbers (as their
    /// decimal text), at any depth — is anchored, and there is at least one:
    /// `read_invoice {"invoice_id": "INV-42"}` for a task naming INV-42. An anchored word next
    /// to an unnamed selector (`{"project": "alpha", "number": 8}`) does not anchor the object.
    ///
    /// A scalar is anchored literally (the task envelope or the operator's trusted targets
    /// name it) or by a handle: the string is exactly one handle id (surrounding whitespace
    /// aside) whose record, in `records`, is anchored — a handle from an authoritative field
    /// of an anchored read. Anchoring thus propagates along authoritative links (the user id a
    /// lookup by the user's own name returned, the orders of that user's profile, …) and
    /// nowhere else: text around a handle, a handle from free text or from an unanchored read,
    /// and any value or handle the session itself wrote to (its plaintext included) leave the
    /// read unanchored.
    async fn read_anchored(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
        records: &[HandleRecord],
    ) -> bool {
        fn leaves(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|i| leaves(i, out)),
                Value::Object(map) => map.values().for_each(|i| leaves(i, out)),
                Value::Null | Value::Bool(_) => {}
            }
        }
        let mut all = Vec::new();
        arguments.values().for_each(|v| leaves(v, &mut all));
        if all.is_empty() {
            return false;
        }
        for s in &all {
            if self.wrote(session, s).await {
                return false;
            }
            let refs = find_handles(&Value::String(s.clone()));
            let anchored = match refs.as_slice() {
                [] => is_anchored(s, &session.envelope, &self.inner.config.trusted_targets),
                [(_, id)] if id.0 == s.trim() => match records.iter().find(|r| &r.id == id) {
                    Some(r) if r.anchored => match self.handle_plaintext(r).await {
                        Some(plain) => !self.wrote(session, &plain).await,
                        None => false,
                    },
                    _ => false,
                },
                _ => false,
            };
            if !anchored {
                return false;
            }
        }
        true
    }

    /// The vault value behind a handle record (for the gateway's own checks; never returned
    /// to the runtime). `None` if the store fails or the object is gone.
    async fn handle_plaintext(&self, record: &HandleRecord) -> Option<String> {
        self.inner
            .store
            .object_value_at(&record.object_id, record.version)
            .await
            .ok()
            .flatten()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// Declassify and audit a result. `read`: set for a read, whose objects become protected
    /// objects of the session if the result withheld a protected value (at least one
    /// handle); if they cannot be recorded, the result is withheld.
    #[expect(clippy::too_many_arguments, reason = "the result's full context")]
    async fn finish(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        read: Option<ReadOf<'_>>,
        mut output: ToolOutput,
        action: Option<ActionId>,
        resolved: &[(String, HandleId)],
        runtime_args: &Map<String, Value>,
    ) -> CallOutcome {
        let anchored = read.as_ref().is_some_and(|r| r.anchored);
        // A value the executor resolved for this call goes back to its handle before anything
        // else looks at the result: an upstream that echoes its arguments must not turn a
        // handle into plaintext for the runtime.
        scrub_resolved(&mut output, resolved);
        // So does a value the session released into an earlier egress effect, whatever its
        // letter case, wherever it comes back (a channel read, a sent folder, an echo).
        let released = self.released_values(session).await;
        scrub_released(&mut output, &released);
        // After an effect ran, a failure here must not claim that nothing was executed.
        let failed = if action.is_some() {
            ReasonCode::ResultWithheld
        } else {
            ReasonCode::StoreUnavailable
        };
        let runtime = self.runtime_text(session, runtime_args).await;
        let d = Declassifier {
            keys: &self.inner.keys,
            runtime: &runtime,
            store: self.inner.store.as_ref(),
            classifier: &self.inner.classifier,
            summary: &self.inner.config.summary,
            handle_ttl_ms: self.inner.config.limits.handle_ttl_ms,
            now: self.now(),
        };
        match d
            .declassify(session, entry, anchored, output, resolved)
            .await
        {
            Ok((output, handles, cut)) => {
                if let Some(read) = &read
                    && handles > 0
                {
                    let records: BTreeMap<HandleId, HandleRecord> = read
                        .records
                        .iter()
                        .map(|r| (r.id.clone(), r.clone()))
                        .collect();
                    if self
                        .mark(
                            ObjectMark::Protected,
                            session,
                            entry,
                            read.arguments,
                            &records,
                        )
                        .await
                        .is_err()
                    {
                        return self
                            .deny(
                                session,
                                &entry.exposed,
                                Some(entry),
                                failed,
                                action.as_ref(),
                            )
                            .await;
                    }
                } else if let Some(read) = &read
                    && !output.is_error
                    && !cut
                {
                    // A read that withheld nothing and cut nothing (a summary cut hides part of
                    // the object, red-team R2): the session has seen the object's content (see
                    // `ObjectMark::Seen`). A failure only costs a later edit's read-first.
                    let records: BTreeMap<HandleId, HandleRecord> = read
                        .records
                        .iter()
                        .map(|r| (r.id.clone(), r.clone()))
                        .collect();
                    let _ = self
                        .mark(ObjectMark::Seen, session, entry, read.arguments, &records)
                        .await;
                }
                let mut ev = self.event(AuditKind::Read, session, &entry.exposed);
                ev.action_id = action.as_ref().map(|a| a.0.clone());
                ev.detail = json!({"handles_issued": handles, "is_error": output.is_error});
                if self.audit(ev).await.is_err() {
                    return self
                        .deny(
                            session,
                            &entry.exposed,
                            Some(entry),
                            failed,
                            action.as_ref(),
                        )
                        .await;
                }
                CallOutcome::Completed {
                    output,
                    action_id: action,
                }
            }
            Err(()) => {
                self.deny(
                    session,
                    &entry.exposed,
                    Some(entry),
                    failed,
                    action.as_ref(),
                )
                .await
            }
        }
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
            // Only the read path's decision mints the permit the executor needs: a read in the
            // catalog, allowed by the policy, whose handles all name it as a sink.
            let permit = match ReadPermit::decide(
                &entry,
                self.inner.policy.as_ref(),
                &policy_request,
                &prepared.handle_records,
            ) {
                Ok(permit) => permit,
                Err(reason) => {
                    return self.deny(session, tool, Some(&entry), reason, None).await;
                }
            };
            if entry.matches_content && !self.take_match_read(session, &arguments).await {
                return self
                    .deny(session, tool, Some(&entry), ReasonCode::MatchBudget, None)
                    .await;
            }
            let anchored = self
                .read_anchored(session, &arguments, &prepared.handle_records)
                .await;
            let (mut resolver, pairs) = self
                .resolve_handles(session, &entry, None, &arguments)
                .await;
            let mut resolve = |id: &HandleId| resolver.next(id);
            return match self
                .inner
                .executor
                .read(permit, &arguments, &mut resolve)
                .await
            {
                Ok(output) => {
                    let read = ReadOf {
                        anchored,
                        arguments: &arguments,
                        records: &prepared.handle_records,
                    };
                    if anchored {
                        self.note_read_amounts(session, &output, &arguments).await;
                    }
                    self.finish(
                        session,
                        &entry,
                        Some(read),
                        output,
                        None,
                        &pairs,
                        &arguments,
                    )
                    .await
                }
                Err(e) => self.exec_failure(session, &entry, &e, None).await,
            };
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

    // ----------------------------------------------------------------- approvals

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

    // ----------------------------------------------------------------- handles

    /// Describe a handle of this session (never its value).
    ///
    /// # Errors
    /// [`GatewayError::NotFound`] for unknown, foreign or expired handles (one answer).
    pub async fn describe_handle(
        &self,
        session: &SessionRecord,
        id: &HandleId,
    ) -> Result<Value, GatewayError> {
        let rec = self
            .inner
            .store
            .handle(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        match rec {
            Some(r) if r.caller == session.caller && r.session == session.id => Ok(r.describe()),
            _ => Err(GatewayError::NotFound("handle".into())),
        }
    }

    /// Revoke a handle of this session.
    ///
    /// # Errors
    /// As [`Gateway::describe_handle`].
    pub async fn revoke_handle(
        &self,
        session: &SessionRecord,
        id: &HandleId,
    ) -> Result<(), GatewayError> {
        self.describe_handle(session, id).await?;
        self.inner
            .store
            .revoke_handle(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let mut ev = self.event(AuditKind::HandleRevoke, session, "");
        ev.tool = None;
        ev.detail = json!({"handle": id});
        self.audit(ev)
            .await
            .map_err(|()| GatewayError::Store("audit append failed".into()))
    }

    // ----------------------------------------------------------------- operator views

    /// Replace the handles in `text` by their values, for a trusted approver (operator API,
    /// CLI) only — never for the runtime; see [`reveal_for_approver`].
    pub async fn reveal_for_approver(&self, text: &str) -> String {
        reveal_for_approver(self.inner.store.as_ref(), text).await
    }

    /// Replace the handles in `text` by their descriptions (label, sensitivity, source), for
    /// a channel the runtime may read; see [`describe_handles`].
    pub async fn describe_handles(&self, text: &str) -> String {
        describe_handles(self.inner.store.as_ref(), text).await
    }

    /// Up to `limit` audit records with `seq >= from_seq`, in order (audit export).
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<secureclaw_core::audit::AuditRecord>, GatewayError> {
        self.inner
            .store
            .audit_records(from_seq, limit)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))
    }

    /// Verify the whole audit chain; the number of records verified.
    ///
    /// # Errors
    /// The store's error: [`StoreError::Audit`] naming the first record that does not verify,
    /// [`StoreError::Unavailable`], …
    pub async fn verify_audit(&self) -> Result<u64, StoreError> {
        self.inner.store.verify_audit().await
    }

    /// The speculative trace events and branch table of `session_id`, from the audit log; see
    /// [`session_trace`].
    ///
    /// # Errors
    /// [`GatewayError::Store`] if the audit log cannot be read.
    pub async fn session_trace(
        &self,
        session_id: &str,
    ) -> Result<
        (
            Vec<secureclaw_core::exposure::TraceEvent>,
            secureclaw_core::contract::BranchTable,
        ),
        GatewayError,
    > {
        session_trace(self.inner.store.as_ref(), session_id).await
    }
}

/// Whether `arguments` carry a handle anywhere but as the whole value of a target field: in
/// content (a file's text, an edit's replacement), where the executor resolves it into the
/// object written. A handle that is exactly a target's value names a record or a destination.
/// The store's use counter for a session's unanchored searches (beside the task's grants; a
/// grant pattern holds no spaces or parentheses in practice, and a collision would only share
/// a count).
const MATCH_READS_KEY: &str = "(unanchored match reads)";

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

/// Anchoring and provenance of a target carried by a handle: only a handle from an
/// authoritative field of an anchored read anchors.
fn handle_provenance(record: Option<&HandleRecord>) -> (bool, Provenance) {
    match record {
        Some(r) if r.anchored => (
            true,
            Provenance::AuthoritativeField {
                source: r.source.clone(),
            },
        ),
        Some(r) => (
            false,
            Provenance::FreeText {
                source: r.source.clone(),
            },
        ),
        None => (false, Provenance::Literal),
    }
}

/// SHA-256 over the result's JSON (structured content and blocks), hex.
fn result_digest(output: &ToolOutput) -> String {
    let v = json!({"content": output.content, "structured": output.structured, "is_error": output.is_error});
    hex::encode(Sha256::digest(
        serde_json_canonicalizer::to_vec(&v).unwrap_or_default(),
    ))
}

/// Distinct non-ASCII code points listed by name in an approval display warning; the rest are
/// counted (red-team F14).
pub const MAX_FLAGGED_CODE_POINTS: usize = 32;

/// Characters of one revealed handle value shown in an approval display; a longer value is cut
/// with a marker naming how much is hidden (red-team F7).
pub const MAX_REVEALED_VALUE_CHARS: usize = 1024;

/// Distinct non-ASCII characters of `text` in order of first appearance: at most
/// [`MAX_FLAGGED_CODE_POINTS`] of them formatted (`U+0430 'а'`), and how many there are in
/// all. Linear (a set, not a list scan: red-team F14).
fn flagged_code_points(text: &str) -> (Vec<String>, usize) {
    let mut seen = std::collections::HashSet::new();
    let mut listed = Vec::new();
    for c in text.chars().filter(|c| !c.is_ascii()) {
        if seen.insert(c) && listed.len() < MAX_FLAGGED_CODE_POINTS {
            listed.push(format!("U+{:04X} {c:?}", u32::from(c)));
        }
    }
    (listed, seen.len())
}

/// `U+0430 'а', U+0440 'р'` or, past the cap, `… (and N more)`.
fn code_point_list(listed: &[String], total: usize) -> String {
    let mut out = listed.join(", ");
    if total > listed.len() {
        out.push_str(&format!(" (and {} more)", total - listed.len()));
    }
    out
}

/// `c` is shown as an escape in an approval display: control characters, line and paragraph
/// separators, and the invisible and bidirectional-control characters normalization removes.
fn shown_escaped(c: char) -> bool {
    c.is_control()
        || secureclaw_core::normalize::is_removable(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `text` with every [`shown_escaped`] character written as `\u{…}` (for JSON text, which
/// already escapes quotes and control characters but not invisible or bidirectional ones).
fn escape_invisible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if shown_escaped(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as it is shown inside an approval display: every character that could break the
/// layout or hide text is made visible (`\n`, `\r`, `\t`, `\u{202e}`), as are the quote,
/// the backslash and the «» delimiters of revealed values, and the result is cut after `max`
/// characters with a marker.
#[must_use]
pub fn display_escape(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0usize;
    let mut total = 0usize;
    for c in text.chars() {
        total += 1;
        if shown >= max {
            continue;
        }
        shown += 1;
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '«' | '»' => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c if shown_escaped(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    if total > shown {
        out.push_str(&format!("…[{} more characters not shown]", total - shown));
    }
    out
}

/// The approval display. A summary line comes first (unanchored targets, non-ASCII characters
/// in the arguments), then the non-ASCII warning listing them by code point (a Cyrillic `а` in
/// an address looks like a Latin `a`), each target's field, anchoring and provenance, the tool's
/// flags, and last the tool and every argument in full — so nothing an argument contains
/// (padding, fake lines) can push the warnings off the first screen (red-team F7). Shown on the
/// trusted side (approval API and CLI) with handles revealed ([`reveal_for_approver`], which
/// adds its own warning for the revealed values), and to a trusted MCP client with handles
/// described.
fn describe_call(entry: &ToolEntry, args: &Map<String, Value>, targets: &[TargetFact]) -> String {
    // Every argument in full, JSON-encoded (control characters escaped, strings quoted), so
    // padding, newlines or look-alike separators cannot hide part of a target from the human;
    // invisible and bidirectional-control characters are escaped too.
    let parts: Vec<String> = args
        .iter()
        .map(|(k, v)| format!("{}={}", Value::String(k.clone()), v))
        .collect();
    let call = escape_invisible(&format!("{}({})", entry.exposed, parts.join(", ")));
    let unanchored = targets.iter().filter(|t| !t.anchored).count();
    let (listed, distinct) = flagged_code_points(&Value::Object(args.clone()).to_string());
    let mut out = format!("{} of {} target(s) NOT ANCHORED", unanchored, targets.len());
    if distinct > 0 {
        out.push_str(&format!(
            "; {distinct} distinct non-ASCII character(s) in the arguments\n  WARNING: non-ASCII characters (look-alikes possible): {}",
            code_point_list(&listed, distinct)
        ));
    }
    // Unanchored targets first.
    let mut ordered: Vec<&TargetFact> = targets.iter().collect();
    ordered.sort_by_key(|t| t.anchored);
    for t in ordered {
        let source = match &t.provenance {
            Provenance::Task => "named in the task".to_owned(),
            Provenance::Operator => "operator's trusted targets".to_owned(),
            Provenance::AuthoritativeField { source } => {
                format!("authoritative field of {source}")
            }
            Provenance::FreeText { source } => format!("free text of {source}"),
            Provenance::Literal => "written by the agent".to_owned(),
            Provenance::ProtectedObject => {
                "PROTECTED OBJECT: the agent saw its content only as handles".to_owned()
            }
            Provenance::UnreadObject => {
                "UNREAD OBJECT: the agent has not read it; the call matches against its content"
                    .to_owned()
            }
        };
        let state = if t.anchored {
            "anchored"
        } else {
            "NOT ANCHORED"
        };
        out.push_str(&format!(
            "\n  target {}: {state} ({source})",
            escape_invisible(&Value::String(t.field.clone()).to_string())
        ));
    }
    let mut flags: Vec<String> = Vec::new();
    if entry.destructive {
        flags.push("destructive".into());
    }
    if entry.financial {
        flags.push("financial".into());
    }
    flags.push(format!("{} sink", entry.sink.as_str()));
    out.push_str(&format!("\n  tool: {}", flags.join(", ")));
    out.push_str(&format!("\n  call: {call}"));
    out
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

/// The name of a session in audit records: `ses#` + the first 16 hex digits of SHA-256 of the
/// session id. The session id is the runtime's bearer credential, so the exportable audit log
/// must not carry it; the digest still correlates records of one session.
#[must_use]
pub fn audit_session_id(session_id: &str) -> String {
    let digest = hex::encode(Sha256::digest(session_id.as_bytes()));
    format!("ses#{}", digest.get(..16).unwrap_or_default())
}

/// Every handle id in `text`, in order of appearance (repeats included).
fn handle_ids(text: &str) -> Vec<HandleId> {
    let mut ids = Vec::new();
    let mut value = Value::String(text.to_owned());
    let _ = secureclaw_core::handle::substitute_handles::<()>(&mut value, &mut |id| {
        ids.push(id.clone());
        Ok(id.0.clone())
    });
    ids
}

/// `text` with each handle replaced by `replacements[id]`; handles without one stay as they are.
fn replace_handles(text: &str, replacements: &BTreeMap<HandleId, String>) -> String {
    let mut value = Value::String(text.to_owned());
    let _ = secureclaw_core::handle::substitute_handles::<()>(&mut value, &mut |id| {
        Ok(replacements
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.0.clone()))
    });
    match value {
        Value::String(s) => s,
        _ => text.to_owned(),
    }
}

/// Replace the handles in `text` by their values, for display to a trusted approver (CLI,
/// operator API) only — never to the runtime. Unresolvable handles stay as they are.
///
/// A revealed value is what the human actually approves, so it is checked here (red-team F4,
/// F7): it is shown between «» with control, invisible and bidirectional characters, quotes and
/// the delimiters escaped ([`display_escape`]), cut after [`MAX_REVEALED_VALUE_CHARS`]; and
/// when any revealed value has non-ASCII or escaped characters, or was cut, a warning line
/// naming them by code point is put before everything else.
pub async fn reveal_for_approver(store: &dyn VaultStore, text: &str) -> String {
    let mut replacements = BTreeMap::new();
    let mut flagged_values = 0usize;
    let mut odd = String::new();
    for id in handle_ids(text) {
        if replacements.contains_key(&id) {
            continue;
        }
        let plain = match store.handle(&id).await.ok().flatten() {
            Some(r) => store
                .object_value_at(&r.object_id, r.version)
                .await
                .ok()
                .flatten(),
            None => None,
        };
        if let Some(v) = plain {
            let v = String::from_utf8_lossy(&v);
            let suspicious = v.chars().any(|c| !c.is_ascii() || shown_escaped(c))
                || v.chars().count() > MAX_REVEALED_VALUE_CHARS;
            if suspicious {
                flagged_values += 1;
                odd.extend(v.chars().filter(|c| !c.is_ascii() || shown_escaped(*c)));
            }
            replacements.insert(
                id,
                format!("«{}»", display_escape(&v, MAX_REVEALED_VALUE_CHARS)),
            );
        }
    }
    let body = replace_handles(text, &replacements);
    if flagged_values == 0 {
        return body;
    }
    let mut listed = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in odd.chars() {
        if seen.insert(c) && listed.len() < MAX_FLAGGED_CODE_POINTS {
            listed.push(format!("U+{:04X} {c:?}", u32::from(c)));
        }
    }
    format!(
        "WARNING: {flagged_values} revealed value(s) «…» contain non-ASCII, invisible or control characters or were cut (look-alikes possible): {}\n  {body}",
        code_point_list(&listed, seen.len())
    )
}

/// Replace the handles in `text` by a description — label, sensitivity and source — for a
/// channel the runtime may read (an MCP client's confirmation prompt). Unknown handles stay
/// as they are.
pub async fn describe_handles(store: &dyn VaultStore, text: &str) -> String {
    let mut replacements = BTreeMap::new();
    for id in handle_ids(text) {
        if replacements.contains_key(&id) {
            continue;
        }
        if let Some(r) = store.handle(&id).await.ok().flatten() {
            let description = format!(
                "[protected {} ({}) from {}]",
                r.label,
                serde_json::to_value(r.sensitivity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                r.source
            );
            replacements.insert(id, description);
        }
    }
    replace_handles(text, &replacements)
}

/// Replace every occurrence of a resolved value in the output's strings (and object keys) by
/// its handle. Longest values first, so a value containing another is replaced whole.
fn scrub_resolved(output: &mut ToolOutput, resolved: &[(String, HandleId)]) {
    let mut pairs: Vec<&(String, HandleId)> =
        resolved.iter().filter(|(v, _)| !v.is_empty()).collect();
    if pairs.is_empty() {
        return;
    }
    pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let fix = |text: &str| -> String {
        pairs.iter().fold(text.to_owned(), |acc, (value, id)| {
            acc.replace(value.as_str(), &id.0)
        })
    };
    fn walk(v: &mut Value, fix: &dyn Fn(&str) -> String) {
        match v {
            Value::String(s) => *s = fix(s),
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, fix)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    walk(&mut val, fix);
                    map.insert(fix(&k), val);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    for block in &mut output.content {
        walk(block, &fix);
    }
    if let Some(st) = output.structured.as_mut() {
        walk(st, &fix);
    }
}

/// The handle resolutions prepared by [`Gateway::resolve_handles`], handed to the executor's
/// substitution in order. A handle it does not expect next (the substitution met the handles
/// in another order) fails closed as a store failure.
struct Resolver(std::collections::VecDeque<(HandleId, Resolution)>);

impl Resolver {
    fn next(&mut self, id: &HandleId) -> Resolution {
        match self.0.pop_front() {
            Some((expected, result)) if &expected == id => result,
            _ => Err(ResolveError::Store),
        }
    }
}

/// Prefix of the written-set entries that name a handle released into an egress effect.
const RELEASED_HANDLE: &str = "released\u{1f}";

/// [`scrub_resolved`] for values released into earlier effects: every occurrence of each
/// value, compared without letter case (ASCII and Unicode simple lower case of the same
/// length), becomes its handle id. Values shorter than 4 characters are left alone (they would
/// match everywhere, and a detector finds nothing that short).
fn scrub_released(output: &mut ToolOutput, released: &[(String, HandleId)]) {
    let mut pairs: Vec<(String, &HandleId)> = released
        .iter()
        .filter(|(v, _)| v.trim().chars().count() >= 4)
        .map(|(v, id)| (v.to_lowercase(), id))
        .collect();
    if pairs.is_empty() {
        return;
    }
    pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let fix = |text: &str| -> String {
        let mut out = text.to_owned();
        for (value, id) in &pairs {
            out = replace_caseless(&out, value, &id.0);
        }
        out
    };
    fn walk(v: &mut Value, fix: &dyn Fn(&str) -> String) {
        match v {
            Value::String(s) => *s = fix(s),
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, fix)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    walk(&mut val, fix);
                    map.insert(fix(&k), val);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    for block in &mut output.content {
        walk(block, &fix);
    }
    if let Some(st) = output.structured.as_mut() {
        walk(st, &fix);
    }
}

/// `text` with every occurrence of `lower` (already lower-cased) replaced by `with`, letter
/// case ignored. Compared char by char on the lower-cased text when lower-casing keeps every
/// char's byte length; otherwise on the exact text (no case folding).
fn replace_caseless(text: &str, lower: &str, with: &str) -> String {
    let folded = text.to_lowercase();
    if folded.len() != text.len()
        || folded
            .char_indices()
            .zip(text.char_indices())
            .any(|((a, _), (b, _))| a != b)
    {
        return text.replace(lower, with);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = folded.get(at..).and_then(|rest| rest.find(lower)) {
        let start = at + found;
        out.push_str(text.get(at..start).unwrap_or_default());
        out.push_str(with);
        at = start + lower.len();
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

/// Prefix of the written-set entries that are path keys, not values.
const WRITTEN_PATH_KEY: &str = "path\u{1f}";

/// The path keys under which a written value is recorded
/// ([`secureclaw_core::protect::protect_keys`]: its cleaned absolute or relative spelling —
/// case-folded, `\\` as `/`, `.` and empty segments dropped — and, for an absolute path, its
/// suffixes; a plain name is its own relative key, so `x.json` written is found by a read of
/// `/root/x.json`).
fn written_path_keys(value: &str) -> Vec<String> {
    secureclaw_core::protect::protect_keys(value)
        .into_iter()
        .map(|k| format!("{WRITTEN_PATH_KEY}{k}"))
        .collect()
}

/// The path keys to look up for a value a read names ([`secureclaw_core::protect::match_keys`]).
fn written_lookup_keys(value: &str) -> Vec<String> {
    secureclaw_core::protect::match_keys(value)
        .into_iter()
        .map(|k| format!("{WRITTEN_PATH_KEY}{k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{replace_caseless, written_lookup_keys, written_path_keys};

    /// Red-team H2: a released value comes back as its handle whatever its letter case.
    #[test]
    fn released_values_are_found_without_letter_case() {
        let lower = "dr jane roe, patient 4471";
        assert_eq!(
            replace_caseless("posted: DR JANE ROE, PATIENT 4471!", lower, "hdl_x"),
            "posted: hdl_x!"
        );
        assert_eq!(
            replace_caseless(
                "Dr Jane Roe, patient 4471 and dr jane roe, patient 4471",
                lower,
                "h"
            ),
            "h and h"
        );
        assert_eq!(replace_caseless("nothing here", lower, "h"), "nothing here");
        // Text whose lower case changes byte lengths is compared exactly.
        assert_eq!(
            replace_caseless("İ dr jane roe, patient 4471", lower, "h"),
            "İ h"
        );
    }

    fn meets(written: &str, read: &str) -> bool {
        let keys = written_path_keys(written);
        written_lookup_keys(read).iter().any(|k| keys.contains(k))
    }

    /// Red-team H1: an object the session wrote is its own under any spelling of its path.
    #[test]
    fn a_written_path_is_found_under_every_spelling() {
        let written = "/work/proj/reports//x2.json";
        for read in [
            "/work/proj/reports/x2.json",
            "/work/proj/./reports/x2.json",
            "/work/proj/tmp/../reports/x2.json",
            "reports/x2.json",
            "./x2.json",
            "x2.json",
            "/WORK/proj/reports/X2.json",
            "\\work\\proj\\reports\\x2.json",
            "file:///work/proj/reports/x2.json",
        ] {
            assert!(meets(written, read), "{read}");
        }
        assert!(meets("./x3.json", "/work/proj/reports/x3.json"));
        assert!(meets("x3.json", "/work/proj/x3.json"));
        // Positive controls: other objects are not the session's.
        for read in [
            "/work/proj/reports/x3.json",
            "x2.jsonl",
            "/work/proj/reports",
        ] {
            assert!(!meets(written, read), "{read}");
        }
    }
}
