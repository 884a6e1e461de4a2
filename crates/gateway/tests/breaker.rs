//! Adversarial review ("breaker") tests. Every test asserts the secure behaviour. Six of them
//! began as findings of the review (approval relabelling, truncated approver display, `@domain`
//! address lists, lone `/` anchoring everything, numeric read selectors, upstream error text
//! stored in the ledger) and are now regression tests for their fixes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::artifact::ActionId;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::classify::FieldRule;
use secureclaw_core::handle::Sensitivity;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{ApprovalState, SessionRecord, SqliteStore};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SEND: &str = "office__send_email";
const PAY: &str = "office__pay_invoice";
const COUNT: &str = "test__count";

async fn session_with(h: &Harness, request: &str, trusted: &[&str]) -> SessionRecord {
    h.gw.open_session(
        "alice",
        TaskEnvelope {
            request: request.into(),
            trusted_targets: trusted.iter().map(|s| (*s).to_owned()).collect(),
            ..TaskEnvelope::default()
        },
    )
    .await
    .unwrap()
}

fn received_count(h: &Harness) -> Vec<Map<String, Value>> {
    h.test
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _)| n == "count")
        .map(|(_, a)| a.clone())
        .collect()
}

// =====================================================================================
// FINDINGS (ignored so the suite stays green)
// =====================================================================================

/// F1. A call that carries `_meta` approval = A but is NOT the request A was previewed for gets
/// `Pending(A)` back instead of a binding mismatch. The MCP front end then elicits the human
/// with the *current* (benign-looking) arguments while the answer approves action A (the
/// attacker's call). Here the elicitation step of `mcp.rs` is simulated: on `Pending(rec)` it
/// calls `decide_approval(rec.action_id, true).await` — the human said yes to what was shown.
#[tokio::test]
async fn pending_approval_cannot_be_relabelled_by_a_different_call() {
    let h = Harness::new().await;
    // 1. The runtime previews the attacker's call (HTTP /v1/preview — no elicitation there).
    let p = h
        .preview(&h.session, SEND, email(ATTACKER, "exfil"))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Confirm);
    let a = p.action_id.clone();
    // 2. It then issues an innocuous-looking call (still unanchored, so it would need
    //    confirmation anyway) with `_meta` approval = A.
    let benign = email("finance@corp.example", "Copy of INV-42 for your records");
    let o = h.call(&h.session, SEND, benign.clone(), Some(&a)).await;
    // Secure: the gateway must refuse to present A for a different request.
    let relabelled =
        matches!(&o, CallOutcome::Pending(r) if r.action_id.as_deref() == Some(a.0.as_str()));
    if relabelled {
        // What mcp.rs does next: elicit with `benign` shown, human approves, A is approved.
        h.gw.decide_approval(&a, true, "mcp-elicitation")
            .await
            .unwrap();
        let o = h
            .call(&h.session, SEND, email(ATTACKER, "exfil"), Some(&a))
            .await;
        let ran = matches!(o, CallOutcome::Completed { .. });
        panic!(
            "call with approval A but different arguments came back Pending(A); after the human approved \
             what was shown, the attacker's call ran: {ran}; outbox: {:?}",
            h.state()
                .sent
                .iter()
                .map(|m| m.to.clone())
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(h.sent(), 0);
}

/// F2. The approver's one-line display cuts every value at 200 characters. A recipient list
/// padded past 200 characters shows the approver only the anchored address; the bound
/// request (and the upstream) get the attacker too.
#[tokio::test]
async fn approver_sees_every_target_in_full() {
    let h = Harness::new().await;
    let to = format!("{APPROVER}{}, {ATTACKER}", " ".repeat(200));
    let o = h.call(&h.session, COUNT, json!({"to": to}), None).await;
    let a = assert_pending(&o);
    let listing = h.gw.approvals(Some(ApprovalState::Pending)).await.unwrap();
    let (_, act) = listing.iter().find(|(p, _)| p.action_id == a).unwrap();
    let shown = h.gw.reveal_for_approver(&act.display).await;
    assert!(
        shown.contains(ATTACKER),
        "the approver is asked to approve a call whose recipient list they cannot see: {shown}"
    );
}

/// F3. `@domain` / `*@domain` trusted targets anchor any string whose text after the LAST `@`
/// is the domain, so a recipient list or a second address smuggled before it is "anchored".
#[tokio::test]
async fn domain_anchor_does_not_cover_lists_or_double_at() {
    let h = Harness::new().await;
    let s = session_with(&h, "Tell the team about the offsite.", &["@corp.example"]).await;
    // Positive control.
    completed(
        &h.call(&s, COUNT, json!({"to": "bob@corp.example"}), None)
            .await,
    );
    for to in [
        format!("{ATTACKER},bob@corp.example"),
        format!("{ATTACKER};bob@corp.example"),
        format!("{ATTACKER} bob@corp.example"),
        format!("{ATTACKER}@corp.example"),
        format!("\"{ATTACKER}\"@corp.example"),
    ] {
        let o = h.call(&s, COUNT, json!({ "to": to }), None).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ConfirmationRequired),
            "`{to}` was treated as anchored by @corp.example"
        );
    }
    assert_eq!(h.test.effects(), 1);
}

