//! The read path's declassification (SecureClaw paper §3.2–§3.3): every tool result is passed
//! through the summary operator D before the runtime sees it. Protected values — fields named
//! by operator rules and identifiers the detectors find — go to the vault, and the runtime gets
//! a handle in their place. `structuredContent` and the text blocks are rewritten with the same
//! handles (one value → one handle per read), so both carry the same information. Non-text
//! blocks (images, audio, embedded resources) are withheld.
//!
//! A value keeps one handle per session and classification: read again — by the same tool or
//! another — with the same label, handle kind, sensitivity, allowed sinks and anchoring, it gets
//! the handle it already has (found by a keyed digest, never by its plaintext:
//! [`handle_reuse_key`]). The record keeps the source of the first read. A read that classifies
//! the value differently gets a new handle, so a weaker occurrence (free text, an unanchored
//! read) never shares, and never changes, a more trusted handle. Within one read the first
//! occurrence in document order decides the value's handle, as before.
//!
//! Text the runtime supplied never lands on an existing handle (red-team finding F1: an error
//! that echoed a guessed address showed the secret's own handle). A value that occurs in the
//! call's own arguments or in what the session wrote ([`RuntimeText`]) gets a fresh handle for
//! each occurrence, never reused and never registered for reuse; and when the arguments hold
//! anything address-like at all (so the upstream may echo a transformed guess), every value
//! of that result is treated so. The runtime learns nothing from such handles: equal values
//! get unequal handles. Values that only ever came from upstreams keep one handle per session.

use crate::catalog::ToolEntry;
use crate::upstream::ToolOutput;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::classify::{Classifier, FieldRule};
use secureclaw_core::handle::{
    HandleClass, HandleId, HandleRecord, Sensitivity, handle_reuse_key, mint_handle_id,
};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::store::{SessionRecord, Store};
use secureclaw_core::summary::{
    ELLIPSIS, Protected, ProtectedKind, SummaryConfig, summarize, summarize_text,
};
use secureclaw_core::time::UnixMillis;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Text that replaces content blocks the gateway cannot declassify.
pub(crate) const WITHHELD: &str = "[non-text content withheld by SecureClaw]";

/// Text the runtime supplied: the strings of this call's arguments (keys and values, as sent
/// and normalized) and the values the session wrote before.
#[derive(Default)]
pub(crate) struct RuntimeText {
    /// The strings.
    pub strings: Vec<String>,
    /// The arguments hold something address-like (an identifier a detector finds, an `@`, a
    /// URI, a long number): every value of the result is vaulted fresh, since the upstream may
    /// echo the runtime's text transformed (decoded, re-cased) where a substring test misses it.
    pub fresh_all: bool,
}

impl RuntimeText {
    fn covers(&self, value: &str) -> bool {
        self.fresh_all || (!value.is_empty() && self.strings.iter().any(|t| t.contains(value)))
    }
}

pub(crate) struct Declassifier<'a> {
    pub keys: &'a KeyRing,
    pub runtime: &'a RuntimeText,
    pub store: &'a dyn Store,
    pub classifier: &'a Classifier,
    pub summary: &'a SummaryConfig,
    pub handle_ttl_ms: u64,
    pub now: UnixMillis,
}

/// Handles minted during one read, keyed by value so a value repeated in the structured and
/// text forms maps to one handle.
struct Minter<'a, 'b> {
    d: &'b Declassifier<'a>,
    session: &'b SessionRecord,
    entry: &'b ToolEntry,
    anchored: bool,
    minted: HashMap<String, HandleId>,
    /// Values met by the planning pass, with the placeholder returned for each (a token of the
    /// length the real handle will have), in the order they are issued.
    planned: HashMap<String, String>,
    todo: Vec<(String, Protected)>,
    /// Occurrences of runtime-supplied values met so far in the current pass (each gets its
    /// own handle; both passes meet them in the same order).
    occurrence: usize,
    /// Handle id → plaintext of the handles the executor resolved for this call: the gateway
    /// replaced their values by the handle ids before D ran (an upstream that echoes its
    /// arguments must not show plaintext), so a protected field holding exactly such an id
    /// holds that value.
    echoed: HashMap<&'b str, &'b str>,
    failed: bool,
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom fails only if the OS has no entropy source; the zero nonce is then still
    // unique per record because object ids differ, but the failure is logged.
    if getrandom::fill(&mut b).is_err() {
        tracing::error!("operating system random source failed");
    }
    b
}

