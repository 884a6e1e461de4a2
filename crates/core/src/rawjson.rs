//! Checks on a request's raw JSON bytes, before any library parser sees them (issue 12 items 2
//! and 8).
//!
//! `serde_json` keeps the last of two equal object keys and stops at 128 levels of nesting;
//! rmcp then drops a message it cannot parse without answering. Scanning the bytes first lets a
//! front end answer every request — `-32700` for bytes that are not JSON, an error carrying the
//! id for a message too deep or with a duplicate key — and makes "which of two `to` keys did
//! the policy see?" a question that cannot arise: a duplicate key is refused, never resolved.
//!
//! The scan builds no values (only object keys, to compare them) and stops at
//! `max_depth`, so it is linear in the input and bounded in stack.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Why raw JSON bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawJsonError {
    /// Not JSON (or not UTF-8), or trailing bytes after the value.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// Nesting deeper than the limit.
    #[error("JSON nests deeper than {limit} levels")]
    TooDeep {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// An object has the same key twice.
    #[error("duplicate object key `{key}`")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// More JSON values (scalars, arrays, objects; object keys not counted) than the limit.
    #[error("JSON holds more than {limit} values")]
    TooManyValues {
        /// The limit that was exceeded.
        limit: usize,
    },
}

/// Nesting allowed in a whole JSON-RPC message: the arguments' limit
/// ([`crate::canonical::MAX_DEPTH`]) plus the message, `params` and `arguments` objects around
/// them. Every front end scans with this one limit before any library parser (whose own limit,
/// 128, is never reached); the gateway then enforces the arguments' own limit.
pub const MESSAGE_MAX_DEPTH: usize = crate::canonical::MAX_DEPTH + 3;

/// Values allowed in a whole JSON-RPC message (every scalar, array and object counts once;
/// object keys do not). A parsed value costs far more memory than its text: `[1,1,1,…]` is 2
/// bytes per element on the wire and about 32 once parsed, so a 4 MiB body of tiny elements
/// would take some 64 MiB for every copy a parser, the policy and the canonical form make
/// (issue 12 item 6: 60 such calls took the gateway past 1 GB). 100,000 values bound a parsed
/// message to a few MiB beyond its text; a large document travels as one string, which counts
/// once.
pub const MESSAGE_MAX_VALUES: usize = 100_000;

/// The JSON-RPC `id` of a message that could not be accepted whole (too deep, too large, a
/// duplicate key), recovered without building its value: the top-level object's `"id"` member,
/// if it is a string, a number or `null` and complete in `bytes`. `bytes` may be only a prefix
/// of the message (the start of an oversized line). The scan is iterative and linear, so any
/// nesting is fine.
///
/// Returns `None` when there is no such member, when `id` appears twice at the top level (which
/// of them would a reply answer?), or when the bytes before it are not a JSON object's members.
#[must_use]
pub fn recover_id(bytes: &[u8]) -> Option<serde_json::Value> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i = i.saturating_add(1);
    let mut found: Option<serde_json::Value> = None;
    // Any trouble after a member was read (the prefix ends, the syntax breaks) keeps what was
    // found so far.
    loop {
        i = skip_ws(bytes, i);
        match bytes.get(i) {
            Some(b',') => i = i.saturating_add(1),
            Some(b'"') => {
                let Some(end) = string_end(bytes, i) else {
                    return found;
                };
                let Some(key) = bytes
                    .get(i..end)
                    .and_then(|k| serde_json::from_slice::<String>(k).ok())
                else {
                    return found;
                };
                i = skip_ws(bytes, end);
                if bytes.get(i) != Some(&b':') {
                    return found;
                }
                i = skip_ws(bytes, i.saturating_add(1));
                let Some(end) = value_end(bytes, i) else {
                    return found;
                };
                if key == "id" {
                    if found.is_some() {
                        return None;
                    }
                    let id = bytes
                        .get(i..end)
                        .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())?;
                    if !(id.is_string() || id.is_number() || id.is_null()) {
                        return None;
                    }
                    found = Some(id);
                }
                i = end;
            }
            _ => return found,
        }
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i = i.saturating_add(1);
    }
    i
}

