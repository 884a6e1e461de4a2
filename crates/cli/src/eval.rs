//! `secureclaw eval`: drivers for external benchmarks. Thin: the AgentDojo lane is Python
//! (`eval/agentdojo/`); this creates its virtualenv when missing or stale and runs its driver
//! with this binary as the gateway. The ghost-call lane is `secureclaw_eval::ghost`, the ASB
//! lane `secureclaw_eval::asb` (in process, through the gateway's MCP front end), the
//! AgentLeak lane `secureclaw_eval::agentleak` (in process, scored by the pip package
//! `agentleak` from `eval/agentleak/`), the summary-Δ lane `secureclaw_eval::summary` (in
//! process). The in-process lanes share [`finish`] for their output flags.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use secureclaw_eval::ghost::report as ghost_report;
use secureclaw_eval::lane::LaneReport;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// `secureclaw eval …`.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// AgentDojo v1.1.2 (629 attacked pairs, 97 benign tasks) with a deterministic, fully
    /// compromised runtime, through this gateway and without it; scored by AgentDojo itself.
    Agentdojo(AgentDojoArgs),
    /// Ghost Tool Calls (arXiv 2606.02483 §5): 13 policies over frozen speculative frontiers,
    /// deterministic adversaries, bootstrap CIs and sign tests; tables, JSON and a plot.
    Ghost(GhostArgs),
    /// Agent Security Bench: 2,000 direct (and 2,000 observation) prompt injections, 5 styles
    /// × 400 attacker tools, through the gateway's MCP front end with a compromised runtime;
    /// variants (a) as shipped, (b) attacker tool on the agent's list, (c) mimic names, and a
    /// no-policy control. Scored as ASB does: attacker tool ran; expected achievements reached.
    Asb(AsbArgs),
    /// AgentLeak: 1,000 scenarios (504 benign, 496 attacked) replayed by a deterministic
    /// runtime that relays what it received to the channels the attack targets, without the
    /// gateway and through it; traces scored by the pip package agentleak 0.17.0 per channel
    /// (C1–C6), with the paper's Table 10/11 numbers beside.
    Agentleak(AgentLeakArgs),
    /// The summary operator's Δ (paper Table 21): paired tool results that differ in one
    /// secret location, each side read through the gateway by a runtime over MCP; Δ = 1 when
    /// the released views differ (handle ids renamed by order of appearance). Identity, the
    /// default D and D with operator rules; plus the recall of the classification against
    /// AgentLeak's annotated sensitive values.
    Summary(SummaryArgs),
}

/// Which summary operators to run (`eval summary --operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SummaryOperator {
    /// No gateway (control: must distinguish every pair).
    Identity,
    /// The gateway's default D (detectors, caps, markers).
    Default,
    /// D with the operator's field rules.
    Rules,
}

/// Flags of `secureclaw eval summary`.
#[derive(Debug, Args)]
pub struct SummaryArgs {
    /// Operators to run (repeatable). Default: all three.
    #[arg(long, value_enum, conflicts_with = "write_evaluation")]
    operator: Vec<SummaryOperator>,
    /// The first 2 pairs of each category, and the recall on AgentLeak's quick subset (CI
    /// runs it with --no-recall).
    #[arg(long, conflicts_with = "write_evaluation")]
    quick: bool,
    /// Skip the recall measurement against AgentLeak's annotations.
    #[arg(long, conflicts_with = "write_evaluation")]
    no_recall: bool,
    /// Output flags. `--check` exits 1 if a read of a pair failed, if the identity control
    /// fails to distinguish a pair, or if a category that is Δ = 0 by construction
    /// (identifiers replaced by handles, text or list items beyond a cap, a stripped marker)
    /// shows Δ = 1, or does not reproduce, under the gateway.
    #[command(flatten)]
    out: LaneOutputArgs,
}

/// Which AgentLeak lanes to run (`eval agentleak --lane`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentLeakLane {
    /// The runtime calls the upstream itself (control).
    NoGateway,
    /// The gateway with its default classification (detectors only).
    Detectors,
    /// The gateway with the records rule (every record field protected).
    Records,
}

