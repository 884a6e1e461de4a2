//! Configuration rules checked against the tools the upstreams list (issue 15): a
//! `[[gateway.tools]]` or `[[gateway.classify]]` rule that applies to no tool is almost always
//! a misspelt name (`ofice__send_email`), and a silently ignored rule is risky in a security
//! tool — the tool it meant keeps the defaults.
//!
//! Used by `secureclaw config check` (which lists the upstreams without starting a gateway)
//! and at `serve` start-up ([`crate::Gateway::unmatched_rules`]).

use crate::config::GatewayConfig;
use secureclaw_core::handle::glob_match;

/// A rule that applies to no listed tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmatchedRule {
    /// Where the rule is: `gateway.tools[2]` or `gateway.classify[0]` (0-based, in file order).
    pub key: String,
    /// The rule's pattern as written (`upstream__tool`, or `upstream/tool` for a classify rule).
    pub pattern: String,
    /// Why it never applies: `matches no listed tool`, or `every tool it matches takes an
    /// earlier rule` (the first matching `[[gateway.tools]]` rule wins).
    pub why: String,
    /// The closest listed tool name (`upstream__tool`), if one is within a few edits.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnmatchedRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}` {}", self.key, self.pattern, self.why)?;
        if let Some(c) = &self.closest {
            write!(f, " (did you mean `{c}`?)")?;
        }
        Ok(())
    }
}

/// Levenshtein distance of two short strings, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row.first().copied().unwrap_or(0);
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let above = row.get(j + 1).copied().unwrap_or(usize::MAX);
            let left = row.get(j).copied().unwrap_or(usize::MAX);
            let diag = prev + usize::from(ca != *cb);
            prev = above;
            if let Some(cell) = row.get_mut(j + 1) {
                *cell = diag
                    .min(above.saturating_add(1))
                    .min(left.saturating_add(1));
            }
        }
    }
    row.last().copied().unwrap_or(0)
}

/// The listed name closest to `pattern` within 3 edits (patterns with `*` get none).
fn closest(pattern: &str, names: &[String]) -> Option<String> {
    if pattern.contains('*') {
        return None;
    }
    names
        .iter()
        .map(|n| (distance(pattern, n), n))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, n)| n.clone())
}

/// The rules of `config` that apply to none of `listed` (`(upstream id, tool name)` pairs,
/// hidden tools included), in file order: `[[gateway.tools]]` rules first, then
/// `[[gateway.classify]]` rules.
#[must_use]
pub fn unmatched_rules(config: &GatewayConfig, listed: &[(String, String)]) -> Vec<UnmatchedRule> {
    let names: Vec<String> = listed.iter().map(|(u, t)| format!("{u}__{t}")).collect();
    let mut out = Vec::new();
    for (i, rule) in config.tools.iter().enumerate() {
        let matched: Vec<&String> = names.iter().filter(|n| glob_match(&rule.tool, n)).collect();
        let why = if matched.is_empty() {
            "matches no listed tool".to_owned()
        } else {
            // The first matching rule decides a tool: a later rule whose every tool an
            // earlier rule takes never applies.
            let taken = matched.iter().all(|n| {
                config
                    .tools
                    .iter()
                    .take(i)
                    .any(|earlier| glob_match(&earlier.tool, n))
            });
            if !taken {
                continue;
            }
            "never applies: every tool it matches takes an earlier [[gateway.tools]] rule (the first match wins)".to_owned()
        };
        out.push(UnmatchedRule {
            key: format!("gateway.tools[{i}]"),
            pattern: rule.tool.clone(),
            closest: if matched.is_empty() {
                closest(&rule.tool, &names)
            } else {
                None
            },
            why,
        });
    }
    // Result rules name the read by upstream and the tool's own name.
    let results = config
        .classify
        .iter()
        .map(|r| ("classify", &r.upstream, &r.tool))
        .enumerate()
        .chain(
            config
                .directory
                .iter()
                .map(|r| ("directory", &r.upstream, &r.tool))
                .enumerate(),
        );
    for (i, (table, upstream, tool)) in results {
        let any = listed
            .iter()
            .any(|(u, t)| glob_match(upstream, u) && glob_match(tool, t));
        if !any {
            let pattern = format!("{upstream}__{tool}");
            out.push(UnmatchedRule {
                key: format!("gateway.{table}[{i}]"),
                closest: closest(&pattern, &names),
                pattern: format!("upstream = {upstream}, tool = {tool}"),
                why: "matches no listed tool (`tool` is the tool's own name)".to_owned(),
            });
        }
    }
    for (i, rule) in config.directory.iter().enumerate() {
        for anchored in &rule.anchors {
            if !names.iter().any(|n| glob_match(anchored, n)) {
                out.push(UnmatchedRule {
                    key: format!("gateway.directory[{i}].anchors"),
                    closest: closest(anchored, &names),
                    pattern: anchored.clone(),
                    why: "matches no listed tool (`upstream__tool`)".to_owned(),
                });
            }
        }
    }
    out
}

