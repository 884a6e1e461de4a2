//! Load driver for durable effects per second (issue 14 item 3; `BENCHMARKS.md` §13): N
//! concurrent HTTP clients on keep-alive connections send effects to `secureclaw serve`, for
//! several binaries (and stores) interleaved in one run.
//!
//! Per round, mode and binary (the order alternates every round): a fresh state directory,
//! `secureclaw serve` in front of the demo office over stdio, the office started with
//! `--journal` (each effect appends one JSON line instead of rewriting the office's whole state
//! file, so the upstream's cost per effect stays flat however many effects run), and one
//! session per client (`POST /v1/sessions`, the recipient a trusted target, so every e-mail is
//! allowed without confirmation). Each client sends `office__send_email` with a fresh subject
//! back to back for `--secs` seconds:
//!
//! - `call`: `POST /v1/call` (preview and commit in one request);
//! - `two-phase`: `POST /v1/preview` then `POST /v1/commit` with its artifact.
//!
//! Every answer must be `completed`. Afterwards the office's journal must hold exactly one
//! e-mail per completed effect, none twice and none of another run.
//!
//! Printed per row: effects, effects/s, round-trip p50/p99 of one effect (both requests in
//! `two-phase`), the CPU time the gateway process used per effect (user + system, from
//! `/proc/PID/stat`, all its threads) and the office's, the driver's own CPU per effect, and
//! the 1-minute load average before the row. Printed for the run: the state directory's fsync
//! latency (4 KiB write + `fdatasync`, 200 probes) at the start and at the end. Nothing here
//! checks a threshold. fsyncs per effect are counted by `scripts/bench/effects_load.py
//! --count-fsyncs` (under `strace`).
//!
//! ```text
//! cargo build --release -p secureclaw --bin secureclaw --example effects_load
//! target/release/examples/effects_load --bin main=PATH --bin branch=PATH [--clients 8]
//!     [--secs 10] [--rounds 2] [--mode call|two-phase|both] [--store URL] [--tmp DIR]
//! ```

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const RECIPIENT: &str = "approver@corp.example";
const TASK: &str = "Send the benchmark mails to approver@corp.example";
const OPERATOR: &str = "bench-operator-token-0123456789abcdef";
const SEND: &str = "office__send_email";

const USAGE: &str = "\
usage: effects_load --bin NAME=PATH [--bin NAME=PATH ...] [OPTIONS]

Durable effects per second through `secureclaw serve` (POST /v1/call or /v1/preview +
/v1/commit), N clients on keep-alive HTTP connections, binaries interleaved (BENCHMARKS.md §13).

options:
  --bin NAME=PATH   a secureclaw binary to measure (repeat to compare; required)
  --clients N       concurrent clients, one session each (default 8)
  --secs S          seconds per row (default 10)
  --rounds R        rounds; the binaries' order flips every round (default 2)
  --mode M          call, two-phase or both (default both)
  --store URL       the gateways' store (`postgres://…`; each row empties it first by dropping
                    and recreating the schema `public`: use a scratch database). Default: SQLite
                    in each row's fresh state directory
  --tmp DIR         parent of the run's temporary directory (default: the system's)
  -h, --help        this text";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Call,
    TwoPhase,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Call => "call",
            Mode::TwoPhase => "two-phase",
        }
    }
}

