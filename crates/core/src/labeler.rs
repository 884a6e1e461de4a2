//! The labeler and the REWRITE transformations of issue-time privacy contracts (Ghost Tool
//! Calls, arXiv 2606.02483 §4 "Labeler", Appendix B.19).
//!
//! The labeler is a pure function of (tool, arguments, destination) that runs before the
//! monitor ([`crate::contract::decide`]). Two modes:
//!
//! - **content-aware** (default): operator field rules first (tool pattern + JSON Pointer
//!   pattern → label); otherwise the read path's detectors (an e-mail, IBAN, card, phone, URL
//!   or secret makes the field `personal`); a topic lexicon of sensitive domains (health,
//!   legal, employment, financial, immigration, security, relationships) plus operator terms
//!   makes it `sensitive`, and `intent-revealing` when the field also speaks in the first
//!   person or asks what to do ("my", "should I", "how to", …); otherwise `public`. Handles
//!   (`hdl_…`) are `personal`: the executor may resolve them for the provider.
//! - **constant** (the paper's prototype, B.19): every non-empty scalar is
//!   `intent-revealing`, except text made only of rewrite placeholders.
//!
//! Rewrites (paper §4 REWRITE) are declared, deterministic transformations applied to the
//! forbidden fields only: entity redaction (`[email]`, `[iban]`, …), time-range coarsening
//! (`2026-03-14` → `2026-03` or `2026-Q1`), intent-phrase replacement (lexicon terms →
//! `[topic]`, deliberately not naming the domain, which is what an adversary wants), and —
//! when a field still labels too high — whole-field generalization to `[redacted]`. The
//! rewritten event is labeled again; the contract check ([`crate::contract::check_rewrite`])
//! blocks it unless every field now labels at most `max_arg_label` (assumption A3).

use crate::contract::{
    ArgLabel, Contract, DestinationLabel, EffectLabel, LabeledEvent, LabeledField, Mode,
};
use crate::detect::detect;
use crate::handle::glob_match;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::LazyLock;

/// Labeler mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabelerMode {
    /// Field rules, detectors and the topic lexicon.
    #[default]
    ContentAware,
    /// Every argument is intent-revealing (the paper's prototype, for replication).
    Constant,
}

/// An operator rule labeling argument fields of some tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldLabelRule {
    /// Tool pattern (`upstream__tool`, `*` wildcard).
    pub tool: String,
    /// JSON Pointer pattern of the field (`/query`, `/filters/*`).
    pub path: String,
    /// The label.
    pub label: ArgLabel,
}

/// An operator term added to the topic lexicon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TermRule {
    /// Word or phrase, matched case-insensitively on word boundaries.
    pub term: String,
    /// Label of a field containing it (`sensitive` or `intent-revealing`).
    pub label: ArgLabel,
}

/// Destination pattern → label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationRule {
    /// Endpoint pattern (`*` wildcard) matched against the upstream's destination.
    pub pattern: String,
    /// The label.
    pub label: DestinationLabel,
}

/// Tool pattern → effect class (overrides what the catalog derived from annotations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectRule {
    /// Tool pattern (`upstream__tool`, `*` wildcard).
    pub tool: String,
    /// The effect class.
    pub effect: EffectLabel,
}

/// Granularity of time-range coarsening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DateCoarsening {
    /// Leave dates alone.
    Off,
    /// `2026-03-14` → `2026-03`.
    #[default]
    Month,
    /// `2026-03-14` → `2026-Q1`.
    Quarter,
}

/// Which REWRITE transformations run, in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewriteConfig {
    /// Replace detected identifiers by typed placeholders (`[email]`).
    pub redact_entities: bool,
    /// Coarsen ISO dates.
    pub coarsen_dates: DateCoarsening,
    /// Replace lexicon phrases by `[topic]`.
    pub replace_intent_phrases: bool,
    /// Replace a field that still labels too high by `[redacted]` (strings) or `null`.
    pub generalize_fields: bool,
}

impl Default for RewriteConfig {
    fn default() -> Self {
        RewriteConfig {
            redact_entities: true,
            coarsen_dates: DateCoarsening::Month,
            replace_intent_phrases: true,
            generalize_fields: true,
        }
    }
}

