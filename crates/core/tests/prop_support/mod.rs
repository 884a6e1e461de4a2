//! Generators and oracles shared by the property tests (`prop_*.rs`) of the core and, through
//! `#[path]`, of the gateway.
//!
//! - [`json_value`] / [`arguments`] / [`canonical_request`]: random tool calls (random names,
//!   nested argument objects with strings, numbers, booleans, nulls and arrays);
//! - [`Change`] and [`apply`]: single field changes a compromised runtime could make between
//!   preview and commit; [`req_same`] is the independent oracle for "the request is still the
//!   same" (JSON value equality with numbers compared as IEEE-754 doubles, which is what
//!   RFC 8785 binds);
//! - [`write_json`]: a JSON writer with random key order, random whitespace and random (valid)
//!   escape and number spellings;
//! - [`Plant`] / [`record`]: records carrying detector-triggering values (emails, IBANs, card
//!   numbers, phone numbers, URLs, API keys, credential-named fields) for the leak properties.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    dead_code
)]

use proptest::prelude::*;
use secureclaw_core::canonical::{
    CanonicalRequest, HandleBinding, Inputs, Intent, MAX_SAFE_INTEGER, RequestContext,
};
use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// Number of cases: `PROPTEST_CASES` if set, else `default`.
#[must_use]
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A proptest configuration with [`cases`] and no shrinking time limit surprises.
#[must_use]
pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------------------- generators

/// Strings that stress canonicalization: ASCII words, arbitrary printable Unicode, control
/// characters, quotes and backslashes, non-BMP characters, the RFC 8785 key-order examples.
pub fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z_]{0,10}",
        3 => "\\PC{0,12}",
        1 => "[\\x00-\\x1f\"\\\\/ a]{0,6}",
        1 => "[\u{80}\u{f6}\u{20ac}\u{fb33}\u{1f600}\u{10ffff}\r1]{0,4}",
    ]
}

/// Finite JSON numbers that RFC 8785 binds exactly: integers within ±2^53 and any finite
/// double that is not an integer beyond 2^53.
pub fn any_number() -> impl Strategy<Value = Number> {
    let max = i64::try_from(MAX_SAFE_INTEGER).unwrap();
    prop_oneof![
        3 => (-1000i64..1000).prop_map(Number::from),
        2 => (-max..=max).prop_map(Number::from),
        1 => (0u64..=MAX_SAFE_INTEGER).prop_map(Number::from),
        2 => any::<f64>()
            .prop_filter("finite and exactly bindable", |f| {
                f.is_finite() && !(f.fract() == 0.0 && f.abs() > MAX_SAFE_INTEGER as f64)
            })
            .prop_map(|f| Number::from_f64(f).unwrap()),
        1 => (-1.0e6f64..1.0e6).prop_map(|f| Number::from_f64(f).unwrap()),
    ]
}

/// Scalars.
pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => any_number().prop_map(Value::Number),
        4 => any_string().prop_map(Value::String),
    ]
}

/// Nested JSON values: up to 4 levels, up to 5 entries per object or array.
pub fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((any_string(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A tool call's argument object.
pub fn arguments() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((any_string(), json_value()), 0..6)
        .prop_map(|kv| kv.into_iter().collect())
}

/// Names of upstreams, tools, callers, sessions: mostly identifier-like, sometimes anything.
pub fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9_-]{0,14}",
        1 => "\\PC{0,10}",
    ]
}

pub fn handle_binding() -> impl Strategy<Value = HandleBinding> {
    ("hdl_[a-z]{2}_[a-z2-7]{32}", "obj_[a-z2-7]{8}", 0u64..5).prop_map(
        |(handle, object_id, version)| HandleBinding {
            handle,
            object_id,
            version,
        },
    )
}

/// A random canonical request ρ.
pub fn canonical_request() -> impl Strategy<Value = CanonicalRequest> {
    (
        (name(), name(), name(), name()),
        arguments(),
        prop::collection::vec(handle_binding(), 0..3),
        (name(), "[0-9a-f]{64}", "[0-9a-f]{64}"),
    )
        .prop_map(
            |((upstream, tool, caller, session), arguments, handles, (destination, task, pol))| {
                CanonicalRequest {
                    intent: Intent { upstream, tool },
                    caller,
                    session,
                    inputs: Inputs { arguments, handles },
                    ctx: RequestContext {
                        destination,
                        task_digest: task,
                        policy_digest: pol,
                    },
                }
            },
        )
}

