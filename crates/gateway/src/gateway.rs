//! The gateway proper: sessions, read path, write path and operator operations.
//!
//! This file holds the gateway's types, its construction ([`Gateway::start`]) and the
//! top-level dispatch of a tool call (rate limits, then the read path or preview → commit).
//! The rest is split along its seams, each an `impl Gateway` block of its own (issue 13
//! item 6):
//!
//! - `sessions`: sessions and their task envelopes, a session's own handles;
//! - `targets`: argument validation, the canonical request, targets with their anchoring and
//!   provenance, grants and amount checks;
//! - `state`: the session's task state in the store (seen and protected objects, the written
//!   set, released handles, read amounts);
//! - `read`: the read path, handle resolution and the declassification of every result;
//! - `preview` and `commit`: the write path (preview → accept → execute);
//! - `approvals` and `display`: trusted confirmation and what the human is shown;
//! - `audit`: the audit log;
//! - `limits`, `speculation`, `telemetry`, `group`, `amounts`: per-session limits, the
//!   speculative dispatcher, metrics, the group-commit writer and the amounts of financial
//!   effects.

use crate::catalog::{Catalog, ToolEntry};
use crate::config::GatewayConfig;
use crate::executor::{ExecError, Executor};
use crate::upstream::{Connector, ToolOutput};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::canonical::CanonicalRequest;
use secureclaw_core::classify::Classifier;
use secureclaw_core::handle::{HandleDenial, HandleRecord};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyEngine, PolicyRequest};
use secureclaw_core::recovery::{ActionClass, Limit, ReasonCode, Recovery};
use secureclaw_core::store::{ActionRecord, SessionRecord, Store};
use secureclaw_core::time::UnixMillis;
use serde::Serialize;
use serde_json::{Map, Value, json};
use state::WrittenCache;
use std::sync::Arc;
use std::time::Duration;

mod amounts;
pub mod approvals;
mod audit;
mod commit;
mod display;
mod grants;
mod group;
mod limits;
pub mod notify;
pub mod pinning;
mod preview;
mod read;
mod request_state;
pub mod retention;
mod sessions;
mod speculation;
mod state;
mod targets;
mod telemetry;
pub use approvals::decide_approval;
pub use audit::audit_session_id;
pub use display::{describe_handles, reveal_for_approver};
pub use grants::{
    GrantTerms, GrantTermsError, GrantView, MAX_GRANT_MS, MAX_GRANT_USES, approve_with_grant,
    list_grants, parse_duration, revoke_grant,
};
pub use request_state::RetryAdmission;
pub use speculation::{
    ABANDON_TOOL, CallMeta, META_APPROVAL, META_BRANCH, META_CONFIDENCE, META_MODE, PROMOTE_TOOL,
    Released, session_exposure, session_trace, valid_branch,
};
pub(crate) use telemetry::UpstreamLatency;

/// Source of the current time (injected so tests can move it).
pub type Clock = Arc<dyn Fn() -> UnixMillis + Send + Sync>;

/// The system clock.
#[must_use]
pub fn system_clock() -> Clock {
    Arc::new(|| {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        UnixMillis(ms)
    })
}

/// Errors of operator operations and start-up (tool calls never return `Err`: they return a
/// [`CallOutcome`] with a recovery).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// An upstream failed at start-up.
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// The store failed.
    #[error("store unavailable: {0}")]
    Store(String),
    /// Not found.
    #[error("`{0}` not found")]
    NotFound(String),
    /// A state conflict (approval already decided, …).
    #[error("{0}")]
    Conflict(String),
    /// Keys are missing.
    #[error("key ring: {0}")]
    Keys(String),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The tool catalog cannot be built (colliding or confusable names, invalid upstream id).
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
}

/// Result of a tool call as the runtime sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran; the output is declassified.
    Completed {
        /// Declassified output.
        output: ToolOutput,
        /// Action id for effectful calls.
        action_id: Option<ActionId>,
    },
    /// Waiting for a trusted confirmation; the recovery names the action id.
    Pending(Recovery),
    /// Denied, with a recovery.
    Denied(Recovery),
    /// A pre-commit call held by the privacy contract until its branch is promoted (then it
    /// runs as committed) or abandoned (then it is discarded unsent); the recovery names the
    /// branch. Nothing was sent.
    Deferred(Recovery),
    /// A pre-commit call answered by the trusted local substitute (SHADOW): the provider saw
    /// nothing; the output is not the provider's answer.
    Shadowed {
        /// The substitute's (declassified) output.
        output: ToolOutput,
    },
}

