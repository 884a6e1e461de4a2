//! Gateway configuration types (deserialized from the `[gateway]`, `[[upstream]]`, `[[tool]]`
//! and `[[classify]]` tables of `secureclaw.toml` by the binary). Every struct denies unknown
//! fields so that a typo is reported with the key's name instead of being ignored.

use secureclaw_core::classify::FieldRule;
use secureclaw_core::handle::{Sensitivity, SinkKind};
use secureclaw_core::policy::EffectClass;
use secureclaw_core::summary::SummaryConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Numeric limits and lifetimes. All durations in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest serialized argument object accepted (bytes). Default 4 MiB.
    pub max_argument_bytes: usize,
    /// Time allowed for one upstream call. Default 30 s.
    pub upstream_timeout_ms: u64,
    /// Time allowed for each upstream's start-up: the MCP handshake (also on reconnection)
    /// and, separately, `tools/list`. Default 30 s.
    pub upstream_startup_timeout_ms: u64,
    /// Freshness window of an authorization artifact. Default 60 s.
    pub artifact_ttl_ms: u64,
    /// Clock skew tolerated for artifacts dated in the future. Default 5 s.
    pub max_skew_ms: u64,
    /// Lifetime of a human confirmation (separate from artifact freshness). Default 1 h.
    pub confirmation_ttl_ms: u64,
    /// Lifetime of a handle. Default 24 h.
    pub handle_ttl_ms: u64,
    /// Lifetime of a session opened without an explicit expiry. Default 24 h.
    pub session_ttl_ms: u64,
    /// Speculative calls a session may have held (deferred, or shadowed to re-issue) until
    /// their branch settles; beyond it a call is refused with `limit_exceeded`. Default 256.
    pub max_held_calls_per_session: usize,
    /// Bytes of arguments (serialized JSON) a session may have held. Default 16 MiB.
    pub max_held_bytes_per_session: usize,
    /// Bytes of arguments of the calls, previews and commits one session has running at once
    /// in this process — their serialized JSON plus 512 for every value in them (a parsed
    /// value's cost in memory); a call that would take the session past it is
    /// refused with `limit_exceeded` before it is parsed further, checked or sent. A session
    /// with nothing running is always admitted (one call is bounded by
    /// `max_argument_bytes`). Default 16 MiB (red-team round 2: 60 concurrent calls of 4 MiB
    /// from one session took the gateway past 1.3 GB).
    pub max_in_flight_bytes_per_session: usize,
    /// The same weight summed over every session of this process: a call that would take
    /// the gateway past it is refused with `limit_exceeded` (`max_in_flight_bytes`) while
    /// anything else runs, so that many sessions each within their own budget cannot together
    /// exhaust memory (README limitation of round 3). Default 256 MiB; at least
    /// `max_in_flight_bytes_per_session`.
    pub max_in_flight_bytes: usize,
    /// Actions a session may have waiting: previews neither committed nor expired
    /// (`artifact_ttl_ms`), and approvals pending or approved but not yet used. Beyond it a
    /// preview (or a call that would leave one waiting) is refused with `limit_exceeded`
    /// before anything is stored. Counted by each gateway process. Default 256 (the bypass suite,
    /// on a frozen clock, leaves over 100 previews of one session uncommitted).
    pub max_pending_per_session: usize,
    /// Calls (`tools/call`, preview, commit) a session may make per second, sustained
    /// (token bucket). Default 50.
    pub session_rate_per_s: u32,
    /// Calls a session may make at once before `session_rate_per_s` applies (the bucket's
    /// size). Default 2000.
    pub session_burst: u32,
    /// Calls a session may make to one tool per second, sustained. Default 25.
    pub tool_rate_per_s: u32,
    /// Calls a session may make to one tool at once before `tool_rate_per_s` applies.
    /// Default 1000.
    pub tool_burst: u32,
    /// Distinct targets (target-field values, identifiers found anywhere in the arguments,
    /// object references) checked in one call; a call with more is refused with
    /// `too_many_targets` before anything is sent. Default 1024.
    pub max_targets_per_call: usize,
    /// Values a session's store writes are remembered by (so that reading them back never
    /// anchors): at most this many per session. Once full, every later read of the session is
    /// treated as reading something it wrote (never anchored). Default 65536.
    pub max_written_values_per_session: usize,
    /// Bytes of those remembered values per session, with the same overflow rule.
    /// Default 8 MiB.
    pub max_written_bytes_per_session: usize,
    /// Searches (reads whose tool matches the call's text against content: a `query`,
    /// `pattern`, `regex`… parameter, or `matches_content = true`) whose search text the task
    /// does not name, per session. Each answers "found / not found" about content the runtime
    /// may have been shown only as handles, so the number of such probes bounds what a
    /// compromised runtime can learn of withheld values (red-team F2/F3). Beyond it: denied
    /// with `match_budget`. Counted in the store, across replicas. Default 32.
    pub max_unanchored_match_reads: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_argument_bytes: 4 * 1024 * 1024,
            upstream_timeout_ms: 30_000,
            upstream_startup_timeout_ms: 30_000,
            artifact_ttl_ms: 60_000,
            max_skew_ms: 5_000,
            confirmation_ttl_ms: 3_600_000,
            handle_ttl_ms: 86_400_000,
            session_ttl_ms: 86_400_000,
            max_held_calls_per_session: 256,
            max_held_bytes_per_session: 16 * 1024 * 1024,
            max_in_flight_bytes_per_session: 16 * 1024 * 1024,
            max_in_flight_bytes: 256 * 1024 * 1024,
            max_pending_per_session: 256,
            session_rate_per_s: 50,
            session_burst: 2000,
            tool_rate_per_s: 25,
            tool_burst: 1000,
            max_targets_per_call: 1024,
            max_written_values_per_session: 65_536,
            max_written_bytes_per_session: 8 * 1024 * 1024,
            max_unanchored_match_reads: 32,
        }
    }
}

