//! **DANGER — deliberately insecure evaluation controls. Never use outside this crate.**
//!
//! Everything here goes around the gateway's trusted path on purpose, so that the evaluation
//! can show what that path prevents. It is named as rustls names its escape hatches
//! (`rustls::client::danger`): a reader who sees `danger::` at a call site knows the code
//! there is not protected by the boundary.
//!
//! - [`Backdoor`]: the in-process stack's raw powers a deployment never has — the main
//!   gateway's database opened directly (vault plaintext included) and the demo office
//!   upstream connection shared with the gateway's executor.
//! - [`InsecureExecutor`]: the boundary-off control of the payment case study (SecureClaw
//!   paper §A.10, Table 18): an executor that skips the acceptance predicate and executes
//!   whatever commit it is sent.
//!
//! The module is private to `secureclaw-eval` (`pub(crate)`): no other crate, configuration
//! file or command-line flag can reach it. Only [`crate::payment`] uses it.

use crate::stack::Stack;
use crate::target::{EvalError, Reply, Verdict};
use secureclaw_core::handle::substitute_handles;
use secureclaw_gateway::{RmcpUpstream, Upstream};
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value};
use std::sync::Arc;

/// **INSECURE.** The in-process stack's raw powers: its database read directly and the demo
/// office connection. Built only by [`Stack::start`]; reached only as [`Stack::danger`].
pub(crate) struct Backdoor {
    store: Arc<SqliteStore>,
    office: Arc<RmcpUpstream>,
}

impl Backdoor {
    /// The backdoor of a stack whose database is `store` and whose demo office is `office`.
    pub(crate) fn new(store: Arc<SqliteStore>, office: Arc<RmcpUpstream>) -> Self {
        Self { store, office }
    }

    /// The plaintext behind handle `id`, read straight from the vault (no session, sink or
    /// expiry check).
    fn plaintext(&self, id: &secureclaw_core::handle::HandleId) -> Result<String, EvalError> {
        let rec = self
            .store
            .handle(id)
            .map_err(|e| EvalError::Setup(e.to_string()))?
            .ok_or_else(|| EvalError::Setup(format!("no handle {id}")))?;
        let plain = self
            .store
            .object_value_at(&rec.object_id, rec.version)
            .map_err(|e| EvalError::Setup(e.to_string()))?
            .ok_or_else(|| EvalError::Setup("no vault value".into()))?;
        Ok(String::from_utf8_lossy(&plain).into_owned())
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// **INSECURE — evaluation control only.** An executor that ignores the artifact and action
/// id it is sent (no acceptance predicate, no single use, no sink check) and executes the
/// call, resolving handles straight from the vault. Built only by the payment case study.
pub(crate) struct InsecureExecutor<'a> {
    backdoor: &'a Backdoor,
}

impl<'a> InsecureExecutor<'a> {
    /// The insecure control over `stack`'s raw powers.
    pub(crate) fn new(stack: &'a Stack) -> Self {
        Self {
            backdoor: stack.danger(),
        }
    }

    /// Execute the office tool `tool` with `args`, whatever the action id and artifact.
    pub(crate) async fn commit(
        &self,
        tool: &str,
        args: Value,
        _action_id: &str,
        _artifact: Option<&str>,
    ) -> Result<Reply, EvalError> {
        let name = tool
            .strip_prefix("office__")
            .ok_or_else(|| EvalError::Setup(format!("not an office tool: {tool}")))?;
        let mut value = args;
        substitute_handles::<EvalError>(&mut value, &mut |id| self.backdoor.plaintext(id))?;
        let out = self
            .backdoor
            .office
            .call_tool(name.to_owned(), obj(value))
            .await
            .map_err(|e| EvalError::Setup(e.to_string()))?;
        Ok(Reply {
            verdict: Verdict::Allow {
                tool_error: out.is_error,
            },
            structured: out.structured,
            action_id: None,
        })
    }
}