/// F4. A lone `/` or `./` in the request text (e.g. "input / output", "save it in ./") is taken
/// as a directory candidate and anchors every absolute path (README: a directory anchors only
/// when written as an absolute path ending in `/`).
#[tokio::test]
async fn lone_slash_in_the_task_does_not_anchor_the_filesystem() {
    let h = Harness::new().await;
    for task in [
        "Compare the input / output numbers in /srv/data/report.txt",
        "Save the summary next to the notes in ./",
    ] {
        let s = session_with(&h, task, &[]).await;
        let o = h
            .call(
                &s,
                COUNT,
                json!({"path": "/home/alice/.ssh/authorized_keys"}),
                None,
            )
            .await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ConfirmationRequired),
            "task {task:?} anchored /home/alice/.ssh/authorized_keys"
        );
    }
    assert_eq!(h.test.effects(), 0);
}

// ----------------------------------------------------------------- F5: numeric selectors

/// An upstream `rec` with a read tool selecting a record by a NUMBER and a project string,
/// and an effect tool `notify` with target `to`.
#[derive(Default)]
struct RecordUpstream {
    notified: Mutex<Vec<Map<String, Value>>>,
    calls: AtomicUsize,
}

fn tool(name: &str, read_only: bool, destructive: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: None,
        input_schema: args(json!({"type": "object"})),
        read_only_hint: read_only,
        destructive_hint: destructive,
        open_world_hint: true,
        output_schema: None,
    }
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
            Ok(vec![
                tool("read_record", true, false),
                tool("notify", false, false),
                tool("fail_echo", false, false),
            ])
        })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match name.as_str() {
                "read_record" => {
                    let n = arguments.get("number").and_then(Value::as_u64).unwrap_or(0);
                    let v = json!({"number": n, "contact_email": format!("owner{n}@external{n}.example")});
                    Ok(ToolOutput {
                        content: vec![json!({"type": "text", "text": v.to_string()})],
                        structured: Some(v),
                        is_error: false,
                    })
                }
                "notify" => {
                    self.notified.lock().unwrap().push(arguments);
                    Ok(ToolOutput {
                        content: vec![json!({"type": "text", "text": "ok"})],
                        structured: None,
                        is_error: false,
                    })
                }
                // Many servers reject bad input with a protocol error that quotes the input.
                _ => Err(UpstreamError::Call {
                    id: "rec".into(),
                    message: format!("invalid params: {}", Value::Object(arguments)),
                }),
            }
        })
    }
}

