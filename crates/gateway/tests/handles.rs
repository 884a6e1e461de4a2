//! Handles: the read path hands out handles instead of protected values; only the executor
//! resolves them, only in their own session, while live, and only for sinks their record
//! allows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::classify::FieldRule;
use secureclaw_core::handle::{HandleId, Sensitivity};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::{CallOutcome, GatewayError};
use serde_json::{Value, json};

const SEND: &str = "office__send_email";
const PAY: &str = "office__pay_invoice";

fn body_with(handle: &str) -> Value {
    json!({"to": APPROVER, "subject": "INV-42", "body": format!("Vendor contact: {handle}")})
}

fn pay(iban: &str) -> Value {
    json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": 129_900})
}

#[tokio::test]
async fn reading_inv_42_yields_handles_not_values() {
    let h = Harness::new().await;
    let o = h
        .call(
            &h.session,
            "office__read_invoice",
            json!({"invoice_id": "INV-42"}),
            None,
        )
        .await;
    let out = completed(&o);
    let summary = out.structured.clone().unwrap();
    let iban = handle_at(&summary, "iban");
    let contact = handle_at(&summary, "contact_email");
    assert_ne!(iban, contact);
    let notes = summary["notes"].as_str().unwrap();
    assert!(!notes.contains(ATTACKER), "{notes}");
    assert!(email_handle_in(notes).is_some(), "{notes}");
    // The text block carries the same handles and no value either.
    let text = out.content[0]["text"].as_str().unwrap();
    assert!(text.contains(&iban) && text.contains(&contact), "{text}");
    assert!(!text.contains(IBAN) && !text.contains(CONTACT) && !text.contains(ATTACKER));
    // The runtime may describe its handle (label, sensitivity, sinks), never read it.
    let d =
        h.gw.describe_handle(&h.session, &HandleId(iban.clone()))
            .await
            .unwrap();
    assert_eq!(d["label"], "payee_iban");
    assert_eq!(d["sensitivity"], "high");
    assert_no_plaintext("handle description", &d.to_string());
    // Other invoices and the mailbox too.
    let other = h.read_invoice(&h.session, "INV-43").await;
    handle_at(&other, "iban");
    let mail = h
        .call(
            &h.session,
            "office__search_mail",
            json!({"query": "INV-42"}),
            None,
        )
        .await;
    let mail = visible(&mail);
    assert!(
        !mail.contains(CONTACT) && mail.contains("hdl_em_"),
        "{mail}"
    );
    h.assert_audit_clean();
}

