//! The executor's acceptance predicate, through the gateway's explicit two-phase API
//! (`Gateway::preview` then `Gateway::commit`), against the demo office served in-process.
//! Every denial names its exact reason code and leaves the office untouched; each case has a
//! positive control.
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
use secureclaw_core::encoding::{b64url, b64url_decode};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::CallOutcome;
use serde_json::{Value, json};

const SEND: &str = "office__send_email";

fn to_approver() -> Value {
    email(APPROVER, "Invoice INV-42 for sign-off")
}

/// Split `sca1.<claims>.<mac>` into decoded claims and MAC.
fn split(token: &str) -> (Vec<u8>, Vec<u8>) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    assert_eq!(parts[0], "sca1");
    (
        b64url_decode(parts[1]).unwrap(),
        b64url_decode(parts[2]).unwrap(),
    )
}

fn join(claims: &[u8], mac: &[u8]) -> String {
    format!("sca1.{}.{}", b64url(claims), b64url(mac))
}

#[tokio::test]
async fn positive_control_preview_allow_commit_completes_once() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    assert!(p.recovery.is_none());
    assert_eq!(h.sent(), 0, "preview must not execute anything");
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    completed(&o);
    match &o {
        CallOutcome::Completed { action_id, .. } => {
            assert_eq!(action_id.as_ref(), Some(&p.action_id))
        }
        _ => unreachable!(),
    }
    let state = h.state();
    assert_eq!(state.sent.len(), 1);
    assert_eq!(state.sent[0].to, APPROVER);
    h.assert_audit_clean();
}

