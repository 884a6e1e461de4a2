//! Standing grants (issue 15 item 1; DESIGN.md §3 "Confirmation"): a trusted approver who
//! approves a pending action may let it stand for similar later calls of the same session.
//!
//! **Created** only by a trusted confirmer (the CLI, the operator API, the approvals page)
//! through [`approve_with_grant`], never by anything the runtime sends: no MCP method and no
//! session-token route reaches it. The grant is bound to the action's session and task digest,
//! its upstream and tool, and the approved call's canonical arguments.
//!
//! **Matching** ([`Gateway::standing_grant_for`]) happens at PREVIEW, only when the policy
//! asks for a confirmation, and a grant then stands in for the human — and for nothing else.
//! A later call is covered only if
//!
//! - it is in the same session, under the same task envelope digest, for the same upstream
//!   and tool;
//! - every target it has (the values of the tool's target fields, every identifier the
//!   detectors find, object ids of destructive, financial and egress tools, every handle it
//!   references), as a `(field, value)` pair compared exactly, is a target of the approved
//!   call, and it has at least one target if the approved call had any;
//! - every other argument — a role, a team, a user name, a flag, any field the gateway cannot
//!   tell the meaning of — equals the approved call's, except message text (a string under a
//!   name ending in `body`, `subject`, `text`, `message`, `content`, `comment`, … :
//!   `CONTENT_WORDS`) and, where the money rules below apply, amounts, currencies and object
//!   ids;
//! - for a financial tool (or a grant with an amount ceiling), every amount is a plain number
//!   at most the ceiling (the approver's, or else the largest amount of the approved call —
//!   never more than the human saw), in a currency the approved call named; a financial
//!   grant pays each object (an invoice id) at most once, the approved call's included;
//! - the grant is live (not expired, uses left, not revoked) and one use is taken atomically
//!   in the store.
//!
//! A grant never covers a call identical to one whose approval was denied in the session (the
//! same binding digest: a human's "no" stands), nor a confirmation asked for another reason
//! than the policy's: an effect
//! whose outcome was unknown before (`outcome_unknown_repeat`), a protected or unread object,
//! a handle that may not reach the sink. Every other check still applies before and after
//! it: policy denials, handle sinks, rate and pending limits, speculative contracts,
//! tool-definition pinning, and the executor's acceptance predicate at commit.
//!
//! **Audited**: creation (approver and terms), each use (the covered action and the grant;
//! the decision record names the grant as its confirmation) and revocation (who).

use super::{Gateway, GatewayError, Prepared, amounts, audit_session_id, decide_approval};
use crate::catalog::ToolEntry;
use secureclaw_core::anchor::{
    collect_targets_bounded, is_object_id_field, name_words, object_id_targets,
};
use secureclaw_core::artifact::ActionId;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::canonical::CanonicalRequest;
use secureclaw_core::handle::find_handles;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::policy::{EffectClass, PolicyRequest, Provenance};
use secureclaw_core::store::{ApprovalRecord, SessionRecord, StandingGrant, Store};
use secureclaw_core::time::UnixMillis;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// The longest a standing grant may last: 24 hours, in milliseconds.
pub const MAX_GRANT_MS: u64 = 24 * 60 * 60 * 1000;

/// The most uses a standing grant may allow.
pub const MAX_GRANT_USES: u64 = 1000;

/// What a trusted approver allows beyond the approved call itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrantTerms {
    /// How long the grant lasts, in milliseconds (at most [`MAX_GRANT_MS`]); `None`: until
    /// its uses are taken, but never longer than [`MAX_GRANT_MS`].
    pub allow_for_ms: Option<u64>,
    /// Most calls it covers (1..=[`MAX_GRANT_USES`]); `None`: any number until it expires.
    pub uses: Option<u64>,
    /// An amount ceiling in minor units (hundredths) for financial tools; `None`: the
    /// approved call's own amounts.
    pub max_amount: Option<u64>,
}

