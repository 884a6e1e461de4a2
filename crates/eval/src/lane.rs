//! Shared plumbing of the in-process benchmark lanes (issue 17 item 4): one harness shape —
//! a **trusted driver** that configures the gateway and opens each task's session with the
//! envelope a host would send, an **untrusted runtime** that reaches the tools only as an MCP
//! client of the gateway's real front end ([`McpFrontEnd`] over an in-memory pipe), and the
//! benchmark's own scoring on what the upstream recorded and what the runtime received.
//!
//! A lane supplies its upstreams (any [`Upstream`]), a [`GatewayConfig`] and optional extra
//! Cedar policy files, then per case: [`Deployment::runtime`] (open a session, connect a
//! runtime), [`Runtime::call`] (a `tools/call` through the front end: preview, policy, binding,
//! ledger, commit — the product's path), and [`Deployment::decide`] for the simulated human
//! behind the approval API. Nothing here mocks the trusted path; the store is SQLite in a
//! temporary directory and the policy set is the shipped default plus the lane's files.
//!
//! A lane without a gateway (the control) calls the same upstream through [`Direct`], which
//! answers in the same [`CallResult`] shape.
//!
//! A lane scored by a Python package keeps its glue under `eval/<lane>/` with a
//! `requirements.lock`: [`ensure_venv`] creates `eval/<lane>/.venv` from it (again whenever
//! the lock changes) and [`python_jsonl`] runs a script over JSON lines (one case in, one
//! score out). [`splice`] regenerates a lane's section of EVALUATION.md between its markers.
//!
//! The AgentDojo lane (`eval/agentdojo`) has the same shape with its driver in Python and a
//! `secureclaw serve` process, because its runtime is AgentDojo's own Python package: it
//! shares [`harness_dir`] and [`ensure_venv`] from here; its deployment, runtime, scoring and
//! report stay in the driver (AgentDojo's `TaskSuite` is Python and its numbers come from
//! AgentDojo's own `utility()`/`security()`), so it has no [`LaneReport`].

use crate::stack::{ManualClock, StackError, T0, fresh_keys};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::store::SessionRecord;
use secureclaw_gateway::{
    Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec, UpstreamTool,
    UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_server::{McpFrontEnd, SessionSource};
use secureclaw_store::SqliteStore;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Errors of the lane plumbing.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The deployment could not start (directory, keys, store, policy, gateway).
    #[error(transparent)]
    Stack(#[from] StackError),
    /// The operator API refused (open a session, decide an approval).
    #[error("operator operation failed: {0}")]
    Operator(String),
    /// The MCP connection between runtime and front end failed.
    #[error("MCP: {0}")]
    Mcp(String),
    /// The control's direct call to an upstream failed.
    #[error("upstream: {0}")]
    Upstream(String),
    /// Creating the virtualenv or running a Python scorer failed.
    #[error("python: {0}")]
    Python(String),
    /// A lane's harness directory (`eval/<lane>`) was not found.
    #[error("{0}")]
    Harness(String),
}

/// An in-process upstream of a lane, with its id and whether its tools are namespaced
/// (`id__tool`) or exposed under their own names.
#[derive(Clone)]
pub struct LaneUpstream {
    /// Upstream id (`[a-z0-9_-]+`).
    pub id: String,
    /// Expose tools as `id__tool` (`false`: under the server's own names, as `wrap` does).
    pub namespace: bool,
    /// The server.
    pub server: Arc<dyn Upstream>,
}

impl std::fmt::Debug for LaneUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneUpstream")
            .field("id", &self.id)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// One gateway deployment of a lane: temporary SQLite store, fresh keys, the default Cedar
/// set plus the lane's policy files, the lane's configuration and upstreams, a fixed clock.
pub struct Deployment {
    _dir: tempfile::TempDir,
    /// The gateway (the trusted side's handle: sessions, approvals, audit).
    pub gateway: Gateway,
    /// The clock every component of this deployment reads.
    pub clock: ManualClock,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment").finish_non_exhaustive()
    }
}

