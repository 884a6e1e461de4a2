//! Approval channels (issue 15 "Channels"; `[gateway.approvals]`): outgoing webhooks told of
//! every action that goes pending and every approval denied on timeout, and the deny-on-timeout
//! sweep.
//!
//! A notice names the action, the tool, its upstream, the caller, the session (as the audit
//! log names it), the reason and where to decide it; it never carries an argument value. The
//! webhook is a channel the operator configured, but its far end (a chat workspace, a
//! ticketing system) keeps and shows what it is sent to people who are not all approvers, so
//! the values stay on the approvals page, behind the operator token.
//!
//! A pending action is announced once (a re-issue naming the pending action, as a retrying
//! client sends it, is not announced again). Delivery never holds up a call: each notice is posted by its own task, at most
//! [`MAX_DELIVERIES`] at once and [`MAX_SESSION_DELIVERIES`] of one session (beyond that a
//! notice is dropped with a warning; the approvals page and `approvals list` still show
//! the action), each attempt
//! bounded by the webhook's `timeout_ms`, retried twice after a connection error, a `429` or
//! a `5xx` (a notice is not an effect: posting it twice only notifies twice). The URL is
//! logged as scheme and host only: a Slack incoming-webhook URL is itself a credential.

use super::{Gateway, GatewayError, audit_session_id};
use crate::config::{ApprovalsConfig, WebhookFormat, redact_url};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::store::ApprovalState;
use secureclaw_core::time::iso8601;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Notices being posted at once, across every webhook; a notice beyond it is dropped (and
/// logged) rather than queued without bound.
pub const MAX_DELIVERIES: usize = 64;
/// Notices of one session being posted at once (all webhooks); beyond it that session's
/// notice is dropped (and logged), so one session cannot take every delivery slot while a
/// receiver is slow (red-team F4 of 2026-12-04: 40 pending calls of one session had the
/// victim session's notices dropped).
pub const MAX_SESSION_DELIVERIES: usize = 8;
/// Pending actions remembered as notified, so a re-issue naming a still-pending action (a
/// client retrying, a runtime flooding) is not announced again; the oldest is forgotten first.
const NOTIFIED_MEMORY: usize = 4096;
/// Attempts per notice and webhook (the first and two retries).
const ATTEMPTS: u32 = 3;
/// The decider recorded for an approval denied on timeout.
pub const TIMEOUT_DECIDER: &str = "timeout";

/// What a webhook is told about one approval. Never an argument value (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalNotice {
    /// `approval.pending` (an action waits for a human) or `approval.timed_out` (nobody
    /// decided within `[gateway.approvals] timeout_ms`; it was denied).
    pub event: &'static str,
    /// The action id the approver decides (`act_…`).
    pub action_id: String,
    /// The tool as the runtime called it (`office__send_email`).
    pub tool: String,
    /// Its upstream's id (empty if the catalog does not know the tool).
    pub upstream: String,
    /// The caller that made the call.
    pub caller: String,
    /// The session as the audit log names it (`ses#…`, never the session's bearer id).
    pub session: String,
    /// The reason code (`confirmation_required`, …; `approval_timed_out` for a timeout).
    pub reason: String,
    /// When it happened, RFC 3339 UTC.
    pub at: String,
    /// The approvals page (`{public_url}/approvals`), when the gateway knows its address.
    pub approvals_url: Option<String>,
    /// The CLI command that approves it, with the state directory and the action id, ready
    /// to paste; empty for `approval.timed_out` (nothing is left to decide).
    pub approve_command: String,
}

impl ApprovalNotice {
    /// The body posted to a webhook of `format`.
    #[must_use]
    pub fn body(&self, format: WebhookFormat) -> Value {
        match format {
            WebhookFormat::Json => json!(self),
            WebhookFormat::Slack => self.slack(),
        }
    }

