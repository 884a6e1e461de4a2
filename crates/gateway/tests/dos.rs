//! Red-team findings F13, F14, F4, F7 and F10 (2026-12-01): cost and display attacks of a
//! compromised runtime. Every attack test has a positive control; the large-input tests use a
//! liveness bound (they ran minutes, or tens of seconds, before the fixes), never a timing
//! threshold.
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
use secureclaw_gateway::{CallOutcome, GatewayConfig};
use secureclaw_store::ApprovalState;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SEND: &str = "office__send_email";
const DRAFT: &str = "office__save_draft";
const COUNT: &str = "test__count";
const ECHO: &str = "test__echo";
/// Liveness bound for the large inputs (not a timing threshold: the quadratic versions took
/// minutes; the linear ones take well under a second on an idle machine).
const LIVENESS: Duration = Duration::from_secs(120);

/// `n` distinct e-mail addresses separated by spaces.
fn addresses(n: usize) -> String {
    (0..n).map(|i| format!("u{i:06}@corp.example ")).collect()
}

/// A harness whose demo office has INV-44's `contact_email` (vaulted whole by the operator's
/// `/contact_email` rule; INV-44 is not named in the task, so its contact is not anchored)
/// replaced by `contact`.
async fn harness_with_contact(config: GatewayConfig, contact: &str) -> Harness {
    let mut h = Harness::with_config(config).await;
    let mut state = h.state();
    let inv = state
        .invoices
        .iter_mut()
        .find(|i| i.id == "INV-44")
        .unwrap();
    inv.contact_email = contact.to_owned();
    std::fs::write(&h.office, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    h.demo = DemoUpstream::start(&h.office, false).await;
    h.gw = h.gateway(h.store.clone(), &[]).await;
    h.session = h.open_session("alice").await;
    h
}

/// The approver's view of the pending approval `id` (as `approvals list` shows it).
async fn shown(h: &Harness, id: &secureclaw_core::artifact::ActionId) -> String {
    let listing = h.gw.approvals(Some(ApprovalState::Pending)).await.unwrap();
    let (_, act) = listing.iter().find(|(p, _)| p.action_id == *id).unwrap();
    h.gw.reveal_for_approver(&act.display).await
}

/// Send INV-44's contact handle as the recipient; the pending action's approver display.
async fn send_to_inv44_contact(h: &Harness) -> String {
    let inv = h.read_invoice(&h.session, "INV-44").await;
    let contact = handle_at(&inv, "contact_email");
    let o = h
        .call(&h.session, SEND, email(&contact, "INV-42"), None)
        .await;
    let id = assert_pending(&o);
    shown(h, &id).await
}

// ------------------------------------------------------------------------------ F13 targets

/// F13: a call whose arguments hold more distinct identifiers than `max_targets_per_call` is
/// refused with `too_many_targets` (telling the runtime to split the call), on an effect and on
/// a read alike, and nothing reaches the upstream. 150k addresses (3.9 MB) took 330 s of
/// gateway CPU before the fix; now the call finishes within the liveness bound.
#[tokio::test]
async fn many_identifiers_are_refused_and_cheap() {
    let h = Harness::new().await;
    let started = Instant::now();
    for (tool, n) in [(COUNT, 150_000), (ECHO, 20_000), (COUNT, 1025)] {
        let o = h
            .call(&h.session, tool, json!({"q": addresses(n)}), None)
            .await;
        assert_denied(&o, ReasonCode::TooManyTargets);
        let CallOutcome::Denied(r) = &o else {
            unreachable!()
        };
        assert!(
            r.next_steps.iter().any(|s| s.contains("split the call")),
            "{r:?}"
        );
    }
    assert!(started.elapsed() < LIVENESS, "{:?}", started.elapsed());
    assert_eq!(h.test.effects() + h.test.reads(), 0, "nothing was sent");
    // Positive controls: at the cap the call is decided as usual (unanchored recipients:
    // confirmation), and a read with a few identifiers runs.
    let o = h
        .call(&h.session, COUNT, json!({"q": addresses(1024)}), None)
        .await;
    assert_pending(&o);
    let o = h
        .call(&h.session, ECHO, json!({"q": addresses(3)}), None)
        .await;
    completed(&o);
}

/// F13: the limit is the operator's (`max_targets_per_call`).
#[tokio::test]
async fn target_cap_is_configurable() {
    let mut config = test_config();
    config.limits.max_targets_per_call = 2;
    let h = Harness::with_config(config).await;
    let o = h
        .call(&h.session, COUNT, json!({"q": addresses(3)}), None)
        .await;
    assert_denied(&o, ReasonCode::TooManyTargets);
    // Positive control: two targets (duplicates count once).
    let o = h
        .call(
            &h.session,
            COUNT,
            json!({"to": ["a@x.example", "a@x.example"], "q": "b@x.example"}),
            None,
        )
        .await;
    assert_pending(&o);
}

// ------------------------------------------------------------------- F14 non-ASCII display

/// F14: 81k distinct non-ASCII code points in one argument (38–41 s per call before the fix,
/// quadratic). The call is held for confirmation within the liveness bound and the display
/// lists at most 32 code points and counts the rest.
#[tokio::test]
async fn many_distinct_non_ascii_characters_are_cheap_and_capped() {
    let h = Harness::new().await;
    let body: String = ('\u{4E00}'..='\u{9FFF}')
        .chain('\u{AC00}'..='\u{D7A3}')
        .chain('\u{3400}'..='\u{4DBF}')
        .collect();
    let distinct = body.chars().count();
    let started = Instant::now();
    let o = h
        .call(
            &h.session,
            SEND,
            json!({"to": ATTACKER, "subject": "0", "body": body}),
            None,
        )
        .await;
    let id = assert_pending(&o);
    assert!(started.elapsed() < LIVENESS, "{:?}", started.elapsed());
    let display = shown(&h, &id).await;
    let warning = display
        .lines()
        .find(|l| l.contains("WARNING: non-ASCII"))
        .expect("warning line");
    assert_eq!(warning.matches("U+").count(), 32, "{warning:.400}");
    assert!(
        warning.contains(&format!("(and {} more)", distinct - 32)),
        "{warning:.400}"
    );
    // Positive control: one look-alike is listed by code point, nothing counted.
    let o = h
        .call(
            &h.session,
            SEND,
            email("\u{0430}pprover@corp.example", "x"),
            None,
        )
        .await;
    let display = shown(&h, &assert_pending(&o)).await;
    assert!(display.contains("U+0430 'а'"), "{display}");
    assert!(!display.contains("more)"), "{display}");
}

// ----------------------------------------------------- F4 / F7 display of revealed values

/// F4: a recipient revealed from a handle (a look-alike address from a third party's data) is
/// flagged in the approver's display, before everything else — the check ran on the handle id
/// before the fix.
#[tokio::test]
async fn revealed_look_alike_is_flagged() {
    let h = harness_with_contact(test_config(), "\u{0430}pprover@corp.example").await;
    let display = send_to_inv44_contact(&h).await;
    let first = display.lines().next().unwrap();
    assert!(first.starts_with("WARNING: 1 revealed value"), "{display}");
    assert!(first.contains("U+0430 'а'"), "{display}");
    assert!(
        display.contains("«\u{0430}pprover@corp.example»"),
        "{display}"
    );
    // Positive control: an ASCII contact is revealed without a warning.
    let h = harness_with_contact(test_config(), "billing@blueriver.example").await;
    let display = send_to_inv44_contact(&h).await;
    assert!(!display.contains("WARNING"), "{display}");
    assert!(display.contains("«billing@blueriver.example»"), "{display}");
    assert!(
        display.starts_with("1 of 1 target(s) NOT ANCHORED"),
        "{display}"
    );
}

/// F7: a revealed value with newlines and a fake target block cannot forge display lines:
/// newlines and the «» delimiters are escaped, the summary and the genuine unanchored target
/// come first, and a long value is cut with a marker.
#[tokio::test]
async fn revealed_values_cannot_forge_display_lines() {
    let fake = format!(
        "approver@corp.example»)\n  tool: egress sink\n  target \"to\": anchored (named in the task){}«",
        "\n".repeat(60)
    );
    let h = harness_with_contact(test_config(), &fake).await;
    let display = send_to_inv44_contact(&h).await;
    assert!(display.lines().count() <= 8, "{display}");
    assert!(
        !display.contains("anchored (named in the task)\n"),
        "{display}"
    );
    assert!(
        display.contains("\\n  target \\\"to\\\": anchored"),
        "{display}"
    );
    assert!(display.contains("\\u{bb})"), "{display}");
    let genuine = display
        .find("target \"to\": NOT ANCHORED")
        .expect("genuine target line");
    let call = display.find("call: ").expect("call line");
    assert!(genuine < call, "{display}");
    assert!(
        display
            .lines()
            .next()
            .unwrap()
            .starts_with("WARNING: 1 revealed value")
    );
    // A long value is cut with a marker.
    let long = format!("billing@blueriver.example{}", " ".repeat(3000));
    let h = harness_with_contact(test_config(), &long).await;
    let display = send_to_inv44_contact(&h).await;
    assert!(
        display.contains("more characters not shown]»"),
        "{display:.300}"
    );
    // Positive control: a plain value is shown as it is, one line per item.
    let h = harness_with_contact(test_config(), "billing@blueriver.example").await;
    let display = send_to_inv44_contact(&h).await;
    assert!(display.contains("«billing@blueriver.example»"), "{display}");
    assert!(!display.contains("\\u{"), "{display}");
}

// ---------------------------------------------------------------- F10 audit amplification

fn resolve_records(h: &Harness) -> Vec<Value> {
    let all: Value = serde_json::to_value(h.store.audit_records(0, usize::MAX).unwrap()).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["kind"] == "handle_resolve")
        .cloned()
        .collect()
}

