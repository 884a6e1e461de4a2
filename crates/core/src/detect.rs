//! Recall-first detectors for sensitive identifiers in free text (SecureClaw paper §3.3,
//! planning summary / declassification).
//!
//! The summary operator D ([`crate::summary`]) replaces every identifier found here by a handle
//! token before a tool result reaches the runtime, so a miss is a leak and a false positive only
//! costs planning detail. The detectors therefore lean towards recall, with validation where a
//! checksum exists:
//!
//! - **email**: RFC 5322-ish `local@domain.tld`, case-insensitive, Unicode letters allowed,
//!   and obfuscated spellings (`name [at] example [dot] com`);
//! - **IBAN**: `CC##` followed by the BBAN, compact or printed in groups of four, validated with
//!   ISO 13616 mod-97 and, for countries in a built-in table, the national length;
//! - **card number**: 13–19 digits with optional single space or dash separators, Luhn-checked;
//! - **phone**: `+`-prefixed international forms and separated national forms with at least 7
//!   digits; dates, year ranges, decimals, IPv4 addresses and thousands-grouped amounts are
//!   rejected;
//! - **URL**: `http://`, `https://`, `ftp://` and `www.` forms;
//! - **secret**: well-known API-key formats (AWS, GitHub, Slack, Stripe, OpenAI/Anthropic,
//!   Google), JWTs, whole PEM private-key blocks (header through footer, or through the end of
//!   the text when the footer is missing), `password=`/`token:`-style assignments and
//!   `Bearer`/`Basic` credentials (the value only), high-entropy hex, base64 or one-case
//!   base32 runs of 32 characters or more, and SecureClaw's own secrets: the operator token
//!   (`sco_…`), session ids (`ses_…`, which are also MCP bearer tokens), the keys of a key
//!   ring file (`"secret_hex": "…"`), and, verbatim in any format, every secret the process
//!   registered with [`add_exact_secret`] (the operator token and its body, key bytes, a
//!   database password);
//! - **encoded identifiers**: a base64 run (standard or URL-safe, 16 characters or more) that
//!   decodes to UTF-8 text in which any detector finds something is a secret as a whole (two
//!   levels of nesting; the decoded text is normalized first, [`crate::normalize`]).
//!
//! [`detect`] scans the text it is given. Callers that show text to the runtime normalize it
//! first ([`crate::normalize::normalize`]: invisible characters, escape sequences, NFKC), so
//! a value split by a zero-width space or spelled in full-width forms is found; the summary
//! operator D does.
//!
//! The **whole** text is scanned. The authors' DLP only looked at the first 35 characters, so any
//! secret after that position went through (`research/secureclaw-reference.md` §6); the PEM
//! redaction there removed only the header line, leaving the key body in place.
//!
//! Overlapping candidates from different detectors are merged into one finding covering their
//! union, so no byte that any detector flagged is left in clear text. The merged finding takes the
//! kind [`IdentifierKind::Secret`] if any candidate was a secret (a secret inside a URL keeps the
//! stricter kind); otherwise the kind of the longest candidate, ties broken by priority
//! Secret > Iban > Card > Email > Url > Phone.
//!
//! [`is_credential_name`] complements the text detectors for structured data: a field *named*
//! like a credential (`password`, `apiKey`, `client_secret`, …) is protected whatever its value
//! looks like.

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;
use std::sync::LazyLock;

/// Kind of sensitive identifier found by [`detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifierKind {
    /// An e-mail address.
    Email,
    /// An International Bank Account Number (mod-97 valid).
    Iban,
    /// A payment card number (Luhn valid).
    CardNumber,
    /// A telephone number.
    Phone,
    /// A URL (`http`, `https`, `ftp` or `www.`).
    Url,
    /// A credential: API key, token, password, private key, high-entropy string.
    Secret,
}

impl IdentifierKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Email,
        Self::Iban,
        Self::CardNumber,
        Self::Phone,
        Self::Url,
        Self::Secret,
    ];

    /// Short stable name: `"email"`, `"iban"`, `"card"`, `"phone"`, `"url"`, `"secret"`.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Iban => "iban",
            Self::CardNumber => "card",
            Self::Phone => "phone",
            Self::Url => "url",
            Self::Secret => "secret",
        }
    }

    /// Prefix used in handle tokens for this kind: `"em"`, `"ib"`, `"cc"`, `"ph"`, `"url"`,
    /// `"sk"` (e.g. a summary shows `h:em:3k9x…` for an e-mail address).
    #[must_use]
    pub fn token_prefix(&self) -> &'static str {
        match self {
            Self::Email => "em",
            Self::Iban => "ib",
            Self::CardNumber => "cc",
            Self::Phone => "ph",
            Self::Url => "url",
            Self::Secret => "sk",
        }
    }

    /// Overlap priority: higher wins a tie between candidates of equal length.
    fn priority(self) -> u8 {
        match self {
            Self::Secret => 5,
            Self::Iban => 4,
            Self::CardNumber => 3,
            Self::Email => 2,
            Self::Url => 1,
            Self::Phone => 0,
        }
    }
}

impl fmt::Display for IdentifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One detection: the byte range `start..end` of an identifier in the scanned text. Both ends
/// lie on `char` boundaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was found.
    pub kind: IdentifierKind,
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset one past the last byte.
    pub end: usize,
}

impl Finding {
    /// The byte range `start..end`.
    #[must_use]
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// Scan the whole of `text` for identifiers (SecureClaw paper §3.3, planning summary /
/// declassification).
///
/// Returns non-overlapping findings sorted by `start`; each is a byte range on `char`
/// boundaries. Candidates of different detectors that overlap are merged into one finding that
/// covers their union (see the module docs for which kind it gets), so replacing every finding
/// leaves nothing any detector flagged. Infallible; linear in the text length up to small
/// constant factors.
#[must_use]
pub fn detect(text: &str) -> Vec<Finding> {
    detect_at_depth(text, 0)
}

fn detect_at_depth(text: &str, depth: usize) -> Vec<Finding> {
    let mut candidates = Vec::new();
    scan_secrets(text, &mut candidates);
    scan_ibans(text, &mut candidates);
    scan_cards(text, &mut candidates);
    scan_emails(text, &mut candidates);
    scan_urls(text, &mut candidates);
    scan_phones(text, &mut candidates);
    scan_separated_ibans(text, &mut candidates);
    scan_spelled_emails(text, &mut candidates);
    if depth == 0 {
        scan_wrapped(text, &mut candidates);
    }
    if depth < MAX_BASE64_DEPTH {
        scan_base64(text, depth, &mut candidates);
        scan_escaped(text, depth, &mut candidates);
    }
    resolve(candidates)
}

// ---------------------------------------------------------------------------------------------
// Values wrapped over two lines
// ---------------------------------------------------------------------------------------------

/// Characters a value is made of, for deciding whether it continues over a line break.
fn is_part(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '@' | '.' | '_' | '%' | '+' | '/' | '=')
}

/// Line break characters: `\n` (with a `\r` before it), a bare `\r`, vertical tab, form feed,
/// NEL and the Unicode line and paragraph separators.
fn is_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// The length of the prefix a continuation line starts with: indentation, blank lines, and
/// quote, comment and list markers (`>`, `>>`, `|`, `#`, `//`, `*`, `` ` ``, `- `, with spaces
/// between) that a mail reply, a comment block, a table or a list puts before the rest of a
/// value (red-team round of
/// 2026-12-04: `> dana.whitfield@` / `> northwind.example` showed the address).
fn continuation_prefix(next: &str) -> usize {
    let mut rest = next;
    loop {
        let before = rest.len();
        rest = rest
            .trim_start_matches(|c: char| c == ' ' || c == '\t' || c == '\u{a0}' || is_break(c));
        rest = rest.trim_start_matches(['>', '|', '#', '*', '`']);
        rest = rest.strip_prefix("//").unwrap_or(rest);
        rest = rest.strip_prefix("- ").unwrap_or(rest);
        if rest.len() == before {
            return next.len() - rest.len();
        }
    }
}

/// One line break a value may continue over, in byte offsets of the scanned text: the kept
/// part of the line ends at `keep_to`, the next line's value part starts at `resume`.
struct Join {
    keep_to: usize,
    resume: usize,
    /// A digit on both sides: the joined text gets a space there, so the groups of a number
    /// stay groups (a column of numbers does not become one long number).
    spaced: bool,
    /// The line ended in a hyphen or a quoted-printable soft break (`=`): the value was cut
    /// inside a word, whatever each side looks like.
    mid_word: bool,
    /// The line ended in a separator of a number's groups (`-`, `.`, `/`) after a digit and
    /// the next starts with a digit: `415-555-` / `0132`.
    after_separator: bool,
}

/// The line breaks of `text` a value may continue over, in order.
fn wrapped_joins(text: &str) -> Vec<Join> {
    let mut joins = Vec::new();
    let mut at = 0;
    while let Some((offset, brk)) = text
        .get(at..)
        .and_then(|r| r.char_indices().find(|(_, c)| is_break(*c)))
    {
        let line_start = at;
        let line_end = at + offset;
        let line = text.get(line_start..line_end).unwrap_or_default();
        let next_from = line_end + brk.len_utf8();
        let next = text.get(next_from..).unwrap_or_default();
        let resume = next_from + continuation_prefix(next);
        at = next_from;
        let kept = line.trim_end_matches([' ', '\t', '\u{a0}', '|', '`', '\\']);
        let soft = kept.ends_with('=') && !kept.ends_with("==");
        let kept = if soft {
            kept.strip_suffix('=').unwrap_or(kept)
        } else {
            kept
        };
        let (Some(left), Some(right)) = (
            kept.chars().next_back(),
            text.get(resume..).and_then(|r| r.chars().next()),
        ) else {
            continue;
        };
        let hyphen = left == '-' && kept.chars().rev().nth(1).is_some_and(char::is_alphanumeric);
        let after_last = joins
            .last()
            .is_none_or(|j: &Join| j.resume <= line_start + kept.len());
        if (is_part(left) || hyphen) && is_part(right) && after_last {
            joins.push(Join {
                keep_to: line_start + kept.len(),
                resume,
                spaced: left.is_ascii_digit() && right.is_ascii_digit(),
                mid_word: hyphen || soft,
                after_separator: matches!(left, '-' | '.' | '/')
                    && kept
                        .chars()
                        .rev()
                        .nth(1)
                        .is_some_and(|c| c.is_ascii_digit())
                    && right.is_ascii_digit(),
            });
        }
    }
    joins
}

/// The text with the line breaks of `joins` removed (and what surrounds them: trailing spaces,
/// a soft-break `=`, the next line's prefix), and for each byte of it the byte of `text` it
/// came from. A spaced join leaves one space, mapped to the break.
fn join_lines(text: &str, joins: &[Join]) -> (String, Vec<usize>) {
    let mut joined = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    let copy = |from: usize, to: usize, joined: &mut String, origin: &mut Vec<usize>| {
        for (i, c) in text.get(from..to).unwrap_or_default().char_indices() {
            joined.push(c);
            origin.extend(std::iter::repeat_n(from + i, c.len_utf8()));
        }
    };
    let mut at = 0;
    for join in joins {
        copy(at, join.keep_to, &mut joined, &mut origin);
        if join.spaced {
            joined.push(' ');
            origin.push(join.keep_to);
        }
        at = join.resume;
    }
    copy(at, text.len(), &mut joined, &mut origin);
    (joined, origin)
}

/// Whether `part` (what a joined finding adds to a value found whole on one line) is itself
/// a piece of a value rather than a word: a digit, a character of an address or a path, or
/// the case changes of a key (`bPxRfiCY…`).
fn looks_like_value_part(part: &str) -> bool {
    let case_changes = part
        .chars()
        .zip(part.chars().skip(1))
        .filter(|(a, b)| a.is_lowercase() && b.is_uppercase())
        .count();
    part.chars()
        .any(|c| c.is_ascii_digit() || matches!(c, '.' | '@' | '_' | '%' | '+' | '/' | '-'))
        || case_changes >= 2
}

