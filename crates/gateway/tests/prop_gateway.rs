//! Property tests through the real gateway (real `Gateway`, `SqliteStore`, default Cedar
//! policy; see `common/mod.rs`), with fewer cases than the core-level properties because every
//! case runs a preview, commits and SQLite writes:
//!
//! 1. PREVIEW a random effectful call, then COMMIT it with one or more argument changes, under
//!    another tool name, or in another session: denied with `binding_mismatch` and nothing
//!    executed, unless the changed call is RFC 8785-equal to the previewed one; the unchanged
//!    call then still commits (positive control; a rejected commit does not burn the action).
//! 2. A read tool returns random records with planted sensitive values (structured content plus
//!    the same JSON as a text block plus a free-text block): none of them appears in anything
//!    the runtime sees, nor in the audit log.
//!
//! Case counts: `PROPTEST_CASES` overrides the defaults below.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;
#[path = "../../core/tests/prop_support/mod.rs"]
mod prop_support;

use common::{Harness, TestClock, assert_denied, completed, in_process, keys, visible};
use prop_support::{Change, apply, argument_change, json_same, planted_text, record};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use secureclaw_core::canonical::{CanonicalRequest, Inputs, Intent, RequestContext};
use secureclaw_core::classify::FieldRule;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::PreviewDecision;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(prop_support::config(default_cases))
}

/// Prefix every key so that no argument is an effect target (`to`, `path`, …): the policy
/// then allows the call without confirmation, and the commit really runs.
fn untargeted(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (untargeted_key(&k), untargeted(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(untargeted).collect()),
        // A number of 7 or more digits is an address-like target (a phone or account number,
        // red-team F6): keep the property's numbers below that.
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i % 1_000_000),
            (None, Some(f)) if f.abs() >= 1e6 => Value::from(f / 1e10),
            _ => Value::Number(n),
        },
        Value::String(t) => Value::String(plain(&t)),
        other => other,
    }
}

/// `k_` and the key's plain text, unless that names a destination (`…url`, `…host`) or an
/// object id (`…_id`), whose values are targets (red-team F5): then `k_` and the key's bytes
/// spelled in consonants (no hint or `id` can be formed from them).
fn untargeted_key(k: &str) -> String {
    let key = format!("k_{}", plain(k));
    if secureclaw_core::anchor::is_destination_field_name(&key)
        || secureclaw_core::anchor::is_object_id_field(&key)
    {
        const LETTERS: &[u8] = b"bdfgjkmpqvwxz";
        let spelled: String = k
            .bytes()
            .map(|b| char::from(LETTERS[usize::from(b) % LETTERS.len()]))
            .collect();
        return format!("k_{spelled}");
    }
    key
}

/// Text without what makes a value address-like (`@`, `:`, `!`, `%`, `\\` of a UNC path, digit
/// runs, and the dots of a host name, red-team R6), so the property's random strings stay
/// untargeted.
fn plain(t: &str) -> String {
    t.chars()
        .map(|c| {
            // The detectors see the NFKC form: `﹫` (U+FE6B) is an `@`, `：` a `:`, `９` a 9;
            // ideographic, halfwidth and leader dots separate host labels like `.`.
            let normalized = secureclaw_core::normalize::normalize(&c.to_string()).into_owned();
            if normalized.chars().any(|n| {
                matches!(
                    n,
                    '@' | ':' | '/' | '\\' | '!' | '%' | '.' | '\u{3002}' | '\u{FF61}' | '\u{2024}'
                )
            }) {
                '_'
            } else if normalized.chars().any(char::is_numeric) || c.is_numeric() {
                'd'
            } else {
                c
            }
        })
        .collect()
}

fn as_request(arguments: Map<String, Value>) -> CanonicalRequest {
    CanonicalRequest {
        intent: Intent {
            upstream: String::new(),
            tool: String::new(),
        },
        caller: String::new(),
        session: String::new(),
        inputs: Inputs {
            arguments,
            handles: vec![],
        },
        ctx: RequestContext {
            destination: String::new(),
            task_digest: String::new(),
            policy_digest: String::new(),
        },
    }
}

#[derive(Debug, Clone)]
enum Tamper {
    Arguments(Vec<Change>),
    /// Commit the previewed artifact for another effectful tool (counts its calls).
    Tool,
    /// Commit in another session of the same caller.
    Session,
}

fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        8 => prop::collection::vec(argument_change(), 1..4).prop_map(Tamper::Arguments),
        1 => Just(Tamper::Tool),
        1 => Just(Tamper::Session),
    ]
}

