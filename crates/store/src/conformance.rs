//! The storage conformance suite: one corpus of contract checks, run against every
//! implementation of [`secureclaw_core::store::Store`] (SQLite here, PostgreSQL in
//! [`crate::postgres`]), in the manner of `cedar-testing`.
//!
//! An implementation's test file calls [`conformance_tests!`](crate::conformance_tests) with an
//! async factory that returns a fresh, empty [`Subject`]; the macro expands to one
//! `#[tokio::test]` per check. Each check returns `Err(text)` naming the broken contract rather
//! than panicking, so this module obeys the crate's lints; the generated tests turn an `Err`
//! into a failure.
//!
//! What is covered:
//! - each trait's contract ([`sessions`], [`protected_objects`], [`vault`], [`handles`], [`actions_and_approvals`],
//!   [`ledger_transitions`], [`audit_chain`]);
//! - single use under concurrency: many tasks on several independent connections race to
//!   reserve one action id, exactly one wins ([`single_use_under_concurrency`]);
//! - approvals decided once under concurrency ([`approval_decided_once_under_concurrency`]);
//! - the `reserved → executed | failed | outcome_unknown` transitions and the refusal of every
//!   other one ([`ledger_transitions`]);
//! - one audit chain under concurrent appenders on independent connections
//!   ([`audit_chain_under_concurrent_appenders`]);
//! - the speculation budget ([`speculation_budget`]), charged once under concurrency
//!   ([`budget_charged_once_under_concurrency`]);
//! - vault plaintext never in the stored bytes ([`vault_ciphertext_never_in_clear`]);
//! - standing grants ([`standing_grants`]): stored whole, live until expiry, uses or
//!   revocation, revoked once; their last use taken exactly once by racing replicas
//!   ([`standing_grant_use_taken_once_under_concurrency`]);
//! - per-session task state: grant uses ([`grant_uses`]), taken once under concurrency
//!   ([`grant_use_taken_once_under_concurrency`]); read amounts ([`read_amounts`]); the bounded
//!   written set ([`written_set`], [`written_set_bounds`]), appended gap-free under
//!   concurrency ([`written_set_appends_under_concurrency`]), its values never in clear
//!   ([`written_values_never_in_clear`]);
//! - held speculative calls and branch states ([`held_calls`], [`held_call_bounds`]): a
//!   settled branch's calls are taken exactly once by racing replicas
//!   ([`held_calls_released_once_under_concurrency`]), the per-session caps hold under
//!   concurrent holds ([`held_caps_under_concurrency`]), the calls are never in clear
//!   ([`held_calls_never_in_clear`]);
//! - shared rate-limit buckets ([`rate_buckets`]), whose last tokens racing replicas take
//!   exactly once ([`rate_taken_once_under_concurrency`]);
//! - the batched writes around an effect: the pre-effect records and the reservation in one
//!   transaction, all or nothing ([`pre_effect_writes_in_one_transaction`]), and group commits
//!   of audit records and ledger outcomes keeping one chain under concurrency
//!   ([`group_commit`]);
//! - expiry: nothing disappears by itself (sessions and handles past their expiry stay stored
//!   and are refused by the callers' checks, [`expired_records_stay_until_checked`]) until a
//!   retention sweep removes them in bounded batches, keeping the ledger, actions, approvals
//!   and the audit chain ([`retention_sweep`]);
//! - audit archiving: a verified segment is checkpointed and pruned in one transaction, the
//!   log verifies from the checkpoint, checkpoints chain, new records (single, grouped,
//!   pre-effect) chain after the checkpoint even when every record was archived
//!   ([`audit_archive`]), concurrent appenders keep one chain across archives
//!   ([`audit_archive_under_concurrent_appenders`]), the schema refuses pruning what no
//!   checkpoint covers and changing checkpoints ([`audit_archive_schema_refuses_pruning`]),
//!   and deleting more records, editing a checkpoint or forging one is detected
//!   ([`audit_archive_detects_deleted_records`], [`audit_archive_detects_edited_checkpoint`],
//!   [`audit_archive_detects_forged_checkpoint`]).

use secureclaw_core::audit::{ArchiveSegment, AuditCheckpoint, AuditError, AuditEvent, AuditKind};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::confirmation::{Confirmation, ConfirmationClaims};
use secureclaw_core::contract::BranchState;
use secureclaw_core::handle::{HandleId, HandleRecord, Sensitivity};
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::recovery::Limit;
use secureclaw_core::store::{
    ActionRecord, ApprovalState, GroupWrite, HeldBounds, HoldOutcome, LedgerState, RateLimits,
    RateTake, SessionRecord, StandingGrant, Store, StoreError, WrittenBounds, WrittenValue,
};
use secureclaw_core::task_state::{StateDigest, state_digest};
use secureclaw_core::{ActionId, ReasonCode, TaskEnvelope, UnixMillis};
use std::sync::Arc;

/// What a check needs from an implementation under test.
#[async_trait::async_trait]
pub trait Subject: Send + Sync {
    /// The store under test (empty when the subject is made).
    fn store(&self) -> Arc<dyn Store>;

    /// The key ring the store was opened with.
    fn keys(&self) -> Arc<KeyRing>;

    /// Another, independent handle on the same storage — a new connection or pool, as a
    /// second process or replica would open.
    ///
    /// # Errors
    /// A description of what failed.
    async fn reopen(&self) -> Result<Arc<dyn Store>, String>;

    /// Every byte the storage holds as stored (database files, or every row as the server
    /// returns it), for the at-rest checks.
    ///
    /// # Errors
    /// A description of what failed.
    async fn raw_bytes(&self) -> Result<Vec<u8>, String>;

    /// Run `sql` (plain `UPDATE`, `DELETE` and `INSERT` statements, valid in both dialects)
    /// directly on the storage, bypassing the store, as someone with write access to the
    /// database would — after removing the integrity triggers of `tables` (none: the triggers
    /// stay and may refuse). For the tamper checks of the audit archive.
    ///
    /// # Errors
    /// The database's refusal or failure, as text.
    async fn tamper(&self, tables: &[&str], sql: &str) -> Result<(), String>;
}

/// The result of one check: `Err` names the contract that was broken.
pub type Outcome = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn fail(what: &str) -> impl Fn(StoreError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// `[first]` and `extra` independent handles on the same storage ([`Subject::reopen`]), as
/// several processes or replicas would open.
async fn with_reopened(
    s: &dyn Subject,
    first: Arc<dyn Store>,
    extra: usize,
) -> Result<Vec<Arc<dyn Store>>, String> {
    let mut stores = vec![first];
    for _ in 0..extra {
        stores.push(s.reopen().await?);
    }
    Ok(stores)
}

/// The storage's raw bytes are not empty (positive control) and hold none of `needles`.
async fn never_in_clear(s: &dyn Subject, needles: &[&[u8]]) -> Outcome {
    let raw = s.raw_bytes().await?;
    ensure!(!raw.is_empty(), "positive control: the raw dump is empty");
    for needle in needles {
        ensure!(
            !raw.windows(needle.len()).any(|w| w == *needle),
            "plaintext `{}` found in the stored bytes",
            String::from_utf8_lossy(needle)
        );
    }
    Ok(())
}

fn binding() -> BindingDigest {
    BindingDigest {
        kid: KeyId("bind-1".into()),
        digest: "ab".repeat(32),
    }
}

fn act(n: u32) -> ActionId {
    ActionId(format!("act_{n:026}"))
}

fn action(id: &ActionId) -> ActionRecord {
    ActionRecord {
        action_id: id.clone(),
        session: "s1".into(),
        caller: "alice".into(),
        tool: "bank__pay_invoice".into(),
        binding: binding(),
        needs_confirmation: true,
        created_at: UnixMillis(100),
        request_json: r#"{"intent":{"tool":"pay_invoice","upstream":"bank"}}"#.into(),
        display: "bank__pay_invoice: pay 120.00 EUR".into(),
    }
}

fn session(id: &str, expires_at: u64) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        caller: "alice".into(),
        envelope: TaskEnvelope {
            request: "pay INV-42".into(),
            trusted_targets: vec!["billing@acme.example".into()],
            ..TaskEnvelope::default()
        },
        created_at: UnixMillis(10),
        expires_at: UnixMillis(expires_at),
    }
}

fn handle(id: &str, session: &str, object_id: &str, created: u64) -> HandleRecord {
    HandleRecord {
        id: HandleId(id.into()),
        caller: "alice".into(),
        session: session.into(),
        object_id: object_id.into(),
        version: 1,
        label: "iban".into(),
        sensitivity: Sensitivity::High,
        source: "office__read_invoice".into(),
        anchored: true,
        allowed_sinks: vec!["bank__pay_*".into()],
        created_at: UnixMillis(created),
        expires_at: UnixMillis(created + 1000),
        revoked: false,
    }
}

fn confirmation(keys: &KeyRing, id: &ActionId) -> Result<Confirmation, String> {
    Confirmation::seal(
        ConfirmationClaims {
            action_id: id.clone(),
            binding: binding(),
            confirmer: "operator".into(),
            confirmed_at: UnixMillis(200),
            expires_at: UnixMillis(900),
        },
        keys,
    )
    .map_err(|e| format!("seal confirmation: {e}"))
}

fn event(n: u64) -> AuditEvent {
    AuditEvent {
        session: Some("ses#0123456789abcdef".into()),
        action_id: Some(format!("act_{n}")),
        reason: n.is_multiple_of(2).then_some(ReasonCode::Replay),
        detail: serde_json::json!({"n": n, "ratio": 0.1 + 0.2, "count": u64::MAX}),
        ..AuditEvent::new(AuditKind::Preview, UnixMillis(n))
    }
}

/// Sessions: stored once, read back whole, never overwritten; unknown ids are `None`.
///
/// # Errors
/// The broken contract.
pub async fn sessions(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let rec = session("ses_a", 5_000);
    store.put_session(&rec).await.map_err(fail("put_session"))?;
    let back = store.session("ses_a").await.map_err(fail("session"))?;
    ensure!(
        back.as_ref() == Some(&rec),
        "session read back differs: {back:?}"
    );
    let mut other = rec.clone();
    other.caller = "mallory".into();
    let again = store.put_session(&other).await;
    ensure!(
        matches!(again, Err(StoreError::Conflict(_))),
        "a second session with the same id must be a conflict, got {again:?}"
    );
    let back = store.session("ses_a").await.map_err(fail("session"))?;
    ensure!(
        back.as_ref() == Some(&rec),
        "the first session was overwritten"
    );
    let none = store
        .session("ses_missing")
        .await
        .map_err(fail("session"))?;
    ensure!(none.is_none(), "unknown session answered {none:?}");
    Ok(())
}

/// Protected objects: recorded per session, idempotently; a lookup finds any recorded key of
/// that session and nothing of another session; another connection (a replica, a restart)
/// sees them.
///
/// # Errors
/// The broken contract.
pub async fn protected_objects(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let keys = |v: &[&str]| v.iter().map(|k| (*k).to_owned()).collect::<Vec<String>>();
    let none = store
        .any_protected("ses_p", &keys(&["pobj:a"]))
        .await
        .map_err(fail("any_protected"))?;
    ensure!(!none, "an empty store reported a protected object");
    store
        .protect_objects("ses_p", &keys(&["pobj:a", "pobj:b"]))
        .await
        .map_err(fail("protect_objects"))?;
    // Idempotent: recording again (one key known, one new) succeeds.
    store
        .protect_objects("ses_p", &keys(&["pobj:b", "pobj:c"]))
        .await
        .map_err(fail("protect_objects again"))?;
    store
        .protect_objects("ses_p", &[])
        .await
        .map_err(fail("protect_objects with no keys"))?;
    for k in ["pobj:a", "pobj:b", "pobj:c"] {
        let found = store
            .any_protected("ses_p", &keys(&["pobj:zz", k]))
            .await
            .map_err(fail("any_protected"))?;
        ensure!(found, "recorded key `{k}` not found");
    }
    let other = store
        .any_protected("ses_q", &keys(&["pobj:a", "pobj:b"]))
        .await
        .map_err(fail("any_protected other session"))?;
    ensure!(
        !other,
        "another session saw this session's protected objects"
    );
    let missing = store
        .any_protected("ses_p", &keys(&["pobj:zz"]))
        .await
        .map_err(fail("any_protected missing"))?;
    ensure!(!missing, "an unrecorded key was reported protected");
    let empty = store
        .any_protected("ses_p", &[])
        .await
        .map_err(fail("any_protected no keys"))?;
    ensure!(!empty, "no keys must mean not protected");
    let again = s.reopen().await?;
    let seen = again
        .any_protected("ses_p", &keys(&["pobj:c"]))
        .await
        .map_err(fail("any_protected after reopen"))?;
    ensure!(
        seen,
        "another connection does not see the protected objects"
    );
    Ok(())
}

/// Vault: versions are immutable, the newest is returned by default, exact versions on
/// request, a reused nonce is refused, unknown objects are `None`.
///
/// # Errors
/// The broken contract.
pub async fn vault(s: &dyn Subject) -> Outcome {
    let store = s.store();
    store
        .put_object("obj-1", 1, b"first", [1; 12])
        .await
        .map_err(fail("put_object v1"))?;
    store
        .put_object("obj-1", 2, b"second", [2; 12])
        .await
        .map_err(fail("put_object v2"))?;
    let newest = store
        .object_value("obj-1")
        .await
        .map_err(fail("object_value"))?;
    ensure!(
        newest.as_deref().map(Vec::as_slice) == Some(b"second".as_slice()),
        "object_value must return the highest version"
    );
    let v1 = store
        .object_value_at("obj-1", 1)
        .await
        .map_err(fail("object_value_at"))?;
    ensure!(
        v1.as_deref().map(Vec::as_slice) == Some(b"first".as_slice()),
        "object_value_at must return exactly that version"
    );
    let v9 = store
        .object_value_at("obj-1", 9)
        .await
        .map_err(fail("object_value_at"))?;
    ensure!(v9.is_none(), "a missing version must be None");
    let again = store.put_object("obj-1", 1, b"other", [3; 12]).await;
    ensure!(
        matches!(again, Err(StoreError::Conflict(_))),
        "storing an existing version must be a conflict, got {again:?}"
    );
    let reused = store.put_object("obj-2", 1, b"x", [1; 12]).await;
    ensure!(
        matches!(reused, Err(StoreError::Invalid(_))),
        "a reused nonce must be refused, got {reused:?}"
    );
    let none = store
        .object_value("obj-none")
        .await
        .map_err(fail("object_value"))?;
    ensure!(none.is_none(), "an unknown object must be None");
    Ok(())
}

