//! The HTTP API (axum). Two kinds of credentials, both bearer tokens:
//!
//! - the **operator token** (trusted side): open sessions with a task envelope, decide
//!   approvals, export and verify the audit log;
//! - a **session id** (runtime side, issued when the operator opens the session): list and
//!   call tools, explicit preview/commit, describe and revoke handles.
//!
//! | method | path | who | body → answer |
//! |---|---|---|---|
//! | GET | `/approvals` | operator (browser login) | the approvals page, see [`crate::approvals_ui`] |
//! | GET | `/health` | anyone | `{"status":"ok","policy_digest"}` |
//! | GET | `/metrics` | operator | Prometheus metrics, OpenMetrics text (tool names, decisions and reason codes as labels, never argument values) |
//! | POST | `/v1/sessions` | operator | `{"caller","task":{"request","trusted_targets"}}` → `{"session_id","audit_session","caller","expires_at"}` (`audit_session`: the `ses#…` digest the audit log and approvals show) |
//! | GET | `/v1/approvals?state=pending` | operator | approvals with their actions |
//! | POST | `/v1/approvals/{action_id}/approve` · `/deny` | operator | decided approval; an approve body `{"allow_for":"30m","uses":5,"max_amount":12000}` (any of them, at least `allow_for` or `uses`) also creates a standing grant → `{…, "grant": {…}}` |
//! | GET | `/v1/grants?all=true` | operator | standing grants (live ones unless `all`) |
//! | POST | `/v1/grants/{grant_id}/revoke` | operator | the revoked grant |
//! | GET | `/v1/audit?from=1&limit=1000` | operator | audit records |
//! | GET | `/v1/audit/verify` | operator | `{"verified": n}` |
//! | GET | `/v1/tools` | session | tools visible to the caller |
//! | POST | `/v1/call` | session | `{"tool","arguments","approval"?,"meta"?}` → outcome (`meta`, also spelt `_meta`, holds the `_meta` keys `dev.secureclaw/mode`, `…/branch`, `…/confidence`, `…/approval`) |
//! | POST | `/v1/branches/{branch}/promote` · `/abandon` | session | released calls with outcomes / discarded count |
//! | GET | `/v1/sessions/{id}/exposure` | operator | marginal exposure per observer |
//! | POST | `/v1/preview` | session | `{"tool","arguments"}` → preview (artifact) |
//! | POST | `/v1/commit` | session | `{"tool","arguments","action_id","artifact"}` → outcome |
//! | GET/DELETE | `/v1/handles/{id}` | session | describe / revoke |
//!
//! Errors are JSON `{"error": {"code", "message"}}` with a 4xx/5xx status; denials of tool
//! calls are 200 responses whose body says `"status": "denied"` with a recovery.

use crate::outcome::outcome_json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::handle::HandleId;
use secureclaw_core::store::{ApprovalState, SessionRecord};
use secureclaw_gateway::{CallMeta, Gateway, otel};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Shared state of the HTTP API.
#[derive(Clone)]
pub struct ApiState {
    /// The gateway.
    pub gateway: Gateway,
    /// The operator's bearer token.
    pub operator_token: Arc<String>,
}

/// A JSON error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

/// Marks a response whose request body axum's `Json` extractor refused (not JSON, the wrong
/// shape, another content type), so that the body middleware audits it.
#[derive(Debug, Clone, Copy)]
struct BodyRejected;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let rejected = self.code == BODY_REJECTED;
        let mut response = (
            self.status,
            Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response();
        if rejected {
            response.extensions_mut().insert(BodyRejected);
        }
        response
    }
}

/// The error code of a body axum's `Json` extractor refused.
const BODY_REJECTED: &str = "bad_request";

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        Self::new(status, BODY_REJECTED, r.body_text())
    }
}

