//! Wall time of a speculative fan-out of 8 read calls through the gateway, with and without
//! issue-time privacy contracts, against an upstream with simulated provider latency
//! (Ghost Tool Calls issue: "≤ 5% added wall time").
//!
//! ```text
//! cargo run --release -p secureclaw-gateway --example speculative_fanout -- \
//!     [--rounds N] [--latency-ms L]
//! ```
//!
//! Each round issues the same 8 calls concurrently (`join_all`) in a fresh session:
//! - `without`: `[gateway.speculation]` disabled and the calls sent as committed (what a
//!   gateway without contracts does: every call dispatched as is);
//! - `with`: contracts enabled, calls sent as `speculative` with confidences ≥ τ, so every
//!   one is labeled, decided, rewritten where needed and traced to the audit log, and all 8
//!   are dispatched (no DEFER/SHADOW: the comparison is the cost of the monitor, not of
//!   sending fewer calls).
//!
//! Rows alternate between the two configurations so drift on the shared machine hits both.
//! Prints p50/p90 wall time per fan-out in milliseconds and the overhead of the p50s. The
//! store is a SQLite file (WAL, `synchronous=FULL`), as in production. Nothing here checks a
//! threshold.

use secureclaw_core::contract::{ArgLabel, Contract, DestinationLabel, Mode, ShadowPromotion};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::labeler::DestinationRule;
use secureclaw_core::policy::EffectClass;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::{
    BoxFuture, CallMeta, CallOutcome, Gateway, GatewayConfig, ToolOutput, ToolRule, Upstream,
    UpstreamError, UpstreamSpec, UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct SlowSearch {
    latency: Duration,
}

impl Upstream for SlowSearch {
    fn id(&self) -> &str {
        "search"
    }
    fn destination(&self) -> &str {
        "https://search.example/api"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async {
            Ok(vec![UpstreamTool {
                name: "web_search".into(),
                title: None,
                description: Some("search the web".into()),
                input_schema: Map::new(),
                read_only_hint: true,
                destructive_hint: false,
                open_world_hint: true,
                output_schema: None,
            }])
        })
    }
    fn call_tool(
        &self,
        _name: String,
        _arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            tokio::time::sleep(self.latency).await;
            Ok(ToolOutput {
                content: vec![json!({"type": "text", "text": "3 results"})],
                structured: None,
                is_error: false,
            })
        })
    }
}

const QUERIES: [&str; 8] = [
    "tenant rights lease termination penalty",
    "available apartments near me",
    "current personal loan rates",
    "weather in Paris next week",
    "how to break my lease early",
    "moving companies berlin",
    "quarterly report template",
    "should i hire a lawyer for my lease",
];

fn config(enabled: bool) -> GatewayConfig {
    let mut c = GatewayConfig::default();
    c.limits.upstream_timeout_ms = 60_000;
    // `readOnlyHint` alone makes nothing a read; the operator declares the search a read.
    c.tools.push(ToolRule {
        tool: "search__web_search".into(),
        effect: Some(EffectClass::Read),
        destructive: None,
        targets: None,
        hidden: false,
        ..ToolRule::default()
    });
    c.speculation.enabled = enabled;
    c.speculation.labeler.destinations = vec![DestinationRule {
        pattern: "https://search.example/*".into(),
        label: DestinationLabel::Public,
    }];
    c.speculation.contracts = vec![Contract {
        scope: "*".into(),
        allowed_tools: vec!["search__web_search".into()],
        allowed_destinations: vec!["https://search.example/*".into()],
        max_destination_label: DestinationLabel::TenantInternal,
        max_arg_label: ArgLabel::Personal,
        authorized_observers: BTreeSet::new(),
        branch_threshold: 0.5,
        budget: None,
        shadow_required: false,
        shadow_promotion: ShadowPromotion::Reuse,
        applies_to_committed: false,
    }];
    c
}

