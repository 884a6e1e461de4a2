//! Subcommands other than `demo`.

use crate::config::Config;
use crate::{stack, state};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::keys::{KeyId, KeyPurpose};
use secureclaw_core::store::ApprovalState;
use secureclaw_gateway::{GatewayConfig, UpstreamSpec, UpstreamTransport, decide_approval};
use secureclaw_server::approvals_ui::iso8601;
use secureclaw_server::{ApiState, McpFrontEnd, SessionSource};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// `secureclaw wrap`.
#[derive(Debug, Args)]
pub struct WrapArgs {
    /// The user's task (trusted): targets it names are anchored.
    #[arg(long, default_value = "")]
    task: String,
    /// A target the user trusts for this session (address, @domain, directory ending in /, account, URL).
    #[arg(long = "trusted-target")]
    trusted_targets: Vec<String>,
    /// Caller identity of this session.
    #[arg(long, default_value = "local-user")]
    caller: String,
    /// Extra Cedar policy file (repeatable).
    #[arg(long = "policy")]
    policies: Vec<PathBuf>,
    /// Optional config file for classification rules, tool overrides and limits
    /// (its [[upstream]] table is ignored; of [server], only policy_files, client_confirmation and
    /// allow_upstream_state_access are used).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Upstream id used in policies and audit records (default: derived from the command).
    #[arg(long)]
    id: Option<String>,
    /// A tool the user granted for this task (`upstream__tool` pattern or the exposed name;
    /// repeatable): a destructive or financial effect of a granted tool runs without a
    /// confirmation when every target is anchored. Without it such effects always ask.
    #[arg(long = "grant", value_name = "TOOL")]
    granted_tools: Vec<String>,
    /// Declare the MCP client a trusted host: its elicitation answers confirm actions. Only
    /// for a client with a human behind its prompts that the agent cannot answer itself; by
    /// default approvals go through `secureclaw approvals` or the operator HTTP API.
    #[arg(long)]
    trust_client_confirmation: bool,
    /// Open a new session even if an earlier `wrap` with the same state directory, caller,
    /// task, trusted targets, grants and upstream command left one that is still valid (by
    /// default that session is served again, so approvals survive a client restart).
    #[arg(long)]
    new_session: bool,
    /// Kept for compatibility: elicitation is off unless `--trust-client-confirmation` is given.
    #[arg(long, hide = true)]
    no_elicitation: bool,
    /// Start even if the upstream's command, arguments or working directory name the state
    /// directory, the --config file or a policy file, a path inside one or one of their
    /// ancestors (e.g. a filesystem server rooted at $HOME): the runtime could then read
    /// SecureClaw's keys and operator token, or rewrite its rules, through it. Refused by
    /// default.
    #[arg(long)]
    allow_upstream_state_access: bool,
    /// The upstream MCP server command and its arguments, after `--` (the `--` may be left
    /// out when the command follows the options, as MCP Inspector passes it).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        num_args = 1..,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

/// Programs that run another program named by their arguments: the upstream's id comes from
/// that program (`npx -y @modelcontextprotocol/server-filesystem` → `server-filesystem`,
/// `python -m mcp_server_git` → `mcp-server-git`), not from the launcher (`npx`, `python`).
const LAUNCHERS: &[&str] = &[
    "node", "nodejs", "npx", "pnpx", "bunx", "bun", "deno", "python", "python3", "uv", "uvx",
    "pipx", "sh", "bash", "env", "docker", "podman", "java", "ruby", "php",
];

/// The default upstream id of `wrap`: the name of the program that serves the tools, lowercase,
/// with anything but letters and digits turned into `-` (see [`LAUNCHERS`]).
pub(crate) fn derive_id(command: &str, args: &[String]) -> String {
    // The last path component that is not a build-layout name, without extension or npm
    // version: `@scope/pkg@1.2.3` → `pkg`, `…/server-filesystem/dist/index.js` →
    // `server-filesystem`, `server.py` → `server`.
    const GENERIC: &[&str] = &["index", "main", "dist", "build", "src", "lib", "bin", "out"];
    let stem = |s: &str| -> String {
        let name = |part: &str| -> String {
            let part = part.split('@').find(|p| !p.is_empty()).unwrap_or(part);
            Path::new(part)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(part)
                .to_owned()
        };
        let parts: Vec<String> = s.split('/').filter(|p| !p.is_empty()).map(name).collect();
        parts
            .iter()
            .rev()
            .find(|p| !GENERIC.contains(&p.to_ascii_lowercase().as_str()))
            .or(parts.last())
            .cloned()
            .unwrap_or_else(|| s.to_owned())
    };
    let mut base = stem(command);
    if LAUNCHERS.contains(&base.to_ascii_lowercase().as_str()) {
        // The first word that is not a flag or a launcher's sub-command (`-m`, `run`).
        if let Some(w) = args
            .iter()
            .find(|w| !(w.starts_with('-') || w.contains('=') || *w == "run" || *w == "exec"))
        {
            base = stem(w);
        }
    }
    let id: String = base
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let id = id.trim_matches('-').replace("__", "-");
    if id.is_empty() { "upstream".into() } else { id }
}

/// Run one stdio upstream behind the gateway, served on stdio.
pub async fn wrap(state_dir: &Path, store_url: Option<&str>, args: WrapArgs) -> Result<ExitCode> {
    let (program, rest) = args
        .command
        .split_first()
        .context("missing upstream command after `--`")?;
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let id = args.id.unwrap_or_else(|| derive_id(program, rest));
    secureclaw_gateway::catalog::check_upstream_id(&id)
        .map_err(|e| anyhow::anyhow!("--id: {e}"))?;
    let spec_id = id.clone();
    let spec = UpstreamSpec {
        id,
        transport: UpstreamTransport::Stdio {
            command: program.clone(),
            args: rest.to_vec(),
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: false,
        protocol: Default::default(),
    };
    let mut policies = config.server.policy_files.clone();
    policies.extend(args.policies);
    crate::guard::check_trusted_access(
        &crate::guard::trusted_inputs(state_dir, args.config.as_deref(), &policies),
        std::slice::from_ref(&spec),
        args.allow_upstream_state_access || config.server.allow_upstream_state_access,
    )?;
    let trusted_client = !args.no_elicitation
        && (args.trust_client_confirmation || config.server.client_confirmation.is_trusted());
    let store_url = store_url.or(config.store.url.as_deref());
    let message_limit = message_limit(&config.gateway.limits);
    let gw = stack::start(
        state_dir,
        store_url,
        &policies,
        config.gateway,
        vec![spec.clone()],
    )
    .await?;
    let envelope = TaskEnvelope {
        request: args.task,
        trusted_targets: args.trusted_targets,
        granted_tools: args.granted_tools,
        max_amount: None,
    };
    // What else makes a launch another one: its config, policies and confirmer (red-team
    // round 2: launches differing only there shared a session and its grant uses).
    let launch = serde_json::json!({
        "store": store_url,
        "upstream": spec.id,
        "transport": serde_json::to_value(&spec.transport).unwrap_or_default(),
        "config": args.config.as_ref().map(|p| file_identity(p)),
        "policies": policies.iter().map(|p| file_identity(p)).collect::<Vec<_>>(),
        "trusted_client": trusted_client,
    });
    let (session, resumed) = wrap_session(
        &gw,
        state_dir,
        &args.caller,
        envelope,
        &launch,
        args.new_session,
    )
    .await?;
    gw.set_approve_command(state_dir, store_option(store_url).as_deref());
    warn_unmatched_rules(&gw);
    let sweeper = start_retention(&gw, &config.store);
    let archiver = start_audit_archive(&gw, &config.store)?;
    let timeouts = gw.spawn_approval_timeouts();
    // The raw session id is the session's bearer credential (valid on `serve` over the same
    // store): only its audit digest is printed (new-user finding).
    crate::say(&format!(
        "serving on stdio; upstream id `{}` (tool pins and rules use it; --id sets it); {} session {} (as the audit log and approvals name it); state directory {}; approvals: {} list",
        spec_id,
        if resumed {
            "resumed the earlier"
        } else {
            "new"
        },
        secureclaw_gateway::audit_session_id(&session.id),
        state_dir.display(),
        approvals_command(state_dir, store_url)
    ));
    let front = McpFrontEnd::new(gw.clone(), SessionSource::Fixed(session))
        .with_trusted_client_confirmation(trusted_client)
        .with_max_message_bytes(message_limit);
    tokio::select! {
        served = front.serve_stdio() => served?,
        signal = shutdown_signal() => {
            crate::say(&format!("{signal}: stopping; calls already sent to the upstream finish first"));
        }
    }
    for task in [sweeper, archiver, timeouts].into_iter().flatten() {
        task.abort();
    }
    drain(&gw).await;
    Ok(ExitCode::SUCCESS)
}

/// The first SIGINT (Ctrl-C) or SIGTERM, named.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "interrupt"
    }
}

