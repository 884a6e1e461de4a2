//! The read path (SecureClaw paper §3.2–§3.3): a read the policy allows is dispatched with a
//! [`ReadPermit`], its handles resolved and audited first; every result — of a read or of a
//! committed effect — is scrubbed of the values resolved or released into it and declassified
//! before the runtime sees it, and the objects a read showed are marked seen or protected.

use super::{CallOutcome, Gateway, Prepared, state::ObjectMark};
use crate::catalog::ToolEntry;
use crate::declassify::Declassifier;
use crate::executor::{Resolution, ResolveError};
use crate::permit::ReadPermit;
use crate::upstream::ToolOutput;
use secureclaw_core::anchor::collect_targets;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::AuditKind;
use secureclaw_core::handle::{HandleDenial, HandleId, HandleRecord, Sink, check_resolution};
use secureclaw_core::policy::PolicyRequest;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::SessionRecord;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The read a result answers (for [`Gateway::finish`]).
pub(super) struct ReadOf<'a> {
    /// The read was anchored (its authoritative fields yield anchored handles).
    anchored: bool,
    /// Its arguments (the objects it named).
    arguments: &'a Map<String, Value>,
    /// The records of the handles in its arguments.
    records: &'a [HandleRecord],
    /// Its arguments select part of the object ([`crate::known::selects_part`]): it never
    /// marks the object seen.
    partial: bool,
}

/// The `head` or `tail` of a line-range read ([`ToolEntry::line_range_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineRange {
    Head(usize),
    Tail(usize),
}

impl LineRange {
    /// The range `arguments` ask for: `Ok(None)` for none, `Ok(Some(_))` for exactly one of
    /// `head` and `tail` holding a whole number of lines (`1`, `1.0`, `1e0` alike, as the
    /// upstream reads them), and `Err(())` for anything else — both, a fraction, a negative
    /// number, a string: such a call is refused, never passed on with a range the gateway did
    /// not apply itself (red-team round 3: `head: 1.0` reached the upstream, which cut the raw
    /// file).
    fn of(arguments: &Map<String, Value>) -> Result<Option<Self>, ()> {
        let lines = |k: &str| -> Result<usize, ()> {
            let n = arguments.get(k).and_then(Value::as_f64).ok_or(())?;
            if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0) {
                return Err(());
            }
            // A whole number of lines; one beyond `u64` is "all lines".
            Ok(format!("{n:.0}")
                .parse::<u64>()
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)))
        };
        match (
            arguments.contains_key("head"),
            arguments.contains_key("tail"),
        ) {
            (false, false) => Ok(None),
            (true, false) => lines("head").map(|n| Some(Self::Head(n))),
            (false, true) => lines("tail").map(|n| Some(Self::Tail(n))),
            (true, true) => Err(()),
        }
    }

    /// `text` cut to the range, by lines.
    fn apply(self, text: &str) -> String {
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines: Vec<&str> = body.split('\n').collect();
        let kept = match self {
            Self::Head(n) => lines.get(..n.min(lines.len())).unwrap_or_default(),
            Self::Tail(n) => lines
                .get(lines.len().saturating_sub(n)..)
                .unwrap_or_default(),
        };
        kept.join("\n")
    }

    /// Cut every text block of `output`, and every string directly under its structured
    /// object, to the range.
    fn apply_to(self, output: &mut ToolOutput) {
        for block in &mut output.content {
            if block.get("type").and_then(Value::as_str) == Some("text")
                && let Some(Value::String(text)) = block.get_mut("text")
            {
                *text = self.apply(text);
            }
        }
        if let Some(Value::Object(fields)) = &mut output.structured {
            for value in fields.values_mut() {
                if let Value::String(text) = value {
                    *text = self.apply(text);
                }
            }
        }
    }
}

/// Replace every occurrence of a resolved value in the output's strings (and object keys) by
/// its handle. Longest values first, so a value containing another is replaced whole.
fn scrub_resolved(output: &mut ToolOutput, resolved: &[(String, HandleId)]) {
    let mut pairs: Vec<&(String, HandleId)> =
        resolved.iter().filter(|(v, _)| !v.is_empty()).collect();
    if pairs.is_empty() {
        return;
    }
    pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let fix = |text: &str| -> String {
        pairs.iter().fold(text.to_owned(), |acc, (value, id)| {
            acc.replace(value.as_str(), &id.0)
        })
    };
    rewrite_strings(output, &fix);
}

/// The handle resolutions prepared by [`Gateway::resolve_handles`], handed to the executor's
/// substitution in order. A handle it does not expect next (the substitution met the handles
/// in another order) fails closed as a store failure.
pub(super) struct Resolver(std::collections::VecDeque<(HandleId, Resolution)>);

impl Resolver {
    pub(super) fn next(&mut self, id: &HandleId) -> Resolution {
        match self.0.pop_front() {
            Some((expected, result)) if &expected == id => result,
            _ => Err(ResolveError::Store),
        }
    }
}

