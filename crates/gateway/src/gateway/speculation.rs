//! The speculative dispatcher: every `tools/call` passes the issue-time privacy contract
//! before anything about it is sent, logged or cached (Ghost Tool Calls, arXiv 2606.02483 §4;
//! DESIGN.md §3 "Speculative contracts").
//!
//! Order of a call: label (pure, in memory) → `decide` → REWRITE / re-label / A3 check →
//! charge budget → then, and only then, the first trace record and the dispatch. The budget is
//! kept in the store ([`secureclaw_core::store::SpeculationStore`]): spent once across every
//! replica on the database, and kept across a restart. So are the held calls and the branch
//! states: a deferred call is held in the store (its raw pre-commit arguments sealed under the
//! vault key, the per-session caps enforced there atomically) until its branch is promoted
//! (taken once, re-decided as committed, then dispatched) or abandoned (discarded unsent),
//! through whichever replica, also after a restart. A store error fails closed: the call is
//! refused (`store_unavailable`), never held in memory instead. Only the result cache of the
//! `cache` substitute stays in this process's memory (a cache: a miss substitutes an empty
//! result). The trace written to the
//! audit log holds the decision and the fields *as dispatched* — for committed calls only
//! their digests, which is all the committed-only counterfactual needs.

use super::{CallOutcome, Gateway, GatewayError};
use crate::config::{SubstituteKind, SubstituteRule};
use crate::upstream::ToolOutput;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::AuditKind;
use secureclaw_core::contract::{
    BranchState, BranchTable, Budget, Contract, DeferReason, EffectLabel, Mode, Verdict, qualified,
    recorded_fields, select, value_digest,
};
use secureclaw_core::exposure::{Dispatch, ObserverExposure, TraceEvent, exposure};
use secureclaw_core::handle::glob_match;
use secureclaw_core::labeler::Labeler;
use secureclaw_core::monitor;
use secureclaw_core::policy::EffectClass;
use secureclaw_core::recovery::{ActionClass, Limit, ReasonCode, Recovery};
use secureclaw_core::store::{AuditSink, HeldBounds, HoldOutcome, SessionRecord, StoreError};
use secureclaw_core::time::UnixMillis;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// `_meta` key of the execution mode (`committed`, `speculative`, `prefetch`, `retry`,
/// `validation`, `shadow`).
pub const META_MODE: &str = "dev.secureclaw/mode";
/// `_meta` key of the branch id (1–128 characters of `A-Za-z0-9._:-`).
pub const META_BRANCH: &str = "dev.secureclaw/branch";
/// `_meta` key of the branch confidence, a number in `[0, 1]`.
pub const META_CONFIDENCE: &str = "dev.secureclaw/confidence";
/// `_meta` key carrying an approved action id on a re-issued call.
pub const META_APPROVAL: &str = "dev.secureclaw/approval";
/// Gateway-provided tool that promotes a branch.
pub const PROMOTE_TOOL: &str = "secureclaw.promote_branch";
/// Gateway-provided tool that abandons a branch.
pub const ABANDON_TOOL: &str = "secureclaw.abandon_branch";
/// Cached committed results per session for the `cache` substitute.
const MAX_CACHE_PER_SESSION: usize = 256;

/// The wire metadata of one `tools/call` (`_meta` keys above).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallMeta {
    /// Approved action id (`dev.secureclaw/approval`).
    pub approval: Option<ActionId>,
    /// Execution mode; absent = committed (plain MCP clients do not speculate).
    pub mode: Option<Mode>,
    /// Branch id.
    pub branch: Option<String>,
    /// Branch confidence.
    pub confidence: Option<f64>,
}

impl CallMeta {
    /// The metadata of a committed call without speculation keys: an ordinary call, or with
    /// `approval` the re-issue of that approved action.
    #[must_use]
    pub fn committed(approval: Option<&ActionId>) -> Self {
        Self {
            approval: approval.cloned(),
            ..Self::default()
        }
    }

