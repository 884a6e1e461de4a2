//! The operator's side of `secureclaw serve` and `secureclaw config check` (issue 15):
//! Prometheus `/metrics` behind the operator token, rules that match no tool, and an
//! unreachable HTTP upstream named with its URL.
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
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const OPERATOR: &str = "test-operator-token-0123456789";
const IBAN: &str = "DE89370400440532013000";

/// One HTTP/1.1 request with `Connection: close`; returns (status, body text).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let resp = common::exchange(port, method, path, token, &body, Duration::from_secs(30)).unwrap();
    let (status, payload) = common::status_and_body(&resp);
    (status, payload.to_owned())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// `serve` with JSON logs to `log`.
fn serve(config: &Path, state: &Path, port: u16, log: &Path) -> Server {
    common::serve_on(
        Command::new(EXE)
            .arg("--state-dir")
            .arg(state)
            .args(["--log-format", "json", "serve", "--config"])
            .arg(config)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(log).unwrap())),
        port,
    )
}

/// The demo office over stdio, its IBAN classified, payments financial, and `extra` rules.
fn office_config(dir: &Path, port: u16, extra: &str) -> String {
    format!(
        "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n\
         [[gateway.classify]]\nupstream = \"office\"\ntool = \"read_invoice\"\npath = \"/iban\"\nlabel = \"payee_iban\"\nsensitivity = \"high\"\nallowed_sinks = [\"office__pay_invoice\"]\nanchor = true\n\n\
         [[gateway.tools]]\ntool = \"office__pay_invoice\"\nsink = \"egress\"\nfinancial = true\n\n{extra}\
         [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {exe:?}\nargs = [\"demo-tools\", \"--state\", {st:?}]\n",
        exe = EXE,
        st = dir.join("office.json").display().to_string()
    )
}

