//! `secureclaw eval ghost`: the Ghost Tool Calls evaluation (arXiv 2606.02483 §5, Appendix B),
//! deterministic end to end — no LLM, no network, no model weights (research notes §5).
//!
//! 1. [`corpus`]: seeded corpora with one hidden sensitive label per task and frozen
//!    speculative frontiers (JSON Lines, byte-identical across runs);
//! 2. [`replay`]: the thirteen policies (plus the Gate τ sweep and Drop (dest)) replayed over
//!    the same frontier rows — the contract policies through the product's monitor;
//! 3. [`observe`]: provider, runtime-log, network and co-tenant projections from the product's
//!    trace model, and the provider channels of Table 11;
//! 4. [`adversary`]: keyword, TF-IDF, white-box lexicon oracle, Naive Bayes leave-one-out and
//!    decoy-mixed adversaries;
//! 5. [`stats`]: percentile bootstrap CIs (10,000 resamples, seed 20260522) and the exact
//!    two-sided sign test;
//! 6. [`report`]: the markdown tables (paper Tables 6–11, 17, 19), the JSON results, and the
//!    plot ([`plot`]) of Figure 2.
//!
//! [`run`] computes everything; [`Results::checks`] are the properties that hold by
//! construction (CI runs them with `--quick`).

pub mod adversary;
pub mod corpus;
pub mod independent;
pub mod observe;
pub mod plot;
pub mod replay;
pub mod report;
pub mod rng;
pub mod stats;
pub mod taxonomy;

use adversary::{Adversary, Scorers, credit, nb_loo, predict};
use corpus::{Corpus, CorpusKind, FrontierStats, frontier_stats, generate};
use observe::{View, tokens};
use replay::{Env, LabelerKind, Policy, Replay, counterfactual, replay};
use rng::Rng;
use secureclaw_core::contract::{ArgLabel, Observer};
use secureclaw_core::exposure::{Dispatch, difference, project};
use serde::Serialize;
use sha2::{Digest, Sha256};
use stats::{Bootstrap, Ci, chance_normalized, sign_test};
use std::collections::BTreeMap;

/// How much to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seeds of every corpus (the paper: 3).
    pub seeds: Vec<u64>,
    /// Bootstrap resamples (the paper: 10,000).
    pub resamples: usize,
}

impl Options {
    /// The full run: 3 seeds, 10,000 resamples.
    #[must_use]
    pub fn full() -> Self {
        Options {
            seeds: vec![1, 2, 3],
            resamples: stats::RESAMPLES,
        }
    }

    /// The CI run: 1 seed, 1,000 resamples (same corpora, policies and checks).
    #[must_use]
    pub fn quick() -> Self {
        Options {
            seeds: vec![1],
            resamples: 1_000,
        }
    }
}

/// One (corpus, labeler, policy, view, adversary) result.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Corpus.
    pub corpus: String,
    /// Labeler variant (`content`, `gold`, `constant`, `gold-fn10`, …).
    pub labeler: String,
    /// Policy id.
    pub policy: String,
    /// View (observer or provider channel).
    pub view: String,
    /// Adversary.
    pub adversary: String,
    /// Rows (tasks × seeds).
    pub n: usize,
    /// Closed-set top-1 recovery (mean credit).
    pub recovery: f64,
    /// Its 95% percentile bootstrap CI.
    pub ci: Ci,
    /// (recovery − 1/N) / (1 − 1/N).
    pub chance_normalized: f64,
    /// Top-3 recovery.
    pub top3: f64,
    /// Top-5 recovery.
    pub top5: f64,
    /// NMI of hard predictions (ties broken by a seeded draw); `None` for decoy and NB-LOO
    /// rows that are not label predictions over the menu.
    pub nmi: Option<f64>,
    /// AMI of the same predictions.
    pub ami: Option<f64>,
    /// Paired Δ recovery vs Naive on the same rows, with its CI and the exact sign test.
    pub vs_naive: Option<Paired>,
    /// Provider calls per task.
    pub provider_calls: f64,
    /// Mean |Δ_provider| (observations in the issued provider projection that the
    /// committed-only counterfactual does not have) per task.
    pub marginal_provider: f64,
    /// Share of proposed calls the policy changed (blocked, rewritten, shadowed, or deferred
    /// and never sent).
    pub intervened: f64,
    /// Share of the committed trace (promoted candidates and plan calls) the task got a
    /// result for — what the policy costs the agent's work.
    pub delivered: f64,
    /// Per-row credits (not serialized).
    #[serde(skip)]
    pub credits: Vec<f64>,
    /// Per-row hard hits (1 if the tie-broken prediction is the label; not serialized): what
    /// the sign test compares.
    #[serde(skip)]
    pub hits: Vec<f64>,
    /// Per-seed recovery, in seed order.
    pub per_seed: Vec<f64>,
}

