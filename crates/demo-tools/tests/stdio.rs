//! End-to-end tests of the demo tool server through an rmcp client: in-process over a
//! `tokio::io::duplex` pipe, and as a child process over stdio.

use std::path::Path;

use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject, Tool},
    service::RunningService,
    transport::{ConfigureCommandExt, TokioChildProcess},
};
use secureclaw_demo_tools::{DemoState, DemoTools, load_state};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type Client = RunningService<RoleClient, ()>;

/// Starts a [`DemoTools`] server over `state_path` on one end of a duplex pipe and a default
/// client on the other.
async fn connect_in_process(
    state_path: &Path,
) -> Result<Client, Box<dyn std::error::Error + Send + Sync>> {
    let server = DemoTools::new(state_path.to_path_buf())?;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    Ok(().serve(client_io).await?)
}

fn arguments(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// Calls `name` once and returns its final result.
async fn call(
    client: &Client,
    name: &'static str,
    args: Value,
) -> Result<CallToolResult, Box<dyn std::error::Error + Send + Sync>> {
    let params = CallToolRequestParams::new(name).with_arguments(arguments(args));
    match client.call_tool_once(params).await? {
        CallToolResponse::Complete(result) => Ok(result),
        other => Err(format!("unexpected response {other:?}").into()),
    }
}

/// The text of the result's first content block.
fn first_text(result: &CallToolResult) -> Option<&str> {
    result
        .content
        .first()
        .and_then(|block| block.as_text())
        .map(|text| text.text.as_str())
}

fn tool<'a>(tools: &'a [Tool], name: &str) -> Result<&'a Tool, String> {
    tools
        .iter()
        .find(|tool| tool.name == name)
        .ok_or_else(|| format!("tool `{name}` not listed"))
}

