//! Streamable HTTP MCP sessions bound to callers (issue 12), over real TCP: an MCP session
//! belongs to the bearer token that initialized it; any other token (or none) gets 404 on use
//! and on DELETE; re-initialization of a live session is refused; `initialize` needs a token
//! unless the token-less default is enabled; a JSON-RPC id already in flight on a session is
//! refused and never dispatched.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::keys::KeyRing;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::{
    BoxFuture, Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_server::{
    ApiState, ConnLimits, McpFrontEnd, McpSessionLimits, SessionSource, mcp_router_with_limits,
    router,
};
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

const OPERATOR: &str = "operator-token-for-tests-0123456789";

/// `send` (effect, counted) and `slow` (read, waits for the gate).
#[derive(Default)]
struct Office {
    sent: AtomicUsize,
    slow_started: AtomicUsize,
    gate: Notify,
}

fn tool(name: &str, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: None,
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
        Box::pin(async { Ok(vec![tool("send", false), tool("slow", true)]) })
    }
    fn call_tool(
        &self,
        name: String,
        _arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            if name == "send" {
                self.sent.fetch_add(1, Ordering::SeqCst);
            } else {
                self.slow_started.fetch_add(1, Ordering::SeqCst);
                self.gate.notified().await;
            }
            Ok(ToolOutput {
                content: vec![json!({"type": "text", "text": format!("{name} done")})],
                structured: None,
                is_error: false,
            })
        })
    }
}

struct Server {
    addr: SocketAddr,
    gw: Gateway,
    office: Arc<Office>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn token(&self, caller: &str) -> String {
        self.gw
            .open_session(caller, TaskEnvelope::default())
            .await
            .unwrap()
            .id
    }
}

async fn server(require_token: bool) -> Server {
    server_with(
        require_token,
        ConnLimits::default(),
        McpSessionLimits::default(),
    )
    .await
}

/// A server with explicit connection and MCP session limits.
async fn server_with(require_token: bool, conn: ConnLimits, limits: McpSessionLimits) -> Server {
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
    // Target-less and (the operator says; the upstream's hint alone would not count)
    // non-destructive: `send` runs without a confirmation.
    config.tools.push(secureclaw_gateway::ToolRule {
        tool: "office__*".into(),
        effect: None,
        destructive: Some(false),
        targets: Some(vec![]),
        hidden: false,
        ..secureclaw_gateway::ToolRule::default()
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
    let fallback = if require_token {
        None
    } else {
        Some(
            gw.open_session("local-user", TaskEnvelope::default())
                .await
                .unwrap(),
        )
    };
    let front = McpFrontEnd::new(gw.clone(), SessionSource::Bearer { fallback });
    let mcp = mcp_router_with_limits(
        front,
        vec!["localhost".into(), "127.0.0.1".into()],
        vec![],
        128 * 1024,
        require_token,
        limits,
    );
    let app = router(
        ApiState {
            gateway: gw.clone(),
            operator_token: Arc::new(OPERATOR.into()),
        },
        128 * 1024,
    )
    .nest_service("/mcp", mcp);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = secureclaw_server::serve(listener, app, conn, std::future::pending()).await;
    });
    Server {
        addr,
        gw,
        office,
        _dir: dir,
    }
}

/// One response: status, `Mcp-Session-Id`, and the JSON-RPC messages of its body (a JSON body
/// or the `data:` lines of an event stream).
#[derive(Debug)]
struct Reply {
    status: u16,
    session: Option<String>,
    messages: Vec<Value>,
    body: String,
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

async fn request(
    addr: SocketAddr,
    method: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let body = body.map(Value::to_string).unwrap_or_default();
    request_raw(addr, method, token, session, &body).await
}

/// [`request`] with the body as raw text (malformed JSON, duplicate keys).
async fn request_raw(
    addr: SocketAddr,
    method: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> Reply {
    request_with(addr, method, token, session, &[], body).await
}

/// [`request_raw`] with extra headers.
async fn request_with(
    addr: SocketAddr,
    method: &str,
    token: Option<&str>,
    session: Option<&str>,
    extra: &[(&str, &str)],
    body: &str,
) -> Reply {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(sid) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    // Written beside the read: a server refusing a body over its limit answers before it has
    // read all of it.
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(head.as_bytes()).await;
        wr
    });
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        let mut chunk = [0u8; 8192];
        // Until the server closes (or resets) the connection; what arrived before counts.
        while let Ok(n @ 1..) = rd.read(&mut chunk).await {
            raw.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("response within 30 s");
    drop(writer.await);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (headers, payload) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status: u16 = headers.split_whitespace().nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let payload = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(payload)
    } else {
        payload.to_owned()
    };
    let messages = match serde_json::from_str::<Value>(&payload) {
        Ok(v) => vec![v],
        Err(_) => payload
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect(),
    };
    Reply {
        status,
        session: header("mcp-session-id"),
        messages,
        body: payload,
    }
}

