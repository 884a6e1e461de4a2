//! Per-session limits of the gateway (issue 12 item 6), enforced below every front end:
//! actions waiting per session (previews not yet committed or expired, approvals not yet
//! settled) and call rates per session and per (session, tool). A session past a limit gets
//! `limit_exceeded` naming the limit and how to proceed; nothing is stored or sent for the
//! refused call, the refusal is audited as a rejection, and other sessions are unaffected.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::UnixMillis;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::AuditKind;
use secureclaw_core::recovery::{ReasonCode, Recovery};
use secureclaw_gateway::CallOutcome;
use secureclaw_store::ApprovalState;
use serde_json::json;

const SEND: &str = "office__send_email";
const FINANCE: &str = "finance@corp.example";

fn limited(o: &CallOutcome, key: &str) -> Recovery {
    assert_denied(o, ReasonCode::LimitExceeded);
    let CallOutcome::Denied(r) = o else {
        unreachable!()
    };
    assert_eq!(r.limit.as_deref(), Some(key), "{r:?}");
    assert!(r.render().contains(key), "{}", r.render());
    r.clone()
}

fn rejections(h: &Harness) -> Vec<serde_json::Value> {
    h.store
        .audit_records(0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|r| r.event.kind == AuditKind::Rejection)
        .map(|r| r.event.detail)
        .collect()
}

/// The decision the CLI makes directly on the store, as from another process.
async fn cli_decide(h: &Harness, id: &ActionId, approve: bool) {
    secureclaw_gateway::decide_approval(
        &h.keys,
        h.store.as_ref(),
        UnixMillis(h.clock.now()),
        h.config.limits.confirmation_ttl_ms,
        id,
        approve,
        "cli",
    )
    .await
    .unwrap();
}

async fn pending_approvals(h: &Harness) -> usize {
    h.gw.approvals(Some(ApprovalState::Pending))
        .await
        .unwrap()
        .len()
}

/// Regression (issue 12): 40 previews of 4 MiB that need approval grew the state directory
/// by 329 MiB and queued 40 approvals; there was no per-session cap. A runtime that floods
/// approval requests now gets `max_pending_per_session` of them and then `limit_exceeded`,
/// with nothing stored for the refused ones; other sessions and calls that wait for nothing
/// keep being served; a declined approval frees its place.
#[tokio::test]
async fn a_flood_of_approval_requests_is_capped_per_session() {
    let mut config = test_config();
    config.limits.max_pending_per_session = 3;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    let mut waiting = Vec::new();
    let mut refused = 0;
    for i in 0..40 {
        let o = h
            .call(s, SEND, email(FINANCE, &format!("copy {i}")), None)
            .await;
        match &o {
            CallOutcome::Pending(_) => waiting.push(assert_pending(&o)),
            _ => {
                let r = limited(&o, "max_pending_per_session");
                assert!(r.action_id.is_none(), "no action was created: {r:?}");
                assert!(
                    r.render().contains("decide the pending approvals"),
                    "{}",
                    r.render()
                );
                refused += 1;
            }
        }
    }
    assert_eq!((waiting.len(), refused), (3, 37));
    assert_eq!(
        pending_approvals(&h).await,
        3,
        "refused calls stored nothing"
    );
    // An explicit preview would wait too: refused.
    let p = h
        .preview(s, SEND, email(APPROVER, "later"))
        .await
        .unwrap_err();
    assert_eq!(p.reason, ReasonCode::LimitExceeded);
    assert_eq!(p.limit.as_deref(), Some("max_pending_per_session"));
    // Positive controls: a call the policy allows runs at once and waits for nothing, and
    // another session is not affected.
    completed(&h.call(s, SEND, email(APPROVER, "ok"), None).await);
    assert_eq!(h.sent(), 1);
    let other = h.open_session("bob").await;
    assert_pending(
        &h.call(&other, SEND, email(FINANCE, "bob's copy"), None)
            .await,
    );
    // The refusals are audited as rejections, metadata only.
    let rej = rejections(&h);
    assert_eq!(rej.len(), 38, "{rej:?}");
    assert!(
        rej.iter()
            .all(|d| d["limit"] == "max_pending_per_session" && d["front_end"] == "gateway")
    );
    assert!(!serde_json::to_string(&rej).unwrap().contains(FINANCE));
    // A declined approval frees its place.
    h.gw.decide_approval(&waiting[0], false, "user")
        .await
        .unwrap();
    assert_pending(&h.call(s, SEND, email(FINANCE, "again"), None).await);
    limited(
        &h.call(s, SEND, email(FINANCE, "one more"), None).await,
        "max_pending_per_session",
    );
    h.assert_audit_clean();
}