/// Terms that cannot make a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantTermsError {
    /// Neither a time limit nor a number of uses.
    #[error("a grant needs a time limit or a number of uses (or both)")]
    Unbounded,
    /// A time limit of zero or above [`MAX_GRANT_MS`].
    #[error("a grant lasts between 1 second and 24 hours, not `{0}`")]
    Duration(String),
    /// Zero uses or more than [`MAX_GRANT_USES`].
    #[error("a grant allows between 1 and 1000 uses, not `{0}`")]
    Uses(String),
    /// A duration that does not parse.
    #[error("`{0}` is not a duration (write e.g. `90s`, `30m`, `2h`)")]
    Unparsed(String),
}

impl GrantTerms {
    /// The terms if they make a grant: at least one of a time limit or a number of uses, the
    /// time limit at most 24 hours and at least a second, the uses 1..=1000.
    ///
    /// # Errors
    /// [`GrantTermsError`] naming what is wrong.
    pub fn validate(self) -> Result<Self, GrantTermsError> {
        if self.allow_for_ms.is_none() && self.uses.is_none() {
            return Err(GrantTermsError::Unbounded);
        }
        if let Some(ms) = self.allow_for_ms
            && !(1000..=MAX_GRANT_MS).contains(&ms)
        {
            return Err(GrantTermsError::Duration(format!("{ms}ms")));
        }
        if let Some(n) = self.uses
            && !(1..=MAX_GRANT_USES).contains(&n)
        {
            return Err(GrantTermsError::Uses(n.to_string()));
        }
        Ok(self)
    }
}

/// A duration as written by an approver: a whole number followed by `s`, `m` or `h`
/// (`90s`, `30m`, `2h`), or a bare number of minutes; returned in milliseconds.
///
/// # Errors
/// [`GrantTermsError::Unparsed`] for anything else (including overflow).
pub fn parse_duration(text: &str) -> Result<u64, GrantTermsError> {
    let t = text.trim();
    let bad = || GrantTermsError::Unparsed(text.to_owned());
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (t.get(..i).ok_or_else(bad)?, t.get(i..).ok_or_else(bad)?),
        None => (t, "m"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ms = match unit {
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms).ok_or_else(bad)
}

/// A standing grant as an approver sees it: the session named as in the audit log, never by
/// its id (the runtime's bearer credential).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantView {
    /// The grant id.
    pub id: String,
    /// The session as the audit log names it ([`audit_session_id`]).
    pub session: String,
    /// The tool.
    pub tool: String,
    /// The upstream.
    pub upstream: String,
    /// The approved action the grant came from.
    pub action_id: String,
    /// The approved call as the approver saw it (handles unrevealed).
    pub call: String,
    /// The approver's amount ceiling in minor units, if any.
    pub max_amount: Option<u64>,
    /// Who created it.
    pub created_by: String,
    /// When (Unix milliseconds).
    pub created_at: u64,
    /// When it expires (Unix milliseconds, exclusive).
    pub expires_at: u64,
    /// Most uses, if limited.
    pub max_uses: Option<u64>,
    /// Uses taken.
    pub used: u64,
    /// Who revoked it, if anyone.
    pub revoked_by: Option<String>,
    /// `live`, `expired`, `used_up` or `revoked` at the time of listing.
    pub state: &'static str,
}

impl GrantView {
    /// The view of `g` at `now`.
    #[must_use]
    pub fn of(g: &StandingGrant, now: UnixMillis) -> Self {
        let state = if g.revoked_at.is_some() {
            "revoked"
        } else if now >= g.expires_at {
            "expired"
        } else if !g.live(now) {
            "used_up"
        } else {
            "live"
        };
        Self {
            id: g.id.clone(),
            session: audit_session_id(&g.session),
            tool: g.tool.clone(),
            upstream: g.upstream.clone(),
            action_id: g.action_id.0.clone(),
            call: g.display.clone(),
            max_amount: g.max_amount,
            created_by: g.created_by.clone(),
            created_at: g.created_at.0,
            expires_at: g.expires_at.0,
            max_uses: g.max_uses,
            used: g.used,
            revoked_by: g.revoked_by.clone(),
            state,
        }
    }
}

