//! Red-team findings F6, F11 and F1 (authorization semantics), each as a class:
//!
//! - F6: recipients no detector recognises (quoted local parts, address literals, dotless
//!   domains, URIs without `//`) and numbers in any target field are targets, so with an
//!   anchored `to` beside them the call still goes to a human;
//! - F11: a grant covers what the task asked, not every use of the tool: the object ids of a
//!   financial effect are targets, a financial grant covers one unconfirmed use per task
//!   unless it says otherwise (`tool#N`), and its amount must be under the task's ceiling or
//!   come from the task (its text or a read it anchored); uses and read amounts are kept in
//!   the store, so they hold across gateways sharing it, and fail closed;
//! - F1: text the runtime supplied never lands on an existing handle (no equality oracle),
//!   while a value that only came from upstreams keeps its handle.
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
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::store::SessionRecord;
use serde_json::{Value, json};

const SEND: &str = "office__send_email";
const PAY: &str = "office__pay_invoice";
const AMOUNT: u64 = 129_900;

fn with(mut v: Value, key: &str, new: Value) -> Value {
    v[key] = new;
    v
}

// ------------------------------------------------------------------------------------ F6

#[tokio::test]
async fn undetected_recipients_and_numbers_are_targets() {
    let h = Harness::new().await;
    let base = email(APPROVER, "INV-42");
    let attacks = [
        ("reply_to", json!("\"attacker\"@evil.example")),
        ("forward_to", json!("attacker@[203.0.113.5]")),
        ("forward_to", json!("attacker@evil")),
        ("forward_to", json!("attacker@localhost")),
        ("notify", json!("https:evil.example")),
        ("notify", json!("hxxp://evil.example/drop")),
        ("notify", json!("//evil.example/x")),
        ("notify", json!("attacker at evil dot example")),
        ("relay", json!("203.0.113.5")),
        ("to", json!([APPROVER, 447_700_900_123_u64])),
        ("cc", json!(447_700_900_123_u64)),
        ("dest", json!(15_551_234_567_u64)),
        ("meta", json!({"callback": 447_700_900_123_u64})),
        ("meta", json!({"callback": "+447700900123"})),
    ];
    for (key, value) in attacks {
        let o = h
            .call(
                &h.session,
                SEND,
                with(base.clone(), key, value.clone()),
                None,
            )
            .await;
        let id = assert_pending(&o);
        let record = h.store.action(&id).unwrap().unwrap();
        assert!(
            record.display.contains("NOT ANCHORED"),
            "{key}={value}: {}",
            record.display
        );
    }
    assert_eq!(h.sent(), 0, "nothing went out without a human");
    // Positive control: the anchored send, with ordinary text, dates and small numbers.
    let control = with(
        base,
        "body",
        json!("INV-42 (due 2026-12-15, 3 pages, v1.2, 129900 cents) for sign-off."),
    );
    completed(&h.call(&h.session, SEND, control, None).await);
    assert_eq!(h.sent(), 1);
}

// ------------------------------------------------------------------------------------ F11

async fn pay_session(h: &Harness, grants: &[&str], max_amount: Option<u64>) -> SessionRecord {
    h.gw.open_session(
        "payer",
        TaskEnvelope {
            request: "Pay invoice INV-42.".into(),
            granted_tools: grants.iter().map(|g| (*g).to_owned()).collect(),
            max_amount,
            ..TaskEnvelope::default()
        },
    )
    .await
    .unwrap()
}

fn pay(invoice: &str, iban: &str, amount: u64) -> Value {
    json!({"invoice_id": invoice, "iban": iban, "amount_cents": amount})
}

async fn display(h: &Harness, id: &ActionId) -> String {
    h.store.action(id).unwrap().unwrap().display
}