// ------------------------------------------------------------------------------- oracle

/// JSON value equality as RFC 8785 sees it: objects as unordered maps, numbers as doubles
/// (so `1`, `1.0` and `1e0` are equal, and `-0` equals `0`). Written independently of the
/// canonicalizer under test.
#[must_use]
pub fn json_same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_same(v, w)))
        }
        _ => false,
    }
}

fn handle_set(h: &[HandleBinding]) -> Vec<HandleBinding> {
    let mut h = h.to_vec();
    h.sort();
    h.dedup();
    h
}

/// Whether two requests denote the same call (everything but `ctx.policy_digest`, which the
/// acceptance predicate takes from the artifact and checks separately).
#[must_use]
pub fn req_same(a: &CanonicalRequest, b: &CanonicalRequest) -> bool {
    a.intent == b.intent
        && a.caller == b.caller
        && a.session == b.session
        && a.ctx.destination == b.ctx.destination
        && a.ctx.task_digest == b.ctx.task_digest
        && handle_set(&a.inputs.handles) == handle_set(&b.inputs.handles)
        && json_same(
            &Value::Object(a.inputs.arguments.clone()),
            &Value::Object(b.inputs.arguments.clone()),
        )
}

// ------------------------------------------------------------------------------- changes

/// One change to a request.
#[derive(Debug, Clone)]
pub enum Change {
    /// Change the node number `site` (pre-order over the argument tree, root = 0) so that it
    /// is guaranteed to differ ([`tweak`]).
    Tweak {
        site: usize,
        salt: u8,
    },
    /// Replace node `site` by an arbitrary value (may or may not be equal).
    Replace {
        site: usize,
        with: Value,
    },
    /// In the `site`-th object (pre-order), insert or overwrite `key`.
    Insert {
        site: usize,
        key: String,
        with: Value,
    },
    /// In the `site`-th object, remove its `n`-th key.
    Remove {
        site: usize,
        n: usize,
    },
    /// In the `site`-th object, rename its `n`-th key to `to`.
    Rename {
        site: usize,
        n: usize,
        to: String,
    },
    /// In the `site`-th array, swap elements `i` and `j`.
    Swap {
        site: usize,
        i: usize,
        j: usize,
    },
    /// Another upstream / tool / caller / session / destination / task digest.
    Upstream(String),
    Tool(String),
    Caller(String),
    Session(String),
    Destination(String),
    TaskDigest(String),
    /// Add a handle, bump the version of the `n`-th, or drop the `n`-th.
    AddHandle(HandleBinding),
    BumpHandle(usize),
    DropHandle(usize),
}

/// Changes to the arguments only (what the gateway's commit rebuilds from the runtime's call).
pub fn argument_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        6 => (any::<usize>(), any::<u8>()).prop_map(|(site, salt)| Change::Tweak { site, salt }),
        2 => (any::<usize>(), json_value()).prop_map(|(site, with)| Change::Replace { site, with }),
        2 => (any::<usize>(), any_string(), json_value())
            .prop_map(|(site, key, with)| Change::Insert { site, key, with }),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(site, n)| Change::Remove { site, n }),
        2 => (any::<usize>(), any::<usize>(), any_string())
            .prop_map(|(site, n, to)| Change::Rename { site, n, to }),
        1 => (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(site, i, j)| Change::Swap { site, i, j }),
    ]
}

/// Any change to a request.
pub fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        12 => argument_change(),
        1 => name().prop_map(Change::Upstream),
        1 => name().prop_map(Change::Tool),
        1 => name().prop_map(Change::Caller),
        1 => name().prop_map(Change::Session),
        1 => name().prop_map(Change::Destination),
        1 => "[0-9a-f]{64}".prop_map(Change::TaskDigest),
        1 => handle_binding().prop_map(Change::AddHandle),
        1 => any::<usize>().prop_map(Change::BumpHandle),
        1 => any::<usize>().prop_map(Change::DropHandle),
    ]
}

fn count_nodes(v: &Value, pred: &dyn Fn(&Value) -> bool) -> usize {
    let own = usize::from(pred(v));
    own + match v {
        Value::Array(items) => items.iter().map(|i| count_nodes(i, pred)).sum(),
        Value::Object(map) => map.values().map(|i| count_nodes(i, pred)).sum(),
        _ => 0,
    }
}

