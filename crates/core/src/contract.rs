//! Issue-time privacy contracts for speculative and committed tool calls (Ghost Tool Calls,
//! arXiv 2606.02483 §3–§4 and Appendix A).
//!
//! A call that leaves the trusted boundary is observed when it is *issued*, not when its
//! result is used: a speculative call that the agent later abandons (a *ghost*) has already
//! told its provider what the agent was thinking about, and no cleanup after commitment can
//! unsend it (paper Proposition 1). So every externally observable call passes
//! [`decide`] before anything about it is sent, logged or cached.
//!
//! ## Labels (paper Table 2)
//! Each event carries a label vector: execution [`Mode`], [`EffectLabel`], per-field
//! [`ArgLabel`] (`public < personal < sensitive < intent-revealing`), [`DestinationLabel`]
//! (`public < tenant-internal < sensitive < regulated < forbidden`), branch confidence
//! `c ∈ [0, 1]`, and the task's disclosure budget. Labels are computed by the labeler
//! ([`crate::labeler`]), a pure function of (tool, arguments, destination) that runs before the
//! monitor.
//!
//! ## The pipeline (DESIGN.md §3, resolving the paper's ambiguities §2.18)
//! Fail-closed, first match wins:
//! 1. BLOCK `tool_not_allowed` — the tool is not in κ's allow-list, or its effect label is
//!    missing on a committed event;
//! 2. BLOCK `destination_not_allowed` / `destination_label` — endpoint not in the allow-list,
//!    destination label missing or above κ's ceiling;
//! 3. DEFER `effect_precommit` — a pre-commit event whose effect class changes external state
//!    (external-write, semi-stateful, irreversible) waits for commitment (our addition: the
//!    write path needs a committed request);
//! 4. DEFER `low_confidence` — pre-commit and `c < τ` (missing `c` or a missing argument label
//!    on a pre-commit event also defers);
//! 5. DEFER `budget_exhausted` — pre-commit, the event carries a sensitive or intent-revealing
//!    field and the task's budget is spent (checked before REWRITE; paper §2.18 item 5);
//! 6. REWRITE — some field's label is above `max_arg_label` and the provider is not
//!    authorized for it; the rewritten event must label every such field at most
//!    `max_arg_label`, else BLOCK `rewrite_insufficient` (assumption A3);
//! 7. SHADOW — κ requires shadowing, the event is pre-commit and the destination is external;
//! 8. ALLOW.
//!
//! The budget is charged after ALLOW or REWRITE of a pre-commit event that carried a sensitive
//! or intent-revealing field. Committed events are not budget-deferred (they are the user's
//! plan), but contracts still apply to them when κ says so ([`Contract::applies_to_committed`]).

use crate::handle::glob_match;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Execution mode of an event (paper Table 2). Every mode but `committed` is pre-commit
/// (DESIGN.md §3; a retry *of* a committed call is sent as committed by the runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Part of the committed plan.
    Committed,
    /// Issued before the branch that needs it was chosen.
    Speculative,
    /// Prefetching a result that may be needed.
    Prefetch,
    /// A duplicate issued before a previous attempt failed.
    Retry,
    /// A validation probe.
    Validation,
    /// A shadow execution.
    Shadow,
}

impl Mode {
    /// Whether the mode is pre-commit (anything but [`Mode::Committed`]).
    #[must_use]
    pub fn is_pre_commit(self) -> bool {
        self != Mode::Committed
    }

    /// Wire name (`committed`, `speculative`, …), as in `_meta["dev.secureclaw/mode"]`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Committed => "committed",
            Mode::Speculative => "speculative",
            Mode::Prefetch => "prefetch",
            Mode::Retry => "retry",
            Mode::Validation => "validation",
            Mode::Shadow => "shadow",
        }
    }

    /// Parse a wire name; `None` for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "committed" => Mode::Committed,
            "speculative" => Mode::Speculative,
            "prefetch" => Mode::Prefetch,
            "retry" => Mode::Retry,
            "validation" => Mode::Validation,
            "shadow" => Mode::Shadow,
            _ => return None,
        })
    }
}

