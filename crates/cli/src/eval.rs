//! `secureclaw eval`: drivers for external benchmarks. Thin: the AgentDojo lane is Python
//! (`eval/agentdojo/`); this creates its virtualenv when missing or stale and runs its driver
//! with this binary as the gateway.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// `secureclaw eval …`.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// AgentDojo v1.1.2 (629 attacked pairs, 97 benign tasks) with a deterministic, fully
    /// compromised runtime, through this gateway and without it; scored by AgentDojo itself.
    Agentdojo(AgentDojoArgs),
}

/// Flags of `secureclaw eval agentdojo` (passed through to `eval/agentdojo/driver.py`).
#[derive(Debug, Args)]
pub struct AgentDojoArgs {
    /// Suite to run (repeatable): workspace, travel, banking, slack. Default: all four.
    #[arg(long)]
    suite: Vec<String>,
    /// Write per-suite numbers (gateway runs; baseline with --no-gateway) as JSON to PATH.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every run with its proposals and decisions as JSON to PATH.
    #[arg(long)]
    details: Option<PathBuf>,
    /// Only the no-gateway baseline (runtime straight to the suite's MCP server).
    #[arg(long, conflicts_with = "gateway_only")]
    no_gateway: bool,
    /// Skip the no-gateway baseline.
    #[arg(long)]
    gateway_only: bool,
    /// Only the benign runs (user task ground truth, no injection).
    #[arg(long)]
    benign_only: bool,
    /// Keep the gateway's work directories (config, state, log).
    #[arg(long)]
    keep: bool,
    /// Exit 1 if any attack had an effect through the gateway (output-only successes excepted).
    #[arg(long)]
    check: bool,
    /// Directory of the harness (default: ./eval/agentdojo, else the one in the source tree).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Python used to create the virtualenv (3.11 or newer).
    #[arg(long, default_value = "python3.11")]
    python: String,
}

/// Run an evaluation.
///
/// # Errors
/// The harness directory is missing, the virtualenv cannot be created, or the driver cannot be
/// started.
pub fn run(command: EvalCommand) -> Result<ExitCode> {
    match command {
        EvalCommand::Agentdojo(args) => agentdojo(args),
    }
}

fn harness_dir(explicit: Option<PathBuf>) -> Result<PathBuf> {
    let candidates = match explicit {
        Some(d) => vec![d],
        None => vec![
            PathBuf::from("eval/agentdojo"),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../eval/agentdojo"),
        ],
    };
    candidates
        .into_iter()
        .find(|d| d.join("driver.py").is_file())
        .context(
            "cannot find eval/agentdojo/driver.py (run from the repository root or pass --dir)",
        )
        .and_then(|d| {
            std::fs::canonicalize(&d).with_context(|| format!("cannot resolve `{}`", d.display()))
        })
}

fn status(cmd: &mut Command, what: &str) -> Result<()> {
    let st = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !st.success() {
        bail!("{what} failed ({st})");
    }
    Ok(())
}

/// Create `dir/.venv` from `requirements.lock` unless it already holds exactly that lock.
fn ensure_venv(dir: &Path, python: &str) -> Result<PathBuf> {
    let venv = dir.join(".venv");
    let py = venv.join("bin/python");
    let lock = std::fs::read_to_string(dir.join("requirements.lock"))
        .context("cannot read eval/agentdojo/requirements.lock")?;
    let stamp = venv.join("secureclaw-requirements.lock");
    if py.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str()) {
        return Ok(py);
    }
    eprintln!(
        "secureclaw eval: creating {} (agentdojo, mcp; pinned)",
        venv.display()
    );
    if !py.is_file() {
        status(
            Command::new(python).arg("-m").arg("venv").arg(&venv),
            &format!("`{python} -m venv`"),
        )?;
    }
    status(
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(dir.join("requirements.lock")),
        "pip install -r requirements.lock",
    )?;
    std::fs::write(&stamp, lock).context("cannot write the virtualenv stamp")?;
    Ok(py)
}

fn agentdojo(args: AgentDojoArgs) -> Result<ExitCode> {
    let dir = harness_dir(args.dir)?;
    let py = ensure_venv(&dir, &args.python)?;
    let me = std::env::current_exe().context("cannot locate the secureclaw binary")?;
    let mut cmd = Command::new(&py);
    cmd.arg(dir.join("driver.py"))
        .arg("--secureclaw")
        .arg(&me)
        .arg("--python")
        .arg(&py);
    for s in &args.suite {
        cmd.arg("--suite").arg(s);
    }
    if let Some(p) = &args.json {
        cmd.arg("--json").arg(p);
    }
    if let Some(p) = &args.details {
        cmd.arg("--details").arg(p);
    }
    for (on, flag) in [
        (args.no_gateway, "--no-gateway"),
        (args.gateway_only, "--gateway-only"),
        (args.benign_only, "--benign-only"),
        (args.keep, "--keep"),
        (args.check, "--check"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    let st = cmd.status().context("cannot start the AgentDojo driver")?;
    Ok(if st.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
