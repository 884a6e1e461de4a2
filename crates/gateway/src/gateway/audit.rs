//! The audit side of the gateway: appending records through the group-commit writer, the
//! record every event starts from (the session named by its digest, [`audit_session_id`], never
//! by its id), rejections front ends refuse, and the operator's export and verification of the
//! hash chain (DESIGN.md §3 "Single use and crash safety"; issue 12 item 8, issue 14 item 3).

use super::{Gateway, GatewayError, session_trace};
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::store::{GroupWrite, SessionRecord, StoreError};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The name of a session in audit records: `ses#` + the first 16 hex digits of SHA-256 of the
/// session id. The session id is the runtime's bearer credential, so the exportable audit log
/// must not carry it; the digest still correlates records of one session.
#[must_use]
pub fn audit_session_id(session_id: &str) -> String {
    let digest = hex::encode(Sha256::digest(session_id.as_bytes()));
    format!("ses#{}", digest.get(..16).unwrap_or_default())
}

impl Gateway {
    /// Append `event` through the group-commit writer and wait until it is durable.
    pub(super) async fn audit(&self, event: AuditEvent) -> Result<(), ()> {
        self.inner
            .writer
            .write(vec![GroupWrite::Audit(event)])
            .await
            .map(|_| ())
            .map_err(|e| {
                self.inner.metrics.audit_append_failed();
                tracing::error!(error = %e, "audit append failed");
            })
    }

    /// Queue `event` with the next group commit without waiting for it (issue 14 item 2): for
    /// records whose loss in a crash the gateway's answer does not depend on — a plain read's
    /// result record. A clean shutdown ([`Gateway::drain`]) and the audit export
    /// ([`Gateway::audit_records`]) wait for it; a crash may lose the last such records
    /// (README "What survives a crash"). A record that cannot be queued is written and waited
    /// for instead; a failed write is logged and counted.
    pub(super) async fn audit_later(&self, event: AuditEvent) {
        self.write_later(vec![GroupWrite::Audit(event)]).await;
    }

    /// Queue `writes` with the next group commit without waiting for them (issue 14 item 2):
    /// a read's result record, an effect's `commit` record and `executed` mark. Writes that
    /// cannot be queued (no writer can run) are written and waited for instead. A failed
    /// write is logged by the writer; a lost ledger outcome leaves its entry `reserved`, which
    /// the next start reports.
    pub(super) async fn write_later(&self, writes: Vec<GroupWrite>) {
        if let Err(e) = self.inner.writer.submit(writes.clone()) {
            tracing::debug!(error = %e, "records written synchronously");
            if let Err(e) = self.inner.writer.write(writes).await {
                self.inner.metrics.audit_append_failed();
                tracing::error!(error = %e, "records could not be written");
            }
        }
    }

    pub(super) fn event(&self, kind: AuditKind, session: &SessionRecord, tool: &str) -> AuditEvent {
        let mut ev = AuditEvent::new(kind, self.now());
        ev.session = Some(audit_session_id(&session.id));
        ev.caller = Some(session.caller.clone());
        ev.tool = Some(self.audit_tool_name(tool));
        ev
    }

    /// `tool` as the audit log records it: a name the catalog knows as it is; any other name
    /// (it is the runtime's input) cut to [`MAX_AUDIT_TOOL_CHARS`] characters with its length
    /// noted, so that a megabyte-long name cannot grow the log by a megabyte per call
    /// (red-team of 2026-12-04).
    pub(super) fn audit_tool_name(&self, tool: &str) -> String {
        if tool.chars().count() <= MAX_AUDIT_TOOL_CHARS || self.inner.catalog.get(tool).is_some() {
            return tool.to_owned();
        }
        let head: String = tool.chars().take(MAX_AUDIT_TOOL_CHARS).collect();
        format!("{head}…[{} bytes]", tool.len())
    }

    /// Audit a request a front end refused before it became a tool call (issue 12 item 8):
    /// `front_end` (`mcp-stdio`, `mcp-http`, `http-api`), a `reason` code, the session if
    /// known and the tool if named. Metadata only; a failed append is logged.
    pub async fn audit_rejection(
        &self,
        front_end: &str,
        reason: &str,
        session: Option<&SessionRecord>,
        tool: Option<&str>,
    ) {
        let mut ev = AuditEvent::new(AuditKind::Rejection, self.now());
        ev.session = session.map(|s| audit_session_id(&s.id));
        ev.caller = session.map(|s| s.caller.clone());
        ev.tool = tool.map(|t| self.audit_tool_name(t));
        ev.detail = json!({"front_end": front_end, "reason": reason});
        let _ = self.audit(ev).await;
    }

    /// Audit a request a front end refused before any session was known — no token, an
    /// unknown or expired one, a wrong operator token (issue 12 item 8): `front_end` and a
    /// `reason` code, nothing from the request. An unauthenticated peer must not be able to
    /// grow the audit log at will, so at most one such record is written per front end and
    /// second; it carries `count`, how many refusals it stands for (itself included).
    pub async fn audit_unauthenticated_rejection(&self, front_end: &str, reason: &str) {
        let now = self.now();
        // Session ids start with `ses_`: this key cannot be one.
        let key = format!("unauthenticated {front_end}");
        let Some(count) = self.inner.rates.rejected(&key, now) else {
            return;
        };
        let mut ev = AuditEvent::new(AuditKind::Rejection, now);
        ev.detail = json!({"front_end": front_end, "reason": reason, "count": count});
        let _ = self.audit(ev).await;
    }

    /// Wait until every record and ledger outcome queued so far without waiting (a read's
    /// result record, an effect's `commit` record and `executed` mark) is committed, or its
    /// failure logged. An embedder reading the store directly calls this first; the audit
    /// export and [`Gateway::drain`] do it themselves.
    pub async fn flush(&self) {
        self.inner.writer.flush().await;
    }

    /// Up to `limit` audit records with `seq >= from_seq`, in order (audit export).
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<secureclaw_core::audit::AuditRecord>, GatewayError> {
        self.inner.writer.flush().await;
        self.inner
            .store
            .audit_records(from_seq, limit)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))
    }

    /// Verify the whole audit chain; the number of records verified.
    ///
    /// # Errors
    /// The store's error: [`StoreError::Audit`] naming the first record that does not verify,
    /// [`StoreError::Unavailable`], …
    pub async fn verify_audit(&self) -> Result<u64, StoreError> {
        self.inner.writer.flush().await;
        self.inner.store.verify_audit().await
    }

    /// Verify the audit log from its latest archive checkpoint, if any: the records verified
    /// and the checkpoint they were verified from
    /// ([`secureclaw_core::store::AuditSink::verify_audit_log`]).
    ///
    /// # Errors
    /// As [`Gateway::verify_audit`].
    pub async fn verify_audit_log(
        &self,
    ) -> Result<secureclaw_core::audit::LogVerified, StoreError> {
        self.inner.writer.flush().await;
        self.inner.store.verify_audit_log().await
    }

    /// The speculative trace events and branch table of `session_id`, from the audit log; see
    /// [`session_trace`].
    ///
    /// # Errors
    /// [`GatewayError::Store`] if the audit log cannot be read.
    pub async fn session_trace(
        &self,
        session_id: &str,
    ) -> Result<
        (
            Vec<secureclaw_core::exposure::TraceEvent>,
            secureclaw_core::contract::BranchTable,
        ),
        GatewayError,
    > {
        session_trace(self.inner.store.as_ref(), session_id).await
    }
}

/// Longest tool name, in characters, the audit log records for a name the catalog does not
/// know.
pub const MAX_AUDIT_TOOL_CHARS: usize = 128;