impl From<secureclaw_gateway::GatewayError> for ApiError {
    fn from(e: secureclaw_gateway::GatewayError) -> Self {
        use secureclaw_gateway::GatewayError as G;
        match e {
            G::NotFound(_) => Self::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            G::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            G::Store(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "store unavailable",
            ),
            G::Upstream(_) | G::Keys(_) | G::Config(_) | G::Catalog(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            ),
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn operator(state: &ApiState, headers: &HeaderMap) -> Result<(), ApiError> {
    use subtle::ConstantTimeEq;
    let given = bearer(headers).unwrap_or_default();
    let ok = given.len() == state.operator_token.len()
        && bool::from(given.as_bytes().ct_eq(state.operator_token.as_bytes()));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "operator token required",
        ))
    }
}

/// Resolve the session named by the bearer token.
///
/// # Errors
/// 401 without a live session.
pub async fn session_from(
    gateway: &Gateway,
    headers: &HeaderMap,
) -> Result<SessionRecord, ApiError> {
    let id = bearer(headers).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "session token required",
        )
    })?;
    gateway.session(id).await?.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unknown or expired session",
        )
    })
}

/// The operator's bearer token, checked before a handler runs (401 otherwise).
struct Operator;

impl FromRequestParts<ApiState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        match operator(state, &parts.headers) {
            Ok(()) => Ok(Self),
            Err(e) => {
                state
                    .gateway
                    .audit_unauthenticated_rejection("http-api", "bad_operator_token")
                    .await;
                Err(e)
            }
        }
    }
}

/// The live session the bearer token names ([`session_from`]; 401 otherwise).
struct RuntimeSession(SessionRecord);

impl FromRequestParts<ApiState> for RuntimeSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        match session_from(&state.gateway, &parts.headers).await {
            Ok(s) => Ok(Self(s)),
            Err(e) => {
                if e.status == StatusCode::UNAUTHORIZED {
                    state
                        .gateway
                        .audit_unauthenticated_rejection("http-api", "bad_token")
                        .await;
                }
                Err(e)
            }
        }
    }
}

/// A TCP listener that sets `TCP_NODELAY` on every connection it accepts.
///
/// Without it a small response (an MCP result, an HTTP API answer) can wait for the client's
/// delayed ACK behind Nagle's algorithm: HTTP `/mcp` calls were measured stalling 43 ms.
/// `serve` passes its listener through this before handing it to `axum::serve`.
pub fn nodelay_listener(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(stream: &mut tokio::net::TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    }
    listener.tap_io(set as fn(&mut tokio::net::TcpStream))
}

/// The API router (without `/mcp`, which the binary nests beside it), with the approvals page
/// ([`crate::approvals_ui`]) at `/approvals`.
pub fn router(state: ApiState, body_limit: usize) -> Router {
    let page = crate::approvals_ui::router(state.clone());
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/sessions", post(open_session))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}/approve", post(approve))
        .route("/v1/approvals/{id}/deny", post(deny))
        .route("/v1/grants", get(list_grants))
        .route("/v1/grants/{id}/revoke", post(revoke_grant))
        .route("/v1/audit", get(audit))
        .route("/v1/audit/verify", get(audit_verify))
        .route("/v1/tools", get(tools))
        .route("/v1/tools/quarantine", get(tool_quarantine))
        .route("/v1/tools/pin", post(pin_tool))
        .route("/v1/call", post(call))
        .route("/v1/branches/{branch}/promote", post(promote_branch))
        .route("/v1/branches/{branch}/abandon", post(abandon_branch))
        .route("/v1/sessions/{id}/exposure", get(exposure))
        .route("/v1/preview", post(preview))
        .route("/v1/commit", post(commit))
        .route(
            "/v1/handles/{id}",
            get(describe_handle).delete(revoke_handle),
        )
        .layer(axum::middleware::from_fn({
            let gateway = state.gateway.clone();
            move |request, next| scan_body(request, next, body_limit, gateway.clone())
        }))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
        .merge(page)
}