fn rec_spec() -> UpstreamSpec {
    UpstreamSpec {
        id: "rec".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process-rec".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    }
}

struct RecHarness {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    up: Arc<RecordUpstream>,
    gw: Gateway,
}

async fn rec_harness() -> RecHarness {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys();
    let store = Arc::new(SqliteStore::open(&dir.path().join("db"), keys.clone()).unwrap());
    let up = Arc::new(RecordUpstream::default());
    let mut config = GatewayConfig::default();
    config.limits.upstream_timeout_ms = 20_000;
    // `readOnlyHint` alone makes nothing a read; the operator declares the read tool.
    config.tools.push(read_rule("rec__read_record"));
    // `notify` and `fail_echo` send: handles flow into them as into any egress sink.
    config.tools.push(secureclaw_gateway::ToolRule {
        tool: "rec__*".into(),
        sink: Some(secureclaw_core::handle::SinkKind::Egress),
        ..secureclaw_gateway::ToolRule::default()
    });
    config.classify.push(FieldRule {
        upstream: "rec".into(),
        tool: "read_record".into(),
        path: "/contact_email".into(),
        label: "record_contact".into(),
        sensitivity: Sensitivity::Medium,
        allowed_sinks: vec![],
        anchor: true,
        identifiers: false,
    });
    let dynup: Arc<dyn Upstream> = up.clone();
    let (specs, connector) = in_process(vec![(rec_spec(), dynup)]);
    let gw = Gateway::start(
        keys,
        store.clone(),
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config,
        specs,
        &connector,
        TestClock::new(T0).clock(),
    )
    .await
    .unwrap();
    RecHarness {
        _dir: dir,
        store,
        up,
        gw,
    }
}

/// F5. A read is "anchored" when every STRING argument is anchored; numbers, arrays and
/// objects are ignored. A record selected by a number the user never named is anchored as
/// long as the string arguments repeat task words, so its contact becomes an anchored target.
#[tokio::test]
async fn numeric_selector_of_an_unnamed_object_is_not_anchored() {
    let r = rec_harness().await;
    let s =
        r.gw.open_session(
            "alice",
            TaskEnvelope {
                request: "Please notify the contact of record 7 in project alpha.".into(),
                trusted_targets: vec![],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    // Record 8 was never named by the user.
    let o =
        r.gw.call(
            &s,
            "rec__read_record",
            args(json!({"project": "alpha", "number": 8})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    let summary = completed(&o).structured.clone().unwrap();
    let contact = summary["contact_email"].as_str().unwrap().to_owned();
    assert!(contact.starts_with("hdl_"));
    let o =
        r.gw.call(
            &s,
            "rec__notify",
            args(json!({"to": contact, "text": "hi"})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    assert_eq!(
        reason(&o),
        Some(ReasonCode::ConfirmationRequired),
        "the contact of record 8 (never named) was notified without confirmation: {o:?}"
    );
    assert!(r.up.notified.lock().unwrap().is_empty());
}

/// F6. An upstream protocol error that quotes the (resolved) arguments is stored in clear in
/// the ledger's `failure` column (`mark_failed(err.to_string())`), so a vaulted value ends up
/// unencrypted at rest (and in the stderr log through `tracing::warn!(error = %err)`).
#[tokio::test]
async fn upstream_error_text_with_resolved_values_is_not_stored_in_clear() {
    let r = rec_harness().await;
    let s =
        r.gw.open_session(
            "alice",
            TaskEnvelope {
                request: "Please notify the contact of record 7 in project alpha.".into(),
                trusted_targets: vec![],
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    let o =
        r.gw.call(
            &s,
            "rec__read_record",
            args(json!({"project": "alpha", "number": 7})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    let contact = completed(&o).structured.clone().unwrap()["contact_email"]
        .as_str()
        .unwrap()
        .to_owned();
    // fail_echo has no target fields: needs confirmation; approve it as the operator would.
    let o =
        r.gw.call(
            &s,
            "rec__fail_echo",
            args(json!({"text": contact})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    let a = assert_pending(&o);
    r.gw.decide_approval(&a, true, "operator").await.unwrap();
    let o =
        r.gw.call(
            &s,
            "rec__fail_echo",
            args(json!({"text": contact})),
            &secureclaw_gateway::CallMeta::committed(Some(&a)),
        )
        .await;
    assert_denied(&o, ReasonCode::UpstreamError);
    assert!(!visible(&o).contains("owner7@external7.example"));
    let entry = r.store.ledger_entry(&a).unwrap().unwrap();
    let failure = entry.failure.unwrap_or_default();
    assert!(
        !failure.contains("owner7@external7.example"),
        "vaulted plaintext stored in clear in the ledger: {failure}"
    );
}

// =====================================================================================
// STOPPED ATTACKS (must pass)
// =====================================================================================

/// A high handle hidden in an object KEY (not a value) is still seen by the policy: the
/// sink rule fires and the executor never resolves it.
#[tokio::test]
async fn high_handle_in_an_object_key_is_seen_by_policy() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    for arguments in [
        json!({"to": APPROVER, iban.clone(): "x"}),
        json!({"to": APPROVER, "meta": {iban.clone(): {"k": 1}}}),
        json!({"to": APPROVER, "list": [[{ "a": format!("see {iban}.") }]]}),
    ] {
        let o = h.call(&h.session, COUNT, arguments, None).await;
        assert_denied(&o, ReasonCode::HandleSinkForbidden);
    }
    assert_eq!(h.test.effects(), 0);
    h.assert_audit_clean();
}

/// Obfuscated handle forms (prefix glued to a word, upper case, URL-encoded, split) are not
/// handles to the gateway and are NOT resolved by the executor either: the upstream gets
/// the literal text, never the value.
#[tokio::test]
async fn obfuscated_handles_are_neither_seen_nor_resolved() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let contact = handle_at(&inv, "contact_email");
    for h_ in [&iban, &contact] {
        let tail = &h_[7..];
        for note in [
            format!("x{h_}"),
            format!("{h_}x"),
            format!("é{h_}"),
            h_.to_uppercase(),
            h_.replace('_', "%5F"),
            format!("{}{}", &h_[..10], &h_[10..]).replace("hdl_", "hdl\u{200b}_"),
            format!("hdl_ib_{tail}"),
        ] {
            let o = h
                .call(
                    &h.session,
                    COUNT,
                    json!({"to": APPROVER, "note": note}),
                    None,
                )
                .await;
            // Either allowed (literal text sent) or refused; never the plaintext.
            let _ = o;
        }
    }
    for a in received_count(&h) {
        let s = Value::Object(a).to_string();
        assert_no_plaintext("upstream arguments", &s);
    }
    h.assert_audit_clean();
}

/// Embedding an anchored handle inside a target string, or combining it with text, never
/// makes the target anchored.
#[tokio::test]
async fn handle_inside_a_target_string_is_not_anchored() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let contact = handle_at(&inv, "contact_email");
    // Control: the anchored handle alone is anchored.
    completed(
        &h.call(&h.session, COUNT, json!({"to": contact.clone()}), None)
            .await,
    );
    for to in [
        format!("{contact},{ATTACKER}"),
        format!("{ATTACKER} {contact}"),
        format!("{contact}\n{contact}"),
        format!("mailto:{contact}"),
        format!("{contact}@evil.example"),
    ] {
        let o = h.call(&h.session, COUNT, json!({ "to": to }), None).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ConfirmationRequired),
            "`{to}`: {o:?}"
        );
    }
    // A list with the anchored handle and the attacker: not all anchored.
    let o = h
        .call(&h.session, COUNT, json!({"to": [contact, ATTACKER]}), None)
        .await;
    assert_pending(&o);
    assert_eq!(h.test.effects(), 1);
}

/// Unicode / case / whitespace near misses of the anchored address.
#[tokio::test]
async fn unicode_near_misses_are_not_anchored() {
    let h = Harness::new().await;
    for to in [
        "approver@corp.example\u{200b}",
        "\u{200b}approver@corp.example",
        "approver\u{ff20}corp.example",
        "аpprover@corp.example", // Cyrillic а
        "approver@corp.examp1e",
        "approver@corp.example.",
        "approver@corp.example>",
        "<approver@corp.example>",
        "approver@corp.exampl\u{0065}\u{0301}",
        "approver@CORP.example, attacker@evil.example",
        "approver@corp.example\r\nBcc: attacker@evil.example",
        "approver+x@corp.example",
        "corp.example",
        "@corp.example",
        "*",
    ] {
        let o = h.call(&h.session, COUNT, json!({ "to": to }), None).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ConfirmationRequired),
            "`{to:?}` was anchored: {o:?}"
        );
    }
    assert_eq!(h.test.effects(), 0);
}

/// Path tricks against a directory anchor.
#[tokio::test]
async fn path_tricks_against_a_directory_anchor() {
    let h = Harness::new().await;
    let s = session_with(&h, "Write the report under /srv/reports/ please", &[]).await;
    completed(
        &h.call(&s, COUNT, json!({"path": "/srv/reports/q4.txt"}), None)
            .await,
    );
    for path in [
        "/srv/reports/../secrets.txt",
        "/srv/reports/./../secrets.txt",
        "/srv/reports/a/../../etc/passwd",
        "/srv/reportsX/a.txt",
        "/srv/report",
        "srv/reports/q4.txt",
        "./srv/reports/q4.txt",
        "~/srv/reports/q4.txt",
        "/SRV/reports/q4.txt",
        "/srv/reports/..",
    ] {
        let o = h.call(&s, COUNT, json!({ "path": path }), None).await;
        assert_eq!(
            reason(&o),
            Some(ReasonCode::ConfirmationRequired),
            "`{path:?}` was anchored"
        );
    }
    assert_eq!(h.test.effects(), 1);
}

/// An approval belongs to one (session, tool, arguments): another session of the same caller,
/// another tool, and different arguments are all refused, and the refusals do not burn it.
#[tokio::test]
async fn approvals_do_not_travel() {
    let h = Harness::new().await;
    let s2 = h.open_session("alice").await;
    let args_a = email("finance@corp.example", "copy");
    let a = assert_pending(&h.call(&h.session, SEND, args_a.clone(), None).await);
    h.gw.decide_approval(&a, true, "operator").await.unwrap();
    // Another session of the same caller.
    let o = h.call(&s2, SEND, args_a.clone(), Some(&a)).await;
    assert_denied(&o, ReasonCode::ApprovalSessionMismatch);
    // Another tool with the same arguments.
    let o = h
        .call(&h.session, "office__save_draft", args_a.clone(), Some(&a))
        .await;
    assert!(matches!(o, CallOutcome::Denied(_)), "{o:?}");
    let o = h.call(&h.session, COUNT, args_a.clone(), Some(&a)).await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    // Unknown tool name with the approval.
    let o = h
        .call(&h.session, "nope__x", args_a.clone(), Some(&a))
        .await;
    assert!(matches!(o, CallOutcome::Denied(_)), "{o:?}");
    assert_eq!(h.sent(), 0);
    // The owner can still use it, once.
    completed(&h.call(&h.session, SEND, args_a.clone(), Some(&a)).await);
    assert_denied(
        &h.call(&h.session, SEND, args_a, Some(&a)).await,
        ReasonCode::Replay,
    );
    assert_eq!(h.sent(), 1);
}

/// The two-phase artifact is bound to the session: presenting it from another session (same
/// caller) or another caller is a binding mismatch; an allow artifact for an anchored call
/// cannot carry an unanchored one.
#[tokio::test]
async fn two_phase_artifact_is_bound_to_session_and_arguments() {
    let h = Harness::new().await;
    let s2 = h.open_session("alice").await;
    let s3 = h.open_session("mallory").await;
    let p = h
        .preview(&h.session, SEND, email(APPROVER, "x"))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    for s in [&s2, &s3] {
        let o = h
            .commit(
                s,
                SEND,
                email(APPROVER, "x"),
                &p.action_id,
                Some(&p.artifact),
            )
            .await;
        assert_denied(&o, ReasonCode::BindingMismatch);
    }
    let o = h
        .commit(
            &h.session,
            SEND,
            email(ATTACKER, "x"),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    assert_denied(&o, ReasonCode::BindingMismatch);
    // Same content, keys in another order and a duplicate-free re-serialization: still bound.
    let reordered = json!({"body": "Invoice INV-42 for sign-off.", "subject": "x", "to": APPROVER});
    completed(
        &h.commit(&h.session, SEND, reordered, &p.action_id, Some(&p.artifact))
            .await,
    );
    assert_eq!(h.sent(), 1);
}

/// Approving an action whose preview was DENIED (high handle to a forbidden sink) is
/// impossible, and presenting its id as an approval changes nothing.
#[tokio::test]
async fn a_denied_action_cannot_be_approved() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let p = h
        .preview(
            &h.session,
            SEND,
            json!({"to": APPROVER, "subject": "s", "body": iban}),
        )
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Deny);
    assert!(
        h.gw.decide_approval(&p.action_id, true, "operator")
            .await
            .is_err()
    );
    let o = h
        .call(
            &h.session,
            SEND,
            json!({"to": APPROVER, "subject": "s", "body": iban}),
            Some(&p.action_id),
        )
        .await;
    assert!(matches!(o, CallOutcome::Denied(_)), "{o:?}");
    assert_eq!(h.sent(), 0);
}

/// A guessed / random / other-session action id as an approval is refused without effect.
#[tokio::test]
async fn forged_approval_ids() {
    let h = Harness::new().await;
    for id in [
        "act_aaaaaaaaaaaaaaaaaaaaaaaaaa",
        "",
        "' OR 1=1 --",
        "act_\u{0}",
        &"x".repeat(100_000),
    ] {
        let o = h
            .call(
                &h.session,
                SEND,
                email(ATTACKER, "x"),
                Some(&ActionId(id.to_owned())),
            )
            .await;
        assert!(matches!(o, CallOutcome::Denied(_)), "{o:?}");
    }
    assert_eq!(h.sent(), 0);
}

/// The IBAN handle may flow into pay_invoice only, wherever in the arguments it sits, and the
/// key-vs-value position does not matter.
#[tokio::test]
async fn high_handle_cannot_be_laundered_through_an_allowed_sink_argument() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    // pay_invoice is an allowed sink; a nested second copy is fine; a read tool is not.
    let o = h
        .call(
            &h.session,
            "office__search_mail",
            json!({"query": iban}),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::HandleSinkForbidden);
    let o = h
        .call(
            &h.session,
            "test__echo",
            json!({"text": format!("v={iban}")}),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::HandleSinkForbidden);
    let o = h
        .call(
            &h.session,
            "office__save_draft",
            json!({"to": APPROVER, "subject": "s", "body": iban}),
            None,
        )
        .await;
    assert_denied(&o, ReasonCode::HandleSinkForbidden);
    let _ = PAY;
    assert_eq!(h.state().drafts.len(), 0);
}

/// Numbers: -0, 1.0 vs 1, huge floats and integers beyond 2^53.
#[tokio::test]
async fn numeric_edge_cases_do_not_break_binding() {
    let h = Harness::new().await;
    for v in [
        json!(9_007_199_254_740_993_u64),
        json!(1e300),
        json!(-9_007_199_254_740_993_i64),
    ] {
        let o = h
            .call(&h.session, COUNT, json!({"to": APPROVER, "n": v}), None)
            .await;
        assert_denied(&o, ReasonCode::InvalidArguments);
    }
    // Non-finite numbers cannot even be represented in serde_json.
    assert!(serde_json::Number::from_f64(f64::NAN).is_none());
    assert!(serde_json::from_str::<Value>("1e400").is_err());
    // Value-equal spellings share a binding (JCS); the upstream receives the spelling that was
    // committed — informational, value-equal only.
    let a = h
        .preview(&h.session, COUNT, json!({"to": APPROVER, "n": 1}))
        .await
        .unwrap();
    let b = h
        .preview(&h.session, COUNT, json!({"to": APPROVER, "n": 1.0}))
        .await
        .unwrap();
    assert_ne!(a.action_id, b.action_id);
    assert_eq!(h.test.effects(), 0);
    assert_serving(&h).await;
}

async fn assert_serving(h: &Harness) {
    completed(&h.call(&h.session, "test__peek", json!({}), None).await);
}

/// Crafted inputs for the detectors and the summary: long runs that stress every scanner must
/// finish quickly (no super-linear blow-up that stalls a runtime worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detectors_are_fast_on_crafted_input() {
    let h = Harness::new().await;
    let n = 200_000;
    let inputs = [
        "1".repeat(n),
        "1 ".repeat(n / 2),
        "a@".repeat(n / 2),
        "a.".repeat(n / 2) + "@",
        "@a.".repeat(n / 3),
        "http://".repeat(n / 7),
        "DE89 ".repeat(n / 5),
        "DE".repeat(n / 2),
        "+1 (".repeat(n / 4),
        "sk-".repeat(n / 3),
        "ghp_".repeat(n / 4),
        "-".repeat(n),
        "a".repeat(n),
        "ignore ".repeat(n / 7),
        "4111 1111 1111 ".repeat(n / 15),
        "x@y".repeat(n / 3),
        "https://a.b/".to_owned() + &"%".repeat(n),
    ];
    for text in inputs {
        let start = Instant::now();
        let o = h
            .call(
                &h.session,
                "test__echo",
                json!({ "text": text.clone() }),
                None,
            )
            .await;
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "echo of {}… ({} bytes) took {took:?}",
            &text[..12.min(text.len())],
            text.len()
        );
        let _ = o;
    }
    assert_serving(&h).await;
}

/// Object keys in tool results are declassified like values; a key equal to a protected value
/// or holding an identifier does not leak, and many/duplicate keys do not bypass the summary.
#[tokio::test]
async fn protected_values_in_result_keys_are_declassified() {
    let h = Harness::new().await;
    for text in [
        format!("{{\"{IBAN}\": 1, \"{CONTACT}\": {{\"{CONTACT}\": \"{IBAN}\"}}}}"),
        format!("{{\"a\":\"x\",\"a\":\"{IBAN}\"}}"),
        format!("[{}\"{IBAN}\"]", "1,".repeat(20)),
        format!("{}{IBAN}", "x".repeat(509)),
        format!("{}{CONTACT}", "x".repeat(505)),
        format!("{{\"k\": \"{}{IBAN}\"}}", "y".repeat(509)),
        IBAN.chars().map(|c| format!("{c} ")).collect::<String>(),
        IBAN.to_lowercase(),
        CONTACT.to_uppercase(),
    ] {
        let o = h
            .call(&h.session, "test__echo", json!({ "text": text }), None)
            .await;
        let seen = visible(&o);
        assert!(
            !seen.contains(IBAN)
                && !seen.to_lowercase().contains(&IBAN.to_lowercase())
                && !seen.to_lowercase().contains(CONTACT),
            "{seen}"
        );
    }
}

/// Crafted arguments never panic the gateway or stop it from serving.
#[tokio::test]
async fn crafted_arguments_do_not_stop_serving() {
    let h = Harness::new().await;
    let deep = (0..200).fold(json!("x"), |v, _| json!([v]));
    let deep_obj = (0..200).fold(json!("x"), |v, _| json!({ "to": v }));
    let many_handles: String = (0..5000)
        .map(|i| {
            format!(
                "hdl_em_{:a>32} ",
                format!("{i}").replace(|c: char| c.is_ascii_digit(), "b")
            )
        })
        .collect();
    for a in [
        json!({"to": deep}),
        deep_obj,
        json!({"to": many_handles}),
        json!({"": "", "\u{0}": "\u{0}", "to": "\u{feff}"}),
        json!({"to": "\u{10ffff}".repeat(10_000)}),
        json!({"/": {"~1": {"~0": "x"}}}),
    ] {
        for tool in [COUNT, SEND, "test__echo", "office__read_invoice"] {
            let _ =
                h.gw.call(
                    &h.session,
                    tool,
                    args(a.clone()),
                    &secureclaw_gateway::CallMeta::committed(None),
                )
                .await;
            let _ = h.gw.preview(&h.session, tool, &args(a.clone())).await;
        }
    }
    assert_serving(&h).await;
    h.assert_audit_clean();
}

/// Recovery messages, describe_handle and tools/list never carry a protected value.
#[tokio::test]
async fn runtime_visible_surfaces_hold_no_plaintext() {
    let h = Harness::new().await;
    let inv = h.read_invoice(&h.session, "INV-42").await;
    let iban = handle_at(&inv, "iban");
    let contact = handle_at(&inv, "contact_email");
    for id in [&iban, &contact] {
        let d =
            h.gw.describe_handle(&h.session, &secureclaw_core::handle::HandleId(id.clone()))
                .await
                .unwrap();
        assert_no_plaintext("describe_handle", &d.to_string());
    }
    let tools: Vec<String> =
        h.gw.list_tools("alice")
            .await
            .iter()
            .map(|t| format!("{t:?}"))
            .collect();
    assert_no_plaintext("tools/list", &tools.join("\n"));
    // Errors quoting the resolved value (pay_invoice is the IBAN's sink, bad amount type).
    let o = h
        .call(
            &h.session,
            PAY,
            json!({"invoice_id": contact, "iban": iban, "amount_cents": "x"}),
            None,
        )
        .await;
    assert_no_plaintext("error", &visible(&o));
    h.assert_audit_clean();
}