/// Property 1: PREVIEW → tampered COMMIT → `binding_mismatch`, nothing executed → honest
/// COMMIT succeeds.
#[test]
fn gateway_commit_of_changed_call_is_binding_mismatch() {
    let rt = runtime();
    let h = rt.block_on(Harness::new());
    let other_session = rt.block_on(h.open_session("alice"));
    let strategy = (prop_support::arguments(), tamper());
    let mut runner = runner(64);
    let result = runner.run(&strategy, |(args, tamper)| {
        let Value::Object(args) = untargeted(Value::Object(args)) else {
            unreachable!()
        };
        rt.block_on(async {
            let p =
                h.gw.preview(&h.session, "test__count", &args)
                    .await
                    .map_err(|r| TestCaseError::fail(format!("preview failed: {r:?}")))?;
            prop_assert_eq!(p.decision, PreviewDecision::Allow, "{:?}", p.recovery);
            let before = (h.test.effects(), h.test.received.lock().unwrap().len());
            let (tool, session, changed, same) = match &tamper {
                Tamper::Arguments(changes) => {
                    let mut req = as_request(args.clone());
                    for c in changes {
                        apply(&mut req, c);
                    }
                    let same = json_same(
                        &Value::Object(args.clone()),
                        &Value::Object(req.inputs.arguments.clone()),
                    );
                    ("test__count", &h.session, req.inputs.arguments, same)
                }
                Tamper::Tool => ("test__crash_effect", &h.session, args.clone(), false),
                Tamper::Session => ("test__count", &other_session, args.clone(), false),
            };
            let o =
                h.gw.commit(
                    session,
                    tool,
                    changed,
                    &p.action_id,
                    Some(p.artifact.as_str()),
                )
                .await;
            if same {
                completed(&o);
                prop_assert_eq!(h.test.effects(), before.0 + 1);
                return Ok(());
            }
            match &o {
                CallOutcome::Denied(r) => {
                    prop_assert_eq!(r.reason, ReasonCode::BindingMismatch, "{:?}", tamper)
                }
                other => {
                    return Err(TestCaseError::fail(format!(
                        "tampered commit not denied: {other:?} ({tamper:?})"
                    )));
                }
            }
            // Nothing reached any upstream.
            prop_assert_eq!(h.test.effects(), before.0);
            prop_assert_eq!(h.test.received.lock().unwrap().len(), before.1);
            // Positive control: the previewed call still commits, exactly once.
            let o =
                h.gw.commit(
                    &h.session,
                    "test__count",
                    args.clone(),
                    &p.action_id,
                    Some(p.artifact.as_str()),
                )
                .await;
            completed(&o);
            prop_assert_eq!(h.test.effects(), before.0 + 1);
            let again =
                h.gw.commit(
                    &h.session,
                    "test__count",
                    args,
                    &p.action_id,
                    Some(p.artifact.as_str()),
                )
                .await;
            assert_denied(&again, ReasonCode::Replay);
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ------------------------------------------------------------------------------ read path

/// An upstream `rec` with one read tool `fetch` that returns whatever the test sets.
#[derive(Default)]
struct RecordUpstream {
    next: Mutex<Option<ToolOutput>>,
}

impl Upstream for RecordUpstream {
    fn id(&self) -> &str {
        "rec"
    }
    fn destination(&self) -> &str {
        "in-process:rec"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![UpstreamTool {
                name: "fetch".into(),
                title: None,
                description: Some("returns a record".into()),
                input_schema: common::args(json!({"type": "object"})),
                read_only_hint: true,
                destructive_hint: false,
                open_world_hint: false,
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
            self.next
                .lock()
                .unwrap()
                .take()
                .ok_or_else(|| UpstreamError::Call {
                    id: "rec".into(),
                    message: "nothing queued".into(),
                })
        })
    }
}

/// The operator labels `ssn`, `salary` and `diagnosis` members at depths 1–6.
fn leak_config() -> GatewayConfig {
    let mut config = GatewayConfig::demo_office();
    // `readOnlyHint` alone makes nothing a read; the operator declares `fetch` one.
    config.tools.push(common::read_rule("rec__fetch"));
    for name in prop_support::LABELLED_NAMES {
        for depth in 0..6 {
            let stars = "/*".repeat(depth);
            config.classify.push(FieldRule {
                upstream: "rec".into(),
                tool: "fetch".into(),
                path: format!("{stars}/{name}"),
                label: format!("pii.{name}"),
                sensitivity: secureclaw_core::handle::Sensitivity::High,
                allowed_sinks: vec![],
                anchor: false,
                identifiers: false,
            });
        }
    }
    config
}

/// Property 2: nothing planted in a read result reaches the runtime or the audit log.
#[test]
fn gateway_read_never_shows_planted_values() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("p.db"), keys.clone()).unwrap());
    let up = Arc::new(RecordUpstream::default());
    let spec = UpstreamSpec {
        id: "rec".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process-rec".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let dyn_up: Arc<dyn Upstream> = up.clone();
    let (specs, connector) = in_process(vec![(spec, dyn_up)]);
    let gw: Gateway = rt
        .block_on(Gateway::start(
            keys,
            store.clone(),
            Arc::new(CedarPolicy::load(&[]).unwrap()),
            leak_config(),
            specs,
            &connector,
            TestClock::new(common::T0).clock(),
        ))
        .unwrap();
    let session = rt
        .block_on(gw.open_session("alice", secureclaw_core::TaskEnvelope::default()))
        .unwrap();
    let strategy = (record(), prop::collection::vec(planted_text(), 0..4));
    let mut runner = runner(128);
    let next_seq = std::cell::Cell::new(1u64);
    let result = runner.run(&strategy, |(rec, prose)| {
        let prose_text: String = prose
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let mut planted = rec.planted.clone();
        planted.extend(prose.iter().flat_map(|(_, p)| p.iter().cloned()));
        *up.next.lock().unwrap() = Some(ToolOutput {
            content: vec![
                json!({"type": "text", "text": rec.value.to_string()}),
                json!({"type": "text", "text": prose_text}),
            ],
            structured: Some(rec.value.clone()),
            is_error: false,
        });
        let o = rt.block_on(gw.call(
            &session,
            "rec__fetch",
            Map::new(),
            &secureclaw_gateway::CallMeta::committed(None),
        ));
        let out = completed(&o).clone();
        let shown = visible(&o);
        let mut everything = shown.clone();
        for block in &out.content {
            if let Some(t) = block.get("text").and_then(Value::as_str) {
                everything.push_str(t);
            }
        }
        if let Some(s) = &out.structured {
            everything.push_str(&prop_support::visible_text(s));
        }
        // The read's record is queued without waiting (issue 14 item 2); the gateway's own
        // export waits for what is queued.
        let records = rt
            .block_on(gw.audit_records(next_seq.get(), usize::MAX))
            .unwrap();
        prop_assert!(!records.is_empty(), "the read was not audited");
        next_seq.set(records.last().map_or(next_seq.get(), |r| r.seq + 1));
        let audit = serde_json::to_string(&records).unwrap();
        for p in &planted {
            prop_assert!(
                !everything.contains(p.as_str()),
                "runtime sees `{}`: {}",
                p,
                shown
            );
            prop_assert!(!audit.contains(p.as_str()), "audit log holds `{}`", p);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Bug found by `gateway_read_never_shows_planted_values`: an identifier inside an object
/// *key* (`{"a": {"id": {"AKIA…": "sk_live_…"}}}`) was vaulted and hidden from the runtime,
/// but the `handle_issue` audit record stored the JSON pointer of the value — built from the
/// original keys — so the audit log held the API key in clear.
#[test]
fn regression_audit_path_holds_no_key_plaintext() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("r.db"), keys.clone()).unwrap());
    let up = Arc::new(RecordUpstream::default());
    let spec = UpstreamSpec {
        id: "rec".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process-rec".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let dyn_up: Arc<dyn Upstream> = up.clone();
    let (specs, connector) = in_process(vec![(spec, dyn_up)]);
    let gw = rt
        .block_on(Gateway::start(
            keys,
            store.clone(),
            Arc::new(CedarPolicy::load(&[]).unwrap()),
            leak_config(),
            specs,
            &connector,
            TestClock::new(common::T0).clock(),
        ))
        .unwrap();
    let session = rt
        .block_on(gw.open_session("alice", secureclaw_core::TaskEnvelope::default()))
        .unwrap();
    let key = "AKIAAAAA00A0B5KGXNK7";
    let value = json!({"a": {"id": {key: "sk_live_P24lrWp9M5k13FCQx7TPVJt7"}}});
    *up.next.lock().unwrap() = Some(ToolOutput {
        content: vec![json!({"type": "text", "text": value.to_string()})],
        structured: Some(value),
        is_error: false,
    });
    let o = rt.block_on(gw.call(
        &session,
        "rec__fetch",
        Map::new(),
        &secureclaw_gateway::CallMeta::committed(None),
    ));
    assert!(!visible(&o).contains(key));
    let audit = serde_json::to_string(&store.audit_records(0, usize::MAX).unwrap()).unwrap();
    assert!(audit.contains("handle_issue"), "{audit}");
    assert!(audit.contains("[redacted]"), "{audit}");
    assert!(!audit.contains(key), "audit log holds the key: {audit}");
    assert!(!audit.contains("sk_live_P24lrWp9M5k13FCQx7TPVJt7"));
}