/// An approval decided by a confirmer in another process (the CLI on the same store) is
/// seen once the session is at its limit: declined frees the place at once; approved holds
/// it until the approved call runs.
#[tokio::test]
async fn approvals_decided_elsewhere_and_used_free_their_place() {
    let mut config = test_config();
    config.limits.max_pending_per_session = 2;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    let a = assert_pending(&h.call(s, SEND, email(FINANCE, "a"), None).await);
    let b = assert_pending(&h.call(s, SEND, email(FINANCE, "b"), None).await);
    limited(
        &h.call(s, SEND, email(FINANCE, "c"), None).await,
        "max_pending_per_session",
    );
    // Another "process": the store-level decision the CLI makes.
    cli_decide(&h, &a, true).await;
    // Approved but not used yet: still waiting.
    limited(
        &h.call(s, SEND, email(FINANCE, "c"), None).await,
        "max_pending_per_session",
    );
    // The approved call runs: its place is free.
    completed(&h.call(s, SEND, email(FINANCE, "a"), Some(&a)).await);
    assert_eq!(h.sent(), 1);
    let c = assert_pending(&h.call(s, SEND, email(FINANCE, "c"), None).await);
    limited(
        &h.call(s, SEND, email(FINANCE, "d"), None).await,
        "max_pending_per_session",
    );
    // Declined elsewhere: free.
    cli_decide(&h, &b, false).await;
    assert_pending(&h.call(s, SEND, email(FINANCE, "d"), None).await);
    let _ = c;
}

/// Explicit previews wait until committed or expired (`artifact_ttl_ms`); either frees the
/// place. Attack: a runtime previews without ever committing.
#[tokio::test]
async fn uncommitted_previews_are_capped_and_free_on_commit_or_expiry() {
    let mut config = test_config();
    config.limits.max_pending_per_session = 2;
    let h = Harness::with_config(config.clone()).await;
    let s = &h.session;
    let p1 = h.preview(s, SEND, email(APPROVER, "p1")).await.unwrap();
    assert_eq!(p1.decision, PreviewDecision::Allow);
    h.preview(s, SEND, email(APPROVER, "p2")).await.unwrap();
    for i in 0..10 {
        let r = h
            .preview(s, SEND, email(APPROVER, &format!("flood {i}")))
            .await
            .unwrap_err();
        assert_eq!(r.limit.as_deref(), Some("max_pending_per_session"));
    }
    // A denied preview authorizes nothing and waits for nothing: not counted.
    let invoice = h.read_invoice(s, "INV-42").await;
    let iban = handle_at(&invoice, "iban");
    let leak = json!({"to": APPROVER, "subject": "INV-42", "body": format!("pay to {iban}")});
    let d = h.preview(s, SEND, leak).await.unwrap();
    assert_eq!(d.decision, PreviewDecision::Deny);
    // Committing frees a place.
    completed(
        &h.commit(
            s,
            SEND,
            email(APPROVER, "p1"),
            &p1.action_id,
            Some(&p1.artifact),
        )
        .await,
    );
    let p3 = h.preview(s, SEND, email(APPROVER, "p3")).await.unwrap();
    assert!(h.preview(s, SEND, email(APPROVER, "p4")).await.is_err());
    // Expiry frees the rest.
    h.clock.advance(config.limits.artifact_ttl_ms + 1);
    h.preview(s, SEND, email(APPROVER, "p4")).await.unwrap();
    h.preview(s, SEND, email(APPROVER, "p5")).await.unwrap();
    assert!(h.preview(s, SEND, email(APPROVER, "p6")).await.is_err());
    assert_eq!(h.sent(), 1);
    let _ = p3;
}