/// [`scrub_resolved`] for values released into earlier effects, applied to D's output: every
/// occurrence of each value outside a handle id, compared without letter case (ASCII and
/// Unicode simple lower case of the same length), becomes its handle id. Values shorter than 4
/// characters are left alone (they would match everywhere, and a detector finds nothing that
/// short); handle ids D minted are never rewritten.
fn scrub_released(output: &mut ToolOutput, released: &[(String, HandleId)]) {
    let mut pairs: Vec<(String, &HandleId)> = released
        .iter()
        .filter(|(v, _)| v.trim().chars().count() >= 4)
        .map(|(v, id)| (v.to_lowercase(), id))
        .collect();
    if pairs.is_empty() {
        return;
    }
    pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let fix_plain = |text: &str| -> String {
        let mut out = text.to_owned();
        for (value, id) in &pairs {
            out = replace_caseless(&out, value, &id.0);
        }
        out
    };
    let fix = |text: &str| -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for span in secureclaw_core::handle::handle_spans(text) {
            out.push_str(&fix_plain(text.get(at..span.start).unwrap_or_default()));
            out.push_str(text.get(span.clone()).unwrap_or_default());
            at = span.end;
        }
        out.push_str(&fix_plain(text.get(at..).unwrap_or_default()));
        out
    };
    rewrite_strings(output, &fix);
}

/// What replaces an identifier-like run of characters at a cut edge of a partial read
/// ([`withhold_cut_edges`]).
pub(crate) const CUT_EDGE_MARKER: &str = "[part of a value withheld at the edge of a partial read]";

/// Characters a run at a cut edge is made of: those of identifiers, addresses, account
/// numbers and tokens.
fn is_run_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '@' | '.' | '_' | '%' | '+' | '-' | '/' | '=')
}

/// A group an account or card number is written in ("3704", "0532"): letters and digits,
/// with a digit.
fn is_number_group(token: &str) -> bool {
    !token.is_empty()
        && token.chars().all(|c| c.is_ascii_alphanumeric())
        && token.chars().any(|c| c.is_ascii_digit())
}

/// Whether a run at a cut edge may be a piece of an identifier: it has a digit or an `@`, a
/// `.` between other characters (a domain, an address), or is long enough to be a piece of a
/// token ([`PIECE_MIN_CHARS`]). Ordinary words are left alone.
fn looks_like_a_piece(run: &str) -> bool {
    let inner_dot = run
        .trim_matches(|c: char| !c.is_alphanumeric())
        .contains('.');
    run.chars().any(|c| c.is_ascii_digit())
        || run.contains('@')
        || inner_dot
        || run.chars().count() >= PIECE_MIN_CHARS
}

/// A run at a cut edge this long is withheld whatever it holds (a piece of a key or token
/// without digits).
const PIECE_MIN_CHARS: usize = 8;

/// A partial read whose text has fewer visible characters than this is withheld whole: a
/// window that small is a probe, one or a few characters of a value at a time (red-team:
/// `length: 1` reads spelt out an address and a key letter by letter).
const MIN_PART_CHARS: usize = 16;

/// How many of `chars` (a text read from one end) belong to the run of identifier
/// characters it starts with, continuing over single spaces from one number group into the
/// next (an IBAN or card number written in groups of four). `chars` from the end are reversed, and so is
/// each group, which [`is_number_group`] does not mind.
fn edge_run_len(chars: &[char]) -> usize {
    let token = |from: usize| {
        chars
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| is_run_char(**c))
            .count()
    };
    let mut len = token(0);
    let first: String = chars.get(..len).unwrap_or_default().iter().collect();
    if len == 0 || !is_number_group(&first) {
        return len;
    }
    while chars.get(len) == Some(&' ') {
        let group_len = token(len + 1);
        let group: String = chars
            .get(len + 1..len + 1 + group_len)
            .unwrap_or_default()
            .iter()
            .collect();
        if !is_number_group(&group) {
            break;
        }
        len += 1 + group_len;
    }
    len
}

/// `text` with the identifier-like runs at its two ends replaced by [`CUT_EDGE_MARKER`]
/// (red-team round 3, README limitation "partial reads"). A read that selects part of an
/// object (an `offset`/`limit`, a line or byte range) of a server the gateway cannot read
/// whole may cut a value in two; each half alone is no value a detector knows, so the halves
/// of an address, an IBAN or a key would reach the runtime from two reads. Which runs count
/// is [`looks_like_a_piece`]; a text under [`MIN_PART_CHARS`] visible characters is withheld
/// whole; a handle id at an edge is left alone.
pub(crate) fn withhold_cut_edges(text: &str) -> String {
    let visible = text.chars().filter(|c| !c.is_whitespace()).count();
    if visible == 0 {
        return text.to_owned();
    }
    let spans = secureclaw_core::handle::handle_spans(text);
    if visible < MIN_PART_CHARS && !overlaps(&spans, &(0..text.len())) {
        return CUT_EDGE_MARKER.to_owned();
    }
    edges_withheld(text, &spans, 0, &looks_like_a_piece)
}

