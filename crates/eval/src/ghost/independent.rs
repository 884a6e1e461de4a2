//! The labeler on an independent query set (issue 18): search queries a speculating assistant
//! could plausibly send, written by someone who had not read the product's lexicon, each
//! sensitive query with the span that gives it away.
//!
//! Every query is sent as a speculative `web_search` (confidence 0.9, fresh budget) through the
//! product's monitor ([`secureclaw_core::monitor::issue`]) under the paper's worked contract
//! ([`Contract::paper_web_search`]: `max_arg_label = personal`). A sensitive query *leaks* when
//! it is dispatched (ALLOW or REWRITE) with its sensitive span intact (case-insensitive,
//! whitespace-collapsed substring of the dispatched query); a neutral query is *altered* when
//! it is not dispatched unchanged. *Survived* is the share of the query's words that reach the
//! provider (0 when nothing is sent): what the provider can still answer; it is also reported
//! over the rewritten queries alone, with the share generalized to `[redacted]` because a
//! rewrite would have left something sensitive behind.
//!
//! The files are split by line number: odd lines are the development half (looked at while
//! generalizing the labeler's rules), even lines the test half (reported only).

use super::replay::{Env, LabelerKind};
use secureclaw_core::contract::{Budget, Contract, EffectLabel, Mode, Verdict};
use secureclaw_core::monitor::issue;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};

/// Sensitive queries: `category \t query \t sensitive_span`.
pub const SENSITIVE_TSV: &str = include_str!("../../data/ghost/independent/sensitive.tsv");
/// Neutral queries: `category \t query \t` (no span).
pub const NEUTRAL_TSV: &str = include_str!("../../data/ghost/independent/neutral.tsv");

/// One query of the independent set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Line number in its file (1-based).
    pub line: usize,
    /// Category (`health`, `legal`, …; neutral queries have their own).
    pub category: String,
    /// The query text.
    pub text: String,
    /// The sensitive span (empty for neutral queries).
    pub span: String,
}

impl Query {
    /// `dev` for odd lines, `test` for even lines.
    #[must_use]
    pub fn split(&self) -> &'static str {
        if self.line % 2 == 1 { "dev" } else { "test" }
    }
}

/// Parse one TSV file; a first line whose first field is `category` is a header.
#[must_use]
pub fn parse(text: &str) -> Vec<Query> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let mut f = line.split('\t');
            let category = f.next()?.trim().to_owned();
            let query = f.next()?.trim().to_owned();
            let span = f.next().unwrap_or("").trim().to_owned();
            if (i == 0 && category.eq_ignore_ascii_case("category")) || query.is_empty() {
                return None;
            }
            Some(Query {
                line: i + 1,
                category,
                text: query,
                span,
            })
        })
        .collect()
}

/// What the provider got for one query.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The verdict's tag (`allow`, `rewrite`, `block`, …).
    pub verdict: &'static str,
    /// The dispatched query, `None` if nothing was sent.
    pub sent: Option<String>,
}

