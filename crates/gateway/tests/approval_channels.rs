//! Approval channels (issue 15 "Channels"): webhooks are told of every action that goes
//! pending, in the generic JSON and the Slack shape, never with an argument value; an approval
//! left pending past `[gateway.approvals] timeout_ms` is denied, recorded as decided by
//! `timeout`, and the runtime's re-issue is refused. Positive controls: before the timeout
//! nothing is denied, and an approval decided in time runs once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::audit::AuditKind;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::ApprovalState;
use secureclaw_gateway::{
    Gateway, TIMEOUT_DECIDER, WebhookConfig, WebhookFormat, webhook_signature,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SEND: &str = "office__send_email";
const FINANCE: &str = "finance@corp.example";
const TIMEOUT_MS: u64 = 600_000;

type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A webhook receiver on loopback: every POST's path and JSON body.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/{kind}",
        axum::routing::post(
            move |axum::extract::Path(kind): axum::extract::Path<String>, body: String| {
                let sink = sink.clone();
                async move {
                    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    sink.lock().unwrap().push((kind, v));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

/// Wait (bounded) until `got` holds `n` bodies; return them.
async fn wait_for(got: &Received, n: usize) -> Vec<(String, Value)> {
    for _ in 0..200 {
        if got.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    got.lock().unwrap().clone()
}

async fn harness(base: &str) -> Harness {
    let mut c = test_config();
    c.approvals.timeout_ms = TIMEOUT_MS;
    c.approvals.public_url = Some("https://gw.example/".into());
    c.approvals.webhooks = vec![
        WebhookConfig {
            url: Some(format!("{base}/json")),
            url_env: None,
            secret_env: None,
            format: WebhookFormat::Json,
            timeout_ms: 5_000,
        },
        WebhookConfig {
            url: Some(format!("{base}/slack")),
            url_env: None,
            secret_env: None,
            format: WebhookFormat::Slack,
            timeout_ms: 5_000,
        },
    ];
    Harness::with_config(c).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_action_is_posted_to_each_webhook_without_argument_values() {
    let (base, got) = receiver().await;
    let h = harness(&base).await;
    let action = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Quarterly numbers"), None)
            .await,
    );
    let bodies = wait_for(&got, 2).await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let json = &bodies.iter().find(|(k, _)| k == "json").unwrap().1;
    assert_eq!(json["event"], "approval.pending");
    assert_eq!(json["action_id"], action.0.as_str());
    assert_eq!(json["tool"], SEND);
    assert_eq!(json["upstream"], "office");
    assert_eq!(json["caller"], "alice");
    assert_eq!(json["reason"], "confirmation_required");
    assert_eq!(json["approvals_url"], "https://gw.example/approvals");
    assert!(json["session"].as_str().unwrap().starts_with("ses#"));
    assert!(
        !json["session"].as_str().unwrap().contains(&h.session.id),
        "the session's bearer id is never sent"
    );
    assert!(
        json["approve_command"]
            .as_str()
            .unwrap()
            .contains("approvals approve")
    );
    let slack = &bodies.iter().find(|(k, _)| k == "slack").unwrap().1;
    assert!(slack["text"].as_str().unwrap().contains(SEND), "{slack}");
    assert_eq!(
        slack["blocks"][1]["elements"][0]["url"],
        "https://gw.example/approvals"
    );
    assert!(
        slack["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains(&action.0)
    );
    // No argument value reaches a webhook: not the recipient, the subject or the body.
    for (_, b) in &bodies {
        let text = b.to_string();
        for value in [
            FINANCE,
            "Quarterly numbers",
            "Invoice INV-42",
            &h.session.id,
        ] {
            assert!(!text.contains(value), "`{value}` in a webhook body: {text}");
        }
    }
    // Positive control: nothing was sent upstream, and the approval still works.
    assert_eq!(h.sent(), 0);
    h.gw.decide_approval(&action, true, "cli:alice")
        .await
        .unwrap();
    completed(
        &h.call(
            &h.session,
            SEND,
            email(FINANCE, "Quarterly numbers"),
            Some(&action),
        )
        .await,
    );
    assert_eq!(h.sent(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        got.lock().unwrap().len(),
        2,
        "an allowed call notifies nobody"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_left_pending_past_the_timeout_is_denied_and_cannot_run() {
    let (base, got) = receiver().await;
    let h = harness(&base).await;
    let action = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 1"), None)
            .await,
    );
    wait_for(&got, 2).await;
    // Positive control: just before the timeout nothing is denied.
    h.clock.advance(TIMEOUT_MS - 1);
    assert!(h.gw.deny_timed_out_approvals().await.unwrap().is_empty());
    assert_eq!(
        h.store.approval(&action).unwrap().unwrap().state,
        ApprovalState::Pending
    );
    h.clock.advance(1);
    let denied = h.gw.deny_timed_out_approvals().await.unwrap();
    assert_eq!(denied, vec![action.clone()]);
    let record = h.store.approval(&action).unwrap().unwrap();
    assert_eq!(record.state, ApprovalState::Denied);
    assert_eq!(record.decided_by.as_deref(), Some(TIMEOUT_DECIDER));
    // Audited as a denial by `timeout`.
    let records = h.store.audit_records(0, usize::MAX).unwrap();
    let confirmation = records
        .iter()
        .find(|r| {
            r.event.kind == AuditKind::Confirmation
                && r.event.action_id.as_deref() == Some(action.0.as_str())
        })
        .unwrap();
    assert_eq!(confirmation.event.detail["approved"], false);
    assert_eq!(confirmation.event.detail["confirmer"], TIMEOUT_DECIDER);
    // The webhooks hear of it.
    let bodies = wait_for(&got, 4).await;
    let timed_out: Vec<_> = bodies
        .iter()
        .filter(|(k, b)| k == "json" && b["event"] == "approval.timed_out")
        .collect();
    assert_eq!(timed_out.len(), 1, "{bodies:?}");
    assert_eq!(timed_out[0].1["action_id"], action.0.as_str());
    assert_eq!(timed_out[0].1["reason"], "approval_timed_out");
    // The runtime's re-issue is refused, and a late approval changes nothing.
    assert_denied(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 1"), Some(&action))
            .await,
        ReasonCode::ConfirmationDenied,
    );
    assert!(
        h.gw.decide_approval(&action, true, "cli:alice")
            .await
            .is_err()
    );
    assert_eq!(h.sent(), 0);
    // A second sweep finds nothing more.
    assert!(h.gw.deny_timed_out_approvals().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_of_zero_never_denies() {
    let mut c = test_config();
    c.approvals.timeout_ms = 0;
    let h = Harness::with_config(c).await;
    let action = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 1"), None)
            .await,
    );
    h.clock.advance(30 * 24 * 3_600_000);
    assert!(h.gw.deny_timed_out_approvals().await.unwrap().is_empty());
    assert!(h.gw.spawn_approval_timeouts().is_none());
    assert_eq!(
        h.store.approval(&action).unwrap().unwrap().state,
        ApprovalState::Pending
    );
}

/// The error `Gateway::start` gives for configuration `c` (it must refuse to start).
async fn start_up_error(c: secureclaw_gateway::GatewayConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db"), keys.clone()).unwrap());
    let started = Gateway::start(
        keys,
        store,
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        c,
        vec![],
        &in_process(vec![]).1,
        TestClock::new(T0).clock(),
    )
    .await;
    let Err(err) = started else {
        panic!("started although the configuration should stop start-up");
    };
    err.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_url_from_an_unset_environment_variable_stops_start_up() {
    let mut c = test_config();
    c.approvals.webhooks = vec![WebhookConfig {
        url: None,
        url_env: Some("SECURECLAW_TEST_WEBHOOK_URL_NEVER_SET".into()),
        secret_env: None,
        format: WebhookFormat::Slack,
        timeout_ms: 5_000,
    }];
    let err = start_up_error(c).await;
    assert!(
        err.contains("SECURECLAW_TEST_WEBHOOK_URL_NEVER_SET"),
        "{err}"
    );
}

/// Red-team F4 (2026-12-04): re-issuing a call still pending (a retrying client, a flooding
/// runtime) announced it again each time. It is announced once.
#[tokio::test(flavor = "multi_thread")]
async fn a_pending_action_is_announced_once_however_often_it_is_reissued() {
    let (base, got) = receiver().await;
    let h = harness(&base).await;
    let first = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Quarterly numbers"), None)
            .await,
    );
    // The runtime re-issues the call naming the pending action (a client retrying, a
    // runtime flooding): still pending, and not announced again.
    for _ in 0..5 {
        let again = assert_pending(
            &h.call(
                &h.session,
                SEND,
                email(FINANCE, "Quarterly numbers"),
                Some(&first),
            )
            .await,
        );
        assert_eq!(again, first, "the same pending action");
    }
    // Positive control: another pending action is announced.
    let other = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Other"), None)
            .await,
    );
    let bodies = wait_for(&got, 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bodies_after = got.lock().unwrap().clone();
    assert_eq!(bodies.len(), 4, "{bodies:?}");
    assert_eq!(bodies_after.len(), 4, "{bodies_after:?}");
    for action in [&first, &other] {
        let n = bodies_after
            .iter()
            .filter(|(k, b)| k == "json" && b["action_id"] == action.0.as_str())
            .count();
        assert_eq!(n, 1, "{action:?} announced once");
    }
}

/// `secret_env`: each notice is signed over its timestamp and body; a receiver recomputes it.
#[tokio::test(flavor = "multi_thread")]
async fn notices_are_signed_with_the_configured_secret() {
    type Signed = Arc<Mutex<Vec<(String, String, String)>>>;
    let got: Signed = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let sink = sink.clone();
            async move {
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned()
                };
                sink.lock().unwrap().push((
                    h("x-secureclaw-timestamp"),
                    h("x-secureclaw-signature"),
                    body,
                ));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // The secret is read from the environment at start-up; `PATH` is a variable every test
    // process has (setting one would need `unsafe`, which this workspace forbids).
    const VAR: &str = "PATH";
    let secret = std::env::var(VAR).expect("PATH is set");
    assert!(
        secret.len() >= 16,
        "PATH is too short to serve as a test secret"
    );
    let secret = secret.as_str();
    let mut c = test_config();
    c.approvals.webhooks = vec![WebhookConfig {
        url: Some(format!("http://{addr}/hook")),
        url_env: None,
        secret_env: Some(VAR.into()),
        format: WebhookFormat::Json,
        timeout_ms: 5_000,
    }];
    let h = Harness::with_config(c).await;
    assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Signed"), None)
            .await,
    );
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = got.lock().unwrap().clone();
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (ts, sig, body) = seen.first().cloned().expect("a notice arrived");
    let ts: u64 = ts.parse().expect("a Unix-seconds timestamp");
    assert_eq!(sig, webhook_signature(secret.as_bytes(), ts, &body));
    // The signature fails for a changed body (what a forger would send).
    assert_ne!(
        sig,
        webhook_signature(
            secret.as_bytes(),
            ts,
            &body.replace("approval.pending", "approval.timed_out")
        )
    );
    assert_ne!(
        sig,
        webhook_signature(b"another-secret-entirely", ts, &body)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unset_signing_secret_stops_start_up() {
    let var = "SECURECLAW_TEST_WEBHOOK_SECRET_NEVER_SET";
    let mut c = test_config();
    c.approvals.webhooks = vec![WebhookConfig {
        url: Some("http://127.0.0.1:9/hook".into()),
        url_env: None,
        secret_env: Some(var.into()),
        format: WebhookFormat::Json,
        timeout_ms: 5_000,
    }];
    let err = start_up_error(c).await;
    assert!(err.contains("secret_env") && err.contains(var), "{err}");
}