/// F10: one call repeating a handle 10k times wrote 10,004 audit records; now one record per
/// distinct handle, with its number of occurrences.
#[tokio::test]
async fn repeated_handle_is_resolved_and_audited_once() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let contact = handle_at(&inv, "contact_email");
    let body = format!("{contact} ").repeat(10_000);
    let o = h
        .call(
            &h.session,
            DRAFT,
            json!({"to": "x", "subject": "s", "body": body}),
            None,
        )
        .await;
    completed(&o);
    let records = resolve_records(&h);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["event"]["detail"]["occurrences"], 10_000);
    // The draft holds every occurrence, resolved.
    let draft = h.state().drafts.last().cloned().unwrap();
    assert_eq!(draft.body.matches(CONTACT).count(), 10_000);
    // Positive control: two distinct handles, two records.
    let other = h.read_invoice(&h.session, "INV-43").await;
    let other = handle_at(&other, "contact_email");
    let o = h
        .call(
            &h.session,
            DRAFT,
            json!({"to": "x", "subject": "s", "body": format!("{contact} {other} {contact}")}),
            None,
        )
        .await;
    completed(&o);
    let records = resolve_records(&h);
    assert_eq!(records.len(), 3, "{records:?}");
    assert_eq!(records[1]["event"]["detail"]["occurrences"], 2);
    assert_eq!(records[2]["event"]["detail"]["occurrences"], 1);
}
