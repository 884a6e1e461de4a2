//! Shared fixture of the commit-path benchmarks (`benches/commit_path.rs`) and the percentile
//! driver (`examples/commit_latency.rs`, which includes this file with `#[path]`).
//!
//! The fixture is the real gateway — real key ring, real [`CedarPolicy`] (the default policy
//! set, `CedarPolicy::load(&[])`), a real [`SqliteStore`] (a WAL database in a temporary
//! directory with the store's own `synchronous=FULL`, or an in-memory database) — in front of
//! an in-process no-op [`Upstream`] that answers every call at once with an empty
//! [`ToolOutput`]. What is measured is therefore the gateway's own cost of PREVIEW + COMMIT
//! (canonicalization, policy, artifact, store writes, acceptance predicate, executor, audit),
//! without any upstream round trip.
//!
//! The one tool, `send_report`, is effectful (`readOnlyHint: false`) and not destructive (the
//! operator says so: its `destructiveHint: false` alone would not be believed); its
//! `to` argument is a target field (the default target list) and names an address the
//! session's task envelope trusts, so the default policy's `effect-anchored-allow` permit
//! allows it without confirmation. The argument object serializes to exactly
//! [`REQUEST_BYTES`] bytes.

use secureclaw_core::acceptance::{LedgerError, SingleUseLedger};
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::binding::{BindingDigest, bind};
use secureclaw_core::canonical::{CanonicalRequest, Inputs, Intent, RequestContext, TaskEnvelope};
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::policy::{EffectClass, PolicyEngine, PolicyRequest, TargetFact};
use secureclaw_core::time::UnixMillis;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, ToolOutput, ToolRule, Upstream, UpstreamError,
    UpstreamSpec, UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{SessionRecord, SqliteStore};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

/// Size of the serialized argument object (`serde_json::to_vec(arguments).len()`).
pub const REQUEST_BYTES: usize = 1024;
/// Exposed (and upstream) name of the effectful tool.
pub const TOOL: &str = "send_report";
/// Upstream id.
pub const UPSTREAM: &str = "bench";
/// The target the task envelope names.
pub const RECIPIENT: &str = "ops@corp.example";
/// Caller of the session.
pub const CALLER: &str = "bench-user";

/// Print `what` and the error, then exit: a broken fixture must abort the run rather than
/// time denials.
pub fn must<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => {
            eprintln!("benchmark fixture failed: {what}: {e}");
            std::process::exit(1)
        }
    }
}

/// An upstream that answers every call at once with an empty [`ToolOutput`].
#[derive(Debug)]
pub struct NoopUpstream;

/// The tool [`NoopUpstream`] advertises.
#[must_use]
pub fn tool() -> UpstreamTool {
    let schema = json!({
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "subject": {"type": "string"},
            "body": {"type": "string"}
        },
        "required": ["to", "subject", "body"]
    });
    UpstreamTool {
        name: TOOL.to_owned(),
        title: Some("Send report".to_owned()),
        description: Some("Send a report (no-op, for latency measurements).".to_owned()),
        input_schema: match schema {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        read_only_hint: false,
        destructive_hint: false,
        open_world_hint: true,
        output_schema: None,
    }
}

impl Upstream for NoopUpstream {
    fn id(&self) -> &str {
        UPSTREAM
    }

    fn destination(&self) -> &str {
        "in-process:noop"
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async { Ok(vec![tool()]) })
    }

    fn call_tool(
        &self,
        _name: String,
        _arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async { Ok(ToolOutput::default()) })
    }
}

/// Drive `future` to completion by polling it once: for futures that never wait (the
/// acceptance predicate over [`MemoryLedger`]), without a runtime's overhead in the timing.
/// Exits the process if the future is not ready.
pub fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => {
            eprintln!("benchmark fixture failed: a future that should be ready is pending");
            std::process::exit(1);
        }
    }
}

/// An in-memory single-use ledger (a set of spent action ids behind a mutex), for timing the
/// acceptance predicate without a database.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    spent: Mutex<HashSet<String>>,
}

#[async_trait::async_trait]
impl SingleUseLedger for MemoryLedger {
    async fn reserve(
        &self,
        action_id: &ActionId,
        _binding: &BindingDigest,
        _at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        let mut spent = self
            .spent
            .lock()
            .map_err(|_| LedgerError("poisoned".into()))?;
        Ok(spent.insert(action_id.0.clone()))
    }
}

