//! Crash safety of the commit path: `secureclaw serve` in front of the demo office (whose state
//! file records every e-mail sent, durably, before it answers) is driven with previews,
//! commits and replays of earlier actions, and killed with SIGKILL at a random moment, over
//! and over, on one state directory. After every restart:
//!
//! - no action executed twice (every e-mail has a distinct subject, one per action);
//! - every effect belongs to an action the driver previewed, has a ledger entry and an audit
//!   record (`commit`, or `crash_recovery` when the crash came between effect and record);
//! - the audit chain verifies (`secureclaw audit verify`).
//!
//! The same harness runs with a Streamable HTTP upstream: the fault upstream in mode `ok`
//! (`secureclaw fault-upstream`, which records the arguments of every `pay` durably before
//! it answers) keeps running across the gateway's kills, and each action pays a distinct
//! `ref`.
//!
//! Trials: `SECURECLAW_CRASH_TRIALS` (default 12 for each upstream; the full run uses 200).
//! Kill times come from `SECURECLAW_CRASH_SEED` (default: the clock), printed so that a
//! failure can be replayed.
//!
//! `SECURECLAW_CRASH_PG=1` runs the same harness with the gateway's state in PostgreSQL
//! (`serve --store` on a scratch database of the server in `SECURECLAW_TEST_PG_URL`, see
//! `common_pg`). Every restart is a new replica: before it starts, the killed process's lease is
//! made to lapse (as 30 s without renewal would), so that its crash recovery claims what the
//! killed one left in flight.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;
mod common_pg;

use common::{EXE, Rng, Server, free_port};

use secureclaw_core::artifact::ActionId;
use secureclaw_core::keys::{KeyRing, KeyRingFile};
use secureclaw_store::SqliteStore;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OPERATOR: &str = "crash-operator-token-0123456789";
const APPROVER: &str = "approver@corp.example";
const BODY: &str = "Invoice INV-42 for sign-off.";
const SEND: &str = "office__send_email";

/// One HTTP/1.1 request; `Err` when the server is gone (expected around a kill).
fn http(port: u16, method: &str, path: &str, token: &str, body: &Value) -> Result<Value, String> {
    let resp = common::exchange(
        port,
        method,
        path,
        Some(token),
        &body.to_string(),
        Duration::from_secs(20),
    )?;
    let (head, payload) = resp.split_once("\r\n\r\n").ok_or("truncated response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{head}: {payload}"));
    }
    serde_json::from_str(payload).map_err(|e| e.to_string())
}

/// The upstream behind the gateway under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Upstream {
    /// The demo office over stdio (a child of the gateway, killed with it).
    Stdio,
    /// The fault upstream in mode `ok` over Streamable HTTP (its own process, alive across
    /// the gateway's kills).
    Http,
}

struct Deployment {
    config: PathBuf,
    state: PathBuf,
    office: PathBuf,
    /// The HTTP upstream's record of effects (one JSON line of arguments per `pay`).
    effects: PathBuf,
    port: u16,
    /// The scratch database when the state is kept in PostgreSQL.
    pg: Option<common_pg::Scratch>,
    upstream: Upstream,
    _http_upstream: Option<Server>,
}

/// The fault upstream over Streamable HTTP on a free loopback port: (process, URL).
fn http_upstream(effects: &Path) -> (Server, String) {
    let mut child = Command::new(EXE)
        .args(["fault-upstream", "--mode", "ok", "--effects"])
        .arg(effects)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    (Server(child), url)
}

impl Deployment {
    fn new(dir: &Path, upstream: Upstream, pg: Option<common_pg::Scratch>) -> Self {
        let port = free_port();
        let office = dir.join("office.json");
        let effects = dir.join("effects.jsonl");
        let config = dir.join("secureclaw.toml");
        let (http, table) = match upstream {
            Upstream::Stdio => (
                None,
                format!(
                    "[[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"demo-tools\", \"--state\", {:?}]\n",
                    office.display().to_string()
                ),
            ),
            Upstream::Http => {
                let (server, url) = http_upstream(&effects);
                (
                    Some(server),
                    // `pay` runs without a confirmation: target-less and not destructive, by
                    // the operator's word.
                    format!(
                        "[[gateway.tools]]\ntool = \"fault__pay\"\neffect = \"effect\"\ndestructive = false\ntargets = []\n\n\
                         [[upstream]]\nid = \"fault\"\ntransport = \"http\"\nurl = {url:?}\n"
                    ),
                )
            }
        };
        // The session drives thousands of calls across restarts, and the rate buckets live in
        // the store (they survive a restart): limits this harness does not test are raised
        // out of its way (they have their own tests).
        let limits = "[gateway.limits]\nsession_rate_per_s = 1000000\nsession_burst = 1000000\n\
                      tool_rate_per_s = 1000000\ntool_burst = 1000000\n\n";
        std::fs::write(
            &config,
            format!("[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n{limits}{table}"),
        )
        .unwrap();
        Self {
            config,
            state: dir.join("state"),
            office,
            effects,
            port,
            pg,
            upstream,
            _http_upstream: http,
        }
    }

