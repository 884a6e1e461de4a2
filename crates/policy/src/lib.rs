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
//! start-up, and so is an `@confirm` other than `"true"`/`"false"` or an `@reason` that is
//! not a reason code (before, an unknown reason silently became `policy_deny`).
//!
//! The decision path does no parsing (issue 14 item 4): entity type and action names are
//! parsed once at load, the `@confirm`/`@reason` annotations are read once into a table, and
//! the context is built from typed values ([`RestrictedExpression`]s) rather than from JSON.
//! The request is still validated against the schema on every call, so a context that drifts
//! from `schema.cedarschema` is an error (and for an effect a deny), never a silent allow.

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, RestrictedExpression, Schema, ValidationMode, Validator,
};
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyEngine, PolicyRequest};
use secureclaw_core::recovery::ReasonCode;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
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
    /// An `@confirm` or `@reason` annotation has a value the gateway does not understand.
    #[error("policy `{policy}`: {message}")]
    Annotation {
        /// The policy id (file-prefixed for operator files).
        policy: String,
        /// What is wrong and what is accepted.
        message: String,
    },
}

/// Every error of a failed parse, each with the line and column (1-based) of its first
/// source span and Cedar's help, joined by `; ` (Cedar's `Display` shows only the first
/// error and no position).
fn parse_message(text: &str, errors: &cedar_policy::ParseErrors) -> String {
    use miette::Diagnostic;
    let mut out = Vec::new();
    for err in errors.iter() {
        let mut message = err.to_string();
        if let Some(label) = err.labels().and_then(|mut labels| labels.next()) {
            let before = text.get(..label.offset()).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit_once('\n')
                .map_or(before, |(_, tail)| tail)
                .chars()
                .count()
                + 1;
            message = format!("line {line}, column {column}: {message}");
        }
        if let Some(help) = err.help() {
            message.push_str(&format!(" (help: {help})"));
        }
        out.push(message);
    }
    out.join("; ")
}

/// What a policy's annotations ask of a decision it determines, read once at load.
#[derive(Debug, Clone, Copy, Default)]
struct Annotations {
    /// `@confirm("true")`: an allow needs a trusted confirmation.
    confirm: bool,
    /// `@reason("…")`: the reason code of a deny.
    reason: Option<ReasonCode>,
}

impl Annotations {
    fn read(policies: &PolicySet, id: &PolicyId) -> Result<Self, PolicyError> {
        let bad = |message: String| PolicyError::Annotation {
            policy: id.to_string(),
            message,
        };
        let confirm = match policies.annotation(id, "confirm") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(bad(format!(
                    "@confirm(\"{other}\") is neither \"true\" nor \"false\""
                )));
            }
        };
        let reason = match policies.annotation(id, "reason") {
            None => None,
            Some(r) => Some(
                serde_json::from_value::<ReasonCode>(json!(r))
                    .map_err(|_| bad(format!("@reason(\"{r}\") is not a reason code")))?,
            ),
        };
        Ok(Self { confirm, reason })
    }
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
    caller_type: EntityTypeName,
    tool_type: EntityTypeName,
    annotations: HashMap<PolicyId, Annotations>,
}

