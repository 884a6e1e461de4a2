//! Regression tests for bugs found by fuzzing (FUZZING.md) and by the property tests. Each
//! replays the crashing input kept under `fuzz/regressions/` on stable, with the invariant the
//! fuzz target checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use secureclaw_core::detect::{IdentifierKind, detect};
use secureclaw_core::summary::{SummaryConfig, summarize, summarize_text};
use serde_json::Value;

const TOKEN: &str = "\u{2983}T\u{2984}";

/// What the `summary` fuzz target does with an input: two configuration bytes, then JSON or
/// text. Returns every output string.
fn replay_summary(data: &[u8]) -> Vec<String> {
    let [entries, chars, rest @ ..] = data else {
        panic!("short input");
    };
    let cfg = SummaryConfig {
        max_entries: usize::from(*entries % 12),
        max_string_chars: usize::from(*chars) * 4 + 1,
        ..SummaryConfig::default()
    };
    if let Ok(value) = serde_json::from_slice::<Value>(rest) {
        let s = summarize(&value, &cfg, &|_| None, &mut |_| TOKEN.to_owned());
        let mut out = Vec::new();
        collect(&s.value, &mut out);
        out
    } else {
        let text = String::from_utf8_lossy(rest);
        vec![summarize_text(&text, &cfg, &mut |_| TOKEN.to_owned()).0]
    }
}

fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        Value::Object(map) => {
            for (k, i) in map {
                out.push(k.clone());
                collect(i, out);
            }
        }
        _ => {}
    }
}

fn covered(text: &str, value: &str) -> bool {
    let start = text.find(value).unwrap();
    let end = start + value.len();
    detect(text)
        .iter()
        .any(|f| f.start <= start && f.end >= end)
}

fn assert_nothing_survives(outputs: &[String]) {
    for s in outputs {
        let found: Vec<_> = detect(s)
            .iter()
            .map(|f| s.get(f.range()).map(str::to_owned))
            .collect();
        assert!(
            found.is_empty(),
            "identifier survived D: {found:?} in {s:?}"
        );
    }
}

/// Bug 1 (fuzz target `summary`): a phone number followed by more digit groups — here a card
/// number — was missed: the greedy phone candidate spanned both, had more than 15 digits and
/// was rejected as a whole, so the phone number reached the runtime in clear text.
#[test]
fn regression_phone_followed_by_digit_groups_is_detected() {
    let input = include_bytes!("../../../fuzz/regressions/summary-phone-before-card");
    let out = replay_summary(input);
    assert!(!out.concat().contains("+49 30 1234567"), "{out:?}");
    assert_nothing_survives(&out);

    // Covered (here merged with the card that follows it into one finding).
    let t = "call +49 30 1234567 4111 1111 1111 1111 now";
    assert!(covered(t, "+49 30 1234567"), "{:?}", detect(t));
    assert!(covered(t, "4111 1111 1111 1111"), "{:?}", detect(t));
    let t = "call +49 30 1234567 22 33 44 55 now";
    assert!(covered(t, "+49 30 1234567"), "{:?}", detect(t));
    // Two national numbers in a row are both found.
    let t = "call 030 1234567 0301234567 today";
    let phones: Vec<&str> = detect(t)
        .iter()
        .filter(|f| f.kind == IdentifierKind::Phone)
        .map(|f| t.get(f.range()).unwrap())
        .collect();
    assert_eq!(phones, ["030 1234567", "0301234567"], "{t}");
}

/// Bug 2 (fuzz target `summary`): a phone number right after digits glued to a word
/// (`ex234567 4111 1111 1566 1`, `ref x7 030 1234567`) was missed: the leftmost candidate
/// started inside the word, was rejected for its left context, and scanning resumed after the
/// whole candidate. Once D replaced the neighbouring e-mail by a token, the detectors found the
/// number in D's own output.
#[test]
fn regression_phone_after_glued_digits_is_detected() {
    let input = include_bytes!("../../../fuzz/regressions/summary-phone-after-glued-digits");
    let out = replay_summary(input);
    assert!(!out.concat().contains("4111 1111 1566 1"), "{out:?}");
    assert_nothing_survives(&out);

    let t = "ref x7 030 1234567 today";
    let phones: Vec<&str> = detect(t)
        .iter()
        .filter(|f| f.kind == IdentifierKind::Phone)
        .map(|f| t.get(f.range()).unwrap())
        .collect();
    assert_eq!(phones, ["030 1234567"], "{t}");
}

/// Bug 3 (fuzz target `summary`): an international number glued to the digits before it
/// (`+49 30 1234+44 20 7946`) was rejected for its left context; a `+` starts a new number.
#[test]
fn regression_plus_number_glued_to_previous_is_detected() {
    let input = include_bytes!("../../../fuzz/regressions/summary-phone-glued-plus");
    let out = replay_summary(input);
    assert!(!out.concat().contains("+44 20 7946"), "{out:?}");
    assert_nothing_survives(&out);
    for t in ["call +49 30 1234+44 20 7946 now", "Tel+44 20 7946 0958"] {
        assert!(
            detect(t).iter().any(|f| f.kind == IdentifierKind::Phone
                && t.get(f.range()).is_some_and(|p| p.starts_with("+44"))),
            "{t}: {:?}",
            detect(t)
        );
    }
}