/// Before the process exits, wait for the calls still running (at most the upstream timeout
/// and 5 s), so that every effect already dispatched gets its outcome recorded (red-team
/// round 2 of 2026-12-03: a SIGTERM mid-effect left the ledger `reserved`).
async fn drain(gw: &secureclaw_gateway::Gateway) {
    let left = gw
        .drain(gw.upstream_timeout() + std::time::Duration::from_secs(5))
        .await;
    if left > 0 {
        crate::warn_operator(&format!(
            "{left} call(s) still running at exit; their outcome is recorded as unknown at the next start"
        ));
    }
}

/// The session `wrap` serves, and whether it was resumed (issue 15: approvals survive a
/// restart of the client). An MCP client starts a new `wrap` for each connection (the MCP
/// Inspector's CLI for each call), so by default the session an earlier `wrap` opened with
/// the same state directory and store, caller, task envelope and upstream command is served
/// again while it is valid: its pending and approved actions, grant uses, protected objects
/// and written values carry over (a restart no longer resets a counted grant). `launch` holds
/// the rest of what makes a launch (store, upstream command, config file, policy files,
/// trusted confirmer): a launch that differs there gets its own session. Otherwise, or with `--new-session`, a new
/// session is opened.
///
/// The session id is the session's bearer credential, so it is kept in the state directory
/// (which the upstream-state guard keeps away from upstreams), in
/// `wrap-sessions/KEY` with mode 0600, where KEY is the SHA-256 (hex) of those inputs. A
/// stored id whose session is gone, expired, or has another caller or envelope is replaced.
///
/// # Errors
/// The store's errors opening or looking up a session; the file system's writing the id.
/// A file as it identifies a `wrap` launch: its path and a SHA-256 digest of its contents, so
/// that a launch whose configuration or policy changed (rewritten through an upstream, or by
/// the operator) never resumes the session an earlier launch opened under the old rules
/// (red-team round 3). An unreadable file counts by its path alone (the start then fails
/// loading it anyway).
fn file_identity(path: &Path) -> serde_json::Value {
    use sha2::Digest as _;
    let digest = std::fs::read(path)
        .ok()
        .map(|bytes| hex::encode(sha2::Sha256::digest(&bytes)));
    serde_json::json!({"path": path.display().to_string(), "sha256": digest})
}

