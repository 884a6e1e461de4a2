//! The corpus generator ("ghostgen"): seeded, deterministic tasks with one hidden sensitive
//! label each and a frozen speculative frontier per (task, seed) (Ghost Tool Calls, arXiv
//! 2606.02483 §5.1 and Table 19; research notes §5.2).
//!
//! A task is a user prompt with a hidden fine label (e.g. "lease termination penalty"), a
//! frontier of speculative candidates over five read tools, each with a branch confidence and
//! a `promoted` flag, and (static-plan corpus only) a fixed committed plan. The committed trace
//! C of a task is its promoted candidates plus its plan. What a candidate's text carries is
//! drawn per candidate: the label's own words (*direct*), its paraphrase, only domain-level
//! words, a sibling label's words (a decoy the planner also explored), or nothing topical.
//! Frontier sizes, promotion rate, confidences and the tool mix follow the paper's Table 19.
//!
//! Everything is a pure function of (corpus kind, task index, seed) through the pinned
//! [`Rng`]; frontier files are JSON Lines with sorted keys, so they are byte-identical across
//! runs and machines.

use super::rng::Rng;
use super::taxonomy::{self, Domain, FineLabel};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Version string written into every frontier row; bump it when generation changes.
pub const GENERATOR_VERSION: &str = "ghostgen-1";

/// The five mock tools of the paper's prototype (§5.1), all reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// Web search (200 ms).
    WebSearch,
    /// Document retrieval from a named collection (100 ms).
    DocRetrieval,
    /// Calendar lookup (50 ms).
    CalendarLookup,
    /// CRM lookup (80 ms).
    CrmLookup,
    /// E-mail search (120 ms).
    EmailSearch,
}

impl Tool {
    /// Every tool, in the order of [`Tool::WEIGHTS`].
    pub const ALL: [Tool; 5] = [
        Tool::WebSearch,
        Tool::DocRetrieval,
        Tool::CalendarLookup,
        Tool::CrmLookup,
        Tool::EmailSearch,
    ];
    /// How often the planner picks each tool (document retrieval most often, Table 19).
    pub const WEIGHTS: [f64; 5] = [0.22, 0.40, 0.12, 0.12, 0.14];

    /// Upstream id of the tool's provider.
    #[must_use]
    pub fn upstream(self) -> &'static str {
        match self {
            Tool::WebSearch => "search",
            Tool::DocRetrieval => "docs",
            Tool::CalendarLookup => "calendar",
            Tool::CrmLookup => "crm",
            Tool::EmailSearch => "mail",
        }
    }

    /// Tool name at the provider.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Tool::WebSearch => "web_search",
            Tool::DocRetrieval => "doc_retrieval",
            Tool::CalendarLookup => "calendar_lookup",
            Tool::CrmLookup => "crm_lookup",
            Tool::EmailSearch => "email_search",
        }
    }

    /// Simulated provider latency in milliseconds (paper §5.1).
    #[must_use]
    pub fn latency_ms(self) -> u64 {
        match self {
            Tool::WebSearch => 200,
            Tool::DocRetrieval => 100,
            Tool::CalendarLookup => 50,
            Tool::CrmLookup => 80,
            Tool::EmailSearch => 120,
        }
    }
}

/// What a candidate's text carries about the hidden label (generator truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// The label's own words (copied from the user's prompt).
    Direct,
    /// The label's paraphrase (the planner's reformulation).
    Paraphrase,
    /// Domain-level words only, shared with every sibling label.
    Domain,
    /// A sibling label of the same domain (a hypothesis the planner explored).
    Sibling,
    /// Nothing topical.
    Generic,
}

