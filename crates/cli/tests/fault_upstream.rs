//! The gateway in front of a misbehaving upstream (issue 12, Tests): `secureclaw
//! fault-upstream --mode …` (`secureclaw_demo_tools::fault`) run over stdio behind `wrap`, and
//! over stdio and Streamable HTTP behind `serve`. For every fault:
//!
//! - an effect runs at most once: the upstream's effects file has exactly one line;
//! - an effect whose outcome is unknown is answered `outcome_unknown` ("may have run; do not
//!   repeat"), never "try again", and is recorded `outcome_unknown` in the ledger and the
//!   audit log;
//! - every request gets exactly one reply;
//! - start-up against a broken upstream fails within the configured time, naming it;
//! - the gateway keeps serving other requests and callers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::{EXE, Server as Proc, free_port};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::keys::{KeyRing, KeyRingFile};
use secureclaw_store::{LedgerState, SqliteStore};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

const OPERATOR: &str = "fault-operator-token-0123456789";
/// The gateway's per-call and start-up timeouts in these tests (ms).
const TIMEOUT_MS: u64 = 2000;
/// The start-up and call timeouts where the test is not about a timeout: generous, so that a
/// loaded CI machine (and `RUST_LOG=trace`) cannot turn a healthy upstream into a failure.
const PATIENT_MS: u64 = 60_000;
const PAY: &str = "fault__pay";
const PEEK: &str = "fault__peek";

/// The fault upstream as an `[[upstream]]` table: over stdio (`http = None`) or at a URL.
fn upstream_toml(mode: &str, effects: &Path, http: Option<&str>) -> String {
    match http {
        None => format!(
            "[[upstream]]\nid = \"fault\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"fault-upstream\", \"--mode\", {mode:?}, \"--effects\", {:?}]\n",
            effects.display().to_string()
        ),
        Some(url) => {
            format!("[[upstream]]\nid = \"fault\"\ntransport = \"http\"\nurl = {url:?}\n")
        }
    }
}

/// A configuration: the given timeouts (ms), `pay` a target-less, non-destructive effect (it
/// runs without a confirmation) and `peek` a read, by the operator's word.
fn write_config(dir: &Path, port: u16, upstream: &str, call_ms: u64, startup_ms: u64) -> PathBuf {
    let path = dir.join("secureclaw.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n\
             [gateway.limits]\nupstream_timeout_ms = {call_ms}\nupstream_startup_timeout_ms = {startup_ms}\n\n\
             [[gateway.tools]]\ntool = \"fault__pay\"\neffect = \"effect\"\ndestructive = false\ntargets = []\n\n\
             [[gateway.tools]]\ntool = \"fault__peek\"\neffect = \"read\"\n\n{upstream}"
        ),
    )
    .unwrap();
    path
}

/// The fault upstream over Streamable HTTP on a free loopback port: (process, URL).
fn http_fault(mode: &str, effects: &Path) -> (Proc, String) {
    let mut child = Command::new(EXE)
        .args(["fault-upstream", "--mode", mode, "--effects"])
        .arg(effects)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("fault upstream said {line:?}"))
        .to_owned();
    (Proc(child), url)
}

fn effects(file: &Path) -> Vec<Value> {
    secureclaw_demo_tools::fault::recorded_effects(file)
}

// ------------------------------------------------------------------ the recovery and records

/// The text a runtime reads for an effect whose outcome is unknown.
fn assert_outcome_unknown_text(text: &str) {
    let lower = text.to_lowercase();
    assert!(lower.contains("outcome_unknown"), "{text}");
    assert!(lower.contains("may have run"), "{text}");
    assert!(lower.contains("do not repeat"), "{text}");
    for bad in ["try again", "retry"] {
        assert!(!lower.contains(bad), "`{bad}` in {text}");
    }
}

/// The ledger and the audit log say `outcome_unknown` for the one action of `state`.
fn assert_recorded_outcome_unknown(state: &Path) {
    let keys: KeyRingFile =
        serde_json::from_str(&std::fs::read_to_string(state.join("keys.json")).unwrap()).unwrap();
    let keys = Arc::new(KeyRing::from_file(&keys).unwrap());
    let store = SqliteStore::open(&state.join("secureclaw.db"), keys).unwrap();
    let records = serde_json::to_value(store.audit_records(0, usize::MAX).unwrap()).unwrap();
    let unknown: Vec<&Value> = records
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["kind"] == "outcome_unknown")
        .collect();
    assert_eq!(unknown.len(), 1, "{records}");
    let action = unknown[0]["event"]["action_id"].as_str().unwrap();
    let entry = store
        .ledger_entry(&ActionId(action.to_owned()))
        .unwrap()
        .unwrap();
    assert_eq!(entry.state, LedgerState::OutcomeUnknown);
    assert!(
        !records.to_string().contains("\"commit\""),
        "no commit was recorded for it: {records}"
    );
    store.verify_audit().unwrap();
}

