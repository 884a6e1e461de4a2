//! # SecureClaw front ends
//!
//! The MCP server ([`mcp`]; stdio and Streamable HTTP, via rmcp) and the HTTP API ([`http`];
//! axum). Both are thin: they authenticate, parse, call the [`secureclaw_gateway::Gateway`]
//! and render its outcomes.

pub mod http;
pub mod mcp;
pub mod outcome;

pub use http::{ApiState, router};
pub use mcp::{McpFrontEnd, SessionSource};
