//! Sealed approval state for MCP 2026-07-28 multi round-trip requests (MRTR, SEP-2322;
//! issue 16 item 2): the `requestState` a `tools/call` answered `input_required` carries, and
//! the checks its retry passes before the gateway treats the retry as the re-issue of a
//! pending action.
//!
//! The spec makes `requestState` attacker-controlled input: a server whose authorization
//! depends on it MUST protect its integrity, SHOULD bind it to the principal, an expiry and the
//! originating request, and MUST enforce single use server-side (`basic/patterns/mrtr.mdx`).
//! Here:
//!
//! - **Integrity and key id.** rmcp's `RequestStateCodec` (HMAC-SHA256, `rs2` format with a
//!   key id), keyed with a sub-key derived from each usable confirmation key of the gateway's
//!   ring ([`KeyPurpose::Confirmation`]), so a key rotation keeps in-flight states openable
//!   until the old key is retired.
//! - **Binding.** The payload names the action id and its binding digest; the session id,
//!   the caller and the tool name are associated data: mixed into the tag, never written into
//!   the token (the session id is the runtime's bearer credential). A state opens only in the
//!   session, for the caller and the tool it was issued to.
//! - **Expiry.** `exp` (Unix ms, by the gateway's clock) is in the payload; a retry past it is
//!   refused with `request_state_expired`.
//! - **Exact request and single use.** An opened state only names the action: the retry then
//!   runs as the re-issue of that action, so the binding check (the retried arguments must
//!   canonicalize to the approved request) and the ledger's single use apply unchanged. A
//!   replayed state after the commit is refused `replay`.
//! - **No protected value.** The payload holds ids and a keyed digest only.

use super::{CallOutcome, Gateway, GatewayError};
use rmcp::model::{RequestStateCodec, RequestStateError};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::keys::{KeyPurpose, hmac_parts};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::{ApprovalState, SessionRecord};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Domain separation of the request-state sub-key from the confirmation key it derives from.
const SUBKEY_LABEL: &[u8] = b"secureclaw/mrtr-request-state/v1";
/// Domain separation of the associated data.
const AD_LABEL: &[u8] = b"secureclaw/mrtr-ad/v1";

/// The sealed payload (JSON inside the codec's token).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    /// Format version, 1.
    v: u8,
    /// The pending action.
    act: String,
    /// Its binding digest (hex), checked against the stored action on open.
    bd: String,
    /// Expiry, Unix milliseconds (gateway clock).
    exp: u64,
}

/// A 2026-07-28 retry admitted like any call before its state is opened and while it waits
/// for a decision: it took one of the session's rate tokens, and its arguments count against
/// `max_in_flight_bytes` until this is dropped (red-team of 2026-12-04: retries with a bad
/// state were neither rate-limited nor merged in the audit log, and waiting retries held
/// their arguments uncounted).
#[derive(Debug)]
pub struct RetryAdmission {
    _bytes: super::limits::BytesGuard,
}