impl CallOutcome {
    /// JSON form for the wire:
    /// `{"status":"completed","content":[…],"structured_content":…,"is_error":…,"action_id":…}`,
    /// `{"status":"shadowed",…same fields…}`, or `{"status":"pending_confirmation"|"denied"|
    /// "deferred","recovery":{…}}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            CallOutcome::Completed { output, action_id } => json!({
                "status": "completed",
                "content": output.content,
                "structured_content": output.structured,
                "is_error": output.is_error,
                "action_id": action_id,
            }),
            CallOutcome::Shadowed { output } => json!({
                "status": "shadowed",
                "content": output.content,
                "structured_content": output.structured,
                "is_error": output.is_error,
            }),
            CallOutcome::Pending(r) => json!({"status": "pending_confirmation", "recovery": r}),
            CallOutcome::Denied(r) => json!({"status": "denied", "recovery": r}),
            CallOutcome::Deferred(r) => json!({"status": "deferred", "recovery": r}),
        }
    }
}

/// Result of an explicit preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviewOutcome {
    /// The action id to commit.
    pub action_id: ActionId,
    /// The sealed authorization artifact (also issued for denials; it authorizes nothing).
    pub artifact: String,
    /// `allow`, `confirm` or `deny`.
    pub decision: PreviewDecision,
    /// Binding digest of the canonical request.
    pub binding: BindingDigest,
    /// Recovery for `confirm` and `deny`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// The policy's answer to a preview, as the runtime sees it (serialized `allow`, `confirm`,
/// `deny`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviewDecision {
    /// The artifact authorizes the commit as is.
    Allow,
    /// The artifact authorizes the commit once a trusted confirmer approves it.
    Confirm,
    /// The artifact authorizes nothing; the recovery says why.
    Deny,
}

impl PreviewDecision {
    /// The decision a policy answer gives.
    #[must_use]
    pub fn of(decision: &PolicyDecision) -> Self {
        match decision {
            PolicyDecision::Allow { .. } => Self::Allow,
            PolicyDecision::Confirm { .. } => Self::Confirm,
            PolicyDecision::Deny { .. } => Self::Deny,
        }
    }

    /// `allow`, `confirm` or `deny` (the wire and audit form).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Confirm => "confirm",
            Self::Deny => "deny",
        }
    }
}

impl std::fmt::Display for PreviewDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a preview was not issued: a reason to deny with, or a per-session limit.
#[derive(Debug, Clone, Copy)]
enum Refused {
    Deny(ReasonCode),
    Limit(Limit),
}

impl From<ReasonCode> for Refused {
    fn from(reason: ReasonCode) -> Self {
        Refused::Deny(reason)
    }
}

/// Everything a preview computed, for the commit that may follow in the same call.
struct Prepared {
    entry: ToolEntry,
    request: CanonicalRequest,
    handle_records: Vec<HandleRecord>,
    /// The task's grant this call would use: its key (the grant entry) and how many
    /// unconfirmed uses it allows (`None`: unlimited).
    grant: Option<(String, Option<u64>)>,
    /// Why a grant that names this tool does not cover this call (shown to the approver and
    /// recorded with the decision): `grant_exhausted`, `amount_unanchored`,
    /// `amount_over_ceiling`.
    grant_withheld: Option<&'static str>,
    /// A store effect naming a protected object (or the lookup failed: fail closed). Its
    /// objects are all recorded protected before it runs (protection spreads to a move's
    /// destination, a copy, …).
    names_protected: bool,
    /// The protected-object lookup failed for some object of a store effect: the call is held
    /// at preview and refused (`store_unavailable`) at commit, and nothing is recorded.
    protection_unknown: bool,
}

/// The records of a preview that the policy allowed at once, written together with the
/// reservation ([`secureclaw_core::store::EffectStore::record_and_reserve`], issue 14 item 2):
/// the action record and its preview and decision audit records. If the commit is refused
/// before the reservation, they are written on their own before the refusal is audited.
struct Deferred {
    action: ActionRecord,
    events: Vec<AuditEvent>,
    /// This effect is dispatching ([`Dispatching`]) until the commit records its outcome
    /// (held for its `Drop`).
    #[expect(
        dead_code,
        reason = "held for its Drop: the entry leaves the set with it"
    )]
    dispatching: Option<Dispatching>,
}

