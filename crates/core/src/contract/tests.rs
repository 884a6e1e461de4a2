//! Unit tests of the contract monitor: every pipeline step with the event it stops and a
//! positive control, the paper's worked contract and worked trace, budget and lifecycle.

use super::*;
use crate::exposure::{Dispatch, Observation, TraceEvent, exposure, project};
use crate::labeler::{DestinationRule, EffectRule, Labeler, LabelerConfig};
use serde_json::{Map, Value, json};

fn field(path: &str, value: &str, label: ArgLabel) -> LabeledField {
    LabeledField {
        path: path.into(),
        value: value.into(),
        label: Some(label),
    }
}

fn event(mode: Mode, label: ArgLabel, c: Option<f64>) -> LabeledEvent {
    LabeledEvent {
        upstream: "search".into(),
        tool: "web_search".into(),
        destination: "https://api.brave.com/res/v1/web/search".into(),
        mode,
        effect: Some(EffectLabel::ExternalRead),
        destination_label: Some(DestinationLabel::Public),
        fields: vec![field("/q", "x", label)],
        confidence: c,
    }
}

fn open_contract() -> Contract {
    Contract {
        scope: "*".into(),
        allowed_tools: vec!["*".into()],
        allowed_destinations: vec!["*".into()],
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

#[test]
fn positive_control_allows() {
    let e = event(Mode::Speculative, ArgLabel::Public, Some(0.9));
    assert_eq!(decide(&e, &open_contract(), 0), Verdict::Allow);
    let e = event(Mode::Committed, ArgLabel::IntentRevealing, None);
    assert_eq!(decide(&e, &open_contract(), 99), Verdict::Allow);
}

#[test]
fn step1_tool_not_allowed() {
    let mut k = open_contract();
    k.allowed_tools = vec!["mail__*".into()];
    let e = event(Mode::Committed, ArgLabel::Public, None);
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Block(BlockReason::ToolNotAllowed)
    );
    k.allowed_tools = vec!["search__web_*".into()];
    assert_eq!(decide(&e, &k, 0), Verdict::Allow);
    // unlabeled effect class blocks even a committed event
    let mut e2 = e.clone();
    e2.effect = None;
    assert_eq!(
        decide(&e2, &k, 0),
        Verdict::Block(BlockReason::ToolNotAllowed)
    );
}

#[test]
fn step2_destination_list_and_ceiling() {
    let mut k = Contract::paper_web_search();
    k.applies_to_committed = false;
    let mut e = event(Mode::Committed, ArgLabel::Public, None);
    assert_eq!(decide(&e, &k, 0), Verdict::Allow);
    e.destination = "https://search.evil.example/".into();
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Block(BlockReason::DestinationNotAllowed)
    );
    let mut e = event(Mode::Committed, ArgLabel::Public, None);
    e.destination_label = Some(DestinationLabel::Forbidden);
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Block(BlockReason::DestinationLabel)
    );
    e.destination_label = None;
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Block(BlockReason::DestinationLabel)
    );
    e.destination_label = Some(DestinationLabel::Regulated);
    assert_eq!(decide(&e, &k, 0), Verdict::Allow);
}

#[test]
fn step3_precommit_effects_defer_committed_pass() {
    let mut e = event(Mode::Prefetch, ArgLabel::Public, Some(1.0));
    e.effect = Some(EffectLabel::ExternalWrite);
    assert_eq!(
        decide(&e, &open_contract(), 0),
        Verdict::Defer(DeferReason::EffectPrecommit)
    );
    for eff in [EffectLabel::SemiStateful, EffectLabel::Irreversible] {
        e.effect = Some(eff);
        assert_eq!(
            decide(&e, &open_contract(), 0),
            Verdict::Defer(DeferReason::EffectPrecommit)
        );
    }
    e.mode = Mode::Committed;
    assert_eq!(decide(&e, &open_contract(), 0), Verdict::Allow);
}

