//! The trace model: issued trace S, committed trace C, observer projections O_i and marginal
//! exposure Δ_i = O_i(S) \ O_i(C) (Ghost Tool Calls, arXiv 2606.02483 §3, Table 1).
//!
//! A [`TraceEvent`] is what the gateway records about one decided call — only the decision and
//! the fields *as dispatched* (after REWRITE), never the raw pre-commit arguments (assumption
//! A1). Each observer class sees a projection of the events:
//!
//! | observer | sees, per event |
//! |---|---|
//! | provider | events dispatched to it: tool, destination, every dispatched field |
//! | network | events dispatched externally: host, payload size, 100 ms issue-time bucket |
//! | runtime log | every decided event: tool, 20-character summary per dispatched value, decision tag, 100 ms duration bucket |
//! | co-tenant | events dispatched externally: cache key over (tool, fields), issue-time bucket |
//! | auditor | every decided event: tool, decision tag, dispatched fields |
//!
//! O_i(C) is the committed-only counterfactual, computed as the projection of the committed
//! events only (mode `committed`, or a promoted branch). Timing of promoted events is taken as
//! issued, so it cancels: the timing perturbation that speculation causes on promoted events
//! is not counted (a documented simplification of the paper's "pre-commit disclosure").
//! Δ_i is a multiset difference (paper §2.18 item 20, field-level form).

use crate::contract::{BranchState, BranchTable, Mode, Observer};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Where an event went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    /// Not dispatched (deferred, blocked, abandoned).
    None,
    /// Sent to the real provider.
    Provider,
    /// Run by a local tool inside the trusted boundary (effect class pure-local or
    /// local-read): no external observer.
    Local,
    /// Answered by the trusted local substitute (SHADOW).
    Substitute,
}

/// One decided event as recorded by the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Sequence number within the task.
    pub seq: u64,
    /// Branch id, if the runtime named one.
    pub branch: Option<String>,
    /// Execution mode at decision time (a promoted deferral is re-decided as `committed`).
    pub mode: Mode,
    /// `upstream__tool`.
    pub tool: String,
    /// Destination endpoint.
    pub destination: String,
    /// Host part of the destination (or the command for stdio upstreams).
    pub host: String,
    /// Decision tag (`allow`, `rewrite`, `shadow`, `defer`, `block`, plus the reason for the
    /// last two: `defer:low_confidence`).
    pub decision: String,
    /// Where it went.
    pub dispatch: Dispatch,
    /// Fields as dispatched (JSON Pointer, text); empty unless dispatched.
    pub fields: Vec<(String, String)>,
    /// Payload size in bytes as dispatched (0 if not dispatched).
    pub payload_bytes: u64,
    /// Issue time, milliseconds since the task started.
    pub issued_ms: u64,
    /// Time to result, milliseconds (0 if not dispatched).
    pub duration_ms: u64,
}

impl TraceEvent {
    /// Whether the event belongs to the committed trace C under `branches`.
    #[must_use]
    pub fn committed(&self, branches: &BranchTable) -> bool {
        self.mode == Mode::Committed
            || self
                .branch
                .as_deref()
                .is_some_and(|b| branches.state(b) == BranchState::Promoted)
    }
}

/// One item of an observer's projection. Ordered and hashable so projections are multisets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Observation {
    /// The provider saw a call to `tool` at `destination`.
    Call {
        /// `upstream__tool`.
        tool: String,
        /// Endpoint.
        destination: String,
    },
    /// The provider (or auditor) saw a field value.
    Field {
        /// `upstream__tool`.
        tool: String,
        /// JSON Pointer.
        path: String,
        /// Text as dispatched.
        value: String,
    },
    /// The network saw a flow.
    Flow {
        /// Host.
        host: String,
        /// Payload bytes.
        bytes: u64,
        /// Issue time bucket (100 ms).
        bucket: u64,
    },
    /// A runtime-log line.
    LogLine {
        /// `upstream__tool`.
        tool: String,
        /// Per-value summaries, at most 20 characters each.
        summary: Vec<String>,
        /// Decision tag.
        decision: String,
        /// Duration bucket (100 ms).
        duration_bucket: u64,
    },
    /// A shared-cache key with its issue bucket.
    CacheKey {
        /// First 16 hex digits of SHA-256 over (tool, fields).
        key: String,
        /// Issue time bucket (100 ms).
        bucket: u64,
    },
    /// An audit record.
    AuditRecord {
        /// `upstream__tool`.
        tool: String,
        /// Decision tag.
        decision: String,
    },
}

fn cache_key(e: &TraceEvent) -> String {
    let mut h = Sha256::new();
    h.update(e.tool.as_bytes());
    for (p, v) in &e.fields {
        h.update([0]);
        h.update(p.as_bytes());
        h.update([0]);
        h.update(v.as_bytes());
    }
    hex::encode(h.finalize()).chars().take(16).collect()
}

fn summary20(v: &str) -> String {
    v.chars().take(20).collect()
}