/// Identifiers wrapped over two lines (red-team rounds of 2026-12-04): an IBAN or card
/// number wrapped between its groups, an address hyphen-wrapped in its domain or broken in its
/// local part, a key wrapped anywhere, a quoted mail reply (`> `), a comment block, a table
/// cell, a quoted-printable soft break (`=`). The detectors run once more over the text with
/// those line breaks removed ([`wrapped_joins`]); a finding that spans a removed break is
/// mapped back onto `text`, covering both lines' parts, the break and the prefix.
///
/// A joined finding that only adds words to an identifier found whole on one line, with the
/// same kind, is dropped: the break ended the value (`bob@corp.example` then `regarding`).
/// It is kept when the line was cut inside a word (hyphen, soft break) or when what it adds
/// looks like a piece of a value ([`looks_like_value_part`]: `dana.whit` + `field@…`).
/// A phone number is only taken over a break when it starts with `+` (a column of numbers is
/// no phone number).
fn scan_wrapped(text: &str, out: &mut Vec<Finding>) {
    if !text.contains(is_break) {
        return;
    }
    let joins = wrapped_joins(text);
    if joins.is_empty() {
        return;
    }
    let (joined, origin) = join_lines(text, &joins);
    let mut found = Vec::new();
    scan_secrets(&joined, &mut found);
    scan_ibans(&joined, &mut found);
    scan_cards(&joined, &mut found);
    scan_emails(&joined, &mut found);
    scan_urls(&joined, &mut found);
    scan_phones(&joined, &mut found);
    scan_separated_ibans(&joined, &mut found);
    scan_spelled_emails(&joined, &mut found);
    let direct = out.len();
    for finding in found {
        let (Some(&start), Some(&last)) = (
            origin.get(finding.start),
            finding.end.checked_sub(1).and_then(|e| origin.get(e)),
        ) else {
            continue;
        };
        let end = last
            + text
                .get(last..)
                .and_then(|r| r.chars().next())
                .map_or(1, char::len_utf8);
        let crossed: Vec<&Join> = joins
            .iter()
            .filter(|j| start < j.keep_to && j.resume < end)
            .collect();
        if crossed.is_empty() {
            continue;
        }
        // A key pattern that stops inside a word of the next line (`AIza…-` then `résumé`:
        // the pattern takes the `r` and stops at the `é`) found no wrapped key: the line's
        // key ended at the break (proptest seed of 2026-12-04).
        if finding.kind == IdentifierKind::Secret
            && text
                .get(end..)
                .and_then(|r| r.chars().next())
                .is_some_and(char::is_alphanumeric)
            && text
                .get(..end)
                .and_then(|r| r.chars().next_back())
                .is_some_and(char::is_alphanumeric)
        {
            continue;
        }
        if finding.kind == IdentifierKind::Phone
            && !joined
                .get(finding.range())
                .is_some_and(|t| t.starts_with(['+', '(']))
            && !crossed.iter().any(|j| j.after_separator)
        {
            continue;
        }
        // A card number over lines that hold one digit group each is a column of numbers.
        if finding.kind == IdentifierKind::CardNumber
            && crossed.iter().any(|j| j.spaced)
            && text.get(start..end).is_some_and(|t| {
                t.split(is_break).all(|line| {
                    line.split(|c: char| !c.is_ascii_digit())
                        .filter(|g| !g.is_empty())
                        .count()
                        <= 1
                })
            })
        {
            continue;
        }
        // A number taken over a break between digits must be the whole run of digit
        // groups there: a card number wrapped between its groups is, one row of a table of
        // numbers or one of a list of dates is not.
        if crossed.iter().any(|j| j.spaced)
            && matches!(
                finding.kind,
                IdentifierKind::CardNumber | IdentifierKind::Phone
            )
            && in_longer_number(&joined, &finding)
        {
            continue;
        }
        let mid_word = crossed.iter().any(|j| j.mid_word);
        let extends_whole = out.iter().take(direct).any(|d| {
            d.kind == finding.kind
                && d.start >= start
                && d.end <= end
                && touches_break(text, d)
                && {
                    let added = format!(
                        "{}{}",
                        text.get(start..d.start).unwrap_or_default(),
                        // A sentence's punctuation right after the whole value ends it.
                        text.get(d.end..end)
                            .unwrap_or_default()
                            .trim_start_matches(['.', ',', ';', ':', '!', '?', ')'])
                    );
                    !looks_like_value_part(added.trim_matches(|c: char| {
                        c.is_whitespace() || matches!(c, '>' | '|' | '#' | '*')
                    }))
                }
        });
        if mid_word || !extends_whole {
            push(out, finding.kind, start, end);
        }
    }
}

/// Whether more digit groups (after a space, `-`, `/` or `.`) come right before or after
/// `finding` in `text`.
fn in_longer_number(text: &str, finding: &Finding) -> bool {
    let sep = |c: char| matches!(c, ' ' | '-' | '/' | '.' | ':');
    let mut before = text.get(..finding.start).unwrap_or_default().chars().rev();
    let mut after = text.get(finding.end..).unwrap_or_default().chars();
    let digit_before = match before.next() {
        Some(c) if c.is_ascii_digit() => true,
        Some(c) if sep(c) => before.next().is_some_and(|d| d.is_ascii_digit()),
        _ => false,
    };
    let digit_after = match after.next() {
        Some(c) if c.is_ascii_digit() => true,
        Some(c) if sep(c) => after.next().is_some_and(|d| d.is_ascii_digit()),
        _ => false,
    };
    digit_before || digit_after
}

/// Whether `finding` ends its line or begins one (only spaces, and a continuation prefix,
/// between it and the break).
fn touches_break(text: &str, finding: &Finding) -> bool {
    let after = text.get(finding.end..).unwrap_or_default();
    let before = text.get(..finding.start).unwrap_or_default();
    after
        .trim_start_matches([' ', '\t', '|', '.', ',', ';', ':', '!', '?', ')'])
        .starts_with(is_break)
        || before
            .trim_end_matches([' ', '\t', '>', '|', '#', '*', '/'])
            .ends_with(is_break)
}

// ---------------------------------------------------------------------------------------------
// Base64-encoded identifiers
// ---------------------------------------------------------------------------------------------

/// Base64 inside base64 is decoded this many levels deep.
const MAX_BASE64_DEPTH: usize = 2;
/// Shortest run decoded: 12 bytes of text, enough for a short e-mail address.
const MIN_BASE64_CHARS: usize = 16;
/// Longest run decoded (bytes of base64): bounds the work on one run.
const MAX_BASE64_CHARS: usize = 64 * 1024;

static BASE64_RUN: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r"[A-Za-z0-9+/_-]{16,}={0,2}"));

/// Base64 alphabets without padding and without the trailing-bits check (a run cut short
/// still decodes).
static BASE64_LENIENT: LazyLock<Option<(data_encoding::Encoding, data_encoding::Encoding)>> =
    LazyLock::new(|| {
        let make = |symbols: &str| {
            let mut spec = data_encoding::Specification::new();
            spec.symbols.push_str(symbols);
            spec.check_trailing_bits = false;
            spec.encoding().ok()
        };
        Some((
            make("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")?,
            make("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")?,
        ))
    });

/// The text a base64 run decodes to, if it is UTF-8 text: standard or URL-safe alphabet (not
/// mixed), padding optional, a dangling last character ignored.
pub(crate) fn decode_base64_text(run: &str) -> Option<String> {
    let body = run.trim_end_matches('=');
    let url = body.contains(['-', '_']);
    if url && body.contains(['+', '/']) {
        return None;
    }
    let usable = if body.len() % 4 == 1 {
        body.len() - 1
    } else {
        body.len()
    };
    let body = body.get(..usable)?;
    let (standard, url_safe) = BASE64_LENIENT.as_ref()?;
    let bytes = if url { url_safe } else { standard }
        .decode(body.as_bytes())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Runs that decode (as base64) to text in which a detector finds an identifier: the whole run
/// is a [`IdentifierKind::Secret`]. The decoded text is normalized first
/// ([`crate::normalize`]), so an encoded value split by invisible characters is found too.
fn scan_base64(text: &str, depth: usize, out: &mut Vec<Finding>) {
    let Some(re) = BASE64_RUN.as_ref() else {
        return;
    };
    for m in re.find_iter(text) {
        let run = m.as_str();
        // Base64 of text has mixed case or digits; a run of one-case letters (a long word or
        // identifier) is not worth decoding.
        let plausible = has_digit(run)
            || (run.bytes().any(|b| b.is_ascii_uppercase())
                && run.bytes().any(|b| b.is_ascii_lowercase()));
        if !plausible || !(MIN_BASE64_CHARS..=MAX_BASE64_CHARS).contains(&run.len()) {
            continue;
        }
        let Some(decoded) = decode_base64_text(run) else {
            continue;
        };
        let decoded = crate::normalize::normalize(&decoded);
        if !detect_at_depth(&decoded, depth + 1).is_empty() {
            push(out, IdentifierKind::Secret, m.start(), m.end());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Escaped identifiers (issue 11 item 8)
// ---------------------------------------------------------------------------------------------

/// A run of non-space characters holding at least one escape: percent-encoding (`%40`), an
/// HTML character reference (`&#64;`, `&#x40;`, `&commat;`) or a backslash escape (`\u0040`,
/// `\u{40}`, `\x41`).
static ESCAPED_RUN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    compile(
        r#"[^\s"'<>]*(?:%[0-9A-Fa-f]{2}|&#[0-9]{1,7};|&#[xX][0-9A-Fa-f]{1,6};|&[A-Za-z][A-Za-z0-9]{1,31};|\\u\{[0-9A-Fa-f]{1,6}\}|\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2})[^\s"'<>]*"#,
    )
});

/// Longest escaped run decoded (bytes): bounds the work on one run.
const MAX_ESCAPED_CHARS: usize = 64 * 1024;

/// Undo backslash escapes `\uXXXX`, `\u{X…}` and `\xXX`; other backslashes stay. `None` when
/// an escape names no character (a lone surrogate, say).
fn decode_backslash_escapes(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('\\') {
        out.push_str(rest.get(..i)?);
        let after = rest.get(i + 1..)?;
        let (digits, used) = if let Some(braced) = after.strip_prefix("u{") {
            let close = braced.find('}')?;
            (braced.get(..close)?, 3 + close)
        } else if after.starts_with('u')
            && after
                .get(1..5)
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            (after.get(1..5)?, 5)
        } else if after.starts_with('x')
            && after
                .get(1..3)
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            (after.get(1..3)?, 3)
        } else {
            out.push('\\');
            rest = after;
            continue;
        };
        let c = u32::from_str_radix(digits, 16)
            .ok()
            .and_then(char::from_u32)?;
        out.push(c);
        rest = after.get(used..)?;
    }
    out.push_str(rest);
    Some(out)
}

/// The text an escaped run stands for: percent-decoded (as UTF-8), HTML character references
/// resolved, backslash escapes undone (bytes that are not UTF-8 become U+FFFD). `None` when
/// nothing changes or an escape names no character.
fn decode_escapes(run: &str) -> Option<String> {
    let percent = percent_encoding::percent_decode_str(run).decode_utf8_lossy();
    let html = html_escape::decode_html_entities(&percent);
    let decoded = decode_backslash_escapes(&html)?;
    (decoded != run).then_some(decoded)
}

/// Runs whose escapes hide an identifier (`alice%40corp.example`, `alice&#64;corp.example`,
/// `\x41KIA…`): the whole run is a finding of the kind found in the decoded text, which is
/// normalized first, like a decoded base64 run.
fn scan_escaped(text: &str, depth: usize, out: &mut Vec<Finding>) {
    let Some(re) = ESCAPED_RUN.as_ref() else {
        return;
    };
    for m in re.find_iter(text) {
        if m.len() > MAX_ESCAPED_CHARS {
            continue;
        }
        let Some(decoded) = decode_escapes(m.as_str()) else {
            continue;
        };
        let decoded = crate::normalize::normalize(&decoded);
        if let Some(found) = detect_at_depth(&decoded, depth + 1).first() {
            push(out, found.kind, m.start(), m.end());
        }
    }
}

