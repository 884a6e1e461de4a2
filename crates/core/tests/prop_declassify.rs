//! Property tests for the read path's declassification (SecureClaw paper §3.2–§3.3): random
//! records carrying detector-triggering values (e-mails, IBANs, card numbers, phone numbers,
//! URLs, API keys), credential-named fields and operator-labelled fields go through the
//! summary operator D with handle substitution (each protected value vaulted under a real
//! handle id, as the gateway's declassifier does); no planted value may appear in what the
//! runtime would see.
//!
//! Case counts: `PROPTEST_CASES` overrides the defaults below.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod prop_support;

use prop_support::{config, operator_label, planted_text, record, visible_text};
use proptest::prelude::*;
use secureclaw_core::handle::{HandleId, find_handles, mint_handle_id, substitute_handles};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::summary::{Protected, SummaryConfig, summarize, summarize_text};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::LazyLock;

static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut n = 3u8;
    KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_mul(41).wrapping_add(7);
            *x = n;
        }
    })
});

/// The vault side of one read: protected value → handle id (one handle per value per read,
/// as in the gateway), and handle id → value.
#[derive(Default)]
struct Vault {
    by_value: HashMap<String, HandleId>,
    by_handle: HashMap<HandleId, String>,
    seen: Vec<Protected>,
}

impl Vault {
    fn mint(&mut self, p: &Protected) -> String {
        self.seen.push(p.clone());
        if let Some(id) = self.by_value.get(&p.value) {
            return id.0.clone();
        }
        let n = u128::try_from(self.by_value.len()).unwrap();
        let kind = match &p.kind {
            secureclaw_core::summary::ProtectedKind::Identifier(k) => k.token_prefix(),
            secureclaw_core::summary::ProtectedKind::Field { .. } => "fld",
        };
        let id = mint_handle_id(&KEYS, kind, &n.to_le_bytes(), "sess", &format!("obj{n}")).unwrap();
        self.by_value.insert(p.value.clone(), id.clone());
        self.by_handle.insert(id.clone(), p.value.clone());
        id.0
    }
}

fn assert_no_leak(what: &str, out: &str, planted: &[String]) -> Result<(), TestCaseError> {
    for p in planted {
        prop_assert!(
            !out.contains(p.as_str()),
            "{} shows planted `{}`: {}",
            what,
            p,
            out
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1000))]

    /// Structured results: no planted value appears; every token in the output is a handle
    /// of this read; and when nothing was cut, every planted value went to the vault.
    #[test]
    fn structured_summary_never_shows_planted_values(
        rec in record(),
        max_entries in 1usize..10,
        max_chars in prop_oneof![Just(512usize), 8usize..200],
    ) {
        let cfg = SummaryConfig { max_entries, max_string_chars: max_chars, ..SummaryConfig::default() };
        let mut vault = Vault::default();
        let s = summarize(&rec.value, &cfg, &operator_label, &mut |p| vault.mint(p));
        let shown = visible_text(&s.value);
        assert_no_leak("summary", &shown, &rec.planted)?;
        // The text block the gateway derives from the same structured result.
        assert_no_leak("text block", &serde_json::to_string(&s.value).unwrap(), &rec.planted)?;
        // Handle substitution is the only way back: every handle in the output is one this
        // read minted.
        for (_, id) in find_handles(&s.value) {
            prop_assert!(vault.by_handle.contains_key(&id), "unknown handle {id} in output");
        }
        if !s.truncated {
            for p in &rec.planted {
                prop_assert!(
                    vault.seen.iter().any(|v| v.value.contains(p.as_str())),
                    "`{}` neither shown nor vaulted", p
                );
            }
            // Resolving the handles (what only the executor may do) restores the values.
            let mut back = s.value.clone();
            substitute_handles::<()>(&mut back, &mut |id| Ok(vault.by_handle[id].clone())).unwrap();
            let restored = visible_text(&back);
            for p in &rec.planted {
                prop_assert!(restored.contains(p.as_str()), "`{}` not restorable", p);
            }
        }
    }

    /// Free-text blocks: identifiers planted in prose never appear.
    #[test]
    fn text_summary_never_shows_planted_values(
        parts in prop::collection::vec(planted_text(), 1..6),
        max_chars in prop_oneof![Just(512usize), 8usize..300],
    ) {
        let cfg = SummaryConfig { max_string_chars: max_chars, ..SummaryConfig::default() };
        let text: String = parts.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join("\n");
        let planted: Vec<String> = parts.iter().flat_map(|(_, p)| p.iter().cloned()).collect();
        let mut vault = Vault::default();
        let (out, cut) = summarize_text(&text, &cfg, &mut |p| vault.mint(p));
        assert_no_leak("text summary", &out, &planted)?;
        if !cut {
            for p in &planted {
                prop_assert!(vault.seen.iter().any(|v| v.value.contains(p.as_str())), "`{}` not vaulted", p);
            }
        }
    }

    /// D is deterministic: same input, same minted tokens → byte-identical output.
    #[test]
    fn summary_is_deterministic(rec in record()) {
        let cfg = SummaryConfig::default();
        let mut a = Vault::default();
        let mut b = Vault::default();
        let x = summarize(&rec.value, &cfg, &operator_label, &mut |p| a.mint(p));
        let y = summarize(&rec.value, &cfg, &operator_label, &mut |p| b.mint(p));
        prop_assert_eq!(x.value, y.value);
        prop_assert_eq!(a.seen, b.seen);
    }
}

#[test]
fn record_generator_plants_values() {
    // Non-vacuity: the generator really produces planted values of every family, and the
    // leak check really fires on an unprotected rendering.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut total = 0;
    for _ in 0..50 {
        let rec = record().new_tree(&mut runner).unwrap().current();
        total += rec.planted.len();
        let raw = visible_text(&rec.value);
        for p in &rec.planted {
            assert!(raw.contains(p.as_str()), "planted `{p}` not in the record");
        }
    }
    assert!(total > 50, "too few planted values: {total}");
    let _ = Value::Null;
}
