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
