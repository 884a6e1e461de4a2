//! The MCP front end (rmcp server): stdio and Streamable HTTP. This module is the only place
//! the server touches rmcp's server API.
//!
//! - `tools/list` shows the tools the policy lets this caller see.
//! - `tools/call` goes through [`Gateway::call`]. A denial is a tool result with
//!   `isError: true` whose text is the fixed recovery template (and whose
//!   `structuredContent` carries the same recovery as data).
//! - Confirmation: the result says the action waits for approval; the user decides with
//!   `secureclaw approvals approve <id>` or the operator HTTP API, and the runtime re-issues
//!   the identical call with `_meta["dev.secureclaw/approval"]`. MCP elicitation confirms
//!   **only** when the operator declared the MCP client a trusted host
//!   (`[server] client_confirmation = "trusted"`, `wrap --trust-client-confirmation`): by
//!   default the MCP client is the agent runtime itself, which could answer its own prompt
//!   (DESIGN.md §3 "Confirmation"). Even then the prompt never carries a protected value:
//!   handles are described by label, sensitivity and source.
//! - MCP 2026-07-28 (stateless: `server/discover`, per-request `_meta`) is served beside
//!   2025-11-25 and 2025-06-18 by rmcp on both transports. For a 2026-07-28 client a call that
//!   waits for approval is answered `input_required` (MRTR, SEP-2322): its `requestState` is
//!   the gateway's sealed approval state ([`Gateway::seal_request_state`]), and its
//!   `inputRequests` hold one form elicitation under [`MRTR_APPROVAL_KEY`]: the question
//!   itself for a trusted client, otherwise how to approve out of band. The client's retry
//!   with the echoed state is the re-issue of that action (binding and single use checked as
//!   for any commit); a retry whose approval is still pending waits up to
//!   [`McpFrontEnd::with_approval_wait`] for the decision.
//! - Session: fixed for stdio (`wrap`), from the bearer token for Streamable HTTP.

use crate::outcome::outcome_json;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationError, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServiceExt};
use secureclaw_core::policy::EffectClass;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::SessionRecord;
use secureclaw_gateway::{CallMeta, CallOutcome, Confirmer, ConfirmerAnswer, Gateway, otel};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// `_meta` key carrying an approved action id on a re-issued call.
pub use secureclaw_gateway::META_APPROVAL;

/// How the front end finds the session of a request.
#[derive(Clone, Debug)]
pub enum SessionSource {
    /// One session for the whole connection (stdio).
    Fixed(SessionRecord),
    /// The bearer token of the HTTP request names the session; `fallback` serves requests
    /// without a token (only configured on loopback binds).
    Bearer {
        /// Session for token-less requests, if allowed.
        fallback: Option<SessionRecord>,
    },
}

/// The MCP server handler.
#[derive(Clone)]
pub struct McpFrontEnd {
    gateway: Gateway,
    sessions: Arc<SessionSource>,
    trusted_client_confirmation: bool,
    max_message_bytes: usize,
    approval_wait: std::time::Duration,
    /// Retries (MRTR) waiting for a decision right now, across every clone of this front end
    /// (every request of `serve`).
    waiting: Arc<WaitSlots>,
}

/// At most this many 2026-07-28 retries wait for a decision at once (per front end: one
/// `wrap`, or all of `serve`); a retry beyond it is answered `input_required` again at once,
/// so retries cannot pin the gateway's tasks or poll the store without bound.
pub const MAX_WAITING_RETRIES: usize = 64;
/// At most this many retries of one session wait at once (one client needs one): a session
/// cannot hold many connections open by retrying (red-team of 2026-12-04).
pub const MAX_WAITING_RETRIES_PER_SESSION: usize = 4;

/// The retries waiting for a decision, per session and in all.
#[derive(Debug, Default)]
struct WaitSlots {
    held: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// One waiting retry's slot, given back when dropped.
struct WaitSlot {
    slots: Arc<WaitSlots>,
    session: String,
}

impl WaitSlots {
    fn held(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, usize>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for a retry of `session`, if both bounds allow one.
    fn take(self: &Arc<Self>, session: &str) -> Option<WaitSlot> {
        let mut held = self.held();
        let total: usize = held.values().sum();
        let mine = held.get(session).copied().unwrap_or(0);
        if total >= MAX_WAITING_RETRIES || mine >= MAX_WAITING_RETRIES_PER_SESSION {
            return None;
        }
        held.insert(session.to_owned(), mine + 1);
        Some(WaitSlot {
            slots: self.clone(),
            session: session.to_owned(),
        })
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held();
        if let Some(n) = held.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.session);
            }
        }
    }
}

