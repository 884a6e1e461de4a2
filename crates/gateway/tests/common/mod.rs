//! Shared harness for the gateway's integration tests: a real [`Gateway`] over a real
//! [`SqliteStore`] on a temporary file, the real default Cedar policy set, a controllable
//! clock, the demo office (`secureclaw-demo-tools`) served in-process over a duplex pipe, and
//! a scripted `test` upstream (hangs, crashes, counts).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    dead_code,
    clippy::result_large_err
)]

use rmcp::model::{CallToolRequestParams, CallToolResponse, Tool};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use secureclaw_core::anchor::DEFAULT_TARGET_FIELDS;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::handle::SinkKind;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::recovery::{ReasonCode, Recovery};
use secureclaw_core::time::UnixMillis;
use secureclaw_demo_tools::{DemoState, DemoTools, load_state};
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Clock, Gateway, GatewayConfig, PreviewOutcome, ToolOutput, ToolRule, Upstream,
    UpstreamError, UpstreamSpec, UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{SessionRecord, SqliteStore};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

// Re-exported for the tests that check a preview's decision (not every test binary does).
#[allow(unused_imports)]
pub use secureclaw_gateway::PreviewDecision;

// ---------------------------------------------------------------------------------- constants

/// The user's task, delivered from the trusted side when a session is opened.
pub const TASK: &str =
    "Please send invoice INV-42 to our approver approver@corp.example for sign-off.";
pub const APPROVER: &str = "approver@corp.example";
pub const ATTACKER: &str = "attacker@evil.example";
/// INV-42's IBAN.
pub const IBAN: &str = "DE89370400440532013000";
/// INV-42's contact email.
pub const CONTACT: &str = "billing@acme-supplies.example";
/// Every protected plaintext of the demo office: the invoices' IBANs and contact emails.
pub const PROTECTED: &[&str] = &[
    "DE89370400440532013000",
    "AT611904300234573201",
    "GB29NWBK60161331926819",
    "billing@acme-supplies.example",
    "accounts@northwind-furniture.example",
    "invoices@blueriver-cleaning.example",
];
/// Start of the test clock (2027-01-15, a realistic Unix time in milliseconds).
pub const T0: u64 = 1_800_000_000_000;

// ---------------------------------------------------------------------------------- clock

/// A clock the test moves by hand.
#[derive(Clone, Debug)]
pub struct TestClock(Arc<AtomicU64>);

impl TestClock {
    #[must_use]
    pub fn new(start: u64) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }
    #[must_use]
    pub fn clock(&self) -> Clock {
        let ms = self.0.clone();
        Arc::new(move || UnixMillis(ms.load(Ordering::SeqCst)))
    }
    #[must_use]
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------- config

/// The demo office's gateway configuration (as `secureclaw demo` uses it).
#[must_use]
pub fn demo_config() -> GatewayConfig {
    GatewayConfig::demo_office()
}

/// A config with a generous upstream timeout (the machine may be loaded by parallel builds).
#[must_use]
pub fn test_config() -> GatewayConfig {
    let mut c = demo_config();
    c.limits.upstream_timeout_ms = 20_000;
    // These harnesses drive the commit path with thousands of previews in one session; the
    // per-session pending cap and rates have their own tests (session_limits.rs).
    c.limits.max_pending_per_session = usize::MAX;
    c.limits.session_burst = u32::MAX;
    c.limits.tool_burst = u32::MAX;
    // The scripted upstream is not in the shipped catalog of known servers, so its
    // `readOnlyHint` alone makes nothing a read: the operator declares its read tools.
    for read in ["hang", "crash", "peek", "echo", "recall", "blocks"] {
        c.tools.push(read_rule(&format!("test__{read}")));
    }
    // The operator declares the scripted tools' target fields (the default list), so a call
    // without any target is a declared target-less effect rather than an unknown one.
    // The operator also declares them non-destructive: an upstream's `destructiveHint:
    // false` alone lowers nothing (issue 11 item 6).
    c.tools.push(ToolRule {
        tool: "test__*".into(),
        effect: None,
        destructive: Some(false),
        targets: Some(
            DEFAULT_TARGET_FIELDS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        ),
        hidden: false,
        // The scripted tools stand for tools that send (a notification, a message): handles
        // flow into them as into any egress sink.
        sink: Some(SinkKind::Egress),
        ..ToolRule::default()
    });
    c
}

