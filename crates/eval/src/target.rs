//! What the suite attacks: the in-process [`Stack`] or a running `secureclaw serve` reached
//! through its HTTP API. Both expose the same runtime-side operations (preview, commit, call,
//! revoke a handle) and the operator-side ones the HTTP API grants (open a session, decide an
//! approval). Only the in-process target offers the trusted-side powers a runtime never has
//! (clock, keys, restart, policy set); cases that need them are skipped under `--url`.

use crate::http::{HttpClient, HttpError};
use crate::stack::{Stack, StackError};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::handle::HandleId;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::SessionRecord;
use secureclaw_gateway::{CallOutcome, Gateway, PreviewOutcome};
use serde_json::{Map, Value, json};

/// Errors that stop a case from producing an observation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The in-process stack failed.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// The HTTP exchange failed.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The server answered something the suite does not understand.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// An operator operation failed.
    #[error("operator operation failed: {0}")]
    Operator(String),
    /// The set-up of a case did not go as a valid request must (e.g. a valid preview was not
    /// allowed); the case observes nothing.
    #[error("set-up failed: {0}")]
    Setup(String),
}

/// What one attempt produced, as the runtime sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The tool ran (`tool_error`: it reported `isError`).
    Allow {
        /// The upstream reported an error result.
        tool_error: bool,
    },
    /// Denied with a reason code.
    Deny(ReasonCode),
    /// Held for a trusted confirmation.
    Hold(ReasonCode),
}

/// Tool-call arguments: a JSON object, or raw JSON text sent as is (duplicate keys, numbers no
/// serializer would write). In process, raw text is parsed with `serde_json` exactly as the
/// HTTP front end parses request bodies.
#[derive(Debug, Clone, PartialEq)]
pub enum Args {
    /// A JSON object.
    Json(Map<String, Value>),
    /// Raw JSON text of an object.
    Raw(String),
}

impl Args {
    /// Arguments from a JSON value (non-objects become an empty object).
    #[must_use]
    pub fn json(v: Value) -> Self {
        match v {
            Value::Object(m) => Self::Json(m),
            _ => Self::Json(Map::new()),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Json(m) => Value::Object(m.clone()).to_string(),
            Self::Raw(s) => s.clone(),
        }
    }

    /// Whether the front ends refuse these arguments before parsing them: raw text with a
    /// duplicate key or nested past the limit is `invalid_arguments` (in process this mirrors
    /// what the HTTP and MCP front ends answer).
    fn refused(&self) -> Option<ReasonCode> {
        match self {
            Self::Json(_) => None,
            Self::Raw(s) => match secureclaw_core::rawjson::scan(
                s.as_bytes(),
                secureclaw_core::canonical::MAX_DEPTH + 1,
            ) {
                Err(
                    secureclaw_core::rawjson::RawJsonError::DuplicateKey { .. }
                    | secureclaw_core::rawjson::RawJsonError::TooDeep { .. }
                    | secureclaw_core::rawjson::RawJsonError::TooManyValues { .. },
                ) => Some(ReasonCode::InvalidArguments),
                _ => None,
            },
        }
    }

    fn map(&self) -> Result<Map<String, Value>, EvalError> {
        match self {
            Self::Json(m) => Ok(m.clone()),
            Self::Raw(s) => serde_json::from_str(s)
                .map_err(|e| EvalError::Setup(format!("raw arguments do not parse: {e}"))),
        }
    }
}

/// A session as the suite holds it: the bearer token (session id) and the caller.
#[derive(Debug, Clone)]
pub struct Session {
    /// Session id (the runtime's bearer credential).
    pub token: String,
    /// Caller the operator opened it for.
    pub caller: String,
    record: Option<SessionRecord>,
}

impl Session {
    /// In process only: the same session id with another caller in the record — what a
    /// runtime that could edit its own session record would present.
    #[must_use]
    pub fn with_forged_caller(&self, caller: &str) -> Self {
        let mut s = self.clone();
        if let Some(r) = s.record.as_mut() {
            caller.clone_into(&mut r.caller);
        }
        caller.clone_into(&mut s.caller);
        s
    }

    pub(crate) fn record(&self) -> Result<&SessionRecord, EvalError> {
        self.record
            .as_ref()
            .ok_or_else(|| EvalError::Setup("session has no in-process record".into()))
    }
}

/// An explicit preview's answer.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Action id to commit.
    pub action_id: String,
    /// The sealed artifact.
    pub artifact: String,
    /// `allow`, `confirm` or `deny`.
    pub decision: String,
    /// Reason code for `confirm` and `deny`.
    pub reason: Option<ReasonCode>,
}

/// A call's or commit's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// What happened.
    pub verdict: Verdict,
    /// `structuredContent` of a completed call.
    pub structured: Option<Value>,
    /// Action id named by the answer (completed effect or pending approval).
    pub action_id: Option<String>,
}