/// How to reach an upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// Endpoint URL, e.g. `http://127.0.0.1:8000/mcp`.
        url: String,
        /// Name of an environment variable holding a bearer token for the upstream.
        bearer_token_env: Option<String>,
    },
}

/// One upstream server. In TOML: `id`, `transport = "stdio" | "http"` (optional: `command` means
/// stdio, `url` means http), then `command`, `args`,
/// `env`, `cwd` (stdio) or `url`, `bearer_token_env` (http), `namespace` and `protocol`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawUpstream")]
pub struct UpstreamSpec {
    /// Short id (`[a-z0-9_-]+`, no `__`, no `_` at either end; see
    /// [`crate::catalog::check_upstream_id`]), used in namespaced tool names `id__tool` and in
    /// policies.
    pub id: String,
    /// Transport.
    #[serde(flatten)]
    pub transport: UpstreamTransport,
    /// Expose tools as `id__tool` (default). `wrap` turns this off for a single upstream so
    /// that clients see the server's own tool names.
    pub namespace: bool,
    /// The MCP version the gateway talks to it (issue 16 item 3; default 2025-11-25).
    pub protocol: UpstreamProtocol,
}

/// Which MCP version the gateway talks to an upstream (`protocol` in `[[upstream]]`; issue 16
/// item 3). In TOML: `"2025-11-25"` (the default), `"auto"` or `"2026-07-28"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpstreamProtocol {
    /// `initialize` with 2025-11-25: what every server of the 2025 versions answers.
    #[default]
    #[serde(rename = "2025-11-25")]
    V2025,
    /// `server/discover` first: 2026-07-28 (stateless, per-request `_meta`) if the server
    /// answers it, `initialize` with 2025-11-25 if it reports itself legacy or does not answer
    /// within 10 s. Not the default: a server that answers an unknown method with an empty
    /// result instead of an error fails to start.
    #[serde(rename = "auto")]
    Auto,
    /// `server/discover` only: 2026-07-28, and a server that does not speak it fails to start.
    #[serde(rename = "2026-07-28")]
    V2026,
}
/// The flat TOML form of [`UpstreamSpec`] (serde cannot deny unknown keys through a
/// flattened enum, so the spec is read flat and checked here).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    id: String,
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    bearer_token_env: Option<String>,
    #[serde(default = "yes")]
    namespace: bool,
    #[serde(default)]
    protocol: UpstreamProtocol,
}

impl TryFrom<RawUpstream> for UpstreamSpec {
    type Error = String;

