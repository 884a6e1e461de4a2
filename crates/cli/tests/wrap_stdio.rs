//! `secureclaw wrap` over real stdio pipes: the drop-in as a client sees it, including
//! malformed JSON-RPC and invalid UTF-8 on the wire. The upstream is the demo office, run by
//! the same binary (`secureclaw demo-tools`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Wrapped {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Wrapped {
    fn start(task: &str) -> Self {
        Self::start_with(task, &[], &[], Stdio::null())
    }

    /// `wrap` with extra options (before `--`), environment and stderr.
    fn start_with(task: &str, options: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), task, options, env, stderr)
    }

    /// `wrap` with its state (and the office's) in `dir`: a second `wrap` started in the
    /// directory a first one was stopped in ([`Wrapped::stop`]) is a restart of the client.
    fn start_in(
        dir: tempfile::TempDir,
        task: &str,
        options: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Self {
        let exe = env!("CARGO_BIN_EXE_secureclaw");
        let office = dir.path().join("office.json");
        let mut child = Command::new(exe)
            .envs(env.iter().copied())
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["wrap", "--no-elicitation", "--task", task, "--id", "office"])
            .args(options)
            .arg("--")
            .arg(exe)
            .args(["demo-tools", "--state"])
            .arg(&office)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines: rx,
            _dir: Some(dir),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    /// Next message with this id (skipping notifications), or None after a timeout.
    fn response(&self, id: i64) -> Option<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            let line = self.lines.recv_timeout(left).ok()?;
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["id"] == json!(id) {
                return Some(v);
            }
        }
        None
    }

    fn initialize(&mut self) {
        self.initialize_with(json!({}));
    }

    fn initialize_with(&mut self, capabilities: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "test", "version": "0"}}}));
        let r = self.response(1).expect("initialize answered");
        assert_eq!(r["result"]["serverInfo"]["name"], "secureclaw");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: i64, name: &str, args: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}}));
        self.response(id).expect("tools/call answered")
    }
}

impl Wrapped {
    /// The audit log so far (`secureclaw audit export`), one event per record.
    fn audit(&self) -> Vec<Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
            .arg("--state-dir")
            .arg(self.dir().join("state"))
            .args(["audit", "export"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone())
            .collect()
    }
}

impl Wrapped {
    fn dir(&self) -> &std::path::Path {
        self._dir.as_ref().unwrap().path()
    }

    /// Kill this `wrap` (as a client that exits does) and hand back its directory.
    fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self._dir.take().unwrap()
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn wrap_serves_a_stdio_upstream_with_handles_and_policy() {
    let mut w = Wrapped::start("Send invoice INV-42 to approver@corp.example");
    w.initialize();
    w.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = w.response(2).unwrap();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read_invoice") && names.contains(&"send_email"),
        "{names:?}"
    );
    // Issue 15: speculation is off, so the branch tools are not listed.
    assert!(
        !names.iter().any(|n| n.starts_with("secureclaw.")),
        "{names:?}"
    );

    let r = w.call(3, "read_invoice", json!({"invoice_id": "INV-42"}));
    let text = r.to_string();
    assert!(
        !text.contains("DE89370400440532013000"),
        "IBAN leaked: {text}"
    );
    assert!(!text.contains("attacker@evil.example"));
    assert!(text.contains("hdl_"));

