//! Decisions of the default policy set: each rule's attack and positive control.

use super::*;
use secureclaw_core::handle::{Sensitivity, SinkKind};
use secureclaw_core::policy::{HandleFact, Provenance, TargetFact};

fn req(effect: EffectClass) -> PolicyRequest {
    PolicyRequest {
        caller: "alice".into(),
        upstream: "office".into(),
        tool: "send_email".into(),
        effect,
        known_tool: true,
        destructive: false,
        financial: false,
        granted: false,
        sink: SinkKind::Egress,
        targets_declared: false,
        targets: vec![],
        handles: vec![],
        listing: false,
    }
}

fn target(anchored: bool) -> TargetFact {
    TargetFact {
        field: "to".into(),
        anchored,
        via_handle: false,
        provenance: if anchored {
            Provenance::Task
        } else {
            Provenance::Literal
        },
    }
}

fn engine() -> CedarPolicy {
    match CedarPolicy::load(&[]) {
        Ok(p) => p,
        Err(e) => unreachable!("default policy set must load: {e}"),
    }
}

#[test]
fn read_only_tools_are_allowed() {
    assert!(matches!(
        engine().decide(&req(EffectClass::Read)),
        PolicyDecision::Allow { .. }
    ));
}

#[test]
fn anchored_effect_allowed_unanchored_needs_confirmation() {
    let p = engine();
    let mut r = req(EffectClass::Effect);
    r.targets = vec![target(true)];
    assert!(matches!(p.decide(&r), PolicyDecision::Allow { .. }));
    r.targets = vec![target(true), target(false)];
    match p.decide(&r) {
        PolicyDecision::Confirm { policies } => {
            assert_eq!(policies, vec!["effect-unanchored-confirm"])
        }
        other => unreachable!("expected confirm, got {other:?}"),
    }
}

#[test]
fn effect_without_targets_needs_confirmation_unless_declared_targetless() {
    let p = engine();
    let mut r = req(EffectClass::Effect);
    // No target found and none declared: the sink is unknown, so confirm (recall first: a
    // recipient the gateway did not recognise must not make the call unconditional).
    assert!(matches!(p.decide(&r), PolicyDecision::Confirm { .. }));
    r.destructive = true;
    assert!(matches!(p.decide(&r), PolicyDecision::Confirm { .. }));
    // The operator declared the tool target-less (drafts): allowed unless destructive.
    r.targets_declared = true;
    assert!(
        matches!(p.decide(&r), PolicyDecision::Confirm { .. }),
        "destructive stays gated"
    );
    r.destructive = false;
    assert!(
        matches!(p.decide(&r), PolicyDecision::Allow { .. }),
        "declared target-less, non-destructive"
    );
}

#[test]
fn high_handle_to_forbidden_sink_is_denied_even_when_anchored() {
    let p = engine();
    let mut r = req(EffectClass::Effect);
    r.targets = vec![target(true)];
    r.handles = vec![HandleFact {
        label: "iban".into(),
        sensitivity: Sensitivity::High,
        sink_allowed: false,
    }];
    match p.decide(&r) {
        PolicyDecision::Deny { reason, policies } => {
            assert_eq!(reason, ReasonCode::HandleSinkForbidden);
            assert_eq!(policies, vec!["high-handle-sink"]);
        }
        other => unreachable!("expected deny, got {other:?}"),
    }
    r.handles[0].sink_allowed = true;
    assert!(
        matches!(p.decide(&r), PolicyDecision::Allow { .. }),
        "positive control"
    );
    r.handles[0] = HandleFact {
        label: "email".into(),
        sensitivity: Sensitivity::Medium,
        sink_allowed: false,
    };
    assert!(
        matches!(p.decide(&r), PolicyDecision::Allow { .. }),
        "medium handles are not sink-restricted"
    );
}

#[test]
fn unknown_tools_are_denied() {
    let mut r = req(EffectClass::Read);
    r.known_tool = false;
    assert!(matches!(
        engine().decide(&r),
        PolicyDecision::Deny {
            reason: ReasonCode::UnknownTool,
            ..
        }
    ));
}

