//! Property: through a filesystem-like upstream (store sinks), no sequence of reads, writes,
//! blind edits and read-backs shows the runtime a protected value (DESIGN.md §3 "Sinks";
//! issue 11: write, edit, read back).
//!
//! The upstream `fs` (in process) holds two seeded files whose content carries an e-mail
//! address, a phone number, a URL, an IBAN and an AWS access key id (and a third, plain one),
//! and serves `read_file(path)` (annotated read-only), `write_file(path, content)`,
//! `edit_file(path, old, new, dryRun)` (replace every `old` by `new`, answer with a diff of the
//! changed lines; a dry run answers without changing the file) and
//! `move_file(source, destination)`. The task names the directory `/work/docs/`, so writes and
//! edits there are anchored, and grants the writing tools (destructive: the upstream's
//! `destructiveHint: false` is not believed).
//!
//! A random sequence of operations runs as a compromised runtime would: reads of any file,
//! writes whose content mixes literal text and handles the runtime saw, blind edits and dry
//! runs (`"@"` → `" / "`, a quote → `x`, …, or a handle as the replacement) and read-backs. After
//! every operation, everything the runtime receives (the rendered outcome, every text block,
//! every string and key of the structured content) must be free of the protected values.
//!
//! Two configurations: the operator's default (the fs tools unconfigured, hence `store` sinks
//! into which no handle resolves), and one where the operator lets one label (the contacts
//! file's `email` field, `contact_email`) into `fs__write_file` — the value then reaches the
//! file in clear, and every read-back must declassify it again.
//!
//! Protected objects (issue 11 item 3): an effect on a file whose read withheld protected
//! values (or into which a handle was resolved) waits for a trusted confirmation with reason
//! `protected_object` — the blind edit, the dry-run oracle, another effect tool, another
//! spelling of the path — unless the operator opted the tool out; the deterministic tests
//! below each attack and its positive controls.
//!
//! `PROPTEST_CASES` overrides the default of 64 cases per configuration.
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

use common::{TestClock, in_process, keys, reason, visible};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::classify::FieldRule;
use secureclaw_core::handle::Sensitivity;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, ToolOutput, ToolRule, Upstream, UpstreamError,
    UpstreamSpec, UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{SessionRecord, SqliteStore};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const EMAIL: &str = "dana.whitfield@northwind.example";
const PHONE: &str = "+44 20 7946 0958";
const URL: &str = "https://intranet.northwind.example/payroll/2027";
const IBAN: &str = "DE89370400440532013000";
const AWS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const PROTECTED: [&str; 5] = [EMAIL, PHONE, URL, IBAN, AWS_KEY_ID];

const CONTACTS: &str = "/work/docs/contacts.json";
const NOTES: &str = "/work/docs/notes.txt";
/// A seeded file without protected values.
const PLAIN: &str = "/work/docs/plain.txt";
/// A seeded file with an IBAN wrapped over two lines.
const WRAPPED: &str = "/work/docs/wrapped.txt";
/// Files an operation may name: the two seeded ones, two new ones in the task's directory,
/// one outside it (writes there wait for a confirmation).
const PATHS: [&str; 6] = [
    CONTACTS,
    NOTES,
    "/work/docs/a.txt",
    "/work/docs/b.txt",
    "/elsewhere/c.txt",
    // The seeded plain file: reading it whole lets its edits run (the property is not vacuous).
    PLAIN,
];
const TASK: &str = "Tidy up the files in /work/docs/ please";

fn seeded() -> BTreeMap<String, String> {
    let contacts = json!({
        "owner": "Dana Whitfield",
        "email": EMAIL,
        "phone": PHONE,
        "intranet": URL,
        "iban": IBAN,
        "aws_key_id": AWS_KEY_ID,
        "note": "Call before paying; the key rotates monthly."
    });
    let notes = format!(
        "Payroll notes\nWrite to {EMAIL} or call {PHONE}.\nSheet: {URL}\n\
         Salary account IBAN {IBAN}\nCI key id {AWS_KEY_ID} (rotate!)\n"
    );
    BTreeMap::from([
        (
            CONTACTS.to_owned(),
            serde_json::to_string_pretty(&contacts).unwrap(),
        ),
        (NOTES.to_owned(), notes),
        (
            PLAIN.to_owned(),
            "Agenda\nTidy the shared folder on Friday.\n".to_owned(),
        ),
        (
            WRAPPED.to_owned(),
            "Salary account IBAN DE89 37\n04 0044 0532 0130 00 (main account)\nAgenda\n".to_owned(),
        ),
    ])
}

// ------------------------------------------------------------------------------ upstream

/// The filesystem-like upstream `fs`.
struct FsUpstream {
    files: Mutex<BTreeMap<String, String>>,
    /// `search_files` calls that reached the upstream.
    searches: AtomicUsize,
}

impl FsUpstream {
    fn new() -> Self {
        Self {
            files: Mutex::new(seeded()),
            searches: AtomicUsize::new(0),
        }
    }

    fn reset(&self) {
        *self.files.lock().unwrap() = seeded();
    }

    fn holds_in_clear(&self, path: &str, value: &str) -> bool {
        self.files
            .lock()
            .unwrap()
            .get(path)
            .is_some_and(|t| t.contains(value))
    }
}

fn tool(name: &str, properties: Value, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("filesystem: {name}")),
        input_schema: common::args(json!({"type": "object", "properties": properties})),
        read_only_hint: read_only,
        destructive_hint: false,
        open_world_hint: false,
        output_schema: None,
    }
}

fn text_output(text: String, structured: Value) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": text})],
        structured: Some(structured),
        is_error: false,
    }
}

fn tool_error(text: &str) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": text})],
        structured: None,
        is_error: true,
    }
}

/// The changed lines of an edit, `-before` / `+after`.
fn diff(path: &str, before: &str, after: &str) -> String {
    let b: Vec<&str> = before.lines().collect();
    let a: Vec<&str> = after.lines().collect();
    let mut out = format!("--- {path}\n+++ {path}\n");
    for i in 0..b.len().max(a.len()) {
        match (b.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => {
                if let Some(x) = x {
                    out.push_str(&format!("-{x}\n"));
                }
                if let Some(y) = y {
                    out.push_str(&format!("+{y}\n"));
                }
            }
        }
    }
    out
}

