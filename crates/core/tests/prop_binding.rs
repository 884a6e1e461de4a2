//! Property tests for request binding (SecureClaw paper §3.4; DESIGN.md §3 "Canonicalization
//! and binding"):
//!
//! 1. for random tool calls, any single- or multi-field change between preview and commit is
//!    rejected by the acceptance predicate with `binding_mismatch`, and an unchanged (or only
//!    RFC 8785-equal) request is accepted — the oracle [`prop_support::req_same`] is written
//!    independently of the canonicalizer;
//! 2. canonical bytes are equal iff the requests are the same call;
//! 3. canonical bytes do not depend on key order, whitespace, string escapes or number
//!    spelling of the JSON text the arguments were parsed from.
//!
//! Case counts: `PROPTEST_CASES` overrides the defaults below (see README, "Property tests and
//! fuzzing").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod prop_support;

use prop_support::{Change, Rng, apply, canonical_request, change, config, json_same, req_same};
use proptest::prelude::*;
use secureclaw_core::acceptance::{CommitAttempt, LedgerError, SingleUseLedger, accept};
use secureclaw_core::artifact::{
    ARTIFACT_VERSION, ActionId, ArtifactDecision, AuthorizationArtifact,
};
use secureclaw_core::binding::{self, BindingDigest};
use secureclaw_core::canonical::CanonicalRequest;
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::time::UnixMillis;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::LazyLock;

/// Drive a future that never waits (the predicate over the in-memory ledger) to completion.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the in-memory ledger never waits"),
    }
}

#[derive(Default)]
struct MemLedger(std::sync::Mutex<HashSet<String>>);

#[async_trait::async_trait]
impl SingleUseLedger for MemLedger {
    async fn reserve(
        &self,
        id: &ActionId,
        _: &BindingDigest,
        _: UnixMillis,
    ) -> Result<bool, LedgerError> {
        Ok(self.0.lock().unwrap().insert(id.0.clone()))
    }
}

static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut n = 0x5eu8;
    KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_mul(37).wrapping_add(11);
            *x = n;
        }
    })
});

const NOW: UnixMillis = UnixMillis(1_800_000_000_000);

/// PREVIEW at the core level: bind, seal.
fn preview(req: &CanonicalRequest) -> (ActionId, String) {
    let action = ActionId("act_prop".into());
    let token = AuthorizationArtifact {
        version: ARTIFACT_VERSION,
        action_id: action.clone(),
        binding: binding::bind(&KEYS, req).unwrap(),
        policy_digest: req.ctx.policy_digest.clone(),
        decision: ArtifactDecision::Allow,
        needs_confirmation: false,
        issued_at: NOW,
        not_after: NOW.plus_millis(60_000),
        kid: KeyId(String::new()),
    }
    .seal(&KEYS)
    .unwrap();
    (action, token)
}