    /// Read the SecureClaw keys of a `_meta` object; other keys are ignored.
    ///
    /// # Errors
    /// A message naming the malformed key: a mode that is not a known mode, a branch that is
    /// not 1–128 characters of `A-Za-z0-9._:-`, a confidence that is not a number in `[0, 1]`, an
    /// approval that is not a string.
    pub fn from_meta(meta: &Map<String, Value>) -> Result<Self, String> {
        let mut out = CallMeta::default();
        // A key in our namespace that we do not know is a mistake that would otherwise pass
        // silently (`dev.secureclaw/confidnce` leaving a speculative call committed): refused.
        if let Some(k) = meta.keys().find(|k| {
            k.starts_with("dev.secureclaw/")
                && ![META_APPROVAL, META_MODE, META_BRANCH, META_CONFIDENCE].contains(&k.as_str())
        }) {
            return Err(format!(
                "unknown key `{k}`: the keys are `{META_MODE}`, `{META_BRANCH}`, `{META_CONFIDENCE}` and `{META_APPROVAL}`"
            ));
        }
        if let Some(v) = meta.get(META_APPROVAL) {
            let s = v
                .as_str()
                .ok_or_else(|| format!("`{META_APPROVAL}` must be a string"))?;
            out.approval = Some(ActionId(s.to_owned()));
        }
        if let Some(v) = meta.get(META_MODE) {
            let m = v
                .as_str()
                .and_then(Mode::parse)
                .ok_or_else(|| format!("`{META_MODE}` must be one of committed, speculative, prefetch, retry, validation, shadow"))?;
            out.mode = Some(m);
        }
        if let Some(v) = meta.get(META_BRANCH) {
            let s = v.as_str().filter(|s| valid_branch(s)).ok_or_else(|| {
                format!("`{META_BRANCH}` must be 1-128 characters of A-Z a-z 0-9 . _ : -")
            })?;
            out.branch = Some(s.to_owned());
        }
        if let Some(v) = meta.get(META_CONFIDENCE) {
            // Outside [0, 1] (or NaN, which JSON cannot carry but a float can) is refused: a
            // confidence of 7 must not clear every threshold τ.
            let c = v
                .as_f64()
                .filter(|c| (0.0..=1.0).contains(c))
                .ok_or_else(|| format!("`{META_CONFIDENCE}` must be a number in [0, 1]"))?;
            out.confidence = Some(c);
        }
        Ok(out)
    }

    fn mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::Committed)
    }
}

/// Whether `s` is a valid branch id.
#[must_use]
pub fn valid_branch(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// A call held in the store until its branch settles, as stored (canonical JSON, sealed by
/// the store).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Held {
    tool: String,
    arguments: Map<String, Value>,
}

/// Why a call could not be held.
enum NotHeld {
    /// The session holds as many calls or bytes as its limits allow.
    Limit(Limit),
    /// The branch is already promoted or abandoned.
    Settled,
    /// The store failed (or the call could not be encoded): not held, refused.
    Store,
}

/// Per-task (per-session) speculative state kept in this process: the trace's sequence and
/// start time and the `cache` substitute's results (held calls and branch states are in the
/// store).
#[derive(Debug, Default)]
struct TaskState {
    /// When the session expires; the state is dropped after that.
    expires_at: Option<UnixMillis>,
    started: Option<UnixMillis>,
    seq: u64,
    cache: HashMap<String, ToolOutput>,
}

/// The monitor's shared state.
#[derive(Debug, Default)]
pub(super) struct Speculation {
    labeler: Labeler,
    tasks: Mutex<HashMap<String, TaskState>>,
    /// When expired sessions' task state was last dropped (ms since the epoch).
    last_prune: std::sync::atomic::AtomicU64,
}

impl Speculation {
    pub(super) fn new(labeler: Labeler) -> Self {
        Speculation {
            labeler,
            tasks: Mutex::new(HashMap::new()),
            last_prune: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

/// How often expired sessions' task state is dropped (at most once per this many ms).
const PRUNE_EVERY_MS: u64 = 60_000;

/// The task state of `session`, created on first use with the session's expiry.
fn task_of<'t>(
    tasks: &'t mut HashMap<String, TaskState>,
    session: &SessionRecord,
) -> &'t mut TaskState {
    let task = tasks.entry(session.id.clone()).or_default();
    task.expires_at.get_or_insert(session.expires_at);
    task
}

/// One call released by a promotion, with its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    /// The tool the runtime had called.
    pub tool: String,
    /// What happened when it was re-decided as committed and dispatched.
    pub outcome: CallOutcome,
}

fn derived_effect(effect: EffectClass, destructive: bool) -> EffectLabel {
    match (effect, destructive) {
        (EffectClass::Read, _) => EffectLabel::ExternalRead,
        (EffectClass::Effect, true) => EffectLabel::Irreversible,
        (EffectClass::Effect, false) => EffectLabel::ExternalWrite,
    }
}

fn host_of(destination: &str) -> String {
    match destination.split_once("://") {
        Some((_, rest)) => rest.split(['/', '?', '#']).next().unwrap_or("").to_owned(),
        None => destination
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

fn cache_key(tool: &str, args: &Map<String, Value>) -> String {
    let bytes = serde_json_canonicalizer::to_vec(args).unwrap_or_default();
    format!("{tool}\u{0}{}", hex::encode(Sha256::digest(&bytes)))
}

fn empty_output() -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": "[]"})],
        structured: None,
        is_error: false,
    }
}

impl Gateway {
    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskState>> {
        // A poisoned lock only means another request panicked mid-update; the state is a
        // cache of counters and held calls, still consistent enough to keep serving.
        let mut guard = match self.inner.speculation.tasks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // Drop the state of expired sessions (no call can reach them any more), at most once
        // per PRUNE_EVERY_MS, so the map does not grow with every session ever opened.
        let now = self.now();
        let last = &self.inner.speculation.last_prune;
        let due = now
            .0
            .saturating_sub(last.load(std::sync::atomic::Ordering::Relaxed))
            >= PRUNE_EVERY_MS;
        if due {
            last.store(now.0, std::sync::atomic::Ordering::Relaxed);
            guard.retain(|_, t| t.expires_at.is_none_or(|e| now <= e));
        }
        guard
    }

