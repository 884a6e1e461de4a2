//! The canonical request ρ and its RFC 8785 bytes (SecureClaw paper §3.4, "request binding").
//!
//! ρ covers the **whole** tool call: intent (upstream id + tool name), caller, session, inputs
//! (every argument, plus every referenced handle with its object version) and context
//! (destination, task-envelope digest, policy-set digest). Nothing is projected away or replaced
//! by a placeholder — the authors' artifact bound a synthetic text and dropped fields such as the
//! payment amount (`research/secureclaw-reference.md` §6 item 6); here any change to any field
//! changes the bytes.
//!
//! Bytes are the JSON Canonicalization Scheme (RFC 8785) of a versioned object. JCS serializes
//! numbers as IEEE-754 doubles, so integers beyond ±2^53 would be silently rounded and two
//! different requests could share bytes: such numbers are rejected before canonicalization.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Version tag inside every canonical request; bumping it changes every binding digest.
pub const CANONICAL_VERSION: &str = "secureclaw.request/v1";

/// Largest integer magnitude JCS represents exactly (2^53).
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// Maximum nesting depth accepted in arguments (objects and arrays).
pub const MAX_DEPTH: usize = 64;

/// Errors while building canonical bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number is an integer beyond ±2^53 (JCS would round it).
    #[error("number at `{path}` is beyond ±2^53 and cannot be bound exactly")]
    UnsafeInteger {
        /// JSON pointer of the number.
        path: String,
    },
    /// Arguments nest deeper than [`MAX_DEPTH`].
    #[error("arguments nest deeper than {MAX_DEPTH} levels at `{path}`")]
    TooDeep {
        /// JSON pointer where the limit was hit.
        path: String,
    },
    /// The JCS serializer failed (should not happen for values that passed validation).
    #[error("canonicalization failed: {0}")]
    Serialize(String),
}

/// What the agent asked for: upstream id + tool name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Intent {
    /// Upstream server id from the gateway configuration (for example `mail`).
    pub upstream: String,
    /// Tool name as the upstream knows it (without the gateway's namespace prefix).
    pub tool: String,
}

impl Intent {
    /// The namespaced name the runtime sees: `upstream__tool`.
    #[must_use]
    pub fn qualified(&self) -> String {
        format!("{}__{}", self.upstream, self.tool)
    }
}

/// A handle referenced by the arguments, with the version of the object it denotes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HandleBinding {
    /// The handle id as it appears in the arguments.
    pub handle: String,
    /// Vault object id the handle denotes.
    pub object_id: String,
    /// Version of that object at preview time.
    pub version: u64,
}

/// The task envelope: what the user asked for, delivered from the trusted side only.
///
/// The runtime never supplies it (that was weakness 1 of the authors' artifact: anchored
/// targets came from the caller). Its digest is part of every canonical request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEnvelope {
    /// The user's request text as the trusted host received it.
    pub request: String,
    /// Targets the user named explicitly (recipients, directories, accounts, URLs).
    #[serde(default)]
    pub trusted_targets: Vec<String>,
    /// Effect tools the user granted for this task (`upstream__tool` patterns with `*`
    /// wildcards, or exposed names): a destructive or financial effect needs a trusted
    /// confirmation unless its tool is granted here, even when every target is anchored.
    /// Omitted from the canonical bytes when empty, so envelopes without grants keep their
    /// digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granted_tools: Vec<String>,
    /// The largest amount, in minor units of the payment's currency (cents: `12999` is 129.99),
    /// the user allowed for this task's financial effects; the gateway converts each call's
    /// amount to minor units before comparing (a major-unit field is ×100, a field named like
    /// `cents`/`minor` is taken as is). A granted financial effect with a larger
    /// amount needs a trusted confirmation. Without it, a granted financial effect's amount
    /// must be named in the request text or come from a read the task anchored. Omitted from
    /// the canonical bytes when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_amount: Option<u64>,
}

impl TaskEnvelope {
    /// SHA-256 of the envelope's RFC 8785 bytes, hex encoded (64 characters).
    #[must_use]
    pub fn digest(&self) -> String {
        let bytes = serde_json_canonicalizer::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }
}

/// The canonical request ρ = (intent, caller, session, inputs, ctx).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanonicalRequest {
    /// Upstream + tool.
    pub intent: Intent,
    /// Authenticated caller (transport authentication or operator configuration).
    pub caller: String,
    /// Gateway-issued session id.
    pub session: String,
    /// Every argument exactly as it will be sent, plus referenced handles.
    pub inputs: Inputs,
    /// Destination and digests of the trusted context.
    pub ctx: RequestContext,
}

/// ρ.inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    /// The full argument object of the tool call.
    pub arguments: Map<String, Value>,
    /// Handles referenced anywhere in `arguments`, sorted by handle id.
    pub handles: Vec<HandleBinding>,
}