/// Labeler configuration (the `[speculation.labeler]` section).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabelerConfig {
    /// Mode.
    pub mode: LabelerMode,
    /// Operator field rules (first match wins, before detectors and lexicon).
    pub fields: Vec<FieldLabelRule>,
    /// Operator lexicon terms (added to the built-in lexicon).
    pub terms: Vec<TermRule>,
    /// Destination labels (first match wins; no match = unlabeled = BLOCK).
    pub destinations: Vec<DestinationRule>,
    /// Effect overrides (first match wins).
    pub effects: Vec<EffectRule>,
    /// Rewrite transformations.
    pub rewrite: RewriteConfig,
}

/// The built-in topic lexicon: one sensitive domain per line, terms on word boundaries.
const LEXICON: &[(&str, &[&str])] = &[
    (
        "health",
        &[
            "diagnosis",
            "symptoms",
            "symptom",
            "cancer",
            "chemotherapy",
            "oncologist",
            "hiv",
            "pregnancy",
            "pregnant",
            "abortion",
            "depression",
            "anxiety",
            "therapist",
            "psychiatrist",
            "medication",
            "prescription",
            "diabetes",
            "rehab",
            "addiction",
            "std",
            "biopsy",
            "tumor",
            "clinic",
            "fertility",
            "ivf",
            "mental health",
        ],
    ),
    (
        "legal",
        &[
            "lawyer",
            "attorney",
            "lawsuit",
            "sue",
            "divorce",
            "custody",
            "eviction",
            "lease",
            "tenant",
            "landlord",
            "arrest",
            "dui",
            "court",
            "subpoena",
            "settlement",
            "bankruptcy",
            "criminal record",
            "probation",
            "legal aid",
        ],
    ),
    (
        "employment",
        &[
            "fired",
            "layoff",
            "laid off",
            "severance",
            "resignation",
            "resign",
            "wrongful termination",
            "harassment",
            "discrimination",
            "job offer",
            "unemployment",
            "performance review",
            "disciplinary",
            "quit my job",
        ],
    ),
    (
        "financial",
        &[
            "debt",
            "loan",
            "loans",
            "mortgage",
            "foreclosure",
            "overdraft",
            "credit score",
            "collections",
            "payday",
            "garnishment",
            "personal loan",
            "bankrupt",
            "tax audit",
        ],
    ),
    (
        "immigration",
        &[
            "visa",
            "asylum",
            "deportation",
            "green card",
            "work permit",
            "overstay",
            "undocumented",
            "citizenship",
            "residency permit",
            "refugee",
            "immigration",
        ],
    ),
    (
        "security",
        &[
            "password reset",
            "hacked",
            "breach",
            "stalker",
            "stalking",
            "restraining order",
            "phishing",
            "ransomware",
            "identity theft",
            "compromised account",
        ],
    ),
    (
        "relationships",
        &[
            "affair",
            "cheating",
            "breakup",
            "break up",
            "dating",
            "domestic violence",
            "abuse",
            "separation",
            "marriage counseling",
            "infidelity",
        ],
    ),
];

/// Every term of the built-in topic lexicon (lower case), domain by domain: what the
/// content-aware labeler labels `sensitive` before operator terms are added.
pub fn builtin_lexicon() -> impl Iterator<Item = &'static str> {
    LEXICON.iter().flat_map(|(_, terms)| terms.iter().copied())
}

/// First-person and what-should-I cues that turn a sensitive topic into intent.
const INTENT_CUES: &[&str] = &[
    "my",
    "i",
    "me",
    "i'm",
    "im",
    "mine",
    "should i",
    "can i",
    "how to",
    "how do i",
    "what happens if",
    "am i",
    "penalty for",
    "near me",
    "for me",
    "we",
    "our",
];

/// Placeholders the rewriter emits; text made only of them is public in every mode.
const PLACEHOLDER: &str = r"\[(?:email|iban|card|phone|url|secret|topic|redacted|handle)\]";

static PLACEHOLDERS: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(PLACEHOLDER).ok());
static ISO_DATE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
    )
    .ok()
});
static HANDLE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"hdl_[a-z]+_[a-z2-7]{32}").ok());

