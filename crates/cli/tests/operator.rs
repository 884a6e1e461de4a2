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

/// The minimal configuration in `examples/secureclaw.toml` works as its comment says: with its
/// data path pointed at a real directory, `config check` starts the filesystem server and
/// lists its tools (new-user trial: there was no starter file for `serve`).
#[test]
fn the_example_configuration_checks_out() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let server = root.join(
        "tools/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
    );
    assert!(
        server.is_file(),
        "run `npm ci --prefix tools/mcp-servers` (scripts/test does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    let example = std::fs::read_to_string(root.join("examples/secureclaw.toml")).unwrap();
    assert!(example.contains("\"/srv/notes\""), "{example}");
    let config = dir.path().join("secureclaw.toml");
    std::fs::write(
        &config,
        example.replace(
            "\"/srv/notes\"",
            &format!("{:?}", notes.display().to_string()),
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .current_dir(&root)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["config", "check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("upstream `fs`:"), "{stdout}");
}