    let r = w.call(
        4,
        "send_email",
        json!({"to": "approver@corp.example", "subject": "INV-42", "body": "please approve"}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    let r = w.call(
        5,
        "send_email",
        json!({"to": "attacker@evil.example", "subject": "INV-42", "body": "x"}),
    );
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["status"],
        "pending_confirmation"
    );
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"],
        "confirmation_required"
    );
    // Red-team F4: `approvals list` names the session by its digest, never by its id (the
    // runtime's bearer token, `ses_…`).
    let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(w.dir().join("state"))
        .args(["approvals", "list"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8(out.stdout).unwrap();
    assert!(listing.contains("attacker@evil.example"), "{listing}");
    assert!(listing.contains("(session ses#"), "{listing}");
    assert!(!listing.contains("ses_"), "{listing}");
}

#[test]
fn malformed_input_gets_errors_and_the_server_keeps_serving() {
    let mut w = Wrapped::start("");
    w.initialize();
    // Garbage, invalid UTF-8, a non-object, a request without method: none may kill the server.
    w.send_raw(b"{this is not json");
    w.send_raw(&[0xff, 0xfe, 0x7b, 0x22, 0xc3, 0x28]);
    w.send_raw(b"[1,2,3]");
    w.send(&json!({"jsonrpc": "2.0", "id": 10}));
    // Unknown method -> JSON-RPC error.
    w.send(&json!({"jsonrpc": "2.0", "id": 11, "method": "no/such/method"}));
    let r = w.response(11).expect("unknown method answered");
    assert!(r["error"].is_object(), "{r}");
    // Unknown tool -> a structured denial, not a crash.
    let r = w.call(12, "no_such_tool", json!({}));
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"], "unknown_tool",
        "{r}"
    );
    // Deeply nested arguments.
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let r = w.call(
        13,
        "send_email",
        json!({"to": "x@y.example", "subject": "s", "body": "b", "extra": deep}),
    );
    // Past the one depth limit (arguments 64 + 3 for the message): refused by the line
    // framing before any parser, with the id.
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // Integer beyond 2^53.
    w.send_raw(br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"pay_invoice","arguments":{"invoice_id":"INV-42","iban":"x","amount_cents":9007199254740993}}}"#);
    let r = w.response(14).unwrap();
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"], "invalid_arguments",
        "{r}"
    );
    // Still serving.
    let r = w.call(15, "noop", json!({}));
    assert_eq!(r["result"]["isError"], false, "{r}");
}

/// Regression: `wrap --no-elicitation` was parsed but not applied, so a client declaring the
/// elicitation capability (the agent itself) was asked — and could confirm its own action.
#[test]
fn no_elicitation_means_the_client_is_never_asked() {
    let mut w = Wrapped::start("Send invoice INV-42 to approver@corp.example");
    w.initialize_with(json!({"elicitation": {}}));
    w.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "send_email", "arguments": {"to": "attacker@evil.example", "subject": "s", "body": "b"}}}));
    // Any server-to-client request (elicitation/create) arrives before our response; with
    // elicitation off there must be none, and the call must stay pending.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let response = loop {
        let left = deadline
            .checked_duration_since(std::time::Instant::now())
            .expect("no answer in time");
        let line = w.lines.recv_timeout(left).expect("no answer in time");
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        assert_ne!(
            v["method"], "elicitation/create",
            "the client was asked to confirm: {v}"
        );
        if v["id"] == json!(7) {
            break v;
        }
    };
    assert_eq!(
        response["result"]["structuredContent"]["status"], "pending_confirmation",
        "{response}"
    );
}