/// The `n`-th node (pre-order) satisfying `pred`.
fn nth_node<'v>(
    v: &'v mut Value,
    n: &mut usize,
    pred: &dyn Fn(&Value) -> bool,
) -> Option<&'v mut Value> {
    if pred(v) {
        if *n == 0 {
            return Some(v);
        }
        *n -= 1;
    }
    match v {
        Value::Array(items) => {
            for item in items {
                if let Some(found) = nth_node(item, n, pred) {
                    return Some(found);
                }
            }
            None
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                if let Some(found) = nth_node(item, n, pred) {
                    return Some(found);
                }
            }
            None
        }
        _ => None,
    }
}

fn pick<'v>(
    root: &'v mut Value,
    site: usize,
    pred: &dyn Fn(&Value) -> bool,
) -> Option<&'v mut Value> {
    let total = count_nodes(root, pred);
    if total == 0 {
        return None;
    }
    let mut n = site % total;
    nth_node(root, &mut n, pred)
}

/// A value that certainly differs from `v` under [`json_same`].
#[must_use]
pub fn tweak(v: &Value, salt: u8) -> Value {
    let out = match v {
        Value::Null => Value::Bool(salt.is_multiple_of(2)),
        Value::Bool(b) => {
            if salt.is_multiple_of(2) {
                Value::Bool(!b)
            } else {
                Value::Null
            }
        }
        Value::Number(n) => {
            let f = n.as_f64().unwrap();
            if let Some(i) = n.as_i64() {
                let j = if i < 0 { i + 1 } else { i - 1 };
                if salt.is_multiple_of(3) {
                    Value::Number(Number::from(j))
                } else if salt % 3 == 1 {
                    // Same digits as a string: a type change.
                    Value::String(i.to_string())
                } else if i.unsigned_abs() < 1 << 52 {
                    // Exactly representable only below 2^52 (found by the property itself).
                    Value::Number(Number::from_f64(i as f64 + 0.5).unwrap())
                } else {
                    Value::Number(Number::from(j))
                }
            } else if let Some(u) = n.as_u64() {
                Value::Number(Number::from(u - 1))
            } else {
                // Next representable double (toward zero, never overflowing).
                let bits = f.to_bits();
                let g = if f == 0.0 {
                    1e-300
                } else {
                    f64::from_bits(bits - 1)
                };
                Value::Number(Number::from_f64(g).unwrap())
            }
        }
        Value::String(s) => {
            let mut t = s.clone();
            match salt % 4 {
                0 => t.push('x'),
                1 => {
                    if t.pop().is_none() {
                        t.push(' ');
                    }
                }
                2 => t.insert(0, char::from(b'a' + salt % 26)),
                _ => t = format!("{t}\u{0}"),
            }
            Value::String(t)
        }
        Value::Array(items) => {
            let mut items = items.clone();
            if salt.is_multiple_of(2) || items.is_empty() {
                items.push(Value::Null);
            } else {
                items.pop();
            }
            Value::Array(items)
        }
        Value::Object(map) => {
            let mut map = map.clone();
            let mut key = format!("added_{salt}");
            while map.contains_key(&key) {
                key.push('_');
            }
            map.insert(key, Value::Bool(true));
            Value::Object(map)
        }
    };
    assert!(!json_same(v, &out), "tweak must change {v}");
    out
}