/// The vault's plaintext never appears in the stored bytes; the ciphertext does not decrypt
/// through another store with other keys.
///
/// # Errors
/// The broken contract.
pub async fn vault_ciphertext_never_in_clear(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let secret = b"DE89370400440532013000 card 4111111111111111 conformance-secret";
    store
        .put_object("obj-secret", 1, secret, [9; 12])
        .await
        .map_err(fail("put_object"))?;
    let back = store
        .object_value("obj-secret")
        .await
        .map_err(fail("object_value"))?;
    ensure!(
        back.as_deref().map(Vec::as_slice) == Some(secret.as_slice()),
        "positive control: the value must read back"
    );
    never_in_clear(
        s,
        &[
            b"DE89370400440532013000",
            b"4111111111111111",
            b"conformance-secret",
        ],
    )
    .await?;
    Ok(())
}

/// Handles: stored once, read back whole, revoked once and permanently, listed per session
/// oldest first, found for reuse only when live, unrevoked and valid long enough.
///
/// # Errors
/// The broken contract.
pub async fn handles(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let h1 = handle("hdl_ib_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "s1", "o1", 20);
    let h2 = handle("hdl_ib_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "s1", "o2", 10);
    let h3 = handle("hdl_ib_cccccccccccccccccccccccccccccccc", "s2", "o3", 5);
    store.put_handle(&h1).await.map_err(fail("put_handle"))?;
    store
        .put_handle_keyed(&h2, Some("reuse-key"))
        .await
        .map_err(fail("put_handle_keyed"))?;
    store.put_handle(&h3).await.map_err(fail("put_handle"))?;
    let again = store.put_handle(&h1).await;
    ensure!(
        matches!(again, Err(StoreError::Conflict(_))),
        "a second handle with the same id must be a conflict, got {again:?}"
    );
    let back = store.handle(&h1.id).await.map_err(fail("handle"))?;
    ensure!(
        back.as_ref() == Some(&h1),
        "handle read back differs: {back:?}"
    );
    let listed = store
        .handles_for_session("s1")
        .await
        .map_err(fail("handles_for_session"))?;
    ensure!(
        listed == vec![h2.clone(), h1.clone()],
        "handles_for_session must list the session's handles oldest first, got {listed:?}"
    );
    let reuse = store
        .reusable_handle("s1", "reuse-key", UnixMillis(500))
        .await
        .map_err(fail("reusable_handle"))?;
    ensure!(
        reuse.as_ref() == Some(&h2),
        "the keyed handle must be reusable"
    );
    let too_late = store
        .reusable_handle("s1", "reuse-key", UnixMillis(5_000))
        .await
        .map_err(fail("reusable_handle"))?;
    ensure!(
        too_late.is_none(),
        "a handle expiring too soon must not be reused"
    );
    let other_session = store
        .reusable_handle("s2", "reuse-key", UnixMillis(0))
        .await
        .map_err(fail("reusable_handle"))?;
    ensure!(
        other_session.is_none(),
        "reuse must stay within the session"
    );
    ensure!(
        store.revoke_handle(&h2.id).await.map_err(fail("revoke"))?,
        "the first revocation must report true"
    );
    ensure!(
        !store.revoke_handle(&h2.id).await.map_err(fail("revoke"))?,
        "a second revocation must report false"
    );
    ensure!(
        !store
            .revoke_handle(&HandleId("hdl_ib_unknown".into()))
            .await
            .map_err(fail("revoke"))?,
        "revoking an unknown handle must report false"
    );
    let revoked = store.handle(&h2.id).await.map_err(fail("handle"))?;
    ensure!(
        revoked.is_some_and(|r| r.revoked),
        "a revoked handle must read back revoked"
    );
    let reuse = store
        .reusable_handle("s1", "reuse-key", UnixMillis(0))
        .await
        .map_err(fail("reusable_handle"))?;
    ensure!(reuse.is_none(), "a revoked handle must not be reused");
    Ok(())
}

/// Nothing expires by itself: sessions and handles past their expiry stay stored (the callers'
/// checks refuse them, with one generic denial) until a retention sweep removes them
/// ([`retention_sweep`]), and nothing disappears behind an audit.
///
/// # Errors
/// The broken contract.
pub async fn expired_records_stay_until_checked(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let rec = session("ses_old", 11);
    store.put_session(&rec).await.map_err(fail("put_session"))?;
    let h = handle(
        "hdl_ib_dddddddddddddddddddddddddddddddd",
        "ses_old",
        "o4",
        1,
    );
    store.put_handle(&h).await.map_err(fail("put_handle"))?;
    let other = s.reopen().await?;
    ensure!(
        other.session("ses_old").await.map_err(fail("session"))? == Some(rec),
        "an expired session must stay readable (callers check expiry)"
    );
    let back = other.handle(&h.id).await.map_err(fail("handle"))?;
    ensure!(
        back.is_some_and(|r| r.usable("alice", "ses_old", UnixMillis(5_000)).is_err()),
        "an expired handle must stay readable and be refused by the caller's check"
    );
    Ok(())
}

/// Actions and approvals: actions stored once; approvals only for stored actions, created
/// idempotently, decided exactly once, denials without confirmations, confirmations only
/// for their own action; listing by state.
///
/// # Errors
/// The broken contract.
pub async fn actions_and_approvals(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let keys = s.keys();
    let (a1, a2, a3) = (act(1), act(2), act(3));
    for id in [&a1, &a2, &a3] {
        store
            .put_action(&action(id))
            .await
            .map_err(fail("put_action"))?;
    }
    let again = store.put_action(&action(&a1)).await;
    ensure!(
        matches!(again, Err(StoreError::Conflict(_))),
        "a second action with the same id must be a conflict, got {again:?}"
    );
    let back = store.action(&a1).await.map_err(fail("action"))?;
    ensure!(
        back == Some(action(&a1)),
        "action read back differs: {back:?}"
    );
    ensure!(
        store
            .action(&act(99))
            .await
            .map_err(fail("action"))?
            .is_none(),
        "an unknown action must be None"
    );
    let orphan = store.create_approval(&act(99), UnixMillis(1)).await;
    ensure!(
        matches!(orphan, Err(StoreError::NotFound(_))),
        "an approval for an unknown action must be NotFound, got {orphan:?}"
    );
    for (i, id) in [&a1, &a2, &a3].into_iter().enumerate() {
        let at = UnixMillis(150 + u64::try_from(i).unwrap_or(0));
        store
            .create_approval(id, at)
            .await
            .map_err(fail("create_approval"))?;
        store
            .create_approval(id, UnixMillis(999))
            .await
            .map_err(fail("create_approval again"))?;
    }
    let p = store.approval(&a1).await.map_err(fail("approval"))?;
    ensure!(
        p.as_ref().is_some_and(|p| p.state == ApprovalState::Pending
            && p.created_at == UnixMillis(150)
            && p.decided_at.is_none()),
        "a new approval must be pending and keep its first creation time, got {p:?}"
    );
    let c1 = confirmation(&keys, &a1)?;
    let wrong = store
        .decide_approval(&a2, true, "operator", UnixMillis(200), Some(c1.clone()))
        .await;
    ensure!(
        matches!(wrong, Err(StoreError::Invalid(_))),
        "a confirmation for another action must be refused, got {wrong:?}"
    );
    let deny_with = store
        .decide_approval(
            &a2,
            false,
            "operator",
            UnixMillis(200),
            Some(confirmation(&keys, &a2)?),
        )
        .await;
    ensure!(
        matches!(deny_with, Err(StoreError::Invalid(_))),
        "a denial carrying a confirmation must be refused, got {deny_with:?}"
    );
    let decided = store
        .decide_approval(&a1, true, "operator", UnixMillis(200), Some(c1.clone()))
        .await
        .map_err(fail("decide_approval"))?;
    ensure!(
        decided.state == ApprovalState::Approved
            && decided.decided_by.as_deref() == Some("operator")
            && decided.decided_at == Some(UnixMillis(200))
            && decided.confirmation.as_ref() == Some(&c1),
        "the decided record differs: {decided:?}"
    );
    let twice = store
        .decide_approval(&a1, false, "mallory", UnixMillis(300), None)
        .await;
    ensure!(
        matches!(twice, Err(StoreError::Conflict(_))),
        "a decided approval must not be decided again, got {twice:?}"
    );
    store
        .decide_approval(&a2, false, "operator", UnixMillis(210), None)
        .await
        .map_err(fail("deny"))?;
    let none = store
        .decide_approval(&act(98), true, "operator", UnixMillis(1), None)
        .await;
    ensure!(
        matches!(none, Err(StoreError::NotFound(_))),
        "deciding without an approval must be NotFound, got {none:?}"
    );
    let stored = store.approval(&a1).await.map_err(fail("approval"))?;
    ensure!(
        stored == Some(decided),
        "the decision must read back unchanged"
    );
    let pending = store
        .list_approvals(Some(ApprovalState::Pending))
        .await
        .map_err(fail("list_approvals"))?;
    ensure!(
        pending.len() == 1
            && pending
                .iter()
                .all(|(p, a)| p.action_id == a3 && a.action_id == a3),
        "only the third approval is pending, got {pending:?}"
    );
    let all = store
        .list_approvals(None)
        .await
        .map_err(fail("list_approvals"))?;
    let order: Vec<&ActionId> = all.iter().map(|(p, _)| &p.action_id).collect();
    ensure!(
        order == vec![&a1, &a2, &a3],
        "all approvals, oldest first, expected; got {order:?}"
    );
    Ok(())
}

/// [`secureclaw_core::store::ActionStore::approved_unused`]: the newest approved action of
/// the session with that binding, approved since the given time, never committed; pending,
/// denied, committed, older, other-session and other-binding actions are never returned.
pub async fn approved_unused(s: &dyn Subject) -> Outcome {
    let (store, keys) = (s.store(), s.keys());
    let other = BindingDigest {
        kid: KeyId("bind-1".into()),
        digest: "cd".repeat(32),
    };
    let none = store
        .approved_unused("s1", &binding(), UnixMillis(0))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(none.is_none(), "no action yet, got {none:?}");
    // a1 approved at 200, a2 approved at 250, a3 pending, a4 denied, a5 another session,
    // a6 another binding.
    let ids: Vec<ActionId> = (1..=6).map(|n| act(200 + n)).collect();
    for (i, id) in ids.iter().enumerate() {
        let mut rec = action(id);
        if i == 4 {
            rec.session = "s2".into();
        }
        if i == 5 {
            rec.binding = other.clone();
        }
        store.put_action(&rec).await.map_err(fail("put_action"))?;
        store
            .create_approval(id, UnixMillis(150))
            .await
            .map_err(fail("create_approval"))?;
    }
    let approve = |i: usize, at: u64| {
        let (store, keys, ids) = (store.clone(), keys.clone(), ids.clone());
        async move {
            let id = ids.get(i).cloned().unwrap_or_else(|| act(0));
            let c = Confirmation::seal(
                ConfirmationClaims {
                    action_id: id.clone(),
                    binding: if i == 5 {
                        BindingDigest {
                            kid: KeyId("bind-1".into()),
                            digest: "cd".repeat(32),
                        }
                    } else {
                        binding()
                    },
                    confirmer: "operator".into(),
                    confirmed_at: UnixMillis(at),
                    expires_at: UnixMillis(at + 1000),
                },
                &keys,
            )
            .map_err(|e| format!("seal confirmation: {e}"))?;
            store
                .decide_approval(&id, true, "operator", UnixMillis(at), Some(c))
                .await
                .map_err(fail("decide_approval"))
                .map(|_| ())
        }
    };
    approve(0, 200).await?;
    approve(1, 250).await?;
    approve(4, 300).await?;
    approve(5, 300).await?;
    let id = |i: usize| ids.get(i).cloned().unwrap_or_else(|| act(0));
    let (a1, a2, a4, a5) = (id(0), id(1), id(3), id(4));
    store
        .decide_approval(&a4, false, "operator", UnixMillis(400), None)
        .await
        .map_err(fail("deny"))?;
    let newest = store
        .approved_unused("s1", &binding(), UnixMillis(0))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(
        newest.as_ref() == Some(&a2),
        "the newest approved action, got {newest:?}"
    );
    // denied_binding: a4 (session s1, this binding) was denied; nothing was denied in s2 or
    // under the other binding.
    ensure!(
        store
            .denied_binding("s1", &binding())
            .await
            .map_err(fail("denied_binding"))?,
        "the denied call of s1 must be found"
    );
    for (session, b) in [("s2", binding()), ("s1", other.clone())] {
        ensure!(
            !store
                .denied_binding(session, &b)
                .await
                .map_err(fail("denied_binding"))?,
            "nothing was denied in {session} under {b:?}"
        );
    }
    let since = store
        .approved_unused("s1", &binding(), UnixMillis(251))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(
        since.is_none(),
        "approvals older than the bound must not count, got {since:?}"
    );
    // Committed (a ledger entry): no longer unused.
    store
        .reserve(&a2, &binding(), UnixMillis(500))
        .await
        .map_err(|e| format!("reserve: {e:?}"))?;
    let next = store
        .approved_unused("s1", &binding(), UnixMillis(0))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(
        next.as_ref() == Some(&a1),
        "the remaining unused approval, got {next:?}"
    );
    store
        .reserve(&a1, &binding(), UnixMillis(500))
        .await
        .map_err(|e| format!("reserve: {e:?}"))?;
    let gone = store
        .approved_unused("s1", &binding(), UnixMillis(0))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(gone.is_none(), "every approval used, got {gone:?}");
    let other_session = store
        .approved_unused("s2", &binding(), UnixMillis(0))
        .await
        .map_err(fail("approved_unused"))?;
    ensure!(
        other_session.as_ref() == Some(&a5),
        "the other session's own, got {other_session:?}"
    );
    Ok(())
}

/// Many tasks on several connections decide one approval at once: exactly one succeeds.
///
/// # Errors
/// The broken contract.
pub async fn approval_decided_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let id = act(7);
    store
        .put_action(&action(&id))
        .await
        .map_err(fail("put_action"))?;
    store
        .create_approval(&id, UnixMillis(1))
        .await
        .map_err(fail("create_approval"))?;
    let stores = with_reopened(s, store, 2).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24u64 {
        let st = Arc::clone(
            stores
                .get(usize::try_from(i % 3).unwrap_or(0))
                .ok_or("no store")?,
        );
        let id = id.clone();
        tasks.spawn(async move {
            st.decide_approval(
                &id,
                i % 2 == 0,
                &format!("confirmer-{i}"),
                UnixMillis(i),
                None,
            )
            .await
        });
    }
    let mut wins = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| format!("task: {e}"))? {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(format!("a losing decision must be a conflict, got {e}")),
        }
    }
    ensure!(
        wins == 1,
        "exactly one concurrent decision must win, {wins} did"
    );
    Ok(())
}