    /// A tool call — the gateway's only public entry point for one (issue 13 item 5), used by
    /// every front end (MCP `tools/call`, HTTP `/v1/call`) and by the in-process evaluation
    /// target alike — with its `_meta` (Ghost Tool Calls §4): the gateway-provided branch
    /// tools, then the privacy contract monitor, then dispatch of whatever it lets through
    /// (read tools forwarded and declassified; effects previewed and, if the policy allows
    /// without confirmation, committed at once; with [`CallMeta::approval`], committed only
    /// if the call is exactly the approved request).
    ///
    /// Without `[gateway.speculation]` enabled, committed calls are dispatched at once and
    /// pre-commit calls are deferred ([`ReasonCode::Deferred`]); enabled, every call is
    /// decided: BLOCK → [`CallOutcome::Denied`] with [`ReasonCode::ContractBlocked`], DEFER →
    /// [`CallOutcome::Deferred`], SHADOW → [`CallOutcome::Shadowed`], REWRITE and ALLOW →
    /// dispatched (rewritten arguments in place of the originals).
    ///
    /// Every call first takes a token from the session's rate limits (`session_rate_per_s`,
    /// `tool_rate_per_s`); past them it is refused with [`ReasonCode::LimitExceeded`] and a
    /// retry hint, and nothing is sent or stored.
    ///
    /// A front end calls this:
    ///
    /// ```
    /// use secureclaw_core::store::SessionRecord;
    /// use secureclaw_gateway::{CallMeta, CallOutcome, Gateway};
    ///
    /// async fn tools_call(gw: &Gateway, session: &SessionRecord) -> CallOutcome {
    ///     gw.call(session, "office__read_invoice", serde_json::Map::new(), &CallMeta::default())
    ///         .await
    /// }
    /// ```
    ///
    /// and cannot reach the dispatch behind the monitor:
    ///
    /// ```compile_fail
    /// use secureclaw_core::store::SessionRecord;
    /// use secureclaw_gateway::{CallOutcome, Gateway};
    ///
    /// async fn around_the_monitor(gw: &Gateway, session: &SessionRecord) -> CallOutcome {
    ///     gw.dispatch(session, "office__read_invoice", serde_json::Map::new(), None)
    ///         .await
    /// }
    /// ```
    ///
    /// Cancellation-safe: the call runs on its own task ([`Gateway::detached`]), so a caller
    /// that stops waiting (an HTTP client that closes its connection mid-effect) never leaves
    /// a dispatched effect unrecorded.
    pub async fn call(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        meta: &CallMeta,
    ) -> CallOutcome {
        use tracing::Instrument as _;
        let span = self.call_span("call", tool);
        let outcome = async {
            let admitted = match self.admit_arguments(session, tool, &arguments).await {
                Ok(guard) => guard,
                Err(refused) => return refused,
            };
            let (gw, session, name, meta) =
                (self.clone(), session.clone(), tool.to_owned(), meta.clone());
            self.detached(
                async move {
                    let outcome = gw.call_attached(&session, &name, arguments, &meta).await;
                    drop(admitted);
                    outcome
                },
                || Self::task_failed(tool),
            )
            .await
        }
        .instrument(span.clone())
        .await;
        Self::record_outcome(&span, &outcome);
        outcome
    }

    /// The call as the privacy monitor sees it: its destination, its qualified name and the
    /// labeled event (Ghost Tool Calls §4, the labeler's view of `arguments` in `mode`).
    fn labeled(
        &self,
        entry: &crate::catalog::ToolEntry,
        arguments: &Map<String, Value>,
        mode: Mode,
        confidence: Option<f64>,
    ) -> (String, String, secureclaw_core::contract::LabeledEvent) {
        let destination = self
            .inner
            .executor
            .destination(&entry.upstream)
            .unwrap_or_default()
            .to_owned();
        let q = qualified(&entry.upstream, &entry.name);
        let event = self.inner.speculation.labeler.label(
            &entry.upstream,
            &entry.name,
            &destination,
            Some(derived_effect(entry.effect, entry.destructive)),
            arguments,
            mode,
            confidence,
        );
        (destination, q, event)
    }

