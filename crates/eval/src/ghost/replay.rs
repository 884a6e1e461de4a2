//! The thirteen policies of the Ghost Tool Calls evaluation (paper §5, Appendix B.15; research
//! notes §2.13 and §5.3) and the replay of one frozen frontier row under a policy.
//!
//! Rewrite, Shadow, Gate and Drop are contracts κ decided by the product's issue-time monitor
//! ([`secureclaw_core::monitor::issue`], the same function the gateway's dispatcher calls) over
//! labels from the product's labeler ([`Labeler`]). The other policies are the paper's
//! baselines, implemented here. A replay produces the product's trace model
//! ([`TraceEvent`]s and a [`BranchTable`]), so observer projections and marginal exposure come
//! from [`secureclaw_core::exposure`] as they do for a live session.
//!
//! Schedule of a row (simulated clock, milliseconds from task start): every candidate is
//! proposed at `10·i` in `speculative` mode; at [`COMMIT_MS`] the branches settle (promoted or
//! abandoned); then deferred candidates of promoted branches are re-decided as `committed` and
//! issued, followed by the plan's committed calls. A provider answers after the tool's latency.

use super::corpus::{Call, Frontier, Tool};
use super::rng::Rng;
use super::taxonomy;
use secureclaw_core::contract::{
    ArgLabel, BranchState, BranchTable, Budget, Contract, DestinationLabel, EffectLabel,
    LabeledEvent, Mode, ShadowPromotion, Verdict, qualified,
};
use secureclaw_core::detect::detect;
use secureclaw_core::exposure::{Dispatch, TraceEvent};
use secureclaw_core::labeler::{
    DateCoarsening, DestinationRule, Labeler, LabelerConfig, LabelerMode, RewriteConfig, TermRule,
    builtin_lexicon,
};
use secureclaw_core::monitor;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Seed of the label-noise stream (ASCII "noise"); the flips depend only on (row, call), so
/// every policy sees the same flips.
const NOISE_SEED: u64 = 0x006e_6f69_7365;

/// When the planner commits (ms after task start).
pub const COMMIT_MS: u64 = 1_000;

/// A policy of the evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Every candidate is dispatched as proposed.
    Naive,
    /// Only the committed plan is issued; no speculation.
    NoSpec,
    /// SIA: speculation only for read-only tools — the monitor's effect gate alone (pre-commit
    /// calls that change external state are deferred; every corpus tool is a read).
    Sia,
    /// Per-tool allow-list at dispatch: a contract whose `allowed_tools` lists the five corpus
    /// tools.
    Acl,
    /// Dispatch as Naive; scrub abandoned branches' arguments from the runtime log after commit.
    LateScrub,
    /// Free-text PII scrubbing (e-mail, phone, IBAN, card, …) before issue.
    PreScrub,
    /// Contract: forbidden argument fields rewritten, sensitive destinations blocked; applies
    /// to committed calls too.
    Rewrite,
    /// Contract: pre-commit calls go to the trusted local substitute, reused on promotion.
    Shadow,
    /// Contract: pre-commit calls with branch confidence below τ (tenths) are deferred.
    Gate(u8),
    /// Block calls whose flattened arguments contain a curated taint term (domain lexicons and
    /// the product's topic lexicon) as a substring.
    Taint,
    /// Block calls with a field copied from the prompt's sensitive span (field provenance).
    TaintF,
    /// Contract: pre-commit calls with any field above personal are blocked (the field cannot
    /// be rewritten); the monitor's destination ceiling (`tenant-internal`) applies in every
    /// mode, so committed calls to sensitive collections are blocked too.
    Drop,
    /// Pre-commit calls to a sensitive destination are dropped (static plan only).
    DropDest,
    /// FIDES-style typed IFC: field source types must be in the sink's accept-set.
    Fides,
}

impl Policy {
    /// The paper's twelve (Gate at τ = 0.7) plus the FIDES-style baseline.
    pub const THIRTEEN: [Policy; 13] = [
        Policy::Naive,
        Policy::NoSpec,
        Policy::Sia,
        Policy::Acl,
        Policy::LateScrub,
        Policy::PreScrub,
        Policy::Rewrite,
        Policy::Shadow,
        Policy::Gate(7),
        Policy::Taint,
        Policy::TaintF,
        Policy::Drop,
        Policy::Fides,
    ];
    /// The Gate τ sweep (Table 17).
    pub const GATE_SWEEP: [Policy; 4] = [
        Policy::Gate(3),
        Policy::Gate(5),
        Policy::Gate(7),
        Policy::Gate(9),
    ];