fn new_grant_id() -> String {
    let mut b = [0u8; 16];
    super::fill_random(&mut b);
    format!("grant-{}", hex::encode(b))
}

fn store_err(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Store(e.to_string())
}

/// A trusted confirmer approves pending action `action_id` ([`decide_approval`]: it runs once
/// when the runtime re-issues it) and creates a standing grant for similar calls of the same
/// session on `terms` ([module docs](self)). The terms are checked before anything is decided;
/// the grant is created after the approval, audited with `confirmer`.
///
/// # Errors
/// [`GatewayError::Config`] for terms that make no grant ([`GrantTerms::validate`]);
/// as [`decide_approval`]; [`GatewayError::Store`] if the grant cannot be stored (the
/// approval then stands, for this one call only).
pub async fn approve_with_grant(
    keys: &KeyRing,
    store: &dyn Store,
    now: UnixMillis,
    confirmation_ttl_ms: u64,
    action_id: &ActionId,
    confirmer: &str,
    terms: GrantTerms,
) -> Result<(ApprovalRecord, StandingGrant), GatewayError> {
    let terms = terms
        .validate()
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let action = store
        .action(action_id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(action_id.0.clone()))?;
    let request: CanonicalRequest = serde_json::from_str(&action.request_json)
        .map_err(|_| GatewayError::Conflict(format!("action `{action_id}` cannot make a grant")))?;
    let arguments_json =
        serde_json_canonicalizer::to_string(&Value::Object(request.inputs.arguments.clone()))
            .map_err(|_| {
                GatewayError::Conflict(format!("action `{action_id}` cannot make a grant"))
            })?;
    let record = decide_approval(
        keys,
        store,
        now,
        confirmation_ttl_ms,
        action_id,
        true,
        confirmer,
    )
    .await?;
    let grant = StandingGrant {
        id: new_grant_id(),
        session: action.session.clone(),
        task_digest: request.ctx.task_digest.clone(),
        upstream: request.intent.upstream.clone(),
        tool: action.tool.clone(),
        action_id: action_id.clone(),
        arguments_json,
        display: action.display.clone(),
        max_amount: terms.max_amount,
        created_by: confirmer.to_owned(),
        created_at: now,
        expires_at: now.plus_millis(terms.allow_for_ms.unwrap_or(MAX_GRANT_MS)),
        max_uses: terms.uses,
        used: 0,
        revoked_by: None,
        revoked_at: None,
    };
    store.create_grant(&grant).await.map_err(store_err)?;
    let mut ev = AuditEvent::new(AuditKind::Grant, now);
    ev.session = Some(audit_session_id(&action.session));
    ev.caller = Some(action.caller.clone());
    ev.tool = Some(action.tool.clone());
    ev.action_id = Some(action_id.0.clone());
    ev.detail = json!({"event": "created", "grant": grant.id, "by": confirmer,
        "expires_at": grant.expires_at, "max_uses": grant.max_uses,
        "max_amount": grant.max_amount});
    store.append_audit(ev).await.map_err(store_err)?;
    Ok((record, grant))
}

/// The standing grants of `store` as an approver sees them, oldest first: live ones only, or
/// (`all`) every one with its state.
///
/// # Errors
/// [`GatewayError::Store`].
pub async fn list_grants(
    store: &dyn Store,
    all: bool,
    now: UnixMillis,
) -> Result<Vec<GrantView>, GatewayError> {
    let grants = store
        .list_grants((!all).then_some(now))
        .await
        .map_err(store_err)?;
    Ok(grants.iter().map(|g| GrantView::of(g, now)).collect())
}