/// Effect class of a tool (paper Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectLabel {
    /// Computation inside the trusted boundary.
    PureLocal,
    /// A read of local state (no external observer).
    LocalRead,
    /// A read from an external provider (observed by it).
    ExternalRead,
    /// A write to an external provider.
    ExternalWrite,
    /// A read that leaves provider-side state (logs, rate limits, caches).
    SemiStateful,
    /// An effect that cannot be undone.
    Irreversible,
}

impl EffectLabel {
    /// Whether an external observer sees the call (paper §2.18 item 3: locality derived from
    /// the effect class).
    #[must_use]
    pub fn is_external(self) -> bool {
        !matches!(self, EffectLabel::PureLocal | EffectLabel::LocalRead)
    }

    /// Whether the call changes external state, so it may not run before commitment.
    #[must_use]
    pub fn changes_state(self) -> bool {
        matches!(
            self,
            EffectLabel::ExternalWrite | EffectLabel::SemiStateful | EffectLabel::Irreversible
        )
    }
}

/// Observer class (paper Table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observer {
    /// The tool provider: tool, destination, arguments.
    Provider,
    /// The network: host, payload size, timing.
    Network,
    /// The runtime's own log: tool, short argument summary, decision tag, duration bucket.
    RuntimeLog,
    /// Other tenants of shared caches: cache keys and timing.
    CoTenant,
    /// Whoever reads the audit log.
    Auditor,
}

impl Observer {
    /// Every observer class, in declaration order.
    pub const ALL: [Observer; 5] = [
        Observer::Provider,
        Observer::Network,
        Observer::RuntimeLog,
        Observer::CoTenant,
        Observer::Auditor,
    ];

    /// Stable name (`provider`, `network`, `runtime-log`, `co-tenant`, `auditor`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Observer::Provider => "provider",
            Observer::Network => "network",
            Observer::RuntimeLog => "runtime-log",
            Observer::CoTenant => "co-tenant",
            Observer::Auditor => "auditor",
        }
    }
}

/// Argument privacy label, totally ordered from least to most restrictive (paper Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArgLabel {
    /// Nothing about the user.
    Public,
    /// Personal data (identifiers: e-mail, phone, IBAN, …).
    Personal,
    /// A sensitive domain (health, legal, employment, financial, immigration, security,
    /// relationships).
    Sensitive,
    /// Reveals what the user intends or is worried about.
    IntentRevealing,
}

impl ArgLabel {
    /// Stable name (`public`, `personal`, `sensitive`, `intent-revealing`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ArgLabel::Public => "public",
            ArgLabel::Personal => "personal",
            ArgLabel::Sensitive => "sensitive",
            ArgLabel::IntentRevealing => "intent-revealing",
        }
    }

    /// Whether the label counts against the disclosure budget (sensitive or above).
    #[must_use]
    pub fn is_budgeted(self) -> bool {
        self >= ArgLabel::Sensitive
    }
}

/// Destination privacy label, totally ordered (paper Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DestinationLabel {
    /// A public service.
    Public,
    /// Inside the tenant.
    TenantInternal,
    /// A destination whose name or layout is itself sensitive (topic-bearing collections).
    Sensitive,
    /// A regulated destination.
    Regulated,
    /// Never to be contacted.
    Forbidden,
}

/// One scalar field of an event's arguments with its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabeledField {
    /// JSON Pointer (RFC 6901) of the field in the arguments (`/query`, `/filters/0`).
    pub path: String,
    /// The field's value as text (strings as-is, numbers in decimal).
    pub value: String,
    /// Its label; `None` when the labeler could not decide (fails closed).
    pub label: Option<ArgLabel>,
}

/// An event with its label vector, as the monitor sees it (paper §3, Table 2).
#[derive(Debug, Clone, PartialEq)]
pub struct LabeledEvent {
    /// Upstream id.
    pub upstream: String,
    /// Tool name at the upstream.
    pub tool: String,
    /// Destination endpoint (upstream URL or command line).
    pub destination: String,
    /// Execution mode.
    pub mode: Mode,
    /// Effect class; `None` if unlabeled.
    pub effect: Option<EffectLabel>,
    /// Destination label; `None` if unlabeled.
    pub destination_label: Option<DestinationLabel>,
    /// Every scalar field of the arguments.
    pub fields: Vec<LabeledField>,
    /// Branch confidence in `[0, 1]`; `None` if the runtime did not send one.
    pub confidence: Option<f64>,
}

