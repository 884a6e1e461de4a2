//! Red-team finding F4 (HIGH), as a class: a granted financial effect's amounts are found
//! fail-closed. An amount that is not a plain number (`5,000.00`, `EUR 50000`, `99,999.00`)
//! cannot be compared with the task's ceiling or with the read's amount, so it needs a human
//! (`amount_unanchored`); a number or money-looking string in any field that is not an object
//! id or a target (`value`, `reference`, nested) is an amount too. Positive controls: the
//! read's own amount runs (as written, or spelled as a decimal), and text without digits in
//! another field is not an amount.
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
use secureclaw_gateway::CallOutcome;
use serde_json::{Value, json};

const PAY: &str = "office__pay_invoice";
const AMOUNT: u64 = 129_900;

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

async fn display(h: &Harness, id: &ActionId) -> String {
    h.store.action(id).unwrap().unwrap().display
}

/// The granted payment with `amount` under `amount_cents` and `extra` fields beside it.
fn pay(iban: &str, amount: Value, extra: Value) -> Value {
    let mut v = json!({"invoice_id": "INV-42", "iban": iban, "amount_cents": amount});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test]
async fn amounts_that_are_not_plain_numbers_or_not_named_amount_need_a_human() {
    let h = Harness::new().await;
    // With a ceiling (the report's `max_amount: 200` case, in cents) and without one (`#*`).
    for (grants, max) in [
        (vec![PAY], Some(200_000)),
        (vec!["office__pay_invoice#*"], None),
    ] {
        let attacks = [
            (json!("5,000.00"), json!({})),
            (json!("EUR 50000"), json!({})),
            (json!("99,999.00"), json!({})),
            (json!("5000 USD"), json!({})),
            (json!("1e9"), json!({})),
            (json!("five thousand"), json!({})),
            (json!(AMOUNT), json!({"value": 999_999})),
            (json!(AMOUNT), json!({"reference": "99,999.00"})),
            (json!(AMOUNT), json!({"transfer": {"sum": "EUR 50000"}})),
            (json!(AMOUNT), json!({"fx": [9_999_999.5]})),
        ];
        for (amount, extra) in attacks {
            let s = pay_session(&h, &grants, max).await;
            let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
            let o = h
                .call(&s, PAY, pay(&iban, amount.clone(), extra.clone()), None)
                .await;
            let id = assert_pending(&o);
            let shown = display(&h, &id).await;
            assert!(
                shown.contains("(amount_unanchored)") || shown.contains("(amount_over_ceiling)"),
                "{amount} {extra} {max:?}: {shown}"
            );
            if !amount.is_u64() {
                assert!(shown.contains("(amount_unanchored)"), "{amount}: {shown}");
            }
        }
    }
    assert_eq!(h.payments(), 0, "nothing was paid without a human");
}

