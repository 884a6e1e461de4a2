//! Abuse driver for the gateway's limits (issue 12 item 6): starts `secureclaw serve` on a
//! loopback port in front of the demo office, then runs each abuse pattern in turn and prints
//! the gateway's resident memory (VmRSS of the `serve` process) after each, with the baseline
//! of the same run. Loopback only, bounded in time (each pattern has a fixed amount of work
//! and a deadline). Nothing here checks a threshold: it reports what it saw.
//!
//! ```text
//! cargo build --release -p secureclaw --bin secureclaw --example abuse
//! target/release/examples/abuse [--bin PATH] [--port N]
//! ```
//!
//! Patterns (one session token unless said otherwise):
//!
//! 1. `deferred`: 200 speculative calls of 3.9 MiB each (held until their branch settles);
//! 2. `mcp-sessions`: 200 MCP `initialize` requests with the token;
//! 3. `idle-connections`: 2,000 TCP connections opened from 127.0.0.1 and left silent, then
//!    `/health` from 127.0.0.2 (which the gateway counts as the same loopback peer);
//! 4. `previews`: 40 previews of 4 MiB bodies that need the user's approval;
//! 5. `large-calls`: 60 concurrent `/v1/call`s of one new session, each with 4 MB of
//!    arguments, once as one string and once as an array of 2 million tiny values; RSS is
//!    sampled every 20 ms (the peak is reported) and `/health` is timed every 100 ms.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
}

/// Resident memory of `pid` in KiB (`VmRSS` in `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")
}

/// Open descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn dir_kib(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            if let Ok(m) = e.metadata() {
                total += if m.is_dir() {
                    dir_kib(&e.path()) * 1024
                } else {
                    m.len()
                };
            }
        }
    }
    total / 1024
}

/// One HTTP/1.1 request on a fresh connection from `from` (a loopback address): status and
/// body.
async fn http(
    from: [u8; 4],
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, String)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    let mut s = socket.connect(addr).await?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut raw)).await??;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

const LOCAL: [u8; 4] = [127, 0, 0, 1];
const OTHER: [u8; 4] = [127, 0, 0, 2];

