//! Percentile driver for the in-process PREVIEW + COMMIT path of a 1 KiB request (the issue
//! asks for p50 and p99, which criterion does not report).
//!
//! Same fixture as `benches/commit_path.rs`: a real gateway (key ring, default Cedar policy
//! set, `SqliteStore`) in front of an in-process no-op upstream. Every measured iteration is
//! one `Gateway::preview` with a fresh action id followed by its `Gateway::commit`; preview
//! and commit are also timed separately. The pieces (canonical bytes + binding, Cedar
//! decision, artifact seal + open, acceptance predicate with an in-memory ledger, one audit
//! append, and the read path's declassification of a one-word text result) are timed the same
//! way for the breakdown.
//!
//! ```text
//! cargo run --release -p secureclaw-gateway --example commit_latency -- \
//!     [--iterations N] [--warmup W] [--only wal|memory|pieces|store]
//! ```
//!
//! Defaults: N = 20000 measured iterations per row after W = 2000 warm-up iterations, every
//! group of rows (`--only` picks one, e.g. to count fsyncs under `strace`). Prints one Markdown
//! table row per measurement, in microseconds. Nothing here checks a threshold.

#[path = "../benches/common/mod.rs"]
mod common;

use common::{CoreParts, Fixture, MemoryLedger, StoreKind, action_id, must, now, policy_request};
use secureclaw_core::acceptance::{CommitAttempt, accept};
use secureclaw_core::artifact::AuthorizationArtifact;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::bind;
use secureclaw_core::policy::PolicyEngine;
use secureclaw_core::summary::{SummaryConfig, summarize_text};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Latency samples of one measurement, in nanoseconds.
struct Samples {
    name: String,
    ns: Vec<u64>,
}

impl Samples {
    fn new(name: impl Into<String>, capacity: usize) -> Self {
        Self {
            name: name.into(),
            ns: Vec::with_capacity(capacity),
        }
    }

    fn push(&mut self, d: Duration) {
        self.ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Nearest-rank percentile `p` (0 < p ≤ 100) of sorted samples, in µs.
    fn percentile(sorted: &[u64], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "rank of a sample count far below 2^52"
        )]
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        let idx = rank.clamp(1, sorted.len()) - 1;
        #[expect(clippy::cast_precision_loss, reason = "nanoseconds below 2^52")]
        sorted.get(idx).map_or(f64::NAN, |&v| v as f64 / 1000.0)
    }

    fn report(mut self) {
        self.ns.sort_unstable();
        let n = self.ns.len();
        #[expect(clippy::cast_precision_loss, reason = "sums and counts far below 2^52")]
        let mean = self.ns.iter().map(|&v| v as f64).sum::<f64>() / n.max(1) as f64 / 1000.0;
        println!(
            "| {} | {n} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            self.name,
            Self::percentile(&self.ns, 50.0),
            Self::percentile(&self.ns, 90.0),
            Self::percentile(&self.ns, 99.0),
            Self::percentile(&self.ns, 100.0),
            mean,
        );
    }
}

/// Warm up `warmup` times, then time `n` calls of `f`.
fn time(name: &str, warmup: usize, n: usize, mut f: impl FnMut()) {
    for _ in 0..warmup {
        f();
    }
    let mut s = Samples::new(name, n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        s.push(t.elapsed());
    }
    s.report();
}

fn preview_commit_rows(kind: StoreKind, warmup: usize, n: usize) {
    let fx = Fixture::new(kind);
    for _ in 0..warmup {
        must(fx.preview_commit(), "warm-up preview + commit");
    }
    let label = kind.label();
    let mut total = Samples::new(format!("preview + commit, {label}"), n);
    let mut preview = Samples::new(format!("  of which preview, {label}"), n);
    let mut commit = Samples::new(format!("  of which commit, {label}"), n);
    for i in 0..n {
        // A different body each time, as real effects have: the same one would let every
        // per-text memo (issue 14, BENCHMARKS.md §15) answer even the first walk.
        let arguments = varied(&fx.arguments, i);
        let t0 = Instant::now();
        let p = must(
            fx.runtime
                .block_on(fx.gateway.preview(&fx.session, common::TOOL, &arguments))
                .map_err(|r| format!("{r:?}")),
            "preview",
        );
        let t1 = Instant::now();
        let outcome = fx.runtime.block_on(fx.gateway.commit(
            &fx.session,
            common::TOOL,
            arguments,
            &p.action_id,
            Some(&p.artifact),
        ));
        let t2 = Instant::now();
        if p.decision != secureclaw_gateway::PreviewDecision::Allow
            || !matches!(outcome, secureclaw_gateway::CallOutcome::Completed { .. })
        {
            eprintln!("unexpected outcome: decision {} / {outcome:?}", p.decision);
            std::process::exit(1);
        }
        preview.push(t1 - t0);
        commit.push(t2 - t1);
        total.push(t2 - t0);
    }
    total.report();
    preview.report();
    commit.report();
}