/// An operator rule declaring the tools matching `pattern` reads (`effect = "read"`).
#[must_use]
pub fn read_rule(pattern: &str) -> ToolRule {
    ToolRule {
        tool: pattern.into(),
        effect: Some(secureclaw_core::policy::EffectClass::Read),
        destructive: None,
        targets: None,
        hidden: false,
        ..ToolRule::default()
    }
}

#[must_use]
pub fn keys() -> Arc<KeyRing> {
    Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        getrandom::fill(b).unwrap();
    }))
}

#[must_use]
pub fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}

// ---------------------------------------------------------------------------------- upstreams

fn convert_tool(tool: Tool) -> UpstreamTool {
    let ann = tool.annotations.as_ref();
    UpstreamTool {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(ToString::to_string),
        input_schema: (*tool.input_schema).clone(),
        read_only_hint: ann.and_then(|a| a.read_only_hint).unwrap_or(false),
        destructive_hint: ann.and_then(|a| a.destructive_hint).unwrap_or(true),
        open_world_hint: ann.and_then(|a| a.open_world_hint).unwrap_or(true),
        output_schema: tool.output_schema.as_deref().cloned(),
    }
}

/// The demo office, served in-process by [`DemoTools`] and reached through an rmcp client
/// over a duplex pipe. Conversion of results as in the gateway's `RmcpUpstream`.
///
/// With `strip_unknown`, arguments the tool's schema does not declare are dropped before the
/// call, as many real MCP servers do (zod's default `object()` strips unknown keys, pydantic
/// ignores extras) — the strict demo server would otherwise reject them.
pub struct DemoUpstream {
    client: RunningService<RoleClient, ()>,
    server_name: Option<String>,
    tools: Vec<Tool>,
    strip_unknown: bool,
    pub calls: AtomicUsize,
}

impl DemoUpstream {
    pub async fn start(state: &Path, strip_unknown: bool) -> Arc<Self> {
        let server = DemoTools::new(state.to_path_buf()).unwrap();
        let tools = server.tools().to_vec();
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = ().serve(client_io).await.unwrap();
        let server_name = client
            .peer()
            .peer_info()
            .and_then(|i| i.server_info.as_ref().map(|s| s.name.clone()));
        Arc::new(Self {
            server_name,
            client,
            tools,
            strip_unknown,
            calls: AtomicUsize::new(0),
        })
    }
}

impl Upstream for DemoUpstream {
    fn id(&self) -> &str {
        "office"
    }
    fn destination(&self) -> &str {
        "in-process:demo-office"
    }
    /// As `RmcpUpstream` does: the name the demo office reported at `initialize`, so its read
    /// tools are reads through the shipped catalog.
    fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            let tools =
                self.client
                    .peer()
                    .list_all_tools()
                    .await
                    .map_err(|e| UpstreamError::Call {
                        id: "office".into(),
                        message: e.to_string(),
                    })?;
            Ok(tools.into_iter().map(convert_tool).collect())
        })
    }
    fn call_tool(
        &self,
        name: String,
        mut arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.strip_unknown {
                let declared: Vec<String> = self
                    .tools
                    .iter()
                    .find(|t| t.name == name)
                    .and_then(|t| t.input_schema.get("properties"))
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                arguments.retain(|k, _| declared.contains(k));
            }
            let mut params = CallToolRequestParams::new(name);
            params.arguments = Some(arguments);
            let response = self
                .client
                .peer()
                .call_tool_once(params)
                .await
                .map_err(|e| UpstreamError::Call {
                    id: "office".into(),
                    message: e.to_string(),
                })?;
            match response {
                CallToolResponse::Complete(result) => Ok(ToolOutput {
                    content: result
                        .content
                        .iter()
                        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
                        .collect(),
                    structured: result.structured_content,
                    is_error: result.is_error.unwrap_or(false),
                }),
                _ => Err(UpstreamError::Unsupported("office".into())),
            }
        })
    }
}

