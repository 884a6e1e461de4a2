//! Several gateways on one PostgreSQL database (issue 13): two or three `secureclaw serve`
//! processes (replicas) share one scratch database, one key file and one configuration, each in
//! front of its own demo office over stdio. The demo office records every e-mail it sends in
//! its state file, durably, before it answers; the offices of all replicas together are the one
//! counting upstream: an action executed twice, on the same replica or on two, shows as its
//! subject sent twice across the files.
//!
//! - 64 commits of one previewed action raced across the replicas → exactly one effect and 63
//!   refusals with `replay`;
//! - distinct actions, each previewed on one replica and committed on the next → each
//!   executed exactly once (200 in CI; 1,000 with `SECURECLAW_REPLICA_FULL=1`);
//! - an approval decided through one replica's operator API is honoured by another (and a
//!   denial too; the runtime cannot approve its own call on any replica);
//! - SIGKILL of a replica mid-commit, over and over (3 trials in CI, 50 with
//!   `SECURECLAW_REPLICA_FULL=1`) → no double effect, every effect has a ledger entry and a
//!   `commit` or `crash_recovery` audit record, and `secureclaw audit verify --store` passes on
//!   the shared chain;
//! - the database connection lost under load → requests fail closed, then the replicas serve
//!   again;
//! - per-session authorization state is shared (issues 11 and 13): a task's grant of one
//!   payment, used through one replica, is used up on the other (`grant_exhausted`); an amount
//!   an anchored read returned through one replica may be paid through the other; a value the
//!   session wrote through one replica does not anchor a read through the other.
//!
//! Needs PostgreSQL: the server of `SECURECLAW_TEST_PG_URL` (CI sets it; an unreachable server
//! then fails the test), else `postgres://postgres@127.0.0.1:5432/test` if it answers, else the
//! tests are skipped with a message. Each test creates and drops its own scratch database.
//!
//! `SECURECLAW_REPLICA_BENCH=1` also runs the load driver of BENCHMARKS.md (durable commits per
//! second with 1, 2 and 3 replicas on PostgreSQL and with SQLite).
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

use common_pg::{Scratch, admin_url, query};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

const OPERATOR: &str = "replica-operator-token-0123456789";
const APPROVER: &str = "approver@corp.example";
const BODY: &str = "Invoice INV-42 for sign-off.";
const SEND: &str = "office__send_email";

fn full() -> bool {
    std::env::var("SECURECLAW_REPLICA_FULL").is_ok_and(|v| v == "1")
}

fn seed() -> u64 {
    std::env::var("SECURECLAW_REPLICA_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

// ---------------------------------------------------------------------------------------------
// HTTP.

/// One HTTP/1.1 request; (status, JSON body), or `Err` when the server is unreachable or the
/// connection broke (expected around a kill).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> Result<(u16, Value), String> {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let resp = common::exchange(
        port,
        method,
        path,
        Some(token),
        &body,
        Duration::from_secs(60),
    )?;
    let (head, payload) = resp.split_once("\r\n\r\n").ok_or("truncated response")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let value = serde_json::from_str(payload).unwrap_or(Value::String(payload.to_owned()));
    Ok((status, value))
}

/// A 200 answer's body.
fn ok(r: Result<(u16, Value), String>) -> Value {
    match r {
        Ok((200, v)) => v,
        other => panic!("expected 200, got {other:?}"),
    }
}

fn mail(subject: &str) -> Value {
    json!({"to": APPROVER, "subject": subject, "body": BODY})
}

// ---------------------------------------------------------------------------------------------
// Replicas.

/// One replica: its own configuration (bind port, demo office file) and state directory; the
/// store URL, key file and operator token are the cluster's.
struct Replica {
    config: PathBuf,
    state: PathBuf,
    office: PathBuf,
    log: PathBuf,
    port: u16,
    server: Option<Server>,
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

/// Where the replicas keep their state: PostgreSQL (the scratch database) or, for the
/// benchmark's single-gateway baseline, the state directory's SQLite file.
enum Backing {
    Postgres(Scratch),
    Sqlite,
}

struct Cluster {
    _dir: tempfile::TempDir,
    backing: Backing,
    keys: PathBuf,
    replicas: Vec<Replica>,
    session: String,
}

impl Cluster {
    /// `n` replicas on a fresh scratch database, all started, and one session opened.
    fn start(admin: &str, n: usize) -> Self {
        Self::start_on(Backing::Postgres(Scratch::create(admin)), n)
    }

