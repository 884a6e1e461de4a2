//! `secureclaw trace exposure`: each observer's marginal exposure Δ_i = O_i(S) \ O_i(C) for
//! one session's task (Ghost Tool Calls, arXiv 2606.02483 §3), read from the audit log.

use crate::stack;
use anyhow::{Result, bail};
use clap::Subcommand;
use secureclaw_core::exposure::{Observation, ObserverExposure};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// `secureclaw trace …`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Print what each observer (provider, network, runtime log, co-tenant, auditor) saw of
    /// the session beyond what the committed calls alone would have shown it.
    Exposure {
        /// Session id (as returned when the session was opened).
        #[arg(long)]
        session: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// List every item of Δ (default: the first 10 per observer).
        #[arg(long)]
        all: bool,
    },
}

/// Run a trace subcommand against the state directory.
///
/// # Errors
/// The state directory holds no SecureClaw database (nothing is created), the store cannot be
/// opened or read, or the session is unknown.
pub async fn trace(
    state_dir: &Path,
    store_url: Option<&str>,
    cmd: TraceCommand,
) -> Result<ExitCode> {
    let (_, store) = stack::open_existing_state(state_dir, store_url).await?;
    match cmd {
        TraceCommand::Exposure { session, json, all } => {
            // A session the retention sweep removed is still in the audit log, which is
            // where its trace comes from.
            if store.session(&session).await?.is_none()
                && secureclaw_gateway::session_trace(store.as_ref(), &session)
                    .await?
                    .0
                    .is_empty()
            {
                bail!(
                    "unknown session `{session}` in `{}` (session ids are in `secureclaw audit export`)",
                    state_dir.display()
                );
            }
            let report = secureclaw_gateway::session_exposure(store.as_ref(), &session).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"session": session, "observers": report})
                    )?
                );
            } else {
                print!("{}", render(&report, if all { usize::MAX } else { 10 }));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per item of Δ.
fn item(o: &Observation) -> String {
    match o {
        Observation::Call { tool, destination } => format!("call {tool} -> {destination}"),
        Observation::Field { tool, path, value } => format!("field {tool} {path} = {value:?}"),
        Observation::Flow {
            host,
            bytes,
            bucket,
        } => {
            format!("flow {host} {bytes} B at {}.{} s", bucket / 10, bucket % 10)
        }
        Observation::LogLine {
            tool,
            summary,
            decision,
            duration_bucket,
        } => format!(
            "log {tool} [{decision}] {summary:?} ~{} ms",
            duration_bucket * 100
        ),
        Observation::CacheKey { key, bucket } => {
            format!("cache {key} at {}.{} s", bucket / 10, bucket % 10)
        }
        Observation::AuditRecord { tool, decision } => format!("audit {tool} [{decision}]"),
    }
}

/// The exposure table: observer, |O(S)|, |O(C)|, |Δ|, then up to `limit` items of each Δ.
#[must_use]
pub fn render(report: &[ObserverExposure], limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:>10} {:>6}",
        "observer", "issued", "committed", "|Δ|"
    );
    for x in report {
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>10} {:>6}",
            x.observer.as_str(),
            x.issued,
            x.committed,
            x.marginal.len()
        );
    }
    for x in report.iter().filter(|x| !x.marginal.is_empty()) {
        let _ = writeln!(out, "Δ {}:", x.observer.as_str());
        for o in x.marginal.iter().take(limit) {
            let _ = writeln!(out, "  {}", item(o));
        }
        if x.marginal.len() > limit {
            let _ = writeln!(out, "  … {} more (--all)", x.marginal.len() - limit);
        }
    }
    out
}