    /// A Slack incoming-webhook message: a one-line `text` (shown in notifications), a
    /// section with the details, and an "Open approvals" button when the page's URL is known.
    fn slack(&self) -> Value {
        let tool = slack_code(&self.tool);
        let headline = match self.event {
            "approval.timed_out" => {
                format!("SecureClaw: approval for `{tool}` timed out and was denied")
            }
            _ => format!("SecureClaw: `{tool}` is waiting for approval"),
        };
        let details = format!(
            "*Action* `{}`\n*Tool* `{}`\n*Caller* {}\n*Session* `{}`\n*Reason* `{}`\n*At* {}\n\
             *CLI* `{}`",
            slack_code(&self.action_id),
            tool,
            slack_escape(&self.caller),
            slack_code(&self.session),
            slack_code(&self.reason),
            slack_escape(&self.at),
            if self.event == "approval.pending" {
                slack_code(&self.approve_command)
            } else {
                "(nothing to do)".to_owned()
            }
        );
        let mut blocks = vec![json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": format!("{headline}\n{details}")},
        })];
        if let (Some(url), "approval.pending") = (&self.approvals_url, self.event) {
            blocks.push(json!({
                "type": "actions",
                "elements": [{
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open approvals"},
                    "url": url,
                    "style": "primary",
                }],
            }));
        }
        json!({"text": headline, "blocks": blocks})
    }
}

/// `&`, `<` and `>` escaped as Slack's `mrkdwn` requires (a caller name cannot form a link
/// or a mention).
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Text for inside a `mrkdwn` code span: [`slack_escape`]d, and a backtick (which would end
/// the span and let the rest format) shown as `'`. Every field of a notice goes through this
/// or [`slack_escape`], whoever wrote it.
fn slack_code(s: &str) -> String {
    slack_escape(s).replace('`', "'")
}

/// One configured webhook, its URL resolved.
struct Hook {
    url: String,
    format: WebhookFormat,
    timeout: Duration,
    /// The signing secret (`secret_env`), if any.
    secret: Option<Vec<u8>>,
}

/// The shortest signing secret accepted, in bytes.
const MIN_SECRET_BYTES: usize = 16;

/// `sha256=HEX`: HMAC-SHA256 of `TIMESTAMP.BODY` under `secret` (the `X-SecureClaw-Signature`
/// header; `timestamp` in Unix seconds, sent as `X-SecureClaw-Timestamp`).
#[must_use]
pub fn webhook_signature(secret: &[u8], timestamp: u64, body: &str) -> String {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        // HMAC takes keys of any length; unreachable, and an empty signature fails to verify.
        return String::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The configured webhooks and the page's URL (built once, at start-up).
pub(crate) struct Notifier {
    client: Option<reqwest::Client>,
    hooks: Vec<Hook>,
    approvals_url: Option<String>,
    deliveries: Arc<tokio::sync::Semaphore>,
    /// Deliveries in flight per session (audit name), for [`MAX_SESSION_DELIVERIES`].
    per_session: Arc<Mutex<HashMap<String, usize>>>,
    /// Pending actions already announced (set and arrival order), [`NOTIFIED_MEMORY`] at most.
    notified: Mutex<(HashSet<String>, VecDeque<String>)>,
}

/// One session's delivery slot, given back when the delivery ends.
struct SessionSlot {
    per_session: Arc<Mutex<HashMap<String, usize>>>,
    session: String,
}

impl SessionSlot {
    /// A slot for `session`, or `None` when it has [`MAX_SESSION_DELIVERIES`] in flight.
    fn take(per_session: &Arc<Mutex<HashMap<String, usize>>>, session: &str) -> Option<Self> {
        let mut map = per_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(session.to_owned()).or_insert(0);
        if *n >= MAX_SESSION_DELIVERIES {
            return None;
        }
        *n += 1;
        Some(Self {
            per_session: Arc::clone(per_session),
            session: session.to_owned(),
        })
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut map = self
            .per_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.session);
            }
        }
    }
}

