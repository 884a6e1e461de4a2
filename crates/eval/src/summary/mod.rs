//! # The summary operator's Δ (`secureclaw eval summary`, issue 17 item 3)
//!
//! SecureClaw paper Appendix B (Theorem 3, "Measurement protocol for the deployed summary
//! operator", Table 21): a runtime that only sees what the summary operator D released learns
//! about a protected value at most Δ(D(v₀), D(v₁)) per read. For a deterministic D each pair
//! (v₀, v₁) gives Δ ∈ {0, 1}: 1 when the two released views differ in any way the runtime can
//! see.
//!
//! **The operator measured is the product's read path**, not a re-implementation: each side of
//! a pair is one session of an untrusted runtime connected to the real gateway over MCP
//! ([`crate::lane`]); its read goes through the gateway's read path (classification, the
//! vault, handle minting and reuse, D over `structuredContent` and every text block) and the
//! released view is the **whole** `CallToolResult` the runtime received (content,
//! `structuredContent`, `isError`, `_meta`), for every read of the session (earlier reads
//! included). Handle ids are random per read (a 16-byte nonce under a keyed MAC), so the views
//! are compared after renaming every handle id by its order of first appearance in the
//! session's transcript (`hdl_em_<32 chars>` → `hdl_em_#1`): the kind tag, equality between
//! handles and everything else stay as released. Nothing else is normalized.
//!
//! Each pair also runs its side 0 twice: a pair whose side 0 is not reproducible (two
//! sessions of the same input give different normalized views, e.g. an object whose keys are
//! handles is serialized in the handles' random order) is reported as **nondeterministic**,
//! not as Δ = 1 or 0.
//!
//! Operators ([`Operator`]): the identity (control: the runtime calls the upstream itself; it
//! must show Δ = 1 on every pair), the gateway's default D (the detectors alone), and D with
//! operator rules: `[[gateway.classify]]` field rules written from the tools' semantics
//! (content fields of mail, bank and calendar results protected).
//!
//! The same module measures the **recall of the protected-field classification** against
//! AgentLeak's scenario annotations ([`recall`]): every value the scenario marks sensitive (a
//! `CANARY_*` token, or a value of a field its privacy rule forbids), served as the scenario's
//! vault records through the gateway: handled (replaced) or released in plaintext.

pub mod pairs;
pub mod report;

use crate::agentleak;
use crate::lane::{
    Deployment, Direct, Hints, LaneError, LaneUpstream, json_output, listed_tool, text_output,
};
use pairs::{Answer, Category, Pair, Read, TOOLS};
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::classify::FieldRule;
use secureclaw_core::handle::Sensitivity;
use secureclaw_core::policy::EffectClass;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    GatewayConfig, ToolOutput, ToolRule, Upstream, UpstreamError, UpstreamTool,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The upstream id of the pair server.
pub const ID: &str = "office";

/// The caller every session is opened for.
pub const CALLER: &str = "summary-user";

/// Errors of the lane.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// The lane plumbing.
    #[error(transparent)]
    Lane(#[from] LaneError),
    /// AgentLeak's scenario file (recall).
    #[error(transparent)]
    AgentLeak(#[from] agentleak::AgentLeakError),
}

/// The summary operator a view is released by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// Control: no gateway, the upstream's answer as is (D = identity).
    Identity,
    /// The gateway's default D: the detectors, default caps (M = 8, C = 512) and markers.
    Default,
    /// The default D plus the operator's field rules ([`rules`]).
    Rules,
}

impl Operator {
    /// Every operator, in report order.
    pub const ALL: [Operator; 3] = [Operator::Identity, Operator::Default, Operator::Rules];

    /// Label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Identity => "identity (control)",
            Operator::Default => "default D",
            Operator::Rules => "D + operator rules",
        }
    }

    /// The gateway configuration (`None` for the identity).
    #[must_use]
    pub fn config(self) -> Option<GatewayConfig> {
        let mut c = GatewayConfig::default();
        for t in TOOLS {
            c.tools.push(ToolRule {
                tool: format!("{ID}__{t}"),
                effect: Some(EffectClass::Read),
                ..ToolRule::default()
            });
        }
        match self {
            Operator::Identity => None,
            Operator::Default => Some(c),
            Operator::Rules => {
                c.classify = rules();
                Some(c)
            }
        }
    }
}

