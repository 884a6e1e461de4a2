//! One attack per check, each denied for its own reason, plus positive controls.

use super::*;
use crate::artifact::ARTIFACT_VERSION;
use crate::canonical::{HandleBinding, Inputs, Intent, RequestContext};
use crate::confirmation::ConfirmationClaims;
use crate::encoding::{b64url, b64url_decode};
use crate::keys::KeyId;
use serde_json::json;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

#[derive(Default)]
struct MemLedger {
    used: Mutex<HashSet<String>>,
    down: bool,
}

/// The predicate, driven to completion: the in-memory ledger never waits, so the first poll
/// finishes.
fn accept(
    keys: &KeyRing,
    ledger: &dyn SingleUseLedger,
    attempt: &CommitAttempt<'_>,
) -> Result<CommitProof, Rejection> {
    let mut fut = std::pin::pin!(super::accept(keys, ledger, attempt));
    match fut
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => panic!("the in-memory ledger never waits"),
    }
}

#[async_trait::async_trait]
impl SingleUseLedger for MemLedger {
    async fn reserve(
        &self,
        action_id: &ActionId,
        _: &BindingDigest,
        _: UnixMillis,
    ) -> Result<bool, LedgerError> {
        if self.down {
            return Err(LedgerError("down".into()));
        }
        Ok(self.used.lock().unwrap().insert(action_id.0.clone()))
    }
}

const NOW: UnixMillis = UnixMillis(1_800_000_000_000);
const TTL: u64 = 60_000;
const SKEW: u64 = 5_000;
/// The gateway's `confirmation_ttl_ms` in these tests (an hour, the default).
const CONFIRMATION_AGE: u64 = 3_600_000;

fn ring() -> KeyRing {
    let mut n = 7u8;
    KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_mul(31).wrapping_add(17);
            *x = n;
        }
    })
}

fn request() -> CanonicalRequest {
    CanonicalRequest {
        intent: Intent {
            upstream: "mail".into(),
            tool: "send_email".into(),
        },
        caller: "alice".into(),
        session: "sess-1".into(),
        inputs: Inputs {
            arguments:
                json!({"to": "approver@corp.example", "subject": "INV-42", "amount": 129900})
                    .as_object()
                    .cloned()
                    .unwrap(),
            handles: vec![HandleBinding {
                handle: "hdl_x".into(),
                object_id: "obj1".into(),
                version: 1,
            }],
        },
        ctx: RequestContext {
            destination: "mail".into(),
            task_digest: "task".into(),
            policy_digest: "pol-1".into(),
        },
    }
}

struct Preview {
    keys: KeyRing,
    action: ActionId,
    token: String,
    artifact: AuthorizationArtifact,
}

fn preview_with(
    keys: KeyRing,
    needs_confirmation: bool,
    decision: ArtifactDecision,
    issued_at: UnixMillis,
) -> Preview {
    let req = request();
    let action = ActionId(format!("act_{}", issued_at.0));
    let artifact = AuthorizationArtifact {
        version: ARTIFACT_VERSION,
        action_id: action.clone(),
        binding: binding::bind(&keys, &req).unwrap(),
        policy_digest: req.ctx.policy_digest.clone(),
        decision,
        needs_confirmation,
        issued_at,
        not_after: issued_at.plus_millis(TTL),
        kid: KeyId(String::new()),
    };
    let token = artifact.clone().seal(&keys).unwrap();
    let artifact = AuthorizationArtifact::open(&token, &keys).unwrap();
    Preview {
        keys,
        action,
        token,
        artifact,
    }
}

fn preview() -> Preview {
    preview_with(ring(), false, ArtifactDecision::Allow, NOW)
}

fn attempt<'a>(p: &'a Preview, req: &'a CanonicalRequest) -> CommitAttempt<'a> {
    CommitAttempt {
        artifact: Some(&p.token),
        action_id: &p.action,
        request: req,
        current_policy_digest: "pol-1",
        confirmation: None,
        now: NOW.plus_millis(1_000),
        max_skew_ms: SKEW,
        max_confirmation_age_ms: CONFIRMATION_AGE,
    }
}

fn reason(keys: &KeyRing, a: &CommitAttempt<'_>) -> ReasonCode {
    accept(keys, &MemLedger::default(), a).unwrap_err().reason
}

/// Re-encode claims with a valid MAC under `keys` (an insider-forged artifact).
fn reseal(p: &Preview, edit: impl FnOnce(&mut AuthorizationArtifact)) -> String {
    let mut a = p.artifact.clone();
    edit(&mut a);
    a.seal(&p.keys).unwrap()
}