/// The gateway. Cheap to clone (shared state behind an `Arc`).
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Arc<KeyRing>,
    store: Arc<dyn Store>,
    policy: Arc<dyn PolicyEngine>,
    config: GatewayConfig,
    classifier: Classifier,
    clock: Clock,
    catalog: Catalog,
    executor: Executor,
    speculation: speculation::Speculation,
    /// Actions each session has waiting (`max_pending_per_session`).
    pending: limits::PendingSlots,
    /// Call rates per session and per (session, tool).
    rates: limits::RateLimiter,
    /// Per session: this process's copy of the session's written set, refreshed from the
    /// store (only the rows after `seq`) before every decision that reads it. The store is the
    /// truth, shared by every replica ([`secureclaw_core::store::TaskStateStore`]): grant uses,
    /// read amounts and written values live there, not in this process.
    written_cache: std::sync::Mutex<std::collections::HashMap<String, WrittenCache>>,
    /// Prometheus metrics and the approve command (see `telemetry`).
    metrics: telemetry::Metrics,
    /// The group-commit writer: audit appends and ledger outcomes of concurrent callers share
    /// one transaction (issue 14 item 3).
    writer: group::GroupWriter,
    /// Detached calls still running ([`Gateway::drain`]).
    in_flight: Arc<InFlight>,
    /// Argument bytes each session has running (`max_in_flight_bytes_per_session`).
    in_flight_bytes: Arc<limits::InFlightBytes>,
    /// Effects this process is dispatching without a human, by (session, [`repeat_key`])
    /// ([`Dispatching`]).
    dispatching: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    /// The approval webhooks (`[gateway.approvals]`, [`notify`]).
    notifier: notify::Notifier,
}

/// An unconfirmed effect this process is dispatching, from its preview until its outcome is
/// recorded: an identical call (same session, same [`repeat_key`]) in that time may repeat
/// the effect — a client that timed out and retried, concurrent copies — so it waits for the
/// user like a call after an unknown outcome (red-team round 3: three concurrent identical
/// calls had three effects). The entry is removed when this guard is dropped.
struct Dispatching {
    set: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    key: (String, String),
}

impl Dispatching {
    /// Enter `(session, key)` (a [`repeat_key`]); `None` if an identical effect is already
    /// dispatching.
    fn enter(
        set: &Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
        session: &str,
        key: &str,
    ) -> Option<Self> {
        let key = (session.to_owned(), key.to_owned());
        let mut entries = set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.insert(key.clone()).then(|| Self {
            set: Arc::clone(set),
            key,
        })
    }

    /// Whether an identical effect is dispatching.
    fn running(
        set: &std::sync::Mutex<std::collections::HashSet<(String, String)>>,
        session: &str,
        key: &str,
    ) -> bool {
        set.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&(session.to_owned(), key.to_owned()))
    }
}

/// The key under which an effect counts as a repeat of one still [`Dispatching`]: SHA-256
/// (hex) of its upstream, tool and destination and of its arguments written
/// respelling-insensitively ([`respelling_insensitive`]). Two calls that differ only in
/// spelling — spacing, letter case, look-alike or invisible characters, a number written
/// as a string, with digit separators, a currency sign or another script's digits, array
/// order, extra empty arguments — have one key (red-team round 3 and its verification: each
/// such respelling ran a second payment while the first was running). A call with another
/// non-empty argument is another call. This is not a binding: the binding digest still binds
/// the exact request.
fn repeat_key(request: &CanonicalRequest) -> String {
    use sha2::{Digest as _, Sha256};
    let key = json!([
        request.intent.upstream,
        request.intent.tool,
        request.ctx.destination,
        respelling_insensitive(&Value::Object(request.inputs.arguments.clone())),
    ]);
    hex::encode(Sha256::digest(key.to_string().as_bytes()))
}

/// The first code point of each run of ten decimal digits, zero to nine, outside ASCII that
/// NFKC leaves alone (Arabic-Indic, Extended Arabic-Indic, NKo, Devanagari, Bengali,
/// Gurmukhi, Gujarati, Oriya, Tamil, Telugu, Kannada, Malayalam, Thai, Lao, Tibetan, Myanmar).
const DIGIT_ZEROS: &[u32] = &[
    0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xE50,
    0xED0, 0xF20, 0x1040,
];