impl LabeledEvent {
    /// The highest argument label, `Some(Public)` for no fields, `None` if any field is
    /// unlabeled.
    #[must_use]
    pub fn max_label(&self) -> Option<ArgLabel> {
        self.fields
            .iter()
            .try_fold(ArgLabel::Public, |acc, f| f.label.map(|l| acc.max(l)))
    }
}

/// What κ does with shadowed calls when their branch is promoted (paper §2.18 item 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShadowPromotion {
    /// Reuse the substitute's result (the paper's prototype): nothing reaches the provider.
    #[default]
    Reuse,
    /// Re-decide the call as committed and issue it to the real provider.
    Reissue,
}

/// A privacy contract κ for one (upstream, tool, destination) scope (paper §4, Appendix A).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Which calls this contract governs: an `upstream__tool` pattern (`*` wildcard). In a
    /// list of contracts the first whose scope matches applies.
    #[serde(default = "any")]
    pub scope: String,
    /// Tool patterns (`upstream__tool`, `*` wildcard) the contract lets through.
    pub allowed_tools: Vec<String>,
    /// Endpoint patterns (`*` wildcard) the contract lets through.
    pub allowed_destinations: Vec<String>,
    /// Highest destination label allowed.
    pub max_destination_label: DestinationLabel,
    /// Highest argument label an unauthorized observer may see; a field is forbidden iff its
    /// label is strictly above (paper §2.18 item 1).
    pub max_arg_label: ArgLabel,
    /// Observers authorized to see fields above `max_arg_label`.
    #[serde(default)]
    pub authorized_observers: BTreeSet<Observer>,
    /// Gate threshold τ: pre-commit events with confidence below it are deferred.
    pub branch_threshold: f64,
    /// Per-task disclosure budget: pre-commit dispatches carrying sensitive or
    /// intent-revealing fields; `None` = unlimited.
    #[serde(default)]
    pub budget: Option<u32>,
    /// Route pre-commit calls to external destinations to a local substitute.
    #[serde(default)]
    pub shadow_required: bool,
    /// What a promoted shadow does.
    #[serde(default)]
    pub shadow_promotion: ShadowPromotion,
    /// Whether the argument rule (REWRITE) also applies to committed calls, as in the paper's
    /// worked contract. Off by default: a committed call is the user's plan and effectful
    /// committed calls are governed by the PREVIEW → COMMIT write path.
    #[serde(default)]
    pub applies_to_committed: bool,
}

impl Contract {
    /// The paper's worked contract for `web_search` (Appendix A): allowed tools
    /// `{web_search}`, destinations `{api.brave.com, api.duckduckgo.com}`, `max_arg_label =
    /// personal`, τ = 0.7, b = 5, applying to committed calls too.
    #[must_use]
    pub fn paper_web_search() -> Self {
        Contract {
            scope: "*".into(),
            allowed_tools: vec!["*__web_search".into(), "web_search".into()],
            allowed_destinations: vec!["*api.brave.com*".into(), "*api.duckduckgo.com*".into()],
            max_destination_label: DestinationLabel::Regulated,
            max_arg_label: ArgLabel::Personal,
            authorized_observers: BTreeSet::from([Observer::RuntimeLog]),
            branch_threshold: 0.7,
            budget: Some(5),
            shadow_required: false,
            shadow_promotion: ShadowPromotion::Reuse,
            applies_to_committed: true,
        }
    }

    /// Whether the provider may see fields above `max_arg_label`.
    #[must_use]
    pub fn provider_authorized(&self) -> bool {
        self.authorized_observers.contains(&Observer::Provider)
    }

    /// Whether `label` is forbidden for an unauthorized observer.
    #[must_use]
    pub fn forbids(&self, label: ArgLabel) -> bool {
        label > self.max_arg_label
    }
}

fn any() -> String {
    "*".to_owned()
}

/// The first contract of `contracts` whose scope matches `upstream__tool`.
#[must_use]
pub fn select<'a>(contracts: &'a [Contract], qualified: &str) -> Option<&'a Contract> {
    contracts.iter().find(|k| glob_match(&k.scope, qualified))
}

