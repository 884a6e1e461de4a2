//! Issue-time privacy contracts through the real gateway (Ghost Tool Calls, arXiv
//! 2606.02483): every action on the dispatch path, the branch lifecycle, exposure, and the
//! guarantee that raw pre-commit arguments reach no log, trace, audit record or database page.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::contract::{
    ArgLabel, Contract, DestinationLabel, EffectLabel, Mode, Observer, ShadowPromotion,
};
use secureclaw_core::exposure::Observation;
use secureclaw_core::labeler::{DestinationRule, EffectRule};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::{
    CallMeta, CallOutcome, Gateway, GatewayConfig, SubstituteKind, SubstituteRule,
};
use secureclaw_store::SessionRecord;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn contract() -> Contract {
    Contract {
        scope: "*".into(),
        allowed_tools: vec!["test__*".into(), "office__*".into()],
        allowed_destinations: vec!["in-process:*".into(), "in-process-*".into()],
        max_destination_label: DestinationLabel::Regulated,
        max_arg_label: ArgLabel::Personal,
        authorized_observers: BTreeSet::new(),
        branch_threshold: 0.5,
        budget: Some(2),
        shadow_required: false,
        shadow_promotion: ShadowPromotion::Reuse,
        applies_to_committed: false,
    }
}

fn enabled(k: Contract) -> GatewayConfig {
    let mut c = test_config();
    c.speculation.enabled = true;
    c.speculation.labeler.destinations = vec![DestinationRule {
        pattern: "in-process*".into(),
        label: DestinationLabel::Public,
    }];
    c.speculation.contracts = vec![k];
    c
}

fn spec(branch: &str, c: f64) -> CallMeta {
    CallMeta {
        mode: Some(Mode::Speculative),
        branch: Some(branch.into()),
        confidence: Some(c),
        ..CallMeta::default()
    }
}

/// `test__echo` through `Gateway::call` on `h`'s gateway.
async fn echo(h: &Harness, s: &SessionRecord, arguments: Value, meta: &CallMeta) -> CallOutcome {
    h.gw.call(s, "test__echo", args(arguments), meta).await
}

fn received_text(h: &Harness) -> Vec<String> {
    h.test
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|(t, a)| format!("{t}:{}", Value::Object(a.clone())))
        .collect()
}

fn deferred_branch(o: &CallOutcome) -> String {
    match o {
        CallOutcome::Deferred(r) => {
            assert_eq!(r.reason, ReasonCode::Deferred);
            assert_eq!(r.status, "deferred");
            r.branch.clone().expect("a deferral names its branch")
        }
        other => panic!("expected deferred, got {other:?}"),
    }
}

#[tokio::test]
async fn disabled_by_default_committed_unchanged_precommit_deferred() {
    let h = Harness::new().await;
    let s = &h.session;
    // a plain call (no mode) is committed and runs as before
    let o = echo(&h, s, json!({"text": "hello"}), &CallMeta::default()).await;
    completed(&o);
    // a speculative call is held: speculation is off unless the operator enables it
    let o = echo(&h, s, json!({"text": "ghost"}), &spec("b1", 0.99)).await;
    assert_eq!(deferred_branch(&o), "b1");
    assert_eq!(
        h.test.reads(),
        1,
        "the deferred call must not reach the provider"
    );
    // promotion runs it as committed and returns its result
    let released = h.gw.promote_branch(s, "b1").await.unwrap();
    assert_eq!(released.len(), 1);
    completed(&released[0].outcome);
    assert_eq!(h.test.reads(), 2);
    // a deferred call on another branch, abandoned, is never sent
    let o = echo(&h, s, json!({"text": "never"}), &spec("b2", 0.99)).await;
    deferred_branch(&o);
    assert_eq!(h.gw.abandon_branch(s, "b2").await.unwrap(), 1);
    assert!(
        h.gw.promote_branch(s, "b2").await.is_err(),
        "abandoned is final"
    );
    assert_eq!(h.test.reads(), 2);
    assert!(!received_text(&h).iter().any(|r| r.contains("never")));
    // a later speculative call on the promoted branch is part of the plan: it runs
    completed(&echo(&h, s, json!({"text": "more"}), &spec("b1", 0.1)).await);
    // one on the abandoned branch is not sent
    let o = echo(&h, s, json!({"text": "late"}), &spec("b2", 0.99)).await;
    assert_denied(&o, ReasonCode::ContractBlocked);
    assert_eq!(h.test.reads(), 3);
}