#[test]
fn positive_control_passes_and_proof_carries_request() {
    let p = preview();
    let req = request();
    let proof = accept(&p.keys, &MemLedger::default(), &attempt(&p, &req)).unwrap();
    assert_eq!(proof.action_id(), &p.action);
    assert_eq!(proof.request().inputs.arguments, req.inputs.arguments);
}

/// Issue 11 item 9: the proof carries the canonical form of what was bound. A commit that
/// spells the bound amount `1e2` or `100.0` instead of `100` has the same canonical bytes, so
/// it is accepted — and the executor then sends `100`, not the runtime's spelling.
#[test]
fn proof_carries_the_canonical_form_not_the_runtime_spelling() {
    let keys = ring();
    let mut bound = request();
    bound.inputs.arguments.insert("amount".into(), json!(100));
    bound.inputs.arguments.insert("zero".into(), json!(0));
    let action = ActionId("act_canon".into());
    let token = AuthorizationArtifact {
        version: ARTIFACT_VERSION,
        action_id: action.clone(),
        binding: binding::bind(&keys, &bound).unwrap(),
        policy_digest: bound.ctx.policy_digest.clone(),
        decision: ArtifactDecision::Allow,
        needs_confirmation: false,
        issued_at: NOW,
        not_after: NOW.plus_millis(TTL),
        kid: KeyId(String::new()),
    }
    .seal(&keys)
    .unwrap();
    for (amount, zero) in [("1e2", "-0.0"), ("100.0", "0e5"), ("1.00e+2", "-0")] {
        let mut spelled = bound.clone();
        spelled
            .inputs
            .arguments
            .insert("amount".into(), serde_json::from_str(amount).unwrap());
        spelled
            .inputs
            .arguments
            .insert("zero".into(), serde_json::from_str(zero).unwrap());
        assert_ne!(spelled.inputs.arguments, bound.inputs.arguments, "{amount}");
        let a = CommitAttempt {
            artifact: Some(&token),
            action_id: &action,
            request: &spelled,
            current_policy_digest: "pol-1",
            confirmation: None,
            now: NOW,
            max_skew_ms: SKEW,
            max_confirmation_age_ms: CONFIRMATION_AGE,
        };
        let proof = accept(&keys, &MemLedger::default(), &a).unwrap();
        let sent = &proof.request().inputs.arguments;
        assert_eq!(sent, &bound.inputs.arguments, "{amount} {zero}");
        assert_eq!(
            serde_json::to_string(&sent["amount"]).unwrap(),
            "100",
            "{amount}"
        );
        assert_eq!(serde_json::to_string(&sent["zero"]).unwrap(), "0", "{zero}");
    }
}

#[test]
fn check1_missing_and_malformed() {
    let p = preview();
    let req = request();
    for missing in [None, Some(""), Some("null"), Some("  ")] {
        let a = CommitAttempt {
            artifact: missing,
            ..attempt(&p, &req)
        };
        assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactMissing);
    }
    for bad in [
        "garbage",
        "sca1.!!!.xx",
        "sca1.e30.AAAA",
        "a.b.c.d",
        "sca1..",
        &p.token[..p.token.len() - 3],
    ] {
        let a = CommitAttempt {
            artifact: Some(bad),
            ..attempt(&p, &req)
        };
        let r = reason(&p.keys, &a);
        assert!(
            matches!(r, ReasonCode::ArtifactMalformed | ReasonCode::ArtifactMac),
            "{bad}: {r:?}"
        );
    }
    let a = CommitAttempt {
        artifact: Some("garbage"),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactMalformed);
}

#[test]
fn check2_wrong_version() {
    let p = preview();
    let req = request();
    let forged = reseal(&p, |a| a.version = 2);
    let a = CommitAttempt {
        artifact: Some(&forged),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactVersion);
    let renamed = p.token.replacen("sca1", "sca2", 1);
    let a = CommitAttempt {
        artifact: Some(&renamed),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactVersion);
}