/// `arguments` with the first characters of `body` replaced by `i` in letters, same length.
fn varied(
    arguments: &serde_json::Map<String, serde_json::Value>,
    i: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let mut out = arguments.clone();
    if let Some(serde_json::Value::String(body)) = out.get_mut("body") {
        // Letters, not digits: a run of digits reads as a phone or account number (a target).
        let mut tag: String = (0..6)
            .map(|k| char::from(b'a' + u8::try_from((i / 26usize.pow(k)) % 26).unwrap_or(0)))
            .collect();
        tag.push(' ');
        if body.is_char_boundary(tag.len()) {
            body.replace_range(..tag.len(), &tag);
        }
    }
    out
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| must(v.parse::<usize>(), name))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--iterations", 20_000);
    let warmup = arg(&args, "--warmup", 2_000);
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let run = |group: &str| only.as_deref().is_none_or(|o| o == group);
    println!(
        "commit_latency: {n} measured iterations per row after {warmup} warm-up iterations; times in µs"
    );
    println!();
    println!("| measurement | n | p50 | p90 | p99 | max | mean |");
    println!("|---|---:|---:|---:|---:|---:|---:|");

    if run("wal") {
        preview_commit_rows(StoreKind::SqliteWal, warmup, n);
    }
    if run("memory") {
        preview_commit_rows(StoreKind::SqliteMemory, warmup, n);
    }
    if run("pieces") {
        pieces(warmup, n);
    }
    if run("store") {
        store_rows(warmup, n);
    }
}

fn pieces(warmup: usize, n: usize) {
    let fx = Fixture::new(StoreKind::SqliteMemory);
    let parts = CoreParts::new(&fx);
    let request = &parts.request;
    time("core: canonical bytes (RFC 8785), 1 KiB", warmup, n, || {
        black_box(must(
            black_box(request).canonical_bytes(),
            "canonical bytes",
        ));
    });
    time("core: canonical bytes + binding digest", warmup, n, || {
        black_box(must(bind(&parts.keys, black_box(request)), "bind"));
    });
    let facts = policy_request();
    time(
        "policy: Cedar decision (effect, 1 anchored target)",
        warmup,
        n,
        || {
            black_box(parts.policy.decide(black_box(&facts)));
        },
    );
    let summary = SummaryConfig::default();
    time(
        "core: declassify the text `ok` (summarize_text, default config)",
        warmup,
        n,
        || {
            black_box(summarize_text(black_box("ok"), &summary, &mut |_| {
                String::new()
            }));
        },
    );
    let claims = parts.artifact(&action_id(), now());
    time("core: artifact seal + open", warmup, n, || {
        let token = must(black_box(claims.clone()).seal(&parts.keys), "seal");
        black_box(must(
            AuthorizationArtifact::open(&token, &parts.keys),
            "open",
        ));
    });

    // Acceptance: each call spends its action id, so artifacts are sealed before timing.
    let ledger = MemoryLedger::default();
    let digest = parts.request.ctx.policy_digest.clone();
    let mut accept_samples = Samples::new("core: acceptance predicate, in-memory ledger", n);
    for i in 0..warmup + n {
        let id = action_id();
        let at = now();
        let token = must(parts.artifact(&id, at).seal(&parts.keys), "seal");
        let attempt = CommitAttempt {
            artifact: Some(&token),
            action_id: &id,
            request,
            current_policy_digest: &digest,
            confirmation: None,
            now: at,
            max_skew_ms: 5_000,
            max_confirmation_age_ms: 3_600_000,
        };
        let t = Instant::now();
        let proof = must(
            common::ready(accept(&parts.keys, &ledger, &attempt)).map_err(|r| r.reason),
            "accept",
        );
        let d = t.elapsed();
        let _spent = black_box(proof);
        if i >= warmup {
            accept_samples.push(d);
        }
    }
    accept_samples.report();
}

fn store_rows(warmup: usize, n: usize) {
    for kind in [StoreKind::SqliteWal, StoreKind::SqliteMemory] {
        let fx = Fixture::new(kind);
        let store = fx.store.clone();
        time(
            &format!("store: one audit append, {}", kind.label()),
            warmup,
            n,
            || {
                let mut ev = AuditEvent::new(AuditKind::Preview, now());
                ev.tool = Some(common::TOOL.into());
                black_box(must(store.append_audit(ev), "append audit"));
            },
        );
    }
}
