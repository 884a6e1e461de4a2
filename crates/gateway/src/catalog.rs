//! The tool catalog: upstream tools under their exposed names, with effect class, destructive
//! flag and target fields decided from annotations (hints) and operator rules (authoritative).
//!
//! Annotations only ever tighten (DESIGN.md §3):
//!
//! - **effect class**: an operator rule's `effect` wins; without one a tool is a read only if
//!   the shipped catalog ([`crate::known`]) lists it for the server it runs on *and* the server
//!   declares `readOnlyHint: true`. `readOnlyHint` alone never makes a tool a read — an
//!   upstream that declares it and writes would otherwise skip preview, policy and
//!   confirmation;
//! - **destructive**: an operator rule's `destructive` wins (operator configuration is
//!   authoritative, both ways); without one an effect is destructive unless the shipped
//!   catalog lists it as additive for the server it runs on *and* the server declares
//!   `destructiveHint: false`. `destructiveHint: false` alone never lowers anything — an
//!   upstream would otherwise spare its own deleting tool the grant-or-confirm rule.

use crate::config::{ToolRule, UpstreamSpec};
use crate::known::{
    is_known_additive, is_known_content_matching, is_known_line_range_read, is_known_read,
    schema_matches_content, schema_searches,
};
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
    /// Object references in the arguments (attachments, file and document ids) are targets,
    /// as for an `egress` sink: the sink is `egress`, or no operator rule declares the sink
    /// and the upstream does not declare the tool closed-world (`openWorldHint: false`). An
    /// undeclared open-world effect is thus held to both sinks' rules: no handle flows into it
    /// unless its record names it (`store`), and what it sends out is checked (`egress`)
    /// (red-team of 2026-12-04: a plain `wrap` of a mail server let the runtime attach
    /// invoices the task never named).
    pub egress_targets: bool,
    /// Argument names holding effect targets.
    pub targets: Vec<String>,
    /// The targets come from an operator rule (possibly empty), not from the default list.
    pub targets_declared: bool,
    /// Hidden by the operator.
    pub hidden: bool,
    /// The operator lets this tool's effects on protected objects run without a confirmation
    /// ([`crate::config::ToolRule::allow_protected_objects`]).
    pub allow_protected_objects: bool,
    /// The tool's result depends on matching the call's text against existing content
    /// ([`crate::config::ToolRule::matches_content`]). For a store effect: its effect on an
    /// object the session has not read needs a confirmation (reason `object_unread`). For a
    /// read (a search): its calls with search text the task does not name count against
    /// `max_unanchored_match_reads` (reason `match_budget` beyond it).
    pub matches_content: bool,
    /// A read the shipped catalog lists as taking `head` / `tail` line ranges
    /// ([`crate::known::KnownServer::line_range_reads`]): the gateway sends it without the
    /// range, so that the detectors see the whole object, and applies the range to the
    /// scrubbed text (red-team round 3: halves of a withheld address read by `head` and
    /// `tail`).
    pub line_range_read: bool,
    /// The upstream's own description.
    pub upstream_tool: UpstreamTool,
}