/// The JSON pointer of a protected value as the audit log records it: a segment (an object
/// key, unescaped) in which the detectors find an identifier — a key may itself be an e-mail
/// address or an API key — is replaced by `[redacted]`, so the audit log never holds the
/// plaintext D took out of the result (found by `tests/prop_gateway.rs`).
fn audit_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            let key = segment.replace("~1", "/").replace("~0", "~");
            if secureclaw_core::detect::detect(&key).is_empty() {
                segment.to_owned()
            } else {
                "[redacted]".to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl Minter<'_, '_> {
    fn rule(&self, path: &str) -> Option<&FieldRule> {
        self.d
            .classifier
            .rule_covering(&self.entry.upstream, &self.entry.name, path)
    }

    /// The protected value as it is classified: a field echoing a resolved argument is
    /// classified as the value it holds, never vaulted as the text of a handle id
    /// (regression: the profile's own `user_id`, read with the user-id handle, became a
    /// handle whose value was the other handle's id).
    fn unscrubbed(&self, p: &Protected) -> Protected {
        match self.echoed.get(p.value.as_str()) {
            Some(plain) => Protected {
                kind: p.kind.clone(),
                path: p.path.clone(),
                value: (*plain).to_owned(),
            },
            None => p.clone(),
        }
    }

    /// First pass (D is synchronous, the store is not): note each value to vault, in
    /// document order, and answer with a placeholder of the handle's shape and length.
    /// The key a value is vaulted under in this read: the value itself, or, for text the
    /// runtime supplied, the value and its occurrence number (one fresh handle each).
    fn key(&mut self, p: &Protected) -> String {
        if self.d.runtime.covers(&p.value) {
            self.occurrence += 1;
            format!("{}\u{0}{}", p.value, self.occurrence)
        } else {
            p.value.clone()
        }
    }

    fn plan(&mut self, p: &Protected) -> String {
        let p = self.unscrubbed(p);
        let key = self.key(&p);
        if let Some(token) = self.planned.get(&key) {
            return token.clone();
        }
        let token = self
            .classify(&p)
            .and_then(|(_, kind_tag, ..)| {
                mint_handle_id(self.d.keys, &kind_tag, &[0; 16], "", "").map_err(|_| ())
            })
            .map_or_else(|()| "[withheld]".to_owned(), |id| id.0);
        self.planned.insert(key.clone(), token.clone());
        self.todo.push((key, p));
        token
    }

    /// Between the passes: issue (or reuse) a handle for every planned value, in order.
    async fn issue_planned(&mut self) {
        for (key, p) in std::mem::take(&mut self.todo) {
            if self.minted.contains_key(&key) {
                continue;
            }
            let fresh = self.d.runtime.covers(&p.value);
            match self.issue(&p, fresh).await {
                Ok(id) => {
                    self.minted.insert(key, id);
                }
                Err(()) => {
                    self.failed = true;
                    return;
                }
            }
        }
    }

    /// Second pass: the handle issued for the value. A value the first pass did not meet
    /// fails closed.
    fn mint(&mut self, p: &Protected) -> String {
        let p = self.unscrubbed(p);
        let key = self.key(&p);
        match self.minted.get(&key) {
            Some(id) => id.0.clone(),
            None => {
                self.failed = true;
                "[withheld]".to_owned()
            }
        }
    }

    /// Label, handle kind tag, sensitivity, allowed sinks and whether the rule anchors.
    fn classify(
        &self,
        p: &Protected,
    ) -> Result<(String, String, Sensitivity, Vec<String>, bool), ()> {
        Ok(match &p.kind {
            ProtectedKind::Identifier(kind) => {
                // An identifier inside a field an `identifiers` rule names (or below an object
                // it names) takes that rule's sensitivity, sinks and anchoring; elsewhere the
                // detector's defaults.
                let rule = self.d.classifier.identifier_rule_covering(
                    &self.entry.upstream,
                    &self.entry.name,
                    &p.path,
                );
                (
                    kind.as_str().to_owned(),
                    kind.token_prefix().to_owned(),
                    rule.map_or_else(
                        || Classifier::detected_sensitivity(*kind),
                        |r| r.sensitivity,
                    ),
                    rule.map(|r| r.allowed_sinks.clone()).unwrap_or_default(),
                    rule.is_some_and(|r| r.anchor),
                )
            }
            ProtectedKind::Field { label } => {
                // D labels every scalar below a labelled object with the object's label; the
                // rule that labelled it — the nearest ancestor's — gives sensitivity, sinks
                // and anchoring too (before, a leaf below an object rule fell back to the
                // defaults: `medium`, no sinks, never anchored).
                let rule = self.rule(&p.path);
                (
                    label.clone(),
                    "fld".to_owned(),
                    rule.map(|r| r.sensitivity).unwrap_or_default(),
                    rule.map(|r| r.allowed_sinks.clone()).unwrap_or_default(),
                    rule.is_some_and(|r| r.anchor),
                )
            }
        })
    }

    /// Vault `p` and return its handle. `fresh`: text the runtime supplied, which never
    /// reuses an existing handle and is never found for reuse later.
    async fn issue(&self, p: &Protected, fresh: bool) -> Result<HandleId, ()> {
        let (label, kind_tag, sensitivity, allowed_sinks, anchor) = self.classify(p)?;
        let anchored = anchor && self.anchored;
        // One handle per (session, value, classification): a value read again with the same
        // label, kind, sensitivity, sinks and anchoring gets the handle it already has, so the
        // runtime can recognise it (the caller's own line among three). Anything that differs
        // — above all a weaker read (free text, an unanchored read) — gets a handle of its
        // own: an existing handle's record never changes.
        let class = HandleClass {
            kind: &kind_tag,
            label: &label,
            sensitivity,
            allowed_sinks: &allowed_sinks,
            anchored,
        };
        let reuse_key = handle_reuse_key(self.d.keys, &self.session.id, &class, p.value.as_bytes())
            .map_err(|_| ())?;
        let valid_until = self.d.now.plus_millis(self.d.handle_ttl_ms / 2);
        let reused = if fresh {
            None
        } else {
            self.d
                .store
                .reusable_handle(&self.session.id, &reuse_key, valid_until)
                .await
                .map_err(|_| ())?
        }
        .filter(|r| {
            r.usable(&self.session.caller, &self.session.id, self.d.now)
                .is_ok()
        });
        if let Some(record) = reused {
            let mut ev = AuditEvent::new(AuditKind::HandleIssue, self.d.now);
            ev.session = Some(crate::gateway::audit_session_id(&self.session.id));
            ev.caller = Some(self.session.caller.clone());
            ev.tool = Some(self.entry.exposed.clone());
            ev.detail = json!({
                "handle": record.id, "label": label, "sensitivity": sensitivity,
                "path": audit_path(&p.path), "anchored": record.anchored, "reused": true,
            });
            self.d.store.append_audit(ev).await.map_err(|_| ())?;
            return Ok(record.id);
        }
        let object_id = format!("obj_{}", secureclaw_core::encoding::base32(&random::<16>()));
        let id = mint_handle_id(
            self.d.keys,
            &kind_tag,
            &random::<16>(),
            &self.session.id,
            &object_id,
        )
        .map_err(|_| ())?;
        self.d
            .store
            .put_object(&object_id, 1, p.value.as_bytes(), random::<12>())
            .await
            .map_err(|_| ())?;
        let record = HandleRecord {
            id: id.clone(),
            caller: self.session.caller.clone(),
            session: self.session.id.clone(),
            object_id,
            version: 1,
            label: label.clone(),
            sensitivity,
            source: format!("{}__{}", self.entry.upstream, self.entry.name),
            anchored,
            allowed_sinks,
            created_at: self.d.now,
            expires_at: self.d.now.plus_millis(self.d.handle_ttl_ms),
            revoked: false,
        };
        self.d
            .store
            .put_handle_keyed(&record, (!fresh).then_some(reuse_key.as_str()))
            .await
            .map_err(|_| ())?;
        let mut ev = AuditEvent::new(AuditKind::HandleIssue, self.d.now);
        ev.session = Some(crate::gateway::audit_session_id(&self.session.id));
        ev.caller = Some(self.session.caller.clone());
        ev.tool = Some(self.entry.exposed.clone());
        ev.detail = json!({
            "handle": id, "label": label, "sensitivity": sensitivity, "path": audit_path(&p.path),
            "anchored": record.anchored,
        });
        self.d.store.append_audit(ev).await.map_err(|_| ())?;
        Ok(id)
    }
}

impl Declassifier<'_> {
    /// Declassify one tool result. `resolved` pairs each value the executor resolved for this
    /// call with its handle (the output has already been scrubbed of those values). Returns
    /// the rewritten output, the number of handles issued and whether anything was cut or
    /// withheld without a handle (a summary cut, a non-text block), or `Err(())` if a store
    /// failure prevented vaulting a value (the caller must then return nothing: fail closed).
    pub(crate) async fn declassify(
        &self,
        session: &SessionRecord,
        entry: &ToolEntry,
        anchored: bool,
        output: ToolOutput,
        resolved: &[(String, HandleId)],
    ) -> Result<(ToolOutput, usize, bool), ()> {
        let mut m = Minter {
            d: self,
            session,
            entry,
            anchored,
            minted: HashMap::new(),
            planned: HashMap::new(),
            todo: Vec::new(),
            occurrence: 0,
            echoed: resolved
                .iter()
                .map(|(plain, id)| (id.0.as_str(), plain.as_str()))
                .collect(),
            failed: false,
        };
        // D is deterministic: the first pass finds the values to vault (answering with
        // placeholders of the handles' length), the store issues their handles, and the second
        // pass produces the output with them.
        let first = self.render(entry, &output, &mut |p| m.plan(p));
        if m.planned.is_empty() {
            // Nothing to vault: the first pass met no protected value, so it called no
            // placeholder and the second pass (which only swaps placeholders for handles)
            // would render the same output again. It is the result (issue 14 item 1: a read
            // that withholds nothing is not rendered twice).
            let (structured, content, cut) = first;
            return Ok((
                ToolOutput {
                    content,
                    structured,
                    is_error: output.is_error,
                },
                0,
                cut,
            ));
        }
        drop(first);
        m.occurrence = 0;
        m.issue_planned().await;
        if m.failed {
            return Err(());
        }
        let (structured, content, cut) = self.render(entry, &output, &mut |p| m.mint(p));
        if m.failed {
            return Err(());
        }
        Ok((
            ToolOutput {
                content,
                structured,
                is_error: output.is_error,
            },
            m.minted.len(),
            cut,
        ))
    }

    /// Apply D to the structured content and every text block, minting with `mint`; the last
    /// element says whether anything was cut (a summary truncated, a block withheld).
    fn render(
        &self,
        entry: &ToolEntry,
        output: &ToolOutput,
        mint: &mut dyn FnMut(&Protected) -> String,
    ) -> (Option<Value>, Vec<Value>, bool) {
        let mut cut = false;
        let labels = |path: &str| -> Option<String> {
            self.classifier
                .rule_for(&entry.upstream, &entry.name, path)
                .map(|r| r.label.clone())
        };
        let structured = output.structured.as_ref().map(|v| {
            let s = summarize(v, self.summary, &labels, mint);
            cut |= s.truncated;
            s.value
        });
        // The content blocks are one more list of the result: D keeps at most `max_entries`
        // of them, as of any array, and says how many it withheld. Otherwise a server that
        // splits a result into many blocks would have each summarized within the caps on its
        // own, and release all of them (trial of issue 17: 12 blocks in, 12 out).
        let keep = self.summary.max_entries;
        let mut content = Vec::with_capacity(output.content.len().min(keep).saturating_add(1));
        for block in output.content.iter().take(keep) {
            let text = match (
                block.get("type").and_then(Value::as_str),
                block.get("text").and_then(Value::as_str),
            ) {
                (Some("text"), Some(t)) => t,
                _ => {
                    cut = true;
                    content.push(json!({"type": "text", "text": WITHHELD}));
                    continue;
                }
            };
            let parsed: Option<Value> = serde_json::from_str(text)
                .ok()
                .filter(|v: &Value| v.is_object() || v.is_array());
            let new_text = match (parsed, &structured, &output.structured) {
                (Some(v), Some(summarized), Some(original)) if &v == original => {
                    serde_json::to_string(summarized).unwrap_or_default()
                }
                (Some(v), _, _) => {
                    let s = summarize(&v, self.summary, &labels, mint);
                    cut |= s.truncated;
                    serde_json::to_string(&s.value).unwrap_or_default()
                }
                (None, _, _) => {
                    let (text, truncated) = summarize_text(text, self.summary, mint);
                    cut |= truncated;
                    text
                }
            };
            content.push(json!({"type": "text", "text": new_text}));
        }
        let more = output.content.len().saturating_sub(keep);
        if more > 0 {
            cut = true;
            content
                .push(json!({"type": "text", "text": format!("{ELLIPSIS}[{more} more blocks]")}));
        }
        (structured, content, cut)
    }
}
