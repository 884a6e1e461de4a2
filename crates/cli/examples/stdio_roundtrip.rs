//! Load driver (issue 14 item 6; `BENCHMARKS.md` §2 and §11): MCP round trips of a read and an
//! effect of the demo office, directly, through a pure byte relay, through `secureclaw wrap`
//! (stdio) and through `secureclaw serve` (Streamable HTTP at `/mcp`), all in one run,
//! interleaved so that every series shares the machine's noise.
//!
//! Fronts, each with `--clients N` clients of its own (its own process or MCP session, and its
//! own demo office, so that every front's upstream does the same work):
//!
//! - **direct**: `secureclaw demo-tools --state OFFICE` over stdio;
//! - **relay**: this binary re-invoked as `stdio_roundtrip --relay -- secureclaw demo-tools …`,
//!   which copies bytes both ways between its stdio and the upstream's (non-blocking pipes, no
//!   parsing): the lower bound of any second hop;
//! - **wrap**: `secureclaw --state-dir DIR wrap --config LIMITS --trusted-target RECIPIENT --
//!   secureclaw demo-tools …` (one state directory per client);
//! - **serve**: one `secureclaw serve` with one `[[upstream]]` `office<k>` per client and the
//!   same `[gateway.limits]`; client `k` opens a session with `POST /v1/sessions` (operator
//!   token; the task's trusted target is the recipient) and speaks MCP at `/mcp` with rmcp's
//!   Streamable HTTP client, the session token as bearer.
//!
//! Operations: **read** = `tools/call noop` (a read in the shipped catalog: no preview, no
//! ledger); **effect** = `tools/call send_email` to the trusted recipient with a fresh subject
//! (an egress effect the policy allows without confirmation: preview, decision, reservation,
//! upstream call, commit records). After the run every office's `sent` list is checked: one
//! e-mail per answered effect, none twice.
//!
//! Interleaving: the run is cut into slices; in a slice each client of one series makes
//! `--batch` calls back to back (the clients of that series run concurrently), and the series
//! take turns slice by slice, in an order that rotates every round. Each call is timed from
//! just before the request is sent to the decoded response; a series' throughput is its calls
//! divided by the wall time of its slices. Also printed: the load average at the start and at
//! the end, and the fsync latency of the state directory's file system (write 4 KiB +
//! `fdatasync`, `--fsync-probes` times) at the start and at the end. Nothing here checks a
//! threshold.
//!
//! ```text
//! cargo build --release -p secureclaw --bin secureclaw --example stdio_roundtrip
//! target/release/examples/stdio_roundtrip [--bin PATH] [--clients N] [--iterations N]
//!     [--warmup W] [--batch B] [--fronts direct,relay,wrap,serve] [--ops read,effect]
//!     [--fsync-probes P] [--tmp DIR]
//! target/release/examples/stdio_roundtrip --relay -- CMD [ARGS…]   (used by the driver itself)
//! ```
//!
//! The binary is `--bin`, else `$SECURECLAW_BIN`, else `target/release/secureclaw`. State
//! (databases, offices, configs, logs of every child's stderr) goes to a fresh temporary
//! directory under `--tmp` (default: the system's), removed at the end; `--tmp /dev/shm`
//! (tmpfs, where fsync returns at once) is a diagnostic, not a result.

use anyhow::{Context, Result, bail};
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

type Client = RunningService<RoleClient, ()>;

/// The effect's recipient: a trusted target of every session, so no confirmation is asked.
const RECIPIENT: &str = "approver@corp.example";
const TASK: &str = "Send the benchmark mails to approver@corp.example";
const OPERATOR: &str = "bench-operator-token-0123456789abcdef";

const USAGE: &str = "\
usage: stdio_roundtrip [OPTIONS]
       stdio_roundtrip --relay -- CMD [ARGS...]

Round trips of a read (`noop`) and an effect (`send_email` to a trusted recipient) of the demo
office: direct, through a pure byte relay, through `secureclaw wrap` and through
`secureclaw serve` at /mcp, interleaved in one run (BENCHMARKS.md §11).

