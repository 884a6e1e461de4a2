//! The Streamable HTTP MCP endpoint with MCP sessions bound to callers (issue 12).
//!
//! rmcp's [`StreamableHttpService`] issues `Mcp-Session-Id`s but does not know who asked for
//! them: anyone holding a session id could use or delete that MCP session. [`mcp_router`] puts
//! a guard in front of it:
//!
//! - **Owner.** An MCP session belongs to the bearer token of the `initialize` request that
//!   created it (the guard keeps a SHA-256 of the token, never the token), or to "no token" if
//!   it was created without one. A request naming the session with any other token — or
//!   without the owner's token — gets `404 Not Found`, exactly as an unknown session does, for
//!   `POST`, `GET` and `DELETE` alike.
//! - **Tokens at `initialize`.** When `require_token` is set (every bind without
//!   `tokenless_loopback_session`), `initialize` without a bearer token is `401`; with a token,
//!   the token must name a live gateway session.
//! - **No re-initialization.** An `initialize` naming a live session is refused (`400`, a
//!   JSON-RPC error with the request's id).
//! - **One answer per body.** Every `POST` gets a JSON-RPC answer, never plain text: a body
//!   that is not JSON is `-32700` with id `null`; one nested too deep or larger than the limit
//!   (`413`) is `-32600` with the request's id when it can be read from the bytes (before the
//!   limit), `null` otherwise; a key twice is `-32602`; a batch is `-32600`.
//! - **One reply per request.** A JSON-RPC request whose id is already in flight on the same
//!   session is refused (`409`, JSON-RPC error `-32600` with that id) and never dispatched. An id
//!   is in flight until its response body has been sent (or dropped).
//!
//! - **MCP 2026-07-28 (stateless).** A `POST` without a session id whose `MCP-Protocol-Version`
//!   header is 2026-07-28 or later is served without an MCP session (`server/discover`,
//!   per-request `_meta`): it passes the same token check as `initialize`, and every tool call
//!   resolves its caller from its own bearer token. There is no session to own, bound or
//!   share; each request is answered on its own response. rmcp checks that the header matches
//!   the body's `_meta` protocol version and that the `Mcp-Method`/`Mcp-Name` headers match
//!   the body (`HeaderMismatch`).
//!
//! Session ids rmcp no longer knows (it answered 404) and deleted sessions are forgotten. Any
//! other request without a session id that carries a message is refused (`400`); a body-less
//! `GET` or `DELETE` without one is left to rmcp, which refuses it.

use crate::mcp::McpFrontEnd;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secureclaw_core::rawjson::RawJsonError;
use secureclaw_gateway::Gateway;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use subtle::ConstantTimeEq;

/// The MCP session header.
const SESSION_HEADER: &str = "mcp-session-id";

/// SHA-256 of a bearer token (`None`: no token).
type Owner = Option<[u8; 32]>;

struct Session {
    owner: Owner,
    /// JSON-RPC ids in flight (their JSON text: `1` and `"1"` are different ids).
    in_flight: HashSet<String>,
    /// Ids in flight that the client cancelled (`notifications/cancelled`): rmcp then ends
    /// their response without an answer while the call runs on, so the id is held as for an
    /// abandoned response ([`Release`]). A subset of `in_flight`.
    cancelled: HashSet<String>,
    /// The last request naming this session.
    last_used: std::time::Instant,
}

/// Bounds on the MCP sessions the endpoint keeps (issue 12 item 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSessionLimits {
    /// Live MCP sessions per bearer token; `initialize` beyond is refused (`429`). Default 16.
    pub per_token: usize,
    /// Live MCP sessions created without a token (only possible with a token-less loopback
    /// session). Default 16.
    pub tokenless: usize,
    /// An MCP session with no request for this long is closed (rmcp's keep-alive) and no
    /// longer counted. Default 5 min.
    pub idle: std::time::Duration,
}

impl Default for McpSessionLimits {
    fn default() -> Self {
        Self {
            per_token: 16,
            tokenless: 16,
            idle: std::time::Duration::from_secs(300),
        }
    }
}

struct Guard {
    gateway: Gateway,
    require_token: bool,
    max_body: usize,
    limits: McpSessionLimits,
    sessions: Mutex<HashMap<String, Session>>,
}

impl Guard {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
}

fn digest(token: Option<&str>) -> Owner {
    token.map(|t| Sha256::digest(t.as_bytes()).into())
}

fn same_owner(a: &Owner, b: &Owner) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => bool::from(a.ct_eq(b)),
        (None, None) => true,
        _ => false,
    }
}