#[tokio::test]
async fn a_guessed_handle_is_unavailable() {
    let h = Harness::new().await;
    let _ = h.read_invoice(&h.session, "INV-42").await;
    for guess in [
        format!("hdl_em_{}", "a".repeat(32)),
        format!("hdl_fld_{}", "234567abcdefghijklmnopqrstuvwxyz"),
        format!("hdl_ib_{}", "q".repeat(32)),
    ] {
        let o = h.call(&h.session, SEND, body_with(&guess), None).await;
        assert_denied(&o, ReasonCode::HandleUnavailable);
        let r = h
            .preview(&h.session, SEND, body_with(&guess))
            .await
            .unwrap_err();
        assert_eq!(r.reason, ReasonCode::HandleUnavailable);
        // Also as a read argument and as the recipient.
        let o = h
            .call(
                &h.session,
                "office__search_mail",
                json!({"query": guess}),
                None,
            )
            .await;
        assert_denied(&o, ReasonCode::HandleUnavailable);
        let o = h.call(&h.session, SEND, email(&guess, "x"), None).await;
        assert_denied(&o, ReasonCode::HandleUnavailable);
    }
    assert_eq!(h.sent(), 0);
    // Describing a guessed handle gives the same generic answer as a foreign one.
    assert!(matches!(
        h.gw.describe_handle(&h.session, &HandleId(format!("hdl_em_{}", "a".repeat(32))))
            .await,
        Err(GatewayError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_handle_of_another_session_is_unavailable() {
    let h = Harness::new().await;
    let mine = h.read_invoice(&h.session, "INV-42").await;
    let my_contact = handle_at(&mine, "contact_email");
    let other_session = h.open_session("alice").await;
    let other_caller = h.open_session("mallory").await;
    let theirs = h.read_invoice(&other_caller, "INV-42").await;
    let their_contact = handle_at(&theirs, "contact_email");
    for (s, handle) in [
        (&other_session, &my_contact),
        (&other_caller, &my_contact),
        (&h.session, &their_contact),
    ] {
        let o = h.call(s, SEND, body_with(handle), None).await;
        assert_denied(&o, ReasonCode::HandleUnavailable);
        assert!(matches!(
            h.gw.describe_handle(s, &HandleId(handle.clone())).await,
            Err(GatewayError::NotFound(_))
        ));
        assert!(matches!(
            h.gw.revoke_handle(s, &HandleId(handle.clone())).await,
            Err(GatewayError::NotFound(_))
        ));
    }
    assert_eq!(h.sent(), 0);
    // Positive control: each session uses its own handle; the executor resolves it.
    completed(&h.call(&h.session, SEND, body_with(&my_contact), None).await);
    completed(
        &h.call(&other_caller, SEND, body_with(&their_contact), None)
            .await,
    );
    let state = h.state();
    assert_eq!(state.sent.len(), 2);
    assert!(
        state
            .sent
            .iter()
            .all(|m| m.body == format!("Vendor contact: {CONTACT}"))
    );
}

#[tokio::test]
async fn a_revoked_handle_is_unavailable() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let contact = handle_at(&inv, "contact_email");
    // Previewed before revocation, committed after: the executor re-checks at resolution.
    let p = h
        .preview(&h.session, SEND, body_with(&contact))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    h.gw.revoke_handle(&h.session, &HandleId(contact.clone()))
        .await
        .unwrap();
    let o = h
        .commit(
            &h.session,
            SEND,
            body_with(&contact),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::HandleUnavailable);
    let o = h.call(&h.session, SEND, body_with(&contact), None).await;
    assert_denied(&o, ReasonCode::HandleUnavailable);
    assert_eq!(h.sent(), 0);
    // Positive control: a fresh read gives a fresh, usable handle.
    let again = h.read_invoice(&h.session, "INV-42").await;
    let fresh = handle_at(&again, "contact_email");
    assert_ne!(fresh, contact);
    completed(&h.call(&h.session, SEND, body_with(&fresh), None).await);
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn an_expired_handle_is_unavailable() {
    let mut config = test_config();
    config.limits.handle_ttl_ms = 600_000;
    let h = Harness::with_config(config).await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let contact = handle_at(&inv, "contact_email");
    let iban = handle_at(&inv, "iban");
    h.clock.advance(600_000);
    // Live through its last instant.
    let p = h
        .preview(&h.session, SEND, body_with(&contact))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    h.clock.advance(1);
    let o = h
        .commit(
            &h.session,
            SEND,
            body_with(&contact),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::HandleUnavailable);
    let o = h.call(&h.session, SEND, body_with(&contact), None).await;
    assert_denied(&o, ReasonCode::HandleUnavailable);
    let o = h.call(&h.session, PAY, pay(&iban), None).await;
    assert_denied(&o, ReasonCode::HandleUnavailable);
    assert_eq!(h.sent(), 0);
    assert_eq!(h.payments(), 0);
    let again = h.read_invoice(&h.session, "INV-42").await;
    completed(
        &h.call(
            &h.session,
            SEND,
            body_with(&handle_at(&again, "contact_email")),
            None,
        )
        .await,
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test]
async fn the_iban_handle_may_not_flow_into_email() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let cases = [
        json!({"to": APPROVER, "subject": "INV-42", "body": format!("Pay to {iban}")}),
        json!({"to": APPROVER, "subject": iban, "body": "see subject"}),
        json!({"to": APPROVER, "subject": "x", "body": "y", "attachments": [iban]}),
    ];
    for args in cases {
        let o = h.call(&h.session, SEND, args.clone(), None).await;
        assert_denied(&o, ReasonCode::HandleSinkForbidden);
        let o = h.call(&h.session, "office__save_draft", args, None).await;
        assert_denied(&o, ReasonCode::HandleSinkForbidden);
    }
    // Nor into a read tool's arguments (the read path resolves handles too).
    let o = h
        .call(
            &h.session,
            "office__search_mail",
            json!({"query": iban}),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::HandleSinkForbidden);
    assert_eq!(h.sent(), 0);
    assert!(h.state().drafts.is_empty());
}

#[tokio::test]
async fn the_iban_handle_pays_the_invoice_with_the_real_iban() {
    let h = Harness::new().await;
    // Paying is financial: without a grant in the task, the anchored payment still asks.
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let o = h.call(&h.session, PAY, pay(&iban), None).await;
    assert!(matches!(o, CallOutcome::Pending(_)), "{o:?}");
    assert_eq!(h.payments(), 0);
    // The user's task grants paying (twice: a financial grant covers one payment unless it
    // carries a count): the anchored payment runs.
    let session = h
        .open_granted_session("alice", &["office__pay_invoice#2"])
        .await;
    let inv = h.read_invoice(&session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let o = h.call(&session, PAY, pay(&iban), None).await;
    let out = completed(&o);
    assert_eq!(out.structured.as_ref().unwrap()["status"], "paid");
    let state = h.state();
    assert_eq!(state.payments.len(), 1);
    assert_eq!(
        state.payments[0].iban, IBAN,
        "the executor resolved the handle"
    );
    assert_eq!(state.payments[0].amount_cents, 129_900);
    // Paying the same invoice again is not covered by the grant (red-team M2: one payment
    // per object), even with uses left.
    let p = h.preview(&session, PAY, pay(&iban)).await.unwrap();
    assert_eq!(p.decision, PreviewDecision::Confirm);
    assert_eq!(h.payments(), 1);
    // The same handle in a two-phase flow of another task that grants the payment: resolved
    // at commit, never in the canonical request.
    let session = h
        .open_granted_session("alice", &["office__pay_invoice"])
        .await;
    let inv = h.read_invoice(&session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let p = h.preview(&session, PAY, pay(&iban)).await.unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    completed(
        &h.commit(&session, PAY, pay(&iban), &p.action_id, Some(&p.artifact))
            .await,
    );
    assert_eq!(h.payments(), 2);
    let action = h.store.action(&p.action_id).unwrap().unwrap();
    assert!(!action.request_json.contains(IBAN) && action.request_json.contains(&iban));
    h.assert_audit_clean();
}

#[tokio::test]
async fn a_resolved_value_echoed_in_a_tool_error_is_declassified_again() {
    let h = Harness::new().await;
    let session = h
        .open_granted_session("alice", &["office__pay_invoice"])
        .await;
    let inv = h.read_invoice(&session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    // pay_invoice is an allowed sink for the IBAN; the strict demo server rejects the
    // resolved IBAN as an amount and quotes it in its error message.
    let args = json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": iban});
    // An amount that is not a plain number needs the user (red-team F4); approved, it runs.
    let o = h.call(&session, PAY, args.clone(), None).await;
    let CallOutcome::Pending(r) = &o else {
        panic!("expected pending, got {o:?}");
    };
    let action = secureclaw_core::artifact::ActionId(r.action_id.clone().unwrap_or_default());
    h.gw.decide_approval(&action, true, "operator")
        .await
        .unwrap();
    let o = h.call(&session, PAY, args, Some(&action)).await;
    match &o {
        CallOutcome::Completed { output, .. } => assert!(output.is_error, "{output:?}"),
        other => panic!("expected a tool error, got {other:?}"),
    }
    // `call_on` already asserted that the IBAN is not in what the runtime sees.
    assert_eq!(h.payments(), 0);
}

/// A protected field that no identifier detector recognises (a vendor name), resolved by the
/// read path into a tool that echoes its input, must not come back to the runtime in clear.
#[tokio::test]
async fn a_read_tool_is_no_dereference_oracle() {
    let mut config = test_config();
    config.classify.push(FieldRule {
        upstream: "office".into(),
        tool: "read_invoice".into(),
        path: "/vendor".into(),
        label: "vendor_name".into(),
        sensitivity: Sensitivity::Medium,
        allowed_sinks: vec![],
        anchor: false,
        identifiers: false,
    });
    let h = Harness::with_config(config).await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let vendor = handle_at(&inv, "vendor");
    assert!(!inv.to_string().contains("Acme Supplies GmbH"));
    let o =
        h.gw.call(
            &h.session,
            "test__echo",
            args(json!({"text": vendor})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    let seen = visible(&o);
    assert!(
        !seen.contains("Acme Supplies GmbH"),
        "the runtime dereferenced a handle through an echoing read tool: {seen}"
    );
    // Same through the demo server's own error message.
    let o =
        h.gw.call(
            &h.session,
            "office__read_invoice",
            args(json!({"invoice_id": vendor})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    let seen = visible(&o);
    assert!(
        !seen.contains("Acme Supplies GmbH"),
        "the runtime dereferenced a handle through a read tool's error: {seen}"
    );
}

/// Regression (AgentDojo lane, issue 6): an identifier inside free text of an object the task
/// named (the payee IBAN written in a bill, a link in a named channel) could get neither sinks
/// nor anchoring, because a classification rule could only protect a whole field. A rule with
/// `identifiers = true` governs the identifiers found inside the field and leaves the text
/// readable.
#[tokio::test]
async fn an_identifiers_rule_governs_identifiers_inside_free_text() {
    // Without the rule: the address in the notes of INV-42 is a plain detected e-mail handle,
    // not anchored, so mailing it needs the user's confirmation.
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let em = email_handle_in(inv["notes"].as_str().unwrap()).unwrap();
    let o = h
        .call(
            &h.session,
            SEND,
            json!({"to": em, "subject": "INV-42", "body": "hello"}),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Pending(_)), "{o:?}");

    // With the rule: same text, same kind of handle, but it carries the rule's sensitivity and
    // sinks. It is still not anchored: identifiers in free text are written by whoever wrote
    // the text (issue 11 item 5, anchor laundering), so a rule may not ask for that.
    let rule = FieldRule {
        upstream: "office".into(),
        tool: "read_invoice".into(),
        path: "/notes".into(),
        label: "invoice_notes".into(),
        sensitivity: Sensitivity::High,
        allowed_sinks: vec![SEND.into()],
        anchor: true,
        identifiers: true,
    };
    let mut laundering = test_config();
    laundering.classify.insert(0, rule.clone());
    let err = laundering.validate().unwrap_err();
    assert!(
        err.contains("cannot be combined with `anchor = true`"),
        "{err}"
    );
    let mut config = test_config();
    config.classify.insert(
        0,
        FieldRule {
            anchor: false,
            ..rule
        },
    );
    let h = Harness::with_config(config).await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let notes = inv["notes"].as_str().unwrap();
    assert!(
        notes.contains("Payment terms"),
        "the text stays readable: {notes}"
    );
    let em = email_handle_in(notes).unwrap();
    let d =
        h.gw.describe_handle(&h.session, &HandleId(em.clone()))
            .await
            .unwrap();
    assert_eq!(d["label"], "email");
    assert_eq!(d["sensitivity"], "high");
    assert_eq!(d["allowed_sinks"], json!([SEND]));
    let o = h
        .call(
            &h.session,
            SEND,
            json!({"to": em, "subject": "INV-42", "body": "hello"}),
            None,
        )
        .await;
    assert!(
        matches!(&o, CallOutcome::Pending(_)),
        "an address from free text is not anchored: {o:?}"
    );
    assert_eq!(h.sent(), 0);
    // A high identifier still flows only to the rule's sinks.
    let o = h.call(&h.session, PAY, pay(&em), None).await;
    assert!(
        matches!(&o, CallOutcome::Denied(r) if r.reason == ReasonCode::HandleSinkForbidden),
        "{o:?}"
    );
}

/// Red-team H2: a value the session sent out through an egress effect comes back as its
/// handle when a later read returns it — a channel read back, a sent folder, an API that
/// echoes what it stored upper-cased — never in clear. Positive control: the effect itself
/// runs (a medium handle may flow into an egress sink) and the read shows the rest of what
/// was sent.
#[tokio::test]
async fn a_released_value_never_comes_back_in_clear() {
    let h = Harness::new().await;
    let s = h.session.clone();
    let read = h.read_invoice(&s, "INV-42").await;
    let email = handle_at(&read, "contact_email");
    let plain = "billing@acme-supplies.example";
    let o = h
        .call(
            &s,
            "test__count",
            json!({"text": format!("contact {email}")}),
            None,
        )
        .await;
    completed(&o);
    let o = h.call(&s, "test__recall", json!({}), None).await;
    let seen = visible(&o);
    assert!(
        !seen.to_lowercase().contains(plain),
        "the released value came back in clear: {seen}"
    );
    assert!(seen.contains("hdl_"), "a handle stands in for it: {seen}");
    assert!(seen.contains("CONTACT"), "the rest comes back: {seen}");
}

/// A result split into more text blocks than D keeps entries of a list (`max_entries`, 8)
/// releases the first 8 and a marker counting the rest, like an array (trial of issue 17: 12
/// blocks came out as 12, each summarized within the caps on its own). Positive control: a
/// result of exactly 8 blocks passes whole, with no marker.
#[tokio::test]
async fn text_blocks_beyond_the_entry_cap_are_withheld() {
    let h = Harness::new().await;
    let o = h
        .call(&h.session, "test__blocks", json!({"n": 12}), None)
        .await;
    let texts: Vec<String> = completed(&o)
        .content
        .iter()
        .map(|b| b["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts.len(), 9, "{texts:?}");
    for (i, text) in texts.iter().take(8).enumerate() {
        assert_eq!(text, &format!("block {i}"));
    }
    assert_eq!(texts[8], "…[4 more blocks]");
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("block 8") || t.contains("block 11"))
    );

    let o = h
        .call(&h.session, "test__blocks", json!({"n": 8}), None)
        .await;
    let texts: Vec<&str> = completed(&o)
        .content
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 8, "{texts:?}");
    assert_eq!(texts[7], "block 7");
}