    fn start_on(backing: Backing, n: usize) -> Self {
        Self::start_configured(backing, n, "")
    }

    /// As [`Cluster::start`], with `extra` appended to every replica's configuration.
    fn start_with(admin: &str, n: usize, extra: &str) -> Self {
        Self::start_configured(Backing::Postgres(Scratch::create(admin)), n, extra)
    }

    fn start_configured(backing: Backing, n: usize, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // One key ring for every replica, shared through SECURECLAW_KEYS_FILE.
        let home = dir.path().join("keys-home");
        let out = Command::new(EXE)
            .arg("--state-dir")
            .arg(&home)
            .args(["keys", "list"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let keys = home.join("keys.json");
        let replicas = (0..n)
            .map(|i| {
                let port = free_port();
                let office = dir.path().join(format!("office-{i}.json"));
                let config = dir.path().join(format!("replica-{i}.toml"));
                std::fs::write(
                    &config,
                    format!(
                        // The load tests drive one session hard and, during the database
                        // outage, leave previews uncommitted: the per-session pending cap and
                        // rates (tested in gateway/tests/session_limits.rs) are raised so that
                        // they measure recovery, not those limits.
                        "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n[gateway.limits]\nmax_pending_per_session = 1000000\nsession_burst = 1000000\ntool_burst = 1000000\n\n[[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"demo-tools\", \"--state\", {:?}]\n{extra}",
                        office.display().to_string()
                    ),
                )
                .unwrap();
                Replica {
                    config,
                    state: dir.path().join(format!("state-{i}")),
                    office,
                    log: dir.path().join(format!("replica-{i}.log")),
                    port,
                    server: None,
                }
            })
            .collect();
        let mut c = Cluster {
            _dir: dir,
            backing,
            keys,
            replicas,
            session: String::new(),
        };
        for i in 0..n {
            c.start_replica(i);
        }
        c.session = c.open_session(0);
        c
    }

    fn url(&self) -> Option<&str> {
        match &self.backing {
            Backing::Postgres(s) => Some(&s.url),
            Backing::Sqlite => None,
        }
    }

    fn scratch(&self) -> &Scratch {
        match &self.backing {
            Backing::Postgres(s) => s,
            Backing::Sqlite => panic!("not on PostgreSQL"),
        }
    }

    fn port(&self, i: usize) -> u16 {
        self.replicas[i % self.replicas.len()].port
    }

    /// `secureclaw` with the cluster's state: `--store`, key file, operator token.
    fn command(&self, state: &Path) -> Command {
        let mut cmd = Command::new(EXE);
        cmd.arg("--state-dir").arg(state);
        if let Some(url) = self.url() {
            cmd.args(["--store", url]);
        }
        cmd.env("SECURECLAW_KEYS_FILE", &self.keys)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR);
        cmd
    }

    fn start_replica(&mut self, i: usize) {
        let r = &self.replicas[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)
            .unwrap();
        let child = self
            .command(&r.state)
            .args(["serve", "--config"])
            .arg(&r.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let server = Server(child);
        let port = r.port;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, v)) = http(port, "GET", "/health", "", &Value::Null)
                && v["status"] == "ok"
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i} did not start: {}",
                std::fs::read_to_string(&r.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        self.replicas[i].server = Some(server);
    }

