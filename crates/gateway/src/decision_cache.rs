//! A bounded cache of policy decisions for plain reads (issue 14 item 4, "a fast policy
//! path").
//!
//! A Cedar decision costs tens of microseconds, about as much as the rest of a read's gateway
//! work together. Most reads repeat: the same caller calls the same read tool, with no effect
//! targets and no handles in its arguments, and such a request's policy facts are a handful
//! of strings and flags that do not change from one call to the next. [`DecisionCache`] keeps
//! the engine's answer for those requests only:
//!
//! - **what is cached**: a request whose effect class is `read`, with no target and no handle
//!   ([`DecisionCache::cacheable`]). Every other request — an effect, a read with a target or a
//!   handle — goes to the engine every time, so nothing about targets, anchoring or handle
//!   sinks is ever answered from memory;
//! - **the key**: the policy-set digest, the caller, the upstream and the tool, and every other
//!   fact of the request that reaches the engine (known tool, listing, destructive, financial,
//!   granted, sink, targets declared). A cacheable request's remaining facts are fixed (no
//!   targets, no handles), so the key holds the whole input of the decision: the cached answer
//!   is the answer the engine gave for an identical request. [`PolicyEngine`] requires a
//!   deterministic engine for a fixed policy set, so it is also the answer it would give now;
//! - **invalidation**: every lookup first reads the engine's digest; when it differs from the
//!   digest the entries were stored under, the cache is emptied. A decision is stored only if
//!   the digest read before asking the engine is still the digest after it, so a decision of a
//!   policy set that changed meanwhile is never filed under the other set's digest;
//! - **bound**: at most [`CAPACITY`] entries; when full, the cache is emptied before the next
//!   insert (simple, and a working set that large is rebuilt at the cost of one decision per
//!   entry).
//!
//! The read path's other checks (the tool is a read in the catalog, a `confirm` is refused for
//! a read, every handle's record names the read as a sink) stay in
//! [`crate::permit::ReadPermit::decide`] and run on every call; only the engine's answer is
//! cached.

use secureclaw_core::handle::SinkKind;
use secureclaw_core::policy::{EffectClass, PolicyDecision, PolicyEngine, PolicyRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The largest number of decisions kept.
pub const CAPACITY: usize = 4096;

/// Every fact of a cacheable request that reaches the engine (the digest is the cache's own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    caller: String,
    upstream: String,
    tool: String,
    known_tool: bool,
    listing: bool,
    destructive: bool,
    financial: bool,
    granted: bool,
    sink: SinkKind,
    targets_declared: bool,
}

impl Key {
    fn of(req: &PolicyRequest) -> Self {
        // Destructured so that a fact added to `PolicyRequest` fails to compile here until it
        // is either part of the key or a reason not to cache.
        let PolicyRequest {
            caller,
            upstream,
            tool,
            effect: _,
            known_tool,
            destructive,
            financial,
            granted,
            sink,
            targets_declared,
            targets: _,
            handles: _,
            listing,
        } = req;
        Self {
            caller: caller.clone(),
            upstream: upstream.clone(),
            tool: tool.clone(),
            known_tool: *known_tool,
            listing: *listing,
            destructive: *destructive,
            financial: *financial,
            granted: *granted,
            sink: *sink,
            targets_declared: *targets_declared,
        }
    }
}

#[derive(Debug, Default)]
struct Entries {
    digest: String,
    decisions: HashMap<Key, PolicyDecision>,
}

/// A [`PolicyEngine`] that answers repeated plain reads from a bounded cache and asks the
/// wrapped engine everything else ([module docs](self)).
pub struct DecisionCache {
    engine: Arc<dyn PolicyEngine>,
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for DecisionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCache").finish_non_exhaustive()
    }
}

impl DecisionCache {
    /// Wrap `engine`.
    #[must_use]
    pub fn new(engine: Arc<dyn PolicyEngine>) -> Self {
        Self {
            engine,
            entries: Mutex::default(),
        }
    }

    /// Whether a decision on `req` may be served from the cache: a read with no target and
    /// no handle.
    #[must_use]
    pub fn cacheable(req: &PolicyRequest) -> bool {
        req.effect == EffectClass::Read && req.targets.is_empty() && req.handles.is_empty()
    }