/// The entries of a task's `granted_tools` (with an optional `#N` / `#*` count) that match no
/// tool: neither one of `exposed` names nor, as a glob, any `upstream__tool` of `listed`
/// (`(upstream id, tool name)` pairs). Such a grant authorizes nothing — which fails safe, but
/// leaves the user wondering why the grant "does not work" (issue 15 new-user trial of
/// 2026-12-04: `write_file` granted under `serve`, where the tool is `fs__write_file`).
#[must_use]
pub fn unmatched_grants(
    granted_tools: &[String],
    listed: &[(String, String)],
    exposed: &[String],
) -> Vec<String> {
    let qualified: Vec<String> = listed.iter().map(|(u, t)| format!("{u}__{t}")).collect();
    granted_tools
        .iter()
        .filter(|g| {
            let pattern = match g.rsplit_once('#') {
                Some((p, n)) if n == "*" || n.parse::<u64>().is_ok() => p,
                _ => g.as_str(),
            };
            !exposed.iter().any(|e| e == pattern)
                && !qualified.iter().any(|q| glob_match(pattern, q))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn config(text: &str) -> GatewayConfig {
        toml::from_str(text).unwrap()
    }

    fn listed() -> Vec<(String, String)> {
        [
            ("office", "send_email"),
            ("office", "read_invoice"),
            ("office", "pay_invoice"),
        ]
        .iter()
        .map(|(u, t)| ((*u).to_owned(), (*t).to_owned()))
        .collect()
    }

    /// The example: a misspelt rule is reported with the name it probably meant.
    #[test]
    fn a_misspelt_tool_rule_is_reported_with_the_closest_name() {
        let c = config("[[tools]]\ntool = \"ofice__send_email\"\nhidden = true\n");
        let found = unmatched_rules(&c, &listed());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "gateway.tools[0]");
        assert_eq!(found[0].closest.as_deref(), Some("office__send_email"));
        assert!(found[0].to_string().contains("matches no listed tool"));
    }

    /// A directory rule written with the `upstream__tool` form, or naming a tool to anchor
    /// that is not listed, is reported; the right form is not (new-user trial).
    #[test]
    fn directory_rules_are_checked_against_the_listed_tools() {
        let c = config(
            "[[directory]]\nupstream = \"office\"\ntool = \"office__read_invoice\"\npath = \"/vendor\"\nanchors = [\"office__send_emial\"]\n\n[[directory]]\nupstream = \"office\"\ntool = \"read_invoice\"\npath = \"/vendor\"\nanchors = [\"office__send_email\"]\n",
        );
        let found = unmatched_rules(&c, &listed());
        let keys: Vec<&str> = found.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(
            keys,
            ["gateway.directory[0]", "gateway.directory[0].anchors"],
            "{found:?}"
        );
        assert_eq!(found[1].closest.as_deref(), Some("office__send_email"));
    }

    /// Positive control: exact names and patterns that match something are not reported.
    #[test]
    fn matching_rules_are_not_reported() {
        let c = config(
            "[[tools]]\ntool = \"office__send_email\"\n\n[[tools]]\ntool = \"office__pay_*\"\nfinancial = true\n\n[[classify]]\nupstream = \"office\"\ntool = \"read_invoice\"\npath = \"/iban\"\nlabel = \"iban\"\n",
        );
        assert!(unmatched_rules(&c, &listed()).is_empty());
    }

    #[test]
    fn shadowed_and_classify_rules_are_reported() {
        let c = config(
            "[[tools]]\ntool = \"office__*\"\n\n[[tools]]\ntool = \"office__pay_invoice\"\nfinancial = true\n\n[[classify]]\nupstream = \"ofice\"\ntool = \"read_invoice\"\npath = \"/iban\"\nlabel = \"iban\"\n",
        );
        let found = unmatched_rules(&c, &listed());
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].key, "gateway.tools[1]");
        assert!(found[0].why.contains("earlier"), "{}", found[0]);
        assert_eq!(found[1].key, "gateway.classify[0]");
        assert_eq!(found[1].closest.as_deref(), Some("office__read_invoice"));
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("ofice", "office"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