// ------------------------------------------------------------------ wrap (stdio front end)

/// `wrap` is a drop-in: it exposes the upstream's tools under their own names.
const WRAP_PAY: &str = "pay";
const WRAP_PEEK: &str = "peek";

struct Wrapped {
    _child: Proc,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    state: PathBuf,
    effects: PathBuf,
    /// The gateway's stderr (its log).
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Wrapped {
    fn start(mode: &str) -> Self {
        Self::start_with(mode, TIMEOUT_MS)
    }

    /// [`Wrapped::start`] with calls timing out after `call_ms`.
    fn start_with(mode: &str, call_ms: u64) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), mode, call_ms)
    }

    /// [`Wrapped::start_with`] in `dir` (its `state` directory and effects file are kept
    /// from an earlier `wrap` in the same directory).
    fn start_in(dir: tempfile::TempDir, mode: &str, call_ms: u64) -> Self {
        let effects = dir.path().join("effects.jsonl");
        let config = write_config(dir.path(), free_port(), "", call_ms, PATIENT_MS);
        let state = dir.path().join("state");
        let log = dir.path().join("gateway.log");
        let mut child = Command::new(EXE)
            .arg("--state-dir")
            .arg(&state)
            .args([
                "wrap",
                "--no-elicitation",
                "--task",
                "pay the invoice",
                "--id",
                "fault",
            ])
            .arg("--config")
            .arg(&config)
            .arg("--")
            .arg(EXE)
            .args(["fault-upstream", "--mode", mode, "--effects"])
            .arg(&effects)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
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
        let mut w = Self {
            _child: Proc(child),
            stdin: Some(stdin),
            lines: rx,
            state,
            effects,
            log,
            _dir: dir,
        };
        w.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
        let r = w.replies(&[1]).remove(0);
        assert_eq!(r["result"]["serverInfo"]["name"], "secureclaw", "{r}");
        w.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        w
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("input still open");
        stdin.write_all(v.to_string().as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// What the gateway has logged so far.
    fn stderr_so_far(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Close the gateway's input, as a client that exits does.
    fn close_input(&mut self) {
        self.stdin = None;
    }

    fn call(&mut self, id: i64, name: &str, args: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}));
    }

    /// One reply for each of `ids` (in the order they come), failing on a second reply to
    /// any id; then a short quiet period shows no extra reply follows.
    fn replies(&self, ids: &[i64]) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got: Vec<Value> = Vec::new();
        while got.len() < ids.len() {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("no reply for some of {ids:?}: got {got:?}"));
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no reply for some of {ids:?} (gateway silent or gone): got {got:?}")
            });
            let v: Value = serde_json::from_str(&line).unwrap();
            let Some(id) = v.get("id").and_then(Value::as_i64) else {
                continue; // a notification
            };
            assert!(ids.contains(&id), "reply to an id never sent: {v}");
            assert!(
                got.iter().all(|g| g["id"] != json!(id)),
                "second reply to {id}: {v}"
            );
            got.push(v);
        }
        got
    }

    /// No reply at all arrives within `ms` (for duplicates that would trail).
    fn quiet(&self, ms: u64) {
        if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(ms)) {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            assert!(v.get("id").is_none(), "unexpected reply: {line}");
        }
    }
}

/// `secureclaw --state-dir STATE tools SUB --id fault -- EXE fault-upstream --mode MODE
/// --effects EFFECTS`: exit success and stdout.
fn tools_cli(sub: &str, state: &Path, mode: &str, effects: &Path) -> (bool, String) {
    tools_cli_with(sub, &[], state, mode, effects)
}