use secureclaw_core::rawjson::MESSAGE_MAX_DEPTH;

fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        ),
    )
        .into_response()
}

/// Audit a refused request (metadata only) in the session its bearer token names. A request
/// without a live session's token is audited coalesced (at most one record per second, with
/// a count: an unauthenticated peer must not be able to grow the audit log at will).
async fn audit_rejection(guard: &Guard, headers: &HeaderMap, reason: &str) {
    let session = match bearer(headers) {
        Some(t) => guard.gateway.session(t).await.ok().flatten(),
        None => None,
    };
    match session {
        Some(s) => {
            guard
                .gateway
                .audit_rejection("mcp-http", reason, Some(&s), None)
                .await;
        }
        None => {
            tracing::info!(reason, "refused an MCP request without a session");
            guard
                .gateway
                .audit_unauthenticated_rejection("mcp-http", reason)
                .await;
        }
    }
}

/// Why a request body was not read whole.
enum BodyError {
    /// Longer than the limit: its first bytes (at most the limit), to recover the id from.
    TooLarge(Vec<u8>),
    /// It did not arrive in time (the connection's body read timeout).
    Timeout,
    /// The connection broke.
    Broken,
}

/// Read `body` whole if it is at most `limit` bytes. Reading stops at the limit, so a body
/// of any size costs at most `limit` bytes.
async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => return Ok(Bytes::from(buf)),
            Some(Err(e)) if crate::conn::is_body_read_timeout(&e) => {
                return Err(BodyError::Timeout);
            }
            Some(Err(_)) => return Err(BodyError::Broken),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if buf.len().saturating_add(data.len()) > limit {
                    let room = limit.saturating_sub(buf.len());
                    buf.extend_from_slice(data.get(..room).unwrap_or_default());
                    return Err(BodyError::TooLarge(buf));
                }
                buf.extend_from_slice(&data);
            }
        }
    }
}

/// What the session guard reads of a JSON-RPC message: its `id` (an explicit `null` is
/// `Some(Value::Null)`) and `method`. Everything else, `params` included, is skipped.
#[derive(Debug, Default, serde::Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
}

/// The request a `notifications/cancelled` message cancels (`params.requestId`).
#[derive(Debug, serde::Deserialize)]
struct Cancellation {
    params: CancellationParams,
}

#[derive(Debug, serde::Deserialize)]
struct CancellationParams {
    #[serde(rename = "requestId")]
    request_id: Value,
}

/// A member that is present, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// Bodies at least this large are scanned on a blocking thread ([`scan_body`]).
const SCAN_OFF_WORKERS_BYTES: usize = 256 * 1024;

/// [`secureclaw_core::rawjson::scan`] of a request body with the message limits, on a blocking
/// thread when the body is large; the body is handed back for the next step.
pub(crate) async fn scan_body(bytes: Bytes) -> (Bytes, Result<(), RawJsonError>) {
    if bytes.len() < SCAN_OFF_WORKERS_BYTES {
        let scanned = secureclaw_core::rawjson::scan(&bytes, MESSAGE_MAX_DEPTH);
        return (bytes, scanned);
    }
    let body = bytes.clone();
    let scanned = tokio::task::spawn_blocking(move || {
        secureclaw_core::rawjson::scan(&body, MESSAGE_MAX_DEPTH)
    })
    .await
    .unwrap_or_else(|_| Err(RawJsonError::Syntax("the scan did not finish".into())));
    (bytes, scanned)
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// The Streamable HTTP MCP endpoint for `front`, to nest under `/mcp`: rmcp's service (Host
/// and Origin checks, `max_body` bytes per request) behind the session guard of the module
/// docs. `require_token`: `initialize` needs a bearer token naming a live session.
pub fn mcp_router(
    front: McpFrontEnd,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_body: usize,
    require_token: bool,
) -> axum::Router {
    mcp_router_with_limits(
        front,
        allowed_hosts,
        allowed_origins,
        max_body,
        require_token,
        McpSessionLimits::default(),
    )
}

/// [`mcp_router`] with explicit session limits.
pub fn mcp_router_with_limits(
    front: McpFrontEnd,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_body: usize,
    require_token: bool,
    limits: McpSessionLimits,
) -> axum::Router {
    let idle = limits.idle;
    let guard = Arc::new(Guard {
        gateway: front.gateway().clone(),
        require_token,
        max_body,
        limits,
        sessions: Mutex::new(HashMap::new()),
    });
    let service =
        front.streamable_http_service_idle(allowed_hosts, allowed_origins, max_body, idle);
    axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(guard, guard_request))
}

