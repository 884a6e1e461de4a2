//! The approvals page (issue 15 item 1): `GET /approvals` in a browser, for the operator.
//!
//! Plain HTML, no script, no external assets; the list reloads itself every
//! [`REFRESH_SECS`] seconds with `<meta http-equiv="refresh">`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/approvals` | the login form, or (with a session cookie) the pending approvals |
//! | POST | `/approvals/login` | form `token=<operator token>` → session cookie, 303 to `/approvals` |
//! | POST | `/approvals/logout` | form `csrf` → cookie cleared, 303 to `/approvals` |
//! | POST | `/approvals/{action_id}/approve` · `/deny` | form `csrf` → decided (`decided_by` = `web:operator`), 303 to `/approvals` with a one-line message |
//! | POST | `/approvals/{action_id}/approve-grant` | form `csrf`, `minutes`, `uses` (either may be empty, not both) → approved, and a standing grant created for similar calls (`created_by` = `web:operator`), 303 to `/approvals` |
//! | POST | `/approvals/grants/{grant_id}/revoke` | form `csrf` → the standing grant revoked (`by` = `web:operator`), 303 to `/approvals` |
//! | POST | `/approvals/pin` | form `csrf`, `upstream`, `tool`, `digest` → the quarantined tool's definition the page showed is pinned (issue 16 item 4; `by` = `web:operator`), 303 to `/approvals` |
//!
//! Each pending approval offers "Approve once", "Approve and allow similar calls for N
//! minutes / N uses" (a standing grant, see `secureclaw_gateway` `approve_with_grant`) and
//! "Deny"; below them the page lists the live standing grants, each with a revoke button.
//! Below those the page lists the tools held back because their definition
//! changed since it was pinned, or was never pinned (rug pulls): the diff against the pin, the
//! digest, and what the tool-poisoning scan found, with a button that pins exactly that
//! definition (refused if the gateway now holds another digest).
//!
//! Security:
//! - the operator token is compared in constant time, as the API's bearer check does, and is
//!   never stored in the cookie: a login creates a random 256-bit session secret kept in this
//!   process's memory (by its SHA-256 digest), expiring after [`SESSION_TTL`]; the cookie is
//!   `HttpOnly; SameSite=Strict; Path=/approvals`;
//! - every form post carries the login session's random CSRF token (checked in constant
//!   time) and is refused when an `Origin` header names another origin than the request's
//!   `Host`, or `Sec-Fetch-Site` says the request came from another site;
//! - everything shown is HTML-escaped; the display text is the one `approvals list` prints
//!   (resolved values, shown only to the approver), the session as its `ses#…` digest;
//! - responses carry `Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline';
//!   form-action 'self'; frame-ancestors 'none'; base-uri 'none'`, `X-Frame-Options: DENY`,
//!   `Referrer-Policy: no-referrer`, `Cache-Control: no-store` and
//!   `X-Content-Type-Options: nosniff`;
//! - nothing of a form body (token, CSRF token) or of an approval's values is logged.