impl Deployment {
    /// Start a gateway over `upstreams` with `config` and the default policies plus
    /// `extra_policies` (`(file name, Cedar text)`).
    ///
    /// # Errors
    /// [`LaneError::Stack`] naming the part that failed (directory, keys, store, policy,
    /// gateway start — e.g. two visible tools with the same exposed name).
    pub async fn start(
        config: GatewayConfig,
        extra_policies: &[(String, String)],
        upstreams: Vec<LaneUpstream>,
    ) -> Result<Self, LaneError> {
        let dir = tempfile::tempdir().map_err(StackError::TempDir)?;
        let keys = Arc::new(fresh_keys()?);
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("secureclaw.db"), keys.clone())
                .map_err(|e| StackError::Store(e.to_string()))?,
        );
        let policy =
            CedarPolicy::load(extra_policies).map_err(|e| StackError::Policy(e.to_string()))?;
        let specs: Vec<UpstreamSpec> = upstreams
            .iter()
            .map(|u| crate::stack::in_process_spec(&u.id, u.namespace))
            .collect();
        let servers: BTreeMap<String, Arc<dyn Upstream>> =
            upstreams.into_iter().map(|u| (u.id, u.server)).collect();
        let connect = move |spec: &UpstreamSpec| -> Result<Box<dyn Upstream>, UpstreamError> {
            match (servers.get(&spec.id), &spec.transport) {
                (Some(up), UpstreamTransport::Stdio { .. }) => Ok(Box::new(up.clone())),
                _ => Err(UpstreamError::Start {
                    id: spec.id.clone(),
                    message: "not an in-process upstream of this lane".into(),
                }),
            }
        };
        let clock = ManualClock::new(T0);
        let gateway = Gateway::start(
            keys,
            store,
            Arc::new(policy),
            config,
            specs,
            &connect,
            clock.clock(),
        )
        .await
        .map_err(StackError::Gateway)?;
        // Approvals are the lane's simulated user's ([`Deployment::decide`]), over a store in
        // a temporary directory: no `approvals approve` advice in the log.
        gateway.set_approvals_in_process("the lane's simulated user");
        Ok(Self {
            _dir: dir,
            gateway,
            clock,
        })
    }

    /// Trusted side: open a session for `caller` with the task envelope a host would send,
    /// and connect an untrusted runtime to it (an MCP client of the gateway's front end).
    ///
    /// # Errors
    /// [`LaneError::Operator`] if the session is refused, [`LaneError::Mcp`] if the MCP
    /// initialization fails.
    pub async fn runtime(
        &self,
        caller: &str,
        envelope: TaskEnvelope,
    ) -> Result<Runtime, LaneError> {
        let session = self
            .gateway
            .open_session(caller, envelope)
            .await
            .map_err(|e| LaneError::Operator(e.to_string()))?;
        let front = McpFrontEnd::new(self.gateway.clone(), SessionSource::Fixed(session.clone()));
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = front.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = ().serve(client_io).await.map_err(|e| LaneError::Mcp(e.to_string()))?;
        Ok(Runtime { client, session })
    }

    /// Trusted side: the human behind the approval API approves or declines a pending action.
    ///
    /// # Errors
    /// [`LaneError::Operator`] if the gateway refuses the decision.
    pub async fn decide(&self, action_id: &str, approve: bool) -> Result<(), LaneError> {
        self.gateway
            .decide_approval(&ActionId(action_id.to_owned()), approve, "lane-user")
            .await
            .map(|_| ())
            .map_err(|e| LaneError::Operator(e.to_string()))
    }
}

/// What one `tools/call` gave the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult {
    /// The gateway ran the tool; `text` is every text content block the runtime received,
    /// joined by newlines (`tool_error`: the result was an error result).
    Ran {
        /// The text the runtime received.
        text: String,
        /// `isError` of the result.
        tool_error: bool,
    },
    /// Held for a trusted confirmation (`reason`: the recovery's reason code).
    Held {
        /// Reason code (snake case).
        reason: String,
        /// The pending action, for the approval API.
        action_id: Option<String>,
    },
    /// Denied (`reason`: the recovery's reason code, or the MCP error for a refused request).
    Denied {
        /// Reason code (snake case) or error text.
        reason: String,
    },
}

impl CallResult {
    /// Every piece of text the runtime received in this answer (empty when nothing ran).
    #[must_use]
    pub fn text(&self) -> &str {
        match self {
            Self::Ran { text, .. } => text,
            Self::Held { .. } | Self::Denied { .. } => "",
        }
    }
}

/// The untrusted runtime of one session: an MCP client of the gateway and nothing else.
pub struct Runtime {
    client: rmcp::service::RunningService<rmcp::RoleClient, ()>,
    /// The session the trusted driver opened (the runtime never sees more than its id).
    pub session: SessionRecord,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("session", &self.session.id)
            .finish_non_exhaustive()
    }
}

/// The `_meta` key under which a runtime re-issues a call with its approval's action id.
pub const APPROVAL_META: &str = "dev.secureclaw/approval";

/// The string value of `key` in a JSON object, if any.
fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