/// [`tools_cli`] with `extra` arguments after the subcommand.
fn tools_cli_with(
    sub: &str,
    extra: &[&str],
    state: &Path,
    mode: &str,
    effects: &Path,
) -> (bool, String) {
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(state)
        .args(["tools", sub])
        .args(extra)
        .args(["--id", "fault", "--"])
        .arg(EXE)
        .args(["fault-upstream", "--mode", mode, "--effects"])
        .arg(effects)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "tools {sub}: {stdout}\n{stderr}"
    );
    (out.status.success(), format!("{stdout}{stderr}"))
}

/// The names `tools/list` shows.
fn listed_tools(w: &mut Wrapped, id: i64) -> Vec<String> {
    w.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
    let r = w.replies(&[id]).remove(0);
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Issue 16 item 4 (rug pull at a restart of the gateway): the first `wrap` pins the
/// upstream's tools; the upstream then lists `pay` with a description carrying instructions.
/// `tools list` and `tools diff` show the change; the next `wrap` hides `pay` and refuses it
/// (`tool_definition_changed`, nothing sent) while `peek` works; after `tools pin` the running
/// `wrap` serves `pay` again.
#[test]
fn a_changed_tool_definition_is_hidden_shown_by_tools_diff_and_served_after_tools_pin() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().to_path_buf();
    let mut w = Wrapped::start_in(dir, "ok", PATIENT_MS);
    assert_eq!(listed_tools(&mut w, 2), ["pay", "peek"]);
    let (state, effects_file) = (w.state.clone(), w.effects.clone());
    // Keep the directory: the next wrap starts in it.
    let dir = std::mem::replace(&mut w._dir, tempfile::tempdir().unwrap());
    drop(w);
    assert_eq!(dir.path(), keep);

    // Named by another id than the gateway used: the CLI says which ids have pins.
    let out = Command::new(EXE)
        .arg("--state-dir")
        .arg(&state)
        .args(["tools", "list", "--id", "other", "--"])
        .arg(EXE)
        .args(["fault-upstream", "--mode", "ok", "--effects"])
        .arg(&effects_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("no pins for upstream `other`, but has some for `fault`"),
        "{text}"
    );
    let (ok, out) = tools_cli("list", &state, "rug-pull", &effects_file);
    assert!(!ok, "a changed tool makes `tools list` exit 1: {out}");
    assert!(out.contains("changed  pay"), "{out}");
    assert!(out.contains("pinned   peek"), "{out}");
    let (ok, out) = tools_cli("diff", &state, "rug-pull", &effects_file);
    assert!(!ok, "something to review: exit 1: {out}");
    assert!(out.contains("fault__pay (changed)"), "{out}");
    assert!(out.contains("description:"), "{out}");
    assert!(out.contains("- \"Pay an invoice.\""), "{out}");
    assert!(out.contains("+ \"Pay an invoice. <IMPORTANT>"), "{out}");
    assert!(
        !out.contains("peek"),
        "an unchanged tool is not shown: {out}"
    );
    assert!(out.contains("poisoning scan: "), "{out}");
    assert!(out.contains("Pay an invoice. [removed]"), "{out}");

    let mut w = Wrapped::start_in(dir, "rug-pull", PATIENT_MS);
    assert_eq!(
        listed_tools(&mut w, 2),
        ["peek"],
        "the changed tool is hidden"
    );
    w.call(3, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[3]).remove(0);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r).contains("tool_definition_changed"), "{r}");
    assert!(effects(&w.effects).is_empty(), "nothing was sent to it");
    w.call(4, WRAP_PEEK, json!({}));
    assert!(text_of(&w.replies(&[4]).remove(0)).contains("peek 1"));
    assert!(
        w.stderr_so_far().contains("secureclaw tools diff"),
        "the operator's log says what to do: {}",
        w.stderr_so_far()
    );

    // `pin` needs the reviewed digest: without one nothing is pinned; with a digest other
    // than the one listed nothing is pinned; with the digest `diff` printed, `pay` is pinned.
    let (ok, out) = tools_cli("pin", &state, "rug-pull", &effects_file);
    assert!(!ok, "{out}");
    assert!(out.contains("nothing pinned"), "{out}");
    let (_, shown) = tools_cli("diff", &state, "rug-pull", &effects_file);
    let reviewed = shown
        .split_whitespace()
        .skip_while(|w| *w != "--digest")
        .nth(1)
        .unwrap_or_else(|| panic!("no digest in {shown}"))
        .to_owned();
    assert!(reviewed.starts_with("fault__pay="), "{reviewed}");
    let other = format!("fault__pay={}", "0".repeat(64));
    let (ok, out) = tools_cli_with(
        "pin",
        &["--digest", &other],
        &state,
        "rug-pull",
        &effects_file,
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("not listed now with the digest given"),
        "{out}"
    );
    assert!(
        !out.contains(reviewed.trim_start_matches("fault__pay=")),
        "the listed digest is not handed out: {out}"
    );
    assert_eq!(listed_tools(&mut w, 7), ["peek"], "still hidden");
    let (ok, out) = tools_cli_with(
        "pin",
        &["--digest", &reviewed],
        &state,
        "rug-pull",
        &effects_file,
    );
    assert!(ok, "{out}");
    assert!(out.contains("pinned fault__pay (digest"), "{out}");
    assert_eq!(listed_tools(&mut w, 5), ["pay", "peek"]);
    w.call(6, WRAP_PAY, json!({"ref": "b"}));
    assert!(text_of(&w.replies(&[6]).remove(0)).contains("paid 1"));
    assert_eq!(effects(&w.effects).len(), 1);
    let (ok, out) = tools_cli("list", &state, "rug-pull", &effects_file);
    assert!(ok, "everything pinned: {out}");
}