use crate::http::ApiState;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{DefaultBodyLimit, Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::store::ApprovalState;
use secureclaw_gateway::GatewayError;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a login lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Seconds between reloads of the list.
pub const REFRESH_SECS: u32 = 15;
/// At most this many login sessions are kept; a new login evicts the oldest.
pub const MAX_SESSIONS: usize = 32;
/// The session cookie's name.
pub const COOKIE: &str = "secureclaw_approvals";
/// Who the audit log and the approval record name as the decider when the login gave no
/// name; with one, `web:NAME` ([`secureclaw_gateway::approver_identity`]).
pub const DECIDED_BY: &str = "web:operator";
/// Largest form body accepted.
const BODY_LIMIT: usize = 8 * 1024;

/// One browser login.
struct WebSession {
    csrf: String,
    /// The decider this login's decisions are recorded as (`web:NAME` or [`DECIDED_BY`]).
    approver: String,
    expires: Instant,
    flash: Option<String>,
}

/// Login sessions by the SHA-256 digest of their secret.
type Sessions = Arc<Mutex<HashMap<[u8; 32], WebSession>>>;

#[derive(Clone)]
struct UiState {
    api: ApiState,
    sessions: Sessions,
}

/// The approvals page's routes, with their own in-memory login sessions.
pub fn router(api: ApiState) -> Router {
    let state = UiState {
        api,
        sessions: Arc::new(Mutex::new(HashMap::new())),
    };
    Router::new()
        .route("/approvals", get(page))
        .route("/approvals/login", post(login))
        .route("/approvals/logout", post(logout))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/deny", post(deny))
        .route("/approvals/{id}/approve-grant", post(approve_grant))
        .route("/approvals/grants/{id}/revoke", post(revoke_grant))
        .route("/approvals/pin", post(pin_tool))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
}

async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `s` with `& < > " '` replaced by character references.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` percent-encoded for one URL path segment (RFC 3986 unreserved characters kept).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// 32 random bytes as hex; `None` when the OS has no randomness (the caller fails closed).
fn random_token() -> Option<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    Some(hex(&b))
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn ct_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The values of every `COOKIE` cookie in the request.
fn cookie_values(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            (name.trim() == COOKIE).then_some(value.trim())
        })
        .collect()
}

/// The digest of the live login session the request's cookie names, if any.
fn live_session(state: &UiState, headers: &HeaderMap) -> Option<[u8; 32]> {
    let now = Instant::now();
    let mut sessions = state
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    sessions.retain(|_, s| s.expires > now);
    cookie_values(headers)
        .into_iter()
        .map(digest)
        .find(|d| sessions.contains_key(d))
}

/// Refuse a form post whose `Origin` is not this server (as the request's `Host` names it)
/// or whose `Sec-Fetch-Site` says it came from another site. Requests without either header
/// (curl, old browsers) pass on to the CSRF token check.
///
/// Browsers send `Origin: null` for a form post from a page with `Referrer-Policy:
/// no-referrer` (this page's own), so `null` passes only when `Sec-Fetch-Site` (which a page
/// cannot set) says `same-origin`; a sandboxed cross-site frame's `null` comes with
/// `cross-site` and is refused.
fn same_origin(headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").map(HeaderValue::to_str);
    match site {
        None | Some(Ok("same-origin" | "none")) => {}
        Some(_) => return false,
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    if origin.as_bytes() == b"null" {
        return matches!(site, Some(Ok("same-origin")));
    }
    let (Ok(origin), Some(Ok(host))) = (
        origin.to_str(),
        headers.get(header::HOST).map(HeaderValue::to_str),
    ) else {
        return false;
    };
    let host = host.trim();
    !host.is_empty()
        && (origin.strip_prefix("http://") == Some(host)
            || origin.strip_prefix("https://") == Some(host))
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

fn see_other(cookie: Option<String>) -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/approvals")]).into_response();
    if let Some(c) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, c);
    }
    response
}

const STYLE: &str = "body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}\
pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:.5em;border:1px solid #ccc}\
section{border-top:1px solid #888;margin-top:1em}dt{font-weight:bold;float:left;clear:left;width:7em}\
dd{margin-left:8em}form{display:inline}.flash{background:#ffd;padding:.5em;border:1px solid #cc8}\
button{margin:.2em .5em .2em 0;padding:.3em 1em}";