/// Flags of `secureclaw eval agentleak`.
#[derive(Debug, Args)]
pub struct AgentLeakArgs {
    /// Lanes to run (repeatable). Default: all three.
    #[arg(long, value_enum, conflicts_with = "write_evaluation")]
    lane: Vec<AgentLeakLane>,
    /// Every tenth scenario of each set of target channels and of the benign rows (104 of
    /// 1,000; the CI subset).
    #[arg(long, conflicts_with = "write_evaluation")]
    quick: bool,
    /// Write every trace (agentleak's Trace format) to DIR/<lane>/<scenario_id>.json.
    #[arg(long, value_name = "DIR")]
    traces: Option<PathBuf>,
    /// Output flags. `--check` exits 1 if the records lane put a vault canary on a
    /// structural channel (C2–C6) or into a tool's input, or if the no-gateway control leaks
    /// nothing on some channel.
    #[command(flatten)]
    out: LaneOutputArgs,
    /// Directory of the scorer (default: ./eval/agentleak, else the one in the source tree).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Python used to create the virtualenv (3.11 or newer).
    #[arg(long, default_value = "python3.11")]
    python: String,
}

/// Which ASB variants to run (`eval asb --variant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AsbVariant {
    /// (a) as shipped: the agent's manifest runs, other tools are hidden.
    Shipped,
    /// (b) the attacker tool on the agent's list, configuration from descriptions only.
    OnList,
    /// (c) attacker tools whose names mimic the normal ones.
    Mimic,
    /// Positive control: no policy (every attack must succeed).
    Control,
}

/// Flags of `secureclaw eval asb`.
#[derive(Debug, Args)]
pub struct AsbArgs {
    /// Variants to run (repeatable). Default: all four.
    #[arg(long, value_enum, conflicts_with = "write_evaluation")]
    variant: Vec<AsbVariant>,
    /// Only the direct prompt injections (skip OPI).
    #[arg(long, conflicts_with = "write_evaluation")]
    dpi_only: bool,
    /// Only ASB's `naive` style (400 cases per variant and family instead of 2,000).
    #[arg(long, conflicts_with = "write_evaluation")]
    quick: bool,
    /// Output flags. `--check` exits 1 if an attacker tool ran in (a), (b) or (c), if (a)'s
    /// DPI utility is below 100%, or if the no-policy control missed an attack.
    #[command(flatten)]
    out: LaneOutputArgs,
}

/// The output flags every in-process lane takes (`eval asb|agentleak|summary`).
#[derive(Debug, Args)]
pub struct LaneOutputArgs {
    /// Write the lane's cells and checks as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// With --json: include every case (calls, reasons, findings or views).
    #[arg(long, requires = "json")]
    cases: bool,
    /// Print the markdown tables and checks to stdout.
    #[arg(long)]
    markdown: bool,
    /// Regenerate the lane's results in EVALUATION.md (or PATH) between its markers (full
    /// runs only: not with a subset flag).
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = "EVALUATION.md"
    )]
    write_evaluation: Option<PathBuf>,
    /// Exit 1 if a check fails, or if the selection carries no check (the run prints every
    /// check with its verdict; EVALUATION.md lists each lane's checks).
    #[arg(long)]
    check: bool,
}

impl LaneOutputArgs {
    /// Read the `--write-evaluation` document now (a document that cannot be read is never
    /// overwritten, and a typo does not cost the run); the outputs for [`finish`].
    fn prepare(&self) -> Result<LaneOutput<'_>> {
        let document = read_evaluation(self.write_evaluation.as_deref())?;
        Ok(LaneOutput {
            json: self.json.as_deref(),
            cases: self.cases,
            evaluation: self.write_evaluation.as_deref().zip(document),
            markdown: self.markdown,
            check: self.check,
        })
    }
}

/// Flags of `secureclaw eval ghost`.
#[derive(Debug, Args)]
pub struct GhostArgs {
    /// CI mode: 1 seed and 1,000 bootstrap resamples (same corpora, policies and checks).
    #[arg(long)]
    quick: bool,
    /// Write every cell (policy × view × adversary: recovery, CI, Δ vs Naive, sign test,
    /// provider calls per task) and the checks as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write the Figure 2 plot (paired Δ vs Naive with CIs) as PNG to PATH.
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// Write the frozen frontier files (JSON Lines, one per corpus) into DIR.
    #[arg(long, value_name = "DIR")]
    frontiers: Option<PathBuf>,
    /// Regenerate the ghost-call section of EVALUATION.md (or of PATH, an existing file) and
    /// its plot (docs/ghost-figure2.png next to it). Full runs only: the prose quotes them.
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = "EVALUATION.md",
        conflicts_with = "quick"
    )]
    write_evaluation: Option<PathBuf>,
    /// Print the markdown tables to stdout.
    #[arg(long)]
    markdown: bool,
    /// Exit 1 unless every property that holds by construction held.
    #[arg(long)]
    check: bool,
    /// Instead of the 150-task replay, measure the default labeler on the query set in DIR
    /// (`sensitive.tsv`: category, query, sensitive span; `neutral.tsv`: category, query;
    /// optional `neutral_decoys.txt`: 1-based line numbers of decoy neutral queries), each
    /// query sent as a speculative `web_search` under the paper's contract. Prints leaked,
    /// altered (all and non-decoy), withheld and survived shares per split and category, then
    /// every miss. With --json PATH, writes the rows and misses.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["quick", "plot", "frontiers", "write_evaluation", "check"]
    )]
    queries: Option<PathBuf>,
}

