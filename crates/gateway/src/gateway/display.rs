//! What a human is shown: the approval display of a previewed call (unanchored targets and
//! non-ASCII look-alikes first, every argument escaped and in full), handles revealed for a
//! trusted approver or described for a channel the runtime may read (DESIGN.md §3
//! "Confirmation"; SecureClaw paper §3.4 "trusted confirmation"; red-team F4, F7, F14).

use super::Gateway;
use crate::catalog::ToolEntry;
use secureclaw_core::handle::HandleId;
use secureclaw_core::policy::{Provenance, TargetFact};
use secureclaw_core::store::VaultStore;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Distinct non-ASCII code points listed by name in an approval display warning; the rest are
/// counted (red-team F14).
pub const MAX_FLAGGED_CODE_POINTS: usize = 32;

/// Characters of one revealed handle value shown in an approval display; a longer value is cut
/// with a marker naming how much is hidden (red-team F7).
pub const MAX_REVEALED_VALUE_CHARS: usize = 1024;

/// Distinct non-ASCII characters of `text` in order of first appearance: at most
/// [`MAX_FLAGGED_CODE_POINTS`] of them formatted (`U+0430 'а'`), and how many there are in
/// all. Linear (a set, not a list scan: red-team F14).
fn flagged_code_points(text: &str) -> (Vec<String>, usize) {
    let mut seen = std::collections::HashSet::new();
    let mut listed = Vec::new();
    for c in text.chars().filter(|c| !c.is_ascii()) {
        if seen.insert(c) && listed.len() < MAX_FLAGGED_CODE_POINTS {
            listed.push(format!("U+{:04X} {c:?}", u32::from(c)));
        }
    }
    (listed, seen.len())
}

/// `U+0430 'а', U+0440 'р'` or, past the cap, `… (and N more)`.
fn code_point_list(listed: &[String], total: usize) -> String {
    let mut out = listed.join(", ");
    if total > listed.len() {
        out.push_str(&format!(" (and {} more)", total - listed.len()));
    }
    out
}