/// Which corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CorpusKind {
    /// 30 tasks, a fixed plan: 3 speculative sensitive ghosts + 1 committed call (Table 6).
    #[serde(rename = "static-30")]
    Static30,
    /// 30 tasks with a planner frontier (Table 7).
    #[serde(rename = "pooled-30")]
    Pooled30,
    /// 150 tasks with a planner frontier (Tables 8, 9, 17).
    #[serde(rename = "pooled-150")]
    Pooled150,
    /// 30 tasks, generic endpoints: sensitivity only in the arguments (B.16).
    #[serde(rename = "enterprise-30")]
    Enterprise30,
    /// 30 tasks with at least 3 parallel speculative calls on 3 tools (B.17).
    #[serde(rename = "multi-tool-30")]
    MultiTool30,
    /// 40 tasks with no sensitive label (false positives).
    #[serde(rename = "neutral-40")]
    Neutral40,
}

impl CorpusKind {
    /// Every corpus.
    pub const ALL: [CorpusKind; 6] = [
        CorpusKind::Static30,
        CorpusKind::Pooled30,
        CorpusKind::Pooled150,
        CorpusKind::Enterprise30,
        CorpusKind::MultiTool30,
        CorpusKind::Neutral40,
    ];

    /// Stable name (`static-30`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CorpusKind::Static30 => "static-30",
            CorpusKind::Pooled30 => "pooled-30",
            CorpusKind::Pooled150 => "pooled-150",
            CorpusKind::Enterprise30 => "enterprise-30",
            CorpusKind::MultiTool30 => "multi-tool-30",
            CorpusKind::Neutral40 => "neutral-40",
        }
    }

    /// Number of tasks.
    #[must_use]
    pub fn tasks(self) -> usize {
        match self {
            CorpusKind::Pooled150 => 150,
            CorpusKind::Neutral40 => 40,
            _ => 30,
        }
    }
}

/// A label of a corpus menu, with what the white-box adversary knows about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MenuLabel {
    /// The label text, e.g. `lease termination penalty`.
    pub name: String,
    /// Its menu description.
    pub description: String,
    /// Its domain.
    pub domain: String,
    /// Its paraphrase (generator lexicon; only the white-box adversary uses it).
    pub paraphrase: String,
    /// Its collection slug.
    pub slug: String,
    /// Its domain's lexicon and slug (generator lexicon).
    pub domain_terms: Vec<String>,
}

/// The candidate menu of a corpus: every label the adversary chooses among.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Menu {
    /// The labels; a task's `label` indexes this list.
    pub labels: Vec<MenuLabel>,
}

impl Menu {
    /// SHA-256 (hex) of the menu as JSON (every field of every label): written into frontier
    /// rows so a replay cannot mix menus.
    #[must_use]
    pub fn hash(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }
}

/// One call as the runtime would issue it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// Tool.
    pub tool: Tool,
    /// Destination endpoint (URL).
    pub destination: String,
    /// Arguments (a JSON object with sorted keys).
    pub arguments: Map<String, Value>,
    /// What the text carries (generator truth).
    pub signal: Signal,
    /// JSON Pointers of the fields whose value was copied from the prompt's sensitive span
    /// (field-level provenance, for Taint-F).
    pub tainted: Vec<String>,
}

/// One speculative candidate of a frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// Branch id (`b0`, `b1`, …), one branch per candidate.
    pub branch: String,
    /// Branch confidence in `[0, 1]`.
    pub confidence: f64,
    /// Whether the branch is promoted (its result enters the committed trace).
    pub promoted: bool,
    /// The call.
    pub call: Call,
}

/// One frozen frontier row, keyed by (corpus, task, seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frontier {
    /// Corpus.
    pub corpus: CorpusKind,
    /// Task id (`t000`, …).
    pub task: String,
    /// Seed.
    pub seed: u64,
    /// Index of the hidden label in the corpus menu; `None` for a neutral task.
    pub label: Option<usize>,
    /// The user's prompt (seen by the trusted runtime only).
    pub prompt: String,
    /// Speculative candidates in issue order.
    pub candidates: Vec<Candidate>,
    /// Committed calls that are not candidates (issued at commit time; static plan only).
    pub plan: Vec<Call>,
    /// [`GENERATOR_VERSION`].
    pub generator: String,
    /// [`Menu::hash`] of the corpus menu.
    pub menu_hash: String,
}