fn document(title: &str, refresh: bool, body: &str) -> String {
    let refresh = if refresh {
        format!("<meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">")
    } else {
        String::new()
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{refresh}\
         <title>{title}</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n",
        title = escape(title)
    )
}

fn login_page(status: StatusCode, message: Option<&str>) -> Response {
    let message = message
        .map(|m| format!("<p class=\"flash\" role=\"alert\">{}</p>", escape(m)))
        .unwrap_or_default();
    html(
        status,
        document(
            "SecureClaw approvals: log in",
            false,
            &format!(
                "<h1>SecureClaw approvals</h1>{message}\
                 <form method=\"post\" action=\"/approvals/login\">\
                 <label for=\"token\">Operator token</label> \
                 <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"off\" required> \
                 <label for=\"name\">Your name</label> \
                 <input type=\"text\" id=\"name\" name=\"name\" maxlength=\"64\" \
                 placeholder=\"recorded with your decisions\"> \
                 <button type=\"submit\" id=\"login\">Log in</button></form>\
                 <p>The operator token is in <code>operator.token</code> in the state directory \
                 (or <code>SECURECLAW_OPERATOR_TOKEN</code>).</p>"
            ),
        ),
    )
}

pub use secureclaw_core::time::iso8601;

async fn page(State(state): State<UiState>, headers: HeaderMap) -> Response {
    let Some(key) = live_session(&state, &headers) else {
        return login_page(StatusCode::OK, None);
    };
    let list = match state
        .api
        .gateway
        .approvals_for_approver(Some(ApprovalState::Pending))
        .await
    {
        Ok(list) => list,
        Err(_) => {
            return html(
                StatusCode::SERVICE_UNAVAILABLE,
                document(
                    "SecureClaw approvals",
                    true,
                    "<h1>SecureClaw approvals</h1><p class=\"flash\">The store is unavailable; \
                     this page retries.</p>",
                ),
            );
        }
    };
    let (csrf, flash) = {
        let mut sessions = state
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match sessions.get_mut(&key) {
            Some(s) => (s.csrf.clone(), s.flash.take()),
            // Logged out or expired between the two looks.
            None => return login_page(StatusCode::OK, None),
        }
    };
    let csrf_field = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(&csrf)
    );
    let mut body = format!(
        "<h1>SecureClaw approvals</h1>\
         <form method=\"post\" action=\"/approvals/logout\">{csrf_field}\
         <button type=\"submit\" id=\"logout\">Log out</button></form>"
    );
    if let Some(flash) = flash {
        let _ = write!(
            body,
            "<p class=\"flash\" role=\"status\" id=\"flash\">{}</p>",
            escape(&flash)
        );
    }
    let _ = write!(
        body,
        "<p>{} pending. The list reloads every {REFRESH_SECS} s. Approving lets the runtime \
         re-issue the exact call shown, once.</p>",
        list.len()
    );
    for view in list {
        let id = view.approval.action_id.0.as_str();
        let path = path_segment(id);
        let _ = write!(
            body,
            "<section class=\"approval\" data-action-id=\"{eid}\"><h2>{eid}</h2><dl>\
             <dt>Tool</dt><dd>{tool}</dd><dt>Caller</dt><dd>{caller}</dd>\
             <dt>Session</dt><dd>{session}{ended}</dd>\
             <dt>Created</dt><dd><time>{created}</time></dd></dl>\
             <pre>{display}</pre>\
             <form method=\"post\" action=\"/approvals/{path}/approve\">{csrf_field}\
             <button type=\"submit\" class=\"approve\">Approve once</button></form>\
             <form method=\"post\" action=\"/approvals/{path}/approve-grant\" class=\"grant\">\
             {csrf_field}<button type=\"submit\" class=\"approve-grant\">Approve and allow \
             similar calls</button> for <input name=\"minutes\" type=\"number\" min=\"1\" \
             max=\"1440\" value=\"30\" size=\"4\" aria-label=\"minutes\"> minutes / \
             <input name=\"uses\" type=\"number\" min=\"1\" max=\"1000\" value=\"5\" \
             size=\"4\" aria-label=\"uses\"> uses (same session and tool, no other target, every \
             other argument as shown except message text, no larger amount)</form>\
             <form method=\"post\" action=\"/approvals/{path}/deny\">{csrf_field}\
             <button type=\"submit\" class=\"deny\">Deny</button></form></section>",
            eid = escape(id),
            tool = escape(&view.tool),
            caller = escape(&view.caller),
            session = escape(&view.session),
            ended = if view.session_ended {
                " <strong class=\"ended\">(ended: its runtime can no longer re-issue this \
                 call)</strong>"
            } else {
                ""
            },
            created = iso8601(view.approval.created_at.0),
            display = escape(&view.call),
        );
    }
    grants_section(&state, &csrf_field, &mut body).await;
    quarantine_section(&state, &csrf_field, &mut body).await;
    html(
        StatusCode::OK,
        document("SecureClaw approvals", true, &body),
    )
}

