//! `secureclaw bypass`: the commit-path bypass suite (wiring only; the cases live in
//! `secureclaw-eval`).

use anyhow::{Context, Result};
use clap::Args;
use secureclaw_eval::{Target, payment};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `secureclaw bypass`.
#[derive(Debug, Args)]
pub struct BypassArgs {
    /// Attack a running `secureclaw serve` (http://host:port) that fronts the demo office,
    /// instead of a fresh in-process stack. Cases that need trusted-side powers the HTTP API
    /// does not give (clock, keys, restart, policy set) are reported as SKIP.
    #[arg(long)]
    url: Option<String>,
    /// Operator token for --url (default: operator.token in the state directory).
    #[arg(long, env = "SECURECLAW_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Run the suite, print the table, exit non-zero on any mismatch.
pub async fn run(state_dir: &Path, args: BypassArgs) -> Result<ExitCode> {
    let target = match &args.url {
        Some(url) => {
            let token = match args.operator_token {
                Some(t) => t,
                None => {
                    let path = state_dir.join("operator.token");
                    std::fs::read_to_string(&path)
                        .with_context(|| {
                            format!(
                                "--url needs the operator token: pass --operator-token or keep it in `{}`",
                                path.display()
                            )
                        })?
                        .trim()
                        .to_owned()
                }
            };
            Target::http(url, token)?
        }
        None => Target::InProcess(Box::new(secureclaw_eval::stack::Stack::start().await?)),
    };
    let report = secureclaw_eval::run(&target).await?;
    print!("{}", report.table());
    let (on_allow, on_refuse) = report.tally(payment::ON);
    let (off_allow, off_refuse) = report.tally(payment::OFF);
    println!(
        "payment study (Table 18): boundary on {on_allow} allow / {on_refuse} deny; boundary off {off_allow} allow / {off_refuse} deny"
    );
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