/// Refuse a request body with a duplicate object key or nesting past the gateway's limit
/// before any handler parses it (`serde_json` would keep the last key silently; issue 12
/// item 8). Malformed JSON goes on to the handler, whose extractor names the problem.
async fn scan_body(
    request: axum::extract::Request,
    next: axum::middleware::Next,
    body_limit: usize,
    gateway: Gateway,
) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // Refusals are audited in the session the bearer token names; an operator or
    // unauthenticated request's are coalesced (at most one record per second: no peer can
    // grow the audit log at will without a session).
    let audit = async |reason: &str| audit_api_rejection(&gateway, &parts.headers, reason).await;
    let mut bytes = match axum::body::to_bytes(body, body_limit).await {
        Ok(bytes) => bytes,
        Err(e) if crate::conn::is_body_read_timeout(&e) => {
            audit("body_read_timeout").await;
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time",
            )
            .into_response();
        }
        Err(_) => {
            audit("request_too_large").await;
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("request body larger than {body_limit} bytes"),
            )
            .into_response();
        }
    };
    if !bytes.is_empty() {
        use secureclaw_core::rawjson::RawJsonError;
        // The body wraps the arguments in at most three objects (body, `arguments`, nesting).
        let (body, scanned) = crate::mcp_http::scan_body(bytes).await;
        bytes = body;
        match scanned {
            Err(
                e @ (RawJsonError::DuplicateKey { .. }
                | RawJsonError::TooDeep { .. }
                | RawJsonError::TooManyValues { .. }),
            ) => {
                audit(match e {
                    RawJsonError::TooDeep { .. } => "request_too_deep",
                    RawJsonError::TooManyValues { .. } => "request_too_many_values",
                    _ => "duplicate_key",
                })
                .await;
                return ApiError::new(StatusCode::BAD_REQUEST, "invalid_arguments", e.to_string())
                    .into_response();
            }
            Err(RawJsonError::Syntax(_)) | Ok(()) => {}
        }
    }
    let headers = parts.headers.clone();
    let response = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
        .await;
    // The `Json` extractor's rejections (a body that is not JSON, of the wrong shape, or sent
    // with another content type) are answered before any handler runs; they are refusals like
    // the others and audited so (red-team round 3: they left no record).
    if response.extensions().get::<BodyRejected>().is_some() {
        audit_api_rejection(&gateway, &headers, "malformed_request").await;
    }
    response
}

/// Audit a refused `/v1` request: in the session the bearer token names, or, for an operator
/// or unauthenticated request, coalesced (at most one record per second: no peer can grow the
/// audit log at will without a session).
async fn audit_api_rejection(gateway: &Gateway, headers: &axum::http::HeaderMap, reason: &str) {
    match session_from(gateway, headers).await {
        Ok(s) => {
            gateway
                .audit_rejection("http-api", reason, Some(&s), None)
                .await;
        }
        Err(_) => {
            tracing::info!(reason, "refused an HTTP API request");
            gateway
                .audit_unauthenticated_rejection("http-api", reason)
                .await;
        }
    }
}

async fn health(State(s): State<ApiState>) -> Json<Value> {
    Json(json!({"status": "ok", "policy_digest": s.gateway.policy_digest()}))
}

/// The Prometheus scrape (operator token: metric labels name tools and upstreams).
async fn metrics(State(s): State<ApiState>, _: Operator) -> Result<Response, ApiError> {
    let text = s.gateway.render_metrics().await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenSession {
    caller: String,
    #[serde(default)]
    task: TaskEnvelope,
}

async fn open_session(
    State(s): State<ApiState>,
    _: Operator,
    body: Result<Json<OpenSession>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    if body.caller.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "`caller` must not be empty",
        ));
    }
    let session = s.gateway.open_session(&body.caller, body.task).await?;
    Ok(Json(
        json!({"session_id": session.id, "audit_session": secureclaw_gateway::audit_session_id(&session.id),
               "caller": session.caller, "expires_at": session.expires_at}),
    ))
}

#[derive(Deserialize)]
struct ApprovalQuery {
    state: Option<String>,
}

async fn list_approvals(
    State(s): State<ApiState>,
    Query(q): Query<ApprovalQuery>,
    _: Operator,
) -> Result<Json<Value>, ApiError> {
    let state = match q.state.as_deref() {
        None | Some("all") => None,
        Some("pending") => Some(ApprovalState::Pending),
        Some("approved") => Some(ApprovalState::Approved),
        Some("denied") => Some(ApprovalState::Denied),
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("unknown state `{other}`"),
            ));
        }
    };
    let mut list: Vec<Value> = Vec::new();
    for v in s.gateway.approvals_for_approver(state).await? {
        let a = &v.approval;
        list.push(json!({"action_id": a.action_id, "state": a.state.as_str(), "tool": v.tool, "call": v.call,
               "session": v.session, "session_ended": v.session_ended, "caller": v.caller, "created_at": a.created_at}));
    }
    Ok(Json(json!({"approvals": list})))
}