/// ρ.ctx.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestContext {
    /// Where the effect goes (upstream endpoint or operator-declared destination).
    pub destination: String,
    /// [`TaskEnvelope::digest`] of the session's envelope.
    pub task_digest: String,
    /// Digest of the policy set in force at preview.
    pub policy_digest: String,
}

#[derive(Serialize)]
struct Versioned<'a> {
    v: &'static str,
    #[serde(flatten)]
    request: &'a CanonicalRequest,
}

impl CanonicalRequest {
    /// RFC 8785 bytes of `{"v": CANONICAL_VERSION, ...ρ}` with handles sorted.
    ///
    /// # Errors
    /// [`CanonicalError::UnsafeInteger`] for integers beyond ±2^53 (including integral floats
    /// such as `1e300` that a parser produced from a long integer literal),
    /// [`CanonicalError::TooDeep`] past [`MAX_DEPTH`].
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        for (key, value) in &self.inputs.arguments {
            check_value(value, &format!("/{}", escape_pointer(key)), 1)?;
        }
        let mut sorted = self.clone();
        sorted.inputs.handles.sort();
        sorted.inputs.handles.dedup();
        serde_json_canonicalizer::to_vec(&Versioned {
            v: CANONICAL_VERSION,
            request: &sorted,
        })
        .map_err(|e| CanonicalError::Serialize(e.to_string()))
    }
}

impl CanonicalRequest {
    /// The request that canonical `bytes` (from [`CanonicalRequest::canonical_bytes`]) denote:
    /// every argument in its canonical form — numbers as JCS writes them (`1e2`, `100.0` and
    /// `100` all become the integer `100`, `-0` becomes `0`), strings unescaped, keys sorted.
    /// The executor sends these arguments, so the upstream receives exactly what was bound,
    /// not a spelling of it the runtime chose.
    ///
    /// # Errors
    /// [`CanonicalError::Serialize`] if `bytes` are not a canonical request of this version.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<Self, CanonicalError> {
        let bad = |e: &dyn std::fmt::Display| CanonicalError::Serialize(e.to_string());
        let mut value: Value = serde_json::from_slice(bytes).map_err(|e| bad(&e))?;
        let object = value
            .as_object_mut()
            .ok_or_else(|| bad(&"canonical request is not an object"))?;
        match object.remove("v") {
            Some(Value::String(v)) if v == CANONICAL_VERSION => {}
            _ => return Err(bad(&"canonical request has another version")),
        }
        serde_json::from_value(value).map_err(|e| bad(&e))
    }
}

/// Check a JSON value for numbers JCS cannot represent exactly and for excessive nesting.
///
/// # Errors
/// As [`CanonicalRequest::canonical_bytes`].
pub fn validate_value(value: &Value) -> Result<(), CanonicalError> {
    check_value(value, "", 0)
}