impl Notifier {
    /// The notifier for `config`: each `url_env` read now.
    ///
    /// # Errors
    /// [`GatewayError::Config`] naming a `url_env` that is unset or not a URL, or when the HTTP
    /// client cannot be built.
    pub(crate) fn new(config: &ApprovalsConfig) -> Result<Self, GatewayError> {
        let mut hooks = Vec::with_capacity(config.webhooks.len());
        for (i, w) in config.webhooks.iter().enumerate() {
            let url = match (&w.url, &w.url_env) {
                (Some(u), _) => u.clone(),
                (None, Some(name)) => std::env::var(name).map_err(|_| {
                    GatewayError::Config(format!(
                        "gateway.approvals.webhooks[{i}].url_env: environment variable `{name}` \
                         is not set"
                    ))
                })?,
                (None, None) => {
                    return Err(GatewayError::Config(format!(
                        "gateway.approvals.webhooks[{i}]: set `url` or `url_env`"
                    )));
                }
            };
            crate::config::check_http_url(&url).map_err(|e| {
                GatewayError::Config(format!("gateway.approvals.webhooks[{i}]: {e}"))
            })?;
            let secret = match &w.secret_env {
                None => None,
                Some(name) => {
                    let v = std::env::var(name).map_err(|_| {
                        GatewayError::Config(format!(
                            "gateway.approvals.webhooks[{i}].secret_env: environment variable \
                             `{name}` is not set"
                        ))
                    })?;
                    if v.len() < MIN_SECRET_BYTES {
                        return Err(GatewayError::Config(format!(
                            "gateway.approvals.webhooks[{i}].secret_env: `{name}` holds fewer \
                             than {MIN_SECRET_BYTES} bytes"
                        )));
                    }
                    Some(v.into_bytes())
                }
            };
            if url.starts_with("http://") && !is_loopback_url(&url) {
                tracing::warn!(
                    target: "secureclaw::approval",
                    webhook = %redact_url(&url),
                    "webhook over plain http to another machine: notices can be read and forged on the way; use https (and secret_env)"
                );
            }
            if url.split_once("://").is_some_and(|(_, rest)| {
                rest.split(['/', '?', '#'])
                    .next()
                    .unwrap_or("")
                    .contains('@')
            }) {
                tracing::warn!(
                    target: "secureclaw::approval",
                    webhook = %redact_url(&url),
                    "webhook URL carries credentials (user:password@); prefer url_env and secret_env"
                );
            }
            hooks.push(Hook {
                url,
                format: w.format,
                timeout: Duration::from_millis(w.timeout_ms),
                secret,
            });
        }
        // No client without webhooks. reqwest (built without a TLS provider of its own) needs
        // a process-wide rustls provider: the binary installs ring's; an embedder that has
        // none gets ring's too. No redirects: a webhook that moved is a configuration to fix,
        // and following one would send the notice to wherever the receiver points.
        let client = if hooks.is_empty() {
            None
        } else {
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            Some(
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| GatewayError::Config(format!("webhook HTTP client: {e}")))?,
            )
        };
        Ok(Self {
            client,
            hooks,
            approvals_url: config
                .public_url
                .as_deref()
                .map(|u| format!("{}/approvals", u.trim_end_matches('/'))),
            deliveries: Arc::new(tokio::sync::Semaphore::new(MAX_DELIVERIES)),
            per_session: Arc::new(Mutex::new(HashMap::new())),
            notified: Mutex::new((HashSet::new(), VecDeque::new())),
        })
    }

    /// Whether pending action `action` has not been announced yet (and remember it now).
    fn first_notice(&self, action: &str) -> bool {
        let mut guard = self
            .notified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (seen, order) = &mut *guard;
        if !seen.insert(action.to_owned()) {
            return false;
        }
        order.push_back(action.to_owned());
        if order.len() > NOTIFIED_MEMORY
            && let Some(old) = order.pop_front()
        {
            seen.remove(&old);
        }
        true
    }

    /// Post `notice` to every webhook, each in its own task; returns at once. Without a Tokio
    /// runtime (never in the gateway) nothing is sent.
    fn send(&self, notice: &ApprovalNotice) {
        let (Ok(runtime), Some(client)) = (tokio::runtime::Handle::try_current(), &self.client)
        else {
            return;
        };
        for hook in &self.hooks {
            let Some(slot) = SessionSlot::take(&self.per_session, &notice.session) else {
                tracing::warn!(
                    target: "secureclaw::approval",
                    webhook = %redact_url(&hook.url),
                    action_id = %notice.action_id,
                    session = %notice.session,
                    "webhook notice dropped: {MAX_SESSION_DELIVERIES} deliveries of this session already in flight"
                );
                continue;
            };
            let Ok(permit) = Arc::clone(&self.deliveries).try_acquire_owned() else {
                tracing::warn!(
                    target: "secureclaw::approval",
                    webhook = %redact_url(&hook.url),
                    action_id = %notice.action_id,
                    "webhook notice dropped: {MAX_DELIVERIES} deliveries already in flight"
                );
                continue;
            };
            let body = notice.body(hook.format).to_string();
            let mut request = client
                .post(&hook.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .timeout(hook.timeout);
            if let Some(secret) = &hook.secret {
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                request = request
                    .header("X-SecureClaw-Timestamp", ts.to_string())
                    .header(
                        "X-SecureClaw-Signature",
                        webhook_signature(secret, ts, &body),
                    );
            }
            let shown = redact_url(&hook.url);
            let action = notice.action_id.clone();
            runtime.spawn(async move {
                let _permit = permit;
                let _slot = slot;
                deliver(request, body, &shown, &action).await;
            });
        }
    }
}

