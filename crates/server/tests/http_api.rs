//! The HTTP API and the Streamable HTTP MCP endpoint, driven in-process through the router:
//! authentication (operator token vs session token), the two-phase preview/commit mode, the
//! approval flow, handle describe/revoke, audit export/verify, malformed and oversized
//! bodies, and Origin validation on `/mcp`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::policy::EffectClass;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::{
    BoxFuture, Gateway, GatewayConfig, ToolOutput, ToolRule, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_server::{ApiState, McpFrontEnd, SessionSource, router};
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-for-tests-0123456789";

/// A tiny in-process upstream: `lookup` (read-only, returns an IBAN) and `send` (effectful).
struct Office {
    sent: AtomicUsize,
}

fn tool(name: &str, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("{name} tool")),
        input_schema: json!({"type": "object"}).as_object().cloned().unwrap(),
        read_only_hint: read_only,
        destructive_hint: false,
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
        Box::pin(async { Ok(vec![tool("lookup", true), tool("send", false)]) })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            if name == "send" {
                self.sent.fetch_add(1, Ordering::SeqCst);
            }
            let structured =
                json!({"tool": name, "echo": arguments, "iban": "DE89370400440532013000"});
            Ok(ToolOutput {
                content: vec![json!({"type": "text", "text": structured.to_string()})],
                structured: Some(structured),
                is_error: false,
            })
        })
    }
}

struct Env {
    app: axum::Router,
    gw: Gateway,
    office: Arc<Office>,
    _dir: tempfile::TempDir,
}

async fn env() -> Env {
    env_with_pins(&[]).await
}

/// [`env`] over a store that already holds `pins` for upstream `office`.
async fn env_with_pins(pins: &[secureclaw_core::store::ToolPin]) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(KeyRing::generate(&mut |b| getrandom::fill(b).unwrap()));
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    store.put_tool_pins("office", pins, &[]).unwrap();
    let policy = Arc::new(secureclaw_policy::CedarPolicy::load(&[]).unwrap());
    let office = Arc::new(Office {
        sent: AtomicUsize::new(0),
    });
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
    config.limits.max_argument_bytes = 64 * 1024;
    // `readOnlyHint` alone makes nothing a read; the operator declares `lookup` one.
    config.tools.push(ToolRule {
        tool: "office__lookup".into(),
        effect: Some(EffectClass::Read),
        destructive: None,
        targets: None,
        hidden: false,
        ..ToolRule::default()
    });
    // `destructiveHint: false` alone lowers nothing; the operator declares `send` additive.
    config.tools.push(ToolRule {
        tool: "office__send".into(),
        destructive: Some(false),
        ..ToolRule::default()
    });
    let (specs, connector) = in_process(vec![(spec, office.clone() as Arc<dyn Upstream>)]);
    let gw = Gateway::start(
        keys,
        store,
        policy,
        config,
        specs,
        &connector,
        system_clock(),
    )
    .await
    .unwrap();
    let mcp = McpFrontEnd::new(gw.clone(), SessionSource::Bearer { fallback: None })
        .streamable_http_service(
            vec!["localhost".into(), "127.0.0.1".into()],
            vec!["http://localhost:6274".into()],
            128 * 1024,
        );
    let app = router(
        ApiState {
            gateway: gw.clone(),
            operator_token: Arc::new(OPERATOR.into()),
        },
        128 * 1024,
    )
    .nest_service("/mcp", mcp);
    Env {
        app,
        gw,
        office,
        _dir: dir,
    }
}

async fn send(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    raw(app, req.body(body).unwrap()).await
}

async fn raw(app: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    )
}