/// COMMIT at the core level: run the acceptance predicate on `req` with a fresh ledger.
fn commit(
    action: &ActionId,
    token: &str,
    req: &CanonicalRequest,
    policy: &str,
) -> Result<(), ReasonCode> {
    let attempt = CommitAttempt {
        artifact: Some(token),
        action_id: action,
        request: req,
        current_policy_digest: policy,
        confirmation: None,
        now: NOW.plus_millis(1),
        max_skew_ms: 5_000,
        max_confirmation_age_ms: u64::MAX,
    };
    match ready(accept(&KEYS, &MemLedger::default(), &attempt)) {
        Ok(proof) => {
            // The proof carries the verified request: what the executor sends.
            assert!(req_same(proof.request(), req));
            Ok(())
        }
        Err(r) => Err(r.reason),
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Any change between preview and commit → `binding_mismatch`; no change → accepted.
    #[test]
    fn changed_request_is_denied_as_binding_mismatch(
        req in canonical_request(),
        changes in prop::collection::vec(change(), 1..5),
    ) {
        let (action, token) = preview(&req);
        // Positive control: the previewed request itself is accepted.
        prop_assert_eq!(commit(&action, &token, &req, &req.ctx.policy_digest), Ok(()));
        let mut changed = req.clone();
        for c in &changes {
            apply(&mut changed, c);
        }
        let got = commit(&action, &token, &changed, &req.ctx.policy_digest);
        if req_same(&req, &changed) {
            prop_assert_eq!(got, Ok(()), "equal request rejected");
        } else {
            prop_assert_eq!(got, Err(ReasonCode::BindingMismatch), "changed request: {:?}", changes);
        }
    }

    /// A single guaranteed change (one field tweaked) is always a mismatch: this keeps the
    /// property above from passing on mostly no-op changes.
    #[test]
    fn single_tweak_is_always_denied(
        req in canonical_request(),
        site in any::<usize>(),
        salt in any::<u8>(),
    ) {
        let (action, token) = preview(&req);
        let mut changed = req.clone();
        apply(&mut changed, &Change::Tweak { site, salt });
        prop_assert!(!req_same(&req, &changed));
        prop_assert_eq!(
            commit(&action, &token, &changed, &req.ctx.policy_digest),
            Err(ReasonCode::BindingMismatch)
        );
    }

    /// Canonical bytes are equal exactly when the requests are the same call (policy digest
    /// included here: it is part of the bytes).
    #[test]
    fn canonical_bytes_equal_iff_same_request(
        req in canonical_request(),
        changes in prop::collection::vec(change(), 1..4),
        new_policy in prop::option::of("[0-9a-f]{64}"),
    ) {
        let mut changed = req.clone();
        for c in &changes {
            apply(&mut changed, c);
        }
        if let Some(p) = &new_policy {
            changed.ctx.policy_digest.clone_from(p);
        }
        let same = req_same(&req, &changed) && req.ctx.policy_digest == changed.ctx.policy_digest;
        let a = req.canonical_bytes().unwrap();
        match changed.canonical_bytes() {
            Ok(b) => prop_assert_eq!(a == b, same, "bytes equality disagrees with the oracle"),
            // A change may produce an integer beyond 2^53: unbindable, never equal.
            Err(_) => prop_assert!(!same),
        }
    }

    /// The arguments parsed from differently written JSON texts of one value — random key
    /// order, whitespace, escapes, number spellings — give identical canonical bytes.
    #[test]
    fn canonical_bytes_ignore_key_order_whitespace_and_spelling(
        req in canonical_request(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let args = Value::Object(req.inputs.arguments.clone());
        let mut text_a = String::new();
        prop_support::write_json(&mut text_a, &args, &mut Rng::new(seed_a));
        let mut text_b = String::new();
        prop_support::write_json(&mut text_b, &args, &mut Rng::new(seed_b));
        let parsed_a: Value = serde_json::from_str(&text_a).unwrap();
        let parsed_b: Value = serde_json::from_str(&text_b).unwrap();
        prop_assert!(json_same(&parsed_a, &args), "writer changed the value: {text_a}");
        let with = |v: Value| {
            let mut r = req.clone();
            r.inputs.arguments = match v { Value::Object(m) => m, _ => unreachable!() };
            r.canonical_bytes().unwrap()
        };
        let original = req.canonical_bytes().unwrap();
        prop_assert_eq!(&with(parsed_a), &original, "text: {}", text_a);
        prop_assert_eq!(&with(parsed_b), &original, "text: {}", text_b);
        // And the compact and pretty serde_json forms.
        let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&args).unwrap()).unwrap();
        prop_assert_eq!(&with(pretty), &original);
    }

    /// The order (and duplication) of referenced handles does not change the bytes.
    #[test]
    fn handle_order_does_not_matter(req in canonical_request(), seed in any::<u64>()) {
        let mut shuffled = req.clone();
        let mut rng = Rng::new(seed);
        let h = &mut shuffled.inputs.handles;
        for i in (1..h.len()).rev() {
            h.swap(i, rng.below(i + 1));
        }
        if let Some(first) = h.first().cloned() {
            h.push(first);
        }
        prop_assert_eq!(req.canonical_bytes().unwrap(), shuffled.canonical_bytes().unwrap());
    }
}