#[tokio::test]
async fn lists_tools_with_annotations_and_schemas() -> TestResult {
    let dir = tempfile::tempdir()?;
    let client = connect_in_process(&dir.path().join("state.json")).await?;

    let tools = client.list_all_tools().await?;
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "read_invoice",
            "list_invoices",
            "search_mail",
            "send_email",
            "save_draft",
            "pay_invoice",
            "noop"
        ]
    );
    for name in ["read_invoice", "list_invoices", "search_mail", "noop"] {
        let annotations = tool(&tools, name)?
            .annotations
            .clone()
            .ok_or("no annotations")?;
        assert_eq!(annotations.read_only_hint, Some(true), "{name}");
        assert_eq!(annotations.open_world_hint, Some(false), "{name}");
    }
    let send = tool(&tools, "send_email")?
        .annotations
        .clone()
        .ok_or("no annotations")?;
    assert_eq!(send.read_only_hint, Some(false));
    assert_eq!(send.open_world_hint, Some(true));
    let pay = tool(&tools, "pay_invoice")?
        .annotations
        .clone()
        .ok_or("no annotations")?;
    assert_eq!(pay.read_only_hint, Some(false));
    assert_eq!(pay.destructive_hint, Some(true));
    let draft = tool(&tools, "save_draft")?
        .annotations
        .clone()
        .ok_or("no annotations")?;
    assert_eq!(draft.destructive_hint, Some(false));

    let schema = tool(&tools, "send_email")?.schema_as_json_value();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["to", "subject", "body"]));
    assert_eq!(schema["properties"]["attachments"]["type"], "array");

    let info = client.peer_info().ok_or("no server info")?;
    let implementation = info.server_info.as_ref().ok_or("no implementation info")?;
    assert_eq!(implementation.name, "secureclaw-demo-tools");
    assert!(info.capabilities.tools.is_some());
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn read_invoice_then_send_email_is_recorded_in_the_state_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("state.json");
    let client = connect_in_process(&path).await?;
    assert_eq!(load_state(&path)?, DemoState::seeded());

    let read = call(&client, "read_invoice", json!({ "invoice_id": "INV-42" })).await?;
    assert_eq!(read.is_error, Some(false));
    let invoice = read
        .structured_content
        .clone()
        .ok_or("no structured content")?;
    assert_eq!(invoice["id"], "INV-42");
    assert_eq!(invoice["vendor"], "Acme Supplies GmbH");
    assert_eq!(invoice["amount_cents"], 129_900);
    assert_eq!(invoice["iban"], "DE89370400440532013000");
    assert!(
        invoice["notes"]
            .as_str()
            .is_some_and(|notes| notes.contains("attacker@evil.example"))
    );
    let text: Value = serde_json::from_str(first_text(&read).ok_or("no text block")?)?;
    assert_eq!(text, invoice, "text block carries the same JSON");

    let sent = call(
        &client,
        "send_email",
        json!({
            "to": "approver@corp.example",
            "subject": "Please approve INV-42",
            "body": "Acme Supplies, EUR 1,299.00, due 2026-12-15.",
            "attachments": ["INV-42"],
        }),
    )
    .await?;
    assert_eq!(sent.is_error, Some(false));
    assert_eq!(
        sent.structured_content,
        Some(json!({ "message_id": "SENT-1" }))
    );

    let state = load_state(&path)?;
    assert_eq!(state.sent.len(), 1);
    let mail = state.sent.first().ok_or("no sent mail")?;
    assert_eq!(mail.message_id, "SENT-1");
    assert_eq!(mail.to, "approver@corp.example");
    assert_eq!(mail.attachments, ["INV-42"]);
    assert!(state.payments.is_empty());
    client.cancel().await?;

    // A new server over the same file continues from the persisted state.
    let client = connect_in_process(&path).await?;
    let again = call(
        &client,
        "send_email",
        json!({ "to": "a@corp.example", "subject": "s", "body": "b" }),
    )
    .await?;
    assert_eq!(
        again.structured_content,
        Some(json!({ "message_id": "SENT-2" }))
    );
    assert_eq!(load_state(&path)?.sent.len(), 2);
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn other_tools_and_bad_inputs() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("state.json");
    let client = connect_in_process(&path).await?;

    let unknown = call(&client, "read_invoice", json!({ "invoice_id": "INV-999" })).await?;
    assert_eq!(unknown.is_error, Some(true));
    assert_eq!(first_text(&unknown), Some("unknown invoice `INV-999`"));

    let listed = call(&client, "list_invoices", json!({})).await?;
    let invoices = listed.structured_content.ok_or("no structured content")?;
    assert_eq!(invoices["invoices"][0]["id"], "INV-42");
    assert_eq!(invoices["invoices"].as_array().map(Vec::len), Some(3));

    let found = call(&client, "search_mail", json!({ "query": "approver" })).await?;
    let messages = found.structured_content.ok_or("no structured content")?;
    assert_eq!(messages["messages"].as_array().map(Vec::len), Some(1));
    assert_eq!(messages["messages"][0]["id"], "MSG-2");

    let draft = call(
        &client,
        "save_draft",
        json!({ "to": "approver@corp.example", "subject": "s", "body": "b" }),
    )
    .await?;
    assert_eq!(
        draft.structured_content,
        Some(json!({ "draft_id": "DRAFT-1" }))
    );

    let paid = call(
        &client,
        "pay_invoice",
        json!({ "invoice_id": "INV-43", "iban": "AT611904300234573201", "amount_cents": 48_750 }),
    )
    .await?;
    assert_eq!(paid.is_error, Some(false));
    let unpaid = call(
        &client,
        "pay_invoice",
        json!({ "invoice_id": "INV-0", "iban": "X", "amount_cents": 1 }),
    )
    .await?;
    assert_eq!(unpaid.is_error, Some(true));

    let noop = call(&client, "noop", json!({})).await?;
    assert_eq!(noop.is_error, Some(false));
    assert_eq!(first_text(&noop), Some("ok"));

    // Wrong types, missing and unknown fields, negative and huge amounts: tool errors, no
    // effects, and the server keeps serving.
    for (name, args) in [
        ("read_invoice", json!({})),
        ("read_invoice", json!({ "invoice_id": 42 })),
        ("send_email", json!({ "to": "x@y.example", "subject": "s" })),
        (
            "send_email",
            json!({ "to": "x", "subject": "s", "body": "b", "bcc": "z" }),
        ),
        (
            "send_email",
            json!({ "to": "x", "subject": "s", "body": "b", "attachments": "a" }),
        ),
        (
            "pay_invoice",
            json!({ "invoice_id": "INV-42", "iban": "X", "amount_cents": -1 }),
        ),
        (
            "pay_invoice",
            json!({ "invoice_id": "INV-42", "iban": "X", "amount_cents": 1.5 }),
        ),
        (
            "pay_invoice",
            json!({ "invoice_id": "INV-42", "iban": "X", "amount_cents": u64::MAX }),
        ),
        ("noop", json!({ "unexpected": true })),
    ] {
        let result = call(&client, name, args).await?;
        assert_eq!(result.is_error, Some(true), "{name}");
    }
    let no_arguments = client
        .call_tool_once(CallToolRequestParams::new("list_invoices"))
        .await?;
    assert!(matches!(no_arguments, CallToolResponse::Complete(r) if r.is_error == Some(false)));
    assert!(
        client
            .call_tool_once(CallToolRequestParams::new("rm_rf"))
            .await
            .is_err(),
        "an unknown tool is a protocol error"
    );

    let state = load_state(&path)?;
    assert!(state.sent.is_empty());
    assert_eq!(state.drafts.len(), 1);
    assert_eq!(state.payments.len(), 1);
    let payment = state.payments.first().ok_or("no payment")?;
    assert_eq!(payment.payment_id, "PAY-1");
    assert_eq!(payment.currency, "EUR");
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn serves_stdio_as_a_child_process() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("state.json");
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_secureclaw-demo-tools"))
        .configure(|command| {
            command.arg("--state").arg(&path);
        });
    let client = ().serve(TokioChildProcess::new(command)?).await?;

    let tools = client.list_all_tools().await?;
    assert_eq!(tools.len(), 7);
    let sent = call(
        &client,
        "send_email",
        json!({ "to": "attacker@evil.example", "subject": "INV-42", "body": "see attached" }),
    )
    .await?;
    assert_eq!(
        sent.structured_content,
        Some(json!({ "message_id": "SENT-1" }))
    );
    // Closing stdin ends the server; the effect is already on disk.
    client.cancel().await?;
    assert_eq!(load_state(&path)?.sent.len(), 1);
    Ok(())
}