/// Send `query` as a speculative web search through the monitor under `env`'s labeler.
#[must_use]
pub fn send(env: &Env, query: &str) -> Outcome {
    let labeler = env.labeler();
    let mut args = Map::new();
    args.insert("query".into(), Value::String(query.to_owned()));
    let event = labeler.label(
        "search",
        "web_search",
        "https://api.duckduckgo.com/",
        Some(EffectLabel::ExternalRead),
        &args,
        Mode::Speculative,
        Some(0.9),
    );
    let k = Contract::paper_web_search();
    let out = issue(labeler, Some(&k), &event, &args, &mut Budget::default());
    let sent = match out.verdict {
        Verdict::Allow | Verdict::Rewrite { .. } => Some(
            out.arguments
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        ),
        _ => None,
    };
    Outcome {
        verdict: out.verdict.tag(),
        sent,
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `q`'s sensitive span reached the provider intact.
#[must_use]
pub fn leaked(q: &Query, o: &Outcome) -> bool {
    o.sent
        .as_deref()
        .is_some_and(|s| squash(s).contains(&squash(&q.span)))
}

/// Share of `q`'s words that reach the provider.
#[must_use]
pub fn survived(q: &Query, o: &Outcome) -> f64 {
    let orig = words(&q.text);
    let Some(sent) = o.sent.as_deref() else {
        return 0.0;
    };
    let kept: HashSet<String> = words(sent).into_iter().collect();
    if orig.is_empty() {
        return 1.0;
    }
    orig.iter().filter(|w| kept.contains(*w)).count() as f64 / orig.len() as f64
}

/// One row of the independent-set table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Labeler variant (`content`, `gold`, `constant`).
    pub labeler: String,
    /// `dev`, `test` or `all`.
    pub split: String,
    /// `sensitive` (all categories), `sensitive/<category>`, or `neutral`.
    pub set: String,
    /// Queries.
    pub n: usize,
    /// Sensitive: share dispatched with the sensitive span intact.
    pub leaked: f64,
    /// Share not dispatched unchanged (rewritten, blocked or deferred).
    pub altered: f64,
    /// Share not dispatched at all.
    pub withheld: f64,
    /// Mean share of the query's words that reach the provider.
    pub survived: f64,
    /// Share dispatched rewritten (REWRITE).
    pub rewritten: f64,
    /// Mean share of the query's words that reach the provider, over the rewritten queries
    /// only (what a rewrite leaves the provider to answer); 0 when none was rewritten.
    pub survived_rewritten: f64,
    /// Share dispatched as a whole-field generalization (`[redacted]`).
    pub generalized: f64,
}

/// Queries whose span does not occur in the query text (data errors; excluded).
#[must_use]
pub fn bad_spans(queries: &[Query]) -> Vec<usize> {
    queries
        .iter()
        .filter(|q| q.span.is_empty() || !squash(&q.text).contains(&squash(&q.span)))
        .map(|q| q.line)
        .collect()
}

fn row(labeler: &str, split: &str, set: &str, items: &[(&Query, &Outcome)]) -> Row {
    let n = items.len();
    let share = |f: &dyn Fn(&Query, &Outcome) -> bool| {
        items.iter().filter(|(q, o)| f(q, o)).count() as f64 / n.max(1) as f64
    };
    Row {
        labeler: labeler.to_owned(),
        split: split.to_owned(),
        set: set.to_owned(),
        n,
        leaked: share(&|q, o| leaked(q, o)),
        altered: share(&|q, o| o.sent.as_deref() != Some(q.text.as_str())),
        withheld: share(&|_, o| o.sent.is_none()),
        survived: items.iter().map(|(q, o)| survived(q, o)).sum::<f64>() / n.max(1) as f64,
        rewritten: share(&|_, o| o.verdict == "rewrite"),
        survived_rewritten: {
            let r: Vec<f64> = items
                .iter()
                .filter(|(_, o)| o.verdict == "rewrite")
                .map(|(q, o)| survived(q, o))
                .collect();
            r.iter().sum::<f64>() / r.len().max(1) as f64
        },
        generalized: share(&|_, o| o.sent.as_deref() == Some("[redacted]")),
    }
}

/// The table for one labeler: per split (`dev`, `test`, `all`), every sensitive query, each
/// sensitive category, and the neutral queries.
#[must_use]
pub fn evaluate(kind: LabelerKind) -> Vec<Row> {
    let env = Env::new(kind);
    let sensitive: Vec<Query> = {
        let all = parse(SENSITIVE_TSV);
        let bad = bad_spans(&all);
        all.into_iter().filter(|q| !bad.contains(&q.line)).collect()
    };
    let neutral = parse(NEUTRAL_TSV);
    let s_out: Vec<Outcome> = sensitive.iter().map(|q| send(&env, &q.text)).collect();
    let n_out: Vec<Outcome> = neutral.iter().map(|q| send(&env, &q.text)).collect();
    let mut rows = Vec::new();
    for split in ["dev", "test", "all"] {
        let keep = |q: &Query| split == "all" || q.split() == split;
        let s: Vec<(&Query, &Outcome)> = sensitive
            .iter()
            .zip(&s_out)
            .filter(|(q, _)| keep(q))
            .collect();
        rows.push(row(kind.as_str(), split, "sensitive", &s));
        let mut by_cat: BTreeMap<&str, Vec<(&Query, &Outcome)>> = BTreeMap::new();
        for &(q, o) in &s {
            by_cat.entry(q.category.as_str()).or_default().push((q, o));
        }
        for (cat, items) in by_cat {
            rows.push(row(
                kind.as_str(),
                split,
                &format!("sensitive/{cat}"),
                &items,
            ));
        }
        let n: Vec<(&Query, &Outcome)> = neutral
            .iter()
            .zip(&n_out)
            .filter(|(q, _)| keep(q))
            .collect();
        rows.push(row(kind.as_str(), split, "neutral", &n));
    }
    rows
}

/// Every sensitive dev query the default labeler lets through with its span intact, and every
/// neutral dev query it alters, with what was sent (for generalizing the rules; never run on
/// the test half).
#[must_use]
pub fn dev_misses() -> Vec<String> {
    let env = Env::new(LabelerKind::Content);
    let mut out = Vec::new();
    for q in parse(SENSITIVE_TSV).iter().filter(|q| q.split() == "dev") {
        let o = send(&env, &q.text);
        if leaked(q, &o) {
            out.push(format!(
                "LEAK {} [{}] {:?} span {:?} sent {:?}",
                q.line, q.category, q.text, q.span, o.sent
            ));
        }
    }
    for q in parse(NEUTRAL_TSV).iter().filter(|q| q.split() == "dev") {
        let o = send(&env, &q.text);
        if o.sent.as_deref() != Some(q.text.as_str()) {
            out.push(format!(
                "ALTERED {} [{}] {:?} sent {:?}",
                q.line, q.category, q.text, o.sent
            ));
        }
    }
    out
}

/// Largest share of the ghost-call taxonomy's vocabulary that may appear verbatim in the
/// shipped lexicon (issue 18 item 4).
pub const MAX_TAXONOMY_SHARE: f64 = 0.20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_parse_and_spans_occur() {
        let s = parse(SENSITIVE_TSV);
        let n = parse(NEUTRAL_TSV);
        assert!(s.len() >= 100, "{} sensitive queries", s.len());
        assert!(n.len() >= 100, "{} neutral queries", n.len());
        let bad = bad_spans(&s);
        assert!(
            bad.len() * 20 <= s.len(),
            "spans not in their query: {bad:?}"
        );
    }

    #[test]
    fn constant_labeler_leaks_nothing() {
        let rows = evaluate(LabelerKind::Constant);
        for r in rows.iter().filter(|r| r.set.starts_with("sensitive")) {
            assert!(r.leaked == 0.0, "{r:?}");
        }
    }

    /// Issue 18 item 4: the shipped lexicon is not built from the generator's vocabulary. Of
    /// the taxonomy's label names, paraphrases and domain lexicon terms, only a small share may
    /// appear verbatim as a term of the built-in lexicon (everyday words such as "divorce"
    /// are bound to be shared; copying would share most).
    #[test]
    fn lexicon_is_not_the_taxonomy() {
        use super::super::taxonomy::DOMAINS;
        use secureclaw_core::labeler::{builtin_lexicon, builtin_names};
        // the hand-written lexicon and the sourced name vocabularies alike
        let lexicon: HashSet<String> = builtin_lexicon()
            .chain(builtin_names())
            .map(str::to_lowercase)
            .collect();
        let vocab: HashSet<String> = DOMAINS
            .iter()
            .flat_map(|d| {
                d.lexicon
                    .iter()
                    .copied()
                    .chain(d.labels.iter().flat_map(|l| [l.name, l.paraphrase]))
            })
            .map(str::to_lowercase)
            .collect();
        let shared = vocab.iter().filter(|t| lexicon.contains(*t)).count();
        let share = shared as f64 / vocab.len().max(1) as f64;
        println!(
            "taxonomy vocabulary in the shipped lexicon: {shared} of {} ({share:.3})",
            vocab.len()
        );
        assert!(
            share <= MAX_TAXONOMY_SHARE,
            "{shared} of {} taxonomy terms ({share:.3}) appear verbatim in the shipped lexicon",
            vocab.len()
        );
    }

    /// Prints the development half's misses (`cargo test … dev_misses -- --ignored
    /// --nocapture`).
    #[test]
    #[ignore = "prints the development half's misses for the labeler's maintainer"]
    fn print_dev_misses() {
        for line in dev_misses() {
            println!("{line}");
        }
    }
}
