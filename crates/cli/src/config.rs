//! `secureclaw.toml`: parsed with unknown keys rejected, then validated, so that every
//! mistake is reported with the key it concerns.
//!
//! ```toml
//! [server]
//! http_bind = "127.0.0.1:8787"      # loopback by default
//! state_dir = "/var/lib/secureclaw" # default: see `secureclaw --help`
//! policy_files = ["policies/extra.cedar"]
//! allowed_origins = ["http://localhost:6274"]
//! default_caller = "local-user"
//! client_confirmation = "off"        # "trusted": MCP elicitation answers confirm actions
//! # Off by default: every Streamable HTTP MCP session needs a session bearer token (from
//! # POST /v1/sessions) and belongs to that token. `true` lets token-less MCP requests on a
//! # loopback bind use the default [task] session (any local process can then act in it).
//! tokenless_loopback_session = false
//! allow_upstream_state_access = false # true: start even if a stdio upstream reaches state_dir
//!
//! [store]                            # default: SQLite in state_dir
//! # PostgreSQL shared by several gateways (also `--store URL`); keys stay in state_dir or
//! # $SECURECLAW_KEYS[_FILE] and must be the same on every replica.
//! # url = "postgres://secureclaw@db.internal:5432/secureclaw"
//! retention_ms = 604800000          # keep expired session state 7 days, then sweep it; 0 = never
//! sweep_interval_ms = 3600000        # how often serve/wrap sweep (first at start-up)
//! sweep_batch = 500                  # sessions (and handles) per transaction
//! # audit_archive_dir = "audit-archive" # archive the audit log there automatically (off unset)
//! # audit_archive_after_ms = 2592000000 # records older than this (30 days) are archived
//!
//! [task]                             # default session (stdio; token-less loopback HTTP if enabled)
//! request = "Send invoice INV-42 to approver@corp.example"
//! trusted_targets = ["approver@corp.example"]
//! granted_tools = ["office__pay_invoice"] # destructive/financial tools the user asked for
//!
//! [gateway.limits]
//! max_argument_bytes = 4194304
//! upstream_timeout_ms = 30000          # one upstream call
//! upstream_startup_timeout_ms = 30000  # each upstream's handshake, and its tools/list
//!
//! [[gateway.classify]]
//! upstream = "office"
//! tool = "read_invoice"
//! path = "/iban"
//! label = "iban"
//! sensitivity = "high"
//! allowed_sinks = ["office__pay_invoice"]
//! anchor = true
//!
//! [[gateway.tools]]
//! tool = "office__save_draft"
//! targets = []
//!
//! [[gateway.tools]]
//! tool = "office__pay_invoice"
//! sink = "egress"                    # egress (data leaves) | store (default: a read returns it)
//! financial = true                   # needs confirmation unless the task grants the tool
//!
//! [[upstream]]
//! id = "office"
//! transport = "stdio"
//! command = "secureclaw"
//! args = ["demo-tools", "--state", "/tmp/office.json"]
//!
//! # Issue-time privacy contracts (Ghost Tool Calls). Off by default: pre-commit calls are
//! # then deferred until their branch is promoted.
//! [gateway.speculation]
//! enabled = true
//!
//! [[gateway.speculation.labeler.destinations]]
//! pattern = "https://api.search.example/*"
//! label = "public"                   # public|tenant-internal|sensitive|regulated|forbidden
//!
//! [[gateway.speculation.labeler.effects]]
//! tool = "docs__*"
//! effect = "local-read"              # pure-local|local-read|external-read|external-write|…
//!
//! [[gateway.speculation.contracts]]
//! scope = "*"                        # first contract whose scope matches upstream__tool
//! allowed_tools = ["search__*", "docs__*"]
//! allowed_destinations = ["*"]
//! max_destination_label = "sensitive"
//! max_arg_label = "personal"         # sensitive and intent-revealing fields are forbidden
//! branch_threshold = 0.7             # τ: pre-commit calls below it are deferred
//! budget = 5                         # pre-commit dispatches with sensitive fields per task
//! shadow_required = false
//!
//! [[gateway.speculation.substitutes]]
//! tool = "search__*"
//! kind = "cache"                     # empty|cache|tool (tool needs `with = "local__search"`)
//!
//! # OpenTelemetry traces (also on with $OTEL_EXPORTER_OTLP_ENDPOINT); off by default.
//! [telemetry]
//! otlp_endpoint = "http://localhost:4318" # OTLP/HTTP (protobuf); spans go to …/v1/traces
//! service_name = "secureclaw"            # default: $OTEL_SERVICE_NAME, else "secureclaw"
//! ```