/// Whether `s` is a valid IBAN (ISO 13616): two letters, two check digits, an alphanumeric BBAN;
/// 15–34 characters (exactly the national length for countries in the built-in table), ASCII
/// spaces anywhere ignored, letters case-insensitive, and the mod-97 remainder of the rearranged
/// number equal to 1. Used by [`detect`] (SecureClaw paper §3.3, validated detectors).
#[must_use]
pub fn iban_valid(s: &str) -> bool {
    let compact: Vec<u8> = s
        .bytes()
        .filter(|b| *b != b' ')
        .map(|b| b.to_ascii_uppercase())
        .collect();
    if !(15..=34).contains(&compact.len()) || !compact.iter().all(u8::is_ascii_alphanumeric) {
        return false;
    }
    let Some(([c0, c1, d0, d1], bban)) = compact.split_first_chunk::<4>() else {
        return false;
    };
    if !(c0.is_ascii_uppercase()
        && c1.is_ascii_uppercase()
        && d0.is_ascii_digit()
        && d1.is_ascii_digit())
    {
        return false;
    }
    // Check digits are 02..=98; 00, 01 and 99 are congruent to valid ones but never issued.
    if matches!((d0, d1), (b'0', b'0' | b'1') | (b'9', b'9')) {
        return false;
    }
    if let Some(len) = iban_country_length(*c0, *c1)
        && len != compact.len()
    {
        return false;
    }
    let mut rem: u32 = 0;
    for &b in bban.iter().chain([*c0, *c1, *d0, *d1].iter()) {
        rem = if b.is_ascii_digit() {
            (rem * 10 + u32::from(b - b'0')) % 97
        } else {
            (rem * 100 + u32::from(b - b'A') + 10) % 97
        };
    }
    rem == 1
}

/// Whether `digits` is a Luhn-valid card number: 13–19 ASCII digits, with ASCII spaces and
/// dashes allowed anywhere and ignored; any other character makes it invalid. Used by
/// [`detect`] (SecureClaw paper §3.3, validated detectors).
#[must_use]
pub fn luhn_valid(digits: &str) -> bool {
    let mut values = Vec::with_capacity(19);
    for b in digits.bytes() {
        match b {
            b'0'..=b'9' => values.push(u32::from(b - b'0')),
            b' ' | b'-' => {}
            _ => return false,
        }
    }
    if !(13..=19).contains(&values.len()) {
        return false;
    }
    let sum: u32 = values
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Whether a structured field called `name` holds a credential, judged by its name alone
/// (`password`, `api_key`, `apiKey`, `X-Api-Key`, `client_secret`, `access_token`,
/// `Authorization`, `Set-Cookie`, `pin`, `cvv`, …). Case-insensitive; camelCase, `-`, `.` and
/// spaces count as word separators. Pagination cursors (`next_page_token`, `sync_token`, …) are
/// not credentials. The summary operator protects the whole value of such a field (SecureClaw
/// paper §3.3, field classification).
#[must_use]
pub fn is_credential_name(name: &str) -> bool {
    let mut norm = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_uppercase() && prev_lower {
            norm.push('_');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        if c.is_alphanumeric() {
            norm.extend(c.to_lowercase());
        } else {
            norm.push('_');
        }
    }
    let words: Vec<&str> = norm.split('_').filter(|w| !w.is_empty()).collect();
    let (last, before) = match words.as_slice() {
        [.., before, last] => (*last, Some(*before)),
        [last] => (*last, None),
        [] => return false,
    };
    const SINGLE: &[&str] = &[
        "password",
        "passwords",
        "passwd",
        "pwd",
        "passphrase",
        "passcode",
        "secret",
        "secrets",
        "token",
        "credential",
        "credentials",
        "authorization",
        "cookie",
        "cookies",
        "apikey",
        "apikeys",
        "pin",
        "cvv",
        "cvv2",
        "cvc",
        "otp",
    ];
    const KEY_QUALIFIERS: &[&str] = &[
        "api",
        "private",
        "access",
        "secret",
        "signing",
        "encryption",
        "master",
    ];
    const CURSORS: &[&str] = &[
        "page",
        "next",
        "sync",
        "continuation",
        "cursor",
        "pagination",
    ];
    if last == "token" && before.is_some_and(|b| CURSORS.contains(&b)) {
        return false;
    }
    if SINGLE.contains(&last) {
        return true;
    }
    // An encoding suffix after a credential word: `secret_hex` (SecureClaw's key ring file),
    // `token_b64`, `password_base64`.
    if matches!(last, "hex" | "b64" | "base64" | "bytes")
        && before.is_some_and(|b| SINGLE.contains(&b) || b == "key")
    {
        return true;
    }
    matches!(last, "key" | "keys") && before.is_some_and(|b| KEY_QUALIFIERS.contains(&b))
}

// ---------------------------------------------------------------------------------------------
// Candidate collection and overlap resolution
// ---------------------------------------------------------------------------------------------

/// Merge overlapping candidates into their union; see the module docs for the kind chosen.
fn resolve(mut candidates: Vec<Finding>) -> Vec<Finding> {
    candidates.retain(|f| f.start < f.end);
    candidates.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<Finding> = Vec::with_capacity(candidates.len());
    // (union end, representative candidate) of the cluster being built.
    let mut current: Option<(Finding, Finding)> = None;
    for cand in candidates {
        current = match current {
            Some((mut union, best)) if cand.start < union.end => {
                union.end = union.end.max(cand.end);
                let best = if better(&cand, &best) { cand } else { best };
                Some((union, best))
            }
            other => {
                if let Some((union, best)) = other {
                    out.push(Finding {
                        kind: best.kind,
                        ..union
                    });
                }
                Some((cand.clone(), cand))
            }
        };
    }
    if let Some((union, best)) = current {
        out.push(Finding {
            kind: best.kind,
            ..union
        });
    }
    out
}

/// Whether `a` should name a merged cluster rather than `b`.
fn better(a: &Finding, b: &Finding) -> bool {
    let key = |f: &Finding| {
        (
            f.kind == IdentifierKind::Secret,
            f.end - f.start,
            f.kind.priority(),
            std::cmp::Reverse(f.start),
        )
    };
    key(a) > key(b)
}

/// Compile a static pattern; `None` (detector skipped) only if the pattern is broken, which the
/// unit test `all_patterns_compile` rules out.
fn compile(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

fn push(out: &mut Vec<Finding>, kind: IdentifierKind, start: usize, end: usize) {
    out.push(Finding { kind, start, end });
}

fn byte_at(text: &str, i: usize) -> Option<u8> {
    text.as_bytes().get(i).copied()
}

fn byte_before(text: &str, i: usize) -> Option<u8> {
    i.checked_sub(1).and_then(|j| byte_at(text, j))
}

fn is_word_byte(b: Option<u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

/// A secret pattern: regex source, the capture group that holds the secret (0 = whole match)
/// and a post-filter on that group's text.
struct SecretSource {
    pattern: &'static str,
    group: usize,
    filter: fn(&str) -> bool,
}

fn any_value(_: &str) -> bool {
    true
}

fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

fn digit_or_mixed_case(s: &str) -> bool {
    has_digit(s)
        || (s.bytes().any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase()))
}

fn assignment_value(s: &str) -> bool {
    // `Authorization: Bearer xyz` — the scheme word is not the secret; the bearer pattern
    // catches the credential that follows it.
    !["bearer", "basic", "token", "digest"]
        .iter()
        .any(|w| s.eq_ignore_ascii_case(w))
}

const SECRET_SOURCES: &[SecretSource] = &[
    // PEM private key: the whole block, or through the end of the text if the footer is missing.
    SecretSource {
        pattern: r"(?s)-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        group: 0,
        filter: any_value,
    },
    // AWS access key id.
    SecretSource {
        pattern: r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}",
        group: 0,
        filter: any_value,
    },
    // The same, printed in groups of four (`AKIA IOSF ODNN 7EXA MPLE`, dashes too); a digit
    // somewhere spares upper-case prose ("ASIA PACI …" is not a key).
    SecretSource {
        pattern: r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)(?:[ -][A-Z0-9]{4}){4}\b",
        group: 0,
        filter: has_digit,
    },
    // GitHub tokens.
    SecretSource {
        pattern: r"gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255}",
        group: 0,
        filter: any_value,
    },
    // Slack tokens.
    SecretSource {
        pattern: r"xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,}",
        group: 0,
        filter: any_value,
    },
    // Stripe secret and restricted keys, webhook secrets.
    SecretSource {
        pattern: r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,}",
        group: 0,
        filter: any_value,
    },
    // OpenAI / Anthropic style keys.
    SecretSource {
        pattern: r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        group: 0,
        filter: has_digit,
    },
    // SecureClaw's own operator token (`sco_` + base32 of 24 bytes) and session ids (`ses_` +
    // base32 of 16 bytes, the MCP bearer token of a session): whoever reads one can act as the
    // operator or as that session.
    SecretSource {
        pattern: r"(?i)sco_[a-z2-7]{32,}",
        group: 0,
        filter: any_value,
    },
    SecretSource {
        pattern: r"(?i)ses_[a-z2-7]{26,}",
        group: 0,
        filter: any_value,
    },
    // SecureClaw's key ring file (`keys.json`): every key's `"secret_hex": "<64 hex>"`.
    SecretSource {
        pattern: r#"(?i)secret_hex[\\"']{0,3}\s*[:=]\s*[\\"']{0,3}([0-9a-f]{64})"#,
        group: 1,
        filter: any_value,
    },
    // Google API key.
    SecretSource {
        pattern: r"AIza[0-9A-Za-z_-]{35}",
        group: 0,
        filter: any_value,
    },
    // JWT (header and payload are base64url JSON objects, so both start with `eyJ`).
    SecretSource {
        pattern: r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
        group: 0,
        filter: any_value,
    },
    // HTTP credentials: `Bearer <token>`, `Basic <base64>`, `token <value>`.
    SecretSource {
        pattern: r"(?i)\b(?:bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{12,})",
        group: 1,
        filter: digit_or_mixed_case,
    },
    // Assignments: `api_key=…`, `"password": "…"`, `token: …`, `client_secret=…` (value only).
    SecretSource {
        pattern: r#"(?i)\b[a-z0-9_-]*(?:api[_-]?key|apikey|secret|access[_-]?key|private[_-]?key|token|passw(?:or)?d|pwd|passphrase|credentials?|authorization|auth)s?\b[\\"'*\]]{0,4}\s*[:=]\s*[\\"']{0,3}([^\s"'\\<>,;&`]{6,})"#,
        group: 1,
        filter: assignment_value,
    },
    // `password: Tr0ub4dor&3-horse-staple` (a colon: YAML, prose, a config dump): the value runs
    // to the next whitespace, `&`, `,` and `;` included; only the `=` form stops there, for
    // query strings (red-team round 3: the tail after `&` was shown).
    SecretSource {
        pattern: r#"(?i)\b[a-z0-9_-]*(?:api[_-]?key|apikey|secret|access[_-]?key|private[_-]?key|token|passw(?:or)?d|pwd|passphrase|credentials?)s?\b[\\"'*\]]{0,4}\s*:\s*([^\s"'\\<>`]{5,}[^\s"'\\<>`.,;:!?)])"#,
        group: 1,
        filter: assignment_value,
    },
    // A PEM private key's last lines without its header (a `tail` of the file): the base64
    // lines right before the footer.
    SecretSource {
        pattern: r"(?:[A-Za-z0-9+/=]{4,}\r?\n)+-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
        group: 0,
        filter: any_value,
    },
    // A quoted value after a credential key keeps the characters the unquoted form stops at
    // (`"password": "ab&cd,ef;gh"`; red-team finding: `&` cut it to nothing).
    SecretSource {
        pattern: r#"(?i)\b[a-z0-9_-]*(?:api[_-]?key|apikey|secret|access[_-]?key|private[_-]?key|token|passw(?:or)?d|pwd|passphrase|passcode|credentials?)s?\b[\\"'*\]]{0,4}\s*[:=]\s*\\?"([^"\\\n]{6,200})\\?""#,
        group: 1,
        filter: assignment_value,
    },
    SecretSource {
        pattern: r#"(?i)\b[a-z0-9_-]*(?:api[_-]?key|apikey|secret|access[_-]?key|private[_-]?key|token|passw(?:or)?d|pwd|passphrase|passcode|credentials?)s?\b[\\"'*\]]{0,4}\s*[:=]\s*'([^'\n]{6,200})'"#,
        group: 1,
        filter: assignment_value,
    },
    // In prose: `the wifi password is Tr0ub4dor&3`, `pass is hunter22`, `PIN was 4471`
    // (red-team finding). Only a value with a digit, mixed case or a symbol: "the password is
    // required" names none.
    SecretSource {
        pattern: r#"(?i)\b(?:passwords?|passwd|passcode|passphrase|pass|pin|wi-?fi\s+(?:key|code))\s+(?:is|was|will\s+be)\s*:?\s*["'\u{201C}]?([^\s"'\u{201D}<>]{3,63}[^\s"'\u{201D}<>.,;:!?)])"#,
        group: 1,
        filter: credential_word,
    },
];