/// Post `body` with `request`, retrying a connection error, `429` or `5xx` up to
/// [`ATTEMPTS`] times (0.5 s, then 2 s apart); log the outcome without the URL's secret.
async fn deliver(request: reqwest::RequestBuilder, body: String, shown: &str, action: &str) {
    let mut pause = Duration::from_millis(500);
    for attempt in 1..=ATTEMPTS {
        let Some(req) = request.try_clone() else {
            return;
        };
        let outcome = req.body(body.clone()).send().await;
        let retry = match &outcome {
            Ok(r) if r.status().is_success() => {
                tracing::debug!(target: "secureclaw::approval", webhook = %shown, action_id = %action, "webhook notified");
                return;
            }
            Ok(r) => {
                let status = r.status();
                tracing::warn!(target: "secureclaw::approval", webhook = %shown, action_id = %action, status = status.as_u16(), attempt, "webhook answered with an error status");
                status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            }
            Err(e) => {
                // reqwest's error names the URL; print only its kind.
                let kind = if e.is_timeout() {
                    "timed out"
                } else if is_tls_failure(e) {
                    "TLS handshake failed (is the receiver's certificate trusted by this machine?)"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "request failed"
                };
                tracing::warn!(target: "secureclaw::approval", webhook = %shown, action_id = %action, attempt, "webhook {kind}");
                true
            }
        };
        if !retry || attempt == ATTEMPTS {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = pause.saturating_mul(4);
    }
}

/// Whether an `http(s)://` URL's host is this machine (`localhost`, `127.x`, `[::1]`).
fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request failed in its TLS handshake (a certificate the machine does not trust,
/// a name mismatch): a rustls error somewhere in its chain of causes.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        cause = c.source();
    }
    false
}

impl Gateway {
    /// The notice for an action of `caller` in session `session` (the raw id: only its audit
    /// digest is sent) calling `tool` that went pending (or timed out).
    fn approval_notice(
        &self,
        event: &'static str,
        caller: &str,
        session: &str,
        tool: &str,
        reason: &str,
        action: &str,
    ) -> ApprovalNotice {
        let (label, upstream) = self.tool_label(tool);
        ApprovalNotice {
            event,
            action_id: action.to_owned(),
            tool: label,
            upstream: upstream.to_owned(),
            caller: caller.to_owned(),
            session: audit_session_id(session),
            reason: reason.to_owned(),
            at: iso8601(self.now().0),
            approvals_url: self.inner.notifier.approvals_url.clone(),
            approve_command: if event == "approval.pending" {
                format!("{} {action}", self.approve_command())
            } else {
                String::new()
            },
        }
    }