impl Upstream for FsUpstream {
    fn id(&self) -> &str {
        "fs"
    }
    fn destination(&self) -> &str {
        "in-process:fs"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![
                tool(
                    "read_file",
                    json!({"path": {"type": "string"}, "head": {"type": "integer"}}),
                    true,
                ),
                tool(
                    "write_file",
                    json!({"path": {"type": "string"}, "content": {"type": "string"}}),
                    false,
                ),
                tool(
                    "edit_file",
                    json!({"path": {"type": "string"}, "old": {"type": "string"},
                           "new": {"type": "string"}, "dryRun": {"type": "boolean"}}),
                    false,
                ),
                tool(
                    "move_file",
                    json!({"source": {"type": "string"}, "destination": {"type": "string"}}),
                    false,
                ),
                // A wiki-shaped tool naming its object by an id field (red-team F10).
                tool(
                    "update_page",
                    json!({"page_id": {"type": "string"}, "find": {"type": "string"},
                           "replace": {"type": "string"}}),
                    false,
                ),
                tool(
                    "search_files",
                    json!({"path": {"type": "string"}, "pattern": {"type": "string"}}),
                    true,
                ),
            ])
        })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let arg = |k: &str| arguments.get(k).and_then(Value::as_str).map(str::to_owned);
            let mut files = self.files.lock().unwrap();
            if name == "move_file" {
                let (Some(from), Some(to)) = (arg("source"), arg("destination")) else {
                    return Ok(tool_error("missing source or destination"));
                };
                if let Some(text) = files.remove(&from) {
                    files.insert(to.clone(), text);
                    return Ok(text_output(
                        format!("moved {from} to {to}"),
                        json!({"moved": to}),
                    ));
                }
                // A directory: every file below it moves.
                let below: Vec<String> = files
                    .keys()
                    .filter(|p| p.starts_with(&format!("{from}/")))
                    .cloned()
                    .collect();
                if below.is_empty() {
                    return Ok(tool_error("no such file"));
                }
                for p in below {
                    if let Some(text) = files.remove(&p) {
                        files.insert(format!("{to}{}", &p[from.len()..]), text);
                    }
                }
                return Ok(text_output(
                    format!("moved {from} to {to}"),
                    json!({"moved": to}),
                ));
            }
            self.searches
                .fetch_add(usize::from(name == "search_files"), Ordering::SeqCst);
            if name == "search_files" {
                // The paths under `path` whose name or content holds the pattern (its `*`
                // wildcards dropped): a search oracle over withheld content.
                let (Some(root), Some(pattern)) = (arg("path"), arg("pattern")) else {
                    return Ok(tool_error("missing path or pattern"));
                };
                let needle = pattern.replace('*', "");
                let found: Vec<&String> = files
                    .iter()
                    .filter(|(p, t)| {
                        p.starts_with(&root) && (p.contains(&needle) || t.contains(&needle))
                    })
                    .map(|(p, _)| p)
                    .collect();
                return Ok(text_output(
                    if found.is_empty() {
                        "No matches found".to_owned()
                    } else {
                        found
                            .iter()
                            .map(|p| p.as_str())
                            .collect::<Vec<_>>()
                            .join("\n")
                    },
                    json!({"matches": found}),
                ));
            }
            if name == "update_page" {
                let (Some(id), Some(find), Some(replace)) =
                    (arg("page_id"), arg("find"), arg("replace"))
                else {
                    return Ok(tool_error("missing page_id, find or replace"));
                };
                return Ok(match files.get_mut(&id) {
                    Some(text) if !find.is_empty() && text.contains(&find) => {
                        let before = text.clone();
                        *text = before.replacen(&find, &replace, 1);
                        let d = diff(&id, &before, text);
                        text_output(d.clone(), json!({"diff": d}))
                    }
                    Some(_) => tool_error("no match"),
                    None => tool_error("no such page"),
                });
            }
            let Some(path) = arg("path") else {
                return Ok(tool_error("missing path"));
            };
            Ok(match name.as_str() {
                "read_file" => match files.get(&path) {
                    // `head: n`: the first n lines (none for n <= 0).
                    Some(text) if arguments.contains_key("head") => {
                        let n = arguments.get("head").and_then(Value::as_i64).unwrap_or(0);
                        let part: Vec<&str> =
                            text.lines().take(usize::try_from(n).unwrap_or(0)).collect();
                        text_output(
                            part.join("\n"),
                            json!({"path": path, "content": part.join("\n")}),
                        )
                    }
                    Some(text) => {
                        let content = if path.ends_with(".json") {
                            serde_json::from_str(text).unwrap_or_else(|_| json!(text))
                        } else {
                            json!(text)
                        };
                        text_output(text.clone(), json!({"path": path, "content": content}))
                    }
                    None => tool_error("no such file"),
                },
                "write_file" => {
                    let content = arg("content").unwrap_or_default();
                    let n = content.len();
                    files.insert(path.clone(), content);
                    text_output(
                        format!("wrote {n} bytes to {path}"),
                        json!({"path": path, "bytes": n}),
                    )
                }
                "edit_file" => {
                    let (Some(old), Some(new)) = (arg("old"), arg("new")) else {
                        return Ok(tool_error("missing old or new"));
                    };
                    match files.get_mut(&path) {
                        None => tool_error("no such file"),
                        Some(_) if old.is_empty() => tool_error("empty old"),
                        Some(text) => {
                            let before = text.clone();
                            let count = before.matches(old.as_str()).count();
                            let after = before.replace(old.as_str(), &new);
                            let d = diff(&path, &before, &after);
                            if arguments.get("dryRun") != Some(&json!(true)) {
                                *text = after;
                            }
                            text_output(
                                d.clone(),
                                json!({"path": path, "replacements": count, "diff": d}),
                            )
                        }
                    }
                }
                other => tool_error(&format!("unknown tool {other}")),
            })
        })
    }
}

// ------------------------------------------------------------------------------ stack

/// The operator lets the contacts file's `email` field into `fs__write_file`.
fn allowing_config() -> GatewayConfig {
    let mut c = GatewayConfig::default();
    c.classify.push(FieldRule {
        upstream: "fs".into(),
        tool: "read_file".into(),
        path: "/content/email".into(),
        label: "contact_email".into(),
        sensitivity: Sensitivity::Medium,
        allowed_sinks: vec!["fs__write_file".into()],
        anchor: false,
        identifiers: false,
    });
    c
}

struct Fs {
    _dir: tempfile::TempDir,
    gw: Gateway,
    fs: Arc<FsUpstream>,
    store: Arc<SqliteStore>,
    keys: Arc<secureclaw_core::keys::KeyRing>,
}

async fn start(config: GatewayConfig) -> Fs {
    start_in(
        config,
        tempfile::tempdir().unwrap(),
        Arc::new(FsUpstream::new()),
        keys(),
    )
    .await
}