#[tokio::test]
async fn the_reads_own_amount_still_runs() {
    let h = Harness::new().await;
    // As the read returned it (a number), and spelled as a decimal (canonical form).
    for amount in [json!(AMOUNT), json!(129_900.0)] {
        let s = pay_session(&h, &[PAY], None).await;
        let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
        completed(&h.call(&s, PAY, pay(&iban, amount, json!({})), None).await);
    }
    assert_eq!(h.payments(), 2);
    // Under a ceiling above it.
    let s = pay_session(&h, &[PAY], Some(200_000)).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    completed(
        &h.call(&s, PAY, pay(&iban, json!(AMOUNT), json!({})), None)
            .await,
    );
    assert_eq!(h.payments(), 3);
    // A memo without digits (and a currency code) is not an amount: the gateway dispatches the
    // call (the demo upstream then refuses unknown fields, so nothing is paid).
    let s = pay_session(&h, &[PAY], None).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    let o = h
        .call(
            &s,
            PAY,
            pay(
                &iban,
                json!(AMOUNT),
                json!({"memo": "thanks for the quick turnaround", "currency": "EUR"}),
            ),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
}

async fn session_for(h: &Harness, request: &str) -> SessionRecord {
    h.gw.open_session(
        "payer",
        TaskEnvelope {
            request: request.into(),
            granted_tools: vec![PAY.to_owned()],
            ..TaskEnvelope::default()
        },
    )
    .await
    .unwrap()
}

/// Red-team R5b and R5c, as a class: an amount the task text names covers a payment only as
/// money, in the payment's unit and currency. An identifier glued to or beside a currency
/// code is not money; `EUR 50` is not 50 cents; `USD 500.00` does not cover a payment in
/// EUR. Positive controls: the same payments with the amount named as money, in cents or in
/// major units, in the payment's currency, go through without a human.
#[tokio::test]
async fn named_amounts_hold_only_as_money_in_the_payments_unit_and_currency() {
    let h = Harness::new().await;
    // (task text, amount_cents, extra fields): each must wait for a human.
    let attacks = [
        ("Pay invoice INV-42 (ref EUR998877).", 998_877, json!({})),
        (
            "Pay invoice INV-42, order no. 998877 EUR.",
            998_877,
            json!({}),
        ),
        ("Pay invoice INV-42, ref EUR 998877.", 99_887_700, json!({})),
        ("Pay invoice INV-42 (#998877 EUR).", 998_877, json!({})),
        ("Pay EUR 50 for invoice INV-42.", 50, json!({})),
        // 500 cents cover `amount_cents: 500`, not an `amount` of 500 beside it.
        (
            "Pay 500 cents for invoice INV-42.",
            500,
            json!({"amount": 500}),
        ),
        (
            "Pay USD 500.00 for invoice INV-42.",
            50_000,
            json!({"currency": "EUR"}),
        ),
        (
            "Pay $500.00 for invoice INV-42.",
            50_000,
            json!({"currency": "EUR"}),
        ),
    ];
    for (task, cents, extra) in attacks {
        let s = session_for(&h, task).await;
        let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
        let o = h
            .call(&s, PAY, pay(&iban, json!(cents), extra.clone()), None)
            .await;
        let id = assert_pending(&o);
        let shown = display(&h, &id).await;
        assert!(shown.contains("(amount_unanchored)"), "{task}: {shown}");
    }
    assert_eq!(h.payments(), 0, "nothing was paid without a human");
    // Positive controls: named as money, in the payment's unit and currency.
    let controls = [
        ("Pay EUR 500.00 for invoice INV-42.", 50_000, json!({})),
        ("Pay EUR 500 for invoice INV-42.", 50_000, json!({})),
        ("Pay 50000 cents for invoice INV-42.", 50_000, json!({})),
        ("Pay €0.50 for invoice INV-42.", 50, json!({})),
    ];
    for (task, cents, extra) in controls {
        let s = session_for(&h, task).await;
        let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
        completed(&h.call(&s, PAY, pay(&iban, json!(cents), extra), None).await);
    }
    assert_eq!(h.payments(), 4);
    // In the named currency the gateway dispatches the call (the demo upstream then refuses
    // the unknown `currency` field, so nothing more is paid).
    let s = session_for(&h, "Pay USD 500.00 for invoice INV-42.").await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    let o = h
        .call(
            &s,
            PAY,
            pay(&iban, json!(50_000), json!({"currency": "USD"})),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
}

/// The payment of invoice `invoice` by the IBAN handle `iban`, `amount_cents` and extras.
fn pay_for(invoice: &str, iban: &str, cents: u64, extra: Value) -> Value {
    let mut v = pay(iban, json!(cents), extra);
    v["invoice_id"] = json!(invoice);
    v
}

async fn granted(h: &Harness, request: &str, grant: &str, max: Option<u64>) -> SessionRecord {
    h.gw.open_session(
        "payer",
        TaskEnvelope {
            request: request.into(),
            granted_tools: vec![grant.to_owned()],
            max_amount: max,
            ..TaskEnvelope::default()
        },
    )
    .await
    .unwrap()
}

async fn held_for(h: &Harness, o: &CallOutcome, reason: &str) {
    let id = assert_pending(o);
    let shown = display(h, &id).await;
    assert!(shown.contains(&format!("({reason})")), "{reason}: {shown}");
}

/// Red-team H3, H4, M2 and M3, as a class: what covers a granted payment's amount is the
/// amount the task or the paid object's own read names, once per object, in the ceiling's
/// unit. A limit in the task text is not an amount; another invoice's amount, or a line item
/// nested in the read, does not pay this invoice; a grant of two payments pays two objects,
/// not one twice; a ceiling in cents holds a field in major units. Positive controls beside
/// each.
#[tokio::test]
async fn amounts_are_the_paid_objects_own_once_per_object_in_the_ceilings_unit() {
    let h = Harness::new().await;
    // H3: "unless it is over EUR 5,000.00" names a limit, not a payment of 5,000.
    let s = granted(
        &h,
        "Pay invoice INV-42 from ACME unless it is over EUR 5,000.00",
        PAY,
        None,
    )
    .await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    held_for(
        &h,
        &h.call(&s, PAY, pay_for("INV-42", &iban, 500_000, json!({})), None)
            .await,
        "amount_unanchored",
    )
    .await;
    completed(
        &h.call(&s, PAY, pay_for("INV-42", &iban, AMOUNT, json!({})), None)
            .await,
    );
    assert_eq!(h.payments(), 1);

    // H4: INV-42's amount does not pay INV-43 (both read, both anchored).
    let s = granted(
        &h,
        "Pay invoice INV-43 from Northwind. Do not pay INV-42, it is disputed.",
        PAY,
        None,
    )
    .await;
    h.read_invoice(&s, "INV-42").await;
    let read43 = h.read_invoice(&s, "INV-43").await;
    let iban43 = handle_at(&read43, "iban");
    held_for(
        &h,
        &h.call(&s, PAY, pay_for("INV-43", &iban43, AMOUNT, json!({})), None)
            .await,
        "amount_unanchored",
    )
    .await;
    // INV-43's own amount (the demo upstream's seeded invoice).
    let own = 48_750;
    completed(
        &h.call(&s, PAY, pay_for("INV-43", &iban43, own, json!({})), None)
            .await,
    );
    assert_eq!(h.payments(), 2);

    // M2: a grant of two payments pays INV-42 once, then INV-43, never INV-42 twice.
    let s = granted(
        &h,
        "Pay invoices INV-42 and INV-43",
        &format!("{PAY}#2"),
        None,
    )
    .await;
    let iban42 = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    let iban43 = handle_at(&h.read_invoice(&s, "INV-43").await, "iban");
    completed(
        &h.call(&s, PAY, pay_for("INV-42", &iban42, AMOUNT, json!({})), None)
            .await,
    );
    held_for(
        &h,
        &h.call(&s, PAY, pay_for("INV-42", &iban42, AMOUNT, json!({})), None)
            .await,
        "grant_exhausted",
    )
    .await;
    completed(
        &h.call(&s, PAY, pay_for("INV-43", &iban43, own, json!({})), None)
            .await,
    );
    assert_eq!(h.payments(), 4);

    // M3: a ceiling of 150000 (cents) holds an `amount` of 150000 in major units; 1,500.00 in
    // major units is at the ceiling (dispatched: the demo upstream then refuses the field).
    let s = granted(&h, "Pay invoice INV-42.", PAY, Some(150_000)).await;
    let iban = handle_at(&h.read_invoice(&s, "INV-42").await, "iban");
    held_for(
        &h,
        &h.call(
            &s,
            PAY,
            pay_for("INV-42", &iban, AMOUNT, json!({"amount": 150_000})),
            None,
        )
        .await,
        "amount_over_ceiling",
    )
    .await;
    let o = h
        .call(
            &s,
            PAY,
            pay_for("INV-42", &iban, AMOUNT, json!({"amount": 1_500})),
            None,
        )
        .await;
    assert!(matches!(o, CallOutcome::Completed { .. }), "{o:?}");
    assert_eq!(h.payments(), 4);
}