/// `pay` once (the upstream process exits after it), then `peek` (the gateway reconnects and
/// lists the new process's tools), then `pay` again: refused `tool_definition_changed`, not
/// sent; `peek`, unchanged, is served and `pay` is no longer listed.
fn restarted_upstream_refuses_pay(mode: &str) {
    let mut w = Wrapped::start_with(mode, PATIENT_MS);
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    assert_outcome_unknown_text(&text_of(&w.replies(&[2]).remove(0)));
    assert_eq!(effects(&w.effects).len(), 1);
    w.call(3, WRAP_PEEK, json!({}));
    assert!(text_of(&w.replies(&[3]).remove(0)).contains("peek 1"));
    assert_eq!(listed_tools(&mut w, 4), ["peek"]);
    w.call(5, WRAP_PAY, json!({"ref": "b"}));
    let r = w.replies(&[5]).remove(0);
    assert!(text_of(&r).contains("tool_definition_changed"), "{r}");
    assert_eq!(effects(&w.effects).len(), 1, "nothing more was sent");
}

/// Issue 16 item 4 (rug pull while the gateway runs): the restarted upstream lists `pay` with
/// another description; the reconnection compares the listing with the one at start-up.
#[test]
fn a_tool_changed_by_a_restarted_upstream_is_refused() {
    restarted_upstream_refuses_pay("rug-pull-after-effect");
}

/// Red-team of 2026-12-04: the restarted upstream no longer lists `pay`; calls to it are
/// refused, not sent to whatever the new process does with an unlisted name.
#[test]
fn a_tool_dropped_by_a_restarted_upstream_is_refused() {
    restarted_upstream_refuses_pay("drop-after-effect");
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {reply}"))
        .to_owned()
}

fn by_id(replies: &[Value], id: i64) -> &Value {
    replies.iter().find(|r| r["id"] == json!(id)).unwrap()
}

/// Die after the effect: one effect, `outcome_unknown` (never "try again"), and the
/// upstream is started again for the next call.
#[test]
fn wrap_upstream_dies_after_the_effect() {
    let mut w = Wrapped::start("die-after-effect");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[2]).remove(0);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_outcome_unknown_text(&text_of(&r));
    assert_eq!(effects(&w.effects).len(), 1);
    // Reads go on: the upstream is restarted.
    w.call(3, WRAP_PEEK, json!({}));
    let r = w.replies(&[3]).remove(0);
    assert!(text_of(&r).contains("peek 1"), "{r}");
    w.quiet(300);
    assert_eq!(effects(&w.effects).len(), 1, "the effect was never re-sent");
    assert_recorded_outcome_unknown(&w.state);
}

/// Red-team (2026-12-03): a client that writes a call and closes its input (a one-shot
/// client) still gets the call's one reply, and its outcome is recorded, when the call runs
/// longer than rmcp's five-second grace after the input ends; then `wrap` exits.
#[test]
fn wrap_answers_a_call_still_running_when_its_input_closes() {
    let mut w = Wrapped::start_with("hang-call", 7_000);
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let deadline = Instant::now() + Duration::from_secs(30);
    while effects(&w.effects).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the effect never reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    w.close_input();
    let r = w.replies(&[2]).remove(0);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_outcome_unknown_text(&text_of(&r));
    assert_eq!(effects(&w.effects).len(), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while w._child.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "wrap did not exit after its input closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_recorded_outcome_unknown(&w.state);
}

/// Red-team (2026-12-03): an upstream that answers a dispatched effect with an MRTR
/// `input_required` may have acted: `outcome_unknown`, never "try again", one effect.
#[test]
fn wrap_upstream_answers_an_effect_with_input_required() {
    let mut w = Wrapped::start("input-required");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[2]).remove(0);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_outcome_unknown_text(&text_of(&r));
    w.quiet(300);
    assert_eq!(effects(&w.effects).len(), 1);
    assert_recorded_outcome_unknown(&w.state);
}