#[test]
fn step4_gate_on_confidence() {
    let k = open_contract(); // τ = 0.5
    for c in [Some(0.49), None, Some(f64::NAN), Some(-1.0), Some(1.5)] {
        let e = event(Mode::Speculative, ArgLabel::Public, c);
        assert_eq!(
            decide(&e, &k, 0),
            Verdict::Defer(DeferReason::LowConfidence),
            "{c:?}"
        );
    }
    let e = event(Mode::Speculative, ArgLabel::Public, Some(0.5));
    assert_eq!(decide(&e, &k, 0), Verdict::Allow);
    // unlabeled field: pre-commit defers, committed blocks
    let mut e = event(Mode::Speculative, ArgLabel::Public, Some(0.9));
    e.fields[0].label = None;
    assert_eq!(decide(&e, &k, 0), Verdict::Defer(DeferReason::Unlabeled));
    e.mode = Mode::Committed;
    assert_eq!(decide(&e, &k, 0), Verdict::Block(BlockReason::Unlabeled));
}

#[test]
fn step5_budget_before_rewrite() {
    let k = open_contract(); // b = 2
    let e = event(Mode::Speculative, ArgLabel::Sensitive, Some(0.9));
    assert!(matches!(decide(&e, &k, 1), Verdict::Rewrite { .. }));
    assert_eq!(
        decide(&e, &k, 2),
        Verdict::Defer(DeferReason::BudgetExhausted)
    );
    // public or personal events do not count against the budget
    let e = event(Mode::Speculative, ArgLabel::Personal, Some(0.9));
    assert_eq!(decide(&e, &k, 2), Verdict::Allow);
    // committed events are never budget-deferred
    let e = event(Mode::Committed, ArgLabel::Sensitive, None);
    assert_eq!(decide(&e, &k, 99), Verdict::Allow);
}

#[test]
fn budget_charges_only_dispatched_budgeted_precommit_events() {
    let mut b = Budget::default();
    let sens = event(Mode::Speculative, ArgLabel::Sensitive, Some(0.9));
    b.charge(
        &sens,
        &Verdict::Rewrite {
            fields: vec!["/q".into()],
        },
    );
    b.charge(&sens, &Verdict::Allow);
    b.charge(&sens, &Verdict::Shadow);
    b.charge(&sens, &Verdict::Defer(DeferReason::LowConfidence));
    b.charge(
        &event(Mode::Speculative, ArgLabel::Public, Some(0.9)),
        &Verdict::Allow,
    );
    b.charge(
        &event(Mode::Committed, ArgLabel::Sensitive, None),
        &Verdict::Allow,
    );
    assert_eq!(b.spent, 2);
}

#[test]
fn step6_rewrite_forbidden_fields_only() {
    let k = open_contract();
    let mut e = event(Mode::Speculative, ArgLabel::IntentRevealing, Some(0.9));
    e.fields.push(field("/n", "10", ArgLabel::Public));
    e.fields
        .push(field("/who", "a@b.example", ArgLabel::Personal));
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Rewrite {
            fields: vec!["/q".into()]
        }
    );
    // an authorized provider sees the field as is
    let mut k2 = k.clone();
    k2.authorized_observers.insert(Observer::Provider);
    assert_eq!(decide(&e, &k2, 0), Verdict::Allow);
    // local reads have no external observer
    e.effect = Some(EffectLabel::LocalRead);
    assert_eq!(decide(&e, &k, 0), Verdict::Allow);
}

#[test]
fn step7_shadow_external_precommit_only() {
    let mut k = open_contract();
    k.shadow_required = true;
    let e = event(Mode::Speculative, ArgLabel::Public, Some(0.9));
    assert_eq!(decide(&e, &k, 0), Verdict::Shadow);
    let mut local = e.clone();
    local.effect = Some(EffectLabel::LocalRead);
    assert_eq!(decide(&local, &k, 0), Verdict::Allow);
    let committed = event(Mode::Committed, ArgLabel::Public, None);
    assert_eq!(decide(&committed, &k, 0), Verdict::Allow);
    // REWRITE comes before SHADOW
    let sens = event(Mode::Speculative, ArgLabel::Sensitive, Some(0.9));
    assert!(matches!(decide(&sens, &k, 0), Verdict::Rewrite { .. }));
}

