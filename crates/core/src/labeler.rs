//! The labeler and the REWRITE transformations of issue-time privacy contracts (Ghost Tool
//! Calls, arXiv 2606.02483 §4 "Labeler", Appendix B.19).
//!
//! The labeler is a pure function of (tool, arguments, destination) that runs before the
//! monitor ([`crate::contract::decide`]). Two modes:
//!
//! - **content-aware** (default): operator field rules first (tool pattern + JSON Pointer
//!   pattern → label); otherwise the read path's detectors (an e-mail, IBAN, card, phone, URL
//!   or secret makes the field `personal`); a sensitive span found by the topic matcher
//!   ([`crate::topics`]: a hand-written lexicon of about 2,000 terms over health, medicines,
//!   legal and immigration, financial distress, employment, sexuality and identity, self-harm,
//!   abuse and addiction, religion and security incidents, matched in any word form and with
//!   one- and two-letter misspellings, 34,000 sourced medicine and condition names, plus name
//!   rules, context terms, a rare-word rule, a first-person context rule and phrase patterns
//!   of plain statements per category) or an
//!   operator term makes it `sensitive`, and `intent-revealing` when the field also speaks in
//!   the first person or asks what to do ("my", "should I", "how to", …); otherwise `public`.
//!   Handles (`hdl_…`) are `personal`: the executor may resolve them for the provider.
//! - **constant** (the paper's prototype, B.19): every non-empty scalar is
//!   `intent-revealing`, except text made only of rewrite placeholders.
//!
//! Rewrites (paper §4 REWRITE) are declared, deterministic transformations applied to the
//! forbidden fields only: entity redaction (`[email]`, `[iban]`, …), time-range coarsening
//! (`2026-03-14` → `2026-03` or `2026-Q1`), intent-phrase replacement (every sensitive span
//! the matcher finds → `[topic]`, deliberately not naming the domain, which is what an
//! adversary wants), and — when a field still labels too high — whole-field generalization to
//! `[redacted]`. The rewritten field is labeled again by the same matcher *in the knowledge
//! that it was sensitive* ([`Labeler::label_rewritten`], issue 18 item 2): a sensitive span
//! the rewrite missed, a context term, a word that is not common English, a modifier left
//! next to a placeholder ("severe [topic]") or an intent cue ("my [topic]") means the
//! rewrite left something behind, and the whole field is generalized. The monitor
//! ([`crate::monitor::issue`]) relabels the rewritten event the same way, and the contract
//! check ([`crate::contract::check_rewrite`]) blocks it unless every field now labels at most
//! `max_arg_label` (assumption A3).

use crate::contract::{
    ArgLabel, Contract, DestinationLabel, EffectLabel, LabeledEvent, LabeledField, Mode,
};
use crate::detect::detect;
use crate::handle::glob_match;
use crate::topics::{Matcher, Token, tokenize};
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

/// Every term of the built-in topic lexicon (lower case), domain by domain: what the
/// content-aware labeler labels `sensitive` before operator terms are added (it also matches
/// other word forms, misspellings and names by rule: [`crate::topics`]).
pub fn builtin_lexicon() -> impl Iterator<Item = &'static str> {
    crate::topics::builtin_terms().map(|(_, t)| t)
}

/// Every word of the built-in name vocabularies (medicines and conditions from public
/// sources, `crates/core/data/vocab-*.txt`, lower case), which the content-aware labeler also
/// labels `sensitive`.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    crate::topics::sourced_names()
}

