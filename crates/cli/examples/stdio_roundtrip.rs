//! Load driver: MCP stdio round trip of the demo server's `noop` tool, direct and through the
//! gateway, measured in the same run (see `BENCHMARKS.md`).
//!
//! Two rmcp child-process clients are started:
//!
//! - **direct**: `secureclaw demo-tools --state TMP/direct.json`;
//! - **gateway**: `secureclaw --state-dir TMP/gw wrap -- secureclaw demo-tools --state
//!   TMP/upstream.json` (the gateway serving the same server on stdio; `wrap` does not
//!   namespace, so the tool is `noop` there too).
//!
//! After a warm-up, `tools/call noop` is sent to both alternately — which one goes first
//! alternates too — so both series share the machine's noise; each call is timed from just
//! before the request is sent to the response being decoded. Prints p50/p90/p99/max/mean of
//! both and the gateway/direct ratios. Nothing here checks a threshold.
//!
//! ```text
//! cargo build --release -p secureclaw --bin secureclaw --example stdio_roundtrip
//! target/release/examples/stdio_roundtrip [--bin PATH] [--iterations N] [--warmup W] [--tmp DIR]
//! ```
//!
//! The binary is `--bin`, else `$SECURECLAW_BIN`, else `target/release/secureclaw`. Defaults:
//! N = 5000 calls per client after W = 500 warm-up calls per client. The state files (the
//! gateway's database among them) go to a fresh temporary directory under `--tmp`, default the
//! system's temporary directory; `--tmp /dev/shm` (tmpfs, where fsync returns at once) is a
//! diagnostic that shows how much of the gateway's cost is the durable audit write.

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ()>;

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
}

fn count(args: &[String], name: &str, default: usize) -> Result<usize> {
    arg(args, name).map_or(Ok(default), |v| {
        v.parse()
            .with_context(|| format!("`{name}` wants a count, got `{v}`"))
    })
}

async fn spawn(program: &Path, args: &[String]) -> Result<Client> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_remove("SECURECLAW_KEYS")
        .env_remove("SECURECLAW_KEYS_FILE")
        .env_remove("SECURECLAW_STATE_DIR")
        .kill_on_drop(true);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run `{}`", program.display()))?;
    ().serve(transport).await.with_context(|| {
        format!(
            "MCP initialize with `{}` {args:?} failed",
            program.display()
        )
    })
}

/// One `tools/call noop`; an error result counts as a failure.
async fn noop(client: &Client) -> Result<()> {
    let params = CallToolRequestParams::new("noop").with_arguments(JsonObject::new());
    match client.call_tool_once(params).await? {
        CallToolResponse::Complete(r) if r.is_error != Some(true) => Ok(()),
        other => bail!("noop did not complete: {other:?}"),
    }
}

struct Summary {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

#[expect(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "sample counts and nanosecond values far below 2^52"
)]
fn summarize(mut ns: Vec<u64>) -> Summary {
    ns.sort_unstable();
    let pct = |p: f64| {
        let rank = ((p / 100.0) * ns.len() as f64).ceil() as usize;
        let idx = rank.clamp(1, ns.len().max(1)) - 1;
        ns.get(idx).map_or(f64::NAN, |&v| v as f64 / 1000.0)
    };
    Summary {
        p50: pct(50.0),
        p90: pct(90.0),
        p99: pct(99.0),
        max: pct(100.0),
        mean: ns.iter().map(|&v| v as f64).sum::<f64>() / ns.len().max(1) as f64 / 1000.0,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

async fn timed(client: &Client) -> Result<u64> {
    let t = Instant::now();
    noop(client).await?;
    Ok(nanos(t.elapsed()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = arg(&args, "--bin")
        .cloned()
        .or_else(|| std::env::var("SECURECLAW_BIN").ok())
        .unwrap_or_else(|| "target/release/secureclaw".into());
    let bin = std::fs::canonicalize(&bin)
        .with_context(|| format!("secureclaw binary `{bin}` not found (build it with `cargo build --release -p secureclaw`, or pass --bin)"))?;
    let n = count(&args, "--iterations", 5_000)?;
    let warmup = count(&args, "--warmup", 500)?;

    let tmp = match arg(&args, "--tmp") {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let state = |name: &str| -> String { tmp.path().join(name).display().to_string() };
    let gw_dir: PathBuf = tmp.path().join("gw");
    let bin_s = bin.display().to_string();

    let direct = spawn(
        &bin,
        &["demo-tools".into(), "--state".into(), state("direct.json")],
    )
    .await?;
    let gateway = spawn(
        &bin,
        &[
            "--state-dir".into(),
            gw_dir.display().to_string(),
            "wrap".into(),
            "--".into(),
            bin_s.clone(),
            "demo-tools".into(),
            "--state".into(),
            state("upstream.json"),
        ],
    )
    .await?;
    for (name, c) in [("direct", &direct), ("gateway", &gateway)] {
        let tools = c.list_all_tools().await?;
        if !tools.iter().any(|t| t.name == "noop") {
            bail!("{name}: `noop` is not listed");
        }
    }

    for _ in 0..warmup {
        noop(&direct).await.context("direct warm-up")?;
        noop(&gateway).await.context("gateway warm-up")?;
    }
    let mut d = Vec::with_capacity(n);
    let mut g = Vec::with_capacity(n);
    for i in 0..n {
        if i % 2 == 0 {
            d.push(timed(&direct).await.context("direct call")?);
            g.push(timed(&gateway).await.context("gateway call")?);
        } else {
            g.push(timed(&gateway).await.context("gateway call")?);
            d.push(timed(&direct).await.context("direct call")?);
        }
    }
    let (d, g) = (summarize(d), summarize(g));

    println!(
        "stdio_roundtrip: tools/call noop, {n} calls per client after {warmup} warm-up calls each, interleaved; times in µs"
    );
    println!("binary: {}", bin.display());
    println!("state: {}", tmp.path().display());
    println!();
    println!("| client | n | p50 | p90 | p99 | max | mean |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, s) in [
        ("direct: secureclaw demo-tools", &d),
        ("gateway: secureclaw wrap -- secureclaw demo-tools", &g),
    ] {
        println!(
            "| {name} | {n} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            s.p50, s.p90, s.p99, s.max, s.mean
        );
    }
    println!();
    println!(
        "ratio gateway/direct: p50 {:.2}x, p99 {:.2}x, mean {:.2}x; added at p50: {:.1} µs",
        g.p50 / d.p50,
        g.p99 / d.p99,
        g.mean / d.mean,
        g.p50 - d.p50
    );

    let _ = direct.cancel().await;
    let _ = gateway.cancel().await;
    Ok(())
}
