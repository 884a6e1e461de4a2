//! `secureclaw serve` end to end: a config file with a stdio upstream (the demo office) and an
//! HTTP upstream (a second `secureclaw serve`, whose Streamable HTTP MCP endpoint becomes an
//! upstream of the first), the operator API over real TCP, and config/policy errors that name
//! what is wrong.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::{EXE, Server, free_port};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OPERATOR: &str = "test-operator-token-0123456789";

/// One HTTP/1.1 request with `Connection: close`; returns (status, JSON body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let resp = common::exchange(port, method, path, token, &body, Duration::from_secs(30)).unwrap();
    let (status, payload) = common::status_and_body(&resp);
    (
        status,
        serde_json::from_str(payload).unwrap_or(Value::String(payload.to_owned())),
    )
}

fn serve(config: &Path, state: &Path, port: u16) -> Server {
    common::serve_on(
        Command::new(EXE)
            .arg("--state-dir")
            .arg(state)
            .args(["serve", "--config"])
            .arg(config)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        port,
    )
}

#[test]
fn serve_with_stdio_and_http_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    // Inner gateway: the demo office over stdio, served as Streamable HTTP with a default
    // session that token-less loopback requests may use (opted in).
    let inner_port = free_port();
    let inner = dir.path().join("inner.toml");
    std::fs::write(
        &inner,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{inner_port}\"\ntokenless_loopback_session = true\n\n[task]\nrequest = \"look at invoices\"\n\n\
             [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {exe:?}\nargs = [\"demo-tools\", \"--state\", {st:?}]\n",
            exe = EXE,
            st = dir.path().join("office.json").display().to_string()
        ),
    )
    .unwrap();
    let _inner = serve(&inner, &dir.path().join("inner-state"), inner_port);

    // Outer gateway: the inner one as an HTTP upstream.
    let outer_port = free_port();
    let outer = dir.path().join("outer.toml");
    std::fs::write(
        &outer,
        // The inner gateway's `readOnlyHint` is a claim like any upstream's: the operator
        // declares the read tool a read.
        format!("[server]\nhttp_bind = \"127.0.0.1:{outer_port}\"\n\n[[gateway.tools]]\ntool = \"remote__office__read_invoice\"\neffect = \"read\"\n\n[[upstream]]\nid = \"remote\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{inner_port}/mcp\"\n"),
    )
    .unwrap();
    let _outer = serve(&outer, &dir.path().join("outer-state"), outer_port);

    let (s, h) = http(outer_port, "GET", "/health", None, None);
    assert_eq!(s, 200, "{h}");
    let (s, _) = http(
        outer_port,
        "POST",
        "/v1/sessions",
        None,
        Some(&json!({"caller": "bob"})),
    );
    assert_eq!(s, 401);
    let (s, sess) = http(
        outer_port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(&json!({"caller": "bob", "task": {"request": "read INV-42"}})),
    );
    assert_eq!(s, 200, "{sess}");
    let sid = sess["session_id"].as_str().unwrap();
    let (_, tools) = http(outer_port, "GET", "/v1/tools", Some(sid), None);
    let names: Vec<String> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"remote__office__read_invoice".to_owned()),
        "{names:?}"
    );
    let (_, r) = http(
        outer_port,
        "POST",
        "/v1/call",
        Some(sid),
        Some(
            &json!({"tool": "remote__office__read_invoice", "arguments": {"invoice_id": "INV-42"}}),
        ),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let text = r.to_string();
    assert!(
        !text.contains("DE89370400440532013000") && text.contains("hdl_"),
        "{text}"
    );
    let (s, v) = http(outer_port, "GET", "/v1/audit/verify", Some(OPERATOR), None);
    assert_eq!(s, 200, "{v}");
}