/// Revoke grant `id` by `by` (a trusted operator), audited; revoking a revoked grant changes
/// nothing and is not audited again.
///
/// # Errors
/// [`GatewayError::NotFound`] for an unknown id; [`GatewayError::Store`].
pub async fn revoke_grant(
    store: &dyn Store,
    id: &str,
    by: &str,
    now: UnixMillis,
) -> Result<GrantView, GatewayError> {
    let before = store
        .grant(id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(id.to_owned()))?;
    let after = store
        .revoke_grant(id, by, now)
        .await
        .map_err(store_err)?
        .ok_or_else(|| GatewayError::NotFound(id.to_owned()))?;
    if before.revoked_at.is_none() {
        let mut ev = AuditEvent::new(AuditKind::Grant, now);
        ev.session = Some(audit_session_id(&after.session));
        ev.tool = Some(after.tool.clone());
        ev.action_id = Some(after.action_id.0.clone());
        ev.detail = json!({"event": "revoked", "grant": after.id, "by": by});
        store.append_audit(ev).await.map_err(store_err)?;
    }
    Ok(GrantView::of(&after, now))
}

/// The `(field, value)` targets of a call for grant matching (see the [module docs](self));
/// `None` if there are too many to collect (then nothing matches).
fn grant_targets(
    entry: &ToolEntry,
    arguments: &Map<String, Value>,
    limit: usize,
) -> Option<BTreeSet<(String, String)>> {
    let mut found = if entry.targets_declared && entry.targets.is_empty() {
        Vec::new()
    } else {
        collect_targets_bounded(arguments, &entry.targets, entry.egress_targets, limit).ok()?
    };
    if objects_are_targets(entry) {
        found.extend(object_id_targets(arguments, &[]));
    }
    let mut set: BTreeSet<(String, String)> =
        found.into_iter().map(|t| (t.field, t.value)).collect();
    for (path, id) in find_handles(&Value::Object(arguments.clone())) {
        let field = path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        set.insert((format!("{field} (handle)"), id.0));
    }
    Some(set)
}

/// The last words of argument names that hold message text a standing grant lets change:
/// the body of a message, its subject, a comment. Matched against the last word of the name
/// ([`name_words`]: `email_body`, `htmlBody`, `subject`), only when the value is a string or
/// a list of strings; anything else under such a name is compared like any other argument.
const CONTENT_WORDS: &[&str] = &[
    "body",
    "text",
    "message",
    "msg",
    "content",
    "contents",
    "subject",
    "title",
    "description",
    "comment",
    "comments",
    "note",
    "notes",
    "summary",
    "html",
    "markdown",
    "caption",
];

/// Whether a value is text (a string, or a list of strings).
fn is_text(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Array(items) => items.iter().all(|i| matches!(i, Value::String(_))),
        _ => false,
    }
}

/// The arguments a standing grant holds fixed: `arguments` without message text
/// ([`CONTENT_WORDS`]), without the tool's target fields (checked as a set, see
/// [`grant_targets`]), without object ids when they are targets (`objects_are_targets`), and
/// without amounts, currencies and object ids when the money rules apply (`money`), at any
/// depth. What remains — a role, a team, a user name, a flag, a path, any field the gateway
/// cannot tell the meaning of — must equal the approved call's (red-team F2 of 2026-12-04: a
/// grant to add `bob` to team `docs` as `member` added `mallory` to `admins` as `owner`).
fn fixed_arguments(
    entry: &ToolEntry,
    arguments: &Map<String, Value>,
    money: bool,
    objects_are_targets: bool,
) -> Value {
    fn keep(
        entry: &ToolEntry,
        map: &Map<String, Value>,
        money: bool,
        objects: bool,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, v) in map {
            let content = name_words(k)
                .last()
                .is_some_and(|w| CONTENT_WORDS.contains(&w.to_ascii_lowercase().as_str()))
                && is_text(v);
            let target = entry.targets.iter().any(|t| t.eq_ignore_ascii_case(k));
            let object = is_object_id_field(k) && (objects || money);
            if content || target || object || (money && amounts::is_money_field(k)) {
                continue;
            }
            let v = match v {
                Value::Object(inner) => Value::Object(keep(entry, inner, money, objects)),
                Value::Array(items) => Value::Array(
                    items
                        .iter()
                        .map(|i| match i {
                            Value::Object(inner) => {
                                Value::Object(keep(entry, inner, money, objects))
                            }
                            other => other.clone(),
                        })
                        .collect(),
                ),
                other => other.clone(),
            };
            out.insert(k.clone(), v);
        }
        out
    }
    Value::Object(keep(entry, arguments, money, objects_are_targets))
}