#[test]
fn every_precommit_mode_is_gated() {
    for m in [
        Mode::Speculative,
        Mode::Prefetch,
        Mode::Retry,
        Mode::Validation,
        Mode::Shadow,
    ] {
        assert!(m.is_pre_commit());
        assert_eq!(Mode::parse(m.as_str()), Some(m));
        let e = event(m, ArgLabel::Public, Some(0.1));
        assert_eq!(
            decide(&e, &open_contract(), 0),
            Verdict::Defer(DeferReason::LowConfidence)
        );
    }
    assert!(!Mode::Committed.is_pre_commit());
    assert_eq!(Mode::parse("Committed"), None);
}

fn web_labeler() -> Labeler {
    Labeler::new(LabelerConfig {
        destinations: vec![DestinationRule {
            pattern: "*api.brave.com*".into(),
            label: DestinationLabel::Public,
        }],
        effects: vec![EffectRule {
            tool: "*__web_search".into(),
            effect: EffectLabel::ExternalRead,
        }],
        ..LabelerConfig::default()
    })
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Appendix A: under the worked contract a speculative *and* a committed web_search with an
/// intent-revealing query are both rewritten; the rewrite labels at most personal.
#[test]
fn paper_worked_contract() {
    let k = Contract::paper_web_search();
    assert_eq!(k.max_arg_label, ArgLabel::Personal);
    assert_eq!((k.branch_threshold, k.budget), (0.7, Some(5)));
    let l = web_labeler();
    let args = obj(json!({"q": "penalty for breaking my lease early"}));
    for (mode, c) in [(Mode::Speculative, Some(0.8)), (Mode::Committed, Some(1.0))] {
        let e = l.label(
            "search",
            "web_search",
            "https://api.brave.com/res/v1/web/search",
            None,
            &args,
            mode,
            c,
        );
        assert_eq!(e.fields[0].label, Some(ArgLabel::IntentRevealing));
        let v = decide(&e, &k, 0);
        let Verdict::Rewrite { fields } = v.clone() else {
            panic!("{v:?}")
        };
        let out = l.rewrite("search__web_search", &args, &fields, &k);
        let e2 = l.label("search", "web_search", &e.destination, None, &out, mode, c);
        assert_eq!(check_rewrite(&e2, &k, v.clone()), v);
        assert!(!out["q"].as_str().unwrap().contains("lease"));
    }
    // below τ the speculative call waits instead
    let e = l.label(
        "search",
        "web_search",
        "https://api.brave.com/x",
        None,
        &args,
        Mode::Speculative,
        Some(0.6),
    );
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Defer(DeferReason::LowConfidence)
    );
    // a destination outside the list is blocked
    let e = l.label(
        "search",
        "web_search",
        "https://www.google.com/search",
        None,
        &args,
        Mode::Committed,
        None,
    );
    assert_eq!(
        decide(&e, &k, 0),
        Verdict::Block(BlockReason::DestinationNotAllowed)
    );
}

#[test]
fn rewrite_that_keeps_the_label_is_blocked() {
    let k = open_contract();
    let kept = event(Mode::Speculative, ArgLabel::Sensitive, Some(0.9));
    let v = Verdict::Rewrite {
        fields: vec!["/q".into()],
    };
    assert_eq!(
        check_rewrite(&kept, &k, v.clone()),
        Verdict::Block(BlockReason::RewriteInsufficient)
    );
    let lowered = event(Mode::Speculative, ArgLabel::Personal, Some(0.9));
    assert_eq!(check_rewrite(&lowered, &k, v.clone()), v);
}

