//! Operator classification rules (SecureClaw paper §3.3; DESIGN.md §3 "Summaries").
//!
//! A rule names (upstream, tool, JSON pointer) with `*` wildcards and gives the field a label
//! and sensitivity, the sinks a `high` value may flow to, and whether the field is a trusted
//! attribute of its source object (so that a handle to it inherits the object's anchoring).
//! Rules are consulted first; the detectors in [`crate::detect`] then catch identifiers
//! anywhere else (recall first).

use crate::detect::IdentifierKind;
use crate::handle::{Sensitivity, glob_match};
use serde::{Deserialize, Serialize};

/// One operator rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// Upstream id pattern (`*` wildcards).
    #[serde(default = "star")]
    pub upstream: String,
    /// Tool name pattern.
    #[serde(default = "star")]
    pub tool: String,
    /// JSON pointer pattern into the result's structured content (`/iban`, `/items/*/email`).
    pub path: String,
    /// Label (for example `iban`, `counterparty_email`).
    pub label: String,
    /// Sensitivity.
    #[serde(default)]
    pub sensitivity: Sensitivity,
    /// Sinks (`upstream__tool` patterns) a `high` value may flow to.
    #[serde(default)]
    pub allowed_sinks: Vec<String>,
    /// The field is a trusted attribute of its object: a handle to it is anchored when the
    /// object was read by an anchored request (for example the payee IBAN of an invoice the
    /// user named).
    #[serde(default)]
    pub anchor: bool,
    /// Apply the rule to the identifiers the detectors find *inside* the field (e-mail
    /// addresses, IBANs, URLs … in free text) instead of protecting the whole field: the text
    /// stays readable, each identifier becomes a handle with this rule's sensitivity, sinks and
    /// anchoring (its label stays the identifier kind). For example the payee IBAN written in
    /// a bill the user named, or a link in a channel the user named.
    #[serde(default)]
    pub identifiers: bool,
}

impl FieldRule {
    /// Whether the rule names this (upstream, tool, JSON pointer).
    #[must_use]
    pub fn matches(&self, upstream: &str, tool: &str, path: &str) -> bool {
        glob_match(&self.upstream, upstream)
            && glob_match(&self.tool, tool)
            && pointer_match(&self.path, path)
    }
}

fn star() -> String {
    "*".to_owned()
}

/// Pointer match: segments compared with [`glob_match`]; `*` matches one segment.
#[must_use]
pub fn pointer_match(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let t: Vec<&str> = path.split('/').collect();
    p.len() == t.len() && p.iter().zip(&t).all(|(a, b)| glob_match(a, b))
}

/// `path` and then each of its ancestors, nearest first, ending with the root `""`
/// (`/a/b` → `/a/b`, `/a`, `""`). Segments are RFC 6901-escaped, so every `/` separates two.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let current = next?;
        next = current.rfind('/').and_then(|i| current.get(..i));
        Some(current)
    })
}

/// Entries one read may add to a directory ([`DirectoryRule::entries`]); more are ignored
/// (they stay unanchored: a human decides).
pub const MAX_DIRECTORY_ENTRIES: usize = 4096;

/// Longest directory entry, in bytes; a longer string is not a destination name and is
/// ignored.
pub const MAX_DIRECTORY_ENTRY_BYTES: usize = 256;