/// A lexicon term split into lower-case words.
#[derive(Debug, Clone)]
struct Term {
    words: Vec<String>,
    label: ArgLabel,
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Start indexes (in words) where `term` occurs in `ws`.
fn occurrences(ws: &[String], term: &[String]) -> Vec<usize> {
    if term.is_empty() || term.len() > ws.len() {
        return Vec::new();
    }
    (0..=ws.len() - term.len())
        .filter(|&i| ws.get(i..i + term.len()).is_some_and(|w| w == term))
        .collect()
}

/// The compiled labeler (paper §4, B.19).
#[derive(Debug, Clone)]
pub struct Labeler {
    config: LabelerConfig,
    terms: Vec<Term>,
    cues: Vec<Vec<String>>,
}

impl Default for Labeler {
    fn default() -> Self {
        Labeler::new(LabelerConfig::default())
    }
}

impl Labeler {
    /// Compile a configuration (lexicon terms are split once here).
    #[must_use]
    pub fn new(config: LabelerConfig) -> Self {
        let mut terms: Vec<Term> = LEXICON
            .iter()
            .flat_map(|(_, ts)| ts.iter())
            .map(|t| Term {
                words: words(t),
                label: ArgLabel::Sensitive,
            })
            .collect();
        terms.extend(config.terms.iter().map(|t| Term {
            words: words(&t.term),
            label: t.label,
        }));
        terms.retain(|t| !t.words.is_empty());
        let cues = INTENT_CUES.iter().map(|c| words(c)).collect();
        Labeler {
            config,
            terms,
            cues,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LabelerConfig {
        &self.config
    }

    /// The destination label of `destination`; `None` when no rule matches (BLOCK).
    #[must_use]
    pub fn destination_label(&self, destination: &str) -> Option<DestinationLabel> {
        self.config
            .destinations
            .iter()
            .find(|r| glob_match(&r.pattern, destination))
            .map(|r| r.label)
    }

    /// The effect class of `upstream__tool`: an operator rule, else `derived` (from the
    /// catalog's annotations and `[[gateway.tools]]`).
    #[must_use]
    pub fn effect(&self, qualified: &str, derived: Option<EffectLabel>) -> Option<EffectLabel> {
        self.config
            .effects
            .iter()
            .find(|r| glob_match(&r.tool, qualified))
            .map(|r| r.effect)
            .or(derived)
    }

    /// Label one scalar's text (no field rule applied).
    #[must_use]
    pub fn label_text(&self, text: &str) -> ArgLabel {
        let stripped = match PLACEHOLDERS.as_ref() {
            Some(re) => re.replace_all(text, " ").into_owned(),
            None => text.to_owned(),
        };
        let ws = words(&stripped);
        if ws.is_empty() {
            return ArgLabel::Public;
        }
        if self.config.mode == LabelerMode::Constant {
            return ArgLabel::IntentRevealing;
        }
        let mut label = ArgLabel::Public;
        if !detect(&stripped).is_empty() || HANDLE.as_ref().is_some_and(|re| re.is_match(text)) {
            label = ArgLabel::Personal;
        }
        let topical = self
            .terms
            .iter()
            .filter(|t| !occurrences(&ws, &t.words).is_empty())
            .map(|t| t.label)
            .max();
        if let Some(topic) = topical {
            let intent = self.cues.iter().any(|c| !occurrences(&ws, c).is_empty());
            let topic = if intent {
                ArgLabel::IntentRevealing
            } else {
                topic
            };
            label = label.max(topic);
        }
        label
    }

    /// Label every scalar field of `arguments` for tool `qualified` (`upstream__tool`).
    #[must_use]
    pub fn label_fields(
        &self,
        qualified: &str,
        arguments: &Map<String, Value>,
    ) -> Vec<LabeledField> {
        let mut out = Vec::new();
        for (k, v) in arguments {
            self.walk(qualified, &format!("/{}", escape(k)), v, &mut out);
        }
        out
    }

    fn walk(&self, qualified: &str, path: &str, v: &Value, out: &mut Vec<LabeledField>) {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => return,
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(qualified, &format!("{path}/{i}"), item, out);
                }
                return;
            }
            Value::Object(map) => {
                for (k, item) in map {
                    self.walk(qualified, &format!("{path}/{}", escape(k)), item, out);
                }
                return;
            }
        };
        let ruled = self
            .config
            .fields
            .iter()
            .find(|r| glob_match(&r.tool, qualified) && glob_match(&r.path, path))
            .map(|r| r.label);
        let label = ruled.unwrap_or_else(|| self.label_text(&text));
        out.push(LabeledField {
            path: path.to_owned(),
            value: text,
            label: Some(label),
        });
    }

