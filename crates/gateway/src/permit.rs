//! The read permit: the read path's counterpart of [`secureclaw_core::acceptance::CommitProof`]
//! (SecureClaw paper §3.4; DESIGN.md §2 "proof types make a skipped check uncompilable";
//! issue 13 item 5).
//!
//! [`crate::executor::Executor::read`] sends a call only with a [`ReadPermit`], and the only
//! way to obtain one is the read path's decision ([`ReadPermit::decide`], private to this
//! crate): the tool is a read in the catalog, the policy engine allows the call, and every
//! handle in its arguments names this read tool as a sink. The permit names the catalog
//! entry's upstream and tool, so the executor sends exactly the tool that was decided on.
//!
//! Code outside this module cannot build a permit: its fields are private and it has no public
//! constructor. A doctest is compiled as an external crate, so it shows this. With the public
//! API, a function that takes a permit compiles:
//!
//! ```
//! use secureclaw_gateway::permit::ReadPermit;
//!
//! fn describe(permit: &ReadPermit) -> String {
//!     format!("{}__{}", permit.upstream(), permit.tool())
//! }
//! ```
//!
//! but a permit cannot be written down as a struct literal:
//!
//! ```compile_fail
//! use secureclaw_gateway::permit::ReadPermit;
//!
//! let forged = ReadPermit {
//!     upstream: "office".to_owned(),
//!     tool: "read_invoice".to_owned(),
//! };
//! ```
//!
//! nor obtained from the crate-private decision:
//!
//! ```compile_fail
//! use secureclaw_gateway::permit::ReadPermit;
//!
//! let decide = ReadPermit::decide;
//! ```
//!
//! nor copied to be used twice:
//!
//! ```compile_fail
//! use secureclaw_gateway::permit::ReadPermit;
//!
//! fn twice(permit: ReadPermit) -> (ReadPermit, ReadPermit) {
//!     (permit.clone(), permit)
//! }
//! ```

use crate::catalog::ToolEntry;
use secureclaw_core::handle::{HandleRecord, glob_match};
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyEngine, PolicyRequest};
use secureclaw_core::recovery::ReasonCode;

/// Permission to send one read-class call to one upstream tool. Consumed by
/// [`crate::executor::Executor::read`]; built only by [`ReadPermit::decide`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a read permit is the only way to send a read"]
pub struct ReadPermit {
    upstream: String,
    tool: String,
}

impl ReadPermit {
    /// The read path's decision for a call of `entry` (from the catalog) whose policy facts
    /// are `request` and whose arguments reference the handles `records`:
    ///
    /// 1. `entry` is a read and `request` describes a read of that same upstream tool, else
    ///    `policy_deny` (an effect needs a preview, an artifact and a commit proof);
    /// 2. the policy engine decides on `request`: `allow` goes on, `confirm` is `policy_deny`
    ///    (a read is never held for a human), `deny` is its own reason;
    /// 3. every handle's record names this read tool (`upstream__tool`) as an allowed sink,
    ///    else `handle_sink_forbidden`: a read sends its arguments to the provider and
    ///    returns what it says, so resolving any other handle for it would be a dereference
    ///    oracle.
    ///
    /// # Errors
    /// The reason code of the first failing step.
    pub(crate) fn decide(
        entry: &ToolEntry,
        policy: &dyn PolicyEngine,
        request: &PolicyRequest,
        records: &[HandleRecord],
    ) -> Result<Self, ReasonCode> {
        if entry.effect != EffectClass::Read
            || request.effect != EffectClass::Read
            || request.upstream != entry.upstream
            || request.tool != entry.name
        {
            return Err(ReasonCode::PolicyDeny);
        }
        match policy.decide(request) {
            PolicyDecision::Allow { .. } => {}
            PolicyDecision::Confirm { .. } => return Err(ReasonCode::PolicyDeny),
            PolicyDecision::Deny { reason, .. } => return Err(reason),
        }
        let qualified = format!("{}__{}", entry.upstream, entry.name);
        let explicit = records
            .iter()
            .all(|r| r.allowed_sinks.iter().any(|p| glob_match(p, &qualified)));
        if !explicit {
            return Err(ReasonCode::HandleSinkForbidden);
        }
        Ok(Self {
            upstream: entry.upstream.clone(),
            tool: entry.name.clone(),
        })
    }

