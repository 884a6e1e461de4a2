//! Rendering of gateway outcomes for the wire (HTTP API JSON and MCP results).

use secureclaw_gateway::CallOutcome;
use serde_json::{Value, json};

/// JSON form of a [`CallOutcome`]:
/// `{"status":"completed","content":[…],"structured_content":…,"is_error":…,"action_id":…}`,
/// `{"status":"pending_confirmation","recovery":{…}}` or `{"status":"denied","recovery":{…}}`.
#[must_use]
pub fn outcome_json(outcome: &CallOutcome) -> Value {
    match outcome {
        CallOutcome::Completed { output, action_id } => json!({
            "status": "completed",
            "content": output.content,
            "structured_content": output.structured,
            "is_error": output.is_error,
            "action_id": action_id,
        }),
        CallOutcome::Pending(r) => json!({"status": "pending_confirmation", "recovery": r}),
        CallOutcome::Denied(r) => json!({"status": "denied", "recovery": r}),
    }
}