    fn try_from(r: RawUpstream) -> Result<Self, String> {
        let id = r.id.clone();
        crate::catalog::check_upstream_id(&id).map_err(|e| e.to_string())?;
        // Without `transport`, `command` means stdio and `url` means http.
        let kind = match (&r.transport, &r.command, &r.url) {
            (Some(t), _, _) => t.clone(),
            (None, Some(_), None) => "stdio".to_owned(),
            (None, None, Some(_)) => "http".to_owned(),
            (None, Some(_), Some(_)) => {
                return Err(format!(
                    "upstream `{id}`: both `command` and `url` are set; set `transport = \"stdio\"` or `transport = \"http\"`"
                ));
            }
            (None, None, None) => {
                return Err(format!(
                    "upstream `{id}`: needs `command` (a stdio server) or `url` (a Streamable HTTP server)"
                ));
            }
        };
        let transport = match kind.as_str() {
            "stdio" => {
                if r.url.is_some() || r.bearer_token_env.is_some() {
                    return Err(format!(
                        "upstream `{id}`: `url` and `bearer_token_env` belong to transport \"http\""
                    ));
                }
                let command = r.command.ok_or_else(|| {
                    format!("upstream `{id}`: transport \"stdio\" needs `command`")
                })?;
                UpstreamTransport::Stdio {
                    command,
                    args: r.args,
                    env: r.env,
                    cwd: r.cwd,
                }
            }
            "http" => {
                if r.command.is_some() || !r.args.is_empty() || !r.env.is_empty() || r.cwd.is_some()
                {
                    return Err(format!(
                        "upstream `{id}`: `command`, `args`, `env` and `cwd` belong to transport \"stdio\""
                    ));
                }
                let url = r
                    .url
                    .ok_or_else(|| format!("upstream `{id}`: transport \"http\" needs `url`"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "upstream `{id}`: `url` must start with http:// or https://"
                    ));
                }
                UpstreamTransport::Http {
                    url,
                    bearer_token_env: r.bearer_token_env,
                }
            }
            other => {
                return Err(format!(
                    "upstream `{id}`: unknown transport `{other}` (expected \"stdio\" or \"http\")"
                ));
            }
        };
        Ok(Self {
            id: r.id,
            transport,
            namespace: r.namespace,
            protocol: r.protocol,
        })
    }
}

fn yes() -> bool {
    true
}

/// Operator override for tools matching a pattern (upstream annotations are only hints).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// `upstream__tool` pattern with `*` wildcards.
    pub tool: String,
    /// Effect class; overrides `readOnlyHint`.
    #[serde(default)]
    pub effect: Option<EffectClass>,
    /// Destructive, both ways. Without it an effect is destructive unless the shipped catalog
    /// lists it as additive for its server (and the server agrees); an upstream's
    /// `destructiveHint: false` alone lowers nothing.
    #[serde(default)]
    pub destructive: Option<bool>,
    /// Financial (payments, transfers, refunds): like a destructive effect, it needs a trusted
    /// confirmation unless the task grants the tool, even when every target is anchored.
    #[serde(default)]
    pub financial: Option<bool>,
    /// Sink kind of an effect tool: `egress` (data leaves: mail, HTTP posts, payments) or
    /// `store` (a later read can return it: files, documents, records). Default `store`: a
    /// handle then resolves into the tool only if its record names the tool.
    #[serde(default)]
    pub sink: Option<SinkKind>,
    /// Argument names holding effect targets; overrides the default list.
    #[serde(default)]
    pub targets: Option<Vec<String>>,
    /// Hide and refuse the tool entirely.
    #[serde(default)]
    pub hidden: bool,
    /// Let the tool's effects on **protected objects** run without the confirmation they
    /// otherwise need (reason `protected_object`; issue 11 item 3). A protected object is one
    /// whose content the session saw only as handles, or into which a handle was resolved: an
    /// edit, dry run, move or overwrite of it can show the runtime protected values (a diff, a
    /// match/no-match answer, a value mangled past the detectors). Default `false` (safe);
    /// set it only for a tool whose result and effect cannot depend on the object's existing
    /// content (it replaces a record's fields, say), or if you accept that risk.
    #[serde(default)]
    pub allow_protected_objects: bool,
    /// The tool's effect or result depends on matching the call's text against the object's
    /// existing content (an edit with old text, a search-and-replace, a dry run): its effect on
    /// an object the session has not read waits for a confirmation (reason `object_unread`),
    /// since "found" / "not found" and diffs would answer questions about content the runtime
    /// was never shown. Both ways, and authoritative; without it a store effect is content
    /// matching when the shipped catalog lists it (the filesystem server's `edit_file`) or its
    /// input schema has a match-text or dry-run parameter (`oldText`, `old_str`, `search`,
    /// `pattern`, `dryRun`, …; the upstream can only tighten this way). On a read tool it
    /// marks a search (default: a `query`, `pattern`, `search`, `regex`, `filter`, …
    /// parameter in its schema), whose calls with search text the task does not name count
    /// against `max_unanchored_match_reads`; `false` exempts a search that cannot reach
    /// protected content.
    #[serde(default)]
    pub matches_content: Option<bool>,
}