impl Gateway {
    /// Admit a retry: the session's rate limit, then its arguments' bytes; the refusal
    /// (`limit_exceeded`, audited as for any call) otherwise.
    ///
    /// # Errors
    /// The refusal to send back.
    pub async fn admit_retry(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<RetryAdmission, CallOutcome> {
        if let Some(limited) = self.throttle(session, tool).await {
            return Err(limited);
        }
        let bytes = self.admit_arguments(session, tool, arguments).await?;
        Ok(RetryAdmission { _bytes: bytes })
    }

    /// The request-state codec over every usable confirmation key (the active one seals).
    fn request_state_codec(&self) -> Result<RequestStateCodec, GatewayError> {
        let keys = &self.inner.keys;
        let active = keys
            .active(KeyPurpose::Confirmation)
            .map_err(|e| GatewayError::Keys(e.to_string()))?;
        let ring: Vec<(String, Vec<u8>)> = keys
            .usable(KeyPurpose::Confirmation)
            .map(|k| (k.id.0.clone(), hmac_parts(k, &[SUBKEY_LABEL]).to_vec()))
            .collect();
        RequestStateCodec::new_with_keyring(active.id.0.clone(), ring)
            .map_err(|e| GatewayError::Keys(e.to_string()))
    }

    /// Associated data: session id, caller and tool, length-prefixed.
    fn request_state_ad(session: &SessionRecord, tool: &str) -> Vec<u8> {
        let mut ad = Vec::new();
        for part in [
            AD_LABEL,
            session.id.as_bytes(),
            session.caller.as_bytes(),
            tool.as_bytes(),
        ] {
            ad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            ad.extend_from_slice(part);
        }
        ad
    }

    /// Seal the `requestState` for the pending `action` of `session`, called as `tool`; it
    /// lives `confirmation_ttl_ms` (the time a human has to decide).
    ///
    /// # Errors
    /// [`GatewayError::NotFound`] if the action is unknown or belongs to another session,
    /// [`GatewayError::Keys`] without a confirmation key, [`GatewayError::Store`].
    pub async fn seal_request_state(
        &self,
        session: &SessionRecord,
        tool: &str,
        action: &ActionId,
    ) -> Result<String, GatewayError> {
        let record = self
            .inner
            .store
            .action(action)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))?
            .filter(|a| a.session == session.id)
            .ok_or_else(|| GatewayError::NotFound(action.0.clone()))?;
        let payload = Payload {
            v: 1,
            act: action.0.clone(),
            bd: record.binding.digest,
            exp: self
                .now()
                .plus_millis(self.inner.config.limits.confirmation_ttl_ms)
                .0,
        };
        let ad = Self::request_state_ad(session, tool);
        self.request_state_codec()?
            .seal_json_with(
                &payload,
                &rmcp::model::SealOptions::new().associated_data(&ad),
            )
            .map_err(|e| GatewayError::Keys(e.to_string()))
    }

    /// Open a retry's `requestState` for `session` calling `tool`: the action it names, or why
    /// it is refused (`request_state_invalid`: not ours, altered, another session, caller,
    /// tool or action; `request_state_expired`). The caller then re-issues the call naming the
    /// action, where the binding and single-use checks run.
    ///
    /// # Errors
    /// The [`ReasonCode`] of the refusal; [`ReasonCode::StoreUnavailable`] if the action
    /// cannot be read.
    pub async fn open_request_state(
        &self,
        session: &SessionRecord,
        tool: &str,
        state: &str,
    ) -> Result<ActionId, ReasonCode> {
        let codec = self
            .request_state_codec()
            .map_err(|_| ReasonCode::Internal)?;
        let ad = Self::request_state_ad(session, tool);
        let payload: Payload = codec.open_json_with(state, &ad).map_err(|e| match e {
            RequestStateError::Expired => ReasonCode::RequestStateExpired,
            _ => ReasonCode::RequestStateInvalid,
        })?;
        if payload.v != 1 {
            return Err(ReasonCode::RequestStateInvalid);
        }
        if self.now().0 > payload.exp {
            return Err(ReasonCode::RequestStateExpired);
        }
        let action = ActionId(payload.act);
        let record = self
            .inner
            .store
            .action(&action)
            .await
            .map_err(|_| ReasonCode::StoreUnavailable)?
            .ok_or(ReasonCode::RequestStateInvalid)?;
        if record.session != session.id || record.binding.digest != payload.bd {
            return Err(ReasonCode::RequestStateInvalid);
        }
        Ok(action)
    }

    /// Refuse a retry whose `requestState` did not open: audited as a denial, nothing decided.
    pub async fn refuse_request_state(
        &self,
        session: &SessionRecord,
        tool: &str,
        reason: ReasonCode,
    ) -> CallOutcome {
        let entry = self.inner.catalog.get(tool);
        self.deny(session, tool, entry, reason, None).await
    }

    /// Wait up to `wait` for the approval of `action` to leave `pending` (decided through
    /// the CLI, the operator API or the approvals page, possibly by another gateway on the
    /// same store), polling the store. Returns the state last seen (`None` if the action has
    /// no approval or the store failed).
    pub async fn await_decision(&self, action: &ActionId, wait: Duration) -> Option<ApprovalState> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let state = match self.inner.store.approval(action).await {
                Ok(Some(a)) => a.state,
                _ => return None,
            };
            if state != ApprovalState::Pending || tokio::time::Instant::now() >= deadline {
                return Some(state);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(200))).await;
        }
    }
}
