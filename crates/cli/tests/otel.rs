//! OpenTelemetry traces (issue 15): `secureclaw serve` exports its spans to an OTLP collector
//! stub (a tiny HTTP server taking `POST /v1/traces`). The spans have the expected names and
//! attributes, continue the caller's W3C trace context (the HTTP API's `traceparent` header,
//! an MCP request's `_meta.traceparent`), and carry no value: neither the IBAN the calls
//! read and pay, nor an argument, nor a handle occurs anywhere in the bytes received.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::{EXE, Server, free_port};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OPERATOR: &str = "test-operator-token-0123456789";
const IBAN: &str = "DE89370400440532013000";
/// The caller's trace context (W3C example ids).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// The collector stub: every `POST /v1/traces` body, as received.
#[derive(Clone, Default)]
struct Collector {
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    port: u16,
}

impl Collector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let collector = Collector {
            bodies: Arc::default(),
            port,
        };
        let bodies = Arc::clone(&collector.bodies);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let bodies = Arc::clone(&bodies);
                std::thread::spawn(move || serve_one(stream, &bodies));
            }
        });
        collector
    }

    /// Every body so far, concatenated (for the "no value anywhere" checks).
    fn raw(&self) -> Vec<u8> {
        self.bodies.lock().unwrap().concat()
    }

    /// Every span received: (service name, span).
    fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for body in self.bodies.lock().unwrap().iter() {
            let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            for rs in req.resource_spans {
                let service = rs
                    .resource
                    .iter()
                    .flat_map(|r| r.attributes.iter())
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                    .map(show)
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        out.push(Span {
                            service: service.clone(),
                            name: s.name,
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent: hex(&s.parent_span_id),
                            attributes: s
                                .attributes
                                .iter()
                                .filter_map(|kv| {
                                    Some((kv.key.clone(), show(kv.value.as_ref()?.value.as_ref()?)))
                                })
                                .collect(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Wait up to 30 s until `done` holds for the spans received.
    fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if Instant::now() > deadline {
                panic!("{what}: not received; spans: {spans:#?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One HTTP/1.1 request on `stream`: record a `POST /v1/traces` body, answer 200 (an empty
/// `ExportTraceServiceResponse`), close.
fn serve_one(stream: std::net::TcpStream, bodies: &Mutex<Vec<Vec<u8>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if request_line.starts_with("POST /v1/traces ") {
        bodies.lock().unwrap().push(body);
    }
    let mut stream = stream;
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}

#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: Vec<(String, String)>,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn show(v: &AnyValue) -> String {
    match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One HTTP/1.1 request with `Connection: close` and optional extra headers; (status, JSON).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (status, payload) = common::status_and_body(&resp);
    (
        status,
        serde_json::from_str(payload).unwrap_or(Value::String(payload.to_owned())),
    )
}

/// The demo office over stdio with its IBAN classified (a handle, anchored, for payments) and
/// payments financial; `extra` is appended.
fn office_config(dir: &Path, port: u16, extra: &str) -> String {
    format!(
        "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n\
         [[gateway.classify]]\nupstream = \"office\"\ntool = \"read_invoice\"\npath = \"/iban\"\nlabel = \"payee_iban\"\nsensitivity = \"high\"\nallowed_sinks = [\"office__pay_invoice\"]\nanchor = true\n\n\
         [[gateway.tools]]\ntool = \"office__pay_invoice\"\nsink = \"egress\"\nfinancial = true\n\n{extra}\
         [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {exe:?}\nargs = [\"demo-tools\", \"--state\", {st:?}]\n",
        exe = EXE,
        st = dir.join("office.json").display().to_string()
    )
}

fn serve(config: &Path, state: &Path, port: u16, env: &[(&str, String)]) -> Server {
    let mut cmd = Command::new(EXE);
    cmd.arg("--state-dir")
        .arg(state)
        .args(["serve", "--config"])
        .arg(config)
        .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::serve_on(&mut cmd, port)
}

/// No value in the bytes the collector received: not the IBAN (read, then paid: the
/// executor resolved it into the upstream call), not an argument, not a handle.
fn assert_no_values(collector: &Collector) {
    let raw = collector.raw();
    assert!(!raw.is_empty());
    let text = String::from_utf8_lossy(&raw);
    for value in [
        IBAN,
        "INV-42",
        "hdl_",
        "129900",
        "Acme Supplies",
        "billing@acme-supplies.example",
        "attacker@evil.example",
        "Pay invoice",
    ] {
        assert!(!text.contains(value), "`{value}` reached the collector");
    }
}

/// A read and a granted payment over the HTTP API, the read with a `traceparent` header:
/// the spans of both calls and their stages arrive — flushed at exit, after SIGTERM — with
/// names and codes only.
#[test]
fn spans_reach_the_collector_without_values() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("secureclaw.toml");
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nservice_name = \"gw-test\"\n\n",
        collector.port
    );
    std::fs::write(&cfg, office_config(dir.path(), port, &telemetry)).unwrap();
    let mut server = serve(&cfg, &dir.path().join("state"), port, &[]);

    let (_, sess) = http(
        port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        "",
        Some(
            &json!({"caller": "bob", "task": {"request": "Pay invoice INV-42", "granted_tools": ["office__pay_invoice"]}}),
        ),
    );
    let sid = sess["session_id"].as_str().unwrap().to_owned();
    let traceparent = format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01\r\n");
    let (_, read) = http(
        port,
        "POST",
        "/v1/call",
        Some(&sid),
        &traceparent,
        Some(&json!({"tool": "office__read_invoice", "arguments": {"invoice_id": "INV-42"}})),
    );
    assert_eq!(read["status"], "completed", "{read}");
    let handle = read["structured_content"]["iban"].as_str().unwrap();
    assert!(handle.starts_with("hdl_"), "{read}");
    let amount = read["structured_content"]["amount_cents"].clone();
    let (_, pay) = http(
        port,
        "POST",
        "/v1/call",
        Some(&sid),
        "",
        Some(
            &json!({"tool": "office__pay_invoice", "arguments": {"invoice_id": "INV-42", "iban": handle, "amount_cents": amount}}),
        ),
    );
    assert_eq!(pay["status"], "completed", "{pay}");
    // The office received the IBAN itself (the executor resolved the handle).
    let office = std::fs::read_to_string(dir.path().join("office.json")).unwrap();
    assert!(office.contains(IBAN), "{office}");

    // SIGTERM: `serve` stops and flushes its queue (the batch delay, 5 s, has not passed).
    let stopped = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }

    let spans = collector.wait_for("the spans of two calls", |s| {
        s.iter().filter(|s| s.name == "tool_call").count() >= 2
    });
    let calls: Vec<&Span> = spans.iter().filter(|s| s.name == "tool_call").collect();
    let read_call = calls
        .iter()
        .find(|s| s.attr("tool") == Some("office__read_invoice"))
        .expect("the read's span");
    let pay_call = calls
        .iter()
        .find(|s| s.attr("tool") == Some("office__pay_invoice"))
        .expect("the payment's span");
    for s in &spans {
        assert_eq!(s.service, "gw-test", "{s:?}");
    }
    // The read continues the caller's trace; the payment, without a header, starts its own.
    assert_eq!(read_call.trace_id, TRACE_ID, "{read_call:?}");
    assert_eq!(read_call.parent, PARENT_SPAN, "{read_call:?}");
    assert_ne!(pay_call.trace_id, TRACE_ID, "{pay_call:?}");
    for (call, decision) in [(read_call, "allow"), (pay_call, "allow")] {
        assert_eq!(call.attr("operation"), Some("call"), "{call:?}");
        assert_eq!(call.attr("upstream"), Some("office"), "{call:?}");
        assert_eq!(call.attr("decision"), Some(decision), "{call:?}");
        assert_eq!(call.attr("reason"), Some("none"), "{call:?}");
        assert_eq!(call.attr("monitor_action"), Some("off"), "{call:?}");
    }
    // The children of each call.
    let children = |call: &Span| -> Vec<String> {
        let mut names: Vec<String> = spans
            .iter()
            .filter(|s| s.trace_id == call.trace_id && s.span_id != call.span_id)
            .map(|s| s.name.clone())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        children(read_call),
        ["declassify", "policy", "upstream_call"],
        "{spans:#?}"
    );
    assert_eq!(
        children(pay_call),
        ["accept", "declassify", "policy", "preview", "upstream_call"],
        "{spans:#?}"
    );
    let in_trace = |call: &Span, name: &str| -> Span {
        spans
            .iter()
            .find(|s| s.trace_id == call.trace_id && s.name == name)
            .unwrap()
            .clone()
    };
    let policy = in_trace(pay_call, "policy");
    assert_eq!(policy.attr("decision"), Some("allow"), "{policy:?}");
    let accept = in_trace(pay_call, "accept");
    assert_eq!(accept.attr("outcome"), Some("accepted"), "{accept:?}");
    let preview = in_trace(pay_call, "preview");
    assert_eq!(preview.parent, pay_call.span_id, "{preview:?}");
    assert_eq!(policy.parent, preview.span_id, "{policy:?}");
    for call in [read_call, pay_call] {
        let up = in_trace(call, "upstream_call");
        assert_eq!(up.attr("upstream"), Some("office"), "{up:?}");
        assert_eq!(up.attr("outcome"), Some("ok"), "{up:?}");
    }
    let up = in_trace(read_call, "upstream_call");
    assert_eq!(up.attr("tool"), Some("read_invoice"), "{up:?}");
    let declassify = in_trace(read_call, "declassify");
    assert!(
        declassify.attr("handles").unwrap().parse::<u64>().unwrap() >= 1,
        "{declassify:?}"
    );
    assert_no_values(&collector);
}

/// Two gateways, the outer one calling the inner one's Streamable HTTP MCP endpoint: the
/// outer call continues the caller's trace (`traceparent` header), its upstream call passes
/// the context on (`_meta.traceparent` and the header), and the inner gateway's call span
/// (an MCP `tools/call`) is a child of the outer upstream call. The inner gateway exports
/// because of `OTEL_EXPORTER_OTLP_ENDPOINT`, with a short batch delay.
#[test]
fn trace_context_crosses_an_mcp_hop() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let inner_port = free_port();
    let inner = dir.path().join("inner.toml");
    std::fs::write(
        &inner,
        office_config(
            dir.path(),
            inner_port,
            "[task]\nrequest = \"look at invoices\"\n\n",
        )
        .replace(
            "[server]\n",
            "[server]\ntokenless_loopback_session = true\n",
        ),
    )
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", collector.port);
    let fast = ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned());
    let _inner = serve(
        &inner,
        &dir.path().join("inner-state"),
        inner_port,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", "inner".to_owned()),
            fast.clone(),
        ],
    );
    let outer_port = free_port();
    let outer = dir.path().join("outer.toml");
    std::fs::write(
        &outer,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{outer_port}\"\n\n[telemetry]\notlp_endpoint = \"{endpoint}\"\nservice_name = \"outer\"\n\n\
             [[gateway.tools]]\ntool = \"remote__office__read_invoice\"\neffect = \"read\"\n\n\
             [[upstream]]\nid = \"remote\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{inner_port}/mcp\"\n"
        ),
    )
    .unwrap();
    let _outer = serve(&outer, &dir.path().join("outer-state"), outer_port, &[fast]);

    let (_, sess) = http(
        outer_port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        "",
        Some(&json!({"caller": "bob", "task": {"request": "read INV-42"}})),
    );
    let sid = sess["session_id"].as_str().unwrap().to_owned();
    let (_, r) = http(
        outer_port,
        "POST",
        "/v1/call",
        Some(&sid),
        &format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01\r\n"),
        Some(
            &json!({"tool": "remote__office__read_invoice", "arguments": {"invoice_id": "INV-42"}}),
        ),
    );
    assert_eq!(r["status"], "completed", "{r}");

    let spans = collector.wait_for("both gateways' call spans", |s| {
        ["inner", "outer"].iter().all(|svc| {
            s.iter()
                .any(|s| s.service == *svc && s.name == "tool_call" && s.trace_id == TRACE_ID)
        }) && s
            .iter()
            .any(|s| s.service == "outer" && s.name == "upstream_call")
    });
    let find = |service: &str, name: &str| -> &Span {
        spans
            .iter()
            .find(|s| s.service == service && s.name == name && s.trace_id == TRACE_ID)
            .unwrap_or_else(|| panic!("{service} {name}: {spans:#?}"))
    };
    let outer_call = find("outer", "tool_call");
    assert_eq!(outer_call.parent, PARENT_SPAN, "{outer_call:?}");
    assert_eq!(
        outer_call.attr("tool"),
        Some("remote__office__read_invoice")
    );
    let outer_up = find("outer", "upstream_call");
    assert_eq!(outer_up.attr("upstream"), Some("remote"), "{outer_up:?}");
    let inner_call = find("inner", "tool_call");
    assert_eq!(inner_call.parent, outer_up.span_id, "{inner_call:?}");
    assert_eq!(
        inner_call.attr("tool"),
        Some("office__read_invoice"),
        "{inner_call:?}"
    );
    assert_eq!(inner_call.attr("decision"), Some("allow"), "{inner_call:?}");
    assert_no_values(&collector);
}