/// [`withhold_cut_edges`] with the edges of every line checked too, for the strong signs of a
/// piece only (a digit, an `@`, an inner `.`: [`has_identifier_sign`]). A server that wraps
/// the part it read in its own text (a header line, a footer) puts the cut edges at line
/// ends inside the text (red-team: `"Contents of …:\n<part>\n<footer>"` showed every half).
pub(crate) fn withhold_part_edges(text: &str) -> String {
    let outer = withhold_cut_edges(text);
    if !outer.contains('\n') {
        return outer;
    }
    let spans = secureclaw_core::handle::handle_spans(&outer);
    let mut out = String::with_capacity(outer.len());
    let mut offset = 0;
    for line in outer.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        out.push_str(&edges_withheld(body, &spans, offset, &has_identifier_sign));
        out.push_str(line.get(body.len()..).unwrap_or_default());
        offset += line.len();
    }
    out
}

/// Whether `range` overlaps one of `spans`.
fn overlaps(spans: &[std::ops::Range<usize>], range: &std::ops::Range<usize>) -> bool {
    spans
        .iter()
        .any(|s| s.start < range.end && range.start < s.end)
}

/// A digit, an `@` or a `.` between other characters: a run that certainly is no plain word.
fn has_identifier_sign(run: &str) -> bool {
    run.chars().any(|c| c.is_ascii_digit())
        || run.contains('@')
        || run
            .trim_matches(|c: char| !c.is_alphanumeric())
            .contains('.')
}

/// `text` (found at byte `base` of a text whose handle spans are `spans`) with the run at
/// each end replaced by [`CUT_EDGE_MARKER`] when `piece` says it may be a piece of a value.
/// Each end's run starts after the spaces and punctuation a cut may have landed on (a value in
/// groups read one group at a time, " DE89 ", is a piece too).
fn edges_withheld(
    text: &str,
    spans: &[std::ops::Range<usize>],
    base: usize,
    piece: &dyn Fn(&str) -> bool,
) -> String {
    let chars: Vec<char> = text.chars().collect();
    let reversed: Vec<char> = chars.iter().rev().copied().collect();
    let bytes = |run: &[char]| run.iter().map(|c| c.len_utf8()).sum::<usize>();
    let edge = |from_end: &[char]| -> (usize, usize) {
        let skip = from_end.iter().take_while(|c| !is_run_char(**c)).count();
        let rest = from_end.get(skip..).unwrap_or_default();
        let run = edge_run_len(rest);
        (
            bytes(from_end.get(..skip).unwrap_or_default()),
            bytes(rest.get(..run).unwrap_or_default()),
        )
    };
    let (head_skip, head_len) = edge(&chars);
    let (tail_skip, tail_len) = edge(&reversed);
    let head = head_skip..head_skip + head_len;
    let tail = text.len() - tail_skip - tail_len..text.len() - tail_skip;
    let withhold = |range: &std::ops::Range<usize>| {
        !range.is_empty()
            && !overlaps(spans, &(base + range.start..base + range.end))
            && text.get(range.clone()).is_some_and(piece)
    };
    if head.end >= tail.start {
        // One run from end to end: the whole text is a piece.
        let whole = head.start..tail.end.max(head.end);
        return if withhold(&whole) {
            format!(
                "{}{CUT_EDGE_MARKER}{}",
                text.get(..whole.start).unwrap_or_default(),
                text.get(whole.end..).unwrap_or_default()
            )
        } else {
            text.to_owned()
        };
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(text.get(..head.start).unwrap_or_default());
    if withhold(&head) {
        out.push_str(CUT_EDGE_MARKER);
    } else {
        out.push_str(text.get(head.clone()).unwrap_or_default());
    }
    out.push_str(text.get(head.end..tail.start).unwrap_or_default());
    if withhold(&tail) {
        out.push_str(CUT_EDGE_MARKER);
    } else {
        out.push_str(text.get(tail.clone()).unwrap_or_default());
    }
    out.push_str(text.get(tail.end..).unwrap_or_default());
    out
}

/// Stems of the keys under which structured content carries the part of the object that was
/// read: a key counts when, lower-cased and without `_` and `-`, it contains one
/// (`contents`, `Content`, `text_snippet`).
const PART_KEYS: &[&str] = &[
    "content", "text", "data", "body", "chunk", "line", "part", "value", "result", "output",
    "snippet", "excerpt", "slice", "window",
];

/// Whether structured content under `key` carries the part read ([`PART_KEYS`]).
fn is_part_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    PART_KEYS.iter().any(|stem| folded.contains(stem))
}