/// The value of the sample `name` (exact label set, as rendered), 0 when absent.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Scrape, make calls, scrape again: the counters moved, the pending gauge counts the
/// waiting approval, the latency histograms saw the preview, the commit and the upstream
/// calls. Labels hold tool names and reason codes only: a tool name the runtime made up (here
/// an IBAN) is counted as `unknown`, and no value of a result or argument appears. Without
/// the operator token the scrape is refused.
#[test]
fn metrics_move_and_carry_no_values() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("secureclaw.toml");
    std::fs::write(&cfg, office_config(dir.path(), port, "")).unwrap();
    let log = dir.path().join("serve.log");
    let _server = serve(&cfg, &dir.path().join("state"), port, &log);

    let (status, _) = http(port, "GET", "/metrics", None, None);
    assert_eq!(status, 401, "the scrape needs the operator token");
    let (status, _) = http(
        port,
        "GET",
        "/metrics",
        Some("not-the-operator-token-000"),
        None,
    );
    assert_eq!(status, 401);
    let (status, before) = http(port, "GET", "/metrics", Some(OPERATOR), None);
    assert_eq!(status, 200, "{before}");
    assert_eq!(
        sample(&before, "secureclaw_pending_approvals"),
        0.0,
        "{before}"
    );

    let (_, sess) = http(
        port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(&json!({"caller": "bob", "task": {"request": "Pay invoice INV-42"}})),
    );
    let sess = json_of(&sess);
    let sid = sess["session_id"].as_str().unwrap().to_owned();
    assert!(
        sess["audit_session"].as_str().unwrap().starts_with("ses#"),
        "{sess}"
    );
    let call = |tool: &str, arguments: Value| {
        json_of(
            &http(
                port,
                "POST",
                "/v1/call",
                Some(&sid),
                Some(&json!({"tool": tool, "arguments": arguments})),
            )
            .1,
        )
    };
    let read = call("office__read_invoice", json!({"invoice_id": "INV-42"}));
    assert_eq!(read["status"], "completed", "{read}");
    let handle = read["structured_content"]["iban"]
        .as_str()
        .unwrap()
        .to_owned();
    let amount = read["structured_content"]["amount_cents"].clone();
    let pay = call(
        "office__pay_invoice",
        json!({"invoice_id": "INV-42", "iban": handle, "amount_cents": amount}),
    );
    assert_eq!(pay["status"], "pending_confirmation", "{pay}");
    // Adversarial: a tool name carrying a value must not become a label value.
    let odd = call(IBAN, json!({"x": IBAN}));
    assert_eq!(odd["status"], "denied", "{odd}");

    let (_, after) = http(port, "GET", "/metrics", Some(OPERATOR), None);
    let read_allowed =
        r#"secureclaw_calls_total{tool="office__read_invoice",decision="allow",reason="none"}"#;
    let pay_pending = r#"secureclaw_calls_total{tool="office__pay_invoice",decision="pending",reason="confirmation_required"}"#;
    let unknown = r#"secureclaw_calls_total{tool="unknown",decision="deny",reason="unknown_tool"}"#;
    assert_eq!(sample(&before, read_allowed), 0.0);
    assert!(after.contains("# TYPE secureclaw_calls counter"), "{after}");
    assert_eq!(sample(&after, read_allowed), 1.0, "{after}");
    assert_eq!(sample(&after, pay_pending), 1.0, "{after}");
    assert_eq!(sample(&after, unknown), 1.0, "{after}");
    assert_eq!(
        sample(&after, "secureclaw_pending_approvals"),
        1.0,
        "{after}"
    );
    assert!(
        sample(&after, "secureclaw_preview_duration_seconds_count") >= 1.0,
        "{after}"
    );
    assert!(
        sample(
            &after,
            r#"secureclaw_upstream_call_duration_seconds_count{upstream="office"}"#
        ) >= 1.0,
        "{after}"
    );
    assert!(
        after.contains("secureclaw_upstream_restarts_total{upstream=\"office\"} 0"),
        "{after}"
    );
    assert!(!after.contains(IBAN), "a value in a label: {after}");
    assert!(!after.contains("hdl_"), "a handle in a label: {after}");

    // The log: JSON lines, the pending line names the approve command with the state dir.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text.lines().map(json_of).collect();
    let pending = lines
        .iter()
        .find(|l| l["target"] == "secureclaw::approval")
        .expect("a pending line");
    let state = dir.path().join("state");
    assert!(
        pending["approve"].as_str().unwrap().starts_with(&format!(
            "secureclaw --state-dir {} approvals approve act_",
            state.display()
        )),
        "{pending}"
    );
    assert!(!text.contains(IBAN), "the IBAN reached the log: {text}");
}

/// A misspelt `[[gateway.tools]]` rule: `serve` starts with a warning naming the rule and the
/// tool it probably meant; `config check` reports it and fails, passes once it is fixed, and
/// with `--offline` only warns that it did not look.
#[test]
fn rules_that_match_no_tool_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        office_config(
            dir.path(),
            port,
            "[[gateway.tools]]\ntool = \"ofice__send_email\"\nhidden = true\n\n",
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    {
        let _server = serve(&bad, &dir.path().join("state"), port, &log);
        let (status, _) = http(port, "GET", "/health", None, None);
        assert_eq!(status, 200);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let warning = text
        .lines()
        .map(json_of)
        .find(|l| {
            l["level"] == "WARN"
                && l["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("gateway.tools[1]")
        })
        .unwrap_or_else(|| panic!("no warning for the rule: {text}"));
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.contains("`ofice__send_email`")
            && message.contains("did you mean `office__send_email`"),
        "{message}"
    );

    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("gateway.tools[1] `ofice__send_email` matches no listed tool"),
        "{stdout}"
    );

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        office_config(
            dir.path(),
            port,
            "[[gateway.tools]]\ntool = \"office__send_email\"\n\n",
        ),
    )
    .unwrap();
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        // `-c/--config`, as `serve` takes it, works like the positional file.
        .args(["config", "check", "-c"])
        .arg(&good)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every rule applies to a listed tool"),
        "{stdout}"
    );

    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["config", "check", "--offline"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning: --offline"));
}