/// A gateway on the state in `dir` (a restart, or another replica, when it already holds a
/// database and `keys` is its key ring) in front of `fs`.
async fn start_in(
    config: GatewayConfig,
    dir: tempfile::TempDir,
    fs: Arc<FsUpstream>,
    keys: Arc<secureclaw_core::keys::KeyRing>,
) -> Fs {
    let store = Arc::new(SqliteStore::open(&dir.path().join("fs.db"), keys.clone()).unwrap());
    let spec = UpstreamSpec {
        id: "fs".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process-fs".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let up: Arc<dyn Upstream> = fs.clone();
    // `readOnlyHint` alone makes nothing a read: the operator declares the read tool.
    let mut config = config;
    config.tools.insert(0, common::read_rule("fs__read_file"));
    if !config.tools.iter().any(|r| r.tool == "fs__search_files") {
        config
            .tools
            .insert(1, common::read_rule("fs__search_files"));
    }
    let (specs, connector) = in_process(vec![(spec, up)]);
    let gw = Gateway::start(
        keys.clone(),
        store.clone(),
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config,
        specs,
        &connector,
        TestClock::new(common::T0).clock(),
    )
    .await
    .unwrap();
    Fs {
        _dir: dir,
        gw,
        fs,
        store,
        keys,
    }
}

/// The session of a user who asked for the tidy-up: the task grants the two writing tools
/// (an upstream's `destructiveHint: false` is not believed, so without the grant every write
/// and edit would wait for a confirmation and the property would test nothing).
async fn session(gw: &Gateway) -> SessionRecord {
    gw.open_session(
        "alice",
        TaskEnvelope {
            request: TASK.into(),
            granted_tools: vec![
                "fs__write_file".into(),
                "fs__edit_file".into(),
                "fs__move_file".into(),
                "fs__update_page".into(),
            ],
            ..TaskEnvelope::default()
        },
    )
    .await
    .unwrap()
}

// ------------------------------------------------------------------------------ operations

#[derive(Debug, Clone)]
enum Piece {
    Literal(String),
    /// The i-th handle the runtime has seen (modulo their number); nothing if none yet.
    Handle(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Read(usize),
    Write(usize, Vec<Piece>),
    /// Path, old text, replacement, dry run.
    Edit(usize, String, Piece, bool),
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "Note: ", "x", " ", "\n", "mailto:", "IBAN ", "+", "0", "AKIA", "<", ">", "\"", "tel:",
            "https://", "@", ".",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9 .:/+@-]{0,8}",
    ]
}

/// Write content: literal text around at most one handle (a second handle of another label
/// would get the whole write refused, and the allowed value would rarely reach a file).
fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    (
        prop::collection::vec(literal(), 0..3),
        prop::option::weighted(0.7, any::<usize>()),
        prop::collection::vec(literal(), 0..3),
    )
        .prop_map(|(before, handle, after)| {
            let mut v: Vec<Piece> = before.into_iter().map(Piece::Literal).collect();
            v.extend(handle.map(Piece::Handle));
            v.extend(after.into_iter().map(Piece::Literal));
            v
        })
}

/// Blind edits: text the runtime never saw in clear, chosen to break a detector's match.
fn old() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "@", ".", "\"", ":", " ", "-", "+", "/", "DE", "AKIA", "https://", "0", "Dana", "\n",
            "example", "44",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z0-9@.:/+ -]{1,3}",
    ]
}

fn new() -> impl Strategy<Value = Piece> {
    prop_oneof![
        3 => prop::sample::select(vec![" / ", "", "x", "X", " ", "0", "-", "\n", "@", "_"])
            .prop_map(|s| Piece::Literal(s.to_owned())),
        1 => literal().prop_map(Piece::Literal),
        1 => any::<usize>().prop_map(Piece::Handle),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    prop_oneof![
        3 => path.clone().prop_map(Op::Read),
        3 => (path.clone(), pieces()).prop_map(|(p, pieces)| Op::Write(p, pieces)),
        3 => (path, old(), new(), prop::bool::weighted(0.3))
            .prop_map(|(p, o, n, dry)| Op::Edit(p, o, n, dry)),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // Always start with a read of each seeded file, so the runtime holds handles to use and
    // edits of the plain file can run (the property is not vacuous).
    prop::collection::vec(op(), 1..12).prop_map(|mut v| {
        v.insert(0, Op::Read(5));
        v.insert(0, Op::Read(1));
        v.insert(0, Op::Read(0));
        v
    })
}

fn render(piece: &Piece, handles: &[String]) -> String {
    match piece {
        Piece::Literal(s) => s.clone(),
        Piece::Handle(_) if handles.is_empty() => String::new(),
        Piece::Handle(i) => handles[i % handles.len()].clone(),
    }
}

/// Every handle id in `text` (`hdl_…`).
fn handles_in(text: &str, out: &mut Vec<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("hdl_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let id = tail[..end].to_owned();
        if !out.contains(&id) {
            out.push(id);
        }
        rest = &tail[end..];
    }
}

fn strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(m) => {
            for (k, i) in m {
                out.push_str(k);
                out.push('\n');
                strings(i, out);
            }
        }
        _ => {}
    }
}

/// Everything the runtime receives from `o`: the rendered outcome, every text block, every
/// string and key of the structured content.
fn received(o: &CallOutcome) -> String {
    let mut all = visible(o);
    all.push('\n');
    let output = match o {
        CallOutcome::Completed { output, .. } | CallOutcome::Shadowed { output } => Some(output),
        _ => None,
    };
    if let Some(output) = output {
        for block in &output.content {
            strings(block, &mut all);
        }
        if let Some(s) = &output.structured {
            strings(s, &mut all);
        }
    }
    all
}

fn call_of(op: &Op, handles: &[String]) -> (&'static str, Value) {
    match op {
        Op::Read(p) => ("fs__read_file", json!({"path": PATHS[*p]})),
        Op::Write(p, pieces) => {
            let content: String = pieces.iter().map(|x| render(x, handles)).collect();
            (
                "fs__write_file",
                json!({"path": PATHS[*p], "content": content}),
            )
        }
        Op::Edit(p, old, new, dry) => {
            let mut args = json!({"path": PATHS[*p], "old": old, "new": render(new, handles)});
            if *dry {
                args["dryRun"] = json!(true);
            }
            ("fs__edit_file", args)
        }
    }
}

/// What a run of the property exercised (so that it is not vacuous).
#[derive(Debug, Default)]
struct Stats {
    /// Writes that put a protected value into a new file in clear.
    cleartext_writes: AtomicUsize,
    /// Edits that ran.
    edits: AtomicUsize,
    /// Effects held because they named a protected object.
    protected: AtomicUsize,
    /// Writes that ran.
    writes: AtomicUsize,
    /// Calls refused or held.
    refused: AtomicUsize,
}