/// A scripted upstream `test`:
///
/// | tool | class | behaviour |
/// |---|---|---|
/// | `hang` | read | never answers |
/// | `hang_effect` | effect | counts, then never answers |
/// | `crash` | read | `Err` (the connection broke) |
/// | `crash_effect` | effect | counts, then `Err` (outcome unknown: the connection broke) |
/// | `count` | effect, not destructive | counts and records its arguments |
/// | `peek` | read | counts reads |
/// | `echo` | read | returns its `text` argument |
/// | `gated` | effect | counts, then waits for [`TestUpstream::open_gate`] |
/// | `blocks` | read | `n` text blocks `block 0`, `block 1`, … |
#[derive(Default)]
pub struct TestUpstream {
    pub effects: AtomicUsize,
    pub reads: AtomicUsize,
    pub received: Mutex<Vec<(String, Map<String, Value>)>>,
    gate: Notify,
}

impl TestUpstream {
    #[must_use]
    pub fn effects(&self) -> usize {
        self.effects.load(Ordering::SeqCst)
    }
    #[must_use]
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
    pub fn open_gate(&self) {
        self.gate.notify_one();
    }
}

/// An upstream tool of `name` with its annotations (input schema: any object).
pub fn test_tool(name: &str, read_only: bool, destructive: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("test tool {name}")),
        input_schema: args(json!({"type": "object"})),
        read_only_hint: read_only,
        destructive_hint: destructive,
        open_world_hint: true,
        output_schema: None,
    }
}

/// A successful result: `v` as structured content and as its JSON text.
pub fn text_output(v: Value) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": v.to_string()})],
        structured: Some(v),
        is_error: false,
    }
}

impl Upstream for TestUpstream {
    fn id(&self) -> &str {
        "test"
    }
    fn destination(&self) -> &str {
        "in-process:test"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![
                test_tool("hang", true, false),
                test_tool("hang_effect", false, false),
                test_tool("crash", true, false),
                test_tool("crash_effect", false, false),
                test_tool("count", false, false),
                test_tool("peek", true, false),
                test_tool("echo", true, false),
                test_tool("gated", false, false),
                test_tool("recall", true, false),
                test_tool("blocks", true, false),
            ])
        })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            self.received
                .lock()
                .unwrap()
                .push((name.clone(), arguments.clone()));
            let crash = || UpstreamError::Call {
                id: "test".into(),
                message: "connection closed: the server process exited".into(),
            };
            match name.as_str() {
                "hang" => {
                    self.reads.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                "hang_effect" => {
                    self.effects.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                "crash" => {
                    self.reads.fetch_add(1, Ordering::SeqCst);
                    Err(crash())
                }
                "crash_effect" => {
                    // The effect ran, then the connection broke before the answer.
                    self.effects.fetch_add(1, Ordering::SeqCst);
                    Err(UpstreamError::OutcomeUnknown {
                        id: "test".into(),
                        message: "connection closed: the server process exited".into(),
                    })
                }
                "count" => {
                    let n = self.effects.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok(text_output(json!({"n": n})))
                }
                "peek" => {
                    let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok(text_output(json!({"reads": n})))
                }
                "echo" => {
                    self.reads.fetch_add(1, Ordering::SeqCst);
                    let text = arguments
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    Ok(ToolOutput {
                        content: vec![json!({"type": "text", "text": format!("you said: {text}")})],
                        structured: None,
                        is_error: false,
                    })
                }
                "recall" => {
                    // What the last `count` effect was sent, upper-cased: a channel read back,
                    // a sent folder, an API echoing what it stored.
                    let last = self
                        .received
                        .lock()
                        .unwrap()
                        .iter()
                        .rev()
                        .find(|(n, _)| n == "count")
                        .map(|(_, a)| Value::Object(a.clone()).to_string().to_uppercase())
                        .unwrap_or_default();
                    Ok(ToolOutput {
                        content: vec![json!({"type": "text", "text": format!("posted: {last}")})],
                        structured: None,
                        is_error: false,
                    })
                }
                "blocks" => {
                    self.reads.fetch_add(1, Ordering::SeqCst);
                    let n = arguments.get("n").and_then(Value::as_u64).unwrap_or(0);
                    Ok(ToolOutput {
                        content: (0..n)
                            .map(|i| json!({"type": "text", "text": format!("block {i}")}))
                            .collect(),
                        structured: None,
                        is_error: false,
                    })
                }
                "gated" => {
                    self.effects.fetch_add(1, Ordering::SeqCst);
                    self.gate.notified().await;
                    Ok(text_output(json!({"done": true})))
                }
                other => Err(UpstreamError::Call {
                    id: "test".into(),
                    message: format!("unknown tool `{other}`"),
                }),
            }
        })
    }
}

