//! One run through every path — read, allow, confirm (approved and declined), policy deny,
//! every executor rejection, handle failures, bad input, upstream hang and crash, store
//! outage, restart — then the audit log must verify and hold handles and digests only: no
//! protected plaintext (IBANs, contact emails), in the exported records or anywhere in the
//! database files.
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
use secureclaw_core::handle::HandleId;
use secureclaw_core::recovery::ReasonCode;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const SEND: &str = "office__send_email";
const PAY: &str = "office__pay_invoice";

fn flip_mac(token: &str) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let mut mac = b64url_decode(parts[2]).unwrap();
    mac[0] ^= 1;
    format!("{}.{}.{}", parts[0], parts[1], b64url(&mac))
}

#[tokio::test]
async fn every_path_leaves_a_verifiable_audit_log_without_plaintext() {
    let mut config = test_config();
    config.limits.upstream_timeout_ms = 300;
    config.limits.max_argument_bytes = 1024;
    config.limits.handle_ttl_ms = 3_600_000;
    let h = Harness::with_config(config).await;
    // The task grants the payment this test makes (a financial effect).
    let granted = h
        .open_granted_session("alice", &["office__pay_invoice"])
        .await;
    let s = &granted;
    let mut seen = BTreeSet::new();
    let mut note = |o: &secureclaw_gateway::CallOutcome| {
        seen.insert(reason(o).map_or("completed".to_owned(), |r| r.to_string()));
    };

    // Read path: every invoice and the mailbox.
    let inv42 = h.read_invoice(s, "INV-42").await;
    for id in ["INV-43", "INV-44"] {
        let _ = h.read_invoice(s, id).await;
    }
    note(
        &h.call(s, "office__search_mail", json!({"query": ""}), None)
            .await,
    );
    note(&h.call(s, "office__list_invoices", json!({}), None).await);
    let iban = handle_at(&inv42, "iban");
    let contact = handle_at(&inv42, "contact_email");

    // Allow: anchored email with the contact handle resolved; payment with the IBAN handle.
    let with_contact =
        json!({"to": APPROVER, "subject": "INV-42", "body": format!("Contact: {contact}")});
    note(&h.call(s, SEND, with_contact.clone(), None).await);
    let payment = json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": 129_900});
    note(&h.call(s, PAY, payment.clone(), None).await);
    note(
        &h.call(
            s,
            "office__save_draft",
            json!({"to": ATTACKER, "subject": "draft", "body": contact}),
            None,
        )
        .await,
    );

    // Confirm: approved, declined, reused for another request, self-confirmation attempt.
    let finance = json!({"to": "finance@corp.example", "subject": "Copy", "body": format!("Contact {contact}")});
    let o = h.call(s, SEND, finance.clone(), None).await;
    note(&o);
    let approved = assert_pending(&o);
    note(&h.call(s, SEND, finance.clone(), Some(&approved)).await);
    h.gw.decide_approval(&approved, true, "user").await.unwrap();
    let mut other = finance.clone();
    other["to"] = json!(ATTACKER);
    note(&h.call(s, SEND, other, Some(&approved)).await);
    note(&h.call(s, SEND, finance.clone(), Some(&approved)).await);
    note(&h.call(s, SEND, finance.clone(), Some(&approved)).await);
    let o = h.call(s, SEND, email(ATTACKER, "INV-42"), None).await;
    let declined = assert_pending(&o);
    h.gw.decide_approval(&declined, false, "user")
        .await
        .unwrap();
    note(
        &h.call(s, SEND, email(ATTACKER, "INV-42"), Some(&declined))
            .await,
    );

    // Policy deny: the IBAN toward email.
    note(
        &h.call(
            s,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": iban}),
            None,
        )
        .await,
    );

    // Executor rejections through the two-phase API.
    let args = email(APPROVER, "two-phase");
    let p = h.preview(s, SEND, args.clone()).await.unwrap();
    let q = h.preview(s, SEND, email(APPROVER, "other")).await.unwrap();
    note(&h.commit(s, SEND, args.clone(), &p.action_id, None).await);
    note(
        &h.commit(s, SEND, args.clone(), &p.action_id, Some("sca1.x.y"))
            .await,
    );
    note(
        &h.commit(
            s,
            SEND,
            args.clone(),
            &p.action_id,
            Some(&flip_mac(&p.artifact)),
        )
        .await,
    );
    note(
        &h.commit(s, SEND, args.clone(), &q.action_id, Some(&p.artifact))
            .await,
    );
    note(
        &h.commit(
            s,
            SEND,
            email(ATTACKER, "two-phase"),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    let changed = h
        .gateway(
            h.store.clone(),
            &[(
                "x.cedar",
                "@id(\"x\")\nforbid (principal, action, resource) when { context.tool == \"zz\" };",
            )],
        )
        .await;
    note(
        &commit_on(
            &changed,
            s,
            SEND,
            args.clone(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    let now = h.clock.now();
    h.clock.set(now - h.config.limits.max_skew_ms - 1);
    note(
        &h.commit(s, SEND, args.clone(), &p.action_id, Some(&p.artifact))
            .await,
    );
    h.clock.set(now);
    let c = h.preview(s, SEND, finance.clone()).await.unwrap();
    note(
        &h.commit(s, SEND, finance.clone(), &c.action_id, Some(&c.artifact))
            .await,
    );
    let d = h
        .preview(
            s,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": iban}),
        )
        .await
        .unwrap();
    note(
        &h.commit(
            s,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": iban}),
            &d.action_id,
            Some(&d.artifact),
        )
        .await,
    );
    note(
        &h.commit(s, SEND, args.clone(), &p.action_id, Some(&p.artifact))
            .await,
    );
    note(
        &h.commit(s, SEND, args.clone(), &p.action_id, Some(&p.artifact))
            .await,
    );
    h.clock.advance(h.config.limits.artifact_ttl_ms + 1);
    note(
        &h.commit(
            s,
            SEND,
            email(APPROVER, "other"),
            &q.action_id,
            Some(&q.artifact),
        )
        .await,
    );

    // Handles: guessed, foreign, revoked.
    note(
        &h.call(
            s,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": format!("hdl_em_{}", "b".repeat(32))}),
            None,
        )
        .await,
    );
    let other_session = h.open_session("mallory").await;
    note(
        &h.call(&other_session, SEND, with_contact.clone(), None)
            .await,
    );
    h.gw.revoke_handle(s, &HandleId(contact.clone()))
        .await
        .unwrap();
    note(&h.call(s, SEND, with_contact, None).await);

    // Bad input and broken upstreams.
    note(&h.call(s, "office__nope", json!({}), None).await);
    note(
        &h.call(
            s,
            SEND,
            json!({"to": APPROVER, "subject": "x", "body": "a".repeat(2048)}),
            None,
        )
        .await,
    );
    note(
        &h.call(s, "test__count", json!({"n": (1u64 << 53) + 1}), None)
            .await,
    );
    note(&h.call(s, "test__hang", json!({}), None).await);
    note(&h.call(s, "test__crash", json!({}), None).await);
    let _ = h
        .call(s, "test__echo", json!({"text": "hello"}), None)
        .await;

    // Store outage.
    let lock = h.lock_store();
    note(&h.call(s, "test__count", json!({}), None).await);
    lock.release();
    note(&h.call(s, "test__count", json!({}), None).await);

    // Restart, then a replay of the approved action.
    let restarted = h.restarted().await;
    note(&call_on(&restarted, s, SEND, finance.clone(), Some(&approved)).await);

    // Every path was taken.
    for want in [
        "completed",
        "confirmation_required",
        "confirmation_denied",
        "confirmation_missing",
        "binding_mismatch",
        "replay",
        "handle_sink_forbidden",
        "artifact_missing",
        "artifact_malformed",
        "artifact_mac",
        "action_mismatch",
        "policy_changed",
        "artifact_not_yet_valid",
        "artifact_expired",
        "decision_not_allow",
        "handle_unavailable",
        "unknown_tool",
        "invalid_arguments",
        "upstream_timeout",
        "upstream_error",
        "store_unavailable",
    ] {
        assert!(
            seen.contains(want),
            "path `{want}` not exercised; saw {seen:?}"
        );
    }
    // Effects: exactly the legitimate ones.
    let state = h.state();
    let to: Vec<&str> = state.sent.iter().map(|m| m.to.as_str()).collect();
    assert_eq!(to, [APPROVER, "finance@corp.example", APPROVER]);
    assert_eq!(state.sent[0].body, format!("Contact: {CONTACT}"));
    assert_eq!(state.payments.len(), 1);
    assert_eq!(state.payments[0].iban, IBAN);
    assert_eq!(state.drafts.len(), 1);
    assert_eq!(h.test.effects(), 1);

    // The audit log verifies and holds handles and digests only.
    let n = h.store.verify_audit().unwrap();
    assert!(n > 50, "only {n} audit records");
    let dump = h.audit_dump();
    assert_no_plaintext("audit log", &dump);
    assert!(dump.contains(&iban), "audit records name handles");
    let records: Vec<Value> = serde_json::from_str(&dump).unwrap();
    let kinds: BTreeSet<String> = records
        .iter()
        .filter_map(|r| r["event"]["kind"].as_str().map(str::to_owned))
        .collect();
    for kind in [
        "session",
        "read",
        "preview",
        "decision",
        "commit",
        "denial",
        "confirmation",
        "handle_issue",
        "handle_resolve",
        "handle_revoke",
    ] {
        assert!(
            kinds.contains(kind),
            "no `{kind}` audit record; kinds: {kinds:?}"
        );
    }
    let denials: BTreeSet<String> = records
        .iter()
        .filter_map(|r| r["event"]["reason"].as_str().map(str::to_owned))
        .collect();
    for reason in [
        "replay",
        "binding_mismatch",
        "upstream_timeout",
        "handle_unavailable",
    ] {
        assert!(
            denials.contains(reason),
            "no audited `{reason}`: {denials:?}"
        );
    }

    // Nor anywhere in the database files (the vault is encrypted at rest).
    drop(restarted);
    h.store.checkpoint().ok();
    for entry in std::fs::read_dir(h.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("secureclaw.db") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for secret in PROTECTED {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "`{secret}` found in clear in {name}"
            );
        }
    }
    let _ = ActionId(String::new());
    let _ = ReasonCode::Internal;
}