/// Apply `change` to `req` (a change whose target does not exist is a no-op).
pub fn apply(req: &mut CanonicalRequest, change: &Change) {
    let mut root = Value::Object(std::mem::take(&mut req.inputs.arguments));
    match change {
        Change::Tweak { site, salt } => {
            if let Some(node) = pick(&mut root, *site, &|_| true) {
                *node = tweak(node, *salt);
            }
        }
        Change::Replace { site, with } => {
            // Never replace the root by a non-object: the arguments stay an object.
            let total = count_nodes(&root, &|_| true);
            if total > 1 || with.is_object() {
                let site = if with.is_object() {
                    *site
                } else {
                    1 + site % (total - 1).max(1)
                };
                if let Some(node) = pick(&mut root, site, &|_| true) {
                    *node = with.clone();
                }
            }
        }
        Change::Insert { site, key, with } => {
            if let Some(Value::Object(map)) = pick(&mut root, *site, &Value::is_object) {
                map.insert(key.clone(), with.clone());
            }
        }
        Change::Remove { site, n } => {
            if let Some(Value::Object(map)) = pick(&mut root, *site, &Value::is_object)
                && !map.is_empty()
            {
                let key = map.keys().nth(n % map.len()).cloned().unwrap();
                map.remove(&key);
            }
        }
        Change::Rename { site, n, to } => {
            if let Some(Value::Object(map)) = pick(&mut root, *site, &Value::is_object)
                && !map.is_empty()
            {
                let key = map.keys().nth(n % map.len()).cloned().unwrap();
                let v = map.remove(&key).unwrap();
                map.insert(to.clone(), v);
            }
        }
        Change::Swap { site, i, j } => {
            if let Some(Value::Array(items)) = pick(&mut root, *site, &Value::is_array)
                && !items.is_empty()
            {
                let len = items.len();
                items.swap(i % len, j % len);
            }
        }
        Change::Upstream(s) => req.intent.upstream.clone_from(s),
        Change::Tool(s) => req.intent.tool.clone_from(s),
        Change::Caller(s) => req.caller.clone_from(s),
        Change::Session(s) => req.session.clone_from(s),
        Change::Destination(s) => req.ctx.destination.clone_from(s),
        Change::TaskDigest(s) => req.ctx.task_digest.clone_from(s),
        Change::AddHandle(h) => req.inputs.handles.push(h.clone()),
        Change::BumpHandle(n) => {
            let len = req.inputs.handles.len();
            if let Some(h) = req.inputs.handles.get_mut(n % len.max(1)) {
                h.version += 1;
            }
        }
        Change::DropHandle(n) => {
            let len = req.inputs.handles.len();
            if len > 0 {
                let h = req.inputs.handles.remove(n % len);
                // Drop every copy, so the handle set really changes.
                req.inputs.handles.retain(|x| x != &h);
            }
        }
    }
    let Value::Object(map) = root else {
        unreachable!("the argument root stays an object")
    };
    req.inputs.arguments = map;
}

// ------------------------------------------------------------------------------- writer

/// A tiny deterministic generator driving [`write_json`]'s choices.
pub struct Rng(u64);

impl Rng {
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap()
    }
}

fn ws(out: &mut String, rng: &mut Rng) {
    const WS: [&str; 6] = ["", "", " ", "\n", "\t", "\r\n    "];
    out.push_str(WS[rng.below(WS.len())]);
}

fn write_str(out: &mut String, s: &str, rng: &mut Rng) {
    out.push('"');
    for c in s.chars() {
        let escape_anyway = rng.below(8) == 0;
        match c {
            '"' => out.push_str(if rng.below(2) == 0 { "\\\"" } else { "\\u0022" }),
            '\\' => out.push_str(if rng.below(2) == 0 { "\\\\" } else { "\\u005C" }),
            '/' if escape_anyway => out.push_str("\\/"),
            '\n' if rng.below(2) == 0 => out.push_str("\\n"),
            '\t' if rng.below(2) == 0 => out.push_str("\\t"),
            '\r' if rng.below(2) == 0 => out.push_str("\\r"),
            '\u{8}' if rng.below(2) == 0 => out.push_str("\\b"),
            '\u{c}' if rng.below(2) == 0 => out.push_str("\\f"),
            c if (c as u32) < 0x20 || escape_anyway => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    if rng.below(2) == 0 {
                        write!(out, "\\u{unit:04x}").unwrap();
                    } else {
                        write!(out, "\\u{unit:04X}").unwrap();
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(out: &mut String, n: &Number, rng: &mut Rng) {
    if let Some(i) = n.as_i64() {
        match rng.below(4) {
            0 => write!(out, "{i}").unwrap(),
            1 => write!(out, "{i}.0").unwrap(),
            2 => write!(out, "{i}e0").unwrap(),
            _ => {
                // Move the last digit behind the point: 1234 -> 123.4E1 (exact in decimal,
                // and the parser rounds the decimal to the same double).
                let s = i.unsigned_abs().to_string();
                let sign = if i < 0 { "-" } else { "" };
                if s.len() > 1 {
                    let (head, tail) = s.split_at(s.len() - 1);
                    write!(out, "{sign}{head}.{tail}E+1").unwrap();
                } else {
                    write!(out, "{sign}{s}").unwrap();
                }
            }
        }
    } else if let Some(u) = n.as_u64() {
        write!(out, "{u}").unwrap();
    } else {
        let f = n.as_f64().unwrap();
        match rng.below(3) {
            0 => write!(out, "{n}").unwrap(),
            1 => write!(out, "{f:e}").unwrap(),
            _ => write!(out, "{f:E}").unwrap(),
        }
    }
}

/// Serialize `v` with random key order, whitespace, escapes and number spellings; the text
/// denotes the same JSON value.
pub fn write_json(out: &mut String, v: &Value, rng: &mut Rng) {
    ws(out, rng);
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n, rng),
        Value::String(s) => write_str(out, s, rng),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    ws(out, rng);
                    out.push(',');
                }
                write_json(out, item, rng);
                ws(out, rng);
            }
            if items.is_empty() {
                ws(out, rng);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // Fisher–Yates with the writer's generator.
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, rng);
                write_str(out, k, rng);
                ws(out, rng);
                out.push(':');
                write_json(out, item, rng);
                ws(out, rng);
            }
            if entries.is_empty() {
                ws(out, rng);
            }
            out.push('}');
        }
    }
    ws(out, rng);
}