impl CedarPolicy {
    /// The default policy set plus operator files `(name, text)`.
    ///
    /// Policy ids come from each policy's `@id` annotation (else `<file>#<n>`), prefixed by the
    /// file name for operator files, so decisions name where a policy lives.
    ///
    /// # Errors
    /// [`PolicyError`] for unparsable files, duplicate ids, a set that fails strict
    /// validation, or an `@confirm`/`@reason` value the gateway does not understand.
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
                message: parse_message(text, &e),
            })?;
            for (n, policy) in parsed.policies().enumerate() {
                let local = policy
                    .annotation("id")
                    .map_or_else(|| format!("{file}#{n}"), str::to_owned);
                let id = if file == "default" {
                    local.clone()
                } else {
                    format!("{file}:{local}")
                };
                if policies.policy(&PolicyId::new(&id)).is_some() {
                    return Err(PolicyError::Duplicate {
                        file: file.clone(),
                        message: format!(
                            "policy id `{local}` is used twice (policy {} of the file); every @id must be unique",
                            n + 1
                        ),
                    });
                }
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
        let caller_type =
            EntityTypeName::from_str("Caller").map_err(|_| PolicyError::Entity("Caller".into()))?;
        let tool_type =
            EntityTypeName::from_str("Tool").map_err(|_| PolicyError::Entity("Tool".into()))?;
        let annotations = policies
            .policies()
            .map(|p| Ok((p.id().clone(), Annotations::read(&policies, p.id())?)))
            .collect::<Result<_, PolicyError>>()?;
        Ok(Self {
            schema,
            policies,
            digest: hex::encode(hasher.finalize()),
            authorizer: Authorizer::new(),
            read_action,
            effect_action,
            caller_type,
            tool_type,
            annotations,
        })
    }

    /// Ids of the loaded policies.
    pub fn policy_ids(&self) -> impl Iterator<Item = String> + '_ {
        self.policies.policies().map(|p| p.id().to_string())
    }

    /// The Cedar context of the schema's `context` record, built from typed values.
    fn context(req: &PolicyRequest) -> Result<Context, String> {
        let string = |s: &str| RestrictedExpression::new_string(s.to_owned());
        let strings =
            |items: Vec<&str>| RestrictedExpression::new_set(items.into_iter().map(&string));
        let unanchored: Vec<&str> = req
            .targets
            .iter()
            .filter(|t| !t.anchored)
            .map(|t| t.field.as_str())
            .collect();
        let labels: Vec<&str> = req.handles.iter().map(|h| h.label.as_str()).collect();
        let pairs = [
            ("upstream", string(&req.upstream)),
            ("tool", string(&req.tool)),
            ("known_tool", RestrictedExpression::new_bool(req.known_tool)),
            ("listing", RestrictedExpression::new_bool(req.listing)),
            (
                "destructive",
                RestrictedExpression::new_bool(req.destructive),
            ),
            ("financial", RestrictedExpression::new_bool(req.financial)),
            ("granted", RestrictedExpression::new_bool(req.granted)),
            ("sink", string(req.sink.as_str())),
            (
                "targets_declared",
                RestrictedExpression::new_bool(req.targets_declared),
            ),
            (
                "target_count",
                RestrictedExpression::new_long(
                    i64::try_from(req.targets.len()).unwrap_or(i64::MAX),
                ),
            ),
            (
                "all_targets_anchored",
                RestrictedExpression::new_bool(req.all_targets_anchored()),
            ),
            ("unanchored_fields", strings(unanchored)),
            (
                "handle_sink_violation",
                RestrictedExpression::new_bool(req.handle_sink_violation()),
            ),
            ("handle_labels", strings(labels)),
        ];
        Context::from_pairs(pairs.map(|(k, v)| (k.to_owned(), v))).map_err(|e| e.to_string())
    }

    fn evaluate(&self, req: &PolicyRequest) -> Result<PolicyDecision, String> {
        let action = match req.effect {
            EffectClass::Read => &self.read_action,
            EffectClass::Effect => &self.effect_action,
        };
        let principal =
            EntityUid::from_type_name_and_id(self.caller_type.clone(), EntityId::new(&req.caller));
        let resource = EntityUid::from_type_name_and_id(
            self.tool_type.clone(),
            EntityId::new(format!("{}__{}", req.upstream, req.tool)),
        );
        let context = Self::context(req)?;
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
        let mut annotations = determining
            .iter()
            .filter_map(|id| self.annotations.get(id))
            .copied();
        Ok(match response.decision() {
            Decision::Allow => {
                if annotations.clone().any(|a| a.confirm) {
                    PolicyDecision::Confirm { policies: ids }
                } else {
                    PolicyDecision::Allow { policies: ids }
                }
            }
            Decision::Deny => PolicyDecision::Deny {
                reason: annotations
                    .find_map(|a| a.reason)
                    .unwrap_or(ReasonCode::PolicyDeny),
                policies: ids,
            },
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
