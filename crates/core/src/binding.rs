//! The keyed binding digest: HMAC-SHA256(k_bind[kid], canonical bytes) (SecureClaw paper §3.4).
//!
//! Keyed, so that an observer of digests learns nothing about requests it cannot already
//! produce, and so that the digest names its key id for rotation.

use crate::canonical::{CanonicalError, CanonicalRequest};
use crate::keys::{KeyError, KeyId, KeyPurpose, KeyRing, hmac_parts, mac_eq};
use serde::{Deserialize, Serialize};

const DOMAIN: &[u8] = b"secureclaw.binding.v1";

/// A binding digest and the key id that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BindingDigest {
    /// Binding key id.
    pub kid: KeyId,
    /// 64 lower-case hex characters.
    pub digest: String,
}

/// Errors computing a binding digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The request could not be canonicalized.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// The key ring has no usable binding key.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Bind `request` under the active binding key.
///
/// # Errors
/// [`BindingError::Canonical`] for requests that cannot be bound exactly;
/// [`BindingError::Key`] if the ring has no active binding key.
pub fn bind(keys: &KeyRing, request: &CanonicalRequest) -> Result<BindingDigest, BindingError> {
    let key = keys.active(KeyPurpose::Binding)?;
    let bytes = request.canonical_bytes()?;
    Ok(BindingDigest {
        kid: key.id.clone(),
        digest: hex::encode(hmac_parts(key, &[DOMAIN, &bytes])),
    })
}

/// Recompute the digest of `request` under `kid` and compare in constant time.
///
/// # Errors
/// [`BindingError::Key`] if `kid` is unknown or retired; [`BindingError::Canonical`].
pub fn verify(
    keys: &KeyRing,
    expected: &BindingDigest,
    request: &CanonicalRequest,
) -> Result<bool, BindingError> {
    verify_bytes(keys, expected, &request.canonical_bytes()?)
}

/// Compare `expected` with the digest of canonical `bytes` (as produced by
/// [`CanonicalRequest::canonical_bytes`]) under `expected.kid`, in constant time.
///
/// # Errors
/// [`BindingError::Key`] if `kid` is unknown or retired.
pub fn verify_bytes(
    keys: &KeyRing,
    expected: &BindingDigest,
    bytes: &[u8],
) -> Result<bool, BindingError> {
    let key = keys.verifying(KeyPurpose::Binding, &expected.kid)?;
    let actual = hex::encode(hmac_parts(key, &[DOMAIN, bytes]));
    Ok(mac_eq(actual.as_bytes(), expected.digest.as_bytes()))
}