async fn wrap_session(
    gw: &secureclaw_gateway::Gateway,
    state_dir: &Path,
    caller: &str,
    envelope: TaskEnvelope,
    launch: &serde_json::Value,
    new_session: bool,
) -> Result<(secureclaw_core::store::SessionRecord, bool)> {
    use sha2::Digest as _;
    let inputs = serde_json::json!({
        "caller": caller,
        "envelope": &envelope,
        "launch": launch,
    });
    let key = hex::encode(sha2::Sha256::digest(inputs.to_string().as_bytes()));
    let dir = state_dir.join("wrap-sessions");
    let path = dir.join(&key);
    let stored = std::fs::read_to_string(&path).ok();
    if !new_session
        && let Some(id) = &stored
        && let Some(session) = gw.session(id.trim()).await?
        && session.caller == caller
        && session.envelope == envelope
    {
        return Ok((session, true));
    }
    let session = gw.open_session(caller, envelope).await?;
    if let Some(old) = &stored {
        decline_replaced(gw, old.trim()).await;
    }
    crate::state::ensure_dir(&dir)?;
    // Written beside and renamed over the old id, so that a concurrent `wrap` reads either.
    let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    crate::state::write_private(&tmp, session.id.as_bytes())?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok((session, false))
}

/// Decline the pending approvals of the session a `wrap` launch replaced (`--new-session`, or
/// a stored session that no longer matches): nothing will serve that session again, so its
/// approvals would only wait in `approvals list` until they expire. A failure is reported and
/// leaves them pending (they still expire; fail safe).
async fn decline_replaced(gw: &secureclaw_gateway::Gateway, old_session: &str) {
    let pending = match gw
        .approvals(Some(secureclaw_core::store::ApprovalState::Pending))
        .await
    {
        Ok(p) => p,
        Err(e) => {
            crate::warn_operator(&format!(
                "cannot list the replaced session's approvals: {e}"
            ));
            return;
        }
    };
    let mut declined = 0usize;
    for (approval, action) in pending {
        if action.session != old_session {
            continue;
        }
        match gw
            .decide_approval(&approval.action_id, false, "wrap (session replaced)")
            .await
        {
            Ok(_) => declined += 1,
            Err(e) => crate::warn_operator(&format!(
                "cannot decline approval {} of the replaced session: {e}",
                approval.action_id.0
            )),
        }
    }
    if declined > 0 {
        crate::say(&format!(
            "declined {declined} pending approval{} of the session this launch replaced",
            if declined == 1 { "" } else { "s" }
        ));
    }
}

/// Warn about every rule that applies to no listed tool (issue 15: a misspelt rule was
/// accepted silently). A warning, not a refusal: see README "Checking a configuration".
fn warn_unmatched_rules(gw: &secureclaw_gateway::Gateway) {
    for rule in gw.unmatched_rules() {
        crate::warn_operator(&format!(
            "{rule}; the rule is ignored and the tool it meant keeps the defaults (check with `secureclaw config check`)"
        ));
    }
}

/// `--store …` for a command line an operator is told to run: the URL when it carries no
/// password, else `"$SECURECLAW_STORE"` (a password never goes to the log).
fn store_option(store_url: Option<&str>) -> Option<String> {
    let url = store_url?;
    let authority = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    // A password in the userinfo (`user:pw@`), or a libpq parameter that may hold a secret
    // (`?password=…`, `sslpassword=…`, a key-value string's `password=…`; red-team F3 of
    // 2026-12-04: the query form reached webhook notices, log lines and the banner).
    let lowered = url.to_ascii_lowercase();
    let has_password = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
        || ["pass", "secret", "token", "sslkey"]
            .iter()
            .any(|w| lowered.contains(w));
    Some(if has_password {
        "\"$SECURECLAW_STORE\"".to_owned()
    } else {
        quote(url)
    })
}

/// `secureclaw --state-dir DIR [--store URL] approvals`, for messages.
fn approvals_command(state_dir: &Path, store_url: Option<&str>) -> String {
    let mut cmd = format!(
        "secureclaw --state-dir {}",
        quote(&state_dir.display().to_string())
    );
    if let Some(store) = store_option(store_url) {
        cmd.push_str(&format!(" --store {store}"));
    }
    cmd.push_str(" approvals");
    cmd
}

/// Shell-quote `value` unless it is plain.
fn quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

/// Where approvals, audit records and sessions are kept, for messages.
fn state_place(state_dir: &Path, store_url: Option<&str>) -> String {
    match store_url {
        Some(_) => format!(
            "the PostgreSQL store (keys in state directory {})",
            state_dir.display()
        ),
        None => format!("state directory {}", state_dir.display()),
    }
}

/// Largest MCP message (HTTP body, stdio line): the argument limit plus room for the
/// JSON-RPC envelope.
fn message_limit(limits: &secureclaw_gateway::config::Limits) -> usize {
    limits.max_argument_bytes.saturating_add(64 * 1024)
}

/// `secureclaw serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config file.
    #[arg(long, short, default_value = "secureclaw.toml")]
    pub(crate) config: PathBuf,
    /// Override `server.http_bind`.
    #[arg(long)]
    bind: Option<std::net::SocketAddr>,
    /// Also serve MCP on stdio (default session).
    #[arg(long)]
    stdio: bool,
    /// Start even if a stdio upstream's command, arguments or working directory name the
    /// state directory, the config file or a policy file, a path inside one or one of their
    /// ancestors (e.g. a filesystem server rooted at $HOME): the runtime could then read
    /// SecureClaw's keys and operator token, or rewrite its rules, through it. Refused by
    /// default; also `[server] allow_upstream_state_access = true`.
    #[arg(long)]
    allow_upstream_state_access: bool,
}