async fn guard_request(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let owner = digest(bearer(request.headers()));
    let session_id = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (request, message) = if request.method() == Method::POST {
        let (parts, body) = request.into_parts();
        let bytes = match read_body(body, guard.max_body).await {
            Ok(b) => b,
            Err(BodyError::Timeout) => {
                audit_rejection(&guard, &parts.headers, "body_read_timeout").await;
                return jsonrpc_error(
                    StatusCode::REQUEST_TIMEOUT,
                    Value::Null,
                    -32600,
                    "invalid request: the body did not arrive in time",
                );
            }
            Err(BodyError::TooLarge(prefix)) => {
                audit_rejection(&guard, &parts.headers, "request_too_large").await;
                // The id, when the body names it before the limit.
                let id = secureclaw_core::rawjson::recover_id(&prefix).unwrap_or(Value::Null);
                return jsonrpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    id,
                    -32600,
                    &format!(
                        "invalid request: the body is larger than {} bytes",
                        guard.max_body
                    ),
                );
            }
            Err(BodyError::Broken) => {
                audit_rejection(&guard, &parts.headers, "body_unreadable").await;
                return jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    -32600,
                    "invalid request: the body could not be read",
                );
            }
        };
        // Every request gets one answer: bytes rmcp would drop silently (not JSON, nested past
        // the gateway's limit, a key twice, too many values) are answered here, with the id
        // when it parses. A large body is scanned off the async workers, so that other
        // requests (`/health` too) are not kept waiting behind it.
        let (bytes, scanned) = scan_body(bytes).await;
        if let Err(e) = scanned {
            // Recovered from the bytes: a message too deep for `serde_json` still names its id.
            let id = secureclaw_core::rawjson::recover_id(&bytes).unwrap_or(Value::Null);
            let (code, text) = match &e {
                RawJsonError::Syntax(_) => {
                    (-32700, "parse error: the body is not valid JSON".to_owned())
                }
                RawJsonError::TooDeep { .. } => (
                    -32600,
                    format!(
                        "invalid request: {e} (arguments may nest {} levels)",
                        secureclaw_core::canonical::MAX_DEPTH
                    ),
                ),
                RawJsonError::DuplicateKey { .. } => (-32602, format!("invalid_arguments: {e}")),
                RawJsonError::TooManyValues { .. } => (
                    -32600,
                    format!("invalid request: {e} (send a large document as one string)"),
                ),
            };
            let id = if matches!(e, RawJsonError::Syntax(_)) {
                Value::Null
            } else {
                id
            };
            // The reason only: a duplicate key's name may itself be a protected value.
            let reason = match &e {
                RawJsonError::Syntax(_) => "parse_error",
                RawJsonError::TooDeep { .. } => "request_too_deep",
                RawJsonError::DuplicateKey { .. } => "duplicate_key",
                RawJsonError::TooManyValues { .. } => "request_too_many_values",
            };
            audit_rejection(&guard, &parts.headers, reason).await;
            return jsonrpc_error(StatusCode::BAD_REQUEST, id, code, &text);
        }
        // MCP has no batches (since 2025-06-18): one answer for the whole array.
        if bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'[')
        {
            audit_rejection(&guard, &parts.headers, "batch").await;
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32600,
                "invalid request: batches are not supported",
            );
        }
        // The envelope only (`id`, `method`): `params` is skipped, not built, so a large call
        // is parsed into values once, by rmcp, not twice.
        let message = serde_json::from_slice::<Envelope>(&bytes).unwrap_or_default();
        if message.method.as_ref().and_then(Value::as_str) == Some("notifications/cancelled")
            && let Some(sid) = &session_id
            && let Ok(cancel) = serde_json::from_slice::<Cancellation>(&bytes)
            && let Some(session) = guard.sessions().get_mut(sid)
            && same_owner(&session.owner, &owner)
        {
            let key = in_flight_key(&cancel.params.request_id);
            if session.in_flight.contains(&key) {
                session.cancelled.insert(key);
            }
        }
        (Request::from_parts(parts, Body::from(bytes)), Some(message))
    } else {
        (request, None)
    };
    let id = message.as_ref().and_then(|m| m.id.clone());
    // An id rmcp cannot read (`1.5`, beyond i64, `true`, `null`, an object) would get rmcp's
    // plain-text 415: answered here as JSON-RPC, and audited (red-team round 2).
    if let Some(bad) = &id
        && serde_json::from_value::<rmcp::model::NumberOrString>(bad.clone()).is_err()
    {
        audit_rejection(&guard, request.headers(), "invalid_request_id").await;
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "invalid request: the id must be a string or an integer",
        );
    }
    let is_initialize = message
        .as_ref()
        .is_some_and(|m| m.method.as_ref().and_then(Value::as_str) == Some("initialize"));
    let Some(session_id) = session_id else {
        if is_initialize {
            return initialize(&guard, owner, id, request, next).await;
        }
        // Every other request needs the session `initialize` opened. rmcp would otherwise take
        // a request without `Mcp-Session-Id` on its stateless (2026-07-28) path, where none of
        // this guard's checks (session owner, duplicate ids, session limits) apply (red-team
        // of 2026-12-03). A body-less GET or DELETE without a session is left to rmcp, which
        // refuses it.
        if message.is_some() && stateless_version(request.headers()) {
            let id = id.unwrap_or(Value::Null);
            if let Err(refused) = check_token(&guard, request.headers(), &id).await {
                return refused;
            }
            return next.run(request).await;
        }
        if message.is_some() {
            audit_rejection(&guard, request.headers(), "missing_mcp_session").await;
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                id.unwrap_or(Value::Null),
                -32600,
                "no MCP session: send initialize first and then the Mcp-Session-Id header it returns, or speak MCP 2026-07-28 (MCP-Protocol-Version: 2026-07-28 and per-request _meta)",
            );
        }
        return next.run(request).await;
    };
    let method = request.method().clone();
    // Decided under the session table's lock; refusals are audited after it is released
    // (the lock is not held across an await).
    let checked: Result<Option<String>, &'static str> = {
        let mut sessions = guard.sessions();
        match sessions.get_mut(&session_id) {
            // Unknown and foreign sessions get the same answer (`404`).
            None => Err("unknown_mcp_session"),
            Some(session) if !same_owner(&session.owner, &owner) => Err("foreign_mcp_session"),
            Some(session) => {
                session.last_used = std::time::Instant::now();
                if is_initialize {
                    Err("reinitialize")
                } else {
                    // A request (method and id) must not reuse an id that is still in flight.
                    match (&id, message.as_ref().and_then(|m| m.method.as_ref())) {
                        (Some(id), Some(_)) => {
                            let key = in_flight_key(id);
                            if session.in_flight.insert(key.clone()) {
                                Ok(Some(key))
                            } else {
                                Err("duplicate_id")
                            }
                        }
                        _ => Ok(None),
                    }
                }
            }
        }
    };
    let request_id = match checked {
        Ok(key) => key,
        Err(reason) => {
            audit_rejection(&guard, request.headers(), reason).await;
            return if reason == "unknown_mcp_session" || reason == "foreign_mcp_session" {
                not_found()
            } else if reason == "reinitialize" {
                jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    id.unwrap_or(Value::Null),
                    -32600,
                    "this MCP session is already initialized",
                )
            } else {
                jsonrpc_error(
                    StatusCode::CONFLICT,
                    id.unwrap_or(Value::Null),
                    -32600,
                    "a request with this id is already in flight on this session",
                )
            };
        }
    };
    let release = request_id.map(|key| Release {
        guard: guard.clone(),
        session: session_id.clone(),
        key,
        finished: false,
    });
    let response = next.run(request).await;
    if response.status() == StatusCode::NOT_FOUND
        || (method == Method::DELETE && response.status().is_success())
    {
        guard.sessions().remove(&session_id);
    }
    // A session ended by its owner: 204 (rmcp answers 202, which MCP clients such as the
    // Python SDK report as a failed termination).
    if method == Method::DELETE && response.status().is_success() {
        return StatusCode::NO_CONTENT.into_response();
    }
    match release {
        Some(release) => response.map(|inner| Body::new(Tracked { inner, release })),
        None => response,
    }
}