options:
  --bin PATH          secureclaw binary (default $SECURECLAW_BIN, else target/release/secureclaw)
  --clients N         concurrent clients per front, each its own process or session (default 1)
  --iterations N      measured calls per client and series (default 1000)
  --warmup W          unmeasured calls per client and series first (default 100)
  --batch B           calls per client in one slice of a series (default 10)
  --fronts LIST       comma list of direct,relay,wrap,serve (default all four)
  --ops LIST          comma list of read,effect (default both)
  --fsync-probes P    4 KiB write + fdatasync probes at the start and at the end (default 200)
  --tmp DIR           parent of the run's temporary state directory (default: system temp)
  --relay -- CMD...   run as a byte relay in front of CMD (how the driver starts `relay`)
  -h, --help          this text";

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum FrontKind {
    Direct,
    Relay,
    Wrap,
    Serve,
}

impl FrontKind {
    const ALL: [Self; 4] = [Self::Direct, Self::Relay, Self::Wrap, Self::Serve];

    fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Relay => "relay",
            Self::Wrap => "wrap",
            Self::Serve => "serve",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Op {
    Read,
    Effect,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Effect => "effect",
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Self::Read => "noop",
            Self::Effect => "send_email",
        }
    }

    /// The call's arguments; an effect's subject is unique per series, client and call.
    fn arguments(self, subject: String) -> JsonObject {
        match self {
            Self::Read => JsonObject::new(),
            Self::Effect => {
                let mut a = JsonObject::new();
                a.insert("to".into(), RECIPIENT.into());
                a.insert("subject".into(), subject.into());
                a.insert("body".into(), "benchmark".into());
                a
            }
        }
    }
}

struct Options {
    bin: PathBuf,
    clients: usize,
    iterations: usize,
    warmup: usize,
    batch: usize,
    fronts: Vec<FrontKind>,
    ops: Vec<Op>,
    fsync_probes: usize,
    tmp: Option<PathBuf>,
}

fn parse_count(name: &str, v: Option<&String>, min: usize) -> Result<usize> {
    let v = v.with_context(|| format!("`{name}` wants a value\n\n{USAGE}"))?;
    let n: usize = v
        .parse()
        .with_context(|| format!("`{name}` wants a count, got `{v}`"))?;
    if n < min {
        bail!("`{name}` must be at least {min}, got `{v}`");
    }
    Ok(n)
}

fn parse_list<T: Copy>(name: &str, v: Option<&String>, all: &[(&str, T)]) -> Result<Vec<T>> {
    let v = v.with_context(|| format!("`{name}` wants a value\n\n{USAGE}"))?;
    let mut out = Vec::new();
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let Some((_, x)) = all.iter().find(|(n, _)| *n == part) else {
            let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
            bail!("`{name}`: unknown `{part}` (one of {})", names.join(", "));
        };
        out.push(*x);
    }
    if out.is_empty() {
        bail!("`{name}` is empty");
    }
    Ok(out)
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut bin = std::env::var("SECURECLAW_BIN").ok();
    let mut o = Options {
        bin: PathBuf::new(),
        clients: 1,
        iterations: 1000,
        warmup: 100,
        batch: 10,
        fronts: FrontKind::ALL.to_vec(),
        ops: vec![Op::Read, Op::Effect],
        fsync_probes: 200,
        tmp: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bin" => bin = Some(it.next().context("`--bin` wants a path")?.clone()),
            "--clients" => o.clients = parse_count(a, it.next(), 1)?,
            "--iterations" => o.iterations = parse_count(a, it.next(), 1)?,
            "--warmup" => o.warmup = parse_count(a, it.next(), 0)?,
            "--batch" => o.batch = parse_count(a, it.next(), 1)?,
            "--fsync-probes" => o.fsync_probes = parse_count(a, it.next(), 1)?,
            "--fronts" => {
                let all: Vec<(&str, FrontKind)> =
                    FrontKind::ALL.iter().map(|f| (f.name(), *f)).collect();
                o.fronts = parse_list(a, it.next(), &all)?;
                o.fronts.sort();
                o.fronts.dedup();
            }
            "--ops" => {
                o.ops = parse_list(a, it.next(), &[("read", Op::Read), ("effect", Op::Effect)])?;
                o.ops.sort();
                o.ops.dedup();
            }
            "--tmp" => o.tmp = Some(it.next().context("`--tmp` wants a directory")?.into()),
            other => bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    let bin = bin.unwrap_or_else(|| "target/release/secureclaw".into());
    o.bin = std::fs::canonicalize(&bin).with_context(|| {
        format!("secureclaw binary `{bin}` not found (build it with `cargo build --release -p secureclaw`, or pass --bin)")
    })?;
    Ok(o)
}