use anyhow::{Context, Result, bail};
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_gateway::{GatewayConfig, RetentionPolicy, UpstreamSpec};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Keys every `[[gateway.speculation.contracts]]` table must have (the others have defaults).
const CONTRACT_REQUIRED: &[&str] = &[
    "allowed_tools",
    "allowed_destinations",
    "max_destination_label",
    "max_arg_label",
    "branch_threshold",
];

/// Every required key missing from every contract table of `text`, in one message (serde
/// stops at the first; a new user fixed one field per run). `None` when none is missing or
/// the text is not TOML (the parser then names the problem).
fn missing_contract_fields(text: &str) -> Option<String> {
    let value: toml::Value = toml::from_str(text).ok()?;
    let contracts = value
        .get("gateway")?
        .get("speculation")?
        .get("contracts")?
        .as_array()?;
    let problems: Vec<String> = contracts
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let table = c.as_table()?;
            let missing: Vec<String> = CONTRACT_REQUIRED
                .iter()
                .filter(|k| !table.contains_key(**k))
                .map(|k| format!("`{k}`"))
                .collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "gateway.speculation.contracts[{i}] is missing {}",
                    missing.join(", ")
                )
            })
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The `[server]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address of the HTTP API and Streamable HTTP MCP endpoint.
    pub http_bind: SocketAddr,
    /// State directory (keys, database, operator token).
    pub state_dir: Option<PathBuf>,
    /// Extra Cedar policy files, relative to the config file.
    pub policy_files: Vec<PathBuf>,
    /// Origins allowed to call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// Extra Host header values accepted (besides localhost names).
    pub allowed_hosts: Vec<String>,
    /// Caller of the default session.
    pub default_caller: String,
    /// Whether MCP elicitation answers confirm actions: `"off"` (default; approvals go
    /// through the CLI or operator API) or `"trusted"` (the operator declares the MCP client
    /// a trusted host with a human the agent runtime cannot answer for).
    pub client_confirmation: ClientConfirmation,
    /// Replaced by `client_confirmation`; rejected with a message naming it.
    #[serde(default, skip_serializing)]
    pub elicitation: Option<bool>,
    /// Serve MCP requests that carry no bearer token on a loopback bind with the default
    /// `[task]` session. Default `false`: every MCP session then needs a session token.
    /// Ignored on non-loopback binds.
    pub tokenless_loopback_session: bool,
    /// Start even if a stdio upstream's command, arguments or working directory reach the
    /// state directory (keys, database, operator token). Off by default.
    pub allow_upstream_state_access: bool,
    /// `[server.limits]`: connections, requests and MCP sessions.
    pub limits: ServerLimits,
}

/// `[server.limits]`: bounds on what HTTP peers can make the gateway hold. Every value must
/// be positive. Durations in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerLimits {
    /// Open HTTP connections in all. Default 1024.
    pub max_connections: usize,
    /// Open HTTP connections from one IP address. Default 64.
    pub max_connections_per_peer: usize,
    /// HTTP requests in flight from one IP address (`429` beyond). Default 64.
    pub max_in_flight_per_peer: usize,
    /// Time for a request's line and headers (also between keep-alive requests). Default 10 s.
    pub header_read_timeout_ms: u64,
    /// Time for a request's body once its headers are in. Default 30 s.
    pub body_read_timeout_ms: u64,
    /// A connection with nothing in flight and no traffic for this long is closed. Default 60 s.
    pub idle_timeout_ms: u64,
    /// Live MCP sessions (`/mcp`) per session bearer token; `initialize` beyond is refused
    /// (`429`). Default 16.
    pub max_mcp_sessions_per_token: usize,
    /// Live token-less MCP sessions (only with `tokenless_loopback_session`). Default 16.
    pub max_tokenless_mcp_sessions: usize,
    /// An MCP session with no request for this long is closed and its state freed. Default
    /// 5 min.
    pub mcp_session_idle_ms: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        let conn = secureclaw_server::ConnLimits::default();
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            max_connections: conn.max_connections,
            max_connections_per_peer: conn.max_connections_per_peer,
            max_in_flight_per_peer: conn.max_in_flight_per_peer,
            header_read_timeout_ms: ms(conn.header_read_timeout),
            body_read_timeout_ms: ms(conn.body_read_timeout),
            idle_timeout_ms: ms(conn.idle_timeout),
            max_mcp_sessions_per_token: 16,
            max_tokenless_mcp_sessions: 16,
            mcp_session_idle_ms: 300_000,
        }
    }
}

impl ServerLimits {
    /// The connection limits of the HTTP server loop.
    #[must_use]
    pub fn conn(&self) -> secureclaw_server::ConnLimits {
        use std::time::Duration;
        secureclaw_server::ConnLimits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            max_in_flight_per_peer: self.max_in_flight_per_peer,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
        }
    }

    fn validate(&self) -> Result<()> {
        let counts = [
            ("max_connections", self.max_connections as u64),
            (
                "max_connections_per_peer",
                self.max_connections_per_peer as u64,
            ),
            ("max_in_flight_per_peer", self.max_in_flight_per_peer as u64),
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            (
                "max_mcp_sessions_per_token",
                self.max_mcp_sessions_per_token as u64,
            ),
            (
                "max_tokenless_mcp_sessions",
                self.max_tokenless_mcp_sessions as u64,
            ),
            ("mcp_session_idle_ms", self.mcp_session_idle_ms),
        ];
        for (key, value) in counts {
            if value == 0 {
                bail!("server.limits.{key} must be positive");
            }
        }
        Ok(())
    }
}

/// `[server] client_confirmation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientConfirmation {
    /// MCP elicitation never confirms (default).
    #[default]
    Off,
    /// The MCP client is a trusted host: its elicitation answers confirm.
    Trusted,
}

