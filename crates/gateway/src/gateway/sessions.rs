//! Sessions and their task envelopes: opening a session for a caller with the envelope the
//! trusted side supplies, looking a live one up, and the session's operations on its own
//! handles — describe and revoke, never dereference (DESIGN.md §3 "Handles"; SecureClaw paper
//! §3.2).

use super::{Gateway, GatewayError, random};
use secureclaw_core::audit::AuditKind;
use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::handle::HandleId;
use secureclaw_core::store::SessionRecord;
use serde_json::{Value, json};

impl Gateway {
    /// Open a session for `caller` with a task envelope from the trusted side.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn open_session(
        &self,
        caller: &str,
        envelope: TaskEnvelope,
    ) -> Result<SessionRecord, GatewayError> {
        for grant in self.unmatched_grants(&envelope.granted_tools) {
            tracing::warn!(
                target: "secureclaw::config",
                grant = %grant,
                "granted tool `{grant}` matches no tool the upstreams list; the grant does nothing (tools are named `upstream__tool` under serve, or as the upstream names them under wrap)"
            );
        }
        let now = self.now();
        let record = SessionRecord {
            id: format!("ses_{}", secureclaw_core::encoding::base32(&random::<16>())),
            caller: caller.to_owned(),
            envelope,
            created_at: now,
            expires_at: now.plus_millis(self.inner.config.limits.session_ttl_ms),
        };
        self.inner
            .store
            .put_session(&record)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let mut ev = self.event(AuditKind::Session, &record, "");
        ev.tool = None;
        ev.detail = json!({"task_digest": record.envelope.digest(), "trusted_targets": record.envelope.trusted_targets.len()});
        self.audit(ev)
            .await
            .map_err(|()| GatewayError::Store("audit append failed".into()))?;
        Ok(record)
    }

    /// The entries of `granted_tools` that match no tool of this gateway
    /// ([`crate::rules::unmatched_grants`]).
    #[must_use]
    pub fn unmatched_grants(&self, granted_tools: &[String]) -> Vec<String> {
        let exposed: Vec<String> = self
            .inner
            .catalog
            .iter()
            .map(|e| e.exposed.clone())
            .collect();
        crate::rules::unmatched_grants(granted_tools, &self.inner.catalog.listed(), &exposed)
    }

    /// Look a live session up.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, GatewayError> {
        let s = self
            .inner
            .store
            .session(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        Ok(s.filter(|s| self.now() <= s.expires_at))
    }

    /// Whether `session`, held in memory by a front end for a whole connection (`wrap`, `serve
    /// --stdio`, the token-less default session), still has its record in the store. A session
    /// within its lifetime is never swept, so the store is read only after `expires_at`; from
    /// then on a retention sweep ([`crate::RetentionPolicy`]) may have removed the record with
    /// every counter the session kept (grant uses, disclosure budget, written set), and a call
    /// must not start those afresh: front ends refuse the call when this is `false`.
    ///
    /// # Errors
    /// [`GatewayError::Store`] (callers fail closed).
    pub async fn session_still_stored(
        &self,
        session: &SessionRecord,
    ) -> Result<bool, GatewayError> {
        if self.now() <= session.expires_at {
            return Ok(true);
        }
        Ok(self
            .inner
            .store
            .session(&session.id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?
            .is_some())
    }

    /// Describe a handle of this session (never its value).
    ///
    /// # Errors
    /// [`GatewayError::NotFound`] for unknown, foreign or expired handles (one answer).
    pub async fn describe_handle(
        &self,
        session: &SessionRecord,
        id: &HandleId,
    ) -> Result<Value, GatewayError> {
        let rec = self
            .inner
            .store
            .handle(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        match rec {
            Some(r) if r.caller == session.caller && r.session == session.id => Ok(r.describe()),
            _ => Err(GatewayError::NotFound("handle".into())),
        }
    }

    /// Revoke a handle of this session.
    ///
    /// # Errors
    /// As [`Gateway::describe_handle`].
    pub async fn revoke_handle(
        &self,
        session: &SessionRecord,
        id: &HandleId,
    ) -> Result<(), GatewayError> {
        self.describe_handle(session, id).await?;
        self.inner
            .store
            .revoke_handle(id)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?;
        let mut ev = self.event(AuditKind::HandleRevoke, session, "");
        ev.tool = None;
        ev.detail = json!({"handle": id});
        self.audit(ev)
            .await
            .map_err(|()| GatewayError::Store("audit append failed".into()))
    }
}