/// An HTTP upstream nobody listens on: the error names the upstream and its URL and says
/// the connection was refused, not a raw client error.
#[test]
fn an_unreachable_http_upstream_is_named_with_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let closed = free_port();
    let url = format!("http://127.0.0.1:{closed}/mcp");
    let cfg = dir.path().join("crm.toml");
    std::fs::write(
        &cfg,
        format!("[gateway.limits]\nupstream_startup_timeout_ms = 20000\n\n[[upstream]]\nid = \"crm\"\ntransport = \"http\"\nurl = \"{url}\"\n"),
    )
    .unwrap();
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["config", "check"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("upstream `crm`")
            && err.contains(&format!("cannot reach `{url}`"))
            && err.to_lowercase().contains("connection refused"),
        "{err}"
    );
}

/// New-user trial: `approvals list` pointed at the wrong state directory (or at the SQLite
/// default while the gateway keeps its state in PostgreSQL) used to create an empty database
/// and say "no pending approvals". Operator commands now refuse a state that does not exist,
/// say how to point at the right one, and create nothing.
#[test]
fn operator_commands_refuse_a_state_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-the-state-dir");
    for args in [
        &["approvals", "list"][..],
        &["approvals", "approve", "act_X"][..],
        &["grants", "list"][..],
        &["grants", "revoke", "grant-x"][..],
        &["audit", "verify"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
            .arg("--state-dir")
            .arg(&missing)
            .args(args)
            .env_remove("SECURECLAW_KEYS")
            .env_remove("SECURECLAW_KEYS_FILE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("no SecureClaw state") && err.contains("--state-dir"),
            "{args:?}: {err}"
        );
        assert!(!missing.exists(), "{args:?} created the state directory");
    }
    // Positive control: a state directory a gateway created is accepted. The demo runs twice
    // in it (new-user finding: the second run failed on the first run's e-mails).
    let state = dir.path().join("state");
    for run in 1..=2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
            .args(["demo", "--dir"])
            .arg(&state)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "run {run}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Standing grants from the CLI (issue 15 item 1): `approvals approve --allow-for/--uses`
/// checks its terms before deciding anything, with errors that say what is wrong; `grants
/// list` and `grants revoke` name the state directory.
#[test]
fn grant_terms_are_checked_and_grants_listed_and_revoked_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = Command::new(EXE)
        .args(["demo", "--dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = |args: &[&str]| {
        let out = Command::new(EXE)
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, want) in [
        (
            &["approvals", "approve", "act_X", "--uses", "0"][..],
            "between 1 and 1000 uses",
        ),
        (
            &["approvals", "approve", "act_X", "--uses", "1001"][..],
            "between 1 and 1000 uses",
        ),
        (
            &["approvals", "approve", "act_X", "--allow-for", "25h"][..],
            "between 1 second and 24 hours",
        ),
        (
            &["approvals", "approve", "act_X", "--allow-for", "soon"][..],
            "`soon` is not a duration",
        ),
        (
            &["approvals", "approve", "act_X", "--max-amount", "500"][..],
            "add --allow-for or --uses",
        ),
        (
            &["approvals", "approve", "act_X", "--allow-for", "30m"][..],
            "not found",
        ),
        (&["grants", "revoke", "grant-nope"][..], "not found"),
    ] {
        let (ok, _, err) = run(args);
        assert!(!ok, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let (ok, _, err) = run(&["grants", "revoke", "grant-nope"]);
    assert!(!ok && err.contains("state directory"), "{err}");
    let (ok, out, err) = run(&["grants", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("no live standing grants in state directory"),
        "{out}"
    );
    let (ok, out, _) = run(&["grants", "list", "--all"]);
    assert!(ok && out.contains("no standing grants"), "{out}");
}

/// New-user trial (replicas): a gateway or operator command whose key ring did not write the
/// store is refused before it writes anything, with a message that says to share keys.json —
/// instead of serving and breaking the audit chain, or reporting tampering that never happened.
#[test]
fn a_key_ring_that_did_not_write_the_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&a, &b] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
            .args(["demo", "--dir"])
            .arg(d)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let verify = |state: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
            .arg("--state-dir")
            .arg(state)
            .args(["audit", "verify"])
            .env_remove("SECURECLAW_KEYS")
            .env_remove("SECURECLAW_KEYS_FILE")
            .output()
            .unwrap()
    };
    // Positive control: each store verifies with its own ring.
    assert!(verify(&a).status.success());
    // Another gateway's ring over store `a`.
    std::fs::copy(a.join("keys.json"), dir.path().join("a-keys.json")).unwrap();
    std::fs::copy(b.join("keys.json"), a.join("keys.json")).unwrap();
    let out = verify(&a);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cannot verify this store's audit log") && err.contains("keys.json"),
        "{err}"
    );
    assert!(!err.contains("altered"), "reported as tampering: {err}");
    // Nothing was written: with its own ring back, store `a` verifies as before.
    std::fs::copy(dir.path().join("a-keys.json"), a.join("keys.json")).unwrap();
    let out = verify(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A webhook receiver on loopback: answers every request `200` and keeps each body.
fn webhook_receiver() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    (port, got)
}

/// `POST path` with the operator token and an `X-SecureClaw-Approver` header.
fn post_as(port: u16, path: &str, approver: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {OPERATOR}\r\n\
         X-SecureClaw-Approver: {approver}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (status, body) = common::status_and_body(&resp);
    (status, body.to_owned())
}

/// Issue 15 "Channels", end to end through `serve`: each action that goes pending is posted
/// to the configured webhook (no argument value in it), the approver named in the operator
/// API's header is recorded in the approval and the audit log, a malformed name is refused,
/// and an approval nobody decides is denied once `[gateway.approvals] timeout_ms` passes —
/// by the running gateway, with the webhook told.
#[test]
fn serve_posts_webhooks_records_the_approver_and_denies_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (hook, got) = webhook_receiver();
    let port = common::free_port();
    let config = dir.path().join("secureclaw.toml");
    let approvals = format!(
        "[gateway.approvals]\ntimeout_ms = 3000\n\n[[gateway.approvals.webhooks]]\n\
         url = \"http://127.0.0.1:{hook}/hook\"\n\n"
    );
    std::fs::write(&config, office_config(dir.path(), port, &approvals)).unwrap();
    let _server = serve(
        &config,
        &dir.path().join("state"),
        port,
        &dir.path().join("log"),
    );
    let (_, sess) = http(
        port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        Some(&json!({"caller": "bob", "task": {"request": "Pay invoice INV-42"}})),
    );
    let sid = json_of(&sess)["session_id"].as_str().unwrap().to_owned();
    let pay = |invoice: &str| {
        let read = json_of(
            &http(
                port,
                "POST",
                "/v1/call",
                Some(&sid),
                Some(
                    &json!({"tool": "office__read_invoice", "arguments": {"invoice_id": invoice}}),
                ),
            )
            .1,
        );
        let handle = read["structured_content"]["iban"]
            .as_str()
            .unwrap()
            .to_owned();
        let amount = read["structured_content"]["amount_cents"].clone();
        let out = json_of(
            &http(
                port,
                "POST",
                "/v1/call",
                Some(&sid),
                Some(&json!({"tool": "office__pay_invoice",
                    "arguments": {"invoice_id": invoice, "iban": handle, "amount_cents": amount}})),
            )
            .1,
        );
        assert_eq!(out["status"], "pending_confirmation", "{out}");
        out["recovery"]["action_id"].as_str().unwrap().to_owned()
    };
    let wait = |n: usize| {
        for _ in 0..200 {
            if got.lock().unwrap().len() >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        got.lock().unwrap().clone()
    };
    // 1. The pending payment reaches the webhook, without the IBAN, the amount or the session.
    let first = pay("INV-42");
    let bodies = wait(1);
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["event"], "approval.pending");
    assert_eq!(bodies[0]["action_id"], first.as_str());
    assert_eq!(bodies[0]["tool"], "office__pay_invoice");
    assert_eq!(
        bodies[0]["approvals_url"],
        format!("http://127.0.0.1:{port}/approvals")
    );
    let text = bodies[0].to_string();
    for value in [IBAN, "hdl_", sid.as_str()] {
        assert!(
            !text.contains(value),
            "`{value}` in the webhook body: {text}"
        );
    }
    // 2. A malformed approver name is refused and decides nothing; a named approver is recorded.
    let (status, body) = post_as(
        port,
        &format!("/v1/approvals/{first}/approve"),
        "al ice<script>",
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = post_as(
        port,
        &format!("/v1/approvals/{first}/approve"),
        "alice@corp.example",
    );
    assert_eq!(status, 200, "{body}");
    // 3. A second payment nobody decides is denied by the gateway once the timeout passes.
    // Another invoice: the identical call would commit the approval just given.
    let second = pay("INV-43");
    let mut denied = None;
    for _ in 0..150 {
        let (_, list) = http(
            port,
            "GET",
            "/v1/approvals?state=denied",
            Some(OPERATOR),
            None,
        );
        let list = json_of(&list);
        if let Some(a) = list["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action_id"] == second.as_str())
        {
            denied = Some(a.clone());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        denied.is_some(),
        "the unanswered approval was not denied on timeout"
    );
    let bodies = wait(3);
    assert!(
        bodies
            .iter()
            .any(|b| b["event"] == "approval.timed_out" && b["action_id"] == second.as_str()),
        "{bodies:?}"
    );
    // The approved one was not touched by the timeout.
    let (_, approved) = http(
        port,
        "GET",
        "/v1/approvals?state=approved",
        Some(OPERATOR),
        None,
    );
    assert!(approved.contains(&first), "{approved}");
    // 4. The audit log names both deciders.
    let (_, audit) = http(port, "GET", "/v1/audit?limit=10000", Some(OPERATOR), None);
    let audit = json_of(&audit);
    let confirmer = |id: &str| {
        audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["event"]["kind"] == "confirmation" && r["event"]["action_id"] == id)
            .map(|r| r["event"]["detail"]["confirmer"].clone())
    };
    assert_eq!(
        confirmer(&first),
        Some(json!("operator-api:alice@corp.example")),
        "{audit}"
    );
    assert_eq!(confirmer(&second), Some(json!("timeout")), "{audit}");
}