pub use secureclaw_gateway::danger::in_process;

fn spec(id: &str) -> UpstreamSpec {
    UpstreamSpec {
        id: id.into(),
        transport: UpstreamTransport::Stdio {
            command: format!("in-process-{id}"),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    }
}

// ---------------------------------------------------------------------------------- harness

/// One gateway deployment under test.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub office: PathBuf,
    pub keys: Arc<KeyRing>,
    pub store: Arc<SqliteStore>,
    pub clock: TestClock,
    pub config: GatewayConfig,
    pub demo: Arc<DemoUpstream>,
    pub test: Arc<TestUpstream>,
    pub gw: Gateway,
    /// The session of caller `alice` with [`TASK`].
    pub session: SessionRecord,
}

impl Harness {
    pub async fn new() -> Self {
        Self::with(test_config(), false).await
    }

    pub async fn with_config(config: GatewayConfig) -> Self {
        Self::with(config, false).await
    }

    pub async fn with(config: GatewayConfig, strip_unknown: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("secureclaw.db");
        let office = dir.path().join("office.json");
        let keys = keys();
        let store = Arc::new(SqliteStore::open(&db, keys.clone()).unwrap());
        let clock = TestClock::new(T0);
        let demo = DemoUpstream::start(&office, strip_unknown).await;
        let test = Arc::new(TestUpstream::default());
        let mut h = Self {
            gw: Gateway::start(
                keys.clone(),
                store.clone(),
                Arc::new(CedarPolicy::load(&[]).unwrap()),
                config.clone(),
                vec![],
                &in_process(vec![]).1,
                clock.clock(),
            )
            .await
            .unwrap(),
            dir,
            db,
            office,
            keys,
            store,
            clock,
            config,
            demo,
            test,
            session: SessionRecord {
                id: String::new(),
                caller: String::new(),
                envelope: TaskEnvelope::default(),
                created_at: UnixMillis(0),
                expires_at: UnixMillis(0),
            },
        };
        h.gw = h.gateway(h.store.clone(), &[]).await;
        h.session = h.open_session("alice").await;
        h
    }

    /// Another gateway over `store` with the same keys, clock, config and upstreams, and the
    /// default policies plus `extra_policies` `(file, text)`.
    pub async fn gateway(
        &self,
        store: Arc<SqliteStore>,
        extra_policies: &[(&str, &str)],
    ) -> Gateway {
        let extra: Vec<(String, String)> = extra_policies
            .iter()
            .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
            .collect();
        let demo: Arc<dyn Upstream> = self.demo.clone();
        let test: Arc<dyn Upstream> = self.test.clone();
        let (specs, connector) = in_process(vec![(spec("office"), demo), (spec("test"), test)]);
        Gateway::start(
            self.keys.clone(),
            store,
            Arc::new(CedarPolicy::load(&extra).unwrap()),
            self.config.clone(),
            specs,
            &connector,
            self.clock.clock(),
        )
        .await
        .unwrap()
    }

    /// A gateway restarted over a fresh connection to the same database file and keys.
    pub async fn restarted(&self) -> Gateway {
        let store = Arc::new(SqliteStore::open(&self.db, self.keys.clone()).unwrap());
        self.gateway(store, &[]).await
    }