    /// Display name (`Gate (τ=0.7)`).
    #[must_use]
    pub fn name(self) -> String {
        match self {
            Policy::Naive => "Naive".into(),
            Policy::NoSpec => "No-Spec".into(),
            Policy::Sia => "SIA".into(),
            Policy::Acl => "ACL".into(),
            Policy::LateScrub => "Late-Scrub".into(),
            Policy::PreScrub => "Pre-Scrub".into(),
            Policy::Rewrite => "Rewrite".into(),
            Policy::Shadow => "Shadow".into(),
            Policy::Gate(t) => format!("Gate (τ=0.{t})"),
            Policy::Taint => "Taint".into(),
            Policy::TaintF => "Taint-F".into(),
            Policy::Drop => "Drop".into(),
            Policy::DropDest => "Drop (dest)".into(),
            Policy::Fides => "FIDES-style".into(),
        }
    }

    /// Stable id for JSON (`gate-0.7`).
    #[must_use]
    pub fn id(self) -> String {
        match self {
            Policy::Gate(t) => format!("gate-0.{t}"),
            p => serde_json::to_value(p)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        }
    }

    /// Whether the policy is decided by the product's contract monitor.
    #[must_use]
    pub fn uses_monitor(self) -> bool {
        matches!(
            self,
            Policy::Sia
                | Policy::Acl
                | Policy::Rewrite
                | Policy::Shadow
                | Policy::Gate(_)
                | Policy::Drop
        )
    }

    fn contract(self) -> Contract {
        let mut k = Contract {
            scope: "*".into(),
            allowed_tools: vec!["*".into()],
            allowed_destinations: vec!["*".into()],
            max_destination_label: DestinationLabel::Forbidden,
            max_arg_label: ArgLabel::IntentRevealing,
            authorized_observers: BTreeSet::new(),
            branch_threshold: 0.0,
            budget: None,
            shadow_required: false,
            shadow_promotion: ShadowPromotion::Reuse,
            applies_to_committed: false,
        };
        match self {
            Policy::Rewrite => {
                k.max_arg_label = ArgLabel::Personal;
                k.max_destination_label = DestinationLabel::TenantInternal;
                k.applies_to_committed = true;
            }
            Policy::Drop => {
                k.max_arg_label = ArgLabel::Personal;
                k.max_destination_label = DestinationLabel::TenantInternal;
            }
            Policy::Shadow => k.shadow_required = true,
            Policy::Acl => {
                k.allowed_tools = Tool::ALL
                    .iter()
                    .map(|t| qualified(t.upstream(), t.name()))
                    .collect();
            }
            Policy::Gate(t) => k.branch_threshold = f64::from(t) / 10.0,
            _ => {}
        }
        k
    }
}

/// Which labeler the contract policies use (paper B.19).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabelerKind {
    /// The product's content-aware labeler with its built-in lexicon (not tuned to the corpus).
    Content,
    /// The content-aware labeler with the generator's vocabulary added as operator terms
    /// (every label name, paraphrase and slug and every domain lexicon term → sensitive): the
    /// research notes' "gold" labeler, reached through the product's own term mechanism.
    Gold,
    /// Every argument intent-revealing (the paper's prototype).
    Constant,
}

impl LabelerKind {
    /// Stable name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LabelerKind::Content => "content",
            LabelerKind::Gold => "gold",
            LabelerKind::Constant => "constant",
        }
    }
}

/// Everything a replay needs besides the row: labelers, taint lists, label noise.
#[derive(Debug, Clone)]
pub struct Env {
    /// Which labeler mode.
    pub kind: LabelerKind,
    labeler: Labeler,
    /// The same labeler with every transformation off (Drop: a forbidden field cannot be
    /// rewritten, so the monitor blocks it).
    no_rewrite: Labeler,
    /// Pre-Scrub's scrubber (entity redaction only).
    scrubber: Labeler,
    /// Taint's curated list (lower case): every domain lexicon term and the product's built-in
    /// topic lexicon, matched as substrings of the flattened arguments.
    taint_terms: Vec<String>,
    /// FIDES-style source types: (domain, phrases of its lexicon and label names).
    fides_types: Vec<(String, Vec<Vec<String>>)>,
    /// False-negative label noise: probability that a sensitive/intent-revealing field, or a
    /// sensitive destination, is labeled public (paper Table 10).
    pub noise: f64,
}