/// A value named a credential in prose: a digit, both letter cases, or a symbol in it.
fn credential_word(s: &str) -> bool {
    digit_or_mixed_case(s) || s.chars().any(|c| !c.is_alphanumeric())
}

/// A compiled [`SecretSource`].
struct SecretPattern {
    re: Regex,
    group: usize,
    filter: fn(&str) -> bool,
}

static SECRET_PATTERNS: LazyLock<Vec<SecretPattern>> = LazyLock::new(|| {
    SECRET_SOURCES
        .iter()
        .filter_map(|s| {
            compile(s.pattern).map(|re| SecretPattern {
                re,
                group: s.group,
                filter: s.filter,
            })
        })
        .collect()
});

static HEX_RUN: LazyLock<Option<Regex>> = LazyLock::new(|| compile(r"[0-9A-Fa-f]{32,}"));
static B64_RUN: LazyLock<Option<Regex>> = LazyLock::new(|| compile(r"[A-Za-z0-9+/=_-]{32,}"));
/// RFC 4648 base32 runs in one case (`[a-z2-7]` or `[A-Z2-7]`) of 26 characters or more
/// (16 random bytes): TOTP seeds, and the body of SecureClaw's own operator token and session
/// ids without their `sco_`/`ses_` prefix (red-team R9).
static B32_RUN: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r"[a-z2-7]{26,}={0,6}|[A-Z2-7]{26,}={0,6}"));

/// Exact secrets of this process ([`add_exact_secret`], [`add_random_secret`]) and their
/// matchers.
#[derive(Default)]
struct ExactSecrets {
    /// The secrets as registered.
    secrets: Vec<String>,
    /// Finds a secret verbatim (ASCII case-insensitive).
    whole: Option<AhoCorasick>,
    /// The patterns of `squashed`: each secret without separators ([`is_secret_separator`]),
    /// and every [`SECRET_FRAGMENT_LEN`]-character fragment of a random secret.
    squashed_patterns: Vec<String>,
    /// Finds a pattern in text with its separators removed.
    squashed: Option<AhoCorasick>,
}

static EXACT_SECRETS: std::sync::RwLock<Option<ExactSecrets>> = std::sync::RwLock::new(None);

/// Shortest exact secret [`add_exact_secret`] accepts (bytes): shorter strings would match
/// ordinary text.
pub const MIN_EXACT_SECRET_LEN: usize = 12;

/// Length (characters, separators removed) of the fragments of a random secret that are
/// found on their own ([`add_random_secret`]): 10 base32 characters are 50 bits, which
/// ordinary text never holds by chance.
pub const SECRET_FRAGMENT_LEN: usize = 10;

/// Characters removed before the separator-insensitive match (red-team M1 of 2026-12-03: the
/// operator token grouped by spaces or dashes, or split across lines, came back in clear).
fn is_secret_separator(c: char) -> bool {
    c.is_whitespace() || "-_.:,;|/\\'\"`+".contains(c)
}

fn squash(text: &str) -> String {
    text.chars().filter(|c| !is_secret_separator(*c)).collect()
}

/// Register a secret this process holds (an operator token the operator chose, a database
/// password) so that [`detect`] finds it from then on in any text, whatever its format:
/// verbatim, ASCII case-insensitively, and with separators (white space, line breaks, `-`,
/// `_`, `.`, `:` and other punctuation) inserted or removed anywhere. This is the gateway's
/// `add-mask`: format detectors cannot know a token chosen by the operator
/// (`$SECURECLAW_OPERATOR_TOKEN`) or a password (issue 11 item 7, red-team F6).
///
/// Process-wide and append-only; strings shorter than [`MIN_EXACT_SECRET_LEN`] bytes and
/// repeats are ignored. Registering is rare (start-up), so the matchers are rebuilt each time.
pub fn add_exact_secret(secret: &str) {
    register_secret(secret, false);
}

/// [`add_exact_secret`] for a secret this process generated at random (the operator token it
/// created, a key's hex): besides the whole secret, every fragment of
/// [`SECRET_FRAGMENT_LEN`] characters (separators removed) is found on its own, so a token
/// split across lines or cut short leaks no more than a few characters. Not for secrets made
/// of words (their fragments occur in ordinary text).
pub fn add_random_secret(secret: &str) {
    register_secret(secret, true);
}

fn register_secret(secret: &str, random: bool) {
    let secret = secret.trim();
    if secret.len() < MIN_EXACT_SECRET_LEN {
        return;
    }
    let mut guard = match EXACT_SECRETS.write() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    let set = guard.get_or_insert_with(ExactSecrets::default);
    let squashed = squash(secret).to_ascii_lowercase();
    let mut new_patterns = Vec::new();
    if squashed.len() >= MIN_EXACT_SECRET_LEN {
        new_patterns.push(squashed.clone());
    }
    if random && squashed.is_ascii() {
        for i in 0..=squashed.len().saturating_sub(SECRET_FRAGMENT_LEN) {
            if let Some(f) = squashed.get(i..i + SECRET_FRAGMENT_LEN) {
                new_patterns.push(f.to_owned());
            }
        }
    }
    let known = set.secrets.iter().any(|s| s.eq_ignore_ascii_case(secret));
    let mut changed = false;
    if !known {
        set.secrets.push(secret.to_owned());
        changed = true;
    }
    for p in new_patterns {
        if !set.squashed_patterns.contains(&p) {
            set.squashed_patterns.push(p);
            changed = true;
        }
    }
    if !changed {
        return;
    }
    set.whole = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(&set.secrets)
        .ok();
    set.squashed = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(&set.squashed_patterns)
        .ok();
}

fn scan_exact_secrets(text: &str, out: &mut Vec<Finding>) {
    let guard = match EXACT_SECRETS.read() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    let Some(set) = guard.as_ref() else {
        return;
    };
    if let Some(matcher) = set.whole.as_ref() {
        for m in matcher.find_overlapping_iter(text) {
            push(out, IdentifierKind::Secret, m.start(), m.end());
        }
    }
    if let Some(matcher) = set.squashed.as_ref() {
        // The text without separators, and where each of its characters came from.
        let mut squashed = String::with_capacity(text.len());
        let mut origin: Vec<(usize, usize)> = Vec::with_capacity(text.len());
        for (i, c) in text.char_indices() {
            if !is_secret_separator(c) {
                squashed.push(c);
                for _ in 0..c.len_utf8() {
                    origin.push((i, i + c.len_utf8()));
                }
            }
        }
        for m in matcher.find_overlapping_iter(&squashed) {
            if let (Some((start, _)), Some((_, end))) = (
                origin.get(m.start()),
                m.end().checked_sub(1).and_then(|e| origin.get(e)),
            ) {
                push(out, IdentifierKind::Secret, *start, *end);
            }
        }
    }
}

/// One pass over a text telling which of the secret patterns, then [`HEX_RUN`], [`B64_RUN`]
/// and [`B32_RUN`], match it anywhere (`None` if the set cannot be built: every pattern is then
/// run). [`scan_secrets`] runs only those that do: most text holds no secret, and one pass of
/// the set costs about what one of the 22 patterns did, each of which used to scan every
/// string of every call and result (BENCHMARKS.md §14).
static SECRET_SET: LazyLock<Option<regex::RegexSet>> = LazyLock::new(|| {
    let runs = [&*HEX_RUN, &*B64_RUN, &*B32_RUN];
    if runs.iter().any(|r| r.is_none()) {
        return None;
    }
    let patterns = SECRET_PATTERNS
        .iter()
        .map(|p| p.re.as_str())
        .chain(runs.iter().filter_map(|r| r.as_ref().map(Regex::as_str)));
    regex::RegexSet::new(patterns).ok()
});

fn scan_secrets(text: &str, out: &mut Vec<Finding>) {
    let matched = SECRET_SET.as_ref().map(|set| set.matches(text));
    scan_secrets_where(text, out, |i| matched.as_ref().is_none_or(|m| m.matched(i)));
}

/// A run pattern and the entropy test a match must pass to be a secret.
type HighEntropyRun = (&'static LazyLock<Option<Regex>>, fn(&str) -> bool);

/// [`scan_secrets`] running the `i`-th pattern (in [`SECRET_SET`]'s order) only where
/// `run(i)`.
fn scan_secrets_where(text: &str, out: &mut Vec<Finding>, run: impl Fn(usize) -> bool) {
    let n = SECRET_PATTERNS.len();
    for (i, pattern) in SECRET_PATTERNS.iter().enumerate() {
        if !run(i) {
            continue;
        }
        for caps in pattern.re.captures_iter(text) {
            if let Some(m) = caps.get(pattern.group)
                && (pattern.filter)(m.as_str())
            {
                push(out, IdentifierKind::Secret, m.start(), m.end());
            }
        }
    }
    let runs: [HighEntropyRun; 3] = [
        (&HEX_RUN, high_entropy_hex),
        (&B64_RUN, high_entropy_base64),
        (&B32_RUN, high_entropy_base32),
    ];
    for (k, (re, high_entropy)) in runs.into_iter().enumerate() {
        if !run(n.saturating_add(k)) {
            continue;
        }
        if let Some(re) = re.as_ref() {
            for m in re.find_iter(text) {
                if high_entropy(m.as_str()) {
                    push(out, IdentifierKind::Secret, m.start(), m.end());
                }
            }
        }
    }
    scan_exact_secrets(text, out);
    extend_wrapped_secrets(text, out);
}

/// A secret that ends a line continues on the next when that line (after its indentation) is
/// one run of key characters (base64 or base62, at least 8, with a digit and a letter): a key
/// wrapped over two lines (red-team round 3: the second line of a wrapped `sk_live_…` key was
/// shown; 2026-12-04: an indented continuation was shown).
fn extend_wrapped_secrets(text: &str, out: &mut [Finding]) {
    let key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-');
    for finding in out.iter_mut().filter(|f| f.kind == IdentifierKind::Secret) {
        while let Some(rest) = text.get(finding.end..) {
            let after_break = rest
                .strip_prefix("\r\n")
                .or_else(|| rest.strip_prefix('\n'));
            let Some(next) = after_break.map(|n| n.trim_start_matches([' ', '\t'])) else {
                break;
            };
            let line_end = next.find(['\r', '\n']).unwrap_or(next.len());
            let line = next.get(..line_end).unwrap_or_default();
            let wrapped = line.len() >= 8
                && line.chars().all(key_char)
                && line.chars().any(|c| c.is_ascii_digit())
                && line.chars().any(|c| c.is_ascii_alphabetic());
            if !wrapped {
                break;
            }
            finding.end = finding
                .end
                .saturating_add(rest.len().saturating_sub(next.len()))
                .saturating_add(line_end);
        }
    }
}

/// Shannon entropy in bits per byte.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    let mut total = 0u32;
    for b in s.bytes() {
        if let Some(c) = counts.get_mut(usize::from(b)) {
            *c += 1;
        }
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    let n = f64::from(total);
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

fn high_entropy_hex(s: &str) -> bool {
    has_digit(s) && s.bytes().any(|b| b.is_ascii_alphabetic()) && entropy(s) >= 3.0
}

/// A base32 run of random bytes: at least two digits (`2`–`7`) and 3.5 bits per character or
/// more (random base32 of 26+ characters has about 4.2–4.5; glued words have no digits).
fn high_entropy_base32(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    body.bytes().filter(u8::is_ascii_digit).count() >= 2 && entropy(body) >= 3.5
}

fn high_entropy_base64(s: &str) -> bool {
    has_digit(s)
        && s.bytes().any(|b| b.is_ascii_uppercase())
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && entropy(s) >= 4.0
}

// ---------------------------------------------------------------------------------------------
// IBAN
// ---------------------------------------------------------------------------------------------

/// National IBAN lengths for countries whose length we are sure of; others get 15..=34.
fn iban_country_length(c0: u8, c1: u8) -> Option<usize> {
    let len = match [c0, c1] {
        [b'N', b'O'] => 15,
        [b'B', b'E'] => 16,
        [b'D', b'K'] | [b'F', b'I'] | [b'F', b'O'] | [b'G', b'L'] | [b'N', b'L'] => 18,
        [b'S', b'I'] | [b'M', b'K'] => 19,
        [b'A', b'T'] | [b'E', b'E'] | [b'L', b'T'] | [b'L', b'U'] | [b'K', b'Z'] | [b'X', b'K'] => {
            20
        }
        [b'C', b'H'] | [b'L', b'I'] | [b'H', b'R'] | [b'L', b'V'] => 21,
        [b'D', b'E']
        | [b'G', b'B']
        | [b'I', b'E']
        | [b'B', b'G']
        | [b'B', b'H']
        | [b'C', b'R']
        | [b'G', b'E']
        | [b'M', b'E']
        | [b'R', b'S']
        | [b'V', b'A'] => 22,
        [b'A', b'E'] | [b'G', b'I'] | [b'I', b'L'] => 23,
        [b'C', b'Z']
        | [b'E', b'S']
        | [b'S', b'E']
        | [b'S', b'K']
        | [b'R', b'O']
        | [b'S', b'A']
        | [b'T', b'N']
        | [b'M', b'D']
        | [b'A', b'D']
        | [b'P', b'K'] => 24,
        [b'P', b'T'] => 25,
        [b'I', b'S'] | [b'T', b'R'] => 26,
        [b'F', b'R'] | [b'I', b'T'] | [b'G', b'R'] | [b'M', b'C'] | [b'S', b'M'] | [b'M', b'R'] => {
            27
        }
        [b'P', b'L']
        | [b'H', b'U']
        | [b'C', b'Y']
        | [b'A', b'L']
        | [b'A', b'Z']
        | [b'D', b'O']
        | [b'L', b'B'] => 28,
        [b'B', b'R'] | [b'Q', b'A'] | [b'U', b'A'] => 29,
        [b'J', b'O'] | [b'K', b'W'] | [b'M', b'U'] => 30,
        [b'M', b'T'] | [b'S', b'C'] => 31,
        _ => return None,
    };
    Some(len)
}

/// Find IBANs, compact (`DE89370400440532013000`) or printed in groups of four
/// (`DE89 3704 0044 0532 0130 00`). Candidates start at any `LLdd` (no left boundary needed for
/// countries with a known length; unknown countries need word boundaries on both sides to keep
/// chance mod-97 hits down).
fn scan_ibans(text: &str, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    for (i, window) in bytes.windows(4).enumerate() {
        let [c0, c1, d0, d1] = window else { continue };
        if !(c0.is_ascii_alphabetic()
            && c1.is_ascii_alphabetic()
            && d0.is_ascii_digit()
            && d1.is_ascii_digit())
        {
            continue;
        }
        let known = iban_country_length(c0.to_ascii_uppercase(), c1.to_ascii_uppercase());
        if known.is_none() && is_word_byte(byte_before(text, i)) {
            continue;
        }
        // Walk the BBAN: alphanumerics, single spaces only after a multiple of four characters.
        let mut ends: Vec<(usize, usize)> = Vec::new(); // (alnum count, byte end)
        let mut count = 4;
        let mut j = i + 4;
        while count < 34 {
            match bytes.get(j) {
                Some(b) if b.is_ascii_alphanumeric() => {
                    count += 1;
                    j += 1;
                    ends.push((count, j));
                }
                Some(b' ')
                    if count.is_multiple_of(4)
                        && bytes.get(j + 1).is_some_and(u8::is_ascii_alphanumeric) =>
                {
                    j += 1;
                }
                _ => break,
            }
        }
        let found = match known {
            Some(len) => ends
                .iter()
                .find(|(n, _)| *n == len)
                .filter(|(_, end)| text.get(i..*end).is_some_and(iban_valid))
                .map(|(_, end)| *end),
            None => ends
                .iter()
                .rev()
                .filter(|(n, end)| *n >= 15 && !is_word_byte(byte_at(text, *end)))
                .find(|(_, end)| text.get(i..*end).is_some_and(iban_valid))
                .map(|(_, end)| *end),
        };
        if let Some(end) = found {
            push(out, IdentifierKind::Iban, i, end);
        }
    }
}

/// IBANs of a country with a known length printed with other separators than groups of four:
/// single spaces, dashes or dots anywhere (`DE89-3704-0044-…`, `DE89.3704.…`,
/// `DE 89370400440532013000`). Valid by mod 97 at exactly the national length.
static IBAN_SEPARATED: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r"(?i)\b[a-z]{2}[ .-]?[0-9]{2}(?:[ .-]?[a-z0-9]){10,32}"));

