//! Fuzz the artifact decoder (`crates/core/src/artifact.rs`): `sca1.<claims>.<mac>` tokens,
//! and the acceptance predicate that opens them.
//!
//! The first byte chooses the mode:
//! - even: the rest is the token text, opened as the runtime would present it (almost always
//!   rejected before the MAC — this explores the parser);
//! - odd: the rest is the *claims* JSON, sealed with the fuzz ring's real artifact key, so
//!   the fuzzer reaches the code behind the MAC check (claim decoding, version and key checks,
//!   the acceptance predicate's later checks).
//!
//! Invariants: no panic; an opened artifact re-seals to a token that opens to the same
//! artifact; the acceptance predicate never accepts a token whose binding does not match the
//! request it is given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secureclaw_core::acceptance::{CommitAttempt, LedgerError, SingleUseLedger, accept};
use secureclaw_core::artifact::{ActionId, AuthorizationArtifact};
use secureclaw_core::binding::{BindingDigest, bind};
use secureclaw_core::canonical::{CanonicalRequest, Inputs, Intent, RequestContext};
use secureclaw_core::encoding::b64url;
use secureclaw_core::keys::{KeyPurpose, KeyRing, hmac_parts};
use secureclaw_core::time::UnixMillis;
use std::sync::LazyLock;

static KEYS: LazyLock<KeyRing> = LazyLock::new(|| {
    let mut n = 1u8;
    KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_mul(29).wrapping_add(3);
            *x = n;
        }
    })
});

static REQUEST: LazyLock<CanonicalRequest> = LazyLock::new(|| CanonicalRequest {
    intent: Intent {
        upstream: "mail".into(),
        tool: "send".into(),
    },
    caller: "alice".into(),
    session: "s".into(),
    inputs: Inputs {
        arguments: serde_json::from_str(r#"{"to":"a@x.example","amount":100}"#).expect("json"),
        handles: vec![],
    },
    ctx: RequestContext {
        destination: "mail".into(),
        task_digest: "t".into(),
        policy_digest: "p".into(),
    },
});

struct Ledger;
impl SingleUseLedger for Ledger {
    fn reserve(&self, _: &ActionId, _: &BindingDigest, _: UnixMillis) -> Result<bool, LedgerError> {
        Ok(true)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let token = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        // `"binding": "auto"` stands for the true binding of REQUEST, so that seeds can reach
        // the predicate's later checks (policy, freshness, decision, confirmation, ledger).
        let mut claims = rest.to_vec();
        if let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(rest)
            && m.get("binding").and_then(serde_json::Value::as_str) == Some("auto")
        {
            let digest = bind(&KEYS, &REQUEST).expect("bind");
            m.insert(
                "binding".into(),
                serde_json::to_value(digest).expect("digest json"),
            );
            claims = serde_json::to_vec(&m).expect("claims json");
        }
        let key = KEYS.active(KeyPurpose::Artifact).expect("artifact key");
        let mac = hmac_parts(key, &[b"secureclaw.artifact.v1", &claims]);
        format!("sca1.{}.{}", b64url(&claims), b64url(&mac))
    };
    if let Ok(artifact) = AuthorizationArtifact::open(&token, &KEYS) {
        let resealed = artifact.clone().seal(&KEYS).expect("seal");
        let reopened = AuthorizationArtifact::open(&resealed, &KEYS).expect("reopen");
        assert_eq!(
            reopened, artifact,
            "seal/open round trip changed the claims"
        );
    }
    let action = ActionId("act_fuzz".into());
    let now = UnixMillis(1_800_000_000_000);
    let attempt = CommitAttempt {
        artifact: Some(&token),
        action_id: &action,
        request: &REQUEST,
        current_policy_digest: "p",
        confirmation: None,
        now,
        max_skew_ms: 5_000,
    };
    if let Ok(proof) = accept(&KEYS, &Ledger, &attempt) {
        // Only a token that binds exactly this request may pass.
        let expected = bind(&KEYS, &REQUEST).expect("bind");
        assert_eq!(
            proof.binding(),
            &expected,
            "accepted a token for another request"
        );
        assert_eq!(proof.action_id(), &action);
    }
});
