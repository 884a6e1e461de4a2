//! MCP 2026-07-28 on the MCP front end (issue 16 items 1–2), driven by rmcp's own client over
//! stdio (a duplex pipe):
//!
//! - version negotiation: a `server/discover` client (2026-07-28) and `initialize` clients on
//!   2025-11-25 and 2025-06-18 all list and call tools;
//! - confirmation as MRTR: a call that waits for approval is answered `input_required` with
//!   a sealed `requestState`; the retry commits exactly once after an out-of-band approval;
//!   a replayed state, an altered call, an expired state, a state from another session or for
//!   another tool, and a forged or altered state are refused for their own reason, and
//!   nothing runs;
//! - the trusted-confirmer rule: a client's `accept` approves nothing unless the operator
//!   trusts the client; a decline from any client stops the action;
//! - a 2025 client is answered as before (a pending tool error), and cannot send MRTR fields.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, InputRequest, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{RoleClient, ServiceExt};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::store::{ActionStore, ApprovalState, SessionRecord};
use secureclaw_core::time::UnixMillis;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::{
    BoxFuture, Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport,
};
use secureclaw_server::{McpFrontEnd, SessionSource};
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

type Client = RunningService<RoleClient, ClientConfig>;

/// `send` (an effect that waits for approval, counted) and `lookup` (a read).
#[derive(Default)]
struct Office {
    sent: AtomicUsize,
}

fn tool(name: &str, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("{name} something")),
        input_schema: json!({"type": "object"}).as_object().cloned().unwrap(),
        read_only_hint: read_only,
        destructive_hint: !read_only,
        open_world_hint: true,
        output_schema: None,
    }
}

impl Upstream for Office {
    fn id(&self) -> &str {
        "office"
    }
    fn destination(&self) -> &str {
        "test:office"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async { Ok(vec![tool("send", false), tool("lookup", true)]) })
    }
    fn call_tool(
        &self,
        name: String,
        _arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            if name == "send" {
                self.sent.fetch_add(1, Ordering::SeqCst);
            }
            Ok(ToolOutput {
                content: vec![json!({"type": "text", "text": format!("{name} done")})],
                structured: None,
                is_error: false,
            })
        })
    }
}

struct Stack {
    gw: Gateway,
    store: Arc<SqliteStore>,
    office: Arc<Office>,
    /// Milliseconds added to the wall clock the gateway reads.
    skew: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

async fn stack() -> Stack {
    stack_with(|_| {}).await
}

/// [`stack`] with its configuration adjusted by `tune`.
async fn stack_with(tune: impl FnOnce(&mut GatewayConfig)) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(KeyRing::generate(&mut |b| getrandom::fill(b).unwrap()));
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    let policy = Arc::new(secureclaw_policy::CedarPolicy::load(&[]).unwrap());
    let office = Arc::new(Office::default());
    let spec = UpstreamSpec {
        id: "office".into(),
        transport: UpstreamTransport::Stdio {
            command: "unused".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let mut config = GatewayConfig::default();
    // Target-less: `send` is decided by its effect alone (destructive: it waits for the user).
    config.tools.push(secureclaw_gateway::ToolRule {
        tool: "office__send".into(),
        targets: Some(vec![]),
        ..secureclaw_gateway::ToolRule::default()
    });
    config.tools.push(secureclaw_gateway::ToolRule {
        tool: "office__lookup".into(),
        effect: Some(secureclaw_core::policy::EffectClass::Read),
        ..secureclaw_gateway::ToolRule::default()
    });
    tune(&mut config);
    let skew = Arc::new(AtomicU64::new(0));
    let clock_skew = skew.clone();
    let clock: secureclaw_gateway::Clock = Arc::new(move || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        UnixMillis(now + clock_skew.load(Ordering::SeqCst))
    });
    let (specs, connector) = in_process(vec![(spec, office.clone() as Arc<dyn Upstream>)]);
    let gw = Gateway::start(
        keys,
        store.clone(),
        policy,
        config,
        specs,
        &connector,
        clock,
    )
    .await
    .unwrap();
    Stack {
        gw,
        store,
        office,
        skew,
        _dir: dir,
    }
}

/// How a test client starts its lifecycle.
#[derive(Clone, Copy, Debug)]
enum Version {
    /// `server/discover`, 2026-07-28, per-request `_meta`.
    V2026,
    /// `initialize` with 2025-11-25.
    V2025_11,
    /// `initialize` with 2025-06-18.
    V2025_06,
}

impl Stack {
    async fn session(&self) -> SessionRecord {
        self.gw
            .open_session("alice", TaskEnvelope::default())
            .await
            .unwrap()
    }