    /// An explicit preview or commit passes the privacy monitor as the committed call it is
    /// (issue 13 item 5: every entry point for a tool call goes through the monitor; before,
    /// `preview` + `commit` skipped a contract that blocks a tool or a destination). A
    /// contract's tool and destination checks refuse it (`contract_blocked`, recorded in the
    /// trace like a blocked call), and a contract that `applies_to_committed` rewrites its
    /// arguments — at the preview and again, identically, at the commit, so the rewritten call
    /// is what is bound and run. With speculation off, or for a tool the catalog does not know
    /// (refused later, as before), the arguments pass unchanged.
    ///
    /// # Errors
    /// [`ReasonCode::ContractBlocked`] when the monitor's verdict is not ALLOW or REWRITE.
    pub(super) async fn monitor_explicit(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Map<String, Value>, ReasonCode> {
        if !self.inner.config.speculation.enabled {
            tracing::Span::current().record("monitor_action", "off");
            return Ok(arguments);
        }
        let Some(entry) = self.inner.catalog.get(tool) else {
            return Ok(arguments);
        };
        let (destination, q, event) = self.labeled(entry, &arguments, Mode::Committed, None);
        let labeler = &self.inner.speculation.labeler;
        let kappa = select(&self.inner.config.speculation.contracts, &q);
        // A committed call spends no disclosure budget (only pre-commit events are charged).
        let mut budget = Budget { spent: 0 };
        let issued = monitor::issue(labeler, kappa, &event, &arguments, &mut budget);
        tracing::Span::current().record("monitor_action", issued.verdict.tag());
        match issued.verdict {
            Verdict::Allow | Verdict::Rewrite { .. } => Ok(issued.arguments),
            verdict => {
                let tag = match &verdict {
                    Verdict::Block(reason) => format!("block:{}", reason.as_str()),
                    other => other.tag().to_owned(),
                };
                self.record(
                    session,
                    &q,
                    &destination,
                    Mode::Committed,
                    None,
                    &tag,
                    Dispatch::None,
                    None,
                    0,
                )
                .await;
                Err(ReasonCode::ContractBlocked)
            }
        }
    }

    /// [`Gateway::call`] on the caller's task.
    async fn call_attached(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        meta: &CallMeta,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let outcome = match self.throttle(session, tool).await {
            Some(refused) => refused,
            None => {
                self.call_with_unthrottled(session, tool, arguments, meta)
                    .await
            }
        };
        self.observe_call(session, tool, &outcome, started);
        outcome
    }

    /// [`Gateway::call`] for a call whose rate was already accounted for (a held call
    /// released by a promotion).
    async fn call_with_unthrottled(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        meta: &CallMeta,
    ) -> CallOutcome {
        match tool {
            PROMOTE_TOOL | ABANDON_TOOL => {
                return self.branch_tool(session, tool, &arguments).await;
            }
            _ => {}
        }
        // An approval re-issue is the committed call the user confirmed. It passes the same
        // contract as the call that created the approval, so a call the contract rewrote
        // (`applies_to_committed`) is rewritten the same way and matches the previewed
        // binding: the exact call the runtime re-issues runs.
        let approval = meta.approval.as_ref();
        let mut mode = if approval.is_some() {
            Mode::Committed
        } else {
            meta.mode()
        };
        if let (true, Some(b)) = (mode.is_pre_commit(), meta.branch.as_deref()) {
            let state = match self.inner.store.branch_state(&session.id, b).await {
                Ok(state) => state,
                Err(_) => {
                    return self
                        .deny_call(session, tool, ReasonCode::StoreUnavailable)
                        .await;
                }
            };
            match state {
                // The branch is already in use: the call is part of the committed plan.
                BranchState::Promoted => mode = Mode::Committed,
                // Nothing more is sent for a dropped branch.
                BranchState::Abandoned => {
                    return self
                        .deny_call(session, tool, ReasonCode::ContractBlocked)
                        .await;
                }
                BranchState::Pending => {}
            }
        }
        let enabled = self.inner.config.speculation.enabled;
        if !enabled && !mode.is_pre_commit() {
            tracing::Span::current().record("monitor_action", "off");
            return self
                .call_unthrottled(session, tool, arguments, approval)
                .await;
        }
        let Some(entry) = self.inner.catalog.get(tool).cloned() else {
            return self
                .call_unthrottled(session, tool, arguments, approval)
                .await;
        };
        let class = match entry.effect {
            EffectClass::Read => ActionClass::Read,
            EffectClass::Effect => ActionClass::Effect,
        };
        let branch = meta.branch.clone();
        if !enabled {
            tracing::Span::current().record("monitor_action", "defer");
            let branch = branch.unwrap_or_else(fresh_branch);
            return self
                .hold(
                    session,
                    &entry.exposed,
                    class,
                    mode,
                    &branch,
                    arguments,
                    "defer:speculation_disabled",
                )
                .await;
        }
        let (destination, q, event) = self.labeled(&entry, &arguments, mode, meta.confidence);
        let labeler = &self.inner.speculation.labeler;
        let contracts = &self.inner.config.speculation.contracts;
        let kappa: Option<&Contract> = select(contracts, &q);
        // The disclosure budget lives in the store, shared by every replica and kept across
        // restarts: read it only when the contract bounds it and the call is pre-commit (the
        // only events it can defer), then charge it with one atomic conditional increment. Of
        // replicas racing for the last unit, one is charged; the others defer as exhausted.
        let limit = kappa.and_then(|k| k.budget);
        let spent = match limit {
            Some(_) if mode.is_pre_commit() => {
                match self.inner.store.budget_spent(&session.id).await {
                    Ok(n) => n,
                    Err(_) => {
                        return self
                            .deny_call(session, tool, ReasonCode::StoreUnavailable)
                            .await;
                    }
                }
            }
            _ => 0,
        };
        let mut budget = Budget { spent };
        let issued = monitor::issue(labeler, kappa, &event, &arguments, &mut budget);
        let (mut verdict, dispatched_args) = (issued.verdict, issued.arguments);
        if let (Some(limit), true) = (limit, budget.spent > spent) {
            match self.inner.store.charge_budget(&session.id, limit).await {
                Ok(Some(_)) => {}
                Ok(None) => verdict = Verdict::Defer(DeferReason::BudgetExhausted),
                Err(_) => {
                    return self
                        .deny_call(session, tool, ReasonCode::StoreUnavailable)
                        .await;
                }
            }
        }
        let branch_or_seq = || branch.clone().unwrap_or_else(fresh_branch);
        tracing::Span::current().record("monitor_action", verdict.tag());
        match verdict {
            Verdict::Block(reason) => {
                let tag = format!("block:{}", reason.as_str());
                self.record(
                    session,
                    &q,
                    &destination,
                    mode,
                    branch.as_deref(),
                    &tag,
                    Dispatch::None,
                    None,
                    0,
                )
                .await;
                self.deny_call(session, tool, ReasonCode::ContractBlocked)
                    .await
            }
            Verdict::Defer(reason) => {
                let b = branch_or_seq();
                let tag = format!("defer:{}", reason.as_str());
                self.hold(session, &entry.exposed, class, mode, &b, arguments, &tag)
                    .await
            }
            Verdict::Shadow => {
                let reissue = kappa.is_some_and(|k| {
                    k.shadow_promotion == secureclaw_core::contract::ShadowPromotion::Reissue
                });
                let b = branch_or_seq();
                if reissue {
                    // Not kept (limit, settled branch, store error): it is not re-issued on
                    // promotion, which sends less, never more.
                    let _ = self.keep(session, &b, &entry.exposed, &arguments).await;
                }
                let started = Instant::now();
                let output = self
                    .substitute(session, &q, &entry.exposed, &arguments)
                    .await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.record(
                    session,
                    &q,
                    &destination,
                    mode,
                    Some(&b),
                    "shadow",
                    Dispatch::Substitute,
                    None,
                    ms,
                )
                .await;
                CallOutcome::Shadowed { output }
            }
            Verdict::Allow | Verdict::Rewrite { .. } => {
                let tag = verdict.tag();
                let started = Instant::now();
                let outcome = self
                    .dispatch(session, tool, dispatched_args.clone(), approval)
                    .await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let dispatched = match &outcome {
                    CallOutcome::Completed { .. } => true,
                    CallOutcome::Denied(r) => matches!(
                        r.reason,
                        ReasonCode::UpstreamError
                            | ReasonCode::UpstreamTimeout
                            | ReasonCode::OutcomeUnknown
                            | ReasonCode::ResultWithheld
                    ),
                    _ => false,
                };
                if let (CallOutcome::Completed { output, .. }, false, EffectClass::Read) =
                    (&outcome, mode.is_pre_commit(), entry.effect)
                {
                    self.cache_result(session, &q, &dispatched_args, output);
                }
                let external = event.effect.is_some_and(EffectLabel::is_external);
                let dispatch = match (dispatched, external) {
                    (true, true) => Dispatch::Provider,
                    (true, false) => Dispatch::Local,
                    (false, _) => Dispatch::None,
                };
                let fields = match (dispatched, kappa) {
                    (true, Some(k)) => Some((
                        recorded_fields(&labeler.label_fields(&q, &dispatched_args), k),
                        serde_json::to_vec(&dispatched_args).map_or(0, |v| v.len() as u64),
                    )),
                    _ => None,
                };
                self.record(
                    session,
                    &q,
                    &destination,
                    mode,
                    branch.as_deref(),
                    tag,
                    dispatch,
                    fields,
                    ms,
                )
                .await;
                outcome
            }
        }
    }

    /// Whether `[gateway.speculation]` is enabled (the branch tools are then listed).
    #[must_use]
    pub fn speculation_enabled(&self) -> bool {
        self.inner.config.speculation.enabled
    }

    /// How many sessions have speculative state (trace sequence, result cache) in this
    /// process's memory (the budget, held calls and branch states are in the store). The state
    /// of an expired session is dropped on the first call after it expires, at most a minute
    /// late.
    #[must_use]
    pub fn speculative_sessions(&self) -> usize {
        self.lock_tasks().len()
    }

    /// Keep a call (a deferral, or a shadowed call to re-issue on promotion) for its branch in
    /// the store; refused when the session already holds `max_held_calls_per_session` calls or
    /// the call would take it past `max_held_bytes_per_session` (counted in the store across
    /// every replica), when the branch is settled, or when the store fails.
    async fn keep(
        &self,
        session: &SessionRecord,
        branch: &str,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<(), NotHeld> {
        let limits = &self.inner.config.limits;
        let bytes = serde_json::to_vec(arguments).map_or(usize::MAX, |v| v.len());
        let held = Held {
            tool: tool.to_owned(),
            arguments: arguments.clone(),
        };
        let call = serde_json_canonicalizer::to_vec(&held)
            .ok()
            .and_then(|v| String::from_utf8(v).ok())
            .ok_or(NotHeld::Store)?;
        let bounds = HeldBounds {
            max_calls: u64::try_from(limits.max_held_calls_per_session).unwrap_or(u64::MAX),
            max_bytes: u64::try_from(limits.max_held_bytes_per_session).unwrap_or(u64::MAX),
        };
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        match self
            .inner
            .store
            .hold_call(&session.id, branch, &call, bytes, bounds)
            .await
        {
            Ok(HoldOutcome::Held(_)) => Ok(()),
            Ok(HoldOutcome::Limit(limit)) => Err(NotHeld::Limit(limit)),
            Ok(HoldOutcome::Settled(_)) => Err(NotHeld::Settled),
            Err(e) => {
                tracing::warn!(error = %e, "held call not stored");
                Err(NotHeld::Store)
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "the deferral's full context")]
    async fn hold(
        &self,
        session: &SessionRecord,
        tool: &str,
        class: ActionClass,
        mode: Mode,
        branch: &str,
        arguments: Map<String, Value>,
        tag: &str,
    ) -> CallOutcome {
        let (q, destination) = match self.inner.catalog.get(tool) {
            Some(e) => (
                qualified(&e.upstream, &e.name),
                self.inner
                    .executor
                    .destination(&e.upstream)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            None => (tool.to_owned(), String::new()),
        };
        // Validated as the call it stands for before it is held: a call that could never
        // run (too large, too deep, inexact numbers) is refused now, not kept in memory.
        let size = serde_json::to_vec(&arguments).map_or(usize::MAX, |v| v.len());
        if size > self.inner.config.limits.max_argument_bytes
            || secureclaw_core::canonical::validate_value(&Value::Object(arguments.clone()))
                .is_err()
        {
            return self
                .deny_call(session, tool, ReasonCode::InvalidArguments)
                .await;
        }
        // A call for a branch that was already abandoned is dropped unsent; one for a
        // promoted branch is not speculative any more, but the runtime said it was: hold it
        // like any other and let the next promotion release it.
        let kept = self.keep(session, branch, tool, &arguments).await;
        let trace_tag = match kept {
            Ok(()) => tag,
            Err(NotHeld::Limit(_)) => "block:held_limit",
            Err(NotHeld::Settled) => "block:branch_settled",
            Err(NotHeld::Store) => "block:store_unavailable",
        };
        self.record(
            session,
            &q,
            &destination,
            mode,
            Some(branch),
            trace_tag,
            Dispatch::None,
            None,
            0,
        )
        .await;
        match kept {
            Ok(()) => CallOutcome::Deferred(Recovery::deferred(class, tool, branch)),
            Err(NotHeld::Limit(limit)) => {
                self.refuse_limit(session, tool, limit, None, Some(1)).await
            }
            Err(NotHeld::Settled) => {
                self.deny_call(session, tool, ReasonCode::ContractBlocked)
                    .await
            }
            Err(NotHeld::Store) => {
                self.deny_call(session, tool, ReasonCode::StoreUnavailable)
                    .await
            }
        }
    }

    async fn substitute(
        &self,
        session: &SessionRecord,
        qualified_name: &str,
        exposed: &str,
        arguments: &Map<String, Value>,
    ) -> ToolOutput {
        let rule: Option<&SubstituteRule> = self
            .inner
            .config
            .speculation
            .substitutes
            .iter()
            .find(|r| glob_match(&r.tool, qualified_name) || glob_match(&r.tool, exposed));
        match rule.map(|r| (r.kind, r.with.as_deref())) {
            Some((SubstituteKind::Cache, _)) => {
                let key = cache_key(qualified_name, arguments);
                let tasks = self.lock_tasks();
                tasks
                    .get(&session.id)
                    .and_then(|t| t.cache.get(&key).cloned())
                    .unwrap_or_else(empty_output)
            }
            Some((SubstituteKind::Tool, Some(with))) => {
                // The substitute is a local tool behind the same read path and policy.
                match Box::pin(self.call_unthrottled(session, with, arguments.clone(), None)).await
                {
                    CallOutcome::Completed { output, .. } => output,
                    _ => empty_output(),
                }
            }
            _ => empty_output(),
        }
    }

    fn cache_result(
        &self,
        session: &SessionRecord,
        qualified_name: &str,
        arguments: &Map<String, Value>,
        output: &ToolOutput,
    ) {
        let mut tasks = self.lock_tasks();
        let task = task_of(&mut tasks, session);
        if task.cache.len() >= MAX_CACHE_PER_SESSION {
            task.cache.clear();
        }
        task.cache
            .insert(cache_key(qualified_name, arguments), output.clone());
    }

    /// Append one trace event (decision + fields as dispatched) to the audit log. Committed
    /// events keep only digests of their values.
    #[expect(clippy::too_many_arguments, reason = "one trace event's fields")]
    async fn record(
        &self,
        session: &SessionRecord,
        tool: &str,
        destination: &str,
        mode: Mode,
        branch: Option<&str>,
        decision: &str,
        dispatch: Dispatch,
        fields: Option<(Vec<(String, String)>, u64)>,
        duration_ms: u64,
    ) {
        let now = self.now();
        let (seq, issued_ms) = {
            let mut tasks = self.lock_tasks();
            let task = task_of(&mut tasks, session);
            let started = *task.started.get_or_insert(now);
            task.seq += 1;
            (
                task.seq,
                now.0.saturating_sub(started.0).saturating_sub(duration_ms),
            )
        };
        let (fields, payload_bytes) = match fields {
            Some((mut fs, bytes)) => {
                if !mode.is_pre_commit() {
                    for (_, v) in &mut fs {
                        if !v.starts_with("sha256:") {
                            *v = value_digest(v);
                        }
                    }
                }
                (fs, bytes)
            }
            None => (Vec::new(), 0),
        };
        let event = TraceEvent {
            seq,
            branch: branch.map(str::to_owned),
            mode,
            tool: tool.to_owned(),
            destination: destination.to_owned(),
            host: host_of(destination),
            decision: decision.to_owned(),
            dispatch,
            fields,
            payload_bytes,
            issued_ms,
            duration_ms,
        };
        tracing::debug!(tool, decision, mode = mode.as_str(), "contract decision");
        let mut ev = self.event(AuditKind::Speculation, session, tool);
        ev.detail = json!({"event": event});
        // The trace is evidence for exposure reports; a failed append is logged, and the
        // call's own read/commit audit records still decide whether it completes.
        let _ = self.audit(ev).await;
    }

    async fn record_branch(
        &self,
        session: &SessionRecord,
        branch: &str,
        state: BranchState,
        released: usize,
        discarded: usize,
    ) {
        let mut ev = self.event(AuditKind::Speculation, session, "secureclaw");
        ev.detail =
            json!({"branch": branch, "state": state, "released": released, "discarded": discarded});
        let _ = self.audit(ev).await;
    }

    /// Promote `branch`: its dispatched calls join the committed trace; each held call is
    /// re-decided as committed and dispatched, in the order it was issued (paper §4 DEFER;
    /// shadowed calls are re-issued only when their contract says `reissue`). The held calls
    /// are taken from the store once: of replicas promoting one branch at once, one releases
    /// them, whichever replica held them.
    ///
    /// # Errors
    /// [`GatewayError::Conflict`] if the branch was abandoned; [`GatewayError::Store`] if the
    /// store fails (nothing is released).
    ///
    /// Cancellation-safe like [`Gateway::call`]: the promotion and the calls it releases run
    /// on their own task, so a caller that stops waiting loses no held call.
    pub async fn promote_branch(
        &self,
        session: &SessionRecord,
        branch: &str,
    ) -> Result<Vec<Released>, GatewayError> {
        let (gw, session, branch) = (self.clone(), session.clone(), branch.to_owned());
        self.detached(
            async move { gw.promote_branch_attached(&session, &branch).await },
            || Err(GatewayError::Store("the promotion's task failed".into())),
        )
        .await
    }

    /// [`Gateway::promote_branch`] on the caller's task.
    async fn promote_branch_attached(
        &self,
        session: &SessionRecord,
        branch: &str,
    ) -> Result<Vec<Released>, GatewayError> {
        let taken = self
            .inner
            .store
            .settle_branch(&session.id, branch, BranchState::Promoted)
            .await
            .map_err(settle_error)?;
        self.record_branch(session, branch, BranchState::Promoted, taken.len(), 0)
            .await;
        let mut released = Vec::with_capacity(taken.len());
        for c in taken {
            let Ok(h) = serde_json::from_str::<Held>(&c.call) else {
                // Authenticated by the store's AEAD, so only a bug gets here: refused, not run.
                released.push(Released {
                    tool: String::new(),
                    outcome: CallOutcome::Denied(Recovery::new(
                        ReasonCode::StoreUnavailable,
                        ActionClass::Effect,
                        "secureclaw",
                        None,
                    )),
                });
                continue;
            };
            let meta = CallMeta {
                mode: Some(Mode::Committed),
                branch: Some(branch.to_owned()),
                ..CallMeta::default()
            };
            let outcome =
                Box::pin(self.call_with_unthrottled(session, &h.tool, h.arguments, &meta)).await;
            released.push(Released {
                tool: h.tool,
                outcome,
            });
        }
        Ok(released)
    }

    /// Abandon `branch`: its held calls are discarded without ever being dispatched; its
    /// dispatched calls stay in the issued trace only (they are ghosts). Returns how many held
    /// calls were discarded.
    ///
    /// # Errors
    /// [`GatewayError::Conflict`] if the branch was promoted; [`GatewayError::Store`] if the
    /// store fails.
    pub async fn abandon_branch(
        &self,
        session: &SessionRecord,
        branch: &str,
    ) -> Result<usize, GatewayError> {
        let n = self
            .inner
            .store
            .settle_branch(&session.id, branch, BranchState::Abandoned)
            .await
            .map_err(settle_error)?
            .len();
        self.record_branch(session, branch, BranchState::Abandoned, 0, n)
            .await;
        Ok(n)
    }

    async fn branch_tool(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> CallOutcome {
        let Some(branch) = arguments
            .get("branch")
            .and_then(Value::as_str)
            .filter(|b| valid_branch(b))
        else {
            return CallOutcome::Denied(Recovery::new(
                ReasonCode::InvalidArguments,
                ActionClass::Read,
                tool,
                None,
            ));
        };
        let text = |v: Value| ToolOutput {
            content: vec![json!({"type": "text", "text": v.to_string()})],
            structured: Some(v),
            is_error: false,
        };
        if tool == ABANDON_TOOL {
            return match self.abandon_branch(session, branch).await {
                Ok(n) => CallOutcome::Completed {
                    output: text(json!({"branch": branch, "state": "abandoned", "discarded": n})),
                    action_id: None,
                },
                Err(e) => CallOutcome::Denied(Recovery::new(
                    settle_reason(&e),
                    ActionClass::Read,
                    tool,
                    None,
                )),
            };
        }
        // Already on a detached call task (`Gateway::call`).
        match self.promote_branch_attached(session, branch).await {
            Ok(released) => {
                let calls: Vec<Value> = released
                    .iter()
                    .map(|r| json!({"tool": r.tool, "result": r.outcome.to_json()}))
                    .collect();
                CallOutcome::Completed {
                    output: text(json!({"branch": branch, "state": "promoted", "released": calls})),
                    action_id: None,
                }
            }
            Err(e) => CallOutcome::Denied(Recovery::new(
                settle_reason(&e),
                ActionClass::Read,
                tool,
                None,
            )),
        }
    }

    /// Marginal exposure per observer for `session_id`'s task, from the trace in the audit
    /// log (Ghost Tool Calls §3: Δ_i = O_i(S) \ O_i(C)).
    ///
    /// # Errors
    /// [`GatewayError::Store`] if the audit log cannot be read.
    pub async fn exposure(&self, session_id: &str) -> Result<Vec<ObserverExposure>, GatewayError> {
        session_exposure(self.inner.store.as_ref(), session_id).await
    }
}

/// A fresh branch id for a call the runtime did not name a branch for: random, so that
/// replicas sharing the store never pick the same one.
fn fresh_branch() -> String {
    let mut b = [0u8; 12];
    if getrandom::fill(&mut b).is_err() {
        // Without randomness the name could collide with another replica's: a name no
        // runtime can promote (it is not a valid branch id) keeps the call held, never sent.
        return "call-unavailable!".to_owned();
    }
    format!("call-{}", hex::encode(b))
}

/// A settlement's store error as a gateway error: a branch settled the other way is a
/// conflict; anything else is the store failing.
fn settle_error(e: StoreError) -> GatewayError {
    match e {
        StoreError::Conflict(m) => GatewayError::Conflict(m),
        other => GatewayError::Store(other.to_string()),
    }
}

/// The reason code of a failed branch tool call.
fn settle_reason(e: &GatewayError) -> ReasonCode {
    match e {
        GatewayError::Store(_) => ReasonCode::StoreUnavailable,
        _ => ReasonCode::InvalidArguments,
    }
}

/// Read `session_id`'s trace events and branch settlements from the audit log and compute
/// each observer's marginal exposure (used by the HTTP API and `secureclaw trace exposure`).
///
/// # Errors
/// [`GatewayError::Store`] if the audit log cannot be read.
pub async fn session_exposure(
    store: &dyn AuditSink,
    session_id: &str,
) -> Result<Vec<ObserverExposure>, GatewayError> {
    let (events, branches) = session_trace(store, session_id).await?;
    Ok(exposure(&events, &branches))
}

/// The trace events and branch table of `session_id` as recorded in the audit log.
///
/// # Errors
/// [`GatewayError::Store`] if the audit log cannot be read.
pub async fn session_trace(
    store: &dyn AuditSink,
    session_id: &str,
) -> Result<(Vec<TraceEvent>, BranchTable), GatewayError> {
    let sid = super::audit_session_id(session_id);
    let mut events = Vec::new();
    let mut branches = BranchTable::default();
    let mut from = 0u64;
    loop {
        let page = store
            .audit_records(from, 1000)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        for r in &page {
            if r.event.kind != AuditKind::Speculation || r.event.session.as_deref() != Some(&sid) {
                continue;
            }
            let d = &r.event.detail;
            if let Some(e) = d.get("event") {
                if let Ok(e) = serde_json::from_value::<TraceEvent>(e.clone()) {
                    events.push(e);
                }
            } else if let (Some(b), Some(s)) =
                (d.get("branch").and_then(Value::as_str), d.get("state"))
                && let Ok(s) = serde_json::from_value::<BranchState>(s.clone())
            {
                let _ = branches.settle(b, s);
            }
        }
    }
    Ok((events, branches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Regression (issue 11 item 9): a confidence outside [0, 1] or not a number is refused.
    #[test]
    fn confidence_must_lie_in_the_unit_interval() {
        let meta = |v: Value| {
            let mut m = Map::new();
            m.insert(META_CONFIDENCE.to_owned(), v);
            CallMeta::from_meta(&m)
        };
        for bad in [
            json!(7),
            json!(-0.1),
            json!(1.000_001),
            json!("0.9"),
            json!(null),
        ] {
            assert!(meta(bad.clone()).is_err(), "{bad} accepted");
        }
        for good in [json!(0), json!(0.5), json!(1)] {
            assert!(meta(good.clone()).is_ok(), "{good} refused");
        }
    }
}
