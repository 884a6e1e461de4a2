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
use std::path::Path;

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

/// The table for one labeler on the built-in independent set: per split (`dev`, `test`,
/// `all`), every sensitive query, each sensitive category, and the neutral queries.
#[must_use]
pub fn evaluate(kind: LabelerKind) -> Vec<Row> {
    let set = QuerySet::from_text("independent", SENSITIVE_TSV, NEUTRAL_TSV, None);
    measure(kind, &set).rows
}

/// A query set: the same layout as `crates/eval/data/ghost/*/` (a directory with
/// `sensitive.tsv`, `neutral.tsv` and optionally `neutral_decoys.txt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuerySet {
    /// A name for reports (the directory's).
    pub name: String,
    /// Sensitive queries whose span occurs in the query.
    pub sensitive: Vec<Query>,
    /// Neutral queries.
    pub neutral: Vec<Query>,
    /// 1-based line numbers in `neutral.tsv` of decoys: neutral queries written to share a
    /// word with a sensitive topic ("drunken noodles"). Empty when the set has none.
    pub decoys: HashSet<usize>,
    /// Lines of `sensitive.tsv` whose span is empty or not in the query (excluded).
    pub bad_spans: Vec<usize>,
}

impl QuerySet {
    /// A set from the texts of its files; `decoys` is the text of `neutral_decoys.txt` (one
    /// 1-based line number per line, `#` comments).
    #[must_use]
    pub fn from_text(name: &str, sensitive: &str, neutral: &str, decoys: Option<&str>) -> Self {
        let all = parse(sensitive);
        let bad_spans = bad_spans(&all);
        QuerySet {
            name: name.to_owned(),
            sensitive: all
                .into_iter()
                .filter(|q| !bad_spans.contains(&q.line))
                .collect(),
            neutral: parse(neutral),
            decoys: decoys
                .unwrap_or("")
                .lines()
                .filter_map(|l| l.split('#').next()?.trim().parse().ok())
                .collect(),
            bad_spans,
        }
    }

    /// Read `dir/sensitive.tsv`, `dir/neutral.tsv` and, if present, `dir/neutral_decoys.txt`.
    ///
    /// # Errors
    /// Either TSV file cannot be read (missing, not UTF-8), or the decoy file exists but cannot
    /// be read.
    pub fn load(dir: &Path) -> std::io::Result<Self> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", dir.join(f).display()))
            })
        };
        let sensitive = read("sensitive.tsv")?;
        let neutral = read("neutral.tsv")?;
        let decoys = if dir.join("neutral_decoys.txt").is_file() {
            Some(read("neutral_decoys.txt")?)
        } else {
            None
        };
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        Ok(QuerySet::from_text(
            &name,
            &sensitive,
            &neutral,
            decoys.as_deref(),
        ))
    }
}

/// What [`measure`] found: the table and every miss.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Per split (`dev`, `test`, `all`): `sensitive`, each `sensitive/<category>`, `neutral`
    /// and, when the set marks decoys, `neutral/non-decoy` and `neutral/decoy`.
    pub rows: Vec<Row>,
    /// Every sensitive query sent with its span intact (`LEAK line [category] query span …
    /// sent …`) and every neutral query not sent unchanged (`ALTERED line [category] (decoy)
    /// query sent …`), in file order.
    pub misses: Vec<String>,
}

/// Send every query of `set` under `kind`'s labeler and tabulate (see [`Row`]).
#[must_use]
pub fn measure(kind: LabelerKind, set: &QuerySet) -> Measured {
    let env = Env::new(kind);
    let sensitive = &set.sensitive;
    let neutral = &set.neutral;
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
        if !set.decoys.is_empty() {
            let (decoy, plain): (Vec<_>, Vec<_>) =
                n.iter().partition(|(q, _)| set.decoys.contains(&q.line));
            rows.push(row(kind.as_str(), split, "neutral/non-decoy", &plain));
            rows.push(row(kind.as_str(), split, "neutral/decoy", &decoy));
        }
    }
    let mut misses = Vec::new();
    for (q, o) in sensitive.iter().zip(&s_out) {
        if leaked(q, o) {
            misses.push(format!(
                "LEAK {} [{}] {:?} span {:?} sent {:?}",
                q.line, q.category, q.text, q.span, o.sent
            ));
        }
    }
    for (q, o) in neutral.iter().zip(&n_out) {
        if o.sent.as_deref() != Some(q.text.as_str()) {
            misses.push(format!(
                "ALTERED {} [{}]{} {:?} sent {:?}",
                q.line,
                q.category,
                if set.decoys.contains(&q.line) {
                    " (decoy)"
                } else {
                    ""
                },
                q.text,
                o.sent
            ));
        }
    }
    Measured { rows, misses }
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
    fn a_directory_measures_like_the_built_in_set() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("sensitive.tsv"),
            "category\tquery\tspan\nhealth\tearly signs of multiple sclerosis in women\tmultiple sclerosis\nhealth\tbad span here\tnot in it\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("neutral.tsv"),
            "weather\tweather tomorrow chicago\t\ncooking\tdrunken noodles recipe\t\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("neutral_decoys.txt"), "# decoys\n2\n").unwrap();
        let set = QuerySet::load(dir.path()).unwrap();
        assert_eq!(set.sensitive.len(), 1);
        assert_eq!(set.bad_spans, vec![3]);
        assert_eq!(set.neutral.len(), 2);
        assert_eq!(set.decoys, HashSet::from([2]));
        let m = measure(LabelerKind::Constant, &set);
        let get = |split: &str, s: &str| {
            m.rows
                .iter()
                .find(|r| r.split == split && r.set == s)
                .unwrap()
                .clone()
        };
        assert_eq!(get("all", "sensitive").leaked, 0.0);
        assert_eq!(get("all", "neutral").altered, 1.0);
        assert_eq!(get("all", "neutral/non-decoy").n, 1);
        assert_eq!(get("all", "neutral/decoy").n, 1);
        // both neutral queries altered by the constant labeler, one of them marked a decoy
        assert_eq!(m.misses.len(), 2, "{:?}", m.misses);
        assert!(m.misses.iter().any(|l| l.contains("(decoy)")));
        let c = measure(LabelerKind::Content, &set);
        assert_eq!(get("all", "sensitive").n, 1);
        assert!(
            c.rows
                .iter()
                .any(|r| r.split == "all" && r.set == "sensitive" && r.leaked == 0.0),
            "{:?}",
            c.misses
        );
        assert!(QuerySet::load(&dir.path().join("missing")).is_err());
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
    /// appear verbatim as a term of the built-in lexicon or be matched whole by one of its
    /// phrase patterns (everyday words such as "divorce" are bound to be shared; copying would
    /// share most).
    #[test]
    fn lexicon_is_not_the_taxonomy() {
        use super::super::taxonomy::DOMAINS;
        use secureclaw_core::labeler::{builtin_lexicon, builtin_names, builtin_phrase_covers};
        // the hand-written lexicon and the sourced vocabularies alike (names and the common-word
        // disease names used as context terms)
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
        // a term a phrase pattern matches whole counts as shared too
        let by_phrase = vocab
            .iter()
            .filter(|t| !lexicon.contains(*t) && builtin_phrase_covers(t))
            .count();
        println!("of which matched whole by a phrase pattern: {by_phrase}");
        let shared = vocab.iter().filter(|t| lexicon.contains(*t)).count() + by_phrase;
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