#[test]
fn operator_files_extend_and_are_validated() {
    let forbid = r#"@id("no-pay") @reason("policy_deny") forbid(principal, action, resource == Tool::"office__pay_invoice");"#;
    let p = match CedarPolicy::load(&[("ops.cedar".into(), forbid.into())]) {
        Ok(p) => p,
        Err(e) => unreachable!("{e}"),
    };
    let mut r = req(EffectClass::Effect);
    r.tool = "pay_invoice".into();
    r.targets = vec![target(true)];
    match p.decide(&r) {
        PolicyDecision::Deny { reason, policies } => {
            assert_eq!(reason, ReasonCode::PolicyDeny);
            assert_eq!(policies, vec!["ops.cedar:no-pay"]);
        }
        other => unreachable!("{other:?}"),
    }
    assert_ne!(
        p.digest(),
        engine().digest(),
        "policy digest covers operator files"
    );

    let bad_attr = r#"permit(principal, action, resource) when { context.no_such_attr };"#;
    let err = CedarPolicy::load(&[("bad.cedar".into(), bad_attr.into())])
        .err()
        .map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("validate")));
    let err = CedarPolicy::load(&[("broken.cedar".into(), "permit(".into())])
        .err()
        .map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("broken.cedar")));
}

#[test]
fn digest_is_stable() {
    assert_eq!(engine().digest(), engine().digest());
    assert_eq!(engine().digest().len(), 64);
}

/// Issue 11 item 5: a destructive or financial effect needs a trusted confirmation unless the
/// task grants the tool, even when every target is anchored.
#[test]
fn destructive_or_financial_effects_need_a_grant() {
    for (destructive, financial) in [(true, false), (false, true), (true, true)] {
        let ungranted = PolicyRequest {
            destructive,
            financial,
            targets: vec![target(true)],
            ..req(EffectClass::Effect)
        };
        assert!(
            matches!(engine().decide(&ungranted), PolicyDecision::Confirm { .. }),
            "destructive={destructive} financial={financial} without a grant must ask"
        );
        let granted = PolicyRequest {
            granted: true,
            ..ungranted.clone()
        };
        assert!(
            matches!(engine().decide(&granted), PolicyDecision::Allow { .. }),
            "positive control: granted and anchored runs"
        );
        let granted_unanchored = PolicyRequest {
            targets: vec![target(false)],
            ..granted
        };
        assert!(
            matches!(
                engine().decide(&granted_unanchored),
                PolicyDecision::Confirm { .. }
            ),
            "a grant does not anchor a target"
        );
    }
}

/// Issue 11 item 3: a handle of any sensitivity flows into a store sink only when its record
/// names the sink.
#[test]
fn store_sinks_refuse_unnamed_handles() {
    let medium = HandleFact {
        label: "email".into(),
        sensitivity: Sensitivity::Medium,
        sink_allowed: false,
    };
    let store = PolicyRequest {
        sink: SinkKind::Store,
        targets: vec![target(true)],
        handles: vec![medium.clone()],
        ..req(EffectClass::Effect)
    };
    assert!(matches!(
        engine().decide(&store),
        PolicyDecision::Deny {
            reason: ReasonCode::HandleSinkForbidden,
            ..
        }
    ));
    let named = PolicyRequest {
        handles: vec![HandleFact {
            sink_allowed: true,
            ..medium
        }],
        ..store
    };
    assert!(
        matches!(engine().decide(&named), PolicyDecision::Allow { .. }),
        "positive control"
    );
}