/// Whether `entry`'s object ids are grant targets ([`grant_targets`]).
fn objects_are_targets(entry: &ToolEntry) -> bool {
    entry.destructive
        || entry.financial
        || (entry.effect == EffectClass::Effect && entry.egress_targets)
}

/// Whether the amounts of `arguments` are within the grant's ceiling (`max_amount`, or the
/// largest amount of `approved`) and in currencies `approved` named.
/// Whether `arguments` carry an amount (a field named like an amount) or a currency: a call
/// about money, whatever the tool's rule says. Object ids alone do not make one (a grant to
/// update ticket T-1 again is what the approver allowed).
fn carries_money(entry: &ToolEntry, arguments: &Map<String, Value>) -> bool {
    !amounts::financial_amounts(arguments, &entry.targets).is_empty()
        || !amounts::argument_currencies(arguments).is_empty()
}

fn amounts_covered(
    entry: &ToolEntry,
    grant: &StandingGrant,
    approved: &Map<String, Value>,
    arguments: &Map<String, Value>,
) -> bool {
    let found = amounts::financial_amounts(arguments, &entry.targets);
    if found.is_empty() {
        return true;
    }
    let ceiling = match grant.max_amount {
        Some(max) => Some(max as f64),
        None => {
            let seen = amounts::financial_amounts(approved, &entry.targets);
            seen.iter()
                .map(amounts::Amount::minor_units)
                .try_fold(0.0_f64, |acc, v| v.map(|v| acc.max(v)))
        }
    };
    let Some(ceiling) = ceiling else {
        return false;
    };
    let currencies = amounts::argument_currencies(arguments);
    let allowed = amounts::argument_currencies(approved);
    currencies.iter().all(|c| allowed.contains(c))
        && found.iter().all(|a| {
            a.minor_units()
                .is_some_and(|v| (0.0..=ceiling).contains(&v))
        })
}

impl Gateway {
    /// [`approve_with_grant`] on this gateway's store, clock and confirmation lifetime.
    ///
    /// # Errors
    /// As [`approve_with_grant`].
    pub async fn approve_with_grant(
        &self,
        action_id: &ActionId,
        confirmer: &str,
        terms: GrantTerms,
    ) -> Result<(ApprovalRecord, StandingGrant), GatewayError> {
        approve_with_grant(
            &self.inner.keys,
            self.inner.store.as_ref(),
            self.now(),
            self.inner.config.limits.confirmation_ttl_ms,
            action_id,
            confirmer,
            terms,
        )
        .await
    }

    /// [`list_grants`] on this gateway's store.
    ///
    /// # Errors
    /// [`GatewayError::Store`].
    pub async fn grants(&self, all: bool) -> Result<Vec<GrantView>, GatewayError> {
        list_grants(self.inner.store.as_ref(), all, self.now()).await
    }

    /// [`revoke_grant`] on this gateway's store.
    ///
    /// # Errors
    /// As [`revoke_grant`].
    pub async fn revoke_grant(&self, id: &str, by: &str) -> Result<GrantView, GatewayError> {
        revoke_grant(self.inner.store.as_ref(), id, by, self.now()).await
    }

    /// A financial grant pays each object (an invoice id, any `*_id` the call pays) at most
    /// once, the approved call's included: the approved call's objects are marked first
    /// (marked already: no change), then each object of `arguments` must be new. Counted in
    /// the store like the task grants' object uses; `false` on a repeat or a store failure.
    /// (Payments naming only a payee may repeat, within the grant's uses and ceiling: the
    /// approver allowed that many.)
    async fn objects_once(
        &self,
        session: &SessionRecord,
        grant: &str,
        approved: &Map<String, Value>,
        arguments: &Map<String, Value>,
    ) -> bool {
        let key = |o: &str| format!("standing:{grant}\u{1f}objects\u{1f}{o}");
        for o in amounts::payment_objects(approved) {
            let _ = self.take_grant(session, &key(&o), 1).await;
        }
        for o in amounts::payment_objects(arguments) {
            if !self.take_grant(session, &key(&o), 1).await {
                return false;
            }
        }
        true
    }

