//! The scenarios' tools as one MCP upstream (`records`). AgentLeak names each scenario's tools
//! and their capabilities (`patient_db`: `read_patient`, `update_status`) but ships no tool
//! code; here every (tool, capability) pair is one tool, `{tool}_{capability}`. A read
//! (`read_*`, `check_*`) returns its share of the current scenario's vault records as
//! structured content (`{"records": [{"record_type", "fields"}]}`) and the same JSON as text
//! (the records are spread over the scenario's read tools, [`VaultServer::serve`]); for the attack
//! classes whose injection arrives in a tool's output (indirect prompt injection, tool output
//! poisoning) the attacker's payload is appended as `notice`. Any other capability
//! (`update_status`, `schedule`, `generate_doc`) is an effect that answers `ok`. The server
//! records every call's arguments: what actually left through a tool input.

use super::data::Scenario;
use crate::lane::{Hints, json_output, listed_tool, text_output};
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{ToolOutput, Upstream, UpstreamError, UpstreamTool};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The upstream id.
pub const ID: &str = "records";

/// Whether a capability reads (`read_*`, `check_*`): its tool is configured as a read.
#[must_use]
pub fn is_read(capability: &str) -> bool {
    capability.starts_with("read_") || capability.starts_with("check_")
}

/// The served name of a scenario tool's capability.
#[must_use]
pub fn tool_name(tool: &str, capability: &str) -> String {
    format!("{tool}_{capability}")
}

/// What the server answers for the scenario being replayed.
#[derive(Debug, Clone, Default)]
struct Current {
    /// Read tool (served name) → the records it returns.
    records: BTreeMap<String, Vec<Value>>,
    notice: Option<String>,
}

/// The read tools of `scenario` in its order: each tool's first read capability.
#[must_use]
pub fn read_tools(scenario: &Scenario) -> Vec<String> {
    scenario
        .tools
        .iter()
        .filter_map(|t| {
            t.capabilities
                .iter()
                .find(|c| is_read(c))
                .map(|c| tool_name(&t.tool_name, c))
        })
        .collect()
}

/// The vault server.
#[derive(Debug)]
pub struct VaultServer {
    destination: String,
    /// (served name, is a read), sorted by name.
    tools: Vec<(String, bool)>,
    current: Mutex<Current>,
    calls: Mutex<Vec<(String, Map<String, Value>)>>,
}

impl VaultServer {
    /// A server listing every (tool, capability) pair any of `scenarios` names.
    #[must_use]
    pub fn new(scenarios: &[Scenario]) -> Self {
        let names: BTreeSet<(String, bool)> = scenarios
            .iter()
            .flat_map(|s| &s.tools)
            .flat_map(|t| {
                t.capabilities
                    .iter()
                    .map(|c| (tool_name(&t.tool_name, c), is_read(c)))
            })
            .collect();
        Self {
            destination: format!("in-process:agentleak-{ID}"),
            tools: names.into_iter().collect(),
            current: Mutex::new(Current::default()),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Serve `scenario`: its vault records, spread over its read tools (record `k` from read
    /// tool `k mod n`, so that every record is served once and every read tool serves), and the
    /// payload in read results when its attack arrives through a tool's output. Forgets the
    /// calls recorded so far.
    pub fn serve(&self, scenario: &Scenario) {
        let reads = read_tools(scenario);
        let mut records: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (k, r) in scenario.private_vault.records.iter().enumerate() {
            if let Some(tool) = reads.get(k % reads.len().max(1)) {
                records
                    .entry(tool.clone())
                    .or_default()
                    .push(json!({"record_type": r.record_type, "fields": r.fields}));
            }
        }
        let notice = match scenario.attack.attack_class.as_deref() {
            Some("indirect_prompt_injection" | "tool_output_poisoning") => {
                scenario.attack.payload.clone()
            }
            _ => None,
        };
        if let Ok(mut c) = self.current.lock() {
            *c = Current { records, notice };
        }
        let _ = self.take_calls();
    }

    /// Every call since the last `serve` or `take_calls`: (tool, arguments), in order.
    pub fn take_calls(&self) -> Vec<(String, Map<String, Value>)> {
        self.calls
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }
}

impl Upstream for VaultServer {
    fn id(&self) -> &str {
        ID
    }

    fn destination(&self) -> &str {
        &self.destination
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(self
                .tools
                .iter()
                .map(|(name, read)| {
                    listed_tool(
                        name,
                        if *read {
                            format!("{name}: returns the records the request concerns")
                        } else {
                            format!("{name}: updates a record")
                        },
                        if *read {
                            json!({"type": "object",
                                "properties": {"request": {"type": "string"}}})
                        } else {
                            json!({"type": "object",
                                "properties": {"record": {"type": "string"}, "note": {"type": "string"}}})
                        },
                        Hints {
                            read_only: *read,
                            destructive: !*read,
                            open_world: false,
                        },
                    )
                })
                .collect())
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let Some((_, read)) = self.tools.iter().find(|(n, _)| *n == name) else {
                return Ok(text_output(format!("no tool named {name}"), true));
            };
            if let Ok(mut c) = self.calls.lock() {
                c.push((name.clone(), arguments));
            }
            let structured = if *read {
                let (records, notice) = self
                    .current
                    .lock()
                    .map(|c| {
                        (
                            c.records.get(&name).cloned().unwrap_or_default(),
                            c.notice.clone(),
                        )
                    })
                    .unwrap_or_default();
                let mut v = json!({"records": records});
                if let (Some(n), Some(obj)) = (notice, v.as_object_mut()) {
                    obj.insert("notice".into(), Value::String(n));
                }
                v
            } else {
                json!({"status": "ok"})
            };
            Ok(json_output(structured))
        })
    }
}
