//! Handles: opaque references to protected values (SecureClaw paper §3.2, DESIGN.md §3).
//!
//! A handle id is `hdl_<kind>_<32 base32 chars>` where the tail is
//! `base32(HMAC-SHA256(k_handle, nonce ‖ session ‖ object id)[..20])` — 160 bits, so guessing
//! a live handle takes about 2^160 / N tries. The runtime only ever sees ids. The record, kept
//! by the gateway, binds the handle to its caller, session, source object and version, label,
//! sensitivity, lifetime and the sinks it may flow to. Resolution is the executor's alone, for a
//! specific sink; unknown, expired, revoked and foreign handles all produce the same
//! [`HandleDenial::Unavailable`], so a probe learns nothing about which case applied.

use crate::canonical::escape_pointer;
use crate::keys::{KeyError, KeyPurpose, KeyRing, hmac_parts};
use crate::time::UnixMillis;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::LazyLock;

const DOMAIN: &[u8] = b"secureclaw.handle.v1";

/// Sensitivity of a protected value.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    /// May flow to any sink the policy allows.
    Low,
    /// May flow to any sink the policy allows (default for detected identifiers).
    #[default]
    Medium,
    /// Flows only to sinks listed in the record.
    High,
}

impl Sensitivity {
    /// `low`, `medium`, `high`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Sensitivity::Low => "low",
            Sensitivity::Medium => "medium",
            Sensitivity::High => "high",
        }
    }
}

/// An opaque handle id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HandleId(pub String);

impl std::fmt::Display for HandleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

static HANDLE_PATTERN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\bhdl_[a-z]{2,6}_[a-z2-7]{32}\b").ok());

/// Derive a handle id. `kind` is a short lower-case tag (`em`, `ib`, `fld`, …; non-letters are
/// dropped and it is cut to 6 characters); `nonce` is 16 fresh random bytes.
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn mint_handle_id(
    keys: &KeyRing,
    kind: &str,
    nonce: &[u8; 16],
    session: &str,
    object_id: &str,
) -> Result<HandleId, KeyError> {
    let key = keys.active(KeyPurpose::Handle)?;
    let mac = hmac_parts(
        key,
        &[DOMAIN, nonce, session.as_bytes(), object_id.as_bytes()],
    );
    let mut tag: String = kind
        .chars()
        .filter(char::is_ascii_lowercase)
        .take(6)
        .collect();
    if tag.len() < 2 {
        tag = "val".to_owned();
    }
    let tail = crate::encoding::base32(mac.get(..20).unwrap_or(&mac));
    Ok(HandleId(format!("hdl_{tag}_{tail}")))
}

const REUSE_DOMAIN: &[u8] = b"secureclaw.handle-reuse.v1";

/// Everything a handle record says about its value besides where it came from: a value read
/// again in the same session reuses a handle only if all of it is equal (see
/// [`handle_reuse_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleClass<'a> {
    /// Handle id tag (`em`, `ib`, `fld`, …).
    pub kind: &'a str,
    /// Label.
    pub label: &'a str,
    /// Sensitivity.
    pub sensitivity: Sensitivity,
    /// Sink patterns, in the rule's order.
    pub allowed_sinks: &'a [String],
    /// Anchored (authoritative field of an anchored read).
    pub anchored: bool,
}