    /// The effectful tool each action calls.
    fn tool(&self) -> &'static str {
        match self.upstream {
            Upstream::Stdio => SEND,
            Upstream::Http => "fault__pay",
        }
    }

    /// The arguments of the action named `subject`.
    fn arguments(&self, subject: &str) -> Value {
        match self.upstream {
            Upstream::Stdio => mail(subject),
            Upstream::Http => json!({"ref": subject}),
        }
    }

    /// The name (`subject`) of every effect that really happened, one per effect.
    fn effects(&self) -> Vec<String> {
        match self.upstream {
            Upstream::Stdio => secureclaw_demo_tools::load_state(&self.office)
                .unwrap()
                .sent
                .into_iter()
                .map(|m| m.subject)
                .collect(),
            Upstream::Http => secureclaw_demo_tools::fault::recorded_effects(&self.effects)
                .into_iter()
                .map(|e| e["ref"].as_str().unwrap_or("(torn line)").to_owned())
                .collect(),
        }
    }

    /// `secureclaw --state-dir …` with `--store` when the state is in PostgreSQL.
    fn command(&self) -> Command {
        let mut cmd = Command::new(EXE);
        cmd.arg("--state-dir").arg(&self.state);
        if let Some(db) = &self.pg {
            cmd.args(["--store", &db.url]);
        }
        cmd
    }

    fn start(&self) -> Server {
        if let Some(db) = &self.pg {
            // The previous process is dead (killed and reaped): its lease may lapse.
            common_pg::lapse_leases(&db.url);
        }
        let child = self
            .command()
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(v) = http(self.port, "GET", "/health", "", &Value::Null)
                && v["status"] == "ok"
            {
                return server;
            }
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGKILL, then wait until the orphaned demo office (its stdin now closed) has exited, so
    /// that an effect it was still persisting is on disk before anything is checked. (The
    /// HTTP upstream records an effect before it answers, in the handler of a request it has
    /// read whole; it lives on.)
    fn kill(&self, mut server: Server) {
        server.0.kill().unwrap();
        server.0.wait().unwrap();
        if self.upstream == Upstream::Http {
            return;
        }
        let needle = self.office.display().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        while orphan_alive(&needle) {
            assert!(Instant::now() < deadline, "demo office did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a process whose command line mentions `needle` is still running (Linux /proc).
fn orphan_alive(needle: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(needle))
            .unwrap_or(false)
            && std::fs::read_to_string(e.path().join("stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
    })
}

#[derive(Clone)]
struct Attempt {
    action_id: String,
    artifact: String,
    subject: String,
}

/// Subjects of one-shot calls (`POST /v1/call`) start with this.
const CALL_PREFIX: &str = "crash trial call ";

fn mail(subject: &str) -> Value {
    json!({"to": APPROVER, "subject": subject, "body": BODY})
}

/// Preview and commit fresh e-mails, interleaved with re-commits of earlier actions, until the
/// server is gone.
fn drive(
    d: &Deployment,
    session: &str,
    trial: usize,
    seed: u64,
    attempts: &Mutex<Vec<Attempt>>,
    stop: &AtomicBool,
) {
    let mut rng = Rng(seed | 1);
    let (port, tool) = (d.port, d.tool());
    for k in 0.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let old = {
            let list = attempts.lock().unwrap();
            (k % 3 == 2 && !list.is_empty())
                .then(|| list[usize::try_from(rng.below(list.len() as u64)).unwrap()].clone())
        };
        let result = if old.is_none() && k % 3 == 1 {
            // A one-shot call (preview and commit in one request, issue 14 item 2): the action,
            // its records and the reservation are one write before the effect. Its action id
            // is known only from the answer, which a kill may swallow; `check` accounts for it.
            let subject = format!("{CALL_PREFIX}{trial} action {k}");
            http(
                port,
                "POST",
                "/v1/call",
                session,
                &json!({"tool": tool, "arguments": d.arguments(&subject)}),
            )
        } else if let Some(a) = old {
            http(
                port,
                "POST",
                "/v1/commit",
                session,
                &json!({"tool": tool, "arguments": d.arguments(&a.subject), "action_id": a.action_id, "artifact": a.artifact}),
            )
        } else {
            let subject = format!("crash trial {trial} action {k}");
            let preview = http(
                port,
                "POST",
                "/v1/preview",
                session,
                &json!({"tool": tool, "arguments": d.arguments(&subject)}),
            );
            let Ok(p) = preview else { return };
            let a = Attempt {
                action_id: p["action_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("preview without an action id: {p}"))
                    .to_owned(),
                artifact: p["artifact"].as_str().unwrap().to_owned(),
                subject,
            };
            attempts.lock().unwrap().push(a.clone());
            http(
                port,
                "POST",
                "/v1/commit",
                session,
                &json!({"tool": tool, "arguments": d.arguments(&a.subject), "action_id": a.action_id, "artifact": a.artifact}),
            )
        };
        if result.is_err() {
            return;
        }
    }
}

/// The invariants, checked against the office's state file and the gateway's database.
/// Returns (effects, entries still reserved).
fn check(d: &Deployment, attempts: &[Attempt]) -> (usize, usize) {
    let effects = d.effects();
    let mut per_subject: BTreeMap<&str, usize> = BTreeMap::new();
    for subject in &effects {
        *per_subject.entry(subject.as_str()).or_default() += 1;
    }
    for (subject, n) in &per_subject {
        assert_eq!(*n, 1, "action `{subject}` executed {n} times");
    }
    let (ledger, audited, reserved) = match &d.pg {
        Some(db) => pg_state(&db.url),
        None => sqlite_state(d, attempts),
    };
    let by_subject: BTreeMap<&str, &Attempt> =
        attempts.iter().map(|a| (a.subject.as_str(), a)).collect();
    let known: BTreeSet<&str> = attempts.iter().map(|a| a.action_id.as_str()).collect();
    let mut calls = 0usize;
    for subject in per_subject.keys() {
        if subject.starts_with(CALL_PREFIX) {
            calls += 1;
            continue;
        }
        let a = by_subject
            .get(subject)
            .unwrap_or_else(|| panic!("effect `{subject}` belongs to no previewed action"));
        let state = ledger
            .get(&a.action_id)
            .unwrap_or_else(|| panic!("effect `{subject}` has no ledger entry"));
        assert_ne!(
            state, "failed",
            "effect `{subject}` ran but its ledger entry says failed"
        );
        assert!(
            audited.contains(&a.action_id),
            "effect `{subject}` ({}) has no commit or crash_recovery audit record",
            a.action_id
        );
    }
    // One-shot calls: each effect needs a ledger entry of its own that is not `failed` and has
    // a `commit` or `crash_recovery` record. Their action ids are not known to the driver, so
    // this is checked by count over the entries of no previewed action.
    let covered = ledger
        .iter()
        .filter(|(id, state)| {
            !known.contains(id.as_str()) && *state != "failed" && audited.contains(*id)
        })
        .count();
    assert!(
        covered >= calls,
        "{calls} one-shot effects ran but only {covered} unpreviewed actions have a ledger entry and a commit or crash_recovery record"
    );
    (effects.len(), reserved)
}

/// (ledger state per action id, action ids with a `commit` or `crash_recovery` audit record,
/// entries still reserved) of the SQLite store; verifies its chain.
fn sqlite_state(
    d: &Deployment,
    attempts: &[Attempt],
) -> (BTreeMap<String, String>, BTreeSet<String>, usize) {
    let keys: KeyRingFile =
        serde_json::from_str(&std::fs::read_to_string(d.state.join("keys.json")).unwrap()).unwrap();
    let keys = Arc::new(KeyRing::from_file(&keys).unwrap());
    let store = SqliteStore::open(&d.state.join("secureclaw.db"), keys).unwrap();
    let records = serde_json::to_value(store.audit_records(0, usize::MAX).unwrap()).unwrap();
    let audited: BTreeSet<String> = records
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["kind"] == "commit" || r["event"]["kind"] == "crash_recovery")
        .filter_map(|r| r["event"]["action_id"].as_str().map(str::to_owned))
        .collect();
    // Previewed actions, and one-shot calls (known by their `preview` records, written in the
    // same transaction as their reservation).
    let mut ids: BTreeSet<String> = attempts.iter().map(|a| a.action_id.clone()).collect();
    ids.extend(
        records
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["event"]["kind"] == "preview")
            .filter_map(|r| r["event"]["action_id"].as_str().map(str::to_owned)),
    );
    let ledger: BTreeMap<String, String> = ids
        .into_iter()
        .filter_map(|id| {
            let e = store.ledger_entry(&ActionId(id.clone())).unwrap()?;
            let state = match e.state {
                secureclaw_store::LedgerState::Failed => "failed",
                secureclaw_store::LedgerState::Reserved => "reserved",
                secureclaw_store::LedgerState::OutcomeUnknown => "outcome_unknown",
                secureclaw_store::LedgerState::Executed => "executed",
            };
            Some((id, state.to_owned()))
        })
        .collect();
    store.verify_audit().unwrap();
    // Reservations a crash interrupted are closed as `outcome_unknown` at the next start.
    let reserved = ledger
        .values()
        .filter(|s| *s == "reserved" || *s == "outcome_unknown")
        .count();
    (ledger, audited, reserved)
}

/// As [`sqlite_state`], from the PostgreSQL database (the chain is verified by
/// `secureclaw audit verify --store`).
fn pg_state(url: &str) -> (BTreeMap<String, String>, BTreeSet<String>, usize) {
    let ledger: BTreeMap<String, String> =
        common_pg::query(url, "SELECT action_id, state FROM ledger")
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
    let audited = common_pg::query(
        url,
        "SELECT event FROM audit WHERE kind IN ('commit', 'crash_recovery')",
    )
    .iter()
    .filter_map(|r| {
        let e: Value = serde_json::from_str(&r.get::<_, String>(0)).ok()?;
        e["action_id"].as_str().map(str::to_owned)
    })
    .collect();
    let reserved = ledger
        .values()
        .filter(|s| *s == "reserved" || *s == "outcome_unknown")
        .count();
    (ledger, audited, reserved)
}

fn audit_verify(d: &Deployment) {
    let out = d.command().args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "secureclaw audit verify failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sigkill_at_random_points_never_executes_an_action_twice() {
    trials(Upstream::Stdio);
}

/// The same with a Streamable HTTP upstream that outlives every kill of the gateway.
#[test]
fn sigkill_at_random_points_never_executes_an_action_twice_over_http() {
    trials(Upstream::Http);
}

fn trials(upstream: Upstream) {
    let trials: usize = std::env::var("SECURECLAW_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("SECURECLAW_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!(
        "crash safety ({upstream:?} upstream): {trials} trials, SECURECLAW_CRASH_SEED={seed}"
    );
    let mut rng = Rng(seed | 1);
    let pg = std::env::var("SECURECLAW_CRASH_PG")
        .is_ok_and(|v| v == "1")
        .then(|| {
            let admin = common_pg::admin_url()
                .expect("SECURECLAW_CRASH_PG=1 needs a PostgreSQL server (SECURECLAW_TEST_PG_URL)");
            common_pg::Scratch::create(&admin)
        });
    eprintln!(
        "crash safety: state in {}",
        if pg.is_some() { "PostgreSQL" } else { "SQLite" }
    );
    let dir = tempfile::tempdir().unwrap();
    let d = Arc::new(Deployment::new(dir.path(), upstream, pg));
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let mut session = String::new();
    let mut crashed_mid_commit = 0;
    let mut prev_reserved = 0;
    let started = Instant::now();
    for trial in 0..trials {
        let server = d.start();
        let (_, reserved) = check(&d, &attempts.lock().unwrap());
        if reserved > prev_reserved {
            crashed_mid_commit += 1;
            // The interrupted effect's outcome is unknown, so that session's later calls of
            // the tool wait for the user (`outcome_unknown_repeat`): go on in a new session.
            session.clear();
        }
        prev_reserved = reserved;
        audit_verify(&d);
        if session.is_empty() {
            session = http(
                d.port,
                "POST",
                "/v1/sessions",
                OPERATOR,
                &json!({"caller": "crash-runtime", "task": {"request": format!("Send INV-42 to {APPROVER}")}}),
            )
            .unwrap()["session_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let driver = {
            let (attempts, stop, session) = (attempts.clone(), stop.clone(), session.clone());
            let (d, seed) = (d.clone(), rng.next());
            std::thread::spawn(move || drive(&d, &session, trial, seed, &attempts, &stop))
        };
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        d.kill(server);
        stop.store(true, Ordering::SeqCst);
        driver.join().unwrap();
    }
    // A last clean start: crash recovery runs, then every invariant once more.
    let server = d.start();
    let (effects, _) = check(&d, &attempts.lock().unwrap());
    audit_verify(&d);
    drop(server);
    let attempted = attempts.lock().unwrap().len();
    eprintln!(
        "crash safety ({upstream:?} upstream): {trials} kills in {:.1} s, {attempted} actions previewed, {effects} executed, {crashed_mid_commit} restarts found an interrupted commit",
        started.elapsed().as_secs_f64()
    );
    if trials >= 5 {
        assert!(
            effects > 0,
            "no commit ever completed: the harness tests nothing"
        );
    }
}
