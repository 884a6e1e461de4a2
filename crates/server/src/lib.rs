//! # SecureClaw front ends
//!
//! The MCP server ([`mcp`]; stdio and Streamable HTTP, via rmcp) and the HTTP API ([`http`];
//! axum) with its approvals page ([`approvals_ui`]). Both are thin: they authenticate, parse,
//! call the [`secureclaw_gateway::Gateway`] and render its outcomes.

pub mod approvals_ui;
pub mod conn;
pub mod http;
pub mod mcp;
pub mod mcp_http;
pub mod one_reply;
pub mod outcome;
pub mod stdio_lines;

pub use conn::{ConnLimits, serve};
pub use http::{ApiState, nodelay_listener, router};
pub use mcp::{McpFrontEnd, SessionSource};
pub use mcp_http::{McpSessionLimits, mcp_router, mcp_router_with_limits};