/// Many tasks on several independent connections race to reserve one action id: exactly one
/// wins, and every later reservation — also through a new connection — loses.
///
/// # Errors
/// The broken contract.
pub async fn single_use_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    for round in 0..4u32 {
        let id = act(1_000 + round);
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..32usize {
            let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
            let id = id.clone();
            let barrier = Arc::clone(&barrier);
            tasks.spawn(async move {
                barrier.wait().await;
                st.reserve(&id, &binding(), UnixMillis(5)).await
            });
        }
        let mut wins = 0;
        while let Some(joined) = tasks.join_next().await {
            match joined.map_err(|e| format!("task: {e}"))? {
                Ok(true) => wins += 1,
                Ok(false) => {}
                Err(e) => return Err(format!("a reservation must not fail: {e}")),
            }
        }
        ensure!(
            wins == 1,
            "round {round}: exactly one reservation must win, {wins} did"
        );
        let late = s.reopen().await?;
        ensure!(
            !late
                .reserve(&id, &binding(), UnixMillis(6))
                .await
                .map_err(|e| e.to_string())?,
            "round {round}: a reservation after the race must lose"
        );
    }
    Ok(())
}

/// Red-team F8, R7: [`secureclaw_core::store::LedgerStore::outcome_unknown_tool`] finds an
/// action of the session for this tool whose entry is `outcome_unknown` — whatever its
/// binding — and not one of another session or another tool, nor an entry that is
/// `reserved`, `executed` or `failed`.
///
/// # Errors
/// The broken contract.
pub async fn outcome_unknown_bindings(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let other = BindingDigest {
        kid: KeyId("bind-1".into()),
        digest: "cd".repeat(32),
    };
    let ask = |session: &'static str, tool: &'static str| {
        let store = store.clone();
        async move {
            store
                .outcome_unknown_tool(session, tool)
                .await
                .map_err(fail("outcome_unknown_tool"))
        }
    };
    ensure!(
        !ask("s1", "bank__pay_invoice").await?,
        "an empty store has no unknown outcome"
    );
    // s1: an unknown `pay` (binding), executed and failed `send` (other), a reserved `move`;
    // s2: an unknown `send`.
    let cases = [
        (act(31), "s1", "bank__pay_invoice", binding(), "unknown"),
        (act(32), "s1", "mail__send", other.clone(), "executed"),
        (act(33), "s1", "mail__send", other.clone(), "failed"),
        (act(34), "s1", "fs__move", binding(), "reserved"),
        (act(35), "s2", "mail__send", other.clone(), "unknown"),
    ];
    for (id, session, tool, b, end) in &cases {
        let mut a = action(id);
        a.session = (*session).into();
        a.tool = (*tool).into();
        a.binding = b.clone();
        store.put_action(&a).await.map_err(fail("put_action"))?;
        ensure!(
            store
                .reserve(id, b, UnixMillis(50))
                .await
                .map_err(|x| x.to_string())?,
            "the first reservation of {id} must win"
        );
        let at = UnixMillis(51);
        match *end {
            "unknown" => store.mark_outcome_unknown(id, "upstream_timeout", at).await,
            "executed" => store.mark_executed(id, "d", at).await,
            "failed" => store.mark_failed(id, "upstream_call", at).await,
            _ => Ok(()),
        }
        .map_err(fail("finish"))?;
    }
    ensure!(
        ask("s1", "bank__pay_invoice").await?,
        "s1's unknown outcome must be found for its tool"
    );
    ensure!(
        !ask("s1", "mail__send").await?,
        "executed and failed entries are not unknown outcomes"
    );
    ensure!(
        !ask("s1", "fs__move").await?,
        "a reserved entry is not an unknown outcome"
    );
    ensure!(
        !ask("s2", "bank__pay_invoice").await?,
        "another session's unknown outcome must not match"
    );
    ensure!(
        ask("s2", "mail__send").await?,
        "s2's unknown outcome must be found"
    );
    ensure!(
        !ask("s3", "mail__send").await?,
        "a session without actions has none"
    );
    Ok(())
}

/// The ledger's transitions: `reserved → executed | failed | outcome_unknown`, once; every
/// other transition refused (`Conflict`), unknown ids `NotFound`; entries keep what was
/// recorded; spent ids are never reserved again; dangling reservations are the `reserved`
/// ones, oldest first.
///
/// # Errors
/// The broken contract.
pub async fn ledger_transitions(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let (e, f, u, r) = (act(11), act(12), act(13), act(14));
    for (id, at) in [(&e, 40), (&f, 30), (&u, 20), (&r, 10)] {
        ensure!(
            store
                .reserve(id, &binding(), UnixMillis(at))
                .await
                .map_err(|x| x.to_string())?,
            "the first reservation of {id} must win"
        );
    }
    let entry = store.ledger_entry(&r).await.map_err(fail("ledger_entry"))?;
    ensure!(
        entry
            .as_ref()
            .is_some_and(|x| x.state == LedgerState::Reserved
                && x.binding == binding()
                && x.reserved_at == UnixMillis(10)
                && x.finished_at.is_none()),
        "a new entry must be reserved with its binding and time, got {entry:?}"
    );
    store
        .mark_executed(&e, "digest-e", UnixMillis(41))
        .await
        .map_err(fail("mark_executed"))?;
    store
        .mark_failed(&f, "upstream_call", UnixMillis(31))
        .await
        .map_err(fail("mark_failed"))?;
    store
        .mark_outcome_unknown(&u, "upstream_timeout", UnixMillis(21))
        .await
        .map_err(fail("mark_outcome_unknown"))?;
    let got = store.ledger_entry(&e).await.map_err(fail("ledger_entry"))?;
    ensure!(
        got.as_ref()
            .is_some_and(|x| x.state == LedgerState::Executed
                && x.result_digest.as_deref() == Some("digest-e")
                && x.finished_at == Some(UnixMillis(41))),
        "executed entry differs: {got:?}"
    );
    let got = store.ledger_entry(&f).await.map_err(fail("ledger_entry"))?;
    ensure!(
        got.as_ref().is_some_and(
            |x| x.state == LedgerState::Failed && x.failure.as_deref() == Some("upstream_call")
        ),
        "failed entry differs: {got:?}"
    );
    let got = store.ledger_entry(&u).await.map_err(fail("ledger_entry"))?;
    ensure!(
        got.as_ref()
            .is_some_and(|x| x.state == LedgerState::OutcomeUnknown
                && x.failure.as_deref() == Some("upstream_timeout")),
        "outcome_unknown entry differs: {got:?}"
    );
    // Every transition out of a final state is refused, and leaves the entry as it was.
    for id in [&e, &f, &u] {
        let before = store.ledger_entry(id).await.map_err(fail("ledger_entry"))?;
        let x = store.mark_executed(id, "other", UnixMillis(99)).await;
        ensure!(
            matches!(x, Err(StoreError::Conflict(_))),
            "{id}: executed again gave {x:?}"
        );
        let x = store.mark_failed(id, "other", UnixMillis(99)).await;
        ensure!(
            matches!(x, Err(StoreError::Conflict(_))),
            "{id}: failed again gave {x:?}"
        );
        let x = store
            .mark_outcome_unknown(id, "other", UnixMillis(99))
            .await;
        ensure!(
            matches!(x, Err(StoreError::Conflict(_))),
            "{id}: outcome_unknown again gave {x:?}"
        );
        let after = store.ledger_entry(id).await.map_err(fail("ledger_entry"))?;
        ensure!(
            before == after,
            "{id}: a refused transition changed the entry"
        );
        ensure!(
            !store
                .reserve(id, &binding(), UnixMillis(100))
                .await
                .map_err(|x| x.to_string())?,
            "{id}: a spent id must never be reserved again"
        );
    }
    let unknown = act(19);
    let x = store.mark_executed(&unknown, "d", UnixMillis(1)).await;
    ensure!(
        matches!(x, Err(StoreError::NotFound(_))),
        "unknown id: executed gave {x:?}"
    );
    let x = store.mark_failed(&unknown, "d", UnixMillis(1)).await;
    ensure!(
        matches!(x, Err(StoreError::NotFound(_))),
        "unknown id: failed gave {x:?}"
    );
    let x = store
        .mark_outcome_unknown(&unknown, "d", UnixMillis(1))
        .await;
    ensure!(
        matches!(x, Err(StoreError::NotFound(_))),
        "unknown id: outcome_unknown gave {x:?}"
    );
    ensure!(
        store
            .ledger_entry(&unknown)
            .await
            .map_err(fail("ledger_entry"))?
            .is_none(),
        "an unknown id must have no entry"
    );
    let dangling = store
        .dangling_reservations()
        .await
        .map_err(fail("dangling_reservations"))?;
    let ids: Vec<&ActionId> = dangling.iter().map(|x| &x.action_id).collect();
    ensure!(
        ids == vec![&r],
        "only the reserved entry is dangling, got {ids:?}"
    );
    Ok(())
}

/// The audit chain: gap-free sequence numbers from 1, records read back as appended, paging
/// by sequence number, and the whole chain verifies.
///
/// # Errors
/// The broken contract.
pub async fn audit_chain(s: &dyn Subject) -> Outcome {
    let store = s.store();
    ensure!(
        store.verify_audit().await.map_err(fail("verify_audit"))? == 0,
        "an empty log verifies as 0 records"
    );
    let mut appended = Vec::new();
    for n in 1..=12u64 {
        let rec = store
            .append_audit(event(n))
            .await
            .map_err(fail("append_audit"))?;
        ensure!(rec.seq == n, "record {n} got sequence number {}", rec.seq);
        appended.push(rec);
    }
    let all = store
        .audit_records(0, usize::MAX)
        .await
        .map_err(fail("audit_records"))?;
    ensure!(
        all == appended,
        "records read back differ from those appended"
    );
    let page = store
        .audit_records(5, 3)
        .await
        .map_err(fail("audit_records"))?;
    let seqs: Vec<u64> = page.iter().map(|r| r.seq).collect();
    ensure!(
        seqs == vec![5, 6, 7],
        "a page from 5 of 3 records, got {seqs:?}"
    );
    let other = s.reopen().await?;
    ensure!(
        other.verify_audit().await.map_err(fail("verify_audit"))? == 12,
        "the chain of 12 records must verify through another connection"
    );
    Ok(())
}

/// Several connections append concurrently: the result is one gap-free chain that verifies.
///
/// # Errors
/// The broken contract.
pub async fn audit_chain_under_concurrent_appenders(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for (w, st) in stores.iter().enumerate() {
        let st = Arc::clone(st);
        let w = u64::try_from(w).unwrap_or(0);
        tasks.spawn(async move {
            for n in 0..25u64 {
                st.append_audit(event(w * 100 + n)).await?;
            }
            Ok::<(), StoreError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("concurrent append"))?;
    }
    let store = s.store();
    let n = store.verify_audit().await.map_err(fail("verify_audit"))?;
    ensure!(
        n == 100,
        "100 appends must make a chain of 100 records, got {n}"
    );
    let seqs: Vec<u64> = store
        .audit_records(0, usize::MAX)
        .await
        .map_err(fail("audit_records"))?
        .iter()
        .map(|r| r.seq)
        .collect();
    ensure!(
        seqs == (1..=100).collect::<Vec<u64>>(),
        "sequence numbers must be 1..=100 without gaps"
    );
    Ok(())
}

/// The speculation budget: 0 for a session never charged; each charge under the limit adds one
/// and returns the new count; at the limit nothing is charged (`None`); limit 0 never charges;
/// counters are per session and seen through another connection (another replica, or the
/// same gateway after a restart).
///
/// # Errors
/// The broken contract.
pub async fn speculation_budget(s: &dyn Subject) -> Outcome {
    let store = s.store();
    ensure!(
        store
            .budget_spent("s1")
            .await
            .map_err(fail("budget_spent"))?
            == 0,
        "a session never charged has spent 0"
    );
    ensure!(
        store
            .charge_budget("s1", 0)
            .await
            .map_err(fail("charge"))?
            .is_none(),
        "limit 0 never charges"
    );
    for n in 1..=3u32 {
        let got = store.charge_budget("s1", 3).await.map_err(fail("charge"))?;
        ensure!(
            got == Some(n),
            "charge {n} under the limit must return {n}, got {got:?}"
        );
    }
    let over = store.charge_budget("s1", 3).await.map_err(fail("charge"))?;
    ensure!(
        over.is_none(),
        "a charge at the limit must be refused, got {over:?}"
    );
    let other = s.reopen().await?;
    ensure!(
        other
            .budget_spent("s1")
            .await
            .map_err(fail("budget_spent"))?
            == 3,
        "another connection sees the spent budget"
    );
    ensure!(
        other
            .charge_budget("s1", 3)
            .await
            .map_err(fail("charge"))?
            .is_none(),
        "another connection cannot re-spend it"
    );
    ensure!(
        other.charge_budget("s1", 4).await.map_err(fail("charge"))? == Some(4),
        "a higher limit charges on from the stored count"
    );
    ensure!(
        store
            .budget_spent("s2")
            .await
            .map_err(fail("budget_spent"))?
            == 0,
        "budgets are per session"
    );
    Ok(())
}

/// Many tasks on several independent connections race to charge one session's budget of 5:
/// exactly 5 charges succeed, each count from 1 to 5 is returned once, and the stored count is 5.
///
/// # Errors
/// The broken contract.
pub async fn budget_charged_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            st.charge_budget("raced", 5).await
        });
    }
    let mut counts = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| format!("task: {e}"))? {
            Ok(Some(n)) => counts.push(n),
            Ok(None) => {}
            Err(e) => return Err(format!("a charge must not fail: {e}")),
        }
    }
    counts.sort_unstable();
    ensure!(
        counts == [1, 2, 3, 4, 5],
        "exactly 5 charges must succeed with counts 1..=5, got {counts:?}"
    );
    let spent = s
        .reopen()
        .await?
        .budget_spent("raced")
        .await
        .map_err(fail("budget_spent"))?;
    ensure!(spent == 5, "the stored count must be 5, is {spent}");
    Ok(())
}