/// Default size limit of one stdio MCP message (a line): the default argument limit
/// (4 MiB) plus room for the JSON-RPC envelope, as the HTTP body limit of `serve`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024 + 64 * 1024;

/// Key of the confirmation in an `input_required` result's `inputRequests` and in the retry's
/// `inputResponses` (MCP 2026-07-28 MRTR).
pub const MRTR_APPROVAL_KEY: &str = "dev.secureclaw/approval";

/// Default time a 2026-07-28 retry whose approval is still pending waits for the decision
/// before it is answered `input_required` again.
pub const DEFAULT_APPROVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(25);

/// The user's answer to an elicitation.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ApprovalAnswer {
    /// Approve this exact call.
    pub approve: bool,
}
rmcp::elicit_safe!(ApprovalAnswer);

/// The MCP client's elicitation as a [`Confirmer`] (used only for a client the operator
/// declared a trusted host).
struct ElicitationConfirmer<'a> {
    peer: &'a rmcp::Peer<RoleServer>,
}

#[async_trait::async_trait]
impl Confirmer for ElicitationConfirmer<'_> {
    fn available(&self) -> bool {
        !self.peer.supported_elicitation_modes().is_empty()
    }

    fn label(&self) -> &str {
        ELICITATION_LABEL
    }

    async fn ask(&self, question: String) -> ConfirmerAnswer {
        match self.peer.elicit::<ApprovalAnswer>(question).await {
            Ok(Some(ApprovalAnswer { approve: true })) => ConfirmerAnswer::Approve,
            // An explicit "no", a decline, or a dismissal: the action is declined.
            Ok(Some(ApprovalAnswer { approve: false }))
            | Ok(None)
            | Err(ElicitationError::UserDeclined | ElicitationError::UserCancelled) => {
                ConfirmerAnswer::Decline
            }
            // An accept without the answer's content, or with content that is not the
            // answer's shape, decides nothing.
            Err(ElicitationError::NoContent | ElicitationError::ParseError { .. }) => {
                ConfirmerAnswer::Malformed
            }
            // The client could not be asked: the approval stays pending.
            Err(_) => ConfirmerAnswer::Unavailable,
        }
    }
}

impl McpFrontEnd {
    /// A front end over `gateway`.
    #[must_use]
    pub fn new(gateway: Gateway, sessions: SessionSource) -> Self {
        Self {
            gateway,
            sessions: Arc::new(sessions),
            trusted_client_confirmation: false,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            approval_wait: DEFAULT_APPROVAL_WAIT,
            waiting: Arc::new(WaitSlots::default()),
        }
    }

    /// Largest stdio message (one line, without its newline) accepted, in bytes; a longer line
    /// is discarded as it arrives and answered with an error (default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`]).
    #[must_use]
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Declare the MCP client a trusted host whose elicitation answers confirm actions
    /// (default off). Only for a client with a human behind its elicitation UI that the agent
    /// runtime cannot drive: a runtime that declares the elicitation capability and answers
    /// `accept` itself would otherwise confirm its own actions. Without it, approvals go
    /// through the CLI or the operator HTTP API only.
    #[must_use]
    pub fn with_trusted_client_confirmation(mut self, trusted: bool) -> Self {
        self.trusted_client_confirmation = trusted;
        self
    }

    /// How long a 2026-07-28 retry (MRTR) whose approval is still pending waits for the
    /// decision before it is answered `input_required` again (default
    /// [`DEFAULT_APPROVAL_WAIT`]).
    #[must_use]
    pub fn with_approval_wait(mut self, wait: std::time::Duration) -> Self {
        self.approval_wait = wait;
        self
    }