    /// The upstream id the read goes to.
    #[must_use]
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The tool name at that upstream.
    #[must_use]
    pub fn tool(&self) -> &str {
        &self.tool
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::upstream::UpstreamTool;
    use secureclaw_core::handle::{HandleId, Sensitivity, SinkKind};
    use secureclaw_core::time::UnixMillis;
    use serde_json::Map;

    /// A policy engine with one fixed answer.
    struct Fixed(PolicyDecision);

    impl PolicyEngine for Fixed {
        fn decide(&self, _: &PolicyRequest) -> PolicyDecision {
            self.0.clone()
        }
        fn digest(&self) -> String {
            "fixed".into()
        }
    }

    fn allow() -> Fixed {
        Fixed(PolicyDecision::Allow {
            policies: vec!["p".into()],
        })
    }

    fn entry(name: &str, effect: EffectClass) -> ToolEntry {
        ToolEntry {
            exposed: format!("office__{name}"),
            upstream: "office".into(),
            name: name.into(),
            effect,
            destructive: false,
            financial: false,
            sink: SinkKind::Egress,
            egress_targets: true,
            targets: vec![],
            targets_declared: true,
            hidden: false,
            allow_protected_objects: false,
            matches_content: false,
            line_range_read: false,
            upstream_tool: UpstreamTool {
                name: name.into(),
                title: None,
                description: None,
                input_schema: Map::new(),
                read_only_hint: true,
                destructive_hint: false,
                open_world_hint: false,
                output_schema: None,
            },
        }
    }

    fn request(e: &ToolEntry) -> PolicyRequest {
        PolicyRequest {
            caller: "alice".into(),
            upstream: e.upstream.clone(),
            tool: e.name.clone(),
            effect: e.effect,
            known_tool: true,
            destructive: e.destructive,
            financial: e.financial,
            granted: false,
            sink: e.sink,
            targets_declared: e.targets_declared,
            targets: vec![],
            handles: vec![],
            listing: false,
        }
    }

    fn handle(sinks: &[&str]) -> HandleRecord {
        HandleRecord {
            id: HandleId("hdl_email_x".into()),
            caller: "alice".into(),
            session: "s".into(),
            object_id: "o".into(),
            version: 1,
            label: "email".into(),
            sensitivity: Sensitivity::High,
            source: "office__read_invoice".into(),
            anchored: false,
            allowed_sinks: sinks.iter().map(|s| (*s).to_owned()).collect(),
            created_at: UnixMillis(0),
            expires_at: UnixMillis(u64::MAX),
            revoked: false,
        }
    }

    /// Positive control: an allowed read mints a permit naming the catalog entry's tool.
    #[test]
    fn allowed_read_gets_a_permit_for_its_own_tool() {
        let e = entry("read_invoice", EffectClass::Read);
        let permit = ReadPermit::decide(&e, &allow(), &request(&e), &[]).unwrap();
        assert_eq!(permit.upstream(), "office");
        assert_eq!(permit.tool(), "read_invoice");
        // A handle that names this read as a sink (exactly or by pattern) may flow into it.
        let records = [
            handle(&["office__read_invoice"]),
            handle(&["office__read_*"]),
        ];
        assert!(ReadPermit::decide(&e, &allow(), &request(&e), &records).is_ok());
    }

    /// An effect never gets a read permit, even when the policy allows it and even when the
    /// policy facts claim it is a read.
    #[test]
    fn effect_gets_no_read_permit() {
        let e = entry("send_email", EffectClass::Effect);
        let mut req = request(&e);
        assert_eq!(
            ReadPermit::decide(&e, &allow(), &req, &[]),
            Err(ReasonCode::PolicyDeny)
        );
        req.effect = EffectClass::Read;
        assert_eq!(
            ReadPermit::decide(&e, &allow(), &req, &[]),
            Err(ReasonCode::PolicyDeny)
        );
    }

    /// Facts decided for another tool do not mint a permit for this one.
    #[test]
    fn facts_of_another_tool_get_no_permit() {
        let e = entry("read_invoice", EffectClass::Read);
        let mut req = request(&e);
        req.tool = "list_invoices".into();
        assert_eq!(
            ReadPermit::decide(&e, &allow(), &req, &[]),
            Err(ReasonCode::PolicyDeny)
        );
        let mut req = request(&e);
        req.upstream = "other".into();
        assert_eq!(
            ReadPermit::decide(&e, &allow(), &req, &[]),
            Err(ReasonCode::PolicyDeny)
        );
    }

    /// A read the policy would confirm is refused (never held), and a denial keeps its reason.
    #[test]
    fn confirm_and_deny_get_no_permit() {
        let e = entry("read_invoice", EffectClass::Read);
        let confirm = Fixed(PolicyDecision::Confirm { policies: vec![] });
        assert_eq!(
            ReadPermit::decide(&e, &confirm, &request(&e), &[]),
            Err(ReasonCode::PolicyDeny)
        );
        let deny = Fixed(PolicyDecision::Deny {
            reason: ReasonCode::UnknownTool,
            policies: vec![],
        });
        assert_eq!(
            ReadPermit::decide(&e, &deny, &request(&e), &[]),
            Err(ReasonCode::UnknownTool)
        );
    }

    /// A handle whose record does not name this read as a sink blocks the permit (the read
    /// would be a dereference oracle), also when another handle of the call does.
    #[test]
    fn handle_not_naming_the_read_gets_no_permit() {
        let e = entry("read_invoice", EffectClass::Read);
        for records in [
            vec![handle(&[])],
            vec![handle(&["office__send_email"])],
            vec![handle(&["office__read_invoice"]), handle(&["other__*"])],
        ] {
            assert_eq!(
                ReadPermit::decide(&e, &allow(), &request(&e), &records),
                Err(ReasonCode::HandleSinkForbidden)
            );
        }
    }
}
