//! The research MCP server of `secureclaw demo --speculative` (Ghost Tool Calls' running
//! example: "What's the penalty for breaking my lease early?").
//!
//! One program plays several providers: each instance is started with a provider name, the
//! subset of tools it serves and a provider-log file. Every `tools/call` it receives is
//! appended to the log — tool name and arguments exactly as received — and the log is
//! rewritten before the call is answered, so the log is the ground truth of what that
//! provider observed, including calls whose results the agent later threw away.
//!
//! | tool | arguments | result |
//! |---|---|---|
//! | `web_search` | `q` | up to three pages whose title or snippet shares a word with `q` |
//! | `doc_retrieval` | `collection`, `query` | documents of a named collection (unknown = none) |
//! | `calendar_lookup` | `from`, `to` (`YYYY-MM-DD`) | events in the range |
//! | `crm_lookup` | `customer` (an e-mail) | the customer record, or `found: false` |
//! | `email_search` | `query` | messages whose sender, subject or body contains `query` |
//! | `rates_lookup` | `product` | a rate sheet for the product |
//!
//! All tools are annotated read-only. Results carry `structuredContent` (a JSON object with
//! `answered_by`, the provider name) and one text block holding the same JSON.

use std::{path::PathBuf, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
        Tool, ToolAnnotations,
    },
    service::RequestContext,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::{DemoToolsError, state::persist};

/// Every tool the research server can serve, in listing order.
pub const RESEARCH_TOOLS: [&str; 6] = [
    "web_search",
    "doc_retrieval",
    "calendar_lookup",
    "crm_lookup",
    "email_search",
    "rates_lookup",
];

/// What one provider observed: every request it received, oldest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProviderLog {
    /// The provider's name (`--provider`).
    pub provider: String,
    /// Requests in arrival order.
    #[serde(default)]
    pub requests: Vec<ProviderRequest>,
}

/// One `tools/call` as the provider received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderRequest {
    /// Arrival number, counting from 1.
    pub seq: u64,
    /// Tool name.
    pub tool: String,
    /// Arguments exactly as received.
    pub arguments: JsonObject,
}

/// Reads the provider log at `path`.
///
/// # Errors
///
/// [`DemoToolsError::ReadState`] if the file cannot be read (including when it does not exist),
/// [`DemoToolsError::ParseState`] if it is not a JSON [`ProviderLog`].
pub fn load_provider_log(path: impl AsRef<std::path::Path>) -> Result<ProviderLog, DemoToolsError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| DemoToolsError::ReadState {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| DemoToolsError::ParseState {
        path: path.to_path_buf(),
        source,
    })
}

/// The research MCP server: one provider, a subset of [`RESEARCH_TOOLS`], a provider log.
/// Cloning shares the log.
#[derive(Debug, Clone)]
pub struct ResearchTools {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    provider: String,
    log_path: PathBuf,
    log: Mutex<ProviderLog>,
    tools: Vec<Tool>,
}

impl ResearchTools {
    /// A server named `provider` serving the tools in `only` (every tool when empty) and
    /// appending to the provider log at `log_path` (created empty, and written at once, when
    /// missing).
    ///
    /// # Errors
    ///
    /// [`DemoToolsError::UnknownTool`] if `only` names a tool not in [`RESEARCH_TOOLS`];
    /// the errors of [`load_provider_log`] for an existing log; [`DemoToolsError::WriteState`]
    /// if a new log cannot be written.
    pub fn new(provider: &str, only: &[String], log_path: PathBuf) -> Result<Self, DemoToolsError> {
        if let Some(unknown) = only
            .iter()
            .find(|name| !RESEARCH_TOOLS.contains(&name.as_str()))
        {
            return Err(DemoToolsError::UnknownTool(unknown.clone()));
        }
        let tools: Vec<Tool> = tool_definitions()
            .into_iter()
            .filter(|tool| only.is_empty() || only.iter().any(|name| *name == tool.name))
            .collect();
        let log = if log_path.exists() {
            load_provider_log(&log_path)?
        } else {
            let log = ProviderLog {
                provider: provider.to_owned(),
                requests: Vec::new(),
            };
            persist(&log_path, &log)?;
            log
        };
        Ok(Self {
            inner: Arc::new(Inner {
                provider: provider.to_owned(),
                log_path,
                log: Mutex::new(log),
                tools,
            }),
        })
    }

    /// The tools this server lists, in listing order.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// A copy of the provider log.
    pub async fn log(&self) -> ProviderLog {
        self.inner.log.lock().await.clone()
    }

