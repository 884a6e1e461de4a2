//! Small encoding helpers shared by ids and tokens: lower-case base32 (no padding) for ids that
//! humans read and type, base64url (no padding) for sealed tokens.

use data_encoding::{BASE64URL_NOPAD, Encoding};
use std::sync::LazyLock;

static BASE32_LOWER: LazyLock<Encoding> = LazyLock::new(|| {
    let mut spec = data_encoding::Specification::new();
    spec.symbols.push_str("abcdefghijklmnopqrstuvwxyz234567");
    // The specification is a constant that the unit test `base32_roundtrip` exercises.
    spec.encoding()
        .unwrap_or_else(|_| data_encoding::BASE32_NOPAD.clone())
});

/// Lower-case RFC 4648 base32 without padding (`bytes.len() * 8 / 5` characters, rounded up).
#[must_use]
pub fn base32(bytes: &[u8]) -> String {
    BASE32_LOWER.encode(bytes)
}

/// Base64url without padding (RFC 4648 §5).
#[must_use]
pub fn b64url(bytes: &[u8]) -> String {
    BASE64URL_NOPAD.encode(bytes)
}

/// Decode base64url without padding; `None` on any invalid character or length.
#[must_use]
pub fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    BASE64URL_NOPAD.decode(text.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_roundtrip() {
        assert_eq!(base32(b"foobar"), "mzxw6ytboi");
        assert_eq!(base32(&[0u8; 20]).len(), 32);
    }

    #[test]
    fn b64_roundtrip() {
        let s = b64url(b"\xff\xfe hello");
        assert_eq!(b64url_decode(&s).as_deref(), Some(&b"\xff\xfe hello"[..]));
        assert!(b64url_decode("not base64!").is_none());
    }
}
