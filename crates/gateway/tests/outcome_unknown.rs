//! At most once, and say so (issue 12). A fault-injection upstream performs an effect and then
//! fails in transport: over Streamable HTTP it answers the call with 404 (session expired),
//! over a stdio-like pipe it dies. rmcp's HTTP client used to re-initialize and re-send the
//! call on 404 (two effects), and the gateway told the runtime to "try again" and recorded the
//! ledger entry `failed`. Now: exactly one effect, ledger `outcome_unknown`, an
//! `outcome_unknown` audit record, and a recovery with reason `outcome_unknown` that does not
//! invite a retry. Clean upstream answers (a JSON-RPC error; a tool result with `isError`)
//! stay `failed` and `executed`; reads whose transport failed are retried once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{assert_denied, in_process, keys, read_rule, test_config};
use rmcp::ServiceExt;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::recovery::{ReasonCode, Recovery};
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, RmcpUpstream, ToolRule, Upstream, UpstreamSpec,
    UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{LedgerState, SessionRecord, SqliteStore};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

// ------------------------------------------------------------------ the fault-injection upstream

/// Tools of the fault upstream `fault`:
///
/// | tool | class | behaviour |
/// |---|---|---|
/// | `pay` | effect | counts an effect; the first call then fails in transport (HTTP: 404 and the session is forgotten; pipe: the server dies), later calls answer |
/// | `reject` | effect | a JSON-RPC error, no effect |
/// | `oops` | effect | counts an effect, answers `isError: true` |
/// | `peek` | read | the first call fails in transport like `pay` (no effect); later calls answer |
#[derive(Default)]
struct Fault {
    effects: AtomicUsize,
    peeks: AtomicUsize,
    pays: AtomicUsize,
    initializes: AtomicUsize,
    session: Mutex<Option<String>>,
}

/// What the fault server does with one message.
enum Reply {
    Json(Value),
    Accepted,
    /// Fail in transport after whatever effect happened.
    Break,
}

fn ok(id: &Value, result: Value) -> Reply {
    Reply::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

impl Fault {
    fn reply(&self, msg: &Value) -> Reply {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg["method"].as_str().unwrap_or_default();
        if msg.get("id").is_none() {
            return Reply::Accepted;
        }
        match method {
            "initialize" => {
                self.initializes.fetch_add(1, Ordering::SeqCst);
                ok(
                    &id,
                    json!({
                        "protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "fault", "version": "1"},
                    }),
                )
            }
            "tools/list" => {
                let tool = |name: &str, read: bool| {
                    json!({"name": name, "inputSchema": {"type": "object"},
                        "annotations": {"readOnlyHint": read, "destructiveHint": false}})
                };
                ok(
                    &id,
                    json!({"tools": [tool("pay", false), tool("reject", false),
                        tool("oops", false), tool("peek", true)]}),
                )
            }
            "tools/call" => {
                let text = |t: &str| json!({"content": [{"type": "text", "text": t}]});
                match msg["params"]["name"].as_str().unwrap_or_default() {
                    "pay" => {
                        let n = self.effects.fetch_add(1, Ordering::SeqCst) + 1;
                        if self.pays.fetch_add(1, Ordering::SeqCst) == 0 {
                            Reply::Break
                        } else {
                            ok(&id, text(&format!("paid {n}")))
                        }
                    }
                    "reject" => Reply::Json(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32602, "message": "amount must be positive"}})),
                    "oops" => {
                        self.effects.fetch_add(1, Ordering::SeqCst);
                        let mut r = text("the payment provider declined");
                        r["isError"] = Value::Bool(true);
                        ok(&id, r)
                    }
                    "peek" => {
                        if self.peeks.fetch_add(1, Ordering::SeqCst) == 0 {
                            Reply::Break
                        } else {
                            ok(&id, text("balance 12"))
                        }
                    }
                    other => Reply::Json(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("no tool {other}")}})),
                }
            }
            _ => ok(&id, json!({})),
        }
    }

    fn effects(&self) -> usize {
        self.effects.load(Ordering::SeqCst)
    }
}

