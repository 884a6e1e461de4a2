//! `secureclaw`: a trusted gateway between AI agent runtimes and their tools.
//!
//! Thin wiring: one module per subcommand. See `secureclaw --help`.

mod bypass;
mod check;
mod commands;
mod config;
mod demo;
mod demo_speculative;
mod eval;
mod guard;
mod stack;
mod state;
mod store_cmd;
mod telemetry;
mod tools;
mod trace;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// SecureClaw: sensitive tool output becomes handles and summaries; effectful calls are
/// previewed, authorized by policy, bound to the exact request and executed at most once.
///
/// State (keys, database, operator token) lives in --state-dir, default $SECURECLAW_HOME,
/// else $XDG_STATE_HOME/secureclaw, else ~/.local/state/secureclaw. Logs go to stderr:
/// one line per tool-call decision at info, a warning naming the approve command when an
/// action waits for approval (--log-level, --log-format json).
#[derive(Debug, Parser)]
#[command(name = "secureclaw", version, propagate_version = true)]
struct Cli {
    /// State directory (keys.json, secureclaw.db, operator.token).
    #[arg(long, global = true, env = "SECURECLAW_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Store URL (`postgres://user@host:5432/db`): keep sessions, vault, ledger, approvals
    /// and audit log in PostgreSQL, shared by several gateways, instead of the state
    /// directory's SQLite database (keys stay in the state directory or $SECURECLAW_KEYS[_FILE]).
    /// Overrides `[store] url`.
    #[arg(
        long = "store",
        global = true,
        env = "SECURECLAW_STORE",
        value_name = "URL"
    )]
    store_url: Option<String>,
    /// Log format on stderr: `text` (colour only on a terminal) or `json` (one JSON object
    /// per line, for log collectors).
    #[arg(
        long,
        global = true,
        env = "SECURECLAW_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    /// Log level or filter (`error`, `warn`, `info`, `debug`, `trace`, or an `EnvFilter`
    /// directive list such as `info,secureclaw::decision=off`). Wins over RUST_LOG; default
    /// `info`. rmcp is capped at `error` whatever is asked: it logs whole protocol messages.
    #[arg(
        long,
        global = true,
        env = "SECURECLAW_LOG_LEVEL",
        value_name = "LEVEL"
    )]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message` and the fields).
    Json,
}

/// Warn the operator on stderr: `secureclaw: warning: MESSAGE` in text mode (whatever the
/// log level), a `warn` log record in JSON mode.
pub(crate) fn warn_operator(message: &str) {
    if JSON_LOGS.get().copied().unwrap_or(false) {
        tracing::warn!(target: "secureclaw", "{message}");
    } else {
        eprintln!("secureclaw: warning: {message}");
    }
}

/// Whether logs are JSON (set once at start; banners then go through the log too).
static JSON_LOGS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Tell the operator something on stderr: `secureclaw: MESSAGE` in text mode, an `info` log
/// record (target `secureclaw`) in JSON mode so that every stderr line parses.
pub(crate) fn say(message: &str) {
    if JSON_LOGS.get().copied().unwrap_or(false) {
        tracing::info!(target: "secureclaw", "{message}");
    } else {
        eprintln!("secureclaw: {message}");
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one stdio MCP server behind the gateway and serve it on stdio (the drop-in).
    ///
    /// Example: secureclaw wrap --task "Tidy the notes in /srv/notes/" --trusted-target /srv/notes/ --
    /// npx -y @modelcontextprotocol/server-filesystem /srv/notes
    Wrap(commands::WrapArgs),
    /// Run the gateway from a config file: HTTP API + Streamable HTTP MCP at /mcp.
    Serve(commands::ServeArgs),
    /// Run the paper's running example through the real stack and print a transcript.
    Demo(demo::DemoArgs),
    /// List, approve or deny actions waiting for the user's confirmation.
    #[command(subcommand)]
    Approvals(commands::ApprovalsCommand),
    /// List or revoke standing grants (created with `approvals approve --allow-for/--uses`).
    #[command(subcommand)]
    Grants(commands::GrantsCommand),
    /// Verify or export the hash-chained audit log.
    #[command(subcommand)]
    Audit(commands::AuditCommand),
    /// Validate a policy set (the built-in defaults plus .cedar files).
    #[command(subcommand)]
    Policy(commands::PolicyCommand),
    /// Check a config file against the tools its upstreams list.
    #[command(subcommand)]
    Config(check::ConfigCommand),
    /// Inspect a session's speculative trace: marginal exposure per observer.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Review and approve upstream tool definitions: list their pins, diff a changed tool,
    /// pin what the upstreams list now (a changed or new tool is hidden until pinned).
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
    /// List, rotate or retire keys.
    #[command(subcommand)]
    Keys(commands::KeysCommand),
    /// Maintain the store: sweep the state of sessions that expired more than `[store]
    /// retention_ms` ago (the ledger, approvals and audit log are kept).
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Run the commit-path bypass suite (paper Tables 17 and 18 and more) against the real
    /// stack in process, or against a running `secureclaw serve` with --url.
    Bypass(bypass::BypassArgs),
    /// Run an evaluation harness (AgentDojo with a compromised runtime; ghost-call privacy).
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Serve the demo office MCP tool server on stdio (used by `demo` and `examples/`), or
    /// over Streamable HTTP with --http.
    #[command(hide = true)]
    DemoTools {
        /// State file of the demo office (created with seeded data when missing).
        #[arg(long)]
        state: PathBuf,
        /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8790).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Load tests: append each effect as a JSON line to PATH and keep the state in memory
        /// instead of rewriting the state file per effect (stdio only).
        #[arg(long, value_name = "PATH", conflicts_with = "http")]
        journal: Option<PathBuf>,
    },
    /// Serve one research provider of the speculative demo on stdio (used by `demo --speculative`).
    #[command(hide = true)]
    ResearchTools {
        /// Provider name, recorded in its log.
        #[arg(long)]
        provider: String,
        /// Tools to serve, comma-separated (default: all).
        #[arg(long, value_delimiter = ',')]
        tools: Vec<String>,
        /// Provider log: every request received is appended here.
        #[arg(long)]
        log: PathBuf,
    },
    /// Serve a misbehaving MCP server for the transport tests (issue 12): see
    /// `secureclaw_demo_tools::fault` for the modes.
    #[command(hide = true)]
    FaultUpstream {
        /// The fault: ok, die-after-effect, 404-after-effect, hang-call, hang-list,
        /// endless-line, deep-schema, wrong-id, duplicate-reply, input-required, rug-pull,
        /// rug-pull-after-effect, drop-after-effect.
        #[arg(long)]
        mode: String,
        /// Every effect (`pay`) appends a line here before the fault.
        #[arg(long)]
        effects: PathBuf,
        /// Serve Streamable HTTP on this address (port 0 picks one) instead of stdio.
        #[arg(long)]
        http: Option<String>,
    },
}

