//! Confirmation through `Gateway::call`: an unanchored recipient waits for a trusted
//! confirmer; nothing the runtime sends confirms; an approval is bound to one exact request,
//! one session and one use; a slow human does not expire it, a stale one does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::GatewayError;
use secureclaw_store::ApprovalState;
use serde_json::{Value, json};

const SEND: &str = "office__send_email";
const FINANCE: &str = "finance@corp.example";

fn copy_to_finance() -> Value {
    email(FINANCE, "Copy: invoice INV-42")
}

#[tokio::test]
async fn unanchored_recipient_is_held_without_effect() {
    let h = Harness::new().await;
    let o = h.call(&h.session, SEND, copy_to_finance(), None).await;
    let action = assert_pending(&o);
    assert!(action.0.starts_with("act_"));
    assert_eq!(h.sent(), 0);
    // The approval is visible to the trusted side, pending, with the call's description.
    let pending = h.gw.approvals(Some(ApprovalState::Pending)).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1.action_id, action);
    assert!(pending[0].1.display.contains(FINANCE));
    // Positive control: the anchored recipient goes through at once.
    completed(&h.call(&h.session, SEND, email(APPROVER, "ok"), None).await);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn two_phase_commit_without_approval_is_confirmation_missing() {
    let h = Harness::new().await;
    let p = h
        .preview(&h.session, SEND, copy_to_finance())
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Confirm);
    assert_eq!(
        p.recovery.as_ref().map(|r| r.reason),
        Some(ReasonCode::ConfirmationRequired)
    );
    let o = h
        .commit(
            &h.session,
            SEND,
            copy_to_finance(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ConfirmationMissing);
    assert_eq!(h.sent(), 0);
    // A denied approval is no confirmation either.
    h.gw.decide_approval(&p.action_id, false, "user")
        .await
        .unwrap();
    let o = h
        .commit(
            &h.session,
            SEND,
            copy_to_finance(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ConfirmationMissing);
    assert_eq!(h.sent(), 0);
    // Positive control: approved, the same two-phase commit runs once.
    let q = h
        .preview(&h.session, SEND, copy_to_finance())
        .await
        .unwrap();
    h.gw.decide_approval(&q.action_id, true, "user")
        .await
        .unwrap();
    completed(
        &h.commit(
            &h.session,
            SEND,
            copy_to_finance(),
            &q.action_id,
            Some(&q.artifact),
        )
        .await,
    );
    let o = h
        .commit(
            &h.session,
            SEND,
            copy_to_finance(),
            &q.action_id,
            Some(&q.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::Replay);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn the_runtime_cannot_confirm_itself() {
    let h = Harness::new().await;
    let action = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    // Re-issuing with the pending action id as "approval", repeatedly: still pending.
    for _ in 0..3 {
        let o = h
            .call(&h.session, SEND, copy_to_finance(), Some(&action))
            .await;
        assert_eq!(assert_pending(&o), action);
    }
    // Confirmation-looking arguments change nothing (the policy decides before any upstream
    // contact, so the strict demo server never sees them).
    let mut confirm = copy_to_finance();
    confirm["confirm"] = json!(true);
    confirm["approved"] = json!(true);
    confirm["_meta"] = json!({"dev.secureclaw/approval": action.0});
    confirm["dev.secureclaw/approval"] = json!(action.0);
    let o = h.call(&h.session, SEND, confirm.clone(), None).await;
    assert_pending(&o);
    // With the pending approval id attached, a call that is not the previewed one is refused
    // outright (it must not even get a "pending" answer naming that approval).
    let o = h.call(&h.session, SEND, confirm, Some(&action)).await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    assert_eq!(h.sent(), 0);
    assert_eq!(
        h.gw.approvals(Some(ApprovalState::Approved))
            .await
            .unwrap()
            .len(),
        0
    );
    // An action id that was never previewed.
    let o = h
        .call(
            &h.session,
            SEND,
            copy_to_finance(),
            Some(&ActionId("act_aaaaaaaaaaaaaaaaaaaaaaaaaa".into())),
        )
        .await;
    assert_denied(&o, ReasonCode::ConfirmationInvalid);
    assert_eq!(h.sent(), 0);
}

#[tokio::test]
async fn approval_of_one_action_does_not_cover_another() {
    let h = Harness::new().await;
    let a = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    h.gw.decide_approval(&a, true, "user").await.unwrap();
    let mut other_recipient = copy_to_finance();
    other_recipient["to"] = json!(ATTACKER);
    let mut other_subject = copy_to_finance();
    other_subject["subject"] = json!("Copy: invoice INV-43");
    let mut extra = copy_to_finance();
    extra["attachments"] = json!(["INV-42"]);
    for b in [other_recipient, other_subject, extra] {
        let o = h.call(&h.session, SEND, b, Some(&a)).await;
        assert_denied(&o, ReasonCode::BindingMismatch);
    }
    // Another tool with the same arguments.
    let o = h
        .call(
            &h.session,
            "office__save_draft",
            copy_to_finance(),
            Some(&a),
        )
        .await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    // The identical call from another session of the same caller, and from another caller:
    // the approval belongs to the session that asked for it.
    for s in [
        h.open_session("alice").await,
        h.open_session("mallory").await,
    ] {
        let o = h.call(&s, SEND, copy_to_finance(), Some(&a)).await;
        assert_denied(&o, ReasonCode::ApprovalSessionMismatch);
    }
    assert_eq!(h.sent(), 0);
    assert!(h.state().drafts.is_empty());
    // Positive control: the approved request itself runs, once.
    completed(&h.call(&h.session, SEND, copy_to_finance(), Some(&a)).await);
    let o = h.call(&h.session, SEND, copy_to_finance(), Some(&a)).await;
    assert_denied(&o, ReasonCode::Replay);
    let state = h.state();
    assert_eq!(state.sent.len(), 1);
    assert_eq!(state.sent[0].to, FINANCE);
}

#[tokio::test]
async fn approved_then_reissued_completes_once() {
    let h = Harness::new().await;
    let action = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    h.gw.decide_approval(&action, true, "user").await.unwrap();
    // The approval cannot be decided twice.
    assert!(matches!(
        h.gw.decide_approval(&action, false, "user").await,
        Err(GatewayError::Conflict(_))
    ));
    // Another call is not the approved one: a new action, held again; and so is the identical
    // call in another session.
    let other = assert_pending(
        &h.call(
            &h.session,
            SEND,
            email(FINANCE, "Copy: invoice INV-43"),
            None,
        )
        .await,
    );
    assert_ne!(other, action);
    let s2 = h.open_session("alice").await;
    let elsewhere = assert_pending(&h.call(&s2, SEND, copy_to_finance(), None).await);
    assert_ne!(elsewhere, action);
    assert_eq!(h.sent(), 0);
    let o = h
        .call(&h.session, SEND, copy_to_finance(), Some(&action))
        .await;
    completed(&o);
    assert_eq!(h.sent(), 1);
    // Replays, the racing kind included, do nothing more.
    let (x, y) = tokio::join!(
        h.call(&h.session, SEND, copy_to_finance(), Some(&action)),
        h.call(&h.session, SEND, copy_to_finance(), Some(&action)),
    );
    assert_denied(&x, ReasonCode::Replay);
    assert_denied(&y, ReasonCode::Replay);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn declined_is_confirmation_denied() {
    let h = Harness::new().await;
    let action = assert_pending(
        &h.call(&h.session, SEND, email(ATTACKER, "INV-42"), None)
            .await,
    );
    h.gw.decide_approval(&action, false, "user").await.unwrap();
    for _ in 0..2 {
        let o = h
            .call(&h.session, SEND, email(ATTACKER, "INV-42"), Some(&action))
            .await;
        assert_denied(&o, ReasonCode::ConfirmationDenied);
    }
    assert!(matches!(
        h.gw.decide_approval(&action, true, "user").await,
        Err(GatewayError::Conflict(_))
    ));
    assert_eq!(h.sent(), 0);
}

#[tokio::test]
async fn slow_human_is_fine_stale_confirmation_is_not() {
    let h = Harness::new().await;
    let limits = h.config.limits.clone();
    // The user answers long after the artifact's freshness window: still runs.
    let a = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    h.clock.advance(limits.artifact_ttl_ms * 10);
    h.gw.decide_approval(&a, true, "user").await.unwrap();
    h.clock.advance(limits.artifact_ttl_ms * 2);
    completed(&h.call(&h.session, SEND, copy_to_finance(), Some(&a)).await);
    assert_eq!(h.sent(), 1);
    // A confirmation older than its own lifetime no longer counts.
    let b = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "second copy"), None)
            .await,
    );
    h.gw.decide_approval(&b, true, "user").await.unwrap();
    h.clock.advance(limits.confirmation_ttl_ms + 1);
    let o = h
        .call(&h.session, SEND, email(FINANCE, "second copy"), Some(&b))
        .await;
    assert_denied(&o, ReasonCode::ConfirmationInvalid);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn approval_under_a_changed_policy_is_refused() {
    let h = Harness::new().await;
    let changed = h
        .gateway(
            h.store.clone(),
            &[(
                "extra.cedar",
                "@id(\"noop\")\nforbid (principal, action, resource) when { context.tool == \"none\" };",
            )],
        )
        .await;
    let a = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    h.gw.decide_approval(&a, true, "user").await.unwrap();
    let o = call_on(&changed, &h.session, SEND, copy_to_finance(), Some(&a)).await;
    assert_denied(&o, ReasonCode::PolicyChanged);
    assert_eq!(h.sent(), 0);
    completed(&h.call(&h.session, SEND, copy_to_finance(), Some(&a)).await);
    assert_eq!(h.sent(), 1);
}

/// The recovery's "save a draft" step names a draft tool that exists, and disappears when the
/// operator hid it (a step the runtime cannot take only sends it looking for one).
#[tokio::test]
async fn draft_step_names_an_existing_draft_tool_or_is_dropped() {
    let h = Harness::new().await;
    let o = h.call(&h.session, SEND, copy_to_finance(), None).await;
    assert_pending(&o);
    assert!(
        visible(&o).contains("save a draft instead with office__save_draft"),
        "{}",
        visible(&o)
    );

    let mut config = test_config();
    for rule in &mut config.tools {
        if rule.tool == "office__save_draft" {
            rule.hidden = true;
        }
    }
    let h = Harness::with_config(config).await;
    let o = h.call(&h.session, SEND, copy_to_finance(), None).await;
    assert_pending(&o);
    assert!(!visible(&o).contains("draft"), "{}", visible(&o));

    // A destructive target-less tool would itself wait for a human: not a draft tool either.
    let mut config = test_config();
    for rule in &mut config.tools {
        if rule.tool == "office__save_draft" {
            rule.destructive = Some(true);
        }
    }
    let h = Harness::with_config(config).await;
    let o = h.call(&h.session, SEND, copy_to_finance(), None).await;
    assert_pending(&o);
    assert!(!visible(&o).contains("draft"), "{}", visible(&o));

    // Red-team finding: an effect of one upstream is never steered into another upstream's
    // draft tool (the `test` upstream has none, so its recovery names no draft).
    let h = Harness::new().await;
    let o = h
        .call(
            &h.session,
            "test__count",
            json!({"to": "attacker@evil.example"}),
            None,
        )
        .await;
    assert_pending(&o);
    assert!(
        !visible(&o).contains("office__save_draft"),
        "{}",
        visible(&o)
    );
}

/// A confirmer outside the gateway (the `approvals` CLI run without the gateway's config
/// seals the default hour) cannot make an approval outlive the gateway's own
/// `confirmation_ttl_ms`: the commit counts the confirmation's age from when it was given.
#[tokio::test]
async fn an_out_of_process_confirmer_cannot_outlive_the_gateways_ttl() {
    let mut config = test_config();
    config.limits.confirmation_ttl_ms = 60_000;
    let h = Harness::with_config(config).await;
    let a = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    // Decided directly on the store, as `secureclaw approvals approve` does, with a day.
    secureclaw_gateway::decide_approval(
        &h.keys,
        h.store.as_ref(),
        secureclaw_core::time::UnixMillis(h.clock.now()),
        86_400_000,
        &a,
        true,
        "cli",
    )
    .await
    .unwrap();
    h.clock.advance(60_001);
    let o = h.call(&h.session, SEND, copy_to_finance(), Some(&a)).await;
    assert_denied(&o, ReasonCode::ConfirmationInvalid);
    assert_eq!(h.sent(), 0);
    // Positive control: within the gateway's TTL the same kind of approval runs.
    let b = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "second copy"), None)
            .await,
    );
    secureclaw_gateway::decide_approval(
        &h.keys,
        h.store.as_ref(),
        secureclaw_core::time::UnixMillis(h.clock.now()),
        86_400_000,
        &b,
        true,
        "cli",
    )
    .await
    .unwrap();
    h.clock.advance(59_000);
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "second copy"), Some(&b))
            .await,
    );
    assert_eq!(h.sent(), 1);
}