impl Frontier {
    /// Reject a row that does not belong to corpus `kind` with a menu of `labels` labels:
    /// wrong corpus, label out of range (or missing on a sensitive corpus, present on the
    /// neutral one), a confidence outside `[0, 1]`, or duplicate branch ids.
    ///
    /// # Errors
    /// A message naming the first problem.
    pub fn validate(&self, kind: CorpusKind, labels: usize) -> Result<(), String> {
        if self.corpus != kind {
            return Err(format!(
                "row of corpus {} in {}",
                self.corpus.as_str(),
                kind.as_str()
            ));
        }
        match (kind, self.label) {
            (CorpusKind::Neutral40, None) => {}
            (CorpusKind::Neutral40, Some(_)) => return Err("neutral task with a label".into()),
            (_, Some(l)) if l < labels => {}
            (_, l) => return Err(format!("label {l:?} not in a menu of {labels}")),
        }
        let mut branches = BTreeSet::new();
        for c in &self.candidates {
            if !(c.confidence.is_finite() && (0.0..=1.0).contains(&c.confidence)) {
                return Err(format!("confidence {} outside [0, 1]", c.confidence));
            }
            if !branches.insert(c.branch.as_str()) {
                return Err(format!("duplicate branch {}", c.branch));
            }
        }
        Ok(())
    }
}

/// A generated corpus: its menu and one frontier per (task, seed), task-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Corpus {
    /// Which corpus.
    pub kind: CorpusKind,
    /// The label menu.
    pub menu: Menu,
    /// Frontier rows, ordered by (task, seed).
    pub rows: Vec<Frontier>,
}

impl Corpus {
    /// The frozen frontier file: one JSON object per line, sorted keys, `\n` line ends.
    ///
    /// # Errors
    /// Serialization errors from `serde_json` (not expected for generated rows).
    pub fn to_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = String::new();
        for r in &self.rows {
            // Through `Value` so every object's keys come out sorted.
            out.push_str(&serde_json::to_string(&serde_json::to_value(r)?)?);
            out.push('\n');
        }
        Ok(out)
    }

    /// Parse a frontier file written by [`Corpus::to_jsonl`] (for replay from disk).
    ///
    /// # Errors
    /// A line that is not a frontier row, or a row whose menu hash differs from `menu`'s.
    pub fn from_jsonl(kind: CorpusKind, menu: Menu, text: &str) -> Result<Corpus, String> {
        let hash = menu.hash();
        let mut rows = Vec::new();
        let mut keys = BTreeSet::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let row: Frontier =
                serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if row.menu_hash != hash {
                return Err(format!(
                    "line {}: frontier was generated for another menu",
                    i + 1
                ));
            }
            row.validate(kind, menu.labels.len())
                .map_err(|e| format!("line {}: {e}", i + 1))?;
            if !keys.insert((row.task.clone(), row.seed)) {
                return Err(format!(
                    "line {}: duplicate row for task {} seed {}",
                    i + 1,
                    row.task,
                    row.seed
                ));
            }
            rows.push(row);
        }
        Ok(Corpus { kind, menu, rows })
    }
}

/// The (domain, label) pairs of the sensitive taxonomy in menu order: label `j` of every
/// domain before label `j + 1` of any, so the first 30 spread over all seven domains.
fn interleaved() -> Vec<(&'static Domain, &'static FineLabel)> {
    let most = taxonomy::DOMAINS
        .iter()
        .map(|d| d.labels.len())
        .max()
        .unwrap_or(0);
    (0..most)
        .flat_map(|j| {
            taxonomy::DOMAINS
                .iter()
                .filter_map(move |d| d.labels.get(j).map(|l| (d, l)))
        })
        .collect()
}

