//! Bypass cases for MCP 2026-07-28 confirmation as a multi round-trip request (MRTR,
//! SEP-2322; issue 16 item 2): a compromised runtime holds the `requestState` of its own
//! pending action and tampers with it, replays it, moves it to another session, caller or
//! tool, attaches it to another call, or answers its own approval prompt.
//!
//! Each case drives the real MCP front end ([`McpFrontEnd`]) over a pipe with rmcp's client in
//! `server/discover` mode, so the state crosses the wire exactly as a runtime would echo it.
//! In-process only: the front end runs beside the suite's gateway.

use crate::bypass::{Ctx, Results, SEND, Stop, UNNAMED, stack};
use crate::report::{Expect, Observed};
use crate::stack::Stack;
use crate::target::{EvalError, Reply, Session, Verdict};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::recovery::ReasonCode::{
    self, BindingMismatch, ConfirmationRequired, Replay, RequestStateExpired, RequestStateInvalid,
};
use secureclaw_server::{McpFrontEnd, SessionSource};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const FRONT: &str = "in-process only: drives the MCP front end over a pipe";
const C: &str = "MRTR (2026-07-28)";

type Client = RunningService<RoleClient, ClientConfig>;

/// A 2026-07-28 client of `session` on its own pipe to a fresh front end of the suite's
/// gateway (not a trusted host: its answers approve nothing).
async fn client(s: &Stack, session: &Session) -> Result<Client, Stop> {
    let record = session.record()?.clone();
    let front = McpFrontEnd::new(s.gateway.clone(), SessionSource::Fixed(record))
        .with_approval_wait(Duration::from_millis(50));
    let (server_io, client_io) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let (read, write) = tokio::io::split(server_io);
        let _ = front.serve_lines(read, write).await;
    });
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_elicitation().build(),
        Implementation::new("secureclaw-bypass", env!("CARGO_PKG_VERSION")),
    );
    info.serve_with_lifecycle(
        client_io,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .map_err(|e| Stop::Err(EvalError::Setup(format!("2026-07-28 client: {e}"))))
}

/// One `tools/call` (no automatic MRTR rounds) and what it came to.
async fn call(client: &Client, params: CallToolRequestParams) -> Result<Reply, EvalError> {
    let response = client
        .call_tool_once(params)
        .await
        .map_err(|e| EvalError::Setup(format!("tools/call: {e}")))?;
    Ok(match response {
        CallToolResponse::InputRequired(r) => {
            let meta = r
                .meta
                .as_ref()
                .and_then(|m| serde_json::to_value(m).ok())
                .unwrap_or(Value::Null);
            let pending = at(&meta, &["dev.secureclaw/pending", "recovery"]);
            Reply {
                verdict: Verdict::Hold(
                    reason(at(pending, &["reason"])).unwrap_or(ConfirmationRequired),
                ),
                structured: Some(json!({"requestState": r.request_state})),
                action_id: at(pending, &["action_id"]).as_str().map(str::to_owned),
            }
        }
        CallToolResponse::Complete(r) => {
            let structured = r.structured_content.clone();
            let recovery = structured
                .as_ref()
                .map(|s| at(s, &["recovery"]).clone())
                .unwrap_or(Value::Null);
            let verdict = match (r.is_error, reason(at(&recovery, &["reason"]))) {
                (Some(true), Some(code))
                    if at(&recovery, &["status"]) == "pending_confirmation" =>
                {
                    Verdict::Hold(code)
                }
                (Some(true), Some(code)) => Verdict::Deny(code),
                (e, _) => Verdict::Allow {
                    tool_error: e == Some(true),
                },
            };
            Reply {
                verdict,
                structured,
                action_id: at(&recovery, &["action_id"]).as_str().map(str::to_owned),
            }
        }
        other => {
            return Err(EvalError::Setup(format!(
                "tools/call: unexpected response {other:?}"
            )));
        }
    })
}

/// `v` at the path `keys` of object keys, `null` where a key is missing.
fn at<'v>(v: &'v Value, keys: &[&str]) -> &'v Value {
    static NULL: Value = Value::Null;
    keys.iter().try_fold(v, |v, k| v.get(*k)).unwrap_or(&NULL)
}

fn reason(v: &Value) -> Option<ReasonCode> {
    serde_json::from_value(v.clone()).ok()
}

fn params(tool: &str, args: &Value, state: Option<&str>) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    p.request_state = state.map(str::to_owned);
    p
}

/// A gated e-mail of `session` sent over `client`: its arguments, the sealed state and the
/// action id (set-up; the state must come back `input_required`).
async fn pending(c: &Ctx<'_>, client: &Client) -> Result<(Value, String, String), Stop> {
    let args = c.mail(UNNAMED);
    let reply = call(client, params(SEND, &args, None)).await?;
    let state = reply
        .structured
        .as_ref()
        .and_then(|s| at(s, &["requestState"]).as_str())
        .map(str::to_owned);
    match (reply.verdict, state, reply.action_id) {
        (Verdict::Hold(ConfirmationRequired), Some(state), Some(action)) => {
            Ok((args, state, action))
        }
        (v, _, _) => Err(Stop::Err(EvalError::Setup(format!(
            "a gated e-mail over MCP 2026-07-28 was {v:?}, not input_required"
        )))),
    }
}