/// Grant uses: 0 for a grant never used; each take under the limit counts one; at the limit
/// nothing is counted (`false`); limit 0 never grants; counts are per session and per grant,
/// and seen through another connection (another replica), which cannot take them again.
///
/// # Errors
/// The broken contract.
pub async fn grant_uses(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let pay = "office__pay_invoice";
    ensure!(
        store
            .grant_uses("s1", pay)
            .await
            .map_err(fail("grant_uses"))?
            == 0,
        "a grant never used has 0 uses"
    );
    ensure!(
        !store
            .take_grant_use("s1", pay, 0)
            .await
            .map_err(fail("take"))?,
        "limit 0 never grants"
    );
    ensure!(
        store
            .take_grant_use("s1", pay, 2)
            .await
            .map_err(fail("take"))?,
        "the first use under the limit is taken"
    );
    ensure!(
        store
            .take_grant_use("s1", pay, 2)
            .await
            .map_err(fail("take"))?,
        "the second use under the limit is taken"
    );
    ensure!(
        !store
            .take_grant_use("s1", pay, 2)
            .await
            .map_err(fail("take"))?,
        "a use at the limit is refused"
    );
    let other = s.reopen().await?;
    ensure!(
        other
            .grant_uses("s1", pay)
            .await
            .map_err(fail("grant_uses"))?
            == 2,
        "another connection sees the uses"
    );
    ensure!(
        !other
            .take_grant_use("s1", pay, 2)
            .await
            .map_err(fail("take"))?,
        "another connection cannot take them again"
    );
    ensure!(
        other
            .take_grant_use("s1", pay, u64::MAX)
            .await
            .map_err(fail("take"))?,
        "a higher limit counts on from the stored uses"
    );
    ensure!(
        store
            .grant_uses("s1", pay)
            .await
            .map_err(fail("grant_uses"))?
            == 3,
        "the stored count is 3"
    );
    ensure!(
        store
            .take_grant_use("s2", pay, 1)
            .await
            .map_err(fail("take"))?
            && store
                .take_grant_use("s1", "office__send_email", 1)
                .await
                .map_err(fail("take"))?,
        "uses are per session and per grant"
    );
    Ok(())
}

/// Many tasks on several independent connections race for the one use of a grant: exactly
/// one takes it, and the stored count is 1.
///
/// # Errors
/// The broken contract.
pub async fn grant_use_taken_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            st.take_grant_use("raced", "office__pay_invoice", 1).await
        });
    }
    let mut wins = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| format!("task: {e}"))? {
            Ok(true) => wins += 1,
            Ok(false) => {}
            Err(e) => return Err(format!("a take must not fail: {e}")),
        }
    }
    ensure!(wins == 1, "exactly one task must take the use, {wins} did");
    let used = s
        .reopen()
        .await?
        .grant_uses("raced", "office__pay_invoice")
        .await
        .map_err(fail("grant_uses"))?;
    ensure!(used == 1, "the stored count must be 1, is {used}");
    Ok(())
}

fn standing_grant(id: &str, max_uses: Option<u64>) -> StandingGrant {
    StandingGrant {
        id: id.into(),
        session: "s1".into(),
        task_digest: "td".into(),
        upstream: "mail".into(),
        tool: "mail__send_email".into(),
        action_id: act(1),
        arguments_json: r#"{"to":"bob@example.com"}"#.into(),
        display: "mail__send_email to bob@example.com".into(),
        max_amount: Some(12_000),
        created_by: "cli:alice".into(),
        created_at: UnixMillis(100),
        expires_at: UnixMillis(1_000),
        max_uses,
        used: 0,
        revoked_by: None,
        revoked_at: None,
    }
}

/// Standing grants: stored whole and once; listed (all, or live only) and found per session
/// and tool while live; a use is taken only while not expired, not revoked and under
/// `max_uses`; revocation is final and keeps the first revoker.
///
/// # Errors
/// The broken contract.
pub async fn standing_grants(s: &dyn Subject) -> Outcome {
    let st = s.store();
    let g = standing_grant("grant-a", Some(2));
    st.create_grant(&g).await.map_err(fail("create_grant"))?;
    ensure!(
        matches!(st.create_grant(&g).await, Err(StoreError::Conflict(_))),
        "a second grant with the same id must be a conflict"
    );
    let back = st.grant("grant-a").await.map_err(fail("grant"))?;
    ensure!(
        back.as_ref() == Some(&g),
        "the grant must read back whole: {back:?}"
    );
    ensure!(
        st.grant("grant-zz").await.map_err(fail("grant"))?.is_none(),
        "an unknown grant must be None"
    );
    let other = StandingGrant {
        session: "s2".into(),
        ..standing_grant("grant-b", None)
    };
    st.create_grant(&other)
        .await
        .map_err(fail("create_grant"))?;
    let found = st
        .session_grants("s1", "mail__send_email", UnixMillis(500))
        .await
        .map_err(fail("session_grants"))?;
    ensure!(
        found.iter().map(|g| g.id.as_str()).collect::<Vec<_>>() == ["grant-a"],
        "only the session's own grants for the tool: {found:?}"
    );
    ensure!(
        st.session_grants("s1", "mail__delete_email", UnixMillis(500))
            .await
            .map_err(fail("session_grants"))?
            .is_empty(),
        "a grant never covers another tool"
    );
    // Expiry is exclusive.
    ensure!(
        !st.take_standing_grant_use("grant-a", UnixMillis(1_000))
            .await
            .map_err(fail("take"))?,
        "no use at or after expiry"
    );
    ensure!(
        st.session_grants("s1", "mail__send_email", UnixMillis(1_000))
            .await
            .map_err(fail("session_grants"))?
            .is_empty(),
        "an expired grant is not live"
    );
    for n in 0..2 {
        ensure!(
            st.take_standing_grant_use("grant-a", UnixMillis(500))
                .await
                .map_err(fail("take"))?,
            "use {n} of 2 must be taken"
        );
    }
    ensure!(
        !st.take_standing_grant_use("grant-a", UnixMillis(500))
            .await
            .map_err(fail("take"))?,
        "a third use of 2 must be refused"
    );
    let used = st.grant("grant-a").await.map_err(fail("grant"))?;
    ensure!(
        used.as_ref().map(|g| g.used) == Some(2),
        "the count must be 2: {used:?}"
    );
    ensure!(
        !st.take_standing_grant_use("grant-zz", UnixMillis(500))
            .await
            .map_err(fail("take"))?,
        "an unknown grant gives no use"
    );
    let live = st
        .list_grants(Some(UnixMillis(500)))
        .await
        .map_err(fail("list_grants"))?;
    ensure!(
        live.iter().map(|g| g.id.as_str()).collect::<Vec<_>>() == ["grant-b"],
        "the used-up grant is not live: {live:?}"
    );
    // Revocation: final, first revoker kept.
    let revoked = st
        .revoke_grant("grant-b", "cli:alice", UnixMillis(600))
        .await
        .map_err(fail("revoke"))?;
    ensure!(
        revoked
            .as_ref()
            .is_some_and(|g| g.revoked_by.as_deref() == Some("cli:alice")
                && g.revoked_at == Some(UnixMillis(600))),
        "revocation must be recorded: {revoked:?}"
    );
    let again = st
        .revoke_grant("grant-b", "web:operator", UnixMillis(700))
        .await
        .map_err(fail("revoke"))?;
    ensure!(
        again
            .as_ref()
            .is_some_and(|g| g.revoked_by.as_deref() == Some("cli:alice")),
        "a second revocation keeps the first: {again:?}"
    );
    ensure!(
        !st.take_standing_grant_use("grant-b", UnixMillis(650))
            .await
            .map_err(fail("take"))?,
        "a revoked grant gives no use"
    );
    ensure!(
        st.revoke_grant("grant-zz", "cli:alice", UnixMillis(600))
            .await
            .map_err(fail("revoke"))?
            .is_none(),
        "revoking an unknown grant is None"
    );
    let all = st.list_grants(None).await.map_err(fail("list_grants"))?;
    ensure!(all.len() == 2, "every grant is listed with --all: {all:?}");
    ensure!(
        st.list_grants(Some(UnixMillis(500)))
            .await
            .map_err(fail("list_grants"))?
            .is_empty(),
        "no grant is live any more"
    );
    Ok(())
}

/// The last use of a standing grant, raced for by many tasks on several connections, is taken
/// exactly once.
///
/// # Errors
/// The broken contract.
pub async fn standing_grant_use_taken_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let st = s.store();
    st.create_grant(&standing_grant("grant-raced", Some(3)))
        .await
        .map_err(fail("create_grant"))?;
    let stores = with_reopened(s, st, 3).await?;
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            st.take_standing_grant_use("grant-raced", UnixMillis(500))
                .await
        });
    }
    let mut wins = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| format!("task: {e}"))? {
            Ok(true) => wins += 1,
            Ok(false) => {}
            Err(e) => return Err(format!("a take must not fail: {e}")),
        }
    }
    ensure!(wins == 3, "exactly three tasks must take a use, {wins} did");
    let g = s
        .reopen()
        .await?
        .grant("grant-raced")
        .await
        .map_err(fail("grant"))?;
    ensure!(
        g.as_ref().map(|g| g.used) == Some(3),
        "the stored count must be 3: {g:?}"
    );
    Ok(())
}

fn digest(
    s: &dyn Subject,
    kind: StateDigest,
    session: &str,
    value: &str,
) -> Result<String, String> {
    state_digest(&s.keys(), kind, session, value).map_err(|e| format!("digest: {e}"))
}

fn written(s: &dyn Subject, session: &str, value: &str) -> Result<WrittenValue, String> {
    Ok(WrittenValue {
        digest: digest(s, StateDigest::Written, session, value)?,
        value: value.to_owned(),
    })
}

const ROOMY: WrittenBounds = WrittenBounds {
    max_values: 1000,
    max_bytes: 1 << 20,
};

/// Read amounts: unknown until noted; noting is idempotent; per session; an empty lookup is
/// `false`; seen through another connection.
///
/// # Errors
/// The broken contract.
pub async fn read_amounts(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let a = digest(s, StateDigest::Amount, "s1", "129900")?;
    let b = digest(s, StateDigest::Amount, "s1", "48750")?;
    ensure!(
        !store
            .amount_known("s1", std::slice::from_ref(&a))
            .await
            .map_err(fail("amount_known"))?,
        "an amount never noted is unknown"
    );
    store
        .note_amounts("s1", &[a.clone(), a.clone()])
        .await
        .map_err(fail("note_amounts"))?;
    store
        .note_amounts("s1", std::slice::from_ref(&a))
        .await
        .map_err(fail("note_amounts again"))?;
    store
        .note_amounts("s1", &[])
        .await
        .map_err(fail("note_amounts of nothing"))?;
    ensure!(
        store
            .amount_known("s1", &[b.clone(), a.clone()])
            .await
            .map_err(fail("amount_known"))?,
        "a noted amount is known (any of the digests)"
    );
    ensure!(
        !store
            .amount_known("s1", std::slice::from_ref(&b))
            .await
            .map_err(fail("amount_known"))?,
        "another amount stays unknown"
    );
    ensure!(
        !store
            .amount_known("s1", &[])
            .await
            .map_err(fail("amount_known"))?,
        "no digests: unknown"
    );
    ensure!(
        !store
            .amount_known("s2", std::slice::from_ref(&a))
            .await
            .map_err(fail("amount_known"))?,
        "amounts are per session"
    );
    ensure!(
        s.reopen()
            .await?
            .amount_known("s1", std::slice::from_ref(&a))
            .await
            .map_err(fail("amount_known"))?,
        "another connection sees the amount"
    );
    Ok(())
}

/// The written set: membership by digest, per session; values come back unsealed, numbered
/// from 1 in the order they were added, incrementally after a sequence number; a value already
/// in the set is not added twice; another connection sees all of it.
///
/// # Errors
/// The broken contract.
pub async fn written_set(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let empty = store
        .written_since("s1", 0)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        empty.values.is_empty() && !empty.full,
        "a session that wrote nothing has an empty set, got {empty:?}"
    );
    let inv = written(s, "s1", "INV-42")?;
    let path = written(s, "s1", "/notes/todo.txt")?;
    let full = store
        .add_written("s1", &[inv.clone(), path.clone(), inv.clone()], ROOMY)
        .await
        .map_err(fail("add_written"))?;
    ensure!(!full, "two values do not fill a roomy set");
    ensure!(
        store
            .wrote_any("s1", std::slice::from_ref(&inv.digest))
            .await
            .map_err(fail("wrote_any"))?,
        "a written value is a member"
    );
    let other_value = digest(s, StateDigest::Written, "s1", "INV-43")?;
    ensure!(
        !store
            .wrote_any("s1", std::slice::from_ref(&other_value))
            .await
            .map_err(fail("wrote_any"))?
            && !store
                .wrote_any("s1", &[])
                .await
                .map_err(fail("wrote_any"))?,
        "a value never written is not a member"
    );
    ensure!(
        !store
            .wrote_any("s2", std::slice::from_ref(&inv.digest))
            .await
            .map_err(fail("wrote_any"))?,
        "written sets are per session"
    );
    let rows = store
        .written_since("s1", 0)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        rows.values == [(1, "INV-42".to_owned()), (2, "/notes/todo.txt".to_owned())],
        "values come back in order, numbered from 1, once each: {rows:?}"
    );
    let more = written(s, "s1", "alice@example.com")?;
    store
        .add_written("s1", &[path, more], ROOMY)
        .await
        .map_err(fail("add_written"))?;
    let other = s.reopen().await?;
    let rows = other
        .written_since("s1", 2)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        rows.values == [(3, "alice@example.com".to_owned())] && !rows.full,
        "another connection reads only the rows after 2: {rows:?}"
    );
    ensure!(
        other
            .written_since("s1", 3)
            .await
            .map_err(fail("written_since"))?
            .values
            .is_empty()
            && other
                .written_since("s1", u64::MAX)
                .await
                .map_err(fail("written_since"))?
                .values
                .is_empty(),
        "nothing after the last row"
    );
    Ok(())
}

