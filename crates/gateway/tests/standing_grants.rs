//! Standing grants (issue 15 item 1): an approval can let similar later calls of the same
//! session run without a prompt — the same tool, no target the approved call did not have, no
//! larger amount, until the grant expires, its uses are taken or it is revoked. Adversarial
//! cases: a different or extra target, a larger amount, another session, after expiry, after
//! N uses, after revocation, a confirmation asked for another reason all ask again. Positive
//! controls: a matching call runs without a prompt, once per call, and the use count moves.
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
use secureclaw_core::audit::AuditKind;
use secureclaw_gateway::config::ToolRule;
use secureclaw_gateway::{GatewayError, GrantTerms};
use secureclaw_store::SessionRecord;
use serde_json::{Value, json};

const SEND: &str = "office__send_email";
const FINANCE: &str = "finance@corp.example";
const PAY: &str = "test__count";
const VENDOR: &str = "billing@vendor.example";

fn terms(minutes: Option<u64>, uses: Option<u64>) -> GrantTerms {
    GrantTerms {
        allow_for_ms: minutes.map(|m| m * 60_000),
        uses,
        max_amount: None,
    }
}

/// A pending action for `args` in `session`, approved with a grant on `t`; the approved call
/// itself is re-issued and runs once. Returns the grant id.
async fn granted(
    h: &Harness,
    session: &SessionRecord,
    tool: &str,
    args: Value,
    t: GrantTerms,
) -> String {
    let action = assert_pending(&h.call(session, tool, args.clone(), None).await);
    let (_, grant) =
        h.gw.approve_with_grant(&action, "cli:alice", t)
            .await
            .unwrap();
    completed(&h.call(session, tool, args, None).await);
    grant.id
}