/// [`pending`], then approved by the user out of band.
async fn approved(
    c: &Ctx<'_>,
    s: &Stack,
    client: &Client,
) -> Result<(Value, String, String), Stop> {
    let (args, state, action) = pending(c, client).await?;
    s.gateway
        .decide_approval(&ActionId(action.clone()), true, "bypass-suite user")
        .await
        .map_err(|e| Stop::Err(EvalError::Setup(format!("approve: {e}"))))?;
    Ok((args, state, action))
}

/// Flip one base64url character of `state` at `at` (another valid character).
fn flip(state: &str, at: usize) -> String {
    state
        .char_indices()
        .map(|(i, ch)| match (i == at, ch) {
            (true, 'A') => 'B',
            (true, _) => 'A',
            (false, ch) => ch,
        })
        .collect()
}

/// The MRTR cases.
pub(crate) async fn mrtr(c: &Ctx<'_>, r: &mut Results) {
    r.case(
        C,
        "forged requestState (well-formed token, no valid tag)",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, _, _) = approved(c, s, &alice).await?;
            c.observe(call(
                &alice,
                params(SEND, &args, Some("rs2.Y29uZi0x.e30.AAAA")),
            ))
            .await
        },
    )
    .await;
    r.case(
        C,
        "approved requestState with one character changed",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let at = state.len() / 2;
            c.observe(call(&alice, params(SEND, &args, Some(&flip(&state, at)))))
                .await
        },
    )
    .await;
    r.case(
        C,
        "alice's approved requestState in her other session",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let other = client(s, &c.alice2).await?;
            c.observe(call(&other, params(SEND, &args, Some(&state))))
                .await
        },
    )
    .await;
    r.case(
        C,
        "alice's approved requestState presented by mallory",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let mallory = client(s, &c.mallory).await?;
            c.observe(call(&mallory, params(SEND, &args, Some(&state))))
                .await
        },
    )
    .await;
    r.case(
        C,
        "approved requestState for another tool",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            c.observe(call(
                &alice,
                params(crate::bypass::DRAFT, &args, Some(&state)),
            ))
            .await
        },
    )
    .await;
    r.case(
        C,
        "approved requestState with the recipient changed",
        Expect::Deny(BindingMismatch),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (mut args, state, _) = approved(c, s, &alice).await?;
            if let Some(m) = args.as_object_mut() {
                m.insert("to".into(), json!(crate::bypass::ATTACKER));
            }
            c.observe(call(&alice, params(SEND, &args, Some(&state))))
                .await
        },
    )
    .await;
    r.case(
        C,
        "approved requestState beside an approval id of another action",
        Expect::Deny(RequestStateInvalid),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (_, _, other_action) = approved(c, s, &alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let mut p = params(SEND, &args, Some(&state));
            p.meta = serde_json::from_value(json!({"dev.secureclaw/approval": other_action})).ok();
            c.observe(call(&alice, p)).await
        },
    )
    .await;
    r.case(
        C,
        "the runtime accepts its own approval prompt",
        Expect::Hold(ConfirmationRequired),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = pending(c, &alice).await?;
            let mut p = params(SEND, &args, Some(&state));
            p.input_responses = Some(BTreeMap::from([(
                "dev.secureclaw/approval".to_owned(),
                json!({"action": "accept", "content": {"approve": true}}),
            )]));
            c.observe(call(&alice, p)).await
        },
    )
    .await;
    r.case(
        C,
        "requestState past its lifetime",
        Expect::Deny(RequestStateExpired),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let now = s.clock.now();
            s.clock.set(now + 3_600_000 + 1);
            let seen = c
                .observe(call(&alice, params(SEND, &args, Some(&state))))
                .await;
            s.clock.set(now);
            seen
        },
    )
    .await;
    r.case(
        C,
        "approved requestState echoed unchanged commits once (positive control)",
        Expect::Allow,
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            c.observe(call(&alice, params(SEND, &args, Some(&state))))
                .await
        },
    )
    .await;
    r.case(
        C,
        "requestState replayed after its commit",
        Expect::Deny(Replay),
        async {
            let s = stack(c.t, FRONT)?;
            let alice = client(s, &c.alice).await?;
            let (args, state, _) = approved(c, s, &alice).await?;
            let first = call(&alice, params(SEND, &args, Some(&state))).await?;
            if !matches!(first.verdict, Verdict::Allow { tool_error: false }) {
                return Ok(Observed::Error(format!(
                    "set-up commit was {:?}",
                    first.verdict
                )));
            }
            c.observe(call(&alice, params(SEND, &args, Some(&state))))
                .await
        },
    )
    .await;
}
