//! Targets and anchoring (SecureClaw paper §3.4 "anchored targets"; DESIGN.md §3 "Targets,
//! anchoring and provenance"): validating a call's arguments into the canonical request and
//! its policy facts, collecting every target with its anchoring and provenance, deciding
//! whether a read is anchored, and the task's grants with their use counts and amount checks
//! (red-team F4, F11, M2, R4, R5).

use super::{Gateway, Prepared, amounts, state::ObjectMark};
use crate::catalog::ToolEntry;
use secureclaw_core::anchor::{
    anchor_provenance_in, collect_targets_bounded, is_anchored, object_id_targets,
};
use secureclaw_core::canonical::{
    CanonicalRequest, HandleBinding, Inputs, Intent, RequestContext, validate_value,
};
use secureclaw_core::detect::IdentifierKind;
use secureclaw_core::handle::{HandleId, HandleRecord, Sink, SinkKind, find_handles};
use secureclaw_core::policy::{EffectClass, HandleFact, PolicyRequest, Provenance, TargetFact};
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::store::SessionRecord;
use serde_json::{Map, Value};

/// Arguments up to this many bytes (serialized) have their targets collected on the calling
/// task rather than on a blocking thread (see [`Gateway::prepare`]).
const INLINE_TARGET_BYTES: usize = 8 * 1024;
use std::collections::BTreeMap;

/// The store's use counter for a session's unanchored searches (beside the task's grants; a
/// grant pattern holds no spaces or parentheses in practice, and a collision would only share
/// a count).
const MATCH_READS_KEY: &str = "(unanchored match reads)";

/// Anchoring and provenance of a target carried by a handle: only a handle from an
/// authoritative field of an anchored read anchors.
fn handle_provenance(record: Option<&HandleRecord>) -> (bool, Provenance) {
    match record {
        Some(r) if r.anchored => (
            true,
            Provenance::AuthoritativeField {
                source: r.source.clone(),
            },
        ),
        Some(r) => (
            false,
            Provenance::FreeText {
                source: r.source.clone(),
            },
        ),
        None => (false, Provenance::Literal),
    }
}