/// Flags of `secureclaw eval agentdojo` (passed through to `eval/agentdojo/driver.py`).
#[derive(Debug, Args)]
pub struct AgentDojoArgs {
    /// Suite to run (repeatable): workspace, travel, banking, slack. Default: all four.
    #[arg(long)]
    suite: Vec<String>,
    /// Write per-suite numbers (gateway runs; baseline with --no-gateway) as JSON to PATH.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every run with its proposals and decisions as JSON to PATH.
    #[arg(long)]
    details: Option<PathBuf>,
    /// Only the no-gateway baseline (runtime straight to the suite's MCP server).
    #[arg(long, conflicts_with = "gateway_only")]
    no_gateway: bool,
    /// Skip the no-gateway baseline.
    #[arg(long)]
    gateway_only: bool,
    /// Only the benign runs (user task ground truth, no injection).
    #[arg(long)]
    benign_only: bool,
    /// Keep the gateway's work directories (config, state, log).
    #[arg(long)]
    keep: bool,
    /// Replay order of an attacked run. `attacker-first`: the injection task's ground-truth
    /// calls, then the user task's. `user-first`: the user task's reads, then the injection
    /// task's calls (with the handles the runtime was shown by those reads), then the rest of
    /// the user task.
    #[arg(long, value_enum, default_value_t = Order::AttackerFirst)]
    order: Order,
    /// Exit 1 if any attack had an effect through the gateway. `attacker-first`: AgentDojo's
    /// `security()` on the calls that ran (output-only successes excepted). `user-first`: any
    /// direct effect for an injection goal (an effect of the injection's plan that ran, a call
    /// that ran with an attacker's identifier, or an attacker identifier newly written into
    /// the environment).
    #[arg(long)]
    check: bool,
    /// Directory of the harness (default: ./eval/agentdojo, else the one in the source tree).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Python used to create the virtualenv (3.11 or newer).
    #[arg(long, default_value = "python3.11")]
    python: String,
}

/// Replay order of an attacked AgentDojo run (`eval agentdojo --order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// The injection task's calls, then the user task's.
    AttackerFirst,
    /// The user task's reads, then the injection task's calls, then the rest of the user task.
    UserFirst,
}

impl Order {
    /// The driver's spelling.
    fn as_str(self) -> &'static str {
        match self {
            Order::AttackerFirst => "attacker-first",
            Order::UserFirst => "user-first",
        }
    }
}

/// Run an evaluation.
///
/// # Errors
/// The harness directory is missing, the virtualenv cannot be created, or the driver cannot be
/// started.
pub async fn run(command: EvalCommand) -> Result<ExitCode> {
    match command {
        EvalCommand::Agentdojo(args) => agentdojo(args),
        EvalCommand::Ghost(args) => ghost(&args),
        EvalCommand::Asb(args) => asb(&args).await,
        EvalCommand::Agentleak(args) => agentleak(&args).await,
        EvalCommand::Summary(args) => summary(&args).await,
    }
}

async fn summary(args: &SummaryArgs) -> Result<ExitCode> {
    use secureclaw_eval::summary::{self, Operator, Options};
    let mut options = Options::full();
    options.quick = args.quick;
    options.recall = !args.no_recall;
    if !args.operator.is_empty() {
        options.operators = args
            .operator
            .iter()
            .map(|o| match o {
                SummaryOperator::Identity => Operator::Identity,
                SummaryOperator::Default => Operator::Default,
                SummaryOperator::Rules => Operator::Rules,
            })
            .collect();
    }
    let out = args.out.prepare()?;
    eprintln!(
        "secureclaw eval summary: {} operator(s) × {} pairs",
        options.operators.len(),
        summary::pairs::pairs(options.quick).len()
    );
    let results = summary::run(&options, &mut |line| eprintln!("  {line}")).await?;
    finish("summary", &results, &out)
}