async fn gateway(enabled: bool, latency: Duration, dir: &std::path::Path) -> Gateway {
    let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        let _ = getrandom::fill(b);
    }));
    let name = if enabled { "with.db" } else { "without.db" };
    let store = match SqliteStore::open(&dir.join(name), keys.clone()) {
        Ok(s) => Arc::new(s),
        Err(e) => fail(&format!("store: {e}")),
    };
    let policy = match CedarPolicy::load(&[]) {
        Ok(p) => Arc::new(p),
        Err(e) => fail(&format!("policy: {e}")),
    };
    let spec = UpstreamSpec {
        id: "search".into(),
        transport: UpstreamTransport::Http {
            url: "https://search.example/api".into(),
            bearer_token_env: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let up: Arc<dyn Upstream> = Arc::new(SlowSearch { latency });
    let (specs, connector) = in_process(vec![(spec, up)]);
    match Gateway::start(
        keys,
        store,
        policy,
        config(enabled),
        specs,
        &connector,
        system_clock(),
    )
    .await
    {
        Ok(g) => g,
        Err(e) => fail(&format!("gateway: {e}")),
    }
}

fn fail(what: &str) -> ! {
    eprintln!("speculative_fanout: {what}");
    std::process::exit(1)
}

async fn fan_out(gw: &Gateway, speculative: bool) -> Duration {
    let session = match gw.open_session("bench", Default::default()).await {
        Ok(s) => s,
        Err(e) => fail(&format!("session: {e}")),
    };
    let start = Instant::now();
    let calls = QUERIES.iter().enumerate().map(|(i, q)| {
        let meta = if speculative {
            CallMeta {
                mode: Some(Mode::Speculative),
                branch: Some(format!("b{i}")),
                confidence: Some(0.9),
                ..CallMeta::default()
            }
        } else {
            CallMeta::default()
        };
        let args: Map<String, Value> = [("q".to_owned(), Value::String((*q).to_owned()))]
            .into_iter()
            .collect();
        let session = session.clone();
        async move { gw.call(&session, "search__web_search", args, &meta).await }
    });
    let outcomes = futures_join_all(calls).await;
    let took = start.elapsed();
    for o in &outcomes {
        if !matches!(o, CallOutcome::Completed { .. }) {
            fail(&format!("a fan-out call did not complete: {o:?}"));
        }
    }
    took
}

/// `join_all` without another dependency: spawn-free concurrent polling via a JoinSet-like
/// loop over boxed futures.
async fn futures_join_all<F: std::future::Future<Output = CallOutcome>>(
    futs: impl Iterator<Item = F>,
) -> Vec<CallOutcome> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<CallOutcome>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "rank of a small sample count"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn main() {
    let mut rounds = 200usize;
    let mut latency_ms = 50u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().and_then(|v| v.parse::<u64>().ok())) {
            ("--rounds", Some(n)) => rounds = usize::try_from(n).unwrap_or(200),
            ("--latency-ms", Some(n)) => latency_ms = n,
            _ => fail("usage: speculative_fanout [--rounds N] [--latency-ms L]"),
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&format!("runtime: {e}")),
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => fail(&format!("tempdir: {e}")),
    };
    let latency = Duration::from_millis(latency_ms);
    rt.block_on(async {
        let without = gateway(false, latency, dir.path()).await;
        let with = gateway(true, latency, dir.path()).await;
        // warm-up
        for _ in 0..5 {
            fan_out(&without, false).await;
            fan_out(&with, true).await;
        }
        let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        for _ in 0..rounds {
            a.push(fan_out(&without, false).await);
            b.push(fan_out(&with, true).await);
        }
        a.sort_unstable();
        b.sort_unstable();
        println!("| configuration | rounds | upstream latency (ms) | p50 (ms) | p90 (ms) |");
        println!("|---|---|---|---|---|");
        println!(
            "| without contracts (8 committed calls) | {rounds} | {latency_ms} | {:.2} | {:.2} |",
            pct(&a, 50.0),
            pct(&a, 90.0)
        );
        println!(
            "| with contracts (8 speculative calls) | {rounds} | {latency_ms} | {:.2} | {:.2} |",
            pct(&b, 50.0),
            pct(&b, 90.0)
        );
        let overhead = (pct(&b, 50.0) / pct(&a, 50.0) - 1.0) * 100.0;
        println!("\noverhead of contracts at p50: {overhead:+.1}%");
    });
}