async fn session(app: &axum::Router, request: &str) -> String {
    let (status, body) = send(
        app,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(json!({"caller": "alice", "task": {"request": request, "trusted_targets": []}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["session_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn credentials_are_separate() {
    let e = env().await;
    let (s, _) = send(&e.app, "GET", "/health", None, None).await;
    assert_eq!(s, StatusCode::OK);
    // Opening a session needs the operator token; a session id is not one.
    let (s, _) = send(
        &e.app,
        "POST",
        "/v1/sessions",
        None,
        Some(json!({"caller": "x"})),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let sid = session(&e.app, "send it to bob@corp.example").await;
    let (s, _) = send(
        &e.app,
        "POST",
        "/v1/sessions",
        Some(&sid),
        Some(json!({"caller": "x"})),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "a runtime cannot open sessions or set its own task"
    );
    let (s, _) = send(&e.app, "GET", "/v1/approvals", Some(&sid), None).await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "a runtime cannot list or decide approvals"
    );
    let (s, _) = send(
        &e.app,
        "POST",
        "/v1/approvals/act_x/approve",
        Some(&sid),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "a runtime cannot confirm");
    // Tools need a live session.
    let (s, _) = send(&e.app, "GET", "/v1/tools", Some("ses_guessed"), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, body) = send(&e.app, "GET", "/v1/tools", Some(&sid), None).await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["office__lookup", "office__send"]);
}

#[tokio::test]
async fn read_path_returns_handles_not_values() {
    let e = env().await;
    let sid = session(&e.app, "look it up").await;
    let (s, body) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__lookup", "arguments": {}})),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["status"], "completed");
    let text = body.to_string();
    assert!(!text.contains("DE89370400440532013000"), "{text}");
    let handle = body["structured_content"]["iban"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(handle.starts_with("hdl_ib_"));
    // Describe never dereferences; revoke works; another session cannot see it.
    let (s, d) = send(
        &e.app,
        "GET",
        &format!("/v1/handles/{handle}"),
        Some(&sid),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(d["label"], "iban");
    assert!(!d.to_string().contains("DE89"));
    let other = session(&e.app, "other task").await;
    let (s, _) = send(
        &e.app,
        "GET",
        &format!("/v1/handles/{handle}"),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = send(
        &e.app,
        "DELETE",
        &format!("/v1/handles/{handle}"),
        Some(&sid),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (_, d) = send(
        &e.app,
        "GET",
        &format!("/v1/handles/{handle}"),
        Some(&sid),
        None,
    )
    .await;
    assert_eq!(d["revoked"], true);
}

#[tokio::test]
async fn two_phase_preview_commit_and_tampering() {
    let e = env().await;
    let sid = session(&e.app, "send the report to bob@corp.example").await;
    let args = json!({"to": "bob@corp.example", "body": "report"});
    let (_, p) = send(
        &e.app,
        "POST",
        "/v1/preview",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args})),
    )
    .await;
    assert_eq!(p["decision"], "allow", "{p}");
    let artifact = p["artifact"].as_str().unwrap().to_owned();
    let action = p["action_id"].as_str().unwrap().to_owned();
    // Tampered commit: recipient changed after preview.
    let evil = json!({"to": "mallory@evil.example", "body": "report"});
    let (_, c) = send(&e.app, "POST", "/v1/commit", Some(&sid), Some(json!({"tool": "office__send", "arguments": evil, "action_id": action, "artifact": artifact}))).await;
    assert_eq!(c["status"], "denied");
    assert_eq!(c["recovery"]["reason"], "binding_mismatch");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);
    // Missing artifact.
    let (_, c) = send(
        &e.app,
        "POST",
        "/v1/commit",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args, "action_id": action})),
    )
    .await;
    assert_eq!(c["recovery"]["reason"], "artifact_missing");
    // Positive control, then replay.
    let (_, c) = send(&e.app, "POST", "/v1/commit", Some(&sid), Some(json!({"tool": "office__send", "arguments": args, "action_id": action, "artifact": artifact}))).await;
    assert_eq!(c["status"], "completed", "{c}");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 1);
    let (_, c) = send(&e.app, "POST", "/v1/commit", Some(&sid), Some(json!({"tool": "office__send", "arguments": args, "action_id": action, "artifact": artifact}))).await;
    assert_eq!(c["recovery"]["reason"], "replay");
    // The artifact of one session does not commit in another.
    let other = session(&e.app, "send the report to bob@corp.example").await;
    let (_, p2) = send(
        &e.app,
        "POST",
        "/v1/preview",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args})),
    )
    .await;
    let (_, c) = send(&e.app, "POST", "/v1/commit", Some(&other), Some(json!({"tool": "office__send", "arguments": args, "action_id": p2["action_id"], "artifact": p2["artifact"]}))).await;
    assert_eq!(c["recovery"]["reason"], "binding_mismatch");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn approval_flow_over_http() {
    let e = env().await;
    let sid = session(&e.app, "send the report to bob@corp.example").await;
    let args = json!({"to": "carol@other.example", "body": "report"});
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args})),
    )
    .await;
    assert_eq!(r["status"], "pending_confirmation");
    let action = r["recovery"]["action_id"].as_str().unwrap().to_owned();
    // Self-confirmation attempt: re-issue with the approval id before the user decided.
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args, "approval": action})),
    )
    .await;
    assert_eq!(r["status"], "pending_confirmation");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);
    let (_, list) = send(
        &e.app,
        "GET",
        "/v1/approvals?state=pending",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(list["approvals"][0]["action_id"], action.as_str());
    // Red-team F4: the listing names the session by its digest, never by its id (the
    // runtime's bearer token).
    assert!(!list.to_string().contains(&sid), "{list}");
    assert_eq!(
        list["approvals"][0]["session"],
        secureclaw_gateway::audit_session_id(&sid).as_str()
    );
    let (s, _) = send(
        &e.app,
        "POST",
        &format!("/v1/approvals/{action}/approve"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = send(
        &e.app,
        "POST",
        &format!("/v1/approvals/{action}/deny"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a decided approval cannot be decided again"
    );
    // Re-issued as the recovery text says, with `_meta` (new-user trial: `/v1/call` refused
    // the field the text names).
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__send", "arguments": args,
                    "_meta": {"dev.secureclaw/approval": action}})),
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 1);
    let (_, v) = send(&e.app, "GET", "/v1/audit/verify", Some(OPERATOR), None).await;
    assert!(v["verified"].as_u64().unwrap() > 5);
    let (_, a) = send(
        &e.app,
        "GET",
        "/v1/audit?from=1&limit=1000",
        Some(OPERATOR),
        None,
    )
    .await;
    assert!(!a.to_string().contains("DE89370400440532013000"));
}