fn initialize_body(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

/// `initialize` + `notifications/initialized`; the new MCP session id.
async fn open(s: &Server, token: Option<&str>) -> String {
    let r = request(s.addr, "POST", token, None, Some(&initialize_body(1))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let sid = r.session.clone().expect("an Mcp-Session-Id");
    let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = request(s.addr, "POST", token, Some(&sid), Some(&n)).await;
    assert_eq!(r.status, 202, "{r:?}");
    sid
}

async fn call(s: &Server, token: Option<&str>, sid: &str, id: u64, tool: &str) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}});
    request(s.addr, "POST", token, Some(sid), Some(&body)).await
}

fn result_text(r: &Reply) -> String {
    r.messages
        .iter()
        .find_map(|m| {
            m["result"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no tool result in {r:?}"))
}

#[tokio::test]
async fn an_mcp_session_belongs_to_the_token_that_created_it() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let mallory = s.token("mallory").await;
    let sid = open(&s, Some(&alice)).await;
    // Positive control: the owner's calls work.
    let r = call(&s, Some(&alice), &sid, 2, "office__send").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(result_text(&r), "send done");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 1);
    // The victim's session id with the attacker's (valid) token, or with none: 404, no result,
    // nothing dispatched.
    for token in [Some(mallory.as_str()), None] {
        let r = call(&s, token, &sid, 3, "office__send").await;
        assert_eq!(r.status, 404, "{r:?}");
        assert!(!r.body.contains("send done"), "{r:?}");
        let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"});
        let r = request(s.addr, "POST", token, Some(&sid), Some(&list)).await;
        assert_eq!(r.status, 404, "{r:?}");
        let r = request(s.addr, "GET", token, Some(&sid), None).await;
        assert_eq!(r.status, 404, "{r:?}");
    }
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 1);
    // DELETE by another token: 404, and the victim's session still works.
    let r = request(s.addr, "DELETE", Some(&mallory), Some(&sid), None).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = call(&s, Some(&alice), &sid, 5, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    // A second initialize on the live session is refused.
    let r = request(
        s.addr,
        "POST",
        Some(&alice),
        Some(&sid),
        Some(&initialize_body(6)),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.messages[0]["id"], 6, "{r:?}");
    assert!(r.messages[0]["error"].is_object(), "{r:?}");
    let r = call(&s, Some(&alice), &sid, 7, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 3);
    // The owner may delete it; then it is gone for everyone.
    let r = request(s.addr, "DELETE", Some(&alice), Some(&sid), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = call(&s, Some(&alice), &sid, 8, "office__send").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn initialize_needs_a_live_session_token_unless_token_less_is_enabled() {
    let s = server(true).await;
    let r = request(s.addr, "POST", None, None, Some(&initialize_body(1))).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.session.is_none());
    let r = request(
        s.addr,
        "POST",
        Some("not-a-session-token"),
        None,
        Some(&initialize_body(1)),
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.session.is_none());

    // Token-less default enabled: a token-less session works, and belongs to "no token".
    let s = server(false).await;
    let sid = open(&s, None).await;
    let r = call(&s, None, &sid, 2, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    let alice = s.token("alice").await;
    let r = call(&s, Some(&alice), &sid, 3, "office__send").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_duplicate_in_flight_request_id_is_refused_and_not_dispatched() {
    let s = Arc::new(server(true).await);
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let first = {
        let (s, alice, sid) = (s.clone(), alice.clone(), sid.clone());
        tokio::spawn(async move { call(&s, Some(&alice), &sid, 9, "office__slow").await })
    };
    while s.office.slow_started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Same id, same session, while the first is in flight: refused with a JSON-RPC error.
    let r = call(&s, Some(&alice), &sid, 9, "office__send").await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.messages[0]["id"], 9, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0, "the duplicate ran");
    // Another id is fine meanwhile.
    let r = call(&s, Some(&alice), &sid, 10, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    s.office.gate.notify_one();
    let r = first.await.unwrap();
    assert_eq!(result_text(&r), "slow done");
    assert_eq!(s.office.slow_started.load(Ordering::SeqCst), 1);
    // Once answered, the id may be used again.
    let r = call(&s, Some(&alice), &sid, 9, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 2);
}

/// Red-team (2026-12-03): an id in flight is one id however it is spelled (`9`, `9.0`, `9e0`,
/// as rmcp reads them), so a respelled duplicate is refused and never dispatched; a string
/// `"9"` is another id (positive control).
#[tokio::test]
async fn respelled_duplicate_ids_are_one_id() {
    let s = Arc::new(server(true).await);
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let first = {
        let (s, alice, sid) = (s.clone(), alice.clone(), sid.clone());
        tokio::spawn(async move { call(&s, Some(&alice), &sid, 9, "office__slow").await })
    };
    while s.office.slow_started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for id in ["9.0", "9e0", "90e-1"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"office__send","arguments":{{}}}}}}"#
        );
        let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), &body).await;
        assert_eq!(r.status, 409, "{id}: {r:?}");
        assert_eq!(r.messages[0]["error"]["code"], -32600, "{id}: {r:?}");
    }
    assert_eq!(
        s.office.sent.load(Ordering::SeqCst),
        0,
        "a respelled duplicate ran"
    );
    let body = r#"{"jsonrpc":"2.0","id":"9","method":"tools/call","params":{"name":"office__send","arguments":{}}}"#;
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), body).await;
    assert_eq!(result_text(&r), "send done");
    s.office.gate.notify_one();
    assert_eq!(result_text(&first.await.unwrap()), "slow done");
}