async fn agentleak(args: &AgentLeakArgs) -> Result<ExitCode> {
    use secureclaw_eval::agentleak::{self, Lane, Options};
    use secureclaw_eval::lane;
    let mut options = Options::full();
    options.quick = args.quick;
    if !args.lane.is_empty() {
        options.lanes = args
            .lane
            .iter()
            .map(|l| match l {
                AgentLeakLane::NoGateway => Lane::NoGateway,
                AgentLeakLane::Detectors => Lane::Detectors,
                AgentLeakLane::Records => Lane::Records,
            })
            .collect();
    }
    let out = args.out.prepare()?;
    let dir = lane::harness_dir(args.dir.as_deref(), "agentleak", "score.py")?;
    let py = lane::ensure_venv(&dir, &args.python, "agentleak")?;
    let script = dir.join("score.py");
    eprintln!(
        "secureclaw eval agentleak: {} lane(s) × {} scenarios",
        options.lanes.len(),
        agentleak::selected(options.quick)?.len()
    );
    let mut scorer = |lines: &[String]| lane::python_jsonl(&py, &script, lines);
    let results = agentleak::run(&options, args.traces.as_deref(), &mut scorer, &mut |line| {
        eprintln!("  {line}")
    })
    .await?;
    finish("agentleak", &results, &out)
}

async fn asb(args: &AsbArgs) -> Result<ExitCode> {
    use secureclaw_eval::asb::{self, Family, Options, Style, Variant};
    let mut options = Options::full();
    if !args.variant.is_empty() {
        options.variants = args
            .variant
            .iter()
            .map(|v| match v {
                AsbVariant::Shipped => Variant::Shipped,
                AsbVariant::OnList => Variant::OnList,
                AsbVariant::Mimic => Variant::Mimic,
                AsbVariant::Control => Variant::Control,
            })
            .collect();
    }
    if args.dpi_only {
        options.families = vec![Family::Dpi];
    }
    if args.quick {
        options.styles = vec![Style::Naive];
    }
    let out = args.out.prepare()?;
    eprintln!(
        "secureclaw eval asb: {} variant(s) × {} famil{} × {} style(s) × 400 attacker tools",
        options.variants.len(),
        options.families.len(),
        if options.families.len() == 1 {
            "y"
        } else {
            "ies"
        },
        options.styles.len()
    );
    let results = asb::run(&options, &mut |line| eprintln!("  {line}")).await?;
    finish("asb", &results, &out)
}

/// The output flags every in-process lane takes.
struct LaneOutput<'a> {
    /// `--json PATH`.
    json: Option<&'a Path>,
    /// `--cases` (with `--json`).
    cases: bool,
    /// `--write-evaluation PATH` with the document's text, read before the run.
    evaluation: Option<(&'a Path, String)>,
    /// `--markdown`.
    markdown: bool,
    /// `--check`.
    check: bool,
}

/// The text of the `--write-evaluation` document, read before the run (a document that cannot
/// be read is never overwritten, and a typo does not cost the run).
fn read_evaluation(path: Option<&Path>) -> Result<Option<String>> {
    path.map(|doc| {
        std::fs::read_to_string(doc)
            .with_context(|| format!("--write-evaluation: cannot read `{}`", doc.display()))
    })
    .transpose()
}

/// Save, print and check a lane's results the same way for every lane: `--json`, the
/// regenerated EVALUATION.md section, the markdown or terminal summary, and the exit code of
/// `--check` (the failed checks on stderr).
fn finish(name: &str, results: &impl LaneReport, out: &LaneOutput<'_>) -> Result<ExitCode> {
    if let Some(path) = out.json {
        let text = serde_json::to_string_pretty(&results.json(out.cases))
            .context("cannot serialize results")?;
        std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some((doc, old)) = &out.evaluation {
        std::fs::write(doc, results.splice(old, &results.markdown()))
            .with_context(|| format!("cannot write `{}`", doc.display()))?;
        eprintln!("updated {}", doc.display());
    }
    if out.markdown {
        println!("{}", results.markdown());
    } else {
        print!("{}", results.summary());
    }
    let checks = results.checks();
    let failed: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
    eprintln!(
        "secureclaw eval {name}: {} of {} checks hold; {}",
        checks.len() - failed.len(),
        checks.len(),
        results.ran()
    );
    for c in &failed {
        eprintln!("  FAILED {}: {}", c.name, c.detail);
    }
    if !out.check {
        return Ok(ExitCode::SUCCESS);
    }
    Ok(match check_verdict(&checks) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("secureclaw eval {name} --check: {why}");
            ExitCode::FAILURE
        }
    })
}

