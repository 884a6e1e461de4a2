//! What each observer sees of a replay, as text for the adversaries (paper Table 1 and §5 RQ5;
//! research notes §5.4–§5.5).
//!
//! Projections come from the product's trace model ([`secureclaw_core::exposure::project`]);
//! this module only renders them: destination path tokens, tool names and argument values,
//! lower-cased, split on non-alphanumerics, with stopwords, numbers and one-letter tokens
//! removed. The provider view can also be cut into the channels of the paper's Table 11.

use super::corpus::{generic_text, structural_text, topic_text};
use super::replay::Replay;
use secureclaw_core::contract::Observer;
use secureclaw_core::exposure::{Observation, project};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::LazyLock;

/// An adversary's view of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum View {
    /// Provider: tool names, destinations, argument values.
    Provider,
    /// Runtime log: tool names, 20-character value summaries, decision tags.
    RuntimeLog,
    /// Network: hosts, payload sizes, timing buckets.
    Network,
    /// Co-tenant: shared-cache keys and timing buckets.
    CoTenant,
    /// Provider channels: arguments and tool names, no destination (Table 11).
    ArgsAndNames,
    /// Provider channels: destination and tool names, no arguments (Table 11).
    DestinationAndNames,
    /// Provider channels: tool names only (Table 11).
    NamesOnly,
}

impl View {
    /// The four observer classes with an external or log view.
    pub const OBSERVERS: [View; 4] = [
        View::Provider,
        View::RuntimeLog,
        View::Network,
        View::CoTenant,
    ];
    /// The channel-isolation views (Table 11), full view first.
    pub const CHANNELS: [View; 4] = [
        View::Provider,
        View::ArgsAndNames,
        View::DestinationAndNames,
        View::NamesOnly,
    ];

    /// Stable name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            View::Provider => "provider",
            View::RuntimeLog => "runtime-log",
            View::Network => "network",
            View::CoTenant => "co-tenant",
            View::ArgsAndNames => "args+names",
            View::DestinationAndNames => "destination+names",
            View::NamesOnly => "names-only",
        }
    }
}

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "of", "for", "to", "in", "on", "with", "and", "or", "my", "your", "about",
    "after", "before", "from", "by", "at", "is", "are", "how", "what", "do", "does", "i", "me",
    "we", "our", "it", "this", "that", "be", "can", "should", "if", "any", "all", "get", "https",
    "http", "www", "api", "v1", "com", "org", "example",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() > 1 && !w.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_ascii_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
}

/// Tokens shared by every task, dropped by [`tokenize`]: every structural token (tool
/// catalog, endpoints, argument names) and the generic material's tokens that no label's name
/// or paraphrase uses.
static BACKGROUND: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let topic: HashSet<String> = topic_text().iter().flat_map(|t| words(t)).collect();
    let mut out: HashSet<String> = structural_text().iter().flat_map(|t| words(t)).collect();
    out.extend(
        generic_text()
            .iter()
            .flat_map(|t| words(t).collect::<Vec<_>>())
            .filter(|w| !topic.contains(w)),
    );
    out
});

/// The REWRITE placeholders (`[topic]`, `[email]`, …): removed before tokenizing, so they
/// neither count as words nor collide with a label that uses the word.
const PLACEHOLDERS: [&str; 9] = [
    "[email]",
    "[iban]",
    "[card]",
    "[phone]",
    "[url]",
    "[secret]",
    "[topic]",
    "[redacted]",
    "[handle]",
];

/// Tokenize text as the adversaries do: placeholders removed, then ASCII words of two or more
/// characters, lower case, without stopwords, numbers and background tokens.
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    let mut t = text.to_owned();
    for p in PLACEHOLDERS {
        if t.contains(p) {
            t = t.replace(p, " ");
        }
    }
    words(&t).filter(|w| !BACKGROUND.contains(w)).collect()
}

fn push(out: &mut Vec<String>, text: &str) {
    out.extend(tokenize(text));
}

/// The tokens `view` sees of `replay`, in trace order.
#[must_use]
pub fn tokens(view: View, replay: &Replay) -> Vec<String> {
    let (observer, events) = match view {
        View::RuntimeLog => (
            Observer::RuntimeLog,
            replay.log_events.as_ref().unwrap_or(&replay.events),
        ),
        View::Network => (Observer::Network, &replay.events),
        View::CoTenant => (Observer::CoTenant, &replay.events),
        _ => (Observer::Provider, &replay.events),
    };
    let mut out = Vec::new();
    for o in project(observer, events) {
        match o {
            Observation::Call { tool, destination } => {
                push(&mut out, &tool);
                if matches!(view, View::Provider | View::DestinationAndNames) {
                    push(&mut out, &destination);
                }
            }
            Observation::Field { value, .. } => {
                if matches!(view, View::Provider | View::ArgsAndNames) {
                    push(&mut out, &value);
                }
            }
            Observation::Flow { host, bytes, .. } => {
                push(&mut out, &host);
                out.push(format!("bytes{}", bytes / 64));
            }
            Observation::LogLine {
                tool,
                summary,
                decision,
                ..
            } => {
                push(&mut out, &tool);
                for s in &summary {
                    push(&mut out, s);
                }
                out.push(decision);
            }
            Observation::CacheKey { key, .. } => out.push(key),
            Observation::AuditRecord { tool, decision } => {
                push(&mut out, &tool);
                out.push(decision);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_drops_stopwords_numbers_and_url_noise() {
        assert_eq!(
            tokenize("https://docs.example/collections/tenant-exit-fees?q=2026 My Lease"),
            vec!["tenant", "exit", "fees", "lease"]
        );
        // Placeholders and the tool catalog say nothing about the label.
        assert!(tokenize("[email] [topic] web_search crm_lookup").is_empty());
    }
}
