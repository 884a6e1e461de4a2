//! Fuzz the MCP front end (`crates/server/src/mcp.rs`) end to end, in process: the real
//! `McpFrontEnd` (rmcp server) over a real `Gateway` (SQLite store, default Cedar policy)
//! with an in-process upstream, driven over a duplex pipe exactly as `wrap` is driven over
//! stdio.
//!
//! Each input is written verbatim as the client's byte stream after a valid `initialize`
//! handshake (first byte even) or instead of it (first byte odd), followed by a `ping` with id
//! `"fuzz-end"`. The target reads the server's output until the ping is answered and the
//! requests the input made are answered (or a short grace period passes).
//!
//! Invariants: no panic anywhere in rmcp, the front end or the gateway (libFuzzer aborts);
//! the server answers the closing ping within 10 s when the handshake was valid and the
//! connection is still open (no hang); and no protected value the upstream returns ever
//! appears in what the server writes (the read path's declassification holds for whatever
//! JSON-RPC the client sends).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::ServiceExt;
use secureclaw_core::TaskEnvelope;
use secureclaw_core::classify::FieldRule;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::time::UnixMillis;
use secureclaw_gateway::{
    BoxFuture, Gateway, GatewayConfig, ToolOutput, ToolRule, Upstream, UpstreamError,
    UpstreamSpec, UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_server::{McpFrontEnd, SessionSource};
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Values the upstream returns that must never reach the client.
const PROTECTED: &[&str] = &[
    "DE89370400440532013000",
    "billing@acme-supplies.example",
    "AKIAIOSFODNN7EXAMPLE",
    "4111 1111 1111 1111",
];

struct FuzzUpstream;

fn tool(name: &str, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("fuzz tool {name}")),
        input_schema: match json!({"type": "object"}) {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        read_only_hint: read_only,
        destructive_hint: !read_only,
        open_world_hint: true,
    }
}

impl Upstream for FuzzUpstream {
    fn id(&self) -> &str {
        "office"
    }
    fn destination(&self) -> &str {
        "in-process:fuzz"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![
                tool("read_record", true),
                tool("echo", true),
                tool("send", false),
            ])
        })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let structured = match name.as_str() {
                "read_record" => json!({
                    "id": arguments.get("id").cloned().unwrap_or(Value::Null),
                    "iban": PROTECTED[0],
                    "contact": PROTECTED[1],
                    "note": format!("aws key {} card {}", PROTECTED[2], PROTECTED[3]),
                }),
                // Echo tools return their (resolved) arguments: the gateway must turn resolved
                // values back into handles.
                _ => json!({"tool": name, "arguments": arguments}),
            };
            Ok(ToolOutput {
                content: vec![
                    json!({"type": "text", "text": structured.to_string()}),
                    json!({"type": "text", "text": format!("plain: {structured}")}),
                ],
                structured: Some(structured),
                is_error: false,
            })
        })
    }
}

struct World {
    rt: tokio::runtime::Runtime,
    front: McpFrontEnd,
    _dir: tempfile::TempDir,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut n = 9u8;
    let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_mul(33).wrapping_add(5);
            *x = n;
        }
    }));
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("fuzz.db"), keys.clone()).expect("store"));
    let mut config = GatewayConfig::default();
    // `readOnlyHint` alone makes nothing a read; the operator declares the read tools.
    for read in ["office__read_record", "office__echo"] {
        config.tools.push(ToolRule {
            tool: read.into(),
            effect: Some(secureclaw_core::policy::EffectClass::Read),
            destructive: None,
            targets: None,
            hidden: false,
        });
    }
    config.classify.push(FieldRule {
        upstream: "office".into(),
        tool: "read_record".into(),
        path: "/iban".into(),
        label: "payee_iban".into(),
        sensitivity: secureclaw_core::handle::Sensitivity::High,
        allowed_sinks: vec!["office__send".into()],
        anchor: true,
    });
    let spec = UpstreamSpec {
        id: "office".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
    };
    let up: Arc<dyn Upstream> = Arc::new(FuzzUpstream);
    let clock: secureclaw_gateway::Clock = Arc::new(|| UnixMillis(1_800_000_000_000));
    let gateway = rt
        .block_on(Gateway::start(
            keys,
            store,
            Arc::new(CedarPolicy::load(&[]).expect("policy")),
            config,
            vec![(spec, up)],
            clock,
        ))
        .expect("gateway");
    let session = gateway
        .open_session(
            "alice",
            TaskEnvelope {
                request: "Send record R-1 to approver@corp.example".into(),
                trusted_targets: vec!["approver@corp.example".into()],
            },
        )
        .expect("session");
    let front = McpFrontEnd::new(gateway, SessionSource::Fixed(session)).with_elicitation(false);
    World {
        rt,
        front,
        _dir: dir,
    }
});