#[tokio::test]
async fn bad_bodies_get_clear_errors() {
    let e = env().await;
    let sid = session(&e.app, "task").await;
    let req = |body: Body| {
        Request::builder()
            .method("POST")
            .uri("/v1/call")
            .header("host", "localhost")
            .header("authorization", format!("Bearer {sid}"))
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    };
    let (s, b) = raw(&e.app, req(Body::from("{not json"))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(b["error"]["code"], "bad_request");
    let (s, _) = raw(&e.app, req(Body::from(vec![0xff, 0xfe, b'{']))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // A key twice (issue 12 item 8): refused naming the key, never "last one wins".
    let (s, b) = raw(
        &e.app,
        req(Body::from(
            r#"{"tool":"office__send","arguments":{"to":"a@corp.example","to":"x@evil.example"}}"#,
        )),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(b["error"]["code"], "invalid_arguments", "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("`to`"),
        "{b}"
    );
    let (s, _) = raw(
        &e.app,
        req(Body::from(
            json!({"tool": "office__lookup", "bogus": 1}).to_string(),
        )),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let big = "x".repeat(200 * 1024);
    let (s, _) = raw(
        &e.app,
        req(Body::from(
            json!({"tool": "office__send", "arguments": {"body": big}}).to_string(),
        )),
    )
    .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // Within the HTTP limit but over the gateway's argument limit: a structured denial.
    let mid = "x".repeat(70 * 1024);
    let (s, b) = raw(
        &e.app,
        req(Body::from(
            json!({"tool": "office__send", "arguments": {"body": mid}}).to_string(),
        )),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["recovery"]["reason"], "invalid_arguments");
    let (_, b) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "nope", "arguments": {}})),
    )
    .await;
    assert_eq!(b["recovery"]["reason"], "unknown_tool");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);
    // Still serving.
    let (_, b) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__lookup", "arguments": {}})),
    )
    .await;
    assert_eq!(b["status"], "completed");
}

