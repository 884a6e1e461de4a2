//! What each observer sees of a replay, as text for the adversaries (paper Table 1 and §5 RQ5;
//! research notes §5.4–§5.5).
//!
//! Projections come from the product's trace model ([`secureclaw_core::exposure::project`]);
//! this module only renders them: destination path tokens, tool names and argument values,
//! lower-cased, split on non-alphanumerics, with stopwords, numbers and one-letter tokens
//! removed. The provider view can also be cut into the channels of the paper's Table 11.

use super::corpus::background_text;
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

/// Tokens of [`background_text`]: shared by every task, dropped by [`tokenize`].
static BACKGROUND: LazyLock<HashSet<String>> =
    LazyLock::new(|| background_text().iter().flat_map(|t| words(t)).collect());

/// Tokenize text as the adversaries do: ASCII words of two or more characters, lower case,
/// without stopwords, numbers, and background tokens (tool catalog, endpoints, argument names,
/// rewrite placeholders, the generator's topic-free material; see [`background_text`]).
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    words(text).filter(|w| !BACKGROUND.contains(w)).collect()
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
