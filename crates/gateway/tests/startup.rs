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

use common::{args, in_process, keys};
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    Gateway, GatewayConfig, GatewayError, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
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