fn menu_label(d: &Domain, l: &FineLabel) -> MenuLabel {
    let mut domain_terms: Vec<String> = d.lexicon.iter().map(|t| (*t).to_owned()).collect();
    domain_terms.push(d.slug.to_owned());
    MenuLabel {
        name: l.name.to_owned(),
        description: l.description.to_owned(),
        domain: d.name.to_owned(),
        paraphrase: l.paraphrase.to_owned(),
        slug: l.slug.to_owned(),
        domain_terms,
    }
}

/// The menu of a corpus: its tasks' labels (the neutral corpus uses the 150-label menu, so an
/// adversary can wrongly "recover" a sensitive label from a neutral trace).
#[must_use]
pub fn menu(kind: CorpusKind) -> Menu {
    let n = match kind {
        CorpusKind::Neutral40 => 150,
        k => k.tasks(),
    };
    Menu {
        labels: interleaved()
            .into_iter()
            .take(n)
            .map(|(d, l)| menu_label(d, l))
            .collect(),
    }
}

/// Generate a corpus for `seeds` (rows task-major, seeds in the given order).
#[must_use]
pub fn generate(kind: CorpusKind, seeds: &[u64]) -> Corpus {
    let menu = menu(kind);
    let hash = menu.hash();
    let labels = interleaved();
    let mut rows = Vec::with_capacity(kind.tasks() * seeds.len());
    for t in 0..kind.tasks() {
        for &seed in seeds {
            let topic = match kind {
                CorpusKind::Neutral40 => taxonomy::NEUTRAL.get(t).map(|l| Topic {
                    label: l,
                    domain: None,
                }),
                _ => labels.get(t).map(|(d, l)| Topic {
                    label: l,
                    domain: Some(d),
                }),
            };
            let Some(topic) = topic else { continue };
            let mut rng = Rng::stream(seed, &format!("{}/{t}", kind.as_str()));
            let mut row = task(kind, &topic, &mut rng);
            row.task = format!("t{t:03}");
            row.seed = seed;
            row.label = topic.domain.map(|_| t);
            row.menu_hash.clone_from(&hash);
            rows.push(row);
        }
    }
    Corpus { kind, menu, rows }
}

/// A task's hidden topic: a sensitive label with its domain, or a neutral topic.
struct Topic {
    label: &'static FineLabel,
    domain: Option<&'static Domain>,
}

/// Signal mix of ghost candidates and of promoted (committed) ones, in [`Signal`] order
/// Direct, Paraphrase, Domain, Sibling, Generic.
const GHOST_MIX: [f64; 5] = [0.25, 0.20, 0.20, 0.15, 0.20];
const COMMITTED_MIX: [f64; 5] = [0.20, 0.20, 0.40, 0.00, 0.20];
const SIGNALS: [Signal; 5] = [
    Signal::Direct,
    Signal::Paraphrase,
    Signal::Domain,
    Signal::Sibling,
    Signal::Generic,
];

fn frontier_size(kind: CorpusKind, rng: &mut Rng) -> usize {
    // Median 8, range 1–19 (Table 19): mostly 1 + Binomial(18, 0.39), sometimes uniform.
    let n = if rng.chance(0.08) {
        1 + rng.below(19)
    } else {
        1 + (0..18).filter(|_| rng.chance(0.39)).count() as u64
    };
    let n = usize::try_from(n).unwrap_or(8);
    match kind {
        CorpusKind::MultiTool30 => n.max(3),
        _ => n,
    }
}

