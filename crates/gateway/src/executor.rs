//! The executor: the only holder of upstream connections (SecureClaw paper §3.4, DESIGN.md §1).
//!
//! The executor owns every upstream connection: [`crate::Gateway::start`] builds them from the
//! operator's specs through a [`Connector`] and hands them to the executor, which never hands
//! one out. Read-class tools go through [`Executor::read`], which needs a [`ReadPermit`] — a
//! value only the read path's catalog and policy decision can construct. Effectful tools go
//! through [`Executor::commit`], which needs a [`CommitProof`] — a value only the acceptance
//! predicate can construct — and sends exactly the arguments bound in that proof, after
//! resolving handles for this sink. Nothing else in the gateway can reach an upstream.
//!
//! At most once: the executor never re-sends an effect. If an effect was dispatched and no
//! outcome came back ([`ExecError::outcome_unknown`]: the transport failed after sending, or
//! the call timed out), the caller records `outcome_unknown` and tells the runtime not to
//! retry. A read whose transport failed is retried once (reads have no effect, and the
//! upstream reconnects after a transport failure).

use crate::catalog::Listing;
use crate::config::UpstreamSpec;
use crate::permit::ReadPermit;
use crate::upstream::{Connector, ToolOutput, Upstream, UpstreamError, startup_tools};
use secureclaw_core::acceptance::CommitProof;
use secureclaw_core::handle::{HandleDenial, HandleId, substitute_handles};
use serde_json::{Map, Value};
use std::time::Duration;

/// Why the executor did not return a tool result.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The upstream id is not configured.
    #[error("unknown upstream `{0}`")]
    UnknownUpstream(String),
    /// A handle could not be resolved for this sink.
    #[error("handle resolution failed: {0}")]
    Handle(HandleDenial),
    /// Resolution hit a store failure.
    #[error("store unavailable during handle resolution")]
    Store,
    /// The upstream failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The upstream did not answer in time (the request had been sent).
    #[error("upstream timed out")]
    Timeout,
    /// The tool is quarantined: its definition differs from its pin or it was never pinned
    /// ([`crate::pins`]). Nothing was sent.
    #[error("tool definition changed since it was pinned")]
    DefinitionChanged,
}

impl ExecError {
    /// A short class name without any upstream text (safe to log and store).
    #[must_use]
    pub fn class(&self) -> &'static str {
        match self {
            ExecError::UnknownUpstream(_) => "unknown_upstream",
            ExecError::Handle(HandleDenial::Unavailable) => "handle_unavailable",
            ExecError::Handle(HandleDenial::SinkForbidden) => "handle_sink_forbidden",
            ExecError::Store => "store_unavailable",
            ExecError::Upstream(UpstreamError::Start { .. }) => "upstream_start",
            ExecError::Upstream(UpstreamError::Call { .. }) => "upstream_call",
            ExecError::Upstream(UpstreamError::OutcomeUnknown { .. }) => "upstream_outcome_unknown",
            ExecError::Upstream(UpstreamError::Unsupported(_)) => "upstream_unsupported_result",
            ExecError::Upstream(UpstreamError::Unavailable { .. }) => "upstream_unavailable",
            ExecError::Upstream(UpstreamError::DefinitionChanged { .. }) => {
                "tool_definition_changed"
            }
            ExecError::Timeout => "upstream_timeout",
            ExecError::DefinitionChanged => "tool_definition_changed",
        }
    }

    /// Whether the request was sent and no outcome came back, so the call may have run: a
    /// transport failure after dispatch or a timeout. A JSON-RPC error answer, a refused
    /// connection or a failure before sending is not; a tool result with `isError` is not an
    /// error at all.
    #[must_use]
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            ExecError::Timeout | ExecError::Upstream(UpstreamError::OutcomeUnknown { .. })
        )
    }
}

/// Outcome of resolving one handle: the plaintext, or why not.
pub type Resolution = Result<String, ResolveError>;

/// Why a handle did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveError {
    /// Policy-level denial.
    Denied(HandleDenial),
    /// Store failure (fail closed).
    Store,
}

/// One upstream connection the executor owns, with the spec it was built from.
struct Connection {
    spec: UpstreamSpec,
    upstream: Box<dyn Upstream>,
}

