//! `secureclaw store sweep`: remove expired session state now (issue 14 item 5), as the
//! background sweep of `serve` and `wrap` does every `[store] sweep_interval_ms`.

use crate::config::Config;
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use secureclaw_core::store::SweepReport;
use secureclaw_core::time::UnixMillis;
use secureclaw_gateway::sweep_backlog;
use secureclaw_server::approvals_ui::iso8601;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `secureclaw store …`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Remove the state of sessions that expired more than `[store] retention_ms` ago (default
    /// 7 days): their handles and the vault values only those handles reference, protected
    /// objects, grant uses, read amounts, written sets, speculation budget, branch states, held
    /// calls, rate buckets and the session record; and handles that expired that long ago on
    /// their own. The ledger, actions, approvals and the audit log are kept. Runs in batches of
    /// `[store] sweep_batch` sessions per transaction, safe while gateways run; prints the
    /// number of rows removed per kind. A running `serve` or `wrap` already does this at
    /// start-up and every `[store] sweep_interval_ms`. An SQLite file keeps its size: freed
    /// pages are reused for new rows.
    ///
    /// Example: secureclaw store sweep -c secureclaw.toml --dry-run
    Sweep(SweepArgs),
}

/// `secureclaw store sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The config file whose `[store]` settings (retention_ms, sweep_batch, url) and
    /// `server.state_dir` to use (as `serve -c`); --state-dir and --store win over it. Without
    /// it: the default settings (7 days) on --state-dir / --store.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Only count what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Remove state that expired more than MS milliseconds ago, instead of `[store]
    /// retention_ms` (0: everything already expired). Also sweeps when the config turns the
    /// sweep off.
    #[arg(long, value_name = "MS")]
    older_than_ms: Option<u64>,
    /// Sessions (and handles) per transaction, instead of `[store] sweep_batch`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    batch: Option<u32>,
    /// Print the counts as one JSON object (`{"dry_run":…,"cutoff_ms":…,"removed":{…}}`).
    #[arg(long)]
    json: bool,
}

/// Run a `store` subcommand.
///
/// # Errors
/// An invalid config file, no gateway state in the state directory, store failures (the
/// batches swept before a failure stay swept; their counts are printed first).
pub async fn run(
    state_dir: Option<&Path>,
    store_url: Option<&str>,
    cmd: StoreCommand,
) -> Result<ExitCode> {
    let StoreCommand::Sweep(args) = cmd;
    let config = match &args.config {
        Some(file) => Config::load(file)?,
        None => Config::default(),
    };
    let dir = state_dir
        .map(Path::to_path_buf)
        .or_else(|| config.server.state_dir.clone())
        .unwrap_or_else(crate::state::default_dir);
    let url = store_url.map(str::to_owned).or(config.store.url.clone());
    let policy = config.store.retention();
    let older_than = match args.older_than_ms {
        Some(ms) => ms,
        None if policy.retention_ms == 0 => {
            println!(
                "sweeping is off ([store] retention_ms = 0): nothing removed; pass \
                 --older-than-ms MS to sweep anyway"
            );
            return Ok(ExitCode::SUCCESS);
        }
        None => policy.retention_ms,
    };
    let batch = args.batch.unwrap_or(policy.batch);
    let (_, store) = crate::stack::open_existing_state(&dir, url.as_deref()).await?;
    let now = (secureclaw_gateway::system_clock())();
    let cutoff = UnixMillis(now.0.saturating_sub(older_than));
    let place = match &url {
        Some(_) => "the PostgreSQL store".to_owned(),
        None => crate::state::db_path(&dir).display().to_string(),
    };
    let (report, failure) = if args.dry_run {
        (store.expired_counts(cutoff).await?, None)
    } else {
        let mut swept = SweepReport::default();
        let result = sweep_backlog(store.as_ref(), cutoff, batch, &mut swept).await;
        (swept, result.err())
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "dry_run": args.dry_run,
                "cutoff_ms": cutoff.0,
                "removed": report,
                "total": report.total(),
            })
        );
    } else {
        println!(
            "{} state that expired before {} ({} ms ago) in {place}:",
            if args.dry_run {
                "would remove"
            } else {
                "removed"
            },
            iso8601(cutoff.0),
            older_than
        );
        for (kind, n) in report.kinds() {
            println!("  {kind:<20} {n:>10}");
        }
        println!("  {:<20} {:>10}", "total rows", report.total());
    }
    if let Some(e) = failure {
        bail!("the sweep stopped: {e} (the rows counted above were removed)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The default policy is what an absent `[store]` table means.
#[cfg(test)]
mod tests {
    use super::*;
    use secureclaw_gateway::RetentionPolicy;

    #[test]
    fn an_absent_store_table_means_the_default_policy() {
        assert_eq!(
            Config::default().store.retention(),
            RetentionPolicy::default()
        );
    }
}
