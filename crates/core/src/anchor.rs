//! Target anchoring (SecureClaw paper §3.4 "anchored targets"; DESIGN.md §1 threat model).
//!
//! An effect target — recipient, path, account, URL — is *anchored* when the user named it:
//! it appears in the task envelope's request text or trusted targets, in the operator's
//! trusted-targets list, or it is carried by a handle whose source object is anchored. All
//! three sources are trusted; nothing the runtime sends can anchor a target (the authors'
//! artifact accepted `query_anchored_targets` from the caller: `secureclaw-reference.md` §6.1).
//!
//! Matching is exact (case-insensitive for everything but paths) with two structured widenings
//! an operator can write explicitly: a directory (`/srv/reports/`) anchors the paths below it
//! (after resolving `.` and rejecting `..`), and `@domain` / `*@domain` anchors addresses in
//! that domain. There is no fuzzy or hashed matching.

use crate::canonical::TaskEnvelope;
use serde_json::{Map, Value};

/// Argument names treated as effect targets when the operator configured none for a tool.
pub const DEFAULT_TARGET_FIELDS: &[&str] = &[
    "to",
    "cc",
    "bcc",
    "recipient",
    "recipients",
    "email",
    "emails",
    "address",
    "path",
    "paths",
    "file",
    "filename",
    "source",
    "destination",
    "dest",
    "target",
    "url",
    "uri",
    "iban",
    "account",
    "account_id",
    "channel",
    "phone",
    "webhook",
    "host",
    "domain",
];

/// One target value found in the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Argument name it came from.
    pub field: String,
    /// The value (may be a handle id).
    pub value: String,
}

