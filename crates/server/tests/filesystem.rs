//! Real input: SecureClaw in front of the official MCP filesystem server
//! (`@modelcontextprotocol/server-filesystem`, run with node), driven by an rmcp client over
//! MCP through the gateway's MCP front end.
//!
//! The server is installed from the pinned lock file: `npm ci --prefix tools/mcp-servers`.
//!
//! One scenario, in order: a read of a file holding an API key and an IBAN comes back with
//! handles instead of the values; a write below the directory the task named runs at once; a
//! write elsewhere waits for the user's approval, runs exactly once after it, and neither an
//! identical replay nor an altered re-issue runs again; the audit log verifies and holds no
//! protected value.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, Tool};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{RoleClient, ServiceExt};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::keys::KeyRing;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::{
    Gateway, GatewayConfig, RmcpUpstream, Upstream, UpstreamSpec, UpstreamTransport, system_clock,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_server::{McpFrontEnd, SessionSource};
use secureclaw_store::SqliteStore;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

type Client = RunningService<RoleClient, ()>;

const TIMEOUT: Duration = Duration::from_secs(30);

const AWS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const IBAN: &str = "DE89370400440532013000";

/// A Stripe-shaped live key, assembled at run time so that the source holds no key literal.
fn stripe_key() -> String {
    ["sk", "live", "4eC39HqLyjWDarjtT1zdp7dc"].join("_")
}

/// The filesystem server's entry point, installed by `npm ci --prefix tools/mcp-servers`.
fn filesystem_server() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        path.is_file(),
        "the MCP filesystem server is not installed at {}; run `npm ci --prefix tools/mcp-servers` \
         from the repository root (needs node and npm)",
        path.display()
    );
    path.canonicalize().unwrap()
}

async fn timed<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {TIMEOUT:?}"))
}

/// `tools/call` through the gateway, with an optional `_meta` object.
async fn call(
    client: &Client,
    name: &str,
    arguments: Value,
    meta: Option<Value>,
) -> CallToolResult {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let params: CallToolRequestParams = serde_json::from_value(params).unwrap();
    let response = timed(&format!("tools/call {name}"), client.call_tool_once(params))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} failed: {e}"));
    match response {
        CallToolResponse::Complete(result) => result,
        other => panic!("tools/call {name}: unexpected response {other:?}"),
    }
}

fn approval_meta(action: &str) -> Value {
    json!({"dev.secureclaw/approval": action})
}

fn structured(result: &CallToolResult) -> &Value {
    result
        .structured_content
        .as_ref()
        .unwrap_or_else(|| panic!("no structuredContent in {result:?}"))
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool<'a>(tools: &'a [Tool], name: &str) -> &'a Tool {
    tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("tool `{name}` not listed"))
}

/// Number of audit records of `kind` for `action`.
fn audit_count(store: &SqliteStore, kind: &str, action: &str) -> usize {
    store
        .audit_records(0, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| serde_json::to_value(&r.event).unwrap())
        .filter(|e| e["kind"] == kind && e["action_id"] == action)
        .count()
}

fn assert_free_of_secrets(what: &str, haystack: &str) {
    for secret in [AWS_KEY_ID, AWS_SECRET, IBAN, &stripe_key()] {
        assert!(
            !haystack.contains(secret),
            "{what} contains the protected value `{secret}`: {haystack}"
        );
    }
}

/// The stack of both scenarios: files, the filesystem server, the gateway and a client.
struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    notes: PathBuf,
    reports: PathBuf,
    secrets_file: PathBuf,
    store: Arc<SqliteStore>,
    gateway: Gateway,
    client: Client,
    server: tokio::task::JoinHandle<()>,
}

