//! `secureclaw demo --speculative`: Ghost Tool Calls (arXiv 2606.02483) through the real stack.
//!
//! The task is the paper's running example, "What's the penalty for breaking my lease early?".
//! A scripted planner fans out eight pre-commit calls on seven branches, each with a branch
//! confidence, over MCP to an in-process gateway; then it promotes two branches and abandons
//! the rest through the gateway's `secureclaw.promote_branch` / `secureclaw.abandon_branch`
//! tools. The same script runs twice against fresh state:
//!
//! - **naive**: one permissive contract (every tool and destination, `max_arg_label =
//!   intent-revealing`, τ = 0, no budget, no shadow) — speculation as runtimes do it today;
//! - **contracts**: `max_arg_label = personal`, τ = 0.5, a budget of 5, and SHADOW required
//!   for the loan-rates provider, answered by a local rate sheet.
//!
//! The providers are instances of the research MCP server (`secureclaw research-tools`, see
//! `secureclaw_demo_tools::ResearchTools`); each appends every request it receives to its
//! provider log, which is the ground truth of what it observed. Each provider runs under its
//! own program name (a link to this binary in `<dir>/bin`) because a stdio upstream's
//! destination is its command, and destinations are what the labeler labels.
//!
//! The demo exits non-zero if, with contracts, an external provider received intent-revealing
//! text that it received without them, if a call deferred and then abandoned reached any
//! provider, if the provider's marginal exposure |Δ_provider| did not shrink, or if a call was
//! decided otherwise than the script expects.

use crate::stack;
use anyhow::{Context, Result, anyhow};
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::contract::{
    ArgLabel, Contract, DestinationLabel, EffectLabel, Observer, ShadowPromotion,
};
use secureclaw_core::exposure::ObserverExposure;
use secureclaw_core::labeler::{
    DestinationRule, EffectRule, FieldLabelRule, Labeler, LabelerConfig,
};
use secureclaw_demo_tools::{ProviderLog, load_provider_log, load_state};
use secureclaw_gateway::{
    GatewayConfig, SpeculationConfig, SubstituteKind, SubstituteRule, UpstreamSpec,
    UpstreamTransport,
};
use secureclaw_server::{McpFrontEnd, SessionSource};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// The user's task (the paper's Appendix A.1).
const TASK: &str = "What's the penalty for breaking my lease early?";
/// The landlord's property manager, known to the CRM.
const LANDLORD: &str = "m.alvarez@oakridge-mgmt.example";
/// Phrases that must never reach an external provider under the contracts, whatever the
/// labeler says about them: the intent behind the task and behind the abandoned branches.
const INTENT_PHRASES: [&str; 6] = [
    "lease",
    "tenant",
    "landlord",
    "apartments near me",
    "personal loan",
    "breaking my",
];

/// One provider of the demo: an upstream id, the program name its destination shows, the
/// research tools it serves, and whether it is outside the trusted boundary.
struct Provider {
    id: &'static str,
    program: &'static str,
    tools: &'static [&'static str],
    external: bool,
    label: DestinationLabel,
}

/// The research providers. `local-tools` is inside the trusted boundary: the calendar and a
/// cached rate sheet that answers shadowed loan-rate lookups.
static PROVIDERS: [Provider; 4] = [
    Provider {
        id: "search",
        program: "search.example",
        tools: &["web_search", "doc_retrieval"],
        external: true,
        label: DestinationLabel::Public,
    },
    Provider {
        id: "loans",
        program: "loans.example",
        tools: &["rates_lookup"],
        external: true,
        label: DestinationLabel::Public,
    },
    Provider {
        id: "workspace",
        program: "workspace.example",
        tools: &["crm_lookup", "email_search"],
        external: true,
        label: DestinationLabel::TenantInternal,
    },
    Provider {
        id: "local",
        program: "local-tools",
        tools: &["calendar_lookup", "rates_lookup"],
        external: false,
        label: DestinationLabel::TenantInternal,
    },
];

/// Program name of the office (its `send_email` is the deferred effect).
const OFFICE_PROGRAM: &str = "office-tools";