/// The operator's classification rules for the pair server's tools, written from what each
/// tool returns (not from the categories): the content fields of an e-mail (sender name,
/// subject, body, labels, date), of a transaction (counterparty, amount, date, memo, line
/// items, account number, per-payee amounts) and of an event (title, start, location,
/// description), also inside search results. Identifier fields (addresses, IBANs) are left to
/// the detectors. A plain-text file has no structured fields a rule could name.
#[must_use]
pub fn rules() -> Vec<FieldRule> {
    let fields: [(&str, &[&str]); 3] = [
        (
            "mail_*",
            &[
                "from_name",
                "subject",
                "body",
                "labels",
                "date",
                "unread_by_sender",
            ],
        ),
        (
            "bank_*",
            &[
                "counterparty",
                "amount",
                "date",
                "memo",
                "line_items",
                "account_number",
                "spend_by_payee",
            ],
        ),
        ("calendar_*", &["title", "start", "location", "description"]),
    ];
    let mut out = Vec::new();
    for (tool, names) in fields {
        for name in names {
            for path in [format!("/{name}"), format!("/results/*/{name}")] {
                out.push(FieldRule {
                    upstream: ID.into(),
                    tool: tool.into(),
                    path,
                    label: (*name).to_owned(),
                    sensitivity: Sensitivity::High,
                    allowed_sinks: vec![],
                    anchor: false,
                    identifiers: false,
                });
            }
        }
    }
    out
}

/// The pair server: six read tools whose answers the harness sets before each session
/// (by tool and arguments).
#[derive(Debug, Default)]
pub struct PairServer {
    answers: Mutex<HashMap<(String, String), Answer>>,
}

fn key(tool: &str, arguments: &Map<String, Value>) -> (String, String) {
    (
        tool.to_owned(),
        Value::Object(arguments.clone()).to_string(),
    )
}

impl PairServer {
    /// Serve `reads` (and nothing else).
    pub fn serve(&self, reads: &[&Read]) {
        if let Ok(mut a) = self.answers.lock() {
            *a = reads
                .iter()
                .map(|r| (key(r.tool, &r.arguments), r.answer.clone()))
                .collect();
        }
    }
}

impl Upstream for PairServer {
    fn id(&self) -> &str {
        ID
    }

