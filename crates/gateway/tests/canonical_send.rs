//! The upstream receives the canonical form of what was previewed (issue 11 item 9, last
//! bullet).
//!
//! Two spellings of one JSON value have the same RFC 8785 bytes (`1e2`, `100.0` and `100`;
//! `-0.0` and `0`), so a commit may spell an argument differently from its preview and still
//! match the binding. The executor must then send the arguments recovered from the bound
//! canonical request — not the runtime's spelling, which an upstream may read differently (a
//! float where an integer was bound, a negative zero). A recording upstream (`test__count`)
//! shows what was sent. Duplicate keys and `\u` escapes do not reach this point: the front
//! ends refuse duplicate keys in the raw bytes, and an escape is the same string once parsed
//! (checked below as a positive control).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_gateway::CallOutcome;
use serde_json::{Map, Value, json};

const COUNT: &str = "test__count";

/// Parse raw JSON text the way a front end does.
fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// The arguments of the last call the recording upstream received, as JSON text.
fn last_sent(h: &Harness) -> String {
    let received = h.test.received.lock().unwrap();
    let (name, args) = received.last().expect("the upstream received a call");
    assert_eq!(name, "count");
    let sorted: std::collections::BTreeMap<&String, &Value> = args.iter().collect();
    serde_json::to_string(&sorted).unwrap()
}

/// The bound spelling, as the upstream must receive it.
const CANONICAL: &str = r#"{"amount":100,"ratio":0.5,"to":"approver@corp.example","zero":0}"#;

/// Attack: preview with `100` and `0`, commit the same value spelled `1e2`, `-0.0` and
/// `5e-1`. The binding matches (same canonical bytes) and the effect runs once — with the
/// bound spelling, not the runtime's.
#[tokio::test]
async fn two_phase_commit_sends_the_bound_form_not_the_runtime_spelling() {
    let h = Harness::new().await;
    let p = h
        .preview(
            &h.session,
            COUNT,
            json!({"to": APPROVER, "amount": 100, "ratio": 0.5, "zero": 0}),
        )
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    let spelled =
        raw(r#"{"zero": -0.0, "ratio": 5e-1, "amount": 1e2, "to": "approver@corp.example"}"#);
    // The runtime's spelling really is a different JSON value from the bound one.
    assert!(spelled["amount"].is_f64());
    let o = commit_on(
        &h.gw,
        &h.session,
        COUNT,
        spelled,
        &p.action_id,
        Some(&p.artifact),
    )
    .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(h.test.effects(), 1);
    assert_eq!(last_sent(&h), CANONICAL);
}

/// Same through the one-step call (preview and commit in one): the runtime's `100.0` and
/// `-0.0` reach the upstream as `100` and `0`.
#[tokio::test]
async fn one_step_call_sends_the_canonical_form() {
    let h = Harness::new().await;
    let o = h
        .call(
            &h.session,
            COUNT,
            raw(r#"{"to": "approver@corp.example", "amount": 100.0, "ratio": 0.50, "zero": -0.0}"#),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(last_sent(&h), CANONICAL);
}

/// After a human approved the call, the re-issued call may spell the amount differently (the
/// binding still matches); the upstream receives what the human was shown.
#[tokio::test]
async fn approved_reissue_sends_what_was_approved() {
    let h = Harness::new().await;
    // An unanchored recipient: the call waits for the user.
    let first = h
        .call(
            &h.session,
            COUNT,
            json!({"to": "colleague@corp.example", "amount": 100, "ratio": 0.5, "zero": 0}),
            None,
        )
        .await;
    let action = assert_pending(&first);
    h.gw.decide_approval(&action, true, "user").await.unwrap();
    let o = h
        .call(
            &h.session,
            COUNT,
            raw(r#"{"to": "colleague@corp.example", "amount": 1.00e2, "ratio": 0.5, "zero": -0}"#),
            Some(&action),
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(h.test.effects(), 1);
    assert_eq!(
        last_sent(&h),
        r#"{"amount":100,"ratio":0.5,"to":"colleague@corp.example","zero":0}"#
    );
}

/// Positive controls: an honest call is sent as written; an escaped string is the same string
/// once parsed, and a fraction keeps its value.
#[tokio::test]
async fn honest_calls_are_sent_as_written() {
    let h = Harness::new().await;
    let o = h
        .call(
            &h.session,
            COUNT,
            raw(r#"{"to": "\u0061pprover@corp.example", "amount": 100, "ratio": 0.5, "zero": 0}"#),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(last_sent(&h), CANONICAL);
    let o = h
        .call(
            &h.session,
            COUNT,
            json!({"to": APPROVER, "note": "ünïcode ✓", "n": [1.5, -2, {"b": true, "a": null}]}),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    let received = h.test.received.lock().unwrap();
    let sent: &Map<String, Value> = &received.last().unwrap().1;
    assert_eq!(sent["note"], json!("ünïcode ✓"));
    assert_eq!(sent["n"], json!([1.5, -2, {"a": null, "b": true}]));
}