impl ToolEntry {
    /// Build an entry, applying the first matching operator rule. `server` is the
    /// `serverInfo.name` the upstream reported at `initialize` (`None` if it reported none),
    /// looked up in the shipped catalog ([`crate::known`]); see the module docs for how the
    /// effect class and the destructive flag are decided.
    #[must_use]
    pub fn new(
        spec: &UpstreamSpec,
        server: Option<&str>,
        tool: UpstreamTool,
        rules: &[ToolRule],
    ) -> Self {
        let qualified = format!("{}__{}", spec.id, tool.name);
        let rule = rules.iter().find(|r| glob_match(&r.tool, &qualified));
        let known_read = tool.read_only_hint && is_known_read(server, &tool.name);
        let effect = rule.and_then(|r| r.effect).unwrap_or(if known_read {
            EffectClass::Read
        } else {
            EffectClass::Effect
        });
        let known_additive = !tool.destructive_hint && is_known_additive(server, &tool.name);
        let destructive = effect == EffectClass::Effect
            && rule.and_then(|r| r.destructive).unwrap_or(!known_additive);
        let financial =
            effect == EffectClass::Effect && rule.and_then(|r| r.financial).unwrap_or(false);
        let sink = rule.and_then(|r| r.sink).unwrap_or_default();
        let egress_targets = sink == SinkKind::Egress
            || (rule.and_then(|r| r.sink).is_none() && tool.open_world_hint);
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
            egress_targets,
            targets,
            targets_declared: rule.is_some_and(|r| r.targets.is_some()),
            hidden: rule.is_some_and(|r| r.hidden),
            allow_protected_objects: rule.is_some_and(|r| r.allow_protected_objects),
            matches_content: rule.and_then(|r| r.matches_content).unwrap_or_else(|| {
                if effect == EffectClass::Effect {
                    is_known_content_matching(server, &tool.name)
                        || schema_matches_content(&tool.input_schema)
                } else {
                    schema_searches(&tool.input_schema)
                }
            }),
            line_range_read: effect == EffectClass::Read
                && tool.read_only_hint
                && is_known_line_range_read(server, &tool.name),
            upstream_tool: tool,
        }
    }
}

/// Why the catalog cannot be built: the runtime would see one name for two tools, or names a
/// reader cannot tell apart. Every variant stops start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// An upstream id that namespacing cannot keep apart from another.
    #[error("upstream id `{id}` is invalid: {reason}")]
    UpstreamId {
        /// The id.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two tools have the same exposed name.
    #[error("{}", collision_message(name, first, second))]
    Collision {
        /// The exposed name.
        name: String,
        /// Upstream of the tool listed first.
        first: String,
        /// Upstream of the tool listed second.
        second: String,
    },
    /// A tool of a non-namespaced upstream has a name in another upstream's namespace
    /// (`bank__transfer` from an upstream other than `bank`).
    #[error(
        "tool `{name}` of non-namespaced upstream `{upstream}` is in the namespace of upstream \
         `{owner}`; turn namespacing on for `{upstream}` or hide the tool"
    )]
    ForeignNamespace {
        /// The exposed name.
        name: String,
        /// The upstream that lists it.
        upstream: String,
        /// The upstream whose `id__` prefix it carries.
        owner: String,
    },
    /// Two distinct exposed names look alike: equal after Unicode compatibility normalization
    /// (NFKC), removal of invisible characters and the UTS #39 confusable skeleton (a Cyrillic
    /// `а` for a Latin `a`, a full-width letter, a ligature).
    #[error(
        "tool names `{first}` (upstream `{first_upstream}`) and `{second}` (upstream \
         `{second_upstream}`) are confusable (equal after NFKC normalization and the Unicode \
         confusable mapping of UTS #39)"
    )]
    Confusable {
        /// One name.
        first: String,
        /// Its upstream.
        first_upstream: String,
        /// The other name.
        second: String,
        /// Its upstream.
        second_upstream: String,
    },
    /// A visible tool name is longer than [`MAX_TOOL_NAME_CHARS`] or holds a character other
    /// than letters, digits, `_`, `-`, `.` and `/` (the MCP specification's tool-name
    /// guidance): spaces, `<`, `>`, `*`, a backtick or `|` would let an upstream shape how
    /// approval notices, the approvals page and chat messages render the name (red-team F1 of
    /// 2026-12-04: `<!channel>` and a fake "Open approvals" link in a Slack notice).
    #[error(
        "tool name {name:?} of upstream `{upstream}` is over {MAX_TOOL_NAME_CHARS} characters or \
         holds characters other than letters, digits, `_`, `-`, `.` and `/`; hide it with a \
         `[[gateway.tools]]` rule (`hidden = true`) if the upstream cannot rename it"
    )]
    NameCharacters {
        /// The exposed name (debug-escaped in the message).
        name: String,
        /// Its upstream.
        upstream: String,
    },
    /// A tool name contains control, invisible or bidirectional formatting characters.
    #[error("tool name {name:?} of upstream `{upstream}` contains invisible or control characters")]
    Invisible {
        /// The exposed name (debug-escaped in the message).
        name: String,
        /// Its upstream.
        upstream: String,
    },
}

