//! Text normalization before detection (SecureClaw paper §3.3, declassification; issue 11
//! item 8).
//!
//! Detectors and injection markers match what a reader sees, not the code points a tool chose
//! to send. A value split by a zero-width space (`DE89\u{200B}3704…`), spelled in full-width
//! forms (`ＡＫＩＡ…`), broken by a soft hyphen, a bidirectional control, a NUL or a terminal
//! colour sequence looks the same to a human and to a language model, but a regular expression
//! sees a different string. [`normalize`] therefore, in order:
//!
//! 1. removes ANSI escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL | ESC \`, other
//!    two-character `ESC x` sequences, and the C1 CSI `U+009B …`);
//! 2. removes characters that render as nothing or only reorder text: C0 and C1 control
//!    characters other than tab, line feed and carriage return (NUL included), zero-width
//!    characters (U+200B–U+200D, U+2060–U+2064, U+FEFF, U+180E), the soft hyphen U+00AD, the
//!    combining grapheme joiner U+034F, and bidirectional controls (U+200E, U+200F, U+061C,
//!    U+202A–U+202E, U+2066–U+2069);
//! 3. applies Unicode compatibility normalization (NFKC): full-width and other compatibility
//!    forms become their ordinary letters and digits.
//!
//! The summary operator D runs it on every string (and object key) of a tool result before
//! anything else, so the runtime receives the normalized text. It is cheap on the common case:
//! printable ASCII (with tab, line feed, carriage return) is returned borrowed after one byte
//! scan, and text already in NFKC without removable characters after one quick check.

use std::borrow::Cow;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

/// Whether `c` is removed by [`normalize`] (step 2 of the module docs).
#[must_use]
pub fn is_removable(c: char) -> bool {
    (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// Whether a byte of printable ASCII text (or tab, line feed, carriage return) — text that
/// [`normalize`] returns unchanged.
fn plain_byte(b: u8) -> bool {
    matches!(b, b' '..=b'~' | b'\t' | b'\n' | b'\r')
}

/// Whether [`normalize`] would change `text` (one byte scan for ASCII; a quick NFKC check
/// otherwise).
#[must_use]
pub fn needs_normalization(text: &str) -> bool {
    if text.bytes().all(plain_byte) {
        return false;
    }
    text.chars().any(is_removable) || is_nfkc_quick(text.chars()) != IsNormalized::Yes
}

/// Normalize `text` as the module docs describe. Returns the input borrowed when nothing
/// changes. Infallible; linear in the length of `text`.
#[must_use]
pub fn normalize(text: &str) -> Cow<'_, str> {
    if !needs_normalization(text) {
        return Cow::Borrowed(text);
    }
    let stripped = strip(text);
    if is_nfkc_quick(stripped.chars()) == IsNormalized::Yes {
        return Cow::Owned(stripped);
    }
    Cow::Owned(stripped.nfkc().filter(|c| !is_removable(*c)).collect())
}

/// Steps 1 and 2: escape sequences and removable characters out.
fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1B}' => match chars.peek().copied() {
                // CSI: parameters and intermediates, then one final byte in @..~.
                Some('[') => {
                    chars.next();
                    skip_csi(&mut chars);
                }
                // OSC, DCS, SOS, PM, APC: up to BEL or ST (`ESC \`).
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1B}' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                // Any other two-character escape (`ESC c`, `ESC (B`'s first half, …).
                Some(next) if (' '..='~').contains(&next) => {
                    chars.next();
                }
                _ => {}
            },
            '\u{9B}' => skip_csi(&mut chars),
            c if is_removable(c) => {}
            c => out.push(c),
        }
    }
    out
}

fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(&c) = chars.peek() {
        if ('\u{30}'..='\u{3F}').contains(&c) || ('\u{20}'..='\u{2F}').contains(&c) {
            chars.next();
            continue;
        }
        if ('\u{40}'..='\u{7E}').contains(&c) {
            chars.next();
        }
        break;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_is_borrowed() {
        assert!(matches!(
            normalize("plain text\twith tabs\n"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(normalize("Grüße, naïve café"), Cow::Borrowed(_)));
    }

    #[test]
    fn removes_invisible_and_control_characters() {
        let cases = [
            ("DE89\u{200B}3704", "DE893704"),
            ("AK\u{200C}IA\u{200D}X\u{2060}Y\u{FEFF}Z", "AKIAXYZ"),
            ("soft\u{AD}hyphen", "softhyphen"),
            ("bi\u{202E}di\u{2066}x\u{2069}\u{200E}\u{200F}y", "bidixy"),
            ("nul\0split", "nulsplit"),
            ("bell\u{7}back\u{8}space", "bellbackspace"),
            ("keep\ttab\nand\r\nbreaks", "keep\ttab\nand\r\nbreaks"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input:?}");
        }
    }

    #[test]
    fn removes_ansi_sequences() {
        let cases = [
            ("AKIA\u{1B}[0mXYZ", "AKIAXYZ"),
            ("\u{1B}[1;31mred\u{1B}[0m", "red"),
            ("a\u{1B}]0;title\u{7}b", "ab"),
            ("a\u{1B}]8;;http://x\u{1B}\\b", "ab"),
            ("a\u{1B}cb", "ab"),
            ("a\u{9B}2Jb", "ab"),
            ("trailing\u{1B}", "trailing"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input:?}");
        }
    }

    #[test]
    fn compatibility_forms_become_ascii() {
        assert_eq!(
            normalize("\u{FF21}\u{FF2B}\u{FF29}\u{FF21}\u{FF11}\u{FF12}"),
            "AKIA12"
        );
        assert_eq!(normalize("\u{FB01}le"), "file");
        assert_eq!(normalize("x\u{FF20}y"), "x@y");
        // Removal and NFKC together, in either order of appearance.
        assert_eq!(normalize("\u{FF24}\u{200B}\u{FF25}"), "DE");
    }
}