/// The written set's bounds: a value that would pass `max_values` or `max_bytes` makes the set
/// full, nothing more is added ever, and every value then counts as written; marking a set
/// full does the same; a full set never becomes un-full through another connection.
///
/// # Errors
/// The broken contract.
pub async fn written_set_bounds(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let two = WrittenBounds {
        max_values: 2,
        max_bytes: 1 << 20,
    };
    let vals = [
        written(s, "s1", "one")?,
        written(s, "s1", "two")?,
        written(s, "s1", "three")?,
    ];
    ensure!(
        !store
            .add_written("s1", vals.get(..2).ok_or("vals")?, two)
            .await
            .map_err(fail("add_written"))?,
        "two values fit a bound of two"
    );
    ensure!(
        store
            .add_written("s1", vals.get(2..).ok_or("vals")?, two)
            .await
            .map_err(fail("add_written"))?,
        "the third value fills the set"
    );
    let rows = store
        .written_since("s1", 0)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        rows.full && rows.values.len() == 2,
        "a full set keeps what it had and says full: {rows:?}"
    );
    let never = digest(s, StateDigest::Written, "s1", "never written")?;
    ensure!(
        store
            .wrote_any("s1", std::slice::from_ref(&never))
            .await
            .map_err(fail("wrote_any"))?,
        "every value counts as written in a full set"
    );
    let roomy = s.reopen().await?;
    ensure!(
        roomy
            .add_written("s1", &[written(s, "s1", "four")?], ROOMY)
            .await
            .map_err(fail("add_written"))?,
        "a full set stays full, even with larger bounds"
    );
    // Bytes: 10 + 10 bytes under a bound of 15.
    let bytes = WrittenBounds {
        max_values: 1000,
        max_bytes: 15,
    };
    ensure!(
        store
            .add_written(
                "s2",
                &[
                    written(s, "s2", "0123456789")?,
                    written(s, "s2", "abcdefghij")?
                ],
                bytes
            )
            .await
            .map_err(fail("add_written"))?,
        "the byte bound fills the set"
    );
    let rows = store
        .written_since("s2", 0)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        rows.full && rows.values == [(1, "0123456789".to_owned())],
        "the value within the byte bound is kept: {rows:?}"
    );
    // Marked full, with nothing written.
    store
        .mark_written_full("s3")
        .await
        .map_err(fail("mark_written_full"))?;
    ensure!(
        store
            .wrote_any("s3", &[])
            .await
            .map_err(fail("wrote_any"))?
            && store
                .written_since("s3", 0)
                .await
                .map_err(fail("written_since"))?
                .full,
        "a set marked full counts every value as written"
    );
    ensure!(
        !store
            .wrote_any("s4", &[])
            .await
            .map_err(fail("wrote_any"))?,
        "positive control: another session's set is not full"
    );
    Ok(())
}

/// Many tasks on several independent connections append distinct values to one session's
/// written set: every value is stored once, numbered 1..=n without gaps; with a bound below the
/// number of values, exactly the bound's worth is stored and the set is full.
///
/// # Errors
/// The broken contract.
pub async fn written_set_appends_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    for (session, bounds, expect) in [
        ("roomy", ROOMY, 24usize),
        (
            "tight",
            WrittenBounds {
                max_values: 10,
                max_bytes: 1 << 20,
            },
            10,
        ),
    ] {
        let barrier = Arc::new(tokio::sync::Barrier::new(24));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..24usize {
            let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
            let barrier = Arc::clone(&barrier);
            let v = written(s, session, &format!("value {i}"))?;
            tasks.spawn(async move {
                barrier.wait().await;
                st.add_written(session, &[v], bounds).await
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined
                .map_err(|e| format!("task: {e}"))?
                .map_err(fail("add_written"))?;
        }
        let rows = s
            .reopen()
            .await?
            .written_since(session, 0)
            .await
            .map_err(fail("written_since"))?;
        let seqs: Vec<u64> = rows.values.iter().map(|(n, _)| *n).collect();
        let want: Vec<u64> = (1..=expect as u64).collect();
        ensure!(
            seqs == want,
            "{session}: values must be numbered 1..={expect} without gaps, got {seqs:?}"
        );
        let mut distinct: Vec<&String> = rows.values.iter().map(|(_, v)| v).collect();
        distinct.sort();
        distinct.dedup();
        ensure!(
            distinct.len() == expect,
            "{session}: every stored value is distinct"
        );
        ensure!(
            rows.full == (expect < 24),
            "{session}: full iff the bound was reached, got {}",
            rows.full
        );
    }
    Ok(())
}

/// The written set's values never appear in the stored bytes (sealed under the vault key),
/// and neither do the read amounts or the written values' digests' inputs; they read back
/// through the store (positive control).
///
/// # Errors
/// The broken contract.
pub async fn written_values_never_in_clear(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let secret = "DE89370400440532013000 written-conformance-secret";
    store
        .add_written("s1", &[written(s, "s1", secret)?], ROOMY)
        .await
        .map_err(fail("add_written"))?;
    store
        .note_amounts("s1", &[digest(s, StateDigest::Amount, "s1", "7777712345")?])
        .await
        .map_err(fail("note_amounts"))?;
    let rows = store
        .written_since("s1", 0)
        .await
        .map_err(fail("written_since"))?;
    ensure!(
        rows.values == [(1, secret.to_owned())],
        "positive control: the value must read back, got {rows:?}"
    );
    never_in_clear(
        s,
        &[
            b"DE89370400440532013000",
            b"written-conformance-secret",
            b"7777712345",
        ],
    )
    .await?;
    Ok(())
}

/// The pre-effect writes ([`secureclaw_core::store::EffectStore::record_and_reserve`]): the
/// action, its audit records and the reservation are stored together or not at all; an id
/// already reserved stores nothing and reports `false`; a stored action id is a `Conflict`;
/// concurrent calls on several connections, mixed with single appends, keep one chain.
///
/// # Errors
/// The broken contract.
pub async fn pre_effect_writes_in_one_transaction(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let id = act(2_000);
    let mut record = action(&id);
    record.needs_confirmation = false;
    ensure!(
        store
            .record_and_reserve(&record, &[event(1), event(2)], &binding(), UnixMillis(5))
            .await
            .map_err(fail("record_and_reserve"))?,
        "the first pre-effect write must reserve"
    );
    ensure!(
        store.action(&id).await.map_err(fail("action"))? == Some(record.clone()),
        "the action must be stored with the reservation"
    );
    let entry = store
        .ledger_entry(&id)
        .await
        .map_err(fail("ledger_entry"))?
        .ok_or("the reservation must be stored")?;
    ensure!(
        entry.state == LedgerState::Reserved && entry.reserved_at == UnixMillis(5),
        "the entry must be reserved at 5, got {entry:?}"
    );
    let records = store
        .audit_records(0, usize::MAX)
        .await
        .map_err(fail("audit_records"))?;
    let events: Vec<AuditEvent> = records.into_iter().map(|r| r.event).collect();
    ensure!(
        events == vec![event(1), event(2)],
        "the audit records must be stored in order with the reservation"
    );
    match store
        .record_and_reserve(&record, &[event(3)], &binding(), UnixMillis(6))
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => {
            return Err(format!(
                "a stored action id must be a conflict, got {other:?}"
            ));
        }
    }
    // Reserved by someone else first: nothing of this call may be stored.
    let taken = act(2_001);
    ensure!(
        store
            .reserve(&taken, &binding(), UnixMillis(7))
            .await
            .map_err(|e| e.to_string())?,
        "positive control: a fresh id reserves"
    );
    let got = store
        .record_and_reserve(&action(&taken), &[event(4)], &binding(), UnixMillis(8))
        .await
        .map_err(fail("record_and_reserve"))?;
    ensure!(!got, "an id already reserved must not be reserved again");
    ensure!(
        store
            .action(&taken)
            .await
            .map_err(fail("action"))?
            .is_none(),
        "a refused pre-effect write must store no action"
    );
    ensure!(
        store.verify_audit().await.map_err(fail("verify_audit"))? == 2,
        "a refused pre-effect write must append no audit record"
    );
    // Concurrency: 4 connections, each 10 pre-effect writes (2 records each) and 5 appends.
    let stores = with_reopened(s, s.store(), 3).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for (w, st) in stores.iter().enumerate() {
        let st = Arc::clone(st);
        let w = u32::try_from(w).unwrap_or(0);
        tasks.spawn(async move {
            for n in 0..10u32 {
                let id = act(3_000 + w * 100 + n);
                let won = st
                    .record_and_reserve(
                        &action(&id),
                        &[event(u64::from(n)), event(u64::from(n) + 1)],
                        &binding(),
                        UnixMillis(9),
                    )
                    .await?;
                if !won {
                    return Err(StoreError::Invalid(format!("{id} was not reserved")));
                }
                if n % 2 == 0 {
                    st.append_audit(event(u64::from(n))).await?;
                }
            }
            Ok::<(), StoreError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("concurrent pre-effect write"))?;
    }
    let n = store.verify_audit().await.map_err(fail("verify_audit"))?;
    ensure!(
        n == 2 + 4 * (20 + 5),
        "concurrent pre-effect writes must make one chain of 102 records, got {n}"
    );
    Ok(())
}

/// Group commits ([`secureclaw_core::store::EffectStore::apply_group`]): audit records are
/// appended in order and returned; ledger outcomes move `reserved` entries; an outcome for an
/// entry that is not reserved (or unknown) changes nothing and is reported, the rest still
/// commits; concurrent groups on several connections keep one chain.
///
/// # Errors
/// The broken contract.
pub async fn group_commit(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let (a, b, c, unknown) = (act(4_001), act(4_002), act(4_003), act(4_999));
    for id in [&a, &b, &c] {
        ensure!(
            store
                .reserve(id, &binding(), UnixMillis(1))
                .await
                .map_err(|e| e.to_string())?,
            "the first reservation of {id} must win"
        );
    }
    let writes = vec![
        GroupWrite::Audit(event(1)),
        GroupWrite::Executed {
            id: a.clone(),
            result_digest: "digest-a".into(),
            at: UnixMillis(2),
        },
        GroupWrite::Audit(event(2)),
        GroupWrite::Failed {
            id: b.clone(),
            reason: "upstream_error".into(),
            at: UnixMillis(3),
        },
        GroupWrite::OutcomeUnknown {
            id: c.clone(),
            reason: "timeout".into(),
            at: UnixMillis(4),
        },
        GroupWrite::Executed {
            id: unknown.clone(),
            result_digest: "digest-x".into(),
            at: UnixMillis(5),
        },
    ];
    let out = store
        .apply_group(&writes)
        .await
        .map_err(fail("apply_group"))?;
    let events: Vec<AuditEvent> = out.audit.iter().map(|r| r.event.clone()).collect();
    ensure!(
        events == vec![event(1), event(2)],
        "the group's records must come back in order"
    );
    ensure!(
        out.unchanged == vec![unknown.clone()],
        "only the unknown entry is unchanged, got {:?}",
        out.unchanged
    );
    for (id, state) in [
        (&a, LedgerState::Executed),
        (&b, LedgerState::Failed),
        (&c, LedgerState::OutcomeUnknown),
    ] {
        let entry = store
            .ledger_entry(id)
            .await
            .map_err(fail("ledger_entry"))?
            .ok_or("entry missing")?;
        ensure!(
            entry.state == state,
            "{id} must be {state:?}, got {entry:?}"
        );
    }
    let a_entry = store
        .ledger_entry(&a)
        .await
        .map_err(fail("ledger_entry"))?
        .ok_or("entry missing")?;
    ensure!(
        a_entry.result_digest.as_deref() == Some("digest-a")
            && a_entry.finished_at == Some(UnixMillis(2)),
        "the executed entry keeps its digest and time, got {a_entry:?}"
    );
    // A second outcome changes nothing (forward only) and is reported; its record commits.
    let out = store
        .apply_group(&[
            GroupWrite::Failed {
                id: a.clone(),
                reason: "late".into(),
                at: UnixMillis(9),
            },
            GroupWrite::Audit(event(3)),
        ])
        .await
        .map_err(fail("apply_group"))?;
    ensure!(
        out.unchanged == vec![a.clone()] && out.audit.len() == 1,
        "a second outcome must be reported unchanged, got {out:?}"
    );
    ensure!(
        store
            .ledger_entry(&a)
            .await
            .map_err(fail("ledger_entry"))?
            .map(|e| e.state)
            == Some(LedgerState::Executed),
        "a spent entry must keep its first outcome"
    );
    // Concurrency: 4 connections, 10 groups of 3 records each, plus single appends.
    let stores = with_reopened(s, s.store(), 3).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for st in &stores {
        let st = Arc::clone(st);
        tasks.spawn(async move {
            for n in 0..10u64 {
                let group: Vec<GroupWrite> = (0..3)
                    .map(|k| GroupWrite::Audit(event(n * 10 + k)))
                    .collect();
                let out = st.apply_group(&group).await?;
                if out.audit.len() != 3 {
                    return Err(StoreError::Invalid("a group lost a record".into()));
                }
                st.append_audit(event(n)).await?;
            }
            Ok::<(), StoreError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("concurrent group commit"))?;
    }
    let n = store.verify_audit().await.map_err(fail("verify_audit"))?;
    ensure!(
        n == 3 + 4 * 40,
        "concurrent groups must make one chain of 163 records, got {n}"
    );
    Ok(())
}

const HELD_ROOMY: HeldBounds = HeldBounds {
    max_calls: 1000,
    max_bytes: 1 << 20,
};

fn call_json(n: u32) -> String {
    format!(r#"{{"tool":"mail__send","arguments":{{"to":"bob@example.org","n":{n}}}}}"#)
}

/// Held calls and branch states: a branch is pending until settled; holding numbers the
/// calls per session; promoting (through another connection, as another replica) returns the
/// branch's calls in order with their exact JSON and only them; a promoted branch refuses
/// more calls, returns nothing when promoted again and cannot be abandoned; abandoning
/// another branch takes its calls; the totals follow; settling as pending is refused.
///
/// # Errors
/// The broken contract.
pub async fn held_calls(s: &dyn Subject) -> Outcome {
    let a = s.store();
    let b = s.reopen().await?;
    let state = a
        .branch_state("s1", "b1")
        .await
        .map_err(fail("branch_state"))?;
    ensure!(
        state == BranchState::Pending,
        "an unknown branch is pending, got {state:?}"
    );
    let mut seqs = Vec::new();
    for (branch, n) in [("b1", 1), ("b2", 2), ("b1", 3)] {
        let call = call_json(n);
        let bytes = call.len() as u64;
        match a
            .hold_call("s1", branch, &call, bytes, HELD_ROOMY)
            .await
            .map_err(fail("hold_call"))?
        {
            HoldOutcome::Held(seq) => seqs.push(seq),
            other => return Err(format!("hold {n} must be held, got {other:?}")),
        }
    }
    ensure!(
        seqs == [1, 2, 3],
        "calls are numbered 1, 2, 3, got {seqs:?}"
    );
    let other = a
        .hold_call("s2", "b1", &call_json(9), 10, HELD_ROOMY)
        .await
        .map_err(fail("hold_call"))?;
    ensure!(
        other == HoldOutcome::Held(1),
        "sessions are numbered separately, got {other:?}"
    );
    let totals = b.held_totals("s1").await.map_err(fail("held_totals"))?;
    let want_bytes = (call_json(1).len() * 3) as u64;
    ensure!(
        totals == (3, want_bytes),
        "another replica sees the totals (3, {want_bytes}), got {totals:?}"
    );
    let taken = b
        .settle_branch("s1", "b1", BranchState::Promoted)
        .await
        .map_err(fail("settle_branch"))?;
    let got: Vec<(u64, String)> = taken.iter().map(|c| (c.seq, c.call.clone())).collect();
    ensure!(
        got == [(1, call_json(1)), (3, call_json(3))],
        "promotion returns b1's calls in order, got {got:?}"
    );
    let state = a
        .branch_state("s1", "b1")
        .await
        .map_err(fail("branch_state"))?;
    ensure!(
        state == BranchState::Promoted,
        "the promotion is seen by another replica, got {state:?}"
    );
    let again = a
        .settle_branch("s1", "b1", BranchState::Promoted)
        .await
        .map_err(fail("settle_branch"))?;
    ensure!(again.is_empty(), "a second promotion takes nothing");
    ensure!(
        matches!(
            a.settle_branch("s1", "b1", BranchState::Abandoned).await,
            Err(StoreError::Conflict(_))
        ),
        "a promoted branch cannot be abandoned"
    );
    let late = a
        .hold_call("s1", "b1", &call_json(4), 10, HELD_ROOMY)
        .await
        .map_err(fail("hold_call"))?;
    ensure!(
        late == HoldOutcome::Settled(BranchState::Promoted),
        "a promoted branch holds nothing more, got {late:?}"
    );
    let dropped = a
        .settle_branch("s1", "b2", BranchState::Abandoned)
        .await
        .map_err(fail("settle_branch"))?;
    ensure!(
        dropped.len() == 1 && dropped.first().map(|c| c.call.clone()) == Some(call_json(2)),
        "abandoning b2 takes its one call, got {dropped:?}"
    );
    let totals = a.held_totals("s1").await.map_err(fail("held_totals"))?;
    ensure!(totals == (0, 0), "nothing is held any more, got {totals:?}");
    ensure!(
        matches!(
            a.settle_branch("s1", "b3", BranchState::Pending).await,
            Err(StoreError::Invalid(_))
        ),
        "settling as pending is refused"
    );
    let untouched = a.held_totals("s2").await.map_err(fail("held_totals"))?;
    ensure!(
        untouched == (1, 10),
        "another session's calls stay, got {untouched:?}"
    );
    Ok(())
}

/// The per-session caps: past `max_calls` or `max_bytes` a call is refused with the bound it
/// hit and nothing is stored; settling frees the room.
///
/// # Errors
/// The broken contract.
pub async fn held_call_bounds(s: &dyn Subject) -> Outcome {
    let st = s.store();
    let bounds = HeldBounds {
        max_calls: 2,
        max_bytes: 100,
    };
    for n in 0..2 {
        let got = st
            .hold_call("s1", "b", &call_json(n), 40, bounds)
            .await
            .map_err(fail("hold_call"))?;
        ensure!(
            matches!(got, HoldOutcome::Held(_)),
            "positive control: call {n} must be held, got {got:?}"
        );
    }
    let over = st
        .hold_call("s1", "c", &call_json(2), 1, bounds)
        .await
        .map_err(fail("hold_call"))?;
    ensure!(
        over == HoldOutcome::Limit(Limit::HeldCalls),
        "a third call is refused for the count, got {over:?}"
    );
    st.settle_branch("s1", "b", BranchState::Abandoned)
        .await
        .map_err(fail("settle_branch"))?;
    let big = st
        .hold_call("s1", "c", &call_json(3), 60, bounds)
        .await
        .map_err(fail("hold_call"))?;
    ensure!(
        matches!(big, HoldOutcome::Held(_)),
        "room is freed by settling, got {big:?}"
    );
    let over = st
        .hold_call("s1", "c", &call_json(4), 41, bounds)
        .await
        .map_err(fail("hold_call"))?;
    ensure!(
        over == HoldOutcome::Limit(Limit::HeldBytes),
        "a call past the bytes is refused, got {over:?}"
    );
    let totals = st.held_totals("s1").await.map_err(fail("held_totals"))?;
    ensure!(
        totals == (1, 60),
        "refused calls count nothing, got {totals:?}"
    );
    Ok(())
}

/// Replicas racing to promote (or abandon) one branch: exactly one gets its held calls, all
/// of them, each once; the others get none and no error.
///
/// # Errors
/// The broken contract.
pub async fn held_calls_released_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    for n in 0..10 {
        s.store()
            .hold_call("raced", "b", &call_json(n), 10, HELD_ROOMY)
            .await
            .map_err(fail("hold_call"))?;
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(24));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24usize {
        let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            st.settle_branch("raced", "b", BranchState::Promoted).await
        });
    }
    let mut winners = 0;
    let mut seqs = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let calls = joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("settle_branch"))?;
        if !calls.is_empty() {
            winners += 1;
        }
        seqs.extend(calls.iter().map(|c| c.seq));
    }
    ensure!(
        winners == 1,
        "exactly one settler gets the calls, {winners} did"
    );
    let want: Vec<u64> = (1..=10).collect();
    ensure!(
        seqs == want,
        "the winner gets all 10 calls once, in order, got {seqs:?}"
    );
    Ok(())
}