/// Red-team round 2 (2026-12-03): SIGTERM (and SIGINT) while an effect runs: `wrap` waits
/// for the call (at most the upstream timeout and 5 s), so its outcome is recorded
/// (`outcome_unknown` here: the upstream never answers) instead of left `reserved`.
#[test]
fn wrap_records_a_running_effect_when_stopped_by_a_signal() {
    for signal in ["-TERM", "-INT"] {
        let mut w = Wrapped::start("hang-call");
        w.call(2, WRAP_PAY, json!({"ref": "a"}));
        let deadline = Instant::now() + Duration::from_secs(30);
        while effects(&w.effects).is_empty() {
            assert!(
                Instant::now() < deadline,
                "the effect never reached the upstream"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let killed = Command::new("kill")
            .arg(signal)
            .arg(w._child.0.id().to_string())
            .status()
            .unwrap();
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while w._child.0.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "wrap did not exit after {signal}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(effects(&w.effects).len(), 1);
        assert_recorded_outcome_unknown(&w.state);
    }
}

/// A call that is never answered: the gateway answers `outcome_unknown` after its timeout,
/// and meanwhile keeps answering other requests to the same upstream.
#[test]
fn wrap_upstream_never_answers_the_call() {
    let mut w = Wrapped::start("hang-call");
    let started = Instant::now();
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    w.call(3, WRAP_PEEK, json!({}));
    w.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    let got = w.replies(&[2, 3, 4]);
    assert!(text_of(by_id(&got, 3)).contains("peek 1"));
    assert!(by_id(&got, 4)["result"]["tools"].is_array());
    let pay = by_id(&got, 2);
    assert_eq!(pay["result"]["isError"], true, "{pay}");
    assert_outcome_unknown_text(&text_of(pay));
    assert!(
        started.elapsed() >= Duration::from_millis(TIMEOUT_MS),
        "answered before the timeout"
    );
    assert_eq!(effects(&w.effects).len(), 1);
    assert_recorded_outcome_unknown(&w.state);
}

/// An answer with an id no request had, and an answer sent twice: the first is no answer
/// (the call's outcome is unknown after the timeout), the second is one answer; each request
/// gets exactly one reply and each effect runs once.
#[test]
fn wrap_upstream_answers_with_a_wrong_id() {
    let mut w = Wrapped::start("wrong-id");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[2]).remove(0);
    assert_outcome_unknown_text(&text_of(&r));
    assert_eq!(effects(&w.effects).len(), 1);
    assert_recorded_outcome_unknown(&w.state);
}

#[test]
fn wrap_upstream_answers_twice() {
    let mut w = Wrapped::start("duplicate-reply");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    w.call(3, WRAP_PAY, json!({"ref": "b"}));
    let got = w.replies(&[2, 3]);
    let texts: Vec<String> = got.iter().map(text_of).collect();
    assert!(
        texts.iter().all(|t| !t.contains("again")),
        "a duplicate answer was taken for another request: {texts:?}"
    );
    w.call(4, WRAP_PEEK, json!({}));
    w.replies(&[4]);
    w.quiet(300);
    // Each call ran once; the two calls may reach the upstream in either order.
    let mut refs: Vec<String> = effects(&w.effects)
        .into_iter()
        .map(|e| e["ref"].as_str().unwrap_or_default().to_owned())
        .collect();
    refs.sort();
    assert_eq!(refs, vec!["a".to_owned(), "b".to_owned()]);
}

/// A line that never ends: the gateway drops it past its line limit instead of buffering it,
/// answers the call `outcome_unknown` after the timeout, and keeps answering. The wedged
/// connection (nothing after the endless line can be read) is found by a ping and replaced,
/// so the upstream's later calls are answered again (before: every later call timed out for
/// as long as the line went on).
#[test]
fn wrap_upstream_sends_a_line_without_end() {
    let mut w = Wrapped::start("endless-line");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[2]).remove(0);
    assert_outcome_unknown_text(&text_of(&r));
    w.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert!(w.replies(&[3])[0]["result"]["tools"].is_array());
    w.call(4, WRAP_PEEK, json!({}));
    let r = w.replies(&[4]).remove(0);
    assert!(text_of(&r).contains("peek 1"), "{r}");
    assert!(
        w.stderr_so_far().contains("stopped answering"),
        "the wedged connection was not closed: {}",
        w.stderr_so_far()
    );
    w.quiet(300);
    assert_eq!(effects(&w.effects).len(), 1, "the effect was never re-sent");
    assert_recorded_outcome_unknown(&w.state);
}