const INIT: &str = concat!(
    r#"{"jsonrpc":"2.0","id":"fuzz-init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}"#,
    "\n",
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    "\n"
);
const PING: &str = "\n{\"jsonrpc\":\"2.0\",\"id\":\"fuzz-end\",\"method\":\"ping\"}\n";

/// Request ids the input asks for (lines that parse as requests), as JSON text.
fn expected_ids(input: &[u8]) -> HashSet<String> {
    input
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(|v| v.get("method").is_some())
        .filter_map(|v| {
            v.get("id")
                .filter(|i| i.is_string() || i.is_u64())
                .map(Value::to_string)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let handshake = flags % 2 == 0;
    let world = &*WORLD;
    let mut pending = expected_ids(input);
    let output = world.rt.block_on(async {
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let front = world.front.clone();
        let server = tokio::spawn(async move {
            if let Ok(running) = front.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let (read_half, mut write_half) = tokio::io::split(client_io);
        let mut bytes = Vec::with_capacity(input.len() + 512);
        if handshake {
            bytes.extend_from_slice(INIT.as_bytes());
        }
        bytes.extend_from_slice(input);
        bytes.extend_from_slice(PING.as_bytes());
        let writer = async move {
            let _ = write_half.write_all(&bytes).await;
            let _ = write_half.flush().await;
            write_half
        };
        let reader = async {
            let mut lines = BufReader::new(read_half).lines();
            let mut out = String::new();
            let mut answered_ping = false;
            loop {
                let wait = if answered_ping {
                    Duration::from_millis(50)
                } else {
                    Duration::from_secs(10)
                };
                match tokio::time::timeout(wait, lines.next_line()).await {
                    Ok(Ok(Some(line))) => {
                        if let Ok(v) = serde_json::from_str::<Value>(&line)
                            && let Some(id) = v.get("id")
                        {
                            if id == "fuzz-end" {
                                answered_ping = true;
                            }
                            pending.remove(&id.to_string());
                        }
                        out.push_str(&line);
                        out.push('\n');
                        if answered_ping && pending.is_empty() {
                            return (out, true, false);
                        }
                    }
                    // EOF or a broken pipe: the server closed the connection.
                    Ok(Ok(None) | Err(_)) => return (out, answered_ping, true),
                    Err(_) => return (out, answered_ping, false),
                }
            }
        };
        let (write_half, (out, answered, closed)) = tokio::join!(writer, reader);
        drop(write_half);
        server.abort();
        let _ = server.await;
        (out, answered, closed)
    });
    let (out, answered, closed) = output;
    for p in PROTECTED {
        assert!(
            !out.contains(p),
            "server output contains protected `{p}`:\n{out}"
        );
    }
    // With a valid handshake the connection either closed (rmcp gave up on the input) or the
    // closing ping was answered: a silent open connection is a hang.
    if handshake {
        assert!(answered || closed, "no answer to ping within 10 s:\n{out}");
    }
});