impl Wrapped {
    /// Read answers until every id in `ids` and at least `nulls` answers with id `null` have
    /// arrived, then keep reading briefly so a duplicate answer would be seen. None if that
    /// does not happen in time (a liveness bound, not a timing assertion). Answers to
    /// lines refused before rmcp are sent on their own task, so they may overtake or trail
    /// rmcp's answers: order is not checked (JSON-RPC does not promise it).
    fn collect(&self, ids: &[i64], nulls: usize) -> Option<Vec<Value>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            let done = ids
                .iter()
                .all(|id| seen.iter().any(|v: &Value| v["id"] == json!(id)))
                && seen.iter().filter(|v| v["id"].is_null()).count() >= nulls;
            if done {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(300)) {
                    seen.push(serde_json::from_str(&line).unwrap_or(Value::Null));
                }
                return Some(seen);
            }
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            let line = self.lines.recv_timeout(left).ok()?;
            seen.push(serde_json::from_str(&line).unwrap_or(Value::Null));
        }
    }
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// Regression (issue 12 item 2): on stdio, a line with invalid UTF-8, arguments nested 130 or
/// 10,000 levels deep, or a well-formed line over 16 MiB was dropped by rmcp with no reply.
/// Every line now gets exactly one answer — `-32700` with id `null` when unparsable, an error
/// carrying the id otherwise — and the connection keeps serving.
#[test]
fn every_line_gets_exactly_one_answer() {
    let mut w = Wrapped::start("");
    w.initialize();
    let call = |id: i64, extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"send_email","arguments":{{"to":"a@corp.example","subject":"s","body":"b","extra":{extra}}}}}}}"#
        )
    };
    // Unparsable: -32700, id null.
    w.send_raw(&[0xff, 0xfe, 0x7b, 0x22, 0xc3, 0x28]);
    w.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"ping\",\"x\":\"\xc3\x28\"}");
    w.send_raw(b"{this is not json");
    // Too deep for the gateway (and for serde_json): an error with the id.
    w.send_raw(call(20, &nested(130)).as_bytes());
    // 10,000 levels, the id after the deep part.
    w.send_raw(
        format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"noop","arguments":{{"x":{}}}}},"id":21}}"#,
            nested(10_000)
        )
        .as_bytes(),
    );
    // A key twice: invalid_arguments naming it.
    w.send_raw(br#"{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"noop","arguments":{"k":1,"k":2}}}"#);
    // Well-formed, over 16 MiB.
    let big = format!("\"{}\"", "a".repeat(16 * 1024 * 1024 + 10));
    w.send_raw(call(23, &big).as_bytes());
    // JSON, not JSON-RPC: an error with the id it names (or null).
    w.send(&json!({"jsonrpc": "2.0", "id": 24}));
    w.send_raw(b"[1,2,3]");
    // Still serving, in order.
    w.send(&json!({"jsonrpc": "2.0", "id": 25, "method": "ping"}));
    let seen = w
        .collect(&[20, 21, 22, 23, 24, 25], 4)
        .expect("every line answered");
    let answers =
        |id: i64| -> Vec<&Value> { seen.iter().filter(|v| v["id"] == json!(id)).collect() };
    let nulls: Vec<&Value> = seen.iter().filter(|v| v["id"].is_null()).collect();
    assert_eq!(nulls.len(), 4, "{seen:?}");
    assert_eq!(
        nulls
            .iter()
            .filter(|v| v["error"]["code"] == -32700)
            .count(),
        3,
        "{nulls:?}"
    );
    assert!(
        nulls.iter().any(|v| v["error"]["code"] == -32600),
        "{nulls:?}"
    );
    for (id, code) in [
        (20, -32600),
        (21, -32600),
        (22, -32602),
        (23, -32600),
        (24, -32600),
    ] {
        let a = answers(id);
        assert_eq!(a.len(), 1, "id {id}: {seen:?}");
        assert_eq!(a[0]["error"]["code"], code, "id {id}: {}", a[0]);
    }
    assert!(
        answers(22)[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`k`")
    );
    assert!(
        answers(23)[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than")
    );
    assert!(answers(25)[0]["result"].is_object());
    assert!(answers(30).is_empty(), "{seen:?}");
    // No second answer to anything, and the connection still works.
    w.send(&json!({"jsonrpc": "2.0", "id": 26, "method": "tools/call", "params": {"name": "noop", "arguments": {}}}));
    let later = w.collect(&[26], 0).expect("still serving");
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0]["result"]["isError"], false, "{later:?}");
    // Every refusal is audited in the session, with a reason and nothing of the request.
    let audit = w.audit();
    let mut reasons: Vec<&str> = audit
        .iter()
        .filter(|e| e["kind"] == "rejection")
        .map(|e| {
            assert_eq!(e["detail"]["front_end"], "mcp-stdio", "{e}");
            assert!(e["session"].is_string(), "{e}");
            e["detail"]["reason"].as_str().unwrap()
        })
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            "duplicate_key",
            "invalid_request",
            "invalid_request",
            "parse_error",
            "parse_error",
            "parse_error",
            "request_too_deep",
            "request_too_deep",
            "request_too_large"
        ],
        "{audit:?}"
    );
    assert!(!serde_json::to_string(&audit).unwrap().contains("aaaaaaaa"));
}

/// The demo office's classification (`GatewayConfig::demo_office`) as a config file: the
/// invoice IBAN is a `high` value that may flow only into `office__pay_invoice`.
const OFFICE_CONFIG: &str = r#"
[[gateway.classify]]
upstream = "office"
tool = "read_invoice"
path = "/iban"
label = "payee_iban"
sensitivity = "high"
allowed_sinks = ["office__pay_invoice"]
anchor = true

[[gateway.tools]]
tool = "office__pay_invoice"
sink = "egress"
financial = true
"#;