/// The same over `serve`, across callers: after alice's call meets the endless line, bob's
/// read reaches a fresh connection to the upstream.
#[test]
fn serve_stdio_upstream_sends_a_line_without_end() {
    let g = Served::start("endless-line", false);
    let alice = g.session("alice");
    let text = recovery_text(&g.call(&alice, PAY, json!({"ref": "a"})));
    assert_outcome_unknown_text(&text);
    let bob = g.session("bob");
    let v = g.call(&bob, PEEK, json!({}));
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(effects(&g.effects).len(), 1);
    assert_recorded_outcome_unknown(&g.state);
}

/// Positive control for the liveness check: an upstream that never answers one call but
/// answers everything else (pings included) keeps its connection, so no reconnection is
/// made for a call that is merely slow.
#[test]
fn a_slow_call_does_not_cost_the_connection() {
    let mut w = Wrapped::start("hang-call");
    w.call(2, WRAP_PAY, json!({"ref": "a"}));
    let r = w.replies(&[2]).remove(0);
    assert_outcome_unknown_text(&text_of(&r));
    w.call(3, WRAP_PEEK, json!({}));
    let r = w.replies(&[3]).remove(0);
    assert!(text_of(&r).contains("peek 1"), "{r}");
    let log = w.stderr_so_far();
    assert!(
        !log.contains("stopped answering") && !log.contains("connecting to the upstream again"),
        "a live connection was closed: {log}"
    );
}

// ------------------------------------------------------------------ start-up

/// `tools/list` never answered, or a schema 200 levels deep: `wrap` and `serve` exit
/// non-zero within the start-up timeout, naming the upstream (and the tool).
#[test]
fn start_up_fails_naming_the_upstream() {
    let timed_out = format!("tools/list did not answer within {TIMEOUT_MS} ms");
    for (mode, needles) in [
        ("hang-list", vec![timed_out.clone()]),
        // Named by the schema check, or, when the JSON parser refuses a message that deep,
        // by the timeout of a listing that never arrives.
        (
            "deep-schema",
            vec![
                "tool `pay` has an inputSchema nested deeper".to_owned(),
                timed_out.clone(),
            ],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let effects = dir.path().join("effects.jsonl");
        let config = write_config(
            dir.path(),
            free_port(),
            &upstream_toml(mode, &effects, None),
            TIMEOUT_MS,
            TIMEOUT_MS,
        );
        for front in ["serve", "wrap"] {
            let mut cmd = Command::new(EXE);
            cmd.arg("--state-dir")
                .arg(dir.path().join(format!("state-{front}")))
                .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
                .stdin(Stdio::null());
            if front == "serve" {
                cmd.args(["serve", "--config"]).arg(&config);
            } else {
                // `wrap` runs the upstream given after `--`.
                let wrap_config = dir.path().join("wrap.toml");
                std::fs::write(
                    &wrap_config,
                    format!("[gateway.limits]\nupstream_startup_timeout_ms = {TIMEOUT_MS}\n"),
                )
                .unwrap();
                cmd.args(["wrap", "--id", "fault", "--config"])
                    .arg(&wrap_config)
                    .arg("--")
                    .arg(EXE)
                    .args(["fault-upstream", "--mode", mode, "--effects"])
                    .arg(&effects);
            }
            let started = Instant::now();
            let out = cmd.output().unwrap();
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{front} {mode}: start-up took {:?}",
                started.elapsed()
            );
            assert!(!out.status.success(), "{front} {mode} started");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("`fault`") && needles.iter().any(|n| err.contains(n.as_str())),
                "{front} {mode}: {err}"
            );
        }
    }
}

