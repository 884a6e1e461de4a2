//! # SecureClaw policy (Cedar)
//!
//! Maps the core's [`PolicyRequest`] facts onto a Cedar request — principal `Caller::"<id>"`,
//! action `Action::"read"` or `Action::"effect"`, resource `Tool::"<upstream>__<tool>"`,
//! context as in `policies/schema.cedarschema` — and Cedar's answer onto a
//! [`PolicyDecision`] (DESIGN.md §3 "Policy"):
//!
//! - forbid overrides permit; no matching permit is a deny (`policy_deny`);
//! - a satisfied permit annotated `@confirm("true")` turns allow into "needs confirmation";
//! - a forbid's `@reason("…")` annotation names the reason code;
//! - any evaluation error on an effectful call is a deny (Cedar alone would skip the erroring
//!   policy and might allow).
//!
//! The default policy set ships in the binary; operators add `.cedar` files. Every set is
//! validated against the schema at load (strict mode); an invalid set is an error that stops
//! start-up.

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, PolicyId, PolicySet, Request, Schema,
    ValidationMode, Validator,
};
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyEngine, PolicyRequest};
use secureclaw_core::recovery::ReasonCode;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::str::FromStr;

/// The schema, shipped in the binary.
pub const SCHEMA: &str = include_str!("policies/schema.cedarschema");
/// The default policy set, shipped in the binary.
pub const DEFAULT_POLICIES: &str = include_str!("policies/default.cedar");

/// Errors loading a policy set. Messages name the file and carry Cedar's diagnostic.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The schema does not parse (a build defect).
    #[error("policy schema is invalid: {0}")]
    Schema(String),
    /// A policy file does not parse.
    #[error("policy file `{file}` does not parse: {message}")]
    Parse {
        /// File name.
        file: String,
        /// Cedar's message.
        message: String,
    },
    /// Two policies share an id.
    #[error("policy file `{file}`: {message}")]
    Duplicate {
        /// File name.
        file: String,
        /// Cedar's message.
        message: String,
    },
    /// The set does not validate against the schema.
    #[error("policy set does not validate against the schema:\n{0}")]
    Validation(String),
    /// An entity id could not be built.
    #[error("invalid entity id `{0}`")]
    Entity(String),
}

/// A loaded, validated Cedar policy set.
#[derive(Debug)]
pub struct CedarPolicy {
    schema: Schema,
    policies: PolicySet,
    digest: String,
    authorizer: Authorizer,
    read_action: EntityUid,
    effect_action: EntityUid,
}