/// Run one sequence; fail on the first outcome that shows a protected value.
async fn run(fs: &Fs, ops: &[Op], stats: &Stats) -> Result<(), TestCaseError> {
    fs.fs.reset();
    let s = session(&fs.gw).await;
    let mut handles: Vec<String> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (tool, args) = call_of(op, &handles);
        let o = fs
            .gw
            .call(
                &s,
                tool,
                common::args(args.clone()),
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        let seen = received(&o);
        for p in PROTECTED {
            prop_assert!(
                !seen.contains(p),
                "step {} {} {} showed `{}` to the runtime:\n{}\nsequence: {:?}",
                i,
                tool,
                args,
                p,
                seen,
                ops
            );
        }
        handles_in(&seen, &mut handles);
        let completed = matches!(o, CallOutcome::Completed { .. });
        let count = |c: &AtomicUsize| {
            c.fetch_add(1, Ordering::Relaxed);
        };
        if reason(&o) == Some(ReasonCode::ProtectedObject) {
            count(&stats.protected);
        }
        match op {
            _ if !completed => count(&stats.refused),
            Op::Write(p, _) => {
                count(&stats.writes);
                if !matches!(PATHS[*p], CONTACTS | NOTES)
                    && PROTECTED.iter().any(|v| fs.fs.holds_in_clear(PATHS[*p], v))
                {
                    count(&stats.cleartext_writes);
                }
            }
            Op::Edit(..) => count(&stats.edits),
            Op::Read(_) => {}
        }
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn property(config: GatewayConfig) -> Stats {
    let rt = runtime();
    let fs = rt.block_on(start(config));
    let mut runner = TestRunner::new(prop_support::config(64));
    let stats = Stats::default();
    let result = runner.run(&ops(), |ops| rt.block_on(run(&fs, &ops, &stats)));
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!("{stats:?}");
    // Not vacuous: blind edits ran, and edits of the files read first were held (every
    // sequence starts with a read of each seeded file).
    assert!(stats.edits.load(Ordering::Relaxed) > 0, "{stats:?}");
    assert!(stats.protected.load(Ordering::Relaxed) > 0, "{stats:?}");
    stats
}

/// Default configuration: no handle resolves into the (store) fs tools.
#[test]
fn store_sinks_never_show_protected_values() {
    let stats = property(GatewayConfig::default());
    assert_eq!(
        stats.cleartext_writes.load(Ordering::Relaxed),
        0,
        "a handle resolved into an unconfigured store sink: {stats:?}"
    );
}

/// The operator lets `contact_email` into `fs__write_file`: the value reaches the file in
/// clear, and read-backs and edit diffs declassify it again.
#[test]
fn allowed_store_sink_read_back_is_declassified() {
    property(allowing_config());
}

/// Formerly an open finding: a blind edit of a file whose protected values the runtime only
/// ever saw as handles turned them into text the detectors no longer recognise, and the edit's
/// diff and every later read showed the mangled value: `"@"` → `" / "` made
/// `dana.whitfield@northwind.example` readable as `dana.whitfield / northwind.example`. The read
/// withheld protected values, so the file is a protected object of the session: the edit waits
/// for a trusted confirmation (`protected_object`) and the file is unchanged.
#[test]
fn blind_edit_does_not_reveal_a_mangled_value() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let read = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        assert!(!received(&read).contains(EMAIL));
        let edit = call(
            &fs,
            &s,
            "fs__edit_file",
            json!({"path": NOTES, "old": "@", "new": " / "}),
        )
        .await;
        let mangled = EMAIL.replace('@', " / ");
        let seen = received(&edit);
        assert!(
            !seen.contains(&mangled),
            "the edit's diff shows `{mangled}`: {seen}"
        );
        held_as_protected(&edit);
        assert!(
            fs.fs.holds_in_clear(NOTES, EMAIL),
            "the file was not edited"
        );
        // The decision record names the reason.
        assert!(decision_reasons(&fs).contains(&"protected_object".to_owned()));
    });
}

/// The match oracle on objects the session never read: a blind edit (or dry run) of a file
/// the session has not read would answer "found" / "not found" and show a diff of content the
/// runtime was never shown (here the address mangled past the detectors). An edit tool whose
/// schema has match text (`old`, `dryRun`) is content matching, so on an unread object it
/// waits for a human with `object_unread`, whatever it guesses — and nothing of the file
/// comes back.
#[test]
fn blind_edits_of_an_unread_file_wait_for_the_user() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let mangled = EMAIL.replace('@', " / ");
        for (path, old, dry) in [
            (NOTES, "@", false),
            (NOTES, "dana.whitfield@", true),
            (NOTES, "zzz-not-there", true),
            // A file without protected values is unknown until read, too.
            (PLAIN, "Friday", false),
            // Another spelling of an unread file is unread as well.
            ("docs/notes.txt", "@", false),
        ] {
            let o = call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": path, "old": old, "new": " / ", "dryRun": dry}),
            )
            .await;
            assert_eq!(reason(&o), Some(ReasonCode::ObjectUnread), "{path}: {o:?}");
            let seen = received(&o);
            assert!(!seen.contains(&mangled), "{seen}");
            assert!(!seen.contains("replacements"), "{seen}");
            assert!(seen.contains("read the object first"), "{seen}");
        }
        assert!(fs.fs.holds_in_clear(NOTES, EMAIL));
        assert!(fs.fs.holds_in_clear(PLAIN, "Friday"));
        assert!(decision_reasons(&fs).contains(&"object_unread".to_owned()));
    });
}