/// A paired comparison against Naive.
#[derive(Debug, Clone, Serialize)]
pub struct Paired {
    /// Mean(policy − Naive).
    pub delta: f64,
    /// Its CI.
    pub ci: Ci,
    /// Rows where the policy's (tie-broken) prediction is right and Naive's wrong.
    pub b: u64,
    /// Rows where Naive's prediction is right and the policy's wrong.
    pub c: u64,
    /// Exact two-sided sign test p-value.
    pub p: f64,
}

/// A property that holds by construction, and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// Numbers behind it.
    pub detail: String,
}

/// Per-corpus facts.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusInfo {
    /// Corpus name.
    pub corpus: String,
    /// Menu size N.
    pub labels: usize,
    /// Frontier statistics (Table 19).
    pub frontier: FrontierStats,
    /// SHA-256 of the frozen frontier file.
    pub frontier_sha256: String,
}

/// Label-noise realization (Table 10).
#[derive(Debug, Clone, Serialize)]
pub struct NoiseInfo {
    /// Nominal false-negative rate.
    pub rate: f64,
    /// Realized argument flip rate (Rewrite's labels).
    pub arg_flips: f64,
    /// Realized destination flip rate.
    pub dest_flips: f64,
}

/// One adversary under the paper's cross-adversary protocol (Tables 12/13): the 30-task
/// corpus, the first seed, the paper's twelve policies pooled (n = 360); NB-LOO holds out one
/// row and trains on the other 359, which include the same task under the other policies.
#[derive(Debug, Clone, Serialize)]
pub struct CrossAdversary {
    /// Adversary.
    pub adversary: String,
    /// Rows pooled.
    pub n: usize,
    /// Pooled recovery.
    pub recovery: f64,
    /// Its CI.
    pub ci: Ci,
}

/// Everything one run computed.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Generator version.
    pub generator: String,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Bootstrap resamples and seed.
    pub resamples: usize,
    /// Bootstrap RNG seed.
    pub bootstrap_seed: u64,
    /// Corpora.
    pub corpora: Vec<CorpusInfo>,
    /// Every cell.
    pub cells: Vec<Cell>,
    /// Label noise realizations.
    pub noise: Vec<NoiseInfo>,
    /// The paper's cross-adversary protocol (Tables 12/13).
    pub cross: Vec<CrossAdversary>,
    /// The labelers on the independent query set (issue 18).
    pub independent: Vec<independent::Row>,
    /// Properties that hold by construction.
    pub checks: Vec<Check>,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
}

impl Results {
    /// The cell for (corpus, labeler, policy, view, adversary), if computed.
    #[must_use]
    pub fn cell(
        &self,
        corpus: CorpusKind,
        labeler: &str,
        policy: Policy,
        view: View,
        adversary: Adversary,
    ) -> Option<&Cell> {
        let (c, p, v, a) = (
            corpus.as_str(),
            policy.id(),
            view.as_str(),
            adversary.as_str(),
        );
        self.cells.iter().find(|x| {
            x.corpus == c
                && x.labeler == labeler
                && x.policy == p
                && x.view == v
                && x.adversary == a
        })
    }