/// Issue 16 item 3: upstreams spoken to in MCP 2026-07-28. The inner gateway talks 2026-07-28
/// to the demo office over stdio (`protocol = "2026-07-28"`); the outer one reaches the inner
/// one over Streamable HTTP with `protocol = "auto"`, which finds 2026-07-28 (the inner
/// gateway serves it statelessly, with the bearer token on every request). A read comes
/// through both, declassified; each log names the version agreed.
#[test]
fn upstreams_are_spoken_to_in_2026_07_28_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let inner_port = free_port();
    let inner = dir.path().join("inner.toml");
    std::fs::write(
        &inner,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{inner_port}\"\ntokenless_loopback_session = true\n\n[task]\nrequest = \"look at invoices\"\n\n\
             [[upstream]]\nid = \"office\"\ncommand = {exe:?}\nargs = [\"demo-tools\", \"--state\", {st:?}]\nprotocol = \"2026-07-28\"\n",
            exe = EXE,
            st = dir.path().join("office.json").display().to_string()
        ),
    )
    .unwrap();
    let logged = |name: &str| {
        let log = dir.path().join(name);
        let file = std::fs::File::create(&log).unwrap();
        (log, file)
    };
    let (inner_log, inner_err) = logged("inner.log");
    let _inner = common::serve_on(
        Command::new(EXE)
            .arg("--state-dir")
            .arg(dir.path().join("inner-state"))
            .args(["serve", "--config"])
            .arg(&inner)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(inner_err)),
        inner_port,
    );
    let outer_port = free_port();
    let outer = dir.path().join("outer.toml");
    std::fs::write(
        &outer,
        format!("[server]\nhttp_bind = \"127.0.0.1:{outer_port}\"\n\n[[gateway.tools]]\ntool = \"remote__office__read_invoice\"\neffect = \"read\"\n\n[[upstream]]\nid = \"remote\"\nurl = \"http://127.0.0.1:{inner_port}/mcp\"\nprotocol = \"auto\"\n"),
    )
    .unwrap();
    let (outer_log, outer_err) = logged("outer.log");
    let _outer = common::serve_on(
        Command::new(EXE)
            .arg("--state-dir")
            .arg(dir.path().join("outer-state"))
            .args(["serve", "--config"])
            .arg(&outer)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(outer_err)),
        outer_port,
    );
    let (s, sess) = http(
        outer_port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(&json!({"caller": "bob", "task": {"request": "read INV-42"}})),
    );
    assert_eq!(s, 200, "{sess}");
    let sid = sess["session_id"].as_str().unwrap();
    let (_, r) = http(
        outer_port,
        "POST",
        "/v1/call",
        Some(sid),
        Some(
            &json!({"tool": "remote__office__read_invoice", "arguments": {"invoice_id": "INV-42"}}),
        ),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let text = r.to_string();
    assert!(
        !text.contains("DE89370400440532013000") && text.contains("hdl_"),
        "{text}"
    );
    for (log, upstream) in [(&inner_log, "office"), (&outer_log, "remote")] {
        let log = std::fs::read_to_string(log).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("upstream connected") && l.contains(upstream))
            .unwrap_or_else(|| panic!("no `upstream connected` line for {upstream}: {log}"));
        assert!(line.contains("2026-07-28"), "{upstream}: {line}");
    }
}

/// `initialize` on `/mcp` with headers rmcp accepts; (status, `Mcp-Session-Id` present).
fn mcp_initialize(port: u16, token: Option<&str>) -> (u16, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\n{auth}Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status: u16 = resp.split_whitespace().nth(1).unwrap().parse().unwrap();
    let head = resp.split_once("\r\n\r\n").map_or(resp.as_str(), |x| x.0);
    (
        status,
        head.to_ascii_lowercase().contains("mcp-session-id:"),
    )
}