/// The header an operator API client names its human approver in (recorded as
/// `operator-api:NAME`; see [`secureclaw_gateway::approver_identity`]).
pub const APPROVER_HEADER: &str = "x-secureclaw-approver";

/// The decider of an operator API request: `operator-api`, or `operator-api:NAME` with an
/// [`APPROVER_HEADER`].
///
/// # Errors
/// 400 for a header that is not a valid approver name.
fn approver(headers: &axum::http::HeaderMap) -> Result<String, ApiError> {
    let name =
        match headers.get(APPROVER_HEADER) {
            None => None,
            Some(v) => Some(v.to_str().map_err(|_| {
                bad_request(format!("{APPROVER_HEADER}: not a valid approver name"))
            })?),
        };
    secureclaw_gateway::approver_identity("operator-api", name)
        .map_err(|e| bad_request(format!("{APPROVER_HEADER}: {e}")))
}

async fn decide(
    s: &ApiState,
    id: String,
    approve: bool,
    decider: &str,
) -> Result<Json<Value>, ApiError> {
    let record = s
        .gateway
        .decide_approval(&ActionId(id), approve, decider)
        .await?;
    Ok(Json(
        json!({"action_id": record.action_id, "state": record.state.as_str()}),
    ))
}

/// The optional body of `POST /v1/approvals/{id}/approve`: the terms of a standing grant.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    allow_for: Option<String>,
    uses: Option<u64>,
    max_amount: Option<u64>,
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
}

/// The terms of `body`, if it asks for a standing grant.
///
/// # Errors
/// 400 for a body that is not the expected JSON or terms that make no grant.
fn grant_terms(body: &[u8]) -> Result<Option<secureclaw_gateway::GrantTerms>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let b: GrantBody =
        serde_json::from_slice(body).map_err(|e| bad_request(format!("approve body: {e}")))?;
    if b.allow_for.is_none() && b.uses.is_none() && b.max_amount.is_none() {
        return Ok(None);
    }
    let allow_for_ms = b
        .allow_for
        .as_deref()
        .map(secureclaw_gateway::parse_duration)
        .transpose()
        .map_err(|e| bad_request(e.to_string()))?;
    secureclaw_gateway::GrantTerms {
        allow_for_ms,
        uses: b.uses,
        max_amount: b.max_amount,
    }
    .validate()
    .map(Some)
    .map_err(|e| bad_request(e.to_string()))
}

async fn approve(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    _: Operator,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let decider = approver(&headers)?;
    let Some(terms) = grant_terms(&body)? else {
        return decide(&s, id, true, &decider).await;
    };
    let (record, grant) = s
        .gateway
        .approve_with_grant(&ActionId(id), &decider, terms)
        .await?;
    let view = secureclaw_gateway::GrantView::of(&grant, grant.created_at);
    Ok(Json(
        json!({"action_id": record.action_id, "state": record.state.as_str(),
        "grant": view}),
    ))
}

#[derive(Deserialize)]
struct GrantQuery {
    all: Option<bool>,
}

async fn list_grants(
    State(s): State<ApiState>,
    Query(q): Query<GrantQuery>,
    _: Operator,
) -> Result<Json<Value>, ApiError> {
    let list = s.gateway.grants(q.all.unwrap_or(false)).await?;
    Ok(Json(json!({"grants": list})))
}

async fn revoke_grant(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    _: Operator,
    headers: axum::http::HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let view = s.gateway.revoke_grant(&id, &approver(&headers)?).await?;
    Ok(Json(json!({"grant": view})))
}

async fn deny(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    _: Operator,
    headers: axum::http::HeaderMap,
) -> Result<Json<Value>, ApiError> {
    decide(&s, id, false, &approver(&headers)?).await
}

#[derive(Deserialize)]
struct AuditQuery {
    from: Option<u64>,
    limit: Option<usize>,
}