/// An unreachable collector neither fails nor delays a call: spans are dropped and one
/// warning is logged (at most once a minute), and `serve` still stops at once.
#[test]
fn an_unreachable_collector_never_blocks_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let closed = free_port();
    let cfg = dir.path().join("secureclaw.toml");
    let telemetry = format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{closed}\"\n\n");
    std::fs::write(&cfg, office_config(dir.path(), port, &telemetry)).unwrap();
    let log = dir.path().join("serve.log");
    let mut server = common::serve_on(
        Command::new(EXE)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(&cfg)
            .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
            .env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap())),
        port,
    );
    let (_, sess) = http(
        port,
        "POST",
        "/v1/sessions",
        Some(OPERATOR),
        "",
        Some(&json!({"caller": "bob", "task": {"request": "read INV-42"}})),
    );
    let sid = sess["session_id"].as_str().unwrap().to_owned();
    for _ in 0..5 {
        let started = Instant::now();
        let (_, read) = http(
            port,
            "POST",
            "/v1/call",
            Some(&sid),
            "",
            Some(&json!({"tool": "office__read_invoice", "arguments": {"invoice_id": "INV-42"}})),
        );
        assert_eq!(read["status"], "completed", "{read}");
        assert!(started.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(300));
    }
    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    while server.0.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let warnings = text
        .lines()
        .filter(|l| l.contains("secureclaw::telemetry") && l.contains("exporting spans failed"))
        .count();
    assert_eq!(warnings, 1, "{text}");
    assert!(!text.contains(IBAN), "{text}");
}