/// Run the HTTP API and Streamable HTTP MCP endpoint (and optionally stdio MCP).
pub async fn serve(
    state_dir: Option<&Path>,
    store_url: Option<&str>,
    args: ServeArgs,
) -> Result<ExitCode> {
    let config = Config::load(&args.config)?;
    // An explicit --state-dir (or $SECURECLAW_STATE_DIR) wins over the config file.
    let dir = state_dir
        .map(Path::to_path_buf)
        .or_else(|| config.server.state_dir.clone())
        .unwrap_or_else(state::default_dir);
    let bind = args.bind.unwrap_or(config.server.http_bind);
    let loopback = bind.ip().is_loopback();
    crate::guard::check_trusted_access(
        &crate::guard::trusted_inputs(&dir, Some(&args.config), &config.server.policy_files),
        &config.upstream,
        args.allow_upstream_state_access || config.server.allow_upstream_state_access,
    )?;
    // Listen first: a busy port fails before any state, key or upstream is touched.
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind} (is another gateway running?)"))?;
    // Notifications link to the approvals page: at `public_url`, else at the bound address.
    let mut gateway_config = config.gateway.clone();
    if gateway_config.approvals.public_url.is_none() {
        gateway_config.approvals.public_url = Some(format!("http://{}", listener.local_addr()?));
    }
    let gw = stack::start(
        &dir,
        store_url.or(config.store.url.as_deref()),
        &config.server.policy_files,
        gateway_config,
        config.upstream.clone(),
    )
    .await?;
    let store_used = store_url.or(config.store.url.as_deref());
    gw.set_approve_command(&dir, store_option(store_used).as_deref());
    warn_unmatched_rules(&gw);
    let sweeper = start_retention(&gw, &config.store);
    let archiver = start_audit_archive(&gw, &config.store)?;
    let timeouts = gw.spawn_approval_timeouts();
    let token = state::operator_token(&dir)?;
    let default_session = match &config.task {
        Some(task) => Some(
            gw.open_session(&config.server.default_caller, task.clone())
                .await?,
        ),
        None => None,
    };
    if args.stdio {
        let s = match &default_session {
            Some(s) => s.clone(),
            None => {
                gw.open_session(&config.server.default_caller, TaskEnvelope::default())
                    .await?
            }
        };
        let mcp = McpFrontEnd::new(gw.clone(), SessionSource::Fixed(s))
            .with_trusted_client_confirmation(config.server.client_confirmation.is_trusted())
            .with_max_message_bytes(message_limit(&config.gateway.limits));
        tokio::spawn(async move {
            if let Err(e) = mcp.serve_stdio().await {
                tracing::error!(error = %e, "stdio MCP ended");
            }
        });
    }
    // Token-less MCP requests get the default session only when the operator opted in, and
    // only on a loopback bind; otherwise `initialize` needs a session bearer token.
    let fallback = if loopback && config.server.tokenless_loopback_session {
        default_session.clone()
    } else {
        None
    };
    if config.server.tokenless_loopback_session && !loopback {
        crate::say(&format!(
            "tokenless_loopback_session is ignored on the non-loopback bind {bind}"
        ));
    }
    let require_token = fallback.is_none();
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.extend(config.server.allowed_hosts.iter().cloned());
    hosts.push(bind.to_string());
    let body_limit = message_limit(&config.gateway.limits);
    let front = McpFrontEnd::new(gw.clone(), SessionSource::Bearer { fallback })
        .with_trusted_client_confirmation(config.server.client_confirmation.is_trusted());
    let l = &config.server.limits;
    let mcp = secureclaw_server::mcp_router_with_limits(
        front,
        hosts,
        config.server.allowed_origins.clone(),
        body_limit,
        require_token,
        secureclaw_server::McpSessionLimits {
            per_token: l.max_mcp_sessions_per_token,
            tokenless: l.max_tokenless_mcp_sessions,
            idle: std::time::Duration::from_millis(l.mcp_session_idle_ms),
        },
    );
    let app = secureclaw_server::router(
        ApiState {
            gateway: gw.clone(),
            operator_token: Arc::new(token),
        },
        body_limit,
    )
    .nest_service("/mcp", mcp);
    crate::say(&format!(
        "listening on http://{bind} (MCP at /mcp, API at /v1, metrics at /metrics, approvals page at /approvals); state directory {}; operator token {}; approvals: {} list",
        dir.display(),
        state::operator_token_source(&dir),
        approvals_command(&dir, store_used)
    ));
    if require_token {
        crate::say(
            "every MCP session needs a session bearer token (open one with POST /v1/sessions)",
        );
    }
    secureclaw_server::serve(listener, app, config.server.limits.conn(), async {
        let signal = shutdown_signal().await;
        crate::say(&format!(
            "{signal}: stopping; calls already sent to an upstream finish first"
        ));
    })
    .await?;
    for task in [sweeper, archiver, timeouts].into_iter().flatten() {
        task.abort();
    }
    drain(&gw).await;
    Ok(ExitCode::SUCCESS)
}

/// Start the background retention sweep of `serve` and `wrap` (`[store] retention_ms`); warn
/// when it is off.
fn start_retention(
    gw: &secureclaw_gateway::Gateway,
    store: &crate::config::StoreSection,
) -> Option<tokio::task::JoinHandle<()>> {
    let task = gw.spawn_retention(store.retention());
    if task.is_none() {
        crate::warn_operator(
            "[store] retention_ms = 0: expired session state is never swept, so the database \
             grows with every call (set retention_ms, e.g. 604800000 for 7 days, or run \
             `secureclaw store sweep --older-than-ms MS` yourself)",
        );
    }
    task
}

/// Start automatic audit archiving of `serve` and `wrap` when `[store] audit_archive_dir` is
/// set (off by default): the directory is created (mode 0700) and records older than
/// `audit_archive_after_ms` are archived there every `sweep_interval_ms`.
///
/// # Errors
/// The archive directory cannot be created.
fn start_audit_archive(
    gw: &secureclaw_gateway::Gateway,
    store: &crate::config::StoreSection,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(policy) = store.audit_archive() else {
        return Ok(None);
    };
    create_archive_dir(&policy.dir).with_context(|| {
        format!(
            "cannot create the audit archive directory `{}` ([store] audit_archive_dir)",
            policy.dir.display()
        )
    })?;
    crate::say(&format!(
        "audit archive: records older than {} ms are archived to {} and pruned, every {} ms",
        policy.older_than_ms,
        policy.dir.display(),
        policy.interval.as_millis()
    ));
    Ok(Some(gw.spawn_audit_archive(policy)))
}

