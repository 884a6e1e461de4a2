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
use crate::detect::{IdentifierKind, detect};
use crate::handle::mask_handles;
use crate::policy::Provenance;
use serde_json::{Map, Value};

/// Argument names treated as effect targets when the operator configured none for a tool.
pub const DEFAULT_TARGET_FIELDS: &[&str] = &[
    "to",
    "cc",
    "bcc",
    "reply_to",
    "forward_to",
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

/// Substrings of argument names whose numeric values are targets (an account number, IBAN,
/// card or phone number written as a JSON number is still a destination).
pub const NUMERIC_TARGET_HINTS: &[&str] = &["account", "iban", "card", "phone"];

/// Substrings of argument names that hold amounts of money or other quantities: a number there
/// is not an address (a granted financial effect's amount is checked separately, against the
/// task's ceiling or the amounts of the reads the task anchored).
pub const AMOUNT_FIELD_HINTS: &[&str] = &["amount", "cents", "price", "total", "fee", "cost"];

/// Numbers with at least this many digits are address-like wherever they appear (a phone
/// number, an account number written as a JSON number), except in amount fields.
const ADDRESS_DIGITS: usize = 7;

/// URI schemes that name a destination even without `//` (`mailto:`, `tel:`, `https:host`).
const DESTINATION_SCHEMES: &[&str] = &[
    "http",
    "https",
    "hxxp",
    "hxxps",
    "ftp",
    "ftps",
    "sftp",
    "file",
    "mailto",
    "tel",
    "sms",
    "smsto",
    "callto",
    "sip",
    "sips",
    "xmpp",
    "ws",
    "wss",
    "smtp",
    "ldap",
    "ssh",
    "git",
    "s3",
    "gs",
    "irc",
    "matrix",
    "slack",
    "whatsapp",
    "signal",
    "telnet",
    "data",
    "javascript",
];

/// Whether `name` (an argument name) holds an amount ([`AMOUNT_FIELD_HINTS`]).
#[must_use]
pub fn is_amount_field(name: &str) -> bool {
    let n = squash(name);
    AMOUNT_FIELD_HINTS.iter().any(|h| n.contains(h))
}

/// Whether a JSON number is long enough to be an address (phone, account): an integer part
/// of at least [`ADDRESS_DIGITS`] digits.
fn address_like_number(n: &serde_json::Number) -> bool {
    let text = n.to_string();
    let int = text.trim_start_matches('-');
    let int = int.split(['.', 'e', 'E']).next().unwrap_or_default();
    int.len() >= ADDRESS_DIGITS || n.as_f64().is_some_and(|f| f.abs() >= 1e6)
}

/// Tokens of `text` that could be an address of some kind although no detector recognises
/// them (recall first; red-team finding F6): anything with an `@` between two parts
/// (`"attacker"@evil.example`, `attacker@[203.0.113.5]`, `attacker@evil`), a URI scheme
/// (`https:evil.example`, `hxxp://…`, `//evil.example/x`), an IP literal, a run of at least
/// seven digits, and addresses spelled out (`attacker at evil dot example`).
#[must_use]
pub fn address_like_tokens(text: &str) -> Vec<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '<' | '>' | '(' | ')'))
        .map(|w| w.trim_end_matches(['.', ',', ';', ':', '!', '?']))
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for w in &words {
        if address_like_word(w) {
            out.push((*w).to_owned());
        }
    }
    // `attacker at evil.example`
    for win in words.windows(3) {
        if let [a, at, host] = win
            && at.eq_ignore_ascii_case("at")
            && a.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
            && dotted_host(host)
        {
            out.push(win.join(" "));
        }
    }
    // `attacker at evil dot example`
    for win in words.windows(5) {
        if let [a, at, b, dot, c] = win
            && at.eq_ignore_ascii_case("at")
            && dot.eq_ignore_ascii_case("dot")
            && [a, b, c].iter().all(|w| {
                w.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
            })
        {
            out.push(win.join(" "));
        }
    }
    out
}

/// Whether `w` is a bang path or source route (red-team F5): `evil.example!attacker`,
/// `host!host2!user` with a dotted host, or a `%` hack `attacker%evil.example@relay`.
fn route_like_word(w: &str) -> bool {
    let hostish = |p: &str| {
        !p.is_empty()
            && p.contains('.')
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    let userish = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    };
    let parts: Vec<&str> = w.split('!').collect();
    if let [hosts @ .., user] = parts.as_slice()
        && !hosts.is_empty()
        && userish(user)
        && hosts.iter().all(|h| userish(h))
        && hosts.iter().any(|h| hostish(h))
    {
        return true;
    }
    if let Some((local, _)) = w.split_once('@')
        && let Some((user, host)) = local.rsplit_once('%')
        && userish(user)
        && hostish(host)
    {
        return true;
    }
    false
}

/// `text` with the characters that separate host labels like `.` written as `.`: ideographic,
/// halfwidth and leader full stops (UTS #46 maps the first two to `.`; NFKC only U+FF0E) and
/// the "defanged" spellings `[.]`, `(.)`, `{.}`, `[dot]`, `(dot)` (red-team R6).
fn host_dots(text: &str) -> String {
    let mut t = text.replace(['\u{3002}', '\u{FF61}', '\u{2024}'], ".");
    for defanged in ["[.]", "(.)", "{.}", "[dot]", "(dot)", "[DOT]", "(DOT)"] {
        if t.contains(defanged) {
            t = t.replace(defanged, ".");
        }
    }
    t
}

/// File-name extensions that are not also a top-level domain attackers use: `report.pdf`
/// and `notes.txt` in a mail body are not hosts. (`.zip`, `.mov` and country codes such as
/// `.md` are real domains and stay hosts.)
const FILE_EXTENSIONS: &[&str] = &[
    "txt", "pdf", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "csv", "json", "png", "jpg", "jpeg",
    "gif", "svg", "html", "htm", "xml", "yaml", "yml", "toml", "ini", "cfg", "conf", "log", "js",
    "ts", "tsx", "jsx", "java", "cpp", "hpp", "exe", "dll", "bin", "dat", "db", "sql", "mp3",
    "mp4", "wav", "eml", "ics", "vcf", "odt", "ods", "rtf", "bak", "tmp", "lock", "pem", "crt",
    "tar", "gz", "tgz", "bz2", "xz", "jsonl",
];

fn file_name(token: &str) -> bool {
    token
        .rsplit_once('.')
        .is_some_and(|(_, ext)| FILE_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// Whether `w` is a host name with at least two labels and an alphabetic top-level label of
/// two or more letters (`evil.example`, `mail.evil.example`; not `v1.2`, `config.d`).
fn dotted_host(w: &str) -> bool {
    let labels: Vec<&str> = w.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && l.chars().all(|c| c.is_alphanumeric() || c == '-')
        })
        && labels
            .last()
            .is_some_and(|tld| tld.chars().count() >= 2 && tld.chars().all(char::is_alphabetic))
}