/// The operator's destination labels: topic-bearing collections (every label and domain slug
/// of the taxonomy) are sensitive, everything else public.
fn destination_rules() -> Vec<DestinationRule> {
    let mut rules: Vec<DestinationRule> = taxonomy::DOMAINS
        .iter()
        .flat_map(|d| {
            std::iter::once(d.slug)
                .chain(d.labels.iter().map(|l| l.slug))
                .map(|slug| DestinationRule {
                    pattern: format!("*/collections/{slug}"),
                    label: DestinationLabel::Sensitive,
                })
        })
        .collect();
    rules.push(DestinationRule {
        pattern: "*".into(),
        label: DestinationLabel::Public,
    });
    rules
}

/// The generator's vocabulary as operator terms, all `sensitive` ([`LabelerKind::Gold`]).
fn gold_terms() -> Vec<TermRule> {
    taxonomy::DOMAINS
        .iter()
        .flat_map(|d| {
            d.lexicon
                .iter()
                .copied()
                .chain(d.labels.iter().flat_map(|l| [l.name, l.paraphrase, l.slug]))
        })
        .map(|t| TermRule {
            term: t.to_owned(),
            label: ArgLabel::Sensitive,
        })
        .collect()
}

fn phrase_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn contains_phrase(words: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase)
}

impl Env {
    /// An environment for `kind` with no label noise.
    #[must_use]
    pub fn new(kind: LabelerKind) -> Self {
        let config = LabelerConfig {
            mode: match kind {
                LabelerKind::Content | LabelerKind::Gold => LabelerMode::ContentAware,
                LabelerKind::Constant => LabelerMode::Constant,
            },
            terms: match kind {
                LabelerKind::Gold => gold_terms(),
                _ => Vec::new(),
            },
            destinations: destination_rules(),
            ..LabelerConfig::default()
        };
        let off = RewriteConfig {
            redact_entities: false,
            coarsen_dates: DateCoarsening::Off,
            replace_intent_phrases: false,
            generalize_fields: false,
        };
        let no_rewrite = Labeler::new(LabelerConfig {
            rewrite: off.clone(),
            ..config.clone()
        });
        let scrubber = Labeler::new(LabelerConfig {
            rewrite: RewriteConfig {
                redact_entities: true,
                ..off
            },
            ..config.clone()
        });
        // Hand-curated taint sources: the domain lexicons and the product's built-in
        // sensitive-topic lexicon. Taint matches substrings, so the lexicon's terms under five
        // characters (abbreviations such as "gc" or "ms") are left out: as substrings they
        // taint nearly every call.
        let taint_terms = taxonomy::DOMAINS
            .iter()
            .flat_map(|d| d.lexicon.iter().copied())
            .chain(builtin_lexicon().filter(|t| t.len() >= 5))
            .map(str::to_lowercase)
            .collect();
        let fides_types = taxonomy::DOMAINS
            .iter()
            .map(|d| {
                let phrases = d
                    .lexicon
                    .iter()
                    .copied()
                    .chain(d.labels.iter().map(|l| l.name))
                    .map(phrase_tokens)
                    .collect();
                (d.name.to_owned(), phrases)
            })
            .collect();
        Env {
            kind,
            labeler: Labeler::new(config),
            no_rewrite,
            scrubber,
            taint_terms,
            fides_types,
            noise: 0.0,
        }
    }

    /// The same environment with false-negative label noise `rate`.
    #[must_use]
    pub fn with_noise(mut self, rate: f64) -> Self {
        self.noise = rate;
        self
    }

    /// The product labeler used for contract policies.
    #[must_use]
    pub fn labeler(&self) -> &Labeler {
        &self.labeler
    }
}