/// `text` read as a number, if it is one however written: after NFKC, with other scripts'
/// digits, digit separators (`_`, `,`, `'`, spaces), a currency sign and a leading `+` taken
/// out.
fn as_number(text: &str) -> Option<f64> {
    let normalized = secureclaw_core::normalize::normalize(text);
    let mut plain = String::with_capacity(normalized.len());
    for c in normalized.trim().chars() {
        let code = u32::from(c);
        if let Some(zero) = DIGIT_ZEROS.iter().find(|z| (**z..**z + 10).contains(&code)) {
            plain.push(char::from_digit(code - zero, 10)?);
        } else if !matches!(c, '_' | ',' | '\'' | ' ' | '$' | '€' | '£' | '¥' | '+') {
            plain.push(c);
        }
    }
    plain.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// `value` with every string read as a person would — NFKC, invisible characters out,
/// confusables mapped to one skeleton (UTS #39: a Cyrillic `а` is a Latin `a`), letter case
/// folded, whitespace runs collapsed, trailing punctuation dropped — and strings and numbers
/// that denote the same number written alike ([`as_number`]); object keys folded the same way;
/// null, empty strings, arrays and objects dropped from objects (an extra empty argument is no
/// different call); arrays compared as multisets, a one-element array as its element; object
/// keys sorted, so the result serializes the same for any key order, at any depth.
fn respelling_insensitive(value: &Value) -> Value {
    fn fold(s: &str) -> String {
        // Lower case first: the skeleton maps some lower-case letters to sequences (`m` to
        // `rn`), so both sides must reach it in the same case.
        let lower = secureclaw_core::normalize::normalize(s).to_lowercase();
        let skeleton: String = unicode_security::skeleton(&lower).collect();
        skeleton
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end_matches(|c: char| c.is_ascii_punctuation())
            .to_owned()
    }
    fn number(n: f64) -> Value {
        Value::String(format!("#{n}"))
    }
    fn empty(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::String(s) => s.trim().is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::Bool(_) | Value::Number(_) => false,
        }
    }
    match value {
        Value::String(s) => as_number(s).map_or_else(|| Value::String(fold(s)), number),
        Value::Number(n) => n
            .as_f64()
            .map_or_else(|| Value::String(n.to_string()), number),
        Value::Array(items) => {
            let mut folded: Vec<Value> = items.iter().map(respelling_insensitive).collect();
            if folded.len() == 1 {
                return folded.pop().unwrap_or(Value::Null);
            }
            folded.sort_by_cached_key(Value::to_string);
            Value::Array(folded)
        }
        Value::Object(map) => {
            // Sorted here: `serde_json` keeps insertion order in this build (`preserve_order`),
            // so `{"to", "amount"}` and `{"amount", "to"}` would serialize apart (red-team).
            let sorted: std::collections::BTreeMap<String, Value> = map
                .iter()
                .map(|(k, v)| (fold(k).replace(' ', ""), respelling_insensitive(v)))
                .filter(|(_, v)| !empty(v))
                .collect();
            Value::Object(sorted.into_iter().collect())
        }
        Value::Bool(_) | Value::Null => value.clone(),
    }
}

impl Drop for Dispatching {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("executor", &self.inner.executor)
            .finish_non_exhaustive()
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if getrandom::fill(&mut b).is_err() {
        tracing::error!("operating system random source failed");
    }
    b
}

fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        tracing::error!("operating system random source failed");
    }
}

fn class(entry: Option<&ToolEntry>) -> ActionClass {
    match entry.map(|e| e.effect) {
        Some(EffectClass::Read) => ActionClass::Read,
        _ => ActionClass::Effect,
    }
}