fn check_value(value: &Value, path: &str, depth: usize) -> Result<(), CanonicalError> {
    if depth > MAX_DEPTH {
        return Err(CanonicalError::TooDeep {
            path: path.to_owned(),
        });
    }
    match value {
        Value::Number(n) => {
            let unsafe_int = if let Some(u) = n.as_u64() {
                u > MAX_SAFE_INTEGER
            } else if let Some(i) = n.as_i64() {
                i.unsigned_abs() > MAX_SAFE_INTEGER
            } else {
                n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() > MAX_SAFE_INTEGER as f64)
            };
            if unsafe_int {
                return Err(CanonicalError::UnsafeInteger {
                    path: path.to_owned(),
                });
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_value(v, &format!("{path}/{i}"), depth + 1)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            check_value(v, &format!("{path}/{}", escape_pointer(k)), depth + 1)
        }),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// Escape a key for use in a JSON pointer (RFC 6901: `~` → `~0`, `/` → `~1`).
#[must_use]
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The request decoded from canonical bytes has the same bytes, and every argument in
    /// canonical form (issue 11 item 9).
    #[test]
    fn from_canonical_bytes_round_trips_in_canonical_form() {
        let raw = r#"{"b": 1e2, "a": [100.0, -0.0, 1.5, 2.5e-1], "s": "\u0041\u00e9", "n": {"z": 1, "y": null}}"#;
        let mut r = request(json!({}));
        r.inputs.arguments = serde_json::from_str(raw).unwrap();
        let bytes = r.canonical_bytes().unwrap();
        let back = CanonicalRequest::from_canonical_bytes(&bytes).unwrap();
        assert_eq!(back.canonical_bytes().unwrap(), bytes);
        assert_eq!(
            serde_json::to_string(&back.inputs.arguments).unwrap(),
            r#"{"a":[100,0,1.5,0.25],"b":100,"n":{"y":null,"z":1},"s":"Aé"}"#
        );
        // Anything but a canonical request of this version is refused.
        assert!(CanonicalRequest::from_canonical_bytes(b"[]").is_err());
        let other = String::from_utf8(bytes)
            .unwrap()
            .replace(CANONICAL_VERSION, "secureclaw.request/v0");
        assert!(CanonicalRequest::from_canonical_bytes(other.as_bytes()).is_err());
    }

    fn jcs(v: &Value) -> String {
        String::from_utf8(serde_json_canonicalizer::to_vec(v).unwrap()).unwrap()
    }

    fn request(args: Value) -> CanonicalRequest {
        CanonicalRequest {
            intent: Intent {
                upstream: "mail".into(),
                tool: "send_email".into(),
            },
            caller: "alice".into(),
            session: "s1".into(),
            inputs: Inputs {
                arguments: args.as_object().cloned().unwrap(),
                handles: vec![],
            },
            ctx: RequestContext {
                destination: "mail".into(),
                task_digest: "t".into(),
                policy_digest: "p".into(),
            },
        }
    }

    /// RFC 8785 §3.2.3: keys sort by UTF-16 code units, so U+1F600 (surrogates D83D DE00)
    /// sorts before U+FB33 even though its code point is larger.
    #[test]
    fn rfc8785_utf16_key_order() {
        let input: Value = serde_json::from_str(
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(jcs(&input), expected);
    }

    /// RFC 8785 §3.2.2.3 / appendix B number formatting (ECMAScript Number::toString).
    #[test]
    fn rfc8785_numbers() {
        let cases = [
            ("1e21", "1e+21"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("-0", "0"),
            ("333333333.33333329", "333333333.3333333"),
            ("1E30", "1e+30"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("100", "100"),
        ];
        for (input, want) in cases {
            let v: Value = serde_json::from_str(input).unwrap();
            assert_eq!(jcs(&v), want, "input {input}");
        }
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = request(json!({"to": "a@x.example", "body": "hi", "n": 1}));
        let b: Value =
            serde_json::from_str(r#"{ "n":1,   "body":"hi","to" : "a@x.example" }"#).unwrap();
        let b = request(b);
        assert_eq!(a.canonical_bytes().unwrap(), b.canonical_bytes().unwrap());
    }

    #[test]
    fn any_value_change_changes_bytes() {
        let base = request(json!({"to": "a@x.example", "amount": 100}));
        let base_bytes = base.canonical_bytes().unwrap();
        for args in [
            json!({"to": "b@x.example", "amount": 100}),
            json!({"to": "a@x.example", "amount": 101}),
            json!({"to": "a@x.example", "amount": 100.5}),
            json!({"to": "a@x.example", "amount": "100"}),
            json!({"to": "a@x.example", "amount": 100, "cc": null}),
            json!({"to": "a@x.example"}),
        ] {
            assert_ne!(request(args).canonical_bytes().unwrap(), base_bytes);
        }
        let mut other = base.clone();
        other.session = "s2".into();
        assert_ne!(other.canonical_bytes().unwrap(), base_bytes);
        let mut other = base.clone();
        other.ctx.policy_digest = "p2".into();
        assert_ne!(other.canonical_bytes().unwrap(), base_bytes);
        let mut other = base;
        other.inputs.handles.push(HandleBinding {
            handle: "h".into(),
            object_id: "o".into(),
            version: 1,
        });
        assert_ne!(other.canonical_bytes().unwrap(), base_bytes);
    }

    #[test]
    fn integers_beyond_2_pow_53_rejected() {
        for text in [
            r#"{"amount": 9007199254740993}"#,
            r#"{"amount": -9007199254740993}"#,
            r#"{"amount": 123456789012345678901234567890}"#,
            r#"{"nested": {"list": [1, 18446744073709551615]}}"#,
        ] {
            let err = request(serde_json::from_str(text).unwrap())
                .canonical_bytes()
                .unwrap_err();
            assert!(
                matches!(err, CanonicalError::UnsafeInteger { .. }),
                "{text}: {err:?}"
            );
        }
        // 2^53 itself and ordinary fractions are fine.
        assert!(
            request(json!({"a": 9007199254740992_u64, "b": 0.1}))
                .canonical_bytes()
                .is_ok()
        );
    }

    #[test]
    fn nesting_limit() {
        let mut v = json!(1);
        for _ in 0..(MAX_DEPTH + 2) {
            v = json!([v]);
        }
        let err = request(json!({ "deep": v })).canonical_bytes().unwrap_err();
        assert!(matches!(err, CanonicalError::TooDeep { .. }));
    }

    #[test]
    fn golden_bytes() {
        let r = request(json!({"to": "a@x.example", "amount": 1.50}));
        let text = String::from_utf8(r.canonical_bytes().unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"caller":"alice","ctx":{"destination":"mail","policy_digest":"p","task_digest":"t"},"inputs":{"arguments":{"amount":1.5,"to":"a@x.example"},"handles":[]},"intent":{"tool":"send_email","upstream":"mail"},"session":"s1","v":"secureclaw.request/v1"}"#
        );
    }
}
