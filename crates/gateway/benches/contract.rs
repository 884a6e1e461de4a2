//! Criterion benchmarks of the issue-time privacy contract monitor (Ghost Tool Calls):
//!
//! - `contract/decide`: `decide(e, κ)` on an already labeled speculative `web_search` event
//!   with one intent-revealing field under the paper's worked contract (→ REWRITE) — the
//!   monitor's decision alone, which the issue targets at p50 ≤ 2 µs;
//! - `contract/decide_allow`: the same for a public query (→ ALLOW, the whole pipeline);
//! - `contract/label_and_decide`: the content-aware labeler (detectors + topic lexicon) on
//!   the arguments, then `decide`;
//! - `contract/label_and_decide_200`: the same on a 200-character argument (issue 18's
//!   budget: ≤ 20 µs), once sensitive and once neutral;
//! - `contract/rewrite_relabel_check`: the REWRITE transformations, the re-label and the A3
//!   check.
//!
//! `cargo bench -p secureclaw-gateway --bench contract`; under `cargo test --all-targets` each
//! benchmark runs once as a smoke test.

use criterion::{Criterion, criterion_group, criterion_main};
use secureclaw_core::contract::{
    Contract, DestinationLabel, EffectLabel, Mode, check_rewrite, decide,
};
use secureclaw_core::labeler::{DestinationRule, Labeler, LabelerConfig};
use serde_json::{Map, Value};
use std::hint::black_box;

fn labeler() -> Labeler {
    Labeler::new(LabelerConfig {
        destinations: vec![DestinationRule {
            pattern: "*api.brave.com*".into(),
            label: DestinationLabel::Public,
        }],
        ..LabelerConfig::default()
    })
}

fn args(q: &str) -> Map<String, Value> {
    [("q".to_owned(), Value::String(q.to_owned()))]
        .into_iter()
        .collect()
}

const DEST: &str = "https://api.brave.com/res/v1/web/search";

fn bench(c: &mut Criterion) {
    let l = labeler();
    let k = Contract::paper_web_search();
    let intent = args("penalty for breaking my lease early");
    let public = args("weather in Paris next week");
    let label = |a: &Map<String, Value>| {
        l.label(
            "search",
            "web_search",
            DEST,
            Some(EffectLabel::ExternalRead),
            a,
            Mode::Speculative,
            Some(0.9),
        )
    };
    let e_intent = label(&intent);
    let e_public = label(&public);
    c.bench_function("contract/decide", |b| {
        b.iter(|| decide(black_box(&e_intent), black_box(&k), 0))
    });
    c.bench_function("contract/decide_allow", |b| {
        b.iter(|| decide(black_box(&e_public), black_box(&k), 0))
    });
    c.bench_function("contract/label_and_decide", |b| {
        b.iter(|| decide(&label(black_box(&intent)), &k, 0));
    });
    // 200 characters each (issue 18's budget is for a 200-character argument).
    let long_sensitive = args(
        "my neurologist thinks I have multiple system atrophy, what are the side effects of \
         the medication they want to start and should I tell my employer before my medical leave starts next month or wait",
    );
    let long_neutral = args(
        "best hiking trails near Lake Tahoe for a family with two kids in early October, with \
         parking, picnic areas and a short loop under five miles that is open after the rain in the late afternoon hours",
    );
    c.bench_function("contract/label_and_decide_200", |b| {
        b.iter(|| decide(&label(black_box(&long_sensitive)), &k, 0));
    });
    c.bench_function("contract/label_and_decide_200_neutral", |b| {
        b.iter(|| decide(&label(black_box(&long_neutral)), &k, 0));
    });
    let v = decide(&e_intent, &k, 0);
    let fields = match &v {
        secureclaw_core::contract::Verdict::Rewrite { fields } => fields.clone(),
        _ => Vec::new(),
    };
    c.bench_function("contract/rewrite_relabel_check", |b| {
        b.iter(|| {
            let out = l.rewrite("search__web_search", black_box(&intent), &fields, &k);
            check_rewrite(&label(&out), &k, v.clone())
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