/// Red-team (2026-12-03): a request without `Mcp-Session-Id` other than `initialize` is
/// refused with a JSON-RPC error and audited, never dispatched: rmcp would take it on its
/// sessionless (2026-07-28) path, around every session check.
#[tokio::test]
async fn a_request_without_an_mcp_session_is_refused() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "office__send", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let r = request(s.addr, "POST", Some(&alice), None, Some(&body)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.messages[0]["id"], 4, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
    assert_eq!(
        s.office.sent.load(Ordering::SeqCst),
        0,
        "a sessionless call ran"
    );
    assert!(
        rejections(&s.gw)
            .await
            .iter()
            .any(|(_, reason)| reason == "missing_mcp_session"),
        "{:?}",
        rejections(&s.gw).await
    );
    // Positive control: the same call in a session runs.
    let sid = open(&s, Some(&alice)).await;
    assert_eq!(
        result_text(&call(&s, Some(&alice), &sid, 5, "office__send").await),
        "send done"
    );
}

/// Regression (issue 12 items 2 and 8): bytes rmcp would drop without an answer get exactly one
/// JSON-RPC error, and a duplicate key is refused naming it, never dispatched.
#[tokio::test]
async fn malformed_deep_and_duplicate_key_requests_get_one_answer() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), "{not json").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32700, "{r:?}");
    assert!(r.messages[0]["id"].is_null(), "{r:?}");
    let dup = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"office__send","arguments":{"to":"a@corp.example","to":"attacker@evil.example"}}}"#;
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), dup).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.messages[0]["id"], 5, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32602, "{r:?}");
    assert!(r.body.contains("duplicate object key `to`"), "{r:?}");
    for depth in [130, 10_000] {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"office__send","arguments":{{"x":{}1{}}}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), &deep).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
        // The id is recovered from the bytes, also past serde_json's 128 levels.
        assert_eq!(r.messages[0]["id"], 6, "{r:?}");
    }
    assert_eq!(
        s.office.sent.load(Ordering::SeqCst),
        0,
        "nothing was dispatched"
    );
    // Positive control: a well-formed call on the same session still runs.
    let r = call(&s, Some(&alice), &sid, 7, "office__send").await;
    assert_eq!(result_text(&r), "send done");
}