// ------------------------------------------------------------------------------- plants

/// ISO 7064 mod 97-10 check digits for `country` + `bban` (letters as 10..35).
#[must_use]
pub fn iban(country: &str, bban: &str) -> String {
    let mut digits = String::new();
    for c in format!("{bban}{country}00").chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            write!(
                digits,
                "{}",
                c.to_ascii_uppercase() as u32 - 'A' as u32 + 10
            )
            .unwrap();
        }
    }
    let mut rem: u32 = 0;
    for b in digits.bytes() {
        rem = (rem * 10 + u32::from(b - b'0')) % 97;
    }
    format!("{country}{:02}{bban}", 98 - rem)
}

/// Complete `prefix` with the Luhn check digit.
#[must_use]
pub fn luhn(prefix: &str) -> String {
    (0..10)
        .map(|d| format!("{prefix}{d}"))
        .find(|c| secureclaw_core::detect::luhn_valid(c))
        .unwrap()
}

fn group(s: &str, sep: &str) -> String {
    s.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(sep)
}

/// A sensitive value the detectors must find, as it appears in text.
pub fn identifier() -> impl Strategy<Value = String> {
    prop_oneof![
        // e-mail
        3 => "[a-z][a-z0-9._+-]{0,12}[a-z0-9]@[a-z][a-z0-9-]{0,8}[a-z0-9]\\.(com|org|example|de|io|co\\.uk)",
        // IBANs: DE (digits), GB (bank code letters), NL, FR; compact or grouped
        1 => "[0-9]{18}".prop_map(|b| iban("DE", &b)),
        1 => ("[A-Z]{4}", "[0-9]{14}").prop_map(|(bank, n)| iban("GB", &format!("{bank}{n}"))),
        1 => ("[A-Z]{4}", "[0-9]{10}").prop_map(|(bank, n)| group(&iban("NL", &format!("{bank}{n}")), " ")),
        1 => "[0-9]{23}".prop_map(|b| group(&iban("FR", &b), " ")),
        // cards: 16-digit Visa/Mastercard grouped or not, 15-digit Amex
        1 => "4[0-9]{14}".prop_map(|p| luhn(&p)),
        1 => "5[1-5][0-9]{13}".prop_map(|p| group(&luhn(&p), " ")),
        1 => "4[0-9]{14}".prop_map(|p| group(&luhn(&p), "-")),
        1 => "3[47][0-9]{12}".prop_map(|p| luhn(&p)),
        // phones, international forms
        1 => ("[1-9][0-9]{1,2}", "[1-9][0-9]{1,3}", "[0-9]{6,8}")
            .prop_map(|(cc, area, n)| format!("+{cc} {area} {n}")),
        1 => ("[2-9][0-9]{2}", "[2-9][0-9]{2}", "[0-9]{4}")
            .prop_map(|(a, b, c)| format!("+1 ({a}) {b}-{c}")),
        // URLs
        1 => "https://[a-z]{3,10}\\.(example|com|org)/[a-z0-9/_-]{0,16}(\\?[a-z]{1,5}=[a-z0-9]{1,8})?",
        1 => "www\\.[a-z]{3,10}\\.(com|org)/[a-z0-9]{1,10}",
        // API keys and tokens
        1 => "AKIA[A-Z0-9]{16}",
        1 => "ghp_[A-Za-z0-9]{36}",
        1 => "sk_live_[A-Za-z0-9]{24}",
        1 => "sk-proj-[A-Za-z0-9]{10}[0-9][A-Za-z0-9]{20}",
        1 => "AIza[0-9A-Za-z_-]{35}",
        1 => "xoxb-[0-9]{12}-[A-Za-z0-9]{24}",
        1 => ("[A-Za-z0-9_-]{10,20}", "[A-Za-z0-9_-]{10,20}", "[A-Za-z0-9_-]{10,30}")
            .prop_map(|(a, b, c)| format!("eyJ{a}.eyJ{b}.{c}")),
    ]
}