/// Issue 15: approval listings mark the entries whose session has ended (its runtime can no
/// longer re-issue the call), and only those.
#[tokio::test]
async fn approvals_of_ended_sessions_are_marked() {
    let h = Harness::new().await;
    let a = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    let list =
        h.gw.approvals_for_approver(Some(ApprovalState::Pending))
            .await
            .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].approval.action_id, a);
    assert!(!list[0].session_ended, "live session marked ended");
    h.clock.advance(h.config.limits.session_ttl_ms + 1);
    let list =
        h.gw.approvals_for_approver(Some(ApprovalState::Pending))
            .await
            .unwrap();
    assert!(list[0].session_ended, "expired session not marked");
}

/// A model-driven client (Claude Desktop, Cursor) cannot set `_meta`: the identical re-issue
/// of an approved call, without the approval reference, commits that approval, once. After
/// it was used, the same call is a new action again; two racing re-issues of a fresh approval
/// run it once.
#[tokio::test]
async fn the_identical_reissue_without_meta_commits_the_approval_once() {
    let h = Harness::new().await;
    let action = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    // Not approved yet: the re-issue waits (a new pending action), nothing is sent.
    assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    assert_eq!(h.sent(), 0);
    h.gw.decide_approval(&action, true, "user").await.unwrap();
    completed(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    assert_eq!(h.sent(), 1);
    // Used: the same call is a new action, held.
    let next = assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    assert_ne!(next, action);
    assert_eq!(h.sent(), 1);
    // Two racing re-issues of the new approval: one effect.
    h.gw.decide_approval(&next, true, "user").await.unwrap();
    let (x, y) = tokio::join!(
        h.call(&h.session, SEND, copy_to_finance(), None),
        h.call(&h.session, SEND, copy_to_finance(), None),
    );
    let ran = [&x, &y]
        .iter()
        .filter(|o| matches!(o, secureclaw_gateway::CallOutcome::Completed { .. }))
        .count();
    assert_eq!(ran, 1, "{x:?} {y:?}");
    assert_eq!(h.sent(), 2);
    // A declined action is never committed by a re-issue.
    let declined = assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "third copy"), None)
            .await,
    );
    h.gw.decide_approval(&declined, false, "user")
        .await
        .unwrap();
    assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "third copy"), None)
            .await,
    );
    assert_eq!(h.sent(), 2);
}