/// The audit log's rejection records: (front end, reason) for each.
async fn rejections(gw: &Gateway) -> Vec<(String, String)> {
    gw.audit_records(1, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event.kind == secureclaw_core::audit::AuditKind::Rejection)
        .filter(|r| r.event.session.is_some())
        .map(|r| {
            (
                r.event.detail["front_end"].as_str().unwrap().to_owned(),
                r.event.detail["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Issue 12 item 2: a body over the limit gets one JSON-RPC error (`413`, `-32600`), never
/// plain text, with the request's id when the body names it before the limit and `null`
/// otherwise. Both are audited (reason only) and nothing is dispatched.
#[tokio::test]
async fn an_oversized_body_gets_a_json_rpc_error_with_its_id() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    // The limit is 128 KiB; the padding makes each body 1 KiB longer.
    let pad = "secret-pad-".repeat(129 * 1024 / 11);
    let id_first = format!(
        r#"{{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{{"name":"office__send","arguments":{{"body":"{pad}"}}}}}}"#
    );
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), &id_first).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.messages.len(), 1, "{r:?}");
    assert_eq!(r.messages[0]["jsonrpc"], "2.0", "{r:?}");
    assert_eq!(r.messages[0]["id"], 12, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
    // The id after the padding, past the limit: it cannot be read, so `null`.
    let id_last = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"office__send","arguments":{{"body":"{pad}"}}}},"id":13}}"#
    );
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), &id_last).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
    assert!(r.messages[0]["id"].is_null(), "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0, "a call ran");
    assert_eq!(
        rejections(&s.gw).await,
        [
            ("mcp-http".to_owned(), "request_too_large".to_owned()),
            ("mcp-http".to_owned(), "request_too_large".to_owned())
        ]
    );
    let dump = serde_json::to_string(&s.gw.audit_records(1, 10_000).await.unwrap()).unwrap();
    assert!(
        !dump.contains("secret-pad"),
        "the body reached the audit log"
    );
    // Positive control: a call just under the limit, on the same session, runs.
    let r = call(&s, Some(&alice), &sid, 14, "office__send").await;
    assert_eq!(result_text(&r), "send done");
}

/// Issue 12 item 8: refusals without a live session's token (no token, an unknown one) and
/// another token's use of a session are audited too, metadata only; the unauthenticated ones
/// at most once per second, with a count, so that no peer can grow the audit log at will.
#[tokio::test]
async fn refusals_without_a_session_and_foreign_sessions_are_audited() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let bob = s.token("bob").await;
    // Bob's valid token on Alice's session: 404, audited in Bob's session.
    let r = call(&s, Some(&bob), &sid, 1, "office__send").await;
    assert_eq!(r.status, 404, "{r:?}");
    // `initialize` without a token and with a made-up one: 401.
    for token in [None, Some("ses_secret-guess")] {
        let r = request(s.addr, "POST", token, None, Some(&initialize_body(2))).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.messages[0]["id"], 2, "{r:?}");
    }
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0);
    let records = s.gw.audit_records(1, 10_000).await.unwrap();
    let rejected: Vec<_> = records
        .iter()
        .filter(|r| r.event.kind == secureclaw_core::audit::AuditKind::Rejection)
        .collect();
    let bob_audit = secureclaw_gateway::audit_session_id(&bob);
    assert!(
        rejected
            .iter()
            .any(|r| r.event.session.as_deref() == Some(bob_audit.as_str())
                && r.event.detail["reason"] == "foreign_mcp_session"),
        "{rejected:?}"
    );
    // The unauthenticated ones: at least the first is recorded, without a session; every
    // record stands for one or more refusals.
    let unauthenticated: Vec<_> = rejected
        .iter()
        .filter(|r| r.event.session.is_none())
        .collect();
    assert!(!unauthenticated.is_empty(), "{rejected:?}");
    assert_eq!(unauthenticated[0].event.detail["reason"], "missing_token");
    assert!(
        unauthenticated
            .iter()
            .all(|r| r.event.detail["front_end"] == "mcp-http"
                && r.event.detail["count"].as_u64().is_some_and(|n| n >= 1))
    );
    let dump = serde_json::to_string(&records).unwrap();
    assert!(
        !dump.contains("secret-guess"),
        "a token reached the audit log"
    );
    // Positive control: Alice's own session still serves her.
    let r = call(&s, Some(&alice), &sid, 3, "office__send").await;
    assert_eq!(result_text(&r), "send done");
}

