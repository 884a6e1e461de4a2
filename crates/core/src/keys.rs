//! The key ring: named 256-bit keys per purpose, with rotation and retirement.
//!
//! Every MAC, handle id and vault ciphertext names the key id that produced it, so verification
//! picks the right key and rotation is a configuration change: add a key id (it becomes the
//! active one for its purpose), keep the old id verifiable, then retire it — after which
//! anything made with it is refused (`research/secureclaw-reference.md` §6 item 15: the
//! authors' binding and confirmation keys were single and static).
//!
//! The ring is plain data here; reading and writing it (state directory, mode 0600,
//! environment) is the binary's job.

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Length of every key in bytes.
pub const KEY_LEN: usize = 32;

/// What a key is used for. One key never serves two purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPurpose {
    /// HMAC key of the binding digest over canonical bytes.
    Binding,
    /// HMAC key sealing authorization artifacts.
    Artifact,
    /// HMAC key deriving handle ids.
    Handle,
    /// AEAD key encrypting vault values at rest.
    Vault,
    /// HMAC key sealing trusted confirmations.
    Confirmation,
    /// HMAC key chaining audit records (keyed chain: an attacker with write access to the
    /// database cannot rebuild the chain without it).
    Audit,
}

impl KeyPurpose {
    /// All purposes, in a fixed order.
    pub const ALL: [KeyPurpose; 6] = [
        KeyPurpose::Binding,
        KeyPurpose::Artifact,
        KeyPurpose::Handle,
        KeyPurpose::Vault,
        KeyPurpose::Confirmation,
        KeyPurpose::Audit,
    ];

    /// Short prefix used in generated key ids (`bind`, `art`, …).
    #[must_use]
    pub fn prefix(self) -> &'static str {
        match self {
            KeyPurpose::Binding => "bind",
            KeyPurpose::Artifact => "art",
            KeyPurpose::Handle => "hdl",
            KeyPurpose::Vault => "vault",
            KeyPurpose::Confirmation => "conf",
            KeyPurpose::Audit => "audit",
        }
    }
}

/// A key id such as `bind-1`. Opaque; compared exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyId(pub String);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Errors looking keys up or loading a ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No key with this id exists for the purpose.
    #[error("unknown key id `{0}`")]
    Unknown(KeyId),
    /// The key exists but was retired.
    #[error("key id `{0}` is retired")]
    Retired(KeyId),
    /// The ring holds no active key for the purpose.
    #[error("no active {0:?} key in the key ring")]
    NoActiveKey(KeyPurpose),
    /// A key in a ring file is not 32 bytes of hex.
    #[error("key `{0}` is not {KEY_LEN} bytes of hex")]
    BadSecret(KeyId),
    /// Two keys share an id.
    #[error("duplicate key id `{0}`")]
    Duplicate(KeyId),
}

/// One key of the ring.
#[derive(Clone)]
pub struct KeyEntry {
    /// Its id.
    pub id: KeyId,
    /// Its purpose.
    pub purpose: KeyPurpose,
    /// Retired keys verify nothing and sign nothing.
    pub retired: bool,
    secret: Zeroizing<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry")
            .field("id", &self.id)
            .field("purpose", &self.purpose)
            .field("retired", &self.retired)
            .finish_non_exhaustive()
    }
}

impl KeyEntry {
    /// The secret bytes. Only the core's MAC and AEAD helpers should call this.
    #[must_use]
    pub fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }
}

/// Serialized form of a ring (the state directory's `keys.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRingFile {
    /// Format version, currently 1.
    pub version: u32,
    /// The keys.
    pub keys: Vec<KeyFileEntry>,
}

/// One key in a [`KeyRingFile`].
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFileEntry {
    /// Key id.
    pub id: KeyId,
    /// Purpose.
    pub purpose: KeyPurpose,
    /// 64 hex characters.
    pub secret_hex: String,
    /// Retired keys are kept so that their use is reported as "retired", not "unknown".
    #[serde(default)]
    pub retired: bool,
}

impl std::fmt::Debug for KeyFileEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFileEntry")
            .field("id", &self.id)
            .field("purpose", &self.purpose)
            .finish_non_exhaustive()
    }
}

