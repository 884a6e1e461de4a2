//! Theorem 1 of Ghost Tool Calls (arXiv 2606.02483 §3) as a property: under complete
//! mediation (A1), correct labels (A2) and label-lowering rewrites (A3), for random events,
//! contracts and promote/abandon sequences, no field whose label κ forbids ever enters the
//! marginal exposure Δ_i of an observer κ does not authorize. Each assumption is necessary:
//! the negative tests break one at a time and find a violation.
//!
//! The simulation is the gateway's dispatch path in pure form: label → `decide` → rewrite →
//! re-label → `check_rewrite` → budget → record what was dispatched; deferred events are
//! re-decided as committed on promotion and dropped on abandonment. The gold labeler is the
//! product's content-aware labeler (A2 holds by construction), except where a test breaks it.
//!
//! Cases: `PROPTEST_CASES` (default 256 here; the README documents a 100,000-case run).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use secureclaw_core::contract::{
    ArgLabel, BranchState, BranchTable, Budget, Contract, DestinationLabel, EffectLabel,
    LabeledEvent, Mode, Observer, ShadowPromotion, Verdict, check_rewrite, decide, recorded_fields,
};

/// What the trace records is never more than what the provider received, and never a
/// forbidden value unless the auditor is authorized.
#[test]
fn recorded_fields_hide_forbidden_values_from_the_auditor() {
    let l = labeler(LabelerMode::ContentAware);
    let a: Map<String, Value> = [(
        "q".to_owned(),
        Value::String("should i sue my landlord".into()),
    )]
    .into_iter()
    .collect();
    let fields = l.label_fields("up__tool", &a);
    let mut k = strict();
    let rec = recorded_fields(&fields, &k);
    assert!(rec[0].1.starts_with("sha256:"), "{rec:?}");
    k.authorized_observers.insert(Observer::Auditor);
    assert_eq!(
        recorded_fields(&fields, &k)[0].1,
        "should i sue my landlord"
    );
}
use secureclaw_core::exposure::{Dispatch, Observation, TraceEvent, exposure};
use secureclaw_core::labeler::{DestinationRule, Labeler, LabelerConfig, LabelerMode};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

const WORDS: &[&str] = &[
    "weather",
    "paris",
    "my",
    "lease",
    "tenant",
    "penalty",
    "lawyer",
    "divorce",
    "loan",
    "visa",
    "chemotherapy",
    "how to",
    "report",
    "quarterly",
    "bob@corp.example",
    "2026-03-14",
    "apartments",
    "near me",
    "meeting",
    "notes",
    "debt",
    "should i",
    "hacked",
    "the",
    "budget",
];

#[derive(Debug, Clone)]
struct Ev {
    branch: u8,
    mode: Mode,
    effect: EffectLabel,
    confidence: f64,
    fields: Vec<(String, String)>,
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS), 0..6).prop_map(|w| w.join(" "))
}

fn ev() -> impl Strategy<Value = Ev> {
    (
        0u8..4,
        prop::sample::select(vec![
            Mode::Committed,
            Mode::Speculative,
            Mode::Prefetch,
            Mode::Retry,
        ]),
        prop::sample::select(vec![
            EffectLabel::LocalRead,
            EffectLabel::ExternalRead,
            EffectLabel::ExternalRead,
            EffectLabel::ExternalWrite,
        ]),
        0.0f64..=1.0,
        prop::collection::vec(text(), 0..4),
    )
        .prop_map(|(branch, mode, effect, confidence, vals)| Ev {
            branch,
            mode,
            effect,
            confidence,
            fields: vals
                .into_iter()
                .enumerate()
                .map(|(i, v)| (format!("f{i}"), v))
                .collect(),
        })
}