/// Files (the server's allowed root, a notes file with secrets, the anchored reports dir),
/// the filesystem server, the gateway in process, and an rmcp client that starts with
/// `lifecycle` (`initialize` for 2025-11-25, `server/discover` for 2026-07-28).
async fn setup(lifecycle: ClientLifecycleMode) -> Setup {
    let server_js = filesystem_server();

    // -- files: the server's allowed root, a notes file with secrets, the anchored reports dir
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let allowed = root.join("allowed");
    let notes = allowed.join("notes");
    let reports = allowed.join("reports");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::create_dir_all(&reports).unwrap();
    let secrets_file = notes.join("secrets.txt");
    std::fs::write(
        &secrets_file,
        format!(
            "Quarterly planning notes\n\
             The warehouse migration moves to Thursday; logistics signs off first.\n\
             AWS access key id: {AWS_KEY_ID}\n\
             aws_secret_access_key = {AWS_SECRET}\n\
             Billing key {}\n\
             Refunds go to IBAN {IBAN}\n",
            stripe_key()
        ),
    )
    .unwrap();

    // -- the stack, in process
    let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        getrandom::fill(b).unwrap();
    }));
    let store = Arc::new(SqliteStore::open(&root.join("secureclaw.db"), keys.clone()).unwrap());
    let policy = CedarPolicy::load(&[]).unwrap();
    let spec = UpstreamSpec {
        id: "fs".into(),
        transport: UpstreamTransport::Stdio {
            command: "node".into(),
            args: vec![
                server_js.display().to_string(),
                allowed.display().to_string(),
            ],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let upstream = timed(
        "starting the filesystem server",
        RmcpUpstream::connect(&spec, std::time::Duration::from_secs(60)),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start the filesystem server with node: {e}"));
    let upstream: Arc<dyn Upstream> = Arc::new(upstream);
    let (specs, connector) = in_process(vec![(spec, upstream)]);
    let gateway = timed(
        "gateway start",
        Gateway::start(
            keys,
            store.clone(),
            Arc::new(policy),
            GatewayConfig::default(),
            specs,
            &connector,
            system_clock(),
        ),
    )
    .await
    .unwrap();
    let session = gateway
        .open_session(
            "alice",
            TaskEnvelope {
                request: format!(
                    "Summarize my notes and write the summary into {}/ please",
                    reports.display()
                ),
                trusted_targets: vec![],
                // The host read "write the summary" as granting the (destructive: it
                // overwrites) write tool; without the grant every write would ask.
                granted_tools: vec!["fs__write_file".into()],
                max_amount: None,
            },
        )
        .await
        .unwrap();
    let front = McpFrontEnd::new(gateway.clone(), SessionSource::Fixed(session));
    let (server_io, client_io) = tokio::io::duplex(256 * 1024);
    let server = tokio::spawn(async move {
        if let Ok(running) = front.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client: Client = timed(
        "client start",
        ().serve_with_lifecycle(client_io, lifecycle),
    )
    .await
    .unwrap();
    Setup {
        _tmp: tmp,
        root,
        notes,
        reports,
        secrets_file,
        store,
        gateway,
        client,
        server,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn filesystem_server_behind_secureclaw() {
    let Setup {
        _tmp,
        root,
        notes,
        reports,
        secrets_file,
        store,
        gateway,
        client,
        server,
    } = setup(ClientLifecycleMode::Initialize).await;

    // -- the catalog: namespaced tools; the server reports `secure-filesystem-server` at
    // initialize, and the shipped catalog of known servers makes its read tools reads (its
    // `readOnlyHint` alone would not); every other tool is an effect
    let tools = timed("tools/list", client.list_all_tools()).await.unwrap();
    for t in &tools {
        eprintln!(
            "tool {} read_only={:?} destructive={:?}",
            t.name,
            t.annotations.as_ref().and_then(|a| a.read_only_hint),
            t.annotations.as_ref().and_then(|a| a.destructive_hint)
        );
    }
    let read_only = |name: &str| {
        tool(&tools, name)
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
    };
    for name in [
        "read_file",
        "read_text_file",
        "read_media_file",
        "read_multiple_files",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "search_files",
        "get_file_info",
        "list_allowed_directories",
    ] {
        assert_eq!(read_only(&format!("fs__{name}")), Some(true), "{name}");
    }
    for name in ["write_file", "edit_file", "create_directory", "move_file"] {
        assert_eq!(read_only(&format!("fs__{name}")), Some(false), "{name}");
    }
    assert_eq!(
        tools.iter().filter(|t| t.name.starts_with("fs__")).count(),
        14,
        "a new filesystem tool must be reviewed for the shipped catalog"
    );

    // -- a. the read path: values replaced by handles, the rest of the text kept
    let read = call(
        &client,
        "fs__read_text_file",
        json!({"path": secrets_file.display().to_string()}),
        None,
    )
    .await;
    assert_ne!(read.is_error, Some(true), "read failed: {read:?}");
    let read_json = serde_json::to_string(&read).unwrap();
    assert_free_of_secrets("the read result", &read_json);
    assert!(read_json.contains("hdl_"), "no handles in {read_json}");
    let summary = text(&read);
    eprintln!("summary of secrets.txt:\n{summary}");
    for word in [
        "Quarterly planning notes",
        "warehouse migration",
        "Thursday",
        "IBAN",
    ] {
        assert!(
            summary.contains(word),
            "`{word}` missing from the summary: {summary}"
        );
    }
    assert!(
        summary.contains("hdl_"),
        "no handle in the text block: {summary}"
    );
    let structured_read = serde_json::to_string(structured(&read)).unwrap();
    assert!(
        structured_read.contains("hdl_") && structured_read.contains("warehouse migration"),
        "structuredContent is not declassified like the text: {structured_read}"
    );

    // -- a1. partial reads (red-team round 3): an address split over two lines is withheld by
    // a whole read; `head` and `tail` each showed one half of it. The gateway reads the whole
    // file and applies the range to the scrubbed text, so neither half comes back.
    let split = notes.join("split.txt");
    std::fs::write(
        &split,
        "Email dana.whitfield@\nnorthwind.example today\nthen lunch\n",
    )
    .unwrap();
    for range in [json!({"head": 1}), json!({"tail": 2}), json!({})] {
        let mut args = json!({"path": split.display().to_string()});
        args.as_object_mut()
            .unwrap()
            .extend(range.as_object().unwrap().clone());
        let r = call(&client, "fs__read_text_file", args, None).await;
        assert_ne!(r.is_error, Some(true), "{range}: {r:?}");
        let shown = serde_json::to_string(&r).unwrap();
        assert!(
            !shown.contains("whitfield") && !shown.contains("northwind"),
            "{range}: a part of the withheld address came back: {shown}"
        );
        assert!(shown.contains("hdl_em"), "{range}: {shown}");
    }
    // Positive control: the range is still applied (`tail` 1 is the last line only).
    let r = call(
        &client,
        "fs__read_text_file",
        json!({"path": split.display().to_string(), "tail": 1}),
        None,
    )
    .await;
    let last = text(&r);
    assert!(
        last.contains("then lunch") && !last.contains("Email"),
        "{last}"
    );

    // -- a2. SecureClaw's own secrets read through the upstream (issue 11 item 7): an
    // operator token file, a session id and a key ring file come back as handles
    let token = format!("sco_{}", secureclaw_core::encoding::base32(&[0x3c; 24]));
    let session_id = format!("ses_{}", secureclaw_core::encoding::base32(&[0xc3; 16]));
    let ring = KeyRing::generate(&mut |b: &mut [u8]| getrandom::fill(b).unwrap());
    let ring_json = serde_json::to_string_pretty(&ring.to_file()).unwrap();
    let own = [
        ("operator.token", token.clone(), vec![token.clone()]),
        (
            "session.txt",
            format!("bearer for alice: {session_id}\n"),
            vec![session_id.clone()],
        ),
        (
            "keys.json",
            ring_json,
            ring.to_file()
                .keys
                .iter()
                .map(|k| k.secret_hex.clone())
                .collect(),
        ),
    ];
    for (file, content, secrets) in own {
        let path = notes.join(file);
        std::fs::write(&path, &content).unwrap();
        let read = call(
            &client,
            "fs__read_text_file",
            json!({"path": path.display().to_string()}),
            None,
        )
        .await;
        assert_ne!(read.is_error, Some(true), "read failed: {read:?}");
        let shown = serde_json::to_string(&read).unwrap();
        for secret in &secrets {
            assert!(!shown.contains(secret.as_str()), "{file}: {shown}");
        }
        assert!(shown.contains("hdl_"), "{file}: no handle in {shown}");
        std::fs::remove_file(&path).unwrap();
    }

    // -- b. a write below the anchored directory runs at once
    let report = reports.join("summary.md");
    let report_text = "Warehouse migration moves to Thursday.\n";
    let wrote = call(
        &client,
        "fs__write_file",
        json!({"path": report.display().to_string(), "content": report_text}),
        None,
    )
    .await;
    assert_ne!(
        wrote.is_error,
        Some(true),
        "anchored write failed: {wrote:?}"
    );
    assert_eq!(std::fs::read_to_string(&report).unwrap(), report_text);

    // -- c. a write outside it (inside the server's root) waits for approval, nothing written
    let out = notes.join("out.txt");
    let out_text = "Summary draft: warehouse migration on Thursday.\n";
    let args = json!({"path": out.display().to_string(), "content": out_text});
    let pending = call(&client, "fs__write_file", args.clone(), None).await;
    assert_eq!(pending.is_error, Some(true));
    let pending_json = structured(&pending);
    assert_eq!(
        pending_json["status"], "pending_confirmation",
        "{pending_json}"
    );
    assert_eq!(pending_json["recovery"]["reason"], "confirmation_required");
    let action = pending_json["recovery"]["action_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no action id in {pending_json}"))
        .to_owned();
    assert!(
        text(&pending).contains(&action),
        "the recovery text names no action id"
    );
    assert!(!out.exists(), "the unapproved write ran");

    // Re-issuing with the approval before the user decided still waits.
    let early = call(
        &client,
        "fs__write_file",
        args.clone(),
        Some(approval_meta(&action)),
    )
    .await;
    assert_eq!(structured(&early)["status"], "pending_confirmation");
    assert_eq!(
        structured(&early)["recovery"]["action_id"],
        action,
        "the re-issue with `_meta` \"dev.secureclaw/approval\" was treated as a new call \
         (the approval in `_meta` did not reach the gateway)"
    );
    assert!(!out.exists(), "the write ran before the approval");

    // -- d. approve, re-issue the identical call: it runs, once
    gateway
        .decide_approval(&ActionId(action.clone()), true, "test")
        .await
        .unwrap();
    let approved = call(
        &client,
        "fs__write_file",
        args.clone(),
        Some(approval_meta(&action)),
    )
    .await;
    assert_ne!(
        approved.is_error,
        Some(true),
        "approved write failed: {approved:?}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), out_text);
    gateway.flush().await;
    assert_eq!(audit_count(&store, "commit", &action), 1);

    // -- e. replays: identical → replay; altered content → binding_mismatch; nothing runs
    let replay = call(
        &client,
        "fs__write_file",
        args.clone(),
        Some(approval_meta(&action)),
    )
    .await;
    assert_eq!(replay.is_error, Some(true));
    assert_eq!(structured(&replay)["status"], "denied");
    assert_eq!(
        structured(&replay)["recovery"]["reason"],
        "replay",
        "{replay:?}"
    );

    let altered_args = json!({"path": out.display().to_string(), "content": "attacker text\n"});
    let altered = call(
        &client,
        "fs__write_file",
        altered_args,
        Some(approval_meta(&action)),
    )
    .await;
    assert_eq!(altered.is_error, Some(true));
    assert_eq!(structured(&altered)["status"], "denied");
    assert_eq!(
        structured(&altered)["recovery"]["reason"],
        "binding_mismatch",
        "{altered:?}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), out_text);
    gateway.flush().await;
    assert_eq!(audit_count(&store, "commit", &action), 1);

    // -- f. the audit log verifies and holds no protected value
    let verified = store.verify_audit().unwrap();
    let records = store.audit_records(0, usize::MAX).unwrap();
    assert_eq!(verified, records.len() as u64);
    assert!(verified > 0);
    let audit_json = serde_json::to_string(&records).unwrap();
    assert_free_of_secrets("the audit log", &audit_json);

    // Values read are kept encrypted at rest: not in the database or its write-ahead log.
    // (Best effort: the WAL is read as well if the checkpoint cannot complete.)
    let _ = store.checkpoint();
    for file in ["secureclaw.db", "secureclaw.db-wal"] {
        if let Ok(bytes) = std::fs::read(root.join(file)) {
            assert_free_of_secrets(file, &String::from_utf8_lossy(&bytes));
        }
    }

    client.cancel().await.unwrap();
    let _ = timed("server shutdown", server).await;
}

/// `tools/call` without following an `input_required` answer (MCP 2026-07-28 MRTR).
async fn call_raw(client: &Client, params: CallToolRequestParams) -> CallToolResponse {
    timed("tools/call", client.call_tool_once(params))
        .await
        .unwrap_or_else(|e| panic!("tools/call failed: {e}"))
}

fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// The same flow for an MCP 2026-07-28 client (issue 16, "done when"): it starts with
/// `server/discover`, reads with handles, and the write outside the anchored directory is
/// answered `input_required` with a sealed `requestState`. After the user's out-of-band
/// approval the retry with that state writes once; a replayed state and an altered call with
/// it write nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_07_28_client_completes_the_filesystem_flow() {
    let Setup {
        _tmp,
        root: _,
        notes,
        reports,
        secrets_file,
        store,
        gateway,
        client,
        server,
    } = setup(ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    })
    .await;

    // Read: handles instead of the values.
    let read = call(
        &client,
        "fs__read_text_file",
        json!({"path": secrets_file.display().to_string()}),
        None,
    )
    .await;
    assert_ne!(read.is_error, Some(true), "read failed: {read:?}");
    let read_json = serde_json::to_string(&read).unwrap();
    assert_free_of_secrets("the read result", &read_json);
    assert!(read_json.contains("hdl_"), "no handles in {read_json}");

    // An anchored write runs at once.
    let report = reports.join("summary.md");
    let wrote = call(
        &client,
        "fs__write_file",
        json!({"path": report.display().to_string(), "content": "ok\n"}),
        None,
    )
    .await;
    assert_ne!(wrote.is_error, Some(true), "{wrote:?}");

    // A write elsewhere: input_required, nothing written.
    let out = notes.join("out-2026.txt");
    let out_text = "Summary draft.\n";
    let args = json!({"path": out.display().to_string(), "content": out_text});
    let params = |args: &Value, state: Option<&str>| {
        let mut p: CallToolRequestParams =
            serde_json::from_value(json!({"name": "fs__write_file", "arguments": args})).unwrap();
        p.request_state = state.map(str::to_owned);
        p
    };
    let CallToolResponse::InputRequired(pending) = call_raw(&client, params(&args, None)).await
    else {
        panic!("the unanchored write was not answered input_required");
    };
    let state = pending.request_state.clone().unwrap();
    let meta = serde_json::to_value(pending.meta.as_ref().unwrap()).unwrap();
    let action = meta["dev.secureclaw/pending"]["recovery"]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!out.exists(), "the unapproved write ran");

    // Approved out of band; the retry with the state writes once.
    gateway
        .decide_approval(&ActionId(action.clone()), true, "test")
        .await
        .unwrap();
    let done = complete(call_raw(&client, params(&args, Some(&state))).await);
    assert_ne!(done.is_error, Some(true), "approved write failed: {done:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), out_text);

    // Replay and altered re-issue: nothing runs again.
    let replay = complete(call_raw(&client, params(&args, Some(&state))).await);
    assert_eq!(structured(&replay)["recovery"]["reason"], "replay");
    let altered = json!({"path": out.display().to_string(), "content": "attacker text\n"});
    let altered = complete(call_raw(&client, params(&altered, Some(&state))).await);
    assert_eq!(
        structured(&altered)["recovery"]["reason"],
        "binding_mismatch"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), out_text);
    gateway.flush().await;
    assert_eq!(audit_count(&store, "commit", &action), 1);

    client.cancel().await.unwrap();
    let _ = timed("server shutdown", server).await;
}
