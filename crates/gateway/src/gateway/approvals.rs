//! The approval listing as a trusted approver sees it: one function for every front end that
//! shows approvals to a human (the CLI's `approvals list`, the operator API's
//! `GET /v1/approvals`, the approvals page).

use super::{Gateway, GatewayError, audit_session_id, reveal_for_approver};
use secureclaw_core::store::{ApprovalRecord, ApprovalState, Store, StoreError};

/// One approval with the action it concerns, ready to show to a trusted approver.
#[derive(Debug, Clone)]
pub struct ApprovalView {
    /// The approval record.
    pub approval: ApprovalRecord,
    /// The tool of the action.
    pub tool: String,
    /// The caller that previewed the action.
    pub caller: String,
    /// The session as the audit log names it ([`audit_session_id`]): never the raw session id,
    /// which is the runtime's bearer credential.
    pub session: String,
    /// The previewed call with its handles revealed ([`reveal_for_approver`]).
    pub call: String,
}

/// Pending (or all, or those in `state`) approvals of `store`, oldest first, each with its
/// action's call revealed for the approver and its session named as in the audit log.
///
/// # Errors
/// The store's error listing the approvals.
pub async fn list_for_approver(
    store: &dyn Store,
    state: Option<ApprovalState>,
) -> Result<Vec<ApprovalView>, StoreError> {
    let mut views = Vec::new();
    for (approval, action) in store.list_approvals(state).await? {
        let call = reveal_for_approver(store, &action.display).await;
        views.push(ApprovalView {
            approval,
            tool: action.tool,
            caller: action.caller,
            session: audit_session_id(&action.session),
            call,
        });
    }
    Ok(views)
}

impl Gateway {
    /// [`list_for_approver`] on this gateway's store.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn approvals_for_approver(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<ApprovalView>, GatewayError> {
        list_for_approver(self.inner.store.as_ref(), state)
            .await
            .map_err(|e| GatewayError::Store(e.to_string()))
    }
}