/// Everything the gateway needs besides keys, store, policy and upstream connections.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Limits and lifetimes.
    pub limits: Limits,
    /// Operator's trusted targets (anchored for every session): addresses, `@domain`,
    /// directories ending in `/`, accounts, URLs.
    pub trusted_targets: Vec<String>,
    /// Classification rules, first match wins.
    pub classify: Vec<FieldRule>,
    /// `[[gateway.directory]]`: reads whose results list an upstream's own destinations
    /// (channels, members); their entries anchor targets of that upstream's non-`egress`
    /// tools ([`secureclaw_core::classify::DirectoryRule`]). None by default.
    pub directory: Vec<secureclaw_core::classify::DirectoryRule>,
    /// Summary operator settings.
    pub summary: SummaryConfig,
    /// Tool overrides, first match wins.
    pub tools: Vec<ToolRule>,
    /// Issue-time privacy contracts for speculative and committed calls (`[gateway.speculation]`).
    pub speculation: SpeculationConfig,
    /// Tool-definition pinning against rug pulls (`pin = "on-first-use" | "manual" | "off"`;
    /// default `on-first-use`): see [`crate::pins`].
    pub pin: crate::pins::PinMode,
    /// `[gateway.approvals]`: deny on timeout and the webhooks told of pending actions.
    pub approvals: ApprovalsConfig,
}

/// `[gateway.approvals]`: what happens to an approval while it waits (issue 15 "Channels").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// An approval still pending this long (milliseconds) after it was requested is denied,
    /// decided by `timeout` in the approval record and the audit log; its runtime then gets
    /// `confirmation_denied`. 0 never denies (a pending entry then waits until its session
    /// is swept). Default 1 hour (3 600 000), the lifetime of a confirmation: a human answer
    /// later than that is a decision about a call whose context has moved on.
    pub timeout_ms: u64,
    /// The base URL operators open the gateway at (`https://gw.example.com`); notifications
    /// link to `{public_url}/approvals`. Default: none (`serve` uses `http://{http_bind}`;
    /// `wrap` names the `approvals ui` command instead).
    pub public_url: Option<String>,
    /// `[[gateway.approvals.webhooks]]`: each is sent every action that goes pending and every
    /// approval denied on timeout.
    pub webhooks: Vec<WebhookConfig>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 3_600_000,
            public_url: None,
            webhooks: Vec::new(),
        }
    }
}

/// The body a webhook is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"event": "approval.pending", "action_id": …, "tool": …, …}` (README "Deny on timeout
    /// and webhooks" lists the fields).
    #[default]
    Json,
    /// A Slack incoming-webhook message: `text` plus Block Kit blocks with an "Open approvals"
    /// button linking to the approvals page.
    Slack,
}

/// One `[[gateway.approvals.webhooks]]` entry. Exactly one of `url` and `url_env`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The URL to POST to (`http` or `https`).
    #[serde(default)]
    pub url: Option<String>,
    /// The name of an environment variable holding the URL (a Slack webhook URL is a
    /// credential: keep it out of the config file). Read at start-up; unset is an error.
    #[serde(default)]
    pub url_env: Option<String>,
    /// The name of an environment variable holding a shared secret (at least 16 bytes): each
    /// notice then carries `X-SecureClaw-Timestamp` (Unix seconds) and
    /// `X-SecureClaw-Signature: sha256=HEX`, the HMAC-SHA256 of `TIMESTAMP.BODY` under it, so
    /// a receiver can refuse forged or replayed notices. Read at start-up; unset is an error.
    /// Default: none (Slack incoming webhooks do not check signatures).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// The body's shape. Default `json`.
    #[serde(default)]
    pub format: WebhookFormat,
    /// Time for one delivery attempt, milliseconds. Default 5 000.
    #[serde(default = "default_webhook_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_webhook_timeout_ms() -> u64 {
    5_000
}

