//! Trusted confirmations (DESIGN.md §3 "Confirmation"; SecureClaw paper §3.4 "trusted
//! confirmation").
//!
//! Only a trusted confirmer — the human at an MCP client answering an elicitation, the operator
//! HTTP API, or the CLI — creates a confirmation. It is sealed with the confirmation key, bound
//! to (action id, binding digest), has its own lifetime (a slow human must not expire the
//! artifact's freshness window) and is used at most once, through the action id's single-use
//! ledger mark. Nothing the runtime sends can create one: the runtime never sees the seal.

use crate::artifact::ActionId;
use crate::binding::BindingDigest;
use crate::keys::{KeyError, KeyId, KeyPurpose, KeyRing, hmac_parts, mac_eq};
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

const DOMAIN: &[u8] = b"secureclaw.confirmation.v1";

/// The confirmed facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationClaims {
    /// Action being confirmed.
    pub action_id: ActionId,
    /// Binding digest the human saw.
    pub binding: BindingDigest,
    /// Who confirmed (operator token name, `cli`, `elicitation`).
    pub confirmer: String,
    /// When.
    pub confirmed_at: UnixMillis,
    /// Last instant at which the confirmation may be used (inclusive).
    pub expires_at: UnixMillis,
}

/// A sealed confirmation as held by the trusted store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirmation {
    /// The claims.
    pub claims: ConfirmationClaims,
    /// Confirmation key id.
    pub kid: KeyId,
    /// Hex HMAC over the claims' RFC 8785 bytes.
    pub mac: String,
}

impl Confirmation {
    /// Seal `claims` under the active confirmation key.
    ///
    /// # Errors
    /// [`KeyError::NoActiveKey`].
    pub fn seal(claims: ConfirmationClaims, keys: &KeyRing) -> Result<Self, KeyError> {
        let key = keys.active(KeyPurpose::Confirmation)?;
        let bytes = serde_json_canonicalizer::to_vec(&claims).unwrap_or_default();
        Ok(Self {
            mac: hex::encode(hmac_parts(key, &[DOMAIN, &bytes])),
            kid: key.id.clone(),
            claims,
        })
    }

    /// Whether the seal verifies under a known, non-retired key.
    #[must_use]
    pub fn verifies(&self, keys: &KeyRing) -> bool {
        let Ok(key) = keys.verifying(KeyPurpose::Confirmation, &self.kid) else {
            return false;
        };
        let bytes = serde_json_canonicalizer::to_vec(&self.claims).unwrap_or_default();
        mac_eq(
            hex::encode(hmac_parts(key, &[DOMAIN, &bytes])).as_bytes(),
            self.mac.as_bytes(),
        )
    }
}
