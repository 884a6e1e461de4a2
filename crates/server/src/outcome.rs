//! Rendering of gateway outcomes for the wire (HTTP API JSON and MCP results).

use secureclaw_gateway::CallOutcome;
use serde_json::Value;

/// JSON form of a [`CallOutcome`] (see [`CallOutcome::to_json`]).
#[must_use]
pub fn outcome_json(outcome: &CallOutcome) -> Value {
    outcome.to_json()
}