    /// A session opened by the operator for `caller`, with [`TASK`].
    pub async fn open_session(&self, caller: &str) -> SessionRecord {
        self.gw
            .open_session(
                caller,
                TaskEnvelope {
                    request: TASK.into(),
                    trusted_targets: vec![],
                    ..TaskEnvelope::default()
                },
            )
            .await
            .unwrap()
    }

    /// A session for `caller` whose task also grants `tools` (the user asked for those
    /// destructive or financial effects, e.g. "pay INV-42").
    pub async fn open_granted_session(&self, caller: &str, tools: &[&str]) -> SessionRecord {
        self.gw
            .open_session(
                caller,
                TaskEnvelope {
                    request: TASK.into(),
                    granted_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                    ..TaskEnvelope::default()
                },
            )
            .await
            .unwrap()
    }

    /// The demo office's state file (effects that really happened).
    #[must_use]
    pub fn state(&self) -> DemoState {
        load_state(&self.office).unwrap()
    }

    #[must_use]
    pub fn sent(&self) -> usize {
        self.state().sent.len()
    }

    #[must_use]
    pub fn payments(&self) -> usize {
        self.state().payments.len()
    }

    /// `Gateway::call` on the main gateway, checking the runtime-visible result for leaks.
    pub async fn call(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Value,
        approval: Option<&ActionId>,
    ) -> CallOutcome {
        call_on(&self.gw, session, tool, arguments, approval).await
    }

    /// `Gateway::preview` on the main gateway, checking the result for leaks.
    pub async fn preview(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Value,
    ) -> Result<PreviewOutcome, Recovery> {
        preview_on(&self.gw, session, tool, arguments).await
    }

    /// `Gateway::commit` on the main gateway, checking the result for leaks.
    pub async fn commit(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Value,
        action: &ActionId,
        artifact: Option<&str>,
    ) -> CallOutcome {
        commit_on(&self.gw, session, tool, arguments, action, artifact).await
    }

    /// Read INV-42 (anchored: the task names it) and return its summary.
    pub async fn read_invoice(&self, session: &SessionRecord, id: &str) -> Value {
        let o = self
            .call(
                session,
                "office__read_invoice",
                json!({"invoice_id": id}),
                None,
            )
            .await;
        completed(&o)
            .structured
            .clone()
            .expect("structured summary")
    }

    /// The audit log, serialized.
    #[must_use]
    pub fn audit_dump(&self) -> String {
        serde_json::to_string(&self.store.audit_records(0, usize::MAX).unwrap()).unwrap()
    }

    /// Audit verifies and holds no protected plaintext.
    pub fn assert_audit_clean(&self) {
        let n = self.store.verify_audit().expect("audit chain verifies");
        assert!(n > 0, "audit log is empty");
        assert_no_plaintext("audit log", &self.audit_dump());
    }

    /// Hold the database's write lock from a second connection until the guard drops.
    #[must_use]
    pub fn lock_store(&self) -> StoreLock {
        let conn = rusqlite::Connection::open(&self.db).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        StoreLock(Some(conn))
    }
}

/// A second connection holding `BEGIN EXCLUSIVE`.
pub struct StoreLock(Option<rusqlite::Connection>);

impl StoreLock {
    pub fn release(mut self) {
        if let Some(c) = self.0.take() {
            c.execute_batch("ROLLBACK").unwrap();
        }
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = c.execute_batch("ROLLBACK");
        }
    }
}

// ---------------------------------------------------------------------------------- calls

pub async fn call_on(
    gw: &Gateway,
    session: &SessionRecord,
    tool: &str,
    arguments: Value,
    approval: Option<&ActionId>,
) -> CallOutcome {
    let o = gw
        .call(
            session,
            tool,
            args(arguments),
            &secureclaw_gateway::CallMeta::committed(approval),
        )
        .await;
    assert_no_plaintext(&format!("outcome of {tool}"), &visible(&o));
    o
}