/// The recovery works: after the session reads the file, an edit of a file without protected
/// values runs (positive control) and an edit of one whose read withheld values is held as a
/// protected object. A move of an unread file does not make its destination seen; a file the
/// session wrote itself is seen.
#[test]
fn reading_first_lets_edits_of_plain_files_run() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let edit = |path: &'static str| json!({"path": path, "old": "Friday", "new": "Monday"});
        assert_eq!(
            reason(&call(&fs, &s, "fs__edit_file", edit(PLAIN)).await),
            Some(ReasonCode::ObjectUnread)
        );
        let read = call(&fs, &s, "fs__read_file", json!({"path": PLAIN})).await;
        common::completed(&read);
        common::completed(&call(&fs, &s, "fs__edit_file", edit(PLAIN)).await);
        assert!(fs.fs.holds_in_clear(PLAIN, "Monday"));
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": NOTES, "old": "@", "new": " / "}),
            )
            .await,
        );
        // Moving an unread file elsewhere does not launder it into a seen one.
        let moved = call(
            &fs,
            &s,
            "fs__move_file",
            json!({"source": CONTACTS, "destination": "/work/docs/c2.json"}),
        )
        .await;
        common::completed(&moved);
        assert_eq!(
            reason(
                &call(
                    &fs,
                    &s,
                    "fs__edit_file",
                    json!({"path": "/work/docs/c2.json", "old": "@", "new": " / "}),
                )
                .await
            ),
            // A move protects every name it touches (red-team F2).
            Some(ReasonCode::ProtectedObject)
        );
        // The operator can declare a tool not content matching (both ways).
        let mut config = GatewayConfig::default();
        config.tools.push(ToolRule {
            tool: "fs__edit_file".into(),
            matches_content: Some(false),
            ..ToolRule::default()
        });
        let fs2 = start(config).await;
        let s2 = session(&fs2.gw).await;
        common::completed(&call(&fs2, &s2, "fs__edit_file", edit(PLAIN)).await);
    });
}

/// Red-team H1 (2026-12-03): a directory holding a protected file, moved onto the parent of a
/// name the session has seen (after moving the seen file's directory away), does not make a
/// blind edit of that name run: a move protects everything below the names it touches. The
/// same holds for a file the session never read. Positive control: a plain file elsewhere is
/// still edited after a read.
#[test]
fn a_directory_moved_under_a_seen_name_keeps_its_files_protected() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let notes = seeded().remove(NOTES).unwrap();
        {
            let mut files = fs.fs.files.lock().unwrap();
            files.insert("/work/docs/vault/key.txt".into(), notes.clone());
            files.insert("/work/docs/unread/key.txt".into(), notes);
            files.insert("/work/docs/pub/d/key.txt".into(), "harmless".into());
            files.insert("/work/docs/pub2/d/key.txt".into(), "harmless".into());
        }
        // 1. The seen file's directory is moved away first, so the secret can be moved onto
        //    its name: the vacated name is protected with everything below it, so the
        //    incoming move waits, and so does a blind edit there.
        let _ = call(
            &fs,
            &s,
            "fs__read_file",
            json!({"path": "/work/docs/vault/key.txt"}),
        )
        .await;
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": "/work/docs/vault/key.txt", "old": "@", "new": " / "}),
            )
            .await,
        );
        let seen = "/work/docs/pub/d/key.txt";
        common::completed(&call(&fs, &s, "fs__read_file", json!({"path": seen})).await);
        common::completed(
            &call(
                &fs,
                &s,
                "fs__move_file",
                json!({"source": "/work/docs/pub", "destination": "/work/docs/pub_old"}),
            )
            .await,
        );
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__move_file",
                json!({"source": "/work/docs/vault", "destination": "/work/docs/pub/d"}),
            )
            .await,
        );
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": seen, "old": "@", "new": " / "}),
            )
            .await,
        );
        // 2. An unread file's directory moved straight onto the seen file's directory (an
        //    upstream that merges): the move runs, and the edits below its destination wait.
        let seen = "/work/docs/pub2/d/key.txt";
        common::completed(&call(&fs, &s, "fs__read_file", json!({"path": seen})).await);
        common::completed(
            &call(
                &fs,
                &s,
                "fs__move_file",
                json!({"source": "/work/docs/unread", "destination": "/work/docs/pub2/d"}),
            )
            .await,
        );
        assert!(fs.fs.holds_in_clear(seen, EMAIL), "the swap happened");
        for (old, dry) in [("@", false), ("dana", true)] {
            let o = call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": seen, "old": old, "new": " / ", "dryRun": dry}),
            )
            .await;
            held_as_protected(&o);
            assert!(!received(&o).contains("northwind"), "{}", received(&o));
        }
        assert!(fs.fs.holds_in_clear(seen, EMAIL));
        // Positive control: a plain file outside the moved names is edited after a read.
        common::completed(&call(&fs, &s, "fs__read_file", json!({"path": PLAIN})).await);
        common::completed(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": PLAIN, "old": "Friday", "new": "Monday"}),
            )
            .await,
        );
    });
}

async fn call(fs: &Fs, s: &SessionRecord, tool: &str, args: Value) -> CallOutcome {
    fs.gw
        .call(
            s,
            tool,
            common::args(args),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await
}

/// Held for a trusted confirmation because the call names a protected object; the recovery
/// tells the runtime what to do without any protected value.
#[track_caller]
fn held_as_protected(o: &CallOutcome) -> secureclaw_core::artifact::ActionId {
    match o {
        CallOutcome::Pending(r) => {
            assert_eq!(r.reason, ReasonCode::ProtectedObject, "{r:?}");
            assert_eq!(r.status, "pending_confirmation");
            let text = r.render();
            for p in PROTECTED {
                assert!(!text.contains(p), "{text}");
            }
            secureclaw_core::artifact::ActionId(r.action_id.clone().unwrap())
        }
        other => panic!("expected pending(protected_object), got {other:?}"),
    }
}

/// The reason codes of every decision audit record.
fn decision_reasons(fs: &Fs) -> Vec<String> {
    fs.store
        .audit_records(0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|r| r.event.kind == secureclaw_core::audit::AuditKind::Decision)
        .filter_map(|r| r.event.reason.map(|c| c.as_str().to_owned()))
        .collect()
}

/// The dry-run oracle: `dryRun` edits answer "matched" or "not matched" (and a diff) without
/// changing the file, so a runtime could test guesses about the withheld content ("does
/// `dana.whitfield@` occur?") one character at a time. A dry run of a protected file is held
/// like any edit, whatever it guesses.
#[test]
fn dry_run_guesses_about_a_protected_file_are_held() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        for guess in ["dana.whitfield@", "zzz-not-there", "@"] {
            let o = call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": NOTES, "old": guess, "new": "x", "dryRun": true}),
            )
            .await;
            held_as_protected(&o);
            // Found and not found look the same: nothing about the content comes back.
            assert!(!received(&o).contains("replacements"), "{}", received(&o));
        }
    });
}

/// Another effect tool on the same object is held too: a move (whose destination then holds
/// the values), an overwrite, and an edit of a file the runtime only read by a structured
/// read (`contacts.json`).
#[test]
fn other_effects_on_a_protected_file_are_held() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": CONTACTS})).await;
        for (tool, args) in [
            (
                "fs__move_file",
                json!({"source": NOTES, "destination": "/work/docs/moved.txt"}),
            ),
            (
                "fs__write_file",
                json!({"path": NOTES, "content": "overwritten"}),
            ),
            (
                "fs__edit_file",
                json!({"path": CONTACTS, "old": "@", "new": " at "}),
            ),
        ] {
            let o = call(&fs, &s, tool, args.clone()).await;
            held_as_protected(&o);
        }
        assert!(fs.fs.holds_in_clear(NOTES, EMAIL));
        assert!(fs.fs.holds_in_clear(CONTACTS, EMAIL));
    });
}