    /// The live standing grant of `session` that covers this prepared call, with one of its
    /// uses taken ([module docs](self)), if any; its id. Called only when the policy asks for
    /// a confirmation and for no other reason (`repeat`: an earlier effect's outcome is
    /// unknown). Any store failure covers nothing (a human decides).
    pub(super) async fn standing_grant_for(
        &self,
        session: &SessionRecord,
        prepared: &Prepared,
        policy_request: &PolicyRequest,
        repeat: bool,
    ) -> Option<String> {
        let entry = &prepared.entry;
        if repeat
            || entry.effect != EffectClass::Effect
            || policy_request.handle_sink_violation()
            || prepared.names_protected
            || prepared.protection_unknown
            || policy_request.targets.iter().any(|t| {
                matches!(
                    t.provenance,
                    Provenance::ProtectedObject | Provenance::UnreadObject
                )
            })
        {
            return None;
        }
        let now = self.now();
        let grants = match self
            .inner
            .store
            .session_grants(&session.id, &entry.exposed, now)
            .await
        {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, "looking up standing grants failed; the call needs a human");
                return None;
            }
        };
        if grants.is_empty() {
            return None;
        }
        // A call a human (or the timeout) refused in this session is never covered: a grant
        // approved later for a similar call does not overturn that "no" (new-user trial of
        // 2026-12-04: a denied "please wire 50k" e-mail ran under a grant for "lunch?").
        let binding = secureclaw_core::binding::bind(&self.inner.keys, &prepared.request).ok()?;
        match self.inner.store.denied_binding(&session.id, &binding).await {
            Ok(false) => {}
            Ok(true) => return None,
            Err(e) => {
                tracing::error!(error = %e, "looking up denied calls failed; the call needs a human");
                return None;
            }
        }
        let arguments = &prepared.request.inputs.arguments;
        let limit = self.inner.config.limits.max_targets_per_call;
        let targets = grant_targets(entry, arguments, limit)?;
        for grant in grants {
            if grant.session != session.id
                || grant.tool != entry.exposed
                || grant.upstream != entry.upstream
                || grant.task_digest != prepared.request.ctx.task_digest
                || grant.task_digest != session.envelope.digest()
            {
                continue;
            }
            let Ok(Value::Object(approved)) = serde_json::from_str::<Value>(&grant.arguments_json)
            else {
                continue;
            };
            let Some(granted) = grant_targets(entry, &approved, limit) else {
                continue;
            };
            if !targets.is_subset(&granted) || (targets.is_empty() && !granted.is_empty()) {
                continue;
            }
            // Money rules whenever money is in the call, whether or not the operator marked
            // the tool `financial` (red-team F1: a grant on an unmarked `pay_invoice` paid
            // the same invoice again, and for 90 million): no amount above the approved one
            // (or the ceiling), no other currency, no payment object paid twice.
            let money = entry.financial
                || grant.max_amount.is_some()
                || carries_money(entry, &approved)
                || carries_money(entry, arguments);
            if money && !amounts_covered(entry, &grant, &approved, arguments) {
                continue;
            }
            // Everything that is not message text, a target or money must be what the approver
            // saw (a role, a team, a user, a flag): a grant lets the message change, and the
            // targets only within the approved ones.
            let objects = objects_are_targets(entry);
            if fixed_arguments(entry, arguments, money, objects)
                != fixed_arguments(entry, &approved, money, objects)
            {
                continue;
            }
            if money
                && !self
                    .objects_once(session, &grant.id, &approved, arguments)
                    .await
            {
                continue;
            }
            match self
                .inner
                .store
                .take_standing_grant_use(&grant.id, now)
                .await
            {
                Ok(true) => return Some(grant.id),
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "taking a standing grant use failed; the call needs a human");
                    return None;
                }
            }
        }
        None
    }
}