/// Issue 12 item 8: refusals in a session are audited (reason only), including a batch.
#[tokio::test]
async fn refusals_are_audited_with_a_reason_and_nothing_else() {
    let s = server(true).await;
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), "{not json").await;
    assert_eq!(r.status, 400, "{r:?}");
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"office__send","arguments":{}}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"office__send","arguments":{}}}]"#;
    let r = request_raw(s.addr, "POST", Some(&alice), Some(&sid), batch).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.messages.len(), 1, "{r:?}");
    assert_eq!(r.messages[0]["error"]["code"], -32600, "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0, "a batch ran");
    let dup = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"office__send","arguments":{"secret-key":1,"secret-key":2}}}"#;
    request_raw(s.addr, "POST", Some(&alice), Some(&sid), dup).await;
    let r = request(
        s.addr,
        "POST",
        Some(&alice),
        Some(&sid),
        Some(&initialize_body(9)),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    let got = rejections(&s.gw).await;
    let reasons: Vec<&str> = got.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        reasons,
        ["parse_error", "batch", "duplicate_key", "reinitialize"],
        "{got:?}"
    );
    assert!(got.iter().all(|(f, _)| f == "mcp-http"), "{got:?}");
    let dump = serde_json::to_string(&s.gw.audit_records(1, 10_000).await.unwrap()).unwrap();
    assert!(
        !dump.contains("secret-key"),
        "a request's content reached the audit log"
    );
}

/// Issue 12 item 6: each unauthenticated or authenticated `initialize` kept its state for
/// 5 minutes without bound. Sessions per token are bounded: past the limit, `initialize` is
/// refused with `429` and a JSON-RPC error (audited), other tokens are still served, and
/// ending a session makes room.
#[tokio::test]
async fn mcp_sessions_per_token_are_bounded() {
    let limits = McpSessionLimits {
        per_token: 2,
        ..McpSessionLimits::default()
    };
    let s = server_with(true, ConnLimits::default(), limits).await;
    let alice = s.token("alice").await;
    let first = open(&s, Some(&alice)).await;
    open(&s, Some(&alice)).await;
    let r = request(
        s.addr,
        "POST",
        Some(&alice),
        None,
        Some(&initialize_body(3)),
    )
    .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.messages[0]["id"], 3, "{r:?}");
    assert!(r.session.is_none(), "{r:?}");
    // Someone else is not affected.
    let bob = s.token("bob").await;
    let sid = open(&s, Some(&bob)).await;
    assert_eq!(
        result_text(&call(&s, Some(&bob), &sid, 2, "office__send").await),
        "send done"
    );
    // Alice's live sessions still work; ending one makes room.
    assert_eq!(
        result_text(&call(&s, Some(&alice), &first, 2, "office__send").await),
        "send done"
    );
    let r = request(s.addr, "DELETE", Some(&alice), Some(&first), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    open(&s, Some(&alice)).await;
    assert_eq!(
        rejections(&s.gw).await,
        [("mcp-http".to_owned(), "mcp_session_limit".to_owned())]
    );
}

/// Read until the peer closes (or 30 s pass, a liveness bound): whether it closed.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