/// One scripted pre-commit call.
struct Step {
    branch: &'static str,
    mode: &'static str,
    confidence: f64,
    tool: &'static str,
    args: Value,
    /// Expected (wire status, monitor decision) without contracts.
    naive: (&'static str, &'static str),
    /// Expected (wire status, monitor decision) with contracts.
    contracts: (&'static str, &'static str),
}

/// The planner's speculative frontier for the lease question.
fn script() -> Vec<Step> {
    let step = |branch, mode, confidence, tool, args, naive, contracts| Step {
        branch,
        mode,
        confidence,
        tool,
        args,
        naive,
        contracts,
    };
    let allowed = ("completed", "allow");
    vec![
        step(
            "rights",
            "speculative",
            0.9,
            "search__web_search",
            json!({"q": "tenant rights lease termination penalty"}),
            allowed,
            ("completed", "rewrite"),
        ),
        step(
            "move",
            "speculative",
            0.3,
            "search__web_search",
            json!({"q": "available apartments near me"}),
            allowed,
            ("deferred", "defer:low_confidence"),
        ),
        step(
            "loan",
            "speculative",
            0.8,
            "loans__rates_lookup",
            json!({"product": "current personal loan rates"}),
            allowed,
            ("shadowed", "shadow"),
        ),
        step(
            "move-out",
            "prefetch",
            0.4,
            "local__calendar_lookup",
            json!({"from": "2026-12-01", "to": "2027-01-31"}),
            allowed,
            ("deferred", "defer:low_confidence"),
        ),
        step(
            "rights",
            "prefetch",
            0.9,
            "search__doc_retrieval",
            json!({"collection": "tenant-disputes", "query": "early termination"}),
            allowed,
            ("completed", "rewrite"),
        ),
        step(
            "landlord-mail",
            "speculative",
            0.75,
            "workspace__email_search",
            json!({"query": "landlord"}),
            allowed,
            ("completed", "rewrite"),
        ),
        step(
            "landlord-crm",
            "speculative",
            0.8,
            "workspace__crm_lookup",
            json!({"customer": LANDLORD}),
            allowed,
            allowed,
        ),
        step(
            "notice",
            "speculative",
            0.6,
            "office__send_email",
            json!({
                "to": LANDLORD,
                "subject": "Notice: ending my lease early",
                "body": "Dear Ms Alvarez, I would like to end my lease early. Kind regards.",
            }),
            ("deferred", "defer:effect_precommit"),
            ("deferred", "defer:effect_precommit"),
        ),
    ]
}

/// Branches the planner commits to, in order.
const PROMOTE: [&str; 2] = ["rights", "move-out"];
/// Branches the planner drops.
const ABANDON: [&str; 5] = ["move", "loan", "landlord-mail", "landlord-crm", "notice"];

/// Which of the two runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Naive,
    Contracts,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Naive => "naive",
            Variant::Contracts => "contracts",
        }
    }
}

/// The labeler both runs share: destinations by program name, effect overrides, the CRM's
/// customer field as personal; content-aware otherwise.
fn labeler_config() -> LabelerConfig {
    let mut destinations: Vec<DestinationRule> = PROVIDERS
        .iter()
        .map(|p| DestinationRule {
            pattern: format!("stdio:*/bin/{}*", p.program),
            label: p.label,
        })
        .collect();
    destinations.push(DestinationRule {
        pattern: format!("stdio:*/bin/{OFFICE_PROGRAM}*"),
        label: DestinationLabel::TenantInternal,
    });
    LabelerConfig {
        destinations,
        effects: vec![
            EffectRule {
                tool: "local__*".into(),
                effect: EffectLabel::LocalRead,
            },
            EffectRule {
                tool: "office__send_email".into(),
                effect: EffectLabel::ExternalWrite,
            },
        ],
        fields: vec![FieldLabelRule {
            tool: "workspace__crm_lookup".into(),
            path: "/customer".into(),
            label: ArgLabel::Personal,
        }],
        ..LabelerConfig::default()
    }
}