#[test]
fn check3_unknown_and_retired_keys() {
    let p = preview();
    let req = request();
    // Key-id swap in the claims (MAC no longer matters: the id is unknown).
    let parts: Vec<&str> = p.token.split('.').collect();
    let mut claims: serde_json::Value =
        serde_json::from_slice(&b64url_decode(parts[1]).unwrap()).unwrap();
    claims["kid"] = json!("art-99");
    let swapped = format!(
        "sca1.{}.{}",
        b64url(&serde_json::to_vec(&claims).unwrap()),
        parts[2]
    );
    let a = CommitAttempt {
        artifact: Some(&swapped),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::KeyUnknown);
    // Swapped to a key id of another purpose: still unknown for artifacts.
    claims["kid"] = json!("bind-1");
    let swapped = format!(
        "sca1.{}.{}",
        b64url(&serde_json::to_vec(&claims).unwrap()),
        parts[2]
    );
    let a = CommitAttempt {
        artifact: Some(&swapped),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::KeyUnknown);

    // Retired artifact key.
    let mut keys = p.keys.clone();
    keys.retire(&p.artifact.kid).unwrap();
    assert_eq!(reason(&keys, &attempt(&p, &req)), ReasonCode::KeyRetired);
    // Retired binding key.
    let mut keys = p.keys.clone();
    keys.retire(&p.artifact.binding.kid).unwrap();
    assert_eq!(reason(&keys, &attempt(&p, &req)), ReasonCode::KeyRetired);
}

#[test]
fn rotation_keeps_old_ids_valid_until_retired() {
    let p = preview();
    let req = request();
    let mut keys = p.keys.clone();
    let mut n = 200u8;
    let mut fill = |b: &mut [u8]| {
        b.iter_mut().for_each(|x| {
            n = n.wrapping_add(3);
            *x = n;
        })
    };
    keys.add_generated(KeyPurpose::Binding, &mut fill);
    keys.add_generated(KeyPurpose::Artifact, &mut fill);
    assert!(
        accept(&keys, &MemLedger::default(), &attempt(&p, &req)).is_ok(),
        "old ids still verify"
    );
}

#[test]
fn check4_mac_bit_flip() {
    let p = preview();
    let req = request();
    let parts: Vec<&str> = p.token.split('.').collect();
    let mut mac = b64url_decode(parts[2]).unwrap();
    mac[0] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], b64url(&mac));
    let a = CommitAttempt {
        artifact: Some(&flipped),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactMac);
    // A claim edited without the key (needs_confirmation dropped): MAC fails.
    let mut claims: serde_json::Value =
        serde_json::from_slice(&b64url_decode(parts[1]).unwrap()).unwrap();
    claims["not_after"] = json!(u64::MAX >> 12);
    let edited = format!(
        "sca1.{}.{}",
        b64url(&serde_json_canonicalizer::to_vec(&claims).unwrap()),
        parts[2]
    );
    let a = CommitAttempt {
        artifact: Some(&edited),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactMac);
    // Sealed under another ring's key with the same id.
    let other = preview_with(
        {
            let mut n = 99u8;
            KeyRing::generate(&mut |b: &mut [u8]| {
                b.iter_mut().for_each(|x| {
                    n = n.wrapping_add(1);
                    *x = n;
                })
            })
        },
        false,
        ArtifactDecision::Allow,
        NOW,
    );
    let a = CommitAttempt {
        artifact: Some(&other.token),
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ArtifactMac);
}

#[test]
fn check5_action_mismatch_and_mixed_artifacts() {
    let p = preview();
    let req = request();
    let other_action = ActionId("act_other".into());
    let a = CommitAttempt {
        action_id: &other_action,
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ActionMismatch);
    let empty = ActionId(String::new());
    let a = CommitAttempt {
        action_id: &empty,
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::ActionMismatch);
}

#[test]
fn check6_any_field_change_is_binding_mismatch() {
    let p = preview();
    type Mutation = Box<dyn Fn(&mut CanonicalRequest)>;
    let mutations: Vec<Mutation> = vec![
        Box::new(|r| {
            r.inputs
                .arguments
                .insert("to".into(), json!("attacker@evil.example"));
        }),
        Box::new(|r| {
            r.inputs.arguments.insert("amount".into(), json!(129901));
        }),
        Box::new(|r| {
            r.inputs
                .arguments
                .insert("bcc".into(), json!("x@evil.example"));
        }),
        Box::new(|r| {
            r.inputs.arguments.remove("subject");
        }),
        Box::new(|r| r.intent.tool = "pay_invoice".into()),
        Box::new(|r| r.intent.upstream = "other".into()),
        Box::new(|r| r.caller = "mallory".into()),
        Box::new(|r| r.session = "sess-2".into()),
        Box::new(|r| r.ctx.destination = "evil".into()),
        Box::new(|r| r.ctx.task_digest = "other-task".into()),
        Box::new(|r| r.inputs.handles[0].version = 2),
        Box::new(|r| r.inputs.handles.clear()),
    ];
    for (i, m) in mutations.iter().enumerate() {
        let mut req = request();
        m(&mut req);
        assert_eq!(
            reason(&p.keys, &attempt(&p, &req)),
            ReasonCode::BindingMismatch,
            "mutation {i}"
        );
    }
    // An unrepresentable number at commit is a binding mismatch, not a crash.
    let mut req = request();
    req.inputs.arguments.insert(
        "amount".into(),
        serde_json::from_str("9007199254740993").unwrap(),
    );
    assert_eq!(
        reason(&p.keys, &attempt(&p, &req)),
        ReasonCode::BindingMismatch
    );
}

