//! Fuzz the canonicalizer (`crates/core/src/canonical.rs`): arbitrary bytes parsed as JSON
//! become the arguments of a canonical request.
//!
//! Invariants checked (a violation aborts):
//! - no panic, whatever the input (deep nesting, huge numbers, odd strings);
//! - canonical bytes are valid UTF-8 JSON, and canonicalization is idempotent: parsing the
//!   canonical arguments back and canonicalizing again gives the same bytes;
//! - the value round-trips: the re-parsed arguments equal the input as JSON values (numbers
//!   as doubles) — so two different calls cannot share canonical bytes through the number or
//!   string encoding;
//! - a rejected value is rejected for a reason `validate_value` agrees with.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secureclaw_core::canonical::{
    CanonicalRequest, Inputs, Intent, RequestContext, validate_value,
};
use serde_json::{Map, Value};

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn request(arguments: Map<String, Value>) -> CanonicalRequest {
    CanonicalRequest {
        intent: Intent {
            upstream: "up".into(),
            tool: "tool".into(),
        },
        caller: "caller".into(),
        session: "session".into(),
        inputs: Inputs {
            arguments,
            handles: vec![],
        },
        ctx: RequestContext {
            destination: "dest".into(),
            task_digest: "t".into(),
            policy_digest: "p".into(),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let arguments = match value {
        Value::Object(map) => map,
        other => {
            let mut m = Map::new();
            m.insert("v".into(), other);
            m
        }
    };
    let req = request(arguments.clone());
    let validated = validate_value(&Value::Object(arguments.clone()));
    let bytes = match req.canonical_bytes() {
        Ok(b) => b,
        Err(_) => {
            assert!(
                validated.is_err(),
                "canonical_bytes failed but validate_value accepted"
            );
            return;
        }
    };
    assert!(
        validated.is_ok(),
        "validate_value rejected what canonical_bytes accepted"
    );
    let text = std::str::from_utf8(&bytes).expect("canonical bytes are UTF-8");
    let parsed: Value = serde_json::from_str(text).expect("canonical bytes are JSON");
    let args_back = parsed
        .get("inputs")
        .and_then(|i| i.get("arguments"))
        .and_then(Value::as_object)
        .cloned()
        .expect("arguments present");
    assert!(
        same(
            &Value::Object(arguments.clone()),
            &Value::Object(args_back.clone())
        ),
        "arguments do not round-trip through canonical bytes"
    );
    let again = request(args_back)
        .canonical_bytes()
        .expect("re-canonicalize");
    assert_eq!(again, bytes, "canonicalization is not idempotent");
});