struct Options {
    bins: Vec<(String, PathBuf)>,
    clients: usize,
    secs: f64,
    rounds: usize,
    modes: Vec<Mode>,
    store: Option<String>,
    tmp: PathBuf,
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        bins: Vec::new(),
        clients: 8,
        secs: 10.0,
        rounds: 2,
        modes: vec![Mode::Call, Mode::TwoPhase],
        store: None,
        tmp: std::env::temp_dir(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value\n\n{USAGE}"))
        };
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--bin" => {
                let v = value()?;
                let Some((name, path)) = v.split_once('=') else {
                    bail!("--bin takes NAME=PATH, got `{v}`");
                };
                o.bins.push((name.to_owned(), PathBuf::from(path)));
            }
            "--clients" => o.clients = value()?.parse().context("--clients: a number")?,
            "--secs" => o.secs = value()?.parse().context("--secs: a number of seconds")?,
            "--rounds" => o.rounds = value()?.parse().context("--rounds: a number")?,
            "--mode" => {
                o.modes = match value()?.as_str() {
                    "call" => vec![Mode::Call],
                    "two-phase" => vec![Mode::TwoPhase],
                    "both" => vec![Mode::Call, Mode::TwoPhase],
                    other => bail!("--mode: call, two-phase or both, not `{other}`"),
                }
            }
            "--store" => o.store = Some(value()?),
            "--tmp" => o.tmp = PathBuf::from(value()?),
            other => bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    if o.bins.is_empty() {
        bail!("at least one --bin NAME=PATH is needed\n\n{USAGE}");
    }
    if o.clients == 0 || o.rounds == 0 || !o.secs.is_finite() || o.secs <= 0.0 {
        bail!("--clients, --rounds and --secs must be above 0");
    }
    Ok(o)
}

/// CPU time (user + system) of process `pid`, all threads, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after ')'.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The children of `pid` (the office under `serve`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unavailable".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// 200 × (append 4 KiB + `fdatasync`) in `dir`: (p50, p90) in µs.
fn fsync_latency(dir: &Path) -> Result<(u64, u64)> {
    use std::io::Write as _;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let mut us = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&[b'x'; 4096])?;
        f.sync_data()?;
        us.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    drop(f);
    std::fs::remove_file(&path)?;
    us.sort_unstable();
    Ok((percentile(&us, 50), percentile(&us, 90)))
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a local port")?;
    Ok(l.local_addr()?.port())
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
) -> Result<(u16, Value)> {
    let resp = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, v))
}