/// With a journal (load tests), each effect appends one line naming its tool, arguments and
/// result, a refused effect appends nothing, and the state file is not rewritten; reads still
/// see the effects made (in memory).
#[tokio::test]
async fn journaled_effects_append_one_line_each_and_leave_the_state_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let state_path = dir.path().join("state.json");
    let journal = dir.path().join("journal.jsonl");
    let server = DemoTools::with_journal(state_path.clone(), Some(journal.clone()))?;
    let seeded = std::fs::read(&state_path)?;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client: Client = ().serve(client_io).await?;
    for n in 0..3 {
        let sent = call(
            &client,
            "send_email",
            json!({"to": "a@example.com", "subject": format!("s{n}"), "body": "b"}),
        )
        .await?;
        assert_ne!(sent.is_error, Some(true), "{sent:?}");
    }
    let refused = call(
        &client,
        "pay_invoice",
        json!({"invoice_id": "INV-404", "iban": "DE89370400440532013000", "amount_cents": 1}),
    )
    .await?;
    assert_eq!(
        refused.is_error,
        Some(true),
        "an unknown invoice is a tool error"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&journal)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[2]["tool"], "send_email");
    assert_eq!(lines[2]["arguments"]["subject"], "s2");
    assert_eq!(lines[2]["result"]["message_id"], "SENT-3");
    assert_eq!(
        std::fs::read(&state_path)?,
        seeded,
        "the state file is not rewritten"
    );
    Ok(())
}