// ---------------------------------------------------------------------------------------------
// The relay: bytes both ways, nothing parsed.

/// Stdin and stdout as non-blocking pipes when they are pipes (as the driver starts the
/// relay), else tokio's blocking-thread stdio.
fn relay_stdio() -> Result<(
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
)> {
    use tokio::net::unix::pipe;
    let input = std::io::stdin().as_fd().try_clone_to_owned()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned()?;
    let input: Box<dyn AsyncRead + Unpin + Send> = match pipe::Receiver::from_owned_fd(input) {
        Ok(rx) => Box::new(rx),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let output: Box<dyn AsyncWrite + Unpin + Send> = match pipe::Sender::from_owned_fd(output) {
        Ok(tx) => Box::new(tx),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    Ok((input, output))
}

/// Copies until end of input, writing (and flushing) every chunk as soon as it is read.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
            return to.shutdown().await;
        };
        to.write_all(chunk).await?;
        to.flush().await?;
    }
}

/// `--relay -- CMD ARGS…`: runs CMD and relays this process's stdin to its stdin and its
/// stdout to this process's stdout until both directions end.
async fn relay(command: &[String]) -> Result<()> {
    let command = match command.split_first() {
        Some((dashes, rest)) if dashes == "--" => rest,
        _ => command,
    };
    let (program, args) = command
        .split_first()
        .context("`--relay` wants a command: `--relay -- CMD [ARGS...]`")?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("relay: cannot run `{program}`"))?;
    let child_in = child.stdin.take().context("relay: no child stdin")?;
    let child_out = child.stdout.take().context("relay: no child stdout")?;
    let (input, output) = relay_stdio()?;
    let (up, down) = tokio::join!(pump(input, child_in), pump(child_out, output));
    let status = child.wait().await?;
    up.context("relay: copying to the upstream")?;
    down.context("relay: copying from the upstream")?;
    if !status.success() {
        bail!("relay: `{program}` exited with {status}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Starting the fronts.

/// The per-run temporary directory and the children's stderr log files in it.
struct Run {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Run {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self, name: &str) -> Result<std::fs::File> {
        let p = self.path(&format!("{name}.log"));
        std::fs::File::create(&p).with_context(|| format!("cannot create `{}`", p.display()))
    }

    fn tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines
            .get(lines.len().saturating_sub(20)..)
            .unwrap_or_default()
            .join("\n")
    }

    fn office(&self, front: FrontKind, k: usize) -> PathBuf {
        self.path(&format!("office-{}-{k}.json", front.name()))
    }

    fn demo_tools(&self, front: FrontKind, k: usize) -> Vec<String> {
        vec![
            self.bin.display().to_string(),
            "demo-tools".into(),
            "--state".into(),
            self.office(front, k).display().to_string(),
        ]
    }
}

fn command(program: &Path, args: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_remove("SECURECLAW_KEYS")
        .env_remove("SECURECLAW_KEYS_FILE")
        .env_remove("SECURECLAW_STATE_DIR")
        .env_remove("SECURECLAW_STORE")
        .kill_on_drop(true);
    cmd
}

/// An rmcp client of a child process speaking MCP on its stdio; its stderr goes to `log`.
async fn spawn_stdio(run: &Run, log: &str, program: &Path, args: &[String]) -> Result<Client> {
    let (transport, _) = TokioChildProcess::builder(command(program, args))
        .stderr(Stdio::from(run.log(log)?))
        .spawn()
        .with_context(|| format!("cannot run `{}`", program.display()))?;
    match ().serve(transport).await {
        Ok(c) => Ok(c),
        Err(e) => bail!(
            "{log}: MCP initialize with `{}` {args:?} failed: {e}\n{}",
            program.display(),
            run.tail(log)
        ),
    }
}

/// `[gateway.limits]` shared by `wrap` and `serve`: no rate or pending limit in the way.
const LIMITS: &str = "[gateway.limits]\nmax_pending_per_session = 1000000\nsession_burst = 1000000\ntool_burst = 1000000\nsession_rate_per_s = 1000000\ntool_rate_per_s = 1000000\n";

/// One front: its clients, the tool-name prefix each client uses, and its child processes
/// that are not owned by a client (the `serve` process).
struct Front {
    kind: FrontKind,
    clients: Vec<Arc<Client>>,
    prefixes: Vec<String>,
    server: Option<tokio::process::Child>,
}

async fn start_front(run: &Run, kind: FrontKind, n: usize) -> Result<Front> {
    let mut front = Front {
        kind,
        clients: Vec::with_capacity(n),
        prefixes: vec![String::new(); n],
        server: None,
    };
    let bin = run.bin.clone();
    match kind {
        FrontKind::Direct => {
            for k in 0..n {
                let args = run.demo_tools(kind, k);
                let args = args.get(1..).unwrap_or_default();
                let c = spawn_stdio(run, &format!("direct-{k}"), &bin, args).await?;
                front.clients.push(Arc::new(c));
            }
        }
        FrontKind::Relay => {
            let me = std::env::current_exe().context("cannot find this driver's executable")?;
            for k in 0..n {
                let mut args = vec!["--relay".to_owned(), "--".to_owned()];
                args.extend(run.demo_tools(kind, k));
                let c = spawn_stdio(run, &format!("relay-{k}"), &me, &args).await?;
                front.clients.push(Arc::new(c));
            }
        }
        FrontKind::Wrap => {
            let limits = run.path("wrap-limits.toml");
            std::fs::write(&limits, LIMITS)?;
            for k in 0..n {
                let mut args = vec![
                    "--state-dir".to_owned(),
                    run.path(&format!("wrap-state-{k}")).display().to_string(),
                    "wrap".into(),
                    "--config".into(),
                    limits.display().to_string(),
                    "--task".into(),
                    TASK.into(),
                    "--trusted-target".into(),
                    RECIPIENT.into(),
                    "--".into(),
                ];
                args.extend(run.demo_tools(kind, k));
                let c = spawn_stdio(run, &format!("wrap-{k}"), &bin, &args).await?;
                front.clients.push(Arc::new(c));
            }
        }
        FrontKind::Serve => start_serve(run, &mut front, n).await?,
    }
    Ok(front)
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a local port")?;
    Ok(l.local_addr()?.port())
}

async fn http_json(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: Option<&Value>,
) -> Result<(u16, Value)> {
    let req = match body {
        Some(b) => http
            .post(url)
            .header("content-type", "application/json")
            .body(b.to_string()),
        None => http.get(url),
    };
    let resp = req.bearer_auth(token).send().await?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, v))
}