impl ApprovalsConfig {
    /// Checks serde cannot express: each webhook has exactly one of `url` / `url_env`, a URL
    /// that is `http(s)://` with a host, a positive timeout; `public_url` is `http(s)://`.
    ///
    /// # Errors
    /// A message naming the key (`approvals.webhooks[0]: …`).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(u) = &self.public_url {
            check_http_url(u).map_err(|e| format!("approvals.public_url: {e}"))?;
        }
        for (i, w) in self.webhooks.iter().enumerate() {
            match (&w.url, &w.url_env) {
                (Some(u), None) => {
                    check_http_url(u).map_err(|e| format!("approvals.webhooks[{i}].url: {e}"))?
                }
                (None, Some(name)) if !name.trim().is_empty() => {}
                _ => {
                    return Err(format!(
                        "approvals.webhooks[{i}]: set exactly one of `url` and `url_env` (the \
                         name of an environment variable holding the URL)"
                    ));
                }
            }
            if w.timeout_ms == 0 {
                return Err(format!(
                    "approvals.webhooks[{i}].timeout_ms must be positive"
                ));
            }
        }
        Ok(())
    }
}

/// `Ok` for an `http://` or `https://` URL with a host; the problem otherwise.
pub(crate) fn check_http_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| format!("`{}` must start with http:// or https://", redact_url(u)))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!("`{}` has no host", redact_url(u)));
    }
    Ok(())
}

/// A URL as it may be shown in logs and errors: scheme and host only (a webhook URL's path
/// is often its secret).
#[must_use]
pub fn redact_url(u: &str) -> String {
    let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or(host);
    if scheme.is_empty() {
        "…".to_owned()
    } else {
        format!("{scheme}://{host}/…")
    }
}

/// What answers a shadowed call (Ghost Tool Calls §4 SHADOW).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubstituteKind {
    /// An empty result.
    #[default]
    Empty,
    /// The result of the identical committed call earlier in this session, else empty.
    Cache,
    /// Another (local, trusted) tool of a configured upstream, named by `with`.
    Tool,
}

/// A local substitute for shadowed calls of the tools matching `tool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubstituteRule {
    /// `upstream__tool` pattern.
    pub tool: String,
    /// Kind of substitute.
    #[serde(default)]
    pub kind: SubstituteKind,
    /// For `kind = "tool"`: the exposed name (`upstream__tool`) of the substitute tool.
    #[serde(default)]
    pub with: Option<String>,
}

/// `[gateway.speculation]`: the contract monitor (Ghost Tool Calls, arXiv 2606.02483).
///
/// Disabled by default: committed calls then pass exactly as without this section, and every
/// pre-commit call (`_meta["dev.secureclaw/mode"]` other than `committed`) is deferred until
/// its branch is promoted — speculation is off unless the operator turns it on. Enabled,
/// every call, committed or not, is labeled and decided by the first contract whose scope
/// matches (none matching = BLOCK).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeculationConfig {
    /// Turn the monitor on.
    pub enabled: bool,
    /// Labeler: mode, field rules, lexicon terms, destination labels, effect overrides and
    /// rewrite transformations.
    pub labeler: secureclaw_core::labeler::LabelerConfig,
    /// Contracts, first matching scope wins.
    pub contracts: Vec<secureclaw_core::contract::Contract>,
    /// Local substitutes for SHADOW, first match wins; none = empty result.
    pub substitutes: Vec<SubstituteRule>,
}