/// The key ring.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    entries: Vec<KeyEntry>,
}

impl KeyRing {
    /// A fresh ring with one key per purpose, ids `<prefix>-1`. `fill` supplies random bytes.
    #[must_use]
    pub fn generate(fill: &mut dyn FnMut(&mut [u8])) -> Self {
        let mut ring = Self::default();
        for purpose in KeyPurpose::ALL {
            ring.add_generated(purpose, fill);
        }
        ring
    }

    /// Add a new key for `purpose` (it becomes the active one); returns its id
    /// (`<prefix>-<n>`, n one above the highest number in use).
    pub fn add_generated(&mut self, purpose: KeyPurpose, fill: &mut dyn FnMut(&mut [u8])) -> KeyId {
        let n = self.entries.iter().filter(|e| e.purpose == purpose).count() + 1;
        let id = KeyId(format!("{}-{n}", purpose.prefix()));
        let mut secret = Zeroizing::new([0u8; KEY_LEN]);
        fill(secret.as_mut_slice());
        self.entries.push(KeyEntry {
            id: id.clone(),
            purpose,
            retired: false,
            secret,
        });
        id
    }

    /// Add a key with known secret bytes (tests, imported keys).
    ///
    /// # Errors
    /// [`KeyError::Duplicate`] if the id is taken.
    pub fn insert(
        &mut self,
        id: KeyId,
        purpose: KeyPurpose,
        secret: [u8; KEY_LEN],
    ) -> Result<(), KeyError> {
        if self.entries.iter().any(|e| e.id == id) {
            return Err(KeyError::Duplicate(id));
        }
        self.entries.push(KeyEntry {
            id,
            purpose,
            retired: false,
            secret: Zeroizing::new(secret),
        });
        Ok(())
    }

    /// Retire a key: it no longer signs or verifies.
    ///
    /// # Errors
    /// [`KeyError::Unknown`] if no key has this id.
    pub fn retire(&mut self, id: &KeyId) -> Result<(), KeyError> {
        let entry = self
            .entries
            .iter_mut()
            .find(|e| &e.id == id)
            .ok_or_else(|| KeyError::Unknown(id.clone()))?;
        entry.retired = true;
        Ok(())
    }

    /// The active (most recently added, non-retired) key for `purpose`.
    ///
    /// # Errors
    /// [`KeyError::NoActiveKey`].
    pub fn active(&self, purpose: KeyPurpose) -> Result<&KeyEntry, KeyError> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.purpose == purpose && !e.retired)
            .ok_or(KeyError::NoActiveKey(purpose))
    }

    /// Every key of `purpose` that still verifies (not retired), oldest first: the keyring a
    /// verifier accepts during a rotation.
    pub fn usable(&self, purpose: KeyPurpose) -> impl Iterator<Item = &KeyEntry> {
        self.entries
            .iter()
            .filter(move |e| e.purpose == purpose && !e.retired)
    }

    /// The key `id` of `purpose`, if known and not retired.
    ///
    /// # Errors
    /// [`KeyError::Unknown`] (also when the id exists for another purpose),
    /// [`KeyError::Retired`].
    pub fn verifying(&self, purpose: KeyPurpose, id: &KeyId) -> Result<&KeyEntry, KeyError> {
        let entry = self
            .entries
            .iter()
            .find(|e| &e.id == id && e.purpose == purpose)
            .ok_or_else(|| KeyError::Unknown(id.clone()))?;
        if entry.retired {
            return Err(KeyError::Retired(id.clone()));
        }
        Ok(entry)
    }

    /// Serialize for storage.
    #[must_use]
    pub fn to_file(&self) -> KeyRingFile {
        KeyRingFile {
            version: 1,
            keys: self
                .entries
                .iter()
                .map(|e| KeyFileEntry {
                    id: e.id.clone(),
                    purpose: e.purpose,
                    secret_hex: hex::encode(e.secret.as_slice()),
                    retired: e.retired,
                })
                .collect(),
        }
    }

    /// Load from the stored form.
    ///
    /// # Errors
    /// [`KeyError::BadSecret`], [`KeyError::Duplicate`].
    pub fn from_file(file: &KeyRingFile) -> Result<Self, KeyError> {
        let mut ring = Self::default();
        for k in &file.keys {
            let bytes = Zeroizing::new(
                hex::decode(&k.secret_hex).map_err(|_| KeyError::BadSecret(k.id.clone()))?,
            );
            let secret: [u8; KEY_LEN] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| KeyError::BadSecret(k.id.clone()))?;
            ring.insert(k.id.clone(), k.purpose, secret)?;
            if k.retired {
                ring.retire(&k.id)?;
            }
        }
        Ok(ring)
    }

    /// Ids of all keys, with purpose and retirement (for `secureclaw keys list`).
    pub fn ids(&self) -> impl Iterator<Item = (&KeyId, KeyPurpose, bool)> {
        self.entries.iter().map(|e| (&e.id, e.purpose, e.retired))
    }
}