/// The system under evaluation.
pub enum Target {
    /// The real stack in this process.
    InProcess(Box<Stack>),
    /// A running `secureclaw serve`.
    Http {
        /// The server.
        client: HttpClient,
        /// Operator token (needed to open sessions and decide approvals).
        operator_token: String,
    },
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mode())
    }
}

/// The runtime's view of a gateway outcome.
#[must_use]
pub fn reply_of(o: &CallOutcome) -> Reply {
    match o {
        CallOutcome::Completed { output, action_id } => Reply {
            verdict: Verdict::Allow {
                tool_error: output.is_error,
            },
            structured: output.structured.clone(),
            action_id: action_id.as_ref().map(|a| a.0.clone()),
        },
        // A deferred speculative call is held like a pending one: nothing was executed.
        CallOutcome::Pending(r) | CallOutcome::Deferred(r) => Reply {
            verdict: Verdict::Hold(r.reason),
            structured: None,
            action_id: r.action_id.clone(),
        },
        // Answered by the local substitute: the provider never ran, so no effect was allowed.
        CallOutcome::Shadowed { output } => Reply {
            verdict: Verdict::Hold(secureclaw_core::recovery::ReasonCode::Deferred),
            structured: output.structured.clone(),
            action_id: None,
        },
        CallOutcome::Denied(r) => Reply {
            verdict: Verdict::Deny(r.reason),
            structured: None,
            action_id: r.action_id.clone(),
        },
    }
}

fn preview_of(p: PreviewOutcome) -> Preview {
    Preview {
        action_id: p.action_id.0,
        artifact: p.artifact,
        decision: p.decision.as_str().to_owned(),
        reason: p.recovery.map(|r| r.reason),
    }
}

fn reason_in(v: &Value) -> Result<ReasonCode, EvalError> {
    v.get("recovery")
        .and_then(|r| r.get("reason"))
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .ok_or_else(|| EvalError::Protocol(format!("no reason code in {v}")))
}

/// A front-end refusal before any parsing (`400 invalid_arguments`: duplicate key, too deep).
fn front_end_refusal(status: u16, v: &Value) -> Option<Verdict> {
    (status == 400
        && v.get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str)
            == Some("invalid_arguments"))
    .then_some(Verdict::Deny(ReasonCode::InvalidArguments))
}

fn refused_reply(verdict: Verdict) -> Reply {
    Reply {
        verdict,
        structured: None,
        action_id: None,
    }
}