/// Targets capped at `error` whatever `RUST_LOG` says: rmcp logs whole protocol messages
/// (upstream results, resolved arguments) at `debug` and `trace`, and some at `warn`; a
/// protected value must not reach the log at any level (issue 12 item 7). `tokio_postgres`
/// logs statement parameters at `debug` and the server's NOTICEs (`relation … already
/// exists, skipping` on every start) at `info`: capped at `warn`.
const CAPPED_TARGETS: &[&str] = &["rmcp=error", "tokio_postgres=warn"];

/// Build the log filter: `--log-level`, else `RUST_LOG`, else `info`; then the caps.
fn log_filter(level: Option<&str>) -> Result<tracing_subscriber::EnvFilter, String> {
    use tracing_subscriber::EnvFilter;
    let mut filter = match level {
        Some(l) => EnvFilter::try_new(l).map_err(|e| format!("--log-level `{l}`: {e}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    for cap in CAPPED_TARGETS {
        if let Ok(directive) = cap.parse() {
            filter = filter.add_directive(directive);
        }
    }
    Ok(filter)
}

/// Install the subscriber: the log on stderr (events only: spans are for the trace
/// export and never prefix a log line), and the OpenTelemetry layer when `export` is set.
/// Returns the export pipeline, to flush at exit.
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    export: Option<&telemetry::Export>,
) -> Result<Option<telemetry::Pipeline>, String> {
    use tracing_subscriber::filter::{FilterExt as _, filter_fn};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{Layer as _, Registry};
    let filter = log_filter(level)?.and(filter_fn(|meta| meta.is_event()));
    let _ = JSON_LOGS.set(format == LogFormat::Json);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log: Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync> = match format {
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        // Colour only on a terminal: a log file or a pipe gets no ANSI escapes.
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
    };
    let mut layers = vec![log];
    let pipeline = match export {
        Some(export) => {
            let (layer, pipeline) = telemetry::layer(export).map_err(|e| format!("{e:#}"))?;
            layers.push(layer);
            Some(pipeline)
        }
        None => None,
    };
    tracing_subscriber::registry().with(layers).init();
    Ok(pipeline)
}

/// Where `serve` and `wrap` export their spans (`[telemetry]` of their config file, else
/// the OTLP environment variables); `None` for other commands and when nothing is set.
fn trace_export(command: &Command) -> anyhow::Result<Option<telemetry::Export>> {
    let file = match command {
        Command::Serve(args) => Some(args.config.as_path()),
        Command::Wrap(args) => args.config.as_deref(),
        _ => return Ok(None),
    };
    let section = match file {
        Some(path) => telemetry::section_of_file(path)?,
        None => telemetry::TelemetrySection::default(),
    };
    telemetry::export_of(&section, |name| std::env::var(name).ok())
}

/// `server.state_dir` of the config file at `path`, resolved against the file's directory;
/// `None` when the file is absent, unreadable or does not set it.
fn configured_state_dir(path: &std::path::Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: toml::Value = toml::from_str(&text).ok()?;
    let dir = PathBuf::from(value.get("server")?.get("state_dir")?.as_str()?);
    Some(if dir.is_relative() {
        path.parent().unwrap_or(std::path::Path::new(".")).join(dir)
    } else {
        dir
    })
}

/// `[store] url` of a config file, for operator commands run next to `serve`.
fn configured_store_url(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: toml::Value = toml::from_str(&text).ok()?;
    Some(value.get("store")?.get("url")?.as_str()?.to_owned())
}

/// The async runtime a command runs on. `wrap` serves one MCP session over stdio, whose
/// requests pass through a chain of tasks (the stdio reader, rmcp's service loop, the call's
/// own task, the upstream's client and its transport): on a multi-thread runtime each hop may
/// wake another worker thread, so a read paid several cross-thread hand-offs (futex wake-ups
/// and context switches, about a quarter of its CPU; BENCHMARKS.md §11–§12). It runs on one
/// thread instead (`SECURECLAW_WRAP_RUNTIME=multi` restores the multi-thread runtime, for
/// comparison). Everything else — `serve` with many sessions above all — keeps tokio's
/// multi-thread runtime.
fn runtime_for(command: &Command) -> tokio::runtime::Builder {
    let multi = std::env::var("SECURECLAW_WRAP_RUNTIME").is_ok_and(|v| v == "multi");
    if matches!(command, Command::Wrap(_)) && !multi {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before anything builds an HTTP client (the trace exporter's is built below).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let export = match trace_export(&cli.command) {
        Ok(export) => export,
        Err(e) => {
            eprintln!("secureclaw: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let pipeline = match init_logging(cli.log_format, cli.log_level.as_deref(), export.as_ref()) {
        Ok(pipeline) => pipeline,
        Err(e) => {
            eprintln!("secureclaw: error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("secureclaw: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let explicit_state_dir = cli.state_dir.clone();
    // Operator commands run next to `serve` find its state directory in ./secureclaw.toml
    // (new-user finding: `approvals list` looked in the default directory and found nothing).
    let operator_command = matches!(
        cli.command,
        Command::Approvals(_)
            | Command::Grants(_)
            | Command::Audit(_)
            | Command::Keys(_)
            | Command::Trace(_)
    );
    let state_dir = match cli.state_dir {
        Some(dir) => dir,
        None => match operator_command
            .then(|| configured_state_dir(std::path::Path::new("secureclaw.toml")))
            .flatten()
        {
            Some(dir) => {
                say(&format!(
                    "state directory {} (server.state_dir in ./secureclaw.toml)",
                    dir.display()
                ));
                dir
            }
            None => state::default_dir(),
        },
    };
    let explicit_store = cli.store_url.clone();
    let store_url = cli.store_url.or_else(|| {
        operator_command
            .then(|| configured_store_url(std::path::Path::new("secureclaw.toml")))
            .flatten()
    });
    let store_url = store_url.as_deref();
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Wrap(args) => {
                commands::wrap(&state_dir, explicit_store.as_deref(), args).await
            }
            Command::Serve(args) => {
                commands::serve(
                    explicit_state_dir.as_deref(),
                    explicit_store.as_deref(),
                    args,
                )
                .await
            }
            Command::Demo(args) => demo::run(args, explicit_state_dir).await,
            Command::Approvals(c) => commands::approvals(&state_dir, store_url, c).await,
            Command::Grants(c) => commands::grants(&state_dir, store_url, c).await,
            Command::Audit(c) => commands::audit(&state_dir, store_url, c).await,
            Command::Policy(c) => commands::policy(c),
            Command::Config(c) => check::run(explicit_state_dir.as_deref(), c).await,
            Command::Trace(c) => trace::trace(&state_dir, store_url, c).await,
            Command::Tools(c) => {
                tools::run(explicit_state_dir.as_deref(), explicit_store.as_deref(), c).await
            }
            Command::Keys(c) => commands::keys(&state_dir, c),
            Command::Store(c) => {
                store_cmd::run(explicit_state_dir.as_deref(), explicit_store.as_deref(), c).await
            }
            Command::Bypass(args) => bypass::run(&state_dir, args).await,
            Command::Eval(c) => eval::run(c).await,
            Command::DemoTools {
                state,
                http,
                journal,
            } => match http {
                Some(addr) => secureclaw_demo_tools::serve_http(state, &addr).await,
                None => secureclaw_demo_tools::serve_stdio(state, journal).await,
            }
            .map_err(Into::into)
            .map(|()| ExitCode::SUCCESS),
            Command::ResearchTools {
                provider,
                tools,
                log,
            } => secureclaw_demo_tools::serve_research_stdio(&provider, &tools, log)
                .await
                .map_err(Into::into)
                .map(|()| ExitCode::SUCCESS),
            Command::FaultUpstream {
                mode,
                effects,
                http,
            } => {
                use secureclaw_demo_tools::fault::{
                    FaultServer, serve_fault_http, serve_fault_stdio,
                };
                let mode = mode.parse().map_err(|e: String| anyhow::anyhow!(e))?;
                let server = FaultServer::new(mode, effects);
                match http {
                    Some(addr) => serve_fault_http(server, &addr).await,
                    None => serve_fault_stdio(server).await,
                }
                .map_err(Into::into)
                .map(|()| ExitCode::SUCCESS)
            }
        }
    });
    // Do not wait for blocking tasks still running (a stdin read that never returns after
    // `wrap` stopped on a signal): everything that matters has finished above.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    // Export the spans still queued (bounded: an unreachable collector delays the exit by at
    // most the export timeout).
    if let Some(pipeline) = pipeline {
        pipeline.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            if JSON_LOGS.get().copied().unwrap_or(false) {
                tracing::error!(target: "secureclaw", "{e:#}");
            } else {
                eprintln!("secureclaw: error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New-user finding: operator commands find `server.state_dir` in the config file.
    /// `--log-level` wins over RUST_LOG and is validated; the rmcp cap survives any level.
    #[test]
    fn log_level_is_parsed_and_rmcp_stays_capped() {
        let f = log_filter(Some("trace")).unwrap().to_string();
        assert!(f.contains("rmcp=error"), "{f}");
        assert!(f.contains("trace"), "{f}");
        assert!(log_filter(Some("info,secureclaw::decision=off")).is_ok());
        assert!(log_filter(Some("no such level=[")).is_err());
    }

    #[test]
    fn configured_state_dir_is_read_and_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("secureclaw.toml");
        std::fs::write(&cfg, "[server]\nstate_dir = \"state\"\n").unwrap();
        assert_eq!(configured_state_dir(&cfg), Some(dir.path().join("state")));
        std::fs::write(&cfg, "[server]\nhttp_bind = \"127.0.0.1:1\"\n").unwrap();
        assert_eq!(configured_state_dir(&cfg), None);
        assert_eq!(configured_state_dir(&dir.path().join("absent.toml")), None);
    }
}