/// Whether `host:port` is a single-label host name (a letter, then letters, digits or `-`; at
/// least two characters) with a port of two to five digits up to 65535: `attacker:8443`, not
/// `Q3:10` or `step:2`.
fn single_label_host_with_port(host: &str, port: &str) -> bool {
    host.len() >= 2
        && host.starts_with(|c: char| c.is_ascii_alphabetic())
        && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && port.len() >= 2
        && port.parse::<u32>().is_ok_and(|p| p <= 65_535)
        && !host
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn address_like_word(w: &str) -> bool {
    if route_like_word(w) {
        return true;
    }
    // A host and port: `evil.example:25`, and a single-label host with a port number
    // (`attacker:8443`, `localhost:25`), which resolves through the search domain or hosts file.
    if let Some((host, port)) = w.rsplit_once(':')
        && !port.is_empty()
        && port.len() <= 5
        && port.chars().all(|c| c.is_ascii_digit())
        && (dotted_host(host) || single_label_host_with_port(host, port))
    {
        return true;
    }
    // A URL without its scheme: `evil.example/attacker`, `evil.example:8080/x`,
    // `evil.example\attacker`.
    if let Some((host, _)) = w.split_once(['/', '\\'])
        && dotted_host(host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        }))
    {
        return true;
    }
    if let Some((local, domain)) = w.rsplit_once('@')
        && (!local.is_empty() || domain.contains('.'))
        && !domain.is_empty()
    {
        return true;
    }
    if let Some((scheme, rest)) = w.split_once(':')
        && !rest.is_empty()
        && scheme.len() >= 2
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        && (rest.starts_with("//")
            || DESTINATION_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
    {
        return true;
    }
    if (w.starts_with("//") || w.starts_with("\\\\"))
        && w.chars().nth(2).is_some_and(char::is_alphanumeric)
    {
        return true;
    }
    let bare = w.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok()
        || bare.rsplit_once(':').is_some_and(|(host, _)| {
            host.trim_end_matches(']')
                .trim_start_matches('[')
                .parse::<std::net::IpAddr>()
                .is_ok()
        })
    {
        return true;
    }
    let mut run = 0usize;
    for c in w.chars() {
        if c.is_ascii_digit() {
            run += 1;
            if run >= ADDRESS_DIGITS {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// Argument names that reference stored objects (attachments, files, documents). For an
/// `egress` tool their values are targets: sending a stored object out is a disclosure the
/// user must have asked for (matched case-insensitively, `_`/`-` ignored, singular or plural).
pub const OBJECT_REFERENCE_FIELDS: &[&str] = &[
    "attachment",
    "attachments",
    "attachmentid",
    "attachmentids",
    "fileid",
    "fileids",
    "files",
    "documentid",
    "documentids",
    "document",
    "documents",
    "docid",
    "docids",
    "objectid",
    "objectids",
];

/// How a target was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetOrigin {
    /// A string inside an argument the target list names.
    NamedField,
    /// An identifier the detectors found in a value or an object key outside the named
    /// fields.
    Identifier(IdentifierKind),
    /// A number in an argument named like an account, IBAN, card or phone field.
    Number,
    /// A reference to a stored object sent by an `egress` tool, or an object id (`*_id`,
    /// `id`) in the arguments of a destructive or financial tool.
    ObjectReference,
    /// Text or a number no detector recognises that could still be an address
    /// ([`address_like_tokens`]; a long number in any field but an amount).
    AddressLike,
}

/// One target value found in the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Argument name it came from.
    pub field: String,
    /// The value (may be a handle id).
    pub value: String,
    /// How it was found.
    pub origin: TargetOrigin,
}

/// `text` with `%XX` escapes decoded, if it has any and the result is UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut decoded_any = false;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                decoded_any = true;
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    if !decoded_any {
        return None;
    }
    String::from_utf8(out).ok().filter(|d| d.as_str() != text)
}

fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The targets one text names, in the order [`collect_targets_bounded`] records them: its
/// identifiers after normalization (percent- and base64-encoded ones decoded), its
/// address-like tokens, and in an `egress` call every host name it mentions. A pure function
/// of `(text, egress)`; the field the text sits in is the caller's.
fn collect_text_targets(text: &str, egress: bool, out: &mut Vec<(String, TargetOrigin)>) {
    collect_text_targets_at(text, egress, out, 0);
}

/// Layers of encoding (percent-encoding, base64) decoded inside one text before the walk
/// stops decoding and fails closed.
const MAX_DECODE_LAYERS: usize = 4;

/// [`collect_text_targets`] inside `layer` layers of encoding. A text still encoded after
/// [`MAX_DECODE_LAYERS`] layers is a target itself (never anchored: the call waits for a
/// human or is refused), and is not decoded further: `%2525…2540` nested 32,000 deep once
/// recursed once per layer, each layer scanning the whole text again, until the stack
/// overflowed and the gateway aborted (red-team 2026-12-05, F6).
fn collect_text_targets_at(
    text: &str,
    egress: bool,
    out: &mut Vec<(String, TargetOrigin)>,
    layer: usize,
) {
    // Normalized first (NFKC; zero-width, bidi, control characters removed), as the
    // read path does: a recipient split by a zero-width space or written in full-width
    // letters is still found. Handle ids are the gateway's own tokens; it checks their
    // records separately.
    let normalized = host_dots(&crate::normalize::normalize(text));
    // A percent-encoded address (`attacker%40evil.example`) is found too.
    if normalized.contains('%')
        && let Some(decoded) = percent_decoded(&normalized)
    {
        if layer >= MAX_DECODE_LAYERS {
            out.push((too_deep(text), TargetOrigin::AddressLike));
            return;
        }
        collect_text_targets_at(&decoded, egress, out, layer + 1);
    }
    let text = mask_handles(&normalized);
    let findings = detect(&text);
    if egress {
        // Data that leaves may go to any host its text names (`smtp.evil.example`,
        // `attacker#evil.example`, `ssh evil.example`; red-team R6): every host name
        // outside what the detectors found (an e-mail's or URL's own host is not a
        // second target) is a target of an egress call.
        let mut masked = text.to_string();
        for f in &findings {
            // Same byte length (ASCII spaces), so the other ranges stay valid.
            let range = f.range();
            if masked.get(range.clone()).is_some() {
                let blank = " ".repeat(range.len());
                masked.replace_range(range, &blank);
            }
        }
        for token in masked.split(|c: char| !(c.is_alphanumeric() || c == '.' || c == '-')) {
            let token = token.trim_matches(['.', '-']);
            if dotted_host(token) && !file_name(token) {
                out.push((token.to_owned(), TargetOrigin::AddressLike));
            }
        }
    }
    for f in findings {
        let Some(v) = text.get(f.range()) else {
            continue;
        };
        if f.kind == IdentifierKind::Secret {
            // A credential is protected data, not a destination; but base64 (or
            // base64url) of an address is the address (red-team F5): the identifiers
            // of the decoded text are targets. Each decoding shortens the text, so the
            // recursion ends.
            if let Some(decoded) = crate::detect::decode_base64_text(v)
                && decoded.len() < v.len()
            {
                if layer >= MAX_DECODE_LAYERS {
                    out.push((too_deep(v), TargetOrigin::AddressLike));
                } else {
                    collect_text_targets_at(&decoded, egress, out, layer + 1);
                }
            }
        } else {
            out.push((v.to_owned(), TargetOrigin::Identifier(f.kind)));
        }
    }
    // Recall first: what no detector recognises but could still be an address is a
    // target too (unanchored unless the task names it exactly).
    for token in address_like_tokens(&text) {
        out.push((token, TargetOrigin::AddressLike));
    }
}

/// The target standing for a text encoded more deeply than the walk decodes: its first
/// characters and a marker (no task names it, so it never anchors).
fn too_deep(text: &str) -> String {
    let head: String = text.chars().take(64).collect();
    format!("{head}… (encoded more than {MAX_DECODE_LAYERS} layers deep)")
}

/// What one text names ([`collect_text_targets`]), shared by every walk that meets it.
type TextTargets = std::sync::Arc<[(String, TargetOrigin)]>;

/// Texts of at most this many bytes have their targets remembered ([`text_targets`]).
const MEMO_MAX_TEXT: usize = 16 * 1024;
/// The memo is emptied when the texts and targets it holds pass this many bytes.
const MEMO_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Remembered [`collect_text_targets`] results by text (one map without and one with
/// `egress`), and the bytes they hold.
#[derive(Default)]
struct TargetMemo {
    entries: [std::collections::HashMap<Box<str>, TextTargets>; 2],
    bytes: usize,
}

static TARGET_MEMO: std::sync::LazyLock<std::sync::Mutex<TargetMemo>> =
    std::sync::LazyLock::new(Default::default);

/// [`collect_text_targets`], remembered. One effect walks the same arguments several times —
/// its preview, its commit (which prepares the bound request again), the protected-object and
/// grant checks, the runtime-text check of its result — and the detectors' pass over each
/// string was a quarter of an in-process preview + commit (issue 14, BENCHMARKS.md §15). The
/// result is a pure function of the key, so a remembered one is the one a fresh pass would
/// find; the key is the whole text, not a digest of it. Bounded: texts over
/// [`MEMO_MAX_TEXT`] are not remembered, and the memo starts over when it holds more than
/// [`MEMO_MAX_BYTES`]. A poisoned lock only means the memo is bypassed.
fn text_targets(text: &str, egress: bool) -> TextTargets {
    if text.len() > MEMO_MAX_TEXT {
        let mut out = Vec::new();
        collect_text_targets(text, egress, &mut out);
        return out.into();
    }
    let map = usize::from(egress);
    if let Ok(memo) = TARGET_MEMO.lock()
        && let Some(found) = memo.entries.get(map).and_then(|m| m.get(text))
    {
        return found.clone();
    }
    let mut out = Vec::new();
    collect_text_targets(text, egress, &mut out);
    let found: TextTargets = out.into();
    if let Ok(mut memo) = TARGET_MEMO.lock() {
        let size = text.len() + found.iter().map(|(v, _)| v.len() + 32).sum::<usize>() + 64;
        if memo.bytes + size > MEMO_MAX_BYTES {
            memo.entries
                .iter_mut()
                .for_each(std::collections::HashMap::clear);
            memo.bytes = 0;
        }
        let fresh = memo
            .entries
            .get_mut(map)
            .is_some_and(|m| m.insert(text.into(), found.clone()).is_none());
        if fresh {
            memo.bytes += size;
        }
    }
    found
}

/// Every target of a call (DESIGN.md §3 "Targets, anchoring and provenance"; issue 11 item 3):
///
/// - every string inside an argument named in `fields` (as [`extract_targets`]);
/// - every identifier the detectors find anywhere else in the arguments — in string values and
///   in object keys, at any depth — so a recipient in `reply_to`, `forward_to` or written as an
///   object key is a target;
/// - every number in an argument named like an account, IBAN, card or phone field
///   ([`NUMERIC_TARGET_HINTS`]);
/// - when `egress` is set, every string or number inside an argument that references stored
///   objects ([`OBJECT_REFERENCE_FIELDS`]).
///
/// Duplicates (same field, same value) are reported once. Handle ids are found by the gateway
/// separately (it knows their records).
#[must_use]
pub fn collect_targets(
    arguments: &Map<String, Value>,
    fields: &[String],
    egress: bool,
) -> Vec<Target> {
    // Without a limit the walk cannot fail.
    collect_targets_bounded(arguments, fields, egress, usize::MAX).unwrap_or_default()
}

/// More distinct targets than allowed were found in one call's arguments
/// ([`collect_targets_bounded`]); the walk stopped there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyTargets {
    /// The limit that was exceeded.
    pub limit: usize,
}

/// [`collect_targets`] with at most `limit` distinct targets: the walk stops as soon as one
/// more is found, so the cost of a call with an unbounded number of identifiers is bounded
/// too. De-duplication is a hash set, linear in the number of targets (red-team F13: a linear
/// scan per target made 150k addresses cost minutes of CPU).
///
/// # Errors
/// [`TooManyTargets`] when the arguments hold more than `limit` distinct targets.
pub fn collect_targets_bounded(
    arguments: &Map<String, Value>,
    fields: &[String],
    egress: bool,
    limit: usize,
) -> Result<Vec<Target>, TooManyTargets> {
    struct Walk<'a> {
        fields: &'a [String],
        egress: bool,
        out: Vec<Target>,
        seen: std::collections::HashSet<(String, String)>,
        limit: usize,
        over: bool,
    }
    impl Walk<'_> {
        fn push(&mut self, field: &str, value: String, origin: TargetOrigin) {
            if self.over || value.trim().is_empty() {
                return;
            }
            if !self.seen.insert((field.to_owned(), value.clone())) {
                return;
            }
            if self.out.len() >= self.limit {
                self.over = true;
                return;
            }
            self.out.push(Target {
                field: field.to_owned(),
                value,
                origin,
            });
        }
        fn identifiers(&mut self, field: &str, text: &str) {
            if self.over {
                return;
            }
            for (value, origin) in text_targets(text, self.egress).iter() {
                if self.over {
                    break;
                }
                self.push(field, value.clone(), *origin);
            }
        }
        /// A field named like a destination ([`is_destination_field_name`]): every string below
        /// it is a target; numbers and keys are searched as anywhere else.
        fn destination(&mut self, field: &str, v: &Value) {
            match v {
                Value::String(s) => {
                    self.push(field, s.clone(), TargetOrigin::NamedField);
                    self.identifiers(field, s);
                }
                Value::Array(items) => items.iter().for_each(|i| self.destination(field, i)),
                Value::Object(map) => {
                    for (k, i) in map {
                        self.identifiers(field, k);
                        self.destination(field, i);
                    }
                }
                Value::Number(_) | Value::Null | Value::Bool(_) => self.value(field, v),
            }
        }
        /// Every scalar below `v` is a target of `origin` (named or object-reference field).
        fn all(&mut self, field: &str, v: &Value, origin: TargetOrigin, numbers: bool) {
            match v {
                Value::String(s) => self.push(field, s.clone(), origin),
                Value::Number(n) if numbers => self.push(field, n.to_string(), origin),
                Value::Array(items) => items
                    .iter()
                    .for_each(|i| self.all(field, i, origin, numbers)),
                Value::Object(map) => {
                    for (k, i) in map {
                        self.identifiers(field, k);
                        self.all(field, i, origin, numbers);
                    }
                }
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        fn value(&mut self, field: &str, v: &Value) {
            match v {
                Value::String(s) => {
                    // A whole value that is a host name (`evil.example`) in an egress call
                    // may be where the data goes, whatever the field is called.
                    if self.egress {
                        let host =
                            crate::normalize::normalize(s).replace(['\u{3002}', '\u{FF61}'], ".");
                        if dotted_host(host.trim().trim_end_matches('.')) {
                            self.push(field, s.clone(), TargetOrigin::AddressLike);
                        }
                    }
                    self.identifiers(field, s);
                }
                Value::Number(n) => {
                    let name = squash(field);
                    if NUMERIC_TARGET_HINTS.iter().any(|h| name.contains(h))
                        || has_destination_word(field)
                    {
                        self.push(field, n.to_string(), TargetOrigin::Number);
                    } else if address_like_number(n) && !is_amount_field(field) {
                        // A long number in any field may be a phone or account number.
                        self.push(field, n.to_string(), TargetOrigin::AddressLike);
                    }
                }
                Value::Array(items) => items.iter().for_each(|i| self.value(field, i)),
                Value::Object(map) => self.object(field, map),
                Value::Null | Value::Bool(_) => {}
            }
        }
        fn object(&mut self, parent: &str, map: &Map<String, Value>) {
            for (name, v) in map {
                // An identifier used as a key is a target wherever it appears.
                self.identifiers(if parent.is_empty() { name } else { parent }, name);
                if self.fields.iter().any(|f| f.eq_ignore_ascii_case(name)) {
                    // Every value of a target field is a target, whatever its shape: a number
                    // in `to` or `dest` is a phone or account number.
                    self.all(name, v, TargetOrigin::NamedField, true);
                } else if self.egress && OBJECT_REFERENCE_FIELDS.contains(&squash(name).as_str()) {
                    self.all(name, v, TargetOrigin::ObjectReference, true);
                } else if is_destination_field_name(name) {
                    self.destination(name, v);
                } else {
                    self.value(name, v);
                }
            }
        }
    }
    let mut w = Walk {
        fields,
        egress,
        out: Vec::new(),
        seen: std::collections::HashSet::new(),
        limit,
        over: false,
    };
    w.object("", arguments);
    if w.over {
        return Err(TooManyTargets { limit });
    }
    Ok(w.out)
}

/// Substrings of argument names (case-insensitive, `_`/`-` ignored) that name a destination
/// outside the exact [`DEFAULT_TARGET_FIELDS`] (red-team F5: `webhook_url`, `callback`,
/// `hostname`, `server`, `replyAddress`).
pub const DESTINATION_NAME_HINTS: &[&str] = &[
    "url",
    "uri",
    "host",
    "server",
    "endpoint",
    "callback",
    "webhook",
    "domain",
    "email",
    "recipient",
    "address",
    "channel",
    "phone",
    "relay",
    "proxy",
    "forward",
    "route",
    "smtp",
    "peer",
    "remote",
    "bucket",
    "href",
    "notify",
    "sendto",
];

/// Words that contain a [`DESTINATION_NAME_HINTS`] entry without naming a destination
/// (`security` holds `uri`, `ghost` holds `host`); removed before matching.
const NOT_DESTINATION_WORDS: &[&str] = &[
    "security",
    "obscurity",
    "maturity",
    "purity",
    "during",
    "curious",
    "ghost",
    "observer",
    "headphone",
    "microphone",
    "saxophone",
];

/// Words of argument names that hold content rather than a destination (`email_body`,
/// `email_subject`): such a field is searched like any other (an address inside its text is
/// still a target), but its whole text is not one.
const CONTENT_NAME_WORDS: &[&str] = &[
    "body",
    "subject",
    "text",
    "content",
    "message",
    "html",
    "description",
    "title",
    "note",
    "memo",
    "comment",
    "template",
];

/// Whole words of argument names that name a destination but are too short or too common to
/// match as substrings (`bic` is in `public`, `port` in `report`): a payment's `bic`/`swift`
/// code, its `creditor`/`beneficiary`/`payee`, an `acct` or `routing` number, a `port`
/// (red-team finding of 2026-12-03: these were not targets).
pub const DESTINATION_NAME_WORDS: &[&str] = &[
    "bic",
    "swift",
    "creditor",
    "beneficiary",
    "payee",
    "acct",
    "routing",
    "port",
    "sortcode",
];

/// The words of an argument name, lower-cased: split at `_`, `-`, `.`, spaces and
/// lower-to-upper case changes (`amountInCents` → `amount`, `in`, `cents`;
/// `beneficiaryBIC` → `beneficiary`, `bic`).
#[must_use]
pub fn name_words(name: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            words.push(std::mem::take(&mut cur));
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    words.push(cur);
    words.retain(|w| !w.is_empty());
    words
}

/// Whether one of the words of `name` ([`name_words`]) is in [`DESTINATION_NAME_WORDS`].
fn has_destination_word(name: &str) -> bool {
    name_words(name)
        .iter()
        .any(|w| DESTINATION_NAME_WORDS.contains(&w.as_str()))
}

/// Whether the argument `name` names a destination: it contains one of
/// [`DESTINATION_NAME_HINTS`] (case-insensitive, `_`/`-` ignored) or has a word in
/// [`DESTINATION_NAME_WORDS`], and no content word ([`CONTENT_NAME_WORDS`]). Its string values
/// are targets (red-team F5), and so are its numbers.
#[must_use]
pub fn is_destination_field_name(name: &str) -> bool {
    let mut n = squash(name);
    for w in NOT_DESTINATION_WORDS {
        n = n.replace(w, " ");
    }
    (DESTINATION_NAME_HINTS.iter().any(|h| n.contains(h)) || has_destination_word(name))
        && !CONTENT_NAME_WORDS.iter().any(|w| n.contains(w))
}

/// Words of an argument name that make it a file-system location: `path`, `filePath`,
/// `file_name`, `dir`, `folder`, a move's `source` and `destination`, `dest`, `target`,
/// `output` (red-team round 3: `dest` and `target` were anchored by bare words). Not `url` or
/// `uri`: a host written in the task (`www.example.com`) names its location without a `/`.
const LOCATION_NAME_WORDS: &[&str] = &[
    "dest",
    "destination",
    "dir",
    "directory",
    "file",
    "filename",
    "folder",
    "location",
    "outfile",
    "output",
    "path",
    "source",
    "target",
];

/// Whether the argument `name` holds a file-system location ([`LOCATION_NAME_WORDS`]).
#[must_use]
pub fn is_location_field(name: &str) -> bool {
    name_words(name)
        .iter()
        .any(|w| LOCATION_NAME_WORDS.contains(&w.as_str()))
}

/// [`anchor_provenance`] of a target found in the argument `field`. A relative location
/// without a directory (`summary`, `Summarize` in a `path` field) is resolved against a base
/// the gateway does not know, so no word of the request text anchors it; only the envelope's
/// and the operator's trusted targets can (red-team round 3: the task "Summarize my notes
/// and write the summary into …/reports/" let a granted `write_file` create `summary` and
/// `my` beside `reports/`). A location the user wrote with a `/` is matched as before.
#[must_use]
pub fn anchor_provenance_in(
    field: &str,
    target: &str,
    envelope: &TaskEnvelope,
    operator_trusted: &[String],
) -> Option<Provenance> {
    if is_location_field(field) && !target.contains('/') {
        let without_text = TaskEnvelope {
            request: String::new(),
            ..envelope.clone()
        };
        return anchor_provenance(target, &without_text, operator_trusted);
    }
    anchor_provenance(target, envelope, operator_trusted)
}

/// Whether `name` names an object id: `id`, `*_id`, `*-id`, `*Id` (and their plurals).
#[must_use]
pub fn is_object_id_field(name: &str) -> bool {
    let n = name.strip_suffix('s').unwrap_or(name);
    n.eq_ignore_ascii_case("id")
        || n.ends_with("_id")
        || n.ends_with("-id")
        || n.ends_with("_ID")
        || (n.ends_with("Id") && n.len() > 2)
}

/// The object ids in the arguments of a destructive or financial tool (red-team finding F11):
/// every string or number, at any depth, below an argument named like an id
/// ([`is_object_id_field`]) or one of `extra_fields`. Paying INV-43 under a task that names
/// INV-42 is an effect on an object nobody named; these ids are targets, anchored only like
/// any other target (the task, the operator, or a handle from an anchored read).
#[must_use]
pub fn object_id_targets(arguments: &Map<String, Value>, extra_fields: &[String]) -> Vec<Target> {
    fn scalars(field: &str, v: &Value, out: &mut Vec<Target>) {
        match v {
            Value::String(s) if !s.trim().is_empty() => out.push(Target {
                field: field.to_owned(),
                value: s.clone(),
                origin: TargetOrigin::ObjectReference,
            }),
            Value::Number(n) => out.push(Target {
                field: field.to_owned(),
                value: n.to_string(),
                origin: TargetOrigin::ObjectReference,
            }),
            Value::Array(items) => items.iter().for_each(|i| scalars(field, i, out)),
            Value::Object(map) => map.values().for_each(|i| scalars(field, i, out)),
            Value::String(_) | Value::Null | Value::Bool(_) => {}
        }
    }
    fn walk(map: &Map<String, Value>, extra: &[String], out: &mut Vec<Target>) {
        for (name, v) in map {
            if is_object_id_field(name) || extra.iter().any(|f| f.eq_ignore_ascii_case(name)) {
                scalars(name, v, out);
            } else {
                search(v, extra, out);
            }
        }
    }
    fn search(v: &Value, extra: &[String], out: &mut Vec<Target>) {
        match v {
            Value::Object(map) => walk(map, extra, out),
            Value::Array(items) => items.iter().for_each(|i| search(i, extra, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    let mut out = Vec::new();
    walk(arguments, extra_fields, &mut out);
    out
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
                origin: TargetOrigin::NamedField,
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

/// A single e-mail address: exactly one `@`, a non-empty local part and domain, ASCII only,
/// and none of the characters that separate, quote or route addresses (`%` and `!` are the
/// old percent-hack and bang-path relays: `attacker%evil.example@corp.example` may be relayed
/// to `evil.example`; issue 11 item 9).
fn single_address(target: &str) -> Option<(&str, &str)> {
    let (local, domain) = target.split_once('@')?;
    let bad = |c: char| {
        c.is_whitespace()
            || !c.is_ascii()
            || c.is_ascii_control()
            || matches!(
                c,
                '@' | ','
                    | ';'
                    | '<'
                    | '>'
                    | '"'
                    | '\''
                    | '`'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '\\'
                    | ':'
                    | '%'
                    | '!'
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
    anchor_provenance(target, envelope, operator_trusted).is_some()
}

/// What anchors `target`: [`Provenance::Task`] when the task envelope names it (its trusted
/// targets or a word of its request text), [`Provenance::Operator`] when only the operator's
/// trusted targets do, `None` when nothing does.
#[must_use]
pub fn anchor_provenance(
    target: &str,
    envelope: &TaskEnvelope,
    operator_trusted: &[String],
) -> Option<Provenance> {
    // The tool receives the value as written: a target padded with whitespace (a
    // no-break space, a line separator) is not the target the user named.
    if target.is_empty() || target.trim() != target {
        return None;
    }
    if envelope
        .trusted_targets
        .iter()
        .any(|c| matches_candidate(c, target))
        || named_in_request(target, envelope)
    {
        return Some(Provenance::Task);
    }
    operator_trusted
        .iter()
        .any(|c| matches_candidate(c, target))
        .then_some(Provenance::Operator)
}

/// Whether the user named `text` itself: it equals (ASCII case-insensitively) one of the
/// envelope's or the operator's trusted targets written as a value — not a pattern (`@domain`,
/// a directory with `/`, `*`) — or a word of the request text. Used where a pattern must not
/// count: a search text that merely ends in a trusted `@domain` or starts with a trusted
/// directory can still probe withheld values below it (red-team R4).
#[must_use]
pub fn named_exactly(text: &str, envelope: &TaskEnvelope, operator_trusted: &[String]) -> bool {
    let text = text.trim();
    let value = |c: &str| !(c.starts_with('@') || c.ends_with('/') || c.contains('*'));
    !text.is_empty()
        && (envelope
            .trusted_targets
            .iter()
            .chain(operator_trusted)
            .any(|c| value(c) && c.eq_ignore_ascii_case(text))
            || envelope
                .request
                .split_whitespace()
                .map(strip_token)
                .any(|w| value(w) && w.eq_ignore_ascii_case(text)))
}

/// Common English words (lower case, sorted): a word of the request text in this list names
/// no target, however it is capitalized ("Send …", "Please …"), unless the user quoted it.
const COMMON_WORDS: &[&str] = &[
    "a", "about", "account", "add", "after", "again", "all", "also", "an", "and", "any", "are",
    "as", "ask", "at", "back", "be", "been", "before", "book", "but", "by", "call", "can",
    "cancel", "check", "copy", "could", "create", "data", "delete", "do", "document", "does",
    "done", "draft", "email", "every", "file", "files", "final", "find", "folder", "for",
    "forward", "from", "get", "give", "had", "has", "have", "he", "her", "here", "him", "his",
    "how", "i", "if", "in", "into", "invite", "invoice", "is", "it", "its", "just", "latest",
    "let", "like", "list", "make", "me", "meeting", "message", "more", "move", "my", "new", "next",
    "no", "not", "note", "notes", "now", "of", "on", "one", "or", "our", "out", "output", "pay",
    "please", "post", "project", "read", "remind", "reply", "report", "reports", "result",
    "results", "schedule", "see", "send", "share", "she", "so", "some", "summary", "team", "than",
    "thanks", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "today", "today's", "tomorrow", "up", "update", "us", "was", "we", "were", "what",
    "when", "where", "which", "who", "will", "with", "would", "write", "yes", "you", "your",
];

/// Whether `raw` (a whitespace-separated word of the request text, before punctuation is
/// stripped) was quoted by the user: `'general'`, `"general",`, `` `general` ``.
fn quoted(raw: &str) -> bool {
    let raw = raw.trim_end_matches(['.', ',', ';', ':', '!', '?', ')']);
    let raw = raw.trim_start_matches('(');
    [('\'', '\''), ('"', '"'), ('`', '`'), ('‘', '’'), ('“', '”')]
        .iter()
        .any(|(open, close)| {
            raw.chars().count() > 2 && raw.starts_with(*open) && raw.ends_with(*close)
        })
}

/// Whether a word of the request text is specific enough to name a target by itself
/// (red-team finding "common task words anchor bare recipients"): `Send the report to the
/// team` must not make `to: "report"` or `to: "team"` a target the user named — a mail
/// server, a chat or a code host may well have a user of that name. A word names a target
/// when the user quoted it, or when it is not a [`COMMON_WORDS`] word and holds anything but
/// lower-case letters: a capital (`Alice`), a digit (`INV-42`), or a character that makes
/// it an address, a path or an identifier (`@`, `.`, `/`, `_`, `-`, `:`, `+`, `#`).
fn names_a_target(raw: &str, word: &str) -> bool {
    if quoted(raw) {
        return true;
    }
    let lower = word.to_lowercase();
    COMMON_WORDS.binary_search(&lower.as_str()).is_err() && word.chars().any(|c| !c.is_lowercase())
}

fn named_in_request(target: &str, envelope: &TaskEnvelope) -> bool {
    // Named in the request text: exact word match (directories named in the text with a
    // trailing slash anchor paths below them, like trusted targets), by a word specific enough
    // to name something.
    envelope.request.split_whitespace().any(|raw| {
        let word = strip_token(raw);
        let word_is_dir = word.ends_with('/') && looks_like_path(word);
        (word_is_dir || !word.contains('*'))
            && !word.starts_with('@')
            && names_a_target(raw, word)
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
            ..TaskEnvelope::default()
        }
    }

    #[test]
    fn named_exactly_takes_values_not_patterns() {
        let e = env(
            "Find the memo from dana@corp.example in /srv/notes/ about Q3",
            &["@corp.example", "approver@corp.example", "/srv/"],
        );
        for t in [
            "dana@corp.example",
            "DANA@corp.example",
            "memo",
            "approver@corp.example",
        ] {
            assert!(named_exactly(t, &e, &[]), "{t}");
        }
        for t in [
            "it@corp.example",
            "x@corp.example",
            "/srv/notes/secret",
            "/srv/notes/",
            "",
            "mem",
        ] {
            assert!(!named_exactly(t, &e, &[]), "{t}");
        }
        assert!(named_exactly(
            "ops@corp.example",
            &e,
            &["ops@corp.example".into()]
        ));
        assert!(!named_exactly(
            "ops@corp.example",
            &e,
            &["@corp.example".into()]
        ));
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

    /// Red-team finding: common words of the task text anchored bare recipients. A word of
    /// the request names a target only when it is specific (a capital, a digit, an address or
    /// path character) and not a common word, or when the user quoted it.
    #[test]
    fn common_task_words_name_no_target() {
        let e = env(
            "Send the report to the team and Alice, share INV-42 with ops_lead and 'general'. Please invite dana.",
            &[],
        );
        for bare in [
            "report", "team", "the", "to", "Send", "send", "Please", "share", "dana",
        ] {
            assert!(!is_anchored(bare, &e, &[]), "{bare}");
        }
        // Positive controls: names, ids, identifiers and quoted words still anchor.
        for named in ["Alice", "alice", "INV-42", "ops_lead", "general"] {
            assert!(is_anchored(named, &e, &[]), "{named}");
        }
        // A quoted common word is the user's choice.
        let e = env("Post it in the \"report\" channel", &[]);
        assert!(is_anchored("report", &e, &[]));
        assert!(!is_anchored("channel", &e, &[]));
        // Trusted targets are unaffected.
        let e = env("Send it", &["team"]);
        assert!(is_anchored("team", &e, &[]));
        assert!(COMMON_WORDS.windows(2).all(|w| w[0] < w[1]), "sorted");
    }

    /// Red-team round 3 (M2): words of the task anchored relative paths.
    #[test]
    fn request_words_do_not_anchor_bare_locations() {
        let e = env(
            "Summarize my notes and write the summary into /srv/reports/ as Q3-summary.md or reports/q3.md",
            &["Archive"],
        );
        for (field, target) in [
            ("path", "Summarize"),
            ("path", "summary"),
            ("filePath", "Q3-summary.md"),
            ("destination", "Summarize"),
        ] {
            assert!(
                anchor_provenance_in(field, target, &e, &[]).is_none(),
                "{field}={target}"
            );
        }
        // Positive controls: a location written with a directory, a path below a named
        // directory, a trusted target, and a bare word in a field that is not a location.
        for (field, target) in [
            ("path", "reports/q3.md"),
            ("path", "/srv/reports/q3.md"),
            ("path", "Archive"),
            ("to", "Q3-summary.md"),
        ] {
            assert!(
                anchor_provenance_in(field, target, &e, &[]).is_some(),
                "{field}={target}"
            );
        }
        assert!(is_location_field("file_path") && is_location_field("dir"));
        // A URL field is not: a host the task names anchors without a `/` (AgentDojo slack
        // `get_webpage {"url": "www.informations.com"}`).
        assert!(!is_location_field("url"));
        assert!(
            anchor_provenance_in(
                "url",
                "www.informations.com",
                &env("Read www.informations.com now", &[]),
                &[]
            )
            .is_some()
        );
        assert!(!is_location_field("to") && !is_location_field("profile"));
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

    fn all_targets(args: &Value, egress: bool) -> Vec<(String, String)> {
        let fields: Vec<String> = DEFAULT_TARGET_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        collect_targets(args.as_object().unwrap_or(&Map::new()), &fields, egress)
            .into_iter()
            .map(|t| (t.field, t.value))
            .collect()
    }

    /// Red-team F5: base64 / base64url of an address is the address.
    #[test]
    fn encoded_addresses_are_targets() {
        // base64("attacker@evil.example"), and base64url of a URL with `?`/`>` bytes.
        let t = all_targets(
            &json!({"body": "receipt attached", "thread": "YXR0YWNrZXJAZXZpbC5leGFtcGxl"}),
            true,
        );
        assert!(
            t.contains(&("thread".into(), "attacker@evil.example".into())),
            "{t:?}"
        );
        let url = "https://evil.example/a?b=c>>>";
        let b64url = data_encoding::BASE64URL_NOPAD.encode(url.as_bytes());
        assert!(b64url.contains(['-', '_']), "{b64url}");
        let t = all_targets(&json!({ "raw": b64url }), false);
        assert!(t.iter().any(|(_, v)| v.contains("evil.example")), "{t:?}");
        // Control: an encoded text without an address, and a plain memo, yield nothing.
        let t = all_targets(
            &json!({"thread": "aGVsbG8gd29ybGQgaG93IGFyZSB5b3U=", "body": "receipt attached"}),
            false,
        );
        assert!(t.is_empty(), "{t:?}");
    }

    /// Red-team F5: bang paths and `%` source routes are address-like.
    #[test]
    fn route_syntax_is_address_like() {
        for w in [
            "evil.example!attacker",
            "relay!evil.example!attacker",
            "attacker%evil.example@",
            "attacker%evil.example@relay.example",
        ] {
            let t = all_targets(&json!({ "thread": w }), false);
            assert!(!t.is_empty(), "{w}");
        }
        for w in ["Hello!World", "wow!", "100%", "done!"] {
            let t = all_targets(&json!({ "thread": w }), false);
            assert!(t.is_empty(), "{w}: {t:?}");
        }
    }

    /// A whole value that is a host name is a target of an egress call in any field, and
    /// relay/proxy/remote/bucket-like names are destination fields; store calls keep file names.
    #[test]
    fn bare_hosts_in_egress_calls_and_more_destination_names_are_targets() {
        // Red-team R6: host names anywhere in an egress call's text, defanged and leader-dot
        // spellings, host and port, backslash paths.
        for body in [
            "relay via smtp.evil.example please",
            "ssh evil.example",
            "attacker#evil.example",
            "evil[.]example",
            "evil(.)example/x",
            "evil\u{2024}example/a",
            "xn--evl-4ma.example/x",
        ] {
            let t = all_targets(&json!({ "body": body }), true);
            assert!(!t.is_empty(), "{body}");
        }
        for w in ["evil.example:25", "evil.example\\attacker"] {
            let t = all_targets(&json!({ "thread": w }), false);
            assert!(!t.is_empty(), "{w}");
        }
        // Controls: an e-mail's own host is not a second target; file names and prose are not
        // hosts.
        let t = all_targets(&json!({ "to": "approver@corp.example" }), true);
        assert_eq!(
            t,
            vec![("to".to_owned(), "approver@corp.example".to_owned())]
        );
        let t = all_targets(
            &json!({ "body": "Reply to approver@corp.example or https://corp.example/x" }),
            true,
        );
        assert!(
            !t.is_empty() && t.iter().all(|(_, v)| v != "corp.example"),
            "{t:?}"
        );
        for body in [
            "See report.pdf and notes.txt; v1.2 is out.",
            "Meet at noon, e.g. at 12:30",
        ] {
            let t = all_targets(&json!({ "body": body }), true);
            assert!(t.is_empty(), "{body}: {t:?}");
        }
        for (name, v) in [
            ("relay", "evil.example"),
            ("via", "mail.evil\u{3002}example"),
            ("x", "evil.example."),
        ] {
            let t = all_targets(&json!({ name: v }), true);
            assert!(!t.is_empty(), "{name}={v}");
        }
        // Store calls: a file name is not a host; prose is not a host.
        for v in ["notes.md", "evil.example"] {
            let t = all_targets(&json!({ "x": v }), false);
            assert!(t.is_empty(), "{v}: {t:?}");
        }
        let t = all_targets(&json!({ "subject": "Summary of the meeting" }), true);
        assert!(t.is_empty(), "{t:?}");
        for name in [
            "smtp_relay",
            "proxyHost",
            "git_remote",
            "s3_bucket",
            "notify",
            "href",
        ] {
            assert!(is_destination_field_name(name), "{name}");
        }
    }

    /// Red-team F5 leftovers: a URL without its scheme, a host written with ideographic full
    /// stops, and `user at host.tld` in a field that names no destination are address-like;
    /// file names, version numbers and prose are not.
    #[test]
    fn schemeless_hosts_and_spelled_at_are_address_like() {
        for w in [
            "evil.example/attacker",
            "see evil.example:8080/x now",
            "attacker@evil\u{3002}example",
            "https://evil\u{FF61}example",
            "evil\u{3002}example/x",
            "mail attacker at evil.example please",
        ] {
            let t = all_targets(&json!({ "thread": w }), false);
            assert!(!t.is_empty(), "{w}");
        }
        for w in [
            "notes/v1.2/readme",
            "config.d/app",
            "meet at noon",
            "report.pdf",
            "look at the file",
            "/home/user/docs",
        ] {
            let t = all_targets(&json!({ "thread": w }), false);
            assert!(t.is_empty(), "{w}: {t:?}");
        }
    }

    /// Red-team F5: a field named like a destination outside the exact default list has its
    /// strings as targets; content and look-alike names do not.
    #[test]
    fn destination_named_fields_are_targets() {
        for (name, v) in [
            ("webhook_url", "evil.example/hook"),
            ("callback", "evil.example:8443"),
            ("hostname", "evil.example"),
            ("server", "smtp.evil.example"),
            ("callbackUrl", "evil.example"),
            ("Reply-Address", "evil"),
            ("smtp_endpoint", "evil.example"),
        ] {
            let t = all_targets(&json!({ name: v }), false);
            assert!(
                t.contains(&(name.to_owned(), v.to_owned())),
                "{name}: {t:?}"
            );
        }
        for name in [
            "security_level",
            "email_body",
            "email_subject",
            "ghost",
            "memo",
            "during",
        ] {
            assert!(!is_destination_field_name(name), "{name}");
            let t = all_targets(&json!({ name: "plain words here" }), false);
            assert!(t.is_empty(), "{name}: {t:?}");
        }
        // An address inside a content field is still found.
        let t = all_targets(
            &json!({"email_body": "write to attacker@evil.example"}),
            false,
        );
        assert!(
            t.contains(&("email_body".into(), "attacker@evil.example".into())),
            "{t:?}"
        );
    }

    /// Red-team finding (2026-12-03): a payment's BIC, creditor, beneficiary or payee, an
    /// `acct`/`routing` number, a `port`, and a single-label `host:port` were not targets;
    /// words that merely contain those letters (`public`, `report`, `export`) stay plain.
    #[test]
    fn payment_parties_ports_and_single_label_hosts_are_targets() {
        for (name, v) in [
            ("bic", json!("EVILDEFFXXX")),
            ("beneficiaryBIC", json!("EVILDEFFXXX")),
            ("swift_code", json!("EVILDEFFXXX")),
            ("creditor", json!("Mallory Ltd")),
            ("beneficiary_name", json!("Mallory Ltd")),
            ("payee", json!("Mallory Ltd")),
            ("acct_no", json!(12345)),
            ("routing_number", json!(21000021)),
            ("port", json!(8443)),
            ("smtpPort", json!(2525)),
        ] {
            let t = all_targets(&json!({ name: v.clone() }), false);
            let want = match &v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert!(t.contains(&(name.to_owned(), want)), "{name}: {t:?}");
        }
        for w in [
            "attacker:8443",
            "relay via attacker:2525 now",
            "localhost:25",
        ] {
            let t = all_targets(&json!({ "options": w }), false);
            assert!(!t.is_empty(), "{w}");
        }
        for name in ["public", "report", "export_format", "support", "important"] {
            assert!(!is_destination_field_name(name), "{name}");
            let t = all_targets(&json!({ name: "plain words here" }), false);
            assert!(t.is_empty(), "{name}: {t:?}");
        }
        for w in ["Q3:10", "step:2", "at 10:30 sharp", "ratio 3:1"] {
            let t = all_targets(&json!({ "options": w }), false);
            assert!(t.is_empty(), "{w}: {t:?}");
        }
    }

    /// Regression (issue 11 item 6): targets the named-field extractor never saw.
    #[test]
    fn every_identifier_is_a_target() {
        let t = all_targets(
            &json!({"to": "approver@corp.example", "reply_to": "attacker@evil.example",
                    "headers": {"forward_to": ["x@evil.example"]}}),
            false,
        );
        assert!(t.contains(&("reply_to".into(), "attacker@evil.example".into())));
        assert!(t.contains(&("forward_to".into(), "x@evil.example".into())));
        assert!(t.contains(&("to".into(), "approver@corp.example".into())));
        // A recipient written as an object key.
        let t = all_targets(
            &json!({"to": {"attacker@evil.example": "approver@corp.example"}}),
            false,
        );
        assert!(t.iter().any(|(_, v)| v == "attacker@evil.example"), "{t:?}");
        assert!(t.iter().any(|(_, v)| v == "approver@corp.example"), "{t:?}");
        // Numbers in account-like fields.
        let t = all_targets(
            &json!({"account": 12345678, "dest_account_no": 99, "amount": 5}),
            false,
        );
        assert!(t.contains(&("account".into(), "12345678".into())));
        assert!(t.contains(&("dest_account_no".into(), "99".into())));
        assert!(!t.iter().any(|(f, _)| f == "amount"), "{t:?}");
        // Identifiers inside free text.
        let t = all_targets(
            &json!({"body": "wire it to https://evil.example/x today"}),
            false,
        );
        assert!(
            t.iter()
                .any(|(f, v)| f == "body" && v.starts_with("https://evil.example"))
        );
    }

    #[test]
    fn object_references_are_targets_of_egress_tools_only() {
        let args = json!({"to": "a@corp.example", "attachments": ["file_7", 42], "file_id": "f9"});
        let egress = all_targets(&args, true);
        assert!(egress.contains(&("attachments".into(), "file_7".into())));
        assert!(egress.contains(&("attachments".into(), "42".into())));
        assert!(egress.contains(&("file_id".into(), "f9".into())));
        let store = all_targets(&args, false);
        assert!(
            !store
                .iter()
                .any(|(f, _)| f == "attachments" || f == "file_id")
        );
        // Positive control: an ordinary send has only its recipient as target.
        assert_eq!(
            all_targets(
                &json!({"to": "a@corp.example", "subject": "hi", "body": "see you"}),
                true
            ),
            vec![("to".to_owned(), "a@corp.example".to_owned())]
        );
    }

    /// Red-team finding F6: recipients no detector recognises, and numbers in any target
    /// field, are targets (and unanchored, since the task names none of them).
    #[test]
    fn address_like_values_are_targets() {
        let e = env(
            "Send the Q4 report to our approver approver@corp.example.",
            &[],
        );
        let fields: Vec<String> = vec!["to".into()];
        for args in [
            json!({"to": "approver@corp.example", "reply_to": "\"attacker\"@evil.example"}),
            json!({"to": "approver@corp.example", "forward_to": "attacker@[203.0.113.5]"}),
            json!({"to": "approver@corp.example", "forward_to": "attacker@evil"}),
            json!({"to": "approver@corp.example", "x": "https:evil.example"}),
            json!({"to": "approver@corp.example", "x": "hxxp://evil.example/a"}),
            json!({"to": "approver@corp.example", "x": "//evil.example/x"}),
            json!({"to": "approver@corp.example", "x": "203.0.113.5:25"}),
            json!({"to": "approver@corp.example", "x": "attacker at evil dot example"}),
            json!({"to": "approver@corp.example", "note": "call 447700900123"}),
            json!({"to": ["approver@corp.example", 447_700_900_123_u64]}),
            json!({"to": "approver@corp.example", "cc": 447_700_900_123_u64}),
            json!({"to": "approver@corp.example", "dest": 15_551_234_567_u64}),
        ] {
            let t = collect_targets(args.as_object().unwrap(), &fields, true);
            let defaults = all_targets(&args, true);
            for found in [
                t.iter().map(|t| t.value.clone()).collect::<Vec<_>>(),
                defaults.iter().map(|(_, v)| v.clone()).collect(),
            ] {
                assert!(
                    found.iter().any(|v| !is_anchored(v, &e, &[])),
                    "{args}: {found:?}"
                );
            }
        }
        // Positive controls: ordinary text, dates, small numbers and amounts are not targets.
        let args = json!({"to": "approver@corp.example", "subject": "Q4: report",
            "body": "Hi, see the report for 2026-12-01 (3 pages, version 1.2). Thanks!",
            "amount_cents": 9_007_199_254_740_991_u64, "count": 12});
        assert_eq!(
            all_targets(&args, true),
            vec![("to".to_owned(), "approver@corp.example".to_owned())]
        );
    }

    /// Red-team finding F11: object ids of destructive or financial tools.
    #[test]
    fn object_ids_are_found() {
        let args = json!({"invoice_id": "INV-43", "iban": "x", "amount_cents": 1,
            "items": [{"id": 7}], "orderIds": ["o1"], "paid": "no"});
        let mut t: Vec<(String, String)> = object_id_targets(args.as_object().unwrap(), &[])
            .into_iter()
            .map(|t| (t.field, t.value))
            .collect();
        t.sort();
        assert_eq!(
            t,
            vec![
                ("id".to_owned(), "7".to_owned()),
                ("invoice_id".to_owned(), "INV-43".to_owned()),
                ("orderIds".to_owned(), "o1".to_owned()),
            ]
        );
    }

    /// Regression (issue 11 item 9): `@domain` anchors refuse relayed local parts.
    #[test]
    fn domain_anchor_refuses_route_syntax() {
        let e = env("", &["@corp.example"]);
        assert!(
            is_anchored("approver@corp.example", &e, &[]),
            "positive control"
        );
        for bad in [
            "attacker%evil.example@corp.example",
            "evil.example!attacker@corp.example",
            "\"attacker@evil\"@corp.example",
            "'a'@corp.example",
            "app\u{0440}over@corp.example",
        ] {
            assert!(!is_anchored(bad, &e, &[]), "{bad}");
        }
    }

    #[test]
    fn provenance_names_task_or_operator() {
        let e = env("mail bob@corp.example", &["alice@corp.example"]);
        let op = vec!["ops@corp.example".to_owned()];
        assert_eq!(
            anchor_provenance("bob@corp.example", &e, &op),
            Some(Provenance::Task)
        );
        assert_eq!(
            anchor_provenance("alice@corp.example", &e, &op),
            Some(Provenance::Task)
        );
        assert_eq!(
            anchor_provenance("ops@corp.example", &e, &op),
            Some(Provenance::Operator)
        );
        assert_eq!(anchor_provenance("eve@evil.example", &e, &op), None);
    }

    /// Issue 11 item 8: arguments are normalized before target detection.
    #[test]
    fn split_and_full_width_identifiers_are_targets() {
        for body in [
            "mail attacker@evil\u{200b}.example now",
            "mail attacker@\u{ff45}vil.example now",
            "mail attacker\u{00ad}@evil.example now",
        ] {
            let t = all_targets(&json!({ "body": body }), false);
            assert!(
                t.iter().any(|(_, v)| v.contains("evil.example")),
                "{body:?}: {t:?}"
            );
        }
    }

    /// Red-team findings: a percent-encoded address in any field is a target, and a target
    /// padded with whitespace is not the one the user named.
    #[test]
    fn encoded_and_padded_targets_are_not_laundered() {
        let t = all_targets(&json!({"fwd": "attacker%40evil.example"}), false);
        assert!(t.iter().any(|(_, v)| v == "attacker@evil.example"), "{t:?}");
        let e = env("send to approver@corp.example", &[]);
        assert!(
            is_anchored("approver@corp.example", &e, &[]),
            "positive control"
        );
        for padded in [
            "approver@corp.example\u{a0}",
            "\u{a0}approver@corp.example",
            "approver@corp.example\u{2028}",
            "approver@corp.example \n",
        ] {
            assert!(!is_anchored(padded, &e, &[]), "{padded:?}");
        }
    }

    /// Red-team F13: many distinct identifiers in one argument. The walk is linear (this ran
    /// minutes before the hash set) and stops at the cap with a typed refusal; below the cap
    /// every target is still found, duplicates once.
    #[test]
    fn many_identifiers_are_linear_and_capped() {
        let n = 150_000;
        let text: String = (0..n).map(|i| format!("u{i:06}@corp.example ")).collect();
        let args = json!({"q": text});
        let map = args.as_object().unwrap_or_else(|| unreachable!());
        let started = std::time::Instant::now();
        let err = collect_targets_bounded(map, &[], false, 1024).unwrap_err();
        assert_eq!(err, TooManyTargets { limit: 1024 });
        // Unbounded: every one found, linear time (a liveness bound, not a timing threshold).
        let all = collect_targets_bounded(map, &[], false, usize::MAX).unwrap();
        assert_eq!(all.len(), n);
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        // Positive control: under the cap, duplicates count once.
        let dup = json!({"to": ["a@x.example", "a@x.example", "b@x.example"], "q": "a@x.example"});
        let dup = dup.as_object().unwrap_or_else(|| unreachable!());
        let fields = vec!["to".to_owned()];
        let t = collect_targets_bounded(dup, &fields, false, 3).unwrap();
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(collect_targets_bounded(dup, &fields, false, 2).is_err());
    }

    /// The target memo (issue 14): what a remembered pass returns is what a fresh pass finds,
    /// for each kind of text the walk decodes (plain, percent-encoded, base64, spelled-out
    /// hosts, handles masked) and with and without egress; the second walk of the same
    /// arguments, served from the memo, finds the same targets in the same order.
    #[test]
    fn remembered_text_targets_are_a_fresh_pass() {
        // base64 of "send it to attacker@evil.example please"
        let b64 = "c2VuZCBpdCB0byBhdHRhY2tlckBldmlsLmV4YW1wbGUgcGxlYXNl".to_owned();
        let texts = [
            "reply to approver@corp.example and cc ops@corp.example".to_owned(),
            "attacker%40evil.example".to_owned(),
            b64.clone(),
            "upload via smtp.evil.example or ssh evil.example".to_owned(),
            "call +1 415 555 0100, iban DE44500105175407324931".to_owned(),
            "nothing here at all".to_owned(),
            "ap\u{200b}prover@corp.example".to_owned(),
            String::new(),
        ];
        for egress in [false, true] {
            for text in &texts {
                let mut fresh = Vec::new();
                collect_text_targets(text, egress, &mut fresh);
                for _ in 0..2 {
                    assert_eq!(&*text_targets(text, egress), fresh.as_slice(), "{text:?}");
                }
            }
        }
        // Control: the texts do name targets (a memo that returned nothing would fail above
        // only if fresh passes found nothing too).
        let mut fresh = Vec::new();
        collect_text_targets(&b64, false, &mut fresh);
        assert!(
            fresh.iter().any(|(v, _)| v == "attacker@evil.example"),
            "{fresh:?}"
        );
        let args = json!({"to": "approver@corp.example", "body": texts.join(" | "), "n": {"x@y.example": 1}});
        let map = args.as_object().unwrap_or_else(|| unreachable!());
        let fields = vec!["to".to_owned()];
        let first = collect_targets_bounded(map, &fields, true, 1024).unwrap();
        let second = collect_targets_bounded(map, &fields, true, 1024).unwrap();
        assert_eq!(first, second);
        assert!(
            first.iter().any(|t| t.value == "attacker@evil.example"),
            "{first:?}"
        );
    }

    /// The target memo stays bounded: a text over the size limit is not remembered, and
    /// however many texts pass, the memo never holds more than its byte budget.
    #[test]
    fn the_target_memo_is_bounded() {
        let big = "x@y.example ".repeat(MEMO_MAX_TEXT / 12 + 1);
        assert!(big.len() > MEMO_MAX_TEXT);
        let _ = text_targets(&big, false);
        let remembered = |t: &str| {
            TARGET_MEMO
                .lock()
                .map(|m| m.entries.iter().any(|e| e.contains_key(t)))
                .unwrap_or(false)
        };
        assert!(!remembered(&big));
        // Positive control: a small text is remembered.
        let small = "bounded-memo-probe@corp.example";
        let _ = text_targets(small, false);
        assert!(remembered(small));
        for i in 0..2_000 {
            let text = format!("{i:05} {}", "mail u@corp.example ".repeat(100));
            let _ = text_targets(&text, i % 2 == 0);
            let bytes = TARGET_MEMO.lock().map(|m| m.bytes).unwrap_or(0);
            assert!(bytes <= MEMO_MAX_BYTES, "{bytes}");
        }
    }

    /// Red-team F6 (2026-12-05): percent-encoding nested 32,000 deep in one 64 KB argument
    /// recursed once per layer until the stack overflowed (the gateway aborted) and cost
    /// seconds of CPU per 16 KB. Past four layers the text is a target itself (never
    /// anchored), found at once; the control: two layers still decode to the address.
    #[test]
    fn deeply_nested_encodings_fail_closed_without_recursing() {
        let deep = format!("attacker%{}40evil.example", "25".repeat(32_000));
        let args = json!({"note": deep});
        let map = args.as_object().unwrap_or_else(|| unreachable!());
        let found = collect_targets_bounded(map, &[], false, 1024).unwrap();
        assert!(
            found
                .iter()
                .any(|t| t.value.contains("layers deep") && t.origin == TargetOrigin::AddressLike),
            "{found:?}"
        );
        let shallow = json!({"note": "send to attacker%2540evil.example"});
        let map = shallow.as_object().unwrap_or_else(|| unreachable!());
        let found = collect_targets_bounded(map, &[], false, 1024).unwrap();
        assert!(
            found.iter().any(|t| t.value == "attacker@evil.example"),
            "{found:?}"
        );
        assert!(
            !found.iter().any(|t| t.value.contains("layers deep")),
            "{found:?}"
        );
    }
}