async fn start_serve(run: &Run, front: &mut Front, n: usize) -> Result<()> {
    let port = free_port()?;
    let mut config = format!(
        "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n[server.limits]\nmax_connections_per_peer = 1024\nmax_in_flight_per_peer = 1024\n\n{LIMITS}"
    );
    for k in 0..n {
        let mut cmd = run.demo_tools(FrontKind::Serve, k);
        let exe = cmd.remove(0);
        let _ = write!(
            config,
            "\n[[upstream]]\nid = \"office{k}\"\ntransport = \"stdio\"\ncommand = {}\nargs = {}\n",
            json!(exe),
            json!(cmd)
        );
    }
    let cfg = run.path("serve.toml");
    std::fs::write(&cfg, config)?;
    let mut cmd = command(
        &run.bin,
        &[
            "--state-dir".into(),
            run.path("serve-state").display().to_string(),
            "serve".into(),
            "--config".into(),
            cfg.display().to_string(),
        ],
    );
    cmd.env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(run.log("serve")?));
    let mut child = cmd.spawn().context("cannot run `secureclaw serve`")?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build an HTTP client")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("serve exited with {status}:\n{}", run.tail("serve"));
        }
        if let Ok((200, _)) = http_json(&http, &format!("{base}/health"), "", None).await {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "serve did not answer /health in 120 s:\n{}",
                run.tail("serve")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    front.server = Some(child);
    for k in 0..n {
        let body = json!({"caller": format!("bench-{k}"),
                          "task": {"request": TASK, "trusted_targets": [RECIPIENT]}});
        let (status, v) =
            http_json(&http, &format!("{base}/v1/sessions"), OPERATOR, Some(&body)).await?;
        let Some(token) = v
            .get("session_id")
            .and_then(Value::as_str)
            .filter(|_| status == 200)
        else {
            bail!("POST /v1/sessions: {status} {v}");
        };
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp"))
            .auth_header(token.to_owned())
            .reinit_on_expired_session(false);
        let client = match ().serve(StreamableHttpClientTransport::from_config(config)).await {
            Ok(c) => c,
            Err(e) => bail!("serve /mcp initialize failed: {e}\n{}", run.tail("serve")),
        };
        front.clients.push(Arc::new(client));
        if let Some(p) = front.prefixes.get_mut(k) {
            *p = format!("office{k}__");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Calls, slices, figures.

/// One `tools/call`; an error result (a denial included) is a failure.
async fn call(client: &Client, tool: &str, arguments: JsonObject) -> Result<()> {
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match client.call_tool_once(params).await? {
        CallToolResponse::Complete(r) if r.is_error != Some(true) => Ok(()),
        other => bail!("`{tool}` did not complete: {other:?}"),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One series' samples: per-call round trips (ns) and the wall time of its slices.
#[derive(Default)]
struct Samples {
    ns: Vec<u64>,
    wall: Duration,
}

/// One slice: every client of `front` makes `batch` calls of `op` back to back, the clients
/// concurrently. Returns the round trips and the slice's wall time.
async fn slice(
    front: &Front,
    op: Op,
    tag: &str,
    first: usize,
    batch: usize,
) -> Result<(Vec<u64>, Duration)> {
    let mut set = tokio::task::JoinSet::new();
    let start = Instant::now();
    for (k, (client, prefix)) in front.clients.iter().zip(&front.prefixes).enumerate() {
        let client = Arc::clone(client);
        let tool = format!("{prefix}{}", op.tool());
        let label = format!("{}-{}/{tag}c{k}", front.kind.name(), op.name());
        set.spawn(async move {
            let mut ns = Vec::with_capacity(batch);
            for i in first..first + batch {
                let arguments = op.arguments(format!("{label}/n{i}"));
                let t = Instant::now();
                call(&client, &tool, arguments)
                    .await
                    .with_context(|| format!("{label}, call {i}"))?;
                ns.push(nanos(t.elapsed()));
            }
            Ok::<_, anyhow::Error>(ns)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r.context("a client task failed")??);
    }
    Ok((all, start.elapsed()))
}

struct Summary {
    n: usize,
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
        n: ns.len(),
        p50: pct(50.0),
        p90: pct(90.0),
        p99: pct(99.0),
        max: pct(100.0),
        mean: ns.iter().map(|&v| v as f64).sum::<f64>() / ns.len().max(1) as f64 / 1000.0,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unavailable".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// `n` times: write 4 KiB to a file in `dir` and `fdatasync` it; round trips in ns.
/// `append`: at its end, so the file grows and each `fdatasync` also commits the new size
/// (what `effects_load.py` measures); otherwise over the same 4 KiB block, written once first,
/// so no metadata changes (what a reused SQLite WAL page costs). `spaced`: a pause of 0 to
/// 4.9 ms (varying) before each probe, so that probes do not start in step with a periodic
/// flush of the disk, if it has one (a gateway's fsyncs arrive at random moments).
fn fsync_probe(dir: &Path, n: usize, append: bool, spaced: bool) -> Result<Vec<u64>> {
    use std::os::unix::fs::FileExt as _;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)
        .with_context(|| format!("cannot create `{}`", path.display()))?;
    let buf = [b'x'; 4096];
    if !append {
        f.write_all(&buf)?;
        f.sync_all()?;
    }
    let mut ns = Vec::with_capacity(n);
    for i in 0..n {
        if spaced {
            let gap = u64::try_from(i).unwrap_or(0).wrapping_mul(700) % 4900;
            std::thread::sleep(Duration::from_micros(gap));
        }
        let t = Instant::now();
        if append {
            f.write_all(&buf)?;
        } else {
            f.write_all_at(&buf, 0)?;
        }
        f.sync_data()?;
        ns.push(nanos(t.elapsed()));
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(ns)
}

/// The three fsync probes, `n` each: append, overwrite, overwrite spaced.
fn fsync_probes(dir: &Path, n: usize) -> Result<[Vec<u64>; 3]> {
    Ok([
        fsync_probe(dir, n, true, false)?,
        fsync_probe(dir, n, false, false)?,
        fsync_probe(dir, n, false, true)?,
    ])
}

/// E-mails in the offices of `front` whose subject starts with the series' prefix:
/// (e-mails, distinct subjects, subjects sent more than once).
fn sent_mails(run: &Run, front: FrontKind, clients: usize) -> Result<(usize, usize, usize)> {
    let prefix = format!("{}-effect/", front.name());
    let mut subjects: BTreeMap<String, usize> = BTreeMap::new();
    for k in 0..clients {
        let path = run.office(front, k);
        let state = secureclaw_demo_tools::load_state(&path)
            .with_context(|| format!("cannot read the office `{}`", path.display()))?;
        for m in state
            .sent
            .into_iter()
            .filter(|m| m.subject.starts_with(&prefix))
        {
            *subjects.entry(m.subject).or_default() += 1;
        }
    }
    let mails = subjects.values().sum();
    let double = subjects.values().filter(|&&n| n > 1).count();
    Ok((mails, subjects.len(), double))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() && b.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--relay") {
        return relay(args.get(1..).unwrap_or_default()).await;
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let o = parse_options(&args)?;
    // rmcp's HTTP client is reqwest built without a TLS provider; the driver speaks plain
    // HTTP but the builder still wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let dir = match &o.tmp {
        Some(parent) => tempfile::tempdir_in(parent)
            .with_context(|| format!("cannot create a directory in `{}`", parent.display()))?,
        None => tempfile::tempdir()?,
    };
    let run = Run {
        bin: o.bin.clone(),
        dir,
    };
    let version = std::process::Command::new(&o.bin)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();

    println!("command: stdio_roundtrip {}", args.join(" "));
    println!("binary: {} ({version})", o.bin.display());
    println!("state: {}", run.dir.path().display());
    println!(
        "{} client(s) per front; {} measured calls per client and series after {} warm-up calls; slices of {} calls per client",
        o.clients, o.iterations, o.warmup, o.batch
    );
    let load_start = load_average();
    let fsync_start = fsync_probes(run.dir.path(), o.fsync_probes)?;

    let mut fronts = Vec::new();
    for &kind in &o.fronts {
        fronts.push(start_front(&run, kind, o.clients).await?);
    }
    let result = measure(&o, &fronts).await;

    // Close every client (stdio children see end of input), then stop `serve`.
    let mut served = Vec::new();
    for front in fronts {
        for c in front.clients {
            if let Ok(c) = Arc::try_unwrap(c) {
                let _ = c.cancel().await;
            }
        }
        if let Some(mut child) = front.server {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        served.push(front.kind);
    }
    let series = result?;

    let fsync_end = fsync_probes(run.dir.path(), o.fsync_probes)?;
    let load_end = load_average();

    println!("load average: start {load_start}, end {load_end}");
    println!(
        "fsync (4 KiB write + fdatasync, {} probes per kind, in {}):",
        o.fsync_probes,
        run.dir.path().display()
    );
    let mut fs_p50 = [0.0; 3];
    let kinds = [
        "append (file grows), back to back",
        "overwrite (same block), back to back",
        "overwrite (same block), spaced 0-4.9 ms",
    ];
    for (i, ((kind, start), end)) in kinds.iter().zip(&fsync_start).zip(&fsync_end).enumerate() {
        let (s, e) = (summarize(start.clone()), summarize(end.clone()));
        let all = summarize([start.as_slice(), end.as_slice()].concat());
        println!(
            "  {kind}: start p50 {:.0} µs p90 {:.0} µs; end p50 {:.0} µs p90 {:.0} µs; both p50 {:.0} µs",
            s.p50, s.p90, e.p50, e.p90, all.p50
        );
        if let Some(p) = fs_p50.get_mut(i) {
            *p = all.p50;
        }
    }
    let [fs_append, fs_overwrite, fs_spaced] = fs_p50;
    println!();
    println!("times in µs; calls/s = calls of the series ÷ wall time of its slices");
    println!();
    println!("| series | clients | n | p50 | p90 | p99 | max | mean | calls/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut sums: BTreeMap<(FrontKind, Op), (Summary, f64)> = BTreeMap::new();
    for ((kind, op), s) in series {
        let secs = s.wall.as_secs_f64();
        let sum = summarize(s.ns);
        #[expect(clippy::cast_precision_loss, reason = "call counts far below 2^52")]
        let rate = if secs > 0.0 {
            sum.n as f64 / secs
        } else {
            f64::NAN
        };
        println!(
            "| {} {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            kind.name(),
            op.name(),
            o.clients,
            sum.n,
            sum.p50,
            sum.p90,
            sum.p99,
            sum.max,
            sum.mean,
            rate
        );
        sums.insert((kind, op), (sum, rate));
    }
    println!();
    let get = |k: FrontKind, op: Op| sums.get(&(k, op));
    let line = |label: &str, a: Option<&(Summary, f64)>, b: Option<&(Summary, f64)>, add: f64| {
        if let (Some((a, ar)), Some((b, br))) = (a, b) {
            println!(
                "{label}: p50 {}, p99 {}, mean {}; throughput {}",
                ratio(a.p50, b.p50 + add),
                ratio(a.p99, b.p99 + add),
                ratio(a.mean, b.mean + add),
                ratio(*br, *ar)
            );
        }
    };
    use FrontKind::{Direct, Relay, Serve, Wrap};
    line(
        "relay read / direct read",
        get(Relay, Op::Read),
        get(Direct, Op::Read),
        0.0,
    );
    line(
        "wrap read / relay read (target <= 1.3x)",
        get(Wrap, Op::Read),
        get(Relay, Op::Read),
        0.0,
    );
    for (kind, fs) in [
        ("overwrite spaced", fs_spaced),
        ("overwrite", fs_overwrite),
        ("append", fs_append),
    ] {
        line(
            &format!("wrap effect / (relay effect + fsync {kind} p50 {fs:.0} µs) (target <= 1.3x)"),
            get(Wrap, Op::Effect),
            get(Relay, Op::Effect),
            fs,
        );
    }
    line(
        "wrap effect / relay effect (no fsync added)",
        get(Wrap, Op::Effect),
        get(Relay, Op::Effect),
        0.0,
    );
    line(
        "serve read / wrap read (target <= 1.2x)",
        get(Serve, Op::Read),
        get(Wrap, Op::Read),
        0.0,
    );
    line(
        "serve effect / wrap effect (target <= 1.2x)",
        get(Serve, Op::Effect),
        get(Wrap, Op::Effect),
        0.0,
    );
    println!("(throughput ratios are the second series' calls/s ÷ the first's: above 1x = slower)");

    if o.ops.contains(&Op::Effect) {
        println!();
        println!("| front | effects answered | e-mails sent | distinct | sent twice or more |");
        println!("|---|---:|---:|---:|---:|");
        let answered = o.clients * (o.iterations + o.warmup);
        for kind in served {
            let (mails, distinct, double) = sent_mails(&run, kind, o.clients)?;
            println!(
                "| {} | {answered} | {mails} | {distinct} | {double} |",
                kind.name()
            );
            if mails != answered || double != 0 {
                println!("  MISMATCH: answered effects and e-mails sent differ");
            }
        }
    }
    Ok(())
}

/// Warm-up, then the measured slices, series taking turns in an order that rotates each round.
async fn measure(o: &Options, fronts: &[Front]) -> Result<BTreeMap<(FrontKind, Op), Samples>> {
    let mut series: Vec<(&Front, Op)> = Vec::new();
    for f in fronts {
        for &op in &o.ops {
            series.push((f, op));
        }
    }
    for (f, op) in &series {
        for (c, prefix) in f.clients.iter().zip(&f.prefixes) {
            let tools = c.list_all_tools().await?;
            let want = format!("{prefix}{}", op.tool());
            if !tools.iter().any(|t| t.name == want) {
                bail!("{}: `{want}` is not listed", f.kind.name());
            }
        }
    }
    let mut done = 0;
    while done < o.warmup {
        let b = o.batch.min(o.warmup - done);
        for (f, op) in &series {
            slice(f, *op, "warm/", done, b).await?;
        }
        done += b;
    }
    let mut out: BTreeMap<(FrontKind, Op), Samples> = BTreeMap::new();
    let mut done = 0;
    let mut round = 0;
    while done < o.iterations {
        let b = o.batch.min(o.iterations - done);
        let len = series.len();
        for j in 0..len {
            // Rotate the order, and reverse it every other round.
            let idx = if round % 2 == 0 {
                (j + round) % len
            } else {
                (len - 1 - j + round) % len
            };
            let Some((f, op)) = series.get(idx) else {
                continue;
            };
            let (ns, wall) = slice(f, *op, "", done, b).await?;
            let s = out.entry((f.kind, *op)).or_default();
            s.ns.extend(ns);
            s.wall += wall;
        }
        done += b;
        round += 1;
    }
    Ok(out)
}
