//! # SecureClaw gateway
//!
//! Async orchestration of the trusted core (DESIGN.md §2): sessions and task envelopes, the
//! read path (forward, classify, declassify into handles and summaries), the write path
//! (PREVIEW → policy → confirmation → COMMIT), the executor and the upstream registry.
//!
//! Front ends (`secureclaw-server`) call [`Gateway::call`] for ordinary MCP `tools/call`,
//! [`Gateway::preview`] / [`Gateway::commit`] for runtimes that hold artifacts themselves, and
//! the operator methods for sessions, approvals, handles and audit.
//!
//! The gateway holds its durable state only through the storage traits of
//! [`secureclaw_core::store`] (`Arc<dyn Store>`: SQLite or PostgreSQL from `secureclaw-store`).
//! Every store failure fails closed with `store_unavailable`.
//!
//! Each tool call is a `tracing` span with children for its stages ([`otel`] lists them and
//! their attributes); the binary exports them over OTLP when telemetry is configured.

pub mod archive;
pub mod catalog;
pub mod config;
pub mod danger;
pub mod decision_cache;
mod declassify;
pub mod executor;
mod gateway;
pub mod known;
pub mod otel;
pub mod permit;
pub mod pins;
pub mod rules;
pub mod upstream;

pub use catalog::{CatalogError, ToolEntry};
pub use config::{ApprovalsConfig, WebhookConfig, WebhookFormat};
pub use config::{
    GatewayConfig, Limits, ToolRule, UpstreamProtocol, UpstreamSpec, UpstreamTransport,
};
pub use config::{SpeculationConfig, SubstituteKind, SubstituteRule};
pub use gateway::approvals::{
    ApprovalView, Confirmer, ConfirmerAnswer, approver_identity, list_for_approver,
};
pub use gateway::notify::{ApprovalNotice, TIMEOUT_DECIDER, webhook_signature};
pub use gateway::pinning::{PoisoningScan, QuarantinedTool};
pub use gateway::retention::{AuditArchivePolicy, RetentionPolicy, sweep_backlog};
pub use gateway::{
    ABANDON_TOOL, CallMeta, CallOutcome, Clock, Gateway, GatewayError, GrantTerms, GrantTermsError,
    GrantView, MAX_GRANT_MS, MAX_GRANT_USES, META_APPROVAL, META_BRANCH, META_CONFIDENCE,
    META_MODE, PROMOTE_TOOL, PreviewDecision, PreviewOutcome, Released, RetryAdmission,
    approve_with_grant, audit_session_id, decide_approval, describe_handles, list_grants,
    parse_duration, reveal_for_approver, revoke_grant, session_exposure, session_trace,
    system_clock, valid_branch,
};
pub use upstream::{
    BoxFuture, Connector, RmcpConnector, RmcpUpstream, ToolOutput, Upstream, UpstreamError,
    UpstreamTool,
};