/// `secureclaw approvals …`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List approvals (pending by default).
    List {
        /// Show every approval, not only pending ones.
        #[arg(long)]
        all: bool,
    },
    /// Approve a pending action: the exact previewed call may then run once. With
    /// `--allow-for` and/or `--uses`, also create a standing grant: later calls of the same
    /// session to the same tool, with no target the approved call did not have and no larger
    /// amount, run without asking until it expires, its uses are taken or it is revoked
    /// (`secureclaw grants revoke`).
    Approve {
        /// Action id (act_…).
        action_id: String,
        /// Let similar calls run for this long (`90s`, `30m`, `2h`; at most 24h).
        #[arg(long, value_name = "DURATION")]
        allow_for: Option<String>,
        /// Let at most this many similar calls run (1..=1000).
        #[arg(long, value_name = "N")]
        uses: Option<u64>,
        /// Amount ceiling for a financial tool, in minor units (cents); default: the
        /// approved call's own amount.
        #[arg(long, value_name = "MINOR_UNITS")]
        max_amount: Option<u64>,
    },
    /// Deny a pending action.
    Deny {
        /// Action id (act_…).
        action_id: String,
    },
}

fn now() -> secureclaw_core::time::UnixMillis {
    (secureclaw_gateway::system_clock())()
}