/// Attack: one session floods calls. Past the per-tool bucket the tool is refused with
/// `tool_rate_per_s` and a retry hint; past the session bucket every tool is; nothing
/// refused reaches the upstream; another session keeps being served; time refills.
#[tokio::test]
async fn a_flood_of_calls_is_rate_limited_per_tool_and_per_session() {
    let mut config = test_config();
    config.limits.session_burst = 5;
    config.limits.session_rate_per_s = 2;
    config.limits.tool_burst = 3;
    config.limits.tool_rate_per_s = 1;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    let peek = |s| h.call(s, "test__peek", json!({}), None);
    for _ in 0..3 {
        completed(&peek(s).await);
    }
    for _ in 0..20 {
        let r = limited(&peek(s).await, "tool_rate_per_s");
        assert_eq!(r.retry_after_ms, Some(1000), "one per second");
        assert!(r.render().contains("wait 1000 ms"), "{}", r.render());
    }
    assert_eq!(
        h.test.reads(),
        3,
        "refused calls never reached the upstream"
    );
    // Another tool of the same session: its own bucket, within the session's.
    completed(&h.call(s, "test__echo", json!({"text": "hi"}), None).await);
    completed(&h.call(s, "test__echo", json!({"text": "hi"}), None).await);
    let r = limited(
        &h.call(s, "test__echo", json!({"text": "hi"}), None).await,
        "session_rate_per_s",
    );
    assert_eq!(r.retry_after_ms, Some(500), "two per second");
    // Previews and commits count too, and an invented tool name as well.
    assert_eq!(
        h.preview(s, SEND, email(APPROVER, "x"))
            .await
            .unwrap_err()
            .limit
            .as_deref(),
        Some("session_rate_per_s")
    );
    limited(
        &h.call(s, "no_such_tool", json!({}), None).await,
        "session_rate_per_s",
    );
    // Positive control: another session is served.
    let other = h.open_session("bob").await;
    for _ in 0..3 {
        completed(&peek(&other).await);
    }
    // Audited as rejections, at most one record per session and second, counting the rest.
    let rej = rejections(&h);
    assert_eq!(rej.len(), 1, "{rej:?}");
    assert_eq!(rej[0]["limit"], "tool_rate_per_s");
    assert_eq!(rej[0]["count"], 1);
    // Time refills the buckets.
    h.clock.advance(1000);
    completed(&peek(s).await);
    let o = peek(s).await;
    limited(&o, "tool_rate_per_s");
    let rej = rejections(&h);
    assert_eq!(rej.len(), 2, "{rej:?}");
    assert_eq!(
        rej[1]["count"], 23,
        "the second record stands for the rejections since the first"
    );
    h.assert_audit_clean();
}

/// The defaults are generous: a session's ordinary work (here 300 calls within one frozen
/// millisecond, spread over a few tools) is never limited.
#[tokio::test]
async fn default_rates_do_not_limit_ordinary_work() {
    let h = Harness::new().await;
    let s = &h.session;
    for i in 0..100 {
        completed(&h.call(s, "test__peek", json!({}), None).await);
        completed(
            &h.call(s, "test__echo", json!({"text": format!("{i}")}), None)
                .await,
        );
        completed(
            &h.call(s, SEND, email(APPROVER, &format!("{i}")), None)
                .await,
        );
    }
    assert_eq!(h.sent(), 100);
    assert!(rejections(&h).is_empty());
}

/// Regression (issue 12 item 6, red-team round 2: 60 concurrent calls of 4 MiB from one
/// session took the gateway past 1.3 GB): the argument bytes a session has running at once are
/// bounded (`max_in_flight_bytes_per_session`). While one call runs, a call that would take
/// the session past the cap is refused `limit_exceeded` before anything is sent, and audited;
/// a lone call larger than the cap still runs (positive control); another session is not
/// affected; the bytes are freed when the running call ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_bytes_in_flight_are_bounded_per_session() {
    use std::time::{Duration, Instant};
    let mut config = test_config();
    config.limits.max_in_flight_bytes_per_session = 64 * 1024;
    let h = Harness::with_config(config).await;
    let big = "x".repeat(100 * 1024);
    let gw = h.gw.clone();
    let session = h.session.clone();
    let text = big.clone();
    let running = tokio::spawn(async move {
        gw.call(
            &session,
            "test__gated",
            args(json!({"text": text})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.test.effects() == 0 {
        assert!(Instant::now() < deadline, "the gated tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A lone call larger than the cap ran; a second one, even a small one, is refused.
    let o = h
        .call(&h.session, "test__count", json!({"k": 1}), None)
        .await;
    let r = limited(&o, "max_in_flight_bytes_per_session");
    assert_eq!(r.retry_after_ms, Some(1000));
    assert_eq!(h.test.effects(), 1, "nothing was sent for the refused call");
    // Another session is not affected.
    let other = h.open_session("other-caller").await;
    completed(&h.call(&other, "test__peek", json!({}), None).await);
    // The running call ends; its bytes are freed.
    h.test.open_gate();
    completed(&running.await.unwrap());
    completed(
        &h.call(&h.session, "test__count", json!({"k": 1}), None)
            .await,
    );
    assert_eq!(h.test.effects(), 2);
    let rej = rejections(&h);
    assert_eq!(rej.len(), 1, "{rej:?}");
    assert_eq!(rej[0]["limit"], "max_in_flight_bytes_per_session");
    h.assert_audit_clean();
}