/// The key under which an in-flight request id is tracked: the id as rmcp reads it
/// ([`rmcp::model::NumberOrString`]), so that spellings rmcp takes for one id (`1`, `1.0`,
/// `1e0`; `0`, `-0`, `0.0`) are one key (red-team of 2026-12-03: `1` and `1.0` ran two effects
/// and one reply went to the wrong request). An id rmcp cannot read keeps its JSON text (rmcp
/// refuses that request anyway).
fn in_flight_key(id: &Value) -> String {
    match serde_json::from_value::<rmcp::model::NumberOrString>(id.clone()) {
        Ok(rmcp::model::NumberOrString::Number(n)) => format!("n:{n}"),
        Ok(rmcp::model::NumberOrString::String(s)) => format!("s:{s}"),
        Err(_) => format!("json:{id}"),
    }
}

/// Whether a request without a session id declares MCP 2026-07-28 or later in its
/// `MCP-Protocol-Version` header (the stateless protocol; versions are ISO dates, so they
/// compare as strings).
fn stateless_version(headers: &HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() == 10 && v >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
}

/// The bearer-token check of a request that opens or needs no MCP session (`initialize`, a
/// stateless 2026-07-28 request): without a token only when token-less requests are allowed;
/// a token must name a live gateway session. A refusal is the answer to send (audited).
async fn check_token(guard: &Guard, headers: &HeaderMap, id: &Value) -> Result<(), Response> {
    match bearer(headers) {
        None if guard.require_token => {
            audit_rejection(guard, headers, "missing_token").await;
            Err(jsonrpc_error(
                StatusCode::UNAUTHORIZED,
                id.clone(),
                -32600,
                "a session bearer token is required (Authorization: Bearer ses_…, from POST /v1/sessions with the operator token)",
            ))
        }
        None => Ok(()),
        Some(token) => match guard.gateway.session(token).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => {
                audit_rejection(guard, headers, "bad_token").await;
                Err(jsonrpc_error(
                    StatusCode::UNAUTHORIZED,
                    id.clone(),
                    -32600,
                    "unknown or expired session token",
                ))
            }
            Err(_) => Err(jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id.clone(),
                -32603,
                "store unavailable",
            )),
        },
    }
}