    /// Build the labeled event for one call.
    #[must_use]
    #[expect(
        clippy::too_many_arguments,
        reason = "one field of the label vector each"
    )]
    pub fn label(
        &self,
        upstream: &str,
        tool: &str,
        destination: &str,
        derived_effect: Option<EffectLabel>,
        arguments: &Map<String, Value>,
        mode: Mode,
        confidence: Option<f64>,
    ) -> LabeledEvent {
        let q = crate::contract::qualified(upstream, tool);
        LabeledEvent {
            upstream: upstream.to_owned(),
            tool: tool.to_owned(),
            destination: destination.to_owned(),
            mode,
            effect: self.effect(&q, derived_effect),
            destination_label: self.destination_label(destination),
            fields: self.label_fields(&q, arguments),
            confidence,
        }
    }

    /// Apply the declared transformations (without whole-field generalization) to one text.
    #[must_use]
    pub fn transform(&self, text: &str) -> String {
        let rw = &self.config.rewrite;
        let mut s = text.to_owned();
        if rw.redact_entities {
            if let Some(re) = HANDLE.as_ref() {
                s = re.replace_all(&s, "[handle]").into_owned();
            }
            let findings = detect(&s);
            for f in findings.iter().rev() {
                if let (Some(_), true) = (s.get(f.range()), s.is_char_boundary(f.start)) {
                    s.replace_range(f.range(), &format!("[{}]", f.kind.as_str()));
                }
            }
        }
        if rw.coarsen_dates != DateCoarsening::Off
            && let Some(re) = ISO_DATE.as_ref()
        {
            let q = rw.coarsen_dates == DateCoarsening::Quarter;
            s = re
                .replace_all(&s, |c: &regex::Captures<'_>| {
                    let y = c.get(1).map_or("", |m| m.as_str());
                    let m = c.get(2).map_or("", |m| m.as_str());
                    if q {
                        let quarter = m
                            .parse::<u32>()
                            .map_or(0, |m| (m.saturating_sub(1)) / 3 + 1);
                        format!("{y}-Q{quarter}")
                    } else {
                        format!("{y}-{m}")
                    }
                })
                .into_owned();
        }
        if rw.replace_intent_phrases {
            s = self.replace_terms(&s);
        }
        s
    }

    /// Replace every lexicon term (longest match first) by `[topic]`, keeping the text around
    /// it; neighbouring replacements separated only by spaces or punctuation collapse into one.
    fn replace_terms(&self, text: &str) -> String {
        // Word spans (byte ranges) and their lower-case forms, as in `words`.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices() {
            let word = c.is_alphanumeric() || c == '\'';
            match (word, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    spans.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            spans.push((s, text.len()));
        }
        let lower: Vec<String> = spans
            .iter()
            .map(|&(a, b)| text.get(a..b).unwrap_or("").to_lowercase())
            .collect();
        // Byte ranges to replace.
        let mut hits: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < spans.len() {
            let n = self
                .terms
                .iter()
                .filter(|t| {
                    lower
                        .get(i..i + t.words.len())
                        .is_some_and(|w| w == t.words.as_slice())
                })
                .map(|t| t.words.len())
                .max();
            match (n, spans.get(i), n.and_then(|n| spans.get(i + n - 1))) {
                (Some(n), Some(&(a, _)), Some(&(_, b))) => {
                    match hits.last_mut() {
                        Some(last)
                            if text
                                .get(last.1..a)
                                .is_some_and(|gap| gap.chars().all(|c| !c.is_alphanumeric())) =>
                        {
                            last.1 = b;
                        }
                        _ => hits.push((a, b)),
                    }
                    i += n;
                }
                _ => i += 1,
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (a, b) in hits {
            out.push_str(text.get(at..a).unwrap_or(""));
            out.push_str("[topic]");
            at = b;
        }
        out.push_str(text.get(at..).unwrap_or(""));
        out
    }

    /// REWRITE (paper §4): transform the fields at `paths` of `arguments`, generalizing any
    /// that still label above `kappa.max_arg_label` when configured. Returns the rewritten
    /// arguments; the caller relabels them and applies [`crate::contract::check_rewrite`].
    #[must_use]
    pub fn rewrite(
        &self,
        qualified: &str,
        arguments: &Map<String, Value>,
        paths: &[String],
        kappa: &Contract,
    ) -> Map<String, Value> {
        let mut root = Value::Object(arguments.clone());
        for path in paths {
            let Some(slot) = root.pointer_mut(path) else {
                continue;
            };
            let new = match &*slot {
                Value::String(s) => {
                    let t = self.transform(s);
                    let ruled = self.ruled(qualified, path);
                    let label = ruled.unwrap_or_else(|| self.label_text(&t));
                    if kappa.forbids(label) && self.config.rewrite.generalize_fields {
                        Value::String("[redacted]".to_owned())
                    } else {
                        Value::String(t)
                    }
                }
                // A forbidden number or boolean carries no text to transform.
                _ if self.config.rewrite.generalize_fields => Value::Null,
                other => other.clone(),
            };
            *slot = new;
        }
        match root {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn ruled(&self, qualified: &str, path: &str) -> Option<ArgLabel> {
        // A field rule labels the *field*, whatever its content; a rewritten value in such a
        // field keeps that label unless it is only placeholders.
        self.config
            .fields
            .iter()
            .find(|r| glob_match(&r.tool, qualified) && glob_match(&r.path, path))
            .map(|r| r.label)
    }
}

/// Escape one JSON Pointer reference token (RFC 6901 §3).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn lexicon_and_intent() {
        let l = Labeler::default();
        assert_eq!(l.label_text("weather in Paris"), ArgLabel::Public);
        assert_eq!(
            l.label_text("tenant rights lease termination penalty"),
            ArgLabel::Sensitive
        );
        assert_eq!(
            l.label_text("penalty for breaking my lease early"),
            ArgLabel::IntentRevealing
        );
        assert_eq!(l.label_text("mail bob@example.com"), ArgLabel::Personal);
        assert_eq!(
            l.label_text("My Chemotherapy options"),
            ArgLabel::IntentRevealing
        );
        // word boundaries: "released" does not contain the term "lease"
        assert_eq!(l.label_text("released notes"), ArgLabel::Public);
    }

    #[test]
    fn constant_mode_labels_everything_but_placeholders() {
        let l = Labeler::new(LabelerConfig {
            mode: LabelerMode::Constant,
            ..LabelerConfig::default()
        });
        assert_eq!(l.label_text("weather"), ArgLabel::IntentRevealing);
        assert_eq!(l.label_text("[redacted]"), ArgLabel::Public);
        assert_eq!(l.label_text("[topic] [email]"), ArgLabel::Public);
    }

    #[test]
    fn operator_rules_and_terms() {
        let l = Labeler::new(LabelerConfig {
            fields: vec![FieldLabelRule {
                tool: "crm__*".into(),
                path: "/customer".into(),
                label: ArgLabel::Personal,
            }],
            terms: vec![TermRule {
                term: "project falcon".into(),
                label: ArgLabel::IntentRevealing,
            }],
            ..LabelerConfig::default()
        });
        let f = l.label_fields(
            "crm__lookup",
            &args(json!({"customer": "x", "q": "Project Falcon budget"})),
        );
        assert_eq!(f[0].path, "/customer");
        assert_eq!(f[0].label, Some(ArgLabel::Personal));
        assert_eq!(f[1].label, Some(ArgLabel::IntentRevealing));
    }

    #[test]
    fn transformations() {
        let l = Labeler::default();
        assert_eq!(
            l.transform("write to bob@example.com about the lease on 2026-03-14"),
            "write to [email] about the [topic] on 2026-03"
        );
        let q = Labeler::new(LabelerConfig {
            rewrite: RewriteConfig {
                coarsen_dates: DateCoarsening::Quarter,
                replace_intent_phrases: false,
                ..RewriteConfig::default()
            },
            ..LabelerConfig::default()
        });
        assert_eq!(
            q.transform("from 2026-08-02 to 2026-11-30"),
            "from 2026-Q3 to 2026-Q4"
        );
        assert_eq!(
            q.transform("at 2026-08-02T10:30:00Z sharp"),
            "at 2026-Q3 sharp"
        );
    }

    #[test]
    fn rewrite_lowers_labels_or_generalizes() {
        let l = Labeler::default();
        let k = Contract::paper_web_search();
        let a = args(json!({"q": "penalty for breaking my lease early", "n": 3}));
        let out = l.rewrite("s__web_search", &a, &["/q".to_owned()], &k);
        let label = l.label_text(out["q"].as_str().unwrap());
        assert!(label <= ArgLabel::Personal, "{out:?} labels {label:?}");
        assert_eq!(out["n"], json!(3));
    }
}