fn kappa() -> impl Strategy<Value = Contract> {
    (
        prop::sample::select(vec![
            ArgLabel::Public,
            ArgLabel::Personal,
            ArgLabel::Sensitive,
        ]),
        prop::collection::btree_set(prop::sample::select(Observer::ALL.to_vec()), 0..3),
        0.0f64..=1.0,
        prop::option::of(0u32..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(max, auth, tau, budget, shadow, reissue, committed)| Contract {
                scope: "*".into(),
                allowed_tools: vec!["*".into()],
                allowed_destinations: vec!["*".into()],
                max_destination_label: DestinationLabel::Regulated,
                max_arg_label: max,
                authorized_observers: auth,
                branch_threshold: tau,
                budget,
                shadow_required: shadow,
                shadow_promotion: if reissue {
                    ShadowPromotion::Reissue
                } else {
                    ShadowPromotion::Reuse
                },
                applies_to_committed: committed,
            },
        )
}

fn labeler(mode: LabelerMode) -> Labeler {
    Labeler::new(LabelerConfig {
        mode,
        destinations: vec![DestinationRule {
            pattern: "*".into(),
            label: DestinationLabel::Public,
        }],
        ..LabelerConfig::default()
    })
}

fn args(e: &Ev) -> Map<String, Value> {
    e.fields
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Ways to break the assumptions.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// A1 broken: pre-commit events are dispatched without asking the monitor.
    unmediated: bool,
    /// A3 broken: REWRITE leaves the fields as they were and is not re-checked.
    keep_label_rewrite: bool,
}

fn label(l: &Labeler, e: &Ev, a: &Map<String, Value>, mode: Mode) -> LabeledEvent {
    let mut ev = l.label(
        "up",
        "tool",
        "https://provider.example/api",
        Some(e.effect),
        a,
        mode,
        Some(e.confidence),
    );
    ev.effect = Some(e.effect);
    ev
}

/// The dispatch path; `monitor` labels for decisions, the trace records dispatched fields.
fn simulate(
    events: &[Ev],
    k: &Contract,
    monitor: &Labeler,
    outcomes: &[bool],
    faults: Faults,
) -> (Vec<TraceEvent>, BranchTable) {
    let mut trace = Vec::new();
    let mut budget = Budget::default();
    let mut held: Vec<(usize, Ev)> = Vec::new();
    let mut seq = 0u64;
    let mut dispatch =
        |e: &Ev, mode: Mode, budget: &mut Budget, trace: &mut Vec<TraceEvent>| -> Option<()> {
            let a = args(e);
            let labeled = label(monitor, e, &a, mode);
            let mut verdict = if faults.unmediated && mode.is_pre_commit() {
                Verdict::Allow
            } else {
                decide(&labeled, k, budget.spent)
            };
            let mut out = a.clone();
            if let Verdict::Rewrite { fields } = &verdict
                && !faults.keep_label_rewrite
            {
                out = monitor.rewrite("up__tool", &a, fields, k);
                let relabeled = label(monitor, e, &out, mode);
                verdict = check_rewrite(&relabeled, k, verdict);
            }
            budget.charge(&labeled, &verdict);
            seq += 1;
            let (d, fields) = match &verdict {
                Verdict::Allow | Verdict::Rewrite { .. } if e.effect.is_external() => {
                    // What the provider actually receives (ground truth, not the audit's view).
                    let fs = monitor
                        .label_fields("up__tool", &out)
                        .into_iter()
                        .map(|f| (f.path, f.value))
                        .collect();
                    (Dispatch::Provider, fs)
                }
                Verdict::Allow | Verdict::Rewrite { .. } | Verdict::Shadow => {
                    (Dispatch::Substitute, vec![])
                }
                Verdict::Defer(_) => return None,
                Verdict::Block(_) => (Dispatch::None, vec![]),
            };
            trace.push(TraceEvent {
                seq,
                branch: Some(format!("b{}", e.branch)),
                mode,
                tool: "up__tool".into(),
                destination: "https://provider.example/api".into(),
                host: "provider.example".into(),
                decision: verdict.tag().into(),
                dispatch: d,
                fields,
                payload_bytes: 0,
                issued_ms: seq * 10,
                duration_ms: 0,
            });
            Some(())
        };
    for (i, e) in events.iter().enumerate() {
        if dispatch(e, e.mode, &mut budget, &mut trace).is_none() {
            held.push((i, e.clone()));
        }
    }
    let mut branches = BranchTable::default();
    for b in 0..4u8 {
        let name = format!("b{b}");
        let promoted = outcomes.get(usize::from(b)).copied().unwrap_or(false);
        if promoted {
            branches.settle(&name, BranchState::Promoted).unwrap();
            for (_, e) in held.iter().filter(|(_, e)| e.branch == b) {
                let _ = dispatch(e, Mode::Committed, &mut budget, &mut trace);
            }
        } else {
            branches.settle(&name, BranchState::Abandoned).unwrap();
        }
    }
    (trace, branches)
}

/// The trace as the gateway records it (audit log, runtime log): dispatched fields passed
/// through `recorded_fields` with the monitor's labels.
fn recorded_view(trace: &[TraceEvent], k: &Contract, monitor: &Labeler) -> Vec<TraceEvent> {
    trace
        .iter()
        .map(|e| {
            let a: Map<String, Value> = e
                .fields
                .iter()
                .map(|(p, v)| {
                    (
                        p.trim_start_matches('/').to_owned(),
                        Value::String(v.clone()),
                    )
                })
                .collect();
            let mut r = e.clone();
            r.fields = recorded_fields(&monitor.label_fields("up__tool", &a), k);
            r
        })
        .collect()
}

/// Forbidden fields in Δ_i of observers κ does not authorize, judged by the gold labeler
/// (runtime-log lines hold 20-character prefixes of recorded fields, which the auditor check
/// already covers in full):
/// the provider, network and co-tenant on what was dispatched, the auditor and runtime log
/// on what the gateway recorded (with the monitor's labels).
fn violations(
    trace: &[TraceEvent],
    branches: &BranchTable,
    k: &Contract,
    gold: &Labeler,
) -> Vec<String> {
    violations_with(trace, branches, k, gold, gold)
}

fn violations_with(
    trace: &[TraceEvent],
    branches: &BranchTable,
    k: &Contract,
    gold: &Labeler,
    monitor: &Labeler,
) -> Vec<String> {
    let mut out = Vec::new();
    let recorded = recorded_view(trace, k, monitor);
    let wire = exposure(trace, branches);
    let logged = exposure(&recorded, branches);
    let views = wire
        .into_iter()
        .filter(|x| {
            matches!(
                x.observer,
                Observer::Provider | Observer::Network | Observer::CoTenant
            )
        })
        .chain(
            logged
                .into_iter()
                .filter(|x| matches!(x.observer, Observer::Auditor | Observer::RuntimeLog)),
        );
    for x in views {
        if k.authorized_observers.contains(&x.observer) {
            continue;
        }
        for o in &x.marginal {
            let value = match o {
                Observation::Field { value, .. } => value.clone(),
                _ => continue,
            };
            if value.starts_with("sha256:") {
                continue;
            }
            let l = gold.label_text(&value);
            if k.forbids(l) {
                out.push(format!("{:?} saw {value:?} ({l:?})", x.observer));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn theorem1_no_forbidden_field_in_marginal_exposure(
        events in prop::collection::vec(ev(), 1..10),
        k in kappa(),
        outcomes in prop::collection::vec(any::<bool>(), 4),
    ) {
        let gold = labeler(LabelerMode::ContentAware);
        let (trace, branches) = simulate(&events, &k, &gold, &outcomes, Faults::default());
        let v = violations(&trace, &branches, &k, &gold);
        prop_assert!(v.is_empty(), "{v:?}");
    }
}

fn lease_events() -> Vec<Ev> {
    vec![
        Ev {
            branch: 0,
            mode: Mode::Speculative,
            effect: EffectLabel::ExternalRead,
            confidence: 0.9,
            fields: vec![("q".into(), "penalty for breaking my lease".into())],
        },
        Ev {
            branch: 1,
            mode: Mode::Speculative,
            effect: EffectLabel::ExternalRead,
            confidence: 0.9,
            fields: vec![("q".into(), "should i get a divorce lawyer".into())],
        },
    ]
}

fn strict() -> Contract {
    Contract {
        scope: "*".into(),
        allowed_tools: vec!["*".into()],
        allowed_destinations: vec!["*".into()],
        max_destination_label: DestinationLabel::Regulated,
        max_arg_label: ArgLabel::Personal,
        authorized_observers: BTreeSet::new(),
        branch_threshold: 0.5,
        budget: None,
        shadow_required: false,
        shadow_promotion: ShadowPromotion::Reuse,
        applies_to_committed: false,
    }
}

#[test]
fn mediated_positive_control_has_no_violation() {
    let gold = labeler(LabelerMode::ContentAware);
    let (trace, branches) = simulate(
        &lease_events(),
        &strict(),
        &gold,
        &[true, false],
        Faults::default(),
    );
    assert!(
        trace.iter().all(|e| e.dispatch == Dispatch::Provider),
        "both were rewritten and sent"
    );
    assert!(violations(&trace, &branches, &strict(), &gold).is_empty());
}

#[test]
fn a1_is_needed_unmediated_path_leaks() {
    let gold = labeler(LabelerMode::ContentAware);
    let faults = Faults {
        unmediated: true,
        ..Faults::default()
    };
    let (trace, branches) = simulate(&lease_events(), &strict(), &gold, &[true, false], faults);
    let v = violations(&trace, &branches, &strict(), &gold);
    assert!(
        !v.is_empty(),
        "an unmediated path must show up as a violation"
    );
    assert!(v.iter().any(|s| s.contains("divorce")), "{v:?}");
}

#[test]
fn a2_is_needed_wrong_labels_leak() {
    // The monitor's labeler mislabels: every argument public (field rules say so).
    let wrong = Labeler::new(LabelerConfig {
        fields: vec![secureclaw_core::labeler::FieldLabelRule {
            tool: "*".into(),
            path: "*".into(),
            label: ArgLabel::Public,
        }],
        destinations: vec![DestinationRule {
            pattern: "*".into(),
            label: DestinationLabel::Public,
        }],
        ..LabelerConfig::default()
    });
    let gold = labeler(LabelerMode::ContentAware);
    let (trace, branches) = simulate(
        &lease_events(),
        &strict(),
        &wrong,
        &[true, false],
        Faults::default(),
    );
    assert!(!violations_with(&trace, &branches, &strict(), &gold, &wrong).is_empty());
}

#[test]
fn a3_is_needed_rewrite_that_keeps_the_label_leaks() {
    let gold = labeler(LabelerMode::ContentAware);
    let faults = Faults {
        keep_label_rewrite: true,
        ..Faults::default()
    };
    let (trace, branches) = simulate(&lease_events(), &strict(), &gold, &[true, false], faults);
    assert!(!violations(&trace, &branches, &strict(), &gold).is_empty());
}