async fn initialize(
    guard: &Guard,
    owner: Owner,
    id: Option<Value>,
    request: Request,
    next: Next,
) -> Response {
    let id = id.unwrap_or(Value::Null);
    if let Err(refused) = check_token(guard, request.headers(), &id).await {
        return refused;
    }
    // Sessions per owner: idle ones (closed by rmcp after the same time) are forgotten
    // first; a full owner's `initialize` is refused, and everyone else keeps being served.
    let full = {
        let mut sessions = guard.sessions();
        let idle = guard.limits.idle;
        sessions.retain(|_, s| !s.in_flight.is_empty() || s.last_used.elapsed() < idle);
        let live = sessions
            .values()
            .filter(|s| same_owner(&s.owner, &owner))
            .count();
        let limit = if owner.is_some() {
            guard.limits.per_token
        } else {
            guard.limits.tokenless
        };
        live >= limit
    };
    if full {
        audit_rejection(guard, request.headers(), "mcp_session_limit").await;
        return jsonrpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            id,
            -32600,
            "too many open MCP sessions for this token; end one (DELETE /mcp) or reuse it",
        );
    }
    let response = next.run(request).await;
    if response.status().is_success()
        && let Some(sid) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        guard.sessions().insert(
            sid.to_owned(),
            Session {
                owner,
                in_flight: HashSet::new(),
                cancelled: HashSet::new(),
                last_used: std::time::Instant::now(),
            },
        );
    }
    response
}

/// Takes a request id out of its session's in-flight set when dropped.
struct Release {
    guard: Arc<Guard>,
    session: String,
    key: String,
    /// The response was read to its end.
    finished: bool,
}

impl Release {
    fn release(guard: &Guard, session: &str, key: &str) {
        if let Some(s) = guard.sessions().get_mut(session) {
            s.in_flight.remove(key);
            s.cancelled.remove(key);
        }
    }

    /// Whether the client cancelled the request (its response then ends without an answer).
    fn cancelled(&self) -> bool {
        self.guard
            .sessions()
            .get(&self.session)
            .is_some_and(|s| s.cancelled.contains(&self.key))
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.finished && !self.cancelled() {
            Self::release(&self.guard, &self.session, &self.key);
            return;
        }
        // Abandoned before its answer, or cancelled (rmcp then ends the response normally,
        // red-team round 3): the call still runs (calls are detached) and rmcp may still
        // answer it, to whichever request then holds the id. The id stays in flight until
        // the call can no longer answer, so a reuse is refused instead of receiving the
        // abandoned call's result (red-team round 2 of 2026-12-03).
        let (guard, session, key) = (
            Arc::clone(&self.guard),
            std::mem::take(&mut self.session),
            std::mem::take(&mut self.key),
        );
        let hold = guard.gateway.upstream_timeout() + std::time::Duration::from_secs(5);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(hold).await;
                Self::release(&guard, &session, &key);
            });
        } else {
            Self::release(&guard, &session, &key);
        }
    }
}

/// A response body that keeps its request id in flight until it is finished (or, dropped
/// before that, for as long as its call could still answer).
struct Tracked {
    inner: Body,
    release: Release,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.release.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
