//! Per-session authorization state kept in the store (issues 11 and 13): keyed digests for the
//! values the gateway must recognise later without keeping them in clear.
//!
//! Three pieces of a session's state decide whether a call needs a human, and all of them must
//! hold across every gateway replica sharing one database
//! ([`crate::store::TaskStateStore`]):
//!
//! - **grant uses**: how many unconfirmed uses of a limited task grant were taken (a
//!   financial tool's grant covers one use per task unless the task says `tool#N` or `#*`);
//! - **read amounts**: the amounts that reads the task anchored returned (an invoice's own
//!   amount may be paid under a grant), stored as keyed digests ([`StateDigest::Amount`]);
//! - **directory entries**: the entries of an upstream's own directory (channels, members)
//!   that reads of the session returned, where the operator declared the listing
//!   authoritative ([`crate::classify::DirectoryRule`]), as keyed digests
//!   ([`StateDigest::Directory`], kept with the read amounts);
//! - the **written set**: the values this session's store effects wrote. A read of an object
//!   the session wrote is never anchored, and values the runtime wrote get fresh handles
//!   (red-team F1). Membership is tested by keyed digest ([`StateDigest::Written`]); the
//!   values themselves are kept sealed with the vault key for the gateway's substring tests.
//!
//! Digests are HMAC-SHA256 under the ring's handle key over a domain tag, the session id and
//! the value, written `<prefix>:<key id>:<hex>`: equal values of one session give equal
//! digests, other sessions' digests are unrelated, and nobody without the key can test a guess
//! against the database.

use crate::keys::{KeyError, KeyPurpose, KeyRing, hmac_parts};

/// What a digest stands for; each kind has its own domain tag and prefix, so a digest of one
/// kind never matches one of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateDigest {
    /// A value a store effect of the session wrote (`wv:`).
    Written,
    /// An amount (decimal text) that an anchored read of the session returned (`amt:`).
    Amount,
    /// An entry of an upstream's own directory that a read of the session returned
    /// (`dir:`, over `upstream` + U+001F + the entry; [`crate::classify::DirectoryRule`]).
    /// Kept beside the read amounts (one table of read-derived digests; the domain tag
    /// keeps the kinds apart).
    Directory,
}

impl StateDigest {
    fn domain(self) -> &'static [u8] {
        match self {
            StateDigest::Written => b"secureclaw.written-value.v1",
            StateDigest::Amount => b"secureclaw.read-amount.v1",
            StateDigest::Directory => b"secureclaw.directory-entry.v1",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            StateDigest::Written => "wv",
            StateDigest::Amount => "amt",
            StateDigest::Directory => "dir",
        }
    }
}

/// The keyed digest of `value` for `session` under the active handle key: the form recorded in
/// the store.
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn state_digest(
    ring: &KeyRing,
    kind: StateDigest,
    session: &str,
    value: &str,
) -> Result<String, KeyError> {
    let key = ring.active(KeyPurpose::Handle)?;
    Ok(digest_with(key, kind, session, value))
}

/// The keyed digests of `value` for `session` under every non-retired handle key, active key
/// first: the forms to look up, so that a key rotation does not forget what was recorded
/// under the previous key (a retired key's records are forgotten).
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn state_lookup_digests(
    ring: &KeyRing,
    kind: StateDigest,
    session: &str,
    value: &str,
) -> Result<Vec<String>, KeyError> {
    let active = ring.active(KeyPurpose::Handle)?;
    let mut out = vec![digest_with(active, kind, session, value)];
    for (id, purpose, retired) in ring.ids() {
        if purpose == KeyPurpose::Handle && !retired && id != &active.id {
            let key = ring.verifying(KeyPurpose::Handle, id)?;
            out.push(digest_with(key, kind, session, value));
        }
    }
    Ok(out)
}

fn digest_with(
    key: &crate::keys::KeyEntry,
    kind: StateDigest,
    session: &str,
    value: &str,
) -> String {
    let mac = hmac_parts(key, &[kind.domain(), session.as_bytes(), value.as_bytes()]);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}:{}:{hex}", kind.prefix(), key.id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ring(seed: u8) -> KeyRing {
        KeyRing::generate(&mut |b: &mut [u8]| b.fill(seed))
    }

    #[test]
    fn digests_are_keyed_per_session_and_kind() {
        let r = ring(3);
        let a = state_digest(&r, StateDigest::Written, "s1", "INV-42").unwrap();
        assert_eq!(
            a,
            state_digest(&r, StateDigest::Written, "s1", "INV-42").unwrap()
        );
        assert!(a.starts_with("wv:"));
        assert!(!a.contains("INV-42"));
        assert_ne!(
            a,
            state_digest(&r, StateDigest::Written, "s2", "INV-42").unwrap()
        );
        assert_ne!(
            a,
            state_digest(&r, StateDigest::Written, "s1", "INV-43").unwrap()
        );
        let amount = state_digest(&r, StateDigest::Amount, "s1", "INV-42").unwrap();
        assert!(amount.starts_with("amt:"));
        assert_ne!(a[a.len() - 64..], amount[amount.len() - 64..]);
        // Another key gives another digest.
        assert_ne!(
            a,
            state_digest(&ring(4), StateDigest::Written, "s1", "INV-42").unwrap()
        );
    }

    #[test]
    fn lookups_cover_every_live_handle_key() {
        let mut r = ring(3);
        let before = state_digest(&r, StateDigest::Amount, "s1", "129900").unwrap();
        let old = r
            .ids()
            .find(|(_, p, _)| *p == KeyPurpose::Handle)
            .map(|(id, _, _)| id.clone())
            .unwrap();
        r.add_generated(KeyPurpose::Handle, &mut |b: &mut [u8]| b.fill(9));
        let after = state_digest(&r, StateDigest::Amount, "s1", "129900").unwrap();
        assert_ne!(before, after, "recorded under the new active key");
        let lookup = state_lookup_digests(&r, StateDigest::Amount, "s1", "129900").unwrap();
        assert_eq!(lookup.first(), Some(&after));
        assert!(lookup.contains(&before), "the previous key still finds it");
        r.retire(&old).unwrap();
        let lookup = state_lookup_digests(&r, StateDigest::Amount, "s1", "129900").unwrap();
        assert!(
            !lookup.contains(&before),
            "a retired key's records are forgotten"
        );
    }
}