/// Another spelling of the same path does not evade the rule: `.` and `..` segments, doubled
/// and trailing slashes, case, a `file://` URL, a relative path, a zero-width character.
#[test]
fn respelled_paths_of_a_protected_file_are_held() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        for path in [
            "/work/docs/./notes.txt",
            "/work/docs/a/../notes.txt",
            "./work/docs/../docs/notes.txt",
            "/work//docs/notes.txt",
            "/work/docs/notes.txt/",
            "/WORK/docs/Notes.TXT",
            "file:///work/docs/notes.txt",
            "docs/notes.txt",
            "/work/docs/notes\u{200b}.txt",
        ] {
            let o = call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": path, "old": "@", "new": " / "}),
            )
            .await;
            assert_eq!(
                reason(&o),
                Some(ReasonCode::ProtectedObject),
                "{path}: {o:?}"
            );
        }
    });
}

/// Positive controls: a file whose read withheld nothing, and a file the session wrote itself
/// and never read, are edited without a prompt; re-reading a protected file still returns
/// handles — the same handle per value.
#[test]
fn files_without_protected_values_are_edited_without_a_prompt() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let first = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let read = call(&fs, &s, "fs__read_file", json!({"path": PLAIN})).await;
        assert!(!received(&read).contains("hdl_"), "{}", received(&read));
        let edit = call(
            &fs,
            &s,
            "fs__edit_file",
            json!({"path": PLAIN, "old": "Friday", "new": "Monday"}),
        )
        .await;
        common::completed(&edit);
        assert!(fs.fs.holds_in_clear(PLAIN, "Monday"));
        let write = call(
            &fs,
            &s,
            "fs__write_file",
            json!({"path": "/work/docs/b.txt", "content": "draft: call Dana"}),
        )
        .await;
        common::completed(&write);
        // A write marks nothing seen (it may not be the whole content); a whole read does.
        let edit_b = json!({"path": "/work/docs/b.txt", "old": "draft", "new": "todo"});
        let held = call(&fs, &s, "fs__edit_file", edit_b.clone()).await;
        assert_eq!(
            reason(&held),
            Some(ReasonCode::ObjectUnread),
            "{}",
            visible(&held)
        );
        common::completed(
            &call(
                &fs,
                &s,
                "fs__read_file",
                json!({"path": "/work/docs/b.txt"}),
            )
            .await,
        );
        let edit = call(&fs, &s, "fs__edit_file", edit_b).await;
        common::completed(&edit);
        // A plain re-read of the protected file: handles again, the same ones.
        let again = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let (mut h1, mut h2) = (Vec::new(), Vec::new());
        handles_in(&received(&first), &mut h1);
        handles_in(&received(&again), &mut h2);
        assert!(!h1.is_empty());
        assert_eq!(h1, h2, "one handle per value per session");
        for p in PROTECTED {
            assert!(!received(&again).contains(p));
        }
    });
}

/// The operator's opt-out: `allow_protected_objects` on `fs__edit_file` lets its edits of a
/// protected file run (the operator accepted the risk), and only that tool's.
#[test]
fn operator_opt_out_lets_one_tool_edit_protected_files() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(opted_out(GatewayConfig::default())).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let edit = call(
            &fs,
            &s,
            "fs__edit_file",
            json!({"path": NOTES, "old": "Payroll", "new": "Salary"}),
        )
        .await;
        common::completed(&edit);
        assert!(fs.fs.holds_in_clear(NOTES, "Salary notes"));
        let mv = call(
            &fs,
            &s,
            "fs__move_file",
            json!({"source": NOTES, "destination": "/work/docs/moved.txt"}),
        )
        .await;
        held_as_protected(&mv);
    });
}

fn opted_out(mut config: GatewayConfig) -> GatewayConfig {
    config.tools.push(ToolRule {
        tool: "fs__edit_file".into(),
        allow_protected_objects: true,
        ..ToolRule::default()
    });
    config
}

/// A confirmed move of a protected file makes its destination protected; and the protections
/// survive a restart of the gateway (they live in the store, as another replica sees them).
#[test]
fn protection_follows_a_confirmed_move_and_survives_a_restart() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let moved = "/work/docs/moved.txt";
        let args = json!({"source": NOTES, "destination": moved});
        let held = call(&fs, &s, "fs__move_file", args.clone()).await;
        let action = held_as_protected(&held);
        fs.gw.decide_approval(&action, true, "user").await.unwrap();
        let ran = fs
            .gw
            .call(
                &s,
                "fs__move_file",
                common::args(args),
                &secureclaw_gateway::CallMeta::committed(Some(&action)),
            )
            .await;
        common::completed(&ran);
        assert!(fs.fs.holds_in_clear(moved, EMAIL));
        let edit = json!({"path": moved, "old": "@", "new": " / "});
        held_as_protected(&call(&fs, &s, "fs__edit_file", edit.clone()).await);
        // Restart: a new gateway on the same state directory and upstream.
        let Fs {
            _dir: dir,
            gw,
            fs: up,
            store,
            keys,
        } = fs;
        drop((gw, store));
        let fs = start_in(GatewayConfig::default(), dir, up, keys).await;
        let s = fs.gw.session(&s.id).await.unwrap().unwrap();
        held_as_protected(&call(&fs, &s, "fs__edit_file", edit).await);
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": "/work/docs/moved.txt", "old": "x", "new": "y", "dryRun": true}),
            )
            .await,
        );
        // Another session has its own protected (and seen) objects: the same edit there is
        // not held as protected; that session has not read the file, so it is held as unread.
        let other = session(&fs.gw).await;
        let o = call(
            &fs,
            &other,
            "fs__edit_file",
            json!({"path": moved, "old": "Payroll", "new": "Salary"}),
        )
        .await;
        assert_eq!(reason(&o), Some(ReasonCode::ObjectUnread), "{o:?}");
    });
}