    /// A client of `session` on its own stdio pipe; `trusted` declares it a trusted host.
    async fn client(&self, session: SessionRecord, version: Version, trusted: bool) -> Client {
        self.client_waiting(session, version, trusted, Duration::from_millis(300))
            .await
    }

    /// [`Stack::client`] whose retries wait up to `wait` for a decision.
    async fn client_waiting(
        &self,
        session: SessionRecord,
        version: Version,
        trusted: bool,
        wait: Duration,
    ) -> Client {
        let front = McpFrontEnd::new(self.gw.clone(), SessionSource::Fixed(session))
            .with_trusted_client_confirmation(trusted)
            .with_approval_wait(wait);
        let (server_io, client_io) = tokio::io::duplex(256 * 1024);
        tokio::spawn(async move {
            let (read, write) = tokio::io::split(server_io);
            let _ = front.serve_lines(read, write).await;
        });
        let info = ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("mrtr-test", "1"),
        );
        let started = match version {
            Version::V2026 => {
                info.serve_with_lifecycle(
                    client_io,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
            }
            Version::V2025_11 => {
                info.with_protocol_version(ProtocolVersion::V_2025_11_25)
                    .serve(client_io)
                    .await
            }
            Version::V2025_06 => {
                info.with_protocol_version(ProtocolVersion::V_2025_06_18)
                    .serve(client_io)
                    .await
            }
        };
        started.unwrap_or_else(|e| panic!("{version:?} client could not start: {e}"))
    }

    fn sent(&self) -> usize {
        self.office.sent.load(Ordering::SeqCst)
    }

    async fn approval(&self, action: &str) -> ApprovalState {
        <SqliteStore as ActionStore>::approval(self.store.as_ref(), &ActionId(action.into()))
            .await
            .unwrap()
            .unwrap()
            .state
    }
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap())
}

async fn call_once(client: &Client, params: CallToolRequestParams) -> CallToolResponse {
    tokio::time::timeout(Duration::from_secs(30), client.call_tool_once(params))
        .await
        .expect("tools/call timed out")
        .unwrap_or_else(|e| panic!("tools/call failed: {e}"))
}

fn input_required(response: CallToolResponse) -> InputRequiredResult {
    match response {
        CallToolResponse::InputRequired(r) => r,
        other => panic!("expected input_required, got {other:?}"),
    }
}

fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// The recovery's reason of a tool error.
fn reason(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    result.structured_content.as_ref().unwrap()["recovery"]["reason"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The pending action id an `input_required` result names in its `_meta`.
fn pending_action(r: &InputRequiredResult) -> String {
    let meta = serde_json::to_value(r.meta.as_ref().unwrap()).unwrap();
    meta["dev.secureclaw/pending"]["recovery"]["action_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no action id in {meta}"))
        .to_owned()
}

fn retry(
    tool: &str,
    arguments: Value,
    state: &str,
    answer: Option<Value>,
) -> CallToolRequestParams {
    let mut p = params(tool, arguments);
    p.request_state = Some(state.to_owned());
    if let Some(answer) = answer {
        p.input_responses = Some(BTreeMap::from([(
            "dev.secureclaw/approval".to_owned(),
            answer,
        )]));
    }
    p
}

fn accept(approve: bool) -> Value {
    json!({"action": "accept", "content": {"approve": approve}})
}

const SEND: &str = "office__send";

fn mail() -> Value {
    json!({"to": "bob@example.com", "body": "quarterly numbers"})
}

#[tokio::test(flavor = "multi_thread")]
async fn every_protocol_version_lists_and_calls_tools() {
    let s = stack().await;
    for version in [Version::V2026, Version::V2025_11, Version::V2025_06] {
        let client = s.client(s.session().await, version, false).await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        assert!(
            names.contains(&SEND.to_owned()) && names.contains(&"office__lookup".to_owned()),
            "{version:?}: {names:?}"
        );
        let read = complete(call_once(&client, params("office__lookup", json!({}))).await);
        assert_ne!(read.is_error, Some(true), "{version:?}: {read:?}");
        let negotiated = client
            .peer()
            .peer_info()
            .map(|i| i.protocol_version.clone());
        eprintln!("{version:?}: server answered with {negotiated:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_band_approval_commits_once_through_mrtr() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2026, false).await;

    // The call waits: input_required with a sealed state and an elicitation that says how to
    // approve out of band (it asks nothing).
    let first = input_required(call_once(&client, params(SEND, mail())).await);
    let state = first.request_state.clone().expect("no requestState");
    let action = pending_action(&first);
    let requests = first.input_requests.as_ref().expect("no inputRequests");
    let Some(InputRequest::Elicitation(ask)) = requests.get("dev.secureclaw/approval") else {
        panic!("no approval elicitation in {requests:?}");
    };
    let ask = serde_json::to_value(ask).unwrap();
    assert!(
        ask["params"]["message"].as_str().unwrap().contains(&action),
        "{ask}"
    );
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"],
        json!({}),
        "{ask}"
    );
    assert_eq!(s.sent(), 0);

    // Retried before the decision: it waits, then asks again; nothing runs.
    let again = input_required(call_once(&client, retry(SEND, mail(), &state, None)).await);
    assert_eq!(pending_action(&again), action);
    assert_eq!(s.sent(), 0);

    // The user approves out of band while a retry waits: the retry commits.
    let gw = s.gw.clone();
    let id = ActionId(action.clone());
    let approve = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        gw.decide_approval(&id, true, "operator-api").await.unwrap();
    });
    let done = complete(call_once(&client, retry(SEND, mail(), &state, None)).await);
    approve.await.unwrap();
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(s.sent(), 1);

    // Replayed state: refused as a replay; nothing runs again.
    let replay = complete(call_once(&client, retry(SEND, mail(), &state, None)).await);
    assert_eq!(reason(&replay), "replay");
    assert_eq!(s.sent(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_altered_call_with_an_approved_state_is_refused() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2026, false).await;
    let first = input_required(call_once(&client, params(SEND, mail())).await);
    let state = first.request_state.clone().unwrap();
    let action = pending_action(&first);
    s.gw.decide_approval(&ActionId(action.clone()), true, "operator-api")
        .await
        .unwrap();
    let altered = json!({"to": "attacker@evil.example", "body": "quarterly numbers"});
    let refused = complete(call_once(&client, retry(SEND, altered, &state, None)).await);
    assert_eq!(reason(&refused), "binding_mismatch");
    assert_eq!(s.sent(), 0);
    // Positive control: the approved call itself still runs, once.
    let done = complete(call_once(&client, retry(SEND, mail(), &state, None)).await);
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(s.sent(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_foreign_and_expired_states_are_refused() {
    let s = stack().await;
    let alice = s.client(s.session().await, Version::V2026, false).await;
    let first = input_required(call_once(&alice, params(SEND, mail())).await);
    let state = first.request_state.clone().unwrap();
    let action = pending_action(&first);
    s.gw.decide_approval(&ActionId(action.clone()), true, "operator-api")
        .await
        .unwrap();

    // Another session of the same caller presents alice's approved state.
    let other = s.client(s.session().await, Version::V2026, false).await;
    let foreign = complete(call_once(&other, retry(SEND, mail(), &state, None)).await);
    assert_eq!(reason(&foreign), "request_state_invalid");

    // The state presented for another tool.
    let wrong_tool =
        complete(call_once(&alice, retry("office__lookup", json!({}), &state, None)).await);
    assert_eq!(reason(&wrong_tool), "request_state_invalid");

    // Altered: every single-character change of the token is refused.
    let bytes = state.as_bytes();
    for at in [0, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let mut altered = bytes.to_vec();
        altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        let r = complete(call_once(&alice, retry(SEND, mail(), &altered, None)).await);
        assert_eq!(reason(&r), "request_state_invalid", "change at {at}");
    }
    // Forged: not a token at all, or an approval id beside a state naming another action.
    let forged = complete(call_once(&alice, retry(SEND, mail(), "rs2.e30.e30.AAAA", None)).await);
    assert_eq!(reason(&forged), "request_state_invalid");
    let mut mixed = retry(SEND, mail(), &state, None);
    mixed.meta =
        Some(serde_json::from_value(json!({"dev.secureclaw/approval": "act_other"})).unwrap());
    let mixed = complete(call_once(&alice, mixed).await);
    assert_eq!(reason(&mixed), "request_state_invalid");
    assert_eq!(s.sent(), 0);

    // Expired: past the confirmation lifetime (an hour by default).
    s.skew.store(3_600_000 + 60_000, Ordering::SeqCst);
    let expired = complete(call_once(&alice, retry(SEND, mail(), &state, None)).await);
    assert_eq!(reason(&expired), "request_state_expired");
    assert_eq!(s.sent(), 0);

    // Positive control: within its lifetime the same state commits.
    s.skew.store(0, Ordering::SeqCst);
    let done = complete(call_once(&alice, retry(SEND, mail(), &state, None)).await);
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(s.sent(), 1);
    alice.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_clients_accept_approves_nothing_but_its_decline_stops_the_action() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2026, false).await;
    let first = input_required(call_once(&client, params(SEND, mail())).await);
    let state = first.request_state.clone().unwrap();
    let action = pending_action(&first);

    // The runtime answers its own prompt: still pending, nothing runs.
    let r =
        input_required(call_once(&client, retry(SEND, mail(), &state, Some(accept(true)))).await);
    assert_eq!(pending_action(&r), action);
    assert!(
        r.input_requests.is_none(),
        "the answered form is asked again: {r:?}"
    );
    assert_eq!(s.approval(&action).await, ApprovalState::Pending);
    assert_eq!(s.sent(), 0);

    // A decline stops it.
    let declined = complete(
        call_once(
            &client,
            retry(SEND, mail(), &state, Some(json!({"action": "decline"}))),
        )
        .await,
    );
    assert_eq!(reason(&declined), "confirmation_denied");
    assert_eq!(s.approval(&action).await, ApprovalState::Denied);
    assert_eq!(s.sent(), 0);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_clients_answer_confirms_the_exact_call() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2026, true).await;
    let first = input_required(call_once(&client, params(SEND, mail())).await);
    let state = first.request_state.clone().unwrap();
    let action = pending_action(&first);
    // The trusted client's form asks `approve`.
    let ask = serde_json::to_value(first.input_requests.as_ref().unwrap()).unwrap();
    assert!(
        ask["dev.secureclaw/approval"]["params"]["requestedSchema"]["properties"]["approve"]
            .is_object(),
        "{ask}"
    );

    // Malformed: decides nothing.
    let malformed = complete(
        call_once(
            &client,
            retry(SEND, mail(), &state, Some(json!({"action": "accept"}))),
        )
        .await,
    );
    assert_eq!(reason(&malformed), "confirmation_malformed");
    assert_eq!(s.approval(&action).await, ApprovalState::Pending);

    // The answer approves this call only: an altered call with it is refused.
    let altered = json!({"to": "attacker@evil.example", "body": "x"});
    let refused =
        complete(call_once(&client, retry(SEND, altered, &state, Some(accept(true)))).await);
    assert_eq!(reason(&refused), "binding_mismatch");
    assert_eq!(s.sent(), 0);

    let done = complete(call_once(&client, retry(SEND, mail(), &state, Some(accept(true)))).await);
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(s.sent(), 1);
    let records = s.store.audit_records(0, usize::MAX).unwrap();
    let confirmers: Vec<_> = records
        .iter()
        .map(|r| serde_json::to_value(&r.event).unwrap())
        .filter(|e| e["kind"] == "confirmation" && e["action_id"] == action.as_str())
        .map(|e| e["detail"]["confirmer"].clone())
        .collect();
    assert_eq!(confirmers, vec![json!("mcp-elicitation (trusted client)")]);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2025_client_gets_a_pending_result_and_cannot_send_mrtr_fields() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2025_11, false).await;
    let pending = complete(call_once(&client, params(SEND, mail())).await);
    assert_eq!(reason(&pending), "confirmation_required");
    let mut p = params(SEND, mail());
    p.request_state = Some("anything".into());
    let refused = client.call_tool_once(p).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(s.sent(), 0);
    client.cancel().await.unwrap();
}

/// Audit records of `kind` with reason `reason`.
fn audited(s: &Stack, kind: &str, reason: &str) -> usize {
    s.store
        .audit_records(0, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| serde_json::to_value(&r.event).unwrap())
        .filter(|e| e["kind"] == kind && e["reason"] == reason)
        .count()
}

/// Red-team of 2026-12-04, F1: retries with a state that does not open are rate-limited like
/// any call (before the state is opened), so they cannot grow the audit log at will.
#[tokio::test(flavor = "multi_thread")]
async fn retries_with_a_bad_state_are_rate_limited() {
    let s = stack_with(|c| {
        c.limits.session_rate_per_s = 1;
        c.limits.session_burst = 5;
    })
    .await;
    let client = s.client(s.session().await, Version::V2026, false).await;
    let mut reasons = Vec::new();
    for _ in 0..30 {
        let r = complete(call_once(&client, retry(SEND, mail(), "rs2.x.y.z", None)).await);
        reasons.push(reason(&r));
    }
    let invalid = reasons
        .iter()
        .filter(|r| *r == "request_state_invalid")
        .count();
    let limited = reasons.iter().filter(|r| *r == "limit_exceeded").count();
    assert!(limited > 0, "{reasons:?}");
    assert_eq!(invalid + limited, 30, "{reasons:?}");
    assert_eq!(audited(&s, "denial", "request_state_invalid"), invalid);
    assert!(invalid < 30, "{reasons:?}");
    client.cancel().await.unwrap();
}

/// Red-team F2: a retry's arguments count against `max_in_flight_bytes_per_session` while it
/// waits for a decision, so waiting retries cannot hold memory beyond the limit.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_retries_count_their_arguments() {
    let s = stack_with(|c| c.limits.max_in_flight_bytes_per_session = 64 * 1024).await;
    let client = Arc::new(
        s.client_waiting(
            s.session().await,
            Version::V2026,
            false,
            Duration::from_secs(5),
        )
        .await,
    );
    let first = input_required(call_once(&client, params(SEND, mail())).await);
    let state = first.request_state.clone().unwrap();
    let big = json!({"to": "bob@example.com", "body": "x".repeat(40 * 1024)});
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (client, p) = (client.clone(), retry(SEND, big.clone(), &state, None));
            tokio::spawn(async move { call_once(&client, p).await })
        })
        .collect();
    let mut reasons = Vec::new();
    for c in calls {
        match c.await.unwrap() {
            CallToolResponse::Complete(r) => reasons.push(reason(&r)),
            other => reasons.push(format!("{other:?}").chars().take(40).collect()),
        }
    }
    // Two 40 KiB retries do not fit in 64 KiB at once: while one waits, the others are
    // refused; the one that waited is then refused for its changed arguments.
    assert!(
        reasons.iter().filter(|r| *r == "limit_exceeded").count() >= 2,
        "{reasons:?}"
    );
    assert_eq!(s.sent(), 0);
}

/// Red-team F3: a tool name the catalog does not know is recorded in the audit log cut short,
/// with its length, however long the runtime made it.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_tool_name_is_recorded_cut_short() {
    let s = stack().await;
    let client = s.client(s.session().await, Version::V2026, false).await;
    let long = "T".repeat(100_000);
    let r = complete(call_once(&client, params(&long, json!({}))).await);
    assert_eq!(reason(&r), "unknown_tool");
    let tools: Vec<String> = s
        .store
        .audit_records(0, usize::MAX)
        .unwrap()
        .iter()
        .filter_map(|r| {
            serde_json::to_value(&r.event).unwrap()["tool"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(
        tools
            .iter()
            .any(|t| t.ends_with("…[100000 bytes]") && t.starts_with("TTTT")),
        "{:?}",
        tools.iter().map(|t| t.len()).collect::<Vec<_>>()
    );
    assert!(
        tools.iter().all(|t| t.len() < 200),
        "a long name was recorded whole"
    );
    client.cancel().await.unwrap();
}