async fn health(addr: SocketAddr) -> u16 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Issue 12 item 6: incomplete requests were never timed out (20,100 idle connections
/// exhausted file descriptors and `/health` stopped answering). A connection that sends
/// nothing, one that trickles headers, one that stops in its body, and an idle keep-alive
/// connection are all closed, and `/health` answers throughout.
#[tokio::test]
async fn slow_and_idle_connections_are_closed() {
    let conn = ConnLimits {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..ConnLimits::default()
    };
    let s = server_with(true, conn, McpSessionLimits::default()).await;
    let alice = s.token("alice").await;
    // Nothing sent.
    let mut silent = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    // Headers begun, never finished.
    let mut partial = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    partial
        .write_all(b"GET /health HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    // A body that stops half way.
    let mut body = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    body.write_all(
        format!("POST /v1/call HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {alice}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"tool\":").as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(health(s.addr).await, 200);
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection stayed open"
    );
    assert!(
        closed_by_server(&mut partial).await,
        "a partial request stayed open"
    );
    // The stalled body gets an answer (408) and the connection ends.
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), body.read_to_end(&mut raw))
        .await
        .expect("the stalled body was answered within 30 s")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 408"), "{raw}");
    // An idle keep-alive connection after a complete request is closed too.
    let mut keep = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    keep.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut keep).await,
        "an idle keep-alive connection stayed open"
    );
    assert_eq!(health(s.addr).await, 200);
}

/// Issue 12 item 6: connections and requests in flight per peer are bounded; past either the
/// gateway refuses (closes the connection, or answers `429`) and keeps serving.
#[tokio::test]
async fn connections_and_requests_per_peer_are_bounded() {
    let conn = ConnLimits {
        max_connections_per_peer: 3,
        max_in_flight_per_peer: 1,
        ..ConnLimits::default()
    };
    let s = Arc::new(server_with(true, conn, McpSessionLimits::default()).await);
    let alice = s.token("alice").await;
    // One request in flight (the slow tool waits for the gate)...
    let sid = open(&s, Some(&alice)).await;
    let first = {
        let (s, alice, sid) = (s.clone(), alice.clone(), sid.clone());
        tokio::spawn(async move { call(&s, Some(&alice), &sid, 9, "office__slow").await })
    };
    while s.office.slow_started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...so a second one from the same address is refused with 429.
    let r = call(&s, Some(&alice), &sid, 10, "office__send").await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0);
    s.office.gate.notify_one();
    assert_eq!(result_text(&first.await.unwrap()), "slow done");
    // Once the first is answered (its slot is released as its connection ends), another
    // request is served.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = call(&s, Some(&alice), &sid, 11, "office__send").await;
        if r.status != 429 {
            assert_eq!(result_text(&r), "send done");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the in-flight slot was never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Three idle keep-alive connections fill this address's share; a fourth is closed
    // unanswered. (Earlier connections may take a moment to be counted out: retry.)
    let mut held = Vec::new();
    while held.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "could not open 3 connections"
        );
        if let Some(c) = keep_alive(s.addr).await {
            held.push(c);
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        keep_alive(s.addr).await.is_none(),
        "a fourth connection was served"
    );
    // Closing one makes room again.
    drop(held.pop());
    loop {
        if health(s.addr).await == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no room after a connection closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A connection that was served one request and stays open (keep-alive), or `None` if the
/// server closed it unanswered.
async fn keep_alive(addr: SocketAddr) -> Option<tokio::net::TcpStream> {
    let mut c = tokio::net::TcpStream::connect(addr).await.ok()?;
    c.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    let mut buf = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(30), c.read_exact(&mut buf))
        .await
        .ok()?
        .ok()?;
    (&buf == b"HTTP/1.1 200").then_some(c)
}