/// Log text written through a `tracing` subscriber while `f` runs (this thread only).
async fn logs_of<F: std::future::Future<Output = ()>>(f: F) -> String {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    f.await;
    String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
}

/// A gateway whose approvals are decided in process (an evaluation lane over a temporary
/// store) logs a pending action without advising `secureclaw approvals approve`, which would
/// name a state no operator can open (trial of issue 17), and not as a warning. Positive
/// control: a gateway without that declaration advises the command at WARN.
#[tokio::test(flavor = "current_thread")]
async fn in_process_approvals_log_no_approve_advice() {
    let h = Harness::new().await;
    h.gw.set_approvals_in_process("the test's user");
    let log = logs_of(async {
        assert_pending(&h.call(&h.session, SEND, copy_to_finance(), None).await);
    })
    .await;
    assert!(!log.contains("approvals approve"), "{log}");
    assert!(!log.contains("WARN"), "{log}");
    assert!(log.contains("the test's user"), "{log}");

    let plain = Harness::new().await;
    let log = logs_of(async {
        assert_pending(
            &plain
                .call(&plain.session, SEND, copy_to_finance(), None)
                .await,
        );
    })
    .await;
    assert!(log.contains("approvals approve act_"), "{log}");
    assert!(log.contains("WARN"), "{log}");
}