fn scan_separated_ibans(text: &str, out: &mut Vec<Finding>) {
    let Some(re) = IBAN_SEPARATED.as_ref() else {
        return;
    };
    for m in re.find_iter(text) {
        let run = m.as_str();
        if !run.contains([' ', '-', '.']) {
            continue; // compact: `scan_ibans` decides
        }
        let bytes = run.as_bytes();
        let (Some(c0), Some(c1)) = (bytes.first(), bytes.get(1)) else {
            continue;
        };
        let Some(len) = iban_country_length(c0.to_ascii_uppercase(), c1.to_ascii_uppercase())
        else {
            continue;
        };
        let mut compact = String::with_capacity(len);
        let mut end = None;
        for (i, b) in run.bytes().enumerate() {
            if b.is_ascii_alphanumeric() {
                compact.push(char::from(b));
                if compact.len() == len {
                    end = Some(i + 1);
                    break;
                }
            }
        }
        if let Some(end) = end
            && iban_valid(&compact)
        {
            push(out, IdentifierKind::Iban, m.start(), m.start() + end);
        }
    }
}

/// Addresses spelled out in lower case: `alice.jones at corp dot example`, and
/// `alice.jones at corp.example` when the local part has a dot, digit, `_` or `+` (so prose such
/// as "look at example.com" is spared).
static EMAIL_SPELLED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    compile(
        r"(?i)[\p{L}\p{N}._%+-]+\s+at\s+[\p{L}\p{N}-]+(?:\s+dot\s+[\p{L}\p{N}-]+)+|[\p{L}\p{N}%-]*[._+\p{N}][\p{L}\p{N}._%+-]*\s+at\s+[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)+",
    )
});

/// Addresses disguised with brackets or spaces (red-team round 2 of 2026-12-03):
/// `attacker [at] evil [dot] example`, `attacker(at)evil{dot}example`,
/// `attacker @ evil . example`. The last label is a lower-case top-level domain, so prices
/// (`5 @ 10.50`) and sentence ends (`meet @ Home. Then`) are spared.
static EMAIL_DISGUISED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    compile(
        r"[\p{L}\p{N}._%+-]+\s*(?:[\[({<]\s*(?i:at)\s*[\])}>]|@)\s*[\p{L}\p{N}-]+(?:\s*(?:[\[({<]\s*(?i:dot)\s*[\])}>]|\.)\s*[\p{L}\p{N}-]+)*\s*(?:[\[({<]\s*(?i:dot)\s*[\])}>]|\.)\s*[a-z]{2,24}\b",
    )
});