async fn audit(
    State(s): State<ApiState>,
    Query(q): Query<AuditQuery>,
    _: Operator,
) -> Result<Json<Value>, ApiError> {
    // The gateway's only error here is `Store`: 503 `store_unavailable`.
    let records = s
        .gateway
        .audit_records(q.from.unwrap_or(1), q.limit.unwrap_or(1000).min(10_000))
        .await?;
    Ok(Json(json!({"records": records})))
}

async fn audit_verify(State(s): State<ApiState>, _: Operator) -> Result<Json<Value>, ApiError> {
    match s.gateway.verify_audit_log().await {
        Ok(v) => Ok(Json(json!({
            "verified": v.records,
            "last_seq": v.last_seq,
            "last_mac": v.last_mac,
            "checkpoint": v.checkpoint,
        }))),
        Err(e) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "audit_broken",
            e.to_string(),
        )),
    }
}

/// Operator: the tools the gateway holds quarantined (definition changed since pinned, or
/// never pinned), each with what differs (issue 16 item 4).
async fn tool_quarantine(State(s): State<ApiState>, _: Operator) -> Result<Json<Value>, ApiError> {
    let tools = s.gateway.quarantined_tools().await?;
    Ok(Json(json!({"tools": tools})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PinRequest {
    upstream: String,
    tool: String,
    /// The digest the operator reviewed (from `GET /v1/tools/quarantine`).
    digest: String,
}

/// Operator: pin a quarantined tool exactly as the gateway holds it, if its digest is the one
/// reviewed; 404 `not_quarantined` otherwise.
async fn pin_tool(
    State(s): State<ApiState>,
    _: Operator,
    headers: axum::http::HeaderMap,
    body: Result<Json<PinRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(req) = body?;
    let decider = approver(&headers)?;
    if s.gateway
        .pin_quarantined(&req.upstream, &req.tool, &req.digest, &decider)
        .await?
    {
        Ok(Json(
            json!({"upstream": req.upstream, "tool": req.tool, "digest": req.digest, "pinned": true}),
        ))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_quarantined",
            format!(
                "`{}` of upstream `{}` is not quarantined with digest `{}`: see GET /v1/tools/quarantine",
                req.tool, req.upstream, req.digest
            ),
        ))
    }
}

async fn tools(
    State(s): State<ApiState>,
    RuntimeSession(session): RuntimeSession,
) -> Result<Json<Value>, ApiError> {
    let list: Vec<Value> = s
        .gateway
        .list_tools(&session.caller)
        .await
        .into_iter()
        .map(|t| json!({"name": t.exposed, "description": t.upstream_tool.description, "effect": t.effect,
                        "input_schema": t.upstream_tool.input_schema}))
        .collect();
    Ok(Json(json!({"tools": list})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    tool: String,
    #[serde(default)]
    arguments: Map<String, Value>,
    #[serde(default)]
    approval: Option<String>,
    /// `_meta` keys (`dev.secureclaw/mode`, `dev.secureclaw/branch`,
    /// `dev.secureclaw/confidence`, `dev.secureclaw/approval`); also accepted as `_meta`, the
    /// name the recovery texts use (new-user trial).
    #[serde(default, alias = "_meta")]
    meta: Map<String, Value>,
}

/// The W3C `traceparent` header of a request (the parent of its call's span), if valid.
fn trace_parent(headers: &HeaderMap) -> Option<otel::TraceParent> {
    headers
        .get(otel::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(otel::TraceParent::parse)
}

async fn call(
    State(s): State<ApiState>,
    RuntimeSession(session): RuntimeSession,
    headers: HeaderMap,
    body: Result<Json<CallBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    // `{"mode": "speculative"}` without the namespace was taken for no metadata at all, so a
    // pre-commit call ran as a committed one and skipped its privacy contract (a trial of
    // the README, which showed the bare names): refused with the names to use.
    if let Some(k) = body
        .meta
        .keys()
        .find(|k| matches!(k.as_str(), "mode" | "branch" | "confidence" | "approval"))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_meta",
            format!("`meta` key `{k}` needs its namespace: write `dev.secureclaw/{k}`"),
        ));
    }
    let mut meta = CallMeta::from_meta(&body.meta)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_meta", e))?;
    if let Some(a) = body.approval {
        meta.approval = Some(ActionId(a));
    }
    // The header, else `_meta.traceparent` as on MCP.
    let parent = trace_parent(&headers).or_else(|| {
        body.meta
            .get(otel::TRACEPARENT)
            .and_then(Value::as_str)
            .and_then(otel::TraceParent::parse)
    });
    let outcome = otel::with_parent(
        parent,
        s.gateway.call(&session, &body.tool, body.arguments, &meta),
    )
    .await;
    Ok(Json(outcome_json(&outcome)))
}

fn branch_arg(branch: &str) -> Result<(), ApiError> {
    if secureclaw_gateway::valid_branch(branch) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_branch",
            "a branch id is 1-128 characters of A-Z a-z 0-9 . _ : -",
        ))
    }
}