    /// SIGKILL replica `i`, then wait until its orphaned demo office (stdin now closed) has
    /// exited, so that an effect it was still persisting is on disk before anything is checked.
    fn kill_replica(&mut self, i: usize) {
        if let Some(mut s) = self.replicas[i].server.take() {
            s.0.kill().unwrap();
            s.0.wait().unwrap();
        }
        let needle = self.replicas[i].office.display().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        while orphan_alive(&needle) {
            assert!(Instant::now() < deadline, "demo office {i} did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn open_session(&self, i: usize) -> String {
        let v = ok(http(
            self.port(i),
            "POST",
            "/v1/sessions",
            OPERATOR,
            &json!({"caller": "replica-runtime", "task": {"request": format!("Send INV-42 to {APPROVER}")}}),
        ));
        v["session_id"].as_str().unwrap().to_owned()
    }

    /// Preview `arguments` on replica `i`: (action id, artifact).
    fn preview(&self, i: usize, arguments: &Value) -> Result<(String, String), String> {
        let (status, p) = http(
            self.port(i),
            "POST",
            "/v1/preview",
            &self.session,
            &json!({"tool": SEND, "arguments": arguments}),
        )?;
        match (p["action_id"].as_str(), p["artifact"].as_str()) {
            (Some(a), Some(t)) if status == 200 && p["decision"] == "allow" => {
                Ok((a.to_owned(), t.to_owned()))
            }
            _ => Err(format!("preview: {status} {p}")),
        }
    }

    /// Commit on replica `i`: the answer body (any status).
    fn commit(
        &self,
        i: usize,
        arguments: &Value,
        action: &str,
        artifact: &str,
    ) -> Result<(u16, Value), String> {
        http(
            self.port(i),
            "POST",
            "/v1/commit",
            &self.session,
            &json!({"tool": SEND, "arguments": arguments, "action_id": action, "artifact": artifact}),
        )
    }

    /// Every e-mail sent, over all replicas' offices: subject → times sent.
    fn effects(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in &self.replicas {
            if !r.office.exists() {
                continue;
            }
            let office = secureclaw_demo_tools::load_state(&r.office).unwrap();
            for m in office.sent {
                *out.entry(m.subject).or_default() += 1;
            }
        }
        out
    }

    /// Ledger state per action id, from the shared database.
    fn ledger(&self) -> BTreeMap<String, String> {
        query(&self.scratch().url, "SELECT action_id, state FROM ledger")
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect()
    }

    /// [`Cluster::ledger`] once each of `actions` has left `reserved` (at most 30 s): a
    /// replica answers an effect before its `executed` mark and `commit` record are durable
    /// (issue 14 item 2), so a reader right after the answer may still see `reserved`.
    fn settled_ledger<'a>(
        &self,
        actions: impl IntoIterator<Item = &'a String> + Clone,
    ) -> BTreeMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ledger = self.ledger();
            let pending = actions
                .clone()
                .into_iter()
                .any(|a| ledger.get(a).is_none_or(|s| s == "reserved"));
            if !pending || Instant::now() > deadline {
                return ledger;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Action ids with a `commit` or `crash_recovery` audit record.
    fn audited(&self) -> BTreeSet<String> {
        query(
            &self.scratch().url,
            "SELECT event FROM audit WHERE kind IN ('commit', 'crash_recovery')",
        )
        .iter()
        .filter_map(|r| {
            let e: Value = serde_json::from_str(&r.get::<_, String>(0)).ok()?;
            e["action_id"].as_str().map(str::to_owned)
        })
        .collect()
    }

    /// `secureclaw audit verify --store URL` on the shared chain.
    fn audit_verify(&self) {
        let out = self
            .command(&self.replicas[0].state)
            .args(["audit", "verify"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "secureclaw audit verify failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stop every replica, let every lease lapse (as 30 s of silence would), and start replica
    /// 0 again: its crash recovery now claims every reservation left in flight.
    fn recover(&mut self) {
        for i in 0..self.replicas.len() {
            self.kill_replica(i);
        }
        common_pg::lapse_leases(&self.scratch().url);
        self.start_replica(0);
    }

    /// The invariants after [`Cluster::recover`]: no action executed twice; every effect
    /// belongs to a previewed action (`subjects`: subject → action id), has a ledger entry
    /// that does not say failed and a `commit` or `crash_recovery` audit record; the chain
    /// verifies. Returns the number of effects.
    fn check(&self, subjects: &BTreeMap<String, String>) -> usize {
        let effects = self.effects();
        let ledger = self.ledger();
        let audited = self.audited();
        for (subject, n) in &effects {
            assert_eq!(*n, 1, "action `{subject}` executed {n} times");
            let action = subjects
                .get(subject)
                .unwrap_or_else(|| panic!("effect `{subject}` belongs to no previewed action"));
            let state = ledger
                .get(action)
                .unwrap_or_else(|| panic!("effect `{subject}` ({action}) has no ledger entry"));
            assert_ne!(
                state, "failed",
                "effect `{subject}` ran but its ledger says failed"
            );
            assert!(
                audited.contains(action),
                "effect `{subject}` ({action}) has no commit or crash_recovery audit record"
            );
        }
        self.audit_verify();
        effects.len()
    }
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[test]
fn one_action_raced_across_three_replicas_runs_once() {
    let Some(admin) = admin_url() else { return };
    let c = Cluster::start(&admin, 3);
    let args = mail("raced action");
    let (action, artifact) = c.preview(0, &args).unwrap();
    let barrier = Barrier::new(64);
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|k| {
                let (c, args, action, artifact, barrier) =
                    (&c, &args, &action, &artifact, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    ok(c.commit(k, args, action, artifact))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let completed = answers
        .iter()
        .filter(|a| a["status"] == "completed")
        .count();
    let replays = answers
        .iter()
        .filter(|a| a["status"] == "denied" && a["recovery"]["reason"] == "replay")
        .count();
    assert_eq!((completed, replays), (1, 63), "{answers:?}");
    assert_eq!(c.effects().get("raced action"), Some(&1));
    assert_eq!(
        c.settled_ledger([&action]).get(&action).map(String::as_str),
        Some("executed")
    );
    assert!(c.audited().contains(&action));
    // A later commit on any replica is a replay too, and sends nothing.
    for i in 0..3 {
        let (_, a) = c.commit(i, &args, &action, &artifact).unwrap();
        assert_eq!(a["recovery"]["reason"], "replay", "{a}");
    }
    assert_eq!(c.effects().values().sum::<usize>(), 1);
    c.audit_verify();
}

#[test]
fn distinct_actions_spread_over_replicas_each_run_once() {
    let Some(admin) = admin_url() else { return };
    let total = if full() { 1000 } else { 200 };
    let c = Cluster::start(&admin, 3);
    let next = AtomicUsize::new(0);
    let done: Mutex<BTreeMap<String, String>> = Mutex::default();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    if k >= total {
                        return;
                    }
                    let subject = format!("distinct action {k}");
                    let args = mail(&subject);
                    // Previewed on one replica, committed on the next.
                    let (action, artifact) = c.preview(k, &args).unwrap();
                    let a = ok(c.commit(k + 1, &args, &action, &artifact));
                    assert_eq!(a["status"], "completed", "{a}");
                    done.lock().unwrap().insert(subject, action);
                }
            });
        }
    });
    let done = done.into_inner().unwrap();
    assert_eq!(done.len(), total);
    let effects = c.effects();
    assert_eq!(effects.len(), total);
    assert!(effects.values().all(|n| *n == 1), "{effects:?}");
    let ledger = c.settled_ledger(done.values());
    assert!(
        done.values()
            .all(|a| ledger.get(a).map(String::as_str) == Some("executed"))
    );
    assert_eq!(c.check(&done), total);
}

#[test]
fn an_approval_decided_on_one_replica_is_honoured_by_another() {
    let Some(admin) = admin_url() else { return };
    let c = Cluster::start(&admin, 3);
    // Carol is not in the task: the call needs the user's confirmation.
    let ask = |i: usize, subject: &str, approval: Option<&str>| -> Value {
        let mut body = json!({"tool": SEND, "arguments": {"to": "carol@other.example", "subject": subject, "body": BODY}});
        if let Some(a) = approval {
            body["approval"] = json!(a);
        }
        ok(http(c.port(i), "POST", "/v1/call", &c.session, &body))
    };
    let r = ask(0, "approved on another", None);
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    let approved = r["recovery"]["action_id"].as_str().unwrap().to_owned();
    let r = ask(0, "denied on another", None);
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    let denied = r["recovery"]["action_id"].as_str().unwrap().to_owned();
    // The runtime re-issuing before the user decided gets nothing on any replica.
    for i in 0..3 {
        let r = ask(i, "approved on another", Some(&approved));
        assert_eq!(r["status"], "pending_confirmation", "{r}");
    }
    // Every replica lists the pending approvals (one store).
    for i in 0..3 {
        let list = ok(http(
            c.port(i),
            "GET",
            "/v1/approvals?state=pending",
            OPERATOR,
            &Value::Null,
        ));
        let ids: BTreeSet<&str> = list["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["action_id"].as_str())
            .collect();
        assert_eq!(ids, BTreeSet::from([approved.as_str(), denied.as_str()]));
    }
    // Decided through replica 1.
    ok(http(
        c.port(1),
        "POST",
        &format!("/v1/approvals/{approved}/approve"),
        OPERATOR,
        &Value::Null,
    ));
    ok(http(
        c.port(1),
        "POST",
        &format!("/v1/approvals/{denied}/deny"),
        OPERATOR,
        &Value::Null,
    ));
    // A decided approval cannot be decided again through another replica.
    let (s, _) = http(
        c.port(2),
        "POST",
        &format!("/v1/approvals/{approved}/deny"),
        OPERATOR,
        &Value::Null,
    )
    .unwrap();
    assert_eq!(s, 409);
    assert!(c.effects().is_empty());
    // The denial is honoured on replica 2, the approval there too (positive control).
    let r = ask(2, "denied on another", Some(&denied));
    assert_eq!(r["status"], "denied", "{r}");
    assert!(c.effects().is_empty());
    let r = ask(2, "approved on another", Some(&approved));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(c.effects().get("approved on another"), Some(&1));
    // Used once: the same re-issue on replica 0 is a replay.
    let r = ask(0, "approved on another", Some(&approved));
    assert_eq!(r["status"], "denied", "{r}");
    assert_eq!(r["recovery"]["reason"], "replay", "{r}");
    assert_eq!(c.effects().values().sum::<usize>(), 1);
    c.audit_verify();
}

/// Preview and commit fresh e-mails on the replicas, each previewed on one and committed on
/// another, interleaved with re-commits of earlier actions, until `stop`. Counts in
/// `failures` the requests that failed: no answer, an answer other than 200, a fresh action's
/// commit that did not complete, or a re-commit answered otherwise than completed or `replay`.
fn drive(
    c: &Cluster,
    tag: &str,
    seed: u64,
    subjects: &Mutex<BTreeMap<String, (String, String)>>,
    stop: &AtomicBool,
    failures: &AtomicUsize,
) {
    let mut rng = Rng(seed | 1);
    let fail = || {
        failures.fetch_add(1, Ordering::SeqCst);
    };
    for k in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let i = usize::try_from(rng.below(3)).unwrap();
        let old = {
            let list = subjects.lock().unwrap();
            (k % 3 == 2 && !list.is_empty()).then(|| {
                let n = usize::try_from(rng.below(list.len() as u64)).unwrap();
                list.iter()
                    .nth(n)
                    .map(|(s, (a, t))| (s.clone(), a.clone(), t.clone()))
                    .unwrap()
            })
        };
        let fresh = old.is_none();
        let (subject, action, artifact) = match old {
            Some(x) => x,
            None => {
                let subject = format!("{tag} action {k}");
                match c.preview(i, &mail(&subject)) {
                    Ok((a, t)) => {
                        subjects
                            .lock()
                            .unwrap()
                            .insert(subject.clone(), (a.clone(), t.clone()));
                        (subject, a, t)
                    }
                    Err(_) => {
                        fail();
                        continue;
                    }
                }
            }
        };
        match c.commit(i + 1, &mail(&subject), &action, &artifact) {
            Ok((200, r))
                if r["status"] == "completed"
                    || (!fresh && r["recovery"]["reason"] == "replay") => {}
            _ => fail(),
        }
    }
}

#[test]
fn sigkill_of_a_replica_mid_commit_never_executes_an_action_twice() {
    let Some(admin) = admin_url() else { return };
    let trials = if full() { 50 } else { 3 };
    let seed = seed();
    eprintln!("replica kills: {trials} trials, SECURECLAW_REPLICA_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let mut c = Cluster::start(&admin, 3);
    let subjects: Mutex<BTreeMap<String, (String, String)>> = Mutex::default();
    let failures = AtomicUsize::new(0);
    for trial in 0..trials {
        let victim = usize::try_from(rng.below(3)).unwrap();
        let stop = AtomicBool::new(false);
        let wait = Duration::from_millis(50 + rng.below(400));
        let seeds = [rng.next(), rng.next()];
        let pid = c.replicas[victim].server.as_ref().unwrap().0.id();
        std::thread::scope(|s| {
            let drivers: Vec<_> = seeds
                .iter()
                .enumerate()
                .map(|(d, seed)| {
                    let (c, subjects, stop, failures) = (&c, &subjects, &stop, &failures);
                    let tag = format!("kill trial {trial} driver {d}");
                    s.spawn(move || drive(c, &tag, *seed, subjects, stop, failures))
                })
                .collect();
            std::thread::sleep(wait);
            let killed = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::SeqCst);
            for d in drivers {
                d.join().unwrap();
            }
        });
        c.kill_replica(victim);
        c.start_replica(victim);
    }
    // Reservations whose replica died between reserving and recording the outcome.
    let interrupted = c.ledger().values().filter(|s| *s == "reserved").count();
    c.recover();
    let by_subject: BTreeMap<String, String> = subjects
        .lock()
        .unwrap()
        .iter()
        .map(|(s, (a, _))| (s.clone(), a.clone()))
        .collect();
    let effects = c.check(&by_subject);
    eprintln!(
        "replica kills: {trials} kills, {} actions previewed, {effects} executed, \
         {interrupted} reservations left in flight by a killed replica",
        by_subject.len()
    );
    assert!(
        effects > 0,
        "no commit ever completed: the test tests nothing"
    );
}

/// The database restarted under load. These tests must not restart the machine's shared
/// PostgreSQL server, so a restart is simulated by what the replicas see of one: every backend
/// connection of the scratch database is terminated (`pg_terminate_backend`), over and over,
/// while two drivers preview and commit on both replicas. Requests then fail closed (an error
/// answer, and no effect without a ledger entry); once the terminations stop, both replicas
/// serve again (their pools reconnect) without being restarted.
#[test]
fn database_connections_lost_under_load_fail_closed_then_recover() {
    let Some(admin) = admin_url() else { return };
    let mut c = Cluster::start(&admin, 2);
    let subjects: Mutex<BTreeMap<String, (String, String)>> = Mutex::default();
    let stop = AtomicBool::new(false);
    let failures = AtomicUsize::new(0);
    let mut terminated = 0;
    std::thread::scope(|s| {
        let drivers: Vec<_> = (0..2u64)
            .map(|d| {
                let (c, subjects, stop, failures) = (&c, &subjects, &stop, &failures);
                let tag = format!("db loss driver {d}");
                s.spawn(move || drive(c, &tag, d + 7, subjects, stop, failures))
            })
            .collect();
        // Terminate for at least 2 s, and on until some request has failed (bounded).
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2)
            || (failures.load(Ordering::SeqCst) == 0
                && started.elapsed() < Duration::from_secs(120))
        {
            terminated += c.scratch().terminate_backends();
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
        for d in drivers {
            d.join().unwrap();
        }
    });
    let failures = failures.into_inner();
    eprintln!("db loss: {terminated} backends terminated, {failures} requests failed");
    assert!(terminated > 0, "no backend was terminated");
    assert!(
        failures > 0,
        "no request failed while the database connections were cut: the test tests nothing"
    );
    // No effect without a ledger entry, even before any recovery.
    let ledger = c.ledger();
    let subjects_now = subjects.lock().unwrap().clone();
    for subject in c.effects().keys() {
        let (action, _) = &subjects_now[subject];
        assert!(
            ledger.contains_key(action),
            "effect `{subject}` has no ledger entry"
        );
    }
    // Recovery: both replicas, never restarted, serve again within a bound.
    for i in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let subject = format!("after the outage on replica {i}");
            let args = mail(&subject);
            let mut last = String::new();
            let done = match c.preview(i, &args) {
                Ok((a, t)) => {
                    subjects
                        .lock()
                        .unwrap()
                        .insert(subject.clone(), (a.clone(), t.clone()));
                    match c.commit(i, &args, &a, &t) {
                        Ok((_, r)) if r["status"] == "completed" => Some(()),
                        other => {
                            last = format!("commit: {other:?}");
                            None
                        }
                    }
                }
                Err(e) => {
                    last = format!("preview: {e:?}");
                    None
                }
            };
            if done.is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i} did not recover; last answer: {last}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    c.recover();
    let by_subject: BTreeMap<String, String> = subjects
        .lock()
        .unwrap()
        .iter()
        .map(|(s, (a, _))| (s.clone(), a.clone()))
        .collect();
    let effects = c.check(&by_subject);
    assert!(effects >= 2);
}

// ---------------------------------------------------------------------------------------------
// Load driver (BENCHMARKS.md §8), behind SECURECLAW_REPLICA_BENCH=1.

/// `/proc/loadavg`'s first three fields.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Median and 90th percentile (µs) of 200 `write(4 KiB) + fdatasync` on a file in `dir`.
fn fsync_latency(dir: &Path) -> (u128, u128) {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = [0x5au8; 4096];
    let mut us: Vec<u128> = (0..200)
        .map(|_| {
            let t = Instant::now();
            f.write_all(&block).unwrap();
            f.sync_data().unwrap();
            t.elapsed().as_micros()
        })
        .collect();
    us.sort_unstable();
    let _ = std::fs::remove_file(&path);
    (us[us.len() / 2], us[us.len() * 9 / 10])
}

/// `clients` threads preview and commit fresh e-mails for `secs` seconds, each action
/// previewed on one replica and committed on the next (round robin); returns the number of
/// completed commits, after checking that each ran exactly once.
fn drive_load(c: &Cluster, clients: usize, secs: u64, tag: &str) -> usize {
    let next = AtomicUsize::new(0);
    let completed = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                while Instant::now() < deadline {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    let args = mail(&format!("{tag} load {k}"));
                    let (action, artifact) = c.preview(k, &args).unwrap();
                    let a = ok(c.commit(k + 1, &args, &action, &artifact));
                    assert_eq!(a["status"], "completed", "{a}");
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    let n = completed.into_inner();
    let effects = c.effects();
    assert_eq!(effects.values().sum::<usize>(), n);
    assert!(effects.values().all(|k| *k == 1));
    n
}

/// Durable commits per second with SQLite (one gateway) and with 1, 2 and 3 replicas on
/// PostgreSQL, in one run: `SECURECLAW_REPLICA_BENCH=1` (else returns at once), with
/// `SECURECLAW_BENCH_CLIENTS` concurrent HTTP clients (default 16) for
/// `SECURECLAW_BENCH_SECS` seconds per configuration (default 20). Prints one table row per
/// configuration, the load average and this disk's fsync latency before and after.
#[test]
fn bench_commits_per_second() {
    if std::env::var("SECURECLAW_REPLICA_BENCH").is_err() {
        return;
    }
    let Some(admin) = admin_url() else { return };
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let clients = usize::try_from(env("SECURECLAW_BENCH_CLIENTS", 16)).unwrap();
    let secs = env("SECURECLAW_BENCH_SECS", 20);
    let probe = tempfile::tempdir().unwrap();
    let (p50, p90) = fsync_latency(probe.path());
    eprintln!(
        "bench: {clients} clients, {secs} s per configuration; load average {}; \
         fsync (4 KiB + fdatasync, temp dir) p50 {p50} µs, p90 {p90} µs",
        load_average()
    );
    eprintln!("| store | replicas | commits | commits/s | load average at start |");
    eprintln!("|---|---:|---:|---:|---|");
    for (name, n) in [
        ("SQLite (WAL, synchronous=FULL)", 1),
        ("PostgreSQL", 1),
        ("PostgreSQL", 2),
        ("PostgreSQL", 3),
    ] {
        let c = if name.starts_with("SQLite") {
            Cluster::start_on(Backing::Sqlite, n)
        } else {
            Cluster::start(&admin, n)
        };
        let load = load_average();
        let started = Instant::now();
        let done = drive_load(&c, clients, secs, &format!("{name} {n}"));
        let rate = done as f64 / started.elapsed().as_secs_f64();
        eprintln!("| {name} | {n} | {done} | {rate:.1} | {load} |");
    }
    let (p50, p90) = fsync_latency(probe.path());
    eprintln!(
        "bench: end; load average {}; fsync p50 {p50} µs, p90 {p90} µs",
        load_average()
    );
}

// ---------------------------------------------------------------------------------------------
// Per-session authorization state across replicas (issues 11 and 13).

const PAY: &str = "office__pay_invoice";
const READ: &str = "office__read_invoice";
const DRAFT: &str = "office__save_draft";
/// INV-42's amount in the seeded demo office.
const AMOUNT: u64 = 129_900;

/// The demo office's payment setup: the IBAN of a read invoice is an authoritative,
/// anchoring field that may flow into `pay_invoice`, a financial egress tool; drafts are store
/// effects whose `to` is their target.
const PAYMENT_CONFIG: &str = r#"
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

[[gateway.tools]]
tool = "office__save_draft"
destructive = false
targets = ["to"]
"#;

impl Cluster {
    /// A session for "Pay invoice INV-42." granting `pay_invoice` (one unconfirmed use).
    fn pay_session(&self, i: usize) -> String {
        let v = ok(http(
            self.port(i),
            "POST",
            "/v1/sessions",
            OPERATOR,
            &json!({"caller": "replica-payer", "task": {"request": "Pay invoice INV-42.", "granted_tools": [PAY]}}),
        ));
        v["session_id"].as_str().unwrap().to_owned()
    }

    /// `tools/call` of `tool` in `session` on replica `i`.
    fn call(&self, i: usize, session: &str, tool: &str, arguments: &Value) -> Value {
        ok(http(
            self.port(i),
            "POST",
            "/v1/call",
            session,
            &json!({"tool": tool, "arguments": arguments}),
        ))
    }

    /// Read INV-42 on replica `i`: the handle standing for its IBAN.
    fn read_iban(&self, i: usize, session: &str) -> String {
        let r = self.call(i, session, READ, &json!({"invoice_id": "INV-42"}));
        assert_eq!(r["status"], "completed", "{r}");
        let iban = r["structured_content"]["iban"].as_str().unwrap().to_owned();
        assert!(iban.starts_with("hdl_"), "{r}");
        iban
    }

    /// Payments made, over all replicas' offices.
    fn payments(&self) -> usize {
        self.replicas
            .iter()
            .filter(|r| r.office.exists())
            .map(|r| {
                secureclaw_demo_tools::load_state(&r.office)
                    .unwrap()
                    .payments
                    .len()
            })
            .sum()
    }

    /// The approver display of action `id`, from the shared database.
    fn display(&self, id: &str) -> String {
        let rows = query(
            &self.scratch().url,
            &format!("SELECT display FROM actions WHERE action_id = '{id}'"),
        );
        rows[0].get(0)
    }

    /// Whether handle `id` is anchored, from the shared database.
    fn handle_anchored(&self, id: &str) -> bool {
        let rows = query(
            &self.scratch().url,
            &format!("SELECT anchored FROM handles WHERE id = '{id}'"),
        );
        rows[0].get(0)
    }
}

fn payment(iban: &str) -> Value {
    json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": AMOUNT})
}

/// Red-team F11 across replicas: a task that grants one payment pays once without a human.
/// Used through replica 0, the grant is used up on replica 1 too: the same payment there waits
/// for a human (`grant_exhausted`) instead of paying twice. The invoice's amount, read through
/// replica 0 by an anchored read, is known on replica 1 (positive control in a second session:
/// the first payment through replica 1 runs).
#[test]
fn a_grant_used_through_one_replica_is_used_up_on_another() {
    let Some(admin) = admin_url() else { return };
    let c = Cluster::start_with(&admin, 2, PAYMENT_CONFIG);
    let s = c.pay_session(0);
    let iban = c.read_iban(0, &s);
    // Positive control: the payment the task grants runs without a human.
    let r = c.call(0, &s, PAY, &payment(&iban));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(c.payments(), 1);
    // The same payment through the other replica: the grant is used up.
    let r = c.call(1, &s, PAY, &payment(&iban));
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    let id = r["recovery"]["action_id"].as_str().unwrap();
    let display = c.display(id);
    assert!(display.contains("(grant_exhausted)"), "{display}");
    assert_eq!(c.payments(), 1, "paid twice without a human");
    // And through the first replica again, likewise.
    let r = c.call(0, &s, PAY, &payment(&iban));
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    assert_eq!(c.payments(), 1);
    // Another session: read through replica 0, paid through replica 1. The amount the
    // anchored read returned is known there, and the grant is this session's own.
    let s2 = c.pay_session(1);
    let iban2 = c.read_iban(0, &s2);
    let r = c.call(1, &s2, PAY, &payment(&iban2));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(c.payments(), 2);
    c.audit_verify();
}

/// Red-team F1/F13 across replicas: a value the session wrote through replica 0 (a draft to
/// `INV-42`) does not anchor a read of it through replica 1 — the IBAN that read returns is
/// not anchored. Positive control: the same read in a session that wrote nothing is anchored.
#[test]
fn a_value_written_through_one_replica_does_not_anchor_a_read_on_another() {
    let Some(admin) = admin_url() else { return };
    let c = Cluster::start_with(&admin, 2, PAYMENT_CONFIG);
    let control = c.pay_session(0);
    let iban = c.read_iban(1, &control);
    assert!(
        c.handle_anchored(&iban),
        "positive control: an anchored read"
    );
    let s = c.pay_session(0);
    let r = c.call(
        0,
        &s,
        DRAFT,
        &json!({"to": "INV-42", "subject": "note", "body": "remember the invoice"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let iban = c.read_iban(1, &s);
    assert!(
        !c.handle_anchored(&iban),
        "a value the session wrote through another replica anchored its read"
    );
    // The unanchored IBAN does not pay without a human, on either replica.
    let r = c.call(1, &s, PAY, &payment(&iban));
    assert_eq!(r["status"], "pending_confirmation", "{r}");
    assert_eq!(c.payments(), 0);
}