/// Red-team round 3: after `notifications/cancelled`, rmcp ends the cancelled request's
/// response without an answer while its call runs on, and the id was released at once: a new
/// request reusing it received the cancelled call's result. The id now stays in flight (as
/// for an abandoned response), so the reuse is refused and never dispatched; another id runs
/// meanwhile (positive control).
#[tokio::test]
async fn a_cancelled_request_keeps_its_id_until_its_call_can_no_longer_answer() {
    let s = Arc::new(server(true).await);
    let alice = s.token("alice").await;
    let sid = open(&s, Some(&alice)).await;
    let first = {
        let (s, alice, sid) = (s.clone(), alice.clone(), sid.clone());
        tokio::spawn(async move { call(&s, Some(&alice), &sid, 42, "office__slow").await })
    };
    while s.office.slow_started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 42, "reason": "user stopped it"}});
    let r = request(s.addr, "POST", Some(&alice), Some(&sid), Some(&cancel)).await;
    assert_eq!(r.status, 202, "{r:?}");
    // The cancelled request's response ends (with or without an answer).
    let _ = tokio::time::timeout(Duration::from_secs(10), first).await;
    let r = call(&s, Some(&alice), &sid, 42, "office__send").await;
    assert_eq!(r.status, 409, "the reused id was accepted: {r:?}");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 0, "the reuse ran");
    let r = call(&s, Some(&alice), &sid, 43, "office__send").await;
    assert_eq!(result_text(&r), "send done");
    s.office.gate.notify_one();
}

/// The `_meta` a 2026-07-28 request carries in place of a session.
fn meta_2026() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    })
}

/// A stateless (2026-07-28) POST: the version header, `Mcp-Method` and `Mcp-Name` as given.
async fn stateless(
    s: &Server,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    body: &Value,
) -> Reply {
    let mut extra = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = name {
        extra.push(("Mcp-Name", name));
    }
    request_with(s.addr, "POST", token, None, &extra, &body.to_string()).await
}

/// MCP 2026-07-28 over Streamable HTTP (issue 16 item 1): `server/discover` and tool calls
/// without an MCP session, each resolving its caller from its own bearer token; the token
/// check of `initialize` applies; headers that disagree with the body are refused.
#[tokio::test]
async fn the_stateless_2026_07_28_protocol_is_served_with_the_token_check() {
    let s = server(true).await;
    let token = s.token("alice").await;
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": meta_2026()}});
    let r = stateless(&s, Some(&token), "server/discover", None, &discover).await;
    assert_eq!(r.status, 200, "{r:?}");
    let versions = &r.messages[0]["result"]["supportedVersions"];
    assert!(
        versions
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28")) && v.contains(&json!("2025-11-25"))),
        "{r:?}"
    );
    assert!(
        r.session.is_none(),
        "a stateless answer opened an MCP session: {r:?}"
    );

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": meta_2026()}});
    let r = stateless(&s, Some(&token), "tools/list", None, &list).await;
    assert_eq!(r.status, 200, "{r:?}");
    let result = &r.messages[0]["result"];
    assert!(
        result["tools"].to_string().contains("office__send"),
        "{r:?}"
    );
    assert_eq!(result["ttlMs"], 0, "lists are not cacheable: {r:?}");

    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "office__send", "arguments": {}, "_meta": meta_2026()}});
    let r = stateless(&s, Some(&token), "tools/call", Some("office__send"), &call).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(result_text(&r), "send done");
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 1);

    // No token, an unknown token: refused as for initialize, nothing runs.
    let r = stateless(&s, None, "tools/call", Some("office__send"), &call).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = stateless(
        &s,
        Some("ses_unknown"),
        "tools/call",
        Some("office__send"),
        &call,
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    // `Mcp-Name` naming another tool than the body: refused before dispatch.
    let r = stateless(&s, Some(&token), "tools/call", Some("office__slow"), &call).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!r.body.contains("no MCP session"), "{r:?}");
    // `Mcp-Method` naming another method than the body.
    let r = stateless(&s, Some(&token), "tools/list", None, &call).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!r.body.contains("no MCP session"), "{r:?}");
    // Without the per-request `_meta` version: refused.
    let bare = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "office__send", "arguments": {}}});
    let r = stateless(&s, Some(&token), "tools/call", Some("office__send"), &bare).await;
    assert!(
        r.status >= 400 || r.messages.iter().any(|m| m.get("error").is_some()),
        "{r:?}"
    );
    assert_eq!(s.office.sent.load(Ordering::SeqCst), 1);
}