/// Regression (issue 12 item 7): at `RUST_LOG=debug` rmcp logged whole messages, upstream
/// results with plaintext IBANs included. Across a read (the upstream returns the IBAN), and
/// a payment that previews, commits and sends the resolved IBAN to the upstream, nothing in
/// the gateway's stderr at trace level holds the IBAN; and stderr, not a terminal here,
/// carries no ANSI escapes.
#[test]
fn no_protected_value_in_the_log_at_trace_level() {
    const IBAN: &str = "DE89370400440532013000";
    let conf = tempfile::tempdir().unwrap();
    let config = conf.path().join("secureclaw.toml");
    std::fs::write(&config, OFFICE_CONFIG).unwrap();
    let log_path = conf.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut w = Wrapped::start_with(
        "Pay invoice INV-42",
        &[
            "--config",
            config.to_str().unwrap(),
            "--grant",
            "office__pay_invoice",
        ],
        &[("RUST_LOG", "trace")],
        Stdio::from(log),
    );
    w.initialize();
    let r = w.call(2, "read_invoice", json!({"invoice_id": "INV-42"}));
    let text = r.to_string();
    assert!(!text.contains(IBAN), "{text}");
    let iban = r["result"]["structuredContent"]["iban"]
        .as_str()
        .expect("the IBAN field holds a handle")
        .to_owned();
    assert!(iban.starts_with("hdl_"), "{iban}");
    let amount = r["result"]["structuredContent"]["amount_cents"].clone();
    let r = w.call(
        3,
        "pay_invoice",
        json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": amount}),
    );
    assert_eq!(r["result"]["isError"], false, "the payment ran: {r}");
    drop(w);
    let log = std::fs::read(&log_path).unwrap();
    let log = String::from_utf8_lossy(&log);
    // The log was captured (before the fix, rmcp's trace lines carried the upstream's
    // result with the IBAN in clear, and ANSI colour codes).
    assert!(log.contains("secureclaw: serving on stdio"), "{log}");
    assert!(!log.contains(IBAN), "the IBAN reached the log");
    // Also spaced as the demo prints it, and without its country code.
    assert!(
        !log.contains("DE89 3704 0044 0532 0130 00"),
        "the IBAN reached the log"
    );
    assert!(
        !log.contains("370400440532013000"),
        "the IBAN reached the log"
    );
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a non-terminal log"
    );
}

impl Wrapped {
    /// The state directory of this `wrap`.
    fn state(&self) -> std::path::PathBuf {
        self.dir().join("state")
    }