pub async fn preview_on(
    gw: &Gateway,
    session: &SessionRecord,
    tool: &str,
    arguments: Value,
) -> Result<PreviewOutcome, Recovery> {
    let p = gw.preview(session, tool, &args(arguments)).await;
    let text = match &p {
        Ok(p) => serde_json::to_string(p).unwrap(),
        Err(r) => format!("{}{}", serde_json::to_string(r).unwrap(), r.render()),
    };
    assert_no_plaintext(&format!("preview of {tool}"), &text);
    p
}

pub async fn commit_on(
    gw: &Gateway,
    session: &SessionRecord,
    tool: &str,
    arguments: Value,
    action: &ActionId,
    artifact: Option<&str>,
) -> CallOutcome {
    let o = gw
        .commit(session, tool, args(arguments), action, artifact)
        .await;
    assert_no_plaintext(&format!("commit of {tool}"), &visible(&o));
    o
}

/// Everything the runtime sees of an outcome.
#[must_use]
pub fn visible(o: &CallOutcome) -> String {
    match o {
        CallOutcome::Completed { output, action_id } => {
            json!({"content": output.content, "structured": output.structured,
                "is_error": output.is_error, "action_id": action_id})
            .to_string()
        }
        CallOutcome::Shadowed { output } => json!({"content": output.content,
            "structured": output.structured, "is_error": output.is_error})
        .to_string(),
        CallOutcome::Pending(r) | CallOutcome::Denied(r) | CallOutcome::Deferred(r) => {
            format!("{}\n{}", serde_json::to_string(r).unwrap(), r.render())
        }
    }
}

#[track_caller]
pub fn assert_no_plaintext(what: &str, haystack: &str) {
    for secret in PROTECTED {
        assert!(
            !haystack.contains(secret),
            "{what} contains the protected value `{secret}`: {haystack}"
        );
    }
}

// ---------------------------------------------------------------------------------- outcomes

#[must_use]
pub fn reason(o: &CallOutcome) -> Option<ReasonCode> {
    match o {
        CallOutcome::Completed { .. } | CallOutcome::Shadowed { .. } => None,
        CallOutcome::Pending(r) | CallOutcome::Denied(r) | CallOutcome::Deferred(r) => {
            Some(r.reason)
        }
    }
}

#[track_caller]
pub fn completed(o: &CallOutcome) -> &ToolOutput {
    match o {
        CallOutcome::Completed { output, .. } => {
            assert!(!output.is_error, "tool reported an error: {output:?}");
            output
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_denied(o: &CallOutcome, want: ReasonCode) {
    match o {
        CallOutcome::Denied(r) => {
            assert_eq!(r.reason, want, "wrong reason: {r:?}");
            assert_eq!(r.status, "denied");
        }
        other => panic!("expected denied({want}), got {other:?}"),
    }
}

/// Pending with `confirmation_required`; returns the action id to approve.
#[track_caller]
pub fn assert_pending(o: &CallOutcome) -> ActionId {
    match o {
        CallOutcome::Pending(r) => {
            assert_eq!(r.reason, ReasonCode::ConfirmationRequired, "{r:?}");
            assert_eq!(r.status, "pending_confirmation");
            ActionId(r.action_id.clone().expect("pending names its action id"))
        }
        other => panic!("expected pending(confirmation_required), got {other:?}"),
    }
}

/// A string field of a summary, expected to be a handle.
#[track_caller]
pub fn handle_at(summary: &Value, field: &str) -> String {
    let h = summary[field]
        .as_str()
        .unwrap_or_else(|| panic!("no `{field}` in {summary}"))
        .to_owned();
    assert!(h.starts_with("hdl_"), "`{field}` is not a handle: {h}");
    h
}

/// The first `hdl_em_…` handle inside a string.
#[must_use]
pub fn email_handle_in(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|w| w.starts_with("hdl_em_"))
        .map(str::to_owned)
}

/// Plain email arguments.
#[must_use]
pub fn email(to: &str, subject: &str) -> Value {
    json!({"to": to, "subject": subject, "body": "Invoice INV-42 for sign-off."})
}