/// HMAC-SHA256 of `parts` (each length-prefixed, so part boundaries are unambiguous).
#[must_use]
pub fn hmac_parts(key: &KeyEntry, parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.secret()) else {
        // HMAC accepts keys of any length; this branch is unreachable with a 32-byte key.
        return [0u8; 32];
    };
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Constant-time comparison of two MACs.
#[must_use]
pub fn mac_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter_fill() -> impl FnMut(&mut [u8]) {
        let mut n = 0u8;
        move |buf: &mut [u8]| {
            for b in buf.iter_mut() {
                n = n.wrapping_add(1);
                *b = n;
            }
        }
    }

    #[test]
    fn rotate_and_retire() {
        let mut fill = counter_fill();
        let mut ring = KeyRing::generate(&mut fill);
        let old = ring.active(KeyPurpose::Binding).unwrap().id.clone();
        let new = ring.add_generated(KeyPurpose::Binding, &mut fill);
        assert_eq!(ring.active(KeyPurpose::Binding).unwrap().id, new);
        assert!(
            ring.verifying(KeyPurpose::Binding, &old).is_ok(),
            "old key verifies until retired"
        );
        ring.retire(&old).unwrap();
        assert_eq!(
            ring.verifying(KeyPurpose::Binding, &old).unwrap_err(),
            KeyError::Retired(old)
        );
        assert!(matches!(
            ring.verifying(KeyPurpose::Binding, &KeyId("bind-99".into())),
            Err(KeyError::Unknown(_))
        ));
        // A key of another purpose is unknown for this purpose.
        let art = ring.active(KeyPurpose::Artifact).unwrap().id.clone();
        assert!(matches!(
            ring.verifying(KeyPurpose::Binding, &art),
            Err(KeyError::Unknown(_))
        ));
    }

    #[test]
    fn file_roundtrip() {
        let mut fill = counter_fill();
        let mut ring = KeyRing::generate(&mut fill);
        let id = ring.active(KeyPurpose::Handle).unwrap().id.clone();
        ring.retire(&id).unwrap();
        let back = KeyRing::from_file(&ring.to_file()).unwrap();
        assert_eq!(
            back.verifying(KeyPurpose::Handle, &id).unwrap_err(),
            KeyError::Retired(id)
        );
        let a = ring.active(KeyPurpose::Binding).unwrap();
        let b = back.active(KeyPurpose::Binding).unwrap();
        assert_eq!(hmac_parts(a, &[b"x"]), hmac_parts(b, &[b"x"]));
    }

    #[test]
    fn debug_never_prints_secrets() {
        let mut fill = counter_fill();
        let ring = KeyRing::generate(&mut fill);
        let text = format!("{ring:?} {:?}", ring.to_file());
        assert!(!text.contains("0102030405"));
    }

    #[test]
    fn hmac_parts_are_length_prefixed() {
        let mut fill = counter_fill();
        let ring = KeyRing::generate(&mut fill);
        let k = ring.active(KeyPurpose::Binding).unwrap();
        assert_ne!(hmac_parts(k, &[b"ab", b"c"]), hmac_parts(k, &[b"a", b"bc"]));
    }
}