impl Gateway {
    /// Validate arguments and build the canonical request and policy facts.
    pub(super) async fn prepare(
        &self,
        session: &SessionRecord,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<(Prepared, PolicyRequest), ReasonCode> {
        let entry = self
            .inner
            .catalog
            .get(tool)
            .ok_or(ReasonCode::UnknownTool)?
            .clone();
        if self.quarantined(&entry).await {
            return Err(ReasonCode::ToolDefinitionChanged);
        }
        let size = super::limits::serialized_len(arguments);
        if size > self.inner.config.limits.max_argument_bytes {
            return Err(ReasonCode::InvalidArguments);
        }
        let value = Value::Object(arguments.clone());
        validate_value(&value).map_err(|_| ReasonCode::InvalidArguments)?;
        let now = self.now();
        let sink = Sink {
            upstream: &entry.upstream,
            tool: &entry.name,
            kind: entry.sink,
        };
        // Handles referenced anywhere in the arguments.
        let mut records: BTreeMap<HandleId, HandleRecord> = BTreeMap::new();
        for (_, id) in find_handles(&value) {
            if records.contains_key(&id) {
                continue;
            }
            let rec = self
                .inner
                .store
                .handle(&id)
                .await
                .map_err(|_| ReasonCode::StoreUnavailable)?;
            let rec = rec.ok_or(ReasonCode::HandleUnavailable)?;
            rec.usable(&session.caller, &session.id, now)
                .map_err(|_| ReasonCode::HandleUnavailable)?;
            records.insert(id, rec);
        }
        let handles: Vec<HandleFact> = records
            .values()
            .map(|r| HandleFact {
                label: r.label.clone(),
                sensitivity: r.sensitivity,
                sink_allowed: r.sink_allowed(&sink),
            })
            .collect();
        // Target collection runs the detectors over every argument: linear, bounded by
        // `max_targets_per_call`, and off the async workers so a large call cannot stall other
        // sessions (red-team F13). Arguments of at most `INLINE_TARGET_BYTES` serialized are
        // scanned in place: the hand-off to a blocking thread and back cost more than such a
        // scan (issue 14, BENCHMARKS.md §12), and a scan that small cannot stall anything.
        let found = if entry.targets_declared && entry.targets.is_empty() {
            Vec::new()
        } else if size <= INLINE_TARGET_BYTES {
            collect_targets_bounded(
                arguments,
                &entry.targets,
                entry.egress_targets,
                self.inner.config.limits.max_targets_per_call,
            )
            .map_err(|_| ReasonCode::TooManyTargets)?
        } else {
            let (args, fields) = (arguments.clone(), entry.targets.clone());
            let egress = entry.egress_targets;
            let limit = self.inner.config.limits.max_targets_per_call;
            tokio::task::spawn_blocking(move || {
                collect_targets_bounded(&args, &fields, egress, limit)
            })
            .await
            .map_err(|_| ReasonCode::Internal)?
            .map_err(|_| ReasonCode::TooManyTargets)?
        };
        let mut targets = self
            .directory_anchored(
                session,
                &entry,
                self.targets(session, &entry, arguments, found, &records),
                &records,
            )
            .await;
        let mut names_protected = false;
        let mut protection_unknown = false;
        if entry.effect == EffectClass::Effect && entry.sink == SinkKind::Store {
            // A content-matching effect names its object by its id fields too (F10).
            let named = self
                .object_identifiers(&entry, entry.matches_content, arguments, &records)
                .await;
            // A content-matching effect whose object the gateway cannot identify can be
            // neither seen nor protected: it waits (fail closed; red-team F10).
            if named.is_empty() && entry.matches_content {
                targets.push(TargetFact {
                    field: "(unidentified object)".into(),
                    anchored: false,
                    via_handle: false,
                    provenance: Provenance::UnreadObject,
                });
            }
            for (field, values) in named {
                // A failed lookup is held like a protected object (fail closed: the call needs
                // a human), but it does not make the objects protected: a transient store
                // error must not protect a session's objects for good.
                let held = match self
                    .marked(ObjectMark::Protected, session, &entry.upstream, &values)
                    .await
                {
                    Ok(true) => {
                        names_protected = true;
                        true
                    }
                    Ok(false) => false,
                    Err(()) => {
                        protection_unknown = true;
                        true
                    }
                };
                if held && !entry.allow_protected_objects {
                    targets.push(TargetFact {
                        field,
                        anchored: false,
                        via_handle: values.len() > 1,
                        provenance: Provenance::ProtectedObject,
                    });
                    continue;
                }
                // A content-matching effect (an edit with old text, a dry run) on an object
                // the session has not read would answer questions about content it was never
                // shown: it waits until the session reads the object, or for a human. A
                // failed lookup holds it the same way (fail closed).
                if !held
                    && entry.matches_content
                    && !self
                        .marked(ObjectMark::Seen, session, &entry.upstream, &values)
                        .await
                        .unwrap_or(false)
                {
                    targets.push(TargetFact {
                        field,
                        anchored: false,
                        via_handle: values.len() > 1,
                        provenance: Provenance::UnreadObject,
                    });
                }
            }
        }
        let qualified = format!("{}__{}", entry.upstream, entry.name);
        let (grant, grant_withheld) = self.grant_for(session, &entry, &qualified, arguments).await;
        let granted = grant.is_some() && grant_withheld.is_none();
        let policy_request = PolicyRequest {
            caller: session.caller.clone(),
            upstream: entry.upstream.clone(),
            tool: entry.name.clone(),
            effect: entry.effect,
            known_tool: true,
            destructive: entry.destructive,
            financial: entry.financial,
            granted,
            sink: entry.sink,
            targets_declared: entry.targets_declared,
            targets,
            handles,
            listing: false,
        };
        let request = CanonicalRequest {
            intent: Intent {
                upstream: entry.upstream.clone(),
                tool: entry.name.clone(),
            },
            caller: session.caller.clone(),
            session: session.id.clone(),
            inputs: Inputs {
                arguments: arguments.clone(),
                handles: records
                    .values()
                    .map(|r| HandleBinding {
                        handle: r.id.0.clone(),
                        object_id: r.object_id.clone(),
                        version: r.version,
                    })
                    .collect(),
            },
            ctx: RequestContext {
                destination: self
                    .inner
                    .executor
                    .destination(&entry.upstream)
                    .unwrap_or_default()
                    .to_owned(),
                task_digest: session.envelope.digest(),
                policy_digest: self.inner.policy.digest(),
            },
        };
        Ok((
            Prepared {
                entry,
                request,
                handle_records: records.into_values().collect(),
                names_protected,
                protection_unknown,
                grant,
                grant_withheld,
            },
            policy_request,
        ))
    }

    /// Every target of a call with its anchoring and provenance (DESIGN.md §3 "Targets,
    /// anchoring and provenance"): the strings in the tool's target fields, every identifier
    /// found anywhere in the arguments (values and keys), numbers in account-like fields,
    /// object references sent by an `egress` tool, and every handle whose label is an
    /// identifier kind wherever it appears — except for a tool the operator declared
    /// target-less (`targets = []`). A target is anchored only by the task envelope, the
    /// operator's trusted targets, or a handle from an authoritative field of an anchored read.
    ///
    /// Each fact comes with the value a directory entry could anchor
    /// ([`Gateway::directory_anchored`]): the literal, or the id of the one handle it consists
    /// of, for an unanchored target; `None` otherwise.
    fn targets(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
        found: Vec<secureclaw_core::anchor::Target>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Vec<(TargetFact, Option<String>)> {
        // The operator declared the tool target-less (`targets = []`, e.g. saving a draft):
        // nothing in its arguments is a destination.
        if entry.targets_declared && entry.targets.is_empty() {
            return Vec::new();
        }
        let mut seen_handles: std::collections::HashSet<&HandleId> =
            std::collections::HashSet::new();
        let mut out: Vec<(TargetFact, Option<String>)> = Vec::new();
        let mut found = found;
        if entry.destructive
            || entry.financial
            || (entry.effect == EffectClass::Effect && entry.egress_targets)
        {
            // The objects a destructive or financial effect acts on are targets too (F11), and
            // so are the ids an egress tool sends out (a contact id designates a recipient:
            // red-team F5).
            let seen: std::collections::HashSet<(String, String)> = found
                .iter()
                .map(|t| (t.field.clone(), t.value.clone()))
                .collect();
            found.extend(
                object_id_targets(arguments, &[])
                    .into_iter()
                    .filter(|t| !seen.contains(&(t.field.clone(), t.value.clone()))),
            );
        }
        for t in found {
            let refs = find_handles(&Value::String(t.value.clone()));
            let (anchored, provenance, candidate) = match refs.as_slice() {
                [] => anchor_provenance_in(
                    &t.field,
                    &t.value,
                    &session.envelope,
                    &self.inner.config.trusted_targets,
                )
                .map_or((false, Provenance::Literal, Some(t.value.clone())), |p| {
                    (true, p, None)
                }),
                [(_, id)] if id.0 == t.value.trim() => {
                    seen_handles.extend(records.get_key_value(id).map(|(k, _)| k));
                    let (anchored, provenance) = handle_provenance(records.get(id));
                    (anchored, provenance, Some(id.0.clone()))
                }
                // Text around a handle, or several handles: the runtime composed it.
                _ => (false, Provenance::Literal, None),
            };
            out.push((
                TargetFact {
                    field: t.field,
                    anchored,
                    via_handle: !refs.is_empty(),
                    provenance,
                },
                candidate.filter(|_| !anchored),
            ));
        }
        // A handle outside the target fields may be a destination too (`reply_to`, a header,
        // a nested object): one that is not anchored, and whose record does not name this tool
        // as a sink the operator allows it into, is an unanchored target. (An anchored one is
        // not counted: it must not turn a call with no recognised target into an anchored
        // one.)
        for (path, id) in find_handles(&Value::Object(arguments.clone())) {
            if seen_handles.contains(&id) {
                continue;
            }
            let Some(rec) = records.get(&id) else {
                continue;
            };
            // Every handle but a credential's: an operator label (`counterparty_email`,
            // `payee_iban`) names an identifier as surely as a detector's does, and a tool may
            // treat any argument (`reply_to`, `forward_to`) as a destination.
            if rec.label == IdentifierKind::Secret.as_str() {
                continue;
            }
            seen_handles.extend(records.get_key_value(&id).map(|(k, _)| k));
            let (anchored, provenance) = handle_provenance(Some(rec));
            let qualified = format!("{}__{}", entry.upstream, entry.name);
            let sanctioned = rec
                .allowed_sinks
                .iter()
                .any(|p| secureclaw_core::handle::glob_match(p, &qualified));
            if anchored || sanctioned {
                continue;
            }
            let field = path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            out.push((
                TargetFact {
                    field,
                    anchored,
                    via_handle: true,
                    provenance,
                },
                Some(id.0.clone()),
            ));
        }
        out
    }

    /// Anchor the targets whose value is an entry of the upstream's own directory
    /// (`[[gateway.directory]]`, provenance [`Provenance::Directory`]): only for an effect
    /// tool that is not an `egress` sink and that the rule names in `anchors`, only in a field
    /// named like a destination, only a literal or the plaintext of the one handle a target
    /// consists of, and never a value the session wrote itself.
    async fn directory_anchored(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        facts: Vec<(TargetFact, Option<String>)>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Vec<TargetFact> {
        let applies = !self.inner.config.directory.is_empty()
            && entry.effect == EffectClass::Effect
            && entry.sink != SinkKind::Egress;
        let mut out = Vec::with_capacity(facts.len());
        for (mut fact, candidate) in facts {
            // Only a field named like a destination (`channel`, `recipient`, `user`): never
            // content (`body`), whose text an entry must not vouch for (red-team: a body equal
            // to an entry was posted without a human).
            let destination = secureclaw_core::anchor::is_destination_field_name(&fact.field);
            if let Some(candidate) = candidate.filter(|_| applies && destination && !fact.anchored)
            {
                let value = match find_handles(&Value::String(candidate.clone())).as_slice() {
                    [] => Some(candidate),
                    [(_, id)] => match records.get(id) {
                        Some(r) => self.handle_plaintext(r).await,
                        None => None,
                    },
                    _ => None,
                };
                if let Some(value) = value
                    && !self.wrote(session, &value).await
                    && self.in_directory(session, entry, &value).await
                {
                    fact.anchored = true;
                    fact.provenance = Provenance::Directory {
                        upstream: entry.upstream.clone(),
                    };
                }
            }
            out.push(fact);
        }
        out
    }

    /// The grant entry of the task that names this tool, with its limit, and why it does not
    /// cover this call, if it does not (red-team finding F11). A `granted_tools` entry may carry
    /// a count, `office__pay_invoice#2`, or `#*` for no limit; without one a financial tool's
    /// grant covers one unconfirmed use per task and any other tool's is unlimited (its
    /// targets and object ids must still be anchored). A granted financial effect's amounts
    /// must be at most the task's `max_amount` when it has one; otherwise each must be named in
    /// the request text or come from a read the task anchored (the invoice's own amount).
    /// Uses are counted in the store, once across every replica; if the store cannot say how
    /// many were taken, the grant counts as exhausted (fail closed: a human decides).
    async fn grant_for(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        qualified: &str,
        arguments: &Map<String, Value>,
    ) -> (Option<(String, Option<u64>)>, Option<&'static str>) {
        let matched = session.envelope.granted_tools.iter().find_map(|p| {
            let (pattern, count) = match p.rsplit_once('#') {
                Some((pat, "*")) => (pat, Some(None)),
                Some((pat, n)) => match n.parse::<u64>() {
                    Ok(n) => (pat, Some(Some(n))),
                    Err(_) => (p.as_str(), None),
                },
                None => (p.as_str(), None),
            };
            (secureclaw_core::handle::glob_match(pattern, qualified) || pattern == entry.exposed)
                .then(|| {
                    let limit = count.unwrap_or(if entry.financial { Some(1) } else { None });
                    (p.clone(), limit)
                })
        });
        let Some((key, limit)) = matched else {
            return (None, None);
        };
        if let Some(limit) = limit {
            let used = self
                .inner
                .store
                .grant_uses(&session.id, &key)
                .await
                .unwrap_or(u64::MAX);
            if used >= limit {
                return (Some((key, Some(limit))), Some("grant_exhausted"));
            }
        }
        let withheld = if entry.financial {
            self.amount_withheld(session, entry, arguments).await
        } else {
            None
        };
        (Some((key, limit)), withheld)
    }

    /// Why a granted financial effect's amounts are not covered by the task, if they are not.
    /// Every number and money-looking string outside object ids and target fields is an
    /// amount, and text below an amount-like key that is not a plain number is never covered
    /// (red-team F4; [`amounts::financial_amounts`]). Amounts anchored reads returned are
    /// looked up in the store by keyed digest; a failed lookup leaves the amount unanchored
    /// (fail closed).
    async fn amount_withheld(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Option<&'static str> {
        let found = amounts::financial_amounts(arguments, &entry.targets);
        if found.contains(&amounts::Amount::Unparsed) {
            return Some("amount_unanchored");
        }
        // Named amounts are compared in major units and in the call's currency (red-team R5c:
        // "EUR 50" does not cover `amount_cents: 50`, nor "USD 1,299.00" a payment in EUR).
        let named_amounts = amounts::task_amounts(&session.envelope.request);
        let currencies = amounts::argument_currencies(arguments);
        let mut objects = amounts::payment_objects(arguments);
        // A payee handle shown by a read of one object does not pay another object named under
        // the same argument (INV-42's IBAN does not pay INV-43; red-team round 2). A payment
        // naming no object id stands for its payee handles: its amount must come from the
        // read that showed them.
        let payees = amounts::payee_handles(arguments, &entry.targets);
        if objects.is_empty() {
            objects.clone_from(&payees);
        } else {
            // Judged where a read of an object under the same argument name showed the payee;
            // a payee shown by a read of something else (a profile) is left to anchoring.
            let fields = amounts::payment_object_fields(arguments);
            for payee in &payees {
                for (field, object) in &fields {
                    if self
                        .amount_known(session, &[amounts::payee_field_key(payee, field)])
                        .await
                        && !self
                            .amount_known(session, &[amounts::payee_key(payee, field, object)])
                            .await
                    {
                        return Some("payee_unbound");
                    }
                }
            }
        }
        for a in found {
            if let Some(max) = session.envelope.max_amount {
                // The ceiling is in minor units (cents): anything that is not a number at most
                // the ceiling needs a human.
                let ok = a
                    .minor_units()
                    .is_some_and(|v| (0.0..=max as f64).contains(&v));
                if !ok {
                    return Some("amount_over_ceiling");
                }
                continue;
            }
            let Some(major) = a.major() else {
                return Some("amount_unanchored");
            };
            // Only money written as money in the task counts (red-team R5).
            let named = named_amounts.iter().any(|t| t.covers(&major, &currencies));
            let read = !named
                && self
                    .amount_known(
                        session,
                        &amounts::amount_lookup_keys(&major, &currencies, &objects),
                    )
                    .await;
            if !(named || read) {
                return Some("amount_unanchored");
            }
        }
        None
    }

    /// Whether an anchored read of this session returned an amount recorded as one of `keys`
    /// ([`amounts::amount_lookup_keys`]; keyed digests under every live handle key); `false`
    /// if the store or the key ring fails.
    async fn amount_known(&self, session: &SessionRecord, keys: &[String]) -> bool {
        let mut digests = Vec::new();
        for key in keys {
            match secureclaw_core::task_state::state_lookup_digests(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Amount,
                &session.id,
                key,
            ) {
                Ok(d) => digests.extend(d),
                Err(_) => return false,
            }
        }
        self.inner
            .store
            .amount_known(&session.id, &digests)
            .await
            .unwrap_or(false)
    }

    /// Count one unconfirmed use of a limited grant in the store; `false` if it is used up or
    /// the store fails (two concurrent previews, on one replica or two, cannot both take the
    /// last use).
    pub(super) async fn take_grant(&self, session: &SessionRecord, key: &str, limit: u64) -> bool {
        match self
            .inner
            .store
            .take_grant_use(&session.id, key, limit)
            .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::error!(error = %e, "taking a grant use failed; the call needs a human");
                false
            }
        }
    }

    /// A granted financial effect pays each object once without a human (red-team M2: a grant
    /// of two payments paid INV-42 twice): one use of the grant per object the call names
    /// ([`amounts::payment_objects`], at any depth), each counted in the store like every grant
    /// use, so paying `[INV-42, INV-43]` and then `INV-42` holds the second call. A call that
    /// names no object id stands for its payees (the values of its target fields: one payment
    /// per payee), and one with neither for its canonical arguments (RFC 8785: one identical
    /// payment). `true` for an effect that is not financial; `false` if any of its objects
    /// was paid under this grant before or the store fails (a use taken for another object of
    /// the same call stays taken: the call then needs a human either way). Also under a grant
    /// of any number (`#*`): any number of distinct objects, never one twice.
    pub(super) async fn take_object_grant(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        key: &str,
        arguments: &Map<String, Value>,
    ) -> bool {
        if !entry.financial {
            return true;
        }
        let mut kind = "objects";
        let mut objects = amounts::payment_objects(arguments);
        if objects.is_empty() {
            kind = "payees";
            objects = secureclaw_core::anchor::extract_targets(arguments, &entry.targets)
                .into_iter()
                .map(|t| amounts::object_binding(&t.value))
                .filter(|o| !o.is_empty())
                .collect();
            objects.sort();
            objects.dedup();
        }
        if objects.is_empty() {
            kind = "call";
            let Ok(bytes) = serde_json_canonicalizer::to_vec(&Value::Object(arguments.clone()))
            else {
                return false;
            };
            use sha2::Digest as _;
            objects.push(hex::encode(sha2::Sha256::digest(&bytes)));
        }
        for object in objects {
            let object_key = format!("{key}\u{1f}{kind}\u{1f}{object}");
            if !self.take_grant(session, &object_key, 1).await {
                return false;
            }
        }
        true
    }

    /// Whether a search (a read whose tool matches the call's text against content) may run:
    /// always when every search text is named by the task (each of its words, split at
    /// whitespace and glob/regex wildcards, anchors as a target would, and has three or more
    /// characters); otherwise it takes one
    /// of the session's `max_unanchored_match_reads` uses, counted in the store across
    /// replicas. The count depends only on what the runtime sent, never on what the search
    /// would find, so the refusal itself answers nothing. A store failure refuses (fail
    /// closed).
    pub(super) async fn take_match_read(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
    ) -> bool {
        let texts = crate::known::search_texts(arguments);
        let trusted = &self.inner.config.trusted_targets;
        // Named means the user wrote the text itself: a trusted `@domain` or directory is a
        // pattern, and a search that only ends in one still probes what is below it (red-team
        // R4).
        let named = |text: &str| {
            secureclaw_core::anchor::named_exactly(text, &session.envelope, trusted) || {
                let mut words = text
                    .split(|c: char| c.is_whitespace() || "*?[]{}()|^$+\\\"'".contains(c))
                    .filter(|w| !w.is_empty())
                    .peekable();
                // Words of one or two characters (digits, initials) never count as named:
                // strung together they would probe withheld values freely.
                words.peek().is_some()
                    && words.all(|w| {
                        w.chars().count() >= 3
                            && secureclaw_core::anchor::named_exactly(w, &session.envelope, trusted)
                    })
            }
        };
        if texts.iter().all(|t| t.trim().is_empty() || named(t)) {
            return true;
        }
        self.take_grant(
            session,
            MATCH_READS_KEY,
            self.inner.config.limits.max_unanchored_match_reads,
        )
        .await
    }

    /// A read is anchored when every scalar in its arguments — strings and numbers (as their
    /// decimal text), at any depth — is anchored, and there is at least one:
    /// `read_invoice {"invoice_id": "INV-42"}` for a task naming INV-42. An anchored word next
    /// to an unnamed selector (`{"project": "alpha", "number": 8}`) does not anchor the object.
    ///
    /// A scalar is anchored literally (the task envelope or the operator's trusted targets
    /// name it) or by a handle: the string is exactly one handle id (surrounding whitespace
    /// aside) whose record, in `records`, is anchored — a handle from an authoritative field
    /// of an anchored read. Anchoring thus propagates along authoritative links (the user id a
    /// lookup by the user's own name returned, the orders of that user's profile, …) and
    /// nowhere else: text around a handle, a handle from free text or from an unanchored read,
    /// and any value or handle the session itself wrote to (its plaintext included) leave the
    /// read unanchored.
    pub(super) async fn read_anchored(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
        records: &[HandleRecord],
    ) -> bool {
        fn leaves(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|i| leaves(i, out)),
                Value::Object(map) => map.values().for_each(|i| leaves(i, out)),
                Value::Null | Value::Bool(_) => {}
            }
        }
        let mut all = Vec::new();
        arguments.values().for_each(|v| leaves(v, &mut all));
        if all.is_empty() {
            return false;
        }
        for s in &all {
            if self.wrote(session, s).await {
                return false;
            }
            let refs = find_handles(&Value::String(s.clone()));
            let anchored = match refs.as_slice() {
                [] => is_anchored(s, &session.envelope, &self.inner.config.trusted_targets),
                [(_, id)] if id.0 == s.trim() => match records.iter().find(|r| &r.id == id) {
                    Some(r) if r.anchored => match self.handle_plaintext(r).await {
                        Some(plain) => !self.wrote(session, &plain).await,
                        None => false,
                    },
                    _ => false,
                },
                _ => false,
            };
            if !anchored {
                return false;
            }
        }
        true
    }
}