/// The lookup key under which a handle is found again when the same value is read a second
/// time in `session` with the same [`HandleClass`]: `reuse:<key id>:` + hex
/// HMAC-SHA256(k_handle, domain ‖ session ‖ kind ‖ label ‖ sensitivity ‖ sinks ‖ anchored ‖
/// value). Keyed, so the store never holds the plaintext or an unkeyed digest of it (a short
/// value — a zip code, a phone number — would fall to a dictionary); bound to the session, so
/// two sessions never share a handle; bound to the whole class, so a value never reaches an
/// existing handle that is more trusted (anchored, wider sinks) than the read that returned it
/// again — an occurrence in free text or in an unanchored read gets its own handle. The key id
/// is part of the key: after rotation values get new handles.
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn handle_reuse_key(
    keys: &KeyRing,
    session: &str,
    class: &HandleClass<'_>,
    value: &[u8],
) -> Result<String, KeyError> {
    let key = keys.active(KeyPurpose::Handle)?;
    let sinks = class.allowed_sinks.join("\n");
    let mac = hmac_parts(
        key,
        &[
            REUSE_DOMAIN,
            session.as_bytes(),
            class.kind.as_bytes(),
            class.label.as_bytes(),
            class.sensitivity.as_str().as_bytes(),
            &(class.allowed_sinks.len() as u64).to_be_bytes(),
            sinks.as_bytes(),
            &[u8::from(class.anchored)],
            value,
        ],
    );
    Ok(format!("reuse:{}:{}", key.id, hex_lower(&mac)))
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// `text` with every handle id in it replaced by a space (so the detectors do not read a
/// handle id as an identifier or a secret).
#[must_use]
pub fn mask_handles(text: &str) -> std::borrow::Cow<'_, str> {
    match HANDLE_PATTERN.as_ref() {
        Some(re) => re.replace_all(text, " "),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// The byte ranges of the handle ids in `text`, in order (empty when there are none).
#[must_use]
pub fn handle_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    HANDLE_PATTERN
        .as_ref()
        .map(|re| re.find_iter(text).map(|m| m.range()).collect())
        .unwrap_or_default()
}

/// Every handle id occurring in `value` (inside any string, including object keys), with the
/// JSON pointer of the string that contains it. Order: document order, duplicates kept.
#[must_use]
pub fn find_handles(value: &Value) -> Vec<(String, HandleId)> {
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

fn walk(value: &Value, path: String, out: &mut Vec<(String, HandleId)>) {
    let Some(re) = HANDLE_PATTERN.as_ref() else {
        return;
    };
    match value {
        Value::String(s) => {
            for m in re.find_iter(s) {
                out.push((path.clone(), HandleId(m.as_str().to_owned())));
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(v, format!("{path}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}/{}", escape_pointer(k));
                for m in re.find_iter(k) {
                    out.push((p.clone(), HandleId(m.as_str().to_owned())));
                }
                walk(v, p, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Replace every handle id inside the strings of `value` using `resolve`, which returns the
/// plaintext for an id (the executor's vault lookup). Returns the number of replacements.
/// Object keys are resolved too.
///
/// # Errors
/// The first error `resolve` returns; `value` is then partially rewritten and must be dropped.
pub fn substitute_handles<E>(
    value: &mut Value,
    resolve: &mut dyn FnMut(&HandleId) -> Result<String, E>,
) -> Result<usize, E> {
    let Some(re) = HANDLE_PATTERN.as_ref() else {
        return Ok(0);
    };
    let mut count = 0;
    let mut replace = |s: &str, count: &mut usize| -> Result<Option<String>, E> {
        if !re.is_match(s) {
            return Ok(None);
        }
        let mut out = String::with_capacity(s.len());
        let mut last = 0;
        for m in re.find_iter(s) {
            out.push_str(s.get(last..m.start()).unwrap_or_default());
            out.push_str(&resolve(&HandleId(m.as_str().to_owned()))?);
            last = m.end();
            *count += 1;
        }
        out.push_str(s.get(last..).unwrap_or_default());
        Ok(Some(out))
    };
    type Replace<'r, E> = dyn FnMut(&str, &mut usize) -> Result<Option<String>, E> + 'r;
    fn rec<E>(v: &mut Value, replace: &mut Replace<'_, E>, count: &mut usize) -> Result<(), E> {
        match v {
            Value::String(s) => {
                if let Some(new) = replace(s, count)? {
                    *s = new;
                }
            }
            Value::Array(items) => {
                for item in items {
                    rec(item, replace, count)?;
                }
            }
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    rec(&mut val, replace, count)?;
                    let key = replace(&k, count)?.unwrap_or(k);
                    map.insert(key, val);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        Ok(())
    }
    rec(value, &mut replace, &mut count)?;
    Ok(count)
}

/// What an effect tool does with the values it receives (DESIGN.md §3 "Sinks").
///
/// - [`SinkKind::Egress`]: the data leaves the deployment (mail, HTTP posts, payments). A
///   handle resolves into it unless its sensitivity is `high` and its record does not name the
///   sink.
/// - [`SinkKind::Store`]: a later read can return the data (files, documents, notes, calendars,
///   records). A handle of **any** sensitivity resolves into it only if its record names the
///   sink: otherwise write-then-read-back (or a blind edit whose diff is returned) would turn
///   the handle into plaintext for the runtime.
///
/// Unannotated effect tools are `store`; only operator configuration or a shipped catalog
/// entry makes a tool `egress`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// Data leaves: mail, HTTP posts, payments.
    Egress,
    /// A later read can return the data: files, documents, records (the default).
    #[default]
    Store,
}

impl SinkKind {
    /// `egress` or `store`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Egress => "egress",
            SinkKind::Store => "store",
        }
    }
}

/// A sink: the tool a resolved value would flow into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sink<'a> {
    /// Upstream id.
    pub upstream: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// Whether the tool sends data out or stores it where a later read returns it.
    pub kind: SinkKind,
}

/// The gateway's record of a handle. Never sent to the runtime except through
/// [`HandleRecord::describe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleRecord {
    /// The id.
    pub id: HandleId,
    /// Caller the handle was issued to.
    pub caller: String,
    /// Session the handle was issued in.
    pub session: String,
    /// Vault object id holding the value.
    pub object_id: String,
    /// Version of that object.
    pub version: u64,
    /// Label (`email`, `iban`, or an operator rule's label).
    pub label: String,
    /// Sensitivity.
    pub sensitivity: Sensitivity,
    /// Upstream and tool the value was read from (`upstream__tool`).
    pub source: String,
    /// Whether the value came from a trusted field of an anchored object, so that it may
    /// serve as an anchored effect target.
    pub anchored: bool,
    /// Sink patterns (`upstream__tool`, `*` wildcards) a `high` value may flow to.
    pub allowed_sinks: Vec<String>,
    /// Issue time.
    pub created_at: UnixMillis,
    /// Last instant of validity (inclusive).
    pub expires_at: UnixMillis,
    /// Revoked handles resolve nowhere.
    pub revoked: bool,
}

/// Why a handle may not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandleDenial {
    /// Unknown, expired, revoked, or issued to another caller or session (one generic answer).
    #[error("handle unavailable")]
    Unavailable,
    /// Known and usable, but not for this sink.
    #[error("handle may not flow to this sink")]
    SinkForbidden,
}

/// Shell-style match with `*` wildcards only.
#[must_use]
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return pattern == text;
    }
    if !text.starts_with(first) || !text.ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = text
        .get(first.len()..text.len() - last.len())
        .unwrap_or_default();
    for mid in parts.iter().skip(1).take(parts.len().saturating_sub(2)) {
        match rest.find(mid) {
            Some(i) => rest = rest.get(i + mid.len()..).unwrap_or_default(),
            None => return false,
        }
    }
    true
}

impl HandleRecord {
    /// Whether this handle is usable at all by (`caller`, `session`) at `now`.
    ///
    /// # Errors
    /// [`HandleDenial::Unavailable`].
    pub fn usable(&self, caller: &str, session: &str, now: UnixMillis) -> Result<(), HandleDenial> {
        if self.revoked || now > self.expires_at || self.caller != caller || self.session != session
        {
            return Err(HandleDenial::Unavailable);
        }
        Ok(())
    }

    /// Whether the value may flow into `sink`. Into a [`SinkKind::Store`] sink every value
    /// needs a matching pattern in `allowed_sinks`; into an [`SinkKind::Egress`] sink only
    /// `high` values do, the others flow wherever the policy allows.
    #[must_use]
    pub fn sink_allowed(&self, sink: &Sink<'_>) -> bool {
        if sink.kind == SinkKind::Egress && self.sensitivity < Sensitivity::High {
            return true;
        }
        let name = format!("{}__{}", sink.upstream, sink.tool);
        self.allowed_sinks.iter().any(|p| glob_match(p, &name))
    }

    /// What the runtime may learn about a handle: label, sensitivity, source, lifetime,
    /// revocation — never the value.
    #[must_use]
    pub fn describe(&self) -> Value {
        serde_json::json!({
            "handle": self.id,
            "label": self.label,
            "sensitivity": self.sensitivity,
            "source": self.source,
            "expires_at": self.expires_at,
            "revoked": self.revoked,
            "allowed_sinks": self.allowed_sinks,
        })
    }
}

/// The executor's resolution check for one handle used in a call to `sink`.
///
/// # Errors
/// [`HandleDenial::Unavailable`] when `record` is `None` (unknown or guessed), expired, revoked
/// or foreign; [`HandleDenial::SinkForbidden`] when a `high` value may not flow to `sink`.
pub fn check_resolution(
    record: Option<&HandleRecord>,
    caller: &str,
    session: &str,
    sink: &Sink<'_>,
    now: UnixMillis,
) -> Result<(), HandleDenial> {
    let record = record.ok_or(HandleDenial::Unavailable)?;
    record.usable(caller, session, now)?;
    if !record.sink_allowed(sink) {
        return Err(HandleDenial::SinkForbidden);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ring() -> KeyRing {
        KeyRing::generate(&mut |b: &mut [u8]| {
            b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8)
        })
    }

    fn record() -> HandleRecord {
        HandleRecord {
            id: HandleId("hdl_ib_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into()),
            caller: "alice".into(),
            session: "s1".into(),
            object_id: "o1".into(),
            version: 1,
            label: "iban".into(),
            sensitivity: Sensitivity::High,
            source: "office__read_invoice".into(),
            anchored: true,
            allowed_sinks: vec!["office__pay_*".into()],
            created_at: UnixMillis(0),
            expires_at: UnixMillis(1000),
            revoked: false,
        }
    }

    #[test]
    fn ids_are_unique_per_nonce_and_session() {
        let keys = ring();
        let a = mint_handle_id(&keys, "em", &[1; 16], "s1", "o1").unwrap();
        let b = mint_handle_id(&keys, "em", &[2; 16], "s1", "o1").unwrap();
        let c = mint_handle_id(&keys, "em", &[1; 16], "s2", "o1").unwrap();
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.0.len(), "hdl_em_".len() + 32);
        assert_eq!(
            find_handles(&json!({"x": format!("send to {a} now")})),
            vec![("/x".into(), a)]
        );
    }

    #[test]
    fn reuse_key_binds_session_value_and_whole_class() {
        let keys = ring();
        let sinks = vec!["retail__get_order_details".to_owned()];
        let class = HandleClass {
            kind: "fld",
            label: "order_id",
            sensitivity: Sensitivity::Medium,
            allowed_sinks: &sinks,
            anchored: true,
        };
        let k = |session: &str, c: &HandleClass<'_>, v: &str| {
            handle_reuse_key(&keys, session, c, v.as_bytes()).unwrap()
        };
        let base = k("s1", &class, "#W5490111");
        // Positive control: deterministic.
        assert_eq!(base, k("s1", &class, "#W5490111"));
        assert!(base.starts_with("reuse:"));
        assert!(
            !base.contains("W5490111"),
            "the key never holds the plaintext"
        );
        assert_ne!(base, k("s2", &class, "#W5490111"));
        assert_ne!(base, k("s1", &class, "#W5490112"));
        let unanchored = HandleClass {
            anchored: false,
            ..class.clone()
        };
        assert_ne!(base, k("s1", &unanchored, "#W5490111"));
        let other_label = HandleClass {
            label: "user_id",
            ..class.clone()
        };
        assert_ne!(base, k("s1", &other_label, "#W5490111"));
        let high = HandleClass {
            sensitivity: Sensitivity::High,
            ..class.clone()
        };
        assert_ne!(base, k("s1", &high, "#W5490111"));
        let wider = vec!["retail__get_order_details".to_owned(), "x__y".to_owned()];
        let wider = HandleClass {
            allowed_sinks: &wider,
            ..class.clone()
        };
        assert_ne!(base, k("s1", &wider, "#W5490111"));
        let joined = vec!["retail__get_order_details\nx__y".to_owned()];
        let joined = HandleClass {
            allowed_sinks: &joined,
            ..class.clone()
        };
        assert_ne!(
            k("s1", &wider, "#W5490111"),
            k("s1", &joined, "#W5490111"),
            "sink lists are length-prefixed"
        );
        let email = HandleClass {
            kind: "em",
            ..class.clone()
        };
        assert_ne!(base, k("s1", &email, "#W5490111"));
    }

    #[test]
    fn resolution_checks() {
        let r = record();
        let pay = Sink {
            upstream: "office",
            tool: "pay_invoice",
            kind: SinkKind::Egress,
        };
        let mail = Sink {
            upstream: "office",
            tool: "send_email",
            kind: SinkKind::Egress,
        };
        assert!(
            check_resolution(Some(&r), "alice", "s1", &pay, UnixMillis(10)).is_ok(),
            "positive control"
        );
        assert_eq!(
            check_resolution(None, "alice", "s1", &pay, UnixMillis(10)),
            Err(HandleDenial::Unavailable)
        );
        assert_eq!(
            check_resolution(Some(&r), "bob", "s1", &pay, UnixMillis(10)),
            Err(HandleDenial::Unavailable)
        );
        assert_eq!(
            check_resolution(Some(&r), "alice", "s2", &pay, UnixMillis(10)),
            Err(HandleDenial::Unavailable)
        );
        assert_eq!(
            check_resolution(Some(&r), "alice", "s1", &pay, UnixMillis(1001)),
            Err(HandleDenial::Unavailable)
        );
        let revoked = HandleRecord {
            revoked: true,
            ..record()
        };
        assert_eq!(
            check_resolution(Some(&revoked), "alice", "s1", &pay, UnixMillis(10)),
            Err(HandleDenial::Unavailable)
        );
        assert_eq!(
            check_resolution(Some(&r), "alice", "s1", &mail, UnixMillis(10)),
            Err(HandleDenial::SinkForbidden)
        );
        let medium = HandleRecord {
            sensitivity: Sensitivity::Medium,
            ..record()
        };
        assert!(check_resolution(Some(&medium), "alice", "s1", &mail, UnixMillis(10)).is_ok());
    }

    /// Regression (issue 11 item 3, "write, edit, read back"): a handle of any sensitivity
    /// resolves into a store sink only when its record names that sink.
    #[test]
    fn store_sinks_need_an_explicit_record_entry() {
        let write = Sink {
            upstream: "fs",
            tool: "write_file",
            kind: SinkKind::Store,
        };
        for sensitivity in [Sensitivity::Low, Sensitivity::Medium, Sensitivity::High] {
            let r = HandleRecord {
                sensitivity,
                allowed_sinks: vec!["office__pay_invoice".into()],
                ..record()
            };
            assert_eq!(
                check_resolution(Some(&r), "alice", "s1", &write, UnixMillis(10)),
                Err(HandleDenial::SinkForbidden),
                "{sensitivity:?} must not resolve into an unnamed store sink"
            );
            let named = HandleRecord {
                allowed_sinks: vec!["fs__write_*".into()],
                ..r
            };
            assert!(
                check_resolution(Some(&named), "alice", "s1", &write, UnixMillis(10)).is_ok(),
                "positive control: a record naming the store sink resolves"
            );
        }
    }

    #[test]
    fn substitution_replaces_embedded_ids() {
        let id = "hdl_ib_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let mut v = json!({"body": format!("IBAN: {id}."), "list": [id], id: 1});
        let n = substitute_handles::<()>(&mut v, &mut |_| Ok("DE89".into())).unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            v,
            json!({"body": "IBAN: DE89.", "list": ["DE89"], "DE89": 1})
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("office__pay_*", "office__pay_invoice"));
        assert!(glob_match("*", "x"));
        assert!(glob_match("*__send_email", "mail__send_email"));
        assert!(!glob_match("office__pay_*", "office__send_email"));
        assert!(glob_match("a*b*c", "aXbYc"));
        assert!(!glob_match("a*b*c", "ac"));
    }
}