#[tokio::test]
async fn allow_rewrite_defer_block_shadow() {
    let h = Harness::with_config(enabled(contract())).await;
    let s = &h.session;
    // ALLOW: public text, confident branch
    completed(&echo(&h, s, json!({"text": "weather in Paris"}), &spec("a", 0.9)).await);
    // REWRITE: intent-revealing text is rewritten before dispatch
    completed(
        &echo(
            &h,
            s,
            json!({"text": "penalty for breaking my lease early"}),
            &spec("r", 0.9),
        )
        .await,
    );
    let got = received_text(&h);
    assert!(got[0].contains("weather in Paris"));
    assert!(!got[1].contains("lease"), "rewritten: {}", got[1]);
    // replacing the term would leave "penalty for breaking my [topic] early": the first-person
    // cue still says the user has the matter, so the whole field is generalized (issue 18
    // item 2; the positive control, a clean rewrite that keeps its neutral words, is in
    // `raw_precommit_arguments_reach_no_sink`)
    assert!(got[1].contains("[redacted]"), "{}", got[1]);
    // DEFER: low confidence → nothing sent
    let o = echo(&h, s, json!({"text": "low"}), &spec("d", 0.2)).await;
    deferred_branch(&o);
    // DEFER: an effect before commitment
    let o =
        h.gw.call(s, "test__count", args(json!({})), &spec("d", 0.99))
            .await;
    deferred_branch(&o);
    assert_eq!((h.test.reads(), h.test.effects()), (2, 0));
    // promotion re-decides both as committed: the read runs raw (committed calls are the
    // user's plan under this contract), the effect goes to the write path
    let released = h.gw.promote_branch(s, "d").await.unwrap();
    assert_eq!(released.len(), 2);
    completed(&released[0].outcome);
    assert!(received_text(&h)[2].contains("low"));
    assert!(!matches!(released[1].outcome, CallOutcome::Deferred(_)));
    // BLOCK: a tool outside the contract
    let mut k = contract();
    k.allowed_tools = vec!["test__echo".into()];
    let h2 = Harness::with_config(enabled(k)).await;
    let o = h2
        .gw
        .call(&h2.session, "test__peek", args(json!({})), &spec("x", 0.9))
        .await;
    assert_denied(&o, ReasonCode::ContractBlocked);
    // ... and a committed call is blocked too: contracts apply to every call when enabled
    let o = h2
        .gw
        .call(
            &h2.session,
            "test__peek",
            args(json!({})),
            &CallMeta::default(),
        )
        .await;
    assert_denied(&o, ReasonCode::ContractBlocked);
    assert_eq!(h2.test.reads(), 0);
    // positive control on the same deployment
    completed(&echo(&h2, &h2.session, json!({"text": "ok"}), &spec("x", 0.9)).await);
}

#[tokio::test]
async fn unlabeled_destination_blocks() {
    let mut c = enabled(contract());
    c.speculation.labeler.destinations.clear();
    let h = Harness::with_config(c).await;
    let o = echo(&h, &h.session, json!({"text": "x"}), &CallMeta::default()).await;
    assert_denied(&o, ReasonCode::ContractBlocked);
    assert_eq!(h.test.reads(), 0);
}

#[tokio::test]
async fn budget_defers_after_b_sensitive_dispatches() {
    let h = Harness::with_config(enabled(contract())).await; // b = 2
    let s = &h.session;
    for i in 0..2 {
        completed(
            &h.gw
                .call(
                    s,
                    "test__echo",
                    args(json!({"text": format!("lawyer {i}")})),
                    &spec("b", 0.9),
                )
                .await,
        );
    }
    let o = echo(&h, s, json!({"text": "lawyer 3"}), &spec("b", 0.9)).await;
    deferred_branch(&o);
    // public events are not budgeted
    completed(&echo(&h, s, json!({"text": "weather"}), &spec("b", 0.9)).await);
    // the budget is per task: another session starts at zero
    let other = h.open_session("bob").await;
    completed(&echo(&h, &other, json!({"text": "lawyer"}), &spec("b", 0.9)).await);
}