/// What `--check` answers for a lane's `checks`: `Err` saying why when one failed, and when
/// none ran at all (a choice of lanes or operators that carries no check, such as
/// `eval agentleak --lane detectors`, must not pass as checked).
fn check_verdict(checks: &[secureclaw_eval::lane::Check]) -> Result<(), String> {
    if checks.is_empty() {
        return Err(
            "no check ran: the lanes or operators selected carry none (run the default selection)"
                .into(),
        );
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        return Err(format!("{failed} of {} checks failed", checks.len()));
    }
    Ok(())
}

/// Validate the output paths of `eval ghost`; returns the text of the `--write-evaluation`
/// document (read now: a document that cannot be read as text is never overwritten).
fn preflight(args: &GhostArgs) -> Result<Option<String>> {
    let parent_exists = |p: &Path| {
        p.parent()
            .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir())
    };
    if let Some(p) = &args.json
        && (p.is_dir() || !parent_exists(p))
    {
        bail!(
            "--json `{}`: not a file path in an existing directory",
            p.display()
        );
    }
    if let Some(p) = &args.plot {
        let png = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
        if !png || p.is_dir() || !parent_exists(p) {
            bail!(
                "--plot `{}`: must be a .png file path in an existing directory",
                p.display()
            );
        }
    }
    if let Some(d) = &args.frontiers
        && d.exists()
        && !d.is_dir()
    {
        bail!(
            "--frontiers `{}`: exists and is not a directory",
            d.display()
        );
    }
    match &args.write_evaluation {
        None => Ok(None),
        Some(doc) => {
            let text = std::fs::read_to_string(doc).with_context(|| {
                format!(
                    "--write-evaluation: cannot read `{}` (the existing EVALUATION.md, with its \
                     generated-section markers)",
                    doc.display()
                )
            })?;
            if !text.contains(ghost_report::BEGIN) || !text.contains(ghost_report::END) {
                bail!(
                    "--write-evaluation: `{}` has no generated ghost-call section (markers \
                     `{}` … `{}`)",
                    doc.display(),
                    ghost_report::BEGIN,
                    ghost_report::END
                );
            }
            Ok(Some(text))
        }
    }
}