fn task(kind: CorpusKind, topic: &Topic, rng: &mut Rng) -> Frontier {
    let prompt = prompt(topic, rng);
    let (candidates, plan) = if kind == CorpusKind::Static30 {
        // Three speculative sensitive ghosts, then one committed call with domain-level
        // content (Table 6).
        let ghosts = [Signal::Direct, Signal::Paraphrase, Signal::Direct]
            .iter()
            .enumerate()
            .map(|(i, &s)| Candidate {
                branch: format!("b{i}"),
                confidence: round3(rng.range(0.05, 0.6)),
                promoted: false,
                call: call(kind, topic, s, pick_tool(kind, rng, i), rng),
            })
            .collect();
        let committed = call(kind, topic, Signal::Domain, Tool::WebSearch, rng);
        (ghosts, vec![committed])
    } else {
        let n = frontier_size(kind, rng);
        // About one promoted branch per task (11–18% of candidates, Table 19), sometimes two.
        let mut promoted = vec![false; n];
        let first = usize::try_from(rng.below(n as u64)).unwrap_or(0);
        if let Some(p) = promoted.get_mut(first) {
            *p = true;
        }
        if n >= 6 && rng.chance(0.2) {
            let second = usize::try_from(rng.below(n as u64)).unwrap_or(0);
            if let Some(p) = promoted.get_mut(second) {
                *p = true;
            }
        }
        let candidates = promoted
            .iter()
            .enumerate()
            .map(|(i, &promoted)| {
                let mix = if promoted { &COMMITTED_MIX } else { &GHOST_MIX };
                let signal = SIGNALS
                    .get(rng.weighted(mix))
                    .copied()
                    .unwrap_or(Signal::Generic);
                // Promoted branches are the ones the planner was surer of, but the two
                // distributions overlap: ghosts are 0.95·u² (mean 0.32, a few above 0.7),
                // promoted branches 0.3 + 0.68·u^0.7 (mean 0.70, some below 0.5).
                let u = rng.unit();
                let confidence = if promoted {
                    0.3 + 0.68 * u.powf(0.7)
                } else {
                    0.95 * u * u
                };
                Candidate {
                    branch: format!("b{i}"),
                    confidence: round3(confidence),
                    promoted,
                    call: call(kind, topic, signal, pick_tool(kind, rng, i), rng),
                }
            })
            .collect();
        (candidates, Vec::new())
    };
    Frontier {
        corpus: kind,
        task: String::new(),
        seed: 0,
        label: None,
        prompt,
        candidates,
        plan,
        generator: GENERATOR_VERSION.to_owned(),
        menu_hash: String::new(),
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn pick_tool(kind: CorpusKind, rng: &mut Rng, i: usize) -> Tool {
    if kind == CorpusKind::MultiTool30 && i < 3 {
        // The first three parallel calls go to three different tools.
        return [Tool::DocRetrieval, Tool::WebSearch, Tool::EmailSearch]
            .get(i)
            .copied()
            .unwrap_or(Tool::WebSearch);
    }
    Tool::ALL
        .get(rng.weighted(&Tool::WEIGHTS))
        .copied()
        .unwrap_or(Tool::DocRetrieval)
}

fn pick<'a>(rng: &mut Rng, items: &'a [&'a str]) -> &'a str {
    rng.pick(items).copied().unwrap_or("")
}

fn frame(rng: &mut Rng, phrase: &str) -> String {
    pick(rng, taxonomy::FRAMES).replacen("{}", phrase, 1)
}

fn prompt(topic: &Topic, rng: &mut Rng) -> String {
    format!(
        "About {}: {}. Can you look into it before Friday?",
        topic.label.entity,
        frame(rng, topic.label.name)
    )
}

fn email_of(person: &str) -> String {
    let local: String = person
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(".");
    format!("{local}@example.org")
}

/// The text of one candidate, whether it was copied from the prompt, and the collection slug
/// a document retrieval for it would read.
fn text(topic: &Topic, signal: Signal, rng: &mut Rng) -> (String, bool, Option<&'static str>) {
    let label = topic.label;
    match (signal, topic.domain) {
        (Signal::Direct, _) => (frame(rng, label.name), true, Some(label.slug)),
        (Signal::Paraphrase, _) | (Signal::Domain | Signal::Sibling, None) => {
            (frame(rng, label.paraphrase), false, Some(label.slug))
        }
        (Signal::Domain, Some(d)) => {
            let term = pick(rng, d.lexicon);
            (frame(rng, term), false, Some(d.slug))
        }
        (Signal::Sibling, Some(d)) => {
            let others: Vec<&FineLabel> =
                d.labels.iter().filter(|l| l.name != label.name).collect();
            match rng.pick(&others).copied() {
                Some(l) => (frame(rng, l.name), false, Some(l.slug)),
                None => (frame(rng, label.paraphrase), false, Some(label.slug)),
            }
        }
        (Signal::Generic, _) => (pick(rng, taxonomy::GENERIC_QUERIES).to_owned(), false, None),
    }
}

/// The endpoint of `tool` (for document retrieval, the collections prefix: the collection slug
/// is appended), generic in the enterprise corpus.
fn endpoint(tool: Tool, enterprise: bool) -> String {
    let (corp, public) = match tool {
        Tool::WebSearch => ("search", "https://api.search.example/v1/search"),
        Tool::DocRetrieval => ("retrieve", "https://docs.example/collections"),
        Tool::CalendarLookup => ("calendar", "https://calendar.example/api/events"),
        Tool::CrmLookup => ("crm", "https://crm.example/api/contacts"),
        Tool::EmailSearch => ("mail", "https://mail.example/api/search"),
    };
    if enterprise {
        format!("https://api.corp.example/api/{corp}")
    } else {
        public.to_owned()
    }
}

/// Structural text every call shares: tool names, upstream ids, endpoints and argument names.
/// Adversaries drop its tokens (they say nothing about the label).
#[must_use]
pub fn structural_text() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in Tool::ALL {
        out.push(t.name().to_owned());
        out.push(t.upstream().to_owned());
        out.push(endpoint(t, false));
        out.push(endpoint(t, true));
    }
    out.extend(
        [
            "query",
            "collection",
            "title",
            "from",
            "to",
            "contact",
            "note",
            "subject",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    );
    out
}

/// The generator's topic-free material: query frames, generic queries and collections, and
/// contact names with their e-mail addresses. Adversaries drop its tokens unless a label's
/// name or paraphrase uses the same word.
#[must_use]
pub fn generic_text() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    out.extend(taxonomy::FRAMES.iter().map(|f| f.replace("{}", " ")));
    out.extend(taxonomy::GENERIC_QUERIES.iter().map(|s| (*s).to_owned()));
    out.extend(
        taxonomy::GENERIC_COLLECTIONS
            .iter()
            .map(|s| (*s).to_owned()),
    );
    out.extend(
        taxonomy::PEOPLE
            .iter()
            .map(|p| format!("{p} {}", email_of(p))),
    );
    out
}

/// The words of every sensitive label's name and paraphrase.
#[must_use]
pub fn topic_text() -> Vec<String> {
    taxonomy::DOMAINS
        .iter()
        .flat_map(|d| d.labels.iter())
        .flat_map(|l| [l.name.to_owned(), l.paraphrase.to_owned()])
        .collect()
}

fn call(kind: CorpusKind, topic: &Topic, signal: Signal, tool: Tool, rng: &mut Rng) -> Call {
    let (text, from_prompt, slug) = text(topic, signal, rng);
    let enterprise = kind == CorpusKind::Enterprise30;
    // A named contact or the task's entity rides along sometimes: personal data that is not
    // the topic (what Pre-Scrub removes).
    let person = pick(rng, taxonomy::PEOPLE).to_owned();
    let with_entity = rng.chance(0.3);
    let text = if with_entity {
        format!("{text} {}", topic.label.entity)
    } else {
        text
    };
    let mut args = Map::new();
    let mut tainted = Vec::new();
    let main_field;
    let destination = match tool {
        Tool::WebSearch => {
            main_field = "/query";
            args.insert("query".into(), json!(text));
            if rng.chance(0.2) {
                args.insert("contact".into(), json!(email_of(&person)));
            }
            endpoint(tool, enterprise)
        }
        Tool::DocRetrieval => {
            main_field = "/query";
            let collection = match slug {
                // A topical candidate reads from its topic's collection or the domain's.
                Some(s) if rng.chance(0.7) => s.to_owned(),
                _ => pick(rng, taxonomy::GENERIC_COLLECTIONS).to_owned(),
            };
            args.insert("query".into(), json!(text));
            if enterprise {
                args.insert("collection".into(), json!(collection));
                endpoint(tool, true)
            } else {
                format!("{}/{collection}", endpoint(tool, false))
            }
        }
        Tool::CalendarLookup => {
            main_field = "/title";
            let day = 1 + rng.below(20);
            args.insert("title".into(), json!(text));
            args.insert("from".into(), json!(format!("2026-03-{day:02}")));
            args.insert("to".into(), json!(format!("2026-03-{:02}", day + 7)));
            endpoint(tool, enterprise)
        }
        Tool::CrmLookup => {
            main_field = "/note";
            args.insert("contact".into(), json!(person));
            args.insert("note".into(), json!(text));
            endpoint(tool, enterprise)
        }
        Tool::EmailSearch => {
            main_field = "/subject";
            args.insert("subject".into(), json!(text));
            args.insert("from".into(), json!(email_of(&person)));
            endpoint(tool, enterprise)
        }
    };
    // Taint sources are the prompt's *sensitive* span: a neutral prompt taints nothing.
    if from_prompt && topic.domain.is_some() {
        tainted.push(main_field.to_owned());
    }
    Call {
        tool,
        destination,
        arguments: args,
        signal,
        tainted,
    }
}

/// Frontier statistics of a corpus (paper Table 19).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontierStats {
    /// Rows (tasks × seeds).
    pub rows: usize,
    /// Mean candidates per row.
    pub mean_size: f64,
    /// Median candidates per row.
    pub median_size: f64,
    /// 95th percentile (nearest rank).
    pub p95_size: usize,
    /// Smallest frontier.
    pub min_size: usize,
    /// Largest frontier.
    pub max_size: usize,
    /// Share of candidates never promoted.
    pub ghost_rate: f64,
    /// Share of candidates promoted.
    pub promotion_rate: f64,
    /// Mean branch confidence.
    pub mean_confidence: f64,
    /// Most frequent tool and its share.
    pub top_tool: (String, f64),
}

/// Compute [`FrontierStats`] over `rows`.
#[must_use]
pub fn frontier_stats(rows: &[Frontier]) -> FrontierStats {
    let mut sizes: Vec<usize> = rows.iter().map(|r| r.candidates.len()).collect();
    sizes.sort_unstable();
    let total: usize = sizes.iter().sum();
    let n = sizes.len().max(1);
    let median = if sizes.is_empty() {
        0.0
    } else if sizes.len() % 2 == 1 {
        sizes.get(sizes.len() / 2).copied().unwrap_or(0) as f64
    } else {
        let a = sizes.get(sizes.len() / 2 - 1).copied().unwrap_or(0);
        let b = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
        (a + b) as f64 / 2.0
    };
    let rank = ((0.95 * n as f64).ceil() as usize).clamp(1, n);
    let all: Vec<&Candidate> = rows.iter().flat_map(|r| r.candidates.iter()).collect();
    let promoted = all.iter().filter(|c| c.promoted).count();
    let cands = all.len().max(1) as f64;
    let mut per_tool = std::collections::BTreeMap::new();
    for c in &all {
        *per_tool.entry(c.call.tool.name()).or_insert(0usize) += 1;
    }
    let top = per_tool
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(t, n)| ((*t).to_owned(), *n as f64 / cands))
        .unwrap_or_default();
    FrontierStats {
        rows: rows.len(),
        mean_size: total as f64 / n as f64,
        median_size: median,
        p95_size: sizes.get(rank - 1).copied().unwrap_or(0),
        min_size: sizes.first().copied().unwrap_or(0),
        max_size: sizes.last().copied().unwrap_or(0),
        ghost_rate: 1.0 - promoted as f64 / cands,
        promotion_rate: promoted as f64 / cands,
        mean_confidence: all.iter().map(|c| c.confidence).sum::<f64>() / cands,
        top_tool: top,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn frontier_files_are_byte_identical_across_runs() {
        for kind in CorpusKind::ALL {
            let a = generate(kind, &[1, 2, 3]).to_jsonl().unwrap();
            let b = generate(kind, &[1, 2, 3]).to_jsonl().unwrap();
            assert_eq!(a, b, "{kind:?}");
            assert_eq!(a.lines().count(), kind.tasks() * 3);
        }
    }

    #[test]
    fn labels_are_unique_per_task_and_menus_match() {
        let c = generate(CorpusKind::Pooled150, &[1]);
        assert_eq!(c.menu.labels.len(), 150);
        let labels: std::collections::BTreeSet<_> = c.rows.iter().map(|r| r.label).collect();
        assert_eq!(labels.len(), 150);
        let domains: std::collections::BTreeSet<_> = menu(CorpusKind::Pooled30)
            .labels
            .iter()
            .map(|l| l.domain.clone())
            .collect();
        assert_eq!(domains.len(), 7, "the 30-label menu spans every domain");
        assert!(
            generate(CorpusKind::Neutral40, &[1])
                .rows
                .iter()
                .all(|r| r.label.is_none())
        );
    }

    #[test]
    fn frontier_statistics_are_close_to_table_19() {
        let c = generate(CorpusKind::Pooled150, &[1, 2, 3]);
        let s = frontier_stats(&c.rows);
        assert!((7.0..=9.0).contains(&s.median_size), "{s:?}");
        assert!(s.min_size >= 1 && s.max_size <= 19, "{s:?}");
        assert!((0.10..=0.19).contains(&s.promotion_rate), "{s:?}");
        assert!((0.33..=0.41).contains(&s.mean_confidence), "{s:?}");
        assert_eq!(s.top_tool.0, "doc_retrieval", "{s:?}");
    }

    #[test]
    fn replay_from_disk_round_trips_and_rejects_another_menu() {
        let c = generate(CorpusKind::Pooled30, &[7]);
        let text = c.to_jsonl().unwrap();
        let back = Corpus::from_jsonl(c.kind, c.menu.clone(), &text).unwrap();
        assert_eq!(back, c);
        assert!(Corpus::from_jsonl(c.kind, menu(CorpusKind::Pooled150), &text).is_err());
    }

    #[test]
    fn replay_rejects_rows_that_do_not_belong_to_the_corpus() {
        let c = generate(CorpusKind::Pooled30, &[7]);
        let good = c.to_jsonl().unwrap();
        let first = good.lines().next().unwrap().to_owned();
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_str(&first).unwrap();
            f(&mut v);
            v.to_string()
        };
        let bad = [
            edit(&|v| v["label"] = json!(999)),
            edit(&|v| v["corpus"] = json!("pooled-150")),
            edit(&|v| v["candidates"][0]["confidence"] = json!(5.0)),
            edit(&|v| v["surprise"] = json!(true)),
            format!("{first}\n{first}"),
            "not json".to_owned(),
        ];
        for text in bad {
            let e = Corpus::from_jsonl(c.kind, c.menu.clone(), &text);
            assert!(e.is_err(), "accepted {text:.80}");
        }
    }

    #[test]
    fn static_plan_has_three_ghosts_and_one_committed_call() {
        for r in generate(CorpusKind::Static30, &[1]).rows {
            assert_eq!(r.candidates.len(), 3);
            assert!(r.candidates.iter().all(|c| !c.promoted));
            assert_eq!(r.plan.len(), 1);
        }
    }
}