async fn promote_branch(
    State(s): State<ApiState>,
    Path(branch): Path<String>,
    RuntimeSession(session): RuntimeSession,
) -> Result<Json<Value>, ApiError> {
    branch_arg(&branch)?;
    let released = s.gateway.promote_branch(&session, &branch).await?;
    let calls: Vec<Value> = released
        .iter()
        .map(|r| json!({"tool": r.tool, "result": outcome_json(&r.outcome)}))
        .collect();
    Ok(Json(
        json!({"branch": branch, "state": "promoted", "released": calls}),
    ))
}

async fn abandon_branch(
    State(s): State<ApiState>,
    Path(branch): Path<String>,
    RuntimeSession(session): RuntimeSession,
) -> Result<Json<Value>, ApiError> {
    branch_arg(&branch)?;
    let n = s.gateway.abandon_branch(&session, &branch).await?;
    Ok(Json(
        json!({"branch": branch, "state": "abandoned", "discarded": n}),
    ))
}

async fn exposure(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    _: Operator,
) -> Result<Json<Value>, ApiError> {
    let report = s.gateway.exposure(&id).await?;
    Ok(Json(json!({"session": id, "observers": report})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewBody {
    tool: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

async fn preview(
    State(s): State<ApiState>,
    RuntimeSession(session): RuntimeSession,
    headers: HeaderMap,
    body: Result<Json<PreviewBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    Ok(Json(
        match otel::with_parent(
            trace_parent(&headers),
            s.gateway.preview(&session, &body.tool, &body.arguments),
        )
        .await
        {
            Ok(p) => serde_json::to_value(&p).unwrap_or(Value::Null),
            Err(recovery) => json!({"status": "denied", "recovery": recovery}),
        },
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    tool: String,
    #[serde(default)]
    arguments: Map<String, Value>,
    #[serde(default)]
    action_id: String,
    #[serde(default)]
    artifact: Option<String>,
}

async fn commit(
    State(s): State<ApiState>,
    RuntimeSession(session): RuntimeSession,
    headers: HeaderMap,
    body: Result<Json<CommitBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let action_id = ActionId(body.action_id);
    let outcome = otel::with_parent(
        trace_parent(&headers),
        s.gateway.commit(
            &session,
            &body.tool,
            body.arguments,
            &action_id,
            body.artifact.as_deref(),
        ),
    )
    .await;
    Ok(Json(outcome_json(&outcome)))
}

async fn describe_handle(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    RuntimeSession(session): RuntimeSession,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        s.gateway.describe_handle(&session, &HandleId(id)).await?,
    ))
}

async fn revoke_handle(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    RuntimeSession(session): RuntimeSession,
) -> Result<Json<Value>, ApiError> {
    s.gateway
        .revoke_handle(&session, &HandleId(id.clone()))
        .await?;
    Ok(Json(json!({"handle": id, "revoked": true})))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::nodelay_listener;
    use axum::serve::Listener;

    /// Regression: `serve` accepted sockets with Nagle's algorithm on, so small `/mcp` answers
    /// waited for the client's delayed ACK (43 ms per call).
    #[tokio::test]
    async fn accepted_sockets_have_tcp_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = nodelay_listener(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await;
        assert!(stream.nodelay().unwrap());
    }
}