    /// Appends one request to the log and persists it before anything is answered.
    async fn observe(&self, tool: &str, arguments: &JsonObject) -> Result<(), McpError> {
        let mut log = self.inner.log.lock().await;
        let mut next = log.clone();
        let seq = u64::try_from(next.requests.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        next.requests.push(ProviderRequest {
            seq,
            tool: tool.to_owned(),
            arguments: arguments.clone(),
        });
        persist(&self.inner.log_path, &next)
            .map_err(|error| McpError::internal_error(error.to_string(), None))?;
        *log = next;
        Ok(())
    }

    /// Runs one tool call. `Ok` carries tool-level failures as `isError: true` results.
    fn dispatch(&self, name: &str, arguments: JsonObject) -> Result<CallToolResult, McpError> {
        if !self.inner.tools.iter().any(|tool| tool.name == name) {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            ));
        }
        let by = self.inner.provider.as_str();
        Ok(match name {
            "web_search" => match parse::<WebSearchArgs>(name, arguments) {
                Ok(args) => answer(by, json!({ "q": args.q, "results": web_search(&args.q) })),
                Err(result) => result,
            },
            "doc_retrieval" => match parse::<DocRetrievalArgs>(name, arguments) {
                Ok(args) => {
                    let documents = doc_retrieval(&args.collection, &args.query);
                    answer(
                        by,
                        json!({ "collection": args.collection, "documents": documents }),
                    )
                }
                Err(result) => result,
            },
            "calendar_lookup" => match parse::<CalendarArgs>(name, arguments) {
                Ok(args) => {
                    let events: Vec<Value> = CALENDAR
                        .iter()
                        .filter(|(date, _)| {
                            args.from.as_str() <= *date && *date <= args.to.as_str()
                        })
                        .map(|(date, title)| json!({ "date": date, "title": title }))
                        .collect();
                    answer(
                        by,
                        json!({ "from": args.from, "to": args.to, "events": events }),
                    )
                }
                Err(result) => result,
            },
            "crm_lookup" => match parse::<CrmArgs>(name, arguments) {
                Ok(args) => {
                    let found = CRM
                        .iter()
                        .find(|(email, ..)| email.eq_ignore_ascii_case(&args.customer));
                    match found {
                        Some((email, customer, company, role)) => answer(
                            by,
                            json!({
                                "found": true,
                                "email": email,
                                "name": customer,
                                "company": company,
                                "role": role,
                            }),
                        ),
                        None => answer(by, json!({ "found": false })),
                    }
                }
                Err(result) => result,
            },
            "email_search" => match parse::<EmailSearchArgs>(name, arguments) {
                Ok(args) => {
                    let query = args.query.to_lowercase();
                    let messages: Vec<Value> = MAILBOX
                        .iter()
                        .filter(|(from, subject, body)| {
                            [from, subject, body]
                                .iter()
                                .any(|field| field.to_lowercase().contains(&query))
                        })
                        .map(|(from, subject, body)| {
                            json!({ "from": from, "subject": subject, "body": body })
                        })
                        .collect();
                    answer(by, json!({ "messages": messages }))
                }
                Err(result) => result,
            },
            "rates_lookup" => match parse::<RatesArgs>(name, arguments) {
                Ok(args) => {
                    let rates: Vec<Value> = RATES
                        .iter()
                        .map(|(lender, apr)| json!({ "lender": lender, "apr_percent": apr }))
                        .collect();
                    answer(
                        by,
                        json!({ "product": args.product, "as_of": "2026-11-30", "rates": rates }),
                    )
                }
                Err(result) => result,
            },
            _ => CallToolResult::error(vec![ContentBlock::text(format!("unknown tool `{name}`"))]),
        })
    }
}

impl ServerHandler for ResearchTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("secureclaw-research-tools", env!("CARGO_PKG_VERSION"))
                    .with_title(format!(
                        "SecureClaw demo provider `{}`",
                        self.inner.provider
                    )),
            )
            .with_instructions(
                "Read-only research tools: web search, document retrieval, calendar, CRM, \
                 e-mail search and rate sheets.",
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
        // The provider has seen the request the moment it arrives, valid or not.
        self.observe(&request.name, &arguments).await?;
        self.dispatch(&request.name, arguments)
            .map(CallToolResponse::from)
    }
}