#[test]
fn check7_policy_changed() {
    let p = preview();
    let req = request();
    let a = CommitAttempt {
        current_policy_digest: "pol-2",
        ..attempt(&p, &req)
    };
    assert_eq!(reason(&p.keys, &a), ReasonCode::PolicyChanged);
}

#[test]
fn check8_freshness_edges() {
    let p = preview();
    let req = request();
    let at = |now| CommitAttempt {
        now,
        ..attempt(&p, &req)
    };
    let ok = |now| accept(&p.keys, &MemLedger::default(), &at(now)).is_ok();
    assert!(ok(NOW.plus_millis(TTL)), "last fresh instant accepted");
    assert_eq!(
        reason(&p.keys, &at(NOW.plus_millis(TTL + 1))),
        ReasonCode::ArtifactExpired
    );
    assert!(ok(NOW.minus_millis(SKEW)), "skew edge accepted");
    assert_eq!(
        reason(&p.keys, &at(NOW.minus_millis(SKEW + 1))),
        ReasonCode::ArtifactNotYetValid
    );
}

#[test]
fn check9_decision_not_allow() {
    let p = preview_with(ring(), false, ArtifactDecision::Deny, NOW);
    let req = request();
    assert_eq!(
        reason(&p.keys, &attempt(&p, &req)),
        ReasonCode::DecisionNotAllow
    );
}

fn confirm(p: &Preview, edit: impl FnOnce(&mut ConfirmationClaims)) -> Confirmation {
    let mut claims = ConfirmationClaims {
        action_id: p.action.clone(),
        binding: p.artifact.binding.clone(),
        confirmer: "operator".into(),
        confirmed_at: NOW,
        expires_at: NOW.plus_millis(3_600_000),
    };
    edit(&mut claims);
    Confirmation::seal(claims, &p.keys).unwrap()
}

#[test]
fn check10_confirmation() {
    let p = preview_with(ring(), true, ArtifactDecision::Allow, NOW);
    let req = request();
    assert_eq!(
        reason(&p.keys, &attempt(&p, &req)),
        ReasonCode::ConfirmationMissing
    );

    let good = confirm(&p, |_| {});
    let a = CommitAttempt {
        confirmation: Some(&good),
        ..attempt(&p, &req)
    };
    assert!(
        accept(&p.keys, &MemLedger::default(), &a).is_ok(),
        "positive control"
    );

    // Approval moved from another action, or for another request.
    let moved = confirm(&p, |c| c.action_id = ActionId("act_other".into()));
    let other_req = confirm(&p, |c| c.binding.digest = "00".repeat(32));
    let expired = confirm(&p, |c| c.expires_at = NOW);
    let mut forged = confirm(&p, |_| {});
    forged.mac = "00".repeat(32);
    for c in [&moved, &other_req, &expired, &forged] {
        let a = CommitAttempt {
            confirmation: Some(c),
            ..attempt(&p, &req)
        };
        assert_eq!(reason(&p.keys, &a), ReasonCode::ConfirmationInvalid);
    }
}

#[test]
fn confirmation_outlives_a_slow_human_only_through_its_own_ttl() {
    // The confirmation's lifetime is separate from the artifact's: a re-previewed artifact
    // (fresh) with an hour-old confirmation is still accepted.
    let p = preview_with(
        ring(),
        true,
        ArtifactDecision::Allow,
        NOW.plus_millis(3_000_000),
    );
    let req = request();
    let c = confirm(&p, |c| c.confirmed_at = NOW);
    let a = CommitAttempt {
        confirmation: Some(&c),
        now: NOW.plus_millis(3_000_100),
        ..attempt(&p, &req)
    };
    assert!(accept(&p.keys, &MemLedger::default(), &a).is_ok());
}