/// [`withhold_part_edges`] on every text block of a result, and on the strings of its
/// structured content that carry the part read: every string when the read selects a window
/// inside an object (`window`, [`crate::known::selects_window`]); otherwise (a page of whole
/// items) those under a [`PART_KEYS`] key, at any depth, and those equal to a text block (the
/// same part, mirrored), so the ids of a page of records are left alone.
fn withhold_cut_edges_of(output: &mut ToolOutput, window: bool) {
    fn walk(v: &mut Value, under_part_key: bool, texts: &[String]) {
        match v {
            Value::String(s) if under_part_key || texts.iter().any(|t| t == s) => {
                *s = withhold_part_edges(s);
            }
            Value::Array(items) => items
                .iter_mut()
                .for_each(|i| walk(i, under_part_key, texts)),
            Value::Object(map) => {
                for (k, val) in map.iter_mut() {
                    walk(val, under_part_key || is_part_key(k), texts);
                }
            }
            _ => {}
        }
    }
    let mut texts = Vec::new();
    for block in &mut output.content {
        if block.get("type").and_then(Value::as_str) == Some("text")
            && let Some(Value::String(text)) = block.get_mut("text")
        {
            texts.push(text.clone());
            *text = withhold_part_edges(text);
        }
    }
    if let Some(structured) = output.structured.as_mut() {
        walk(structured, window, &texts);
    }
}