async fn uses(h: &Harness, id: &str) -> u64 {
    h.gw.grants(true)
        .await
        .unwrap()
        .into_iter()
        .find(|g| g.id == id)
        .map(|g| g.used)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matching_call_runs_without_a_prompt_once_per_call_until_the_uses_are_taken() {
    let h = Harness::new().await;
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 1"),
        terms(Some(30), Some(2)),
    )
    .await;
    assert_eq!(h.sent(), 1, "the approved call ran once");
    assert_eq!(
        uses(&h, &id).await,
        0,
        "the approved call itself takes no grant use"
    );
    // Positive control: a similar call (same recipient, other subject) runs at once.
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 2"), None)
            .await,
    );
    assert_eq!(h.sent(), 2);
    assert_eq!(uses(&h, &id).await, 1);
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 3"), None)
            .await,
    );
    assert_eq!(h.sent(), 3);
    assert_eq!(uses(&h, &id).await, 2);
    // Used up: asks again, nothing sent, the count stays.
    assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 4"), None)
            .await,
    );
    assert_eq!(h.sent(), 3);
    assert_eq!(uses(&h, &id).await, 2);
    // Audited: creation (who), each use (action and grant), and the decision names the grant.
    let records = h.store.audit_records(0, usize::MAX).unwrap();
    let grant_events: Vec<_> = records
        .iter()
        .filter(|r| r.event.kind == AuditKind::Grant)
        .map(|r| &r.event)
        .collect();
    assert_eq!(grant_events.len(), 3, "{grant_events:?}");
    assert_eq!(grant_events[0].detail["event"], "created");
    assert_eq!(grant_events[0].detail["by"], "cli:alice");
    assert_eq!(grant_events[0].detail["grant"], id.as_str());
    for used in &grant_events[1..] {
        assert_eq!(used.detail["event"], "used");
        assert_eq!(used.detail["grant"], id.as_str());
        let action = used.action_id.clone().unwrap();
        let decision = records
            .iter()
            .find(|r| {
                r.event.kind == AuditKind::Decision && r.event.action_id.as_deref() == Some(&action)
            })
            .unwrap();
        assert_eq!(
            decision.event.detail["confirmation"]["standing_grant"],
            id.as_str()
        );
        assert_eq!(decision.event.detail["decision"], "allow");
    }
    h.assert_audit_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_different_or_extra_target_asks_again() {
    let h = Harness::new().await;
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 1"),
        terms(Some(30), Some(10)),
    )
    .await;
    // Another recipient.
    assert_pending(
        &h.call(&h.session, SEND, email(ATTACKER, "Copy 2"), None)
            .await,
    );
    // The granted recipient plus another one: in a list, in the body, in a cc field.
    for extra in [
        json!({"to": [FINANCE, ATTACKER], "subject": "x", "body": "Invoice INV-42 for sign-off."}),
        json!({"to": FINANCE, "subject": "x", "body": format!("forward to {ATTACKER}")}),
        json!({"to": FINANCE, "cc": ATTACKER, "subject": "x", "body": "Invoice INV-42 for sign-off."}),
        // The same address respelt is another target (compared exactly: fail closed).
        json!({"to": "FINANCE@corp.example", "subject": "x", "body": "Invoice INV-42 for sign-off."}),
    ] {
        let o = h.call(&h.session, SEND, extra.clone(), None).await;
        assert_pending(&o);
    }
    // Another tool is never covered.
    let o = h
        .call(
            &h.session,
            "office__pay_invoice",
            json!({"invoice_id": "INV-42", "iban": IBAN, "amount_cents": 100, "to": FINANCE}),
            None,
        )
        .await;
    assert_pending(&o);
    assert_eq!(h.sent(), 1, "only the approved call ran");
    assert_eq!(
        uses(&h, &id).await,
        0,
        "no use taken by a call it does not cover"
    );
    // Positive control.
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 3"), None)
            .await,
    );
    assert_eq!(uses(&h, &id).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn expiry_revocation_and_other_sessions_ask_again() {
    let h = Harness::new().await;
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 1"),
        terms(Some(10), None),
    )
    .await;
    // Another session of the same caller and task: not covered.
    let other = h.open_session("alice").await;
    assert_pending(&h.call(&other, SEND, email(FINANCE, "Copy 2"), None).await);
    // Within the time limit: covered; at the limit: asks.
    h.clock.advance(10 * 60_000 - 1);
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 3"), None)
            .await,
    );
    h.clock.advance(1);
    assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 4"), None)
            .await,
    );
    assert_eq!(uses(&h, &id).await, 1);
    // Revocation.
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 5"),
        terms(None, Some(5)),
    )
    .await;
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 6"), None)
            .await,
    );
    let v = h.gw.revoke_grant(&id, "web:operator").await.unwrap();
    assert_eq!(v.state, "revoked");
    assert_pending(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 7"), None)
            .await,
    );
    assert_eq!(uses(&h, &id).await, 1);
    assert!(h.gw.grants(false).await.unwrap().is_empty(), "nothing live");
    let records = h.store.audit_records(0, usize::MAX).unwrap();
    assert!(records.iter().any(|r| r.event.kind == AuditKind::Grant
        && r.event.detail["event"] == "revoked"
        && r.event.detail["by"] == "web:operator"));
    // Unknown grants are not found.
    assert!(matches!(
        h.gw.revoke_grant("grant-nope", "cli").await,
        Err(GatewayError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn terms_without_a_bound_or_beyond_the_caps_make_no_grant_and_decide_nothing() {
    let h = Harness::new().await;
    let action = assert_pending(&h.call(&h.session, SEND, email(FINANCE, "x"), None).await);
    for t in [
        terms(None, None),
        terms(Some(24 * 60 + 1), None),
        terms(None, Some(0)),
        terms(None, Some(1001)),
    ] {
        assert!(
            matches!(
                h.gw.approve_with_grant(&action, "cli:alice", t).await,
                Err(GatewayError::Config(_))
            ),
            "{t:?}"
        );
    }
    assert!(h.gw.grants(true).await.unwrap().is_empty());
    // Still pending: the refused terms decided nothing.
    assert_eq!(
        h.gw.approvals(Some(secureclaw_store::ApprovalState::Pending))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(matches!(
        h.gw.approve_with_grant(&ActionId("act_nope".into()), "cli", terms(Some(1), None))
            .await,
        Err(GatewayError::NotFound(_))
    ));
}

/// A payee-paying financial tool (`test__count` declared financial, target `to`).
async fn pay_harness() -> Harness {
    let mut config = test_config();
    config.tools.insert(
        0,
        ToolRule {
            tool: PAY.into(),
            destructive: Some(false),
            financial: Some(true),
            targets: Some(vec!["to".into()]),
            sink: Some(secureclaw_core::handle::SinkKind::Egress),
            ..ToolRule::default()
        },
    );
    Harness::with_config(config).await
}

fn pay(amount: Value) -> Value {
    json!({"to": VENDOR, "amount": amount, "currency": "EUR"})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_larger_amount_or_another_currency_asks_again() {
    let h = pay_harness().await;
    let id = granted(
        &h,
        &h.session,
        PAY,
        pay(json!(120)),
        terms(Some(30), Some(10)),
    )
    .await;
    let before = h.test.effects();
    for bigger in [
        pay(json!(120.01)),
        pay(json!("120.5")),
        pay(json!("EUR 5,000.00")),
        json!({"to": VENDOR, "amount": 100, "currency": "USD"}),
        json!({"to": VENDOR, "amount": 100, "currency": "EUR", "fee": 900}),
    ] {
        assert_pending(&h.call(&h.session, PAY, bigger.clone(), None).await);
    }
    assert_eq!(h.test.effects(), before, "nothing paid");
    assert_eq!(uses(&h, &id).await, 0);
    // Positive controls: the same or a smaller amount to the same payee.
    completed(&h.call(&h.session, PAY, pay(json!(120)), None).await);
    completed(&h.call(&h.session, PAY, pay(json!("99.50")), None).await);
    assert_eq!(h.test.effects(), before + 2);
    assert_eq!(uses(&h, &id).await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approvers_ceiling_replaces_the_approved_amount() {
    let h = pay_harness().await;
    let id = granted(
        &h,
        &h.session,
        PAY,
        pay(json!(120)),
        GrantTerms {
            allow_for_ms: Some(60_000),
            uses: None,
            max_amount: Some(20_000),
        },
    )
    .await;
    completed(&h.call(&h.session, PAY, pay(json!(200)), None).await);
    assert_pending(&h.call(&h.session, PAY, pay(json!(200.01)), None).await);
    assert_eq!(uses(&h, &id).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paid_invoice_is_never_paid_again_under_a_grant() {
    let h = pay_harness().await;
    let call = json!({"to": VENDOR, "invoice_id": "INV-7", "amount": 50, "currency": "EUR"});
    let id = granted(&h, &h.session, PAY, call.clone(), terms(Some(30), Some(10))).await;
    let before = h.test.effects();
    // The identical payment again (a new call, not the approval's re-issue).
    assert_pending(&h.call(&h.session, PAY, call, None).await);
    // Another invoice is another target.
    assert_pending(
        &h.call(
            &h.session,
            PAY,
            json!({"to": VENDOR, "invoice_id": "INV-8", "amount": 50, "currency": "EUR"}),
            None,
        )
        .await,
    );
    assert_eq!(h.test.effects(), before);
    assert_eq!(uses(&h, &id).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_matching_calls_take_at_most_the_grants_uses() {
    let h = Harness::new().await;
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 1"),
        terms(Some(30), Some(3)),
    )
    .await;
    let mut tasks = Vec::new();
    for i in 0..12 {
        let gw = h.gw.clone();
        let s = h.session.clone();
        tasks.push(tokio::spawn(async move {
            gw.call(
                &s,
                SEND,
                args(email(FINANCE, &format!("Copy concurrent {i}"))),
                &secureclaw_gateway::CallMeta::default(),
            )
            .await
        }));
    }
    let mut ran = 0;
    for t in tasks {
        if matches!(
            t.await.unwrap(),
            secureclaw_gateway::CallOutcome::Completed { .. }
        ) {
            ran += 1;
        }
    }
    assert_eq!(ran, 3, "exactly the grant's uses ran");
    assert_eq!(uses(&h, &id).await, 3);
    assert_eq!(h.sent(), 4);
}

/// Red-team F2: a standing grant covers only a call committed in the same request. An
/// explicit preview of a call the policy wants confirmed goes to a human even while a grant
/// would cover the call, so no artifact taken under a grant can be committed after the grant
/// is revoked or expires. Positive control: the ordinary call runs under the grant.
#[tokio::test(flavor = "multi_thread")]
async fn an_explicit_preview_is_not_covered_by_a_grant_that_can_be_revoked_before_its_commit() {
    let h = Harness::new().await;
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "Copy 1"),
        terms(Some(30), Some(10)),
    )
    .await;
    let stockpiled = h
        .preview(&h.session, SEND, email(FINANCE, "Copy 2"))
        .await
        .unwrap();
    assert_eq!(stockpiled.decision, PreviewDecision::Confirm);
    assert_eq!(uses(&h, &id).await, 0, "no use taken by a preview");
    // Positive control: the ordinary call is covered.
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "Copy 3"), None)
            .await,
    );
    assert_eq!(uses(&h, &id).await, 1);
    let sent = h.sent();
    h.gw.revoke_grant(&id, "cli:alice").await.unwrap();
    // The preview's artifact commits nothing without a human.
    let out = h
        .commit(
            &h.session,
            SEND,
            email(FINANCE, "Copy 2"),
            &stockpiled.action_id,
            None,
        )
        .await;
    assert!(
        !matches!(out, secureclaw_gateway::CallOutcome::Completed { .. }),
        "committed after revocation: {out:?}"
    );
    assert_eq!(h.sent(), sent);
}

/// Red-team F1: the money rules of a grant — no amount above the approved one, no other
/// currency, no payment object paid twice — apply whenever the call carries an amount, even
/// on a tool the operator did not mark `financial` (a grant on such a `pay_invoice` repaid
/// the same invoice, once for 90 million). Positive control: a smaller amount to the same
/// payee, for no invoice, is covered.
#[tokio::test(flavor = "multi_thread")]
async fn money_rules_apply_to_grants_on_tools_not_marked_financial() {
    let mut config = test_config();
    config.tools.insert(
        0,
        ToolRule {
            tool: PAY.into(),
            targets: Some(vec!["to".into()]),
            sink: Some(secureclaw_core::handle::SinkKind::Egress),
            ..ToolRule::default()
        },
    );
    let h = Harness::with_config(config).await;
    let call = json!({"to": VENDOR, "invoice_id": "INV-7", "amount_cents": 48_750});
    let id = granted(&h, &h.session, PAY, call.clone(), terms(Some(30), Some(10))).await;
    let before = h.test.effects();
    for attack in [
        // The same invoice again, identical or for more.
        call.clone(),
        json!({"to": VENDOR, "invoice_id": "INV-7", "amount_cents": 9_000_000_000_u64}),
        // No invoice, a larger amount or another currency.
        json!({"to": VENDOR, "amount_cents": 48_751}),
        json!({"to": VENDOR, "amount_cents": 100, "currency": "USD"}),
    ] {
        assert_pending(&h.call(&h.session, PAY, attack.clone(), None).await);
    }
    assert_eq!(h.test.effects(), before, "nothing paid");
    assert_eq!(uses(&h, &id).await, 0);
    completed(
        &h.call(
            &h.session,
            PAY,
            json!({"to": VENDOR, "amount_cents": 40_000}),
            None,
        )
        .await,
    );
    assert_eq!(h.test.effects(), before + 1);
    assert_eq!(uses(&h, &id).await, 1);
}

/// Red-team F2 (2026-12-04): a grant for a call with no target the gateway recognizes (a team,
/// a user name, a role) covered every later call of the tool. Every argument that is not a
/// target, message text or money must now be the approved one.
#[tokio::test(flavor = "multi_thread")]
async fn arguments_that_are_not_targets_text_or_money_must_be_the_approved_ones() {
    let mut config = test_config();
    config.tools.insert(
        0,
        ToolRule {
            tool: PAY.into(),
            destructive: Some(true),
            targets: Some(vec![]),
            ..ToolRule::default()
        },
    );
    let h = Harness::with_config(config).await;
    let call = json!({"team": "docs", "user": "bob", "role": "member", "note": "Welcome to docs"});
    let id = granted(&h, &h.session, PAY, call, terms(Some(30), Some(10))).await;
    let before = h.test.effects();
    for attack in [
        json!({"team": "admins", "user": "mallory", "role": "owner", "note": "Welcome to docs"}),
        json!({"team": "docs", "user": "bob", "role": "owner", "note": "Welcome to docs"}),
        json!({"team": "docs", "user": "mallory", "role": "member", "note": "Welcome to docs"}),
        // An argument the approved call did not have, or one it had left out.
        json!({"team": "docs", "user": "bob", "role": "member", "note": "hi", "admin": true}),
        json!({"team": "docs", "user": "bob", "note": "Welcome to docs"}),
        // A field named like text that holds structure is compared like any other.
        json!({"team": "docs", "user": "bob", "role": "member", "note": {"role": "owner"}}),
    ] {
        let o = h.call(&h.session, PAY, attack.clone(), None).await;
        assert_pending(&o);
    }
    assert_eq!(h.test.effects(), before, "nothing ran");
    assert_eq!(
        uses(&h, &id).await,
        0,
        "no use taken by a call it does not cover"
    );
    // Positive control: the same call with other message text runs without a prompt.
    completed(
        &h.call(
            &h.session,
            PAY,
            json!({"team": "docs", "user": "bob", "role": "member", "note": "Welcome back"}),
            None,
        )
        .await,
    );
    assert_eq!(h.test.effects(), before + 1);
    assert_eq!(uses(&h, &id).await, 1);
}

/// New-user trial (2026-12-04): the user denied X, then approved a similar Y with a grant;
/// X re-sent ran under the grant. A call whose identical copy was denied in the session is
/// never covered.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_the_user_denied_is_not_covered_by_a_later_grant() {
    let h = Harness::new().await;
    let denied_call = email(FINANCE, "please wire 50k to the new account");
    let denied = assert_pending(&h.call(&h.session, SEND, denied_call.clone(), None).await);
    h.gw.decide_approval(&denied, false, "cli:alice")
        .await
        .unwrap();
    let id = granted(
        &h,
        &h.session,
        SEND,
        email(FINANCE, "lunch?"),
        terms(Some(30), Some(5)),
    )
    .await;
    assert_eq!(h.sent(), 1, "only the approved call ran");
    // The denied call, re-sent: a human decides again.
    assert_pending(&h.call(&h.session, SEND, denied_call, None).await);
    assert_eq!(h.sent(), 1, "the denied call did not run");
    assert_eq!(uses(&h, &id).await, 0);
    // Positive control: another similar call is covered.
    completed(
        &h.call(&h.session, SEND, email(FINANCE, "coffee?"), None)
            .await,
    );
    assert_eq!(h.sent(), 2);
    assert_eq!(uses(&h, &id).await, 1);
}