struct Gateway {
    child: std::process::Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(bin: &Path, port: u16, tmp: &Path) -> Result<Gateway> {
    let state = tmp.join("state");
    let config = tmp.join("secureclaw.toml");
    let addr = SocketAddr::from((LOCAL, port));
    std::fs::write(
        &config,
        format!(
            r#"[server]
http_bind = "{addr}"
state_dir = "{state}"

[server.limits]
idle_timeout_ms = 2000
header_read_timeout_ms = 2000

[[upstream]]
id = "office"
transport = "stdio"
command = "{bin}"
args = ["demo-tools", "--state", "{office}"]
"#,
            state = state.display(),
            bin = bin.display(),
            office = tmp.join("office.json").display(),
        ),
    )?;
    let child = std::process::Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("SECURECLAW_STATE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    let gw = Gateway {
        child,
        addr,
        dir: state,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(LOCAL, addr, "GET", "/health", None, None)
        .await
        .map(|r| r.0)
        .unwrap_or(0)
        != 200
    {
        if Instant::now() > deadline {
            bail!("the gateway did not answer /health within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(gw)
}

/// `/health` from `from`: its status, or what happened to the connection (the gateway counts
/// every loopback address as one peer, so a probe from 127.0.0.2 shares 127.0.0.1's limits).
async fn probe(from: [u8; 4], addr: SocketAddr) -> String {
    match http(from, addr, "GET", "/health", None, None).await {
        Ok((status, _)) => status.to_string(),
        Err(e) => format!("no answer ({e})"),
    }
}

fn row(name: &str, pid: u32, baseline: u64, note: &str) -> Result<()> {
    let rss = rss_kib(pid)?;
    println!(
        "| {name} | {:.1} MiB | {:+.1} MiB | {} | {note} |",
        rss as f64 / 1024.0,
        (rss as f64 - baseline as f64) / 1024.0,
        fds(pid)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = arg(&args, "--bin")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("SECURECLAW_BIN").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target/release/secureclaw"));
    let bin =
        std::fs::canonicalize(&bin).with_context(|| format!("no binary at {}", bin.display()))?;
    let port: u16 = arg(&args, "--port").map_or(Ok(18787), |p| p.parse())?;
    let tmp = std::env::temp_dir().join(format!("secureclaw-abuse-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let gw = start(&bin, port, &tmp).await?;
    let pid = gw.child.id();
    let operator = std::fs::read_to_string(gw.dir.join("operator.token"))?;
    let operator = operator.trim();
    let open = async |caller: &str| -> Result<String> {
        let (status, body) = http(
            LOCAL,
            gw.addr,
            "POST",
            "/v1/sessions",
            Some(operator),
            Some(&json!({"caller": caller, "task": {"request": "abuse run"}})),
        )
        .await?;
        let v: Value = serde_json::from_str(&body).with_context(|| format!("{status} {body}"))?;
        v.get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .context("no session id")
    };
    let token = open("abuser").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = rss_kib(pid)?;
    println!("| pattern | gateway RSS after | vs baseline | open fds | outcome |");
    println!("|---|---:|---:|---:|---|");
    row("baseline (started, one session)", pid, baseline, "")?;

    // 1. Deferred speculative calls.
    let big = "x".repeat(3_900_000);
    let (mut held, mut refused, mut other) = (0, 0, 0);
    let started = Instant::now();
    for i in 0..200 {
        let body = json!({"tool": "office__noop", "arguments": {"pad": big},
            "meta": {"dev.secureclaw/mode": "speculative", "dev.secureclaw/branch": format!("b{i}"),
                "dev.secureclaw/confidence": 0.9}});
        let (status, text) = http(
            LOCAL,
            gw.addr,
            "POST",
            "/v1/call",
            Some(&token),
            Some(&body),
        )
        .await?;
        if text.contains("\"deferred\"") {
            held += 1;
        } else if text.contains("limit_exceeded") {
            refused += 1;
        } else {
            other += 1;
            if other == 1 {
                eprintln!(
                    "deferred: unexpected answer {status}: {}",
                    text.chars().take(300).collect::<String>()
                );
            }
        }
        if started.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    row(
        "200 deferred calls of 3.9 MiB",
        pid,
        baseline,
        &format!("{held} held, {refused} refused `limit_exceeded`, {other} other"),
    )?;
    let status = probe(OTHER, gw.addr).await;
    println!("|  | | | | /health from 127.0.0.2: {status} |");

    // 2. MCP sessions.
    let (mut opened, mut refused, mut other) = (0, 0, 0);
    for i in 0..200 {
        let init = json!({"jsonrpc": "2.0", "id": i, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "abuse", "version": "1"}}});
        match http(LOCAL, gw.addr, "POST", "/mcp", Some(&token), Some(&init))
            .await?
            .0
        {
            200 => opened += 1,
            429 => refused += 1,
            _ => other += 1,
        }
    }
    row(
        "200 MCP initialize, one token",
        pid,
        baseline,
        &format!("{opened} opened, {refused} refused 429, {other} other"),
    )?;

    // 3. Idle connections.
    let mut conns = Vec::new();
    for _ in 0..2000 {
        match tokio::net::TcpStream::connect(gw.addr).await {
            Ok(c) => conns.push(c),
            Err(_) => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fds_held = fds(pid);
    let status = probe(OTHER, gw.addr).await;
    row(
        "2,000 silent connections (after 0.5 s)",
        pid,
        baseline,
        &format!(
            "{} opened by the client; gateway fds {fds_held}; /health from 127.0.0.2: {status}",
            conns.len()
        ),
    )?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut closed = 0;
    for c in &mut conns {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), c.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    row(
        "the same, 4.5 s later (header timeout 2 s)",
        pid,
        baseline,
        &format!(
            "{closed} of {} closed by the gateway; /health from 127.0.0.2: {}",
            conns.len(),
            probe(OTHER, gw.addr).await
        ),
    )?;
    drop(conns);

    // 4. Previews waiting for approval.
    let before = dir_kib(&gw.dir);
    let big = "y".repeat(4_000_000);
    let (mut pending, mut other) = (0, 0);
    for _ in 0..40 {
        let body = json!({"tool": "office__send_email", "arguments":
            {"to": "someone@elsewhere.example", "subject": "s", "body": big}});
        let (_, text) = http(
            LOCAL,
            gw.addr,
            "POST",
            "/v1/preview",
            Some(&token),
            Some(&body),
        )
        .await?;
        if text.contains("confirmation_required") {
            pending += 1;
        } else {
            other += 1;
        }
    }
    row(
        "40 previews of 4 MiB needing approval",
        pid,
        baseline,
        &format!(
            "{pending} pending, {other} other; state dir +{:.0} MiB",
            (dir_kib(&gw.dir).saturating_sub(before)) as f64 / 1024.0
        ),
    )?;
    // 5. Concurrent large calls of one session (red-team round 2: 60 calls of 4 MiB took the
    //    gateway past 1.3 GB and delayed `/health` by up to 9 s).
    let addr = gw.addr;
    for (name, arguments) in [
        (
            "60 concurrent calls of 4 MB (one string)",
            json!({"pad": "z".repeat(4_000_000)}),
        ),
        (
            "60 concurrent calls of 4 MB (2 million tiny values)",
            json!({"pad": vec![1; 1_999_000]}),
        ),
    ] {
        let token = open("abuser-large").await?;
        let body = Arc::new(json!({"tool": "office__noop", "arguments": arguments}));
        let peak = Arc::new(AtomicU64::new(0));
        let slowest = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    if let Ok(rss) = rss_kib(pid) {
                        peak.fetch_max(rss, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let prober = {
            let (slowest, done) = (Arc::clone(&slowest), Arc::clone(&done));
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let _ = probe(OTHER, addr).await;
                    let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
                    slowest.fetch_max(ms, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let started = Instant::now();
        let calls: Vec<_> = (0..60)
            .map(|_| {
                let (body, token) = (Arc::clone(&body), token.clone());
                tokio::spawn(async move {
                    http(LOCAL, addr, "POST", "/v1/call", Some(&token), Some(&body)).await
                })
            })
            .collect();
        let (mut ran, mut limited, mut invalid, mut other) = (0, 0, 0, 0);
        for call in calls {
            match call.await? {
                Ok((_, text)) if text.contains("\"completed\"") => ran += 1,
                Ok((_, text)) if text.contains("limit_exceeded") => limited += 1,
                Ok((_, text)) if text.contains("invalid_arguments") => invalid += 1,
                Ok((status, text)) => {
                    other += 1;
                    if other == 1 {
                        eprintln!(
                            "large calls: unexpected answer {status}: {}",
                            text.chars().take(300).collect::<String>()
                        );
                    }
                }
                Err(e) => {
                    other += 1;
                    eprintln!("large calls: {e}");
                }
            }
        }
        let wall = started.elapsed();
        done.store(true, Ordering::SeqCst);
        let _ = sampler.await;
        let _ = prober.await;
        row(
            name,
            pid,
            baseline,
            &format!(
                "{ran} ran, {limited} refused `limit_exceeded`, {invalid} refused invalid, {other} other, in {:.1} s; peak RSS {:.0} MiB; slowest `/health` {} ms",
                wall.as_secs_f64(),
                peak.load(Ordering::SeqCst) as f64 / 1024.0,
                slowest.load(Ordering::SeqCst)
            ),
        )?;
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
