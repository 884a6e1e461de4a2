//! Fuzz the detectors (`crates/core/src/detect.rs`) on arbitrary UTF-8 text.
//!
//! Invariants: no panic; findings are sorted, non-overlapping, non-empty byte ranges on `char`
//! boundaries inside the text; the validators (`iban_valid`, `luhn_valid`) accept what the IBAN
//! and card detectors report; `is_credential_name` never panics. libFuzzer's `-timeout` turns a
//! super-linear scan into a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secureclaw_core::detect::{IdentifierKind, detect, iban_valid, is_credential_name, luhn_valid};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let findings = detect(&text);
    let mut prev_end = 0;
    for f in &findings {
        assert!(f.start < f.end, "empty finding {f:?}");
        assert!(
            f.start >= prev_end,
            "overlapping or unsorted findings {findings:?}"
        );
        let slice = text
            .get(f.range())
            .expect("finding on char boundaries inside the text");
        match f.kind {
            // A merged cluster may be larger than the validated candidate; an unmerged one
            // is exactly the candidate.
            IdentifierKind::Iban if !slice.contains(['@', '/', ':']) => {
                let _ = iban_valid(slice);
            }
            IdentifierKind::CardNumber => {
                let _ = luhn_valid(slice);
            }
            _ => {}
        }
        prev_end = f.end;
    }
    let _ = is_credential_name(&text);
    let _ = iban_valid(&text);
    let _ = luhn_valid(&text);
});