/// `[[gateway.directory]]`: a read whose result lists the upstream's **own destinations**, such
/// as a chat workspace's channels or members (DESIGN.md §3 "Targets, anchoring and
/// provenance"; issue 11 item 10, legitimate chains).
///
/// Every string at `path` in the structured result of a matching read, **as the runtime was
/// shown it** (after declassification), is an entry — except a string holding a handle (a
/// value the runtime never saw) and a string containing one of the read's own argument
/// strings (an upstream that echoes the agent's input would otherwise let it list anything).
/// For the rest of the session, a target of one of the tools in `anchors` (`upstream__tool`
/// patterns, of the same upstream) is anchored when the target's field is named like a
/// destination (`channel`, `recipient`, `user`, …; never a content field such as `body`), the
/// tool is an effect and not an `egress` sink, its value (or the plaintext of the one handle
/// it consists of) is exactly such an entry, and the session did not write it itself
/// (provenance [`crate::policy::Provenance::Directory`]). So
/// `send_channel_message {"channel": "general"}` needs no prompt after `get_channels` listed
/// `general`, while message text, an address or a URL typed by the agent, and every target of
/// a tool the rule does not name are unaffected.
///
/// The operator vouches that whoever can add an entry to the listing may be a destination of
/// the named tools. Destructive and financial effects still need a grant or a confirmation.
/// Entries longer than [`MAX_DIRECTORY_ENTRY_BYTES`] or beyond the first
/// [`MAX_DIRECTORY_ENTRIES`] of one read are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryRule {
    /// Upstream id pattern (`*` wildcards). Required.
    pub upstream: String,
    /// Read tool pattern (the tool's own name, as in `[[gateway.classify]]`).
    pub tool: String,
    /// JSON pointer pattern into the result's structured content; `*` matches one segment
    /// (`/result/*` for a list of names, `/result/*/name` for a list of objects).
    pub path: String,
    /// The effect tools (`upstream__tool` patterns) whose destination fields an entry may
    /// anchor. Required and non-empty: nothing is anchored by default.
    pub anchors: Vec<String>,
}

impl DirectoryRule {
    /// The directory entries of `structured` (a read result of `upstream`'s `tool`): every
    /// string at a pointer the rule's `path` matches, in document order, at most
    /// [`MAX_DIRECTORY_ENTRIES`], each at most [`MAX_DIRECTORY_ENTRY_BYTES`] and not blank.
    /// Empty when the rule does not name this read.
    #[must_use]
    pub fn entries(
        &self,
        upstream: &str,
        tool: &str,
        structured: &serde_json::Value,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if glob_match(&self.upstream, upstream) && glob_match(&self.tool, tool) {
            let pattern: Vec<&str> = self.path.split('/').skip(1).collect();
            collect_entries(&pattern, structured, &mut out);
        }
        out
    }

    /// The rule's identity in digests: an entry recorded under one rule anchors only the tools
    /// that rule names.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}\u{1f}{}\u{1f}{}", self.upstream, self.tool, self.path)
    }

    /// Check the rule: its path is a JSON pointer (`/…`) and it names the tools it anchors.
    ///
    /// # Errors
    /// A message naming the path or the missing `anchors`.
    pub fn validate(&self) -> Result<(), String> {
        if !self.path.starts_with('/') {
            return Err(format!(
                "path `{}` must be a JSON pointer starting with `/` into the result's structuredContent",
                self.path
            ));
        }
        if self.anchors.is_empty() || self.anchors.iter().any(|a| a.trim().is_empty()) {
            return Err(
                "`anchors` must list the effect tools (`upstream__tool` patterns) whose destinations the entries anchor".to_owned(),
            );
        }
        Ok(())
    }
}

/// Walk `value` along `pattern` (pointer segments, `*` = any one), pushing the strings found.
fn collect_entries(pattern: &[&str], value: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    if out.len() >= MAX_DIRECTORY_ENTRIES {
        return;
    }
    let Some((first, rest)) = pattern.split_first() else {
        if let Value::String(s) = value
            && !s.trim().is_empty()
            && s.len() <= MAX_DIRECTORY_ENTRY_BYTES
        {
            out.push(s.clone());
        }
        return;
    };
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let segment = k.replace('~', "~0").replace('/', "~1");
                if glob_match(first, &segment) {
                    collect_entries(rest, v, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                if glob_match(first, &i.to_string()) {
                    collect_entries(rest, v, out);
                }
            }
        }
        _ => {}
    }
}

/// The rule set plus defaults for detected identifiers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Classifier {
    /// Operator rules, first match wins.
    pub rules: Vec<FieldRule>,
}

impl Classifier {
    /// The first whole-field rule matching (`upstream`, `tool`, `path`) (rules with
    /// [`FieldRule::identifiers`] are not consulted).
    #[must_use]
    pub fn rule_for(&self, upstream: &str, tool: &str, path: &str) -> Option<&FieldRule> {
        self.rules
            .iter()
            .find(|r| !r.identifiers && r.matches(upstream, tool, path))
    }