impl Runtime {
    /// The exposed names of the tools the gateway lists to this runtime.
    ///
    /// # Errors
    /// [`LaneError::Mcp`] if `tools/list` fails.
    pub async fn tool_names(&self) -> Result<Vec<String>, LaneError> {
        let tools = self
            .client
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| LaneError::Mcp(e.to_string()))?;
        Ok(tools.into_iter().map(|t| t.name.to_string()).collect())
    }

    /// Call `tool` with `arguments` through the gateway's MCP front end. A request the front
    /// end refuses with a JSON-RPC error (e.g. an unknown tool) is [`CallResult::Denied`] with
    /// the error text: the tool did not run.
    ///
    /// # Errors
    /// [`LaneError::Mcp`] if the answer is not a complete call result.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallResult, LaneError> {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        self.send(tool, params).await
    }

    /// Re-issue the identical call under the approval `action_id` the trusted side decided
    /// (`_meta` `dev.secureclaw/approval`, as the recovery of a held call says).
    ///
    /// # Errors
    /// As [`Runtime::call`].
    pub async fn call_approved(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        action_id: &str,
    ) -> Result<CallResult, LaneError> {
        let params: CallToolRequestParams = serde_json::from_value(serde_json::json!({
            "name": tool,
            "arguments": arguments,
            "_meta": {APPROVAL_META: action_id},
        }))
        .map_err(|e| LaneError::Mcp(e.to_string()))?;
        self.send(tool, params).await
    }

    /// Call `tool` with `arguments` and return the whole answer as the runtime received it:
    /// the `CallToolResult` as JSON (`content`, `structuredContent`, `isError`, `_meta`), or
    /// `{"error": message}` when the front end refused the request with a JSON-RPC error.
    ///
    /// # Errors
    /// [`LaneError::Mcp`] if the connection fails or the answer is not a complete result.
    pub async fn call_raw(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, LaneError> {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        match self.client.peer().call_tool_once(params).await {
            Ok(CallToolResponse::Complete(r)) => {
                serde_json::to_value(&r).map_err(|e| LaneError::Mcp(e.to_string()))
            }
            Ok(_) => Err(LaneError::Mcp(format!("no complete answer to `{tool}`"))),
            Err(rmcp::ServiceError::McpError(e)) => Ok(json!({"error": e.message.to_string()})),
            Err(e) => Err(LaneError::Mcp(e.to_string())),
        }
    }

    async fn send(
        &self,
        tool: &str,
        params: CallToolRequestParams,
    ) -> Result<CallResult, LaneError> {
        let resp = match self.client.peer().call_tool_once(params).await {
            Ok(r) => r,
            Err(rmcp::ServiceError::McpError(e)) => {
                return Ok(CallResult::Denied {
                    reason: e.message.to_string(),
                });
            }
            Err(e) => return Err(LaneError::Mcp(e.to_string())),
        };
        let CallToolResponse::Complete(r) = resp else {
            return Err(LaneError::Mcp(format!("no complete answer to `{tool}`")));
        };
        let structured = r.structured_content.clone().unwrap_or(Value::Null);
        let status = str_at(&structured, "status");
        let recovery = structured.get("recovery");
        let reason = recovery
            .and_then(|rv| str_at(rv, "reason"))
            .unwrap_or("unknown")
            .to_owned();
        match (status, recovery.is_some()) {
            (Some("pending_confirmation" | "deferred"), true) => Ok(CallResult::Held {
                reason,
                action_id: recovery
                    .and_then(|rv| str_at(rv, "action_id"))
                    .map(str::to_owned),
            }),
            (Some("denied"), true) => Ok(CallResult::Denied { reason }),
            _ => {
                let text: Vec<String> = r
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect();
                Ok(CallResult::Ran {
                    text: text.join("\n"),
                    tool_error: r.is_error == Some(true),
                })
            }
        }
    }

    /// Close the MCP connection.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// The no-gateway control of a lane: the runtime calls the upstream itself, with nothing in
/// between. Answers in the gateway runtime's shape ([`CallResult::Ran`] with the text blocks).
#[derive(Clone)]
pub struct Direct {
    server: Arc<dyn Upstream>,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct").finish_non_exhaustive()
    }
}

impl Direct {
    /// A control runtime over `server`.
    #[must_use]
    pub fn new(server: Arc<dyn Upstream>) -> Self {
        Self { server }
    }

