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
//! Delivery never holds up a call: each notice is posted by its own task, at most
//! [`MAX_DELIVERIES`] at once (beyond that a notice is dropped with a warning), each attempt
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
use std::sync::Arc;
use std::time::Duration;

/// Notices being posted at once, across every webhook; a notice beyond it is dropped (and
/// logged) rather than queued without bound.
pub const MAX_DELIVERIES: usize = 64;
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
    /// The CLI command that approves it, with the state directory.
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
        let headline = match self.event {
            "approval.timed_out" => format!(
                "SecureClaw: approval for `{}` timed out and was denied",
                self.tool
            ),
            _ => format!("SecureClaw: `{}` is waiting for approval", self.tool),
        };
        let details = format!(
            "*Action* `{}`\n*Tool* `{}`\n*Caller* {}\n*Session* `{}`\n*Reason* `{}`\n*At* {}\n\
             *CLI* `{}`",
            self.action_id,
            self.tool,
            slack_escape(&self.caller),
            self.session,
            self.reason,
            self.at,
            if self.event == "approval.pending" {
                format!("{} {}", self.approve_command, self.action_id)
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

/// One configured webhook, its URL resolved.
struct Hook {
    url: String,
    format: WebhookFormat,
    timeout: Duration,
}

/// The configured webhooks and the page's URL (built once, at start-up).
pub(crate) struct Notifier {
    client: Option<reqwest::Client>,
    hooks: Vec<Hook>,
    approvals_url: Option<String>,
    deliveries: Arc<tokio::sync::Semaphore>,
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
            hooks.push(Hook {
                url,
                format: w.format,
                timeout: Duration::from_millis(w.timeout_ms),
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
        })
    }

    /// Post `notice` to every webhook, each in its own task; returns at once. Without a Tokio
    /// runtime (never in the gateway) nothing is sent.
    fn send(&self, notice: &ApprovalNotice) {
        let (Ok(runtime), Some(client)) = (tokio::runtime::Handle::try_current(), &self.client)
        else {
            return;
        };
        for hook in &self.hooks {
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
            let request = client
                .post(&hook.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .timeout(hook.timeout);
            let shown = redact_url(&hook.url);
            let action = notice.action_id.clone();
            runtime.spawn(async move {
                let _permit = permit;
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
            approve_command: self.approve_command().to_owned(),
        }
    }

    /// Tell the webhooks that `action` of `caller` in session `session` (raw id) went pending
    /// (called where the decision is logged, once per pending action).
    pub(crate) fn notify_pending(
        &self,
        caller: &str,
        session: &str,
        tool: &str,
        reason: &str,
        action: &str,
    ) {
        if self.inner.notifier.hooks.is_empty() {
            return;
        }
        let notice =
            self.approval_notice("approval.pending", caller, session, tool, reason, action);
        self.inner.notifier.send(&notice);
    }

    /// Deny every approval still pending `[gateway.approvals] timeout_ms` after it was
    /// requested (decider [`TIMEOUT_DECIDER`], audited as any denial), tell the webhooks, and
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
            if approval.created_at.plus_millis(timeout) > now {
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
            approve_command: "secureclaw --state-dir /s approvals approve".into(),
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

    #[test]
    fn json_body_is_the_notice() {
        let b = notice("approval.pending").body(WebhookFormat::Json);
        assert_eq!(b["event"], "approval.pending");
        assert_eq!(b["action_id"], "act_1");
        assert_eq!(b["approvals_url"], "https://gw.example/approvals");
    }
}