    /// The gateway behind this front end.
    #[must_use]
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    async fn session(&self, ctx: &RequestContext<RoleServer>) -> Result<SessionRecord, McpError> {
        match self.sessions.as_ref() {
            SessionSource::Fixed(s) => self.still_stored(s).await,
            SessionSource::Bearer { fallback } => {
                let parts = ctx.extensions.get::<axum::http::request::Parts>();
                let token = parts
                    .and_then(|p| p.headers.get(axum::http::header::AUTHORIZATION))
                    .and_then(|h| h.to_str().ok())
                    .and_then(|h| h.strip_prefix("Bearer "))
                    .map(str::trim);
                match token {
                    Some(t) => self
                        .gateway
                        .session(t)
                        .await
                        .map_err(|_| McpError::internal_error("store unavailable", None))?
                        .ok_or_else(|| {
                            McpError::invalid_request("unknown or expired session token", None)
                        }),
                    None => match fallback {
                        Some(s) => self.still_stored(s).await,
                        None => Err(McpError::invalid_request(
                            "a session bearer token is required (Authorization: Bearer ses_…, from POST /v1/sessions with the operator token)",
                            None,
                        )),
                    },
                }
            }
        }
    }

    /// `s`, a session held for the whole connection, if its record is still stored; refused
    /// once a retention sweep removed it (its counters must not start afresh; fail closed).
    async fn still_stored(&self, s: &SessionRecord) -> Result<SessionRecord, McpError> {
        match self.gateway.session_still_stored(s).await {
            Ok(true) => Ok(s.clone()),
            Ok(false) => Err(McpError::invalid_request(
                "this session has ended: it expired and the retention sweep removed its state; \
                 restart to open a new session",
                None,
            )),
            Err(_) => Err(McpError::internal_error("store unavailable", None)),
        }
    }

    /// Serve on stdin/stdout until the client disconnects. When both are pipes (the way MCP
    /// clients start a stdio server) they are driven by tokio's non-blocking pipe driver
    /// (`rmcp::transport::stdio_pipes`), with no hand-off to a blocking helper thread per
    /// message (issue 14 item 1); otherwise (a terminal, a file) by the blocking handles.
    ///
    /// # Errors
    /// Transport or initialization failures.
    pub async fn serve_stdio(self) -> Result<(), std::io::Error> {
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        self.serve_lines(stdin, stdout).await
    }

    /// Serve newline-delimited JSON-RPC read from `read` and written to `write` (stdio, or a
    /// pipe in tests) until `read` ends. Every line gets one answer: lines no parser could read
    /// are answered by [`crate::stdio_lines::LineFramed`], duplicate in-flight ids by
    /// [`crate::one_reply::OneReply`]; only accepted messages reach rmcp.
    ///
    /// # Errors
    /// Transport or initialization failures.
    pub async fn serve_lines<R, W>(self, read: R, write: W) -> Result<(), std::io::Error>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let writer = rmcp::transport::async_rw::AsyncRwTransport::<RoleServer, _, _>::new(
            tokio::io::empty(),
            write,
        );
        // Every refusal is audited (metadata only), in the connection's session if fixed.
        let session = match self.sessions.as_ref() {
            SessionSource::Fixed(s) => Some(s.clone()),
            SessionSource::Bearer { .. } => None,
        };
        let (gateway, fixed) = (self.gateway.clone(), session.clone());
        let on_refusal: crate::stdio_lines::OnRefusal = Arc::new(
            move |why: crate::stdio_lines::LineRefusal, _id: Option<&rmcp::model::RequestId>| {
                let (gateway, fixed, code) = (gateway.clone(), fixed.clone(), why.code());
                tokio::spawn(async move {
                    gateway
                        .audit_rejection("mcp-stdio", code, fixed.as_ref(), None)
                        .await;
                });
            },
        );
        let (gateway, fixed) = (self.gateway.clone(), session);
        let on_duplicate = Arc::new(move || {
            let (gateway, fixed) = (gateway.clone(), fixed.clone());
            tokio::spawn(async move {
                gateway
                    .audit_rejection("mcp-stdio", "duplicate_id", fixed.as_ref(), None)
                    .await;
            });
        });
        let transport = crate::one_reply::OneReply::new(
            crate::stdio_lines::LineFramed::new(read, writer, self.max_message_bytes)
                .on_refusal(on_refusal),
        )
        .on_duplicate(on_duplicate)
        // A call still running when the client closes its input gets its reply (and its
        // outcome recorded) before the connection ends.
        .drain_within(self.gateway.upstream_timeout() + std::time::Duration::from_secs(5));
        let running = self
            .serve(transport)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        running
            .waiting()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(())
    }

    /// A Tower service for Streamable HTTP, to nest under `/mcp`. `allowed_origins` are
    /// checked on every request (DNS-rebinding protection); `allowed_hosts` on the Host header.
    /// Sessions idle for 5 minutes are closed.
    #[must_use]
    pub fn streamable_http_service(
        self,
        allowed_hosts: Vec<String>,
        allowed_origins: Vec<String>,
        max_body: usize,
    ) -> rmcp::transport::streamable_http_server::StreamableHttpService<
        Self,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > {
        self.streamable_http_service_idle(
            allowed_hosts,
            allowed_origins,
            max_body,
            std::time::Duration::from_secs(300),
        )
    }

    /// [`Self::streamable_http_service`] closing a session after `idle` without a request.
    #[must_use]
    pub fn streamable_http_service_idle(
        self,
        allowed_hosts: Vec<String>,
        allowed_origins: Vec<String>,
        max_body: usize,
        idle: std::time::Duration,
    ) -> rmcp::transport::streamable_http_server::StreamableHttpService<
        Self,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(allowed_hosts)
            .with_allowed_origins(allowed_origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(max_body)
            // A stateless (2026-07-28) request must carry its protocol version in the header
            // and in `_meta`; legacy clients keep their `initialize` sessions.
            .with_stateless_protocol_metadata_required(true);
        // A session idle for `idle` is closed and its state freed.
        let mut manager =
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default();
        manager.session_config.keep_alive = Some(idle);
        StreamableHttpService::new(move || Ok(self.clone()), Arc::new(manager), config)
    }
}