/// A confirmer that seals a longer expiry than the gateway's `confirmation_ttl_ms` (the
/// `approvals` CLI run without the config uses the default hour) cannot make the approval
/// outlive the gateway's setting: age is counted from `confirmed_at`.
#[test]
fn confirmation_older_than_the_gateways_ttl_is_invalid_whatever_it_sealed() {
    let p = preview_with(
        ring(),
        true,
        ArtifactDecision::Allow,
        NOW.plus_millis(60_000),
    );
    let req = request();
    // Sealed for a day, given at NOW.
    let c = confirm(&p, |c| c.expires_at = NOW.plus_millis(86_400_000));
    let at = |now: UnixMillis, age: u64| CommitAttempt {
        confirmation: Some(&c),
        now,
        max_confirmation_age_ms: age,
        ..attempt(&p, &req)
    };
    // The gateway counts 60 s: 61 s after the confirmation it no longer holds.
    assert_eq!(
        reason(&p.keys, &at(NOW.plus_millis(61_000), 60_000)),
        ReasonCode::ConfirmationInvalid
    );
    // Positive controls: within the gateway's TTL, and with the default hour.
    assert!(
        accept(
            &p.keys,
            &MemLedger::default(),
            &at(NOW.plus_millis(59_000), 60_000)
        )
        .is_ok()
    );
    assert!(
        accept(
            &p.keys,
            &MemLedger::default(),
            &at(NOW.plus_millis(61_000), CONFIRMATION_AGE)
        )
        .is_ok()
    );
}

#[test]
fn check11_replay_and_store_down() {
    let p = preview();
    let req = request();
    let ledger = MemLedger::default();
    assert!(accept(&p.keys, &ledger, &attempt(&p, &req)).is_ok());
    assert_eq!(
        accept(&p.keys, &ledger, &attempt(&p, &req))
            .unwrap_err()
            .reason,
        ReasonCode::Replay
    );
    let down = MemLedger {
        down: true,
        ..MemLedger::default()
    };
    assert_eq!(
        accept(&p.keys, &down, &attempt(&p, &req))
            .unwrap_err()
            .reason,
        ReasonCode::StoreUnavailable
    );
}

#[test]
fn failed_checks_do_not_burn_the_action_id() {
    let p = preview();
    let ledger = MemLedger::default();
    let mut bad = request();
    bad.inputs
        .arguments
        .insert("to".into(), json!("attacker@evil.example"));
    assert!(accept(&p.keys, &ledger, &attempt(&p, &bad)).is_err());
    let good = request();
    assert!(accept(&p.keys, &ledger, &attempt(&p, &good)).is_ok());
}

/// The binding check on its own (the approval re-issue runs it before telling the runtime
/// anything): positive control, then each way a different call fails it for its own reason.
#[test]
fn check_binding_alone() {
    let keys = ring();
    let bound_req = request();
    let bound = binding::bind(&keys, &bound_req).unwrap();
    // Positive control: the bound call passes and comes back in canonical form.
    let checked = check_binding(&keys, &bound, "pol-1", &bound_req).unwrap();
    assert_eq!(checked, bound_req);
    // A later policy set does not make the same call a different one: the digest it was
    // bound under is put back before the check (a policy change is check 7's business).
    let mut later = request();
    later.ctx.policy_digest = "pol-2".into();
    assert_eq!(
        check_binding(&keys, &bound, "pol-1", &later).unwrap(),
        bound_req
    );
    // Another recipient, another handle version, another session: another call.
    let mut other = request();
    other
        .inputs
        .arguments
        .insert("to".into(), json!("attacker@evil.example"));
    let mut version = request();
    version.inputs.handles[0].version = 2;
    let mut session = request();
    session.session = "sess-2".into();
    for call in [&other, &version, &session] {
        assert_eq!(
            check_binding(&keys, &bound, "pol-1", call)
                .unwrap_err()
                .reason,
            ReasonCode::BindingMismatch
        );
    }
    // Bound under another policy digest than claimed: the bytes differ, so the digest does.
    assert_eq!(
        check_binding(&keys, &bound, "pol-0", &bound_req)
            .unwrap_err()
            .reason,
        ReasonCode::BindingMismatch
    );
    // An unknown binding key id, then a retired one.
    let mut unknown = bound.clone();
    unknown.kid = KeyId("bind-nope".into());
    assert_eq!(
        check_binding(&keys, &unknown, "pol-1", &bound_req)
            .unwrap_err()
            .reason,
        ReasonCode::KeyUnknown
    );
    let mut retired = ring();
    retired.retire(&bound.kid).unwrap();
    assert_eq!(
        check_binding(&retired, &bound, "pol-1", &bound_req)
            .unwrap_err()
            .reason,
        ReasonCode::KeyRetired
    );
}