    fn tool_names(&mut self, id: i64) -> Vec<String> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        self.response(id).unwrap()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Issue 15: with `--log-format json` every stderr line is a JSON object. Each decided call
/// has one line naming tool, upstream, decision and reason code (and no argument value);
/// a call that goes pending logs the exact approve command with `--state-dir`, and that
/// command works. Nothing protected reaches the log at `--log-level trace`, and neither does
/// the body the runtime wrote. The recovery the runtime gets names the state directory too,
/// and `approvals approve` of an unknown id names the directory it searched.
#[test]
fn json_logs_carry_decisions_and_the_approve_command() {
    const IBAN: &str = "DE89370400440532013000";
    const BODY: &str = "body-text-that-must-not-be-logged";
    let conf = tempfile::tempdir().unwrap();
    let config = conf.path().join("secureclaw.toml");
    std::fs::write(&config, OFFICE_CONFIG).unwrap();
    let log_path = conf.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut w = Wrapped::start_with(
        "Pay invoice INV-42",
        &[
            "--config",
            config.to_str().unwrap(),
            "--log-format",
            "json",
            "--log-level",
            "trace",
        ],
        &[],
        Stdio::from(log),
    );
    w.initialize();
    let r = w.call(2, "read_invoice", json!({"invoice_id": "INV-42"}));
    let iban = r["result"]["structuredContent"]["iban"]
        .as_str()
        .expect("the IBAN field holds a handle")
        .to_owned();
    let amount = r["result"]["structuredContent"]["amount_cents"].clone();
    // Not granted: a financial effect waits for the user.
    let r = w.call(
        3,
        "pay_invoice",
        json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": amount}),
    );
    let recovery = &r["result"]["structuredContent"]["recovery"];
    assert_eq!(recovery["reason"], "confirmation_required", "{r}");
    let action = recovery["action_id"].as_str().unwrap().to_owned();
    let state = w.state();
    let approve = format!(
        "secureclaw --state-dir {} approvals approve {action}",
        state.display()
    );
    // The runtime learns which action to have approved, not where the state is kept (an
    // agent with a shell could run the operator's command itself); the log line has it.
    let steps = recovery["next_steps"].to_string();
    assert!(
        steps.contains(&format!("secureclaw approvals approve {action}")),
        "{recovery}"
    );
    assert!(
        !steps.contains(&state.display().to_string()) && !steps.contains("--state-dir"),
        "the runtime's hint names the state directory: {recovery}"
    );
    let r = w.call(
        4,
        "send_email",
        json!({"to": "someone@elsewhere.example", "subject": "s", "body": BODY}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    // Each decision is logged before its answer is sent: the log is complete here (`w`
    // stays alive: dropping it removes the state directory).
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .unwrap_or("")
            .contains("serving on stdio")),
        "{log}"
    );
    let decisions: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "secureclaw::decision")
        .collect();
    let read = decisions
        .iter()
        .find(|l| l["tool"] == "read_invoice")
        .expect("a decision line for the read");
    assert_eq!(read["decision"], "allow", "{read}");
    assert_eq!(read["upstream"], "office", "{read}");
    assert_eq!(read["level"], "INFO", "{read}");
    assert!(
        read["session"].as_str().unwrap().starts_with("ses#"),
        "{read}"
    );
    assert!(read["latency_ms"].is_u64(), "{read}");
    let pay = decisions
        .iter()
        .find(|l| l["tool"] == "pay_invoice")
        .expect("a decision line for the payment");
    assert_eq!(pay["decision"], "pending", "{pay}");
    assert_eq!(pay["reason"], "confirmation_required", "{pay}");
    assert_eq!(pay["action_id"], action.as_str(), "{pay}");
    let pending = lines
        .iter()
        .find(|l| l["target"] == "secureclaw::approval" && l["action_id"] == action.as_str())
        .expect("a line when the action went pending");
    assert_eq!(pending["level"], "WARN", "{pending}");
    assert_eq!(pending["approve"], approve.as_str(), "{pending}");
    assert!(
        pending["message"].as_str().unwrap().contains(&approve),
        "{pending}"
    );
    assert!(!log.contains(IBAN), "the IBAN reached the log");
    assert!(!log.contains(BODY), "an argument value reached the log");
    // The logged command works as printed.
    let words: Vec<&str> = approve.split(' ').collect();
    assert_eq!(words[0], "secureclaw");
    let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .args(&words[1..])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown id: the error names the directory it searched.
    let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["approvals", "approve", "act_NOSUCHACTION"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("state directory {}", state.display())) && err.contains("not found"),
        "{err}"
    );
    // The audit export's ISO times and session digests match what the log showed.
    let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["audit", "export", "--iso-times"])
        .output()
        .unwrap();
    let export = String::from_utf8(out.stdout).unwrap();
    let first: Value = serde_json::from_str(export.lines().next().unwrap()).unwrap();
    let time = first["event"]["time"].as_str().unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.contains('T'),
        "{time}"
    );
    assert!(
        export.contains(read["session"].as_str().unwrap()),
        "{export}"
    );
    drop(w);
}

/// Issue 15: the branch tools are listed when speculation is enabled (positive control of
/// the check in `wrap_serves_a_stdio_upstream_with_handles_and_policy`).
#[test]
fn branch_tools_are_listed_with_speculation_on() {
    let conf = tempfile::tempdir().unwrap();
    let config = conf.path().join("secureclaw.toml");
    std::fs::write(&config, "[gateway.speculation]\nenabled = true\n").unwrap();
    let mut w = Wrapped::start_with(
        "",
        &["--config", config.to_str().unwrap()],
        &[],
        Stdio::null(),
    );
    w.initialize();
    let names = w.tool_names(2);
    assert!(
        names.contains(&"secureclaw.promote_branch".to_owned())
            && names.contains(&"secureclaw.abandon_branch".to_owned()),
        "{names:?}"
    );
}