#[tokio::test]
async fn missing_and_malformed_artifacts() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    for artifact in [None, Some(""), Some("null"), Some("   ")] {
        let o = h
            .commit(&h.session, SEND, to_approver(), &p.action_id, artifact)
            .await;
        assert_denied(&o, ReasonCode::ArtifactMissing);
    }
    let (claims, mac) = split(&p.artifact);
    let malformed = [
        "garbage".to_owned(),
        "sca1.not base64!.xx".to_owned(),
        format!("sca1.{}", b64url(&claims)),
        format!("{}.extra", p.artifact),
        join(b"{\"not\":\"claims\"}", &mac),
        join(&claims[..claims.len() / 2], &mac),
    ];
    for artifact in &malformed {
        let o = h
            .commit(
                &h.session,
                SEND,
                to_approver(),
                &p.action_id,
                Some(artifact),
            )
            .await;
        assert_denied(&o, ReasonCode::ArtifactMalformed);
    }
    assert_eq!(h.sent(), 0);
    // Positive control: the untouched artifact still commits (no failure burned the id).
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    completed(&o);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn mac_bit_flip_and_tampered_claims() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let (claims, mac) = split(&p.artifact);
    // Flip every bit position of the first MAC byte and one bit of the last byte.
    for bit in 0..8 {
        let mut m = mac.clone();
        m[0] ^= 1 << bit;
        let o = h
            .commit(
                &h.session,
                SEND,
                to_approver(),
                &p.action_id,
                Some(&join(&claims, &m)),
            )
            .await;
        assert_denied(&o, ReasonCode::ArtifactMac);
    }
    let mut m = mac.clone();
    *m.last_mut().unwrap() ^= 0x80;
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&join(&claims, &m)),
        )
        .await;
    assert_denied(&o, ReasonCode::ArtifactMac);
    // Claims edited (freshness extended, confirmation dropped) under the original MAC.
    let mut c: Value = serde_json::from_slice(&claims).unwrap();
    c["not_after"] = json!(u64::MAX / 4);
    c["needs_confirmation"] = json!(false);
    let edited = serde_json::to_vec(&c).unwrap();
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&join(&edited, &mac)),
        )
        .await;
    assert_denied(&o, ReasonCode::ArtifactMac);
    assert_eq!(h.sent(), 0);
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    completed(&o);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn artifacts_of_two_actions_mixed() {
    let h = Harness::new().await;
    let a_args = email(APPROVER, "first");
    let b_args = email(APPROVER, "second");
    let a = h.preview(&h.session, SEND, a_args.clone()).await.unwrap();
    let b = h.preview(&h.session, SEND, b_args.clone()).await.unwrap();
    assert_ne!(a.action_id, b.action_id);
    // A's call and artifact, B's action id.
    let o = h
        .commit(
            &h.session,
            SEND,
            a_args.clone(),
            &b.action_id,
            Some(&a.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ActionMismatch);
    // A's call and action id, B's artifact.
    let o = h
        .commit(
            &h.session,
            SEND,
            a_args.clone(),
            &a.action_id,
            Some(&b.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ActionMismatch);
    // A's call under B's action id and B's artifact: the binding is B's.
    let o = h
        .commit(
            &h.session,
            SEND,
            a_args.clone(),
            &b.action_id,
            Some(&b.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    // A made-up action id.
    let o = h
        .commit(
            &h.session,
            SEND,
            a_args.clone(),
            &ActionId("act_aaaaaaaaaaaaaaaaaaaaaaaaaa".into()),
            Some(&a.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ActionMismatch);
    assert_eq!(h.sent(), 0);
    // Positive controls: each commits with its own pieces, once.
    completed(
        &h.commit(&h.session, SEND, a_args, &a.action_id, Some(&a.artifact))
            .await,
    );
    completed(
        &h.commit(&h.session, SEND, b_args, &b.action_id, Some(&b.artifact))
            .await,
    );
    let subjects: Vec<String> = h.state().sent.iter().map(|m| m.subject.clone()).collect();
    assert_eq!(subjects, ["first", "second"]);
}

#[tokio::test]
async fn arguments_changed_after_preview() {
    let h = Harness::new().await;
    let original = to_approver();
    let p = h.preview(&h.session, SEND, original.clone()).await.unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    let mut recipient = original.clone();
    recipient["to"] = json!(ATTACKER);
    let mut recipient_case = original.clone();
    recipient_case["to"] = json!("Approver@corp.example");
    let mut subject = original.clone();
    subject["subject"] = json!("Invoice INV-42 for sign-off!");
    let mut body = original.clone();
    body["body"] = json!("Invoice INV-42 for sign-off. ");
    let mut extra = original.clone();
    extra["attachments"] = json!(["INV-42"]);
    let mut dropped = original.clone();
    dropped.as_object_mut().unwrap().remove("body");
    for changed in [recipient, recipient_case, subject, body, extra, dropped] {
        let o = h
            .commit(
                &h.session,
                SEND,
                changed.clone(),
                &p.action_id,
                Some(&p.artifact),
            )
            .await;
        assert_denied(&o, ReasonCode::BindingMismatch);
    }
    // The same arguments sent to another tool.
    let o = h
        .commit(
            &h.session,
            "office__save_draft",
            original.clone(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    assert_eq!(h.sent(), 0);
    assert!(h.state().drafts.is_empty());
    // Key order is not part of the binding (canonical JSON): a reordered object commits.
    let reordered =
        json!({"body": original["body"], "subject": original["subject"], "to": original["to"]});
    completed(
        &h.commit(&h.session, SEND, reordered, &p.action_id, Some(&p.artifact))
            .await,
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn commit_from_another_session_or_caller() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let same_caller = h.open_session("alice").await;
    let other_caller = h.open_session("mallory").await;
    for s in [&same_caller, &other_caller] {
        let o = h
            .commit(s, SEND, to_approver(), &p.action_id, Some(&p.artifact))
            .await;
        assert_denied(&o, ReasonCode::BindingMismatch);
    }
    // A session record that claims the original id but carries another caller.
    let mut forged = h.session.clone();
    forged.caller = "mallory".into();
    let o = h
        .commit(
            &forged,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    assert_eq!(h.sent(), 0);
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn expired_artifact() {
    let h = Harness::new().await;
    let ttl = h.config.limits.artifact_ttl_ms;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    // At the last instant of the window it is still fresh (checked with a second preview).
    let q = h
        .preview(&h.session, SEND, email(APPROVER, "edge"))
        .await
        .unwrap();
    h.clock.advance(ttl + 1);
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ArtifactExpired);
    let o = h
        .commit(
            &h.session,
            SEND,
            email(APPROVER, "edge"),
            &q.action_id,
            Some(&q.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ArtifactExpired);
    assert_eq!(h.sent(), 0);
    // Positive control: a fresh preview commits; and one committed exactly at not_after.
    let fresh = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &fresh.action_id,
            Some(&fresh.artifact),
        )
        .await,
    );
    let edge = h
        .preview(&h.session, SEND, email(APPROVER, "edge"))
        .await
        .unwrap();
    h.clock.advance(ttl);
    completed(
        &h.commit(
            &h.session,
            SEND,
            email(APPROVER, "edge"),
            &edge.action_id,
            Some(&edge.artifact),
        )
        .await,
    );
    assert_eq!(h.sent(), 2);
}

#[tokio::test]
async fn future_dated_artifact() {
    let h = Harness::new().await;
    let skew = h.config.limits.max_skew_ms;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let issued = h.clock.now();
    h.clock.set(issued - skew - 1);
    let o = h
        .commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::ArtifactNotYetValid);
    assert_eq!(h.sent(), 0);
    // Within the tolerated skew it commits.
    h.clock.set(issued - skew);
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn replay_is_refused() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    for _ in 0..3 {
        let o = h
            .commit(
                &h.session,
                SEND,
                to_approver(),
                &p.action_id,
                Some(&p.artifact),
            )
            .await;
        assert_denied(&o, ReasonCode::Replay);
    }
    assert_eq!(h.sent(), 1);
}

const EXTRA_POLICY: &str = r#"
@id("extra-harmless-forbid")
@reason("policy_deny")
forbid (principal, action, resource)
when { context.tool == "no_such_tool_anywhere" };
"#;

#[tokio::test]
async fn policy_changed_between_preview_and_commit() {
    let h = Harness::new().await;
    let changed = h
        .gateway(h.store.clone(), &[("extra.cedar", EXTRA_POLICY)])
        .await;
    assert_ne!(h.gw.policy_digest(), changed.policy_digest());
    // Preview on the old policy, commit under the new one.
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let o = commit_on(
        &changed,
        &h.session,
        SEND,
        to_approver(),
        &p.action_id,
        Some(&p.artifact),
    )
    .await;
    assert_denied(&o, ReasonCode::PolicyChanged);
    // And the other way round.
    let q = preview_on(&changed, &h.session, SEND, email(APPROVER, "new policy"))
        .await
        .unwrap();
    assert_eq!(q.decision, PreviewDecision::Allow);
    let o = h
        .commit(
            &h.session,
            SEND,
            email(APPROVER, "new policy"),
            &q.action_id,
            Some(&q.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::PolicyChanged);
    assert_eq!(h.sent(), 0);
    // Positive controls: each commits under the policy that previewed it.
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    completed(
        &commit_on(
            &changed,
            &h.session,
            SEND,
            email(APPROVER, "new policy"),
            &q.action_id,
            Some(&q.artifact),
        )
        .await,
    );
    assert_eq!(h.sent(), 2);
}

#[tokio::test]
async fn restart_keeps_the_ledger() {
    let h = Harness::new().await;
    let done = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &done.action_id,
            Some(&done.artifact),
        )
        .await,
    );
    let pending = h
        .preview(&h.session, SEND, email(APPROVER, "after restart"))
        .await
        .unwrap();
    let restarted = h.restarted().await;
    let o = commit_on(
        &restarted,
        &h.session,
        SEND,
        to_approver(),
        &done.action_id,
        Some(&done.artifact),
    )
    .await;
    assert_denied(&o, ReasonCode::Replay);
    assert_eq!(h.sent(), 1);
    // Positive control: an action previewed before the restart commits after it, once.
    let o = commit_on(
        &restarted,
        &h.session,
        SEND,
        email(APPROVER, "after restart"),
        &pending.action_id,
        Some(&pending.artifact),
    )
    .await;
    completed(&o);
    assert_eq!(h.sent(), 2);
    restarted.verify_audit().await.unwrap();
}

#[tokio::test]
async fn two_racing_commits_execute_once() {
    let h = Harness::new().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let (a, b) = tokio::join!(
        h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact)
        ),
        h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact)
        ),
    );
    let reasons = [reason(&a), reason(&b)];
    assert!(
        reasons.contains(&None) && reasons.contains(&Some(ReasonCode::Replay)),
        "{a:?} / {b:?}"
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_racing_commits_on_threads_and_gateways_execute_once() {
    let h = Harness::new().await;
    let second = h.restarted().await;
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let gw = if i % 2 == 0 {
            h.gw.clone()
        } else {
            second.clone()
        };
        let session = h.session.clone();
        let action = p.action_id.clone();
        let artifact = p.artifact.clone();
        tasks.push(tokio::spawn(async move {
            commit_on(&gw, &session, SEND, to_approver(), &action, Some(&artifact)).await
        }));
    }
    let mut completed_count = 0;
    for t in tasks {
        let o = t.await.unwrap();
        match reason(&o) {
            None => completed_count += 1,
            Some(r) => assert_eq!(r, ReasonCode::Replay, "{o:?}"),
        }
    }
    assert_eq!(completed_count, 1);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn denied_preview_artifact_authorizes_nothing() {
    let h = Harness::new().await;
    let invoice = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&invoice, "iban");
    let leak = json!({"to": APPROVER, "subject": "INV-42", "body": format!("pay to {iban}")});
    let p = h.preview(&h.session, SEND, leak.clone()).await.unwrap();
    assert_eq!(p.decision, PreviewDecision::Deny);
    assert_eq!(
        p.recovery.as_ref().map(|r| r.reason),
        Some(ReasonCode::HandleSinkForbidden)
    );
    let o = h
        .commit(&h.session, SEND, leak, &p.action_id, Some(&p.artifact))
        .await;
    assert_denied(&o, ReasonCode::DecisionNotAllow);
    assert_eq!(h.sent(), 0);
}

#[tokio::test]
async fn read_tools_cannot_be_previewed_or_committed() {
    let h = Harness::new().await;
    let r = h
        .preview(
            &h.session,
            "office__read_invoice",
            json!({"invoice_id": "INV-42"}),
        )
        .await
        .unwrap_err();
    assert_eq!(r.reason, ReasonCode::PolicyDeny);
    let p = h.preview(&h.session, SEND, to_approver()).await.unwrap();
    let o = h
        .commit(
            &h.session,
            "office__read_invoice",
            json!({"invoice_id": "INV-42"}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::PolicyDeny);
    let r = h
        .preview(&h.session, "office__nope", to_approver())
        .await
        .unwrap_err();
    assert_eq!(r.reason, ReasonCode::UnknownTool);
    // The legitimate commit is unaffected.
    completed(
        &h.commit(
            &h.session,
            SEND,
            to_approver(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn a_commit_interrupted_mid_effect_never_runs_again() {
    let h = Harness::new().await;
    let p = h
        .preview(&h.session, "test__gated", json!({}))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    let gw = h.gw.clone();
    let session = h.session.clone();
    let (action, artifact) = (p.action_id.clone(), p.artifact.clone());
    let task = tokio::spawn(async move {
        gw.commit(
            &session,
            "test__gated",
            args(json!({})),
            &action,
            Some(&artifact),
        )
        .await
    });
    while h.test.effects() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The gateway "crashes" while the upstream is executing: the commit never finishes.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let entry = h.store.ledger_entry(&p.action_id).unwrap().unwrap();
    assert_eq!(entry.state, secureclaw_store::LedgerState::Reserved);
    // A restart reports it and never executes it again.
    let restarted = h.restarted().await;
    let records =
        serde_json::to_value(restarted.audit_records(0, usize::MAX).await.unwrap()).unwrap();
    assert!(
        records
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["event"]["kind"] == "crash_recovery"
                && r["event"]["action_id"] == p.action_id.0.as_str()),
        "no crash_recovery record for the interrupted action"
    );
    for gw in [&h.gw, &restarted] {
        let o = commit_on(
            gw,
            &h.session,
            "test__gated",
            json!({}),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
        assert_denied(&o, ReasonCode::Replay);
    }
    assert_eq!(h.test.effects(), 1);
    restarted.verify_audit().await.unwrap();
}