/// Streamable HTTP: `initialize` opens session `s<n>`; a request naming another session gets
/// 404; a transport break answers 404 and forgets the session (as a restarted server would).
async fn http_post(
    axum::extract::State(fault): axum::extract::State<Arc<Fault>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Ok(msg) = serde_json::from_str::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let presented = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if msg["method"] == "initialize" {
        let n = fault.initializes.load(Ordering::SeqCst) + 1;
        let sid = format!("s{n}");
        *fault.session.lock().unwrap() = Some(sid.clone());
        let Reply::Json(v) = fault.reply(&msg) else {
            unreachable!()
        };
        return ([("mcp-session-id", sid)], axum::Json(v)).into_response();
    }
    if presented != *fault.session.lock().unwrap() {
        return StatusCode::NOT_FOUND.into_response();
    }
    match fault.reply(&msg) {
        Reply::Json(v) => axum::Json(v).into_response(),
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Break => {
            *fault.session.lock().unwrap() = None;
            StatusCode::NOT_FOUND.into_response()
        }
    }
}

async fn http_fault() -> (Arc<Fault>, String) {
    let fault = Arc::new(Fault::default());
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(http_post)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(fault.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fault, format!("http://{addr}/mcp"))
}

/// Newline-delimited JSON-RPC over a pipe (as on a child's stdin/stdout): a transport break
/// ends the server, closing the pipe — the process died after performing the effect.
async fn pipe_fault(fault: Arc<Fault>, io: tokio::io::DuplexStream) {
    let (read, mut write) = tokio::io::split(io);
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match fault.reply(&msg) {
            Reply::Json(v) => {
                let mut out = v.to_string();
                out.push('\n');
                if write.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
            }
            Reply::Accepted => {}
            Reply::Break => return,
        }
    }
}

// ------------------------------------------------------------------ the gateway under test

fn config() -> GatewayConfig {
    let mut c = test_config();
    c.limits.upstream_timeout_ms = 10_000;
    // `readOnlyHint` alone makes nothing a read: the operator declares the read tool.
    c.tools.push(read_rule("fault__peek"));
    // Target-less and, by the operator's word (the upstream's hint alone would not count),
    // not destructive: the effects run without a confirmation.
    c.tools.push(ToolRule {
        tool: "fault__*".into(),
        effect: None,
        destructive: Some(false),
        targets: Some(vec![]),
        hidden: false,
        ..ToolRule::default()
    });
    c
}

struct Deployment {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    gw: Gateway,
    session: SessionRecord,
}

