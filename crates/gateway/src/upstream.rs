//! Upstream MCP servers, reached through rmcp clients (stdio child processes or Streamable
//! HTTP). This module is the only place the gateway touches rmcp's client API; the rest works
//! with [`UpstreamTool`] and [`ToolOutput`].
//!
//! Calls use `call_tool_once`, so an upstream cannot ask the user anything (MRTR input
//! requests) behind the policy's back: such a result, or a task result, is refused.

use crate::config::{UpstreamSpec, UpstreamTransport};
use rmcp::model::{CallToolRequestParams, CallToolResponse, Tool};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;

/// A boxed future, for the object-safe [`Upstream`] trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Upstream failures. Messages are for operators' logs; the runtime only sees reason codes.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The server could not be started or connected.
    #[error("upstream `{id}` could not be started: {message}")]
    Start {
        /// Upstream id.
        id: String,
        /// Cause.
        message: String,
    },
    /// The MCP exchange failed (connection closed, protocol error, crash).
    #[error("upstream `{id}` failed: {message}")]
    Call {
        /// Upstream id.
        id: String,
        /// Cause.
        message: String,
    },
    /// The server asked for client input or created a task; the gateway does not relay those.
    #[error("upstream `{0}` returned a result the gateway does not relay (input request or task)")]
    Unsupported(String),
}

/// A tool as an upstream advertises it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTool {
    /// Name at the upstream.
    pub name: String,
    /// Title, if any.
    pub title: Option<String>,
    /// Description, if any.
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Map<String, Value>,
    /// `readOnlyHint` (absent = false).
    pub read_only_hint: bool,
    /// `destructiveHint` (absent = true).
    pub destructive_hint: bool,
    /// `openWorldHint` (absent = true).
    pub open_world_hint: bool,
}

/// A tool result, in protocol-neutral form.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// Content blocks as raw MCP JSON objects (`{"type":"text","text":…}`, …).
    pub content: Vec<Value>,
    /// `structuredContent`, if any.
    pub structured: Option<Value>,
    /// `isError`.
    pub is_error: bool,
}

/// An upstream server.
pub trait Upstream: Send + Sync {
    /// Its configured id.
    fn id(&self) -> &str;
    /// Where its effects go (recorded as `ctx.destination` in canonical requests).
    fn destination(&self) -> &str;
    /// The `serverInfo.name` the server reported at `initialize`, looked up in the shipped
    /// catalog of known servers ([`crate::known`]). `None` (the default) when it reported none
    /// or the upstream is not an MCP server: its tools are then reads only by operator rule.
    fn server_name(&self) -> Option<&str> {
        None
    }
    /// All tools (every page).
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>>;
    /// Call one tool once.
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>>;
}

/// An upstream reached with rmcp.
pub struct RmcpUpstream {
    id: String,
    destination: String,
    server_name: Option<String>,
    client: RunningService<RoleClient, ()>,
}

/// The `serverInfo.name` an initialized client's server reported.
fn reported_name(client: &RunningService<RoleClient, ()>) -> Option<String> {
    client
        .peer()
        .peer_info()
        .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()))
}

impl std::fmt::Debug for RmcpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmcpUpstream")
            .field("id", &self.id)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl RmcpUpstream {
    /// An upstream over an rmcp client that is already initialized — for servers run in
    /// process over an in-memory pipe (evaluation harnesses, tests). `destination` is recorded
    /// as `ctx.destination` in canonical requests.
    #[must_use]
    pub fn from_client(
        id: impl Into<String>,
        destination: impl Into<String>,
        client: RunningService<RoleClient, ()>,
    ) -> Self {
        Self {
            id: id.into(),
            destination: destination.into(),
            server_name: reported_name(&client),
            client,
        }
    }

    /// Start (stdio) or connect (HTTP) and initialize.
    ///
    /// # Errors
    /// [`UpstreamError::Start`] if the process cannot be spawned or the handshake fails.
    pub async fn connect(spec: &UpstreamSpec) -> Result<Self, UpstreamError> {
        let start_err = |message: String| UpstreamError::Start {
            id: spec.id.clone(),
            message,
        };
        let (client, destination) = match &spec.transport {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (transport, _stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .map_err(|e| start_err(format!("cannot run `{command}`: {e}")))?;
                let client = ().serve(transport).await.map_err(|e| start_err(e.to_string()))?;
                (client, format!("stdio:{command}"))
            }
            UpstreamTransport::Http {
                url,
                bearer_token_env,
            } => {
                let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                );
                if let Some(var) = bearer_token_env {
                    let token = std::env::var(var).map_err(|_| {
                        start_err(format!("environment variable `{var}` is not set"))
                    })?;
                    config = config.auth_header(token);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                let client = ().serve(transport).await.map_err(|e| start_err(e.to_string()))?;
                (client, url.clone())
            }
        };
        Ok(Self {
            id: spec.id.clone(),
            destination,
            server_name: reported_name(&client),
            client,
        })
    }
}

fn convert_tool(tool: Tool) -> UpstreamTool {
    let ann = tool.annotations.as_ref();
    UpstreamTool {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(ToString::to_string),
        input_schema: (*tool.input_schema).clone(),
        read_only_hint: ann.and_then(|a| a.read_only_hint).unwrap_or(false),
        destructive_hint: ann.and_then(|a| a.destructive_hint).unwrap_or(true),
        open_world_hint: ann.and_then(|a| a.open_world_hint).unwrap_or(true),
    }
}

impl Upstream for RmcpUpstream {
    fn id(&self) -> &str {
        &self.id
    }

    fn destination(&self) -> &str {
        &self.destination
    }

    fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            let tools =
                self.client
                    .peer()
                    .list_all_tools()
                    .await
                    .map_err(|e| UpstreamError::Call {
                        id: self.id.clone(),
                        message: e.to_string(),
                    })?;
            Ok(tools.into_iter().map(convert_tool).collect())
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let mut params = CallToolRequestParams::new(name);
            params.arguments = Some(arguments);
            let response = self
                .client
                .peer()
                .call_tool_once(params)
                .await
                .map_err(|e| UpstreamError::Call {
                    id: self.id.clone(),
                    message: e.to_string(),
                })?;
            match response {
                CallToolResponse::Complete(result) => {
                    let content = result
                        .content
                        .iter()
                        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
                        .collect();
                    Ok(ToolOutput {
                        content,
                        structured: result.structured_content,
                        is_error: result.is_error.unwrap_or(false),
                    })
                }
                _ => Err(UpstreamError::Unsupported(self.id.clone())),
            }
        })
    }
}