/// Words that are not identifiers (no digits, no `@`, no separators a detector keys on).
pub fn filler() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "invoice",
        "please",
        "review",
        "the",
        "attached",
        "amount",
        "due",
        "next",
        "week",
        "thanks",
        "regards",
        "customer",
        "account",
        "for",
        "and",
        "of",
        "our",
        "meeting",
        "project",
        "status",
        "über",
        "café",
        "naïve",
        "résumé",
        "日本語",
        "ok",
    ])
    .prop_map(str::to_owned)
}

/// How a planted value sits in its text.
pub fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        " ", " ", " ", "\n", ", ", "; ", " (", ") ", ": ", "\t", " <", "> ", " \"", "\" ", " [",
        "] ", " - ",
    ])
}

/// Text with planted identifiers: `(text, planted values)`.
pub fn planted_text() -> impl Strategy<Value = (String, Vec<String>)> {
    prop::collection::vec(
        prop_oneof![
            3 => filler().prop_map(|w| (w, false)),
            1 => identifier().prop_map(|i| (i, true)),
        ],
        1..8,
    )
    .prop_flat_map(|parts| {
        let n = parts.len();
        (Just(parts), prop::collection::vec(separator(), n))
    })
    .prop_map(|(parts, seps)| {
        let mut text = String::new();
        let mut planted = Vec::new();
        for (i, ((part, is_plant), sep)) in parts.into_iter().zip(seps).enumerate() {
            if i > 0 {
                text.push_str(sep);
            }
            if is_plant {
                planted.push(part.clone());
            }
            text.push_str(&part);
        }
        (text, planted)
    })
}

/// Field names whose values D protects whatever they look like.
pub const CREDENTIAL_NAMES: &[&str] = &[
    "password",
    "api_key",
    "apiKey",
    "client_secret",
    "access_token",
    "Authorization",
    "pin",
    "cvv",
    "private_key",
];

/// Field names an operator rule labels (see [`OPERATOR_LABELS`]).
pub const LABELLED_NAMES: &[&str] = &["ssn", "salary", "diagnosis"];

/// The operator's classification used by the leak properties: any member named in
/// [`LABELLED_NAMES`], at any depth.
#[must_use]
pub fn operator_label(pointer: &str) -> Option<String> {
    let last = pointer.rsplit('/').next()?;
    LABELLED_NAMES
        .contains(&last)
        .then(|| format!("pii.{last}"))
}

/// A generated record: the JSON value and every value that must not reach the runtime.
#[derive(Debug, Clone)]
pub struct Record {
    pub value: Value,
    pub planted: Vec<String>,
}

static WHOLE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[derive(Debug, Clone)]
enum Node {
    Text(String, Vec<String>),
    Opaque(String),
    Number(i64),
    Bool(bool),
    Array(Vec<Node>),
    Object(Vec<(Key, Node)>),
}

#[derive(Debug, Clone)]
enum Key {
    Plain(String),
    /// A key that itself carries identifiers.
    Planted(String, Vec<String>),
    /// A credential-named key: its value is protected whole.
    Credential(String),
    /// An operator-labelled key.
    Labelled(String),
}