    /// How many decisions are cached now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.decisions.len())
    }

    /// Whether no decision is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PolicyEngine for DecisionCache {
    fn decide(&self, request: &PolicyRequest) -> PolicyDecision {
        if !Self::cacheable(request) {
            return self.engine.decide(request);
        }
        let digest = self.engine.digest();
        let key = Key::of(request);
        // A poisoned lock only means another caller panicked while holding it: the map
        // itself is whole (every update is a single insert or clear), but nothing is gained by
        // trusting it, so such a cache is bypassed.
        if let Ok(mut entries) = self.entries.lock() {
            if entries.digest != digest {
                entries.decisions.clear();
                entries.digest.clone_from(&digest);
            } else if let Some(hit) = entries.decisions.get(&key) {
                return hit.clone();
            }
        }
        let decision = self.engine.decide(request);
        if self.engine.digest() == digest
            && let Ok(mut entries) = self.entries.lock()
            && entries.digest == digest
        {
            if entries.decisions.len() >= CAPACITY {
                entries.decisions.clear();
            }
            entries.decisions.insert(key, decision.clone());
        }
        decision
    }

    fn digest(&self) -> String {
        self.engine.digest()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use secureclaw_core::handle::Sensitivity;
    use secureclaw_core::policy::{HandleFact, Provenance, TargetFact};
    use secureclaw_core::recovery::ReasonCode;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// An engine that counts its decisions. It allows a read with no target and no handle,
    /// denies anything with a target (`protected_object`) or a handle (`handle_sink_forbidden`)
    /// and, once `switched`, denies everything under another digest.
    #[derive(Default)]
    struct Counting {
        calls: AtomicUsize,
        switched: AtomicBool,
    }

    impl PolicyEngine for Counting {
        fn decide(&self, r: &PolicyRequest) -> PolicyDecision {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.switched.load(Ordering::SeqCst) {
                return PolicyDecision::Deny {
                    reason: ReasonCode::PolicyDeny,
                    policies: vec!["v2".into()],
                };
            }
            if !r.targets.is_empty() {
                return PolicyDecision::Deny {
                    reason: ReasonCode::ProtectedObject,
                    policies: vec!["targets".into()],
                };
            }
            if !r.handles.is_empty() {
                return PolicyDecision::Deny {
                    reason: ReasonCode::HandleSinkForbidden,
                    policies: vec!["handles".into()],
                };
            }
            PolicyDecision::Allow {
                policies: vec![format!("allow:{}", r.caller)],
            }
        }

        fn digest(&self) -> String {
            if self.switched.load(Ordering::SeqCst) {
                "v2".into()
            } else {
                "v1".into()
            }
        }
    }

    fn read(caller: &str) -> PolicyRequest {
        PolicyRequest {
            caller: caller.into(),
            upstream: "files".into(),
            tool: "read_file".into(),
            effect: EffectClass::Read,
            known_tool: true,
            destructive: false,
            financial: false,
            granted: false,
            sink: SinkKind::Store,
            targets_declared: false,
            targets: vec![],
            handles: vec![],
            listing: false,
        }
    }

    fn target() -> TargetFact {
        TargetFact {
            field: "path".into(),
            anchored: false,
            via_handle: false,
            provenance: Provenance::Task,
        }
    }

    fn handle() -> HandleFact {
        HandleFact {
            label: "secret".into(),
            sensitivity: Sensitivity::High,
            sink_allowed: false,
        }
    }

    fn setup() -> (Arc<Counting>, DecisionCache) {
        let engine = Arc::new(Counting::default());
        let cache = DecisionCache::new(engine.clone());
        (engine, cache)
    }

    #[test]
    fn a_repeated_plain_read_is_decided_once() {
        let (engine, cache) = setup();
        let first = cache.decide(&read("agent"));
        let second = cache.decide(&read("agent"));
        assert_eq!(first, second);
        assert!(matches!(first, PolicyDecision::Allow { .. }));
        assert_eq!(engine.calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_read_with_a_target_never_uses_the_cached_allow() {
        let (engine, cache) = setup();
        assert!(matches!(
            cache.decide(&read("agent")),
            PolicyDecision::Allow { .. }
        ));
        let mut attack = read("agent");
        attack.targets.push(target());
        for _ in 0..2 {
            match cache.decide(&attack) {
                PolicyDecision::Deny { reason, .. } => {
                    assert_eq!(reason, ReasonCode::ProtectedObject);
                }
                other => panic!("a request with a target was answered {other:?}"),
            }
        }
        // Both went to the engine, and neither was stored.
        assert_eq!(engine.calls.load(Ordering::SeqCst), 3);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_read_with_a_handle_never_uses_the_cached_allow() {
        let (engine, cache) = setup();
        assert!(matches!(
            cache.decide(&read("agent")),
            PolicyDecision::Allow { .. }
        ));
        let mut attack = read("agent");
        attack.handles.push(handle());
        for _ in 0..2 {
            match cache.decide(&attack) {
                PolicyDecision::Deny { reason, .. } => {
                    assert_eq!(reason, ReasonCode::HandleSinkForbidden);
                }
                other => panic!("a request with a handle was answered {other:?}"),
            }
        }
        assert_eq!(engine.calls.load(Ordering::SeqCst), 3);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_policy_change_empties_the_cache() {
        let (engine, cache) = setup();
        assert!(matches!(
            cache.decide(&read("agent")),
            PolicyDecision::Allow { .. }
        ));
        engine.switched.store(true, Ordering::SeqCst);
        match cache.decide(&read("agent")) {
            PolicyDecision::Deny { policies, .. } => assert_eq!(policies, vec!["v2".to_owned()]),
            other => panic!("the old set's decision was served after a change: {other:?}"),
        }
        assert_eq!(engine.calls.load(Ordering::SeqCst), 2);
        // The new set's decision is cached in turn.
        let _ = cache.decide(&read("agent"));
        assert_eq!(engine.calls.load(Ordering::SeqCst), 2);
        assert_eq!(cache.digest(), "v2");
    }

    #[test]
    fn effects_and_other_callers_and_facts_are_not_shared() {
        let (engine, cache) = setup();
        let _ = cache.decide(&read("agent"));
        let _ = cache.decide(&read("other"));
        let mut listing = read("agent");
        listing.listing = true;
        let _ = cache.decide(&listing);
        let mut granted = read("agent");
        granted.granted = true;
        let _ = cache.decide(&granted);
        assert_eq!(engine.calls.load(Ordering::SeqCst), 4);
        assert_eq!(cache.len(), 4);
        // The other caller's answer names its own caller, not the first one's.
        match cache.decide(&read("other")) {
            PolicyDecision::Allow { policies } => assert_eq!(policies, vec!["allow:other"]),
            other => panic!("{other:?}"),
        }
        let mut effect = read("agent");
        effect.effect = EffectClass::Effect;
        let _ = cache.decide(&effect);
        let _ = cache.decide(&effect);
        assert_eq!(engine.calls.load(Ordering::SeqCst), 6);
        assert_eq!(cache.len(), 4);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let (_, cache) = setup();
        for i in 0..(CAPACITY + 10) {
            let _ = cache.decide(&read(&format!("caller{i}")));
            assert!(cache.len() <= CAPACITY);
        }
        assert!(!cache.is_empty());
    }

    /// The real Cedar engine with an operator file that forbids reads with a target or a
    /// handle: after a plain read's allow is cached, the same caller's read of the same tool
    /// with a target or a handle is still denied by Cedar, for Cedar's reason.
    #[test]
    fn with_cedar_a_cached_allow_never_answers_a_read_with_a_target_or_handle() {
        let extra = vec![(
            "reads.cedar".to_owned(),
            r#"
@id("no-target-reads")
@reason("protected_object")
forbid (principal, action == Action::"read", resource) when { context.target_count > 0 };

@id("no-labelled-reads")
@reason("handle_sink_forbidden")
forbid (principal, action == Action::"read", resource)
when { context.handle_labels.contains("secret") };
"#
            .to_owned(),
        )];
        let cedar: Arc<dyn PolicyEngine> =
            Arc::new(secureclaw_policy::CedarPolicy::load(&extra).unwrap());
        let cache = DecisionCache::new(cedar.clone());
        let plain = read("agent");
        let direct = cedar.decide(&plain);
        assert!(matches!(direct, PolicyDecision::Allow { .. }), "{direct:?}");
        assert_eq!(cache.decide(&plain), direct);
        assert_eq!(cache.decide(&plain), direct);
        assert_eq!(cache.len(), 1);

        let mut with_target = plain.clone();
        with_target.targets.push(target());
        match cache.decide(&with_target) {
            PolicyDecision::Deny { reason, policies } => {
                assert_eq!(reason, ReasonCode::ProtectedObject);
                assert_eq!(policies, vec!["reads.cedar:no-target-reads".to_owned()]);
            }
            other => panic!("a read with a target was answered {other:?}"),
        }
        let mut with_handle = plain.clone();
        with_handle.handles.push(HandleFact {
            sink_allowed: true,
            ..handle()
        });
        match cache.decide(&with_handle) {
            PolicyDecision::Deny { reason, policies } => {
                assert_eq!(reason, ReasonCode::HandleSinkForbidden);
                assert_eq!(policies, vec!["reads.cedar:no-labelled-reads".to_owned()]);
            }
            other => panic!("a read with a handle was answered {other:?}"),
        }
        assert_eq!(cache.len(), 1);
    }
}
