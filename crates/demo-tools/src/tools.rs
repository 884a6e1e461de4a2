//! The MCP server: tool definitions (schemas and annotations) and their handlers.
//!
//! Tools are declared by hand rather than with `#[tool_router]` so that each input schema and
//! each annotation is spelled out exactly; the gateway's policy reads annotations as hints and
//! its tests compare them. Every tool's arguments are parsed strictly (unknown fields are
//! rejected); a bad argument or an unknown invoice is a tool error (`isError: true`) with a
//! short message, an unknown tool name is a JSON-RPC `invalid params` error. No input panics.

use std::{path::PathBuf, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
        Tool, ToolAnnotations,
    },
    service::RequestContext,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::{
    DemoToolsError,
    state::{DemoState, Draft, Payment, SentEmail, load_or_seed, persist},
};

/// Largest amount `pay_invoice` accepts: 2^53 − 1, the largest integer every JSON peer
/// (and RFC 8785 canonicalization) represents exactly.
const MAX_AMOUNT_CENTS: u64 = (1 << 53) - 1;

/// The demo office's MCP tool server.
///
/// Serves `read_invoice`, `list_invoices`, `search_mail`, `send_email`, `save_draft`,
/// `pay_invoice` and `noop` over its own [`DemoState`], persisting the state file after every
/// effectful call. Cloning shares the state.
#[derive(Debug, Clone)]
pub struct DemoTools {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state_path: PathBuf,
    state: Mutex<DemoState>,
    tools: Vec<Tool>,
    /// [`DemoTools::with_journal`]: effects append here instead of rewriting the state file.
    journal: Option<std::sync::Mutex<std::fs::File>>,
}

impl DemoTools {
    /// A server over the state file at `state_path`: the file's state if it exists, otherwise
    /// [`DemoState::seeded`], which is written to `state_path` at once.
    ///
    /// # Errors
    ///
    /// [`DemoToolsError::ReadState`] / [`DemoToolsError::ParseState`] if an existing file
    /// cannot be read or parsed, [`DemoToolsError::WriteState`] if a new one cannot be written.
    pub fn new(state_path: PathBuf) -> Result<Self, DemoToolsError> {
        Self::with_journal(state_path, None)
    }