// ------------------------------------------------------------------ serve (HTTP front end)

/// One HTTP/1.1 request: (status, JSON body or `null`).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let resp = common::exchange(port, method, path, token, &body, Duration::from_secs(60)).unwrap();
    let (head, payload) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}

struct Served {
    _server: Proc,
    _fault: Option<Proc>,
    port: u16,
    state: PathBuf,
    effects: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    /// `serve` in front of the fault upstream in `mode`, over stdio or HTTP.
    fn start(mode: &str, over_http: bool) -> Self {
        Self::start_with(mode, over_http, &[], Stdio::null())
    }

    /// [`Served::start`] with extra environment and the gateway's stderr.
    fn start_with(mode: &str, over_http: bool, env: &[(&str, &str)], stderr: Stdio) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let effects = dir.path().join("effects.jsonl");
        let (fault, url) = if over_http {
            let (p, url) = http_fault(mode, &effects);
            (Some(p), Some(url))
        } else {
            (None, None)
        };
        let port = free_port();
        // Only a test about a hanging call needs the short call timeout.
        let call_ms = if mode == "ok" { PATIENT_MS } else { TIMEOUT_MS };
        let config = write_config(
            dir.path(),
            port,
            &upstream_toml(mode, &effects, url.as_deref()),
            call_ms,
            PATIENT_MS,
        );
        let state = dir.path().join("state");
        let child = Command::new(EXE)
            .arg("--state-dir")
            .arg(&state)
            .args(["serve", "--config"])
            .arg(&config)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut server = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            // The port is bound before the state and the upstreams: a connection can be
            // accepted by the kernel and then reset if start-up fails, so a failed exchange
            // only means "not yet"; an exited gateway is the failure.
            let health =
                common::exchange(port, "GET", "/health", None, "", Duration::from_secs(60));
            if health.is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
                break;
            }
            if let Some(status) = server.0.try_wait().unwrap() {
                panic!("serve exited during start-up: {status}");
            }
            assert!(Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(25));
        }
        Self {
            _server: server,
            _fault: fault,
            port,
            state,
            effects,
            _dir: dir,
        }
    }

    fn session(&self, caller: &str) -> String {
        let (s, v) = http(
            self.port,
            "POST",
            "/v1/sessions",
            Some(OPERATOR),
            Some(&json!({"caller": caller, "task": {"request": "pay the invoice"}})),
        );
        assert_eq!(s, 200, "{v}");
        v["session_id"].as_str().unwrap().to_owned()
    }

    fn call(&self, session: &str, tool: &str, args: Value) -> Value {
        let (s, v) = http(
            self.port,
            "POST",
            "/v1/call",
            Some(session),
            Some(&json!({"tool": tool, "arguments": args})),
        );
        assert_eq!(s, 200, "{v}");
        v
    }
}

/// The recovery of a denied HTTP API call, rendered as the runtime reads it.
fn recovery_text(v: &Value) -> String {
    assert_eq!(v["status"], "denied", "{v}");
    v["recovery"].to_string()
}

/// Over Streamable HTTP: 404 after the effect (a restarted server that forgot its session).
/// rmcp used to re-initialize and re-send: two effects. Now one, `outcome_unknown`, and the
/// next call gets a fresh session.
#[test]
fn serve_http_upstream_answers_404_after_the_effect() {
    let g = Served::start("404-after-effect", true);
    let s = g.session("alice");
    let v = g.call(&s, PAY, json!({"ref": "a"}));
    let text = recovery_text(&v);
    assert!(text.contains("outcome_unknown"), "{v}");
    assert!(
        text.contains("may have run") && !text.contains("try again"),
        "{v}"
    );
    assert_eq!(effects(&g.effects).len(), 1);
    let v = g.call(&s, PEEK, json!({}));
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(effects(&g.effects).len(), 1, "the effect was never re-sent");
    assert_recorded_outcome_unknown(&g.state);
}

/// An HTTP upstream that dies after the effect, and a stdio one: the same answer.
#[test]
fn serve_upstream_dies_after_the_effect_over_http_and_stdio() {
    for over_http in [true, false] {
        let g = Served::start("die-after-effect", over_http);
        let s = g.session("alice");
        let text = recovery_text(&g.call(&s, PAY, json!({"ref": "a"})));
        assert_outcome_unknown_text(&text);
        assert_eq!(effects(&g.effects).len(), 1, "over_http = {over_http}");
        assert_recorded_outcome_unknown(&g.state);
        assert_eq!(http(g.port, "GET", "/health", None, None).0, 200);
    }
}