/// Issue 11 item 9: without `tokenless_loopback_session`, a token-less MCP client on loopback
/// gets no session (it used to fall into the default `[task]` session); with it, it does.
#[test]
fn token_less_mcp_on_loopback_is_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let office = dir.path().join("office.json").display().to_string();
    for (opt_in, name) in [(false, "default"), (true, "opted-in")] {
        let port = free_port();
        let cfg = dir.path().join(format!("{name}.toml"));
        let line = if opt_in {
            "tokenless_loopback_session = true\n"
        } else {
            ""
        };
        std::fs::write(
            &cfg,
            format!(
                "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n{line}\n[task]\nrequest = \"look at invoices\"\n\n\
                 [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"demo-tools\", \"--state\", {office:?}]\n"
            ),
        )
        .unwrap();
        let _server = serve(&cfg, &dir.path().join(format!("{name}-state")), port);
        let (status, session) = mcp_initialize(port, None);
        if opt_in {
            assert_eq!((status, session), (200, true), "{name}");
        } else {
            assert_eq!((status, session), (401, false), "{name}");
            // A session token opens an MCP session.
            let (s, sess) = http(
                port,
                "POST",
                "/v1/sessions",
                Some(OPERATOR),
                Some(&json!({"caller": "bob"})),
            );
            assert_eq!(s, 200, "{sess}");
            let token = sess["session_id"].as_str().unwrap();
            assert_eq!(mcp_initialize(port, Some(token)), (200, true));
        }
    }
}

/// Issue 12 item 3: off loopback, MCP `initialize` needs a session token even when the
/// operator set `tokenless_loopback_session` (ignored there, and said so); a session token
/// still opens an MCP session (positive control).
#[test]
fn off_loopback_initialize_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let office = dir.path().join("office.json").display().to_string();
    let port = free_port();
    let cfg = dir.path().join("public.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nhttp_bind = \"0.0.0.0:{port}\"\ntokenless_loopback_session = true\n\n[task]\nrequest = \"look at invoices\"\n\n\
             [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"demo-tools\", \"--state\", {office:?}]\n"
        ),
    )
    .unwrap();
    let _server = serve(&cfg, &dir.path().join("state"), port);
    // Reached over 127.0.0.1, but the bind is not loopback: no token-less session.
    assert_eq!(mcp_initialize(port, None), (401, false));
    assert_eq!(mcp_initialize(port, Some("ses_made-up")), (401, false));
    let (s, sess) = http(
        port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(&json!({"caller": "bob"})),
    );
    assert_eq!(s, 200, "{sess}");
    let token = sess["session_id"].as_str().unwrap();
    assert_eq!(mcp_initialize(port, Some(token)), (200, true));
}

/// Issue 12 item 4: an upstream that never completes its handshake stops `serve` and `wrap`
/// with a non-zero exit naming the upstream and the cause, within the configured time.
#[test]
fn an_upstream_that_never_answers_stops_serve_and_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("hung.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{}\"\n\n[gateway.limits]\nupstream_startup_timeout_ms = 500\n\n\
             [[upstream]]\nid = \"hung\"\ntransport = \"stdio\"\ncommand = \"sleep\"\nargs = [\"30\"]\n",
            free_port()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("s1"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`hung`") && err.contains("did not complete within 500 ms"),
        "{err}"
    );
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("s2"))
        .args(["wrap", "--id", "hung", "--config"])
        .arg(&cfg)
        .args(["--", "sleep", "30"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`hung`") && err.contains("did not complete within 500 ms"),
        "{err}"
    );
}

#[test]
fn bad_config_and_policy_are_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[server]\nhttp_bnd = \"127.0.0.1:1\"\n").unwrap();
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path())
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http_bnd"), "{err}");

    let pol = dir.path().join("bad.cedar");
    std::fs::write(
        &pol,
        "permit(principal, action, resource) when { context.no_such_field };",
    )
    .unwrap();
    let out = Command::new(EXE)
        .args(["policy", "check"])
        .arg(&pol)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no_such_field") || err.contains("validate"),
        "{err}"
    );

    let out = Command::new(EXE)
        .args(["policy", "check"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("policy set OK"));
}

#[test]
fn keys_are_private_and_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s");
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["keys", "list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join("keys.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.contains("bind-1") && !listed.contains("secret"));
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["keys", "rotate", "binding"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["keys", "retire", "bind-1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["keys", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        listed.contains("bind-1") && listed.contains("retired") && listed.contains("bind-2"),
        "{listed}"
    );
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["keys", "rotate", "nonsense"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