/// Calls, commits and promotions running on their own tasks ([`Gateway::detached`]), so
/// that a shutdown can wait for them ([`Gateway::drain`]).
#[derive(Default)]
struct InFlight {
    running: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One detached task counted in [`InFlight`] until it ends (or panics).
struct InFlightGuard(Arc<InFlight>);

impl InFlightGuard {
    fn new(in_flight: &Arc<InFlight>) -> Self {
        in_flight
            .running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(Arc::clone(in_flight))
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self
            .0
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl Gateway {
    /// Run `work` (a call, a commit, a promotion) on its own task and wait for it, so that it
    /// runs to its end even if the caller's future is dropped: a client that closes its
    /// connection while the effect runs (an HTTP timeout shorter than the upstream's) can no
    /// longer leave a dispatched effect `reserved` in the ledger without its outcome, so that
    /// the identical re-issue ran again (red-team of 2026-12-03, `/v1/call`,
    /// `/v1/branches/…/promote`). Every front end is covered here, not only those whose
    /// library happens to spawn a task per request. The task is counted until it ends, so a
    /// shutdown can wait for it ([`Gateway::drain`]). A panic in `work` is answered with
    /// `failed()` (the ledger then holds the reservation, which start-up closes as
    /// `outcome_unknown`).
    async fn detached<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
        failed: impl FnOnce() -> T,
    ) -> T {
        use tracing::Instrument as _;
        let guard = InFlightGuard::new(&self.inner.in_flight);
        // Boxed once here, so that the task, its span and the spawn move a pointer rather than
        // the call's whole future (BENCHMARKS.md §12: moves of large futures were about half
        // of a read's CPU).
        let work = Box::pin(work);
        let task = async move {
            let out = work.await;
            drop(guard);
            out
        };
        match tokio::spawn(task.in_current_span()).await {
            Ok(out) => out,
            Err(e) => {
                tracing::error!(error = %e, "a call's task failed");
                failed()
            }
        }
    }

    /// The answer to a call whose task failed ([`Gateway::detached`]).
    fn task_failed(tool: &str) -> CallOutcome {
        CallOutcome::Denied(Recovery::new(
            ReasonCode::Internal,
            secureclaw_core::recovery::ActionClass::Effect,
            tool,
            None,
        ))
    }

    /// Wait until no call, commit or promotion is running ([`Gateway::detached`]), or
    /// `within` has passed; returns how many still run. For a front end that shuts down (a
    /// signal, the client closing its input): every effect already dispatched then gets its
    /// outcome recorded before the process exits. Then records queued without waiting (a
    /// read's result record) are written, for up to [`FLUSH_AT_EXIT`] more.
    pub async fn drain(&self, within: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle = self.inner.in_flight.idle.notified();
            let running = self
                .inner
                .in_flight
                .running
                .load(std::sync::atomic::Ordering::SeqCst);
            if running == 0 || tokio::time::timeout_at(deadline, idle).await.is_err() {
                // Records queued without waiting (a read's result record) are written before
                // the process exits.
                let _ = tokio::time::timeout(FLUSH_AT_EXIT, self.inner.writer.flush()).await;
                return self
                    .inner
                    .in_flight
                    .running
                    .load(std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// How long [`Gateway::drain`] waits for the records queued without waiting to be written.
pub const FLUSH_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Gateway {
    /// Start a gateway: connect every upstream of `upstreams` with `connector`, list their
    /// tools and build the catalog.
    ///
    /// The executor owns the connections the connector builds (SecureClaw paper §3.4;
    /// issue 13 item 5): the gateway hands none of them out, so nothing outside the executor
    /// can reach an upstream. Production passes [`crate::RmcpConnector`]. Reports dangling
    /// ledger reservations (crash between mark and execution) to the audit log; they are never
    /// executed again.
    ///
    /// # Errors
    /// [`GatewayError::Upstream`] if an upstream cannot be connected, cannot list its tools
    /// within `limits.upstream_startup_timeout_ms` or advertises a schema beyond the limits of
    /// [`crate::upstream::startup_tools`]; [`GatewayError::Catalog`] if two tools would share
    /// an exposed name, names are confusable or an upstream id is invalid; store errors.
    pub async fn start(
        keys: Arc<KeyRing>,
        store: Arc<dyn Store>,
        policy: Arc<dyn PolicyEngine>,
        config: GatewayConfig,
        upstreams: Vec<crate::config::UpstreamSpec>,
        connector: &dyn Connector,
        clock: Clock,
    ) -> Result<Self, GatewayError> {
        let startup = Duration::from_millis(config.limits.upstream_startup_timeout_ms);
        let metrics = telemetry::Metrics::new();
        let executor = Executor::new(
            upstreams,
            connector,
            startup,
            Duration::from_millis(config.limits.upstream_timeout_ms),
        )
        .await?
        .with_latency(metrics.upstream.clone());
        let mut listings = executor.startup_listings(startup).await?;
        // Pins compare what the upstream listed, before its prose is scrubbed for the runtime.
        let pin_events = pinning::check_at_start(
            store.as_ref(),
            &listings,
            config.pin,
            clock(),
            executor.quarantine(),
        )
        .await?;
        for (spec, _, tools) in &mut listings {
            for tool in tools.iter_mut() {
                let scrubbed =
                    crate::upstream::scrub_tool_metadata(tool, &config.summary.injection_markers);
                if scrubbed > 0 {
                    tracing::warn!(upstream = %spec.id, tool = %tool.name, replaced = scrubbed,
                        "tool description carried identifiers, secrets or injection markers; scrubbed before listing");
                }
            }
        }
        let catalog = Catalog::build(&listings, &config.tools)?;
        let classifier = Classifier {
            rules: config.classify.clone(),
        };
        config.validate().map_err(GatewayError::Config)?;
        for s in &config.speculation.substitutes {
            if let Some(with) = &s.with
                && catalog.get(with).is_none()
            {
                return Err(GatewayError::Config(format!(
                    "speculation substitute `{}` names `{with}`, which no upstream provides",
                    s.tool
                )));
            }
        }
        let speculation = speculation::Speculation::new(secureclaw_core::labeler::Labeler::new(
            config.speculation.labeler.clone(),
        ));
        let rates = limits::RateLimiter::new(limits::Rates {
            session_rate_per_s: config.limits.session_rate_per_s,
            session_burst: config.limits.session_burst,
            tool_rate_per_s: config.limits.tool_rate_per_s,
            tool_burst: config.limits.tool_burst,
        });
        let writer = group::GroupWriter::new(Arc::clone(&store));
        let notifier = notify::Notifier::new(&config.approvals)?;
        // Repeated plain reads are decided once per (caller, tool, policy set); everything
        // else still goes to the engine (issue 14 item 4, `decision_cache`).
        let policy: Arc<dyn PolicyEngine> =
            Arc::new(crate::decision_cache::DecisionCache::new(policy));
        let gw = Self {
            inner: Arc::new(Inner {
                keys,
                store,
                policy,
                config,
                classifier,
                clock,
                catalog,
                executor,
                speculation,
                pending: limits::PendingSlots::default(),
                rates,
                written_cache: std::sync::Mutex::default(),
                metrics,
                writer,
                in_flight: Arc::default(),
                in_flight_bytes: Arc::default(),
                dispatching: Arc::default(),
                notifier,
            }),
        };
        for ev in pin_events {
            gw.audit(ev)
                .await
                .map_err(|()| GatewayError::Store("audit append failed".into()))?;
        }
        let dangling = gw
            .inner
            .store
            .dangling_reservations()
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        for entry in dangling {
            tracing::warn!(action = %entry.action_id, "reserved action was never marked executed (crash?); its outcome is unknown and it will not run again");
            let mut ev = AuditEvent::new(AuditKind::CrashRecovery, gw.now());
            ev.action_id = Some(entry.action_id.0.clone());
            gw.audit(ev)
                .await
                .map_err(|()| GatewayError::Store("audit append failed".into()))?;
            // Its effect may have run: recorded `outcome_unknown`, so that the same tool in the
            // same session asks the user before it runs again (`outcome_unknown_repeat`), as
            // after any other unknown outcome (red-team round 2: after a SIGTERM mid-effect the
            // identical call ran a second time). The record comes first, so that a crash
            // between the two leaves the entry `reserved` and reported again. The mark is
            // conditional on the entry still being `reserved`: on PostgreSQL the replica that
            // reserved it may be alive after all (its lease lapsed under load) and settle it
            // between the listing and the mark; its own outcome then stands, next to this
            // record of what start-up found, and the start goes on.
            match gw
                .inner
                .store
                .mark_outcome_unknown(&entry.action_id, "crash_recovery", gw.now())
                .await
            {
                Ok(()) => {}
                Err(secureclaw_core::store::StoreError::Conflict(state)) => {
                    tracing::info!(action = %entry.action_id, %state, "a dangling reservation was settled by its owner during start-up");
                }
                Err(e) => return Err(GatewayError::Store(e.to_string())),
            }
        }
        Ok(gw)
    }

    /// The recovery template for `reason`, with its draft step naming the draft tool of the
    /// denied tool's own upstream (a visible effect tool the operator declared target-less and
    /// that is not destructive, so the policy lets it run without a human) or dropped if that
    /// upstream has none: a mail denied by one upstream is never steered into another
    /// provider's drafts, which would carry its content to a third party.
    fn recovery(
        &self,
        reason: ReasonCode,
        class: ActionClass,
        tool: &str,
        action_id: Option<&str>,
    ) -> Recovery {
        let upstream = self.inner.catalog.get(tool).map(|e| e.upstream.as_str());
        let draft = self
            .inner
            .catalog
            .iter()
            .filter(|e| {
                Some(e.upstream.as_str()) == upstream
                    && e.effect != EffectClass::Read
                    && !e.hidden
                    && !e.destructive
                    && e.targets_declared
                    && e.targets.is_empty()
            })
            .map(|e| e.exposed.as_str())
            .min();
        // The runtime is told which action to have approved, never where the gateway keeps
        // its state or which database it uses (new-user trial: an agent with a shell could
        // run the command itself); the operator's log line carries the full command.
        Recovery::new(reason, class, tool, action_id).with_draft_tool(draft)
    }

    fn now(&self) -> UnixMillis {
        (self.inner.clock)()
    }

    /// The policy set's digest.
    #[must_use]
    pub fn policy_digest(&self) -> String {
        self.inner.policy.digest()
    }

    /// How long an upstream call may take (the configured `upstream_timeout_ms`): a front end
    /// that closes waits this long (and a little more) for calls still running, so that each
    /// gets its reply and its outcome is recorded.
    #[must_use]
    pub fn upstream_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.inner.config.limits.upstream_timeout_ms)
    }

    /// The key ring.
    #[must_use]
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.inner.keys
    }

    /// Tools visible to `caller`: the policy decides visibility with the same rules as calls
    /// (a tool whose every call would be denied is not listed).
    /// Quarantined tools ([`crate::pins`]) are not listed.
    pub async fn list_tools(&self, caller: &str) -> Vec<ToolEntry> {
        self.refresh_quarantine().await;
        let quarantine = self.inner.executor.quarantine();
        self.inner
            .catalog
            .iter()
            .filter(|e| !quarantine.contains(&e.upstream, &e.name))
            .filter(|e| {
                let req = PolicyRequest {
                    caller: caller.to_owned(),
                    upstream: e.upstream.clone(),
                    tool: e.name.clone(),
                    effect: e.effect,
                    known_tool: true,
                    destructive: e.destructive,
                    financial: e.financial,
                    granted: false,
                    sink: e.sink,
                    targets_declared: e.targets_declared,
                    targets: vec![],
                    handles: vec![],
                    listing: true,
                };
                !matches!(self.inner.policy.decide(&req), PolicyDecision::Deny { .. })
            })
            .cloned()
            .collect()
    }

    async fn deny(
        &self,
        session: &SessionRecord,
        tool: &str,
        entry: Option<&ToolEntry>,
        reason: ReasonCode,
        action: Option<&ActionId>,
    ) -> CallOutcome {
        let mut ev = self.event(AuditKind::Denial, session, tool);
        ev.reason = Some(reason);
        ev.action_id = action.map(|a| a.0.clone());
        // A failed audit append cannot make a denial less safe; it is logged.
        let _ = self.audit(ev).await;
        // Runtime-supplied text stays out of the log: a name no upstream provides is `unknown`.
        let logged = if self.inner.catalog.get(tool).is_some() {
            tool
        } else {
            "unknown"
        };
        tracing::debug!(tool = logged, reason = %reason, "denied");
        CallOutcome::Denied(self.recovery(reason, class(entry), tool, action.map(|a| a.0.as_str())))
    }

    /// [`Gateway::deny`] of a call to `tool` (with its catalog entry, if any) before any action
    /// was recorded for it.
    async fn deny_call(
        &self,
        session: &SessionRecord,
        tool: &str,
        reason: ReasonCode,
    ) -> CallOutcome {
        self.deny(session, tool, self.inner.catalog.get(tool), reason, None)
            .await
    }

    async fn exec_failure(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        err: &ExecError,
        action: Option<&ActionId>,
    ) -> CallOutcome {
        let reason = match err {
            // An effect that was sent and never answered may have run: never "try again".
            e if e.outcome_unknown() && entry.effect != EffectClass::Read => {
                ReasonCode::OutcomeUnknown
            }
            ExecError::Handle(HandleDenial::SinkForbidden) => ReasonCode::HandleSinkForbidden,
            ExecError::Handle(HandleDenial::Unavailable) => ReasonCode::HandleUnavailable,
            ExecError::Store => ReasonCode::StoreUnavailable,
            ExecError::Timeout => ReasonCode::UpstreamTimeout,
            ExecError::Upstream(_) | ExecError::UnknownUpstream(_) => ReasonCode::UpstreamError,
            ExecError::DefinitionChanged => ReasonCode::ToolDefinitionChanged,
        };
        // Only the error class: an upstream message may quote arguments after handles were
        // resolved, i.e. protected values.
        tracing::warn!(tool = %entry.exposed, error = err.class(), "execution failed");
        self.deny(session, &entry.exposed, Some(entry), reason, action)
            .await
    }

    /// Dispatch of a call the privacy monitor let through ([`Gateway::call`], the only public
    /// entry point for a tool call): read tools are forwarded and declassified; effectful
    /// tools are previewed and, if the policy allows without confirmation, committed at once.
    /// With `approval` (the action id of an approved confirmation, from
    /// `_meta["dev.secureclaw/approval"]`), the call is committed only if it is exactly the
    /// approved request.
    ///
    /// Every call first takes a token from the session's rate limits (`session_rate_per_s`,
    /// `tool_rate_per_s`); past them it is refused with [`ReasonCode::LimitExceeded`] and a
    /// retry hint, and nothing is sent or stored.
    async fn dispatch(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        approval: Option<&ActionId>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let outcome = match self.throttle(session, tool).await {
            Some(refused) => refused,
            None => {
                self.call_unthrottled(session, tool, arguments, approval)
                    .await
            }
        };
        self.observe_call(session, tool, &outcome, started);
        outcome
    }

    /// The approved, never committed action of `session` bound to exactly this prepared
    /// request, approved within `confirmation_ttl_ms` (older confirmations no longer count),
    /// if any. A store failure is `None`: the call then goes through preview as usual.
    async fn approved_unused(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
    ) -> Option<ActionId> {
        let binding = secureclaw_core::binding::bind(&self.inner.keys, &prepared.request).ok()?;
        let since = UnixMillis(
            self.now()
                .0
                .saturating_sub(self.inner.config.limits.confirmation_ttl_ms),
        );
        self.inner
            .store
            .approved_unused(&session.id, &binding, since)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "looking up an approved action failed");
                None
            })
    }