fn ghost(args: &GhostArgs) -> Result<ExitCode> {
    use secureclaw_eval::ghost::{self, Options, corpus, report};
    if let Some(dir) = &args.queries {
        return ghost_queries(dir, args.json.as_deref(), args.markdown);
    }
    let options = if args.quick {
        Options::quick()
    } else {
        Options::full()
    };
    eprintln!(
        "secureclaw eval ghost: {} seed(s), {} bootstrap resamples",
        options.seeds.len(),
        options.resamples
    );
    // Check every output before the run, so a typo does not cost the whole run.
    let document = preflight(args)?;
    let results = ghost::run(&options, &mut |line| eprintln!("  {line}"));
    if let Some(dir) = &args.frontiers {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create `{}`", dir.display()))?;
        for kind in corpus::CorpusKind::ALL {
            let c = corpus::generate(kind, &options.seeds);
            let path = dir.join(format!("{}.jsonl", kind.as_str()));
            let text = c.to_jsonl().context("cannot serialize a frontier")?;
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        eprintln!("wrote frozen frontiers to {}", dir.display());
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&results).context("cannot serialize results")?;
        std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    let rows = report::figure2_rows(&results);
    let title = format!(
        "Paired Δ recovery vs Naive (150 tasks × {} seed{}, provider view, lexicon oracle)",
        options.seeds.len(),
        if options.seeds.len() == 1 { "" } else { "s" }
    );
    let plot_to = |path: &Path| -> Result<()> {
        ghost::plot::delta_plot(path, &title, "Δ recovery vs Naive", &rows)
            .with_context(|| format!("cannot draw the plot `{}`", path.display()))?;
        eprintln!("wrote {}", path.display());
        Ok(())
    };
    if let Some(path) = &args.plot {
        plot_to(path)?;
    }
    if let Some(doc) = &args.write_evaluation {
        let old = document.clone().unwrap_or_default();
        let dir = doc.parent().unwrap_or(Path::new("")).join("docs");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create `{}`", dir.display()))?;
        plot_to(&dir.join("ghost-figure2.png"))?;
        let section = report::markdown(&results, Some("docs/ghost-figure2.png"));
        std::fs::write(doc, report::splice(&old, &section))
            .with_context(|| format!("cannot write `{}`", doc.display()))?;
        eprintln!("updated {}", doc.display());
    }
    if args.markdown {
        let link = args.plot.as_ref().map(|p| p.display().to_string());
        println!("{}", report::markdown(&results, link.as_deref()));
    } else {
        println!(
            "150-task paired replay (paper Table 8), {} seed(s): lexicon oracle, provider view\n",
            options.seeds.len()
        );
        println!("{}", report::summary(&results));
        println!("(every table: --markdown; every cell: --json PATH)");
    }
    let failed: Vec<_> = results.checks.iter().filter(|c| !c.ok).collect();
    eprintln!(
        "secureclaw eval ghost: {} of {} checks hold; {} cells in {:.1} s",
        results.checks.len() - failed.len(),
        results.checks.len(),
        results.cells.len(),
        results.seconds
    );
    for c in &failed {
        eprintln!("  FAILED {}: {}", c.name, c.detail);
    }
    Ok(if args.check && !failed.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `eval ghost --queries DIR`: the default labeler on a query set (see [`GhostArgs::queries`]).
fn ghost_queries(dir: &Path, json: Option<&Path>, markdown: bool) -> Result<ExitCode> {
    use secureclaw_eval::ghost::independent::{QuerySet, measure};
    use secureclaw_eval::ghost::replay::LabelerKind;
    let set = QuerySet::load(dir)
        .with_context(|| format!("cannot read the query set in `{}`", dir.display()))?;
    if set.sensitive.is_empty() && set.neutral.is_empty() {
        bail!("`{}` holds no queries", dir.display());
    }
    let m = measure(LabelerKind::Content, &set);
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&m).context("cannot serialize results")?;
        std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    println!(
        "Default labeler on `{}`: {} sensitive queries ({} excluded: span not in the query), {} neutral ({} decoys)\n",
        set.name,
        set.sensitive.len(),
        set.bad_spans.len(),
        set.neutral.len(),
        set.decoys.len()
    );
    println!("{}", ghost_report::query_table(&m.rows, markdown));
    println!("Misses ({}):", m.misses.len());
    for line in &m.misses {
        println!("  {line}");
    }
    Ok(ExitCode::SUCCESS)
}

fn agentdojo(args: AgentDojoArgs) -> Result<ExitCode> {
    let dir = secureclaw_eval::lane::harness_dir(args.dir.as_deref(), "agentdojo", "driver.py")?;
    let py = secureclaw_eval::lane::ensure_venv(&dir, &args.python, "agentdojo, mcp")?;
    let me = std::env::current_exe().context("cannot locate the secureclaw binary")?;
    let mut cmd = Command::new(&py);
    cmd.arg(dir.join("driver.py"))
        .arg("--secureclaw")
        .arg(&me)
        .arg("--python")
        .arg(&py);
    for s in &args.suite {
        cmd.arg("--suite").arg(s);
    }
    cmd.arg("--order").arg(args.order.as_str());
    if let Some(p) = &args.json {
        cmd.arg("--json").arg(p);
    }
    if let Some(p) = &args.details {
        cmd.arg("--details").arg(p);
    }
    for (on, flag) in [
        (args.no_gateway, "--no-gateway"),
        (args.gateway_only, "--gateway-only"),
        (args.benign_only, "--benign-only"),
        (args.keep, "--keep"),
        (args.check, "--check"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    let st = cmd.status().context("cannot start the AgentDojo driver")?;
    Ok(if st.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::check_verdict;
    use secureclaw_eval::lane::Check;

    fn check(ok: bool) -> Check {
        Check {
            name: "c".into(),
            ok,
            detail: String::new(),
        }
    }

    /// `--check` fails when a check failed and when no check ran (trial of issue 17:
    /// `--lane detectors --check` printed "0 of 0 checks hold" and passed); it passes when
    /// every check held (positive control).
    #[test]
    fn check_fails_on_a_failed_check_and_on_no_check() {
        assert!(check_verdict(&[]).unwrap_err().contains("no check ran"));
        assert!(check_verdict(&[check(true), check(false)]).is_err());
        assert!(check_verdict(&[check(true), check(true)]).is_ok());
    }
}