/// O_i(events): the projection of `events` for observer `i` (paper Table 1), as a list in
/// event order.
#[must_use]
pub fn project<'a>(
    observer: Observer,
    events: impl IntoIterator<Item = &'a TraceEvent>,
) -> Vec<Observation> {
    let mut out = Vec::new();
    for e in events {
        let external = e.dispatch == Dispatch::Provider;
        match observer {
            Observer::Provider if external => {
                out.push(Observation::Call {
                    tool: e.tool.clone(),
                    destination: e.destination.clone(),
                });
                out.extend(e.fields.iter().map(|(p, v)| Observation::Field {
                    tool: e.tool.clone(),
                    path: p.clone(),
                    value: v.clone(),
                }));
            }
            Observer::Network if external => out.push(Observation::Flow {
                host: e.host.clone(),
                bytes: e.payload_bytes,
                bucket: e.issued_ms / 100,
            }),
            Observer::CoTenant if external => out.push(Observation::CacheKey {
                key: cache_key(e),
                bucket: e.issued_ms / 100,
            }),
            Observer::RuntimeLog => out.push(Observation::LogLine {
                tool: e.tool.clone(),
                summary: e.fields.iter().map(|(_, v)| summary20(v)).collect(),
                decision: e.decision.clone(),
                duration_bucket: e.duration_ms / 100,
            }),
            Observer::Auditor => {
                out.push(Observation::AuditRecord {
                    tool: e.tool.clone(),
                    decision: e.decision.clone(),
                });
                out.extend(e.fields.iter().map(|(p, v)| Observation::Field {
                    tool: e.tool.clone(),
                    path: p.clone(),
                    value: v.clone(),
                }));
            }
            _ => {}
        }
    }
    out
}

/// Multiset difference `a \ b`, keeping `a`'s order.
#[must_use]
pub fn difference(a: Vec<Observation>, b: &[Observation]) -> Vec<Observation> {
    let mut counts: BTreeMap<&Observation, usize> = BTreeMap::new();
    for o in b {
        *counts.entry(o).or_default() += 1;
    }
    let mut out = Vec::new();
    for o in a {
        match counts.get_mut(&o) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push(o),
        }
    }
    out
}

/// Exposure of one observer for one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverExposure {
    /// Observer class.
    pub observer: Observer,
    /// |O_i(S)|.
    pub issued: usize,
    /// |O_i(C)|.
    pub committed: usize,
    /// Δ_i = O_i(S) \ O_i(C).
    pub marginal: Vec<Observation>,
}

/// Marginal exposure of every observer class for one task's trace (paper §3).
#[must_use]
pub fn exposure(events: &[TraceEvent], branches: &BranchTable) -> Vec<ObserverExposure> {
    let committed: Vec<&TraceEvent> = events.iter().filter(|e| e.committed(branches)).collect();
    Observer::ALL
        .iter()
        .map(|&observer| {
            let s = project(observer, events);
            let c = project(observer, committed.iter().copied());
            let issued = s.len();
            ObserverExposure {
                observer,
                issued,
                committed: c.len(),
                marginal: difference(s, &c),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, branch: &str, mode: Mode, tool: &str, q: &str, t: u64) -> TraceEvent {
        TraceEvent {
            seq,
            branch: Some(branch.into()),
            mode,
            tool: tool.into(),
            destination: format!("https://{tool}.example/api"),
            host: format!("{tool}.example"),
            decision: "allow".into(),
            dispatch: Dispatch::Provider,
            fields: vec![("/q".into(), q.into())],
            payload_bytes: q.len() as u64,
            issued_ms: t,
            duration_ms: 40,
        }
    }

    /// The paper's worked trace (Appendix A.1): e1 promoted, e2 and e3 abandoned ⇒
    /// Δ_provider = {e2, e3}.
    #[test]
    fn lease_example_marginal_exposure() {
        let events = vec![
            ev(
                1,
                "b1",
                Mode::Speculative,
                "search__web_search",
                "tenant rights lease termination penalty",
                100,
            ),
            ev(
                2,
                "b2",
                Mode::Speculative,
                "search__web_search",
                "available apartments near me",
                150,
            ),
            ev(
                3,
                "b3",
                Mode::Speculative,
                "loans__rates",
                "current personal loan rates",
                250,
            ),
        ];
        let mut branches = BranchTable::default();
        branches.settle("b1", BranchState::Promoted).unwrap();
        branches.settle("b2", BranchState::Abandoned).unwrap();
        branches.settle("b3", BranchState::Abandoned).unwrap();
        let x = exposure(&events, &branches);
        let prov = x.iter().find(|o| o.observer == Observer::Provider).unwrap();
        assert_eq!(prov.issued, 6);
        assert_eq!(prov.committed, 2);
        let expected: Vec<Observation> = project(Observer::Provider, &events[1..]);
        assert_eq!(prov.marginal, expected);
        // Network: two flows (e2, e3).
        let net = x.iter().find(|o| o.observer == Observer::Network).unwrap();
        assert_eq!(net.marginal.len(), 2);
    }

    #[test]
    fn difference_is_a_multiset_difference() {
        let a = Observation::AuditRecord {
            tool: "t".into(),
            decision: "allow".into(),
        };
        let b = Observation::AuditRecord {
            tool: "u".into(),
            decision: "allow".into(),
        };
        let d = difference(
            vec![a.clone(), a.clone(), b.clone()],
            std::slice::from_ref(&a),
        );
        assert_eq!(d, vec![a, b]);
    }

    #[test]
    fn shadowed_and_undispatched_events_reach_no_provider() {
        let mut e = ev(1, "b", Mode::Speculative, "s__q", "x", 0);
        e.dispatch = Dispatch::Substitute;
        e.fields.clear();
        let mut d = ev(2, "b", Mode::Speculative, "s__q", "y", 0);
        d.dispatch = Dispatch::None;
        d.fields.clear();
        for o in [Observer::Provider, Observer::Network, Observer::CoTenant] {
            assert!(project(o, [&e, &d]).is_empty());
        }
        assert_eq!(project(Observer::RuntimeLog, [&e, &d]).len(), 2);
    }
}
