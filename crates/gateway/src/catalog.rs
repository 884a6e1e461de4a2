//! The tool catalog: upstream tools under their exposed names, with effect class, destructive
//! flag and target fields decided from annotations (hints) and operator rules (authoritative).

use crate::config::{ToolRule, UpstreamSpec};
use crate::upstream::UpstreamTool;
use secureclaw_core::anchor::DEFAULT_TARGET_FIELDS;
use secureclaw_core::handle::{SinkKind, glob_match};
use secureclaw_core::policy::EffectClass;
use std::collections::BTreeMap;

/// One tool as the gateway exposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEntry {
    /// Name the runtime sees (`upstream__tool`, or the bare name for a non-namespaced upstream).
    pub exposed: String,
    /// Upstream id.
    pub upstream: String,
    /// Tool name at the upstream.
    pub name: String,
    /// Effect class after overrides. Unannotated tools are effectful.
    pub effect: EffectClass,
    /// Destructive after overrides.
    pub destructive: bool,
    /// Financial (operator configuration): needs confirmation unless the task grants it.
    pub financial: bool,
    /// Sink kind of an effect tool (operator configuration; default `store`).
    pub sink: SinkKind,
    /// Argument names holding effect targets.
    pub targets: Vec<String>,
    /// The targets come from an operator rule (possibly empty), not from the default list.
    pub targets_declared: bool,
    /// Hidden by the operator.
    pub hidden: bool,
    /// The upstream's own description.
    pub upstream_tool: UpstreamTool,
}

impl ToolEntry {
    /// Build an entry, applying the first matching operator rule.
    #[must_use]
    pub fn new(spec: &UpstreamSpec, tool: UpstreamTool, rules: &[ToolRule]) -> Self {
        let qualified = format!("{}__{}", spec.id, tool.name);
        let rule = rules.iter().find(|r| glob_match(&r.tool, &qualified));
        let effect = rule
            .and_then(|r| r.effect)
            .unwrap_or(if tool.read_only_hint {
                EffectClass::Read
            } else {
                EffectClass::Effect
            });
        let destructive = effect == EffectClass::Effect
            && rule
                .and_then(|r| r.destructive)
                .unwrap_or(tool.destructive_hint);
        let financial =
            effect == EffectClass::Effect && rule.and_then(|r| r.financial).unwrap_or(false);
        let sink = rule.and_then(|r| r.sink).unwrap_or_default();
        let targets = rule.and_then(|r| r.targets.clone()).unwrap_or_else(|| {
            DEFAULT_TARGET_FIELDS
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        });
        Self {
            exposed: if spec.namespace {
                qualified
            } else {
                tool.name.clone()
            },
            upstream: spec.id.clone(),
            name: tool.name.clone(),
            effect,
            destructive,
            financial,
            sink,
            targets,
            targets_declared: rule.is_some_and(|r| r.targets.is_some()),
            hidden: rule.is_some_and(|r| r.hidden),
            upstream_tool: tool,
        }
    }
}

/// Exposed name → entry.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: BTreeMap<String, ToolEntry>,
}

impl Catalog {
    /// Add an entry; a clash of exposed names keeps the first and returns `false`.
    pub fn insert(&mut self, entry: ToolEntry) -> bool {
        if self.entries.contains_key(&entry.exposed) {
            return false;
        }
        self.entries.insert(entry.exposed.clone(), entry);
        true
    }

    /// Look an exposed name up.
    #[must_use]
    pub fn get(&self, exposed: &str) -> Option<&ToolEntry> {
        self.entries.get(exposed).filter(|e| !e.hidden)
    }

    /// Entry for (upstream, tool) (used when re-checking a proof's intent).
    #[must_use]
    pub fn by_intent(&self, upstream: &str, tool: &str) -> Option<&ToolEntry> {
        self.entries
            .values()
            .find(|e| e.upstream == upstream && e.name == tool && !e.hidden)
    }

    /// All visible entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = &ToolEntry> {
        self.entries.values().filter(|e| !e.hidden)
    }
}