/// Why an event was blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    /// The tool is not allowed by the contract (or unlabeled on a committed event).
    ToolNotAllowed,
    /// The endpoint is not in the contract's allow-list.
    DestinationNotAllowed,
    /// The destination label is missing or above the contract's ceiling.
    DestinationLabel,
    /// A committed event has an unlabeled field.
    Unlabeled,
    /// The rewrite did not lower every forbidden field to an allowed label.
    RewriteInsufficient,
    /// No contract covers the call.
    NoContract,
}

impl BlockReason {
    /// Stable snake_case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            BlockReason::ToolNotAllowed => "tool_not_allowed",
            BlockReason::DestinationNotAllowed => "destination_not_allowed",
            BlockReason::DestinationLabel => "destination_label",
            BlockReason::Unlabeled => "unlabeled",
            BlockReason::RewriteInsufficient => "rewrite_insufficient",
            BlockReason::NoContract => "no_contract",
        }
    }
}

/// Why an event was deferred until its branch is promoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// A pre-commit call that would change external state.
    EffectPrecommit,
    /// Branch confidence below τ, or missing.
    LowConfidence,
    /// A pre-commit field could not be labeled.
    Unlabeled,
    /// The task's disclosure budget is spent.
    BudgetExhausted,
    /// Speculation is not enabled for this deployment.
    SpeculationDisabled,
}

impl DeferReason {
    /// Stable snake_case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DeferReason::EffectPrecommit => "effect_precommit",
            DeferReason::LowConfidence => "low_confidence",
            DeferReason::Unlabeled => "unlabeled",
            DeferReason::BudgetExhausted => "budget_exhausted",
            DeferReason::SpeculationDisabled => "speculation_disabled",
        }
    }
}

/// The monitor's verdict on one event, before any transformation is applied (paper §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Dispatch unchanged.
    Allow,
    /// Rewrite the listed fields (JSON Pointers), then dispatch.
    Rewrite {
        /// Paths of the forbidden fields.
        fields: Vec<String>,
    },
    /// Route to the local substitute; the result is not provider-visible.
    Shadow,
    /// Hold until the branch is promoted (re-decided as committed) or abandoned.
    Defer(DeferReason),
    /// Drop with a denial.
    Block(BlockReason),
}

impl Verdict {
    /// Decision tag for logs and traces: `allow`, `rewrite`, `shadow`, `defer`, `block`.
    #[must_use]
    pub fn tag(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Rewrite { .. } => "rewrite",
            Verdict::Shadow => "shadow",
            Verdict::Defer(_) => "defer",
            Verdict::Block(_) => "block",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Defer(r) => write!(f, "defer({})", r.as_str()),
            Verdict::Block(r) => write!(f, "block({})", r.as_str()),
            v => f.write_str(v.tag()),
        }
    }
}

/// The qualified name `upstream__tool` the contract's tool patterns match.
#[must_use]
pub fn qualified(upstream: &str, tool: &str) -> String {
    format!("{upstream}__{tool}")
}