fn to_tool(entry: &secureclaw_gateway::ToolEntry) -> Tool {
    let up = &entry.upstream_tool;
    let annotations = ToolAnnotations::default()
        .read_only(entry.effect == EffectClass::Read)
        .destructive(entry.destructive)
        .open_world(up.open_world_hint);
    let description = up.description.clone().unwrap_or_default();
    let mut tool = Tool::new(entry.exposed.clone(), description, up.input_schema.clone())
        .with_annotations(annotations);
    if let Some(title) = &up.title {
        tool = tool.with_title(title.clone());
    }
    tool
}

fn blocks(content: &[Value]) -> Vec<ContentBlock> {
    content
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .map(|t| ContentBlock::text(t.to_owned()))
        .collect()
}

fn render(outcome: &CallOutcome) -> CallToolResult {
    match outcome {
        CallOutcome::Completed { output, .. } => {
            let mut r = if output.is_error {
                CallToolResult::error(blocks(&output.content))
            } else {
                CallToolResult::success(blocks(&output.content))
            };
            r.structured_content.clone_from(&output.structured);
            r
        }
        CallOutcome::Shadowed { output } => {
            let mut r = CallToolResult::success(blocks(&output.content));
            r.structured_content.clone_from(&output.structured);
            let mut meta = serde_json::Map::new();
            meta.insert(META_SHADOWED.to_owned(), Value::Bool(true));
            r.meta = Some(rmcp::model::MetaObject(meta));
            r
        }
        // Not an error: the call is held, and the runtime is told how to release it.
        CallOutcome::Deferred(rec) => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(rec.render())]);
            r.structured_content = Some(outcome_json(outcome));
            r
        }
        CallOutcome::Pending(rec) | CallOutcome::Denied(rec) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(rec.render())]);
            r.structured_content = Some(outcome_json(outcome));
            r
        }
    }
}

/// `_meta` key set on a result answered by the local substitute (SHADOW): not the provider's
/// answer, and the provider saw nothing.
pub const META_SHADOWED: &str = "dev.secureclaw/shadowed";

