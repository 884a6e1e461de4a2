//! Start-up that fails loudly (issue 12 item 4): an upstream whose `tools/list` never answers,
//! or whose tool schema is nested 200 levels deep, stops `Gateway::start` with an error naming
//! the upstream, the cause and (for the schema) the tool — instead of hanging or accepting it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::{args, assert_denied, completed, in_process, keys, read_rule};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallMeta, Connector, Gateway, GatewayConfig, GatewayError, ToolOutput, Upstream, UpstreamError,
    UpstreamSpec, UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `Silent`: `tools/list` never answers. `Deep(n)`: one tool whose schema nests `n` levels.
enum Broken {
    Silent,
    Deep(usize),
}

impl Upstream for Broken {
    fn id(&self) -> &str {
        "broken"
    }
    fn destination(&self) -> &str {
        "in-process:broken"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            match self {
                Broken::Silent => std::future::pending().await,
                Broken::Deep(n) => {
                    let mut schema = json!({"type": "string"});
                    for _ in 0..*n {
                        schema = json!({"type": "object", "properties": {"x": schema}});
                    }
                    Ok(vec![UpstreamTool {
                        name: "nested".into(),
                        title: None,
                        description: None,
                        input_schema: args(schema),
                        read_only_hint: true,
                        destructive_hint: false,
                        open_world_hint: false,
                        output_schema: None,
                    }])
                }
            }
        })
    }
    fn call_tool(
        &self,
        _name: String,
        _arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async { Ok(ToolOutput::default()) })
    }
}

async fn start(up: Broken, startup_ms: u64) -> Result<Gateway, GatewayError> {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    let mut config = GatewayConfig::default();
    config.limits.upstream_startup_timeout_ms = startup_ms;
    let spec = UpstreamSpec {
        id: "broken".into(),
        transport: UpstreamTransport::Stdio {
            command: "unused".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let (specs, connector) = in_process(vec![(spec, Arc::new(up) as Arc<dyn Upstream>)]);
    Gateway::start(
        keys,
        store,
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config,
        specs,
        &connector,
        system_clock(),
    )
    .await
}

#[tokio::test]
async fn a_tools_list_that_never_answers_stops_start_up_naming_the_upstream() {
    let started = Instant::now();
    let err = start(Broken::Silent, 300).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(err.contains("`broken`"), "{err}");
    assert!(
        err.contains("tools/list did not answer within 300 ms"),
        "{err}"
    );
}

#[tokio::test]
async fn a_schema_200_levels_deep_stops_start_up_naming_the_tool() {
    let err = start(Broken::Deep(200), 30_000)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`broken`"), "{err}");
    assert!(err.contains("tool `nested`"), "{err}");
    assert!(err.contains("deeper than 64"), "{err}");
    // Positive control: a schema within the limit starts.
    start(Broken::Deep(30), 30_000).await.unwrap();
}

fn stdio_spec(id: &str) -> UpstreamSpec {
    UpstreamSpec {
        id: id.into(),
        transport: UpstreamTransport::Stdio {
            command: "unused".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    }
}

/// A connector that records what it was asked (spec id, startup timeout) and refuses to
/// connect the upstream `refuse`; every other spec gets a fresh one-tool upstream.
struct Recording {
    asked: Mutex<Vec<(String, Duration)>>,
    refuse: &'static str,
}

impl Connector for Recording {
    fn connect<'a>(
        &'a self,
        spec: &'a UpstreamSpec,
        startup_timeout: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn Upstream>, UpstreamError>> {
        self.asked
            .lock()
            .unwrap()
            .push((spec.id.clone(), startup_timeout));
        let connected = if spec.id == self.refuse {
            Err(UpstreamError::Start {
                id: spec.id.clone(),
                message: "connection refused".into(),
            })
        } else {
            Ok(Box::new(Broken::Deep(1)) as Box<dyn Upstream>)
        };
        Box::pin(async move { connected })
    }
}

async fn start_with(connector: &Recording) -> Result<Gateway, GatewayError> {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    let mut config = GatewayConfig::default();
    config.limits.upstream_startup_timeout_ms = 1_234;
    config.tools.push(read_rule("alpha__nested"));
    Gateway::start(
        keys,
        store,
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config,
        vec![stdio_spec("alpha"), stdio_spec("beta")],
        connector,
        system_clock(),
    )
    .await
}

/// The gateway connects the upstreams itself, through the connector it is given (issue 13
/// item 5): once per spec, in order, with the operator's start-up timeout, and its executor
/// sends calls over the connections the connector built, found by the spec's id.
#[tokio::test]
async fn the_gateway_connects_every_spec_through_its_connector() {
    let connector = Recording {
        asked: Mutex::new(vec![]),
        refuse: "none",
    };
    let gw = start_with(&connector).await.unwrap();
    let startup = Duration::from_millis(1_234);
    assert_eq!(
        *connector.asked.lock().unwrap(),
        vec![("alpha".to_owned(), startup), ("beta".to_owned(), startup)]
    );
    let session = gw
        .open_session("alice", secureclaw_core::TaskEnvelope::default())
        .await
        .unwrap();
    completed(
        &gw.call(
            &session,
            "alpha__nested",
            args(json!({"x": "hello"})),
            &CallMeta::default(),
        )
        .await,
    );
    // A name no spec provides reaches no connection.
    assert_denied(
        &gw.call(
            &session,
            "gamma__nested",
            args(json!({})),
            &CallMeta::default(),
        )
        .await,
        ReasonCode::UnknownTool,
    );
}

/// An upstream the connector cannot connect stops start-up, naming it (fail closed: no gateway
/// runs with part of its upstreams missing).
#[tokio::test]
async fn an_upstream_that_cannot_be_connected_stops_start_up() {
    let connector = Recording {
        asked: Mutex::new(vec![]),
        refuse: "beta",
    };
    let err = start_with(&connector).await.unwrap_err();
    assert!(
        matches!(&err, GatewayError::Upstream(UpstreamError::Start { id, .. }) if id == "beta"),
        "{err:?}"
    );
    assert!(err.to_string().contains("connection refused"), "{err}");
    assert_eq!(connector.asked.lock().unwrap().len(), 2);
}

/// Issue 15 new-user trial (2026-12-04): a grant naming no tool (`write_file` under `serve`,
/// where tools are `upstream__tool`) was accepted without a word and did nothing. The gateway
/// names such grants; grants by exposed name, by `upstream__tool`, by glob and with a count
/// are recognised.
#[tokio::test]
async fn grants_that_match_no_tool_are_named() {
    let h = common::Harness::new().await;
    let grants: Vec<String> = [
        "test__count",
        "test__count#2",
        "test__*#*",
        "count",
        "tset__count#3",
        "office__send_emial",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(
        h.gw.unmatched_grants(&grants),
        vec!["count", "tset__count#3", "office__send_emial"]
    );
}
