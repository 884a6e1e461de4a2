//! The operator's side (issue 15): Prometheus metrics, one log line per decision, the
//! `tool_call` span of each call (the spans are listed in [`crate::otel`]), the approve
//! command and the rules that match no tool.
//!
//! Nothing here carries an argument value. Label values are a tool name from the catalog
//! (`unknown` for a name no upstream provides: the runtime chooses that string), a decision,
//! a reason code, an upstream id or a fixed operation name. The decision log line carries the
//! tool, its upstream, the decision, the reason code, the action id, the session's audit
//! digest (`ses#…`, never the session id, which is the runtime's bearer credential) and the
//! latency.
//!
//! Metrics live in a [`Registry`] owned by the gateway (no global state), rendered in the
//! OpenMetrics text format by [`Gateway::render_metrics`]:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `secureclaw_calls_total` | counter | `tool`, `decision`, `reason` |
//! | `secureclaw_pending_approvals` | gauge (read from the store at scrape) | — |
//! | `secureclaw_preview_duration_seconds` | histogram | — |
//! | `secureclaw_commit_duration_seconds` | histogram | — |
//! | `secureclaw_upstream_call_duration_seconds` | histogram | `upstream` |
//! | `secureclaw_store_errors_total` | counter | `operation` (`audit_append`, `call`, `scrape`) |
//! | `secureclaw_upstream_restarts_total` | counter | `upstream` |

use super::{CallOutcome, Gateway, GatewayError, audit_session_id};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use secureclaw_core::store::{ApprovalState, SessionRecord};
use std::time::Instant;

/// Labels of `secureclaw_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    decision: &'static str,
    reason: &'static str,
}

/// The `upstream` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct UpstreamLabel {
    upstream: String,
}

/// The `operation` label of store errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets in seconds: 0.5 ms doubling up to about 65 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

/// Timer of one upstream call's latency (observed in [`UpstreamLatency::observe`]).
#[derive(Clone)]
pub(crate) struct UpstreamLatency(HistogramFamily<UpstreamLabel>);

impl UpstreamLatency {
    /// Record `started.elapsed()` for `upstream`.
    pub(crate) fn observe(&self, upstream: &str, started: Instant) {
        self.0
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

impl std::fmt::Debug for UpstreamLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamLatency")
    }
}

/// The gateway's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    pending: Gauge,
    preview: Histogram,
    commit: Histogram,
    pub(crate) upstream: UpstreamLatency,
    store_errors: Family<OperationLabel, Counter>,
    restarts: Family<UpstreamLabel, Counter>,
    /// Serializes scrapes (the restart counters are brought up to date at each).
    scrape: tokio::sync::Mutex<()>,
    /// `secureclaw approvals approve` with the options that find this gateway's state (set
    /// by the binary: `--state-dir`, `--store`), for the pending log line and the recovery.
    pub(crate) approve_command: std::sync::OnceLock<String>,
    /// Who decides approvals when this gateway runs embedded in a program that answers them
    /// itself (an evaluation lane's simulated user over a temporary store): then no command
    /// is advised, since no operator can reach that state.
    pub(crate) approvals_in_process: std::sync::OnceLock<String>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "secureclaw_calls",
            "Tool calls by tool, decision and reason code",
            calls.clone(),
        );
        let pending = Gauge::default();
        registry.register(
            "secureclaw_pending_approvals",
            "Actions waiting for a trusted confirmation (read from the store at scrape)",
            pending.clone(),
        );
        let preview = latency_histogram();
        registry.register(
            "secureclaw_preview_duration_seconds",
            "PREVIEW latency: canonicalize, decide, seal, record",
            preview.clone(),
        );
        let commit = latency_histogram();
        registry.register(
            "secureclaw_commit_duration_seconds",
            "COMMIT latency: acceptance, ledger, upstream call, declassification",
            commit.clone(),
        );
        let upstream: HistogramFamily<UpstreamLabel> =
            Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "secureclaw_upstream_call_duration_seconds",
            "Latency of one upstream tools/call",
            upstream.clone(),
        );
        let store_errors = Family::<OperationLabel, Counter>::default();
        // Every operation's series exists from the start at 0, so that an alert rule sees 0,
        // not an absent series (new-user finding).
        for operation in ["audit_append", "call", "scrape"] {
            let _ = store_errors.get_or_create(&OperationLabel { operation });
        }
        registry.register(
            "secureclaw_store_errors",
            "Store failures: failed audit appends, calls refused with store_unavailable, failed scrapes",
            store_errors.clone(),
        );
        let restarts = Family::<UpstreamLabel, Counter>::default();
        registry.register(
            "secureclaw_upstream_restarts",
            "Reconnections to an upstream after a transport failure (a new child process or HTTP session)",
            restarts.clone(),
        );
        Self {
            registry,
            calls,
            pending,
            preview,
            commit,
            upstream: UpstreamLatency(upstream),
            store_errors,
            restarts,
            scrape: tokio::sync::Mutex::new(()),
            approve_command: std::sync::OnceLock::new(),
            approvals_in_process: std::sync::OnceLock::new(),
        }
    }

    /// Count a failed audit append.
    pub(crate) fn audit_append_failed(&self) {
        self.store_errors
            .get_or_create(&OperationLabel {
                operation: "audit_append",
            })
            .inc();
    }

    /// A timer that records the PREVIEW latency when dropped.
    pub(crate) fn preview_timer(&self) -> StageTimer<'_> {
        StageTimer {
            histogram: &self.preview,
            started: Instant::now(),
        }
    }

    /// A timer that records the COMMIT latency when dropped.
    pub(crate) fn commit_timer(&self) -> StageTimer<'_> {
        StageTimer {
            histogram: &self.commit,
            started: Instant::now(),
        }
    }
}