/// Positive control of the allowing configuration, deterministic: the handle does resolve
/// into the file, and the read-back shows a handle, not the address. The file then holds a
/// protected value in clear, so it is a protected object: an edit of it waits for a
/// confirmation — unless the operator opted the edit tool out, and then its diff is
/// declassified like any result.
#[test]
fn allowed_handle_is_written_in_clear_and_read_back_as_a_handle() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(allowing_config()).await;
        let s = session(&fs.gw).await;
        let read = call(&fs, &s, "fs__read_file", json!({"path": CONTACTS})).await;
        let handle = common::completed(&read).structured.clone().unwrap()["content"]["email"]
            .as_str()
            .unwrap()
            .to_owned();
        let content = format!("Contact: {handle}\n");
        let write = call(
            &fs,
            &s,
            "fs__write_file",
            json!({"path": "/work/docs/a.txt", "content": content}),
        )
        .await;
        common::completed(&write);
        assert!(fs.fs.holds_in_clear("/work/docs/a.txt", EMAIL));
        held_as_protected(
            &call(
                &fs,
                &s,
                "fs__edit_file",
                json!({"path": "/work/docs/a.txt", "old": "@", "new": " / "}),
            )
            .await,
        );
        assert!(fs.fs.holds_in_clear("/work/docs/a.txt", EMAIL));

        let fs = start(opted_out(allowing_config())).await;
        let s = session(&fs.gw).await;
        let read = fs
            .gw
            .call(
                &s,
                "fs__read_file",
                common::args(json!({"path": CONTACTS})),
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        let handle = common::completed(&read).structured.clone().unwrap()["content"]["email"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(handle.starts_with("hdl_"), "{handle}");
        let content = format!("Contact: {handle}\n");
        let write = fs
            .gw
            .call(
                &s,
                "fs__write_file",
                common::args(json!({"path": "/work/docs/a.txt", "content": content})),
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        common::completed(&write);
        assert!(fs.fs.holds_in_clear("/work/docs/a.txt", EMAIL));
        for o in [
            fs.gw
                .call(
                    &s,
                    "fs__read_file",
                    common::args(json!({"path": "/work/docs/a.txt"})),
                    &secureclaw_gateway::CallMeta::committed(None),
                )
                .await,
            fs.gw
                .call(
                    &s,
                    "fs__edit_file",
                    common::args(
                        json!({"path": "/work/docs/a.txt", "old": "Contact", "new": "Mail"}),
                    ),
                    &secureclaw_gateway::CallMeta::committed(None),
                )
                .await,
        ] {
            let seen = received(&o);
            assert!(!seen.contains(EMAIL), "{seen}");
            assert!(seen.contains("hdl_"), "{seen}");
        }
        // Default configuration: the same write is refused, nothing reaches the file.
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let read = fs
            .gw
            .call(
                &s,
                "fs__read_file",
                common::args(json!({"path": CONTACTS})),
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        let mut handles = Vec::new();
        handles_in(&received(&read), &mut handles);
        let email = handles
            .iter()
            .find(|h| h.starts_with("hdl_em_"))
            .unwrap()
            .clone();
        let write = fs
            .gw
            .call(
                &s,
                "fs__write_file",
                common::args(json!({"path": "/work/docs/a.txt", "content": email})),
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        common::assert_denied(
            &write,
            secureclaw_core::recovery::ReasonCode::HandleSinkForbidden,
        );
        assert!(!fs.fs.holds_in_clear("/work/docs/a.txt", EMAIL));
    });
}

/// Red-team F2/F3, the search oracle: a search answers "found / not found" about content the
/// runtime holds only as handles (`*DE89*`, then `*DE893*`, … recovers the IBAN one character at
/// a time). Searches whose text the task does not name are bounded per session
/// (`max_unanchored_match_reads`); past the bound every such search is refused with
/// `match_budget` before it is sent, whether or not it would have matched, and the count
/// survives a restart (it lives in the store, as another replica sees it).
#[test]
fn searches_by_text_the_task_does_not_name_are_bounded() {
    let rt = runtime();
    rt.block_on(async {
        let mut config = GatewayConfig::default();
        config.limits.max_unanchored_match_reads = 3;
        let fs = start(config.clone()).await;
        let s = session(&fs.gw).await;
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let probe = |p: &str| json!({"path": "/work/docs/", "pattern": p});
        for guess in ["*DE8*", "*DE89*", "*zz-not-there*"] {
            let out = call(&fs, &s, "fs__search_files", probe(guess)).await;
            assert_eq!(reason(&out), None, "{guess}: {}", visible(&out));
        }
        assert_eq!(fs.fs.searches.load(Ordering::SeqCst), 3);
        // Past the bound: refused before it is sent, a hit and a miss alike.
        for guess in ["*DE893*", "*qq-not-there*"] {
            let out = call(&fs, &s, "fs__search_files", probe(guess)).await;
            assert_eq!(
                reason(&out),
                Some(ReasonCode::MatchBudget),
                "{}",
                visible(&out)
            );
            let text = visible(&out);
            assert!(text.contains("max_unanchored_match_reads"), "{text}");
            for p in PROTECTED {
                assert!(!text.contains(p), "{text}");
            }
        }
        assert_eq!(fs.fs.searches.load(Ordering::SeqCst), 3);
        let audited = fs
            .store
            .audit_records(0, usize::MAX)
            .unwrap()
            .into_iter()
            .any(|r| r.event.reason.map(|c| c.as_str()) == Some("match_budget"));
        assert!(audited, "the refusal is audited with its reason");
        // Positive control: a search by words the task names is never counted.
        for _ in 0..5 {
            let out = call(&fs, &s, "fs__search_files", probe("*files*")).await;
            assert_eq!(reason(&out), None, "{}", visible(&out));
        }
        // Another session has its own count.
        let s2 = session(&fs.gw).await;
        let out = call(&fs, &s2, "fs__search_files", probe("*DE893*")).await;
        assert_eq!(reason(&out), None, "{}", visible(&out));
        // The count survives a restart of the gateway on the same state.
        let Fs {
            _dir,
            gw,
            fs: up,
            keys,
            ..
        } = fs;
        drop(gw);
        let again = start_in(config.clone(), _dir, up, keys).await;
        let out = call(&again, &s, "fs__search_files", probe("*DE8937*")).await;
        assert_eq!(
            reason(&out),
            Some(ReasonCode::MatchBudget),
            "{}",
            visible(&out)
        );
        // The operator can exempt a search that cannot reach protected content.
        let mut exempt = config;
        exempt.tools.push(ToolRule {
            matches_content: Some(false),
            ..common::read_rule("fs__search_files")
        });
        let fs3 = start(exempt).await;
        let s3 = session(&fs3.gw).await;
        for i in 0..5 {
            let out = call(&fs3, &s3, "fs__search_files", probe(&format!("*x{i}*"))).await;
            assert_eq!(reason(&out), None, "{}", visible(&out));
        }
    });
}

/// Round-3 limitation "partial reads": a read of part of an object (here `head` of a server
/// the gateway cannot read whole) that cuts a value in two shows neither half: the
/// identifier-like piece at the cut edge is withheld, in the text and in the structured
/// content that mirrors it. Words at the edge stay (the control).
#[test]
fn a_partial_read_withholds_the_piece_at_its_cut_edge() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let s = session(&fs.gw).await;
        let head = call(
            &fs,
            &s,
            "fs__read_file",
            json!({"path": WRAPPED, "head": 1}),
        )
        .await;
        assert_eq!(reason(&head), None, "{}", visible(&head));
        let text = received(&head);
        assert!(text.contains("Salary account IBAN"), "{text}");
        assert!(
            !text.contains("DE89") && !text.contains(" 37"),
            "the first half of the IBAN: {text}"
        );
        assert!(text.contains("withheld at the edge"), "{text}");
        let head = call(&fs, &s, "fs__read_file", json!({"path": PLAIN, "head": 2})).await;
        let text = received(&head);
        assert!(
            text.contains("Tidy the shared folder on Friday."),
            "a word at the edge is not a piece: {text}"
        );
        // The text itself is untouched; the structured echo of the path is withheld (a read
        // that cuts a window checks every structured string: the documented cost).
        let shown = match &head {
            CallOutcome::Completed { output, .. } => output.content[0]["text"].clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(shown, "Agenda\nTidy the shared folder on Friday.");
    });
}