/// Collect target values from arguments named in `fields` (case-insensitive), at any depth:
/// a matching key contributes every string inside its value (a string, an array of strings,
/// objects such as `{"to": [{"email": "…"}]}`), and keys that do not match are searched
/// recursively, so nesting a recipient (`{"message": {"to": "…"}}`) does not hide it.
/// Numbers and booleans are not targets.
#[must_use]
pub fn extract_targets(arguments: &Map<String, Value>, fields: &[String]) -> Vec<Target> {
    fn strings(field: &str, v: &Value, out: &mut Vec<Target>) {
        match v {
            Value::String(s) => out.push(Target {
                field: field.to_owned(),
                value: s.clone(),
            }),
            Value::Array(items) => items.iter().for_each(|i| strings(field, i, out)),
            Value::Object(map) => map.values().for_each(|i| strings(field, i, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    fn walk(map: &Map<String, Value>, fields: &[String], out: &mut Vec<Target>) {
        for (name, value) in map {
            if fields.iter().any(|f| f.eq_ignore_ascii_case(name)) {
                strings(name, value, out);
            } else {
                search(value, fields, out);
            }
        }
    }
    fn search(v: &Value, fields: &[String], out: &mut Vec<Target>) {
        match v {
            Value::Object(map) => walk(map, fields, out),
            Value::Array(items) => items.iter().for_each(|i| search(i, fields, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    let mut out = Vec::new();
    walk(arguments, fields, &mut out);
    out
}

/// Lexically normalize an absolute or relative path: collapse `//` and `.`; `None` if it
/// contains `..` (traversal is never anchored).
#[must_use]
pub fn normalize_path(path: &str) -> Option<String> {
    let absolute = path.starts_with('/');
    let mut parts = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => return None,
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    Some(if absolute {
        format!("/{joined}")
    } else {
        joined
    })
}

fn looks_like_path(s: &str) -> bool {
    s.starts_with('/') || s.starts_with("./") || s.starts_with("~/")
}

fn strip_token(word: &str) -> &str {
    word.trim_matches(|c: char| {
        matches!(
            c,
            '.' | ','
                | ';'
                | ':'
                | '!'
                | '?'
                | '('
                | ')'
                | '"'
                | '\''
                | '<'
                | '>'
                | '['
                | ']'
                | '`'
        )
    })
}

/// A single e-mail address: exactly one `@`, a non-empty local part and domain, and none of
/// the characters that separate or quote addresses.
fn single_address(target: &str) -> Option<(&str, &str)> {
    let (local, domain) = target.split_once('@')?;
    let bad = |c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '@' | ',' | ';' | '<' | '>' | '"' | '(' | ')' | '[' | ']' | '\\' | ':'
            )
    };
    if local.is_empty() || domain.is_empty() || local.contains(bad) || domain.contains(bad) {
        return None;
    }
    Some((local, domain))
}

fn matches_candidate(candidate: &str, target: &str) -> bool {
    let candidate = candidate.trim();
    if candidate.is_empty() {
        return false;
    }
    if looks_like_path(candidate) || looks_like_path(target) {
        let (Some(c), Some(t)) = (normalize_path(candidate), normalize_path(target)) else {
            return false;
        };
        if c == t {
            return true;
        }
        // An absolute directory written with a trailing slash, with at least one segment,
        // anchors what is below it (`/` alone or `./` anchor nothing).
        let is_dir = candidate.ends_with('/') && c.starts_with('/') && c.len() > 1;
        return is_dir && t.starts_with(&format!("{}/", c.trim_end_matches('/')));
    }
    if let Some(domain) = candidate
        .strip_prefix("*@")
        .or_else(|| candidate.strip_prefix('@'))
    {
        return single_address(target).is_some_and(|(_, d)| d.eq_ignore_ascii_case(domain));
    }
    candidate.eq_ignore_ascii_case(target)
}

/// Whether `target` is anchored by `envelope` or `operator_trusted`.
#[must_use]
pub fn is_anchored(target: &str, envelope: &TaskEnvelope, operator_trusted: &[String]) -> bool {
    let target = target.trim();
    if target.is_empty() {
        return false;
    }
    if envelope
        .trusted_targets
        .iter()
        .chain(operator_trusted)
        .any(|c| matches_candidate(c, target))
    {
        return true;
    }
    // Named in the request text: exact word match (directories named in the text with a
    // trailing slash anchor paths below them, like trusted targets).
    envelope
        .request
        .split_whitespace()
        .map(strip_token)
        .any(|word| {
            let word_is_dir = word.ends_with('/') && looks_like_path(word);
            (word_is_dir || !word.contains('*'))
                && !word.starts_with('@')
                && matches_candidate(word, target)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(request: &str, trusted: &[&str]) -> TaskEnvelope {
        TaskEnvelope {
            request: request.into(),
            trusted_targets: trusted.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn request_text_anchors_exact_words() {
        let e = env("Send invoice INV-42 to approver@corp.example, thanks.", &[]);
        assert!(is_anchored("approver@corp.example", &e, &[]));
        assert!(is_anchored("Approver@Corp.Example", &e, &[]));
        assert!(!is_anchored("attacker@evil.example", &e, &[]));
        assert!(!is_anchored("approver@corp.example.evil", &e, &[]));
        assert!(!is_anchored("", &e, &[]));
    }

    #[test]
    fn directories_and_traversal() {
        let e = env("Write the report under /srv/reports/ please", &[]);
        assert!(is_anchored("/srv/reports/q4.txt", &e, &[]));
        assert!(is_anchored("/srv/reports/./a/b.txt", &e, &[]));
        assert!(!is_anchored("/srv/reports/../secrets.txt", &e, &[]));
        assert!(!is_anchored("/srv/reportsX/a.txt", &e, &[]));
        assert!(!is_anchored("/etc/passwd", &e, &[]));
        let e = env("compare the input / output in ./ and ~/", &[]);
        assert!(
            !is_anchored("/home/alice/.ssh/authorized_keys", &e, &[]),
            "a lone slash anchors nothing"
        );
        assert!(!is_anchored("./x", &e, &[]));
        let e = env("edit /srv/a.txt", &[]);
        assert!(is_anchored("/srv/a.txt", &e, &[]));
        assert!(
            !is_anchored("/srv/a.txt.bak", &e, &[]),
            "a file does not anchor its siblings"
        );
    }

    #[test]
    fn operator_and_envelope_lists() {
        let e = env("pay the invoice", &["DE89370400440532013000"]);
        assert!(is_anchored("DE89370400440532013000", &e, &[]));
        let ops = vec!["@corp.example".to_owned()];
        assert!(is_anchored("anyone@corp.example", &e, &ops));
        assert!(!is_anchored("anyone@corp.example.evil", &e, &ops));
        assert!(!is_anchored("@corp.example", &e, &ops));
        for list in [
            "attacker@evil.example,bob@corp.example",
            "a@b@corp.example",
            "x y@corp.example",
            "\"a,b\"@corp.example",
        ] {
            assert!(!is_anchored(list, &e, &ops), "{list}");
        }
    }

    #[test]
    fn targets_are_extracted_from_named_fields() {
        let args = json!({"To": "a@x.example", "cc": ["b@x.example", 3], "body": "c@x.example",
            "message": {"recipients": [{"email": "d@x.example", "name": "D"}], "note": "e@x.example"}});
        let fields: Vec<String> = DEFAULT_TARGET_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let t = extract_targets(args.as_object().unwrap_or(&Map::new()), &fields);
        let mut values: Vec<&str> = t.iter().map(|t| t.value.as_str()).collect();
        values.sort_unstable();
        assert_eq!(
            values,
            vec!["D", "a@x.example", "b@x.example", "d@x.example"]
        );
    }
}