    /// Tell the webhooks that `action` of `caller` in session `session` (raw id) went pending
    /// (called where the decision is logged). Announced once per action and process: a
    /// re-issue naming the still-pending action is not announced again.
    pub(crate) fn notify_pending(
        &self,
        caller: &str,
        session: &str,
        tool: &str,
        reason: &str,
        action: &str,
    ) {
        if self.inner.notifier.hooks.is_empty() || !self.inner.notifier.first_notice(action) {
            return;
        }
        let notice =
            self.approval_notice("approval.pending", caller, session, tool, reason, action);
        self.inner.notifier.send(&notice);
    }

    /// Deny every approval of one of this gateway's tools (its catalog) still pending
    /// `[gateway.approvals] timeout_ms` after it was requested (decider [`TIMEOUT_DECIDER`], audited as any denial), tell the webhooks, and
    /// return the action ids denied. An approval another confirmer (or replica) decided first
    /// is left as it is. Nothing when the timeout is 0.
    ///
    /// # Errors
    /// [`GatewayError::Store`] if the pending approvals cannot be listed; one that cannot be
    /// decided is logged and left for the next sweep.
    pub async fn deny_timed_out_approvals(&self) -> Result<Vec<ActionId>, GatewayError> {
        let timeout = self.inner.config.approvals.timeout_ms;
        if timeout == 0 {
            return Ok(Vec::new());
        }
        let now = self.now();
        let pending = self.approvals(Some(ApprovalState::Pending)).await?;
        let mut denied = Vec::new();
        for (approval, action) in pending {
            // Only actions of this gateway's own tools: gateways sharing a state directory or
            // a database may be configured with other timeouts (or none), and each answers for
            // its own upstreams (new-user trial of 2026-12-04: one gateway's 60 s timeout
            // denied another's approvals, announced as tool `unknown`).
            if approval.created_at.plus_millis(timeout) > now
                || self.inner.catalog.get(&action.tool).is_none()
            {
                continue;
            }
            match self
                .decide_approval(&approval.action_id, false, TIMEOUT_DECIDER)
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        target: "secureclaw::approval",
                        action_id = %approval.action_id,
                        tool = %action.tool,
                        session = %audit_session_id(&action.session),
                        waited_ms = now.0.saturating_sub(approval.created_at.0),
                        "approval timed out and was denied"
                    );
                    if !self.inner.notifier.hooks.is_empty() {
                        let notice = self.approval_notice(
                            "approval.timed_out",
                            &action.caller,
                            &action.session,
                            &action.tool,
                            "approval_timed_out",
                            &approval.action_id.0,
                        );
                        self.inner.notifier.send(&notice);
                    }
                    denied.push(approval.action_id);
                }
                Err(GatewayError::Conflict(_) | GatewayError::NotFound(_)) => {}
                Err(e) => tracing::warn!(
                    target: "secureclaw::approval",
                    action_id = %approval.action_id,
                    error = %e,
                    "could not deny a timed-out approval; trying again at the next sweep"
                ),
            }
        }
        Ok(denied)
    }

    /// Start the deny-on-timeout sweep of `serve` and `wrap`: every quarter of the timeout
    /// (between 1 s and 1 min), [`Gateway::deny_timed_out_approvals`]. `None` when the
    /// timeout is 0. Abort the handle to stop it.
    #[must_use]
    pub fn spawn_approval_timeouts(&self) -> Option<tokio::task::JoinHandle<()>> {
        let timeout = self.inner.config.approvals.timeout_ms;
        if timeout == 0 {
            return None;
        }
        let every = Duration::from_millis((timeout / 4).clamp(1_000, 60_000));
        let gw = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = gw.deny_timed_out_approvals().await {
                    tracing::warn!(
                        target: "secureclaw::approval",
                        error = %e,
                        "deny-on-timeout sweep failed; it runs again at the next interval"
                    );
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(event: &'static str) -> ApprovalNotice {
        ApprovalNotice {
            event,
            action_id: "act_1".into(),
            tool: "office__send_email".into(),
            upstream: "office".into(),
            caller: "<!channel> & co".into(),
            session: "ses#ab".into(),
            reason: "confirmation_required".into(),
            at: "2026-12-04T00:00:00.000Z".into(),
            approvals_url: Some("https://gw.example/approvals".into()),
            approve_command: "secureclaw --state-dir /s approvals approve act_1".into(),
        }
    }

    #[test]
    fn slack_body_links_the_page_and_escapes_the_caller() {
        let b = notice("approval.pending").body(WebhookFormat::Slack);
        assert!(
            b["text"]
                .as_str()
                .unwrap_or("")
                .contains("office__send_email")
        );
        let text = b["blocks"][0]["text"]["text"].as_str().unwrap_or("");
        assert!(text.contains("&lt;!channel&gt; &amp; co"), "{text}");
        assert!(text.contains("approvals approve act_1"), "{text}");
        assert_eq!(
            b["blocks"][1]["elements"][0]["url"],
            "https://gw.example/approvals"
        );
        let t = notice("approval.timed_out").body(WebhookFormat::Slack);
        assert!(t["text"].as_str().unwrap_or("").contains("timed out"));
        assert!(
            t["blocks"].get(1).is_none(),
            "no button for a decided approval"
        );
    }

    /// Red-team F1 (2026-12-04): every field, not only the caller, is escaped; a backtick
    /// cannot end a code span.
    #[test]
    fn slack_body_escapes_every_field() {
        let mut n = notice("approval.pending");
        n.tool = "sync` <!channel> *APPROVED* <https://evil.example|Open approvals>".into();
        n.reason = "r<@U1>`".into();
        n.session = "ses#<!here>".into();
        n.approve_command = "secureclaw --state-dir /s`x` approvals approve act_1".into();
        let b = n.body(WebhookFormat::Slack);
        for text in [
            b["text"].as_str().unwrap_or(""),
            b["blocks"][0]["text"]["text"].as_str().unwrap_or(""),
        ] {
            assert!(!text.contains('<') && !text.contains('>'), "{text}");
            assert!(!text.contains("sync`"), "{text}");
        }
        // Positive control: the escaped text is still there to read.
        assert!(
            b["text"]
                .as_str()
                .unwrap_or("")
                .contains("&lt;!channel&gt;")
        );
    }

    #[test]
    fn signatures_cover_timestamp_and_body() {
        let secret = b"0123456789abcdef-secret";
        let sig = webhook_signature(secret, 1_700_000_000, "{\"a\":1}");
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        assert_eq!(sig, webhook_signature(secret, 1_700_000_000, "{\"a\":1}"));
        // A changed body, timestamp or secret gives another signature.
        assert_ne!(sig, webhook_signature(secret, 1_700_000_000, "{\"a\":2}"));
        assert_ne!(sig, webhook_signature(secret, 1_700_000_001, "{\"a\":1}"));
        assert_ne!(
            sig,
            webhook_signature(b"another-secret-16b", 1_700_000_000, "{\"a\":1}")
        );
    }

    #[test]
    fn loopback_urls_are_told_apart() {
        for u in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://[::1]:80/",
            "http://u:p@127.0.0.2/",
        ] {
            assert!(is_loopback_url(u), "{u}");
        }
        for u in [
            "http://10.0.0.1/x",
            "http://hooks.example/x",
            "http://127.0.0.1.evil.example/",
        ] {
            assert!(!is_loopback_url(u), "{u}");
        }
    }

    #[test]
    fn json_body_is_the_notice() {
        let b = notice("approval.pending").body(WebhookFormat::Json);
        assert_eq!(b["event"], "approval.pending");
        assert_eq!(b["action_id"], "act_1");
        assert_eq!(b["approvals_url"], "https://gw.example/approvals");
    }
}