/// `D(e, κ)`: decide one labeled event under contract `kappa` with `spent` budgeted
/// dispatches already charged to the task (paper §4, Appendix A; order in the module docs).
///
/// Pure and total: every input gives a verdict, and a missing label never gives
/// [`Verdict::Allow`]. Does not charge the budget; see [`Budget::charge`].
#[must_use]
pub fn decide(event: &LabeledEvent, kappa: &Contract, spent: u32) -> Verdict {
    let name = qualified(&event.upstream, &event.tool);
    let pre = event.mode.is_pre_commit();
    // 1. tool
    let tool_ok = kappa
        .allowed_tools
        .iter()
        .any(|p| glob_match(p, &name) || glob_match(p, &event.tool));
    if !tool_ok {
        return Verdict::Block(BlockReason::ToolNotAllowed);
    }
    let Some(effect) = event.effect else {
        return Verdict::Block(BlockReason::ToolNotAllowed);
    };
    // 2. destination: endpoint list and label ceiling.
    if !kappa
        .allowed_destinations
        .iter()
        .any(|p| glob_match(p, &event.destination))
    {
        return Verdict::Block(BlockReason::DestinationNotAllowed);
    }
    match event.destination_label {
        Some(l) if l <= kappa.max_destination_label => {}
        _ => return Verdict::Block(BlockReason::DestinationLabel),
    }
    let max_label = event.max_label();
    if pre {
        // 3. effects wait for commitment.
        if effect.changes_state() {
            return Verdict::Defer(DeferReason::EffectPrecommit);
        }
        // 4. gate on confidence; unlabeled pre-commit fields defer.
        match event.confidence {
            Some(c) if c.is_finite() && (0.0..=1.0).contains(&c) && c >= kappa.branch_threshold => {
            }
            _ => return Verdict::Defer(DeferReason::LowConfidence),
        }
        let Some(max_label) = max_label else {
            return Verdict::Defer(DeferReason::Unlabeled);
        };
        // 5. budget, before REWRITE, for events carrying budgeted fields.
        if max_label.is_budgeted() && kappa.budget.is_some_and(|b| spent >= b) {
            return Verdict::Defer(DeferReason::BudgetExhausted);
        }
    } else if max_label.is_none() {
        return Verdict::Block(BlockReason::Unlabeled);
    }
    // 6. rewrite forbidden fields bound for an unauthorized provider.
    let external = effect.is_external();
    if external && !kappa.provider_authorized() && (pre || kappa.applies_to_committed) {
        let fields: Vec<String> = event
            .fields
            .iter()
            .filter(|f| f.label.is_some_and(|l| kappa.forbids(l)))
            .map(|f| f.path.clone())
            .collect();
        if !fields.is_empty() {
            return Verdict::Rewrite { fields };
        }
    }
    // 7. shadow pre-commit calls to external destinations.
    if pre && kappa.shadow_required && external {
        return Verdict::Shadow;
    }
    Verdict::Allow
}

/// Check assumption A3 on a rewritten event: every field must now label at most
/// `max_arg_label`. Returns [`Verdict::Block`] with [`BlockReason::RewriteInsufficient`] if
/// not, else the original verdict.
#[must_use]
pub fn check_rewrite(rewritten: &LabeledEvent, kappa: &Contract, verdict: Verdict) -> Verdict {
    let ok = rewritten
        .fields
        .iter()
        .all(|f| f.label.is_some_and(|l| !kappa.forbids(l)));
    if ok {
        verdict
    } else {
        Verdict::Block(BlockReason::RewriteInsufficient)
    }
}

/// The fields of a dispatched event as the trace may record them (assumption A1: no sink sees
/// a forbidden field unless κ authorizes it): a value labeled above `max_arg_label` (or
/// unlabeled) is replaced by `sha256:<16 hex>` of itself unless the auditor is authorized.
/// Returns (JSON Pointer, text) pairs.
#[must_use]
pub fn recorded_fields(fields: &[LabeledField], kappa: &Contract) -> Vec<(String, String)> {
    let auditor = kappa.authorized_observers.contains(&Observer::Auditor);
    fields
        .iter()
        .map(|f| {
            let keep = auditor || f.label.is_some_and(|l| !kappa.forbids(l));
            let value = if keep {
                f.value.clone()
            } else {
                value_digest(&f.value)
            };
            (f.path.clone(), value)
        })
        .collect()
}

/// `sha256:` and the first 16 hex digits of SHA-256 over `value`: stands in for a value a
/// sink may not see, while equal values still compare equal.
#[must_use]
pub fn value_digest(value: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(value.as_bytes());
    let hex = hex::encode(d);
    format!("sha256:{}", hex.get(..16).unwrap_or(&hex))
}

/// Per-task disclosure budget counter (paper Appendix A; reset at task boundaries, i.e. one
/// counter per session).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    /// Budgeted dispatches so far.
    pub spent: u32,
}

impl Budget {
    /// Charge one dispatch if `verdict` dispatched (ALLOW or REWRITE) a pre-commit event whose
    /// *original* labels carried a sensitive or intent-revealing field.
    pub fn charge(&mut self, event: &LabeledEvent, verdict: &Verdict) {
        let dispatched = matches!(verdict, Verdict::Allow | Verdict::Rewrite { .. });
        if dispatched
            && event.mode.is_pre_commit()
            && event.max_label().is_some_and(ArgLabel::is_budgeted)
        {
            self.spent = self.spent.saturating_add(1);
        }
    }
}