/// Serves [`ResearchTools`] as provider `provider` with the tools in `only` (all when empty)
/// and the provider log at `log_path`, on stdin/stdout until the client closes stdin.
///
/// Must run inside a Tokio runtime with I/O enabled.
///
/// # Errors
///
/// The errors of [`ResearchTools::new`]; [`DemoToolsError::Initialize`] if no MCP session is
/// established; [`DemoToolsError::Service`] if the session task fails.
pub async fn serve_research_stdio(
    provider: &str,
    only: &[String],
    log_path: PathBuf,
) -> Result<(), DemoToolsError> {
    let server = ResearchTools::new(provider, only, log_path)?;
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| DemoToolsError::Initialize(Box::new(error)))?;
    running.waiting().await.map_err(DemoToolsError::Service)?;
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSearchArgs {
    q: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocRetrievalArgs {
    collection: String,
    #[serde(default)]
    query: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CalendarArgs {
    from: String,
    to: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CrmArgs {
    customer: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmailSearchArgs {
    query: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RatesArgs {
    product: String,
}

/// The web: (title, url, snippet).
static PAGES: [(&str, &str, &str); 5] = [
    (
        "Ending a rental agreement early: what it costs",
        "https://tenants.example/guides/early-termination",
        "Most rental agreements allow early termination for a penalty of one to two months' rent.",
    ),
    (
        "Renter rights, state by state",
        "https://law.example/renter-rights",
        "Your rights when you end a rental early: notice periods, penalty caps and deposits.",
    ),
    (
        "Apartments for rent downtown",
        "https://rentals.example/search?area=downtown",
        "Two-bedroom apartments available from January.",
    ),
    (
        "Personal loan rates compared",
        "https://money.example/loans",
        "Compare fixed rates from eight lenders.",
    ),
    (
        "Moving checklist",
        "https://moving.example/checklist",
        "Book the truck, forward your mail, read the meters.",
    ),
];

/// Pages sharing at least one word of four letters or more with `q`, most shared words first,
/// at most three.
fn web_search(q: &str) -> Vec<Value> {
    let words: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, usize)> = PAGES
        .iter()
        .enumerate()
        .map(|(i, (title, _, snippet))| {
            let text = format!("{title} {snippet}").to_lowercase();
            (
                words.iter().filter(|w| text.contains(w.as_str())).count(),
                i,
            )
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored
        .iter()
        .take(3)
        .filter_map(|(_, i)| PAGES.get(*i))
        .map(|(title, url, snippet)| json!({ "title": title, "url": url, "snippet": snippet }))
        .collect()
}

/// Document collections: (collection, title, text).
static DOCUMENTS: [(&str, &str, &str); 3] = [
    (
        "tenant-disputes",
        "Standard residential agreement, clause 14",
        "Early termination: two months' rent, 60 days' written notice.",
    ),
    (
        "tenant-disputes",
        "Deposit returns",
        "Deposits are returned within 30 days of the end of the agreement.",
    ),
    (
        "office-handbook",
        "Working from home",
        "Employees may work from home two days a week.",
    ),
];

/// Documents of `collection`; a non-empty `query` keeps those whose title or text contains
/// one of its words.
fn doc_retrieval(collection: &str, query: &str) -> Vec<Value> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect();
    DOCUMENTS
        .iter()
        .filter(|(c, ..)| *c == collection)
        .filter(|(_, title, text)| {
            let hay = format!("{title} {text}").to_lowercase();
            words.is_empty() || words.iter().any(|w| hay.contains(w.as_str()))
        })
        .map(|(_, title, text)| json!({ "title": title, "text": text }))
        .collect()
}

/// Calendar: (date, title).
static CALENDAR: [(&str, &str); 4] = [
    ("2026-11-28", "Dentist"),
    ("2026-12-12", "Apartment viewing, 4 Elm Street"),
    ("2026-12-31", "Rent due"),
    ("2027-01-15", "Moving truck reserved"),
];

/// CRM: (e-mail, name, company, role).
static CRM: [(&str, &str, &str, &str); 2] = [
    (
        "m.alvarez@oakridge-mgmt.example",
        "Marta Alvarez",
        "Oakridge Property Management",
        "property manager",
    ),
    (
        "sales@rentals.example",
        "Rentals Inc.",
        "Rentals Inc.",
        "vendor",
    ),
];

/// Mailbox: (from, subject, body).
static MAILBOX: [(&str, &str, &str); 3] = [
    (
        "m.alvarez@oakridge-mgmt.example",
        "Your landlord's notice terms, 12 Oak Street",
        "Ending early requires 60 days' notice and two months' rent.",
    ),
    (
        "newsletter@rentals.example",
        "New listings this week",
        "Fresh apartments downtown.",
    ),
    (
        "friend@mail.example",
        "Dinner on Friday?",
        "Are you free at eight?",
    ),
];

/// Rate sheet: (lender, APR in percent).
static RATES: [(&str, f64); 3] = [
    ("First Example Bank", 11.9),
    ("Credit Union Example", 10.4),
    ("Online Lender Example", 13.2),
];

/// Parses `arguments` for tool `name`, or the tool error result to return instead.
fn parse<T: DeserializeOwned>(name: &str, arguments: JsonObject) -> Result<T, CallToolResult> {
    serde_json::from_value(Value::Object(arguments)).map_err(|error| {
        CallToolResult::error(vec![ContentBlock::text(format!(
            "invalid arguments for `{name}`: {error}"
        ))])
    })
}

/// A success result: `value` (an object) with `answered_by` added, as `structuredContent`
/// and as one text block.
fn answer(provider: &str, mut value: Value) -> CallToolResult {
    if let Some(object) = value.as_object_mut() {
        object.insert("answered_by".to_owned(), json!(provider));
    }
    CallToolResult::structured(value)
}

/// A JSON Schema object with string `properties`, `required` and no additional properties.
fn string_schema(properties: &[(&str, &str)], required: &[&str]) -> JsonObject {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, description)| {
            (
                (*name).to_owned(),
                json!({ "type": "string", "description": description }),
            )
        })
        .collect();
    let mut schema = JsonObject::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert("properties".to_owned(), Value::Object(props));
    schema.insert("required".to_owned(), json!(required));
    schema.insert("additionalProperties".to_owned(), json!(false));
    schema
}

/// Read-only annotations; `open_world` for tools that reach past the user's own data.
fn read_only(title: &str, open_world: bool) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(open_world)
}

/// Every tool, in [`RESEARCH_TOOLS`] order.
fn tool_definitions() -> Vec<Tool> {
    let tool = |name: &'static str,
                title: &'static str,
                description: &'static str,
                schema: JsonObject,
                open: bool| {
        Tool::new(name, description, schema)
            .with_title(title)
            .with_annotations(read_only(title, open))
    };
    vec![
        tool(
            "web_search",
            "Web search",
            "Search the web; returns up to three pages (title, url, snippet).",
            string_schema(&[("q", "Search query")], &["q"]),
            true,
        ),
        tool(
            "doc_retrieval",
            "Document retrieval",
            "Retrieve documents from a named collection, optionally filtered by a query.",
            string_schema(
                &[
                    ("collection", "Collection name, e.g. tenant-disputes"),
                    (
                        "query",
                        "Words to look for; empty returns the whole collection",
                    ),
                ],
                &["collection"],
            ),
            true,
        ),
        tool(
            "calendar_lookup",
            "Calendar lookup",
            "List calendar events between two dates (inclusive, YYYY-MM-DD).",
            string_schema(
                &[
                    ("from", "First day, YYYY-MM-DD"),
                    ("to", "Last day, YYYY-MM-DD"),
                ],
                &["from", "to"],
            ),
            false,
        ),
        tool(
            "crm_lookup",
            "CRM lookup",
            "Look up a customer record by e-mail address.",
            string_schema(&[("customer", "Customer e-mail address")], &["customer"]),
            true,
        ),
        tool(
            "email_search",
            "E-mail search",
            "Search the mailbox; returns messages whose sender, subject or body contains the \
             query (case-insensitive).",
            string_schema(&[("query", "Text to look for")], &["query"]),
            true,
        ),
        tool(
            "rates_lookup",
            "Rates lookup",
            "Current rate sheet for a financial product.",
            string_schema(&[("product", "Product, e.g. personal loan")], &["product"]),
            true,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_search_ranks_by_shared_words() {
        let hits = web_search("[topic] rights [topic] termination penalty");
        let urls: Vec<&str> = hits
            .iter()
            .filter_map(|h| h.get("url").and_then(Value::as_str))
            .collect();
        assert_eq!(
            urls,
            [
                "https://tenants.example/guides/early-termination",
                "https://law.example/renter-rights"
            ]
        );
        assert!(web_search("[topic]").is_empty());
    }

    #[test]
    fn unknown_collection_is_empty() {
        assert_eq!(doc_retrieval("tenant-disputes", "").len(), 2);
        assert_eq!(doc_retrieval("tenant-disputes", "deposit").len(), 1);
        assert!(doc_retrieval("[topic]-disputes", "").is_empty());
    }

    #[tokio::test]
    async fn every_request_is_logged_before_it_is_answered() -> Result<(), DemoToolsError> {
        let dir = tempfile::tempdir().map_err(|source| DemoToolsError::ReadState {
            path: PathBuf::new(),
            source,
        })?;
        let path = dir.path().join("search.json");
        let server = ResearchTools::new("search", &["web_search".to_owned()], path.clone())?;
        assert_eq!(server.tools().len(), 1);
        let mut args = JsonObject::new();
        args.insert("q".to_owned(), json!("moving checklist"));
        server.observe("web_search", &args).await.ok();
        let result = server.dispatch("web_search", args.clone()).ok();
        assert!(result.is_some_and(|r| r.is_error != Some(true)));
        assert!(server.dispatch("rates_lookup", args.clone()).is_err());
        let log = load_provider_log(&path)?;
        assert_eq!(log.provider, "search");
        assert_eq!(log.requests.len(), 1);
        assert_eq!(log.requests.first().map(|r| &r.arguments), Some(&args));
        assert!(matches!(
            ResearchTools::new("x", &["nope".to_owned()], path),
            Err(DemoToolsError::UnknownTool(_))
        ));
        Ok(())
    }
}