/// Appendix A.1: e1 promoted, e2 and e3 abandoned ⇒ Δ_provider = {e2, e3}; issue-time
/// REWRITE on e2 and SHADOW on e3 shrink it: e2's query no longer carries its topic and e3
/// reaches no provider at all.
#[test]
fn paper_worked_trace_rewrite_and_shadow_shrink_exposure() {
    let calls = [
        (
            "b1",
            "search__web_search",
            "tenant rights lease termination penalty",
            100,
        ),
        (
            "b2",
            "search__web_search",
            "available apartments near me for my eviction",
            150,
        ),
        ("b3", "loans__rates", "current personal loan rates", 250),
    ];
    let mut branches = BranchTable::default();
    branches.settle("b1", BranchState::Promoted).unwrap();
    branches.settle("b2", BranchState::Abandoned).unwrap();
    branches.settle("b3", BranchState::Abandoned).unwrap();
    let record = |i: usize, decision: &str, dispatch: Dispatch, q: &str| {
        let (b, tool, _, t) = calls[i];
        TraceEvent {
            seq: i as u64,
            branch: Some(b.into()),
            mode: Mode::Speculative,
            tool: tool.into(),
            destination: format!("https://{tool}/"),
            host: tool.into(),
            decision: decision.into(),
            dispatch,
            fields: if dispatch == Dispatch::None {
                vec![]
            } else {
                vec![("/q".into(), q.into())]
            },
            payload_bytes: q.len() as u64,
            issued_ms: t,
            duration_ms: 30,
        }
    };
    let naive: Vec<TraceEvent> = (0..3)
        .map(|i| record(i, "allow", Dispatch::Provider, calls[i].2))
        .collect();
    let prov = |evs: &[TraceEvent]| {
        exposure(evs, &branches)
            .into_iter()
            .find(|x| x.observer == Observer::Provider)
            .unwrap()
    };
    let d = prov(&naive);
    assert_eq!(d.marginal, project(Observer::Provider, &naive[1..]));

    let l = Labeler::default();
    let k = open_contract();
    let rewritten = l.rewrite(
        "search__web_search",
        &obj(json!({"q": calls[1].2})),
        &["/q".into()],
        &k,
    );
    let q2 = rewritten["q"].as_str().unwrap().to_owned();
    let guarded = vec![
        record(0, "allow", Dispatch::Provider, calls[0].2),
        record(1, "rewrite", Dispatch::Provider, &q2),
        record(2, "shadow", Dispatch::Substitute, calls[2].2),
    ];
    let d2 = prov(&guarded);
    assert!(d2.marginal.len() < d.marginal.len(), "{:?}", d2.marginal);
    for o in &d2.marginal {
        if let Observation::Field { value, .. } = o {
            assert!(l.label_text(value) <= ArgLabel::Personal, "{value}");
        }
    }
    assert!(
        !d2.marginal
            .iter()
            .any(|o| matches!(o, Observation::Call { tool, .. } if tool == "loans__rates"))
    );
}

#[test]
fn lifecycle_transitions() {
    use EventState as S;
    let all = [
        S::Proposed,
        S::Decided,
        S::Dispatched,
        S::Completed,
        S::Deferred,
        S::Denied,
        S::Terminated,
    ];
    let allowed = [
        (S::Proposed, S::Decided),
        (S::Proposed, S::Deferred),
        (S::Proposed, S::Denied),
        (S::Decided, S::Dispatched),
        (S::Dispatched, S::Completed),
        (S::Deferred, S::Decided),
        (S::Deferred, S::Denied),
        (S::Deferred, S::Terminated),
    ];
    for from in all {
        for to in all {
            let ok = allowed.contains(&(from, to));
            assert_eq!(from.advance(to).is_ok(), ok, "{from:?} -> {to:?}");
        }
    }
}

#[test]
fn branch_table_settles_once() {
    let mut t = BranchTable::default();
    t.open("a");
    assert_eq!(t.state("a"), BranchState::Pending);
    assert_eq!(t.state("unknown"), BranchState::Pending);
    t.settle("a", BranchState::Promoted).unwrap();
    t.settle("a", BranchState::Promoted).unwrap();
    assert!(t.settle("a", BranchState::Abandoned).is_err());
    t.settle("b", BranchState::Abandoned).unwrap();
    assert!(t.settle("b", BranchState::Promoted).is_err());
    assert_eq!(t.iter().count(), 2);
}