    /// The first rule with [`FieldRule::identifiers`] matching (`upstream`, `tool`, `path`):
    /// it governs the identifiers detected inside that field.
    #[must_use]
    pub fn identifier_rule_for(
        &self,
        upstream: &str,
        tool: &str,
        path: &str,
    ) -> Option<&FieldRule> {
        self.rules
            .iter()
            .find(|r| r.identifiers && r.matches(upstream, tool, path))
    }

    /// The rule governing the value at `path`: the first whole-field rule matching `path`
    /// itself, else the first matching its nearest ancestor (`/result/address` for
    /// `/result/address/street`, `/orders` for `/orders/3`). A rule on an object or array
    /// path therefore applies to every field below it — with its label, sensitivity, sinks
    /// and anchoring — unless a rule names a nearer path; this is the same inheritance the
    /// summary operator applies to labels ([`crate::summary::summarize`]).
    #[must_use]
    pub fn rule_covering(&self, upstream: &str, tool: &str, path: &str) -> Option<&FieldRule> {
        ancestors(path).find_map(|p| self.rule_for(upstream, tool, p))
    }

    /// As [`Classifier::rule_covering`] for rules with [`FieldRule::identifiers`]: an
    /// `identifiers` rule on an object path governs the identifiers found in every string
    /// below it.
    #[must_use]
    pub fn identifier_rule_covering(
        &self,
        upstream: &str,
        tool: &str,
        path: &str,
    ) -> Option<&FieldRule> {
        ancestors(path).find_map(|p| self.identifier_rule_for(upstream, tool, p))
    }