impl SpeculationConfig {
    /// Semantic checks: thresholds in `[0, 1]`, JSON Pointer paths, substitutes that name a
    /// tool when they need one.
    ///
    /// # Errors
    /// A message naming the offending entry.
    pub fn validate(&self) -> Result<(), String> {
        for (i, k) in self.contracts.iter().enumerate() {
            if !(0.0..=1.0).contains(&k.branch_threshold) {
                return Err(format!(
                    "speculation.contracts[{i}].branch_threshold must be within [0, 1]"
                ));
            }
            if k.allowed_tools.is_empty() || k.allowed_destinations.is_empty() {
                return Err(format!(
                    "speculation.contracts[{i}] must list allowed_tools and allowed_destinations (use [\"*\"] for any)"
                ));
            }
        }
        for (i, r) in self.labeler.fields.iter().enumerate() {
            if !r.path.starts_with('/') {
                return Err(format!(
                    "speculation.labeler.fields[{i}].path `{}` must be a JSON pointer starting with `/`",
                    r.path
                ));
            }
        }
        for (i, s) in self.substitutes.iter().enumerate() {
            if (s.kind == SubstituteKind::Tool) != s.with.is_some() {
                return Err(format!(
                    "speculation.substitutes[{i}]: `with` is required for kind = \"tool\" and only then"
                ));
            }
        }
        Ok(())
    }
}

impl GatewayConfig {
    /// Checks serde cannot express, on the parts every front end shares.
    ///
    /// # Errors
    /// A message naming the offending key: a `[[gateway.classify]]` rule with both
    /// `identifiers = true` and `anchor = true` (identifiers found in free text never inherit
    /// anchoring: a third party who can write into the object could anchor their own address),
    /// or an invalid `[gateway.speculation]` table.
    pub fn validate(&self) -> Result<(), String> {
        for (i, r) in self.classify.iter().enumerate() {
            if r.identifiers && r.anchor {
                return Err(format!(
                    "classify[{i}] (path `{}`): `identifiers = true` cannot be combined with \
                     `anchor = true`: identifiers found inside free text are written by whoever \
                     wrote the text, so they never anchor a target; declare the authoritative \
                     field itself (a whole-field rule with `anchor = true`) instead",
                    r.path
                ));
            }
        }
        for (i, d) in self.directory.iter().enumerate() {
            d.validate().map_err(|e| format!("directory[{i}]: {e}"))?;
        }
        self.approvals.validate()?;
        self.speculation.validate()
    }

    /// The configuration of the demo office (`crates/demo-tools`), used by `secureclaw demo`
    /// and by the integration tests: an invoice's IBAN is a `high` value that may only flow to
    /// `office__pay_invoice`, its contact address a `medium` one, both trusted attributes of
    /// the invoice (`anchor`); drafts are declared target-less and non-destructive, and the
    /// contact address may be written into one; mail is declared non-destructive; mail and
    /// payments are `egress` sinks and payments are financial (the task must grant them).
    #[must_use]
    pub fn demo_office() -> Self {
        let rule = |path: &str, label: &str, sensitivity, sinks: &[&str]| FieldRule {
            upstream: "office".into(),
            tool: "read_invoice".into(),
            path: path.into(),
            label: label.into(),
            sensitivity,
            allowed_sinks: sinks.iter().map(|s| (*s).to_owned()).collect(),
            anchor: true,
            identifiers: false,
        };
        Self {
            classify: vec![
                rule(
                    "/iban",
                    "payee_iban",
                    Sensitivity::High,
                    &["office__pay_invoice"],
                ),
                // Drafts stay in the office (no tool reads them back to the runtime).
                rule(
                    "/contact_email",
                    "counterparty_email",
                    Sensitivity::Medium,
                    &["office__save_draft"],
                ),
            ],
            tools: vec![
                ToolRule {
                    tool: "office__save_draft".into(),
                    destructive: Some(false),
                    targets: Some(vec![]),
                    ..ToolRule::default()
                },
                // Sending appends to the outbox and overwrites nothing: not destructive (the
                // operator says so; the server's `destructiveHint: false` alone would not).
                ToolRule {
                    tool: "office__send_email".into(),
                    destructive: Some(false),
                    sink: Some(SinkKind::Egress),
                    ..ToolRule::default()
                },
                ToolRule {
                    tool: "office__pay_invoice".into(),
                    sink: Some(SinkKind::Egress),
                    financial: Some(true),
                    ..ToolRule::default()
                },
            ],
            ..Self::default()
        }
    }
}