/// The contracts of one run.
fn contracts(variant: Variant) -> Vec<Contract> {
    match variant {
        Variant::Naive => vec![Contract {
            scope: "*".into(),
            allowed_tools: vec!["*".into()],
            allowed_destinations: vec!["*".into()],
            max_destination_label: DestinationLabel::Forbidden,
            max_arg_label: ArgLabel::IntentRevealing,
            authorized_observers: BTreeSet::new(),
            branch_threshold: 0.0,
            budget: None,
            shadow_required: false,
            shadow_promotion: ShadowPromotion::Reuse,
            applies_to_committed: false,
        }],
        Variant::Contracts => vec![
            // The loan provider may learn nothing from a branch that is not committed: shadow
            // every pre-commit call (its fields may be sensitive, they never leave).
            Contract {
                scope: "loans__*".into(),
                allowed_tools: vec!["loans__rates_lookup".into()],
                allowed_destinations: vec!["stdio:*/bin/loans.example*".into()],
                max_destination_label: DestinationLabel::Public,
                max_arg_label: ArgLabel::Sensitive,
                authorized_observers: BTreeSet::from([Observer::RuntimeLog]),
                branch_threshold: 0.5,
                budget: Some(5),
                shadow_required: true,
                shadow_promotion: ShadowPromotion::Reuse,
                applies_to_committed: false,
            },
            Contract {
                scope: "*".into(),
                allowed_tools: vec![
                    "search__*".into(),
                    "workspace__*".into(),
                    "local__*".into(),
                    "office__send_email".into(),
                ],
                allowed_destinations: vec!["stdio:*/bin/*".into()],
                max_destination_label: DestinationLabel::TenantInternal,
                max_arg_label: ArgLabel::Personal,
                authorized_observers: BTreeSet::from([Observer::RuntimeLog]),
                branch_threshold: 0.5,
                budget: Some(5),
                shadow_required: false,
                shadow_promotion: ShadowPromotion::Reuse,
                applies_to_committed: false,
            },
        ],
    }
}

fn gateway_config(variant: Variant) -> GatewayConfig {
    GatewayConfig {
        speculation: SpeculationConfig {
            enabled: true,
            labeler: labeler_config(),
            contracts: contracts(variant),
            substitutes: vec![SubstituteRule {
                tool: "loans__rates_lookup".into(),
                kind: SubstituteKind::Tool,
                with: Some("local__rates_lookup".into()),
            }],
        },
        ..GatewayConfig::demo_office()
    }
}

/// `<dir>/bin/<program>`: a link to this binary, so that each provider's destination
/// (`stdio:<command>`) names it.
fn provider_program(dir: &Path, exe: &Path, program: &str) -> Result<PathBuf> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot create `{}`", bin.display()))?;
    let path = bin.join(program);
    if std::fs::symlink_metadata(&path).is_ok() {
        std::fs::remove_file(&path)
            .with_context(|| format!("cannot replace `{}`", path.display()))?;
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(exe, &path)
        .with_context(|| format!("cannot link `{}`", path.display()))?;
    #[cfg(not(unix))]
    std::fs::copy(exe, &path).with_context(|| format!("cannot copy to `{}`", path.display()))?;
    Ok(path)
}

