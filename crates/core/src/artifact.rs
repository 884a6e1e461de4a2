//! The authorization artifact (DESIGN.md §3; SecureClaw paper §3.4 "authorization artifact").
//!
//! `{version, action_id, binding digest, policy digest, decision, needs_confirmation,
//! issued_at, not_after, kid, MAC}`, sealed with HMAC-SHA256 under an artifact key. On the wire
//! it is a compact token `sca1.<base64url(JCS claims)>.<base64url(MAC)>`; the MAC covers the
//! exact claim bytes carried, so re-encoding cannot change what was signed.

use crate::binding::BindingDigest;
use crate::encoding::{b64url, b64url_decode};
use crate::keys::{KeyError, KeyId, KeyPurpose, KeyRing, hmac_parts, mac_eq};
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// Current artifact format version.
pub const ARTIFACT_VERSION: u32 = 1;
const TOKEN_PREFIX: &str = "sca1";
const DOMAIN: &[u8] = b"secureclaw.artifact.v1";

/// An action id: `act_` + 26 base32 characters (128 random bits). One per preview.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ActionId(pub String);

impl ActionId {
    /// A new action id from 16 random bytes supplied by `fill`.
    #[must_use]
    pub fn generate(fill: &mut dyn FnMut(&mut [u8])) -> Self {
        let mut bytes = [0u8; 16];
        fill(&mut bytes);
        Self(format!("act_{}", crate::encoding::base32(&bytes)))
    }
}

impl std::fmt::Display for ActionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The policy decision recorded in an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactDecision {
    /// The policy allowed the request (possibly subject to confirmation).
    Allow,
    /// The policy denied it; the artifact records the denial and authorizes nothing.
    Deny,
}

/// The signed claims of an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationArtifact {
    /// Format version ([`ARTIFACT_VERSION`]).
    pub version: u32,
    /// The action this artifact authorizes.
    pub action_id: ActionId,
    /// Binding digest of the canonical request at preview.
    pub binding: BindingDigest,
    /// Digest of the policy set that decided.
    pub policy_digest: String,
    /// The decision.
    pub decision: ArtifactDecision,
    /// Whether a trusted confirmation must accompany the commit.
    pub needs_confirmation: bool,
    /// When the artifact was issued.
    pub issued_at: UnixMillis,
    /// Last instant at which the artifact is fresh (inclusive).
    pub not_after: UnixMillis,
    /// Artifact MAC key id.
    pub kid: KeyId,
}

/// Why a token could not be opened. Each maps to its own reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// Not `prefix.claims.mac`, bad base64, or claims that do not parse.
    #[error("artifact is malformed")]
    Malformed,
    /// A version this build does not accept.
    #[error("artifact version `{0}` is not supported")]
    Version(String),
    /// The MAC key id is unknown or retired.
    #[error(transparent)]
    Key(KeyError),
    /// The MAC does not verify.
    #[error("artifact MAC does not verify")]
    Mac,
}

impl AuthorizationArtifact {
    /// Seal under the active artifact key (overwriting `kid`) and encode as a token.
    ///
    /// # Errors
    /// [`KeyError::NoActiveKey`] if the ring has no artifact key.
    pub fn seal(mut self, keys: &KeyRing) -> Result<String, KeyError> {
        let key = keys.active(KeyPurpose::Artifact)?;
        self.kid = key.id.clone();
        let claims = serde_json_canonicalizer::to_vec(&self).unwrap_or_default();
        let mac = hmac_parts(key, &[DOMAIN, &claims]);
        Ok(format!(
            "{TOKEN_PREFIX}.{}.{}",
            b64url(&claims),
            b64url(&mac)
        ))
    }

    /// Decode and verify a token: well-formed → version → key id known and not retired → MAC.
    ///
    /// # Errors
    /// The first failing check, as an [`ArtifactError`].
    pub fn open(token: &str, keys: &KeyRing) -> Result<Self, ArtifactError> {
        let mut parts = token.split('.');
        let (Some(prefix), Some(claims_b64), Some(mac_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ArtifactError::Malformed);
        };
        let claims = b64url_decode(claims_b64).ok_or(ArtifactError::Malformed)?;
        let mac = b64url_decode(mac_b64).ok_or(ArtifactError::Malformed)?;
        let artifact: Self =
            serde_json::from_slice(&claims).map_err(|_| ArtifactError::Malformed)?;
        if prefix != TOKEN_PREFIX || artifact.version != ARTIFACT_VERSION {
            return Err(ArtifactError::Version(format!(
                "{prefix}/{}",
                artifact.version
            )));
        }
        let key = keys
            .verifying(KeyPurpose::Artifact, &artifact.kid)
            .map_err(ArtifactError::Key)?;
        if !mac_eq(&hmac_parts(key, &[DOMAIN, &claims]), &mac) {
            return Err(ArtifactError::Mac);
        }
        Ok(artifact)
    }
}