/// An upstream that never answers one caller's call: other callers are served meanwhile,
/// over HTTP and stdio.
#[test]
fn serve_keeps_serving_other_callers_while_a_call_hangs() {
    for over_http in [true, false] {
        let g = Served::start("hang-call", over_http);
        let alice = g.session("alice");
        let bob = g.session("bob");
        let hung = {
            let port = g.port;
            std::thread::spawn(move || {
                http(
                    port,
                    "POST",
                    "/v1/call",
                    Some(&alice),
                    Some(&json!({"tool": PAY, "arguments": {"ref": "a"}})),
                )
            })
        };
        // Bob's reads are answered while Alice's call is outstanding.
        while effects(&g.effects).is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let v = g.call(&bob, PEEK, json!({}));
        assert_eq!(v["status"], "completed", "{v}");
        assert!(
            !hung.is_finished(),
            "the hung call was answered before bob's read"
        );
        let (status, v) = hung.join().unwrap();
        assert_eq!(status, 200);
        assert_outcome_unknown_text(&recovery_text(&v));
        assert_eq!(effects(&g.effects).len(), 1);
        assert_recorded_outcome_unknown(&g.state);
    }
}

/// An HTTP upstream whose answer body never ends: the call is `outcome_unknown` after the
/// timeout, once, and other callers are served.
#[test]
fn serve_http_upstream_sends_a_body_without_end() {
    let g = Served::start("endless-line", true);
    let alice = g.session("alice");
    let text = recovery_text(&g.call(&alice, PAY, json!({"ref": "a"})));
    assert_outcome_unknown_text(&text);
    assert_eq!(effects(&g.effects).len(), 1);
    let bob = g.session("bob");
    let v = g.call(&bob, PEEK, json!({}));
    assert_eq!(v["status"], "completed", "{v}");
    assert_recorded_outcome_unknown(&g.state);
}

/// One POST to `/mcp`: (status, `Mcp-Session-Id`, body as text).
fn mcp_post(
    port: u16,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(sid) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    head.push_str("\r\n");
    head.push_str(&body);
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (headers, payload) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let sid = headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_owned())
    });
    (status, sid, payload.to_owned())
}

/// Issue 12 item 7 for the HTTP front ends and an HTTP upstream: at `RUST_LOG=trace`, a read
/// whose result carries an IBAN, through the HTTP API and through Streamable HTTP MCP, puts
/// the IBAN neither in the replies nor anywhere in the gateway's log.
#[test]
fn no_protected_value_in_the_log_at_trace_level_over_http() {
    use secureclaw_demo_tools::fault::PEEK_IBAN;
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let g = Served::start_with("ok", true, &[("RUST_LOG", "trace")], Stdio::from(log));
    let s = g.session("alice");
    // The HTTP API.
    let v = g.call(&s, PEEK, json!({}));
    assert_eq!(v["status"], "completed", "{v}");
    let text = v.to_string();
    assert!(
        text.contains("peek 1") && !text.contains(PEEK_IBAN),
        "{text}"
    );
    // Streamable HTTP MCP, with the session's token.
    let (status, sid, body) = mcp_post(
        g.port,
        &s,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    );
    assert_eq!(status, 200, "{body}");
    let sid = sid.expect("an Mcp-Session-Id");
    let (status, _, _) = mcp_post(
        g.port,
        &s,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(status, 202);
    let (status, _, body) = mcp_post(
        g.port,
        &s,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": PEEK, "arguments": {}}}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("peek 2") && !body.contains(PEEK_IBAN),
        "{body}"
    );
    // An effect through the same upstream, for its log lines too.
    let v = g.call(&s, PAY, json!({"ref": "a"}));
    assert_eq!(v["status"], "completed", "{v}");
    drop(g);
    let log = String::from_utf8_lossy(&std::fs::read(&log_path).unwrap()).into_owned();
    assert!(log.contains("secureclaw: listening on"), "{log}");
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log is not at a verbose level: {log}"
    );
    for needle in [
        PEEK_IBAN,
        "DE89 3704 0044 0532 0130 00",
        "370400440532013000",
    ] {
        assert!(
            !log.contains(needle),
            "the IBAN reached the log as `{needle}`"
        );
    }
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a non-terminal log"
    );
}