fn stdio(id: &str, command: &Path, args: Vec<String>) -> UpstreamSpec {
    UpstreamSpec {
        id: id.into(),
        transport: UpstreamTransport::Stdio {
            command: command.display().to_string(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    }
}

fn log_path(run_dir: &Path, provider: &str) -> PathBuf {
    run_dir.join("providers").join(format!("{provider}.json"))
}

/// Every provider's log (an absent file is an empty log).
fn read_logs(run_dir: &Path) -> Result<BTreeMap<&'static str, ProviderLog>> {
    let mut out = BTreeMap::new();
    for p in &PROVIDERS {
        let path = log_path(run_dir, p.id);
        let log = if path.exists() {
            load_provider_log(&path)?
        } else {
            ProviderLog::default()
        };
        out.insert(p.id, log);
    }
    Ok(out)
}

/// The office outbox (sent e-mails) as `to: subject` lines.
fn outbox(run_dir: &Path) -> Result<Vec<String>> {
    let path = run_dir.join("office.json");
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(load_state(&path)?
        .sent
        .iter()
        .map(|m| format!("{}: {}", m.to, m.subject))
        .collect())
}

/// The runtime's side of MCP.
struct Client {
    service: RunningService<RoleClient, ()>,
}

/// One `tools/call` result as the runtime sees it.
struct Reply {
    /// `completed`, `shadowed`, `deferred`, `denied`, `pending_confirmation` or `error`.
    status: String,
    /// The recovery's reason code, if any.
    reason: Option<String>,
    structured: Option<Value>,
}

impl Client {
    async fn call(&self, tool: &str, args: &Value, meta: Option<Value>) -> Result<Reply> {
        let mut params: CallToolRequestParams = serde_json::from_value(json!({
            "name": tool,
            "arguments": args,
            "_meta": meta.clone().unwrap_or_else(|| json!({})),
        }))?;
        if meta.is_none() {
            params.meta = None;
        }
        let resp = self
            .service
            .peer()
            .call_tool_once(params)
            .await
            .map_err(|e| anyhow!("MCP call `{tool}` failed: {e}"))?;
        let CallToolResponse::Complete(r) = resp else {
            return Err(anyhow!("unexpected MCP response to `{tool}`"));
        };
        let shadowed = r
            .meta
            .as_ref()
            .and_then(|m| m.0.get("dev.secureclaw/shadowed"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let s = r.structured_content.clone();
        let wire_status = s
            .as_ref()
            .and_then(|v| v.get("status"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let status = if shadowed {
            "shadowed".to_owned()
        } else if let Some(st) = wire_status
            .filter(|st| ["deferred", "denied", "pending_confirmation"].contains(&st.as_str()))
        {
            st
        } else if r.is_error == Some(true) {
            "error".to_owned()
        } else {
            "completed".to_owned()
        };
        let reason = s
            .as_ref()
            .and_then(|v| v.get("recovery"))
            .and_then(|r| r.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Reply {
            status,
            reason,
            structured: s,
        })
    }
}

/// `value` as one-line JSON, cut at `max` characters.
fn compact(value: &Value, max: usize) -> String {
    let s = value.to_string();
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// Lower-case words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `phrase` occurs in `text` on word boundaries, case-insensitively.
fn has_phrase(text: &str, phrase: &str) -> bool {
    let ws = words(text);
    let ps = words(phrase);
    !ps.is_empty() && ws.windows(ps.len()).any(|w| w == ps.as_slice())
}

/// Every string leaf of `value`.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// What one run left behind.
struct RunReport {
    variant: Variant,
    dir: PathBuf,
    session: String,
    exposure: Vec<ObserverExposure>,
    logs: BTreeMap<&'static str, ProviderLog>,
    outbox: Vec<String>,
    /// Calls deferred at issue whose branch was then abandoned: (exposed tool, arguments).
    deferred_abandoned: Vec<(String, Value)>,
    failures: usize,
}

impl RunReport {
    fn delta_provider(&self) -> usize {
        self.exposure
            .iter()
            .find(|x| x.observer == Observer::Provider)
            .map_or(0, |x| x.marginal.len())
    }

    /// Requests received by providers outside the trusted boundary.
    fn external_requests(&self) -> Vec<(&'static str, &secureclaw_demo_tools::ProviderRequest)> {
        PROVIDERS
            .iter()
            .filter(|p| p.external)
            .flat_map(|p| {
                self.logs
                    .get(p.id)
                    .into_iter()
                    .flat_map(|l| l.requests.iter())
                    .map(move |r| (p.id, r))
            })
            .collect()
    }

    /// Every string argument external providers received.
    fn external_strings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (_, r) in self.external_requests() {
            strings(&Value::Object(r.arguments.clone()), &mut out);
        }
        out
    }

    fn requests_to(&self, provider: &str) -> usize {
        self.logs.get(provider).map_or(0, |l| l.requests.len())
    }
}

/// Run the speculative demo in `dir` (two sub-directories, one per run); exit 0 when every
/// check holds.
pub async fn run(dir: &Path) -> Result<ExitCode> {
    let started = Instant::now();
    let exe = std::env::current_exe().context("cannot locate the secureclaw binary")?;
    println!("SecureClaw demo: speculative tool calls (Ghost Tool Calls, arXiv 2606.02483)\n");
    println!("task: \"{TASK}\"");
    println!(
        "the planner fans out {} pre-commit calls on {} branches, promotes {}, abandons {}.",
        script().len(),
        PROMOTE.len() + ABANDON.len(),
        PROMOTE.join(", "),
        ABANDON.join(", ")
    );
    let naive = run_once(dir, &exe, Variant::Naive).await?;
    let guarded = run_once(dir, &exe, Variant::Contracts).await?;
    let mut failures = naive.failures + guarded.failures;

    println!("\n== comparison ==");
    let (dn, dc) = (naive.delta_provider(), guarded.delta_provider());
    let (en, ec) = (
        naive.external_requests().len(),
        guarded.external_requests().len(),
    );
    println!(
        "|Δ_provider|: naive {dn}, contracts {dc}; external provider requests: naive {en}, contracts {ec}; loan provider requests: naive {}, contracts {}",
        naive.requests_to("loans"),
        guarded.requests_to("loans")
    );

    // Check 1: intent-revealing text the naive run leaked must not reach an external provider
    // under the contracts. The forbidden texts are the naive run's external arguments that the
    // labeler puts above `personal`, plus fixed intent phrases.
    let labeler = Labeler::new(labeler_config());
    let mut forbidden: Vec<String> = naive
        .external_strings()
        .into_iter()
        .filter(|s| labeler.label_text(s) > ArgLabel::Personal)
        .collect();
    forbidden.sort();
    forbidden.dedup();
    let received = guarded.external_strings();
    let leaked: Vec<String> = forbidden
        .iter()
        .filter(|f| received.iter().any(|r| r.contains(f.as_str())))
        .cloned()
        .chain(
            INTENT_PHRASES
                .iter()
                .filter(|p| received.iter().any(|r| has_phrase(r, p)))
                .map(|p| (*p).to_owned()),
        )
        .collect();
    let seen_by = |texts: &[String]| -> Vec<&'static str> {
        INTENT_PHRASES
            .iter()
            .copied()
            .filter(|p| texts.iter().any(|r| has_phrase(r, p)))
            .collect()
    };
    let (pn, pc) = (seen_by(&naive.external_strings()), seen_by(&received));
    println!(
        "intent phrases seen by external providers: naive {} [{}], contracts {} [{}]",
        pn.len(),
        pn.join(", "),
        pc.len(),
        pc.join(", ")
    );
    failures += check(
        &format!(
            "no intent-revealing text from the naive run reached an external provider with contracts ({} labeled texts and {} phrases checked)",
            forbidden.len(),
            INTENT_PHRASES.len()
        ),
        leaked.is_empty(),
        &leaked.join(" | "),
    );

    // Check 2: a call deferred and then abandoned never reached any provider.
    for r in [&naive, &guarded] {
        let mut reached = Vec::new();
        for (tool, args) in &r.deferred_abandoned {
            let (upstream, name) = tool.split_once("__").unwrap_or(("", tool.as_str()));
            let hit_log = r.logs.values().any(|l| {
                l.requests
                    .iter()
                    .any(|q| q.tool == name && Value::Object(q.arguments.clone()) == *args)
            });
            let hit_office = upstream == "office" && !r.outbox.is_empty();
            if hit_log || hit_office {
                reached.push(tool.clone());
            }
        }
        failures += check(
            &format!(
                "{}: none of the {} deferred-then-abandoned calls reached a provider (office outbox: {} e-mails)",
                r.variant.name(),
                r.deferred_abandoned.len(),
                r.outbox.len()
            ),
            reached.is_empty(),
            &reached.join(", "),
        );
    }

    // Check 3: contracts shrink the provider's marginal exposure.
    failures += check(
        &format!("|Δ_provider| with contracts ({dc}) is smaller than without ({dn})"),
        dc < dn,
        "",
    );

    println!("\nre-check the exposure reports from the audit logs:");
    for r in [&naive, &guarded] {
        println!(
            "  {} trace exposure --session {} --state-dir {}",
            exe.display(),
            r.session,
            r.dir.display()
        );
    }
    println!("(took {} ms)", started.elapsed().as_millis());
    if failures == 0 {
        println!("\ndemo OK: contracts kept the ghosts' intent away from the providers");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\ndemo FAILED: {failures} checks failed");
        Ok(ExitCode::FAILURE)
    }
}

/// Print one check; 1 if it failed.
fn check(what: &str, ok: bool, detail: &str) -> usize {
    if ok {
        println!("check ok: {what}");
        0
    } else {
        println!("check FAILED: {what}");
        if !detail.is_empty() {
            println!("  {detail}");
        }
        1
    }
}

/// One run of the script against fresh provider and office state in `<dir>/<variant>`.
async fn run_once(dir: &Path, exe: &Path, variant: Variant) -> Result<RunReport> {
    let run_dir = dir.join(variant.name());
    crate::state::ensure_dir(&run_dir)?;
    let providers_dir = run_dir.join("providers");
    std::fs::create_dir_all(&providers_dir)
        .with_context(|| format!("cannot create `{}`", providers_dir.display()))?;
    // Fresh provider state: a previous run in the same directory leaves its logs behind.
    let office = run_dir.join("office.json");
    for path in PROVIDERS
        .iter()
        .map(|p| log_path(&run_dir, p.id))
        .chain([office.clone()])
    {
        if path.exists() {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot reset `{}`", path.display()))?;
        }
    }
    let mut specs = Vec::new();
    for p in &PROVIDERS {
        let program = provider_program(dir, exe, p.program)?;
        specs.push(stdio(
            p.id,
            &program,
            vec![
                "research-tools".into(),
                "--provider".into(),
                p.id.into(),
                "--tools".into(),
                p.tools.join(","),
                "--log".into(),
                log_path(&run_dir, p.id).display().to_string(),
            ],
        ));
    }
    let office_program = provider_program(dir, exe, OFFICE_PROGRAM)?;
    specs.push(stdio(
        "office",
        &office_program,
        vec![
            "demo-tools".into(),
            "--state".into(),
            office.display().to_string(),
        ],
    ));

    match variant {
        Variant::Naive => println!(
            "\n== run A: naive speculation (permissive contract: everything allowed, τ = 0, no budget, no shadow) =="
        ),
        Variant::Contracts => println!(
            "\n== run B: issue-time privacy contracts (max_arg_label = personal, τ = 0.5, budget 5, SHADOW for loans__*) =="
        ),
    }
    let gw = stack::start(&run_dir, None, &[], gateway_config(variant), specs).await?;
    let session = gw
        .open_session(
            "alice",
            TaskEnvelope {
                request: TASK.into(),
                trusted_targets: vec![],
                ..TaskEnvelope::default()
            },
        )
        .await?;
    println!("session {} (state: {})", session.id, run_dir.display());
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let front = McpFrontEnd::new(gw.clone(), SessionSource::Fixed(session.clone()));
    tokio::spawn(async move {
        if let Ok(running) = front.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = Client {
        service: ().serve(client_io).await.map_err(|e| anyhow!("MCP client: {e}"))?,
    };

    let mut failures = 0;
    let mut deferred: Vec<(&'static str, String, Value)> = Vec::new();
    for (i, step) in script().into_iter().enumerate() {
        let before_logs = read_logs(&run_dir)?;
        let before_trace = gw.session_trace(&session.id).await?.0.len();
        let meta = json!({
            "dev.secureclaw/mode": step.mode,
            "dev.secureclaw/branch": step.branch,
            "dev.secureclaw/confidence": step.confidence,
        });
        let reply = client.call(step.tool, &step.args, Some(meta)).await?;
        let (events, _) = gw.session_trace(&session.id).await?;
        let decisions: Vec<String> = events
            .iter()
            .skip(before_trace)
            .map(|e| e.decision.clone())
            .collect();
        let decision = decisions.join(",");
        let (want_status, want_decision) = match variant {
            Variant::Naive => step.naive,
            Variant::Contracts => step.contracts,
        };
        let ok = reply.status == want_status && decision == want_decision;
        if !ok {
            failures += 1;
        }
        println!(
            "[{}] {:<13} {:<11} c={:.2}  {} {}",
            i + 1,
            step.branch,
            step.mode,
            step.confidence,
            step.tool,
            compact(&step.args, 90)
        );
        let reason = match &reply.reason {
            Some(r) if reply.status != "deferred" => format!(" ({r})"),
            _ => String::new(),
        };
        println!(
            "    -> {}{reason}   monitor: {decision}{}",
            reply.status,
            if ok {
                String::new()
            } else {
                format!("   UNEXPECTED (expected {want_status} / {want_decision})")
            }
        );
        print_received(&before_logs, &read_logs(&run_dir)?, &reply);
        if reply.status == "deferred" {
            deferred.push((step.branch, step.tool.to_owned(), step.args.clone()));
        }
    }

    let before_outbox = outbox(&run_dir)?;
    for branch in PROMOTE {
        let before_logs = read_logs(&run_dir)?;
        let reply = client
            .call(
                secureclaw_gateway::PROMOTE_TOOL,
                &json!({"branch": branch}),
                None,
            )
            .await?;
        let released: Vec<Value> = reply
            .structured
            .as_ref()
            .and_then(|s| s.get("released"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        println!(
            "promote {branch}: {} ({} deferred calls released)",
            reply.status,
            released.len()
        );
        if reply.status != "completed" {
            failures += 1;
        }
        for r in &released {
            let tool = r.get("tool").and_then(Value::as_str).unwrap_or("?");
            let result = r.get("result").cloned().unwrap_or(Value::Null);
            let status = result.get("status").and_then(Value::as_str).unwrap_or("?");
            let content = result
                .get("structured_content")
                .cloned()
                .unwrap_or(Value::Null);
            println!(
                "    released {tool} as committed: {status} {}",
                compact(&content, 110)
            );
        }
        print_received(&before_logs, &read_logs(&run_dir)?, &reply);
    }
    for branch in ABANDON {
        let reply = client
            .call(
                secureclaw_gateway::ABANDON_TOOL,
                &json!({"branch": branch}),
                None,
            )
            .await?;
        let discarded = reply
            .structured
            .as_ref()
            .and_then(|s| s.get("discarded"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        println!(
            "abandon {branch}: {} ({discarded} held calls discarded unsent)",
            reply.status
        );
        if reply.status != "completed" {
            failures += 1;
        }
    }
    let _ = client.service.cancel().await;

    let exposure = gw.exposure(&session.id).await?;
    println!("\nexposure report ({}):", variant.name());
    print!("{}", crate::trace::render(&exposure, 10));
    let logs = read_logs(&run_dir)?;
    let outbox_now = outbox(&run_dir)?;
    if outbox_now != before_outbox {
        println!("office outbox changed: {outbox_now:?}");
    }
    let deferred_abandoned = deferred
        .into_iter()
        .filter(|(b, ..)| ABANDON.contains(b))
        .map(|(_, t, a)| (t, a))
        .collect();
    Ok(RunReport {
        variant,
        dir: run_dir,
        session: session.id.clone(),
        exposure,
        logs,
        outbox: outbox_now,
        deferred_abandoned,
        failures,
    })
}

/// Print what each provider received between two snapshots of the logs.
fn print_received(
    before: &BTreeMap<&'static str, ProviderLog>,
    after: &BTreeMap<&'static str, ProviderLog>,
    reply: &Reply,
) {
    let mut any = false;
    for p in &PROVIDERS {
        let seen = before.get(p.id).map_or(0, |l| l.requests.len());
        let Some(log) = after.get(p.id) else { continue };
        for r in log.requests.iter().skip(seen) {
            any = true;
            let who = if p.external {
                format!("provider {}", p.id)
            } else if reply.status == "shadowed" {
                format!("local substitute ({})", p.id)
            } else {
                format!("trusted {} tools", p.id)
            };
            println!(
                "    {who} received: {} {}",
                r.tool,
                compact(&Value::Object(r.arguments.clone()), 90)
            );
        }
    }
    if !any && reply.status != "completed" {
        println!("    no provider received anything");
    }
}