/// State of a speculative branch (paper §3: promoted if its result enters C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchState {
    /// Not decided yet.
    Pending,
    /// The agent uses this branch: its events join the committed trace.
    Promoted,
    /// The agent dropped this branch: its deferred events are discarded undispatched.
    Abandoned,
}

impl BranchState {
    /// `pending`, `promoted`, `abandoned` (as stored).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            BranchState::Pending => "pending",
            BranchState::Promoted => "promoted",
            BranchState::Abandoned => "abandoned",
        }
    }

    /// Inverse of [`BranchState::as_str`]; `None` for any other text.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(BranchState::Pending),
            "promoted" => Some(BranchState::Promoted),
            "abandoned" => Some(BranchState::Abandoned),
            _ => None,
        }
    }
}

/// Lifecycle state of one event (paper §4; names per §2.18 item 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    /// Received, not yet decided. Nothing about it has left the monitor.
    Proposed,
    /// Decided (ALLOW, REWRITE, SHADOW), about to be dispatched.
    Decided,
    /// Sent to the provider or the local substitute.
    Dispatched,
    /// The result came back.
    Completed,
    /// Held until its branch is promoted or abandoned.
    Deferred,
    /// Blocked (terminal).
    Denied,
    /// Deferred and then abandoned: never dispatched (terminal).
    Terminated,
}

/// Errors of lifecycle transitions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// The transition is not in the lifecycle.
    #[error("event cannot go from `{from:?}` to `{to:?}`")]
    Transition {
        /// Current state.
        from: EventState,
        /// Requested state.
        to: EventState,
    },
    /// The branch was already promoted or abandoned.
    #[error("branch `{0}` is already {1}")]
    BranchSettled(String, &'static str),
}

impl EventState {
    /// Move to `to` if the lifecycle allows it:
    /// Proposed → Decided | Deferred | Denied; Decided → Dispatched; Dispatched → Completed;
    /// Deferred → Decided (promotion, re-decided as committed) | Denied (promotion blocked) |
    /// Terminated (abandonment).
    ///
    /// # Errors
    /// [`LifecycleError::Transition`] for anything else.
    pub fn advance(self, to: EventState) -> Result<EventState, LifecycleError> {
        use EventState as S;
        let ok = matches!(
            (self, to),
            (S::Proposed, S::Decided | S::Deferred | S::Denied)
                | (S::Decided, S::Dispatched)
                | (S::Dispatched, S::Completed)
                | (S::Deferred, S::Decided | S::Denied | S::Terminated)
        );
        if ok {
            Ok(to)
        } else {
            Err(LifecycleError::Transition { from: self, to })
        }
    }
}

/// The branch table of one task: pending, promoted, abandoned (paper §3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BranchTable {
    branches: BTreeMap<String, BranchState>,
}

impl BranchTable {
    /// State of `branch`; unknown branches are pending.
    #[must_use]
    pub fn state(&self, branch: &str) -> BranchState {
        self.branches
            .get(branch)
            .copied()
            .unwrap_or(BranchState::Pending)
    }

    /// Register a branch as pending if new.
    pub fn open(&mut self, branch: &str) {
        self.branches
            .entry(branch.to_owned())
            .or_insert(BranchState::Pending);
    }

    /// Settle `branch` as promoted or abandoned. Promoting a promoted branch is a no-op (so a
    /// runtime can retry), every other change of a settled branch is an error.
    ///
    /// # Errors
    /// [`LifecycleError::BranchSettled`] when the branch was already settled differently.
    pub fn settle(&mut self, branch: &str, to: BranchState) -> Result<(), LifecycleError> {
        let cur = self.state(branch);
        match (cur, to) {
            (BranchState::Pending, _) => {
                self.branches.insert(branch.to_owned(), to);
                Ok(())
            }
            (a, b) if a == b => Ok(()),
            (a, _) => Err(LifecycleError::BranchSettled(
                branch.to_owned(),
                if a == BranchState::Promoted {
                    "promoted"
                } else {
                    "abandoned"
                },
            )),
        }
    }

    /// Every branch with its state, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, BranchState)> {
        self.branches.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

#[cfg(test)]
mod tests;