/// Apply `fix` to every string of a result — values and object keys, at any depth, in the
/// content blocks and the structured content (the walk both scrubs share).
fn rewrite_strings(output: &mut ToolOutput, fix: &dyn Fn(&str) -> String) {
    fn walk(v: &mut Value, fix: &dyn Fn(&str) -> String) {
        match v {
            Value::String(s) => *s = fix(s),
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, fix)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    walk(&mut val, fix);
                    map.insert(fix(&k), val);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    for block in &mut output.content {
        walk(block, fix);
    }
    if let Some(st) = output.structured.as_mut() {
        walk(st, fix);
    }
}

/// `text` with every occurrence of `lower` (already lower-cased) replaced by `with`, letter
/// case ignored. Compared char by char on the lower-cased text when lower-casing keeps every
/// char's byte length; otherwise on the exact text (no case folding).
fn replace_caseless(text: &str, lower: &str, with: &str) -> String {
    let folded = text.to_lowercase();
    if folded.len() != text.len()
        || folded
            .char_indices()
            .zip(text.char_indices())
            .any(|((a, _), (b, _))| a != b)
    {
        return text.replace(lower, with);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = folded.get(at..).and_then(|rest| rest.find(lower)) {
        let start = at + found;
        out.push_str(text.get(at..start).unwrap_or_default());
        out.push_str(with);
        at = start + lower.len();
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

impl Gateway {
    /// The read path of [`Gateway::call_unthrottled`]: a read tool is forwarded (with the
    /// permit only the read path's decision mints) and its result declassified.
    pub(super) async fn read_call(
        &self,
        session: &SessionRecord,
        tool: &str,
        entry: &ToolEntry,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        arguments: &Map<String, Value>,
    ) -> CallOutcome {
        // Only the read path's decision mints the permit the executor needs: a read in the
        // catalog, allowed by the policy, whose handles all name it as a sink.
        let policy_span = tracing::info_span!(
            "policy",
            decision = tracing::field::Empty,
            reason = tracing::field::Empty
        );
        let decided = policy_span.in_scope(|| {
            ReadPermit::decide(
                entry,
                self.inner.policy.as_ref(),
                policy_request,
                &prepared.handle_records,
            )
        });
        match &decided {
            Ok(_) => policy_span.record("decision", "allow"),
            Err(reason) => policy_span
                .record("decision", "deny")
                .record("reason", reason.as_str()),
        };
        drop(policy_span);
        let permit = match decided {
            Ok(permit) => permit,
            Err(reason) => {
                return self.deny(session, tool, Some(entry), reason, None).await;
            }
        };
        if entry.matches_content && !self.take_match_read(session, arguments).await {
            return self
                .deny(session, tool, Some(entry), ReasonCode::MatchBudget, None)
                .await;
        }
        let anchored = self
            .read_anchored(session, arguments, &prepared.handle_records)
            .await;
        let (mut resolver, pairs) = self.resolve_handles(session, entry, None, arguments).await;
        let mut resolve = |id: &HandleId| resolver.next(id);
        // A line-range read of a known server goes out whole, so that the detectors see the
        // whole object, and the range is applied to the scrubbed text below.
        let range = if entry.line_range_read {
            match LineRange::of(arguments) {
                Ok(range) => range,
                Err(()) => {
                    return self
                        .deny(
                            session,
                            tool,
                            Some(entry),
                            ReasonCode::InvalidArguments,
                            None,
                        )
                        .await;
                }
            }
        } else {
            None
        };
        let whole;
        let sent = match range {
            Some(_) => {
                let mut args = arguments.clone();
                args.remove("head");
                args.remove("tail");
                whole = args;
                &whole
            }
            None => arguments,
        };
        match self.inner.executor.read(permit, sent, &mut resolve).await {
            Ok(output) => {
                let partial = crate::known::selects_part(arguments);
                let window = crate::known::selects_window(arguments);
                let read = ReadOf {
                    anchored,
                    arguments,
                    records: &prepared.handle_records,
                    partial,
                };
                if anchored {
                    self.note_read_amounts(session, &output, arguments).await;
                }
                let mut outcome = self
                    .finish(session, entry, Some(read), output, None, &pairs, arguments)
                    .await;
                if let CallOutcome::Completed { output, .. } = &mut outcome {
                    match range {
                        Some(range) => range.apply_to(output),
                        // A part the gateway could not read whole: its cut edges may split a
                        // value the detectors would have found in the whole object.
                        None if partial => withhold_cut_edges_of(output, window),
                        None => {}
                    }
                }
                if anchored && let CallOutcome::Completed { output, .. } = &outcome {
                    self.note_read_payees(session, output, arguments).await;
                }
                if let CallOutcome::Completed { output, .. } = &outcome {
                    self.note_directory(session, entry, output, arguments).await;
                }
                outcome
            }
            Err(e) => self.exec_failure(session, entry, &e, None).await,
        }
    }

    /// Resolve, in order, every handle that the executor's substitution will meet in
    /// `arguments` for this sink, stopping at the first failure (as the substitution does):
    /// the record is checked with [`check_resolution`], the value read from the vault and the
    /// resolution audited — before anything is sent. Returns a resolver for the executor that
    /// hands out these results in the same order (fail closed on any mismatch), and the
    /// (plaintext, handle) pairs resolved.
    pub(super) async fn resolve_handles(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        action: Option<&ActionId>,
        arguments: &Map<String, Value>,
    ) -> (Resolver, Vec<(String, HandleId)>) {
        let mut ids: Vec<HandleId> = Vec::new();
        let mut probe = Value::Object(arguments.clone());
        let _ = secureclaw_core::handle::substitute_handles::<()>(&mut probe, &mut |id| {
            ids.push(id.clone());
            Ok(id.0.clone())
        });
        // Each distinct handle is checked, read and audited once per call, with the number of
        // its occurrences (red-team F10: one record per occurrence let one call write 10k
        // audit records); every occurrence gets the same result.
        let mut counts: BTreeMap<&HandleId, u64> = BTreeMap::new();
        for id in &ids {
            *counts.entry(id).or_default() += 1;
        }
        let mut done: BTreeMap<HandleId, Resolution> = BTreeMap::new();
        let mut results = std::collections::VecDeque::with_capacity(ids.len());
        let mut resolved = Vec::new();
        for id in &ids {
            let result = match done.get(id) {
                Some(r) => r.clone(),
                None => {
                    let count = counts.get(id).copied().unwrap_or(1);
                    let r = self.resolve_one(session, entry, action, id, count).await;
                    if let Ok(plain) = &r {
                        resolved.push((plain.clone(), id.clone()));
                    }
                    done.insert(id.clone(), r.clone());
                    r
                }
            };
            let failed = result.is_err();
            results.push_back((id.clone(), result));
            if failed {
                break;
            }
        }
        (Resolver(results), resolved)
    }

    async fn resolve_one(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        action: Option<&ActionId>,
        id: &HandleId,
        occurrences: u64,
    ) -> Resolution {
        let now = self.now();
        let rec = self
            .inner
            .store
            .handle(id)
            .await
            .map_err(|_| ResolveError::Store)?;
        let sink = Sink {
            upstream: &entry.upstream,
            tool: &entry.name,
            kind: entry.sink,
        };
        check_resolution(rec.as_ref(), &session.caller, &session.id, &sink, now)
            .map_err(ResolveError::Denied)?;
        let rec = rec.ok_or(ResolveError::Denied(HandleDenial::Unavailable))?;
        let value = self
            .inner
            .store
            .object_value_at(&rec.object_id, rec.version)
            .await
            .map_err(|_| ResolveError::Store)?
            .ok_or(ResolveError::Denied(HandleDenial::Unavailable))?;
        let mut ev = self.event(AuditKind::HandleResolve, session, &entry.exposed);
        ev.action_id = action.map(|a| a.0.clone());
        ev.detail = json!({"handle": id, "sink": format!("{}__{}", entry.upstream, entry.name),
                           "occurrences": occurrences});
        self.audit(ev).await.map_err(|()| ResolveError::Store)?;
        Ok(String::from_utf8_lossy(&value).into_owned())
    }

    /// The text the runtime supplied for this call (F1): every string and key of its
    /// arguments (as sent and normalized, handle ids aside) and the values the session wrote
    /// before; `fresh_all` when the arguments hold anything address-like.
    fn runtime_text(
        &self,
        arguments: &Map<String, Value>,
        written: Vec<String>,
        written_full: bool,
    ) -> crate::declassify::RuntimeText {
        fn strings(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
                Value::Object(map) => {
                    for (k, i) in map {
                        out.push(k.clone());
                        strings(i, out);
                    }
                }
                Value::Null | Value::Bool(_) => {}
            }
        }
        let mut out = Vec::new();
        strings(&Value::Object(arguments.clone()), &mut out);
        let normalized: Vec<String> = out
            .iter()
            .filter_map(|s| match secureclaw_core::normalize::normalize(s) {
                std::borrow::Cow::Owned(n) => Some(n),
                std::borrow::Cow::Borrowed(_) => None,
            })
            .collect();
        out.extend(normalized);
        out.retain(|s| !s.trim().is_empty());
        // A full written set stands for "anything may be the session's own text": every value
        // of the result gets a fresh handle (fail closed, like its reads being unanchored).
        out.extend(written);
        // Past this much text a substring test per vaulted value costs too much: treat every
        // value of the result as the runtime's (fresh handles only).
        const MAX_RUNTIME_TEXT: usize = 64 * 1024;
        let fresh_all = written_full
            || out.iter().map(String::len).sum::<usize>() > MAX_RUNTIME_TEXT
            || !collect_targets(arguments, &[], false).is_empty();
        crate::declassify::RuntimeText {
            strings: out,
            fresh_all,
        }
    }

    /// Declassify and audit a result. `read`: set for a read, whose objects become protected
    /// objects of the session if the result withheld a protected value (at least one
    /// handle); if they cannot be recorded, the result is withheld.
    #[expect(clippy::too_many_arguments, reason = "the result's full context")]
    pub(super) async fn finish(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        read: Option<ReadOf<'_>>,
        mut output: ToolOutput,
        action: Option<ActionId>,
        resolved: &[(String, HandleId)],
        runtime_args: &Map<String, Value>,
    ) -> CallOutcome {
        let anchored = read.as_ref().is_some_and(|r| r.anchored);
        // A value the executor resolved for this call goes back to its handle before anything
        // else looks at the result: an upstream that echoes its arguments must not turn a
        // handle into plaintext for the runtime.
        scrub_resolved(&mut output, resolved);
        // A value the session released into an earlier egress effect goes back to its handle
        // too, whatever its letter case, wherever it comes back (a channel read, a sent
        // folder, an echo): after D, so that what a detector finds is vaulted as usual and
        // only what none finds is replaced here (D never sees our own handle ids as text).
        // The written set is read once for both uses below (it was read twice per result).
        let (written, written_full) = self.written_values(session).await;
        let released = self.released_values(session, &written).await;
        // After an effect ran, a failure here must not claim that nothing was executed.
        let failed = if action.is_some() {
            ReasonCode::ResultWithheld
        } else {
            ReasonCode::StoreUnavailable
        };
        let runtime = self.runtime_text(runtime_args, written, written_full);
        let d = Declassifier {
            keys: &self.inner.keys,
            runtime: &runtime,
            store: self.inner.store.as_ref(),
            classifier: &self.inner.classifier,
            summary: &self.inner.config.summary,
            handle_ttl_ms: self.inner.config.limits.handle_ttl_ms,
            now: self.now(),
        };
        let declassify_span = tracing::info_span!(
            "declassify",
            handles = tracing::field::Empty,
            cut = tracing::field::Empty
        );
        let declassified = {
            use tracing::Instrument as _;
            d.declassify(session, entry, anchored, output, resolved)
                .instrument(declassify_span.clone())
                .await
        };
        if let Ok((_, handles, cut)) = &declassified {
            declassify_span
                .record("handles", *handles as u64)
                .record("cut", *cut);
        }
        drop(declassify_span);
        match declassified {
            Ok((mut output, handles, cut)) => {
                scrub_released(&mut output, &released);
                if let Some(read) = &read
                    && handles > 0
                {
                    let records: BTreeMap<HandleId, HandleRecord> = read
                        .records
                        .iter()
                        .map(|r| (r.id.clone(), r.clone()))
                        .collect();
                    if self
                        .mark(
                            ObjectMark::Protected,
                            session,
                            entry,
                            read.arguments,
                            &records,
                        )
                        .await
                        .is_err()
                    {
                        return self
                            .deny(
                                session,
                                &entry.exposed,
                                Some(entry),
                                failed,
                                action.as_ref(),
                            )
                            .await;
                    }
                } else if let Some(read) = &read
                    && !output.is_error
                    && !cut
                    && !read.partial
                {
                    // A read that withheld nothing and cut nothing (a summary cut hides part of
                    // the object, red-team R2): the session has seen the object's content (see
                    // `ObjectMark::Seen`). A failure only costs a later edit's read-first.
                    let records: BTreeMap<HandleId, HandleRecord> = read
                        .records
                        .iter()
                        .map(|r| (r.id.clone(), r.clone()))
                        .collect();
                    let _ = self
                        .mark(ObjectMark::Seen, session, entry, read.arguments, &records)
                        .await;
                }
                let mut ev = self.event(AuditKind::Read, session, &entry.exposed);
                ev.action_id = action.as_ref().map(|a| a.0.clone());
                ev.detail = json!({"handles_issued": handles, "is_error": output.is_error});
                // The result record does not hold up the answer (issue 14 item 2: no fsync on a
                // read's path, none after an effect on the caller's path).
                self.audit_later(ev).await;
                CallOutcome::Completed {
                    output,
                    action_id: action,
                }
            }
            Err(()) => {
                self.deny(
                    session,
                    &entry.exposed,
                    Some(entry),
                    failed,
                    action.as_ref(),
                )
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        CUT_EDGE_MARKER, HandleId, LineRange, ToolOutput, replace_caseless, scrub_released,
        withhold_cut_edges, withhold_cut_edges_of, withhold_part_edges,
    };
    use serde_json::{Value, json};

    /// A value cut in two by partial reads (byte offsets, line ranges of a server the gateway
    /// cannot read whole): the piece at each edge is withheld, each half of an IBAN, an
    /// address or a key; words, and handle ids, at the edges stay.
    #[test]
    fn identifier_pieces_at_the_cut_edges_are_withheld() {
        let m = CUT_EDGE_MARKER;
        // The two halves of an IBAN in groups, and of an address.
        assert_eq!(
            withhold_cut_edges("Pay to IBAN DE89 3704 00"),
            format!("Pay to IBAN {m}")
        );
        assert_eq!(
            withhold_cut_edges("44 0532 0130 00 by Friday"),
            format!("{m} by Friday")
        );
        assert_eq!(
            withhold_cut_edges("write to alice.smi"),
            format!("write to {m}")
        );
        assert_eq!(
            withhold_cut_edges("th@example.com for the"),
            format!("{m} for the")
        );
        // A key cut anywhere, and a text that is one piece.
        assert_eq!(
            withhold_cut_edges("key AKIAIOSFODNN7EX"),
            format!("key {m}")
        );
        assert_eq!(withhold_cut_edges("AMPLE42"), m);
        // Words at the edges stay; so does the middle, and a handle id at an edge.
        assert_eq!(
            withhold_cut_edges("Dear team, the meeting is moved"),
            "Dear team, the meeting is moved"
        );
        assert_eq!(
            withhold_cut_edges("call 555 0100 now, or write"),
            "call 555 0100 now, or write"
        );
        assert_eq!(
            withhold_cut_edges("hdl_em_abcdefghijklmnopqrstuvwxyz234567 is the sender"),
            "hdl_em_abcdefghijklmnopqrstuvwxyz234567 is the sender"
        );
        assert_eq!(withhold_cut_edges(""), "");
        // Non-ASCII text is cut on character boundaries.
        assert_eq!(
            withhold_cut_edges("Grüße an Zoë und Jürgen 12"),
            format!("Grüße an Zoë und Jürgen {m}")
        );
        // A cut on a separator: the group next to it is a piece too.
        assert_eq!(
            withhold_cut_edges("the account number is DE89 "),
            format!("the account number is {m} ")
        );
        // A long run without digits (a piece of a key or token).
        assert_eq!(
            withhold_cut_edges("EXAMPLEKEY and more text"),
            format!("{m} and more text")
        );
        // A window too small to be anything but a probe is withheld whole.
        for probe in ["a", " @ ", "alice.sm", "ODNN7EXAMPLE"] {
            assert_eq!(withhold_cut_edges(probe), m, "{probe:?}");
        }
        // A part wrapped in the server's own lines: its edges are line edges.
        assert_eq!(
            withhold_part_edges(
                "Part of the file:\nalice.smith\n\n<error>Content truncated</error>"
            ),
            format!("Part of the file:\n{m}\n\n<error>Content truncated</error>")
        );
        assert_eq!(
            withhold_part_edges("Part of the file:\nNN7EXAMPLE and so on\nend of part"),
            format!("Part of the file:\n{m} and so on\nend of part")
        );
        // Plain lines keep their words.
        assert_eq!(
            withhold_part_edges("Agenda for the week\nTidy the shared folder on Friday."),
            "Agenda for the week\nTidy the shared folder on Friday."
        );
    }

    /// A window read's structured strings are checked whatever their key (red-team: the
    /// halves came back under `raw`); a page of whole items keeps its ids outside content-like
    /// keys.
    #[test]
    fn structured_parts_are_checked_by_the_kind_of_range() {
        let m = CUT_EDGE_MARKER;
        let output = || ToolOutput {
            content: vec![json!({"type": "text", "text": "see the structured content"})],
            structured: Some(
                json!({"raw": "alice.smith@exa", "items": [{"id": "INV-42"}],
                "Contents": "of the key AKIAIOSFODNN7"}),
            ),
            is_error: false,
        };
        let mut window = output();
        withhold_cut_edges_of(&mut window, true);
        let st = window.structured.unwrap_or_default();
        assert_eq!(st["raw"], m);
        assert_eq!(st["items"][0]["id"], m);
        assert_eq!(st["Contents"], format!("of the key {m}"));
        let mut page = output();
        withhold_cut_edges_of(&mut page, false);
        let st = page.structured.unwrap_or_default();
        assert_eq!(st["items"][0]["id"], "INV-42", "a page keeps its ids");
        assert_eq!(
            st["Contents"],
            format!("of the key {m}"),
            "a content-like key"
        );
    }

    /// Red-team round 3: `head` and `tail` reads each showed half of an address that a whole
    /// read withheld. The range is applied to the scrubbed whole text.
    #[test]
    fn line_ranges_cut_the_scrubbed_text() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        let of = |v: Value| LineRange::of(&args(v));
        assert_eq!(
            of(json!({"path": "/a", "head": 1})),
            Ok(Some(LineRange::Head(1)))
        );
        assert_eq!(
            of(json!({"path": "/a", "tail": 2})),
            Ok(Some(LineRange::Tail(2)))
        );
        // Other spellings of a whole number are the same range (red-team round 3: `1.0`).
        for n in [
            json!(1.0),
            json!(1e0),
            serde_json::from_str::<Value>("10e-1").unwrap(),
        ] {
            assert_eq!(
                of(json!({"path": "/a", "head": n})),
                Ok(Some(LineRange::Head(1)))
            );
        }
        assert_eq!(of(json!({"path": "/a"})), Ok(None));
        // Anything the gateway does not apply itself is refused, never passed on.
        for bad in [
            json!({"path": "/a", "head": 1, "tail": 1}),
            json!({"path": "/a", "head": "1"}),
            json!({"path": "/a", "head": 1.5}),
            json!({"path": "/a", "tail": -1}),
            json!({"path": "/a", "head": null}),
        ] {
            assert_eq!(of(bad.clone()), Err(()), "{bad}");
        }
        let scrubbed = "Email hdl_em_x today\nline two\nline three\n";
        assert_eq!(LineRange::Head(1).apply(scrubbed), "Email hdl_em_x today");
        assert_eq!(LineRange::Tail(2).apply(scrubbed), "line two\nline three");
        assert_eq!(
            LineRange::Head(10).apply(scrubbed),
            "Email hdl_em_x today\nline two\nline three"
        );
        assert_eq!(LineRange::Tail(0).apply(scrubbed), "");
        let mut output = ToolOutput {
            content: vec![json!({"type": "text", "text": scrubbed})],
            structured: Some(json!({"content": scrubbed})),
            is_error: false,
        };
        LineRange::Head(1).apply_to(&mut output);
        assert_eq!(output.content[0]["text"], "Email hdl_em_x today");
        assert_eq!(
            output.structured,
            Some(json!({"content": "Email hdl_em_x today"}))
        );
    }

    /// Red-team H2: a released value comes back as its handle whatever its letter case.
    #[test]
    fn released_values_are_found_without_letter_case() {
        let lower = "dr jane roe, patient 4471";
        assert_eq!(
            replace_caseless("posted: DR JANE ROE, PATIENT 4471!", lower, "hdl_x"),
            "posted: hdl_x!"
        );
        assert_eq!(
            replace_caseless(
                "Dr Jane Roe, patient 4471 and dr jane roe, patient 4471",
                lower,
                "h"
            ),
            "h and h"
        );
        assert_eq!(replace_caseless("nothing here", lower, "h"), "nothing here");
        // Text whose lower case changes byte lengths is compared exactly.
        assert_eq!(
            replace_caseless("İ dr jane roe, patient 4471", lower, "h"),
            "İ h"
        );
    }

    /// The released-value scrub rewrites plain text only: a handle id D minted that happens
    /// to contain a released value's letters is left whole.
    #[test]
    fn released_scrub_leaves_handle_ids_whole() {
        let minted = format!("hdl_em_{}", "abcdefgh".repeat(4));
        let mut out = ToolOutput {
            content: vec![json!({"type": "text", "text": format!("{minted} and ABCDEFGH")})],
            structured: Some(json!({"k": format!("abcdefgh {minted}")})),
            is_error: false,
        };
        scrub_released(
            &mut out,
            &[("abcdefgh".to_owned(), HandleId("hdl_ph_x".into()))],
        );
        assert_eq!(
            out.content[0]["text"],
            json!(format!("{minted} and hdl_ph_x"))
        );
        assert_eq!(
            out.structured,
            Some(json!({"k": format!("hdl_ph_x {minted}")}))
        );
    }
}