#[tokio::test]
async fn shadow_routes_to_substitutes_and_reuses_or_reissues() {
    let mut k = contract();
    k.shadow_required = true;
    let mut c = enabled(k.clone());
    c.speculation.substitutes = vec![SubstituteRule {
        tool: "test__echo".into(),
        kind: SubstituteKind::Cache,
        with: None,
    }];
    let h = Harness::with_config(c).await;
    let s = &h.session;
    // committed call fills the local cache
    let first = echo(&h, s, json!({"text": "cached"}), &CallMeta::default()).await;
    let first = completed(&first).clone();
    assert_eq!(h.test.reads(), 1);
    // the same call speculatively is answered locally, from the cache
    let o = echo(&h, s, json!({"text": "cached"}), &spec("s", 0.9)).await;
    match o {
        CallOutcome::Shadowed { output } => assert_eq!(output, first),
        other => panic!("expected shadowed, got {other:?}"),
    }
    // a miss gives an empty result, still without contacting the provider
    let o = echo(&h, s, json!({"text": "other"}), &spec("s", 0.9)).await;
    assert!(matches!(o, CallOutcome::Shadowed { .. }));
    assert_eq!(h.test.reads(), 1);
    // Reuse on promotion (the paper's default): nothing is re-sent
    assert!(h.gw.promote_branch(s, "s").await.unwrap().is_empty());
    assert_eq!(h.test.reads(), 1);

    // Reissue: the promoted shadow goes to the provider as committed
    k.shadow_promotion = ShadowPromotion::Reissue;
    let h = Harness::with_config(enabled(k)).await;
    let o = echo(&h, &h.session, json!({"text": "later"}), &spec("s", 0.9)).await;
    assert!(matches!(o, CallOutcome::Shadowed { .. }));
    assert_eq!(h.test.reads(), 0);
    let released = h.gw.promote_branch(&h.session, "s").await.unwrap();
    assert_eq!(released.len(), 1);
    completed(&released[0].outcome);
    assert_eq!(h.test.reads(), 1);
}

#[tokio::test]
async fn local_reads_are_not_rewritten_and_effect_overrides_apply() {
    let mut c = enabled(contract());
    c.speculation.labeler.effects = vec![EffectRule {
        tool: "test__echo".into(),
        effect: EffectLabel::LocalRead,
    }];
    let h = Harness::with_config(c).await;
    completed(
        &echo(
            &h,
            &h.session,
            json!({"text": "my divorce lawyer"}),
            &spec("l", 0.9),
        )
        .await,
    );
    assert!(
        received_text(&h)[0].contains("divorce"),
        "local reads have no external observer"
    );
    // ... and no provider, network or co-tenant exposure either
    let report = h.gw.exposure(&h.session.id).await.unwrap();
    for x in &report {
        if matches!(
            x.observer,
            Observer::Provider | Observer::Network | Observer::CoTenant
        ) {
            assert_eq!(x.issued, 0, "{:?} saw a local read", x.observer);
        }
    }
}

