//! `secureclaw config check FILE`: everything `serve` would refuse, plus the rules that match
//! no tool once the upstreams are listed (issue 15).

use crate::config::Config;
use anyhow::{Context, Result};
use clap::Subcommand;
use secureclaw_gateway::RmcpUpstream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `secureclaw config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file: parse and validate it, load its policy files, start (stdio) or
    /// connect to (HTTP) every upstream as `serve` does, list their tools and report every
    /// `[[gateway.tools]]` or `[[gateway.classify]]` rule that applies to no tool. Exit status
    /// 1 when a rule matches nothing or anything fails.
    Check {
        /// The config file (`secureclaw.toml` if neither this nor `--config` is given).
        file: Option<PathBuf>,
        /// The config file, as `serve -c/--config` takes it.
        #[arg(long, short, conflicts_with = "file")]
        config: Option<PathBuf>,
        /// Do not start or contact the upstreams: rules are then not checked against tool
        /// names (a warning says so).
        #[arg(long)]
        offline: bool,
    },
}

/// Run a `config` subcommand.
pub async fn run(state_dir: Option<&Path>, cmd: ConfigCommand) -> Result<ExitCode> {
    let ConfigCommand::Check {
        file,
        config,
        offline,
    } = cmd;
    let file = file
        .or(config)
        .unwrap_or_else(|| PathBuf::from("secureclaw.toml"));
    let config = Config::load(&file)?;
    let policy = crate::stack::load_policy(&config.server.policy_files)?;
    println!(
        "config `{}` parses; policy set OK ({} policies)",
        file.display(),
        policy.policy_ids().count()
    );
    let dir = state_dir
        .map(Path::to_path_buf)
        .or_else(|| config.server.state_dir.clone())
        .unwrap_or_else(crate::state::default_dir);
    crate::guard::check_trusted_access(
        &crate::guard::trusted_inputs(&dir, Some(&file), &config.server.policy_files),
        &config.upstream,
        config.server.allow_upstream_state_access,
    )?;
    if offline {
        println!(
            "warning: --offline: the upstreams were not listed, so {} [[gateway.tools]] and {} [[gateway.classify]] rules were not checked against tool names",
            config.gateway.tools.len(),
            config.gateway.classify.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let startup =
        std::time::Duration::from_millis(config.gateway.limits.upstream_startup_timeout_ms);
    let mut listed = Vec::new();
    for spec in &config.upstream {
        let up = RmcpUpstream::connect(spec, startup).await?;
        let tools = secureclaw_gateway::upstream::startup_tools(&up, startup)
            .await
            .with_context(|| format!("listing the tools of upstream `{}`", spec.id))?;
        println!("upstream `{}`: {} tools", spec.id, tools.len());
        listed.extend(tools.into_iter().map(|t| (spec.id.clone(), t.name)));
    }
    let unmatched = secureclaw_gateway::rules::unmatched_rules(&config.gateway, &listed);
    for rule in &unmatched {
        println!("warning: {rule}");
    }
    // Tools are exposed as `upstream__tool` by `serve`, so a grant names them so.
    let grants = config
        .task
        .as_ref()
        .map(|t| secureclaw_gateway::rules::unmatched_grants(&t.granted_tools, &listed, &[]))
        .unwrap_or_default();
    for grant in &grants {
        println!(
            "warning: task.granted_tools `{grant}` matches no listed tool (tools are named `upstream__tool`); the grant does nothing"
        );
    }
    if !grants.is_empty() {
        println!(
            "config check failed: {} grant(s) match no tool: fix the names, or remove them",
            grants.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    if unmatched.is_empty() {
        println!(
            "every rule applies to a listed tool ({} [[gateway.tools]], {} [[gateway.classify]], {} [[gateway.directory]])",
            config.gateway.tools.len(),
            config.gateway.classify.len(),
            config.gateway.directory.len()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "config check failed: {} rule(s) apply to no tool: fix the names, or remove the rules",
            unmatched.len()
        );
        Ok(ExitCode::FAILURE)
    }
}
