//! The executor's acceptance predicate (SecureClaw paper §3.4, DESIGN.md §3).
//!
//! [`accept`] runs the checks below **in this order** and stops at the first failure, which
//! yields exactly one [`ReasonCode`]:
//!
//! | # | check | reason code on failure |
//! |---|---|---|
//! | 1 | artifact present and well-formed | `artifact_missing`, `artifact_malformed` |
//! | 2 | version supported | `artifact_version` |
//! | 3 | artifact and binding key ids known, not retired | `key_unknown`, `key_retired` |
//! | 4 | artifact MAC verifies | `artifact_mac` |
//! | 5 | artifact's action id = the commit's action id | `action_mismatch` |
//! | 6 | binding digest recomputed from the call about to be executed = artifact's | `binding_mismatch` (`internal` if the canonical bytes do not decode again) |
//! | 7 | artifact's policy-set digest = current policy-set digest | `policy_changed` |
//! | 8 | issued_at − skew ≤ now ≤ not_after | `artifact_not_yet_valid`, `artifact_expired` |
//! | 9 | decision is allow | `decision_not_allow` |
//! | 10 | if required: confirmation present, sealed, bound to (action id, digest), unexpired | `confirmation_missing`, `confirmation_invalid` |
//! | 11 | single-use ledger mark (atomic insert-if-absent) | `replay`, `store_unavailable` |
//!
//! Only a passing predicate constructs a [`CommitProof`]; its fields are private and it has no
//! public constructor, so code outside this module cannot execute an effect without running
//! every check (the rustls "proof type" pattern). The ledger mark is last so that a request
//! failing any other check does not burn its action id.

use crate::artifact::{ActionId, ArtifactDecision, ArtifactError, AuthorizationArtifact};
use crate::binding::{self, BindingDigest, BindingError};
use crate::canonical::CanonicalRequest;
use crate::confirmation::Confirmation;
use crate::keys::{KeyError, KeyPurpose, KeyRing};
use crate::recovery::ReasonCode;
use crate::time::UnixMillis;

/// Error from a single-use ledger: the store could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ledger unavailable: {0}")]
pub struct LedgerError(pub String);

/// The single-use ledger (implemented by the store; DESIGN.md §3 "Single use and crash safety").
/// Asynchronous and object safe; see [`crate::store::LedgerStore`] for the outcomes.
#[async_trait::async_trait]
pub trait SingleUseLedger: Send + Sync {
    /// Atomically mark `action_id` as `reserved` if it has never been marked.
    ///
    /// Returns `Ok(true)` if this call made the mark, `Ok(false)` if the id was already marked
    /// (in any state).
    ///
    /// # Errors
    /// [`LedgerError`] if the store cannot be reached; the predicate then fails closed.
    async fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError>;
}

/// Everything the predicate looks at, supplied by the executor.
#[derive(Debug, Clone, Copy)]
pub struct CommitAttempt<'a> {
    /// The artifact token as presented (`None`, empty and `"null"` count as missing).
    pub artifact: Option<&'a str>,
    /// The action id the commit claims.
    pub action_id: &'a ActionId,
    /// The canonical request rebuilt from the call about to be executed. Its
    /// `ctx.policy_digest` is replaced by the verified artifact's before the binding check, so
    /// a policy change is reported as `policy_changed` (check 7), not as a binding mismatch.
    pub request: &'a CanonicalRequest,
    /// Digest of the policy set in force now.
    pub current_policy_digest: &'a str,
    /// The trusted confirmation, as loaded from the approval store (never from the runtime).
    pub confirmation: Option<&'a Confirmation>,
    /// Current time.
    pub now: UnixMillis,
    /// Allowed clock skew in milliseconds for artifacts dated in the future.
    pub max_skew_ms: u64,
    /// How long a confirmation counts after it was given, in milliseconds (the gateway's
    /// `confirmation_ttl_ms`), whatever expiry its confirmer sealed into it: a confirmer that
    /// does not know the gateway's configuration (the `approvals` CLI run without the config)
    /// cannot make an approval outlive it.
    pub max_confirmation_age_ms: u64,
}