/// Issue 12 item 8: refusals at the HTTP API are audited with metadata only — in the session
/// the bearer token names (a key twice, a body over the limit), or without a session for a
/// bad token (coalesced, with a count). Read back through the store.
#[tokio::test]
async fn api_refusals_are_audited_with_metadata_only() {
    let e = env().await;
    let sid = session(&e.app, "task").await;
    let post = |token: &str, body: String| {
        Request::builder()
            .method("POST")
            .uri("/v1/call")
            .header("host", "localhost")
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    let dup =
        r#"{"tool":"office__send","arguments":{"to":"secret@corp.example","to":"x@evil.example"}}"#;
    let (s, b) = raw(&e.app, post(&sid, dup.into())).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let big = json!({"tool": "office__send", "arguments": {"body": "secret-pad".repeat(20_000)}});
    let (s, _) = raw(&e.app, post(&sid, big.to_string())).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // Red-team round 3: axum's own rejections (not JSON, the wrong shape, another content
    // type) were not audited.
    let (s, _) = raw(&e.app, post(&sid, "{not json".into())).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = raw(&e.app, post(&sid, r#"{"tool": 5}"#.into())).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let mut text = post(&sid, json!({"tool": "office__send"}).to_string());
    text.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("text/plain"),
    );
    let (s, _) = raw(&e.app, text).await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (s, _) = raw(
        &e.app,
        post(
            "ses_secret-guess",
            json!({"tool": "office__lookup", "arguments": {}}).to_string(),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);
    let records = e.gw.audit_records(1, 10_000).await.unwrap();
    let rejected: Vec<_> = records
        .iter()
        .filter(|r| r.event.kind == secureclaw_core::audit::AuditKind::Rejection)
        .collect();
    let audit_sid = secureclaw_gateway::audit_session_id(&sid);
    let in_session: Vec<&str> = rejected
        .iter()
        .filter(|r| r.event.session.as_deref() == Some(audit_sid.as_str()))
        .map(|r| r.event.detail["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        in_session,
        [
            "duplicate_key",
            "request_too_large",
            "malformed_request",
            "malformed_request",
            "malformed_request"
        ],
        "{rejected:?}"
    );
    let unauthenticated: Vec<_> = rejected
        .iter()
        .filter(|r| r.event.session.is_none())
        .collect();
    assert_eq!(unauthenticated.len(), 1, "{rejected:?}");
    assert_eq!(unauthenticated[0].event.detail["reason"], "bad_token");
    assert_eq!(unauthenticated[0].event.detail["front_end"], "http-api");
    assert_eq!(unauthenticated[0].event.detail["count"], 1);
    assert!(
        rejected
            .iter()
            .all(|r| r.event.detail["front_end"] == "http-api")
    );
    let dump = serde_json::to_string(&records).unwrap();
    assert!(
        !dump.contains("secret@corp.example")
            && !dump.contains("secret-pad")
            && !dump.contains("secret-guess"),
        "request content reached the audit log"
    );
    // Positive control: a good call in the same session is served and audited as a call.
    let (_, b) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__lookup", "arguments": {}})),
    )
    .await;
    assert_eq!(b["status"], "completed");
}

#[tokio::test]
async fn mcp_endpoint_checks_origin_and_session() {
    let e = env().await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let post = |origin: Option<&str>, token: Option<&str>| {
        let mut r = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(Body::from(init.to_string())).unwrap()
    };
    let (s, _) = raw(&e.app, post(Some("http://evil.example"), None)).await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "DNS-rebinding: foreign Origin refused"
    );
    let (s, _) = raw(&e.app, post(Some("http://localhost:6274"), None)).await;
    assert!(s.is_success(), "allowed origin accepted: {s}");
    let resp = e
        .app
        .clone()
        .oneshot(
            Request::builder()
                .method("POST")
                .uri("/mcp")
                .header("host", "evil.example")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(Body::from(init.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        resp.status().is_client_error(),
        "foreign Host refused: {}",
        resp.status()
    );
}

/// Speculative calls over the HTTP API: `meta` carries the `_meta` keys; a pre-commit call is
/// deferred (speculation is off by default), promoted through `/v1/branches/…/promote`, and
/// the operator reads the exposure report; malformed metadata is refused with a clear error.
#[tokio::test]
async fn speculative_calls_over_http() {
    let e = env().await;
    let sid = session(&e.app, "look things up").await;
    let spec = |b: &str| {
        json!({"dev.secureclaw/mode": "speculative", "dev.secureclaw/branch": b,
                                "dev.secureclaw/confidence": 0.9})
    };
    let (s, body) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(json!({"tool": "office__lookup", "arguments": {"q": "x"}, "meta": spec("b1")})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "deferred", "{body}");
    assert_eq!(body["recovery"]["branch"], "b1");
    assert_eq!(body["recovery"]["reason"], "deferred");
    let (s, body) = send(&e.app, "POST", "/v1/branches/b1/promote", Some(&sid), None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(
        body["released"][0]["result"]["status"], "completed",
        "{body}"
    );
    // abandoning a promoted branch is a conflict
    let (s, _) = send(&e.app, "POST", "/v1/branches/b1/abandon", Some(&sid), None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    // bad metadata: named key, 400
    let (s, body) = send(&e.app, "POST", "/v1/call", Some(&sid),
        Some(json!({"tool": "office__lookup", "arguments": {}, "meta": {"dev.secureclaw/mode": "maybe"}}))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("dev.secureclaw/mode"), "{body}");
    // Bare names (as an old README showed them) and unknown keys of our namespace are
    // refused, never taken for a committed call; the namespaced keys above are the control.
    for meta in [
        json!({"mode": "speculative", "branch": "b9", "confidence": 0.1}),
        json!({"dev.secureclaw/mode": "speculative", "dev.secureclaw/confidnce": 0.1}),
    ] {
        let (s, body) = send(
            &e.app,
            "POST",
            "/v1/call",
            Some(&sid),
            Some(json!({"tool": "office__lookup", "arguments": {}, "meta": meta})),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["code"], "invalid_meta", "{body}");
    }
    let (s, _) = send(
        &e.app,
        "POST",
        "/v1/branches/bad%20branch/promote",
        Some(&sid),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // the exposure report is operator-only
    let path = format!("/v1/sessions/{sid}/exposure");
    let (s, _) = send(&e.app, "GET", &path, Some(&sid), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, body) = send(&e.app, "GET", &path, Some(OPERATOR), None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["observers"].as_array().unwrap().len(), 5);
}

/// Issue 16 item 4 over the operator API: a tool whose definition differs from its pin is
/// listed by `GET /v1/tools/quarantine` with its diff, hidden from the runtime and refused;
/// `POST /v1/tools/pin` with the reviewed digest pins exactly what the gateway holds and
/// serves it. A wrong digest, an unknown tool and a session token are refused.
#[tokio::test]
async fn quarantined_tools_are_reviewed_and_pinned_over_the_operator_api() {
    let mut old = tool("send", false);
    old.description = Some("Send a message.".into());
    let e = env_with_pins(&[
        secureclaw_gateway::pins::pin_of(
            "office",
            &tool("lookup", true),
            secureclaw_core::UnixMillis(1),
        ),
        secureclaw_gateway::pins::pin_of("office", &old, secureclaw_core::UnixMillis(1)),
    ])
    .await;
    let ses = session(&e.app, "send a note").await;
    let (status, body) = send(&e.app, "GET", "/v1/tools", Some(&ses), None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["office__lookup"], "the changed tool is hidden");
    let (status, body) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&ses),
        Some(json!({"tool": "office__send", "arguments": {}})),
    )
    .await;
    assert!(
        body.to_string().contains("tool_definition_changed"),
        "{status} {body}"
    );
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);

    // The runtime's token cannot see or pin.
    let (status, _) = send(&e.app, "GET", "/v1/tools/quarantine", Some(&ses), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = send(&e.app, "GET", "/v1/tools/quarantine", Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let q = &body["tools"][0];
    assert_eq!(q["tool"], "send");
    assert_eq!(q["status"], "changed");
    assert!(
        q["diff"]
            .as_str()
            .unwrap()
            .contains("- \"Send a message.\""),
        "{q}"
    );
    // Nothing in the new description for the poisoning scan to report.
    assert_eq!(q["poisoning"], Value::Null, "{q}");
    let digest = q["digest"].as_str().unwrap().to_owned();
    let app = &e.app;
    let pin = |token: &str, tool: &'static str, digest: String| {
        let token = token.to_owned();
        async move {
            let body = json!({"upstream": "office", "tool": tool, "digest": digest});
            send(app, "POST", "/v1/tools/pin", Some(&token), Some(body)).await
        }
    };
    let (status, _) = pin(&ses, "send", digest.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = pin(OPERATOR, "send", "00".into()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_quarantined", "{body}");
    let (status, _) = pin(OPERATOR, "lookup", digest.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = pin(OPERATOR, "office__send", digest.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A repeated pin (the name as the upstream lists it) succeeds again.
    let (status, body) = pin(OPERATOR, "send", digest.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = send(&e.app, "GET", "/v1/tools/quarantine", Some(OPERATOR), None).await;
    assert_eq!(body["tools"], json!([]));
    let (status, body) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&ses),
        Some(json!({"tool": "office__send", "arguments": {}})),
    )
    .await;
    // Served again: the call reaches the policy (this configuration asks the user for
    // `send`, as before the change), no longer refused for its definition.
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["recovery"]["reason"], "confirmation_required",
        "{body}"
    );
    let (_, body) = send(&e.app, "GET", "/v1/tools", Some(&ses), None).await;
    assert_eq!(body["tools"].as_array().unwrap().len(), 2, "{body}");
}

/// Standing grants over the operator API (issue 15 item 1): the approve body creates one, the
/// listing names the session by its digest, revocation stops it. The runtime's session token
/// reaches none of it: not the approve route (with or without a grant body), not the grants
/// routes, and nothing it sends on `/v1/call` or `/v1/preview` (a grant-looking `_meta`, an
/// `approval` with grant terms) creates or widens a grant.
#[tokio::test]
async fn standing_grants_over_the_operator_api_and_never_from_the_runtime() {
    let e = env().await;
    let sid = session(&e.app, "send the report to bob@corp.example").await;
    let call = |to: &str, body: &str| json!({"tool": "office__send", "arguments": {"to": to, "body": body}});
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(call("carol@other.example", "r1")),
    )
    .await;
    assert_eq!(r["status"], "pending_confirmation");
    let action = r["recovery"]["action_id"].as_str().unwrap().to_owned();
    let grant_body = json!({"allow_for": "30m", "uses": 2});
    // The runtime tries every route it can name with its own token: refused, nothing created.
    for (method, path, body) in [
        (
            "POST",
            format!("/v1/approvals/{action}/approve"),
            Some(grant_body.clone()),
        ),
        ("GET", "/v1/grants".to_owned(), None),
        ("POST", "/v1/grants/grant-x/revoke".to_owned(), None),
    ] {
        let (s, _) = send(&e.app, method, &path, Some(&sid), body).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    for body in [
        json!({"tool": "office__send", "arguments": {"to": "carol@other.example", "body": "r2"},
               "_meta": {"dev.secureclaw/approval": action, "dev.secureclaw/grant": {"uses": 100}}}),
        json!({"tool": "office__send", "arguments": {"to": "carol@other.example", "body": "r3",
               "allow_for": "24h", "uses": 1000}}),
    ] {
        let (_, r) = send(&e.app, "POST", "/v1/call", Some(&sid), Some(body)).await;
        assert_ne!(r["status"], "completed", "{r}");
    }
    assert!(
        e.gw.grants(true).await.unwrap().is_empty(),
        "the runtime created no grant"
    );
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 0);
    // Bad terms: 400, nothing decided.
    for bad in [
        json!({"uses": 0}),
        json!({"allow_for": "25h"}),
        json!({"allow_for": "soon"}),
        json!({"max_amount": 5}),
        json!({"uses": 1, "forever": true}),
    ] {
        let (s, b) = send(
            &e.app,
            "POST",
            &format!("/v1/approvals/{action}/approve"),
            Some(OPERATOR),
            Some(bad.clone()),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad} {b}");
    }
    assert!(e.gw.grants(true).await.unwrap().is_empty());
    // The operator approves with a grant.
    let (s, r) = send(
        &e.app,
        "POST",
        &format!("/v1/approvals/{action}/approve"),
        Some(OPERATOR),
        Some(grant_body),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["state"], "approved");
    let grant = r["grant"]["id"].as_str().unwrap().to_owned();
    assert_eq!(r["grant"]["created_by"], "operator-api");
    assert_eq!(r["grant"]["max_uses"], 2);
    // The approved call, then a similar one without a prompt; another recipient still asks.
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(call("carol@other.example", "r1")),
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(call("carol@other.example", "r4")),
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(call("mallory@evil.example", "r5")),
    )
    .await;
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    assert_eq!(e.office.sent.load(Ordering::SeqCst), 2);
    let (s, list) = send(&e.app, "GET", "/v1/grants", Some(OPERATOR), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["grants"][0]["id"], grant.as_str());
    assert_eq!(list["grants"][0]["used"], 1);
    assert_eq!(list["grants"][0]["state"], "live");
    assert!(
        !list.to_string().contains(&sid),
        "never the raw session id: {list}"
    );
    assert_eq!(
        list["grants"][0]["session"],
        secureclaw_gateway::audit_session_id(&sid).as_str()
    );
    let (s, r) = send(
        &e.app,
        "POST",
        &format!("/v1/grants/{grant}/revoke"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["grant"]["state"], "revoked");
    let (_, r) = send(
        &e.app,
        "POST",
        "/v1/call",
        Some(&sid),
        Some(call("carol@other.example", "r6")),
    )
    .await;
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    let (_, list) = send(&e.app, "GET", "/v1/grants", Some(OPERATOR), None).await;
    assert_eq!(list["grants"], json!([]));
    let (_, list) = send(&e.app, "GET", "/v1/grants?all=true", Some(OPERATOR), None).await;
    assert_eq!(list["grants"][0]["revoked_by"], "operator-api");
    let (s, _) = send(
        &e.app,
        "POST",
        "/v1/grants/grant-nope/revoke",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