pub(crate) fn reply_json(status: u16, v: &Value) -> Result<Reply, EvalError> {
    if let Some(verdict) = front_end_refusal(status, v) {
        return Ok(refused_reply(verdict));
    }
    if status != 200 {
        return Err(EvalError::Protocol(format!("HTTP {status}: {v}")));
    }
    let action_id = v
        .get("action_id")
        .or_else(|| v.get("recovery").and_then(|r| r.get("action_id")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let verdict = match v.get("status").and_then(Value::as_str) {
        Some("completed") => Verdict::Allow {
            tool_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        },
        Some("pending_confirmation") => Verdict::Hold(reason_in(v)?),
        Some("denied") => Verdict::Deny(reason_in(v)?),
        _ => return Err(EvalError::Protocol(format!("unknown outcome {v}"))),
    };
    Ok(Reply {
        verdict,
        structured: v
            .get("structured_content")
            .cloned()
            .filter(|s| !s.is_null()),
        action_id,
    })
}

fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Commit through a specific gateway of the in-process stack (restarted, rotated keys,
/// changed policy set).
///
/// # Errors
/// [`EvalError::Setup`] for sessions without an in-process record or unparsable raw args.
pub async fn commit_via(
    gateway: &Gateway,
    session: &Session,
    tool: &str,
    args: &Args,
    action_id: &str,
    artifact: Option<&str>,
) -> Result<Reply, EvalError> {
    if let Some(reason) = args.refused() {
        return Ok(refused_reply(Verdict::Deny(reason)));
    }
    let o = gateway
        .commit(
            session.record()?,
            tool,
            args.map()?,
            &ActionId(action_id.to_owned()),
            artifact,
        )
        .await;
    Ok(reply_of(&o))
}

/// Preview through a specific gateway of the in-process stack.
///
/// # Errors
/// As [`commit_via`].
pub async fn preview_via(
    gateway: &Gateway,
    session: &Session,
    tool: &str,
    args: &Args,
) -> Result<Result<Preview, Verdict>, EvalError> {
    if let Some(reason) = args.refused() {
        return Ok(Err(Verdict::Deny(reason)));
    }
    Ok(gateway
        .preview(session.record()?, tool, &args.map()?)
        .await
        .map(preview_of)
        .map_err(|r| Verdict::Deny(r.reason)))
}

impl Target {
    /// Connect to a running server.
    ///
    /// # Errors
    /// [`EvalError::Http`] for an unsupported URL.
    pub fn http(url: &str, operator_token: String) -> Result<Self, EvalError> {
        Ok(Self::Http {
            client: HttpClient::new(url)?,
            operator_token,
        })
    }

    /// `in-process` or `http`.
    #[must_use]
    pub fn mode(&self) -> &'static str {
        match self {
            Self::InProcess(_) => "in-process",
            Self::Http { .. } => "http",
        }
    }

    /// The in-process stack, if this is one.
    #[must_use]
    pub fn stack(&self) -> Option<&Stack> {
        match self {
            Self::InProcess(s) => Some(s),
            Self::Http { .. } => None,
        }
    }

    /// Effects executed so far (in process only; `None` over HTTP).
    pub async fn effects(&self) -> Option<u64> {
        match self {
            Self::InProcess(s) => Some(s.effects().await),
            Self::Http { .. } => None,
        }
    }

    /// Operator: open a session for `caller` with a task envelope.
    ///
    /// # Errors
    /// [`EvalError`] if the gateway refuses or cannot be reached.
    pub async fn open_session(
        &self,
        caller: &str,
        envelope: &TaskEnvelope,
    ) -> Result<Session, EvalError> {
        match self {
            Self::InProcess(s) => {
                let r = s
                    .gateway
                    .open_session(caller, envelope.clone())
                    .await
                    .map_err(|e| EvalError::Operator(e.to_string()))?;
                Ok(Session {
                    token: r.id.clone(),
                    caller: r.caller.clone(),
                    record: Some(r),
                })
            }
            Self::Http {
                client,
                operator_token,
            } => {
                let body = json!({"caller": caller, "task": envelope}).to_string();
                let (status, v) = client
                    .request("POST", "/v1/sessions", Some(operator_token), Some(&body))
                    .await?;
                let token = v
                    .get("session_id")
                    .and_then(Value::as_str)
                    .filter(|_| status == 200)
                    .ok_or_else(|| {
                        EvalError::Operator(format!("open session: HTTP {status}: {v}"))
                    })?;
                Ok(Session {
                    token: token.to_owned(),
                    caller: caller.to_owned(),
                    record: None,
                })
            }
        }
    }

    /// Runtime: explicit preview. `Err(verdict)` when the call cannot be previewed at all.
    ///
    /// # Errors
    /// [`EvalError`] for transport or protocol failures.
    pub async fn preview(
        &self,
        session: &Session,
        tool: &str,
        args: &Args,
    ) -> Result<Result<Preview, Verdict>, EvalError> {
        match self {
            Self::InProcess(s) => preview_via(&s.gateway, session, tool, args).await,
            Self::Http { client, .. } => {
                let body = format!("{{\"tool\":{},\"arguments\":{}}}", quote(tool), args.text());
                let (status, v) = client
                    .request("POST", "/v1/preview", Some(&session.token), Some(&body))
                    .await?;
                if let Some(verdict) = front_end_refusal(status, &v) {
                    return Ok(Err(verdict));
                }
                if status != 200 {
                    return Err(EvalError::Protocol(format!("preview: HTTP {status}: {v}")));
                }
                if v.get("status").and_then(Value::as_str) == Some("denied") {
                    return Ok(Err(Verdict::Deny(reason_in(&v)?)));
                }
                let field = |k: &str| {
                    v.get(k)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| EvalError::Protocol(format!("preview without `{k}`: {v}")))
                };
                Ok(Ok(Preview {
                    action_id: field("action_id")?,
                    artifact: field("artifact")?,
                    decision: field("decision")?,
                    reason: v
                        .get("recovery")
                        .filter(|r| !r.is_null())
                        .map(|_| reason_in(&v))
                        .transpose()?,
                }))
            }
        }
    }

    /// Runtime: explicit commit.
    ///
    /// # Errors
    /// [`EvalError`] for transport or protocol failures.
    pub async fn commit(
        &self,
        session: &Session,
        tool: &str,
        args: &Args,
        action_id: &str,
        artifact: Option<&str>,
    ) -> Result<Reply, EvalError> {
        match self {
            Self::InProcess(s) => {
                commit_via(&s.gateway, session, tool, args, action_id, artifact).await
            }
            Self::Http { client, .. } => {
                let artifact = artifact.map_or_else(|| "null".to_owned(), quote);
                let body = format!(
                    "{{\"tool\":{},\"arguments\":{},\"action_id\":{},\"artifact\":{artifact}}}",
                    quote(tool),
                    args.text(),
                    quote(action_id)
                );
                let (status, v) = client
                    .request("POST", "/v1/commit", Some(&session.token), Some(&body))
                    .await?;
                reply_json(status, &v)
            }
        }
    }

    /// Runtime: an ordinary tool call (preview and commit in one), optionally re-issued
    /// under an approval id.
    ///
    /// # Errors
    /// [`EvalError`] for transport or protocol failures.
    pub async fn call(
        &self,
        session: &Session,
        tool: &str,
        args: &Args,
        approval: Option<&str>,
    ) -> Result<Reply, EvalError> {
        match self {
            Self::InProcess(s) => {
                if let Some(reason) = args.refused() {
                    return Ok(refused_reply(Verdict::Deny(reason)));
                }
                let approval = approval.map(|a| ActionId(a.to_owned()));
                let o = s
                    .gateway
                    .call(
                        session.record()?,
                        tool,
                        args.map()?,
                        &secureclaw_gateway::CallMeta::committed(approval.as_ref()),
                    )
                    .await;
                Ok(reply_of(&o))
            }
            Self::Http { client, .. } => {
                let approval =
                    approval.map_or_else(String::new, |a| format!(",\"approval\":{}", quote(a)));
                let body = format!(
                    "{{\"tool\":{},\"arguments\":{}{approval}}}",
                    quote(tool),
                    args.text()
                );
                let (status, v) = client
                    .request("POST", "/v1/call", Some(&session.token), Some(&body))
                    .await?;
                reply_json(status, &v)
            }
        }
    }

    /// Operator: approve or decline a pending action.
    ///
    /// # Errors
    /// [`EvalError::Operator`] if the gateway refuses.
    pub async fn decide(&self, action_id: &str, approve: bool) -> Result<(), EvalError> {
        match self {
            Self::InProcess(s) => s
                .gateway
                .decide_approval(&ActionId(action_id.to_owned()), approve, "bypass-suite")
                .await
                .map(|_| ())
                .map_err(|e| EvalError::Operator(e.to_string())),
            Self::Http {
                client,
                operator_token,
            } => {
                let verb = if approve { "approve" } else { "deny" };
                let (status, v) = client
                    .request(
                        "POST",
                        &format!("/v1/approvals/{action_id}/{verb}"),
                        Some(operator_token),
                        Some(""),
                    )
                    .await?;
                if status == 200 {
                    Ok(())
                } else {
                    Err(EvalError::Operator(format!("{verb}: HTTP {status}: {v}")))
                }
            }
        }
    }

    /// Operator: approve a pending action and create a standing grant on `terms` (the JSON
    /// body of `POST /v1/approvals/{id}/approve`: `allow_for`, `uses`, `max_amount`).
    ///
    /// # Errors
    /// [`EvalError::Operator`] if the gateway refuses or the terms are malformed.
    pub async fn decide_with_grant(&self, action_id: &str, terms: &Value) -> Result<(), EvalError> {
        match self {
            Self::InProcess(s) => {
                let allow_for_ms = terms["allow_for"]
                    .as_str()
                    .map(secureclaw_gateway::parse_duration)
                    .transpose()
                    .map_err(|e| EvalError::Operator(e.to_string()))?;
                let t = secureclaw_gateway::GrantTerms {
                    allow_for_ms,
                    uses: terms["uses"].as_u64(),
                    max_amount: terms["max_amount"].as_u64(),
                };
                s.gateway
                    .approve_with_grant(&ActionId(action_id.to_owned()), "bypass-suite", t)
                    .await
                    .map(|_| ())
                    .map_err(|e| EvalError::Operator(e.to_string()))
            }
            Self::Http {
                client,
                operator_token,
            } => {
                let body = terms.to_string();
                let (status, v) = client
                    .request(
                        "POST",
                        &format!("/v1/approvals/{action_id}/approve"),
                        Some(operator_token),
                        Some(&body),
                    )
                    .await?;
                if status == 200 {
                    Ok(())
                } else {
                    Err(EvalError::Operator(format!(
                        "approve with a grant: HTTP {status}: {v}"
                    )))
                }
            }
        }
    }

    /// Runtime: revoke one of the session's handles.
    ///
    /// # Errors
    /// [`EvalError::Operator`] if the gateway refuses.
    pub async fn revoke(&self, session: &Session, handle: &str) -> Result<(), EvalError> {
        match self {
            Self::InProcess(s) => s
                .gateway
                .revoke_handle(session.record()?, &HandleId(handle.to_owned()))
                .await
                .map_err(|e| EvalError::Operator(e.to_string())),
            Self::Http { client, .. } => {
                let (status, v) = client
                    .request(
                        "DELETE",
                        &format!("/v1/handles/{handle}"),
                        Some(&session.token),
                        None,
                    )
                    .await?;
                if status == 200 {
                    Ok(())
                } else {
                    Err(EvalError::Operator(format!("revoke: HTTP {status}: {v}")))
                }
            }
        }
    }
}