/// Replicas holding calls of one session at once: exactly `max_calls` are held, the rest are
/// refused for the count, and the stored totals agree.
///
/// # Errors
/// The broken contract.
pub async fn held_caps_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let bounds = HeldBounds {
        max_calls: 5,
        max_bytes: 1 << 20,
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(24));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24u32 {
        let st = Arc::clone(stores.get(i as usize % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            st.hold_call("capped", &format!("b{}", i % 3), &call_json(i), 7, bounds)
                .await
        });
    }
    let (mut held, mut refused) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("hold_call"))?
        {
            HoldOutcome::Held(_) => held += 1,
            HoldOutcome::Limit(Limit::HeldCalls) => refused += 1,
            other => return Err(format!("unexpected outcome {other:?}")),
        }
    }
    ensure!(
        held == 5 && refused == 19,
        "exactly 5 calls held and 19 refused, got {held} and {refused}"
    );
    let totals = s
        .reopen()
        .await?
        .held_totals("capped")
        .await
        .map_err(fail("held_totals"))?;
    ensure!(totals == (5, 35), "stored totals (5, 35), got {totals:?}");
    Ok(())
}

/// Held calls (raw pre-commit arguments) never appear in the stored bytes; they read back
/// when their branch is promoted (positive control).
///
/// # Errors
/// The broken contract.
pub async fn held_calls_never_in_clear(s: &dyn Subject) -> Outcome {
    let st = s.store();
    let secret = r#"{"iban":"DE89370400440532013000","note":"held-conformance-secret"}"#;
    st.hold_call("s1", "b", secret, secret.len() as u64, HELD_ROOMY)
        .await
        .map_err(fail("hold_call"))?;
    never_in_clear(s, &[b"DE89370400440532013000", b"held-conformance-secret"]).await?;
    let back = st
        .settle_branch("s1", "b", BranchState::Promoted)
        .await
        .map_err(fail("settle_branch"))?;
    ensure!(
        back.first().map(|c| c.call.as_str()) == Some(secret),
        "positive control: the call reads back, got {back:?}"
    );
    Ok(())
}

const RATES: RateLimits = RateLimits {
    session_rate_per_s: 10,
    session_burst: 3,
    tool_rate_per_s: 1,
    tool_burst: 2,
};

/// Shared token buckets: a session's burst is shared by every connection (replica); past it
/// a call is refused with the session limit and a retry hint, and refills at the rate; a
/// tool's bucket refuses on its own without spending the session's; sessions are separate.
///
/// # Errors
/// The broken contract.
pub async fn rate_buckets(s: &dyn Subject) -> Outcome {
    let a = s.store();
    let b = s.reopen().await?;
    let t = UnixMillis(1_000_000);
    let take = |st: &Arc<dyn Store>, session: &'static str, tool: &'static str, now: UnixMillis| {
        let st = Arc::clone(st);
        async move { st.take_rate(session, tool, RATES, now).await }
    };
    for (st, tool) in [(&a, "x"), (&b, "y")] {
        let got = take(st, "s1", tool, t).await.map_err(fail("take_rate"))?;
        ensure!(got == RateTake::Taken, "positive control, got {got:?}");
    }
    let tool_out = take(&a, "s1", "x", t).await.map_err(fail("take_rate"))?;
    ensure!(
        tool_out == RateTake::Taken,
        "the tool burst is 2, got {tool_out:?}"
    );
    let x3 = take(&b, "s1", "x", UnixMillis(1_000_000)).await;
    ensure!(
        x3 == Ok(RateTake::Refused {
            limit: Limit::SessionRate,
            retry_after_ms: Some(100)
        }),
        "the fourth call across two replicas is past the session burst of 3, got {x3:?}"
    );
    let later = UnixMillis(1_000_100);
    let x_again = take(&a, "s1", "x", later).await;
    ensure!(
        x_again
            == Ok(RateTake::Refused {
                limit: Limit::ToolRate,
                retry_after_ms: Some(900)
            }),
        "100 ms later the session has a token but tool x has not, got {x_again:?}"
    );
    let z = take(&b, "s1", "z", later).await;
    ensure!(
        z == Ok(RateTake::Taken),
        "the refused tool call took no session token, got {z:?}"
    );
    let other = take(&b, "s2", "x", t).await;
    ensure!(
        other == Ok(RateTake::Taken),
        "another session has its own buckets, got {other:?}"
    );
    Ok(())
}

/// Replicas racing for a session's tokens (rate zero, burst 5): exactly 5 calls are taken.
///
/// # Errors
/// The broken contract.
pub async fn rate_taken_once_under_concurrency(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let rates = RateLimits {
        session_rate_per_s: 0,
        session_burst: 5,
        tool_rate_per_s: 0,
        tool_burst: 100,
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let st = Arc::clone(stores.get(i % stores.len()).ok_or("no store")?);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            let tool = format!("t{}", i % 4);
            st.take_rate("raced", &tool, rates, UnixMillis(5_000)).await
        });
    }
    let mut taken = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("take_rate"))?
        {
            RateTake::Taken => taken += 1,
            RateTake::Refused { limit, .. } => ensure!(
                limit == Limit::SessionRate,
                "refused for the session rate, got {limit:?}"
            ),
        }
    }
    ensure!(taken == 5, "exactly 5 calls may pass, {taken} did");
    Ok(())
}