/// The gateway-provided branch tools (Ghost Tool Calls: promotion and abandonment).
fn branch_tools() -> Vec<Tool> {
    let schema = |what: &str| {
        let v = serde_json::json!({
            "type": "object",
            "properties": {"branch": {"type": "string", "description": what}},
            "required": ["branch"],
        });
        match v {
            Value::Object(m) => Arc::new(m),
            _ => Arc::new(serde_json::Map::new()),
        }
    };
    vec![
        Tool::new(
            secureclaw_gateway::PROMOTE_TOOL,
            "Promote a speculative branch: the calls you made with _meta \"dev.secureclaw/branch\" set to it become committed; calls the gateway deferred for it run now as committed and their results are returned.",
            schema("the branch id you sent in _meta \"dev.secureclaw/branch\""),
        ),
        Tool::new(
            secureclaw_gateway::ABANDON_TOOL,
            "Abandon a speculative branch: calls deferred for it are discarded without being sent.",
            schema("the branch id you sent in _meta \"dev.secureclaw/branch\""),
        ),
    ]
}

impl ServerHandler for McpFrontEnd {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("secureclaw", env!("CARGO_PKG_VERSION")).with_title("SecureClaw gateway"))
            .with_instructions(
                "Tools are mediated by SecureClaw. Sensitive values in results are replaced by handles \
                 (hdl_…); pass handles back unchanged as arguments. Effectful calls may need the user's \
                 approval; follow the next steps in denial messages.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let session = self.session(&context).await?;
        let mut tools: Vec<Tool> = self
            .gateway
            .list_tools(&session.caller)
            .await
            .iter()
            .map(to_tool)
            .collect();
        // The branch tools only where calls can be speculative (`[gateway.speculation]`
        // enabled); they stay callable either way, for a client that releases a deferred call.
        if self.gateway.speculation_enabled() {
            tools.extend(branch_tools());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let session = self.session(&context).await?;
        // rmcp may surface `_meta` on the params or on the request context; read both (the
        // params win key by key).
        let mut meta = serde_json::to_value(&context.meta)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        if let Some(Value::Object(m)) = request
            .meta
            .as_ref()
            .and_then(|m| serde_json::to_value(m).ok())
        {
            meta.extend(m);
        }
        // W3C trace context (MCP SEP-414): the parent of this call's span; a malformed one is
        // ignored (the call starts a new trace).
        let parent = meta
            .get(otel::TRACEPARENT)
            .and_then(Value::as_str)
            .and_then(otel::TraceParent::parse);
        let meta = match CallMeta::from_meta(&meta) {
            Ok(m) => m,
            Err(e) => return Err(McpError::invalid_params(e, None)),
        };
        // Boxed: the call's future is large (the whole gateway path), and rmcp moves the
        // request handler's future several times (into its task, its span); a box makes each
        // of those moves a pointer copy (issue 14, BENCHMARKS.md §12: about half a read's CPU
        // was `memcpy` of futures).
        otel::with_parent(
            parent,
            Box::pin(self.call_tool_traced(request, meta, &session, &context)),
        )
        .await
    }
}

impl McpFrontEnd {
    /// `tools/call` once the session and `_meta` are read (in the request's trace context).
    async fn call_tool_traced(
        &self,
        request: CallToolRequestParams,
        meta: CallMeta,
        session: &SessionRecord,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (session, context) = (session, context);
        let arguments = request.arguments.unwrap_or_default();
        if speaks_mrtr(context) {
            return Ok(self
                .call_mrtr(
                    session,
                    &request.name,
                    arguments,
                    meta,
                    request.request_state.as_deref(),
                    request.input_responses.as_ref(),
                    context,
                )
                .await);
        }
        if request.request_state.is_some() || request.input_responses.is_some() {
            return Err(McpError::invalid_params(
                "requestState and inputResponses are MCP 2026-07-28 fields; this request did not negotiate 2026-07-28",
                None,
            ));
        }
        // Ask the human at the client only when the operator declared the client a trusted
        // host (issue 11 item 1); the gateway decides when to ask and what to show.
        let outcome = if self.trusted_client_confirmation {
            let confirmer = ElicitationConfirmer {
                peer: &context.peer,
            };
            self.gateway
                .call_with_confirmer(session, &request.name, arguments, &meta, &confirmer)
                .await
        } else {
            self.gateway
                .call(session, &request.name, arguments, &meta)
                .await
        };
        Ok(render(&outcome).into())
    }
}