fn opaque() -> impl Strategy<Value = String> {
    // Distinctive: upper-case start (handle ids are lower-case) and a digit.
    "[A-Z][A-Za-z]{4,10}[0-9][A-Za-z0-9!#%]{2,8}"
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        6 => planted_text().prop_map(|(t, p)| Node::Text(t, p)),
        1 => (-100_000i64..100_000).prop_map(Node::Number),
        1 => any::<bool>().prop_map(Node::Bool),
    ];
    leaf.prop_recursive(3, 30, 6, |inner| {
        let key = prop_oneof![
            6 => prop::sample::select(vec![
                "id", "name", "note", "contact", "owner", "memo", "details", "items", "meta",
            ])
            .prop_map(|k| Key::Plain(k.to_owned())),
            1 => planted_text().prop_map(|(t, p)| Key::Planted(t, p)),
            1 => prop::sample::select(CREDENTIAL_NAMES).prop_map(|k| Key::Credential(k.to_owned())),
            1 => prop::sample::select(LABELLED_NAMES).prop_map(|k| Key::Labelled(k.to_owned())),
        ];
        prop_oneof![
            1 => prop::collection::vec(inner.clone(), 0..10).prop_map(Node::Array),
            2 => prop::collection::vec((key, inner, opaque()), 0..10).prop_map(|entries| {
                Node::Object(
                    entries
                        .into_iter()
                        .map(|(k, v, secret)| match k {
                            // Credential and labelled members hold an opaque value (or, for
                            // labelled members, sometimes a whole subtree).
                            Key::Credential(_) => (k, Node::Opaque(secret)),
                            Key::Labelled(_) if !matches!(v, Node::Object(_) | Node::Array(_)) => {
                                (k, Node::Opaque(secret))
                            }
                            _ => (k, v),
                        })
                        .collect(),
                )
            }),
        ]
    })
}

fn render(node: &Node, planted: &mut Vec<String>, protected_whole: bool) -> Value {
    match node {
        Node::Text(t, p) => {
            planted.extend(p.iter().cloned());
            if protected_whole {
                // A whole protected text is checked as a whole: make it distinctive so that
                // its words appearing elsewhere in clear text are not mistaken for a leak.
                let n = WHOLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let t = format!("{t} Wh0le{n}");
                planted.push(t.clone());
                return Value::String(t);
            }
            Value::String(t.clone())
        }
        Node::Opaque(s) => {
            planted.push(s.clone());
            Value::String(s.clone())
        }
        Node::Number(n) => Value::from(*n),
        Node::Bool(b) => Value::Bool(*b),
        Node::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| render(i, planted, protected_whole))
                .collect(),
        ),
        Node::Object(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                let mut local = Vec::new();
                let (key, whole) = match k {
                    Key::Plain(k) => (k.clone(), protected_whole),
                    Key::Planted(t, p) => {
                        local.extend(p.iter().cloned());
                        (t.clone(), protected_whole)
                    }
                    Key::Credential(k) | Key::Labelled(k) => (k.clone(), true),
                };
                let value = render(v, &mut local, whole);
                // A repeated key would overwrite the earlier member: keep the first only.
                if !map.contains_key(&key) {
                    map.insert(key, value);
                    planted.extend(local);
                }
            }
            Value::Object(map)
        }
    }
}

/// A random record: an object whose strings and keys carry planted identifiers, with
/// credential-named and operator-labelled members holding opaque values.
pub fn record() -> impl Strategy<Value = Record> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]),
            node(),
        ),
        1..6,
    )
    .prop_map(|entries| {
        let root = Node::Object(
            entries
                .into_iter()
                .map(|(k, v)| (Key::Plain(k.to_owned()), v))
                .collect(),
        );
        let mut planted = Vec::new();
        let value = render(&root, &mut planted, false);
        // Texts shorter than 6 characters protected whole (e.g. `ok` under a credential
        // name) also occur legitimately elsewhere; only distinctive values are checked.
        planted.retain(|p| p.chars().count() >= 6);
        planted.sort();
        planted.dedup();
        Record { value, planted }
    })
}

/// Every string and key of `v`, and its compact serialization.
#[must_use]
pub fn visible_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\u{1}');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => {
                for (k, i) in map {
                    out.push_str(k);
                    out.push('\u{1}');
                    walk(i, out);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {
                out.push_str(&v.to_string());
                out.push('\u{1}');
            }
        }
    }
    let mut out = v.to_string();
    out.push('\u{1}');
    walk(v, &mut out);
    out
}