    /// Call `tool` (the upstream's own name) with `arguments`.
    ///
    /// # Errors
    /// [`LaneError::Upstream`] if the upstream fails (a tool error is a result).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallResult, LaneError> {
        let out = self
            .server
            .call_tool(tool.to_owned(), arguments)
            .await
            .map_err(|e| LaneError::Upstream(e.to_string()))?;
        let text: Vec<&str> = out
            .content
            .iter()
            .filter(|c| str_at(c, "type") == Some("text"))
            .filter_map(|c| str_at(c, "text"))
            .collect();
        Ok(CallResult::Ran {
            text: text.join("\n"),
            tool_error: out.is_error,
        })
    }

    /// Call `tool` and return the whole answer in the shape of [`Runtime::call_raw`]
    /// (`content`, `structuredContent` when there is one, `isError`).
    ///
    /// # Errors
    /// [`LaneError::Upstream`] if the upstream fails.
    pub async fn call_raw(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, LaneError> {
        let out = self
            .server
            .call_tool(tool.to_owned(), arguments)
            .await
            .map_err(|e| LaneError::Upstream(e.to_string()))?;
        let mut v = json!({"content": out.content, "isError": out.is_error});
        if let (Some(s), Some(obj)) = (out.structured, v.as_object_mut()) {
            obj.insert("structuredContent".into(), s);
        }
        Ok(v)
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream building blocks (what every lane's MCP server repeats)
// ---------------------------------------------------------------------------------------------

/// A JSON Schema object as the `inputSchema` map (anything but an object gives `{}`).
#[must_use]
pub fn schema(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// MCP tool annotations of a served tool (`readOnlyHint`, `destructiveHint`, `openWorldHint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hints {
    /// `readOnlyHint`.
    pub read_only: bool,
    /// `destructiveHint`.
    pub destructive: bool,
    /// `openWorldHint`.
    pub open_world: bool,
}

/// One listed tool of an in-process upstream (no title, no output schema).
#[must_use]
pub fn listed_tool(
    name: &str,
    description: String,
    input_schema: Value,
    hints: Hints,
) -> UpstreamTool {
    UpstreamTool {
        name: name.to_owned(),
        title: None,
        description: Some(description),
        input_schema: schema(input_schema),
        read_only_hint: hints.read_only,
        destructive_hint: hints.destructive,
        open_world_hint: hints.open_world,
        output_schema: None,
    }
}

/// A tool answer of one text block and no structured content.
#[must_use]
pub fn text_output(text: String, is_error: bool) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": text})],
        structured: None,
        is_error,
    }
}

/// A successful tool answer with `structured` as `structuredContent` and its JSON text as the
/// one text block (what MCP servers with an output schema send).
#[must_use]
pub fn json_output(structured: Value) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": structured.to_string()})],
        structured: Some(structured),
        is_error: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Reports (what every lane's tables, checks and CLI repeat)
// ---------------------------------------------------------------------------------------------

/// One property a run must show (`--check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// The numbers.
    pub detail: String,
}

/// `checks` as the markdown list every generated section ends with (`- ✓ name: detail`).
#[must_use]
pub fn checks_markdown(checks: &[Check]) -> String {
    checks
        .iter()
        .map(|c| {
            format!(
                "- {} {}: {}\n",
                if c.ok { "✓" } else { "✗" },
                c.name,
                c.detail
            )
        })
        .collect()
}

/// `n / d` as a percentage with `decimals` decimals (`–` when `d` is 0).
#[must_use]
pub fn pct(n: usize, d: usize, decimals: usize) -> String {
    if d == 0 {
        "–".into()
    } else {
        format!("{:.decimals$}%", n as f64 * 100.0 / d as f64)
    }
}

/// A markdown table: `header` cells, then one row per `rows` entry (cells as given).
#[must_use]
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", header.join(" | "));
    for _ in header {
        s.push_str(" --- |");
    }
    s.push('\n');
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

/// What the CLI needs of a lane's results to print, save and check them the same way for
/// every lane (`--json`, `--write-evaluation`, `--markdown`, `--check`). A lane implements it
/// on its results type with its report's bodies; the section markers are constants, and the
/// splice into EVALUATION.md is the default method.
pub trait LaneReport {
    /// Marker opening the lane's generated section of EVALUATION.md.
    const BEGIN: &'static str;
    /// Marker closing it.
    const END: &'static str;
    /// Plain-text summary for the terminal.
    fn summary(&self) -> String;
    /// The generated EVALUATION.md section (deterministic: no timings).
    fn markdown(&self) -> String;
    /// The JSON report (with `cases`: every case).
    fn json(&self, cases: bool) -> Value;
    /// The `--check` properties.
    fn checks(&self) -> Vec<Check>;
    /// What ran and how long it took (one line, for stderr).
    fn ran(&self) -> String;
    /// `document` with the lane's generated section (between [`LaneReport::BEGIN`] and
    /// [`LaneReport::END`]) replaced by `section`, appended with its markers when missing.
    fn splice(&self, document: &str, section: &str) -> String {
        splice(document, Self::BEGIN, Self::END, section)
    }
}

fn python_error(what: &str, e: impl std::fmt::Display) -> LaneError {
    LaneError::Python(format!("{what}: {e}"))
}

fn run_status(cmd: &mut Command, what: &str) -> Result<(), LaneError> {
    let st = cmd.status().map_err(|e| python_error(what, e))?;
    if st.success() {
        Ok(())
    } else {
        Err(python_error(what, st))
    }
}

/// The harness directory `eval/<name>` of a lane with Python glue (the directory holding
/// `marker`): `explicit` (`--dir`), else `eval/<name>` under the current directory, else the
/// one in the source tree this binary was built from; canonicalized.
///
/// # Errors
/// [`LaneError::Harness`] if none holds `marker` or the path cannot be resolved.
pub fn harness_dir(
    explicit: Option<&Path>,
    name: &str,
    marker: &str,
) -> Result<PathBuf, LaneError> {
    let candidates = match explicit {
        Some(d) => vec![d.to_owned()],
        None => vec![
            Path::new("eval").join(name),
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../eval")
                .join(name),
        ],
    };
    let dir = candidates
        .into_iter()
        .find(|d| d.join(marker).is_file())
        .ok_or_else(|| {
            LaneError::Harness(format!(
                "cannot find eval/{name}/{marker} (run from the repository root or pass --dir)"
            ))
        })?;
    std::fs::canonicalize(&dir)
        .map_err(|e| LaneError::Harness(format!("cannot resolve `{}`: {e}", dir.display())))
}

/// The Python of `dir/.venv`, created with `python -m venv` and `pip install -r
/// dir/requirements.lock` unless it already holds exactly that lock (a copy of the lock in the
/// virtualenv is the stamp). `what` names the lane in the one progress line on stderr.
///
/// # Errors
/// [`LaneError::Python`] if the lock cannot be read, or `venv` or `pip` fails.
pub fn ensure_venv(dir: &Path, python: &str, what: &str) -> Result<PathBuf, LaneError> {
    let venv = dir.join(".venv");
    let py = venv.join("bin/python");
    let lock_path = dir.join("requirements.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .map_err(|e| python_error(&format!("cannot read `{}`", lock_path.display()), e))?;
    let stamp = venv.join("secureclaw-requirements.lock");
    if py.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str()) {
        return Ok(py);
    }
    eprintln!(
        "secureclaw eval: creating {} ({what}; pinned)",
        venv.display()
    );
    if !py.is_file() {
        run_status(
            Command::new(python).arg("-m").arg("venv").arg(&venv),
            &format!("`{python} -m venv`"),
        )?;
    }
    run_status(
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&lock_path),
        "pip install -r requirements.lock",
    )?;
    std::fs::write(&stamp, lock).map_err(|e| python_error("cannot write the stamp", e))?;
    Ok(py)
}

