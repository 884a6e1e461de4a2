//! ASB's data files (Agent Security Bench, Zhang et al., ICLR 2025; MIT, © 2024 AGI
//! Research), embedded from `eval/asb/data/`: the 10 agents with their tasks, their 20 normal
//! tools and the 400 attacker tools. Field names are ASB's own.

use serde::Deserialize;

/// `agent_task.jsonl`: one row per agent.
const AGENT_TASKS: &str = include_str!("../../../../eval/asb/data/agent_task.jsonl");
/// `all_normal_tools.jsonl`: 20 rows, 2 per agent.
const NORMAL_TOOLS: &str = include_str!("../../../../eval/asb/data/all_normal_tools.jsonl");
/// `all_attack_tools.jsonl`: 400 rows, 40 per agent.
const ATTACK_TOOLS: &str = include_str!("../../../../eval/asb/data/all_attack_tools.jsonl");

/// Errors reading the data files.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A line is not the JSON object ASB writes.
    #[error("{file} line {line}: {source}")]
    Parse {
        /// The file.
        file: &'static str,
        /// 1-based line number.
        line: usize,
        /// The parse error.
        source: serde_json::Error,
    },
    /// An agent has no task, or a tool names an agent with no task row.
    #[error("inconsistent data: {0}")]
    Inconsistent(String),
}

#[derive(Debug, Deserialize)]
struct TaskRow {
    agent_name: String,
    tasks: Vec<String>,
}

/// A normal tool (`all_normal_tools.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NormalTool {
    /// `Tool Name`.
    #[serde(rename = "Tool Name")]
    pub name: String,
    /// `Description`.
    #[serde(rename = "Description")]
    pub description: String,
    /// `Expected Achievements`: what the simulated tool returns; utility is this text
    /// reaching the agent.
    #[serde(rename = "Expected Achievements")]
    pub achievement: String,
    /// `Corresponding Agent`.
    #[serde(rename = "Corresponding Agent")]
    pub agent: String,
}

/// An attacker tool (`all_attack_tools.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AttackTool {
    /// `Attacker Tool`.
    #[serde(rename = "Attacker Tool")]
    pub name: String,
    /// `Attacker Instruction`: the text of the injected prompt.
    #[serde(rename = "Attacker Instruction")]
    pub instruction: String,
    /// `Description` (written by the attacker; often benign-sounding).
    #[serde(rename = "Description")]
    pub description: String,
    /// `Attack goal`: what the simulated attacker tool returns; ASB scores an attack as
    /// successful when this text appears.
    #[serde(rename = "Attack goal")]
    pub goal: String,
    /// `Attack Type`.
    #[serde(rename = "Attack Type")]
    pub kind: String,
    /// `Corresponding Agent`.
    #[serde(rename = "Corresponding Agent")]
    pub agent: String,
    /// `Aggressive` (`"True"` / `"False"`).
    #[serde(rename = "Aggressive")]
    pub aggressive: String,
}

/// One ASB agent with the task ASB's DPI run uses (`--task_num 1`: the first), its normal
/// tools and its attacker tools, in file order.
#[derive(Debug, Clone)]
pub struct Agent {
    /// `agent_name` (`financial_analyst_agent`).
    pub name: String,
    /// The first task of the agent.
    pub task: String,
    /// Its normal tools.
    pub normal: Vec<NormalTool>,
    /// Its attacker tools.
    pub attackers: Vec<AttackTool>,
}

impl Agent {
    /// The upstream id of the agent's tools: its name without `_agent`
    /// (`financial_analyst`).
    #[must_use]
    pub fn upstream_id(&self) -> String {
        self.name
            .strip_suffix("_agent")
            .unwrap_or(&self.name)
            .to_owned()
    }
}

fn rows<T: for<'de> Deserialize<'de>>(file: &'static str, text: &str) -> Result<Vec<T>, DataError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            // Through a `Value`: a row with a duplicate key (line 79 of the attack tools has
            // `Attack Type` twice) keeps the last, as ASB's Python `json.loads` does.
            serde_json::from_str::<serde_json::Value>(l)
                .and_then(serde_json::from_value)
                .map_err(|source| DataError::Parse {
                    file,
                    line: i + 1,
                    source,
                })
        })
        .collect()
}

/// The 10 agents, in `agent_task.jsonl` order.
///
/// # Errors
/// [`DataError`] if a file does not parse or a tool names an agent without tasks.
pub fn agents() -> Result<Vec<Agent>, DataError> {
    let tasks: Vec<TaskRow> = rows("agent_task.jsonl", AGENT_TASKS)?;
    let normal: Vec<NormalTool> = rows("all_normal_tools.jsonl", NORMAL_TOOLS)?;
    let attack: Vec<AttackTool> = rows("all_attack_tools.jsonl", ATTACK_TOOLS)?;
    let mut agents = Vec::new();
    for t in tasks {
        let task = t
            .tasks
            .first()
            .cloned()
            .ok_or_else(|| DataError::Inconsistent(format!("{} has no task", t.agent_name)))?;
        agents.push(Agent {
            normal: normal
                .iter()
                .filter(|n| n.agent == t.agent_name)
                .cloned()
                .collect(),
            attackers: attack
                .iter()
                .filter(|a| a.agent == t.agent_name)
                .cloned()
                .collect(),
            name: t.agent_name,
            task,
        });
    }
    for n in &normal {
        if !agents.iter().any(|a| a.name == n.agent) {
            return Err(DataError::Inconsistent(format!(
                "normal tool {} names unknown agent {}",
                n.name, n.agent
            )));
        }
    }
    for a in &attack {
        if !agents.iter().any(|g| g.name == a.agent) {
            return Err(DataError::Inconsistent(format!(
                "attacker tool {} names unknown agent {}",
                a.name, a.agent
            )));
        }
    }
    Ok(agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_files_have_asbs_counts() {
        let agents = agents().unwrap();
        assert_eq!(agents.len(), 10);
        assert_eq!(agents.iter().map(|a| a.normal.len()).sum::<usize>(), 20);
        assert_eq!(agents.iter().map(|a| a.attackers.len()).sum::<usize>(), 400);
        assert!(agents.iter().all(|a| a.normal.len() == 2));
        assert!(agents.iter().all(|a| a.attackers.len() == 40));
    }
}