impl ClientConfirmation {
    /// Whether elicitation answers confirm.
    #[must_use]
    pub fn is_trusted(self) -> bool {
        self == ClientConfirmation::Trusted
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            http_bind: SocketAddr::from(([127, 0, 0, 1], 8787)),
            state_dir: None,
            policy_files: Vec::new(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            default_caller: "local-user".to_owned(),
            client_confirmation: ClientConfirmation::Off,
            elicitation: None,
            tokenless_loopback_session: false,
            allow_upstream_state_access: false,
            limits: ServerLimits::default(),
        }
    }
}

/// The `[store]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// `postgres://…`: the PostgreSQL database shared by several gateways. Unset: the
    /// embedded SQLite database in the state directory.
    pub url: Option<String>,
    /// How long session-scoped state (handles and their vault values, grant uses, written
    /// sets, speculation state, rate buckets, the session record) is kept after its session
    /// or handle expired, in milliseconds; then the retention sweep removes it. 0: never
    /// sweep (the database grows with every call). Default 604 800 000 (7 days).
    pub retention_ms: u64,
    /// Milliseconds between two sweeps of `serve` and `wrap` (the first runs at start-up).
    /// 1 000 to 604 800 000; default 3 600 000 (1 hour).
    pub sweep_interval_ms: u64,
    /// Sessions (and handles) removed per transaction: a backlog is swept in batches so that
    /// no batch holds the write lock for long. 1 to 100 000; default 500.
    pub sweep_batch: u32,
    /// Directory where `serve` and `wrap` archive the audit log automatically (every
    /// `sweep_interval_ms`): records older than `audit_archive_after_ms` are written to a new
    /// file there, checkpointed and pruned from the database (`secureclaw audit archive`).
    /// Relative to the config file's directory. Unset (the default): never archive
    /// automatically — the audit log then grows with every call.
    pub audit_archive_dir: Option<PathBuf>,
    /// Age in milliseconds past which `audit_archive_dir` archiving moves records out of the
    /// database. 3 600 000 (1 hour) to 100 years; default 2 592 000 000 (30 days). Only with
    /// `audit_archive_dir`.
    pub audit_archive_after_ms: Option<u64>,
}