    /// Whether every check held.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// The replays of one policy over a corpus.
struct Run {
    policy: Policy,
    replays: Vec<Replay>,
    marginal: Vec<usize>,
}

/// One experiment: a corpus under one labeler variant, its policies, views and adversaries.
struct Experiment {
    corpus: CorpusKind,
    labeler: String,
    env: Env,
    policies: Vec<Policy>,
    views: Vec<View>,
    adversaries: Vec<Adversary>,
}

impl Experiment {
    /// An experiment on `corpus` under labeler `kind`, provider view only.
    fn new(
        corpus: CorpusKind,
        kind: LabelerKind,
        policies: Vec<Policy>,
        adversaries: Vec<Adversary>,
    ) -> Self {
        Experiment {
            corpus,
            labeler: kind.as_str().to_owned(),
            env: Env::new(kind),
            policies,
            views: vec![View::Provider],
            adversaries,
        }
    }
}

fn experiments() -> Vec<Experiment> {
    use CorpusKind::{Enterprise30, MultiTool30, Neutral40, Pooled30, Pooled150, Static30};
    use LabelerKind::{Constant, Content, Gold};
    let mut thirteen_sweep: Vec<Policy> = Policy::THIRTEEN.to_vec();
    thirteen_sweep.extend([Policy::Gate(3), Policy::Gate(5), Policy::Gate(9)]);
    let label_list = vec![Adversary::Keyword, Adversary::Tfidf, Adversary::Oracle];
    let mut all = label_list.clone();
    all.extend([Adversary::Decoy, Adversary::NbLoo]);
    let mut views = View::OBSERVERS.to_vec();
    views.extend([
        View::ArgsAndNames,
        View::DestinationAndNames,
        View::NamesOnly,
    ]);
    let thirteen = || Policy::THIRTEEN.to_vec();
    // The policies whose behaviour depends on the labeler, with their references.
    let by_labeler = || vec![Policy::Naive, Policy::NoSpec, Policy::Rewrite, Policy::Drop];
    let static_plan = vec![
        Policy::Naive,
        Policy::LateScrub,
        Policy::Sia,
        Policy::Acl,
        Policy::DropDest,
        Policy::Rewrite,
        Policy::Shadow,
        Policy::Drop,
        Policy::NoSpec,
    ];
    let mut pooled150 = Experiment::new(Pooled150, Content, thirteen_sweep, all.clone());
    pooled150.views = views;
    let mut out = vec![
        Experiment::new(Static30, Content, static_plan, label_list.clone()),
        Experiment::new(Pooled30, Content, thirteen(), all),
        pooled150,
        Experiment::new(Pooled150, Gold, by_labeler(), label_list.clone()),
        Experiment::new(Pooled150, Constant, by_labeler(), label_list.clone()),
        Experiment::new(Static30, Gold, by_labeler(), label_list.clone()),
        Experiment::new(Static30, Constant, by_labeler(), label_list.clone()),
        Experiment::new(Neutral40, Gold, by_labeler(), vec![Adversary::Oracle]),
        Experiment::new(Enterprise30, Gold, by_labeler(), label_list.clone()),
        Experiment::new(Enterprise30, Content, thirteen(), label_list.clone()),
        Experiment::new(MultiTool30, Content, thirteen(), label_list),
        Experiment::new(Neutral40, Content, thirteen(), vec![Adversary::Oracle]),
    ];
    for rate in NOISE_RATES {
        let mut e = Experiment::new(
            Pooled150,
            Gold,
            vec![
                Policy::Naive,
                Policy::PreScrub,
                Policy::LateScrub,
                Policy::Acl,
                Policy::Rewrite,
                Policy::Shadow,
                Policy::Drop,
            ],
            vec![Adversary::Oracle],
        );
        e.env = e.env.with_noise(rate);
        e.labeler = noise_name(rate);
        out.push(e);
    }
    out
}

/// False-negative label-noise rates of Table 10.
pub const NOISE_RATES: [f64; 3] = [0.05, 0.10, 0.20];

/// The labeler-variant name of a noise rate (`gold-fn10`): noise flips the gold labeler's
/// labels.
#[must_use]
pub fn noise_name(rate: f64) -> String {
    format!("gold-fn{:02}", (rate * 100.0).round() as u32)
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Run the whole evaluation; `progress` receives one line per finished experiment.
#[must_use]
pub fn run(options: &Options, progress: &mut dyn FnMut(&str)) -> Results {
    let started = std::time::Instant::now();
    let mut corpora: BTreeMap<CorpusKind, Corpus> = BTreeMap::new();
    let mut infos = Vec::new();
    let mut checks = Vec::new();
    for kind in CorpusKind::ALL {
        let generated = generate(kind, &options.seeds);
        let text = generated.to_jsonl().unwrap_or_default();
        let again = generate(kind, &options.seeds)
            .to_jsonl()
            .unwrap_or_default();
        checks.push(Check {
            name: format!(
                "{}: frozen frontier file is byte-identical across generations",
                kind.as_str()
            ),
            ok: !text.is_empty() && text == again,
            detail: format!("sha256 {}", sha256_hex(&text)),
        });
        // Every policy replays the frozen file's bytes, not the generator's memory.
        let c = match Corpus::from_jsonl(kind, generated.menu.clone(), &text) {
            Ok(c) if c == generated => c,
            other => {
                checks.push(Check {
                    name: format!(
                        "{}: frozen frontier file parses back to the corpus",
                        kind.as_str()
                    ),
                    ok: false,
                    detail: other.err().unwrap_or_else(|| "parsed rows differ".into()),
                });
                generated
            }
        };
        infos.push(CorpusInfo {
            corpus: kind.as_str().to_owned(),
            labels: c.menu.labels.len(),
            frontier: frontier_stats(&c.rows),
            frontier_sha256: sha256_hex(&text),
        });
        corpora.insert(kind, c);
    }
    let mut cells = Vec::new();
    let mut noise = Vec::new();
    let mut cross = Vec::new();
    for ex in experiments() {
        let step = std::time::Instant::now();
        let Some(corpus) = corpora.get(&ex.corpus) else {
            continue;
        };
        let runs: Vec<Run> = ex
            .policies
            .iter()
            .map(|&policy| {
                let replays: Vec<Replay> = corpus
                    .rows
                    .iter()
                    .map(|r| replay(policy, r, &ex.env))
                    .collect();
                let marginal = corpus
                    .rows
                    .iter()
                    .zip(&replays)
                    .map(|(row, s)| {
                        let c = counterfactual(policy, row, &ex.env);
                        difference(
                            project(Observer::Provider, &s.events),
                            &project(Observer::Provider, &c.events),
                        )
                        .len()
                    })
                    .collect();
                Run {
                    policy,
                    replays,
                    marginal,
                }
            })
            .collect();
        if ex.env.noise > 0.0 {
            let (mut f, mut fd, mut d, mut dd) = (0, 0, 0, 0);
            for r in runs.iter().filter(|r| r.policy == Policy::Rewrite) {
                for x in &r.replays {
                    f += x.flips.0;
                    fd += x.flips.1;
                    d += x.dest_flips.0;
                    dd += x.dest_flips.1;
                }
            }
            noise.push(NoiseInfo {
                rate: ex.env.noise,
                arg_flips: f as f64 / fd.max(1) as f64,
                dest_flips: d as f64 / dd.max(1) as f64,
            });
        }
        if ex.corpus == CorpusKind::Pooled30 && ex.labeler == "content" {
            cross = cross_adversary(corpus, &runs, options);
        }
        checks.extend(construction_checks(&ex, corpus, &runs));
        cells.extend(score(&ex, corpus, &runs, options));
        progress(&format!(
            "{} / {}: {} policies × {} rows, {:.1} s",
            ex.corpus.as_str(),
            ex.labeler,
            runs.len(),
            corpus.rows.len(),
            step.elapsed().as_secs_f64()
        ));
    }
    checks.extend(result_checks(&cells, &corpora));
    let step = std::time::Instant::now();
    let independent: Vec<independent::Row> = [
        LabelerKind::Content,
        LabelerKind::Gold,
        LabelerKind::Constant,
    ]
    .into_iter()
    .flat_map(independent::evaluate)
    .collect();
    let constant_leaks = independent
        .iter()
        .filter(|r| r.labeler == "constant" && r.set.starts_with("sensitive"))
        .map(|r| r.leaked)
        .fold(0.0, f64::max);
    checks.push(Check {
        name: "independent queries: the constant labeler lets no sensitive span through".into(),
        ok: constant_leaks == 0.0,
        detail: format!("max leaked share {constant_leaks:.3}"),
    });
    progress(&format!(
        "independent queries: 3 labelers, {:.1} s",
        step.elapsed().as_secs_f64()
    ));
    Results {
        generator: corpus::GENERATOR_VERSION.to_owned(),
        seeds: options.seeds.clone(),
        resamples: options.resamples,
        bootstrap_seed: stats::BOOTSTRAP_SEED,
        corpora: infos,
        cells,
        noise,
        cross,
        independent,
        checks,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Credits, stats and paired comparisons of one experiment.
fn score(ex: &Experiment, corpus: &Corpus, runs: &[Run], options: &Options) -> Vec<Cell> {
    let scorers = Scorers::new(&corpus.menu);
    let n_labels = corpus.menu.labels.len();
    let rows = corpus.rows.len();
    let boot = Bootstrap::new(rows, options.resamples, stats::BOOTSTRAP_SEED);
    let tasks = corpus.kind.tasks().max(1) as f64 * options.seeds.len().max(1) as f64;
    let mut out: Vec<Cell> = Vec::new();
    for &view in &ex.views {
        // Tokens per (policy, row).
        let toks: Vec<Vec<Vec<String>>> = runs
            .iter()
            .map(|r| r.replays.iter().map(|x| tokens(view, x)).collect())
            .collect();
        for &adv in &ex.adversaries {
            if adv == Adversary::NbLoo && view != View::Provider {
                continue;
            }
            for (run, run_toks) in runs.iter().zip(&toks) {
                let mut top = [Vec::new(), Vec::new(), Vec::new()];
                let mut hits = Vec::new();
                let mut truth = Vec::new();
                let mut pred = Vec::new();
                let nb = (adv == Adversary::NbLoo).then(|| {
                    let labeled: Vec<(Vec<String>, usize)> = run_toks
                        .iter()
                        .zip(&corpus.rows)
                        .map(|(t, r)| (t.clone(), r.label.unwrap_or(0)))
                        .collect();
                    nb_loo(&labeled, n_labels)
                });
                for (i, (t, row)) in run_toks.iter().zip(&corpus.rows).enumerate() {
                    let y = row.label.unwrap_or(usize::MAX);
                    let scores = match &nb {
                        Some(s) => s.get(i).cloned().unwrap_or_default(),
                        None => scorers.scores(adv, t),
                    };
                    let mut rng = Rng::stream(
                        stats::BOOTSTRAP_SEED,
                        &format!("{}/{}/{i}", adv.as_str(), view.as_str()),
                    );
                    if adv == Adversary::Decoy {
                        let (c, hit) = scorers.decoy(&scores, y, &mut rng);
                        for v in &mut top {
                            v.push(c);
                        }
                        hits.push(f64::from(u8::from(hit)));
                    } else if row.label.is_none() {
                        // Neutral task: "recovery" is naming any sensitive label at all (the
                        // oracle answers "none" when nothing in the view scores above 0).
                        let named = f64::from(u8::from(scores.iter().any(|&s| s > 0.0)));
                        for v in &mut top {
                            v.push(named);
                        }
                        hits.push(named);
                    } else {
                        for (v, k) in top.iter_mut().zip([1, 3, 5]) {
                            v.push(credit(&scores, y, k));
                        }
                        let p = predict(&scores, &mut rng);
                        hits.push(f64::from(u8::from(p == y)));
                        truth.push(y);
                        pred.push(p);
                    }
                }
                let [top1, top3, top5] = top;
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
                let recovery = mean(&top1);
                let per_seed = options
                    .seeds
                    .iter()
                    .map(|s| {
                        let v: Vec<f64> = corpus
                            .rows
                            .iter()
                            .zip(&top1)
                            .filter(|(r, _)| r.seed == *s)
                            .map(|(_, c)| *c)
                            .collect();
                        mean(&v)
                    })
                    .collect();
                let has_pred = !truth.is_empty() && adv != Adversary::Decoy;
                let r = &run.replays;
                out.push(Cell {
                    corpus: ex.corpus.as_str().to_owned(),
                    labeler: ex.labeler.clone(),
                    policy: run.policy.id(),
                    view: view.as_str().to_owned(),
                    adversary: adv.as_str().to_owned(),
                    n: rows,
                    recovery,
                    ci: boot.mean_ci(&top1),
                    chance_normalized: chance_normalized(
                        recovery,
                        if adv == Adversary::Decoy {
                            11
                        } else {
                            n_labels
                        },
                    ),
                    top3: mean(&top3),
                    top5: mean(&top5),
                    nmi: has_pred.then(|| stats::nmi(&truth, &pred)),
                    ami: has_pred.then(|| stats::ami(&truth, &pred)),
                    vs_naive: None,
                    provider_calls: r.iter().map(|x| x.provider_calls).sum::<usize>() as f64
                        / tasks,
                    marginal_provider: run.marginal.iter().sum::<usize>() as f64 / tasks,
                    intervened: r.iter().map(|x| x.intervened).sum::<usize>() as f64
                        / r.iter().map(|x| x.proposed).sum::<usize>().max(1) as f64,
                    delivered: r.iter().map(|x| x.delivered).sum::<usize>() as f64
                        / r.iter().map(|x| x.committed).sum::<usize>().max(1) as f64,
                    credits: top1,
                    hits,
                    per_seed,
                });
            }
        }
    }
    // Paired Δ vs Naive on the same rows, view and adversary.
    type Rows = (Vec<f64>, Vec<f64>);
    let naive: BTreeMap<(String, String), Rows> = out
        .iter()
        .filter(|c| c.policy == Policy::Naive.id())
        .map(|c| {
            (
                (c.view.clone(), c.adversary.clone()),
                (c.credits.clone(), c.hits.clone()),
            )
        })
        .collect();
    for c in &mut out {
        if c.policy == Policy::Naive.id() {
            continue;
        }
        if let Some((base, base_hits)) = naive.get(&(c.view.clone(), c.adversary.clone())) {
            // The sign test counts rows where exactly one of the two is right (ties at the top
            // broken by the same seeded draw for every policy); the CI is on the credits.
            let t = sign_test(&c.hits, base_hits);
            c.vs_naive = Some(Paired {
                delta: c.recovery - base.iter().sum::<f64>() / base.len().max(1) as f64,
                ci: boot.paired_delta_ci(&c.credits, base),
                b: t.b,
                c: t.c,
                p: t.p,
            });
        }
    }
    out
}

/// The paper's cross-adversary protocol over the 30-task corpus (see [`CrossAdversary`]).
fn cross_adversary(corpus: &Corpus, runs: &[Run], options: &Options) -> Vec<CrossAdversary> {
    let Some(&seed) = options.seeds.first() else {
        return Vec::new();
    };
    let mut rows: Vec<(Vec<String>, usize)> = Vec::new();
    for run in runs.iter().filter(|r| r.policy != Policy::Fides) {
        for (row, x) in corpus.rows.iter().zip(&run.replays) {
            if let (true, Some(y)) = (row.seed == seed, row.label) {
                rows.push((tokens(View::Provider, x), y));
            }
        }
    }
    let n_labels = corpus.menu.labels.len();
    let scorers = Scorers::new(&corpus.menu);
    let boot = Bootstrap::new(rows.len(), options.resamples, stats::BOOTSTRAP_SEED);
    let nb = nb_loo(&rows, n_labels);
    [
        Adversary::Keyword,
        Adversary::Tfidf,
        Adversary::NbLoo,
        Adversary::Oracle,
    ]
    .iter()
    .map(|&a| {
        let credits: Vec<f64> = rows
            .iter()
            .enumerate()
            .map(|(i, (t, y))| match a {
                Adversary::NbLoo => nb.get(i).map_or(0.0, |s| credit(s, *y, 1)),
                _ => credit(&scorers.scores(a, t), *y, 1),
            })
            .collect();
        CrossAdversary {
            adversary: a.as_str().to_owned(),
            n: credits.len(),
            recovery: credits.iter().sum::<f64>() / credits.len().max(1) as f64,
            ci: boot.mean_ci(&credits),
        }
    })
    .collect()
}

/// Properties of the replays themselves (before any adversary).
fn construction_checks(ex: &Experiment, corpus: &Corpus, runs: &[Run]) -> Vec<Check> {
    let mut out = Vec::new();
    let name = format!("{} / {}", ex.corpus.as_str(), ex.labeler);
    let find = |p: Policy| runs.iter().find(|r| r.policy == p);
    if let Some(naive) = find(Policy::Naive) {
        for p in [Policy::LateScrub, Policy::Acl, Policy::Sia] {
            if let Some(r) = find(p) {
                let differing = naive
                    .replays
                    .iter()
                    .zip(&r.replays)
                    .filter(|(a, b)| {
                        project(Observer::Provider, &a.events)
                            != project(Observer::Provider, &b.events)
                    })
                    .count();
                out.push(Check {
                    name: format!(
                        "{name}: {} provider projection ≡ Naive (all tools are reads)",
                        p.name()
                    ),
                    ok: differing == 0,
                    detail: format!("{differing} of {} rows differ", r.replays.len()),
                });
            }
        }
    }
    if let Some(shadow) = find(Policy::Shadow) {
        let sent: usize = shadow.replays.iter().map(|x| x.provider_calls).sum();
        let plan: usize = corpus.rows.iter().map(|r| r.plan.len()).sum();
        out.push(Check {
            name: format!("{name}: Shadow sends only the plan's committed calls (0 ghosts, reuse on promotion)"),
            ok: sent == plan,
            detail: format!("{sent} provider calls, {plan} plan calls"),
        });
    }
    if let Some(rw) = find(Policy::Rewrite).filter(|_| ex.env.noise == 0.0) {
        let labeler = ex.env.labeler();
        let forbidden: usize = rw
            .replays
            .iter()
            .flat_map(|x| x.events.iter())
            .filter(|e| e.dispatch == Dispatch::Provider)
            .flat_map(|e| e.fields.iter())
            .filter(|(_, v)| labeler.label_text(v) > ArgLabel::Personal)
            .count();
        let rewritten = rw
            .replays
            .iter()
            .flat_map(|x| x.events.iter())
            .filter(|e| e.decision == "rewrite")
            .count();
        out.push(Check {
            name: format!("{name}: Rewrite dispatches no field its labeler labels above personal"),
            ok: forbidden == 0 && (rewritten > 0 || ex.corpus == CorpusKind::Neutral40),
            detail: format!("{forbidden} forbidden fields sent, {rewritten} calls rewritten"),
        });
    }
    // Against the generator's truth: with labels that cover the topic, no dispatched field
    // still carries the task's label phrase or its paraphrase.
    if let (Some(rw), true) = (
        find(Policy::Rewrite),
        matches!(ex.labeler.as_str(), "gold" | "constant"),
    ) {
        let words = |t: &str| -> Vec<String> {
            t.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect()
        };
        let mut carrying = 0;
        for (row, x) in corpus.rows.iter().zip(&rw.replays) {
            let Some(label) = row.label.and_then(|l| corpus.menu.labels.get(l)) else {
                continue;
            };
            let phrases = [words(&label.name), words(&label.paraphrase)];
            for e in x.events.iter().filter(|e| e.dispatch == Dispatch::Provider) {
                for (_, v) in &e.fields {
                    let w = words(v);
                    if phrases
                        .iter()
                        .any(|p| !p.is_empty() && w.windows(p.len()).any(|win| win == p.as_slice()))
                    {
                        carrying += 1;
                    }
                }
            }
        }
        out.push(Check {
            name: format!("{name}: Rewrite sends no field carrying the task's label phrase or paraphrase (generator truth)"),
            ok: carrying == 0,
            detail: format!("{carrying} fields"),
        });
    }
    let sweep: Vec<usize> = Policy::GATE_SWEEP
        .iter()
        .filter_map(|&p| find(p))
        .map(|r| r.replays.iter().map(|x| x.provider_calls).sum())
        .collect();
    if sweep.len() == Policy::GATE_SWEEP.len() {
        out.push(Check {
            name: format!("{name}: Gate provider calls fall as τ rises"),
            ok: sweep.windows(2).all(|w| w.first() >= w.get(1)),
            detail: format!("{sweep:?} calls at τ = 0.3, 0.5, 0.7, 0.9"),
        });
    }
    out
}

/// Properties of the scored cells.
fn result_checks(cells: &[Cell], corpora: &BTreeMap<CorpusKind, Corpus>) -> Vec<Check> {
    let mut out = Vec::new();
    for c in cells.iter().filter(|c| {
        c.policy == Policy::Shadow.id()
            && c.view == View::Provider.as_str()
            && c.labeler == "content"
            && matches!(c.adversary.as_str(), "keyword" | "tf-idf" | "oracle")
            && c.corpus != CorpusKind::Static30.as_str()
            && c.corpus != CorpusKind::Neutral40.as_str()
    }) {
        let n = corpora
            .iter()
            .find(|(k, _)| k.as_str() == c.corpus)
            .map_or(1, |(_, v)| v.menu.labels.len());
        out.push(Check {
            name: format!(
                "{}: Shadow's empty provider view scores exactly chance ({})",
                c.corpus, c.adversary
            ),
            ok: (c.recovery - 1.0 / n as f64).abs() < 1e-12,
            detail: format!("recovery {:.6} vs 1/{n}", c.recovery),
        });
    }
    for c in cells.iter().filter(|c| {
        matches!(c.policy.as_str(), "late-scrub" | "acl" | "sia")
            && c.view == View::Provider.as_str()
    }) {
        if let Some(p) = &c.vs_naive {
            out.push(Check {
                name: format!(
                    "{} / {}: {} has 0 discordant pairs vs Naive ({})",
                    c.corpus, c.labeler, c.policy, c.adversary
                ),
                ok: p.b == 0 && p.c == 0 && p.delta == 0.0,
                detail: format!("b = {}, c = {}, Δ = {}", p.b, p.c, p.delta),
            });
        }
    }
    out
}