    /// [`Gateway::dispatch`] for a call whose rate was already accounted for.
    pub(crate) async fn call_unthrottled(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: Map<String, Value>,
        approval: Option<&ActionId>,
    ) -> CallOutcome {
        if let Some(action_id) = approval {
            return self
                .commit_approved(session, tool, arguments, action_id)
                .await;
        }
        let (prepared, policy_request) = match self.prepare(session, tool, &arguments).await {
            Ok(p) => p,
            Err(reason) => {
                return self
                    .deny(session, tool, self.inner.catalog.get(tool), reason, None)
                    .await;
            }
        };
        let entry = prepared.entry.clone();
        // The identical re-issue of a call the user approved in this session commits that
        // approval, with or without `_meta` (a model-driven client cannot set `_meta`): the
        // approval is bound to exactly this request, so naming it adds nothing.
        if entry.effect == EffectClass::Effect
            && let Some(action_id) = self.approved_unused(session, &prepared).await
        {
            return self
                .commit_approved(session, tool, arguments, &action_id)
                .await;
        }
        if entry.effect == EffectClass::Read {
            // Boxed, like the effect path below: each path's future is allocated when taken,
            // so neither is as large as both (BENCHMARKS.md §12).
            return Box::pin(self.read_call(
                session,
                tool,
                &entry,
                &prepared,
                &policy_request,
                &arguments,
            ))
            .await;
        }
        Box::pin(self.effect_call(session, tool, &entry, prepared, &policy_request)).await
    }