impl Default for StoreSection {
    fn default() -> Self {
        let d = RetentionPolicy::default();
        Self {
            url: None,
            retention_ms: d.retention_ms,
            sweep_interval_ms: RetentionPolicy::DEFAULT_INTERVAL_MS,
            sweep_batch: d.batch,
            audit_archive_dir: None,
            audit_archive_after_ms: None,
        }
    }
}

/// Default `[store] audit_archive_after_ms`: 30 days.
pub const DEFAULT_AUDIT_ARCHIVE_AFTER_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Longest `[store] retention_ms` accepted: 100 years (anything longer is a unit mistake;
/// 0 turns the sweep off).
const MAX_RETENTION_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

impl StoreSection {
    /// The retention policy these settings describe.
    pub fn retention(&self) -> RetentionPolicy {
        RetentionPolicy {
            retention_ms: self.retention_ms,
            interval: std::time::Duration::from_millis(self.sweep_interval_ms),
            batch: self.sweep_batch,
        }
    }

    /// The automatic audit archiving these settings describe, if `audit_archive_dir` is set.
    pub fn audit_archive(&self) -> Option<secureclaw_gateway::AuditArchivePolicy> {
        Some(secureclaw_gateway::AuditArchivePolicy {
            dir: self.audit_archive_dir.clone()?,
            older_than_ms: self
                .audit_archive_after_ms
                .unwrap_or(DEFAULT_AUDIT_ARCHIVE_AFTER_MS),
            interval: std::time::Duration::from_millis(self.sweep_interval_ms),
        })
    }

    /// Range checks, naming the key.
    fn validate(&self) -> Result<()> {
        match (&self.audit_archive_dir, self.audit_archive_after_ms) {
            (None, Some(_)) => bail!(
                "store.audit_archive_after_ms is set but store.audit_archive_dir is not: set the \
                 directory to archive the audit log automatically, or remove the key"
            ),
            (Some(dir), _) if dir.as_os_str().is_empty() => {
                bail!("store.audit_archive_dir must name a directory")
            }
            (Some(dir), _) if dir.exists() && !dir.is_dir() => bail!(
                "store.audit_archive_dir `{}` exists and is not a directory",
                dir.display()
            ),
            (_, Some(ms)) if !(3_600_000..=MAX_RETENTION_MS).contains(&ms) => bail!(
                "store.audit_archive_after_ms = {ms} must be between 3600000 (1 hour) and 100 \
                 years (the value is in milliseconds; 2592000000 is 30 days)"
            ),
            _ => {}
        }
        if let Some(url) = &self.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            bail!("store.url must start with `postgres://` or `postgresql://`");
        }
        if self.retention_ms > MAX_RETENTION_MS {
            bail!(
                "store.retention_ms = {} is more than 100 years (the value is in milliseconds; \
                 604800000 is 7 days; 0 never sweeps)",
                self.retention_ms
            );
        }
        if !(1_000..=604_800_000).contains(&self.sweep_interval_ms) {
            bail!(
                "store.sweep_interval_ms = {} must be between 1000 (1 s) and 604800000 (7 days)",
                self.sweep_interval_ms
            );
        }
        if !(1..=100_000).contains(&self.sweep_batch) {
            bail!(
                "store.sweep_batch = {} must be between 1 and 100000",
                self.sweep_batch
            );
        }
        Ok(())
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`.
    pub server: ServerSection,
    /// `[store]`.
    pub store: StoreSection,
    /// `[task]`: envelope of the default session.
    pub task: Option<TaskEnvelope>,
    /// `[gateway]`.
    pub gateway: GatewayConfig,
    /// `[[upstream]]`.
    pub upstream: Vec<UpstreamSpec>,
    /// `[telemetry]`: OpenTelemetry trace export.
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// A parse error with a hint where serde's wording does not say what to change: a repeated
/// table written with single brackets (`[gateway.directory]`) reads as "invalid type: map,
/// expected a sequence" (new-user trial).
fn with_hint(message: &str) -> String {
    if message.contains("expected a sequence") {
        format!(
            "{message}\nhint: a table that can repeat — [[upstream]], [[gateway.tools]], \
             [[gateway.classify]], [[gateway.directory]], [[gateway.speculation.contracts]] — \
             is written with double brackets"
        )
    } else {
        message.to_owned()
    }
}

impl Config {
    /// Read, parse and validate `path`. Relative paths in it (policy files, the audit archive
    /// directory, a stdio upstream's `cwd`) are resolved against the file's directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config `{}`", path.display()))?;
        if let Some(missing) = missing_contract_fields(&text) {
            bail!("{}: {missing}", path.display());
        }
        let mut config: Config = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), with_hint(&e.to_string())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in &mut config.server.policy_files {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        if let Some(p) = &mut config.store.audit_archive_dir
            && p.is_relative()
            && !p.as_os_str().is_empty()
        {
            *p = base.join(&*p);
        }
        // A stdio upstream's relative `cwd` is the config file's, like every other path in it,
        // so that a config runs the same from any directory (new-user trial: the example's
        // paths worked only from the repository's root).
        for up in &mut config.upstream {
            if let secureclaw_gateway::UpstreamTransport::Stdio { cwd: Some(p), .. } =
                &mut up.transport
                && p.is_relative()
            {
                *p = base.join(&*p);
            }
        }
        config
            .validate()
            .with_context(|| format!("invalid config `{}`", path.display()))?;
        Ok(config)
    }

    /// Semantic checks serde cannot express.
    pub fn validate(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for (i, up) in self.upstream.iter().enumerate() {
            secureclaw_gateway::catalog::check_upstream_id(&up.id)
                .map_err(|e| anyhow::anyhow!("upstream[{i}]: {e}"))?;
            if !seen.insert(up.id.as_str()) {
                bail!("upstream[{i}].id `{}` is used twice", up.id);
            }
        }
        let l = &self.gateway.limits;
        if l.max_argument_bytes == 0 {
            bail!("gateway.limits.max_argument_bytes must be positive");
        }
        if l.max_in_flight_bytes_per_session == 0 {
            bail!("gateway.limits.max_in_flight_bytes_per_session must be positive");
        }
        if l.max_in_flight_bytes < l.max_in_flight_bytes_per_session {
            bail!(
                "gateway.limits.max_in_flight_bytes ({}) must be at least max_in_flight_bytes_per_session ({})",
                l.max_in_flight_bytes,
                l.max_in_flight_bytes_per_session
            );
        }
        if l.max_held_calls_per_session == 0 || l.max_held_bytes_per_session == 0 {
            bail!(
                "gateway.limits.max_held_calls_per_session and max_held_bytes_per_session must be positive"
            );
        }
        for (key, value) in [
            ("max_pending_per_session", l.max_pending_per_session as u64),
            ("session_rate_per_s", u64::from(l.session_rate_per_s)),
            ("session_burst", u64::from(l.session_burst)),
            ("tool_rate_per_s", u64::from(l.tool_rate_per_s)),
            ("tool_burst", u64::from(l.tool_burst)),
        ] {
            if value == 0 {
                bail!("gateway.limits.{key} must be positive");
            }
        }
        if l.artifact_ttl_ms == 0
            || l.upstream_timeout_ms == 0
            || l.upstream_startup_timeout_ms == 0
        {
            bail!(
                "gateway.limits.artifact_ttl_ms, upstream_timeout_ms and upstream_startup_timeout_ms must be positive"
            );
        }
        if self.gateway.summary.max_entries == 0 || self.gateway.summary.max_string_chars == 0 {
            bail!("gateway.summary.max_entries and max_string_chars must be positive");
        }
        for (i, r) in self.gateway.classify.iter().enumerate() {
            if !r.path.starts_with('/') {
                bail!(
                    "gateway.classify[{i}].path `{}` must be a JSON pointer starting with `/`",
                    r.path
                );
            }
        }
        self.telemetry.validate()?;
        if self.server.elicitation.is_some() {
            bail!(
                "server.elicitation was replaced by server.client_confirmation: elicitation \
                 answers confirm only when the MCP client is a trusted host; write \
                 `client_confirmation = \"trusted\"` only for a client with a human the agent \
                 cannot answer for, or remove the key (default \"off\")"
            );
        }
        self.gateway
            .validate()
            .map_err(|e| anyhow::anyhow!("gateway.{e}"))?;
        self.store.validate()?;
        self.server.limits.validate()?;
        if self.server.default_caller.trim().is_empty() {
            bail!("server.default_caller must not be empty");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's configuration reference parses and validates (it claims to show every
    /// key, so a renamed key must break this test).
    #[test]
    fn the_readme_configuration_reference_is_valid() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("## Configuration reference")
            .nth(1)
            .unwrap_or_default();
        let block = section
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap_or_default();
        assert!(block.contains("[gateway.speculation]"), "{block}");
        let config: Config = match toml::from_str(block) {
            Ok(c) => c,
            Err(e) => panic!("README configuration reference: {e}"),
        };
        if let Err(e) = config.validate() {
            panic!("README configuration reference: {e:#}");
        }
        assert!(config.gateway.speculation.enabled);
        assert_eq!(config.gateway.speculation.contracts.len(), 1);
    }

    /// Issue 15: a contract missing several fields names them all in one run; the required
    /// list is complete (a contract with exactly those keys parses).
    #[test]
    fn contracts_report_every_missing_field_at_once() {
        let text = "[gateway.speculation]\nenabled = true\n\n[[gateway.speculation.contracts]]\nallowed_tools = [\"*\"]\n\n[[gateway.speculation.contracts]]\nallowed_tools = [\"*\"]\nallowed_destinations = [\"*\"]\nmax_destination_label = \"sensitive\"\nmax_arg_label = \"personal\"\nbranch_threshold = 0.5\n";
        let msg = missing_contract_fields(text).unwrap();
        assert_eq!(
            msg,
            "gateway.speculation.contracts[0] is missing `allowed_destinations`, `max_destination_label`, `max_arg_label`, `branch_threshold`"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let err = format!("{:#}", Config::load(&path).unwrap_err());
        assert!(err.contains("`max_arg_label`, `branch_threshold`"), "{err}");
        // Exactly the required keys parse: the list is complete.
        let complete = text.replace(
            "[[gateway.speculation.contracts]]\nallowed_tools = [\"*\"]\n\n",
            "",
        );
        assert_eq!(missing_contract_fields(&complete), None);
        let c: Config = toml::from_str(&complete).unwrap();
        assert_eq!(c.gateway.speculation.contracts.len(), 1);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = toml::from_str::<Config>("[server]\nhttp_bind = \"127.0.0.1:1\"\nbogus = 1\n")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("bogus")));
        let err = toml::from_str::<Config>("[gateway.limits]\nmax_argument_byte = 1\n")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("max_argument_byte")));
    }

    /// Every limit is validated on load: zero is refused, naming the key.
    #[test]
    fn limits_must_be_positive() {
        for (text, needle) in [
            (
                "[server.limits]\nmax_connections_per_peer = 0\n",
                "server.limits.max_connections_per_peer",
            ),
            (
                "[server.limits]\nheader_read_timeout_ms = 0\n",
                "server.limits.header_read_timeout_ms",
            ),
            (
                "[server.limits]\nmax_mcp_sessions_per_token = 0\n",
                "server.limits.max_mcp_sessions_per_token",
            ),
            (
                "[gateway.limits]\nmax_held_bytes_per_session = 0\n",
                "max_held_bytes_per_session",
            ),
            (
                "[gateway.limits]\nmax_pending_per_session = 0\n",
                "gateway.limits.max_pending_per_session",
            ),
            (
                "[gateway.limits]\ntool_rate_per_s = 0\n",
                "gateway.limits.tool_rate_per_s",
            ),
        ] {
            let config: Config = toml::from_str(text).unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let config: Config = toml::from_str("[server.limits]\nidle_timeout_ms = 5\n").unwrap();
        assert!(config.validate().is_ok());
        assert_eq!(config.server.limits.conn().idle_timeout.as_millis(), 5);
    }

    /// `[store]` retention settings: defaults, and nonsense refused naming the key.
    #[test]
    fn store_retention_is_validated() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.store.retention_ms, 604_800_000);
        assert_eq!(c.store.retention().interval.as_millis(), 3_600_000);
        assert_eq!(c.store.sweep_batch, 500);
        assert!(c.validate().is_ok());
        let off: Config = toml::from_str("[store]\nretention_ms = 0\n").unwrap();
        assert!(off.validate().is_ok(), "0 turns the sweep off");
        for (text, needle) in [
            (
                "[store]\nretention_ms = 3153600000000000\n",
                "store.retention_ms",
            ),
            (
                "[store]\nsweep_interval_ms = 0\n",
                "store.sweep_interval_ms",
            ),
            (
                "[store]\nsweep_interval_ms = 999\n",
                "store.sweep_interval_ms",
            ),
            ("[store]\nsweep_batch = 0\n", "store.sweep_batch"),
            ("[store]\nsweep_batch = 1000000\n", "store.sweep_batch"),
        ] {
            let config: Config = toml::from_str(text).unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let err = toml::from_str::<Config>("[store]\nretention_ms = -1\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("retention_ms"), "{err}");
        let err = toml::from_str::<Config>("[store]\nretention = 1\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("retention"), "{err}");
    }

    /// `[store] audit_archive_*`: off by default; the age only with a directory, in range; a
    /// relative directory is the config file's; a file is not a directory.
    #[test]
    fn audit_archive_settings_are_validated() {
        let c: Config = toml::from_str("").unwrap();
        assert!(c.store.audit_archive().is_none(), "off by default");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[store]\naudit_archive_dir = \"arch\"\n").unwrap();
        let p = Config::load(&path).unwrap().store.audit_archive().unwrap();
        assert_eq!(p.dir, dir.path().join("arch"));
        assert_eq!(p.older_than_ms, DEFAULT_AUDIT_ARCHIVE_AFTER_MS);
        assert_eq!(p.interval.as_millis(), 3_600_000);
        std::fs::write(dir.path().join("file"), "x").unwrap();
        for (text, needle) in [
            (
                "[store]\naudit_archive_after_ms = 7200000\n".to_owned(),
                "audit_archive_dir is not",
            ),
            (
                "[store]\naudit_archive_dir = \"a\"\naudit_archive_after_ms = 5\n".to_owned(),
                "store.audit_archive_after_ms = 5",
            ),
            (
                "[store]\naudit_archive_dir = \"\"\n".to_owned(),
                "must name a directory",
            ),
            (
                "[store]\naudit_archive_dir = \"file\"\n".to_owned(),
                "is not a directory",
            ),
        ] {
            std::fs::write(&path, &text).unwrap();
            let err = format!("{:#}", Config::load(&path).unwrap_err());
            assert!(err.contains(needle), "{text}: {err}");
        }
        std::fs::write(
            &path,
            "[store]\naudit_archive_dir = \"/x\"\naudit_archive_after_ms = 7200000\n",
        )
        .unwrap();
        assert_eq!(
            Config::load(&path)
                .unwrap()
                .store
                .audit_archive()
                .unwrap()
                .older_than_ms,
            7_200_000,
            "positive control"
        );
    }

    #[test]
    fn upstream_tables_are_checked() {
        for (text, needle) in [
            (
                "[[upstream]]\nid = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\nargz = []\n",
                "argz",
            ),
            (
                "[[upstream]]\nid = \"a\"\ntransport = \"stdio\"\n",
                "needs `command`",
            ),
            (
                "[[upstream]]\nid = \"a\"\ntransport = \"http\"\nurl = \"ftp://x\"\n",
                "http://",
            ),
            (
                "[[upstream]]\nid = \"a\"\ntransport = \"carrier-pigeon\"\n",
                "unknown transport",
            ),
            (
                "[[upstream]]\nid = \"a\"\ntransport = \"http\"\nurl = \"http://x\"\ncommand = \"y\"\n",
                "belong to",
            ),
            (
                "[[upstream]]\nid = \"a\"\n",
                "needs `command` (a stdio server) or `url`",
            ),
            (
                "[[upstream]]\nid = \"a\"\ncommand = \"x\"\nurl = \"http://x\"\n",
                "both `command` and `url`",
            ),
        ] {
            let err = toml::from_str::<Config>(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
        // A repeated table written with single brackets gets a hint.
        let err = toml::from_str::<Config>(
            "[gateway.directory]\nupstream = \"a\"\ntool = \"b\"\npath = \"/x\"\nanchors = [\"a__c\"]\n",
        )
        .err()
        .map(|e| with_hint(&e.to_string()))
        .unwrap_or_default();
        assert!(err.contains("double brackets"), "{err}");
        assert_eq!(with_hint("unknown field `x`"), "unknown field `x`");
        let ok: Config = toml::from_str(
            "[[upstream]]\nid = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap_or_default();
        assert_eq!(ok.upstream.len(), 1);
        // Without `transport`, `command` means stdio and `url` means http.
        let inferred: Config = toml::from_str(
            "[[upstream]]\nid = \"a\"\ncommand = \"x\"\n\n[[upstream]]\nid = \"b\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap_or_default();
        assert_eq!(inferred.upstream.len(), 2);
        assert!(matches!(
            inferred.upstream[0].transport,
            secureclaw_gateway::config::UpstreamTransport::Stdio { .. }
        ));
        assert!(matches!(
            inferred.upstream[1].transport,
            secureclaw_gateway::config::UpstreamTransport::Http { .. }
        ));
    }

    #[test]
    fn speculation_section_parses_and_is_validated() {
        let text = "[gateway.speculation]\nenabled = true\n\n[[gateway.speculation.labeler.destinations]]\npattern = \"*\"\nlabel = \"public\"\n\n[[gateway.speculation.contracts]]\nallowed_tools = [\"*\"]\nallowed_destinations = [\"*\"]\nmax_destination_label = \"sensitive\"\nmax_arg_label = \"personal\"\nbranch_threshold = 0.7\nbudget = 5\n";
        let c: Config = toml::from_str(text).unwrap();
        assert!(c.gateway.speculation.enabled);
        assert_eq!(c.gateway.speculation.contracts[0].scope, "*");
        assert!(c.validate().is_ok());
        let bad = text.replace("0.7", "1.5");
        let c: Config = toml::from_str(&bad).unwrap();
        let err = format!("{:#}", c.validate().unwrap_err());
        assert!(err.contains("branch_threshold"), "{err}");
        let typo = text.replace("max_arg_label", "max_arg_lable");
        let err = toml::from_str::<Config>(&typo).unwrap_err().to_string();
        assert!(err.contains("max_arg_lable"), "{err}");
    }

    #[test]
    fn example_in_docs_parses() {
        let text = "[[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = \"x\"\n\n[[gateway.classify]]\npath = \"/iban\"\nlabel = \"iban\"\nsensitivity = \"high\"\n";
        let c: Config = toml::from_str(text).unwrap_or_default();
        assert_eq!(c.upstream.len(), 1);
        assert!(c.validate().is_ok());
        let bad = Config {
            upstream: vec![c.upstream[0].clone(), c.upstream[0].clone()],
            ..c
        };
        assert!(bad.validate().is_err());
    }
}