/// Tool-definition pins (issue 16 item 4): per upstream, replaced per tool, removed on
/// request, all in one call; another connection sees them.
///
/// # Errors
/// The broken contract.
pub async fn tool_pins(s: &dyn Subject) -> Outcome {
    use secureclaw_core::store::ToolPin;
    let store = s.store();
    let pin = |tool: &str, digest: &str, at: u64| ToolPin {
        upstream: "office".into(),
        tool: tool.into(),
        digest: digest.into(),
        definition: format!("{{\"name\":\"{tool}\"}}"),
        pinned_at: UnixMillis(at),
    };
    ensure!(
        store
            .tool_pins("office")
            .await
            .map_err(fail("tool_pins"))?
            .is_empty(),
        "an upstream never pinned has no pins"
    );
    store
        .put_tool_pins("office", &[pin("send", "d1", 1), pin("read", "d2", 1)], &[])
        .await
        .map_err(fail("put_tool_pins"))?;
    let got = store.tool_pins("office").await.map_err(fail("tool_pins"))?;
    ensure!(
        got == vec![pin("read", "d2", 1), pin("send", "d1", 1)],
        "pins come back by tool name: {got:?}"
    );
    ensure!(
        store
            .tool_pins("other")
            .await
            .map_err(fail("tool_pins"))?
            .is_empty(),
        "pins are per upstream"
    );
    store
        .put_tool_pins("office", &[pin("send", "d3", 2)], &["read".into()])
        .await
        .map_err(fail("put_tool_pins again"))?;
    let got = s
        .reopen()
        .await?
        .tool_pins("office")
        .await
        .map_err(fail("tool_pins"))?;
    ensure!(
        got == vec![pin("send", "d3", 2)],
        "a re-pin replaces, an unpin removes, another connection sees both: {got:?}"
    );
    store
        .put_tool_pins("alpha", &[], &[])
        .await
        .map_err(fail("put_tool_pins of nothing"))?;
    let mut marker = pin("", "", 3);
    marker.upstream = "crm".into();
    store
        .put_tool_pins("crm", &[marker], &[])
        .await
        .map_err(fail("put_tool_pins of a marker"))?;
    let ids = store
        .pinned_upstreams()
        .await
        .map_err(fail("pinned_upstreams"))?;
    ensure!(
        ids == ["crm", "office"],
        "the upstreams with pins, sorted (none for an empty put): {ids:?}"
    );
    Ok(())
}

/// Everything a session stores, in `session` (one row of each per-session kind), with handle
/// `handle_id` on vault object `object` (stored) that expires at `handle_expiry`.
async fn populate_session(
    s: &dyn Subject,
    store: &Arc<dyn Store>,
    session: &str,
    handle_id: &str,
    object: &str,
    handle_expiry: u64,
) -> Outcome {
    store
        .put_object(
            object,
            1,
            format!("value of {object}").as_bytes(),
            nonce_for(object),
        )
        .await
        .map_err(fail("put_object"))?;
    let mut h = handle(handle_id, session, object, 1);
    h.expires_at = UnixMillis(handle_expiry);
    store.put_handle(&h).await.map_err(fail("put_handle"))?;
    store
        .protect_objects(session, &[format!("pobj:{session}")])
        .await
        .map_err(fail("protect_objects"))?;
    let mut grant = standing_grant(&format!("grant-{session}"), None);
    grant.session = session.to_owned();
    store
        .create_grant(&grant)
        .await
        .map_err(fail("create_grant"))?;
    store
        .take_grant_use(session, "bank__pay_*", 5)
        .await
        .map_err(fail("take_grant_use"))?;
    let amount = digest(s, StateDigest::Amount, session, "120.00")?;
    store
        .note_amounts(session, &[amount])
        .await
        .map_err(fail("note_amounts"))?;
    store
        .add_written(session, &[written(s, session, "draft body")?], ROOMY)
        .await
        .map_err(fail("add_written"))?;
    store
        .charge_budget(session, 5)
        .await
        .map_err(fail("charge_budget"))?;
    let call = call_json(1);
    store
        .hold_call(session, "b1", &call, call.len() as u64, HELD_ROOMY)
        .await
        .map_err(fail("hold_call"))?;
    store
        .settle_branch(session, "b2", BranchState::Abandoned)
        .await
        .map_err(fail("settle_branch"))?;
    store
        .take_rate(session, "x", RATES, UnixMillis(1_000))
        .await
        .map_err(fail("take_rate"))?;
    Ok(())
}

/// A nonce of its own for each test object (its name, zero-padded: names differ in their
/// first 12 bytes).
fn nonce_for(object: &str) -> [u8; 12] {
    let mut n = [0u8; 12];
    for (o, b) in n.iter_mut().zip(object.bytes()) {
        *o = b;
    }
    n
}

/// Whether `session`'s per-session state is all there (`true`) or all gone (`false`);
/// `Err` if only part of it is.
async fn session_state(
    s: &dyn Subject,
    store: &Arc<dyn Store>,
    session: &str,
) -> Result<bool, String> {
    let amount = digest(s, StateDigest::Amount, session, "120.00")?;
    let wrote = digest(s, StateDigest::Written, session, "draft body")?;
    let seen = [
        (
            "session",
            store
                .session(session)
                .await
                .map_err(fail("session"))?
                .is_some(),
        ),
        (
            "protected object",
            store
                .any_protected(session, &[format!("pobj:{session}")])
                .await
                .map_err(fail("any_protected"))?,
        ),
        (
            "grant use",
            store
                .grant_uses(session, "bank__pay_*")
                .await
                .map_err(fail("grant_uses"))?
                == 1,
        ),
        (
            "read amount",
            store
                .amount_known(session, &[amount])
                .await
                .map_err(fail("amount_known"))?,
        ),
        (
            "written value",
            store
                .wrote_any(session, &[wrote])
                .await
                .map_err(fail("wrote_any"))?,
        ),
        (
            "written rows",
            !store
                .written_since(session, 0)
                .await
                .map_err(fail("written_since"))?
                .values
                .is_empty(),
        ),
        (
            "budget",
            store
                .budget_spent(session)
                .await
                .map_err(fail("budget_spent"))?
                == 1,
        ),
        (
            "held call",
            store
                .held_totals(session)
                .await
                .map_err(fail("held_totals"))?
                .0
                == 1,
        ),
        (
            "branch state",
            store
                .branch_state(session, "b2")
                .await
                .map_err(fail("branch_state"))?
                == BranchState::Abandoned,
        ),
        (
            "standing grant",
            store
                .grant(&format!("grant-{session}"))
                .await
                .map_err(fail("grant"))?
                .is_some(),
        ),
    ];
    let present = seen.iter().filter(|(_, p)| *p).count();
    if present == seen.len() {
        Ok(true)
    } else if present == 0 {
        Ok(false)
    } else {
        Err(format!("session `{session}` is partly swept: {seen:?}"))
    }
}

/// Retention (issue 14 item 5): a sweep removes, in batches of at most `limit` sessions and
/// `limit` handles, the sessions that expired before the cutoff with all their state and the
/// vault objects only their handles referenced, and handles expired on their own; a live
/// session's state, its unexpired handles, a vault object a live handle still references, a
/// session expired after the cutoff and a session that never expires stay; actions, approvals,
/// the ledger and the audit chain stay and verify; the dry-run counts equal what the sweeps
/// removed; a further sweep finds nothing; another connection sees the result.
///
/// # Errors
/// The broken contract.
pub async fn retention_sweep(s: &dyn Subject) -> Outcome {
    let store = s.store();
    let cutoff = UnixMillis(1_000);
    // Three sessions expired before the cutoff, one after it, one live, one "never".
    for (id, expires) in [
        ("ses_gone1", 100),
        ("ses_gone2", 200),
        ("ses_gone3", 300),
        ("ses_kept", 1_500),
        ("ses_live", 10_000),
        ("ses_never", u64::MAX),
    ] {
        store
            .put_session(&session(id, expires))
            .await
            .map_err(fail("put_session"))?;
    }
    let hid = |n: char| format!("hdl_ib_{}", n.to_string().repeat(32));
    for (n, id) in [
        ('a', "ses_gone1"),
        ('b', "ses_gone2"),
        ('c', "ses_gone3"),
        ('d', "ses_kept"),
        ('e', "ses_live"),
        ('f', "ses_never"),
    ] {
        // Handles that outlive their session's expiry go with the session.
        populate_session(s, &store, id, &hid(n), &format!("obj_{n}"), 50_000).await?;
    }
    // The live session also has a handle that expired on its own, and one vault object is
    // referenced by a handle of a swept session and a live handle.
    let mut expired = handle(&hid('g'), "ses_live", "obj_g", 1);
    expired.expires_at = UnixMillis(500);
    store
        .put_object("obj_g", 1, b"value of obj_g", nonce_for("obj_g"))
        .await
        .map_err(fail("put_object"))?;
    store
        .put_handle(&expired)
        .await
        .map_err(fail("put_handle"))?;
    store
        .put_object("obj_shared", 1, b"shared value", nonce_for("obj_shared"))
        .await
        .map_err(fail("put_object"))?;
    for (n, session) in [('h', "ses_gone1"), ('i', "ses_live")] {
        store
            .put_handle(&handle(&hid(n), session, "obj_shared", 1))
            .await
            .map_err(fail("put_handle"))?;
    }
    // The accountability record: an action of a swept session with a pending approval, a
    // ledger entry, audit records.
    let mut gone_action = action(&act(1));
    gone_action.session = "ses_gone1".into();
    store
        .put_action(&gone_action)
        .await
        .map_err(fail("put_action"))?;
    store
        .create_approval(&act(1), UnixMillis(100))
        .await
        .map_err(fail("create_approval"))?;
    store
        .reserve(&act(1), &binding(), UnixMillis(150))
        .await
        .map_err(|e| format!("reserve: {e}"))?;
    for n in 1..=5u64 {
        store
            .append_audit(event(n))
            .await
            .map_err(fail("append_audit"))?;
    }

    let planned = store
        .expired_counts(cutoff)
        .await
        .map_err(fail("expired_counts"))?;
    ensure!(
        planned.sessions == 3 && planned.handles == 5 && planned.vault_objects == 4,
        "the dry run counts 3 sessions, 5 handles (a, b, c, g, h), 4 vault objects (a, b, c, g; \
         not the shared one): {planned:?}"
    );
    for (kind, n) in planned.kinds() {
        ensure!(
            n >= 1,
            "the dry run finds the {kind} of the swept sessions: {planned:?}"
        );
    }
    ensure!(
        store
            .session("ses_gone1")
            .await
            .map_err(fail("session"))?
            .is_some(),
        "a dry run removes nothing"
    );

    // Batches of 2: the limit is honoured, the backlog drains, a further sweep finds nothing.
    let first = store
        .sweep_expired(cutoff, 2)
        .await
        .map_err(fail("sweep_expired"))?;
    ensure!(
        first.sessions == 2,
        "the first batch takes 2 of 3 sessions: {first:?}"
    );
    ensure!(
        first.handles <= 2 + 2 + 2,
        "at most the swept sessions' handles and 2 more: {first:?}"
    );
    let second = store
        .sweep_expired(cutoff, 2)
        .await
        .map_err(fail("sweep_expired"))?;
    ensure!(
        second.sessions == 1,
        "the second batch takes the last session: {second:?}"
    );
    let mut total = first;
    total.add(&second);
    let third = store
        .sweep_expired(cutoff, 2)
        .await
        .map_err(fail("sweep_expired"))?;
    total.add(&third);
    let again = store
        .sweep_expired(cutoff, 2)
        .await
        .map_err(fail("sweep_expired"))?;
    ensure!(
        again.is_empty(),
        "a sweep after the backlog drained finds nothing: {again:?}"
    );
    ensure!(
        total == planned,
        "the sweeps removed what the dry run counted: {total:?} vs {planned:?}"
    );
    let after = store
        .expired_counts(cutoff)
        .await
        .map_err(fail("expired_counts"))?;
    ensure!(after.is_empty(), "nothing expired is left: {after:?}");

    let other = s.reopen().await?;
    for id in ["ses_gone1", "ses_gone2", "ses_gone3"] {
        ensure!(
            !session_state(s, &other, id).await?,
            "session `{id}` must be swept whole"
        );
    }
    for id in ["ses_kept", "ses_live", "ses_never"] {
        ensure!(
            session_state(s, &other, id).await?,
            "session `{id}` must be untouched"
        );
    }
    for (n, object, kept) in [
        ('a', "obj_a", false),
        ('g', "obj_g", false),
        ('h', "obj_shared", false),
        ('d', "obj_d", true),
        ('e', "obj_e", true),
        ('f', "obj_f", true),
        ('i', "obj_shared", true),
    ] {
        let h = other
            .handle(&HandleId(hid(n)))
            .await
            .map_err(fail("handle"))?;
        let value = other
            .object_value_at(object, 1)
            .await
            .map_err(fail("object_value_at"))?;
        if kept {
            ensure!(
                h.as_ref().is_some_and(|r| r.object_id == object) && value.is_some(),
                "handle {n} and its vault object `{object}` must stay and resolve"
            );
        } else {
            ensure!(h.is_none(), "handle {n} must be swept");
        }
        if object != "obj_shared" && !kept {
            ensure!(value.is_none(), "vault object `{object}` must be swept");
        }
    }
    // The accountability record is intact.
    ensure!(
        other.action(&act(1)).await.map_err(fail("action"))? == Some(gone_action),
        "the action of a swept session stays"
    );
    let approval = other.approval(&act(1)).await.map_err(fail("approval"))?;
    ensure!(
        approval.is_some_and(|a| a.state == ApprovalState::Pending),
        "the pending approval of a swept session stays (its session is gone: it can never be used)"
    );
    ensure!(
        other
            .ledger_entry(&act(1))
            .await
            .map_err(fail("ledger_entry"))?
            .is_some_and(|e| e.state == LedgerState::Reserved),
        "the ledger entry stays"
    );
    ensure!(
        other.verify_audit().await.map_err(fail("verify_audit"))? == 5,
        "the audit chain stays whole and verifies"
    );
    ensure!(
        store
            .sweep_expired(cutoff, 0)
            .await
            .map_err(fail("sweep_expired"))?
            .is_empty(),
        "limit 0 removes nothing"
    );
    Ok(())
}

// --------------------------------------------------------------------- audit archive

/// The segment `first..=last` of `store`'s log as an archiver would hand it over (the
/// digest stands for a file's).
async fn segment_of(store: &dyn Store, first: u64, last: u64) -> Result<ArchiveSegment, String> {
    let recs = store
        .audit_records(
            first,
            usize::try_from(last - first + 1).unwrap_or(usize::MAX),
        )
        .await
        .map_err(fail("audit_records"))?;
    let mac = recs
        .last()
        .filter(|r| r.seq == last)
        .map(|r| r.mac.clone())
        .ok_or(format!("record {last} is not stored"))?;
    Ok(ArchiveSegment {
        first_seq: first,
        seq: last,
        mac,
        count: last - first + 1,
        archive_sha256: format!("{last:064x}"),
        archive: format!("audit-{first}-{last}.jsonl"),
        at: UnixMillis(1_000 + last),
    })
}