/// Records the time from its creation to its drop in a histogram.
pub(crate) struct StageTimer<'a> {
    histogram: &'a Histogram,
    started: Instant,
}

impl Drop for StageTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

/// The decision and reason code of an outcome, as label values.
fn decision_of(outcome: &CallOutcome) -> (&'static str, &'static str, Option<&str>) {
    match outcome {
        CallOutcome::Completed { action_id, .. } => {
            ("allow", "none", action_id.as_ref().map(|a| a.0.as_str()))
        }
        CallOutcome::Shadowed { .. } => ("shadow", "none", None),
        CallOutcome::Pending(r) => ("pending", r.reason.as_str(), r.action_id.as_deref()),
        CallOutcome::Denied(r) => ("deny", r.reason.as_str(), r.action_id.as_deref()),
        CallOutcome::Deferred(r) => ("defer", r.reason.as_str(), r.action_id.as_deref()),
    }
}

/// The decision, reason code and action id of an explicit preview, as label values:
/// `previewed` when allowed (its commit is counted on its own), `pending` when it waits for a
/// confirmation, `deny` otherwise.
fn preview_decision_of(
    result: &Result<super::PreviewOutcome, secureclaw_core::recovery::Recovery>,
) -> (&'static str, &'static str, Option<&str>) {
    match result {
        Ok(p) => (
            match p.decision {
                super::PreviewDecision::Allow => "previewed",
                super::PreviewDecision::Confirm => "pending",
                super::PreviewDecision::Deny => "deny",
            },
            p.recovery.as_ref().map_or("none", |r| r.reason.as_str()),
            Some(p.action_id.0.as_str()),
        ),
        Err(r) => ("deny", r.reason.as_str(), r.action_id.as_deref()),
    }
}