/// The argument object: `to`, `subject` and a plain-text `body` padded so that the object
/// serializes to exactly [`REQUEST_BYTES`] bytes.
#[must_use]
pub fn arguments() -> Map<String, Value> {
    let build = |body: String| {
        let mut m = Map::new();
        m.insert("to".into(), Value::String(RECIPIENT.into()));
        m.insert("subject".into(), Value::String("Weekly report".into()));
        m.insert("body".into(), Value::String(body));
        m
    };
    let empty = serde_json::to_vec(&build(String::new()))
        .map(|v| v.len())
        .unwrap_or(0);
    let filler = "The numbers for this week are in line with the plan. ";
    let body: String = filler
        .chars()
        .cycle()
        .take(REQUEST_BYTES.saturating_sub(empty))
        .collect();
    build(body)
}

/// The trusted task envelope: it names [`RECIPIENT`] in the request text and as a trusted
/// target.
#[must_use]
pub fn envelope() -> TaskEnvelope {
    TaskEnvelope {
        request: format!("Send the weekly report to {RECIPIENT} please"),
        trusted_targets: vec![RECIPIENT.to_owned()],
        ..TaskEnvelope::default()
    }
}

/// A fresh key ring from the operating system's random source.
#[must_use]
pub fn keys() -> Arc<KeyRing> {
    Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        must(getrandom::fill(b), "random source");
    }))
}

/// Which store backs the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `SqliteStore::open` on a temporary file: WAL, `synchronous=FULL` (the production store).
    SqliteWal,
    /// `SqliteStore::open_in_memory`: same schema and statements, no file I/O, no fsync.
    SqliteMemory,
}

impl StoreKind {
    /// Short label for reports.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::SqliteWal => "sqlite-wal-file",
            StoreKind::SqliteMemory => "sqlite-in-memory",
        }
    }
}

/// A gateway over the no-op upstream, with an open session.
pub struct Fixture {
    /// Single-threaded runtime that drives the async commit.
    pub runtime: tokio::runtime::Runtime,
    /// The gateway.
    pub gateway: Gateway,
    /// The gateway's store (for timing store writes on their own).
    pub store: Arc<SqliteStore>,
    /// The session (caller [`CALLER`], envelope [`envelope`]).
    pub session: SessionRecord,
    /// The 1 KiB argument object.
    pub arguments: Map<String, Value>,
    /// Keeps the database directory alive.
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// Build the gateway, open a session and check that one preview + commit completes.
    #[must_use]
    pub fn new(kind: StoreKind) -> Self {
        let runtime = must(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            "tokio runtime",
        );
        let keys = keys();
        let (store, dir) = match kind {
            StoreKind::SqliteWal => {
                let dir = must(tempfile::tempdir(), "temporary directory");
                let store = must(
                    SqliteStore::open(&dir.path().join("bench.db"), keys.clone()),
                    "open sqlite store",
                );
                (store, Some(dir))
            }
            StoreKind::SqliteMemory => (
                must(
                    SqliteStore::open_in_memory(keys.clone()),
                    "open in-memory store",
                ),
                None,
            ),
        };
        let policy = must(CedarPolicy::load(&[]), "load default policy set");
        let spec = UpstreamSpec {
            id: UPSTREAM.into(),
            transport: UpstreamTransport::Stdio {
                command: "in-process-noop".into(),
                args: vec![],
                env: BTreeMap::new(),
                cwd: None,
            },
            namespace: false,
            protocol: Default::default(),
        };
        let upstream: Arc<dyn Upstream> = Arc::new(NoopUpstream);
        let store = Arc::new(store);
        let (specs, connector) = in_process(vec![(spec, upstream)]);
        let gateway = must(
            runtime.block_on(Gateway::start(
                keys,
                store.clone(),
                Arc::new(policy),
                config(),
                specs,
                &connector,
                system_clock(),
            )),
            "start gateway",
        );
        let session = must(
            runtime.block_on(gateway.open_session(CALLER, envelope())),
            "open session",
        );
        let fixture = Self {
            runtime,
            gateway,
            store,
            session,
            arguments: arguments(),
            _dir: dir,
        };
        let size = serde_json::to_vec(&fixture.arguments).map(|v| v.len());
        if size.as_ref().ok() != Some(&REQUEST_BYTES) {
            eprintln!("benchmark fixture failed: argument object is {size:?} bytes");
            std::process::exit(1);
        }
        must(
            fixture.preview_commit(),
            "positive control preview + commit",
        );
        fixture
    }

