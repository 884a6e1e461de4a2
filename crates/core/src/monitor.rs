//! The issue-time monitor: one labeled call in, the verdict and the arguments to dispatch out
//! (Ghost Tool Calls, arXiv 2606.02483 §4 and Appendix A; DESIGN.md §3).
//!
//! This is the single place where `D(e, κ)` ([`decide`]), the REWRITE transformations
//! ([`Labeler::rewrite`]), the relabel-and-check of assumption A3 ([`check_rewrite`], with
//! rewritten fields relabeled in their sensitive context: [`Labeler::relabel`]) and the
//! disclosure-budget charge ([`Budget::charge`]) are composed. The gateway's speculative
//! dispatcher and the ghost-call evaluation (`secureclaw eval ghost`) both call it, so what is
//! evaluated is what is deployed.

use crate::contract::{
    BlockReason, Budget, Contract, LabeledEvent, Verdict, check_rewrite, decide, qualified,
};
use crate::labeler::Labeler;
use serde_json::{Map, Value};

/// What the monitor decided for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Issued {
    /// The final verdict: a REWRITE whose result still labels above `max_arg_label` has
    /// become `Block(RewriteInsufficient)`.
    pub verdict: Verdict,
    /// The arguments to dispatch: rewritten for REWRITE, the originals otherwise (callers
    /// dispatch only on ALLOW or REWRITE).
    pub arguments: Map<String, Value>,
}

/// Decide one call at issue time.
///
/// `event` is the labeler's label vector for `arguments` (callers may perturb it, e.g. to
/// study label noise); `kappa` is the contract selected for the call (`None` → BLOCK
/// `no_contract`); `budget` is the task's disclosure budget, charged here after ALLOW or
/// REWRITE of a budgeted pre-commit event. Pure apart from the budget; never panics.
#[must_use]
pub fn issue(
    labeler: &Labeler,
    kappa: Option<&Contract>,
    event: &LabeledEvent,
    arguments: &Map<String, Value>,
    budget: &mut Budget,
) -> Issued {
    issue_with(labeler, kappa, event, arguments, budget, &|e| e)
}

