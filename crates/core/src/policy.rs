//! The policy-engine interface and the facts it decides on (DESIGN.md §3 "Policy").
//!
//! Labels are computed here in Rust (effect class, anchoring of each target, handle
//! sensitivities and sink permissions) and handed to the engine as a [`PolicyRequest`]; the
//! engine (Cedar, in `secureclaw-policy`) turns them into a [`PolicyDecision`]. A deny is a
//! decision, not an error; an engine that fails to evaluate must answer deny.

use crate::handle::{Sensitivity, SinkKind};
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

/// Where a target's value came from, and so what vouches for it (DESIGN.md §3 "Targets,
/// anchoring and provenance"). Recorded in the decision audit record, the approval record and
/// the approval display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// Named in the task envelope (request text or its trusted targets).
    Task,
    /// In the operator's trusted-targets list.
    Operator,
    /// A handle from a field the operator declared authoritative, read by an anchored read.
    AuthoritativeField {
        /// The read it came from (`upstream__tool`).
        source: String,
    },
    /// An entry of the upstream's own directory (a channel or member listing the operator
    /// declared authoritative with `[[gateway.directory]]`, [`crate::classify::DirectoryRule`])
    /// that a read of this session returned; it anchors targets of that upstream's tools that
    /// are not `egress` sinks.
    Directory {
        /// The upstream whose directory lists it.
        upstream: String,
    },
    /// A handle to a value found in free text or in a field that does not vouch for it.
    FreeText {
        /// The read it came from (`upstream__tool`).
        source: String,
    },
    /// Written by the runtime itself (neither named by the user nor carried by a handle).
    Literal,
    /// Names a protected object: one whose content this session saw only as handles, or into
    /// which a handle was resolved (see [`crate::protect`]). Never anchors, whatever else
    /// names it: a change to it needs a trusted confirmation.
    ProtectedObject,
    /// Names an object this session has neither read nor written, for a tool whose result
    /// depends on the object's existing content (an edit that must match old text, a dry
    /// run: [`crate::protect`], "objects the session has not seen"). Its content is unknown,
    /// so it is treated as possibly protected: never anchors until the session reads it.
    UnreadObject,
}

impl Provenance {
    /// Whether this provenance anchors a target.
    #[must_use]
    pub fn anchors(&self) -> bool {
        matches!(
            self,
            Provenance::Task
                | Provenance::Operator
                | Provenance::AuthoritativeField { .. }
                | Provenance::Directory { .. }
        )
    }
}

/// One effect target and whether it is anchored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFact {
    /// Argument name (for a target found inside a nested object, the key it sits under; for
    /// an identifier used as an object key, that key's parent field).
    pub field: String,
    /// Anchored by the task envelope, operator list or an anchored handle.
    pub anchored: bool,
    /// The value was a handle.
    pub via_handle: bool,
    /// Where the value came from.
    pub provenance: Provenance,
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
    /// Operator configuration or the shipped catalog marks the tool financial (payments,
    /// transfers).
    pub financial: bool,
    /// The task envelope grants this tool (`granted_tools`): a destructive or financial effect
    /// the user asked for runs without a further confirmation when its targets are anchored.
    pub granted: bool,
    /// Whether the tool sends data out or stores it.
    pub sink: SinkKind,
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

    /// Some handle may not flow to this sink: a `high` one into any sink its record does not
    /// name, or any handle into a store sink its record does not name
    /// ([`crate::handle::HandleRecord::sink_allowed`]).
    #[must_use]
    pub fn handle_sink_violation(&self) -> bool {
        self.handles.iter().any(|h| {
            !h.sink_allowed && (h.sensitivity == Sensitivity::High || self.sink == SinkKind::Store)
        })
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