/// Append `n` events and archive records `1..=archived`: the store and the checkpoint.
async fn archived_log(
    s: &dyn Subject,
    n: u64,
    archived: u64,
) -> Result<(Arc<dyn Store>, AuditCheckpoint), String> {
    let store = s.store();
    for i in 1..=n {
        store
            .append_audit(event(i))
            .await
            .map_err(fail("append_audit"))?;
    }
    let seg = segment_of(store.as_ref(), 1, archived).await?;
    let cp = store
        .archive_audit(&seg)
        .await
        .map_err(fail("archive_audit"))?;
    Ok((store, cp))
}

/// Archiving (issue 14 item 5): a segment from the first record is checkpointed and pruned;
/// the log then verifies from the checkpoint; a segment that does not start at the checkpoint
/// or does not match the stored records is refused with nothing changed; a second checkpoint
/// chains to the first; with every record archived, new records — appended singly, in a group
/// commit or with a pre-effect reservation, through another connection too — continue the
/// sequence after the checkpoint's MAC (never the genesis, never seq 1).
///
/// # Errors
/// The broken contract.
pub async fn audit_archive(s: &dyn Subject) -> Outcome {
    let (store, cp) = archived_log(s, 10, 4).await?;
    ensure!(
        cp.seq() == 4 && cp.segment.count == 4 && cp.prev == secureclaw_core::audit::GENESIS,
        "the first checkpoint covers 1..=4 after the genesis, got {cp:?}"
    );
    ensure!(
        store
            .audit_checkpoints()
            .await
            .map_err(fail("audit_checkpoints"))?
            == vec![cp.clone()],
        "the checkpoint is stored as returned"
    );
    let seqs: Vec<u64> = store
        .audit_records(0, usize::MAX)
        .await
        .map_err(fail("audit_records"))?
        .iter()
        .map(|r| r.seq)
        .collect();
    ensure!(
        seqs == (5..=10).collect::<Vec<u64>>(),
        "records 1..=4 are pruned, got {seqs:?}"
    );
    let v = store
        .verify_audit_log()
        .await
        .map_err(fail("verify_audit_log"))?;
    ensure!(
        v.records == 6 && v.last_seq == 10 && v.checkpoint.as_ref() == Some(&cp),
        "6 records verify from the checkpoint at 4, got {v:?}"
    );
    // Refused, nothing changed: the same segment again, a segment past the head, a wrong MAC.
    match store
        .archive_audit(&segment_of(store.as_ref(), 5, 6).await.map(|mut g| {
            g.first_seq = 1;
            g.count = 6;
            g
        })?)
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => {
            return Err(format!(
                "a segment overlapping the checkpoint must conflict, got {other:?}"
            ));
        }
    }
    let mut beyond = segment_of(store.as_ref(), 5, 10).await?;
    beyond.seq = 12;
    beyond.count = 8;
    ensure!(
        matches!(
            store.archive_audit(&beyond).await,
            Err(StoreError::Invalid(_))
        ),
        "a segment past the last record must be refused"
    );
    let mut wrong = segment_of(store.as_ref(), 5, 7).await?;
    wrong.mac = "00".repeat(32);
    ensure!(
        matches!(
            store.archive_audit(&wrong).await,
            Err(StoreError::Invalid(_))
        ),
        "a segment whose last MAC differs from the stored record must be refused"
    );
    let mut short = segment_of(store.as_ref(), 5, 7).await?;
    short.count = 2;
    ensure!(
        matches!(
            store.archive_audit(&short).await,
            Err(StoreError::Invalid(_))
        ),
        "a segment whose count does not match must be refused"
    );
    ensure!(
        store.verify_audit().await.map_err(fail("verify_audit"))? == 6,
        "refused archives change nothing"
    );
    // Archive everything kept: the second checkpoint chains to the first.
    let cp2 = store
        .archive_audit(&segment_of(store.as_ref(), 5, 10).await?)
        .await
        .map_err(fail("archive_audit"))?;
    ensure!(cp2.prev == cp.checkpoint_mac, "checkpoints chain");
    let v = store
        .verify_audit_log()
        .await
        .map_err(fail("verify_audit_log"))?;
    ensure!(
        v.records == 0 && v.last_seq == 10,
        "an all-archived log verifies as 0 records after seq 10, got {v:?}"
    );
    // New records continue after the checkpoint, on every write path and connection.
    let other = s.reopen().await?;
    let r11 = other
        .append_audit(event(11))
        .await
        .map_err(fail("append_audit"))?;
    ensure!(
        r11.seq == 11 && r11.prev == cp2.segment.mac,
        "a record after an all-archived log continues at 11 after the checkpoint's MAC, got seq {} prev {}",
        r11.seq,
        r11.prev
    );
    store
        .archive_audit(&segment_of(store.as_ref(), 11, 11).await?)
        .await
        .map_err(fail("archive_audit"))?;
    let out = other
        .apply_group(&[GroupWrite::Audit(event(12))])
        .await
        .map_err(fail("apply_group"))?;
    let r12 = out.audit.first().ok_or("the group appended nothing")?;
    ensure!(
        r12.seq == 12 && r12.prev == r11.mac,
        "a group commit after an all-archived log continues at 12, got {}",
        r12.seq
    );
    store
        .archive_audit(&segment_of(store.as_ref(), 12, 12).await?)
        .await
        .map_err(fail("archive_audit"))?;
    let id = act(9_001);
    ensure!(
        other
            .record_and_reserve(&action(&id), &[event(13)], &binding(), UnixMillis(13))
            .await
            .map_err(fail("record_and_reserve"))?,
        "the pre-effect write must reserve"
    );
    let recs = store
        .audit_records(0, usize::MAX)
        .await
        .map_err(fail("audit_records"))?;
    ensure!(
        recs.len() == 1
            && recs
                .first()
                .is_some_and(|r| r.seq == 13 && r.prev == r12.mac),
        "a pre-effect write after an all-archived log continues at 13, got {recs:?}"
    );
    let v = other
        .verify_audit_log()
        .await
        .map_err(fail("verify_audit_log"))?;
    ensure!(
        v.records == 1
            && v.last_seq == 13
            && store
                .audit_checkpoints()
                .await
                .map_err(fail("audit_checkpoints"))?
                .len()
                == 4,
        "four chained checkpoints and one record verify, got {v:?}"
    );
    Ok(())
}

/// Appenders on several connections run while another connection archives what is there,
/// again and again: every append lands in one gap-free chain, each archive prunes exactly its
/// segment, and the log verifies from the last checkpoint.
///
/// # Errors
/// The broken contract.
pub async fn audit_archive_under_concurrent_appenders(s: &dyn Subject) -> Outcome {
    let stores = with_reopened(s, s.store(), 3).await?;
    let archiver = s.reopen().await?;
    let mut tasks = tokio::task::JoinSet::new();
    for (w, st) in stores.iter().enumerate() {
        let st = Arc::clone(st);
        let w = u64::try_from(w).unwrap_or(0);
        tasks.spawn(async move {
            for n in 0..25u64 {
                st.append_audit(event(w * 100 + n)).await?;
            }
            Ok::<(), StoreError>(())
        });
    }
    let mut archived = 0u64;
    for _ in 0..10 {
        let recs = archiver
            .audit_records(archived + 1, usize::MAX)
            .await
            .map_err(fail("audit_records"))?;
        if let Some(last) = recs.last() {
            let cp = archiver
                .archive_audit(&segment_of(archiver.as_ref(), archived + 1, last.seq).await?)
                .await
                .map_err(fail("archive_audit under appenders"))?;
            archived = cp.seq();
        }
        tokio::task::yield_now().await;
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .map_err(|e| format!("task: {e}"))?
            .map_err(fail("concurrent append"))?;
    }
    let v = s
        .store()
        .verify_audit_log()
        .await
        .map_err(fail("verify_audit_log"))?;
    ensure!(
        v.last_seq == 100 && v.records == 100 - archived,
        "100 appends make one chain of 100 across archives (archived {archived}), got {v:?}"
    );
    Ok(())
}

/// The schema itself refuses deleting a record no checkpoint covers, and changing or deleting
/// a checkpoint (positive control: the store's own archive deletes the covered records).
///
/// # Errors
/// The broken contract.
pub async fn audit_archive_schema_refuses_pruning(s: &dyn Subject) -> Outcome {
    let (store, _) = archived_log(s, 6, 2).await?;
    for sql in [
        "DELETE FROM audit WHERE seq = 3",
        "DELETE FROM audit",
        "UPDATE audit_checkpoints SET count = 3, seq = 3",
        "DELETE FROM audit_checkpoints",
    ] {
        ensure!(
            s.tamper(&[], sql).await.is_err(),
            "the schema must refuse `{sql}`"
        );
    }
    ensure!(
        store.verify_audit().await.map_err(fail("verify_audit"))? == 4,
        "nothing changed"
    );
    Ok(())
}

fn audit_err(r: Result<u64, StoreError>) -> Result<AuditError, String> {
    match r {
        Err(StoreError::Audit(e)) => Ok(e),
        other => Err(format!("verification must fail, got {other:?}")),
    }
}

/// Records deleted past the checkpoint (triggers removed, as by someone with write access to
/// the database), or the checkpoint deleted with them, fail verification.
///
/// # Errors
/// The broken contract.
pub async fn audit_archive_detects_deleted_records(s: &dyn Subject) -> Outcome {
    let (store, _) = archived_log(s, 10, 4).await?;
    ensure!(
        store.verify_audit().await.is_ok(),
        "positive control: the archived log verifies"
    );
    s.tamper(&["audit"], "DELETE FROM audit WHERE seq = 5")
        .await?;
    let e = audit_err(store.verify_audit().await)?;
    ensure!(
        e == AuditError::Gap {
            expected_prev: 4,
            found: 6
        },
        "a record deleted after the checkpoint is a gap after 4, got {e}"
    );
    s.tamper(&["audit_checkpoints"], "DELETE FROM audit_checkpoints")
        .await?;
    let e = audit_err(store.verify_audit().await)?;
    ensure!(
        matches!(
            e,
            AuditError::Gap {
                expected_prev: 0,
                found: 6
            }
        ),
        "without its checkpoint the log no longer starts at 1, got {e}"
    );
    Ok(())
}

/// A checkpoint edited to cover one more record (which is then deleted) fails verification
/// because its MAC no longer verifies.
///
/// # Errors
/// The broken contract.
pub async fn audit_archive_detects_edited_checkpoint(s: &dyn Subject) -> Outcome {
    let (store, _) = archived_log(s, 10, 4).await?;
    ensure!(
        store.verify_audit().await.is_ok(),
        "positive control: the archived log verifies"
    );
    s.tamper(
        &["audit", "audit_checkpoints"],
        "UPDATE audit_checkpoints SET seq = 5, count = 5,
             mac = (SELECT mac FROM audit WHERE seq = 5);
         DELETE FROM audit WHERE seq = 5",
    )
    .await?;
    let e = audit_err(store.verify_audit().await)?;
    ensure!(
        matches!(e, AuditError::Checkpoint { seq: 5, .. }),
        "an edited checkpoint must not verify, got {e}"
    );
    Ok(())
}

/// A checkpoint forged without the audit key (a second one, chained by its `prev` to the real
/// one, covering records that are then deleted) fails verification.
///
/// # Errors
/// The broken contract.
pub async fn audit_archive_detects_forged_checkpoint(s: &dyn Subject) -> Outcome {
    let (store, cp) = archived_log(s, 10, 4).await?;
    ensure!(
        store.verify_audit().await.is_ok(),
        "positive control: the archived log verifies"
    );
    let sql = format!(
        "INSERT INTO audit_checkpoints
             (first_seq, seq, mac, count, archive_sha256, archive, at, prev, kid, checkpoint_mac)
         SELECT 5, 7, mac, 3, '{sha}', 'forged.jsonl', 9, '{prev}', '{kid}', '{forged}'
         FROM audit WHERE seq = 7;
         DELETE FROM audit WHERE seq >= 5 AND seq <= 7",
        sha = "cd".repeat(32),
        prev = cp.checkpoint_mac,
        kid = cp.kid.0,
        forged = "ef".repeat(32),
    );
    s.tamper(&["audit"], &sql).await?;
    let e = audit_err(store.verify_audit().await)?;
    ensure!(
        matches!(e, AuditError::Checkpoint { seq: 7, .. }),
        "a forged checkpoint must not verify, got {e}"
    );
    Ok(())
}

/// One `#[tokio::test]` per conformance check, for an implementation whose fresh, empty
/// [`Subject`] `$factory().await` returns as `Option<impl Subject>`: `None` skips the check
/// (the factory says why, e.g. no database server configured or reachable); a factory that
/// cannot build its subject for any other reason panics.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@case $factory,
            sessions, protected_objects, vault, vault_ciphertext_never_in_clear, handles,
            expired_records_stay_until_checked, actions_and_approvals, approved_unused,
            approval_decided_once_under_concurrency, single_use_under_concurrency,
            ledger_transitions, outcome_unknown_bindings, audit_chain,
            audit_chain_under_concurrent_appenders,
            speculation_budget, budget_charged_once_under_concurrency, grant_uses,
            grant_use_taken_once_under_concurrency, standing_grants,
            standing_grant_use_taken_once_under_concurrency, read_amounts, written_set,
            written_set_bounds, written_set_appends_under_concurrency,
            written_values_never_in_clear, held_calls, held_call_bounds,
            held_calls_released_once_under_concurrency, held_caps_under_concurrency,
            held_calls_never_in_clear, rate_buckets, rate_taken_once_under_concurrency,
            pre_effect_writes_in_one_transaction, group_commit, tool_pins, retention_sweep,
            audit_archive, audit_archive_under_concurrent_appenders,
            audit_archive_schema_refuses_pruning, audit_archive_detects_deleted_records,
            audit_archive_detects_edited_checkpoint, audit_archive_detects_forged_checkpoint);
    };
    (@case $factory:path, $($check:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let Some(subject) = $factory().await else {
                    return;
                };
                if let Err(e) = $crate::conformance::$check(&subject).await {
                    panic!("conformance check `{}` failed: {e}", stringify!($check));
                }
            }
        )+
    };
}
