//! Gateway configuration types (deserialized from the `[gateway]`, `[[upstream]]`, `[[tool]]`
//! and `[[classify]]` tables of `secureclaw.toml` by the binary). Every struct denies unknown
//! fields so that a typo is reported with the key's name instead of being ignored.

use secureclaw_core::classify::FieldRule;
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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_argument_bytes: 4 * 1024 * 1024,
            upstream_timeout_ms: 30_000,
            artifact_ttl_ms: 60_000,
            max_skew_ms: 5_000,
            confirmation_ttl_ms: 3_600_000,
            handle_ttl_ms: 86_400_000,
            session_ttl_ms: 86_400_000,
        }
    }
}

/// How to reach an upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case", deny_unknown_fields)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to run.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment variables.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Working directory.
        #[serde(default)]
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// Endpoint URL, e.g. `http://127.0.0.1:8000/mcp`.
        url: String,
        /// Name of an environment variable holding a bearer token for the upstream.
        #[serde(default)]
        bearer_token_env: Option<String>,
    },
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// Short id (`[a-z0-9_-]+`), used in namespaced tool names `id__tool` and in policies.
    pub id: String,
    /// Transport.
    #[serde(flatten)]
    pub transport: UpstreamTransport,
    /// Expose tools as `id__tool` (default). `wrap` turns this off for a single upstream so
    /// that clients see the server's own tool names.
    #[serde(default = "yes")]
    pub namespace: bool,
}

fn yes() -> bool {
    true
}

/// Operator override for tools matching a pattern (upstream annotations are only hints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// `upstream__tool` pattern with `*` wildcards.
    pub tool: String,
    /// Effect class; overrides `readOnlyHint`.
    #[serde(default)]
    pub effect: Option<EffectClass>,
    /// Destructive; overrides `destructiveHint`.
    #[serde(default)]
    pub destructive: Option<bool>,
    /// Argument names holding effect targets; overrides the default list.
    #[serde(default)]
    pub targets: Option<Vec<String>>,
    /// Hide and refuse the tool entirely.
    #[serde(default)]
    pub hidden: bool,
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
    /// Summary operator settings.
    pub summary: SummaryConfig,
    /// Tool overrides, first match wins.
    pub tools: Vec<ToolRule>,
}