/// Check an upstream id: non-empty, only `a-z`, `0-9`, `-` and `_`, no `__` (the namespace
/// separator) and no `_` at either end (`acme_` + `__` + `status` would read as `acme` +
/// `__` + `_status`). Called by the configuration loader and again by [`Catalog::build`] for
/// upstreams assembled in code.
///
/// # Errors
/// [`CatalogError::UpstreamId`] naming the id and the rule it breaks.
pub fn check_upstream_id(id: &str) -> Result<(), CatalogError> {
    let fail = |reason| {
        Err(CatalogError::UpstreamId {
            id: id.to_owned(),
            reason,
        })
    };
    if id.is_empty() {
        return fail("it must not be empty");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return fail("it may use only a-z, 0-9, - and _");
    }
    if id.contains("__") {
        return fail("it must not contain `__` (the namespace separator)");
    }
    if id.starts_with('_') || id.ends_with('_') {
        return fail("it must not start or end with `_`");
    }
    Ok(())
}

/// The longest tool name (as the upstream lists it) the gateway exposes, in characters (the
/// MCP specification's guidance: 1 to 128).
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// Whether an upstream's tool name is one the gateway exposes: 1 to [`MAX_TOOL_NAME_CHARS`]
/// characters, each a letter or digit (any script: a non-ASCII name is logged, look-alikes are
/// refused separately), `_`, `-`, `.` or `/`.
fn is_plain_tool_name(name: &str) -> bool {
    let count = name.chars().count();
    (1..=MAX_TOOL_NAME_CHARS).contains(&count)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
}

/// Characters that render as nothing or reorder text: they make two different names look the
/// same, so a tool name containing one is refused.
fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// The form two names are compared in for confusability: NFKC, invisible characters removed,
/// then the UTS #39 skeleton (each character replaced by the prototype of its confusable
/// class), so `bаnk` with a Cyrillic `а` and `bank` have the same key.
fn confusable_key(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let visible: String = name.nfkc().filter(|c| !is_invisible(*c)).collect();
    unicode_security::skeleton(&visible).collect()
}

/// Whether `name` mixes scripts (UTS #39 §5.1: its resolved script set is empty), as a Latin
/// name with one Cyrillic letter does. Such a name is flagged in the log; with a look-alike it
/// is refused as [`CatalogError::Confusable`].
fn is_mixed_script(name: &str) -> bool {
    use unicode_security::MixedScript;
    !name.is_single_script()
}

/// Exposed name → entry.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: BTreeMap<String, ToolEntry>,
}

/// One upstream's contribution to [`Catalog::build`]: its spec, the `serverInfo.name` it
/// reported (if any) and the tools it lists.
pub type Listing = (UpstreamSpec, Option<String>, Vec<UpstreamTool>);