/// Every configuration in `examples/` starts as written, from a directory that is not the
/// repository's root (its paths are the config file's): `config check` starts each upstream,
/// lists its tools and finds that every rule applies to one, and `serve` comes up (its
/// upstreams started) and answers `/health`. The two-upstream example's office runs over Streamable HTTP as its comment
/// says (`secureclaw demo-tools --http`).
#[test]
fn every_example_configuration_starts_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        root.join(
            "tools/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
        )
        .is_file(),
        "run `npm ci --prefix tools/mcp-servers` (scripts/test does)"
    );
    let dir = tempfile::tempdir().unwrap();
    // `secureclaw` on PATH, as the office example asks.
    let bin = std::path::Path::new(EXE).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The remote office of the two-upstream example, at the address it names.
    let office = Server(
        Command::new(EXE)
            .args(["demo-tools", "--state"])
            .arg(dir.path().join("office-http.json"))
            .args(["--http", "127.0.0.1:8790"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", 8790)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "demo-tools --http did not start on 8790"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let state = dir.path().join(format!("state-{name}"));
        let out = Command::new(EXE)
            .current_dir(dir.path())
            .env("PATH", &path)
            .arg("--state-dir")
            .arg(&state)
            .args(["config", "check", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("every rule applies to a listed tool"),
            "{name}: {stdout}"
        );
        let port = common::free_port();
        let log = dir.path().join(format!("{name}.log"));
        let server = common::serve_on(
            Command::new(EXE)
                .current_dir(dir.path())
                .env("PATH", &path)
                .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
                .arg("--state-dir")
                .arg(&state)
                .args(["serve", "--bind", &format!("127.0.0.1:{port}"), "-c"])
                .arg(&file)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(&log).unwrap())),
            port,
        );
        let (status, health) = http(port, "GET", "/health", None, None);
        assert_eq!(
            status,
            200,
            "{name}: {health}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        drop(server);
        seen.push(name);
    }
    drop(office);
    seen.sort();
    assert_eq!(
        seen,
        ["filesystem.toml", "office.toml", "two-upstreams.toml"],
        "a new example needs its start-up checked here"
    );
}