/// The executor: owns every upstream connection. Built only inside the gateway crate
/// ([`crate::Gateway::start`] connects the operator's upstream specs through a
/// [`Connector`]); it never hands a connection out.
pub struct Executor {
    connections: Vec<Connection>,
    /// Quarantined tools, as (upstream id, tool name at the upstream): their definition
    /// differs from its pin or was never pinned ([`crate::pins`]). Nothing is sent to them,
    /// whatever path the call took (read, commit, approval, speculation substitute).
    quarantine: std::sync::Arc<crate::pins::Quarantine>,
    timeout: Duration,
    /// Where each upstream call's latency is recorded (the gateway's metrics).
    latency: Option<crate::gateway::UpstreamLatency>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field(
                "upstreams",
                &self
                    .connections
                    .iter()
                    .map(|c| c.spec.id.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Executor {
    /// Connect every upstream of `specs` (in order) with `connector`, each within
    /// `startup_timeout`; each call later gets `timeout`.
    ///
    /// # Errors
    /// The first upstream that cannot be connected ([`UpstreamError::Start`]).
    pub(crate) async fn new(
        specs: Vec<UpstreamSpec>,
        connector: &dyn Connector,
        startup_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, UpstreamError> {
        let mut connections = Vec::with_capacity(specs.len());
        for spec in specs {
            let upstream = connector.connect(&spec, startup_timeout).await?;
            connections.push(Connection { spec, upstream });
        }
        Ok(Self {
            connections,
            quarantine: std::sync::Arc::default(),
            timeout,
            latency: None,
        })
    }

    /// Record each upstream call's latency in `latency` (the gateway's metrics).
    #[must_use]
    pub(crate) fn with_latency(mut self, latency: crate::gateway::UpstreamLatency) -> Self {
        self.latency = Some(latency);
        self
    }

    /// Every upstream's spec, reported `serverInfo.name` and tools (in spec order), for the
    /// catalog at start-up; see [`startup_tools`] for the limits.
    ///
    /// # Errors
    /// The first upstream whose listing fails, is late or exceeds the schema limits.
    pub(crate) async fn startup_listings(
        &self,
        startup_timeout: Duration,
    ) -> Result<Vec<Listing>, UpstreamError> {
        let mut listings = Vec::with_capacity(self.connections.len());
        for c in &self.connections {
            let server = c.upstream.server_name().map(str::to_owned);
            let tools = startup_tools(c.upstream.as_ref(), startup_timeout).await?;
            listings.push((c.spec.clone(), server, tools));
        }
        Ok(listings)
    }

    /// The quarantine the executor enforces (shared with the gateway, which fills it from the
    /// pins at start-up and releases tools the operator pins again).
    pub(crate) fn quarantine(&self) -> &std::sync::Arc<crate::pins::Quarantine> {
        &self.quarantine
    }

    /// Quarantine every tool an upstream found changed after a reconnection
    /// ([`Upstream::drifted`]), so that it is hidden and refused before any call reaches it.
    pub(crate) fn sync_drift(&self) {
        for c in &self.connections {
            for listed in c.upstream.drifted() {
                if !self.quarantine.contains(&c.spec.id, &listed.tool) {
                    tracing::warn!(upstream = %c.spec.id, tool = %listed.tool,
                        "tool definition changed after a reconnection: hidden and refused (tool_definition_changed) until `secureclaw tools pin`");
                    self.quarantine.insert(secureclaw_core::store::ToolPin {
                        upstream: c.spec.id.clone(),
                        ..listed
                    });
                }
            }
        }
    }

    /// Tell `upstream` that the operator pinned these `(tool, digest)` definitions, so that a
    /// definition a reconnection found changed is sent to again ([`Upstream::accept_definitions`]).
    pub(crate) fn accept_definitions(&self, upstream: &str, pinned: &[(String, String)]) {
        if let Some(up) = self.upstream(upstream) {
            up.accept_definitions(pinned);
        }
    }

    fn upstream(&self, id: &str) -> Option<&dyn Upstream> {
        self.connections
            .iter()
            .find(|c| c.spec.id == id)
            .map(|c| c.upstream.as_ref())
    }

    /// Destination label of an upstream.
    #[must_use]
    pub fn destination(&self, upstream: &str) -> Option<&str> {
        self.upstream(upstream).map(|u| u.destination())
    }

    /// Each upstream's id with how many times it reconnected after a transport failure (for
    /// the gateway's metrics; the connections themselves never leave the executor).
    pub(crate) fn restarts(&self) -> impl Iterator<Item = (&str, u64)> {
        self.connections
            .iter()
            .map(|c| (c.spec.id.as_str(), c.upstream.restarts()))
    }

    async fn send(
        &self,
        upstream: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, ExecError> {
        let up = self
            .upstream(upstream)
            .ok_or_else(|| ExecError::UnknownUpstream(upstream.to_owned()))?;
        if self.quarantine.contains(upstream, tool) {
            return Err(ExecError::DefinitionChanged);
        }
        let started = std::time::Instant::now();
        // The upstream call's span (`crate::otel`): names and the outcome's class only.
        let span = tracing::info_span!(
            "upstream_call",
            otel.kind = "client",
            upstream,
            tool,
            outcome = tracing::field::Empty
        );
        let result = {
            use tracing::Instrument as _;
            tokio::time::timeout(self.timeout, up.call_tool(tool.to_owned(), arguments))
                .instrument(span.clone())
                .await
        };
        span.record(
            "outcome",
            match &result {
                Ok(Ok(output)) if output.is_error => "tool_error",
                Ok(Ok(_)) => "ok",
                Ok(Err(UpstreamError::DefinitionChanged { .. })) => "definition_changed",
                Ok(Err(UpstreamError::OutcomeUnknown { .. })) => "outcome_unknown",
                Ok(Err(_)) => "error",
                Err(_) => "timeout",
            },
        );
        drop(span);
        if let Some(latency) = &self.latency {
            latency.observe(upstream, started);
        }
        match result {
            // A reconnection found the tool's definition changed: quarantined from now on
            // (released when the operator pins what the upstream lists), nothing was sent.
            Ok(Err(UpstreamError::DefinitionChanged { .. })) => {
                self.sync_drift();
                Err(ExecError::DefinitionChanged)
            }
            Ok(result) => Ok(result?),
            Err(_) => {
                // Find out whether the connection still answers before the next call waits
                // on it (a wedged stdio transport is closed and reconnected).
                up.timed_out().await;
                Err(ExecError::Timeout)
            }
        }
    }

    fn resolve_all(
        arguments: &Map<String, Value>,
        resolve: &mut (dyn FnMut(&HandleId) -> Resolution + Send),
    ) -> Result<Map<String, Value>, ExecError> {
        let mut value = Value::Object(arguments.clone());
        substitute_handles(&mut value, resolve).map_err(|e| match e {
            ResolveError::Denied(d) => ExecError::Handle(d),
            ResolveError::Store => ExecError::Store,
        })?;
        match value {
            Value::Object(map) => Ok(map),
            _ => Ok(Map::new()),
        }
    }

    /// Forward a read-class call: the tool a [`ReadPermit`] names (only the read path's
    /// catalog and policy decision mints one), with handles in `arguments` resolved by
    /// `resolve`. Consumes the permit.
    ///
    /// # Errors
    /// Resolution and upstream failures.
    pub async fn read(
        &self,
        permit: ReadPermit,
        arguments: &Map<String, Value>,
        resolve: &mut (dyn FnMut(&HandleId) -> Resolution + Send),
    ) -> Result<ToolOutput, ExecError> {
        let (upstream, tool) = (permit.upstream(), permit.tool());
        let args = Self::resolve_all(arguments, resolve)?;
        match self.send(upstream, tool, args.clone()).await {
            // A read has no effect: after a transport failure (the upstream reconnects) it is
            // sent once more. Timeouts are not retried (the upstream is slow, not gone).
            Err(ExecError::Upstream(UpstreamError::OutcomeUnknown { .. })) => {
                tracing::info!(upstream, tool, "read failed in transport; retrying once");
                self.send(upstream, tool, args).await
            }
            other => other,
        }
    }

    /// Execute the effect a [`CommitProof`] authorizes: the proof's upstream, tool and
    /// arguments, with handles resolved for this sink by `resolve`. Consumes the proof. The
    /// call is sent at most once, never retried.
    ///
    /// # Errors
    /// Resolution and upstream failures; [`ExecError::outcome_unknown`] tells whether the
    /// effect may have run. The action id stays marked in the ledger either way.
    pub async fn commit(
        &self,
        proof: CommitProof,
        resolve: &mut (dyn FnMut(&HandleId) -> Resolution + Send),
    ) -> Result<ToolOutput, ExecError> {
        let request = proof.request();
        let args = Self::resolve_all(&request.inputs.arguments, resolve)?;
        self.send(&request.intent.upstream, &request.intent.tool, args)
            .await
    }
}
