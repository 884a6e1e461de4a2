//! The policy-engine interface and the facts it decides on (DESIGN.md §3 "Policy").
//!
//! Labels are computed here in Rust (effect class, anchoring of each target, handle
//! sensitivities and sink permissions) and handed to the engine as a [`PolicyRequest`]; the
//! engine (Cedar, in `secureclaw-policy`) turns them into a [`PolicyDecision`]. A deny is a
//! decision, not an error; an engine that fails to evaluate must answer deny.

use crate::handle::Sensitivity;
use crate::recovery::ReasonCode;
use serde::{Deserialize, Serialize};

/// Whether a tool only reads or has effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectClass {
    /// Read-only: by operator configuration, or by the shipped catalog of known servers when
    /// the server also declares `readOnlyHint: true` (the hint alone never makes a read).
    Read,
    /// Anything else; unannotated tools are effectful.
    Effect,
}

impl EffectClass {
    /// `read` or `effect`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EffectClass::Read => "read",
            EffectClass::Effect => "effect",
        }
    }
}

/// One effect target and whether it is anchored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFact {
    /// Argument name.
    pub field: String,
    /// Anchored by the task envelope, operator list or an anchored handle.
    pub anchored: bool,
    /// The value was a handle.
    pub via_handle: bool,
}

/// One handle referenced by the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleFact {
    /// Its label.
    pub label: String,
    /// Its sensitivity.
    pub sensitivity: Sensitivity,
    /// Whether its record allows this sink.
    pub sink_allowed: bool,
}

/// The facts of one call, as the policy sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRequest {
    /// Authenticated caller.
    pub caller: String,
    /// Upstream id.
    pub upstream: String,
    /// Tool name.
    pub tool: String,
    /// Effect class after operator overrides.
    pub effect: EffectClass,
    /// Whether the gateway knows this tool.
    pub known_tool: bool,
    /// Operator configuration or annotations mark the tool destructive.
    pub destructive: bool,
    /// The operator declared this tool's target fields explicitly (an empty declaration
    /// means "this tool has no targets", e.g. saving a draft).
    pub targets_declared: bool,
    /// Effect targets found in the arguments.
    pub targets: Vec<TargetFact>,
    /// Handles referenced by the arguments.
    pub handles: Vec<HandleFact>,
    /// `true` when deciding `tools/list` visibility (no arguments yet).
    pub listing: bool,
}

impl PolicyRequest {
    /// Every target anchored (vacuously true with no targets).
    #[must_use]
    pub fn all_targets_anchored(&self) -> bool {
        self.targets.iter().all(|t| t.anchored)
    }

    /// Some `high` handle may not flow to this sink.
    #[must_use]
    pub fn handle_sink_violation(&self) -> bool {
        self.handles
            .iter()
            .any(|h| h.sensitivity == Sensitivity::High && !h.sink_allowed)
    }
}

/// The engine's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum PolicyDecision {
    /// Allowed as is.
    Allow {
        /// Ids of the policies that allowed it.
        policies: Vec<String>,
    },
    /// Allowed once a trusted confirmer approves.
    Confirm {
        /// Ids of the policies that asked for confirmation.
        policies: Vec<String>,
    },
    /// Denied.
    Deny {
        /// Reason code (from the deciding policy's `@reason` annotation, else `policy_deny`).
        reason: ReasonCode,
        /// Ids of the deciding policies (empty: no permit matched).
        policies: Vec<String>,
    },
}

/// A policy engine. Implementations must be deterministic for a fixed policy set.
pub trait PolicyEngine: Send + Sync {
    /// Decide one call. Evaluation errors must produce [`PolicyDecision::Deny`].
    fn decide(&self, request: &PolicyRequest) -> PolicyDecision;

    /// Digest of the policy set in force (hex), bound into every canonical request.
    fn digest(&self) -> String;
}