impl CedarPolicy {
    /// The default policy set plus operator files `(name, text)`.
    ///
    /// Policy ids come from each policy's `@id` annotation (else `<file>#<n>`), prefixed by the
    /// file name for operator files, so decisions name where a policy lives.
    ///
    /// # Errors
    /// [`PolicyError`] for unparsable files, duplicate ids, or a set that fails strict
    /// validation.
    pub fn load(extra: &[(String, String)]) -> Result<Self, PolicyError> {
        let schema = Schema::from_cedarschema_str(SCHEMA)
            .map_err(|e| PolicyError::Schema(e.to_string()))?
            .0;
        let mut policies = PolicySet::new();
        let mut hasher = Sha256::new();
        hasher.update(SCHEMA.as_bytes());
        let files = std::iter::once(("default".to_owned(), DEFAULT_POLICIES.to_owned()))
            .chain(extra.iter().cloned());
        let mut sorted: Vec<(String, String)> = files.collect();
        sorted.sort();
        for (file, text) in &sorted {
            hasher.update((file.len() as u64).to_be_bytes());
            hasher.update(file.as_bytes());
            hasher.update((text.len() as u64).to_be_bytes());
            hasher.update(text.as_bytes());
            let parsed = PolicySet::from_str(text).map_err(|e| PolicyError::Parse {
                file: file.clone(),
                message: e.to_string(),
            })?;
            for (n, policy) in parsed.policies().enumerate() {
                let local = policy
                    .annotation("id")
                    .map_or_else(|| format!("{file}#{n}"), str::to_owned);
                let id = if file == "default" {
                    local
                } else {
                    format!("{file}:{local}")
                };
                policies
                    .add(policy.new_id(PolicyId::new(id)))
                    .map_err(|e| PolicyError::Duplicate {
                        file: file.clone(),
                        message: e.to_string(),
                    })?;
            }
        }
        let validation = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        if !validation.validation_passed() {
            let msgs: Vec<String> = validation
                .validation_errors()
                .map(|e| format!("- {e}"))
                .collect();
            return Err(PolicyError::Validation(msgs.join("\n")));
        }
        let read_action = EntityUid::from_str(r#"Action::"read""#)
            .map_err(|_| PolicyError::Entity("read".into()))?;
        let effect_action = EntityUid::from_str(r#"Action::"effect""#)
            .map_err(|_| PolicyError::Entity("effect".into()))?;
        Ok(Self {
            schema,
            policies,
            digest: hex::encode(hasher.finalize()),
            authorizer: Authorizer::new(),
            read_action,
            effect_action,
        })
    }

    /// Ids of the loaded policies.
    pub fn policy_ids(&self) -> impl Iterator<Item = String> + '_ {
        self.policies.policies().map(|p| p.id().to_string())
    }

    fn entity(type_name: &str, id: &str) -> Option<EntityUid> {
        let eid = cedar_policy::EntityId::new(id);
        let tn = cedar_policy::EntityTypeName::from_str(type_name).ok()?;
        Some(EntityUid::from_type_name_and_id(tn, eid))
    }

    fn evaluate(&self, req: &PolicyRequest) -> Result<PolicyDecision, String> {
        let action = match req.effect {
            EffectClass::Read => &self.read_action,
            EffectClass::Effect => &self.effect_action,
        };
        let principal = Self::entity("Caller", &req.caller).ok_or("caller id")?;
        let resource =
            Self::entity("Tool", &format!("{}__{}", req.upstream, req.tool)).ok_or("tool id")?;
        let unanchored: Vec<&str> = req
            .targets
            .iter()
            .filter(|t| !t.anchored)
            .map(|t| t.field.as_str())
            .collect();
        let labels: Vec<&str> = req.handles.iter().map(|h| h.label.as_str()).collect();
        let context = Context::from_json_value(
            json!({
                "upstream": req.upstream,
                "tool": req.tool,
                "known_tool": req.known_tool,
                "listing": req.listing,
                "destructive": req.destructive,
                "financial": req.financial,
                "granted": req.granted,
                "sink": req.sink.as_str(),
                "targets_declared": req.targets_declared,
                "target_count": i64::try_from(req.targets.len()).unwrap_or(i64::MAX),
                "all_targets_anchored": req.all_targets_anchored(),
                "unanchored_fields": unanchored,
                "handle_sink_violation": req.handle_sink_violation(),
                "handle_labels": labels,
            }),
            Some((&self.schema, action)),
        )
        .map_err(|e| e.to_string())?;
        let request = Request::new(
            principal,
            action.clone(),
            resource,
            context,
            Some(&self.schema),
        )
        .map_err(|e| e.to_string())?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &Entities::empty());
        let diagnostics = response.diagnostics();
        let errored = diagnostics.errors().next().is_some();
        let determining: Vec<PolicyId> = diagnostics.reason().cloned().collect();
        let ids: Vec<String> = determining.iter().map(ToString::to_string).collect();
        if errored && req.effect == EffectClass::Effect {
            return Ok(PolicyDecision::Deny {
                reason: ReasonCode::PolicyDeny,
                policies: ids,
            });
        }
        Ok(match response.decision() {
            Decision::Allow => {
                let confirm = determining.iter().any(|id| {
                    self.policies
                        .annotation(id, "confirm")
                        .is_some_and(|v| v == "true")
                });
                if confirm {
                    PolicyDecision::Confirm { policies: ids }
                } else {
                    PolicyDecision::Allow { policies: ids }
                }
            }
            Decision::Deny => {
                let reason = determining
                    .iter()
                    .find_map(|id| self.policies.annotation(id, "reason"))
                    .and_then(|r| serde_json::from_value::<ReasonCode>(json!(r)).ok())
                    .unwrap_or(ReasonCode::PolicyDeny);
                PolicyDecision::Deny {
                    reason,
                    policies: ids,
                }
            }
        })
    }
}

impl PolicyEngine for CedarPolicy {
    fn decide(&self, request: &PolicyRequest) -> PolicyDecision {
        self.evaluate(request).unwrap_or(PolicyDecision::Deny {
            reason: ReasonCode::PolicyDeny,
            policies: vec![],
        })
    }

    fn digest(&self) -> String {
        self.digest.clone()
    }
}

#[cfg(test)]
mod tests;