    fn destination(&self) -> &str {
        "in-process:summary-office"
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(TOOLS
                .iter()
                .map(|t| {
                    let arg = if t.ends_with("search") {
                        "query"
                    } else if t.starts_with("files") {
                        "path"
                    } else {
                        "id"
                    };
                    listed_tool(
                        t,
                        format!("{t}: returns the item the {arg} names"),
                        json!({"type": "object", "properties": {arg: {"type": "string"}}}),
                        Hints {
                            read_only: true,
                            destructive: false,
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
            if !TOOLS.contains(&name.as_str()) {
                return Ok(text_output(format!("no tool named {name}"), true));
            }
            let answer = self
                .answers
                .lock()
                .ok()
                .and_then(|a| a.get(&key(&name, &arguments)).cloned());
            Ok(match answer {
                Some(Answer::Json(v)) => json_output(v),
                Some(Answer::Text(t)) => text_output(t, false),
                None => text_output("not found".into(), true),
            })
        })
    }
}

/// `text` with every handle id renamed by order of first appearance: `hdl_<tag>_<tail>` →
/// `hdl_<tag>_#<n>` (the tag kept). Nothing else changes.
#[must_use]
pub fn normalize_handles(text: &str) -> String {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for r in secureclaw_core::handle::handle_spans(text) {
        let (Some(before), Some(h)) = (text.get(last..r.start), text.get(r.clone())) else {
            continue;
        };
        out.push_str(before);
        let n = ids.len() + 1;
        let n = *ids.entry(h).or_insert(n);
        // The tag: between `hdl_` and the last `_`.
        let tag = h.rsplit_once('_').map_or(h, |(head, _)| head);
        out.push_str(&format!("{tag}_#{n}"));
        last = r.end;
    }
    out.push_str(text.get(last..).unwrap_or(""));
    out
}

/// One pair under one operator.
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    /// `category/n`.
    pub id: String,
    /// Category.
    pub category: Category,
    /// Result shape.
    pub shape: &'static str,
    /// Operator.
    pub operator: Operator,
    /// The two normalized views differ (never set for a failed pair).
    pub delta: bool,
    /// The first read of the pair that failed (an error result, a refused request, a held or
    /// denied call): the pair has no Δ and `--check` fails.
    pub failed: Option<String>,
    /// Side 0 run twice gave the same normalized view.
    pub reproducible: bool,
    /// The normalized views (side 0, side 1), kept for `--json --cases`.
    pub views: [String; 2],
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The first 2 pairs of each category and every tenth scenario of each AgentLeak stratum.
    pub quick: bool,
    /// Operators to run.
    pub operators: Vec<Operator>,
    /// Measure recall against AgentLeak's annotations.
    pub recall: bool,
}

impl Options {
    /// Everything.
    #[must_use]
    pub fn full() -> Self {
        Self {
            quick: false,
            operators: Operator::ALL.to_vec(),
            recall: true,
        }
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Quick subset.
    pub quick: bool,
    /// Every pair under every operator.
    pub pairs: Vec<PairResult>,
    /// Recall per lane (default D, records rule), when measured.
    pub recall: Vec<Recall>,
    /// Wall time (s).
    pub seconds: f64,
}

/// Where a session's reads go.
enum Conn<'a> {
    Direct(&'a Direct),
    Gateway(&'a Deployment),
}

/// Why a read's answer is not a successful read, if it is not: the front end refused the
/// request (`error`), the result is an error result (`isError`), or the gateway held or
/// denied the call (`structuredContent.status`). Two identical failures say nothing about
/// what D releases, so a pair with a failed read has no Δ.
#[must_use]
pub fn read_failure(answer: &Value) -> Option<String> {
    if let Some(e) = answer.get("error") {
        return Some(format!("refused: {}", e.as_str().unwrap_or("error")));
    }
    let status = answer
        .get("structuredContent")
        .and_then(|s| s.get("status"))
        .and_then(Value::as_str);
    if let Some(st @ ("denied" | "pending_confirmation" | "deferred")) = status {
        return Some(format!("gateway: {st}"));
    }
    if answer.get("isError") == Some(&Value::Bool(true)) {
        let text = answer
            .get("content")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|b| b.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("");
        return Some(format!(
            "isError: {}",
            text.chars().take(80).collect::<String>()
        ));
    }
    None
}

/// One session's transcript: every read's whole answer, in order, normalized; and the first
/// failed read (`read i: why`), if any.
struct Transcript {
    view: String,
    failure: Option<String>,
}

/// The normalized transcript of one session: every read's whole answer, in order.
async fn session(
    conn: &Conn<'_>,
    server: &PairServer,
    pair: &Pair,
    side: usize,
) -> Result<Transcript, LaneError> {
    let [left, right] = &pair.sides;
    let target = if side == 1 { right } else { left };
    let reads: Vec<&Read> = pair.before.iter().chain(std::iter::once(target)).collect();
    server.serve(&reads);
    let mut answers = Vec::with_capacity(reads.len());
    match conn {
        Conn::Direct(d) => {
            for r in &reads {
                answers.push(d.call_raw(r.tool, r.arguments.clone()).await?);
            }
        }
        Conn::Gateway(d) => {
            let envelope = TaskEnvelope {
                request: pair.request.clone(),
                ..TaskEnvelope::default()
            };
            let rt = d.runtime(CALLER, envelope).await?;
            let mut out = Ok(());
            for r in &reads {
                match rt.call_raw(r.tool, r.arguments.clone()).await {
                    Ok(v) => answers.push(v),
                    Err(e) => {
                        out = Err(e);
                        break;
                    }
                }
            }
            rt.close().await;
            out?;
        }
    }
    let failure = answers
        .iter()
        .enumerate()
        .find_map(|(i, a)| read_failure(a).map(|why| format!("side {side}, read {i}: {why}")));
    Ok(Transcript {
        view: normalize_handles(&Value::Array(answers).to_string()),
        failure,
    })
}

async fn run_operator(
    op: Operator,
    pairs: &[Pair],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PairResult>, LaneError> {
    let t = std::time::Instant::now();
    let server = Arc::new(PairServer::default());
    let direct;
    let deployment;
    let conn = match op.config() {
        None => {
            direct = Direct::new(server.clone());
            Conn::Direct(&direct)
        }
        Some(config) => {
            deployment = Deployment::start(
                config,
                &[],
                vec![LaneUpstream {
                    id: ID.into(),
                    namespace: false,
                    server: server.clone(),
                }],
            )
            .await?;
            Conn::Gateway(&deployment)
        }
    };
    let mut out = Vec::with_capacity(pairs.len());
    for p in pairs {
        out.push(run_pair(&conn, &server, p, op).await?);
    }
    progress(&format!(
        "{}: {} pairs ({:.1} s)",
        op.as_str(),
        out.len(),
        t.elapsed().as_secs_f64()
    ));
    Ok(out)
}

/// One pair under `op`: side 0, side 1, side 0 again.
async fn run_pair(
    conn: &Conn<'_>,
    server: &PairServer,
    p: &Pair,
    op: Operator,
) -> Result<PairResult, LaneError> {
    let a = session(conn, server, p, 0).await?;
    let b = session(conn, server, p, 1).await?;
    let again = session(conn, server, p, 0).await?;
    let failed = a.failure.or(b.failure).or(again.failure);
    Ok(PairResult {
        id: p.id.clone(),
        category: p.category,
        shape: p.shape,
        operator: op,
        delta: failed.is_none() && a.view != b.view,
        reproducible: a.view == again.view,
        failed,
        views: [a.view, b.view],
    })
}

// ---------------------------------------------------------------------------------------------
// Recall of the classification against AgentLeak's annotations
// ---------------------------------------------------------------------------------------------

/// What the gateway did with one annotated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The value does not occur in plaintext in its released field, and a handle does.
    Handle,
    /// The value occurs in plaintext in its released field.
    Plaintext,
    /// Neither (withheld or cut without a handle).
    Withheld,
}

/// Recall under one classification.
#[derive(Debug, Clone, Serialize)]
pub struct Recall {
    /// `default D` (the detectors) or `records rule`.
    pub lane: String,
    /// Scenarios served.
    pub scenarios: usize,
    /// Annotated values by outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// Field name → (annotated values, released in plaintext).
    pub by_field: BTreeMap<String, (usize, usize)>,
    /// Canary tier → (annotated values, released in plaintext).
    pub by_tier: BTreeMap<String, (usize, usize)>,
}

impl Recall {
    /// Annotated values.
    #[must_use]
    pub fn total(&self) -> usize {
        self.outcomes.values().sum()
    }

    /// Values handled (replaced by a handle) or withheld: not released in plaintext.
    #[must_use]
    pub fn protected(&self) -> usize {
        self.total() - self.outcomes.get(&Outcome::Plaintext).copied().unwrap_or(0)
    }
}

fn scalars(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Array(items) => items.iter().flat_map(scalars).collect(),
        _ => vec![],
    }
}

/// Measure recall under `lane` (AgentLeak's `Detectors` or `Records` configuration: whole
/// results, no caps, so that only the classification decides) over `scenarios`.
async fn recall_lane(
    lane: agentleak::Lane,
    scenarios: &[agentleak::data::Scenario],
) -> Result<Recall, SummaryError> {
    use agentleak::upstream::{self as up, VaultServer};
    let server = Arc::new(VaultServer::new(scenarios));
    let d = Deployment::start(
        lane.config(),
        &[],
        vec![LaneUpstream {
            id: up::ID.into(),
            namespace: false,
            server: server.clone(),
        }],
    )
    .await
    .map_err(SummaryError::Lane)?;
    let mut r = Recall {
        lane: match lane {
            agentleak::Lane::Records => "records rule".into(),
            _ => "default D (detectors)".into(),
        },
        scenarios: scenarios.len(),
        outcomes: BTreeMap::new(),
        by_field: BTreeMap::new(),
        by_tier: BTreeMap::new(),
    };
    for s in scenarios {
        server.serve(s);
        let canaries = agentleak::canaries(s);
        let annotated: std::collections::BTreeSet<&String> = canaries.all().collect();
        let envelope = TaskEnvelope {
            request: s.objective.user_request.clone(),
            ..TaskEnvelope::default()
        };
        let rt = d.runtime(agentleak::CALLER, envelope).await?;
        let reads = up::read_tools(s);
        let n = reads.len().max(1);
        let mut released: Vec<Option<Value>> = vec![None; s.private_vault.records.len()];
        for (t, tool) in reads.iter().enumerate() {
            let answer = rt.call_raw(tool, Map::new()).await;
            let Ok(answer) = answer else { continue };
            let records = answer
                .get("structuredContent")
                .and_then(|v| v.get("records"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (j, rec) in records.into_iter().enumerate() {
                if let Some(slot) = released.get_mut(t + j * n) {
                    *slot = rec.get("fields").cloned();
                }
            }
        }
        rt.close().await;
        for (k, rec) in s.private_vault.records.iter().enumerate() {
            let shown = released.get(k).cloned().flatten();
            for (field, v) in &rec.fields {
                for value in scalars(v) {
                    if !annotated.contains(&value) {
                        continue;
                    }
                    let text = shown
                        .as_ref()
                        .and_then(|f| f.get(field))
                        .map(|f| scalars(f).join("\n"))
                        .unwrap_or_default();
                    let outcome = if text.contains(&value) {
                        Outcome::Plaintext
                    } else if !secureclaw_core::handle::handle_spans(&text).is_empty() {
                        Outcome::Handle
                    } else {
                        Outcome::Withheld
                    };
                    *r.outcomes.entry(outcome).or_default() += 1;
                    let leak = usize::from(outcome == Outcome::Plaintext);
                    let f = r.by_field.entry(field.clone()).or_default();
                    f.0 += 1;
                    f.1 += leak;
                    let t = r.by_tier.entry(rec.canary_tier.clone()).or_default();
                    t.0 += 1;
                    t.1 += leak;
                }
            }
        }
    }
    Ok(r)
}

/// Recall of the default classification and of the records rule against AgentLeak's
/// annotations (all 1,000 scenarios, or the `quick` subset of the AgentLeak lane).
///
/// # Errors
/// [`SummaryError`] if the scenario file or the gateway fails.
pub async fn recall(quick: bool) -> Result<Vec<Recall>, SummaryError> {
    let scenarios = agentleak::selected(quick)?;
    let mut out = Vec::new();
    for lane in [agentleak::Lane::Detectors, agentleak::Lane::Records] {
        out.push(recall_lane(lane, &scenarios).await?);
    }
    Ok(out)
}

/// Run the pairs under every operator of `options`, then (if asked) the recall measurement.
///
/// # Errors
/// [`SummaryError`] if the gateway or the scenario file fails.
pub async fn run(
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Results, SummaryError> {
    let t = std::time::Instant::now();
    let pairs = pairs::pairs(options.quick);
    let mut out = Vec::new();
    for &op in &options.operators {
        out.extend(run_operator(op, &pairs, progress).await?);
    }
    let recall = if options.recall {
        let t = std::time::Instant::now();
        let r = recall(options.quick).await?;
        progress(&format!(
            "recall: {} scenarios × 2 classifications ({:.1} s)",
            r.first().map_or(0, |x| x.scenarios),
            t.elapsed().as_secs_f64()
        ));
        r
    } else {
        Vec::new()
    };
    Ok(Results {
        quick: options.quick,
        pairs: out,
        recall,
        seconds: t.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_ids_are_renamed_by_first_appearance_and_nothing_else_changes() {
        let a = "hdl_em_abcdefghijklmnopqrstuvwxyz234567";
        let b = "hdl_fld_bbcdefghijklmnopqrstuvwxyz234567";
        let text = format!("{{\"x\":\"{b} {a}\",\"y\":\"{a}\",\"z\":\"hdl_em_short\"}}");
        assert_eq!(
            normalize_handles(&text),
            "{\"x\":\"hdl_fld_#1 hdl_em_#2\",\"y\":\"hdl_em_#2\",\"z\":\"hdl_em_short\"}"
        );
    }
    /// A pair whose reads fail (here: a tool the upstream does not have) gives two identical
    /// error views; it must be reported as failed, never as Δ = 0 (trial of issue 17).
    /// Positive control: a generated pair reads successfully and the identity control sees
    /// its difference.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_pair_whose_read_failed_has_no_delta() {
        let good = pairs::pairs(true).into_iter().next().expect("a pair");
        let mut bad = good.clone();
        bad.id = "broken/0".into();
        for side in &mut bad.sides {
            side.tool = "no_such_tool";
        }
        for op in [Operator::Identity, Operator::Default] {
            let out = run_operator(op, &[good.clone(), bad.clone()], &mut |_| {})
                .await
                .expect("run");
            let (g, b) = (&out[0], &out[1]);
            assert!(g.failed.is_none(), "{op:?}: {:?}", g.failed);
            assert!(
                b.failed.is_some(),
                "{op:?}: an error view counted as a read"
            );
            assert!(!b.delta);
            assert_eq!(b.views[0], b.views[1], "premise: identical error views");
            if op == Operator::Identity {
                assert!(g.delta, "control: the identity distinguishes the good pair");
            }
        }
    }

    /// What counts as a failed read, and what does not.
    #[test]
    fn read_failure_recognizes_errors_refusals_and_holds() {
        let ok = json!({"content": [{"type": "text", "text": "{}"}], "isError": false});
        assert_eq!(read_failure(&ok), None);
        assert!(read_failure(&json!({"error": "unknown tool"})).is_some());
        assert!(read_failure(&json!({"content": [], "isError": true})).is_some());
        assert!(
            read_failure(&json!({"structuredContent": {"status": "denied"}, "content": []}))
                .is_some()
        );
    }
}