/// Proof that one commit passed every check. Consumed by the executor's effectful call.
///
/// Only [`accept`] builds one. A doctest is compiled as an external crate, so it shows what
/// code outside this module can do. With the public API, a function that takes a proof and
/// reads it compiles:
///
/// ```
/// use secureclaw_core::acceptance::CommitProof;
/// use secureclaw_core::artifact::ActionId;
///
/// fn execute(proof: CommitProof) -> (ActionId, String) {
///     (proof.action_id().clone(), proof.request().intent.tool.clone())
/// }
///
/// fn action_from_wire(text: &str) -> ActionId {
///     serde_json::from_str(text).unwrap()
/// }
/// ```
///
/// but a proof cannot be forged as a struct literal (its fields are private):
///
/// ```compile_fail
/// use secureclaw_core::acceptance::CommitProof;
///
/// fn forge() -> CommitProof {
///     CommitProof {
///         action_id: todo!(),
///         binding: todo!(),
///         request: todo!(),
///     }
/// }
/// ```
///
/// nor copied to authorize a second effect:
///
/// ```compile_fail
/// use secureclaw_core::acceptance::CommitProof;
///
/// fn twice(proof: CommitProof) -> (CommitProof, CommitProof) {
///     (proof.clone(), proof)
/// }
/// ```
///
/// nor deserialized from bytes a runtime sent:
///
/// ```compile_fail
/// use secureclaw_core::acceptance::CommitProof;
///
/// fn from_wire(text: &str) -> CommitProof {
///     serde_json::from_str(text).unwrap()
/// }
/// ```
#[derive(Debug)]
#[must_use = "a commit proof authorizes exactly one effect; dropping it wastes the action id"]
pub struct CommitProof {
    action_id: ActionId,
    binding: BindingDigest,
    request: CanonicalRequest,
}

impl CommitProof {
    /// The action this proof authorizes.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        &self.action_id
    }

    /// The binding digest that was verified.
    #[must_use]
    pub fn binding(&self) -> &BindingDigest {
        &self.binding
    }

    /// The exact request that was verified, decoded from the canonical bytes whose binding
    /// digest matched (so its arguments are in canonical form: numbers as RFC 8785 writes
    /// them, keys sorted); the executor sends these arguments and no others.
    #[must_use]
    pub fn request(&self) -> &CanonicalRequest {
        &self.request
    }
}

/// A failed acceptance: the first failing check's reason code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("commit rejected: {reason}")]
pub struct Rejection {
    /// Why.
    pub reason: ReasonCode,
}

fn reject<T>(reason: ReasonCode) -> Result<T, Rejection> {
    Err(Rejection { reason })
}

fn key_reason(err: &KeyError) -> ReasonCode {
    match err {
        KeyError::Retired(_) => ReasonCode::KeyRetired,
        _ => ReasonCode::KeyUnknown,
    }
}

/// Check 6 of [`accept`], the binding check, on its own: `request` is exactly the call
/// `bound` was computed over, with its `ctx.policy_digest` replaced by `bound_policy_digest`
/// (the digest the binding was made under), so that a policy change is not reported as a
/// binding mismatch.
///
/// [`accept`] runs it in its place in the order; the gateway's approval re-issue also runs it
/// first, before it tells the runtime anything about the approval (pending, declined), so
/// that an approval id attached to another call learns nothing — and then runs [`accept`] on
/// the re-issued call. There is no other copy of the check.
///
/// Returns the request decoded from the canonical bytes whose digest matched (arguments in
/// canonical form: numbers as RFC 8785 writes them, keys sorted).
///
/// # Errors
/// `binding_mismatch` if the digests differ or the request cannot be canonicalized;
/// `key_unknown` / `key_retired` for the binding key id; `internal` if the canonical bytes do
/// not decode again.
pub fn check_binding(
    keys: &KeyRing,
    bound: &BindingDigest,
    bound_policy_digest: &str,
    request: &CanonicalRequest,
) -> Result<CanonicalRequest, Rejection> {
    let mut request = request.clone();
    bound_policy_digest.clone_into(&mut request.ctx.policy_digest);
    let Ok(bytes) = request.canonical_bytes() else {
        return reject(ReasonCode::BindingMismatch);
    };
    match binding::verify_bytes(keys, bound, &bytes) {
        Ok(true) => {}
        Ok(false) | Err(BindingError::Canonical(_)) => return reject(ReasonCode::BindingMismatch),
        Err(BindingError::Key(e)) => return reject(key_reason(&e)),
    }
    CanonicalRequest::from_canonical_bytes(&bytes).or_else(|_| reject(ReasonCode::Internal))
}