    /// [`DemoTools::new`], and with `journal` set, a server for load tests: each effect
    /// appends one JSON line `{"tool", "arguments", "result"}` to the `journal` file (created
    /// if missing, never truncated, not fsynced) and changes the state in memory only; the
    /// state file keeps what it held at start. The cost of an effect then stays flat however
    /// many have run (without a journal every effect rewrites the whole state file).
    ///
    /// # Errors
    ///
    /// Those of [`DemoTools::new`]; [`DemoToolsError::WriteState`] if the journal cannot be
    /// opened.
    pub fn with_journal(
        state_path: PathBuf,
        journal: Option<PathBuf>,
    ) -> Result<Self, DemoToolsError> {
        let state = load_or_seed(&state_path)?;
        let journal = match journal {
            Some(path) => Some(std::sync::Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|source| DemoToolsError::WriteState { path, source })?,
            )),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                state_path,
                state: Mutex::new(state),
                tools: tool_definitions(),
                journal,
            }),
        })
    }

    /// The tools this server lists, in listing order.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// A copy of the current state.
    pub async fn state(&self) -> DemoState {
        self.inner.state.lock().await.clone()
    }

    /// Runs one tool call. `Ok` carries tool-level failures as `isError: true` results.
    async fn dispatch(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, McpError> {
        match name {
            "read_invoice" => {
                let args: InvoiceIdArgs = match parse(name, arguments) {
                    Ok(args) => args,
                    Err(result) => return Ok(result),
                };
                let state = self.inner.state.lock().await;
                Ok(match state.invoice(&args.invoice_id) {
                    Some(invoice) => structured(invoice),
                    None => unknown_invoice(&args.invoice_id),
                })
            }
            "list_invoices" => {
                if let Err(result) = parse::<NoArgs>(name, arguments) {
                    return Ok(result);
                }
                let state = self.inner.state.lock().await;
                let invoices: Vec<Value> = state
                    .invoices
                    .iter()
                    .map(|invoice| {
                        json!({
                            "id": invoice.id,
                            "vendor": invoice.vendor,
                            "amount_cents": invoice.amount_cents,
                            "currency": invoice.currency,
                        })
                    })
                    .collect();
                Ok(structured(&json!({ "invoices": invoices })))
            }
            "search_mail" => {
                let args: SearchMailArgs = match parse(name, arguments) {
                    Ok(args) => args,
                    Err(result) => return Ok(result),
                };
                let state = self.inner.state.lock().await;
                let messages = state.search_mail(&args.query);
                Ok(structured(&json!({ "messages": messages })))
            }
            "send_email" => {
                let entry = self.journal_entry(name, &arguments);
                let args: SendEmailArgs = match parse(name, arguments) {
                    Ok(args) => args,
                    Err(result) => return Ok(result),
                };
                self.effect(entry, |state| {
                    let message_id = format!("SENT-{}", state.sent.len() + 1);
                    state.sent.push(SentEmail {
                        message_id: message_id.clone(),
                        to: args.to,
                        subject: args.subject,
                        body: args.body,
                        attachments: args.attachments,
                    });
                    Ok(json!({ "message_id": message_id }))
                })
                .await
            }
            "save_draft" => {
                let entry = self.journal_entry(name, &arguments);
                let args: SaveDraftArgs = match parse(name, arguments) {
                    Ok(args) => args,
                    Err(result) => return Ok(result),
                };
                self.effect(entry, |state| {
                    let draft_id = format!("DRAFT-{}", state.drafts.len() + 1);
                    state.drafts.push(Draft {
                        draft_id: draft_id.clone(),
                        to: args.to,
                        subject: args.subject,
                        body: args.body,
                    });
                    Ok(json!({ "draft_id": draft_id }))
                })
                .await
            }
            "pay_invoice" => {
                let entry = self.journal_entry(name, &arguments);
                let args: PayInvoiceArgs = match parse(name, arguments) {
                    Ok(args) => args,
                    Err(result) => return Ok(result),
                };
                if args.amount_cents > MAX_AMOUNT_CENTS {
                    return Ok(tool_error("amount_cents is too large".to_owned()));
                }
                self.effect(entry, |state| {
                    let Some(currency) = state
                        .invoice(&args.invoice_id)
                        .map(|invoice| invoice.currency.clone())
                    else {
                        return Err(unknown_invoice(&args.invoice_id));
                    };
                    let payment_id = format!("PAY-{}", state.payments.len() + 1);
                    state.payments.push(Payment {
                        payment_id: payment_id.clone(),
                        invoice_id: args.invoice_id,
                        iban: args.iban,
                        amount_cents: args.amount_cents,
                        currency,
                    });
                    Ok(json!({ "payment_id": payment_id, "status": "paid" }))
                })
                .await
            }
            "noop" => {
                if let Err(result) = parse::<NoArgs>(name, arguments) {
                    return Ok(result);
                }
                Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
            }
            _ => Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            )),
        }
    }

    /// The journal line of an effect (`None` without a journal): its tool and arguments.
    fn journal_entry(&self, name: &str, arguments: &JsonObject) -> Option<Value> {
        self.inner
            .journal
            .as_ref()
            .map(|_| json!({ "tool": name, "arguments": arguments }))
    }

    /// Applies `change` to a copy of the state, persists the copy, then makes it current, so
    /// memory and file never disagree. `change` returns the structured result, or a tool error
    /// result that leaves the state untouched.
    async fn effect(
        &self,
        entry: Option<Value>,
        change: impl FnOnce(&mut DemoState) -> Result<Value, CallToolResult>,
    ) -> Result<CallToolResult, McpError> {
        let mut state = self.inner.state.lock().await;
        if let (Some(journal), Some(mut entry)) = (&self.inner.journal, entry) {
            // Every `change` validates before it mutates, so an error leaves the state as is.
            let value = match change(&mut state) {
                Ok(value) => value,
                Err(result) => return Ok(result),
            };
            if let Some(e) = entry.as_object_mut() {
                e.insert("result".to_owned(), value.clone());
            }
            let mut line = entry.to_string();
            line.push('\n');
            let mut file = journal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            std::io::Write::write_all(&mut *file, line.as_bytes())
                .map_err(|error| McpError::internal_error(error.to_string(), None))?;
            return Ok(structured(&value));
        }
        let mut next = state.clone();
        let value = match change(&mut next) {
            Ok(value) => value,
            Err(result) => return Ok(result),
        };
        persist(&self.inner.state_path, &next)
            .map_err(|error| McpError::internal_error(error.to_string(), None))?;
        *state = next;
        Ok(structured(&value))
    }
}

impl ServerHandler for DemoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("secureclaw-demo-tools", env!("CARGO_PKG_VERSION"))
                    .with_title("SecureClaw demo office"),
            )
            .with_instructions(
                "A small office: read and list invoices, search the mailbox, send email, \
                 save drafts and pay invoices.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner
            .tools
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        self.dispatch(&request.name, arguments)
            .await
            .map(CallToolResponse::from)
    }
}