/// Issue 15: approvals survive a restart of the client. A payment goes pending, the client
/// exits, the operator approves, and a new `wrap` started with the same state directory,
/// caller, task and upstream serves the same session: the re-issued call runs once. With
/// `--new-session` the approval belongs to another session (`approval_session_mismatch`),
/// and another task opens another session too.
#[test]
fn approvals_survive_a_restart_of_the_client() {
    let conf = tempfile::tempdir().unwrap();
    let config = conf.path().join("secureclaw.toml");
    std::fs::write(&config, OFFICE_CONFIG).unwrap();
    let opts = ["--config", config.to_str().unwrap()];
    let task = "Pay invoice INV-42";
    let mut w = Wrapped::start_with(task, &opts, &[], Stdio::null());
    w.initialize();
    let r = w.call(2, "read_invoice", json!({"invoice_id": "INV-42"}));
    let pay = json!({
        "invoice_id": "INV-42",
        "iban": r["result"]["structuredContent"]["iban"].clone(),
        "amount_cents": r["result"]["structuredContent"]["amount_cents"].clone(),
    });
    let r = w.call(3, "pay_invoice", pay.clone());
    let recovery = &r["result"]["structuredContent"]["recovery"];
    assert_eq!(recovery["reason"], "confirmation_required", "{r}");
    let action = recovery["action_id"].as_str().unwrap().to_owned();
    let state = w.state();
    let dir = w.stop();
    // Listed as a live session while its session is valid.
    let list = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["approvals", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains(&action) && !list.contains("ended"), "{list}");
    let out = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["approvals", "approve", &action])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reissue = |w: &mut Wrapped, id: i64| {
        w.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "pay_invoice", "arguments": pay, "_meta": {"dev.secureclaw/approval": action}}}));
        w.response(id).expect("tools/call answered")
    };
    // Another task is another session: the approval does not carry over.
    let mut other = Wrapped::start_in(dir, "Pay invoice INV-43", &opts, &[], Stdio::null());
    other.initialize();
    let r = reissue(&mut other, 2);
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"], "approval_session_mismatch",
        "{r}"
    );
    let dir = other.stop();
    // The same client started again: the earlier session is served, the call runs once.
    let mut again = Wrapped::start_in(dir, task, &opts, &[], Stdio::null());
    again.initialize();
    let r = reissue(&mut again, 2);
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["structuredContent"]["status"], "paid", "{r}");
    let r = reissue(&mut again, 3);
    assert_eq!(
        r["result"]["isError"], true,
        "single use across restarts: {r}"
    );
    // A payment left pending in this session …
    let r = again.call(4, "pay_invoice", pay.clone());
    let left = r["result"]["structuredContent"]["recovery"]["action_id"]
        .as_str()
        .unwrap_or_else(|| panic!("pending: {r}"))
        .to_owned();
    let dir = again.stop();
    // `--new-session` starts over: the approval belongs to the earlier session.
    let mut fresh = Wrapped::start_in(
        dir,
        task,
        &[opts[0], opts[1], "--new-session"],
        &[],
        Stdio::null(),
    );
    fresh.initialize();
    let r = reissue(&mut fresh, 2);
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"], "approval_session_mismatch",
        "{r}"
    );
    // … is declined when `--new-session` replaces the session: nothing serves it any more, so
    // it no longer waits in `approvals list`.
    let list = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["approvals", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.contains(&left),
        "replaced session's approval still pending: {list}"
    );
    let all = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(&state)
        .args(["approvals", "list", "--all"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&all.stdout);
    assert!(all.contains(&left), "declined, not lost: {all}");
    // The commit record is written just after the answer (issue 14 item 2): wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let paid = loop {
        let paid = fresh
            .audit()
            .iter()
            .filter(|e| e["kind"] == "commit")
            .count();
        if paid > 0 || std::time::Instant::now() > deadline {
            break paid;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(paid, 1);
}

/// Issue 14 item 5: `wrap` holds its session for the whole connection, past its expiry; once
/// a retention sweep removed the session's record (and the counters it kept), its calls are
/// refused instead of starting those counters afresh (fail closed).
#[test]
fn a_swept_session_is_refused_not_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wrap.toml");
    std::fs::write(&config, "[gateway.limits]\nsession_ttl_ms = 1\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let mut w = Wrapped::start_in(
        dir,
        "look at invoices",
        &["--config", &config],
        &[],
        Stdio::null(),
    );
    w.initialize();
    std::thread::sleep(Duration::from_millis(20));
    let before = w.call(2, "noop", json!({}));
    assert!(
        before.get("result").is_some(),
        "expired but stored: still served: {before}"
    );
    let sweep = Command::new(env!("CARGO_BIN_EXE_secureclaw"))
        .arg("--state-dir")
        .arg(w.dir().join("state"))
        .args(["store", "sweep", "--older-than-ms", "0", "--json"])
        .output()
        .unwrap();
    let swept: Value = serde_json::from_slice(&sweep.stdout).unwrap();
    assert_eq!(swept["removed"]["sessions"], 1, "{swept}");
    let after = w.call(3, "noop", json!({}));
    assert!(
        after["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("session has ended")),
        "{after}"
    );
}