/// Whether a phrase pattern of the content-aware labeler (`crates/core/data/phrases.txt`:
/// plain statements such as "behind on my rent", "got laid off") matches the whole of `text`.
#[must_use]
pub fn builtin_phrase_covers(text: &str) -> bool {
    crate::topics::phrase_covers(text)
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

/// The compiled labeler (paper §4, B.19).
#[derive(Debug, Clone)]
pub struct Labeler {
    config: LabelerConfig,
    matcher: Matcher,
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
        let extra: Vec<(String, ArgLabel)> = config
            .terms
            .iter()
            .map(|t| (t.term.clone(), t.label))
            .collect();
        let matcher = Matcher::new(&extra);
        let cues = INTENT_CUES
            .iter()
            .map(|c| tokenize(c).into_iter().map(|t| t.lower).collect())
            .collect();
        Labeler {
            config,
            matcher,
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
        let mut tokens = tokenize(&stripped);
        if tokens.is_empty() {
            return ArgLabel::Public;
        }
        if self.config.mode == LabelerMode::Constant {
            return ArgLabel::IntentRevealing;
        }
        let mut label = ArgLabel::Public;
        if !detect(&stripped).is_empty() || HANDLE.as_ref().is_some_and(|re| re.is_match(text)) {
            label = ArgLabel::Personal;
        }
        self.matcher.normalize(&mut tokens);
        let topical = self.matcher.spans(&tokens).iter().map(|s| s.label).max();
        if let Some(topic) = topical {
            let topic = if self.has_intent(&tokens) {
                ArgLabel::IntentRevealing
            } else {
                topic
            };
            label = label.max(topic);
        }
        label
    }

    /// Label the rewritten value `text` of a field whose original content was sensitive
    /// (issue 18 item 2: rewrites that leave nothing behind). The field is already known to be
    /// about a sensitive matter, so what is left of it is judged in that context:
    ///
    /// - every sensitive span [`Labeler::label_text`] finds (a term the rewrite missed);
    /// - a context term (`data/lexicon-weak.txt`: "husband", "pills", "court") or a word that
    ///   is not common English (a brand, a rare disease, a statute, a misspelling): the
    ///   rare-word rule, applied as if a strong span were still present → `sensitive`;
    /// - a modifier of a rewritten span: a content word or number directly before a
    ///   placeholder, or hyphenated to one ("severe [topic]", "type 2 [topic]",
    ///   "[topic]-positive") → `sensitive`;
    /// - an intent cue ("my", "I", "should I", "how do I", …) → `intent-revealing`: the
    ///   provider learns that the user, not the world, has the matter.
    ///
    /// Returns the highest of these and the plain label of `text`; placeholders alone and
    /// function words around them ("side effects of [topic]") stay `public`. In constant mode
    /// this is [`Labeler::label_text`].
    #[must_use]
    pub fn label_rewritten(&self, text: &str) -> ArgLabel {
        let mut label = self.label_text(text);
        if self.config.mode == LabelerMode::Constant || label == ArgLabel::IntentRevealing {
            return label;
        }
        // Blank the placeholders out (same length, so token offsets stay offsets into `text`).
        let holes: Vec<(usize, usize)> = PLACEHOLDERS
            .as_ref()
            .map(|re| re.find_iter(text).map(|m| (m.start(), m.end())).collect())
            .unwrap_or_default();
        let mut blank = text.to_owned();
        for &(a, b) in &holes {
            if blank.get(a..b).is_some() {
                blank.replace_range(a..b, &" ".repeat(b - a));
            }
        }
        let mut tokens = tokenize(&blank);
        if tokens.is_empty() {
            return label;
        }
        self.matcher.normalize(&mut tokens);
        if !self.matcher.spans_in(&tokens, true).is_empty() {
            label = label.max(ArgLabel::Sensitive);
        }
        let modifier = tokens.iter().any(|t| {
            !self.matcher.is_function_word(&t.lower)
                && holes.iter().any(|&(a, b)| {
                    let before = t.end <= a
                        && text
                            .get(t.end..a)
                            .is_some_and(|g| g.chars().all(|c| c == ' ' || c == '-'));
                    let after = text.get(b..t.start) == Some("-");
                    before || after
                })
        });
        if modifier {
            label = label.max(ArgLabel::Sensitive);
        }
        if self.has_intent(&tokens) {
            label = ArgLabel::IntentRevealing;
        }
        label
    }

    /// The label of a rewritten value: [`Labeler::label_rewritten`] when the field's original
    /// label was `sensitive` or above, or missing (its content is known, or must be assumed, to
    /// be sensitive), else [`Labeler::label_text`] (a field that only held an address is not
    /// judged as if it were sensitive).
    #[must_use]
    pub fn relabel(&self, original: Option<ArgLabel>, rewritten: &str) -> ArgLabel {
        if original.is_none_or(ArgLabel::is_budgeted) {
            self.label_rewritten(rewritten)
        } else {
            self.label_text(rewritten)
        }
    }

    /// Whether the text speaks in the first person or asks what to do (an intent cue).
    fn has_intent(&self, tokens: &[Token]) -> bool {
        self.cues.iter().any(|cue| {
            !cue.is_empty()
                && tokens
                    .windows(cue.len())
                    .any(|w| w.iter().zip(cue).all(|(t, c)| &t.lower == c))
        })
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

    /// Replace every sensitive span (lexicon terms in any word form or misspelling, names
    /// by rule, with the words a head noun or slot phrase takes) by `[topic]`, keeping the
    /// text around it; neighbouring replacements separated only by spaces or punctuation
    /// collapse into one.
    fn replace_terms(&self, text: &str) -> String {
        let mut tokens = tokenize(text);
        self.matcher.normalize(&mut tokens);
        let mut hits: Vec<(usize, usize)> = Vec::new();
        for span in self.matcher.spans(&tokens) {
            let (Some(a), Some(b)) = (tokens.get(span.first), tokens.get(span.last)) else {
                continue;
            };
            let (a, b) = (a.start, b.end);
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
                    let label = ruled.unwrap_or_else(|| self.relabel(Some(self.label_text(s)), &t));
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
            l.transform("write to bob@example.com about the divorce on 2026-03-14"),
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

    /// Issue 18 item 2, the attack: replacing the sensitive term alone leaves words that still
    /// identify the matter, which the plain relabel called public and sent. Labeled again in
    /// the knowledge that the field was sensitive, each remainder is forbidden, for the reason
    /// named, and the whole field is generalized.
    #[test]
    fn partial_rewrites_are_generalized() {
        let l = Labeler::default();
        let k = Contract::paper_web_search();
        for (q, left, why) in [
            // a modifier directly before the rewritten span
            (
                "severe depression treatment",
                "severe [topic] treatment",
                ArgLabel::Sensitive,
            ),
            // a number modifying it
            (
                "type 2 diabetes diet plan",
                "type 2 [topic] diet plan",
                ArgLabel::Sensitive,
            ),
            // the user speaks of their own matter
            (
                "I got arrested for shoplifting last night",
                "I [topic] last night",
                ArgLabel::IntentRevealing,
            ),
        ] {
            let t = l.transform(q);
            assert_eq!(t, left, "{q}");
            assert!(!k.forbids(l.label_text(&t)), "{t:?} leaked before");
            assert_eq!(l.label_rewritten(&t), why, "{t:?}");
            let out = l.rewrite(
                "s__web_search",
                &args(json!({ "q": q })),
                &["/q".to_owned()],
                &k,
            );
            assert_eq!(out["q"], json!("[redacted]"), "{q}");
        }
        // a remainder holding a second sensitive word: a context term, a name that is not
        // common English, a word hyphenated to the span — public to the plain relabel
        for left in [
            "[topic] and pills",
            "[topic] and Zorvexa",
            "[topic]-positive results",
        ] {
            assert_eq!(l.label_text(left), ArgLabel::Public, "{left}");
            assert_eq!(l.label_rewritten(left), ArgLabel::Sensitive, "{left}");
        }
    }

    /// The positive controls: a rewrite that took the whole sensitive content keeps its neutral
    /// words, a neutral query is not touched, and a field that was never sensitive is not
    /// judged as if it were (its first-person words are nobody's business).
    #[test]
    fn clean_rewrites_keep_their_neutral_words() {
        let l = Labeler::default();
        let k = Contract::paper_web_search();
        for (q, sent) in [
            ("tenant rights lease termination penalty", "[topic] penalty"),
            (
                "latest research on lung cancer",
                "latest research on [topic]",
            ),
            // the rare modifier went with the term in the first pass
            ("gestational diabetes diet plan", "[topic] diet plan"),
        ] {
            let out = l.rewrite(
                "s__web_search",
                &args(json!({ "q": q })),
                &["/q".to_owned()],
                &k,
            );
            assert_eq!(out["q"], json!(sent), "{q}");
            assert_eq!(l.label_rewritten(sent), ArgLabel::Public);
        }
        assert_eq!(l.label_text("weather in Paris"), ArgLabel::Public);
        assert_eq!(l.transform("weather in Paris"), "weather in Paris");
        // context decides: the same remainder is intent in a field that was sensitive …
        assert_eq!(
            l.relabel(Some(ArgLabel::Sensitive), "my [email] notes"),
            ArgLabel::IntentRevealing
        );
        // … and only personal in one that held nothing but an address
        assert_eq!(
            l.relabel(Some(ArgLabel::Personal), "my [email] notes"),
            ArgLabel::Public
        );
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::contract::decide;

    /// Issue 18 item 5: label + decide p50 for a 200-character argument (`cargo test --release
    /// -p secureclaw-core --lib -- --ignored label_and_decide_p50 --nocapture`).
    #[test]
    #[ignore = "timing; run by hand in release mode"]
    fn label_and_decide_p50() {
        let l = Labeler::new(LabelerConfig {
            destinations: vec![crate::labeler::DestinationRule {
                pattern: "*".into(),
                label: DestinationLabel::Public,
            }],
            ..LabelerConfig::default()
        });
        let k = Contract::paper_web_search();
        for q in [
            "my neurologist thinks I have multiple system atrophy, what are the side effects of the medication they want to start and should I tell my employer before my medical leave starts next month or wait",
            "best hiking trails near Lake Tahoe for a family with two kids in early October, with parking, picnic areas and a short loop under five miles that is open after the rain in the late afternoon hours",
            // misspelt and rare words: every fuzzy path (lexicon, names, distance 2, near-common)
            "my nuerologist perscribed trintelx and gabapentinn for the neuropathie, what are the side efects and should i tell my employer before my medical leave starts next month or wait abit",
        ] {
            let mut a = Map::new();
            a.insert("q".into(), Value::String(q.into()));
            let mut times = Vec::new();
            for _ in 0..20_000 {
                let t = std::time::Instant::now();
                let e = l.label(
                    "search",
                    "web_search",
                    "https://api.duckduckgo.com/",
                    Some(EffectLabel::ExternalRead),
                    &a,
                    Mode::Speculative,
                    Some(0.9),
                );
                std::hint::black_box(decide(&e, &k, 0));
                times.push(t.elapsed().as_nanos());
            }
            times.sort_unstable();
            let mut parts = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..20_000 {
                let t = std::time::Instant::now();
                std::hint::black_box(detect(q));
                parts[0].push(t.elapsed().as_nanos());
                let t = std::time::Instant::now();
                let mut toks = tokenize(q);
                l.matcher.normalize(&mut toks);
                parts[1].push(t.elapsed().as_nanos());
                let t = std::time::Instant::now();
                std::hint::black_box(l.matcher.spans(&toks));
                parts[2].push(t.elapsed().as_nanos());
            }
            for p in &mut parts {
                p.sort_unstable();
            }
            println!(
                "  detect {:.1} µs, tokenize+normalize {:.1} µs, spans {:.1} µs",
                parts[0][10_000] as f64 / 1000.0,
                parts[1][10_000] as f64 / 1000.0,
                parts[2][10_000] as f64 / 1000.0
            );
            println!(
                "{} chars: p50 {:.1} µs, p99 {:.1} µs",
                q.len(),
                times[times.len() / 2] as f64 / 1000.0,
                times[times.len() * 99 / 100] as f64 / 1000.0
            );
        }
    }
}

#[cfg(test)]
mod independent_dev {
    use super::*;
    use crate::contract::{Budget, Verdict};

    /// The maintainer's loop on the four spent query sets (every line of
    /// `crates/eval/data/ghost/{independent,heldout-2026-12-04,heldout3-2026-12-04,
    /// heldout4-2026-12-05}/*.tsv`, all already measured and now tuned on): prints every leak and every altered neutral query.
    /// `secureclaw eval ghost --queries DIR` measures any set the same way.
    #[test]
    #[ignore = "prints development-set misses for the labeler's maintainer"]
    fn dev_misses() {
        let l = Labeler::new(LabelerConfig {
            destinations: vec![DestinationRule {
                pattern: "*".into(),
                label: DestinationLabel::Public,
            }],
            ..LabelerConfig::default()
        });
        let k = Contract::paper_web_search();
        let send = |q: &str| {
            let mut a = Map::new();
            a.insert("query".into(), Value::String(q.into()));
            let e = l.label(
                "search",
                "web_search",
                "https://api.duckduckgo.com/",
                Some(EffectLabel::ExternalRead),
                &a,
                Mode::Speculative,
                Some(0.9),
            );
            let out = crate::monitor::issue(&l, Some(&k), &e, &a, &mut Budget::default());
            match out.verdict {
                Verdict::Allow | Verdict::Rewrite { .. } => out
                    .arguments
                    .get("query")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                _ => None,
            }
        };
        for set in [
            "independent",
            "heldout-2026-12-04",
            "heldout3-2026-12-04",
            "heldout4-2026-12-05",
        ] {
            let dir = format!("{}/../eval/data/ghost/{set}/", env!("CARGO_MANIFEST_DIR"));
            let (mut n, mut leaks) = (0, 0);
            for (i, line) in std::fs::read_to_string(format!("{dir}sensitive.tsv"))
                .unwrap_or_default()
                .lines()
                .enumerate()
            {
                let f: Vec<&str> = line.split('\t').collect();
                let (Some(cat), Some(q), Some(span)) = (f.first(), f.get(1), f.get(2)) else {
                    continue;
                };
                n += 1;
                let sent = send(q);
                if sent
                    .as_deref()
                    .is_some_and(|s| s.to_lowercase().contains(&span.trim().to_lowercase()))
                {
                    leaks += 1;
                    println!(
                        "LEAK {set}:{} [{cat}] {q:?} span {span:?} sent {sent:?}",
                        i + 1
                    );
                }
            }
            let (mut m, mut altered) = (0, 0);
            for (i, line) in std::fs::read_to_string(format!("{dir}neutral.tsv"))
                .unwrap_or_default()
                .lines()
                .enumerate()
            {
                let f: Vec<&str> = line.split('\t').collect();
                let (Some(cat), Some(q)) = (f.first(), f.get(1)) else {
                    continue;
                };
                m += 1;
                let sent = send(q);
                if sent.as_deref() != Some(*q) {
                    altered += 1;
                    println!("ALTERED {set}:{} [{cat}] {q:?} sent {sent:?}", i + 1);
                }
            }
            println!("{set}: sensitive leaked {leaks}/{n}, neutral altered {altered}/{m}");
        }
        // Texts given by hand (`LABELER_PROBE="text 1|text 2"`): what is sent.
        for q in std::env::var("LABELER_PROBE")
            .unwrap_or_default()
            .split('|')
        {
            if !q.trim().is_empty() {
                println!(
                    "PROBE {q:?} → {:?} spans {:?}",
                    send(q.trim()),
                    l.transform(q.trim())
                );
            }
        }
    }
}