/// Red-team F1, F2, F9, F10: the "seen" mark is a permission (a content-matching edit of a
/// seen object runs without a read first), so it is granted narrowly. Each way the red team
/// turned it into a match oracle is held; reading the whole file first still lets an edit of a
/// plain file run (the control).
#[test]
fn seen_marks_are_narrow_partial_reads_moves_case_and_ids() {
    let rt = runtime();
    rt.block_on(async {
        let fs = start(GatewayConfig::default()).await;
        let no_leak = |o: &CallOutcome| {
            let text = received(o);
            for p in PROTECTED {
                assert!(!text.contains(p), "{p} in {text}");
            }
        };
        let dry = |path: &str| json!({"path": path, "old": "@", "new": " # ", "dryRun": true});

        // F1: a partial read (`head`) that showed nothing protected marks nothing seen.
        let s = session(&fs.gw).await;
        let head = call(&fs, &s, "fs__read_file", json!({"path": NOTES, "head": 1})).await;
        assert_eq!(reason(&head), None, "{}", visible(&head));
        assert!(!received(&head).contains("hdl_"), "{}", visible(&head));
        let o = call(&fs, &s, "fs__edit_file", dry(NOTES)).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ObjectUnread),
            "{}",
            visible(&o)
        );
        no_leak(&o);
        let head = call(&fs, &s, "fs__read_file", json!({"path": NOTES, "head": -1})).await;
        assert_eq!(reason(&head), None);
        let o = call(&fs, &s, "fs__edit_file", dry(NOTES)).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ObjectUnread),
            "{}",
            visible(&o)
        );

        // F9: seen marks are exact: writing `NOTES.TXT` does not make `notes.txt` seen.
        let s = session(&fs.gw).await;
        let upper = NOTES.replace("notes.txt", "NOTES.TXT");
        let w = call(
            &fs,
            &s,
            "fs__write_file",
            json!({"path": upper, "content": "x"}),
        )
        .await;
        assert_eq!(reason(&w), None, "{}", visible(&w));
        let o = call(&fs, &s, "fs__edit_file", dry(NOTES)).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ObjectUnread),
            "{}",
            visible(&o)
        );
        no_leak(&o);

        // F2: content moved onto a name the session had seen is not taken for what it saw.
        let s = session(&fs.gw).await;
        let scratch = "/work/docs/scratch.txt";
        let w = call(
            &fs,
            &s,
            "fs__write_file",
            json!({"path": scratch, "content": "scratch"}),
        )
        .await;
        assert_eq!(reason(&w), None, "{}", visible(&w));
        let r = call(&fs, &s, "fs__read_file", json!({"path": scratch})).await;
        assert_eq!(reason(&r), None);
        let mv = |from: &str, to: &str| json!({"source": from, "destination": to});
        let m = call(
            &fs,
            &s,
            "fs__move_file",
            mv(scratch, "/work/docs/scratch-old.txt"),
        )
        .await;
        assert_eq!(reason(&m), None, "{}", visible(&m));
        // The move protected both names: moving the unread secret file onto it waits.
        let m = call(&fs, &s, "fs__move_file", mv(NOTES, scratch)).await;
        assert_eq!(
            reason(&m),
            Some(ReasonCode::ProtectedObject),
            "{}",
            visible(&m)
        );
        let o = call(&fs, &s, "fs__edit_file", dry(scratch)).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ProtectedObject),
            "{}",
            visible(&o)
        );
        no_leak(&o);
        assert!(
            fs.fs.holds_in_clear(NOTES, EMAIL),
            "the secret file was moved"
        );

        // F10: an object named by an id field (`page_id`): held unread without a read, and
        // after a read that withheld values.
        let s = session(&fs.gw).await;
        let page = json!({"page_id": NOTES, "find": "@", "replace": " # "});
        let o = call(&fs, &s, "fs__update_page", page.clone()).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ObjectUnread),
            "{}",
            visible(&o)
        );
        no_leak(&o);
        let _ = call(&fs, &s, "fs__read_file", json!({"path": NOTES})).await;
        let o = call(&fs, &s, "fs__update_page", page).await;
        // Still held: the read withheld values, so it marked nothing seen.
        assert!(
            matches!(
                reason(&o),
                Some(ReasonCode::ProtectedObject | ReasonCode::ObjectUnread)
            ),
            "{}",
            visible(&o)
        );
        no_leak(&o);
        assert!(fs.fs.holds_in_clear(NOTES, EMAIL));

        // Control: a whole read of a plain file lets its content-matching edit run.
        let s = session(&fs.gw).await;
        let r = call(&fs, &s, "fs__read_file", json!({"path": PLAIN})).await;
        assert_eq!(reason(&r), None);
        let o = call(
            &fs,
            &s,
            "fs__edit_file",
            json!({"path": PLAIN, "old": "Friday", "new": "Monday"}),
        )
        .await;
        assert_eq!(reason(&o), None, "{}", visible(&o));
        let o = call(
            &fs,
            &s,
            "fs__update_page",
            json!({"page_id": PLAIN, "find": "Monday", "replace": "Tuesday"}),
        )
        .await;
        assert_eq!(reason(&o), None, "{}", visible(&o));
    });
}