/// The live standing grants, each with a revoke button (nothing when none).
async fn grants_section(state: &UiState, csrf_field: &str, body: &mut String) {
    let grants = match state.api.gateway.grants(false).await {
        Ok(g) if g.is_empty() => return,
        Ok(g) => g,
        Err(_) => {
            body.push_str(
                "<p class=\"flash\">The standing grants could not be read; this page retries.</p>",
            );
            return;
        }
    };
    let _ = write!(
        body,
        "<h2 id=\"grants\">Standing grants ({})</h2><p>Similar calls of the same session and \
         tool, with no target the approved call did not have and no larger amount, run without \
         asking until the grant expires, its uses are taken or it is revoked.</p>",
        grants.len()
    );
    for g in grants {
        let uses = g.max_uses.map_or_else(
            || format!("{} uses taken", g.used),
            |m| format!("{} of {m} uses taken", g.used),
        );
        let _ = write!(
            body,
            "<section class=\"grant\" data-grant-id=\"{eid}\"><h3>{eid}</h3><dl>\
             <dt>Tool</dt><dd>{tool}</dd><dt>Session</dt><dd>{session}</dd>\
             <dt>Expires</dt><dd><time>{expires}</time></dd><dt>Uses</dt><dd>{uses}</dd>\
             <dt>Created by</dt><dd>{by}</dd></dl><pre>{call}</pre>\
             <form method=\"post\" action=\"/approvals/grants/{path}/revoke\">{csrf_field}\
             <button type=\"submit\" class=\"revoke\">Revoke</button></form></section>",
            eid = escape(&g.id),
            path = path_segment(&g.id),
            tool = escape(&g.tool),
            session = escape(&g.session),
            expires = iso8601(g.expires_at),
            uses = escape(&uses),
            by = escape(&g.created_by),
            call = escape(&g.call),
        );
    }
}

/// The tools held back by pinning, each with its diff and a pin button (nothing when none).
async fn quarantine_section(state: &UiState, csrf_field: &str, body: &mut String) {
    let tools = match state.api.gateway.quarantined_tools().await {
        Ok(tools) if tools.is_empty() => return,
        Ok(tools) => tools,
        Err(_) => {
            body.push_str(
                "<p class=\"flash\">The tool pins could not be read; this page retries.</p>",
            );
            return;
        }
    };
    let _ = write!(
        body,
        "<h2 id=\"quarantine\">Tools held back ({})</h2><p>Their definition (description, \
         schemas, annotations) differs from the one pinned, or was never pinned: they are hidden \
         from the runtime and their calls are refused (<code>tool_definition_changed</code>). \
         Review the change; pinning serves this exact definition from now on.</p>",
        tools.len()
    );
    for t in tools {
        let poisoning = t.poisoning.as_ref().map_or_else(String::new, |p| {
            format!(
                "<p class=\"poisoning\"><strong>Poisoning scan: {} finding(s)</strong> in the \
                 title, description or schema prose. The runtime is shown: <q>{}</q></p>",
                p.findings,
                escape(&p.shown_description)
            )
        });
        let pin = if t.status == "removed" {
            "<p>The upstream no longer lists this tool; there is nothing to pin.</p>".to_owned()
        } else {
            format!(
                "<form method=\"post\" action=\"/approvals/pin\">{csrf_field}\
                 <input type=\"hidden\" name=\"upstream\" value=\"{u}\">\
                 <input type=\"hidden\" name=\"tool\" value=\"{n}\">\
                 <input type=\"hidden\" name=\"digest\" value=\"{d}\">\
                 <button type=\"submit\" class=\"pin\">Pin this definition</button></form>",
                u = escape(&t.upstream),
                n = escape(&t.tool),
                d = escape(&t.digest),
            )
        };
        let _ = write!(
            body,
            "<section class=\"quarantined\" data-tool=\"{u}__{n}\"><h3>{u}__{n} ({status})</h3>\
             <dl><dt>Digest</dt><dd><code>{d}</code></dd></dl>{poisoning}<pre>{diff}</pre>{pin}\
             </section>",
            u = escape(&t.upstream),
            n = escape(&t.tool),
            status = escape(t.status),
            d = escape(&t.digest),
            diff = escape(&t.diff),
        );
    }
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
    /// The approver's name, recorded with every decision of this login.
    #[serde(default)]
    name: String,
}