fn scan_spelled_emails(text: &str, out: &mut Vec<Finding>) {
    for re in [EMAIL_SPELLED.as_ref(), EMAIL_DISGUISED.as_ref()]
        .into_iter()
        .flatten()
    {
        for m in re.find_iter(text) {
            push(out, IdentifierKind::Email, m.start(), m.end());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Card numbers
// ---------------------------------------------------------------------------------------------

/// Find card numbers: from every digit group start, the longest Luhn-valid run of 13–19 digits
/// (single space or dash separators) that ends at a group end.
fn scan_cards(text: &str, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if !b.is_ascii_digit() || byte_before(text, i).is_some_and(|p| p.is_ascii_digit()) {
            continue;
        }
        let mut digits = 0;
        let mut j = i;
        let mut ends: Vec<usize> = Vec::new();
        while digits < 19 {
            match bytes.get(j) {
                Some(d) if d.is_ascii_digit() => {
                    digits += 1;
                    j += 1;
                    let group_end = !bytes.get(j).is_some_and(u8::is_ascii_digit);
                    if group_end && digits >= 13 {
                        ends.push(j);
                    }
                }
                Some(b' ' | b'-') if bytes.get(j + 1).is_some_and(u8::is_ascii_digit) => j += 1,
                _ => break,
            }
        }
        if let Some(end) = ends
            .iter()
            .rev()
            .find(|end| text.get(i..**end).is_some_and(luhn_valid))
        {
            push(out, IdentifierKind::CardNumber, i, *end);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Email and URL
// ---------------------------------------------------------------------------------------------

static EMAIL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    compile(
        r"(?i)[\p{L}\p{N}._%+-]+@(?:[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?\.)+\p{L}[\p{L}\p{N}-]*[\p{L}\p{N}]",
    )
});

/// Obfuscated addresses: `name [at] example [dot] com`, `name (at) example.com`,
/// `name AT example DOT com` (the spelled-out words only in capitals, to spare prose).
static EMAIL_OBFUSCATED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    compile(
        r"[\p{L}\p{N}._%+-]+(?:\s*[\[({]\s*(?i:at)\s*[\])}]\s*|\s+AT\s+)[\p{L}\p{N}-]+(?:(?:\s*[\[({]\s*(?i:dot)\s*[\])}]\s*|\s+DOT\s+|\.)[\p{L}\p{N}-]+)+",
    )
});

fn scan_emails(text: &str, out: &mut Vec<Finding>) {
    for re in [EMAIL.as_ref(), EMAIL_OBFUSCATED.as_ref()]
        .into_iter()
        .flatten()
    {
        for m in re.find_iter(text) {
            push(out, IdentifierKind::Email, m.start(), m.end());
        }
    }
}

static URL: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r#"(?i)(?:(?:https?|ftp)://|\bwww\.)[^\s<>"'`{}|\\^\[\]]+"#));

fn scan_urls(text: &str, out: &mut Vec<Finding>) {
    let Some(re) = URL.as_ref() else { return };
    for m in re.find_iter(text) {
        let mut url = m.as_str();
        // Trailing sentence punctuation and an unbalanced closing parenthesis are not part of it.
        loop {
            let trimmed = url.trim_end_matches(['.', ',', ';', ':', '!', '?', '*']);
            let trimmed = if trimmed.ends_with(')')
                && trimmed.matches(')').count() > trimmed.matches('(').count()
            {
                trimmed.get(..trimmed.len() - 1).unwrap_or(trimmed)
            } else {
                trimmed
            };
            if trimmed.len() == url.len() {
                break;
            }
            url = trimmed;
        }
        let body = url
            .find("://")
            .map_or_else(|| url.len().saturating_sub(4), |p| url.len() - p - 3);
        if body > 0 {
            push(out, IdentifierKind::Url, m.start(), m.start() + url.len());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phone numbers
// ---------------------------------------------------------------------------------------------

static PHONE: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r"\+?(?:\(\d{1,5}\)|\d{1,5})(?:[ ./-]?(?:\(\d{1,5}\)|\d{1,5})){1,7}"));

/// Find phone numbers. The regex match is leftmost and greedy, so one implausible candidate
/// could hide a real number: a number followed by more digit groups
/// (`+49 30 1234567 4111 1111 1111 1111`), or a number after digits glued to a word
/// (`ref x7 030 1234567`). So for each candidate the shorter candidates ending at its earlier
/// group ends are tried too, longest first; if none is plausible, scanning resumes at the
/// candidate's next digit group instead of after the whole candidate (fuzzing found both
/// misses; FUZZING.md). Each candidate spans at most 8 groups, so this stays linear.
fn scan_phones(text: &str, out: &mut Vec<Finding>) {
    let Some(re) = PHONE.as_ref() else { return };
    let bytes = text.as_bytes();
    let mut pos = 0;
    while let Some(m) = re.find_at(text, pos) {
        let (start, end) = (m.start(), m.end());
        let group_ends: Vec<usize> = (start + 1..=end)
            .filter(|&e| {
                bytes
                    .get(e - 1)
                    .is_some_and(|b| b.is_ascii_digit() || *b == b')')
                    && !bytes.get(e).is_some_and(u8::is_ascii_digit)
            })
            .collect();
        match group_ends
            .iter()
            .rev()
            .find(|&&e| phone_plausible(text, start, e))
        {
            Some(&e) => {
                push(out, IdentifierKind::Phone, start, e);
                pos = e;
            }
            None => {
                // Skip the candidate's first group (`+`, `(`, digits, `)`), then rescan.
                let mut k = start + 1;
                while bytes
                    .get(k)
                    .is_some_and(|b| b.is_ascii_digit() || *b == b')')
                {
                    k += 1;
                }
                pos = k;
            }
        }
    }
}

/// Post-filter for phone candidates: 7–15 digits, not glued to a longer token, and not shaped
/// like a date, year range, decimal, IPv4 address or thousands-grouped amount.
fn phone_plausible(text: &str, start: usize, end: usize) -> bool {
    let Some(cand) = text.get(start..end) else {
        return false;
    };
    // Left context: not inside a word, a code like `INV-2026-0042`, or a longer number. A `+`
    // starts a new number whatever precedes it (`Tel+49 …`, `… 1234+44 20 7946`; found by
    // fuzzing, FUZZING.md).
    let prev = byte_before(text, start);
    let plus = byte_at(text, start) == Some(b'+');
    if !plus && (is_word_byte(prev) || prev == Some(b'#')) {
        return false;
    }
    if prev.is_some_and(|p| matches!(p, b'.' | b',' | b'-' | b'/'))
        && is_word_byte(start.checked_sub(2).and_then(|j| byte_at(text, j)))
    {
        return false;
    }
    // Right context: not followed by a word character or a decimal/date continuation.
    let next = byte_at(text, end);
    if is_word_byte(next) {
        return false;
    }
    if next.is_some_and(|n| matches!(n, b'.' | b',' | b'-' | b'/'))
        && byte_at(text, end + 1).is_some_and(|d| d.is_ascii_digit())
    {
        return false;
    }
    // Nor by a time (`Dec 03 2026 10:33:00`: the hour ends the candidate; red-team L1).
    if next == Some(b':') && byte_at(text, end + 1).is_some_and(|d| d.is_ascii_digit()) {
        return false;
    }

    let mut groups: Vec<&str> = Vec::new();
    let mut seps: Vec<u8> = Vec::new();
    for part in cand.split(|c: char| !c.is_ascii_digit()) {
        if !part.is_empty() {
            groups.push(part);
        }
    }
    for b in cand.bytes() {
        if matches!(b, b' ' | b'.' | b'-' | b'/') && !seps.contains(&b) {
            seps.push(b);
        }
    }
    let digits: usize = groups.iter().map(|g| g.len()).sum();
    if !(7..=15).contains(&digits) {
        return false;
    }
    if cand.starts_with('+') {
        return true;
    }
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let has_parens = cand.contains('(');
    match lens.as_slice() {
        // Unseparated: only national forms with a trunk prefix (`0301234567`, `0041…`).
        [n] => return !has_parens && cand.starts_with('0') && (10..=13).contains(n),
        // Dates: 2026-12-15, 15.12.2026, 12/15/26 (also as the prefix of a longer candidate).
        [4, m, d, ..] if *m <= 2 && *d <= 2 => return false,
        [d, m, y] if *d <= 2 && *m <= 2 && (*y == 2 || *y == 4) => return false,
        _ => {}
    }
    // Year ranges: 2024-2025, 1999/2000.
    if groups.len() == 2
        && groups
            .iter()
            .all(|g| g.len() == 4 && (g.starts_with("19") || g.starts_with("20")))
    {
        return false;
    }
    if !has_parens && seps.as_slice() == [b'.'] {
        // Decimals (3.14159265) and IPv4 addresses (192.168.100.200).
        if groups.len() == 2 || (groups.len() == 4 && lens.iter().all(|l| *l <= 3)) {
            return false;
        }
    }
    // Thousands-grouped amounts: 1 299 900, 12.999.000.
    if !has_parens
        && (seps.as_slice() == [b' '] || seps.as_slice() == [b'.'])
        && let [first, rest @ ..] = lens.as_slice()
        && (1..=3).contains(first)
        && !rest.is_empty()
        && rest.iter().all(|l| *l == 3)
    {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(IdentifierKind, String)> {
        detect(text)
            .into_iter()
            .map(|f| (f.kind, text.get(f.range()).unwrap_or_default().to_owned()))
            .collect()
    }

    fn found(text: &str, kind: IdentifierKind, value: &str) -> bool {
        kinds(text).iter().any(|(k, v)| *k == kind && v == value)
    }

    fn covered(text: &str, value: &str) -> bool {
        let Some(pos) = text.find(value) else {
            return false;
        };
        let end = pos + value.len();
        detect(text).iter().any(|f| f.start <= pos && f.end >= end)
    }

    /// The one-pass prefilter changes no finding: on texts holding each kind of secret (and
    /// none), scanning only the patterns the set reports finds exactly what running every
    /// pattern finds.
    #[test]
    fn the_secret_prefilter_finds_what_every_pattern_finds() {
        assert!(SECRET_SET.is_some());
        let texts = [
            "nothing secret here, just a meeting at 10",
            "key sk_live_4eC39HqLyjWDarjtT1zdp7dc and ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "hex 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 end",
            "b64 dGhpcyBpcyBhIHJhdGhlciBsb25nIHNlY3JldCB0b2tlbiB2YWx1ZQ== end",
            "totp JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP and sco_abcdefghijklmnopqrstuvwxyz234567",
            "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----",
            "password: hunter2Hunter2! and token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc123def456",
        ];
        for text in texts {
            let mut fast = Vec::new();
            scan_secrets(text, &mut fast);
            let mut all = Vec::new();
            scan_secrets_where(text, &mut all, |_| true);
            assert_eq!(fast, all, "{text}");
        }
        // The texts exercise the prefilter both ways.
        let mut found = Vec::new();
        scan_secrets(texts[1], &mut found);
        assert!(!found.is_empty());
        let mut none = Vec::new();
        scan_secrets(texts[0], &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn all_patterns_compile() {
        assert_eq!(SECRET_PATTERNS.len(), SECRET_SOURCES.len());
        assert!(HEX_RUN.is_some());
        assert!(B64_RUN.is_some());
        assert!(EMAIL.is_some());
        assert!(EMAIL_OBFUSCATED.is_some());
        assert!(URL.is_some());
        assert!(PHONE.is_some());
    }

    #[test]
    fn kind_names() {
        let names: Vec<&str> = IdentifierKind::ALL
            .iter()
            .map(IdentifierKind::as_str)
            .collect();
        assert_eq!(names, ["email", "iban", "card", "phone", "url", "secret"]);
        let prefixes: Vec<&str> = IdentifierKind::ALL
            .iter()
            .map(IdentifierKind::token_prefix)
            .collect();
        assert_eq!(prefixes, ["em", "ib", "cc", "ph", "url", "sk"]);
        assert_eq!(
            serde_json::to_string(&IdentifierKind::CardNumber).unwrap_or_default(),
            "\"card_number\""
        );
    }

    // --- IBAN ---

    #[test]
    fn iban_validation() {
        assert!(iban_valid("DE89370400440532013000"));
        assert!(iban_valid("GB82WEST12345698765432"));
        assert!(iban_valid("DE89 3704 0044 0532 0130 00"));
        assert!(iban_valid("gb82 west 1234 5698 7654 32"));
        assert!(iban_valid("FR1420041010050500013M02606"));
        assert!(iban_valid("NO9386011117947"));
        assert!(!iban_valid("DE89370400440532013001"), "mod-97 invalid");
        assert!(
            !iban_valid("DE8937040044053201300"),
            "wrong national length"
        );
        assert!(!iban_valid("DE89-3704-0044-0532-0130-00"));
        assert!(!iban_valid("1289370400440532013000"));
        assert!(!iban_valid(""));
    }

    #[test]
    fn iban_detected_compact_and_grouped() {
        let t = "Pay to DE89370400440532013000 or GB82WEST12345698765432 please.";
        assert!(found(t, IdentifierKind::Iban, "DE89370400440532013000"));
        assert!(found(t, IdentifierKind::Iban, "GB82WEST12345698765432"));
        let t = "IBAN: DE89 3704 0044 0532 0130 00 is the account";
        assert!(found(
            t,
            IdentifierKind::Iban,
            "DE89 3704 0044 0532 0130 00"
        ));
        let t = "iban=de89370400440532013000;";
        assert!(found(t, IdentifierKind::Iban, "de89370400440532013000"));
    }

    #[test]
    fn iban_invalid_not_detected_as_iban() {
        let t = "Pay to DE89370400440532013001 today";
        assert!(kinds(t).iter().all(|(k, _)| *k != IdentifierKind::Iban));
    }

    #[test]
    fn iban_glued_to_text_still_detected() {
        let t = "refXDE89370400440532013000";
        assert!(covered(t, "DE89370400440532013000"));
    }

    // --- cards ---

    #[test]
    fn luhn_validation() {
        assert!(luhn_valid("4111 1111 1111 1111"));
        assert!(luhn_valid("4111-1111-1111-1111"));
        assert!(luhn_valid("378282246310005"));
        assert!(luhn_valid("4222222222222"));
        assert!(!luhn_valid("4111 1111 1111 1112"));
        assert!(!luhn_valid("4111x1111111111111"));
        assert!(!luhn_valid("424242424242"), "12 digits is too short");
        assert!(!luhn_valid("42424242424242424242"), "20 digits is too long");
    }

    #[test]
    fn card_detected() {
        let t = "card 4111 1111 1111 1111 exp 12/27";
        assert!(found(t, IdentifierKind::CardNumber, "4111 1111 1111 1111"));
        let t = "card:4111-1111-1111-1111.";
        assert!(found(t, IdentifierKind::CardNumber, "4111-1111-1111-1111"));
        let t = "amex 378282246310005, visa 4242424242424242";
        assert!(found(t, IdentifierKind::CardNumber, "378282246310005"));
        assert!(found(t, IdentifierKind::CardNumber, "4242424242424242"));
        // Trailing group after a valid number.
        let t = "4111 1111 1111 1111 22";
        assert!(covered(t, "4111 1111 1111 1111"));
    }

    #[test]
    fn card_invalid_not_detected() {
        let t = "card 4111 1111 1111 1112 exp";
        assert!(
            kinds(t)
                .iter()
                .all(|(k, _)| *k != IdentifierKind::CardNumber),
            "{:?}",
            kinds(t)
        );
    }

    // --- email ---

    #[test]
    fn email_detected() {
        assert!(found(
            "mail Bob.Smith+x@Example.COM now",
            IdentifierKind::Email,
            "Bob.Smith+x@Example.COM"
        ));
        assert!(found(
            "<alice@mail.example.co.uk>",
            IdentifierKind::Email,
            "alice@mail.example.co.uk"
        ));
        assert!(found(
            "to: jürgen@bücher.de.",
            IdentifierKind::Email,
            "jürgen@bücher.de"
        ));
    }

    #[test]
    fn obfuscated_email_detected() {
        for e in [
            "attacker [at] evil [dot] example",
            "max.mustermann (at) example.com",
            "bob{AT}mail{dot}example{dot}org",
            "john AT example DOT com",
        ] {
            let t = format!("forward to {e} now");
            assert!(found(&t, IdentifierKind::Email, e), "{e}: {:?}", kinds(&t));
        }
        assert!(kinds("we met at the station. Look at example.com").is_empty());
    }

    #[test]
    fn email_negatives() {
        assert!(kinds("@mention and user@localhost and a@b").is_empty());
        assert!(kinds("price: 5 @ 10").is_empty());
    }

    // --- URL ---

    #[test]
    fn url_detected() {
        assert!(found(
            "see https://evil.example/a?b=c.",
            IdentifierKind::Url,
            "https://evil.example/a?b=c"
        ));
        assert!(found(
            "(at www.example.com/path)",
            IdentifierKind::Url,
            "www.example.com/path"
        ));
        assert!(found(
            "FTP://files.example.org/x",
            IdentifierKind::Url,
            "FTP://files.example.org/x"
        ));
        assert!(found(
            "[wiki](https://en.wikipedia.org/wiki/Foo_(bar))",
            IdentifierKind::Url,
            "https://en.wikipedia.org/wiki/Foo_(bar)"
        ));
    }

    #[test]
    fn url_negatives() {
        assert!(kinds("the www is big; https:// alone; example.com").is_empty());
    }

    // --- phone ---

    #[test]
    fn phone_detected() {
        for p in [
            "+1 (415) 555-2671",
            "+44 20 7946 0958",
            "+4915123456789",
            "(415) 555-2671",
            "415-555-2671",
            "415.555.2671",
            "020 7946 0958",
            "030/1234567",
            "01 23 45 67 89",
            "03012345678",
        ] {
            let t = format!("Call {p} today");
            assert!(found(&t, IdentifierKind::Phone, p), "{p}: {:?}", kinds(&t));
        }
    }

    #[test]
    fn phone_negatives() {
        for t in [
            "due 2026-12-15",
            "due 2026-12-15 10:30",
            "due 2026-12-15T10:30:00Z",
            "on 15.12.2026",
            "on 12/15/2026",
            "amount 129900",
            "amount 129900.00 EUR",
            "amount 1 299 900",
            "amount 12.999.000,00",
            "invoice INV-2026-0042",
            "order #12345678",
            "season 2024-2025",
            "pi 3.14159265",
            "host 192.168.100.200",
            "id 20260115",
            "v1.2.3",
        ] {
            assert!(kinds(t).is_empty(), "{t}: {:?}", kinds(t));
        }
    }

    // --- secrets ---

    #[test]
    fn secret_formats_detected() {
        for s in [
            "AKIAIOSFODNN7EXAMPLE",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "sk_live_51H8abcdefghijklmnop",
            "sk_test_abcdefghij1234",
            "rk_live_abcdefghij1234",
            "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ] {
            let t = format!("value: {s} end");
            assert!(found(&t, IdentifierKind::Secret, s), "{s}: {:?}", kinds(&t));
        }
    }

    #[test]
    fn secret_assignments_detect_value_only() {
        assert!(found(
            "api_key=abcd1234efgh",
            IdentifierKind::Secret,
            "abcd1234efgh"
        ));
        assert!(found(
            r#"{"password": "hunter22"}"#,
            IdentifierKind::Secret,
            "hunter22"
        ));
        assert!(found(
            "client_secret: s3cr3tvalue",
            IdentifierKind::Secret,
            "s3cr3tvalue"
        ));
        assert!(found(
            "TOKEN = tok_998877",
            IdentifierKind::Secret,
            "tok_998877"
        ));
        assert!(found(
            "https://x.example/cb?access_token=zzz999yyy&x=1",
            IdentifierKind::Secret,
            "https://x.example/cb?access_token=zzz999yyy&x=1"
        ));
        assert!(found(
            "Authorization: Bearer abc.DEF-123_456",
            IdentifierKind::Secret,
            "abc.DEF-123_456"
        ));
        assert!(found(
            "Authorization: Basic dXNlcjpwYXNz",
            IdentifierKind::Secret,
            "dXNlcjpwYXNz"
        ));
    }

    /// Red-team round 3: secrets cut short at `&`, wrapped over two lines, or a PEM key's last
    /// lines without its header, showed their remainder.
    #[test]
    fn whole_secrets_across_symbols_and_line_wraps() {
        assert!(covered(
            "db password: Tr0ub4dor&3-horse-staple",
            "Tr0ub4dor&3-horse-staple"
        ));
        let wrapped = "key sk_live_4eC39HqLyjWDarjtT1zdp7dc\nN4pQ3rS2tU1vW0xY\nthanks";
        assert!(covered(
            wrapped,
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc\nN4pQ3rS2tU1vW0xY"
        ));
        assert!(!covered(wrapped, "thanks"));
        let tail = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==\nq1w2e3r4==\n-----END RSA PRIVATE KEY-----\n";
        assert!(covered(tail, "q1w2e3r4=="));
        // Positive controls: the `=` form still stops at a query string's `&`; ordinary
        // lines after a secret stay text.
        let query = "callback with token=abcdef123456&state=xyz";
        assert!(covered(query, "abcdef123456") && !covered(query, "state=xyz"));
        assert!(!covered(
            "password: hunter2024\nRegards from Dana",
            "Regards"
        ));
        // A key ending its line in `-` before a word: the key alone, not the word's first
        // letter (a pattern stopping at the `é` of `résumé` took the `r`).
        let hyphen_end = "AIza__C_j_LE3m3ROaUkqE-zm0L-9CC70gGg0l-\nrésumé regards über";
        assert!(found(
            hyphen_end,
            IdentifierKind::Secret,
            "AIza__C_j_LE3m3ROaUkqE-zm0L-9CC70gGg0l-"
        ));
        assert!(!covered(hyphen_end, "\nr"));
    }

    /// Red-team round of 2026-12-04: values wrapped over two lines, none of whose lines alone
    /// a detector recognises, showed in clear — an IBAN in groups wrapped after a group, a
    /// compact one wrapped anywhere, a card number, an address hyphen-wrapped in its domain,
    /// an indented continuation of a key.
    #[test]
    fn values_wrapped_over_lines_are_found_whole() {
        let iban = "Pay to DE89 3704 0044\n0532 0130 00 by Friday";
        assert!(covered(iban, "DE89 3704 0044\n0532 0130 00"));
        assert!(!covered(iban, "Friday") && !covered(iban, "Pay"));
        assert!(covered(
            "IBAN: DE8937040044\n  0532013000\nThanks",
            "DE8937040044\n  0532013000"
        ));
        assert!(covered(
            "card 4111 1111 1111\n1111, exp 12/29",
            "4111 1111 1111\n1111"
        ));
        let address = "write to alice.smith@corp.exam-\nple.com today";
        assert!(covered(address, "alice.smith@corp.exam-\nple.com"));
        assert!(!covered(address, "today"));
        assert!(covered(
            "deploy key: sk_live_4eC39HqLyjWDarjtT1zdp7dc\n    N4pQ3rS2tU1vW0xY\n",
            "N4pQ3rS2tU1vW0xY"
        ));
        // Positive controls: a value that ends its line is not extended into the next line's
        // words, and one that starts a line does not take the previous line's last word.
        let ended = "Contact bob@corp.example\nregarding the invoice";
        assert!(covered(ended, "bob@corp.example") && !covered(ended, "regarding"));
        let started = "Hello team\nbob@corp.example wrote";
        assert!(covered(started, "bob@corp.example") && !covered(started, "team"));
        let link = "see https://example.com/a\nnext steps";
        assert!(covered(link, "https://example.com/a") && !covered(link, "next"));
        // Prose over lines stays prose.
        assert!(kinds("Dear team,\nthe meeting moved to\nroom 4 on Friday.").is_empty());
    }

    /// Red-team round 2 of 2026-12-04 on the wrapped-line pass: a quoted mail reply, comment
    /// and table prefixes, quoted-printable soft breaks, blank lines and other break
    /// characters hid the continuation; keys wrapped anywhere, and the first line's part of a
    /// value whose second line looked whole, showed.
    #[test]
    fn wrapped_values_behind_quote_prefixes_soft_breaks_and_in_keys() {
        let reply = "On Tue, Dana wrote:\n> Please use my private address dana.whitfield@north-\n> wind.example and call me on +49 30\n> 12345678 after six.";
        assert!(covered(reply, "dana.whitfield@north-\n> wind.example"));
        assert!(covered(reply, "+49 30\n> 12345678"));
        assert!(!covered(reply, "Please") && !covered(reply, "after six"));
        for text in [
            "> Write to dana.whitfield@\n> northwind.example today",
            ">> Write to dana.whitfield@\n>> northwind.example today",
            "# dana.whitfield@\n# northwind.example",
            "// dana.whitfield@\n// northwind.example",
            " * dana.whitfield@\n * northwind.example",
            "| dana.whitfield@ |\n| northwind.example |",
            "Write to dana.whitfield@north=\nwind.example today",
            "dana.whitfield=\n@northwind.example",
            "dana.whit\nfield@northwind.example",
            "dana.whitfield@northwind.exa\nmple.com",
        ] {
            let found = kinds(text);
            assert!(
                found.iter().any(|(k, v)| *k == IdentifierKind::Email
                    && v.contains("dana")
                    && (v.contains("example") || v.contains("mple.com"))),
                "{text:?}: {found:?}"
            );
        }
        for text in [
            "Pay to `DE89 3704 0044`\n`0532 0130 00` by Friday.",
            "Pay to DE89 3704 0044 \\\n0532 0130 00 now",
            "- DE89 3704 0044\n- 0532 0130 00",
            "> DE89 3704 0044\n> 0532 0130 00",
            "DE89 3704 0044\n\n0532 0130 00",
            "DE89 3704 0044\r0532 0130 00",
            "DE89 3704 0044\u{2028}0532 0130 00",
        ] {
            assert!(
                kinds(text).iter().any(|(k, v)| *k == IdentifierKind::Iban
                    && v.starts_with("DE89")
                    && v.ends_with("00")),
                "{text:?}: {:?}",
                kinds(text)
            );
        }
        for (text, key) in [
            ("key=AKIAIOSF\nODNN7EXAMPLE", "ODNN7EXAMPLE"),
            ("aws_access_key_id: AKIAIOSFODNN\n    7EXAMPLE", "7EXAMPLE"),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/\n    bPxRfiCYEXAMPLEKEY",
                "bPxRfiCYEXAMPLEKEY",
            ),
            (
                "stripe sk_live_51H8abcdefghijklmno\npqrstuvwxyz0123 end",
                "pqrstuvwxyz0123",
            ),
        ] {
            assert!(covered(text, key), "{text:?}: {:?}", kinds(text));
        }
        assert!(!covered(
            "stripe sk_live_51H8abcdefghijklmno\npqrstuvwxyz0123 end",
            "end"
        ));
    }

    /// Positive controls for the wrapped-line pass (red-team round 2 of 2026-12-04 found a
    /// table of numbers turned into one card handle): columns of numbers, lists of dates and
    /// schedules stay readable, and words next to a value found whole stay words.
    #[test]
    fn wrapped_line_pass_leaves_tables_and_words() {
        let table = "id qty price\n1001 2000 3000\n4000 5000 6000\n7000 8000 9000";
        let found = kinds(table);
        assert!(
            found.iter().all(|(_, v)| !v.contains('\n')),
            "a table's rows were joined into one value: {found:?}"
        );
        let dates = "2026-12-04\n2026-12-05\n2026-12-06";
        assert!(
            kinds(dates).iter().all(|(_, v)| !v.contains('\n')),
            "{:?}",
            kinds(dates)
        );
        let column = "Meter readings\n4520\n4530\n4540\n4500";
        assert!(kinds(column).is_empty(), "{:?}", kinds(column));
        let url = "Visit www.example.com.\nThanks, Dana";
        assert!(covered(url, "www.example.com") && !covered(url, "Thanks"));
        for phone in [
            "Call (415) 555-\n0132 now",
            "Call 415-555-\n0132 now",
            "Call 415.555.\n0132 now",
        ] {
            let found = kinds(phone);
            assert!(
                found
                    .iter()
                    .any(|(_, v)| v.contains("0132") && v.contains("555")),
                "{phone:?}: {found:?}"
            );
        }
        let sched = "Mon 0900 1030\nTue 1100 1230";
        assert!(!covered(sched, "Tue"));
        let p = "password: hunter2024\nRegards from Dana";
        assert!(covered(p, "hunter2024") && !covered(p, "Regards"));
    }

    /// Red-team finding: quoted credentials with `&`, `,` or `;`, and credentials in prose.
    #[test]
    fn quoted_and_spoken_credentials() {
        assert!(covered(r#"{"password": "ab&cd,ef;gh"}"#, "ab&cd,ef;gh"));
        assert!(covered("db_password = 'x&y z!9'", "x&y z!9"));
        assert!(covered("the wifi pass is Tr0ub4dor&3.", "Tr0ub4dor&3"));
        assert!(covered("Wi-Fi key is: CorpGuest2026", "CorpGuest2026"));
        assert!(covered("your PIN was 4471, keep it", "4471"));
        // Positive controls: prose that names no credential.
        assert!(kinds("the password is required and was changed.").is_empty());
        assert!(kinds("the pass is valid until Friday").is_empty());
    }

    #[test]
    fn secret_negatives() {
        assert!(kinds("the task-force-members-of-the-team met").is_empty());
        assert!(kinds("max_tokens=4096 and tokens: 1500").is_empty());
        assert!(kinds("token authentication is enabled").is_empty());
        assert!(kinds("this_is_a_very_long_snake_case_identifier_name").is_empty());
        assert!(kinds("id 550e8400-e29b-41d4-a716-446655440000").is_empty());
    }

    #[test]
    fn high_entropy_strings() {
        let hex = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert!(found(&format!("sha {hex}."), IdentifierKind::Secret, hex));
        let b64 = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        assert!(found(
            &format!("aws secret {b64} x"),
            IdentifierKind::Secret,
            b64
        ));
        assert!(kinds("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa0").is_empty());
    }

    #[test]
    fn base32_runs_without_a_prefix_are_secrets() {
        // The body of an operator token (base32 of 24 random bytes) without `sco_`, in both
        // cases, and a TOTP seed.
        let body = crate::encoding::base32(&[
            0x3a, 0x91, 0x07, 0xfe, 0x55, 0x12, 0xc8, 0x6d, 0x0b, 0xe4, 0x73, 0x29, 0x9f, 0x40,
            0xd1, 0x8a, 0x66, 0x2c, 0xb7, 0x05, 0xee, 0x38, 0x94, 0x7b,
        ]);
        for t in [body.clone(), body.to_ascii_uppercase()] {
            assert!(
                found(&format!("token body {t} here"), IdentifierKind::Secret, &t),
                "{t}"
            );
        }
        // A session id's body (base32 of 16 bytes) without `ses_`.
        let sid = crate::encoding::base32(&[
            0x5e, 0x17, 0xa2, 0x9c, 0x03, 0xf4, 0x6b, 0xd0, 0x88, 0x2e, 0x71, 0xc5, 0x3a, 0x9f,
            0x14, 0xe6,
        ]);
        assert!(
            found(&format!("sid {sid} x"), IdentifierKind::Secret, &sid),
            "{sid}"
        );
        // Negative: glued words and long lowercase runs without digits are not secrets.
        assert!(kinds("thequickbrownfoxjumpsoverthelazydogagain").is_empty());
        assert!(kinds("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa22").is_empty());
    }

    #[test]
    fn registered_exact_secrets_are_found_in_any_case() {
        // A token an operator chose (no known format), registered as the gateway does.
        let secret = "Correct-Horse-Battery-Staple-9";
        assert!(
            kinds(&format!("x {secret} y")).is_empty(),
            "no format: not found before"
        );
        add_exact_secret(secret);
        add_exact_secret("short"); // ignored: shorter than MIN_EXACT_SECRET_LEN
        for t in [
            secret.to_owned(),
            secret.to_ascii_lowercase(),
            secret.to_ascii_uppercase(),
        ] {
            assert!(
                found(&format!("leak: {t}!"), IdentifierKind::Secret, &t),
                "{t}"
            );
        }
        // Base64 of it is found through the base64 decoder.
        let b64 = data_encoding::BASE64.encode(secret.as_bytes());
        assert!(found(
            &format!("b64 {b64} end"),
            IdentifierKind::Secret,
            &b64
        ));
        assert!(kinds("a short word").is_empty());
    }

    /// Red-team M1 (2026-12-03): a registered secret is found with separators inserted
    /// (grouped by spaces or dashes, split across lines), and a random secret's fragments
    /// are found on their own; a secret made of words does not flag its words.
    #[test]
    fn registered_secrets_are_found_through_separators_and_in_fragments() {
        let token = "sco_fnwse32j43vgq7xkmz2bt6hpa5rd";
        add_random_secret(token);
        let body = &token[4..];
        let grouped: Vec<String> = body
            .as_bytes()
            .chunks(4)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        let split_at = 14;
        for leak in [
            format!("sco_ {}", grouped.join(" ")),
            grouped.join("-"),
            format!(
                "TOKEN_A={}\nTOKEN_B={}",
                &body[..split_at],
                &body[split_at..]
            ),
            format!("first part {}", &body[..11]),
        ] {
            let f = detect(&leak);
            let covered: String = f.iter().map(|f| &leak[f.start..f.end]).collect();
            let kept: String = squash(&leak.replace(&covered, ""));
            assert!(
                f.iter().all(|f| f.kind == IdentifierKind::Secret) && !f.is_empty(),
                "{leak}: {f:?}"
            );
            for i in 0..body.len().saturating_sub(6) {
                assert!(
                    !squash(&redact(&leak, &f))
                        .to_ascii_lowercase()
                        .contains(&body[i..i + 7]),
                    "{leak}: a 7-character piece survives ({kept})"
                );
            }
        }
        // A secret made of words: found whole, with or without separators, but its words
        // are not flagged in ordinary text.
        add_exact_secret("summer-vacation-plans-2031");
        assert!(!detect("summer vacation plans 2031").is_empty());
        assert!(!detect("SummerVacationPlans2031").is_empty());
        assert!(detect("our summer vacation was great").is_empty());
    }

    fn redact(text: &str, findings: &[Finding]) -> String {
        let mut out = String::new();
        let mut at = 0;
        for f in findings {
            out.push_str(&text[at..f.start]);
            out.push('#');
            at = f.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// Red-team round 2 (2026-12-03): addresses disguised with brackets or spaces are e-mail
    /// addresses; prices, times and prose with `@` are not.
    #[test]
    fn disguised_addresses_are_addresses() {
        for t in [
            "attacker [at] evil [dot] example",
            "attacker (at) evil (dot) example",
            "attacker{at}evil{dot}example",
            "attacker @ evil . example",
            "attacker @evil. example",
            "attacker [AT] evil.example",
        ] {
            assert!(
                kinds(&format!("send it to {t} today"))
                    .iter()
                    .any(|(k, v)| *k == IdentifierKind::Email && v.contains("evil")),
                "{t}: {:?}",
                kinds(t)
            );
        }
        for t in [
            "2 @ 10.50 each",
            "meet @ Home. Then we go",
            "look at example.com",
            "the [at] sign",
        ] {
            assert!(
                !kinds(t).iter().any(|(k, _)| *k == IdentifierKind::Email),
                "{t}: {:?}",
                kinds(t)
            );
        }
    }

    /// Red-team L1 (2026-12-03): the times in a file server's `get_file_info` are not phone
    /// numbers (a phone handle replaced `10:33:00`).
    #[test]
    fn timestamps_are_not_phone_numbers() {
        for t in [
            "modified: Thu Dec 03 2026 10:33:00 GMT+0000 (Coordinated Universal Time)",
            "mtime: 2026-12-03T10:33:00.000Z",
            "created: 2026-12-03 10:33:00",
            "at 10:33:00.123456 UTC",
            "Wed, 03 Dec 2026 10:33:00 +0000",
        ] {
            assert!(
                !kinds(t).iter().any(|(k, _)| *k == IdentifierKind::Phone),
                "{t}: {:?}",
                kinds(t)
            );
        }
        // Positive control.
        assert!(found(
            "call +49 30 1234567 now",
            IdentifierKind::Phone,
            "+49 30 1234567"
        ));
    }

    #[test]
    fn secret_after_position_1000_detected() {
        let filler = "lorem ipsum dolor sit amet ".repeat(50);
        assert!(filler.len() > 1000);
        let key = "AKIAIOSFODNN7EXAMPLE";
        let t = format!("{filler}here is the key {key} and more text");
        assert!(found(&t, IdentifierKind::Secret, key));
        let t = format!("{filler}api_key=abcd1234efgh");
        assert!(found(&t, IdentifierKind::Secret, "abcd1234efgh"));
    }

    #[test]
    fn pem_block_fully_covered() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1\nshortline\nabc==\n-----END RSA PRIVATE KEY-----";
        let t = format!("key:\n{pem}\nthanks");
        let f = detect(&t);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(found(&t, IdentifierKind::Secret, pem));
        // Footer missing (cut upstream): covered through the end.
        let t = "x -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nmore body";
        assert!(found(
            t,
            IdentifierKind::Secret,
            t.get(2..).unwrap_or_default()
        ));
        // Certificates are public.
        assert!(kinds("-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----").is_empty());
    }

    // --- overlaps ---

    #[test]
    fn overlaps_are_merged_and_sorted() {
        let t = "https://pay.example/?iban=DE89370400440532013000 and mail bob@example.com";
        let f = detect(t);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f.windows(2)
                .all(|w| matches!(w, [a, b] if a.end <= b.start))
        );
        assert!(found(
            t,
            IdentifierKind::Url,
            "https://pay.example/?iban=DE89370400440532013000"
        ));
        // Email inside a www. host: the longer email wins.
        assert!(found(
            "x info@www.example.com y",
            IdentifierKind::Email,
            "info@www.example.com"
        ));
        // Card vs phone of equal span: card has priority.
        assert!(found(
            "4111 1111 1111 1111",
            IdentifierKind::CardNumber,
            "4111 1111 1111 1111"
        ));
    }

    #[test]
    fn credential_names() {
        for n in [
            "password",
            "Password",
            "api_key",
            "apiKey",
            "X-Api-Key",
            "client_secret",
            "clientSecret",
            "access_token",
            "refreshToken",
            "Authorization",
            "Set-Cookie",
            "pin",
            "cvv",
            "private_key",
            "AWS_SECRET_ACCESS_KEY",
            "credentials",
        ] {
            assert!(is_credential_name(n), "{n}");
        }
        for n in [
            "key",
            "author",
            "spin",
            "max_tokens",
            "tokens",
            "input_tokens",
            "next_page_token",
            "password_hint",
            "shipping",
            "name",
            "",
            "monkey",
        ] {
            assert!(!is_credential_name(n), "{n}");
        }
    }

    #[test]
    fn findings_on_char_boundaries() {
        let t = "ü bob@example.com ß +49 30 1234567 ✓ AKIAIOSFODNN7EXAMPLE é";
        for f in detect(t) {
            assert!(t.get(f.range()).is_some());
        }
        assert_eq!(detect(t).len(), 3);
    }

    /// Issue 11 item 8 (red-team F8): identifiers hidden behind escapes are found, and the
    /// whole escaped run is the finding, so nothing of the value is left in clear.
    #[test]
    fn escaped_identifiers_detected() {
        for (e, kind) in [
            ("alice.jones%40corp.example", IdentifierKind::Email),
            ("alice.jones&#64;corp.example", IdentifierKind::Email),
            ("alice.jones&#x40;corp.example", IdentifierKind::Email),
            ("alice.jones&commat;corp.example", IdentifierKind::Email),
            (r"alice.jones\u0040corp.example", IdentifierKind::Email),
            (r"alice.jones\u{40}corp.example", IdentifierKind::Email),
            (r"\x41KIAIOSFODNN7EXAMPLE", IdentifierKind::Secret),
            ("DE89%20370400440532013000", IdentifierKind::Iban),
            ("alice.jones%2540corp.example", IdentifierKind::Email),
        ] {
            let t = format!("contact: {e} (see notes)");
            assert!(covered(&t, e), "{e}: {:?}", kinds(&t));
            assert!(
                detect(&t).iter().any(|f| f.kind == kind),
                "{e}: {:?}",
                kinds(&t)
            );
        }
    }

    /// Escapes with nothing behind them stay text (positive control: results keep working).
    #[test]
    fn escapes_without_identifiers_are_not_findings() {
        for t in [
            "50%25 off, see /docs/a%20b.txt",
            "Tom &amp; Jerry &lt;3",
            r"C:\x\users\notes.txt and \u00e9t\u00e9",
            "price: 10&euro;",
        ] {
            assert!(kinds(t).is_empty(), "{t}: {:?}", kinds(t));
        }
    }

    #[test]
    fn separated_ibans_detected() {
        for e in [
            "DE89-3704-0044-0532-0130-00",
            "DE89.3704.0044.0532.0130.00",
            "DE 89370400440532013000",
            "GB29-NWBK-6016-1331-9268-19",
        ] {
            let t = format!("pay to {e} today");
            assert!(found(&t, IdentifierKind::Iban, e), "{e}: {:?}", kinds(&t));
        }
        // Same shape, wrong check digits: not an IBAN.
        assert!(
            !detect("pay to DE88-3704-0044-0532-0130-00 today")
                .iter()
                .any(|f| f.kind == IdentifierKind::Iban)
        );
    }

    #[test]
    fn grouped_aws_key_detected_prose_spared() {
        let e = "AKIA IOSF ODNN 7EXA MPLE";
        let t = format!("key: {e}.");
        assert!(found(&t, IdentifierKind::Secret, e), "{:?}", kinds(&t));
        assert!(covered(
            "key: AKIA-IOSF-ODNN-7EXA-MPLE.",
            "AKIA-IOSF-ODNN-7EXA-MPLE"
        ));
        assert!(kinds("ASIA PACI FICR EGIO NSAL ES").is_empty());
    }

    #[test]
    fn spelled_out_emails_detected_prose_spared() {
        for e in [
            "alice.jones at corp dot example",
            "alice.jones at corp.example",
            "bob42 at mail.example",
            "ALICE AT CORP DOT EXAMPLE",
        ] {
            let t = format!("write to {e} soon");
            assert!(found(&t, IdentifierKind::Email, e), "{e}: {:?}", kinds(&t));
        }
        assert!(kinds("look at example.com and meet at the station.").is_empty());
    }
}