async fn deploy(upstream: Arc<dyn Upstream>) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    let spec = UpstreamSpec {
        id: "fault".into(),
        transport: UpstreamTransport::Stdio {
            command: "unused".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let (specs, connector) = in_process(vec![(spec, upstream)]);
    let gw = Gateway::start(
        keys,
        store.clone(),
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config(),
        specs,
        &connector,
        system_clock(),
    )
    .await
    .unwrap();
    let session = gw
        .open_session("alice", TaskEnvelope::default())
        .await
        .unwrap();
    Deployment {
        _dir: dir,
        store,
        gw,
        session,
    }
}

async fn http_deployment() -> (Arc<Fault>, Deployment) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (fault, url) = http_fault().await;
    let spec = UpstreamSpec {
        id: "fault".into(),
        transport: UpstreamTransport::Http {
            url,
            bearer_token_env: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let up = RmcpUpstream::connect(&spec, Duration::from_secs(10))
        .await
        .unwrap();
    (fault, deploy(Arc::new(up)).await)
}

async fn pipe_deployment() -> (Arc<Fault>, Deployment) {
    let fault = Arc::new(Fault::default());
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(pipe_fault(fault.clone(), server_io));
    let client = ().serve(client_io).await.unwrap();
    let up = RmcpUpstream::from_client("fault", "pipe:fault", client);
    (fault, deploy(Arc::new(up)).await)
}

async fn call(d: &Deployment, tool: &str) -> CallOutcome {
    call_with(d, tool, json!({}), None).await
}

async fn call_with(
    d: &Deployment,
    tool: &str,
    args: Value,
    approval: Option<&ActionId>,
) -> CallOutcome {
    d.gw.call(
        &d.session,
        tool,
        args.as_object().cloned().unwrap_or_default(),
        &secureclaw_gateway::CallMeta::committed(approval),
    )
    .await
}

/// The call is held for the user because an identical call's outcome is unknown (F8).
fn assert_repeat_held(o: &CallOutcome) -> ActionId {
    let CallOutcome::Pending(r) = o else {
        panic!("expected a pending confirmation, got {o:?}")
    };
    assert_eq!(r.reason, ReasonCode::OutcomeUnknownRepeat, "{r:?}");
    assert_eq!(r.status, "pending_confirmation");
    let text = r.render();
    assert!(text.contains("outcome_unknown_repeat"), "{text}");
    assert!(text.contains("may already have run"), "{text}");
    ActionId(r.action_id.clone().expect("an action id"))
}

fn recovery(o: &CallOutcome) -> &Recovery {
    match o {
        CallOutcome::Denied(r) => r,
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// The whole promise for one outcome-unknown call.
fn assert_outcome_unknown(d: &Deployment, o: &CallOutcome) {
    assert_denied(o, ReasonCode::OutcomeUnknown);
    let r = recovery(o);
    let text = format!("{}\n{}", serde_json::to_string(r).unwrap(), r.render()).to_lowercase();
    assert!(!text.contains("try again"), "{text}");
    assert!(!text.contains("retry"), "{text}");
    assert!(text.contains("ask the user to check"), "{text}");
    let action = ActionId(r.action_id.clone().expect("an action id"));
    let entry = d.store.ledger_entry(&action).unwrap().unwrap();
    assert_eq!(entry.state, LedgerState::OutcomeUnknown);
    let records = serde_json::to_value(d.store.audit_records(0, usize::MAX).unwrap()).unwrap();
    let audited = records.as_array().unwrap().iter().any(|rec| {
        rec["event"]["kind"] == "outcome_unknown"
            && rec["event"]["action_id"] == action.0.as_str()
            && rec["event"]["detail"]["binding"].is_object()
    });
    assert!(audited, "no outcome_unknown audit record: {records}");
    d.store.verify_audit().unwrap();
}

// ------------------------------------------------------------------ tests

/// Regression: rmcp re-initialized the expired session and re-sent the call (two payments),
/// and the runtime was told to try again.
#[tokio::test]
async fn http_404_after_the_effect_is_outcome_unknown_and_never_resent() {
    let (fault, d) = http_deployment().await;
    let o = call(&d, "fault__pay").await;
    // Give a background re-send (if any) the chance to land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fault.effects(), 1, "the effect was sent more than once");
    assert_outcome_unknown(&d, &o);
    // The identical call again is held for the user (red-team F8): nothing is sent.
    let o = call(&d, "fault__pay").await;
    assert_repeat_held(&o);
    assert_eq!(fault.effects(), 1);
    // The gateway keeps serving: another session's payment opens a new upstream session (in
    // this session every later payment now waits for the user: red-team R7).
    let bob =
        d.gw.open_session("bob", TaskEnvelope::default())
            .await
            .unwrap();
    let o =
        d.gw.call(
            &bob,
            "fault__pay",
            json!({"note": "second"}).as_object().cloned().unwrap(),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    assert!(
        matches!(&o, CallOutcome::Completed { output, .. } if !output.is_error),
        "{o:?}"
    );
    assert_eq!(fault.effects(), 2);
    assert_eq!(fault.initializes.load(Ordering::SeqCst), 2);
}

/// The stdio case: the upstream dies after performing the effect.
#[tokio::test]
async fn upstream_dying_after_the_effect_is_outcome_unknown() {
    let (fault, d) = pipe_deployment().await;
    let o = call(&d, "fault__pay").await;
    assert_eq!(fault.effects(), 1);
    assert_outcome_unknown(&d, &o);
    // The identical call again is held for the user (red-team F8).
    assert_repeat_held(&call(&d, "fault__pay").await);
    // Respelt, it is held too (red-team R7).
    assert_repeat_held(&call_with(&d, "fault__pay", json!({"note": "second"}), None).await);
    // The pipe is gone; another session's effect is refused before dispatch, as a plain
    // failure.
    let bob =
        d.gw.open_session("bob", TaskEnvelope::default())
            .await
            .unwrap();
    let o =
        d.gw.call(
            &bob,
            "fault__pay",
            json!({"note": "second"}).as_object().cloned().unwrap(),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    assert_denied(&o, ReasonCode::UpstreamError);
    assert_eq!(fault.effects(), 1);
    let action = ActionId(recovery(&o).action_id.clone().unwrap());
    assert_eq!(
        d.store.ledger_entry(&action).unwrap().unwrap().state,
        LedgerState::Failed
    );
}

/// Clean answers are not "unknown": a JSON-RPC error is `failed`; `isError: true` is a
/// completed call (`executed`).
#[tokio::test]
async fn clean_upstream_answers_are_failed_or_executed() {
    let (fault, d) = http_deployment().await;
    let o = call(&d, "fault__reject").await;
    assert_denied(&o, ReasonCode::UpstreamError);
    let action = ActionId(recovery(&o).action_id.clone().unwrap());
    assert_eq!(
        d.store.ledger_entry(&action).unwrap().unwrap().state,
        LedgerState::Failed
    );
    let o = call(&d, "fault__oops").await;
    let CallOutcome::Completed {
        output,
        action_id: Some(action),
    } = &o
    else {
        panic!("{o:?}")
    };
    assert!(output.is_error);
    d.gw.flush().await;
    assert_eq!(
        d.store.ledger_entry(action).unwrap().unwrap().state,
        LedgerState::Executed
    );
    assert_eq!(fault.effects(), 1);
    assert_eq!(fault.initializes.load(Ordering::SeqCst), 1);
}

/// A read has no effect: after a transport failure it is sent once more on a new session.
#[tokio::test]
async fn a_read_whose_session_expired_is_retried_once() {
    let (fault, d) = http_deployment().await;
    let o = call(&d, "fault__peek").await;
    assert!(
        matches!(&o, CallOutcome::Completed { output, .. } if !output.is_error),
        "{o:?}"
    );
    assert_eq!(fault.peeks.load(Ordering::SeqCst), 2);
    assert_eq!(fault.initializes.load(Ordering::SeqCst), 2);
    assert_eq!(fault.effects(), 0);
}

/// Red-team F8, R7 (issue 12, "at most once"): after an effect ended `outcome_unknown`, the
/// runtime repeating the call — identical, or respelt (another amount, an extra empty
/// argument, a string amount) — gets `outcome_unknown_repeat` (pending, nothing sent), however
/// often it tries; the approver is told an identical call may already have run. Another
/// session is not affected. Once the user approves, the re-issue runs exactly once.
#[tokio::test]
async fn repeating_an_outcome_unknown_call_needs_the_user() {
    let (fault, d) = http_deployment().await;
    let args = json!({"to": "approver@corp.example", "amount_cents": 100});
    let o = call_with(&d, "fault__pay", args.clone(), None).await;
    assert_outcome_unknown(&d, &o);
    assert_eq!(fault.effects(), 1);
    // Attack: the runtime repeats the identical call (twice): held, never sent.
    let held = assert_repeat_held(&call_with(&d, "fault__pay", args.clone(), None).await);
    assert_repeat_held(&call_with(&d, "fault__pay", args.clone(), None).await);
    assert_eq!(fault.effects(), 1);
    let listed = d.gw.approvals(None).await.unwrap();
    let shown = listed
        .iter()
        .find(|(_, a)| a.action_id == held)
        .map(|(_, a)| a.display.clone())
        .expect("the held action is listed");
    assert!(shown.contains("may already have run"), "{shown}");
    // Attack (R7): the same effect respelt is held all the same.
    for respelt in [
        json!({"to": "approver@corp.example", "amount_cents": 200}),
        json!({"to": "approver@corp.example", "amount_cents": 100, "note": ""}),
        json!({"to": "approver@corp.example", "amount_cents": "100"}),
    ] {
        let o = call_with(&d, "fault__pay", respelt.clone(), None).await;
        let CallOutcome::Pending(r) = &o else {
            panic!("{respelt}: expected pending, got {o:?}")
        };
        assert_eq!(
            r.reason,
            ReasonCode::OutcomeUnknownRepeat,
            "{respelt}: {r:?}"
        );
    }
    assert_eq!(fault.effects(), 1);
    // Control: another session's payment runs at once.
    let other =
        d.gw.open_session("bob", TaskEnvelope::default())
            .await
            .unwrap();
    let o =
        d.gw.call(
            &other,
            "fault__pay",
            json!({"to": "approver@corp.example", "amount_cents": 200})
                .as_object()
                .cloned()
                .unwrap(),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    assert!(
        matches!(&o, CallOutcome::Completed { output, .. } if !output.is_error),
        "{o:?}"
    );
    assert_eq!(fault.effects(), 2);
    // The user checked and approves: the re-issue runs once.
    d.gw.decide_approval(&held, true, "user").await.unwrap();
    let o = call_with(&d, "fault__pay", args.clone(), Some(&held)).await;
    assert!(
        matches!(&o, CallOutcome::Completed { output, .. } if !output.is_error),
        "{o:?}"
    );
    assert_eq!(fault.effects(), 3);
    // The approval is spent: presenting it again sends nothing.
    let o = call_with(&d, "fault__pay", args, Some(&held)).await;
    assert!(!matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(fault.effects(), 3);
}