/// Decide approvals directly in the state directory's store (works while a gateway runs).
pub async fn approvals(
    state_dir: &Path,
    store_url: Option<&str>,
    cmd: ApprovalsCommand,
) -> Result<ExitCode> {
    let (keys, store) = stack::open_existing_state(state_dir, store_url).await?;
    let place = state_place(state_dir, store_url);
    match cmd {
        ApprovalsCommand::List { all } => {
            let state = if all {
                None
            } else {
                Some(ApprovalState::Pending)
            };
            let list = secureclaw_gateway::list_for_approver(store.as_ref(), state, now()).await?;
            if list.is_empty() {
                println!(
                    "no {}approvals in {place}",
                    if all { "" } else { "pending " }
                );
            }
            for v in list {
                println!(
                    "{}  {:<8}  {}  (session {}{}, caller {})",
                    v.approval.action_id,
                    v.approval.state.as_str(),
                    v.call,
                    // Never the raw session id: it is the runtime's bearer credential.
                    v.session,
                    if v.session_ended {
                        " — ended: its runtime can no longer re-issue the call"
                    } else {
                        ""
                    },
                    v.caller
                );
            }
        }
        ApprovalsCommand::Approve { action_id, .. } | ApprovalsCommand::Deny { action_id }
            if action_id.is_empty() =>
        {
            bail!("action id must not be empty")
        }
        ApprovalsCommand::Approve {
            action_id,
            allow_for: None,
            uses: None,
            max_amount,
        } => {
            if max_amount.is_some() {
                bail!("--max-amount applies to a standing grant: add --allow-for or --uses");
            }
            let ttl = GatewayConfig::default().limits.confirmation_ttl_ms;
            decide_approval(
                &keys,
                store.as_ref(),
                now(),
                ttl,
                &ActionId(action_id.clone()),
                true,
                &cli_identity(),
            )
            .await
            .with_context(|| format!("approving in {place}"))?;
            println!("approved {action_id}: the runtime may now re-issue the identical call once");
        }
        ApprovalsCommand::Approve {
            action_id,
            allow_for,
            uses,
            max_amount,
        } => {
            let allow_for_ms = allow_for
                .as_deref()
                .map(secureclaw_gateway::parse_duration)
                .transpose()?;
            let terms = secureclaw_gateway::GrantTerms {
                allow_for_ms,
                uses,
                max_amount,
            }
            .validate()?;
            let ttl = GatewayConfig::default().limits.confirmation_ttl_ms;
            let (_, grant) = secureclaw_gateway::approve_with_grant(
                &keys,
                store.as_ref(),
                now(),
                ttl,
                &ActionId(action_id.clone()),
                &cli_identity(),
                terms,
            )
            .await
            .with_context(|| format!("approving in {place}"))?;
            let view = secureclaw_gateway::GrantView::of(&grant, now());
            println!(
                "approved {action_id}: the runtime may now re-issue the identical call once\n\
                 standing grant {}: similar calls of {} in session {} run without asking {}\n\
                 revoke it with: secureclaw grants revoke {}",
                view.id,
                view.tool,
                view.session,
                grant_terms_text(&view),
                view.id
            );
        }
        ApprovalsCommand::Deny { action_id } => {
            decide_approval(
                &keys,
                store.as_ref(),
                now(),
                0,
                &ActionId(action_id.clone()),
                false,
                &cli_identity(),
            )
            .await
            .with_context(|| format!("denying in {place}"))?;
            println!("denied {action_id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `SEQ:MAC` of `--expect-head`.
fn parse_head(text: &str) -> Result<(u64, String)> {
    let (seq, mac) = text
        .split_once(':')
        .with_context(|| format!("--expect-head `{text}`: expected SEQ:MAC"))?;
    let seq = seq
        .trim()
        .parse()
        .with_context(|| format!("--expect-head `{text}`: SEQ is not a number"))?;
    let mac = mac.trim().to_ascii_lowercase();
    if mac.is_empty() || !mac.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("--expect-head `{text}`: MAC is not hex");
    }
    Ok((seq, mac))
}

/// `Ok` if the verified log `v` still holds the record `seq` with MAC `mac` (or the
/// checkpoint at `seq` with that MAC, once archived); what differs otherwise.
async fn check_head(
    store: &dyn secureclaw_core::store::Store,
    v: &secureclaw_core::audit::LogVerified,
    seq: u64,
    mac: &str,
) -> std::result::Result<(), String> {
    if seq > v.last_seq {
        return Err(format!(
            "the log ends at seq {}, before it: records were deleted",
            v.last_seq
        ));
    }
    if seq == 0 {
        return Ok(());
    }
    let found = match store.audit_records(seq, 1).await {
        Ok(records) => records.into_iter().find(|r| r.seq == seq).map(|r| r.mac),
        Err(e) => return Err(format!("cannot read record {seq}: {e}")),
    };
    let found = match found {
        Some(m) => m,
        None => match store.audit_checkpoints().await {
            Ok(cps) => match cps.into_iter().find(|c| c.seq() == seq) {
                Some(c) => c.mac().to_owned(),
                None => {
                    return Err(format!(
                        "record {seq} is archived; verify the archive holding it with --archive \
                         and compare its MAC there"
                    ));
                }
            },
            Err(e) => return Err(format!("cannot read the checkpoints: {e}")),
        },
    };
    if found.eq_ignore_ascii_case(mac) {
        Ok(())
    } else {
        Err(format!(
            "record {seq} now has MAC {found}: the log was cut at or before it and regrown"
        ))
    }
}

/// The CLI's approver identity in the audit log and on grants: `cli:` and the login name
/// (`$USER`, else `$LOGNAME`), checked like every approver name
/// ([`secureclaw_gateway::approver_identity`]); a name that is not one (spaces, markup, over
/// 64 characters) is recorded as `cli:unknown` rather than written to the log as it is.
fn cli_identity() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_default();
    secureclaw_gateway::approver_identity("cli", Some(&user))
        .ok()
        .filter(|id| id != "cli")
        .unwrap_or_else(|| "cli:unknown".to_owned())
}

/// "until 2026-…Z, 2 of 5 uses taken" for a grant.
fn grant_terms_text(v: &secureclaw_gateway::GrantView) -> String {
    let until = iso8601(v.expires_at);
    match v.max_uses {
        Some(n) => format!("until {until}, {} of {n} uses taken", v.used),
        None => format!("until {until}, {} uses taken", v.used),
    }
}

/// `secureclaw grants …`.
#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// List standing grants (live ones by default).
    List {
        /// Show every grant (expired, used up, revoked too).
        #[arg(long)]
        all: bool,
    },
    /// Revoke a standing grant: no later call is covered by it.
    Revoke {
        /// Grant id (grant-…).
        grant_id: String,
    },
}

/// List or revoke standing grants directly in the state directory's store (works while a
/// gateway runs).
pub async fn grants(
    state_dir: &Path,
    store_url: Option<&str>,
    cmd: GrantsCommand,
) -> Result<ExitCode> {
    let (_, store) = stack::open_existing_state(state_dir, store_url).await?;
    let place = state_place(state_dir, store_url);
    match cmd {
        GrantsCommand::List { all } => {
            let list = secureclaw_gateway::list_grants(store.as_ref(), all, now())
                .await
                .with_context(|| format!("listing grants in {place}"))?;
            if list.is_empty() {
                println!(
                    "no {}standing grants in {place}",
                    if all { "" } else { "live " }
                );
            }
            for v in list {
                println!(
                    "{}  {:<8}  {}  {} (session {}, from {} by {}{})",
                    v.id,
                    v.state,
                    v.tool,
                    grant_terms_text(&v),
                    v.session,
                    v.action_id,
                    v.created_by,
                    v.revoked_by
                        .as_deref()
                        .map(|b| format!(", revoked by {b}"))
                        .unwrap_or_default()
                );
            }
        }
        GrantsCommand::Revoke { grant_id } => {
            if grant_id.is_empty() {
                bail!("grant id must not be empty");
            }
            let v =
                secureclaw_gateway::revoke_grant(store.as_ref(), &grant_id, &cli_identity(), now())
                    .await
                    .with_context(|| format!("revoking in {place}"))?;
            println!(
                "revoked {} (by {})",
                v.id,
                v.revoked_by.as_deref().unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `secureclaw audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify the hash chain of the log. After an archive, the archive checkpoints are
    /// verified (each MACed with the audit key, each chained to the one before) and the
    /// records kept must continue the chain from the latest one: its sequence number + 1, its
    /// MAC as `prev`. Records deleted past a checkpoint, or an edited or forged checkpoint,
    /// fail. With --archive, archive files are verified too (exit status 2 on any failure).
    Verify {
        /// An archive file written by `audit archive` (repeatable): its SHA-256 must be named
        /// by a checkpoint, and its records must chain from the checkpoint before that one
        /// (record 1 for the first) and end at that checkpoint's record and MAC — so the
        /// archives and the records kept form one chain.
        #[arg(long, value_name = "FILE")]
        archive: Vec<PathBuf>,
        /// A head printed by an earlier `audit verify` (`SEQ:MAC`), kept outside the store:
        /// the record at SEQ must still have that MAC (or the checkpoint at SEQ, once
        /// archived). Detects a tail deleted and regrown since, which the chain alone cannot
        /// (exit status 2).
        #[arg(long, value_name = "SEQ:MAC")]
        expect_head: Option<String>,
    },
    /// Print records as JSON Lines.
    Export {
        /// First sequence number.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Add `"time"`, the event's `at` (Unix milliseconds) as an ISO 8601 UTC timestamp
        /// (`2026-12-01T20:19:53.123Z`), to every event. Sessions are always shown as their
        /// audit digest (`ses#…`), the form `wrap`, `approvals list` and `POST /v1/sessions`
        /// also print.
        #[arg(long)]
        iso_times: bool,
    },
    /// Move the oldest records to an archive file and prune them from the database.
    ///
    /// Verifies the whole log first (refuses if it does not verify); writes the records from
    /// the first one kept through --through-seq N (or through the last one older than
    /// --older-than) as JSON Lines, exactly as `audit export` prints them; fsyncs the file;
    /// reads it back and verifies it; then, in one transaction holding the lock every
    /// appender takes (safe while gateways run), stores a checkpoint — the last archived
    /// sequence number and MAC, the record count, the file's SHA-256 and the time, MACed with
    /// the audit key and chained to the previous checkpoint — and deletes the archived
    /// records. `audit verify` then verifies the rest from the checkpoint, and
    /// `audit verify --archive FILE` the file. Keep the archive files (and the audit keys in
    /// keys.json): they are the only copy of those records. A file is never overwritten.
    ///
    /// Example: secureclaw audit archive --older-than 30d --out-dir /var/backups/secureclaw
    #[command(group(clap::ArgGroup::new("bound").required(true).args(["through_seq", "older_than"])))]
    #[command(group(clap::ArgGroup::new("target").required(true).args(["out", "out_dir"])))]
    Archive {
        /// Archive through this sequence number (inclusive; it must be a stored record).
        #[arg(long, value_name = "N")]
        through_seq: Option<u64>,
        /// Archive the records older than this: a number with a unit, `ms`, `s`, `m`, `h` or
        /// `d` (`30d`, `12h`); from the first record kept up to the first one not older.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
        older_than: Option<u64>,
        /// The archive file to write (it must not exist).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Write a new file in this directory, named
        /// `audit-<first seq>-<last seq>-<time ms>.jsonl`.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// Create `dir` and its missing parents, mode 0700 (an existing directory is left as it is).
fn create_archive_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// A duration such as `30d`, `12h`, `15m`, `90s` or `500ms`, in milliseconds.
fn parse_duration_ms(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 30d, 12h, 15m, 90s, 500ms)"))?;
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "`{text}` needs a unit: ms, s, m, h or d (e.g. 30d, 12h)"
            ));
        }
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// Verify, export or archive the audit log.
pub async fn audit(
    state_dir: &Path,
    store_url: Option<&str>,
    cmd: AuditCommand,
) -> Result<ExitCode> {
    let (keys, store) = stack::open_existing_state(state_dir, store_url).await?;
    let place = if store_url.is_some() {
        "PostgreSQL store".to_owned()
    } else {
        state::db_path(state_dir).display().to_string()
    };
    match cmd {
        AuditCommand::Verify {
            archive,
            expect_head,
        } => {
            let expected = expect_head.as_deref().map(parse_head).transpose()?;
            match store.verify_audit_log().await {
                Ok(v) => {
                    match &v.checkpoint {
                        None => println!(
                            "audit log OK: {} record{}, chain verified ({place})",
                            v.records,
                            if v.records == 1 { "" } else { "s" },
                        ),
                        Some(c) => println!(
                            "audit log OK: {} record{} verified from checkpoint at seq {} \
                         (archived: records {}..={} in `{}`, file digest sha256 {}), chain \
                         verified ({place})",
                            v.records,
                            if v.records == 1 { "" } else { "s" },
                            c.seq(),
                            c.segment.first_seq,
                            c.seq(),
                            c.segment.archive,
                            c.segment.archive_sha256
                        ),
                    }
                    println!(
                        "head: {}:{} (keep it outside the store; `audit verify --expect-head` \
                         checks it later)",
                        v.last_seq, v.last_mac
                    );
                    if let Some((seq, mac)) = expected
                        && let Err(why) = check_head(store.as_ref(), &v, seq, &mac).await
                    {
                        eprintln!("audit log FAILED the expected head {seq}:{mac}: {why}");
                        return Ok(ExitCode::from(2));
                    }
                }
                Err(e) => {
                    eprintln!("audit log FAILED verification: {e}");
                    return Ok(ExitCode::from(2));
                }
            }
            if archive.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            let checkpoints = store.audit_checkpoints().await?;
            if let Err(e) = secureclaw_core::audit::verify_checkpoints(&keys, &checkpoints) {
                eprintln!("audit checkpoints FAILED verification: {e}");
                return Ok(ExitCode::from(2));
            }
            let mut failed = false;
            for file in &archive {
                match secureclaw_gateway::archive::verify_archive_file(&keys, &checkpoints, file) {
                    Ok(c) => println!(
                        "archive {} OK: records {}..={} verified against the checkpoint at seq {} \
                         (sha256 {})",
                        file.display(),
                        c.segment.first_seq,
                        c.seq(),
                        c.seq(),
                        c.segment.archive_sha256
                    ),
                    Err(e) => {
                        eprintln!("archive {} FAILED verification: {e}", file.display());
                        failed = true;
                    }
                }
            }
            if failed {
                return Ok(ExitCode::from(2));
            }
        }
        AuditCommand::Export { from, iso_times } => {
            use std::io::Write;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let mut next = from;
            loop {
                let batch = store.audit_records(next, 1000).await?;
                let Some(last) = batch.last().map(|r| r.seq) else {
                    break;
                };
                for r in &batch {
                    let mut line = serde_json::to_value(r)?;
                    if iso_times
                        && let Some(event) = line.get_mut("event").and_then(|e| e.as_object_mut())
                    {
                        event.insert(
                            "time".into(),
                            serde_json::Value::String(iso8601(r.event.at.0)),
                        );
                    }
                    // A closed pipe (`| head`) ends the export quietly.
                    if writeln!(out, "{line}").is_err() {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                next = last + 1;
            }
        }
        AuditCommand::Archive {
            through_seq,
            older_than,
            out,
            out_dir,
        } => {
            use secureclaw_gateway::archive::{ArchiveBound, ArchiveTarget, archive_audit};
            let now = now();
            let bound = match (through_seq, older_than) {
                (Some(n), _) => ArchiveBound::Through(n),
                (None, Some(ms)) => {
                    ArchiveBound::OlderThan(secureclaw_core::UnixMillis(now.0.saturating_sub(ms)))
                }
                (None, None) => anyhow::bail!("pass --through-seq N or --older-than DURATION"),
            };
            let target = match (out, out_dir) {
                (Some(file), _) => ArchiveTarget::File(file),
                (None, Some(dir)) => {
                    create_archive_dir(&dir).with_context(|| {
                        format!("cannot create the archive directory `{}`", dir.display())
                    })?;
                    ArchiveTarget::Dir(dir)
                }
                (None, None) => anyhow::bail!("pass --out FILE or --out-dir DIR"),
            };
            match archive_audit(store.as_ref(), &keys, bound, &target, now).await {
                Ok(Some(a)) => println!(
                    "archived audit records {}..={} ({} records) to {} (sha256 {}) and pruned them \
                     from {place}; checkpoint at seq {} stored",
                    a.checkpoint.segment.first_seq,
                    a.checkpoint.seq(),
                    a.checkpoint.segment.count,
                    a.path.display(),
                    a.checkpoint.segment.archive_sha256,
                    a.checkpoint.seq()
                ),
                Ok(None) => println!("nothing to archive: no record kept is old enough ({place})"),
                Err(e @ secureclaw_gateway::archive::ArchiveError::Unverified(_)) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::from(2));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `secureclaw policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Load the default set plus FILES, validate against the schema, print ids and digest.
    Check {
        /// Extra .cedar files.
        files: Vec<PathBuf>,
    },
    /// Print the built-in schema and default policies.
    Show,
}

/// Check or show policies.
pub fn policy(cmd: PolicyCommand) -> Result<ExitCode> {
    match cmd {
        PolicyCommand::Check { files } => {
            let p = stack::load_policy(&files)?;
            for id in p.policy_ids() {
                println!("policy {id}");
            }
            use secureclaw_core::policy::PolicyEngine;
            println!("policy set OK, digest {}", p.digest());
        }
        PolicyCommand::Show => {
            println!(
                "// ---- schema ----\n{}\n// ---- default policies ----\n{}",
                secureclaw_policy::SCHEMA,
                secureclaw_policy::DEFAULT_POLICIES
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `secureclaw keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List key ids, purposes and retirement (never secrets).
    List,
    /// Add a new key for a purpose; it becomes the active one, old ids stay valid.
    Rotate {
        /// binding, artifact, handle, vault, confirmation or audit.
        purpose: String,
    },
    /// Retire a key id: anything made with it is refused from now on.
    Retire {
        /// Key id (for example bind-1).
        kid: String,
    },
}

/// Manage the key ring in the state directory.
pub fn keys(state_dir: &Path, cmd: KeysCommand) -> Result<ExitCode> {
    let mut ring = state::load_keys(state_dir, None)?;
    match cmd {
        KeysCommand::List => {
            for (id, purpose, retired) in ring.ids() {
                println!(
                    "{id:<10} {purpose:?}{}",
                    if retired { " (retired)" } else { "" }
                );
            }
        }
        KeysCommand::Rotate { purpose } => {
            let p: KeyPurpose = serde_json::from_value(serde_json::Value::String(purpose.clone()))
                .map_err(|_| anyhow::anyhow!("unknown purpose `{purpose}` (binding, artifact, handle, vault, confirmation, audit)"))?;
            let id = ring.add_generated(p, &mut state::random_fill);
            state::save_keys(state_dir, &ring)?;
            println!("added {id}; restart running gateways to use it");
        }
        KeysCommand::Retire { kid } => {
            ring.retire(&KeyId(kid.clone()))?;
            state::save_keys(state_dir, &ring)?;
            println!("retired {kid}; restart running gateways to apply");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_formats_utc_with_milliseconds() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_796_156_393_123), "2026-12-01T20:19:53.123Z");
        assert_eq!(iso8601(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    /// New-user trial: `wrap -- npx -y @modelcontextprotocol/server-filesystem …` was called
    /// `npx` (and `node …` was `node`); the id names the program that serves the tools.
    #[test]
    fn wrap_ids_name_the_server_not_the_launcher() {
        let id = |cmd: &str| {
            let words: Vec<String> = cmd.split(' ').map(str::to_owned).collect();
            derive_id(&words[0], &words[1..])
        };
        assert_eq!(
            id("npx -y @modelcontextprotocol/server-filesystem /data"),
            "server-filesystem"
        );
        assert_eq!(id("npx @scope/pkg@1.2.3"), "pkg");
        assert_eq!(id("python3 -m mcp_server_git --repo ."), "mcp-server-git");
        assert_eq!(id("uvx mcp-server-fetch"), "mcp-server-fetch");
        assert_eq!(id("node tools/office/server.js"), "server");
        assert_eq!(
            id(
                "node tools/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js /home/me/notes"
            ),
            "server-filesystem"
        );
        assert_eq!(
            id("/usr/local/bin/secureclaw-office demo"),
            "secureclaw-office"
        );
        assert_eq!(id("node"), "node");
        assert_eq!(id("npx -y"), "npx");
    }

    #[test]
    fn store_option_never_prints_a_password() {
        assert_eq!(
            store_option(Some("postgres://u:secret@db:5432/x")).as_deref(),
            Some("\"$SECURECLAW_STORE\"")
        );
        for secret in [
            "postgres://rt@127.0.0.1:5432/rt_pw?password=S3cretDbPw",
            "postgres://rt@db/x?sslmode=require&PASSWORD=S3cret",
            "postgres://rt@db/x?sslpassword=S3cret",
            "host=db user=rt password=S3cret dbname=x",
        ] {
            assert_eq!(
                store_option(Some(secret)).as_deref(),
                Some("\"$SECURECLAW_STORE\""),
                "{secret}"
            );
        }
        assert_eq!(
            store_option(Some("postgres://u@db:5432/x")).as_deref(),
            Some("postgres://u@db:5432/x")
        );
        assert_eq!(store_option(None), None);
        assert_eq!(quote("/tmp/a b"), "'/tmp/a b'");
    }
}
