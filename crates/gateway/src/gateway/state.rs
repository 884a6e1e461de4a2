//! The session's task state, kept in the store for every replica: the objects it has seen or
//! only seen as handles (protected objects, red-team F2, F10), the values its store effects
//! wrote (never anchoring, red-team H1, F13), the handles it released into egress effects
//! (red-team H2) and the amounts its anchored reads returned (red-team F4) (DESIGN.md §3
//! "Targets, anchoring and provenance"; crates/core `protect` and `task_state`).

use super::{Gateway, amounts};
use crate::catalog::ToolEntry;
use crate::upstream::ToolOutput;
use secureclaw_core::anchor::collect_targets_bounded;
use secureclaw_core::handle::{HandleId, HandleRecord, find_handles};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::policy::EffectClass;
use secureclaw_core::store::SessionRecord;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The digested form of a directory entry: its rule, the upstream, the entry (trimmed),
/// separated by U+001F, so an entry recorded under one rule anchors only that rule's tools of
/// that upstream.
fn directory_key(
    rule: &secureclaw_core::classify::DirectoryRule,
    upstream: &str,
    value: &str,
) -> String {
    format!("{}\u{1f}{upstream}\u{1f}{}", rule.key(), value.trim())
}

/// Every string of `v`, object keys included.
fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => {
            for (k, i) in map {
                out.push(k.clone());
                collect_strings(i, out);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// What a session's record of an object says (crates/core `protect`): its content was seen
/// only as handles (protected), or the session has seen it (read it, or wrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ObjectMark {
    Protected,
    Seen,
}

impl ObjectMark {
    fn digests(
        self,
        ring: &KeyRing,
        session: &str,
        keys: &[String],
        all_keys: bool,
    ) -> Result<Vec<String>, secureclaw_core::keys::KeyError> {
        match self {
            Self::Protected => {
                secureclaw_core::protect::protection_digests(ring, session, keys, all_keys)
            }
            Self::Seen => secureclaw_core::protect::seen_digests(ring, session, keys, all_keys),
        }
    }
}

/// The values one session's store effects wrote, as far as this process has read them from
/// the store. Bounded in the store (`max_written_values_per_session`,
/// `max_written_bytes_per_session`; red-team F13): once a bound is reached the set is `full`
/// and stops growing, and every later value counts as written — a read of the session is then
/// never anchored and every value it returns gets a fresh handle. That fails closed:
/// forgetting a written value could let the session anchor it by reading it back; treating
/// unknown values as written only costs the session anchoring. Rows are only ever appended and
/// `full` never clears, so this copy is always a prefix of the store's set.
#[derive(Debug, Default)]
pub(super) struct WrittenCache {
    /// The highest `seq` read so far.
    seq: u64,
    values: Vec<String>,
    full: bool,
}

/// Prefix of the written-set entries that name a handle released into an egress effect.
const RELEASED_HANDLE: &str = "released\u{1f}";

/// Prefix of the written-set entries that are path keys, not values.
const WRITTEN_PATH_KEY: &str = "path\u{1f}";

/// The path keys under which a written value is recorded
/// ([`secureclaw_core::protect::protect_keys`]: its cleaned absolute or relative spelling —
/// case-folded, `\\` as `/`, `.` and empty segments dropped — and, for an absolute path, its
/// suffixes; a plain name is its own relative key, so `x.json` written is found by a read of
/// `/root/x.json`).
fn written_path_keys(value: &str) -> Vec<String> {
    secureclaw_core::protect::protect_keys(value)
        .into_iter()
        .map(|k| format!("{WRITTEN_PATH_KEY}{k}"))
        .collect()
}

/// The path keys to look up for a value a read names ([`secureclaw_core::protect::match_keys`]).
fn written_lookup_keys(value: &str) -> Vec<String> {
    secureclaw_core::protect::match_keys(value)
        .into_iter()
        .map(|k| format!("{WRITTEN_PATH_KEY}{k}"))
        .collect()
}

impl Gateway {
    /// The identifiers naming objects in a call's arguments
    /// ([`secureclaw_core::protect::object_identifiers`]), each with its argument name and the
    /// spellings to match: the value as written and, for a value that is exactly one handle
    /// id, the handle's plaintext too (the same object named by value or by handle).
    pub(super) async fn object_identifiers(
        &self,
        entry: &ToolEntry,
        with_ids: bool,
        arguments: &Map<String, Value>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for o in secureclaw_core::protect::object_identifiers(arguments, &entry.targets, with_ids) {
            let mut values = vec![o.value.clone()];
            let trimmed = o.value.trim();
            if let [(_, id)] = find_handles(&Value::String(o.value.clone())).as_slice()
                && id.0 == trimmed
            {
                let record = match records.get(id) {
                    Some(r) => Some(r.clone()),
                    None => self.inner.store.handle(id).await.ok().flatten(),
                };
                if let Some(r) = record {
                    values.extend(self.handle_plaintext(&r).await);
                }
            }
            out.push((o.field, values));
        }
        out
    }

    /// Whether any of `values` (spellings of one object, named through `upstream`) names an
    /// object of the session marked `mark` (protected, on any upstream; or seen, through this
    /// upstream). `Err(())` if the keys or the store fail (callers fail closed).
    pub(super) async fn marked(
        &self,
        mark: ObjectMark,
        session: &SessionRecord,
        upstream: &str,
        values: &[String],
    ) -> Result<bool, ()> {
        let keys: Vec<String> = values
            .iter()
            .flat_map(|v| match mark {
                // The object itself, or a subtree a relocating effect protected above it.
                ObjectMark::Protected => {
                    let mut keys = secureclaw_core::protect::match_keys(v);
                    keys.extend(secureclaw_core::protect::subtree_match_keys(v));
                    keys
                }
                ObjectMark::Seen => secureclaw_core::protect::seen_key(upstream, v)
                    .into_iter()
                    .collect(),
            })
            .collect();
        if keys.is_empty() {
            return Ok(false);
        }
        let digests = mark
            .digests(&self.inner.keys, &session.id, &keys, true)
            .map_err(|_| ())?;
        self.inner
            .store
            .any_protected(&session.id, &digests)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, ?mark, "object lookup failed");
            })
    }

    /// Mark every object a call names (its object identifiers and, for handles, their
    /// plaintext) as `mark` for the session: protected objects, or objects the session has
    /// seen. `Err(())` if the keys or the store fail.
    pub(super) async fn mark(
        &self,
        mark: ObjectMark,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
        records: &BTreeMap<HandleId, HandleRecord>,
    ) -> Result<(), ()> {
        // A read marks seen by id fields too (the content-matching check looks there, F10);
        // protection stays on target and reference fields, so a record read by its id and
        // updated by an ordinary write (the retail chain) is not a protected object — a
        // content-matching effect on it still waits, as unread.
        // Only a read of one whole object by a tool that returns content marks it seen (see
        // `secureclaw_core::protect`): a read of several objects may answer some of them with
        // an error line (red-team R1), and an `info`/`list` tool shows no content. What needs
        // no walk of the arguments is asked first.
        let seen = mark == ObjectMark::Seen;
        if seen
            && (entry.effect == EffectClass::Effect
                || !secureclaw_core::protect::content_read_name(&entry.name)
                || !secureclaw_core::protect::whole_object_read(arguments, &entry.targets))
        {
            return Ok(());
        }
        let named = self
            .object_identifiers(entry, seen, arguments, records)
            .await;
        if seen && named.len() != 1 {
            return Ok(());
        }
        let keys: Vec<String> = named
            .into_iter()
            .flat_map(|(_, values)| values)
            .flat_map(|v| match mark {
                // A read protects the objects it named; a store effect (a move, a copy, a
                // handle resolved into an object) protects what lies below them too: content
                // it relocated may sit under any name below the destination (red-team H1).
                ObjectMark::Protected => {
                    let mut keys = secureclaw_core::protect::protect_keys(&v);
                    if entry.effect == EffectClass::Effect {
                        keys.extend(secureclaw_core::protect::subtree_protect_keys(&v));
                    }
                    keys
                }
                ObjectMark::Seen => secureclaw_core::protect::seen_key(&entry.upstream, &v)
                    .into_iter()
                    .collect(),
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let digests = mark
            .digests(&self.inner.keys, &session.id, &keys, false)
            .map_err(|_| ())?;
        self.inner
            .store
            .protect_objects(&session.id, &digests)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, ?mark, "recording objects failed");
            })
    }

    /// Remember the amounts an anchored read returned (see [`Self::amount_withheld`]), as keyed
    /// digests in the store. A failure is logged and otherwise harmless: an amount the store
    /// does not know needs a human.
    pub(super) async fn note_read_amounts(
        &self,
        session: &SessionRecord,
        output: &ToolOutput,
        arguments: &Map<String, Value>,
    ) {
        let objects = amounts::read_objects(arguments);
        let mut amounts = Vec::new();
        if let Some(v) = &output.structured {
            amounts::read_amounts(v, &objects, &mut amounts);
        }
        for block in &output.content {
            if let Some(v) = block
                .get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
            {
                amounts::read_amounts(&v, &objects, &mut amounts);
            }
        }
        self.note_amount_keys(session, &amounts).await;
    }

    /// Remember, for a payment, which handles an anchored read showed and what it returned
    /// beside them, from the read's declassified `output` (red-team round 2 of 2026-12-03):
    /// each handle bound to the objects the read named and the arguments they stood under
    /// ([`amounts::payee_key`], [`amounts::payee_field_key`]), so that a payment naming an
    /// object under an argument of that name may send only a payee that object's read showed
    /// (INV-42's IBAN does not pay INV-43; a payment method shown by a profile read, named
    /// by `user_id`, still pays an order named by `order_id`); and the read's amounts bound
    /// to each handle as their object (`AMOUNT CUR @HANDLE`), so that a payment naming no
    /// object id (an `invoice_number`, a `reference`) pays a payee only the amount of the read
    /// that showed it. Kept with the read amounts; a failure is logged (the payment then needs
    /// a human).
    pub(super) async fn note_read_payees(
        &self,
        session: &SessionRecord,
        output: &ToolOutput,
        arguments: &Map<String, Value>,
    ) {
        let mut handles: Vec<String> = Vec::new();
        let mut values: Vec<Value> = output.structured.iter().cloned().collect();
        values.extend(output.content.iter().filter_map(|b| b.get("text").cloned()));
        for v in &values {
            handles.extend(
                find_handles(v)
                    .into_iter()
                    .map(|(_, id)| amounts::object_binding(&id.0)),
            );
        }
        handles.sort();
        handles.dedup();
        if handles.is_empty() {
            return;
        }
        let fields = amounts::read_object_fields(arguments);
        let mut keys: Vec<String> = Vec::new();
        for h in &handles {
            for (field, object) in &fields {
                keys.push(amounts::payee_key(h, field, object));
                keys.push(amounts::payee_field_key(h, field));
            }
        }
        if let Some(v) = &output.structured {
            amounts::read_amounts(v, &handles, &mut keys);
        }
        keys.retain(|k| k.contains(" @"));
        self.note_amount_keys(session, &keys).await;
    }

    /// Store `keys` ([`amounts::read_amount_key`]s and [`amounts::payee_key`]s) as keyed
    /// digests of the session; a failure is logged.
    async fn note_amount_keys(&self, session: &SessionRecord, keys: &[String]) {
        self.note_read_keys(
            session,
            secureclaw_core::task_state::StateDigest::Amount,
            keys,
        )
        .await;
    }

    /// Record the entries of the upstream's own directory that this read returned
    /// (`[[gateway.directory]]`, [`secureclaw_core::classify::DirectoryRule`]) as keyed
    /// digests of the session, from the **declassified** result the runtime is given: a
    /// string holding a handle (a value the runtime never saw: no guessing oracle) and a
    /// string containing one of the read's own argument strings (an echo of the agent's
    /// input) are not entries. A failure is logged: those targets then need a human.
    pub(super) async fn note_directory(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        shown: &ToolOutput,
        arguments: &Map<String, Value>,
    ) {
        let Some(structured) = &shown.structured else {
            return;
        };
        if self.inner.config.directory.is_empty() {
            return;
        }
        let mut inputs: Vec<String> = Vec::new();
        collect_strings(&Value::Object(arguments.clone()), &mut inputs);
        let inputs: Vec<String> = inputs
            .iter()
            .map(|a| a.trim().to_lowercase())
            .filter(|a| !a.is_empty())
            .collect();
        let mut keys: Vec<String> = Vec::new();
        for rule in &self.inner.config.directory {
            for e in rule.entries(&entry.upstream, &entry.name, structured) {
                let lower = e.to_lowercase();
                if find_handles(&Value::String(e.clone())).is_empty()
                    && !inputs.iter().any(|a| lower.contains(a.as_str()))
                {
                    keys.push(directory_key(rule, &entry.upstream, &e));
                }
            }
        }
        keys.sort();
        keys.dedup();
        self.note_read_keys(
            session,
            secureclaw_core::task_state::StateDigest::Directory,
            &keys,
        )
        .await;
    }

    /// Whether a read of this session listed `value` in a directory whose rule names `entry`
    /// among the tools it anchors (keyed digests under every live handle key); `false` if the
    /// store or the key ring fails.
    pub(super) async fn in_directory(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        value: &str,
    ) -> bool {
        let qualified = format!("{}__{}", entry.upstream, entry.name);
        let mut digests = Vec::new();
        for rule in &self.inner.config.directory {
            if !secureclaw_core::handle::glob_match(&rule.upstream, &entry.upstream)
                || !rule
                    .anchors
                    .iter()
                    .any(|p| secureclaw_core::handle::glob_match(p, &qualified))
            {
                continue;
            }
            match secureclaw_core::task_state::state_lookup_digests(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Directory,
                &session.id,
                &directory_key(rule, &entry.upstream, value),
            ) {
                Ok(d) => digests.extend(d),
                Err(_) => return false,
            }
        }
        if digests.is_empty() {
            return false;
        }
        self.inner
            .store
            .amount_known(&session.id, &digests)
            .await
            .unwrap_or(false)
    }

    /// Store `keys` as keyed digests of `kind` for the session; a failure is logged.
    async fn note_read_keys(
        &self,
        session: &SessionRecord,
        kind: secureclaw_core::task_state::StateDigest,
        keys: &[String],
    ) {
        if keys.is_empty() {
            return;
        }
        let digests: Result<Vec<String>, _> = keys
            .iter()
            .map(|a| {
                secureclaw_core::task_state::state_digest(&self.inner.keys, kind, &session.id, a)
            })
            .collect();
        let noted = match digests {
            Ok(d) => self
                .inner
                .store
                .note_amounts(&session.id, &d)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = noted {
            tracing::warn!(error = %e, "recording read values failed; they will need a human");
        }
    }

    /// Remember the objects a store effect of this session is about to write (the strings in
    /// its target fields and the identifiers in its arguments): a later read of them is never
    /// anchored, so the session cannot anchor a value by writing it and reading it back
    /// (DESIGN.md §3: objects the session itself wrote never confer anchoring). Recorded in the
    /// store, for every replica, before dispatch, since a write whose outcome is unknown may
    /// have happened. `Err` if the store could not record them: the effect must not run.
    pub(super) async fn note_written(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        arguments: &Map<String, Value>,
    ) -> Result<(), ()> {
        let mut values: Vec<String> = Vec::new();
        // The call passed `max_targets_per_call` in prepare(); past it (not expected), the
        // session's written set is marked full below, which fails closed.
        let limit = self.inner.config.limits.max_targets_per_call;
        let (args, fields) = (arguments.clone(), entry.targets.clone());
        let found = tokio::task::spawn_blocking(move || {
            collect_targets_bounded(&args, &fields, false, limit)
        })
        .await
        .ok()
        .and_then(Result::ok);
        let overflow = found.is_none();
        for t in found.unwrap_or_default() {
            let value = t.value.trim().to_owned();
            // A handle written to: its plaintext is written too, so that neither the handle
            // nor the literal value anchors a later read of what the session wrote.
            if let [(_, id)] = find_handles(&Value::String(value.clone())).as_slice()
                && id.0 == value
                && let Some(r) = self.inner.store.handle(id).await.ok().flatten()
            {
                values.extend(self.handle_plaintext(&r).await);
            }
            values.push(value);
        }
        // Each value's path keys too, so that a respelt path (`a//b`, `./b`, `a/./b`, a
        // relative suffix) of an object the session wrote is still its own (red-team H1: a
        // read of `reports/x.json` anchored what the session wrote as `reports//x.json`).
        let keys: Vec<String> = values.iter().flat_map(|v| written_path_keys(v)).collect();
        values.extend(keys);
        let store = &self.inner.store;
        let recorded = if overflow {
            store.mark_written_full(&session.id).await
        } else {
            let mut rows = Vec::with_capacity(values.len());
            for value in values {
                let digest = secureclaw_core::task_state::state_digest(
                    &self.inner.keys,
                    secureclaw_core::task_state::StateDigest::Written,
                    &session.id,
                    &value,
                )
                .map_err(|e| {
                    tracing::error!(error = %e, "no handle key for the written set");
                })?;
                rows.push(secureclaw_core::store::WrittenValue { digest, value });
            }
            let limits = &self.inner.config.limits;
            let bounds = secureclaw_core::store::WrittenBounds {
                max_values: u64::try_from(limits.max_written_values_per_session)
                    .unwrap_or(u64::MAX),
                max_bytes: u64::try_from(limits.max_written_bytes_per_session).unwrap_or(u64::MAX),
            };
            store
                .add_written(&session.id, &rows, bounds)
                .await
                .map(|_| ())
        };
        recorded.map_err(|e| {
            tracing::error!(error = %e, "recording the written set failed; the effect does not run");
        })
    }

    /// Remember the handles an egress effect of this session is about to resolve (every
    /// handle id in its arguments), so that their plaintext is turned back into the handle in
    /// every later result of the session (red-team H2: a value posted to a channel came back in
    /// clear when the channel was read; an API echoed it upper-cased). Kept in the session's
    /// written set, in the store, before dispatch; `Err` if the store could not record them:
    /// the effect must not run.
    pub(super) async fn note_released(
        &self,
        session: &SessionRecord,
        arguments: &Map<String, Value>,
    ) -> Result<(), ()> {
        let ids = find_handles(&Value::Object(arguments.clone()));
        if ids.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(ids.len());
        for (_, id) in ids {
            let value = format!("{RELEASED_HANDLE}{}", id.0);
            let digest = secureclaw_core::task_state::state_digest(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Written,
                &session.id,
                &value,
            )
            .map_err(|e| {
                tracing::error!(error = %e, "no handle key for the released set");
            })?;
            rows.push(secureclaw_core::store::WrittenValue { digest, value });
        }
        let limits = &self.inner.config.limits;
        let bounds = secureclaw_core::store::WrittenBounds {
            max_values: u64::try_from(limits.max_written_values_per_session).unwrap_or(u64::MAX),
            max_bytes: u64::try_from(limits.max_written_bytes_per_session).unwrap_or(u64::MAX),
        };
        self.inner
            .store
            .add_written(&session.id, &rows, bounds)
            .await
            .map(|_| ())
            .map_err(|e| {
                tracing::error!(error = %e, "recording released handles failed; the effect does not run");
            })
    }

    /// The plaintexts of the handles this session released into egress effects
    /// ([`Self::note_released`]), each with its handle: (plaintext, handle). Handles whose
    /// record or value is gone are skipped (their plaintext is no longer known here).
    /// `written` is the session's written set ([`Self::written_values`]), read once per result.
    pub(super) async fn released_values(
        &self,
        session: &SessionRecord,
        written: &[String],
    ) -> Vec<(String, HandleId)> {
        let mut out = Vec::new();
        for value in written {
            let Some(id) = value.strip_prefix(RELEASED_HANDLE) else {
                continue;
            };
            let id = HandleId(id.to_owned());
            let Some(record) = self.inner.store.handle(&id).await.ok().flatten() else {
                continue;
            };
            if record.session != session.id {
                continue;
            }
            if let Some(plain) = self.handle_plaintext(&record).await {
                out.push((plain, id));
            }
        }
        out
    }

    /// This session's written set as the store holds it now (this process's copy, refreshed
    /// with the rows it has not seen): its values and whether it is full. Full if the store
    /// fails (fail closed: every value then counts as the session's own).
    pub(super) async fn written_values(&self, session: &SessionRecord) -> (Vec<String>, bool) {
        let seen = self
            .inner
            .written_cache
            .lock()
            .ok()
            .map(|c| c.get(&session.id).map_or(0, |w| w.seq));
        let Some(seen) = seen else {
            return (Vec::new(), true);
        };
        let rows = match self.inner.store.written_since(&session.id, seen).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reading the written set failed; treated as full");
                return (Vec::new(), true);
            }
        };
        let Ok(mut cache) = self.inner.written_cache.lock() else {
            return (Vec::new(), true);
        };
        if rows.values.is_empty() && !rows.full && !cache.contains_key(&session.id) {
            return (Vec::new(), false);
        }
        let w = cache.entry(session.id.clone()).or_default();
        for (seq, value) in rows.values {
            // Another refresh may have appended these rows meanwhile.
            if seq > w.seq {
                w.seq = seq;
                w.values.push(value);
            }
        }
        w.full |= rows.full;
        (w.values.clone(), w.full)
    }

    /// Whether this session wrote `value` (keyed digests under every live handle key, looked up
    /// in the store), or its written set is full; `true` if the store or key ring fails.
    /// The value is looked up as written and by its path keys (`a//b.json` is `a/b.json`, and a
    /// relative spelling matches an absolute path ending in it; [`written_lookup_keys`]).
    pub(super) async fn wrote(&self, session: &SessionRecord, value: &str) -> bool {
        let mut digests = Vec::new();
        for key in std::iter::once(value.trim().to_owned()).chain(written_lookup_keys(value)) {
            match secureclaw_core::task_state::state_lookup_digests(
                &self.inner.keys,
                secureclaw_core::task_state::StateDigest::Written,
                &session.id,
                &key,
            ) {
                Ok(d) => digests.extend(d),
                Err(_) => return true,
            }
        }
        self.inner
            .store
            .wrote_any(&session.id, &digests)
            .await
            .unwrap_or(true)
    }

    /// The vault value behind a handle record (for the gateway's own checks; never returned
    /// to the runtime). `None` if the store fails or the object is gone.
    pub(super) async fn handle_plaintext(&self, record: &HandleRecord) -> Option<String> {
        self.inner
            .store
            .object_value_at(&record.object_id, record.version)
            .await
            .ok()
            .flatten()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{written_lookup_keys, written_path_keys};

    fn meets(written: &str, read: &str) -> bool {
        let keys = written_path_keys(written);
        written_lookup_keys(read).iter().any(|k| keys.contains(k))
    }

    /// Red-team H1: an object the session wrote is its own under any spelling of its path.
    #[test]
    fn a_written_path_is_found_under_every_spelling() {
        let written = "/work/proj/reports//x2.json";
        for read in [
            "/work/proj/reports/x2.json",
            "/work/proj/./reports/x2.json",
            "/work/proj/tmp/../reports/x2.json",
            "reports/x2.json",
            "./x2.json",
            "x2.json",
            "/WORK/proj/reports/X2.json",
            "\\work\\proj\\reports\\x2.json",
            "file:///work/proj/reports/x2.json",
        ] {
            assert!(meets(written, read), "{read}");
        }
        assert!(meets("./x3.json", "/work/proj/reports/x3.json"));
        assert!(meets("x3.json", "/work/proj/x3.json"));
        // Positive controls: other objects are not the session's.
        for read in [
            "/work/proj/reports/x3.json",
            "x2.jsonl",
            "/work/proj/reports",
        ] {
            assert!(!meets(written, read), "{read}");
        }
    }
}