    /// The effect path of [`Gateway::call_unthrottled`]: preview, then commit at once if the
    /// policy allows without confirmation; otherwise the preview's recovery.
    async fn effect_call(
        &self,
        session: &SessionRecord,
        tool: &str,
        entry: &crate::catalog::ToolEntry,
        prepared: Prepared,
        policy_request: &PolicyRequest,
    ) -> CallOutcome {
        let entry = entry.clone();
        let (preview, deferred) = match self
            .preview_prepared(session, &prepared, policy_request, false)
            .await
        {
            Ok(p) => p,
            Err(Refused::Deny(reason)) => {
                return self.deny(session, tool, Some(&entry), reason, None).await;
            }
            Err(Refused::Limit(limit)) => {
                return self.refuse_limit(session, tool, limit, None, Some(1)).await;
            }
        };
        match preview.decision {
            PreviewDecision::Allow => {
                self.commit_prepared(
                    session,
                    prepared,
                    &preview.action_id,
                    Some(&preview.artifact),
                    deferred,
                )
                .await
            }
            _ => match preview.recovery {
                Some(r)
                    if matches!(
                        r.reason,
                        ReasonCode::ConfirmationRequired
                            | ReasonCode::ProtectedObject
                            | ReasonCode::ObjectUnread
                            | ReasonCode::OutcomeUnknownRepeat
                    ) =>
                {
                    CallOutcome::Pending(r)
                }
                Some(r) => CallOutcome::Denied(r),
                None => {
                    self.deny(
                        session,
                        tool,
                        Some(&entry),
                        ReasonCode::Internal,
                        Some(&preview.action_id),
                    )
                    .await
                }
            },
        }
    }
}

