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
//! allow_upstream_state_access = false # true: start even if a stdio upstream reaches state_dir
//!
//! [task]                             # default session (stdio, token-less loopback HTTP)
//! request = "Send invoice INV-42 to approver@corp.example"
//! trusted_targets = ["approver@corp.example"]
//!
//! [gateway.limits]
//! max_argument_bytes = 4194304
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
//! ```

use anyhow::{Context, Result, bail};
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_gateway::{GatewayConfig, UpstreamSpec};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
    /// Ask the human at the MCP client through elicitation (trusted as confirmation).
    pub elicitation: bool,
    /// Start even if a stdio upstream's command, arguments or working directory reach the
    /// state directory (keys, database, operator token). Off by default.
    pub allow_upstream_state_access: bool,
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
            elicitation: true,
            allow_upstream_state_access: false,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`.
    pub server: ServerSection,
    /// `[task]`: envelope of the default session.
    pub task: Option<TaskEnvelope>,
    /// `[gateway]`.
    pub gateway: GatewayConfig,
    /// `[[upstream]]`.
    pub upstream: Vec<UpstreamSpec>,
}

impl Config {
    /// Read, parse and validate `path`. Relative policy paths are resolved against the
    /// file's directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config `{}`", path.display()))?;
        let mut config: Config =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in &mut config.server.policy_files {
            if p.is_relative() {
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
        if l.artifact_ttl_ms == 0 || l.upstream_timeout_ms == 0 {
            bail!("gateway.limits.artifact_ttl_ms and upstream_timeout_ms must be positive");
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
        self.gateway
            .speculation
            .validate()
            .map_err(|e| anyhow::anyhow!("gateway.{e}"))?;
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
        ] {
            let err = toml::from_str::<Config>(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let ok: Config = toml::from_str(
            "[[upstream]]\nid = \"a\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap_or_default();
        assert_eq!(ok.upstream.len(), 1);
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