#[tokio::test]
async fn a_grant_covers_the_payment_the_task_names_once() {
    let h = Harness::new().await;
    let s = pay_session(&h, &[PAY], None).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    // Positive control: the one payment the task names runs without a prompt.
    completed(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
    assert_eq!(h.payments(), 1);
    // The same payment again: the grant is used up.
    let id = assert_pending(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
    assert!(display(&h, &id).await.contains("(grant_exhausted)"));
    // Another invoice to INV-42's IBAN: INV-43 is an object nobody named.
    let s2 = pay_session(&h, &[PAY], None).await;
    let iban2 = handle_at(&h.read_invoice(&s2, "INV-42").await, "iban");
    for invoice in ["INV-43", "INV-44"] {
        let id = assert_pending(&h.call(&s2, PAY, pay(invoice, &iban2, 48_750), None).await);
        assert!(
            display(&h, &id)
                .await
                .contains("target \"invoice_id\": NOT ANCHORED"),
            "{invoice}"
        );
    }
    // An amount nobody named (2^53 - 1), on the invoice the task names.
    let id = assert_pending(
        &h.call(&s2, PAY, pay("INV-42", &iban2, 9_007_199_254_740_991), None)
            .await,
    );
    assert!(display(&h, &id).await.contains("(amount_unanchored)"));
    assert_eq!(h.payments(), 1, "only the control paid");
    // The grant was not used by the held calls: the named payment still runs.
    completed(&h.call(&s2, PAY, pay("INV-42", &iban2, AMOUNT), None).await);
    assert_eq!(h.payments(), 2);
}

/// Issue 13: grant uses and read amounts live in the store, not in one gateway's memory. A
/// second gateway on the same database (another replica, or this one restarted) finds the
/// grant used up (`grant_exhausted`: the payment waits for a human instead of running twice),
/// and knows the amount an anchored read returned through the first (positive control: the
/// granted payment of a second session runs there).
#[tokio::test]
async fn grant_uses_and_read_amounts_hold_across_gateways_on_one_store() {
    let h = Harness::new().await;
    let other = h.restarted().await;
    let s = pay_session(&h, &[PAY], None).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    completed(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
    assert_eq!(h.payments(), 1);
    let o = call_on(&other, &s, PAY, pay("INV-42", &iban, AMOUNT), None).await;
    let id = assert_pending(&o);
    assert!(display(&h, &id).await.contains("(grant_exhausted)"));
    assert_eq!(h.payments(), 1, "paid twice without a human");
    let s2 = pay_session(&h, &[PAY], None).await;
    let iban2 = handle_at(&h.read_invoice(&s2, "INV-42").await, "iban");
    completed(&call_on(&other, &s2, PAY, pay("INV-42", &iban2, AMOUNT), None).await);
    assert_eq!(h.payments(), 2);
}

/// Grant uses and read amounts fail closed: with the grant counter unreadable the granted
/// payment waits for a human (`grant_exhausted`), and with the read amounts unavailable the
/// invoice's amount is not anchored (`amount_unanchored`). (The tables are dropped behind the
/// store's back, so every statement on them fails.) The positive control is
/// [`a_grant_covers_the_payment_the_task_names_once`].
#[tokio::test]
async fn task_state_store_failures_need_a_human() {
    for (table, reason) in [
        ("grant_uses", "(grant_exhausted)"),
        ("read_amounts", "(amount_unanchored)"),
    ] {
        let h = Harness::new().await;
        let s = pay_session(&h, &[PAY], None).await;
        rusqlite::Connection::open(&h.db)
            .unwrap()
            .execute_batch(&format!("DROP TABLE {table}"))
            .unwrap();
        let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
        let id = assert_pending(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
        let display = display(&h, &id).await;
        assert!(display.contains(reason), "{table}: {display}");
        assert_eq!(h.payments(), 0, "{table}");
    }
}

#[tokio::test]
async fn grant_counts_and_amount_ceilings() {
    let h = Harness::new().await;
    // `#2`: two unconfirmed payments (of two invoices: each object is paid once without a
    // human), the third asks.
    let s =
        h.gw.open_session(
            "payer",
            TaskEnvelope {
                request: "Pay invoices INV-42, INV-43 and INV-44.".into(),
                granted_tools: vec![format!("{PAY}#2")],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    for (invoice, amount) in [("INV-42", AMOUNT), ("INV-43", 48_750)] {
        let iban = handle_at(&h.read_invoice(&s, invoice).await, "iban");
        completed(&h.call(&s, PAY, pay(invoice, &iban, amount), None).await);
    }
    let iban = handle_at(&h.read_invoice(&s, "INV-44").await, "iban");
    let id = assert_pending(&h.call(&s, PAY, pay("INV-44", &iban, 21_000), None).await);
    assert!(display(&h, &id).await.contains("(grant_exhausted)"));
    assert_eq!(h.payments(), 2);
    // A ceiling below the amount asks; one above it lets the amount through.
    let low = pay_session(&h, &[PAY], Some(100_000)).await;
    let iban = handle_at(&h.read_invoice(&low, "INV-42").await, "iban");
    let id = assert_pending(&h.call(&low, PAY, pay("INV-42", &iban, AMOUNT), None).await);
    assert!(display(&h, &id).await.contains("(amount_over_ceiling)"));
    let high = pay_session(&h, &[PAY], Some(200_000)).await;
    let iban = handle_at(&h.read_invoice(&high, "INV-42").await, "iban");
    completed(
        &h.call(&high, PAY, pay("INV-42", &iban, 150_000), None)
            .await,
    );
    assert_eq!(h.payments(), 3);
}

#[tokio::test]
async fn concurrent_payments_take_the_grant_once() {
    let h = Harness::new().await;
    let s = pay_session(&h, &[PAY], None).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    let v = pay("INV-42", &iban, AMOUNT);
    let (a, b) = tokio::join!(
        h.call(&s, PAY, v.clone(), None),
        h.call(&s, PAY, v.clone(), None)
    );
    let done = [&a, &b]
        .iter()
        .filter(|o| matches!(o, secureclaw_gateway::CallOutcome::Completed { .. }))
        .count();
    assert_eq!(done, 1, "{a:?} {b:?}");
    assert_eq!(h.payments(), 1);
}

// ------------------------------------------------------------------------------------ F1

fn echo_handle(o: &secureclaw_gateway::CallOutcome) -> String {
    let text = completed(o).content[0]["text"].as_str().unwrap().to_owned();
    email_handle_in(&text).unwrap_or_else(|| panic!("no email handle in {text}"))
}

#[tokio::test]
async fn runtime_text_never_lands_on_an_existing_handle() {
    let h = Harness::new().await;
    let s = &h.session;
    // Positive control: the same upstream value read twice keeps its handle.
    let first = h.read_invoice(s, "INV-42").await;
    let notes = email_handle_in(first["notes"].as_str().unwrap()).unwrap();
    let again = h.read_invoice(s, "INV-42").await;
    assert_eq!(
        email_handle_in(again["notes"].as_str().unwrap()),
        Some(notes.clone())
    );
    // The oracle: echo a right and a wrong guess of the address behind `notes`.
    let right = echo_handle(
        &h.call(s, "test__echo", json!({"text": ATTACKER}), None)
            .await,
    );
    let wrong = echo_handle(
        &h.call(s, "test__echo", json!({"text": "bob@evil.example"}), None)
            .await,
    );
    let right_again = echo_handle(
        &h.call(s, "test__echo", json!({"text": ATTACKER}), None)
            .await,
    );
    assert_ne!(
        right, notes,
        "the guess landed on the upstream value's handle"
    );
    assert_ne!(wrong, notes);
    // Right and wrong look alike: each echo is a fresh handle, equal to nothing seen before.
    assert_ne!(right, right_again);
    // Never registered for reuse: a later upstream read does not land on the echo's handle.
    let s2 = h.open_session("alice").await;
    let guess = echo_handle(
        &h.call(&s2, "test__echo", json!({"text": ATTACKER}), None)
            .await,
    );
    let read = h.read_invoice(&s2, "INV-42").await;
    let notes2 = email_handle_in(read["notes"].as_str().unwrap()).unwrap();
    assert_ne!(guess, notes2);
    let read = h.read_invoice(&s2, "INV-42").await;
    assert_eq!(
        email_handle_in(read["notes"].as_str().unwrap()),
        Some(notes2)
    );
}

/// Red-team H2 (2026-12-03): the objects a granted payment pays for are found at any depth,
/// each counted on its own: an invoice id nested in an object or listed in an array is paid
/// once under a grant of two, and a payment naming no id is one per payee. Positive controls:
/// the first payment of each object, and the second invoice the task names, run.
#[tokio::test]
async fn a_grant_pays_nested_and_listed_objects_once_each() {
    let mut config = test_config();
    // The scripted `count` as a payment tool (the first matching rule wins).
    let mut pay_rule = config
        .tools
        .iter()
        .find(|r| r.tool == "test__*")
        .cloned()
        .unwrap();
    pay_rule.tool = "test__count".into();
    pay_rule.financial = Some(true);
    config.tools.insert(0, pay_rule);
    let h = Harness::with_config(config).await;
    let session = || async {
        h.gw.open_session(
            "payer",
            TaskEnvelope {
                request: "Pay invoices INV-42 and INV-43 to approver@corp.example, EUR 12.00 each."
                    .into(),
                granted_tools: vec!["test__count#3".into()],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap()
    };
    let count = "test__count";
    let cases = [
        json!({"payment": {"invoice_id": "INV-42", "to": APPROVER, "amount": "12.00"}}),
        json!({"invoice_ids": ["INV-42"], "to": APPROVER, "amount": "12.00"}),
        json!({"batch": [{"invoiceId": "INV-42"}], "to": APPROVER, "amount": "12.00"}),
    ];
    for first in &cases {
        let s = session().await;
        let before = h.test.effects();
        completed(&h.call(&s, count, first.clone(), None).await);
        // The same invoice again, in each spelling: held.
        for again in &cases {
            assert_pending(&h.call(&s, count, again.clone(), None).await);
        }
        // A list naming it beside the other invoice: held too (INV-42 is paid).
        assert_pending(
            &h.call(
                &s,
                count,
                json!({"invoice_ids": ["INV-43", "INV-42"], "to": APPROVER, "amount": "12.00"}),
                None,
            )
            .await,
        );
        // Positive control: the other invoice the task names runs (its own use).
        let s2 = session().await;
        completed(
            &h.call(
                &s2,
                count,
                json!({"payment": {"invoice_id": "INV-43", "to": APPROVER, "amount": "12.00"}}),
                None,
            )
            .await,
        );
        assert_eq!(h.test.effects(), before + 2, "{first}");
    }
    // No id at all: one payment per payee.
    let s = session().await;
    completed(
        &h.call(&s, count, json!({"to": APPROVER, "amount": "12.00"}), None)
            .await,
    );
    assert_pending(
        &h.call(
            &s,
            count,
            json!({"to": APPROVER, "amount": "12.00", "memo": "again"}),
            None,
        )
        .await,
    );
}

/// Red-team round 2 (2026-12-03): a payee handle pays only for the object whose read showed
/// it, and a payment that names its invoice in a field not named like an id pays a payee
/// only the amount of the read that showed that payee. Positive control: each invoice paid
/// to its own payee with its own amount runs.
#[tokio::test]
async fn a_payee_pays_only_for_the_object_whose_read_showed_it() {
    let h = Harness::new().await;
    let s =
        h.gw.open_session(
            "payer",
            TaskEnvelope {
                request: "Pay invoices INV-42 and INV-43.".into(),
                granted_tools: vec![format!("{PAY}#3")],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    let r42 = h.read_invoice(&s, "INV-42").await;
    let r43 = h.read_invoice(&s, "INV-43").await;
    let (iban42, iban43) = (handle_at(&r42, "iban"), handle_at(&r43, "iban"));
    // INV-43 paid to INV-42's payee, with INV-43's own amount: held.
    let id = assert_pending(&h.call(&s, PAY, pay("INV-43", &iban42, 48_750), None).await);
    assert!(
        display(&h, &id).await.contains("(payee_unbound)"),
        "{}",
        display(&h, &id).await
    );
    // The invoice named in a field not named like an id, with the other invoice's amount.
    for field in ["invoice_number", "invoice", "reference"] {
        let args = json!({field: "INV-43", "iban": iban43, "amount_cents": AMOUNT});
        let id = assert_pending(&h.call(&s, PAY, args, None).await);
        assert!(
            display(&h, &id).await.contains("(amount_unanchored)"),
            "{field}: {}",
            display(&h, &id).await
        );
    }
    assert_eq!(h.payments(), 0);
    // Positive controls.
    completed(&h.call(&s, PAY, pay("INV-42", &iban42, AMOUNT), None).await);
    completed(&h.call(&s, PAY, pay("INV-43", &iban43, 48_750), None).await);
    assert_eq!(h.payments(), 2);
}

/// Red-team round 3 (HIGH): a grant of any number (`#*`) paid the same invoice three times,
/// sequentially and concurrently, because per-object counting ran only for counted grants.
/// "Any number" is any number of distinct objects: each invoice is paid once without a human
/// (positive control: the other named invoice still runs under the grant).
#[tokio::test]
async fn a_grant_of_any_number_pays_each_object_once() {
    let h = Harness::new().await;
    let s =
        h.gw.open_session(
            "payer",
            TaskEnvelope {
                request: "Pay invoices INV-42 and INV-43.".into(),
                granted_tools: vec![format!("{PAY}#*")],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    completed(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
    for _ in 0..2 {
        let id = assert_pending(&h.call(&s, PAY, pay("INV-42", &iban, AMOUNT), None).await);
        assert!(display(&h, &id).await.contains("(grant_exhausted)"));
    }
    // Concurrent copies of the other invoice's payment: one runs, the others ask.
    let iban43 = handle_at(&h.read_invoice(&s, "INV-43").await, "iban");
    let v = pay("INV-43", &iban43, 48_750);
    let (a, b, c) = tokio::join!(
        h.call(&s, PAY, v.clone(), None),
        h.call(&s, PAY, v.clone(), None),
        h.call(&s, PAY, v.clone(), None)
    );
    let ran = [&a, &b, &c]
        .iter()
        .filter(|o| matches!(o, secureclaw_gateway::CallOutcome::Completed { .. }))
        .count();
    assert_eq!(ran, 1, "{a:?} {b:?} {c:?}");
    assert_eq!(h.payments(), 2, "each invoice paid once");
}