#[cfg(test)]
mod repeat_tests {
    use super::respelling_insensitive;
    use serde_json::json;

    /// Respellings of one call compare equal (red-team: each ran a second payment while the
    /// first was running); another amount, recipient or argument does not.
    #[test]
    fn respellings_of_one_call_compare_equal() {
        let call = respelling_insensitive(
            &json!({"to": "acme@example.com", "amount": 100, "items": ["a", "b"], "note": "Pay  now"}),
        );
        for same in [
            json!({"to": "ACME@Example.com ", "amount": "100", "items": ["b", "a"], "note": "pay now."}),
            json!({"to": "ａｃｍｅ@example.com", "amount": "1_00", "items": ["a", "b"], "note": "PAY now", "memo": ""}),
            json!({"to": "\u{430}cme@example.com", "amount": "\u{661}\u{660}\u{660}", "items": ["a", "b"], "note": "pay now"}),
            json!({"To": "ac\u{200b}me@example.com", "amount": "$100.00", "items": ["a", "b"], "note": "pay now", "tags": [], "x": null}),
            json!({"to": ["acme@example.com"], "amount": "１００", "items": ["a", "b"], "note": "pay now"}),
            json!({"note": "pay now", "items": ["a", "b"], "amount": 100, "to": "acme@example.com"}),
        ] {
            assert_eq!(
                respelling_insensitive(&same).to_string(),
                call.to_string(),
                "{same}"
            );
        }
        // Key order at any depth serializes alike (what the repeat key hashes).
        assert_eq!(
            respelling_insensitive(&json!({"m": {"b": 1, "a": 2}, "z": 0})).to_string(),
            respelling_insensitive(&json!({"z": 0, "m": {"a": 2, "b": 1}})).to_string()
        );
        for other in [
            json!({"to": "acme2@example.com", "amount": 100, "items": ["a", "b"], "note": "pay now"}),
            json!({"to": "acme@example.com", "amount": 101, "items": ["a", "b"], "note": "pay now"}),
            json!({"to": "acme@example.com", "amount": 100, "items": ["a"], "note": "pay now"}),
            json!({"to": "acme@example.com", "amount": 100, "items": ["a", "b"], "note": "pay now", "memo": "retry"}),
        ] {
            assert_ne!(respelling_insensitive(&other), call, "{other}");
        }
    }
}