/// Arguments of tools that take none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InvoiceIdArgs {
    invoice_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchMailArgs {
    query: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendEmailArgs {
    to: String,
    subject: String,
    body: String,
    #[serde(default)]
    attachments: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveDraftArgs {
    to: String,
    subject: String,
    body: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayInvoiceArgs {
    invoice_id: String,
    iban: String,
    amount_cents: u64,
}

/// Parses `arguments` for tool `name`, or the tool error result to return instead.
fn parse<T: DeserializeOwned>(name: &str, arguments: JsonObject) -> Result<T, CallToolResult> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|error| tool_error(format!("invalid arguments for `{name}`: {error}")))
}

/// A success result whose `structuredContent` is `value` and whose one text block is the
/// same JSON, serialized (the MCP back-compat convention).
fn structured(value: &impl serde::Serialize) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => tool_error(format!("cannot serialize result: {error}")),
    }
}

/// A tool error result (`isError: true`) with one text block.
fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn unknown_invoice(invoice_id: &str) -> CallToolResult {
    tool_error(format!("unknown invoice `{invoice_id}`"))
}

/// Annotations of a tool that only reads the office's own state.
fn read_only(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// A JSON Schema object with `properties`, `required` and no additional properties.
fn object_schema(properties: Value, required: &[&str]) -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert("properties".to_owned(), properties);
    schema.insert("required".to_owned(), json!(required));
    schema.insert("additionalProperties".to_owned(), json!(false));
    schema
}

/// Every tool, in listing order, with its input schema and annotations.
fn tool_definitions() -> Vec<Tool> {
    let string = |description: &str| json!({ "type": "string", "description": description });
    vec![
        Tool::new(
            "read_invoice",
            "Read one invoice by id: vendor, amount, IBAN, contact, due date and notes.",
            object_schema(
                json!({ "invoice_id": string("Invoice id, e.g. INV-42") }),
                &["invoice_id"],
            ),
        )
        .with_title("Read invoice")
        .with_annotations(read_only("Read invoice")),
        Tool::new(
            "list_invoices",
            "List all invoices: id, vendor, amount and currency.",
            object_schema(json!({}), &[]),
        )
        .with_title("List invoices")
        .with_annotations(read_only("List invoices")),
        Tool::new(
            "search_mail",
            "Search the inbox; returns messages whose sender, recipient, subject or body \
             contains the query (case-insensitive).",
            object_schema(
                json!({ "query": string("Text to look for; empty matches every message") }),
                &["query"],
            ),
        )
        .with_title("Search mail")
        .with_annotations(read_only("Search mail")),
        Tool::new(
            "send_email",
            "Send an email now. Returns the sent message id.",
            object_schema(
                json!({
                    "to": string("Recipient email address"),
                    "subject": string("Subject line"),
                    "body": string("Plain-text body"),
                    "attachments": {
                        "type": "array",
                        "items": { "type": "string" },
                        "description": "References to attach, e.g. invoice ids",
                    },
                }),
                &["to", "subject", "body"],
            ),
        )
        .with_title("Send email")
        .with_annotations(
            ToolAnnotations::with_title("Send email")
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            "save_draft",
            "Save an email draft without sending it. Returns the draft id.",
            object_schema(
                json!({
                    "to": string("Recipient email address"),
                    "subject": string("Subject line"),
                    "body": string("Plain-text body"),
                }),
                &["to", "subject", "body"],
            ),
        )
        .with_title("Save draft")
        .with_annotations(
            ToolAnnotations::with_title("Save draft")
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        ),
        Tool::new(
            "pay_invoice",
            "Pay an invoice: transfer amount_cents (in the invoice's currency) to the IBAN. \
             Returns the payment id.",
            object_schema(
                json!({
                    "invoice_id": string("Invoice id, e.g. INV-42"),
                    "iban": string("IBAN to pay to"),
                    "amount_cents": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_AMOUNT_CENTS,
                        "description": "Amount in the currency's minor unit (cents)",
                    },
                }),
                &["invoice_id", "iban", "amount_cents"],
            ),
        )
        .with_title("Pay invoice")
        .with_annotations(
            ToolAnnotations::with_title("Pay invoice")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            "noop",
            "Do nothing and return \"ok\" (for latency measurements).",
            object_schema(json!({}), &[]),
        )
        .with_title("No-op")
        .with_annotations(read_only("No-op")),
    ]
}