/// Run the acceptance predicate (see the module docs for the order of checks).
///
/// # Errors
/// A [`Rejection`] naming the first failing check. Store errors become
/// `store_unavailable` (fail closed); nothing is executed on any rejection.
pub async fn accept(
    keys: &KeyRing,
    ledger: &(dyn SingleUseLedger + '_),
    attempt: &CommitAttempt<'_>,
) -> Result<CommitProof, Rejection> {
    // 1. present and well-formed, 2. version, 3. artifact key, 4. MAC.
    let token = match attempt.artifact.map(str::trim) {
        None | Some("" | "null") => return reject(ReasonCode::ArtifactMissing),
        Some(t) => t,
    };
    let artifact = match AuthorizationArtifact::open(token, keys) {
        Ok(a) => a,
        Err(ArtifactError::Malformed) => return reject(ReasonCode::ArtifactMalformed),
        Err(ArtifactError::Version(_)) => return reject(ReasonCode::ArtifactVersion),
        Err(ArtifactError::Key(e)) => return reject(key_reason(&e)),
        Err(ArtifactError::Mac) => return reject(ReasonCode::ArtifactMac),
    };
    // 3 (binding key): checked after the MAC so that an attacker cannot probe key ids with
    // unauthenticated claims; the artifact MAC already covers the binding kid.
    if let Err(e) = keys.verifying(KeyPurpose::Binding, &artifact.binding.kid) {
        return reject(key_reason(&e));
    }
    // 5. action id.
    if &artifact.action_id != attempt.action_id {
        return reject(ReasonCode::ActionMismatch);
    }
    // 6. binding recomputed from the call about to be executed. The proof then carries the
    // request decoded from exactly the bytes whose digest matched: the executor sends the
    // canonical form of what was bound, never the runtime's own spelling of it.
    let request = check_binding(
        keys,
        &artifact.binding,
        &artifact.policy_digest,
        attempt.request,
    )?;
    // 7. policy set unchanged.
    if artifact.policy_digest != attempt.current_policy_digest {
        return reject(ReasonCode::PolicyChanged);
    }
    // 8. freshness.
    if attempt.now < artifact.issued_at.minus_millis(attempt.max_skew_ms) {
        return reject(ReasonCode::ArtifactNotYetValid);
    }
    if attempt.now > artifact.not_after {
        return reject(ReasonCode::ArtifactExpired);
    }
    // 9. decision.
    if artifact.decision != ArtifactDecision::Allow {
        return reject(ReasonCode::DecisionNotAllow);
    }
    // 10. confirmation.
    if artifact.needs_confirmation {
        let Some(confirmation) = attempt.confirmation else {
            return reject(ReasonCode::ConfirmationMissing);
        };
        let c = &confirmation.claims;
        if !confirmation.verifies(keys)
            || &c.action_id != attempt.action_id
            || c.binding != artifact.binding
            || attempt.now > c.expires_at
            || attempt.now > c.confirmed_at.plus_millis(attempt.max_confirmation_age_ms)
        {
            return reject(ReasonCode::ConfirmationInvalid);
        }
    }
    // 11. single use.
    match ledger
        .reserve(attempt.action_id, &artifact.binding, attempt.now)
        .await
    {
        Ok(true) => Ok(CommitProof {
            action_id: artifact.action_id,
            binding: artifact.binding,
            request,
        }),
        Ok(false) => reject(ReasonCode::Replay),
        Err(_) => reject(ReasonCode::StoreUnavailable),
    }
}

#[cfg(test)]
#[path = "acceptance_tests.rs"]
mod tests;