impl Catalog {
    /// Build the catalog of every upstream's tools (start-up), applying the operator's rules.
    ///
    /// Refuses anything that would let one name stand for two tools or two names look alike:
    /// an invalid upstream id ([`check_upstream_id`]), two visible tools with the same exposed
    /// name (a tool the operator hides gives way), a non-namespaced tool named `other__…` for
    /// another upstream `other` (or a look-alike of `other__`), a tool name with invisible or
    /// control characters, a visible name with markup characters ([`CatalogError::NameCharacters`]),
    /// and two visible names that look alike (equal after NFKC
    /// normalization and the UTS #39 confusable skeleton). Other non-ASCII names are accepted
    /// with a warning in the log, which also flags names mixing scripts.
    ///
    /// # Errors
    /// The first [`CatalogError`] found, naming the upstreams and the tool names involved.
    pub fn build(listings: &[Listing], rules: &[ToolRule]) -> Result<Self, CatalogError> {
        for (spec, _, _) in listings {
            check_upstream_id(&spec.id)?;
        }
        let mut catalog = Self::default();
        for (spec, server, tools) in listings {
            for tool in tools {
                let entry = ToolEntry::new(spec, server.as_deref(), tool.clone(), rules);
                // In another upstream's namespace, also by a look-alike prefix (`bаnk__…` with
                // a Cyrillic `а` for upstream `bank`); a name in its own namespace is fine.
                let key = confusable_key(&entry.exposed);
                if !spec.namespace
                    && !entry.exposed.starts_with(&format!("{}__", spec.id))
                    && let Some(owner) = listings.iter().find(|(other, _, _)| {
                        other.id != spec.id
                            && key.starts_with(&confusable_key(&format!("{}__", other.id)))
                    })
                {
                    return Err(CatalogError::ForeignNamespace {
                        name: entry.exposed,
                        upstream: spec.id.clone(),
                        owner: owner.0.id.clone(),
                    });
                }
                if entry.exposed.chars().any(is_invisible) {
                    return Err(CatalogError::Invisible {
                        name: entry.exposed,
                        upstream: spec.id.clone(),
                    });
                }
                if !entry.hidden && !is_plain_tool_name(&entry.name) {
                    return Err(CatalogError::NameCharacters {
                        name: entry.exposed,
                        upstream: spec.id.clone(),
                    });
                }
                catalog.insert(entry)?;
            }
        }
        let mut seen: BTreeMap<String, &ToolEntry> = BTreeMap::new();
        for entry in catalog.iter() {
            if is_mixed_script(&entry.exposed) {
                tracing::warn!(tool = %entry.exposed, upstream = %entry.upstream, "tool name mixes scripts (a look-alike of another name?)");
            } else if !entry.exposed.is_ascii() {
                tracing::warn!(tool = %entry.exposed, upstream = %entry.upstream, "tool name contains non-ASCII characters");
            }
            if let Some(first) = seen.insert(confusable_key(&entry.exposed), entry) {
                return Err(CatalogError::Confusable {
                    first: first.exposed.clone(),
                    first_upstream: first.upstream.clone(),
                    second: entry.exposed.clone(),
                    second_upstream: entry.upstream.clone(),
                });
            }
        }
        Ok(catalog)
    }

    /// Add an entry. A visible entry replaces a hidden one of the same exposed name and a
    /// hidden one gives way to anything already there.
    ///
    /// # Errors
    /// [`CatalogError::Collision`] when two visible entries have the same exposed name.
    pub fn insert(&mut self, entry: ToolEntry) -> Result<(), CatalogError> {
        match self.entries.get(&entry.exposed) {
            None => {}
            Some(_) if entry.hidden => return Ok(()),
            Some(existing) if existing.hidden => {}
            Some(existing) => {
                return Err(CatalogError::Collision {
                    name: entry.exposed.clone(),
                    first: existing.upstream.clone(),
                    second: entry.upstream.clone(),
                });
            }
        }
        self.entries.insert(entry.exposed.clone(), entry);
        Ok(())
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

    /// Every listed tool, hidden ones included, as `(upstream id, tool name at the upstream)`.
    #[must_use]
    pub fn listed(&self) -> Vec<(String, String)> {
        self.entries
            .values()
            .map(|e| (e.upstream.clone(), e.name.clone()))
            .collect()
    }
}

/// The message of [`CatalogError::Collision`]: one upstream listing a name twice is its own
/// fault, not a naming conflict the operator resolves (red-team of 2026-12-04).
fn collision_message(name: &str, first: &str, second: &str) -> String {
    if first == second {
        format!(
            "upstream `{first}` lists tool `{name}` twice; fix the server, or hide the tool with a [[gateway.tools]] rule"
        )
    } else {
        format!(
            "tool name `{name}` is exposed by upstream `{first}` and by upstream `{second}`; \
             rename an upstream id, turn namespacing on, or hide one of the tools"
        )
    }
}