/// The lease example (paper Appendix A.1) through the gateway: the abandoned branches'
/// dispatched calls are the provider's marginal exposure; deferred ones are not in it.
#[tokio::test]
async fn exposure_counts_ghosts_only() {
    let h = Harness::with_config(enabled(contract())).await;
    let s = &h.session;
    completed(
        &echo(
            &h,
            s,
            json!({"text": "tenant rights termination"}),
            &spec("e1", 0.9),
        )
        .await,
    );
    completed(
        &echo(
            &h,
            s,
            json!({"text": "apartments near the station"}),
            &spec("e2", 0.9),
        )
        .await,
    );
    deferred_branch(
        &echo(
            &h,
            s,
            json!({"text": "personal loan rates"}),
            &spec("e3", 0.1),
        )
        .await,
    );
    h.gw.promote_branch(s, "e1").await.unwrap();
    h.gw.abandon_branch(s, "e2").await.unwrap();
    h.gw.abandon_branch(s, "e3").await.unwrap();
    let report = h.gw.exposure(&s.id).await.unwrap();
    let prov = report
        .iter()
        .find(|x| x.observer == Observer::Provider)
        .unwrap();
    assert_eq!(prov.issued, 4, "two calls with one field each");
    assert_eq!(prov.committed, 2);
    let fields: Vec<&str> = prov
        .marginal
        .iter()
        .filter_map(|o| match o {
            Observation::Field { value, .. } => Some(value.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fields, vec!["apartments near the station"]);
    let log = report
        .iter()
        .find(|x| x.observer == Observer::RuntimeLog)
        .unwrap();
    assert_eq!(
        log.issued, 3,
        "the deferral is logged as a decision, without its arguments"
    );
    // the same report comes from the store alone (what `secureclaw trace exposure` reads)
    let again = secureclaw_gateway::session_exposure(h.store.as_ref(), &s.id)
        .await
        .unwrap();
    assert_eq!(again, report);
}

/// Logs, traces, audit records and database pages carry decisions and transformed fields
/// only: raw pre-commit arguments of deferred, blocked, shadowed and abandoned calls, and the
/// forbidden words of rewritten ones, appear nowhere.
#[tokio::test]
async fn raw_precommit_arguments_reach_no_sink() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut k = contract();
    k.allowed_tools = vec![
        "test__echo".into(),
        "test__count".into(),
        "test__crash".into(),
    ];
    let mut shadowing = k.clone();
    shadowing.scope = "test__crash".into();
    shadowing.shadow_required = true;
    let mut c = enabled(k);
    c.speculation.contracts.insert(0, shadowing);
    let h = Harness::with_config(c).await;
    let s = &h.session;
    // deferred (low confidence) then abandoned
    deferred_branch(&echo(&h, s, json!({"text": "zqdeferred"}), &spec("g1", 0.1)).await);
    // deferred effect, abandoned
    deferred_branch(
        &h.gw
            .call(
                s,
                "test__count",
                args(json!({"to": "zqeffect@x.example"})),
                &spec("g1", 0.9),
            )
            .await,
    );
    // blocked
    assert_denied(
        &h.gw
            .call(
                s,
                "test__peek",
                args(json!({"q": "zqblocked"})),
                &spec("g2", 0.9),
            )
            .await,
        ReasonCode::ContractBlocked,
    );
    // shadowed (never reaches the crashing provider)
    assert!(matches!(
        h.gw.call(
            s,
            "test__crash",
            args(json!({"q": "zqshadowed"})),
            &spec("g3", 0.9)
        )
        .await,
        CallOutcome::Shadowed { .. }
    ));
    // rewritten: the forbidden words are gone, the rest is the transformed field
    completed(
        &echo(
            &h,
            s,
            json!({"text": "chemotherapy schedule"}),
            &spec("g4", 0.9),
        )
        .await,
    );
    h.gw.abandon_branch(s, "g1").await.unwrap();
    h.gw.abandon_branch(s, "g3").await.unwrap();
    h.gw.abandon_branch(s, "g4").await.unwrap();
    assert_eq!(
        h.test.reads() + h.test.effects(),
        1,
        "only the rewritten call was sent"
    );

    let mut sinks = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    sinks.push_str(&h.audit_dump());
    for f in ["secureclaw.db", "secureclaw.db-wal"] {
        if let Ok(b) = std::fs::read(h.dir.path().join(f)) {
            sinks.push_str(&String::from_utf8_lossy(&b));
        }
    }
    sinks.push_str(&serde_json::to_string(&h.gw.exposure(&s.id).await.unwrap()).unwrap());
    assert!(
        sinks.contains("contract decision") || sinks.contains("speculation"),
        "sinks were captured"
    );
    for raw in [
        "zqdeferred",
        "zqeffect",
        "zqblocked",
        "zqshadowed",
        "chemotherapy",
    ] {
        assert!(!sinks.contains(raw), "`{raw}` reached a sink");
    }
    // positive control: the rewritten, dispatched field is recorded for the exposure report
    assert!(
        sinks.contains("[topic] schedule"),
        "transformed fields are kept"
    );
}

/// The per-session state in memory (trace sequence, result cache) does not outlive the
/// session: after the session expires, the next call in any session drops it (a held call of
/// the expired session, kept sealed in the store, is never sent). Positive control: a live
/// session's state stays.
#[tokio::test]
async fn expired_sessions_speculative_state_is_dropped() {
    let h = Harness::new().await;
    let old = h.open_session("alice").await;
    let o = echo(&h, &old, json!({"text": "ghost"}), &spec("b1", 0.99)).await;
    assert_eq!(deferred_branch(&o), "b1");
    let live = h.open_session("bob").await;
    let o = echo(&h, &live, json!({"text": "also held"}), &spec("b2", 0.99)).await;
    assert_eq!(deferred_branch(&o), "b2");
    assert_eq!(h.gw.speculative_sessions(), 2);
    // Still within the session lifetime: nothing is dropped.
    h.clock.advance(h.config.limits.session_ttl_ms / 2);
    let again = h.open_session("carol").await;
    let o = echo(&h, &again, json!({"text": "x"}), &spec("b3", 0.99)).await;
    assert_eq!(deferred_branch(&o), "b3");
    assert_eq!(h.gw.speculative_sessions(), 3);
    // Past the first two sessions' expiry (and the prune interval): both are dropped, the
    // third (opened later) stays.
    h.clock.advance(h.config.limits.session_ttl_ms / 2 + 61_000);
    let fresh = h.open_session("dave").await;
    let o = echo(&h, &fresh, json!({"text": "y"}), &spec("b4", 0.99)).await;
    assert_eq!(deferred_branch(&o), "b4");
    assert_eq!(
        h.gw.speculative_sessions(),
        2,
        "carol's and dave's state remain"
    );
    // The dropped held call was never sent.
    assert_eq!(h.test.reads(), 0);
}

/// Regression (issue 11 item 9): with `applies_to_committed`, the runtime re-issues exactly the
/// call it made, with the approval; the contract rewrites it the same way, so it matches the
/// previewed (rewritten) binding and runs once. A different call under the same approval still
/// fails the binding check.
#[tokio::test]
async fn an_approved_call_rewritten_by_the_contract_runs_when_reissued() {
    let mut k = contract();
    k.applies_to_committed = true;
    let h = Harness::with_config(enabled(k)).await;
    let s = &h.session;
    let call =
        json!({"to": "auditor@partner.example", "note": "penalty for breaking my lease early"});
    let o =
        h.gw.call(s, "test__count", args(call.clone()), &CallMeta::default())
            .await;
    let action = assert_pending(&o);
    h.gw.decide_approval(&action, true, "user").await.unwrap();
    let reissue = CallMeta {
        approval: Some(action.clone()),
        ..CallMeta::default()
    };
    let mut other = call.clone();
    other["note"] = json!("something else entirely");
    let o = h.gw.call(s, "test__count", args(other), &reissue).await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    completed(&h.gw.call(s, "test__count", args(call), &reissue).await);
    assert_eq!(h.test.effects(), 1);
    let got = received_text(&h);
    assert!(
        got.iter().all(|t| !t.contains("lease")),
        "the upstream received the rewritten call: {got:?}"
    );
}

/// Issue 13 item 5: every entry point for a tool call passes the privacy monitor. An explicit
/// preview + commit is the committed call it is: a contract that does not allow the tool
/// refuses both (before, they skipped the monitor and the effect ran), and a contract that
/// applies to committed calls rewrites the explicit call at the preview and at the commit
/// alike, so the rewritten call is bound and runs once (the positive control).
#[tokio::test]
async fn explicit_preview_and_commit_pass_the_monitor() {
    let mut k = contract();
    k.allowed_tools = vec!["test__echo".into()];
    let h = Harness::with_config(enabled(k)).await;
    let r = h
        .preview(&h.session, "test__count", json!({"k": 1}))
        .await
        .unwrap_err();
    assert_eq!(r.reason, ReasonCode::ContractBlocked, "{r:?}");
    let o = h
        .commit(
            &h.session,
            "test__count",
            json!({"k": 1}),
            &secureclaw_core::artifact::ActionId("act_made_up".into()),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::ContractBlocked);
    assert_eq!(h.test.effects(), 0);

    let mut k = contract();
    k.applies_to_committed = true;
    let h = Harness::with_config(enabled(k)).await;
    let call = json!({"note": "penalty for breaking my lease early"});
    let p = h
        .preview(&h.session, "test__count", call.clone())
        .await
        .unwrap();
    completed(
        &h.commit(
            &h.session,
            "test__count",
            call,
            &p.action_id,
            Some(&p.artifact),
        )
        .await,
    );
    assert_eq!(h.test.effects(), 1);
    let got = received_text(&h);
    assert!(
        got.iter().all(|t| !t.contains("lease")),
        "the upstream received the rewritten call: {got:?}"
    );
}

/// Regression (issue 12 item 6): deferred calls were held in memory unvalidated and only by
/// count (1024 of any size): one token took the gateway from 22 MiB to 4.1 GiB. A held call is
/// now validated as the call it stands for, and a session holds at most
/// `max_held_calls_per_session` calls and `max_held_bytes_per_session` bytes; past either,
/// the call is refused (`limit_exceeded`) and the session keeps working.
#[tokio::test]
async fn held_calls_are_validated_and_bounded_by_count_and_bytes() {
    let mut config = test_config();
    config.limits.max_held_calls_per_session = 3;
    config.limits.max_held_bytes_per_session = 4096;
    config.limits.max_argument_bytes = 2048;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    // Over the argument limit: refused as the call would be, not held.
    let big = "x".repeat(3000);
    let o = echo(&h, s, json!({"text": big}), &spec("b1", 0.9)).await;
    assert_denied(&o, ReasonCode::InvalidArguments);
    // Too deep for a call: refused too.
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let o = echo(&h, s, json!({"text": deep}), &spec("b1", 0.9)).await;
    assert_denied(&o, ReasonCode::InvalidArguments);
    // By bytes: two calls of ~1.9 KB fit in 4 KiB, a third does not.
    let chunk = "y".repeat(1900);
    deferred_branch(&echo(&h, s, json!({"text": chunk}), &spec("b1", 0.9)).await);
    deferred_branch(&echo(&h, s, json!({"text": chunk}), &spec("b1", 0.9)).await);
    let o = echo(&h, s, json!({"text": chunk}), &spec("b1", 0.9)).await;
    assert_denied(&o, ReasonCode::LimitExceeded);
    // By count: a small third call fits, a fourth does not.
    deferred_branch(&echo(&h, s, json!({"text": "small"}), &spec("b2", 0.9)).await);
    let o = echo(&h, s, json!({"text": "small"}), &spec("b2", 0.9)).await;
    assert_denied(&o, ReasonCode::LimitExceeded);
    // Another session is not affected.
    let other = h.open_session("other").await;
    deferred_branch(&echo(&h, &other, json!({"text": "fine"}), &spec("b1", 0.9)).await);
    // Settling frees the room.
    assert_eq!(h.gw.abandon_branch(s, "b1").await.unwrap(), 2);
    deferred_branch(&echo(&h, s, json!({"text": chunk}), &spec("b3", 0.9)).await);
    assert_eq!(h.test.reads(), 0, "nothing held was sent");
}

/// Issue 13 item 4: the disclosure budget is kept in the store, so another gateway on the same
/// database (a replica, or this one after a restart) cannot re-spend it. Positive controls: the
/// second gateway spends what is left, and unbudgeted (public) events still pass everywhere.
#[tokio::test]
async fn budget_is_spent_once_across_gateways_and_restarts() {
    let h = Harness::with_config(enabled(contract())).await; // b = 2
    let s = &h.session;
    let call = |gw: &Gateway, text: &str| budgeted(gw.clone(), s.clone(), text.to_owned());
    completed(&call(&h.gw, "lawyer 1").await);
    let replica = h.restarted().await;
    completed(&call(&replica, "lawyer 2").await);
    assert_eq!(h.test.reads(), 2);
    // Spent: neither gateway, nor one started later, dispatches another budgeted call.
    deferred_branch(&call(&replica, "lawyer 3").await);
    deferred_branch(&call(&h.gw, "lawyer 4").await);
    let later = h.restarted().await;
    deferred_branch(&call(&later, "lawyer 5").await);
    assert_eq!(
        h.test.reads(),
        2,
        "a deferred call must not reach the provider"
    );
    completed(&call(&later, "weather").await);
    assert_eq!(h.store.budget_spent(&s.id).unwrap(), 2);
}

/// A speculative `test__echo` of `text` on branch `b` with confidence 0.9.
async fn budgeted(gw: Gateway, s: SessionRecord, text: String) -> CallOutcome {
    gw.call(
        &s,
        "test__echo",
        args(json!({"text": text})),
        &spec("b", 0.9),
    )
    .await
}

/// Budgeted calls raced through two gateways on one database: exactly `b` are dispatched.
#[tokio::test]
async fn budget_raced_across_two_gateways_is_spent_once() {
    let h = Harness::with_config(enabled(contract())).await; // b = 2
    let replica = h.restarted().await;
    let gateways = [h.gw.clone(), replica];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8usize {
        let gw = gateways[i % 2].clone();
        let s = h.session.clone();
        tasks.spawn(async move {
            gw.call(
                &s,
                "test__echo",
                args(json!({"text": format!("lawyer {i}")})),
                &spec("b", 0.9),
            )
            .await
        });
    }
    let mut dispatched = 0;
    while let Some(o) = tasks.join_next().await {
        match o.unwrap() {
            CallOutcome::Completed { .. } => dispatched += 1,
            other => {
                deferred_branch(&other);
            }
        }
    }
    assert_eq!(dispatched, 2);
    assert_eq!(h.test.reads(), 2);
}

/// The budget cannot be read or charged (database locked by another writer): the budgeted call
/// is refused with `store_unavailable` and not sent; once the lock is gone the same call runs.
#[tokio::test]
async fn budget_store_failure_fails_closed() {
    let h = Harness::with_config(enabled(contract())).await;
    let s = &h.session;
    let lock = h.lock_store();
    let o = echo(&h, s, json!({"text": "lawyer"}), &spec("b", 0.9)).await;
    match &o {
        CallOutcome::Denied(r) => assert_eq!(r.reason, ReasonCode::StoreUnavailable),
        other => panic!("expected store_unavailable, got {other:?}"),
    }
    assert_eq!(h.test.reads(), 0);
    lock.release();
    completed(&echo(&h, s, json!({"text": "lawyer"}), &spec("b", 0.9)).await);
    assert_eq!(h.test.reads(), 1);
}

/// Issue 13 item 4: held calls and branch states are kept in the store, shared by every
/// gateway on the database. A call held through replica A is released — once — when its
/// branch is promoted through replica B; A's promotion of the same branch afterwards (a retry,
/// or a race lost) releases nothing; two replicas promoting one branch at once run its held
/// call once; a branch abandoned through A is abandoned for B; the per-session held-call cap
/// counts the calls held through both replicas.
#[tokio::test]
async fn held_calls_are_shared_by_replicas_and_released_once() {
    let mut config = test_config();
    config.limits.max_held_calls_per_session = 2;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    let b = h.restarted().await;
    let on = |gw: &Gateway, text: &str, branch: &str, c: f64| {
        let (gw, s, text, meta) = (gw.clone(), s.clone(), text.to_owned(), spec(branch, c));
        async move {
            gw.call(&s, "test__echo", args(json!({"text": text})), &meta)
                .await
        }
    };
    assert_eq!(deferred_branch(&on(&h.gw, "ghost", "b1", 0.99).await), "b1");
    assert_eq!(deferred_branch(&on(&b, "second", "b2", 0.99).await), "b2");
    // The cap (2) counts the calls held through both replicas.
    let o = on(&h.gw, "third", "b3", 0.99).await;
    assert_denied(&o, ReasonCode::LimitExceeded);
    assert_eq!(h.test.reads(), 0, "nothing held was sent");
    // B promotes b1, held through A: the call is released and runs once.
    let released = b.promote_branch(s, "b1").await.unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].tool, "test__echo");
    completed(&released[0].outcome);
    assert_eq!(h.test.reads(), 1);
    assert!(received_text(&h).iter().any(|r| r.contains("ghost")));
    // A promoting it again releases nothing.
    assert!(h.gw.promote_branch(s, "b1").await.unwrap().is_empty());
    assert_eq!(h.test.reads(), 1, "the held call ran once");
    // A later speculative call on b1 through A is part of the committed plan: it runs.
    completed(&on(&h.gw, "more", "b1", 0.1).await);
    assert_eq!(h.test.reads(), 2);
    // A abandons b2 (held through B): B sees it abandoned, and its call is never sent.
    assert_eq!(h.gw.abandon_branch(s, "b2").await.unwrap(), 1);
    assert!(
        b.promote_branch(s, "b2").await.is_err(),
        "abandoned is final"
    );
    assert_denied(
        &on(&b, "late", "b2", 0.99).await,
        ReasonCode::ContractBlocked,
    );
    assert!(!received_text(&h).iter().any(|r| r.contains("second")));
    // Raced: both replicas promote one branch at once; its held call runs once.
    deferred_branch(&on(&h.gw, "raced", "r", 0.99).await);
    let (x, y) = tokio::join!(h.gw.promote_branch(s, "r"), b.promote_branch(s, "r"));
    assert_eq!(x.unwrap().len() + y.unwrap().len(), 1);
    assert_eq!(h.test.reads(), 3);
    // A restarted gateway still finds a held call (it is not abandoned by the restart).
    deferred_branch(&on(&h.gw, "kept", "k", 0.99).await);
    let later = h.restarted().await;
    assert_eq!(later.promote_branch(s, "k").await.unwrap().len(), 1);
    assert_eq!(h.test.reads(), 4);
}

