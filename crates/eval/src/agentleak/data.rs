//! AgentLeak's scenario set (Yagoubi et al., arXiv 2602.11510; MIT, © 2025 Faouzi El Yagoubi,
//! Ranwa Al Mallah), embedded from `eval/agentleak/data/scenarios_full_1000.jsonl`: 1,000
//! scenarios (504 benign, 496 attacked), each with a private vault of records, the fields the
//! task may use (`allowed_set`), the scenario's tools and, when attacked, the attack's class,
//! payload and target channels. Field names are AgentLeak's own; fields the lane does not use
//! are not read.

use serde::Deserialize;
use serde_json::{Map, Value};

/// `scenarios_full_1000.jsonl`, byte-identical to `Privatris/AgentLeak` at
/// `6a4c9ced740d68ee50f932e48e941aa7b4e2ee7b` (`agentleak_data/datasets/`).
const SCENARIOS: &str = include_str!("../../../../eval/agentleak/data/scenarios_full_1000.jsonl");

/// Errors reading the scenario file.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A line is not the JSON object AgentLeak writes.
    #[error("scenarios_full_1000.jsonl line {line}: {source}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// One agent of a scenario (`agents[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AgentSpec {
    /// `A1`, `A2`, …
    pub agent_id: String,
    /// `assistant`, `coordinator`, `reviewer`, …
    pub role: String,
}

/// `objective`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Objective {
    /// The user's request (what the host sends as the task).
    pub user_request: String,
    /// The privacy rule stated to the agent.
    #[serde(default)]
    pub privacy_instruction: Option<String>,
}

/// One vault record (`private_vault.records[]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Record {
    /// `patient`, `customer`, `provider_note`, …
    pub record_type: String,
    /// The record's fields: strings, numbers, lists of strings.
    pub fields: Map<String, Value>,
    /// `obvious` (values include `CANARY_*` tokens), `realistic` or `semantic`.
    pub canary_tier: String,
}

/// `private_vault`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Vault {
    /// The records.
    pub records: Vec<Record>,
}

/// `allowed_set`: the task's privacy rule as field names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AllowedSet {
    /// Fields the task may disclose.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Fields it must not disclose.
    #[serde(default)]
    pub forbidden_fields: Vec<String>,
}

/// One tool of a scenario (`tools[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ToolSpec {
    /// `patient_db`, `lab_results`, …
    pub tool_name: String,
    /// `read_patient`, `update_status`, …
    pub capabilities: Vec<String>,
}

/// `attack`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attack {
    /// Whether the scenario is attacked (A1/A2) or benign (A0).
    pub enabled: bool,
    /// `direct_prompt_injection`, `role_confusion`, … (`None` when benign).
    #[serde(default)]
    pub attack_class: Option<String>,
    /// `A0`, `A1`, `A2`.
    pub adversary_level: String,
    /// The attacker's text.
    #[serde(default)]
    pub payload: Option<String>,
    /// `final_output`, `inter_agent`, `tool_input`, `tool_output`, `memory_write` (the set
    /// also defines `log` and `artifact`; no row of this file targets them).
    #[serde(default)]
    pub target_channels: Vec<String>,
}

/// `evaluation`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Evaluation {
    /// The scenario's `CANARY_*` tokens.
    #[serde(default)]
    pub canaries: Vec<String>,
}

/// One scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Scenario {
    /// `agentleak_hea_00001`, …
    pub scenario_id: String,
    /// `healthcare`, `finance`, `legal`, `corporate`.
    pub vertical: String,
    /// The agents (1 to 3).
    pub agents: Vec<AgentSpec>,
    /// The task.
    pub objective: Objective,
    /// The private vault.
    pub private_vault: Vault,
    /// The privacy rule.
    pub allowed_set: AllowedSet,
    /// The tools.
    pub tools: Vec<ToolSpec>,
    /// The attack.
    pub attack: Attack,
    /// The evaluation block.
    pub evaluation: Evaluation,
}

/// Every scenario, in file order.
///
/// # Errors
/// [`DataError::Parse`] naming the first line that does not parse.
pub fn scenarios() -> Result<Vec<Scenario>, DataError> {
    SCENARIOS
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| DataError::Parse {
                line: i + 1,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_has_the_published_counts() {
        let s = scenarios().unwrap();
        assert_eq!(s.len(), 1000);
        assert_eq!(s.iter().filter(|x| x.attack.enabled).count(), 496);
        assert_eq!(
            s.iter()
                .filter(|x| x.attack.enabled && x.attack.target_channels == ["final_output"])
                .count(),
            248
        );
        assert!(
            s.iter()
                .all(|x| !x.tools.is_empty() && !x.private_vault.records.is_empty())
        );
    }
}