/// One replayed row.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// The issued trace S as the provider, network and co-tenants saw it.
    pub events: Vec<TraceEvent>,
    /// The runtime log as it reads after the task, when it differs from `events`
    /// (Late-Scrub rewrites it after commitment).
    pub log_events: Option<Vec<TraceEvent>>,
    /// Branch states after commitment.
    pub branches: BranchTable,
    /// Calls that reached a provider.
    pub provider_calls: usize,
    /// Calls proposed (candidates and plan calls).
    pub proposed: usize,
    /// Calls the policy changed: blocked, rewritten, shadowed, or deferred and never sent.
    pub intervened: usize,
    /// Calls of the committed trace (promoted candidates and plan calls).
    pub committed: usize,
    /// Of those, how many the task got a result for (sent, possibly rewritten, or answered by
    /// the substitute with reuse on promotion): the utility side of a policy.
    pub delivered: usize,
    /// Fields whose label the noise flipped, and fields it could have flipped.
    pub flips: (usize, usize),
    /// Destinations whose label the noise flipped, and destinations it could have flipped.
    pub dest_flips: (usize, usize),
}

/// What a policy does with one call.
enum Step {
    Send {
        arguments: Map<String, Value>,
        tag: &'static str,
    },
    Shadow,
    Defer,
    Block,
}

fn host_of(destination: &str) -> String {
    let rest = destination
        .split_once("://")
        .map_or(destination, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

struct Ctx<'a> {
    policy: Policy,
    env: &'a Env,
    kappa: Contract,
    budget: Budget,
    row_key: String,
    out: Replay,
}

impl Ctx<'_> {
    fn decide(&mut self, call: &Call, mode: Mode, confidence: f64, idx: usize) -> Step {
        let send = |arguments: Map<String, Value>| Step::Send {
            arguments,
            tag: "allow",
        };
        let env = self.env;
        let pre = mode.is_pre_commit();
        match self.policy {
            Policy::Naive | Policy::LateScrub => send(call.arguments.clone()),
            Policy::NoSpec => {
                if pre {
                    Step::Defer
                } else {
                    send(call.arguments.clone())
                }
            }
            Policy::PreScrub => {
                let mut args = call.arguments.clone();
                for v in args.values_mut() {
                    if let Value::String(s) = v {
                        let t = env.scrubber.transform(s);
                        *s = t;
                    }
                }
                Step::Send {
                    tag: if args == call.arguments {
                        "allow"
                    } else {
                        "rewrite"
                    },
                    arguments: args,
                }
            }
            Policy::Taint => {
                let flat = call
                    .arguments
                    .values()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase();
                if env.taint_terms.iter().any(|t| flat.contains(t.as_str())) {
                    Step::Block
                } else {
                    send(call.arguments.clone())
                }
            }
            Policy::TaintF => {
                if call.tainted.is_empty() {
                    send(call.arguments.clone())
                } else {
                    Step::Block
                }
            }
            Policy::DropDest => {
                let label = env.labeler.destination_label(&call.destination);
                if pre && label.is_none_or(|l| l >= DestinationLabel::Sensitive) {
                    Step::Block
                } else {
                    send(call.arguments.clone())
                }
            }
            Policy::Fides => {
                if fides_accepts(env, call) {
                    send(call.arguments.clone())
                } else {
                    Step::Block
                }
            }
            Policy::Sia
            | Policy::Acl
            | Policy::Rewrite
            | Policy::Shadow
            | Policy::Gate(_)
            | Policy::Drop => {
                let labeler = if self.policy == Policy::Drop {
                    &env.no_rewrite
                } else {
                    &env.labeler
                };
                let mut event = labeler.label(
                    call.tool.upstream(),
                    call.tool.name(),
                    &call.destination,
                    Some(EffectLabel::ExternalRead),
                    &call.arguments,
                    mode,
                    Some(confidence),
                );
                if env.noise > 0.0 {
                    for f in &event.fields {
                        self.out.flips.1 += usize::from(f.label.is_some_and(ArgLabel::is_budgeted));
                    }
                    self.out.dest_flips.1 +=
                        usize::from(event.destination_label == Some(DestinationLabel::Sensitive));
                    let before = event.clone();
                    event = noisy(env.noise, &self.row_key, event, idx);
                    for (a, b) in before.fields.iter().zip(&event.fields) {
                        self.out.flips.0 += usize::from(a.label != b.label);
                    }
                    self.out.dest_flips.0 +=
                        usize::from(before.destination_label != event.destination_label);
                }
                let (rate, key) = (env.noise, self.row_key.clone());
                let relabel = move |e: LabeledEvent| noisy(rate, &key, e, idx);
                let issued = monitor::issue_with(
                    labeler,
                    Some(&self.kappa),
                    &event,
                    &call.arguments,
                    &mut self.budget,
                    &relabel,
                );
                match issued.verdict {
                    Verdict::Allow => send(issued.arguments),
                    Verdict::Rewrite { .. } => Step::Send {
                        arguments: issued.arguments,
                        tag: "rewrite",
                    },
                    Verdict::Shadow => Step::Shadow,
                    Verdict::Defer(_) => Step::Defer,
                    Verdict::Block(_) => Step::Block,
                }
            }
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one field of the trace event each"
    )]
    fn record(
        &mut self,
        call: &Call,
        branch: Option<&str>,
        mode: Mode,
        tag: &str,
        dispatch: Dispatch,
        arguments: Option<&Map<String, Value>>,
        issued_ms: u64,
    ) {
        let tool = qualified(call.tool.upstream(), call.tool.name());
        let (fields, bytes, duration) = match arguments {
            Some(a) => (
                self.env
                    .labeler
                    .label_fields(&tool, a)
                    .into_iter()
                    .map(|f| (f.path, f.value))
                    .collect(),
                serde_json::to_vec(a).map_or(0, |v| v.len() as u64),
                call.tool.latency_ms(),
            ),
            None => (Vec::new(), 0, 0),
        };
        if dispatch == Dispatch::Provider {
            self.out.provider_calls += 1;
        }
        let seq = self.out.events.len() as u64;
        self.out.events.push(TraceEvent {
            seq,
            branch: branch.map(str::to_owned),
            mode,
            tool,
            destination: call.destination.clone(),
            host: host_of(&call.destination),
            decision: tag.to_owned(),
            dispatch,
            fields,
            payload_bytes: bytes,
            issued_ms,
            duration_ms: duration,
        });
    }
}