/// The index after the closing quote of the string starting at `i`.
fn string_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i.saturating_add(1);
    loop {
        match bytes.get(j)? {
            b'\\' => j = j.saturating_add(2),
            b'"' => return Some(j.saturating_add(1)),
            _ => j = j.saturating_add(1),
        }
    }
}

/// The index after the value starting at `i`, skipped without recursion; `None` when the bytes
/// end first (a scalar must be followed by a delimiter to be known complete).
fn value_end(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => string_end(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match bytes.get(j)? {
                    b'"' => {
                        j = string_end(bytes, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth = depth.saturating_add(1),
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some(j.saturating_add(1));
                        }
                    }
                    _ => {}
                }
                j = j.saturating_add(1);
            }
        }
        _ => {
            let mut j = i;
            loop {
                match bytes.get(j)? {
                    b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' => return Some(j),
                    _ => j = j.saturating_add(1),
                }
            }
        }
    }
}

/// Scan `bytes` as one JSON value: refuse syntax errors, nesting deeper than `max_depth`
/// (an object or array at the top level is depth 1), more than [`MESSAGE_MAX_VALUES`] values
/// and duplicate keys in any object.
///
/// # Errors
/// [`RawJsonError`] for the first problem found.
pub fn scan(bytes: &[u8], max_depth: usize) -> Result<(), RawJsonError> {
    scan_bounded(bytes, max_depth, MESSAGE_MAX_VALUES)
}

/// [`scan`] with an explicit bound on the number of values (`max_values`).
///
/// # Errors
/// [`RawJsonError`] for the first problem found.
pub fn scan_bounded(bytes: &[u8], max_depth: usize, max_values: usize) -> Result<(), RawJsonError> {
    let mut found: Option<RawJsonError> = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut values = Budget {
        left: max_values,
        limit: max_values,
    };
    // Our own limit is enforced below; serde_json's (128) is a second fence behind it.
    let result = Scan {
        depth: 0,
        max_depth,
        values: &mut values,
        found: &mut found,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match (found, result) {
        (Some(problem), _) => Err(problem),
        (None, Ok(())) => Ok(()),
        (None, Err(e)) => Err(RawJsonError::Syntax(e.to_string())),
    }
}

/// Values a scan may still see.
struct Budget {
    left: usize,
    limit: usize,
}

struct Scan<'a> {
    depth: usize,
    max_depth: usize,
    values: &'a mut Budget,
    found: &'a mut Option<RawJsonError>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // Counted before the value is read, so a huge array stops at the limit.
        match self.values.left.checked_sub(1) {
            Some(left) => self.values.left = left,
            None => {
                *self.found = Some(RawJsonError::TooManyValues {
                    limit: self.values.limit,
                });
                return Err(de::Error::custom("too many values"));
            }
        }
        d.deserialize_any(self)
    }
}