/// [`issue`] with a hook applied to the relabeled event of a REWRITE before the A3 check: a
/// caller that perturbed `event` (e.g. label noise keyed on field values, in the ghost-call
/// evaluation) applies the same perturbation here, so the check sees what a deterministic
/// but imperfect labeler would say about the rewritten arguments.
#[must_use]
pub fn issue_with(
    labeler: &Labeler,
    kappa: Option<&Contract>,
    event: &LabeledEvent,
    arguments: &Map<String, Value>,
    budget: &mut Budget,
    relabel: &dyn Fn(LabeledEvent) -> LabeledEvent,
) -> Issued {
    let Some(k) = kappa else {
        return Issued {
            verdict: Verdict::Block(BlockReason::NoContract),
            arguments: arguments.clone(),
        };
    };
    let mut verdict = decide(event, k, budget.spent);
    let mut args = arguments.clone();
    if let Verdict::Rewrite { fields } = &verdict {
        let q = qualified(&event.upstream, &event.tool);
        args = labeler.rewrite(&q, arguments, fields, k);
        let mut relabeled = labeler.label(
            &event.upstream,
            &event.tool,
            &event.destination,
            event.effect,
            &args,
            event.mode,
            event.confidence,
        );
        // A rewritten field whose original content was sensitive is judged in that context:
        // what the rewrite left behind (a modifier, a rare word, "my …") still identifies it
        // (issue 18 item 2; the rewriter applies the same rule before generalizing).
        for f in &mut relabeled.fields {
            if fields.contains(&f.path) {
                let original = event
                    .fields
                    .iter()
                    .find(|g| g.path == f.path)
                    .and_then(|g| g.label);
                let again = labeler.relabel(original, &f.value);
                f.label = f.label.map(|l| l.max(again));
            }
        }
        verdict = check_rewrite(&relabel(relabeled), k, verdict);
    }
    budget.charge(event, &verdict);
    Issued {
        verdict,
        arguments: args,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{EffectLabel, Mode};
    use serde_json::json;

    fn event(labeler: &Labeler, args: &Map<String, Value>, mode: Mode) -> LabeledEvent {
        labeler.label(
            "search",
            "web_search",
            "https://api.duckduckgo.com/",
            Some(EffectLabel::ExternalRead),
            args,
            mode,
            Some(0.9),
        )
    }

    fn labeler() -> Labeler {
        Labeler::new(crate::labeler::LabelerConfig {
            destinations: vec![crate::labeler::DestinationRule {
                pattern: "*".into(),
                label: crate::contract::DestinationLabel::Public,
            }],
            ..Default::default()
        })
    }

    /// One speculative web search through the paper's contract: (outcome, arguments, budget).
    fn speculative(
        q: &str,
        relabel: &dyn Fn(LabeledEvent) -> LabeledEvent,
    ) -> (Issued, Map<String, Value>, Budget) {
        let l = labeler();
        let k = Contract::paper_web_search();
        let args = json!({ "q": q }).as_object().cloned().unwrap();
        let mut budget = Budget::default();
        let ev = event(&l, &args, Mode::Speculative);
        let out = issue_with(&l, Some(&k), &ev, &args, &mut budget, relabel);
        (out, args, budget)
    }

    #[test]
    fn rewrite_dispatches_rewritten_arguments_and_charges_budget() {
        let (out, args, budget) = speculative("penalty for breaking my lease early", &|e| e);
        assert!(
            matches!(out.verdict, Verdict::Rewrite { .. }),
            "{:?}",
            out.verdict
        );
        assert_ne!(out.arguments, args);
        assert!(!out.arguments["q"].as_str().unwrap().contains("lease"));
        assert_eq!(budget.spent, 1);
    }

    /// The relabel hook reaches the A3 check: a relabel that still calls the rewritten field
    /// sensitive blocks the call (the positive control is the test above, identity hook).
    #[test]
    fn relabel_hook_feeds_the_a3_check() {
        let still_sensitive = |mut e: LabeledEvent| {
            for f in &mut e.fields {
                f.label = Some(crate::contract::ArgLabel::Sensitive);
            }
            e
        };
        let (out, _, _) = speculative("penalty for breaking my lease early", &still_sensitive);
        assert_eq!(
            out.verdict,
            Verdict::Block(BlockReason::RewriteInsufficient)
        );
    }

    #[test]
    fn public_call_is_allowed_unchanged_without_charge() {
        let (out, args, budget) = speculative("weather in Paris", &|e| e);
        assert_eq!(out.verdict, Verdict::Allow);
        assert_eq!(out.arguments, args);
        assert_eq!(budget.spent, 0);
    }

    #[test]
    fn rewrite_that_cannot_lower_the_label_blocks() {
        let l = labeler();
        let mut k = Contract::paper_web_search();
        let no_transforms = Labeler::new(crate::labeler::LabelerConfig {
            rewrite: crate::labeler::RewriteConfig {
                redact_entities: false,
                coarsen_dates: crate::labeler::DateCoarsening::Off,
                replace_intent_phrases: false,
                generalize_fields: false,
            },
            ..l.config().clone()
        });
        k.budget = None;
        let args = json!({"q": "my divorce"});
        let args = args.as_object().unwrap();
        let ev = event(&no_transforms, args, Mode::Speculative);
        let out = issue(&no_transforms, Some(&k), &ev, args, &mut Budget::default());
        assert_eq!(
            out.verdict,
            Verdict::Block(BlockReason::RewriteInsufficient)
        );
    }

    /// Issue 18 item 2 at the monitor: the A3 check relabels a rewritten field in its
    /// sensitive context, so a labeler configured not to generalize cannot dispatch the
    /// modifier a rewrite left ("severe [topic] treatment"), which the plain relabel calls public;
    /// a clean rewrite under the same configuration still goes out (positive control).
    #[test]
    fn a3_relabels_rewritten_fields_in_context() {
        let l = labeler();
        let keep = Labeler::new(crate::labeler::LabelerConfig {
            rewrite: crate::labeler::RewriteConfig {
                generalize_fields: false,
                ..crate::labeler::RewriteConfig::default()
            },
            ..l.config().clone()
        });
        let mut k = Contract::paper_web_search();
        k.budget = None;
        let send = |q: &str| {
            let args = json!({ "q": q }).as_object().cloned().unwrap();
            let ev = event(&keep, &args, Mode::Speculative);
            issue(&keep, Some(&k), &ev, &args, &mut Budget::default())
        };
        let out = send("severe depression treatment");
        assert_eq!(
            keep.label_text(out.arguments["q"].as_str().unwrap()),
            crate::contract::ArgLabel::Public,
            "the plain relabel would have let it through"
        );
        assert_eq!(
            out.verdict,
            Verdict::Block(BlockReason::RewriteInsufficient)
        );
        let out = send("tenant rights lease termination penalty");
        assert!(
            matches!(out.verdict, Verdict::Rewrite { .. }),
            "{:?}",
            out.verdict
        );
        assert_eq!(out.arguments["q"], json!("[topic] penalty"));
    }

    #[test]
    fn no_contract_blocks() {
        let l = labeler();
        let args = Map::new();
        let out = issue(
            &l,
            None,
            &event(&l, &args, Mode::Committed),
            &args,
            &mut Budget::default(),
        );
        assert_eq!(out.verdict, Verdict::Block(BlockReason::NoContract));
    }
}