/// False-negative label noise (paper Table 10): a sensitive or intent-revealing field is
/// labeled public with probability `rate`, decided by a hash of (row, call, path, value) so the
/// same field gets the same label when it is relabeled after a rewrite (a deterministic
/// labeler's miss persists); a sensitive destination likewise, keyed by (row, call).
fn noisy(rate: f64, row_key: &str, mut event: LabeledEvent, idx: usize) -> LabeledEvent {
    if rate <= 0.0 {
        return event;
    }
    let draw = |key: &str| Rng::stream(NOISE_SEED, key).unit() < rate;
    for f in &mut event.fields {
        if f.label.is_some_and(ArgLabel::is_budgeted)
            && draw(&format!("{row_key}/{idx}/{}/{}", f.path, f.value))
        {
            f.label = Some(ArgLabel::Public);
        }
    }
    if event.destination_label == Some(DestinationLabel::Sensitive)
        && draw(&format!("{row_key}/{idx}/destination"))
    {
        event.destination_label = Some(DestinationLabel::Public);
    }
    event
}

/// Whether the FIDES-style baseline lets `call` through: every field's source types (sensitive
/// domains whose lexicon or label names it mentions, `pii` when a detector fires) must be in
/// the sink's accept-set. A topic collection accepts its own domain; a generic collection
/// and web search accept user queries of any topic but no PII; calendar, CRM and mail
/// (tenant-internal sinks) accept everything.
fn fides_accepts(env: &Env, call: &Call) -> bool {
    let collection_domain = || {
        let slug = call.destination.rsplit('/').next().unwrap_or("");
        taxonomy::DOMAINS
            .iter()
            .find(|d| d.slug == slug || d.labels.iter().any(|l| l.slug == slug))
            .map(|d| d.name)
    };
    for v in call.arguments.values() {
        let Some(text) = v.as_str() else { continue };
        let words = phrase_tokens(text);
        let pii = !detect(text).is_empty();
        let types: Vec<&str> = env
            .fides_types
            .iter()
            .filter(|(_, phrases)| phrases.iter().any(|p| contains_phrase(&words, p)))
            .map(|(d, _)| d.as_str())
            .collect();
        let ok = match call.tool {
            Tool::CalendarLookup | Tool::CrmLookup | Tool::EmailSearch => true,
            Tool::WebSearch => !pii,
            Tool::DocRetrieval => match collection_domain() {
                Some(d) => !pii && types.iter().all(|t| *t == d),
                None => !pii,
            },
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Replay `row` under `policy`: the issued trace S.
#[must_use]
pub fn replay(policy: Policy, row: &Frontier, env: &Env) -> Replay {
    run(policy, row, env, false)
}

/// The committed-only counterfactual under `policy`: the same schedule with only the committed
/// trace C issued, at commit time (research notes §5.4: re-run, not filtered).
#[must_use]
pub fn counterfactual(policy: Policy, row: &Frontier, env: &Env) -> Replay {
    run(policy, row, env, true)
}

fn run(policy: Policy, row: &Frontier, env: &Env, committed_only: bool) -> Replay {
    let mut cx = Ctx {
        policy,
        env,
        kappa: policy.contract(),
        budget: Budget::default(),
        row_key: format!("{}/{}/{}", row.corpus.as_str(), row.task, row.seed),
        out: Replay::default(),
    };
    // Phase 1: speculation. `delivered[i]`: candidate i's result exists (sent, or answered
    // by the substitute with reuse on promotion).
    let mut held: Vec<usize> = Vec::new();
    let mut delivered = vec![false; row.candidates.len()];
    let reuse = cx.kappa.shadow_promotion == ShadowPromotion::Reuse;
    // Which proposed calls (candidates, then plan calls) the policy changed at least once.
    let mut changed = vec![false; row.candidates.len() + row.plan.len()];
    let mark = |changed: &mut Vec<bool>, i: usize| {
        if let Some(c) = changed.get_mut(i) {
            *c = true;
        }
    };
    if !committed_only {
        for (i, c) in row.candidates.iter().enumerate() {
            cx.out.proposed += 1;
            let t = 10 * i as u64;
            let step = cx.decide(&c.call, Mode::Speculative, c.confidence, i);
            let (tag, dispatch, arguments) = match step {
                Step::Send { arguments, tag } => {
                    if tag != "allow" {
                        mark(&mut changed, i);
                    }
                    if let Some(d) = delivered.get_mut(i) {
                        *d = true;
                    }
                    (tag, Dispatch::Provider, Some(arguments))
                }
                Step::Shadow => {
                    mark(&mut changed, i);
                    if let Some(d) = delivered.get_mut(i) {
                        *d = reuse;
                    }
                    ("shadow", Dispatch::Substitute, None)
                }
                Step::Defer => {
                    held.push(i);
                    ("defer", Dispatch::None, None)
                }
                Step::Block => {
                    mark(&mut changed, i);
                    ("block", Dispatch::None, None)
                }
            };
            cx.record(
                &c.call,
                Some(&c.branch),
                Mode::Speculative,
                tag,
                dispatch,
                arguments.as_ref(),
                t,
            );
        }
    }
    // Commitment.
    for c in &row.candidates {
        let state = if c.promoted {
            BranchState::Promoted
        } else {
            BranchState::Abandoned
        };
        let _ = cx.out.branches.settle(&c.branch, state);
    }
    // Phase 2: the committed trace. The runtime re-proposes every promoted candidate whose
    // result it does not have (deferred, blocked, or shadowed with re-issue; in the
    // counterfactual, all of them) as a committed call — the gateway re-decides a call on a
    // promoted branch as committed — then issues the plan.
    let mut due: Vec<(usize, Option<String>, &Call)> = Vec::new();
    for (i, c) in row.candidates.iter().enumerate() {
        let got = delivered.get(i).copied().unwrap_or(false);
        if c.promoted {
            cx.out.committed += 1;
            if committed_only || !got {
                due.push((i, Some(c.branch.clone()), &c.call));
            } else {
                cx.out.delivered += 1;
            }
        } else if held.contains(&i) {
            // Deferred and abandoned: never sent.
            mark(&mut changed, i);
        }
    }
    for (j, call) in row.plan.iter().enumerate() {
        cx.out.proposed += 1;
        cx.out.committed += 1;
        due.push((row.candidates.len() + j, None, call));
    }
    for (k, (idx, branch, call)) in due.into_iter().enumerate() {
        let t = COMMIT_MS + 10 * k as u64;
        match cx.decide(call, Mode::Committed, 1.0, idx) {
            Step::Send { arguments, tag } => {
                if tag != "allow" {
                    mark(&mut changed, idx);
                }
                cx.out.delivered += 1;
                cx.record(
                    call,
                    branch.as_deref(),
                    Mode::Committed,
                    tag,
                    Dispatch::Provider,
                    Some(&arguments),
                    t,
                );
            }
            Step::Shadow | Step::Defer | Step::Block => {
                mark(&mut changed, idx);
                cx.record(
                    call,
                    branch.as_deref(),
                    Mode::Committed,
                    "block",
                    Dispatch::None,
                    None,
                    t,
                );
            }
        }
    }
    cx.out.intervened = changed.iter().filter(|c| **c).count();
    if policy == Policy::LateScrub {
        // After commitment, abandoned branches' arguments are scrubbed from the runtime log;
        // the providers already have them (Proposition 1).
        let branches = cx.out.branches.clone();
        let log = cx
            .out
            .events
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if !e.committed(&branches) {
                    e.fields.clear();
                }
                e
            })
            .collect();
        cx.out.log_events = Some(log);
    }
    cx.out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::ghost::corpus::{CorpusKind, generate};
    use secureclaw_core::contract::Observer;
    use secureclaw_core::exposure::project;

    fn provider_view(r: &Replay) -> Vec<secureclaw_core::exposure::Observation> {
        project(Observer::Provider, &r.events)
    }

    #[test]
    fn late_scrub_acl_and_sia_leave_the_provider_view_of_naive() {
        let env = Env::new(LabelerKind::Content);
        for row in &generate(CorpusKind::Pooled30, &[1]).rows {
            let naive = provider_view(&replay(Policy::Naive, row, &env));
            for p in [Policy::LateScrub, Policy::Acl, Policy::Sia] {
                assert_eq!(provider_view(&replay(p, row, &env)), naive, "{p:?}");
            }
        }
    }

    #[test]
    fn shadow_sends_nothing_and_no_spec_sends_only_the_committed_trace() {
        let env = Env::new(LabelerKind::Content);
        for row in &generate(CorpusKind::Pooled30, &[1]).rows {
            assert_eq!(replay(Policy::Shadow, row, &env).provider_calls, 0);
            let promoted = row.candidates.iter().filter(|c| c.promoted).count();
            assert_eq!(replay(Policy::NoSpec, row, &env).provider_calls, promoted);
            assert_eq!(
                replay(Policy::Naive, row, &env).provider_calls,
                row.candidates.len()
            );
        }
    }

    #[test]
    fn rewrite_dispatches_no_field_its_labeler_forbids() {
        let env = Env::new(LabelerKind::Content);
        let mut rewritten = 0;
        for row in &generate(CorpusKind::Pooled30, &[1, 2]).rows {
            let r = replay(Policy::Rewrite, row, &env);
            for e in r.events.iter().filter(|e| e.dispatch == Dispatch::Provider) {
                rewritten += usize::from(e.decision == "rewrite");
                for (_, v) in &e.fields {
                    assert!(env.labeler().label_text(v) <= ArgLabel::Personal, "{v}");
                }
            }
        }
        assert!(rewritten > 0, "positive control: some calls were rewritten");
    }

    #[test]
    fn gate_sends_fewer_calls_as_tau_rises() {
        let env = Env::new(LabelerKind::Content);
        let rows = generate(CorpusKind::Pooled30, &[1]).rows;
        let calls = |p| -> usize { rows.iter().map(|r| replay(p, r, &env).provider_calls).sum() };
        let sweep: Vec<usize> = Policy::GATE_SWEEP.iter().map(|&p| calls(p)).collect();
        assert!(sweep.windows(2).all(|w| w[0] >= w[1]), "{sweep:?}");
        assert!(sweep[0] > sweep[3]);
    }

    #[test]
    fn constant_labeler_drop_sends_no_pre_commit_call() {
        let env = Env::new(LabelerKind::Constant);
        for row in &generate(CorpusKind::Static30, &[1]).rows {
            let r = replay(Policy::Drop, row, &env);
            let sent: Vec<Mode> = r
                .events
                .iter()
                .filter(|e| e.dispatch == Dispatch::Provider)
                .map(|e| e.mode)
                .collect();
            // The three ghosts are dropped; the plan's committed call goes out.
            assert_eq!(sent, vec![Mode::Committed]);
        }
    }
}