impl Scan<'_> {
    fn enter<E: de::Error>(&mut self) -> Result<usize, E> {
        let depth = self.depth.saturating_add(1);
        if depth > self.max_depth {
            *self.found = Some(RawJsonError::TooDeep {
                limit: self.max_depth,
            });
            return Err(E::custom("too deep"));
        }
        Ok(depth)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let depth = self.enter::<A::Error>()?;
        while seq
            .next_element_seed(Scan {
                depth,
                max_depth: self.max_depth,
                values: &mut *self.values,
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let depth = self.enter::<A::Error>()?;
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                *self.found = Some(RawJsonError::DuplicateKey { key });
                return Err(de::Error::custom("duplicate key"));
            }
            map.next_value_seed(Scan {
                depth,
                max_depth: self.max_depth,
                values: &mut *self.values,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn well_formed_json_passes() {
        assert_eq!(scan(br#"{"a":[1,{"b":"c"}],"d":null}"#, 64), Ok(()));
        assert_eq!(scan(nested(64).as_bytes(), 64), Ok(()));
        assert_eq!(scan(b"42", 64), Ok(()));
    }

    /// Regression (issue 12 item 8): duplicate keys are refused, naming the key, at any depth.
    #[test]
    fn duplicate_keys_are_refused() {
        assert_eq!(
            scan(br#"{"to":"a@x","to":"b@y"}"#, 64),
            Err(RawJsonError::DuplicateKey { key: "to".into() })
        );
        assert_eq!(
            scan(br#"{"params":{"arguments":{"x":{"k":1,"k":2}}}}"#, 64),
            Err(RawJsonError::DuplicateKey { key: "k".into() })
        );
        // An escaped spelling of the same key is the same key.
        assert_eq!(
            scan(br#"{"to":1,"\u0074o":2}"#, 64),
            Err(RawJsonError::DuplicateKey { key: "to".into() })
        );
        // Equal keys in different objects are fine.
        assert_eq!(scan(br#"{"a":{"k":1},"b":{"k":2}}"#, 64), Ok(()));
    }

    /// Regression (issue 12 item 2): depth is refused by our limit, also far beyond
    /// serde_json's own (128), without exhausting the stack.
    #[test]
    fn depth_is_bounded_by_our_limit() {
        for depth in [65, 130, 10_000] {
            assert_eq!(
                scan(nested(depth).as_bytes(), 64),
                Err(RawJsonError::TooDeep { limit: 64 }),
                "{depth}"
            );
        }
    }

    /// Regression (issue 12 item 6, red-team round 2): a message of many tiny values is
    /// refused by count, whatever its size in bytes; one long string counts once.
    #[test]
    fn the_number_of_values_is_bounded() {
        let many = format!("[{}1]", "1,".repeat(MESSAGE_MAX_VALUES));
        assert_eq!(
            scan(many.as_bytes(), 64),
            Err(RawJsonError::TooManyValues {
                limit: MESSAGE_MAX_VALUES
            })
        );
        // Exactly at the limit: the array itself and its elements.
        let at = format!("[{}1]", "1,".repeat(MESSAGE_MAX_VALUES - 2));
        assert_eq!(scan(at.as_bytes(), 64), Ok(()));
        let objects = format!("[{}{{}}]", "{\"k\":1},".repeat(MESSAGE_MAX_VALUES / 2));
        assert!(matches!(
            scan(objects.as_bytes(), 64),
            Err(RawJsonError::TooManyValues { .. })
        ));
        let long = format!("{{\"text\":\"{}\"}}", "x".repeat(4 << 20));
        assert_eq!(scan(long.as_bytes(), 64), Ok(()));
        assert_eq!(
            scan_bounded(b"[1,2,3]", 64, 3),
            Err(RawJsonError::TooManyValues { limit: 3 })
        );
        assert_eq!(scan_bounded(b"[1,2,3]", 64, 4), Ok(()));
    }

    /// The id of a message refused whole is still found: past any depth, in a prefix, after
    /// strings holding braces and quotes; not when ambiguous or absent.
    #[test]
    fn ids_are_recovered_without_parsing_the_message() {
        let deep = nested(10_000);
        let msg = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"x":{deep}}}}},"id":7}}"#
        );
        assert_eq!(recover_id(msg.as_bytes()), Some(serde_json::json!(7)));
        let msg = format!(r#"{{"id":"a\"}}b","params":{deep}"#);
        assert_eq!(recover_id(msg.as_bytes()), Some(serde_json::json!("a\"}b")));
        // A prefix: the id is known once its value has ended.
        assert_eq!(
            recover_id(br#"{"jsonrpc":"2.0","id":12,"params":{"x":"yyyy"#),
            Some(serde_json::json!(12))
        );
        assert_eq!(recover_id(br#"{"jsonrpc":"2.0","id":12"#), None);
        assert_eq!(
            recover_id(br#"{"s":"{\"id\":3}","id":4}"#),
            Some(serde_json::json!(4))
        );
        assert_eq!(recover_id(br#"{"id":1,"id":2}"#), None);
        assert_eq!(recover_id(br#"{"id":{"x":1}}"#), None);
        assert_eq!(recover_id(br#"{"params":{"id":1}}"#), None);
        assert_eq!(recover_id(b"[1,2]"), None);
        assert_eq!(recover_id(b"\xff\xfe"), None);
    }

    #[test]
    fn syntax_errors_are_reported() {
        for bad in [&b"{"[..], b"[1,]", b"{\"a\":1} x", b"\xff\xfe", b""] {
            assert!(
                matches!(scan(bad, 64), Err(RawJsonError::Syntax(_))),
                "{bad:?}"
            );
        }
    }
}