/// Whether this request speaks MCP 2026-07-28 or later: its own `_meta` protocol version
/// (stateless requests) or, failing that, the version its connection negotiated.
fn speaks_mrtr(context: &RequestContext<RoleServer>) -> bool {
    let version = context.meta.protocol_version().or_else(|| {
        context
            .peer
            .peer_info()
            .map(|info| info.protocol_version.clone())
    });
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether the client declared form elicitation, in this request's `_meta` (2026-07-28) or at
/// its connection's initialization.
fn supports_form_elicitation(context: &RequestContext<RoleServer>) -> bool {
    let caps = context.meta.client_capabilities().or_else(|| {
        context
            .peer
            .peer_info()
            .map(|info| info.capabilities.clone())
    });
    caps.and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// A client's answer to the approval elicitation of an `input_required` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MrtrAnswer {
    /// `accept` with `{"approve": true}`.
    Approve,
    /// `accept` with `{"approve": false}`, or `decline`.
    Decline,
    /// `cancel`: dismissed without a decision.
    Dismiss,
    /// Anything else under the key.
    Malformed,
}

/// The answer under [`MRTR_APPROVAL_KEY`] in `inputResponses`, if any (an `ElicitResult`).
fn mrtr_answer(responses: Option<&rmcp::model::InputResponses>) -> Option<MrtrAnswer> {
    let answer = responses?.get(MRTR_APPROVAL_KEY)?;
    Some(match answer.get("action").and_then(Value::as_str) {
        Some("accept") => match answer.pointer("/content/approve").and_then(Value::as_bool) {
            Some(true) => MrtrAnswer::Approve,
            Some(false) => MrtrAnswer::Decline,
            None => MrtrAnswer::Malformed,
        },
        Some("decline") => MrtrAnswer::Decline,
        Some("cancel") => MrtrAnswer::Dismiss,
        _ => MrtrAnswer::Malformed,
    })
}

/// Label of a decline answered by a client the operator does not trust to confirm: a decline
/// only stops the action, so it is honoured from any client of the session.
const UNTRUSTED_DECLINE: &str = "mcp-client (declined in the client)";

impl McpFrontEnd {
    /// A `tools/call` of a 2026-07-28 client (MRTR): a first call, or the retry of an
    /// `input_required` answer with its `requestState` and `inputResponses`.
    #[allow(clippy::too_many_arguments)]
    async fn call_mrtr(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        mut meta: CallMeta,
        request_state: Option<&str>,
        responses: Option<&rmcp::model::InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        // Whether the client already showed the form and got an answer that decided nothing:
        // the next round then carries only the state, so a host does not ask again each round.
        let mut answered = false;
        if let Some(state) = request_state {
            // Admitted like any call (rate, argument bytes) before the state is even opened;
            // the admission is held while the retry waits.
            let admission = match self.gateway.admit_retry(session, tool, &arguments).await {
                Ok(a) => a,
                Err(refused) => return render(&refused).into(),
            };
            let action = match self.gateway.open_request_state(session, tool, state).await {
                Ok(action) => action,
                Err(reason) => {
                    let outcome = self
                        .gateway
                        .refuse_request_state(session, tool, reason)
                        .await;
                    return render(&outcome).into();
                }
            };
            // A state names one action; an approval id beside it must be the same one.
            if meta.approval.as_ref().is_some_and(|a| a != &action) {
                let outcome = self
                    .gateway
                    .refuse_request_state(session, tool, ReasonCode::RequestStateInvalid)
                    .await;
                return render(&outcome).into();
            }
            // The answer decides only as the trusted-confirmer rule allows (issue 11 item 1):
            // an approval only from a trusted client; a decline from any client of the
            // session, since it can only stop the action.
            let decided = match (mrtr_answer(responses), self.trusted_client_confirmation) {
                (Some(MrtrAnswer::Approve), true) => Some((true, ELICITATION_LABEL)),
                (Some(MrtrAnswer::Decline | MrtrAnswer::Dismiss), true) => {
                    Some((false, ELICITATION_LABEL))
                }
                (Some(MrtrAnswer::Decline), false) => Some((false, UNTRUSTED_DECLINE)),
                (Some(MrtrAnswer::Malformed), true) => {
                    return render(
                        &self
                            .gateway
                            .confirmation_malformed(session, tool, &action)
                            .await,
                    )
                    .into();
                }
                _ => None,
            };
            if let Some((approve, label)) = decided {
                // Already decided (a replayed answer, another confirmer first): unchanged.
                let _ = self.gateway.decide_approval(&action, approve, label).await;
            }
            answered = decided.is_none() && mrtr_answer(responses).is_some();
            // Out of band: the retry waits for the human's decision (if a waiting slot is
            // free; otherwise it is answered at once and the client retries).
            if let Some(_slot) = self.waiting.take(&session.id) {
                self.gateway
                    .await_decision(&action, self.approval_wait)
                    .await;
            }
            drop(admission);
            meta.approval = Some(action);
        }
        let outcome = self.gateway.call(session, tool, arguments, &meta).await;
        if let CallOutcome::Pending(rec) = &outcome
            && let Some(action) = rec.action_id.as_deref()
        {
            let action = secureclaw_core::artifact::ActionId(action.to_owned());
            if let Ok(state) = self
                .gateway
                .seal_request_state(session, tool, &action)
                .await
            {
                let message = if self.trusted_client_confirmation {
                    self.gateway
                        .client_confirmation_prompt(&action)
                        .await
                        .ok()
                        .flatten()
                } else {
                    Some(format!(
                        "{}\nThis prompt approves nothing: approve out of band as above, then continue (or decline to cancel the call).",
                        rec.render()
                    ))
                };
                let requests = message
                    .filter(|_| !answered && supports_form_elicitation(context))
                    .map(|m| approval_request(m, self.trusted_client_confirmation));
                let mut meta = serde_json::Map::new();
                meta.insert(META_PENDING.to_owned(), outcome_json(&outcome));
                return InputRequiredResult::new(requests, Some(state))
                    .with_meta(rmcp::model::MetaObject(meta))
                    .into();
            }
        }
        render(&outcome).into()
    }
}

/// `_meta` key of an `input_required` result carrying the pending recovery (status, reason,
/// action id, next steps), for runtimes that do not show the elicitation.
pub const META_PENDING: &str = "dev.secureclaw/pending";

/// The confirmer label of a trusted client's answer.
const ELICITATION_LABEL: &str = "mcp-elicitation (trusted client)";

/// The `inputRequests` of an approval: one form elicitation under [`MRTR_APPROVAL_KEY`]. A
/// trusted client's form asks `approve` (a boolean); an untrusted client's form asks nothing
/// (its message says how to approve out of band). Neither collects a secret.
fn approval_request(message: String, ask: bool) -> rmcp::model::InputRequests {
    use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest};
    let schema = if ask {
        ElicitationSchema::from_type::<ApprovalAnswer>()
            .unwrap_or_else(|_| ElicitationSchema::new(std::collections::BTreeMap::new()))
    } else {
        ElicitationSchema::new(std::collections::BTreeMap::new())
    };
    let request = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    });
    let mut requests = rmcp::model::InputRequests::new();
    requests.insert(
        MRTR_APPROVAL_KEY.to_owned(),
        InputRequest::Elicitation(request),
    );
    requests
}

#[cfg(test)]
mod tests {
    use super::{MAX_WAITING_RETRIES, MAX_WAITING_RETRIES_PER_SESSION, WaitSlots};
    use std::sync::Arc;

    /// Red-team F4: one session holds at most its share of waiting retries; others still get
    /// theirs, and a finished wait gives its slot back.
    #[test]
    fn waiting_retries_are_bounded_per_session_and_in_all() {
        let slots = Arc::new(WaitSlots::default());
        let mut a: Vec<_> = (0..MAX_WAITING_RETRIES_PER_SESSION)
            .map(|_| slots.take("a").expect("a slot"))
            .collect();
        assert!(slots.take("a").is_none());
        let b = slots.take("b").expect("another session's slot");
        a.pop();
        assert!(slots.take("a").is_some());
        drop((a, b));
        assert!(slots.held().is_empty());
        let all: Vec<_> = (0..MAX_WAITING_RETRIES)
            .map(|i| slots.take(&format!("s{i}")).expect("a slot"))
            .collect();
        assert!(slots.take("late").is_none());
        drop(all);
    }
}