/// Annotations are read at load: a misspelt `@reason` or an `@confirm` that is neither
/// `"true"` nor `"false"` stops the load and names the policy (before, the first silently
/// became `policy_deny` and the second silently meant "no confirmation").
#[test]
fn unknown_annotation_values_are_refused_at_load() {
    let typo = r#"@id("no-pay") @reason("policy_dney") forbid(principal, action, resource == Tool::"office__pay_invoice");"#;
    let err = CedarPolicy::load(&[("ops.cedar".into(), typo.into())])
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("ops.cedar:no-pay") && e.contains("policy_dney")),
        "{err:?}"
    );
    let vague = r#"@id("pay") @confirm("yes") permit(principal, action, resource == Tool::"office__pay_invoice");"#;
    let err = CedarPolicy::load(&[("ops.cedar".into(), vague.into())])
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("ops.cedar:pay") && e.contains("yes")),
        "{err:?}"
    );
    // Positive control: the accepted spellings load and act.
    let ok = r#"@id("pay") @confirm("true") permit(principal, action == Action::"effect", resource == Tool::"office__pay_invoice");
@id("quiet") @confirm("false") permit(principal, action == Action::"read", resource);
@id("nope") @reason("unknown_tool") forbid(principal, action, resource == Tool::"office__wipe");"#;
    let p = match CedarPolicy::load(&[("ops.cedar".into(), ok.into())]) {
        Ok(p) => p,
        Err(e) => unreachable!("{e}"),
    };
    let mut r = req(EffectClass::Effect);
    r.tool = "pay_invoice".into();
    r.targets = vec![target(true)];
    assert!(
        matches!(p.decide(&r), PolicyDecision::Confirm { .. }),
        "{:?}",
        p.decide(&r)
    );
    r.tool = "wipe".into();
    assert!(matches!(
        p.decide(&r),
        PolicyDecision::Deny {
            reason: ReasonCode::UnknownTool,
            ..
        }
    ));
}

/// The typed context matches the schema for every shape of facts: the evaluation never
/// errors (an error would be a deny for effects and a skipped policy for reads).
#[test]
fn typed_context_validates_against_the_schema() {
    let p = engine();
    for effect in [EffectClass::Read, EffectClass::Effect] {
        for sink in [SinkKind::Egress, SinkKind::Store] {
            let mut r = req(effect);
            r.sink = sink;
            r.targets = vec![target(true), target(false)];
            r.handles = vec![HandleFact {
                label: "iban".into(),
                sensitivity: Sensitivity::High,
                sink_allowed: false,
            }];
            r.caller = "caller with \"quotes\" and ::".into();
            r.tool = "tool::\"odd\"".into();
            assert!(p.evaluate(&r).is_ok(), "{:?}", p.evaluate(&r));
            r.targets.clear();
            r.handles.clear();
            assert!(p.evaluate(&r).is_ok(), "{:?}", p.evaluate(&r));
        }
    }
}

/// Issue 15: a duplicate `@id` in an operator file is refused at load with a message naming
/// the id; the same policies with distinct ids load (positive control).
#[test]
fn a_duplicate_policy_id_is_refused() {
    let text = "@id(\"no-wipe\")\nforbid(principal, action, resource) when { context.tool == \"wipe\" };\n\n@id(\"no-wipe\")\nforbid(principal, action, resource) when { context.tool == \"erase\" };\n";
    let err = CedarPolicy::load(&[("extra.cedar".into(), text.into())])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("extra.cedar"), "{err}");
    assert!(err.contains("`no-wipe` is used twice"), "{err}");
    let distinct = text.replacen("@id(\"no-wipe\")", "@id(\"no-erase\")", 1);
    assert!(CedarPolicy::load(&[("extra.cedar".into(), distinct)]).is_ok());
}

/// Issue 15: a Cedar syntax error names the file, line and column (Cedar's own message has
/// no position), and every error of the file is reported, not only the first.
#[test]
fn a_syntax_error_carries_line_and_column() {
    let text = "@id(\"ok\")\npermit(principal, action, resource);\n\n@id(\"bad\")\nforbid(principal, action, resource) when { context.tool == };\n";
    let err = CedarPolicy::load(&[("extra.cedar".into(), text.into())])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("extra.cedar"), "{err}");
    assert!(err.contains("line 5, column "), "{err}");
}