/// `c` is shown as an escape in an approval display: control characters, line and paragraph
/// separators, and the invisible and bidirectional-control characters normalization removes.
fn shown_escaped(c: char) -> bool {
    c.is_control()
        || secureclaw_core::normalize::is_removable(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `text` with every [`shown_escaped`] character written as `\u{…}` (for JSON text, which
/// already escapes quotes and control characters but not invisible or bidirectional ones).
fn escape_invisible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if shown_escaped(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as it is shown inside an approval display: every character that could break the
/// layout or hide text is made visible (`\n`, `\r`, `\t`, `\u{202e}`), as are the quote,
/// the backslash and the «» delimiters of revealed values, and the result is cut after `max`
/// characters with a marker.
#[must_use]
pub fn display_escape(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0usize;
    let mut total = 0usize;
    for c in text.chars() {
        total += 1;
        if shown >= max {
            continue;
        }
        shown += 1;
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '«' | '»' => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c if shown_escaped(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    if total > shown {
        out.push_str(&format!("…[{} more characters not shown]", total - shown));
    }
    out
}

/// The approval display. A summary line comes first (unanchored targets, non-ASCII characters
/// in the arguments), then the non-ASCII warning listing them by code point (a Cyrillic `а` in
/// an address looks like a Latin `a`), each target's field, anchoring and provenance, the tool's
/// flags, and last the tool and every argument in full — so nothing an argument contains
/// (padding, fake lines) can push the warnings off the first screen (red-team F7). Shown on the
/// trusted side (approval API and CLI) with handles revealed ([`reveal_for_approver`], which
/// adds its own warning for the revealed values), and to a trusted MCP client with handles
/// described.
pub(super) fn describe_call(
    entry: &ToolEntry,
    args: &Map<String, Value>,
    targets: &[TargetFact],
) -> String {
    // Every argument in full, JSON-encoded (control characters escaped, strings quoted), so
    // padding, newlines or look-alike separators cannot hide part of a target from the human;
    // invisible and bidirectional-control characters are escaped too.
    let parts: Vec<String> = args
        .iter()
        .map(|(k, v)| format!("{}={}", Value::String(k.clone()), v))
        .collect();
    let call = escape_invisible(&format!("{}({})", entry.exposed, parts.join(", ")));
    let unanchored = targets.iter().filter(|t| !t.anchored).count();
    let (listed, distinct) = flagged_code_points(&Value::Object(args.clone()).to_string());
    let mut out = format!("{} of {} target(s) NOT ANCHORED", unanchored, targets.len());
    if distinct > 0 {
        out.push_str(&format!(
            "; {distinct} distinct non-ASCII character(s) in the arguments\n  WARNING: non-ASCII characters (look-alikes possible): {}",
            code_point_list(&listed, distinct)
        ));
    }
    // Unanchored targets first.
    let mut ordered: Vec<&TargetFact> = targets.iter().collect();
    ordered.sort_by_key(|t| t.anchored);
    for t in ordered {
        let source = match &t.provenance {
            Provenance::Task => "named in the task".to_owned(),
            Provenance::Operator => "operator's trusted targets".to_owned(),
            Provenance::AuthoritativeField { source } => {
                format!("authoritative field of {source}")
            }
            Provenance::Directory { upstream } => {
                format!("listed in the directory of {upstream} (operator-declared)")
            }
            Provenance::FreeText { source } => format!("free text of {source}"),
            Provenance::Literal => "written by the agent".to_owned(),
            Provenance::ProtectedObject => {
                "PROTECTED OBJECT: the agent saw its content only as handles".to_owned()
            }
            Provenance::UnreadObject => {
                "UNREAD OBJECT: the agent has not read it; the call matches against its content"
                    .to_owned()
            }
        };
        let state = if t.anchored {
            "anchored"
        } else {
            "NOT ANCHORED"
        };
        out.push_str(&format!(
            "\n  target {}: {state} ({source})",
            escape_invisible(&Value::String(t.field.clone()).to_string())
        ));
    }
    let mut flags: Vec<String> = Vec::new();
    if entry.destructive {
        flags.push("destructive".into());
    }
    if entry.financial {
        flags.push("financial".into());
    }
    flags.push(format!("{} sink", entry.sink.as_str()));
    out.push_str(&format!("\n  tool: {}", flags.join(", ")));
    out.push_str(&format!("\n  call: {call}"));
    out
}

/// Every handle id in `text`, in order of appearance (repeats included).
fn handle_ids(text: &str) -> Vec<HandleId> {
    let mut ids = Vec::new();
    let mut value = Value::String(text.to_owned());
    let _ = secureclaw_core::handle::substitute_handles::<()>(&mut value, &mut |id| {
        ids.push(id.clone());
        Ok(id.0.clone())
    });
    ids
}

/// `text` with each handle replaced by `replacements[id]`; handles without one stay as they are.
fn replace_handles(text: &str, replacements: &BTreeMap<HandleId, String>) -> String {
    let mut value = Value::String(text.to_owned());
    let _ = secureclaw_core::handle::substitute_handles::<()>(&mut value, &mut |id| {
        Ok(replacements
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.0.clone()))
    });
    match value {
        Value::String(s) => s,
        _ => text.to_owned(),
    }
}

/// Replace the handles in `text` by their values, for display to a trusted approver (CLI,
/// operator API) only — never to the runtime. Unresolvable handles stay as they are.
///
/// A revealed value is what the human actually approves, so it is checked here (red-team F4,
/// F7): it is shown between «» with control, invisible and bidirectional characters, quotes and
/// the delimiters escaped ([`display_escape`]), cut after [`MAX_REVEALED_VALUE_CHARS`]; and
/// when any revealed value has non-ASCII or escaped characters, or was cut, a warning line
/// naming them by code point is put before everything else.
pub async fn reveal_for_approver(store: &dyn VaultStore, text: &str) -> String {
    let mut replacements = BTreeMap::new();
    let mut flagged_values = 0usize;
    let mut odd = String::new();
    for id in handle_ids(text) {
        if replacements.contains_key(&id) {
            continue;
        }
        let plain = match store.handle(&id).await.ok().flatten() {
            Some(r) => store
                .object_value_at(&r.object_id, r.version)
                .await
                .ok()
                .flatten(),
            None => None,
        };
        if let Some(v) = plain {
            let v = String::from_utf8_lossy(&v);
            let suspicious = v.chars().any(|c| !c.is_ascii() || shown_escaped(c))
                || v.chars().count() > MAX_REVEALED_VALUE_CHARS;
            if suspicious {
                flagged_values += 1;
                odd.extend(v.chars().filter(|c| !c.is_ascii() || shown_escaped(*c)));
            }
            replacements.insert(
                id,
                format!("«{}»", display_escape(&v, MAX_REVEALED_VALUE_CHARS)),
            );
        }
    }
    let body = replace_handles(text, &replacements);
    if flagged_values == 0 {
        return body;
    }
    let mut listed = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in odd.chars() {
        if seen.insert(c) && listed.len() < MAX_FLAGGED_CODE_POINTS {
            listed.push(format!("U+{:04X} {c:?}", u32::from(c)));
        }
    }
    format!(
        "WARNING: {flagged_values} revealed value(s) «…» contain non-ASCII, invisible or control characters or were cut (look-alikes possible): {}\n  {body}",
        code_point_list(&listed, seen.len())
    )
}

/// Replace the handles in `text` by a description — label, sensitivity and source — for a
/// channel the runtime may read (an MCP client's confirmation prompt). Unknown handles stay
/// as they are.
pub async fn describe_handles(store: &dyn VaultStore, text: &str) -> String {
    let mut replacements = BTreeMap::new();
    for id in handle_ids(text) {
        if replacements.contains_key(&id) {
            continue;
        }
        if let Some(r) = store.handle(&id).await.ok().flatten() {
            let description = format!(
                "[protected {} ({}) from {}]",
                r.label,
                serde_json::to_value(r.sensitivity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                r.source
            );
            replacements.insert(id, description);
        }
    }
    replace_handles(text, &replacements)
}

impl Gateway {
    /// Replace the handles in `text` by their values, for a trusted approver (operator API,
    /// CLI) only — never for the runtime; see [`reveal_for_approver`].
    pub async fn reveal_for_approver(&self, text: &str) -> String {
        reveal_for_approver(self.inner.store.as_ref(), text).await
    }

    /// Replace the handles in `text` by their descriptions (label, sensitivity, source), for
    /// a channel the runtime may read; see [`describe_handles`].
    pub async fn describe_handles(&self, text: &str) -> String {
        describe_handles(self.inner.store.as_ref(), text).await
    }
}