    /// One PREVIEW (fresh action id and artifact) followed by its COMMIT through the executor
    /// to the no-op upstream. `Err` describes anything but an allowed, completed call.
    ///
    /// # Errors
    /// A description of the preview or commit outcome when it is not allow / completed.
    pub fn preview_commit(&self) -> Result<(), String> {
        let preview = self
            .runtime
            .block_on(self.gateway.preview(&self.session, TOOL, &self.arguments))
            .map_err(|r| format!("preview denied: {r:?}"))?;
        if preview.decision != secureclaw_gateway::PreviewDecision::Allow {
            return Err(format!("preview decision `{}`", preview.decision));
        }
        let outcome = self.runtime.block_on(self.gateway.commit(
            &self.session,
            TOOL,
            self.arguments.clone(),
            &preview.action_id,
            Some(&preview.artifact),
        ));
        match outcome {
            CallOutcome::Completed { .. } => Ok(()),
            other => Err(format!("commit outcome {other:?}")),
        }
    }

    /// The canonical request a preview of the fixture's call builds (same fields as the
    /// gateway's own `prepare`: no handles, destination of the no-op upstream).
    #[must_use]
    pub fn canonical_request(&self) -> CanonicalRequest {
        CanonicalRequest {
            intent: Intent {
                upstream: UPSTREAM.into(),
                tool: TOOL.into(),
            },
            caller: self.session.caller.clone(),
            session: self.session.id.clone(),
            inputs: Inputs {
                arguments: self.arguments.clone(),
                handles: vec![],
            },
            ctx: RequestContext {
                destination: "in-process:noop".into(),
                task_digest: self.session.envelope.digest(),
                policy_digest: self.gateway.policy_digest(),
            },
        }
    }
}

/// The gateway configuration: the defaults plus the operator's word that `send_report` is not
/// destructive, and rate limits out of the way (the fixture's one session calls one tool tens
/// of thousands of times a second; the default 25 calls/s per tool refused the warm-up).
fn config() -> GatewayConfig {
    let mut c = GatewayConfig::default();
    c.limits.session_rate_per_s = u32::MAX;
    c.limits.session_burst = u32::MAX;
    c.limits.tool_rate_per_s = u32::MAX;
    c.limits.tool_burst = u32::MAX;
    c.tools.push(ToolRule {
        tool: format!("{UPSTREAM}__{TOOL}"),
        destructive: Some(false),
        ..ToolRule::default()
    });
    c
}

/// The policy facts of the fixture's call (one anchored target `to`).
#[must_use]
pub fn policy_request() -> PolicyRequest {
    PolicyRequest {
        caller: CALLER.into(),
        upstream: UPSTREAM.into(),
        tool: TOOL.into(),
        effect: EffectClass::Effect,
        known_tool: true,
        destructive: false,
        financial: false,
        granted: false,
        sink: secureclaw_core::handle::SinkKind::Egress,
        targets_declared: false,
        targets: vec![TargetFact {
            field: "to".into(),
            anchored: true,
            via_handle: false,
            provenance: secureclaw_core::policy::Provenance::Task,
        }],
        handles: vec![],
        listing: false,
    }
}

/// The parts needed to time core pieces without a gateway.
pub struct CoreParts {
    /// Key ring.
    pub keys: Arc<KeyRing>,
    /// The default Cedar policy set.
    pub policy: CedarPolicy,
    /// The fixture's canonical request.
    pub request: CanonicalRequest,
    /// Its binding digest.
    pub binding: BindingDigest,
}

impl CoreParts {
    /// Build from a fixture's canonical request shape (own key ring and policy instance).
    #[must_use]
    pub fn new(fixture: &Fixture) -> Self {
        let keys = keys();
        let policy = must(CedarPolicy::load(&[]), "load default policy set");
        let mut request = fixture.canonical_request();
        request.ctx.policy_digest = policy.digest();
        let binding = must(bind(&keys, &request), "bind");
        Self {
            keys,
            policy,
            request,
            binding,
        }
    }

    /// An allow artifact for `action_id` over the request's binding, valid for 60 s from
    /// `now`, sealed.
    #[must_use]
    pub fn artifact(&self, action_id: &ActionId, now: UnixMillis) -> AuthorizationArtifact {
        AuthorizationArtifact {
            version: ARTIFACT_VERSION,
            action_id: action_id.clone(),
            binding: self.binding.clone(),
            policy_digest: self.request.ctx.policy_digest.clone(),
            decision: ArtifactDecision::Allow,
            needs_confirmation: false,
            issued_at: now,
            not_after: now.plus_millis(60_000),
            kid: KeyId(String::new()),
        }
    }
}

/// A fresh random action id.
#[must_use]
pub fn action_id() -> ActionId {
    ActionId::generate(&mut |b: &mut [u8]| must(getrandom::fill(b), "random source"))
}

/// Current wall-clock time.
#[must_use]
pub fn now() -> UnixMillis {
    (system_clock())()
}