/// Run `python script` with `lines` on stdin (one JSON object each) and return its stdout's
/// non-empty lines. The script's stderr passes through.
///
/// # Errors
/// [`LaneError::Python`] if it cannot start, exits unsuccessfully, or writes non-UTF-8.
pub fn python_jsonl(
    python: &Path,
    script: &Path,
    lines: &[String],
) -> Result<Vec<String>, LaneError> {
    let what = format!("`{}`", script.display());
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| python_error(&what, e))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| python_error(&what, "no stdin"))?;
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // Written from another thread: the script answers while it reads.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| python_error(&what, e))?;
    match writer.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(python_error(&what, e)),
        Err(_) => return Err(python_error(&what, "the writer thread failed")),
    }
    if !out.status.success() {
        return Err(python_error(&what, out.status));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| python_error(&what, e))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// `document` with the text between `begin` and `end` replaced by `section` (appended with
/// its markers when the markers are missing): how a lane regenerates its part of
/// EVALUATION.md.
#[must_use]
pub fn splice(document: &str, begin: &str, end: &str, section: &str) -> String {
    let block = format!("{begin}\n{section}\n{end}");
    match (document.find(begin), document.find(end)) {
        (Some(a), Some(b)) if a < b => format!(
            "{}{block}{}",
            document.get(..a).unwrap_or(""),
            document.get(b + end.len()..).unwrap_or("")
        ),
        _ => format!("{}\n\n{block}\n", document.trim_end()),
    }
}