async fn login(
    State(state): State<UiState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if !same_origin(&headers) {
        return login_page(StatusCode::FORBIDDEN, Some("refused: cross-origin request"));
    }
    let (given, name) = form.map(|Form(f)| (f.token, f.name)).unwrap_or_default();
    if given.is_empty() || !ct_eq(&given, &state.api.operator_token) {
        tracing::info!(target: "secureclaw::approvals_ui", "refused a login to the approvals page");
        return login_page(StatusCode::UNAUTHORIZED, Some("wrong operator token"));
    }
    let approver = match secureclaw_gateway::approver_identity("web", Some(&name)) {
        Ok(a) if a == "web" => DECIDED_BY.to_owned(),
        Ok(a) => a,
        Err(e) => return login_page(StatusCode::BAD_REQUEST, Some(&format!("Your name: {e}."))),
    };
    let (Some(secret), Some(csrf)) = (random_token(), random_token()) else {
        return login_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some("no randomness available; try again"),
        );
    };
    {
        let now = Instant::now();
        let mut sessions = state
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, s| s.expires > now);
        while sessions.len() >= MAX_SESSIONS {
            let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
            else {
                break;
            };
            sessions.remove(&oldest);
        }
        sessions.insert(
            digest(&secret),
            WebSession {
                csrf,
                approver: approver.clone(),
                expires: now + SESSION_TTL,
                flash: None,
            },
        );
    }
    tracing::info!(target: "secureclaw::approvals_ui", approver = %approver, "operator logged in to the approvals page");
    see_other(Some(format!(
        "{COOKIE}={secret}; Path=/approvals; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    )))
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// The login session of a form post that passed the origin and CSRF checks, or the refusal.
// The refusal is the finished response, built once per refused post: boxing it buys nothing.
#[allow(clippy::result_large_err)]
fn checked_post(
    state: &UiState,
    headers: &HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<[u8; 32], Response> {
    let given = form.map(|Form(f)| f.csrf).unwrap_or_default();
    checked_csrf(state, headers, &given)
}

/// [`checked_post`] with the form's CSRF token `given` already read.
#[allow(clippy::result_large_err)]
fn checked_csrf(state: &UiState, headers: &HeaderMap, given: &str) -> Result<[u8; 32], Response> {
    let Some(key) = live_session(state, headers) else {
        return Err(login_page(
            StatusCode::UNAUTHORIZED,
            Some("not logged in (or the login expired)"),
        ));
    };
    if !same_origin(headers) {
        return Err(html(
            StatusCode::FORBIDDEN,
            document(
                "Refused",
                false,
                "<h1>Refused</h1><p>Cross-origin request. <a href=\"/approvals\">Back</a></p>",
            ),
        ));
    }
    let expected = state
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .map(|s| s.csrf.clone())
        .unwrap_or_default();
    if given.is_empty() || expected.is_empty() || !ct_eq(given, &expected) {
        tracing::info!(target: "secureclaw::approvals_ui", "refused a form post without a valid CSRF token");
        return Err(html(
            StatusCode::FORBIDDEN,
            document(
                "Refused",
                false,
                "<h1>Refused</h1><p>Missing or wrong CSRF token; reload the page and try again. \
                 <a href=\"/approvals\">Back</a></p>",
            ),
        ));
    }
    Ok(key)
}

/// The decider the login session `key` records its decisions as.
fn approver_of(state: &UiState, key: &[u8; 32]) -> String {
    state
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .map_or_else(|| DECIDED_BY.to_owned(), |s| s.approver.clone())
}

async fn logout(
    State(state): State<UiState>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    match checked_post(&state, &headers, form) {
        Ok(key) => {
            state
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
            see_other(Some(format!(
                "{COOKIE}=; Path=/approvals; HttpOnly; SameSite=Strict; Max-Age=0"
            )))
        }
        Err(refusal) => refusal,
    }
}

async fn decide(
    state: UiState,
    headers: HeaderMap,
    id: String,
    approve: bool,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let key = match checked_post(&state, &headers, form) {
        Ok(key) => key,
        Err(refusal) => return refusal,
    };
    let shown: String = id.chars().take(80).collect();
    let flash = match state
        .api
        .gateway
        .decide_approval(&ActionId(id), approve, &approver_of(&state, &key))
        .await
    {
        Ok(record) => {
            tracing::info!(
                target: "secureclaw::approvals_ui",
                action_id = %record.action_id,
                state = record.state.as_str(),
                "decided in the approvals page"
            );
            if approve {
                format!(
                    "Approved {}: the runtime may now re-issue the identical call once.",
                    record.action_id
                )
            } else {
                format!("Denied {}.", record.action_id)
            }
        }
        Err(GatewayError::NotFound(_)) => format!("Not decided: {shown} was not found."),
        Err(GatewayError::Conflict(_)) => {
            format!("Not decided: {shown} was already decided or has expired.")
        }
        Err(_) => format!("Not decided: the store is unavailable ({shown})."),
    };
    flash_and_reload(&state, &key, flash)
}

#[derive(Deserialize)]
struct PinForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    upstream: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    digest: String,
}

/// Pin a quarantined tool's definition as the page showed it (its digest), through the same
/// gateway call as `POST /v1/tools/pin`.
async fn pin_tool(
    State(state): State<UiState>,
    headers: HeaderMap,
    form: Result<Form<PinForm>, FormRejection>,
) -> Response {
    let form = form.map(|Form(f)| f).ok();
    let given = form.as_ref().map(|f| f.csrf.as_str()).unwrap_or_default();
    let key = match checked_csrf(&state, &headers, given) {
        Ok(key) => key,
        Err(refusal) => return refusal,
    };
    let Some(f) = form else {
        return see_other(None);
    };
    let shown: String = format!("{}__{}", f.upstream, f.tool)
        .chars()
        .take(120)
        .collect();
    let flash = match state
        .api
        .gateway
        .pin_quarantined(&f.upstream, &f.tool, &f.digest, &approver_of(&state, &key))
        .await
    {
        Ok(true) => {
            tracing::info!(target: "secureclaw::approvals_ui", upstream = %f.upstream,
                "a tool definition was pinned in the approvals page");
            format!("Pinned {shown}: it is served from the next listing or call.")
        }
        Ok(false) => format!(
            "Not pinned: {shown} is not held back with the digest shown (it changed again, or \
             was pinned already); review it again."
        ),
        Err(_) => format!("Not pinned: the store is unavailable ({shown})."),
    };
    flash_and_reload(&state, &key, flash)
}

/// Leave `flash` for the login session `key`'s next page, and send the browser back to it.
fn flash_and_reload(state: &UiState, key: &[u8; 32], flash: String) -> Response {
    if let Some(s) = state
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(key)
    {
        s.flash = Some(flash);
    }
    see_other(None)
}

async fn approve(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    decide(state, headers, id, true, form).await
}

#[derive(Deserialize)]
struct GrantForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    minutes: String,
    #[serde(default)]
    uses: String,
}

/// The grant terms of the page's form: `minutes` and `uses`, each empty or a whole number.
fn form_terms(f: &GrantForm) -> Result<secureclaw_gateway::GrantTerms, String> {
    let number = |what: &str, v: &str| -> Result<Option<u64>, String> {
        let v = v.trim();
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<u64>()
            .map(Some)
            .map_err(|_| format!("{what} must be a whole number"))
    };
    let minutes = number("minutes", &f.minutes)?;
    let uses = number("uses", &f.uses)?;
    secureclaw_gateway::GrantTerms {
        allow_for_ms: minutes.map(|m| m.saturating_mul(60_000)),
        uses,
        max_amount: None,
    }
    .validate()
    .map_err(|e| e.to_string())
}

async fn approve_grant(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<GrantForm>, FormRejection>,
) -> Response {
    let form = form.map(|Form(f)| f).ok();
    let given = form.as_ref().map(|f| f.csrf.as_str()).unwrap_or_default();
    let key = match checked_csrf(&state, &headers, given) {
        Ok(key) => key,
        Err(refusal) => return refusal,
    };
    let Some(f) = form else {
        return see_other(None);
    };
    let shown: String = id.chars().take(80).collect();
    let terms = match form_terms(&f) {
        Ok(t) => t,
        Err(e) => return flash_and_reload(&state, &key, format!("Not decided: {e}.")),
    };
    let flash = match state
        .api
        .gateway
        .approve_with_grant(&ActionId(id), &approver_of(&state, &key), terms)
        .await
    {
        Ok((record, grant)) => {
            tracing::info!(target: "secureclaw::approvals_ui", action_id = %record.action_id,
                grant = %grant.id, "approved with a standing grant in the approvals page");
            format!(
                "Approved {}: the runtime may now re-issue the identical call once. Standing \
                 grant {} covers similar calls until {}{}.",
                record.action_id,
                grant.id,
                iso8601(grant.expires_at.0),
                grant
                    .max_uses
                    .map(|n| format!(", at most {n} uses"))
                    .unwrap_or_default()
            )
        }
        Err(GatewayError::NotFound(_)) => format!("Not decided: {shown} was not found."),
        Err(GatewayError::Conflict(_)) => {
            format!("Not decided: {shown} was already decided or has expired.")
        }
        Err(GatewayError::Config(e)) => format!("Not decided: {e}."),
        Err(_) => format!("Not decided: the store is unavailable ({shown})."),
    };
    flash_and_reload(&state, &key, flash)
}

async fn revoke_grant(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let key = match checked_post(&state, &headers, form) {
        Ok(key) => key,
        Err(refusal) => return refusal,
    };
    let shown: String = id.chars().take(80).collect();
    let flash = match state
        .api
        .gateway
        .revoke_grant(&id, &approver_of(&state, &key))
        .await
    {
        Ok(v) => {
            tracing::info!(target: "secureclaw::approvals_ui", grant = %v.id,
                "revoked a standing grant in the approvals page");
            format!("Revoked {}.", v.id)
        }
        Err(GatewayError::NotFound(_)) => format!("Not revoked: {shown} was not found."),
        Err(_) => format!("Not revoked: the store is unavailable ({shown})."),
    };
    flash_and_reload(&state, &key, flash)
}

async fn deny(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    decide(state, headers, id, false, form).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(escape("plain ü"), "plain ü");
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(path_segment("act_AZaz09-._~"), "act_AZaz09-._~");
        assert_eq!(path_segment("a/b?c\"<"), "a%2Fb%3Fc%22%3C");
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    /// Attack: a post from another origin (or site) is refused; positive controls: this
    /// server's origin, and no `Origin` at all.
    #[test]
    fn origin_check() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ])));
        // What chromium sends for a form post from a `no-referrer` page.
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for bad in [
            &[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
            ][..],
            &[("host", "127.0.0.1:8080"), ("origin", "null")],
            &[
                ("host", "127.0.0.1:8080"),
                ("origin", "null"),
                ("sec-fetch-site", "none"),
            ],
            &[
                ("host", "127.0.0.1:8080"),
                ("origin", "null"),
                ("sec-fetch-site", "cross-site"),
            ],
            &[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:8081"),
            ],
            &[("origin", "http://127.0.0.1:8080")],
            &[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")],
            &[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")],
        ] {
            assert!(!same_origin(&headers(bad)), "{bad:?}");
        }
    }

    #[test]
    fn cookies_are_found_among_others() {
        let h = headers(&[
            ("cookie", "a=1; secureclaw_approvals=abc; b=2"),
            ("cookie", "secureclaw_approvals=def"),
        ]);
        assert_eq!(cookie_values(&h), vec!["abc", "def"]);
        assert!(cookie_values(&headers(&[("cookie", "xsecureclaw_approvals=1")])).is_empty());
    }

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(ct_eq(&a, &a.clone()));
        assert!(!ct_eq(&a, &b));
        assert!(!ct_eq(&a, &a[..63]));
    }
}