    /// Sensitivity given to an identifier found by a detector outside any rule: secrets, card
    /// numbers and IBANs are `high` (they flow nowhere unless a rule names sinks), the rest
    /// `medium`.
    #[must_use]
    pub fn detected_sensitivity(kind: IdentifierKind) -> Sensitivity {
        match kind {
            IdentifierKind::Secret | IdentifierKind::CardNumber | IdentifierKind::Iban => {
                Sensitivity::High
            }
            IdentifierKind::Email | IdentifierKind::Phone | IdentifierKind::Url => {
                Sensitivity::Medium
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_entries_are_the_strings_at_the_path() {
        let rule = DirectoryRule {
            upstream: "slack".into(),
            tool: "get_channels".into(),
            path: "/result/*".into(),
            anchors: vec!["slack__send_channel_message".into()],
        };
        let v = serde_json::json!({"result": ["general", "random", "", {"x": "nested"}, 7,
                                              "x".repeat(MAX_DIRECTORY_ENTRY_BYTES + 1)]});
        assert_eq!(
            rule.entries("slack", "get_channels", &v),
            vec!["general", "random"],
            "blank, nested, non-string and over-long values are not entries"
        );
        assert!(
            rule.entries("slack", "read_channel_messages", &v)
                .is_empty()
        );
        assert!(rule.entries("mail", "get_channels", &v).is_empty());
        let members = DirectoryRule {
            upstream: "*".into(),
            tool: "get_users_in_channel".into(),
            path: "/result/*/name".into(),
            anchors: vec!["*".into()],
        };
        let v = serde_json::json!({"result": [{"name": "Alice", "bio": "Bob"}, {"name": "Eve"}]});
        assert_eq!(
            members.entries("slack", "get_users_in_channel", &v),
            vec!["Alice", "Eve"]
        );
        let many: Vec<String> = (0..MAX_DIRECTORY_ENTRIES + 10)
            .map(|i| format!("c{i}"))
            .collect();
        assert_eq!(
            rule.entries(
                "slack",
                "get_channels",
                &serde_json::json!({ "result": many })
            )
            .len(),
            MAX_DIRECTORY_ENTRIES
        );
        assert!(rule.validate().is_ok());
        assert!(
            DirectoryRule {
                path: "result/*".into(),
                ..rule.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            DirectoryRule {
                anchors: vec![],
                ..rule
            }
            .validate()
            .is_err(),
            "a rule must name what it anchors"
        );
    }

    #[test]
    fn first_matching_rule_wins() {
        let c = Classifier {
            rules: vec![
                FieldRule {
                    upstream: "office".into(),
                    tool: "read_*".into(),
                    path: "/iban".into(),
                    label: "iban".into(),
                    sensitivity: Sensitivity::High,
                    allowed_sinks: vec!["office__pay_invoice".into()],
                    anchor: true,
                    identifiers: false,
                },
                FieldRule {
                    upstream: "*".into(),
                    tool: "*".into(),
                    path: "/items/*/email".into(),
                    label: "email".into(),
                    sensitivity: Sensitivity::Medium,
                    allowed_sinks: vec![],
                    anchor: false,
                    identifiers: false,
                },
            ],
        };
        assert_eq!(
            c.rule_for("office", "read_invoice", "/iban")
                .map(|r| r.label.as_str()),
            Some("iban")
        );
        assert!(c.rule_for("office", "list", "/iban").is_none());
        assert!(c.rule_for("x", "y", "/items/3/email").is_some());
        assert!(c.rule_for("x", "y", "/items/3/email/x").is_none());
        assert!(
            c.identifier_rule_for("office", "read_invoice", "/iban")
                .is_none()
        );
    }

    fn rule(path: &str, label: &str, anchor: bool, identifiers: bool) -> FieldRule {
        FieldRule {
            upstream: "*".into(),
            tool: "get_*".into(),
            path: path.into(),
            label: label.into(),
            sensitivity: Sensitivity::High,
            allowed_sinks: vec!["retail__modify_user_address".into()],
            anchor,
            identifiers,
        }
    }

    #[test]
    fn ancestors_nearest_first() {
        assert_eq!(
            ancestors("/a/b~1c/0").collect::<Vec<_>>(),
            ["/a/b~1c/0", "/a/b~1c", "/a", ""]
        );
        assert_eq!(ancestors("").collect::<Vec<_>>(), [""]);
    }

    /// Regression (issue 11 item 10): a rule on an object path gave the fields below it the
    /// default sensitivity, no sinks and no anchoring.
    #[test]
    fn rule_on_object_path_covers_fields_below() {
        let c = Classifier {
            rules: vec![
                rule("/address/zip", "zip", false, false),
                rule("/address", "address", true, false),
                rule("/notes", "notes", false, true),
            ],
        };
        let street = c.rule_covering("retail", "get_order", "/address/street");
        assert_eq!(street.map(|r| r.label.as_str()), Some("address"));
        assert!(street.is_some_and(|r| r.anchor && r.sensitivity == Sensitivity::High));
        assert_eq!(
            c.rule_covering("retail", "get_order", "/address/lines/0")
                .map(|r| r.label.as_str()),
            Some("address")
        );
        // A nearer rule wins over the ancestor's.
        assert_eq!(
            c.rule_covering("retail", "get_order", "/address/zip")
                .map(|r| r.label.as_str()),
            Some("zip")
        );
        // Positive control for the negative: siblings, prefixes of names, other tools.
        assert!(
            c.rule_covering("retail", "get_order", "/addresses/x")
                .is_none()
        );
        assert!(c.rule_covering("retail", "get_order", "/name").is_none());
        assert!(
            c.rule_covering("retail", "list_order", "/address/street")
                .is_none()
        );
        // The exact lookup is unchanged.
        assert!(
            c.rule_for("retail", "get_order", "/address/street")
                .is_none()
        );
        // Identifier rules cover the strings below too, and stay apart from field rules.
        assert!(
            c.identifier_rule_covering("r", "get_x", "/notes/0/text")
                .is_some()
        );
        assert!(c.rule_covering("r", "get_x", "/notes/0/text").is_none());
        assert!(
            c.identifier_rule_covering("r", "get_x", "/address/street")
                .is_none()
        );
    }

    #[test]
    fn identifier_rules_are_separate_from_field_rules() {
        let c = Classifier {
            rules: vec![FieldRule {
                upstream: "*".into(),
                tool: "read_file".into(),
                path: "/result".into(),
                label: "document".into(),
                sensitivity: Sensitivity::High,
                allowed_sinks: vec!["bank__send_money".into()],
                anchor: true,
                identifiers: true,
            }],
        };
        assert!(c.rule_for("bank", "read_file", "/result").is_none());
        assert!(
            c.identifier_rule_for("bank", "read_file", "/result")
                .is_some_and(|r| r.anchor)
        );
    }
}
