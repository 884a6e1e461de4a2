//! Bad input and broken infrastructure: unknown tools, oversized, deep or inexact arguments,
//! hanging and crashing upstreams, an unavailable store. Every failure has its own reason
//! code, executes nothing it should not, and leaves the gateway serving.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::CallOutcome;
use secureclaw_store::LedgerState;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SEND: &str = "office__send_email";

async fn assert_serving(h: &Harness) {
    let inv = h.read_invoice(&h.session, "INV-42").await;
    handle_at(&inv, "iban");
}

#[tokio::test]
async fn unknown_tools() {
    let h = Harness::new().await;
    for tool in [
        "office__nope",
        "send_email",
        "office__",
        "__send_email",
        "OFFICE__SEND_EMAIL",
        "office__send_email ",
        "",
    ] {
        let o = h.call(&h.session, tool, email(APPROVER, "x"), None).await;
        assert_denied(&o, ReasonCode::UnknownTool);
    }
    assert_eq!(h.sent(), 0);
    completed(&h.call(&h.session, SEND, email(APPROVER, "x"), None).await);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn oversized_deep_and_inexact_arguments() {
    let mut config = test_config();
    config.limits.max_argument_bytes = 1024;
    let h = Harness::with_config(config).await;
    // 2 KiB body.
    let big = json!({"to": APPROVER, "subject": "x", "body": "a".repeat(2048)});
    assert_denied(
        &h.call(&h.session, SEND, big.clone(), None).await,
        ReasonCode::InvalidArguments,
    );
    assert_eq!(
        h.preview(&h.session, SEND, big).await.unwrap_err().reason,
        ReasonCode::InvalidArguments
    );
    // Also on the read path.
    let big_read = json!({"query": "a".repeat(2048)});
    assert_denied(
        &h.call(&h.session, "office__search_mail", big_read, None)
            .await,
        ReasonCode::InvalidArguments,
    );
    // 100 levels of nesting.
    let mut deep = json!("bottom");
    for _ in 0..100 {
        deep = json!({"n": deep});
    }
    let o = h
        .call(
            &h.session,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": "y", "meta": deep}),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::InvalidArguments);
    let mut deep_array = json!(1);
    for _ in 0..100 {
        deep_array = json!([deep_array]);
    }
    let o = h
        .call(&h.session, "test__count", json!({"x": deep_array}), None)
        .await;
    assert_denied(&o, ReasonCode::InvalidArguments);
    // Integers JCS cannot represent exactly.
    let two_53_plus_1: u64 = (1 << 53) + 1;
    for n in [
        json!(two_53_plus_1),
        json!(-(two_53_plus_1 as i64)),
        json!(u64::MAX),
        json!(1e300),
    ] {
        let o = h
            .call(
                &h.session,
                "office__pay_invoice",
                json!({"invoice_id": "INV-42", "iban": "x", "amount_cents": n}),
                None,
            )
            .await;
        assert_denied(&o, ReasonCode::InvalidArguments);
        let o = h
            .call(&h.session, "test__count", json!({"n": [n]}), None)
            .await;
        assert_denied(&o, ReasonCode::InvalidArguments);
    }
    assert_eq!(h.sent(), 0);
    assert_eq!(h.payments(), 0);
    assert_eq!(h.test.effects(), 0);
    // Positive controls at the edges: 2^53 exactly, 60 levels, just under the size limit.
    let o = h
        // (In an amount field: a bare 16-digit number elsewhere is an address-like target.)
        .call(
            &h.session,
            "test__count",
            json!({"amount": 1u64 << 53}),
            None,
        )
        .await;
    completed(&o);
    let mut ok_deep = json!(1);
    for _ in 0..60 {
        ok_deep = json!([ok_deep]);
    }
    completed(
        &h.call(&h.session, "test__count", json!({"x": ok_deep}), None)
            .await,
    );
    let fits = json!({"to": APPROVER, "subject": "x", "body": "a".repeat(900)});
    completed(&h.call(&h.session, SEND, fits, None).await);
    assert_eq!(h.test.effects(), 2);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn a_hanging_upstream_times_out_and_the_gateway_keeps_serving() {
    let mut config = test_config();
    config.limits.upstream_timeout_ms = 300;
    let h = Harness::with_config(config).await;
    let started = Instant::now();
    let o = h.call(&h.session, "test__hang", json!({}), None).await;
    assert_denied(&o, ReasonCode::UpstreamTimeout);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_serving(&h).await;
    // An effectful call that hangs: timed out after dispatch, so its outcome is unknown; its
    // action id is spent (at most once) and the runtime is not invited to retry.
    let p = h
        .preview(&h.session, "test__hang_effect", json!({}))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    let o = h
        .commit(
            &h.session,
            "test__hang_effect",
            json!({}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::OutcomeUnknown);
    let entry = h.store.ledger_entry(&p.action_id).unwrap().unwrap();
    assert_eq!(entry.state, LedgerState::OutcomeUnknown);
    let o = h
        .commit(
            &h.session,
            "test__hang_effect",
            json!({}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::Replay);
    assert_eq!(h.test.effects(), 1);
    // The identical call again waits for the user (red-team F8: it may already have run).
    let o = h
        .call(&h.session, "test__hang_effect", json!({}), None)
        .await;
    assert_eq!(
        recovery_of(&o).map(|r| r.reason),
        Some(ReasonCode::OutcomeUnknownRepeat),
        "{o:?}"
    );
    // Respelt (an extra argument), it waits too (red-team R7: the runtime controls the
    // spelling); other work proceeds.
    let o = h
        .call(&h.session, "test__hang_effect", json!({"attempt": 2}), None)
        .await;
    assert_eq!(
        recovery_of(&o).map(|r| r.reason),
        Some(ReasonCode::OutcomeUnknownRepeat),
        "{o:?}"
    );
    assert_serving(&h).await;
    completed(
        &h.call(&h.session, SEND, email(APPROVER, "after the hang"), None)
            .await,
    );
    assert_eq!(h.sent(), 1);
}

/// The recovery of a pending or denied outcome.
fn recovery_of(
    o: &secureclaw_gateway::CallOutcome,
) -> Option<&secureclaw_core::recovery::Recovery> {
    match o {
        secureclaw_gateway::CallOutcome::Pending(r)
        | secureclaw_gateway::CallOutcome::Denied(r) => Some(r),
        _ => None,
    }
}

#[tokio::test]
async fn a_crashing_upstream_is_upstream_error_and_the_gateway_keeps_serving() {
    let h = Harness::new().await;
    let o = h.call(&h.session, "test__crash", json!({}), None).await;
    assert_denied(&o, ReasonCode::UpstreamError);
    // The upstream's error text is not relayed.
    assert!(!visible(&o).contains("server process exited"));
    assert_serving(&h).await;
    // An effect whose connection broke after dispatch: outcome unknown, never "try again".
    let o = h
        .call(&h.session, "test__crash_effect", json!({}), None)
        .await;
    assert_denied(&o, ReasonCode::OutcomeUnknown);
    assert!(!visible(&o).contains("try again"));
    // Explicit preview + commit, in another session (in this one every later effect of the
    // tool now waits for the user: red-team R7).
    let other = h.open_session("bob").await;
    let p = h
        .preview(&other, "test__crash_effect", json!({"attempt": 2}))
        .await
        .unwrap();
    assert_denied(
        &h.commit(
            &other,
            "test__crash_effect",
            json!({"attempt": 2}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
        ReasonCode::OutcomeUnknown,
    );
    assert_eq!(
        h.store.ledger_entry(&p.action_id).unwrap().unwrap().state,
        LedgerState::OutcomeUnknown
    );
    assert_denied(
        &h.commit(
            &other,
            "test__crash_effect",
            json!({"attempt": 2}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
        ReasonCode::Replay,
    );
    assert_eq!(h.test.effects(), 2);
    // A tool-level error (isError) is a completed call the runtime sees as an error.
    let o = h
        .call(
            &h.session,
            "office__read_invoice",
            json!({"invoice_id": "INV-99"}),
            None,
        )
        .await;
    match &o {
        CallOutcome::Completed { output, .. } => assert!(output.is_error),
        other => panic!("{other:?}"),
    }
    assert_serving(&h).await;
    completed(&h.call(&h.session, "test__count", json!({}), None).await);
    assert_eq!(h.test.effects(), 3);
}

/// The store is locked by another connection (`BEGIN EXCLUSIVE`) until the busy timeout
/// (5 s) runs out: the call fails closed before anything runs; once released, it serves.
#[tokio::test]
async fn an_unavailable_store_fails_closed_and_recovers() {
    let h = Harness::new().await;
    // A: the preview cannot record the action.
    let lock = h.lock_store();
    let o = h.call(&h.session, "test__count", json!({}), None).await;
    assert_denied(&o, ReasonCode::StoreUnavailable);
    assert_eq!(
        h.test.effects(),
        0,
        "nothing may execute while the store is down"
    );
    lock.release();
    completed(&h.call(&h.session, "test__count", json!({}), None).await);
    assert_eq!(h.test.effects(), 1);
    // B: previewed while the store was up; the ledger cannot be marked at commit.
    let p = h
        .preview(&h.session, "test__count", json!({"k": 1}))
        .await
        .unwrap();
    let lock = h.lock_store();
    let o = h
        .commit(
            &h.session,
            "test__count",
            json!({"k": 1}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::StoreUnavailable);
    assert_eq!(h.test.effects(), 1);
    lock.release();
    // The failed attempt did not spend the action id.
    completed(
        &h.commit(
            &h.session,
            "test__count",
            json!({"k": 1}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.test.effects(), 2);
    h.assert_audit_clean();
}

/// The effect ran, then the store failed while recording it. The runtime must not be told
/// that "nothing was executed" (it would retry and repeat the effect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_after_the_effect_does_not_claim_nothing_ran() {
    let h = Harness::new().await;
    let gw = h.gw.clone();
    let session = h.session.clone();
    let task = tokio::spawn(async move {
        gw.call(
            &session,
            "test__gated",
            args(json!({})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await
    });
    // Wait until the upstream is executing the effect.
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.test.effects() == 0 {
        assert!(Instant::now() < deadline, "the gated tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lock = h.lock_store();
    h.test.open_gate();
    let o = task.await.unwrap();
    lock.release();
    assert_eq!(h.test.effects(), 1);
    if let CallOutcome::Denied(r) | CallOutcome::Pending(r) = &o {
        assert!(
            !r.message.contains("nothing was executed"),
            "the effect ran, but the runtime was told: {}",
            r.render()
        );
    }
}

#[tokio::test]
async fn audit_after_failures_verifies_and_holds_no_plaintext() {
    let mut config = test_config();
    config.limits.upstream_timeout_ms = 300;
    config.limits.max_argument_bytes = 1024;
    let h = Harness::with_config(config).await;
    // The task grants the payment this test makes (a financial effect).
    let session = h
        .open_granted_session("alice", &["office__pay_invoice"])
        .await;
    let inv = h.read_invoice(&session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let contact = handle_at(&inv, "contact_email");
    let calls: Vec<(&str, Value)> = vec![
        ("office__nope", json!({})),
        ("test__hang", json!({})),
        ("test__crash", json!({})),
        (
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": "a".repeat(2048)}),
        ),
        (
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": format!("{iban}")}),
        ),
        (
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": format!("{contact}")}),
        ),
        (
            "office__pay_invoice",
            json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": 129_900}),
        ),
    ];
    for (tool, a) in calls {
        let _ = h.call(&session, tool, a, None).await;
    }
    let lock = h.lock_store();
    let _ = h.call(&session, "test__count", json!({}), None).await;
    lock.release();
    assert_eq!(h.test.effects(), 0);
    assert_eq!(h.payments(), 1);
    assert_eq!(h.state().sent[0].body, CONTACT);
    h.assert_audit_clean();
}

#[tokio::test]
async fn hidden_tools_are_unknown() {
    let mut config = test_config();
    config.tools.insert(
        0,
        secureclaw_gateway::ToolRule {
            tool: "office__pay_*".into(),
            effect: None,
            destructive: None,
            targets: None,
            hidden: true,
            ..secureclaw_gateway::ToolRule::default()
        },
    );
    let h = Harness::with_config(config).await;
    let listed: Vec<String> =
        h.gw.list_tools("alice")
            .await
            .into_iter()
            .map(|t| t.exposed)
            .collect();
    assert!(
        !listed.contains(&"office__pay_invoice".to_owned()),
        "{listed:?}"
    );
    assert!(
        listed.contains(&"office__send_email".to_owned()),
        "{listed:?}"
    );
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let pay = json!({"invoice_id": "INV-42", "iban": handle_at(&inv, "iban"), "amount_cents": 1});
    assert_denied(
        &h.call(&h.session, "office__pay_invoice", pay.clone(), None)
            .await,
        ReasonCode::UnknownTool,
    );
    assert_eq!(
        h.preview(&h.session, "office__pay_invoice", pay)
            .await
            .unwrap_err()
            .reason,
        ReasonCode::UnknownTool
    );
    assert_eq!(h.payments(), 0);
}

/// Red-team (2026-12-03): a caller that stops waiting while the effect runs (an HTTP client
/// that closes its connection: the front end's future is dropped) does not leave the effect
/// unrecorded. The call runs to its end on its own task: the ledger says `executed`, and the
/// identical re-issue is a new action, not a repeat of a `reserved` one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_stops_waiting_mid_effect_leaves_it_recorded() {
    let h = Harness::new().await;
    let gw = h.gw.clone();
    let session = h.session.clone();
    let caller = tokio::spawn(async move {
        gw.call(
            &session,
            "test__gated",
            args(json!({})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.test.effects() == 0 {
        assert!(Instant::now() < deadline, "the gated tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The caller goes away mid-effect; the upstream then finishes.
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    h.test.open_gate();
    let deadline = Instant::now() + Duration::from_secs(20);
    let action = h
        .store
        .audit_records(0, usize::MAX)
        .unwrap()
        .into_iter()
        .find(|r| r.event.kind == secureclaw_core::audit::AuditKind::Preview)
        .and_then(|r| r.event.action_id)
        .expect("the call was previewed");
    let action = secureclaw_core::artifact::ActionId(action);
    loop {
        let state = h.store.ledger_entry(&action).unwrap().map(|e| e.state);
        if state == Some(LedgerState::Executed) {
            break;
        }
        let states = state;
        assert!(
            Instant::now() < deadline,
            "the effect's outcome was never recorded: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(h.test.effects(), 1);
}

/// Red-team round 2 (2026-12-03): a promotion whose caller stops waiting (an HTTP client
/// closing `POST /v1/branches/…/promote` mid-effect) still runs every call it took from the
/// store to its end: the held calls' effects are recorded, none is lost or left `reserved`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_whose_caller_stops_waiting_runs_every_held_call() {
    let h = Harness::new().await;
    let spec = secureclaw_gateway::CallMeta {
        mode: Some(secureclaw_core::contract::Mode::Speculative),
        branch: Some("b1".into()),
        confidence: Some(0.99),
        ..secureclaw_gateway::CallMeta::default()
    };
    for tool in ["test__gated", "test__count"] {
        let o = h.gw.call(&h.session, tool, args(json!({})), &spec).await;
        assert!(matches!(o, CallOutcome::Deferred(_)), "{o:?}");
    }
    assert_eq!(h.test.effects(), 0);
    let gw = h.gw.clone();
    let session = h.session.clone();
    let caller = tokio::spawn(async move { gw.promote_branch(&session, "b1").await });
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.test.effects() == 0 {
        assert!(Instant::now() < deadline, "the gated tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    h.test.open_gate();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let commits = h
            .store
            .audit_records(0, usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|r| r.event.kind == secureclaw_core::audit::AuditKind::Commit)
            .count();
        if commits == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{commits} of 2 released calls recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(h.test.effects(), 2);
    assert!(
        h.gw.promote_branch(&h.session, "b1")
            .await
            .unwrap()
            .is_empty()
    );
}

/// Red-team round 3 (HIGH): the "ask the user before repeating after an unknown outcome" rule
/// was checked only when a call was previewed. (a) A second explicit preview of the same
/// call, issued before the first ended `outcome_unknown`, was committed and ran again. (b) An
/// identical call sent while the first was still running (a client that timed out and
/// retried, concurrent copies) ran again, and so did a respelt copy once the identical one
/// was held. Now (a) is refused at commit (`outcome_unknown_since_preview`) and (b) waits
/// for the user (`outcome_unknown_repeat`), respelt or not; a different call, and the
/// identical call once the first has its answer, still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_effect_never_runs_again_while_the_first_may_have_run() {
    let h = Harness::new().await;
    let s = &h.session;
    // (a) two previews, then the first commit's outcome is unknown.
    let p1 = h
        .preview(s, "test__crash_effect", json!({"k": 1}))
        .await
        .unwrap();
    let p2 = h
        .preview(s, "test__crash_effect", json!({"k": 1}))
        .await
        .unwrap();
    let o = h
        .commit(
            s,
            "test__crash_effect",
            json!({"k": 1}),
            &p1.action_id,
            Some(&p1.artifact),
        )
        .await;
    assert_eq!(reason(&o), Some(ReasonCode::OutcomeUnknown), "{o:?}");
    let o = h
        .commit(
            s,
            "test__crash_effect",
            json!({"k": 1}),
            &p2.action_id,
            Some(&p2.artifact),
        )
        .await;
    assert_eq!(
        reason(&o),
        Some(ReasonCode::OutcomeUnknownSincePreview),
        "{o:?}"
    );
    assert_eq!(h.test.effects(), 1, "the second artifact ran again");
    // Positive control: a previewed call of another tool still commits.
    let p = h.preview(s, "test__count", json!({"k": 1})).await.unwrap();
    completed(
        &h.commit(
            s,
            "test__count",
            json!({"k": 1}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.test.effects(), 2);

    // (b) an identical call while the first is still running.
    let other = h.open_session("retrier").await;
    let gw = h.gw.clone();
    let first_session = other.clone();
    let first = tokio::spawn(async move {
        gw.call(
            &first_session,
            "test__gated",
            args(json!({"to": APPROVER, "k": 1})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.test.effects() == 2 {
        assert!(Instant::now() < deadline, "the gated tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let o = h
        .call(&other, "test__gated", json!({"to": APPROVER, "k": 1}), None)
        .await;
    assert_eq!(reason(&o), Some(ReasonCode::OutcomeUnknownRepeat), "{o:?}");
    assert!(matches!(o, CallOutcome::Pending(_)), "{o:?}");
    // The same effect respelt — a string for the number with a trailing space, an extra empty
    // argument, another letter case and a trailing dot in the target, look-alike and
    // invisible characters — is the same call: it waits too.
    for respelt in [
        json!({"to": APPROVER, "k": "1 "}),
        json!({"to": APPROVER, "k": 1, "memo": ""}),
        json!({"to": "Approver@Corp.Example.", "k": 1}),
        json!({"to": APPROVER, "k": [1]}),
    ] {
        let o = h.call(&other, "test__gated", respelt.clone(), None).await;
        assert!(matches!(o, CallOutcome::Pending(_)), "{respelt}: {o:?}");
        assert_eq!(
            reason(&o),
            Some(ReasonCode::OutcomeUnknownRepeat),
            "{respelt}: {o:?}"
        );
    }
    // Look-alike and invisible characters: never sent while the first runs (whether held as
    // a repeat or, not being the task's address, as an unanchored target).
    for look_alike in [
        json!({"to": "ａｐｐｒｏｖｅｒ@corp.example", "k": "１"}),
        json!({"to": "\u{430}pprover@corp.example", "k": 1}),
        json!({"to": "appro\u{200b}ver@corp.example", "k": 1}),
    ] {
        let o = h
            .call(&other, "test__gated", look_alike.clone(), None)
            .await;
        assert!(matches!(o, CallOutcome::Pending(_)), "{look_alike}: {o:?}");
    }
    assert_eq!(
        h.test.effects(),
        3,
        "the retry ran while the first was running"
    );
    // A different call of the same tool is not held back by it.
    completed(&h.call(&other, "test__count", json!({"k": 2}), None).await);
    h.test.open_gate();
    completed(&first.await.unwrap());
    // Once the first has its answer, the identical call runs (positive control).
    h.test.open_gate();
    completed(
        &h.call(&other, "test__gated", json!({"to": APPROVER, "k": 1}), None)
            .await,
    );
    assert_eq!(h.test.effects(), 5);
}
