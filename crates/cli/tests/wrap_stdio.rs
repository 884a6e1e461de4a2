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
    _dir: tempfile::TempDir,
}

impl Wrapped {
    fn start(task: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let exe = env!("CARGO_BIN_EXE_secureclaw");
        let office = dir.path().join("office.json");
        let mut child = Command::new(exe)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args([
                "wrap",
                "--no-elicitation",
                "--task",
                task,
                "--id",
                "office",
                "--",
            ])
            .arg(exe)
            .args(["demo-tools", "--state"])
            .arg(&office)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
            _dir: dir,
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
    assert_eq!(
        r["result"]["structuredContent"]["recovery"]["reason"], "invalid_arguments",
        "{r}"
    );
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
