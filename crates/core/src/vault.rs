//! Encryption of protected values at rest (DESIGN.md §3 "Handles"): ChaCha20-Poly1305 with a
//! per-record random nonce, the vault key id stored beside the ciphertext, and the object id as
//! associated data (a ciphertext moved to another record does not decrypt).

use crate::keys::{KeyError, KeyId, KeyPurpose, KeyRing};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// A sealed value as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedValue {
    /// Vault key id.
    pub kid: KeyId,
    /// 12-byte nonce.
    pub nonce: Vec<u8>,
    /// Ciphertext with tag.
    pub ciphertext: Vec<u8>,
}

/// Vault errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// Key missing or retired.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// Authentication failed (tampered, wrong object, wrong key).
    #[error("vault value does not decrypt")]
    Decrypt,
}

/// Encrypt `plaintext` for `object_id` under the active vault key with `nonce` (12 fresh random
/// bytes; never reuse one).
///
/// # Errors
/// [`VaultError::Key`] if there is no active vault key.
pub fn seal(
    keys: &KeyRing,
    object_id: &str,
    plaintext: &[u8],
    nonce: [u8; 12],
) -> Result<SealedValue, VaultError> {
    let key = keys.active(KeyPurpose::Vault)?;
    let cipher = ChaCha20Poly1305::new(&Key::from(*key.secret()));
    let ciphertext = cipher
        .encrypt(
            &Nonce::from(nonce),
            Payload {
                msg: plaintext,
                aad: object_id.as_bytes(),
            },
        )
        .map_err(|_| VaultError::Decrypt)?;
    Ok(SealedValue {
        kid: key.id.clone(),
        nonce: nonce.to_vec(),
        ciphertext,
    })
}

/// Decrypt a value sealed for `object_id`.
///
/// # Errors
/// [`VaultError::Key`] for unknown or retired key ids, [`VaultError::Decrypt`] otherwise.
pub fn open(
    keys: &KeyRing,
    object_id: &str,
    sealed: &SealedValue,
) -> Result<Zeroizing<Vec<u8>>, VaultError> {
    let key = keys.verifying(KeyPurpose::Vault, &sealed.kid)?;
    let nonce = Nonce::try_from(sealed.nonce.as_slice()).map_err(|_| VaultError::Decrypt)?;
    let cipher = ChaCha20Poly1305::new(&Key::from(*key.secret()));
    cipher
        .decrypt(
            &nonce,
            Payload {
                msg: &sealed.ciphertext,
                aad: object_id.as_bytes(),
            },
        )
        .map(Zeroizing::new)
        .map_err(|_| VaultError::Decrypt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_binding_to_object() {
        let keys = KeyRing::generate(&mut |b: &mut [u8]| b.fill(9));
        let s = seal(&keys, "o1", b"DE89370400440532013000", [1; 12]).unwrap();
        assert!(!s.ciphertext.windows(4).any(|w| w == b"DE89"));
        assert_eq!(
            open(&keys, "o1", &s).unwrap().as_slice(),
            b"DE89370400440532013000"
        );
        assert_eq!(open(&keys, "o2", &s).unwrap_err(), VaultError::Decrypt);
        let mut t = s.clone();
        if let Some(b) = t.ciphertext.first_mut() {
            *b ^= 1;
        }
        assert_eq!(open(&keys, "o1", &t).unwrap_err(), VaultError::Decrypt);
    }
}