/// `value` quoted for a POSIX shell when it holds anything but safe characters.
pub(crate) fn shell_quote(value: &str) -> String {
    let safe = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c));
    if safe {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

impl Gateway {
    /// Set the command an operator runs to approve an action of this gateway, without the
    /// action id: `secureclaw --state-dir DIR [--store URL] approvals approve`. Named in the
    /// operator's log line of every pending action (never in what the runtime receives: its
    /// recovery says `secureclaw approvals approve act_…`). Only the first call takes effect.
    /// Default: `secureclaw approvals approve`.
    ///
    /// `state_dir` is made absolute (the command works from any directory) and shell-quoted
    /// here; `store` is put in as given (a shell word the caller prepared, such as
    /// `"$SECURECLAW_STORE"`: it must not carry a password).
    pub fn set_approve_command(&self, state_dir: &std::path::Path, store: Option<&str>) {
        let state_dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_owned());
        let mut cmd = format!(
            "secureclaw --state-dir {}",
            shell_quote(&state_dir.display().to_string())
        );
        if let Some(store) = store {
            cmd.push_str(&format!(" --store {store}"));
        }
        cmd.push_str(" approvals approve");
        let _ = self.inner.metrics.approve_command.set(cmd);
    }

    /// Declare that approvals of this gateway are decided in process by `decider` (the
    /// embedding program, such as an evaluation lane's simulated user over a temporary store
    /// that no operator can reach): a pending action is then logged at `info` as waiting for
    /// `decider`, with no `secureclaw approvals approve` advice (which would name a state no
    /// command can open). Only the first call takes effect.
    pub fn set_approvals_in_process(&self, decider: &str) {
        let _ = self
            .inner
            .metrics
            .approvals_in_process
            .set(decider.to_owned());
    }

    /// The approve command (see [`Gateway::set_approve_command`]).
    pub(crate) fn approve_command(&self) -> &str {
        self.inner
            .metrics
            .approve_command
            .get()
            .map_or("secureclaw approvals approve", String::as_str)
    }

    /// Count and log one decided tool call (module docs): `tool` is the name the runtime
    /// called, labelled only if the catalog knows it.
    pub(crate) fn observe_call(
        &self,
        session: &SessionRecord,
        tool: &str,
        outcome: &CallOutcome,
        started: Instant,
    ) {
        let (decision, reason, action) = decision_of(outcome);
        self.observe(session, tool, decision, reason, action, started);
    }

    /// Count and log an explicit PREVIEW: `previewed` when allowed (its commit is counted
    /// on its own), `pending` when it waits for a confirmation, `deny` otherwise.
    pub(crate) fn observe_preview(
        &self,
        session: &SessionRecord,
        tool: &str,
        result: &Result<super::PreviewOutcome, secureclaw_core::recovery::Recovery>,
        started: Instant,
    ) {
        let (decision, reason, action) = preview_decision_of(result);
        self.observe(session, tool, decision, reason, action, started);
    }

    /// The label of `tool` (a name the runtime chose): its catalog name and upstream, the
    /// branch tools as themselves, anything else `unknown`.
    pub(super) fn tool_label(&self, tool: &str) -> (String, &str) {
        match self.inner.catalog.get(tool) {
            Some(e) => (e.exposed.clone(), e.upstream.as_str()),
            None if tool == super::PROMOTE_TOOL || tool == super::ABANDON_TOOL => {
                (tool.to_owned(), "secureclaw")
            }
            None => ("unknown".to_owned(), ""),
        }
    }

    /// The `tool_call` span of one call, preview or commit ([`crate::otel`]): the tool's
    /// label and upstream now, its decision, reason code and monitor action when known. Its
    /// parent is the request's `traceparent` ([`crate::otel::with_parent`]), if any.
    pub(crate) fn call_span(&self, operation: &'static str, tool: &str) -> tracing::Span {
        let (label, upstream) = self.tool_label(tool);
        let span = tracing::info_span!(
            "tool_call",
            otel.kind = "server",
            operation,
            tool = %label,
            upstream,
            decision = tracing::field::Empty,
            reason = tracing::field::Empty,
            monitor_action = tracing::field::Empty,
        );
        crate::otel::adopt_parent(&span);
        span
    }

    /// Record a call's decision and reason code on its `tool_call` span.
    pub(crate) fn record_outcome(span: &tracing::Span, outcome: &CallOutcome) {
        let (decision, reason, _) = decision_of(outcome);
        span.record("decision", decision).record("reason", reason);
    }

    /// Record an explicit preview's decision and reason code on its `tool_call` span
    /// (the values of [`Gateway::observe_preview`]).
    pub(crate) fn record_preview(
        span: &tracing::Span,
        result: &Result<super::PreviewOutcome, secureclaw_core::recovery::Recovery>,
    ) {
        let (decision, reason, _) = preview_decision_of(result);
        span.record("decision", decision).record("reason", reason);
    }

    fn observe(
        &self,
        session: &SessionRecord,
        tool: &str,
        decision: &'static str,
        reason: &'static str,
        action: Option<&str>,
        started: Instant,
    ) {
        let (label, upstream) = self.tool_label(tool);
        let m = &self.inner.metrics;
        m.calls
            .get_or_create(&CallLabels {
                tool: label.clone(),
                decision,
                reason,
            })
            .inc();
        if reason == "store_unavailable" {
            m.store_errors
                .get_or_create(&OperationLabel { operation: "call" })
                .inc();
        }
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let ("pending", Some(action)) = (decision, action) {
            self.notify_pending(&session.caller, &session.id, tool, reason, action);
        }
        let session = audit_session_id(&session.id);
        let action = action.unwrap_or("");
        tracing::info!(
            target: "secureclaw::decision",
            tool = %label,
            upstream,
            decision,
            reason,
            action_id = action,
            session = %session,
            latency_ms,
            "tool call decided"
        );
        if decision == "pending"
            && !action.is_empty()
            && let Some(decider) = self.inner.metrics.approvals_in_process.get()
        {
            tracing::info!(
                target: "secureclaw::approval",
                tool = %label,
                upstream,
                reason,
                action_id = action,
                session = %session,
                decider = %decider,
                "action waits for approval by {decider} (decided in process)"
            );
        } else if decision == "pending" && !action.is_empty() {
            tracing::warn!(
                target: "secureclaw::approval",
                tool = %label,
                upstream,
                reason,
                action_id = action,
                session = %session,
                approve = %format!("{} {action}", self.approve_command()),
                "action waits for approval: run `{} {action}` (or `… approvals deny {action}`)",
                self.approve_command()
            );
        }
    }

    /// The `[[gateway.tools]]` and `[[gateway.classify]]` rules that apply to no tool the
    /// upstreams listed at start-up (see [`crate::rules`]).
    #[must_use]
    pub fn unmatched_rules(&self) -> Vec<crate::rules::UnmatchedRule> {
        crate::rules::unmatched_rules(&self.inner.config, &self.inner.catalog.listed())
    }

    /// The metrics in the OpenMetrics text format (`text/plain`-compatible Prometheus
    /// exposition). Reads the pending approvals from the store and each upstream's restart
    /// count at scrape time.
    ///
    /// # Errors
    /// [`GatewayError::Store`] if the pending approvals cannot be counted (counted as a store
    /// error too).
    pub async fn render_metrics(&self) -> Result<String, GatewayError> {
        let m = &self.inner.metrics;
        let _one = m.scrape.lock().await;
        match self
            .inner
            .store
            .list_approvals(Some(ApprovalState::Pending))
            .await
        {
            Ok(list) => {
                m.pending.set(i64::try_from(list.len()).unwrap_or(i64::MAX));
            }
            Err(e) => {
                m.store_errors
                    .get_or_create(&OperationLabel {
                        operation: "scrape",
                    })
                    .inc();
                return Err(GatewayError::Store(e.to_string()));
            }
        }
        for (id, now) in self.inner.executor.restarts() {
            let counter = m.restarts.get_or_create(&UpstreamLabel {
                upstream: id.to_owned(),
            });
            let have = counter.get();
            if now > have {
                counter.inc_by(now - have);
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry)
            .map_err(|e| GatewayError::Config(format!("cannot encode metrics: {e}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn shell_quote_leaves_plain_paths_and_quotes_the_rest() {
        assert_eq!(shell_quote("/var/lib/secureclaw"), "/var/lib/secureclaw");
        assert_eq!(shell_quote("/tmp/my state"), "'/tmp/my state'");
        assert_eq!(shell_quote("/tmp/it's"), "'/tmp/it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