/// A held call cannot be stored (database locked by another writer): the speculative call is
/// refused with `store_unavailable`, not held in memory and not sent; once the lock is gone,
/// its branch has nothing held (positive control: the same call is then held and released).
#[tokio::test]
async fn held_call_store_failure_fails_closed() {
    let h = Harness::new().await;
    let s = &h.session;
    let lock = h.lock_store();
    let o = echo(&h, s, json!({"text": "ghost"}), &spec("b1", 0.99)).await;
    assert_denied(&o, ReasonCode::StoreUnavailable);
    lock.release();
    assert!(h.gw.promote_branch(s, "b1").await.unwrap().is_empty());
    assert_eq!(h.test.reads(), 0);
    deferred_branch(&echo(&h, s, json!({"text": "ghost"}), &spec("b2", 0.99)).await);
    assert_eq!(h.gw.promote_branch(s, "b2").await.unwrap().len(), 1);
    assert_eq!(h.test.reads(), 1);
}

/// Issue 12 item 6: the rate limits are kept in the store, so two gateways on one database
/// together allow the configured rate, not twice it: the session's burst of 3 spent through
/// both replicas refuses the fourth call on either (`limit_exceeded`, `session_rate_per_s`,
/// with a retry hint), and it refills at the configured rate. A store that cannot be reached
/// refuses the call (`store_unavailable`) and nothing is sent.
#[tokio::test]
async fn rate_limits_are_shared_by_replicas() {
    let mut config = test_config();
    config.limits.session_rate_per_s = 1;
    config.limits.session_burst = 3;
    let h = Harness::with_config(config).await;
    let s = &h.session;
    let b = h.restarted().await;
    let read = |gw: &Gateway, text: &str| {
        let (gw, s, text) = (gw.clone(), s.clone(), text.to_owned());
        async move {
            gw.call(
                &s,
                "test__echo",
                args(json!({"text": text})),
                &CallMeta::default(),
            )
            .await
        }
    };
    completed(&read(&h.gw, "1").await);
    completed(&read(&b, "2").await);
    completed(&read(&h.gw, "3").await);
    for gw in [&b, &h.gw] {
        match read(gw, "over").await {
            CallOutcome::Denied(r) => {
                assert_eq!(r.reason, ReasonCode::LimitExceeded);
                assert_eq!(r.limit.as_deref(), Some("session_rate_per_s"));
                assert_eq!(r.retry_after_ms, Some(1000));
            }
            other => panic!("expected limit_exceeded, got {other:?}"),
        }
    }
    assert_eq!(h.test.reads(), 3, "refused calls are not sent");
    h.clock.advance(1000);
    completed(&read(&b, "4").await);
    assert_denied(&read(&h.gw, "5").await, ReasonCode::LimitExceeded);
    // Fail closed: the buckets cannot be read.
    h.clock.advance(1000);
    let lock = h.lock_store();
    assert_denied(&read(&h.gw, "6").await, ReasonCode::StoreUnavailable);
    lock.release();
    assert_eq!(h.test.reads(), 4);
    completed(&read(&h.gw, "7").await);
}