/// Empty the PostgreSQL scratch database `url` (schema `public`) with `psql`.
fn reset_postgres(url: &str) -> Result<()> {
    let out = std::process::Command::new("psql")
        .args([
            url,
            "-q",
            "-c",
            "DROP SCHEMA public CASCADE; CREATE SCHEMA public;",
        ])
        .output()
        .context("cannot run psql to empty the scratch database")?;
    if !out.status.success() {
        bail!(
            "psql could not empty `{url}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

struct Server {
    dir: PathBuf,
    child: tokio::process::Child,
    base: String,
    journal: PathBuf,
    sessions: Vec<String>,
}

impl Server {
    async fn start(
        run: &Path,
        exe: &Path,
        row: &str,
        clients: usize,
        store: Option<&str>,
    ) -> Result<Self> {
        let dir = run.join(row);
        std::fs::create_dir_all(&dir)?;
        let port = free_port()?;
        let office = dir.join("office.json");
        let journal = dir.join("office.jsonl");
        let store_section = store.map_or_else(String::new, |url| {
            format!("\n[store]\nurl = {}\n", json!(url))
        });
        let config = format!(
            "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n[server.limits]\nmax_connections_per_peer = 1024\n\
             max_in_flight_per_peer = 1024\n\n[gateway.limits]\nmax_pending_per_session = 1000000\n\
             session_burst = 1000000\ntool_burst = 1000000\nsession_rate_per_s = 1000000\n\
             tool_rate_per_s = 1000000\n{store_section}\n[[upstream]]\nid = \"office\"\ntransport = \"stdio\"\n\
             command = {}\nargs = {}\n",
            json!(exe.display().to_string()),
            json!([
                "demo-tools",
                "--state",
                office.display().to_string(),
                "--journal",
                journal.display().to_string()
            ]),
        );
        let cfg = dir.join("serve.toml");
        std::fs::write(&cfg, config)?;
        let log = std::fs::File::create(dir.join("serve.log"))?;
        let mut child = tokio::process::Command::new(exe)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .env_remove("SECURECLAW_STORE")
            .env_remove("SECURECLAW_KEYS")
            .env_remove("SECURECLAW_KEYS_FILE")
            .env_remove("SECURECLAW_STATE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run `{}`", exe.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "serve exited with {status}: {}",
                    std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
                );
            }
            if let Ok(r) = http.get(format!("{base}/health")).send().await
                && r.status().is_success()
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("serve did not answer /health in 120 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut sessions = Vec::with_capacity(clients);
        for k in 0..clients {
            let body = json!({"caller": format!("bench-{k}"),
                              "task": {"request": TASK, "trusted_targets": [RECIPIENT]}});
            let (status, v) = post(&http, &format!("{base}/v1/sessions"), OPERATOR, &body).await?;
            let Some(token) = v
                .get("session_id")
                .and_then(Value::as_str)
                .filter(|_| status == 200)
            else {
                bail!("POST /v1/sessions: {status} {v}");
            };
            sessions.push(token.to_owned());
        }
        Ok(Self {
            dir,
            child,
            base,
            journal,
            sessions,
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Subjects in the office's journal: subject → times sent.
    fn sent(&self) -> Result<BTreeMap<String, usize>> {
        let text = std::fs::read_to_string(&self.journal).unwrap_or_default();
        let mut subjects = BTreeMap::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("a journal line is not JSON: {line}"))?;
            if let Some(s) = v.pointer("/arguments/subject").and_then(Value::as_str) {
                *subjects.entry(s.to_owned()).or_default() += 1;
            }
        }
        Ok(subjects)
    }

    async fn stop(mut self) -> Result<()> {
        if let Some(pid) = self.child.id() {
            // SIGTERM: a graceful shutdown (flushes queued records).
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(())
    }
}

/// One effect; its round trip in µs.
async fn one_effect(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    mode: Mode,
    subject: &str,
) -> Result<u64> {
    let args = json!({"to": RECIPIENT, "subject": subject, "body": "Invoice INV-42 for sign-off."});
    let t = Instant::now();
    let (status, v) = match mode {
        Mode::Call => {
            post(
                http,
                &format!("{base}/v1/call"),
                token,
                &json!({"tool": SEND, "arguments": args}),
            )
            .await?
        }
        Mode::TwoPhase => {
            let (status, p) = post(
                http,
                &format!("{base}/v1/preview"),
                token,
                &json!({"tool": SEND, "arguments": args}),
            )
            .await?;
            if status != 200 || p.get("decision").and_then(Value::as_str) != Some("allow") {
                bail!("preview: {status} {p}");
            }
            post(
                http,
                &format!("{base}/v1/commit"),
                token,
                &json!({"tool": SEND, "arguments": args, "action_id": p.get("action_id"),
                        "artifact": p.get("artifact")}),
            )
            .await?
        }
    };
    if status != 200 || v.get("status").and_then(Value::as_str) != Some("completed") {
        bail!("{}: {status} {v}", mode.name());
    }
    Ok(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX))
}

struct Row {
    completed: usize,
    secs: f64,
    latencies: Vec<u64>,
    gateway_ticks: u64,
    office_ticks: u64,
    driver_ticks: u64,
    distinct: usize,
    double: usize,
    foreign: usize,
}

async fn drive(server: &Server, mode: Mode, secs: f64, tag: &str) -> Result<Row> {
    let pid = server.pid().context("serve has no pid")?;
    let office = children(pid);
    let office_before: u64 = office.iter().filter_map(|&p| cpu_ticks(p)).sum();
    let gateway_before = cpu_ticks(pid).unwrap_or(0);
    let driver_before = cpu_ticks(std::process::id()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (k, token) in server.sessions.iter().enumerate() {
        let (base, token, tag) = (server.base.clone(), token.clone(), tag.to_owned());
        tasks.spawn(async move {
            // One keep-alive connection per client.
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()?;
            let mut latencies = Vec::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                let subject = format!("{tag} c{k} n{n}");
                latencies.push(one_effect(&http, &base, &token, mode, &subject).await?);
                n += 1;
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    let secs = started.elapsed().as_secs_f64();
    let gateway_ticks = cpu_ticks(pid).unwrap_or(0).saturating_sub(gateway_before);
    let office_ticks = office
        .iter()
        .filter_map(|&p| cpu_ticks(p))
        .sum::<u64>()
        .saturating_sub(office_before);
    let driver_ticks = cpu_ticks(std::process::id())
        .unwrap_or(0)
        .saturating_sub(driver_before);
    let sent = server.sent()?;
    let prefix = format!("{tag} ");
    let mine: Vec<usize> = sent
        .iter()
        .filter(|(s, _)| s.starts_with(&prefix))
        .map(|(_, &n)| n)
        .collect();
    Ok(Row {
        completed: latencies.len(),
        secs,
        latencies,
        gateway_ticks,
        office_ticks,
        driver_ticks,
        distinct: mine.len(),
        double: mine.iter().filter(|&&n| n > 1).count(),
        foreign: sent.len() - mine.len(),
    })
}

fn percentile(sorted: &[u64], p: usize) -> u64 {
    let i = (sorted.len() * p / 100).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = parse_options(&args)?;
    // reqwest is built without a TLS provider here; the driver speaks plain HTTP, but the
    // client still wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::fs::create_dir_all(&o.tmp)?;
    let run = tempfile::Builder::new()
        .prefix("effects-load-")
        .tempdir_in(&o.tmp)
        .context("cannot create the run's temporary directory")?;
    // Clock ticks per second of /proc/PID/stat (USER_HZ); 100 on Linux.
    let hz = 100.0;
    let (p50, p90) = fsync_latency(run.path())?;
    println!(
        "start: load average {}; fsync (4 KiB append + fdatasync, {}) p50 {p50} us, p90 {p90} us; \
         {} clients (one session and one keep-alive connection each), {} s per row, store {}",
        load_average(),
        o.tmp.display(),
        o.clients,
        o.secs,
        o.store
            .as_deref()
            .map_or("SQLite (WAL, synchronous=FULL)", |_| "PostgreSQL")
    );
    println!(
        "| round | binary | mode | effects | effects/s | p50 µs | p99 µs | gateway CPU µs/effect | office CPU µs/effect | driver CPU µs/effect | distinct e-mails | double | load before |"
    );
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut rates: BTreeMap<(String, &str), Vec<f64>> = BTreeMap::new();
    for round in 0..o.rounds {
        let order: Vec<&(String, PathBuf)> = if round % 2 == 0 {
            o.bins.iter().collect()
        } else {
            o.bins.iter().rev().collect()
        };
        for &mode in &o.modes {
            for (name, exe) in &order {
                if let Some(url) = &o.store {
                    reset_postgres(url)?;
                }
                let load = load_average();
                let row = format!("r{round}-{name}-{}", mode.name());
                let server = Server::start(run.path(), exe, &row, o.clients, o.store.as_deref())
                    .await
                    .with_context(|| format!("starting {name}"))?;
                let result = drive(&server, mode, o.secs, &row).await;
                server.stop().await?;
                let mut r = result.with_context(|| format!("row {row}"))?;
                r.latencies.sort_unstable();
                let n = r.completed.max(1) as f64;
                let per = |ticks: u64| ticks as f64 / hz * 1e6 / n;
                let rate = r.completed as f64 / r.secs;
                rates
                    .entry((name.clone(), mode.name()))
                    .or_default()
                    .push(rate);
                println!(
                    "| {round} | {name} | {} | {} | {rate:.0} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {load} |",
                    mode.name(),
                    r.completed,
                    percentile(&r.latencies, 50),
                    percentile(&r.latencies, 99),
                    per(r.gateway_ticks),
                    per(r.office_ticks),
                    per(r.driver_ticks),
                    r.distinct,
                    r.double,
                );
                if r.distinct != r.completed || r.double != 0 || r.foreign != 0 {
                    bail!(
                        "row {row}: {} effects answered, {} distinct e-mails, {} sent twice, {} not of this row",
                        r.completed,
                        r.distinct,
                        r.double,
                        r.foreign
                    );
                }
            }
        }
    }
    let (p50, p90) = fsync_latency(run.path())?;
    println!(
        "end: load average {}; fsync p50 {p50} us, p90 {p90} us",
        load_average()
    );
    for ((name, mode), v) in &rates {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = match (
            v.len() % 2,
            v.get(mid),
            mid.checked_sub(1).and_then(|i| v.get(i)),
        ) {
            (1, Some(m), _) => *m,
            (_, Some(hi), Some(lo)) => (hi + lo) / 2.0,
            _ => 0.0,
        };
        println!("median effects/s: {name} {mode} {median:.0}");
    }
    Ok(())
}
