//! Integration tests of the SQLite store: single use across threads, connections and restarts,
//! encryption at rest, append-only audit, approvals decided once, failing closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rusqlite::Connection;
use secureclaw_core::acceptance::{CommitAttempt, CommitProof, Rejection};
use secureclaw_core::artifact::{ARTIFACT_VERSION, ArtifactDecision, AuthorizationArtifact};
use secureclaw_core::audit::{AuditError, AuditEvent, AuditKind};
use secureclaw_core::binding::{self, BindingDigest};
use secureclaw_core::canonical::{CanonicalRequest, Inputs, Intent, RequestContext};
use secureclaw_core::confirmation::{Confirmation, ConfirmationClaims};
use secureclaw_core::handle::{HandleId, HandleRecord, Sensitivity};
use secureclaw_core::keys::KeyId;
use secureclaw_core::{ActionId, KeyRing, ReasonCode, TaskEnvelope, UnixMillis};
use secureclaw_store::{
    ActionRecord, ApprovalState, LedgerState, SessionRecord, SqliteStore, StoreError,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

fn keys() -> Arc<KeyRing> {
    let mut n = 0u8;
    Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        for x in b.iter_mut() {
            n = n.wrapping_add(1);
            *x = n;
        }
    }))
}

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("secureclaw.db");
    (dir, path)
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
        display: "bank__pay_invoice: pay 120.00 EUR to hdl_ib_…".into(),
    }
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

// ---------------------------------------------------------------- single-use ledger

#[test]
fn reserve_twice_second_is_false() {
    let store = SqliteStore::open_in_memory(keys()).unwrap();
    assert_eq!(store.reserve(&act(1), &binding(), UnixMillis(1)), Ok(true));
    assert_eq!(store.reserve(&act(1), &binding(), UnixMillis(2)), Ok(false));
    assert_eq!(
        store.reserve(&act(2), &binding(), UnixMillis(2)),
        Ok(true),
        "other ids are independent"
    );
    let entry = store.ledger_entry(&act(1)).unwrap().unwrap();
    assert_eq!(entry.state, LedgerState::Reserved);
    assert_eq!(
        entry.reserved_at,
        UnixMillis(1),
        "the losing reservation changed nothing"
    );
    assert_eq!(entry.binding, binding());
}

#[test]
fn concurrent_reserve_from_eight_threads_one_wins() {
    let store = Arc::new(SqliteStore::open_in_memory(keys()).unwrap());
    for round in 0..20 {
        let barrier = Arc::new(Barrier::new(8));
        let wins: usize = (0..8)
            .map(|_| {
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    store
                        .reserve(&act(round), &binding(), UnixMillis(1))
                        .unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum();
        assert_eq!(wins, 1, "round {round}");
    }
}

#[test]
fn concurrent_reserve_from_eight_connections_one_wins() {
    let (_dir, path) = temp_db();
    let k = keys();
    let stores: Vec<Arc<SqliteStore>> = (0..8)
        .map(|_| Arc::new(SqliteStore::open(&path, Arc::clone(&k)).unwrap()))
        .collect();
    for round in 0..10 {
        let barrier = Arc::new(Barrier::new(8));
        let wins: usize = stores
            .iter()
            .map(|s| {
                let (store, barrier) = (Arc::clone(s), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    store
                        .reserve(&act(round), &binding(), UnixMillis(1))
                        .unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum();
        assert_eq!(wins, 1, "round {round}");
    }
}

#[test]
fn two_stores_on_one_file_cannot_both_reserve() {
    let (_dir, path) = temp_db();
    let a = SqliteStore::open(&path, keys()).unwrap();
    let b = SqliteStore::open(&path, keys()).unwrap();
    let first = a.reserve(&act(7), &binding(), UnixMillis(1)).unwrap();
    let second = b.reserve(&act(7), &binding(), UnixMillis(1)).unwrap();
    assert!(first ^ second, "exactly one reservation: {first} {second}");
    assert!(first);
}

#[test]
fn reservation_survives_restart_and_is_reported_dangling() {
    let (_dir, path) = temp_db();
    {
        let store = SqliteStore::open(&path, keys()).unwrap();
        assert_eq!(store.reserve(&act(1), &binding(), UnixMillis(10)), Ok(true));
        assert_eq!(store.reserve(&act(2), &binding(), UnixMillis(11)), Ok(true));
        store
            .mark_executed(&act(2), "sha256:beef", UnixMillis(12))
            .unwrap();
        // "Crash": the process ends between reserve(act 1) and its outcome.
    }
    let store = SqliteStore::open(&path, keys()).unwrap();
    let dangling = store.dangling_reservations().unwrap();
    assert_eq!(
        dangling
            .iter()
            .map(|e| e.action_id.clone())
            .collect::<Vec<_>>(),
        vec![act(1)]
    );
    assert_eq!(
        store.reserve(&act(1), &binding(), UnixMillis(20)),
        Ok(false),
        "never re-executable"
    );
    store
        .mark_failed(&act(1), "crash_recovery", UnixMillis(21))
        .unwrap();
    assert!(store.dangling_reservations().unwrap().is_empty());
    assert_eq!(
        store.reserve(&act(1), &binding(), UnixMillis(22)),
        Ok(false),
        "failed stays spent"
    );
    let e = store.ledger_entry(&act(1)).unwrap().unwrap();
    assert_eq!(
        (e.state, e.failure.as_deref(), e.finished_at),
        (
            LedgerState::Failed,
            Some("crash_recovery"),
            Some(UnixMillis(21))
        )
    );
    let e = store.ledger_entry(&act(2)).unwrap().unwrap();
    assert_eq!(
        (e.state, e.result_digest.as_deref()),
        (LedgerState::Executed, Some("sha256:beef"))
    );
}

#[test]
fn ledger_moves_forward_only() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    assert!(matches!(
        store.mark_executed(&act(1), "d", UnixMillis(1)),
        Err(StoreError::NotFound(_))
    ));
    assert!(store.ledger_entry(&act(1)).unwrap().is_none());
    store.reserve(&act(1), &binding(), UnixMillis(1)).unwrap();
    store.mark_executed(&act(1), "d", UnixMillis(2)).unwrap();
    assert!(matches!(
        store.mark_executed(&act(1), "d2", UnixMillis(3)),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.mark_failed(&act(1), "x", UnixMillis(3)),
        Err(StoreError::Conflict(_))
    ));
    // Even raw SQL cannot reopen or forget a spent id.
    let conn = raw(&path);
    let reopen = conn.execute(
        "UPDATE ledger SET state = 'reserved' WHERE action_id = ?1",
        [&act(1).0],
    );
    assert!(
        reopen
            .unwrap_err()
            .to_string()
            .contains("ledger entries only move")
    );
    let forget = conn.execute("DELETE FROM ledger WHERE action_id = ?1", [&act(1).0]);
    assert!(
        forget
            .unwrap_err()
            .to_string()
            .contains("cannot be deleted")
    );
    assert_eq!(store.reserve(&act(1), &binding(), UnixMillis(4)), Ok(false));
}

/// Issue 12: a dispatched effect whose outcome is unknown is recorded as such, stays spent
/// and is final.
#[test]
fn outcome_unknown_is_a_final_spent_state() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    store.reserve(&act(1), &binding(), UnixMillis(1)).unwrap();
    store
        .mark_outcome_unknown(&act(1), "upstream_outcome_unknown", UnixMillis(2))
        .unwrap();
    let e = store.ledger_entry(&act(1)).unwrap().unwrap();
    assert_eq!(
        (e.state, e.failure.as_deref(), e.finished_at),
        (
            LedgerState::OutcomeUnknown,
            Some("upstream_outcome_unknown"),
            Some(UnixMillis(2))
        )
    );
    assert_eq!(e.state.as_str(), "outcome_unknown");
    assert!(store.dangling_reservations().unwrap().is_empty());
    assert_eq!(store.reserve(&act(1), &binding(), UnixMillis(3)), Ok(false));
    for r in [
        store.mark_executed(&act(1), "d", UnixMillis(3)),
        store.mark_failed(&act(1), "x", UnixMillis(3)),
        store.mark_outcome_unknown(&act(1), "x", UnixMillis(3)),
    ] {
        assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
    }
    let reopen = raw(&path).execute(
        "UPDATE ledger SET state = 'executed' WHERE action_id = ?1",
        [&act(1).0],
    );
    assert!(reopen.is_err());
    assert!(matches!(
        store.mark_outcome_unknown(&act(9), "x", UnixMillis(3)),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn store_unavailable_fails_closed() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    assert_eq!(
        store.reserve(&act(1), &binding(), UnixMillis(1)),
        Ok(true),
        "positive control"
    );
    // Break the database underneath the open store: the ledger is gone.
    raw(&path).execute_batch("DROP TABLE ledger").unwrap();
    let got = store.reserve(&act(2), &binding(), UnixMillis(2));
    assert!(
        got.is_err(),
        "a broken ledger must be an error, got {got:?}"
    );
    assert!(matches!(
        store.dangling_reservations(),
        Err(StoreError::Unavailable(_))
    ));
}

fn paid_request() -> CanonicalRequest {
    CanonicalRequest {
        intent: Intent {
            upstream: "bank".into(),
            tool: "pay_invoice".into(),
        },
        caller: "alice".into(),
        session: "s1".into(),
        inputs: Inputs {
            arguments: serde_json::Map::new(),
            handles: Vec::new(),
        },
        ctx: RequestContext {
            destination: "bank".into(),
            task_digest: "t".into(),
            policy_digest: "p".into(),
        },
    }
}

fn artifact(k: &KeyRing, id: &ActionId, request: &CanonicalRequest) -> String {
    AuthorizationArtifact {
        version: ARTIFACT_VERSION,
        action_id: id.clone(),
        binding: binding::bind(k, request).unwrap(),
        policy_digest: "p".into(),
        decision: ArtifactDecision::Allow,
        needs_confirmation: false,
        issued_at: UnixMillis(1000),
        not_after: UnixMillis(100_000),
        kid: KeyId(String::new()),
    }
    .seal(k)
    .unwrap()
}

/// The (asynchronous) acceptance predicate, run to completion.
fn accept(
    k: &KeyRing,
    store: &SqliteStore,
    attempt: &CommitAttempt<'_>,
) -> Result<CommitProof, Rejection> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(secureclaw_core::accept(k, store, attempt))
}

fn attempt<'a>(
    token: &'a str,
    id: &'a ActionId,
    request: &'a CanonicalRequest,
) -> CommitAttempt<'a> {
    CommitAttempt {
        artifact: Some(token),
        action_id: id,
        request,
        current_policy_digest: "p",
        confirmation: None,
        now: UnixMillis(2000),
        max_skew_ms: 0,
        max_confirmation_age_ms: u64::MAX,
    }
}

#[test]
fn acceptance_predicate_with_sqlite_ledger_is_single_use_across_restarts() {
    let (_dir, path) = temp_db();
    let k = keys();
    let request = paid_request();
    let (id, other) = (act(9), act(10));
    let token = artifact(&k, &id, &request);
    let first = SqliteStore::open(&path, Arc::clone(&k)).unwrap();
    let proof = accept(&k, &first, &attempt(&token, &id, &request)).unwrap();
    assert_eq!(proof.action_id(), &id);
    drop(first);
    let restarted = SqliteStore::open(&path, Arc::clone(&k)).unwrap();
    let replay = accept(&k, &restarted, &attempt(&token, &id, &request)).unwrap_err();
    assert_eq!(replay.reason, ReasonCode::Replay);
    // The store breaks: a fresh, valid artifact is refused with store_unavailable.
    raw(&path).execute_batch("DROP TABLE ledger").unwrap();
    let token = artifact(&k, &other, &request);
    let down = accept(&k, &restarted, &attempt(&token, &other, &request)).unwrap_err();
    assert_eq!(down.reason, ReasonCode::StoreUnavailable);
}

// ---------------------------------------------------------------- vault

#[test]
fn vault_values_are_encrypted_on_disk() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    let secret = b"DE89370400440532013000 card 4111111111111111";
    store.put_object("obj-1", 1, secret, [1; 12]).unwrap();
    assert_eq!(
        store.object_value("obj-1").unwrap().unwrap().as_slice(),
        secret
    );
    store.checkpoint().unwrap();
    let mut disk = std::fs::read(&path).unwrap();
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        if let Ok(bytes) = std::fs::read(&side) {
            disk.extend(bytes);
        }
    }
    assert!(
        disk.windows(b"obj-1".len()).any(|w| w == b"obj-1"),
        "positive control: the row is on disk"
    );
    assert!(
        !disk.windows(10).any(|w| w == &secret[..10]),
        "plaintext IBAN found on disk"
    );
    assert!(
        !disk.windows(16).any(|w| w == b"4111111111111111"),
        "plaintext card found on disk"
    );
}

#[cfg(unix)]
#[test]
fn database_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp_db();
    let _store = SqliteStore::open(&path, keys()).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
}

#[test]
fn vault_versions_and_lookups() {
    let store = SqliteStore::open_in_memory(keys()).unwrap();
    assert!(store.object_value("missing").unwrap().is_none());
    store.put_object("o", 1, b"one", [1; 12]).unwrap();
    store.put_object("o", 2, b"two", [2; 12]).unwrap();
    assert_eq!(
        store.object_value("o").unwrap().unwrap().as_slice(),
        b"two",
        "latest version"
    );
    assert_eq!(
        store.object_value_at("o", 1).unwrap().unwrap().as_slice(),
        b"one"
    );
    assert!(store.object_value_at("o", 3).unwrap().is_none());
    assert!(matches!(
        store.put_object("o", 2, b"again", [3; 12]),
        Err(StoreError::Conflict(_))
    ));
    assert!(
        matches!(
            store.put_object("p", 1, b"x", [1; 12]),
            Err(StoreError::Invalid(_))
        ),
        "nonce reuse"
    );
    assert_eq!(
        store.object_value_at("o", 2).unwrap().unwrap().as_slice(),
        b"two",
        "refusals changed nothing"
    );
}

#[test]
fn tampered_or_moved_ciphertext_is_an_error() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    store.put_object("a", 1, b"alpha secret", [1; 12]).unwrap();
    store.put_object("b", 1, b"bravo secret", [2; 12]).unwrap();
    store.put_object("b", 2, b"bravo two", [3; 12]).unwrap();
    let conn = raw(&path);
    let mut ciphertext: Vec<u8> = conn
        .query_row(
            "SELECT ciphertext FROM vault_objects WHERE object_id = 'a'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    ciphertext[4] ^= 0x01;
    conn.execute(
        "UPDATE vault_objects SET ciphertext = ?1 WHERE object_id = 'a'",
        [ciphertext],
    )
    .unwrap();
    assert!(matches!(
        store.object_value("a"),
        Err(StoreError::Corrupt(_))
    ));
    // Moving b's version 1 nonce and ciphertext over version 2 does not yield a value either
    // (the attacker first drops the index that refuses a repeated nonce).
    conn.execute_batch(
        "DROP INDEX vault_objects_nonce;
         UPDATE vault_objects SET (nonce, ciphertext) =
            (SELECT nonce, ciphertext FROM vault_objects WHERE object_id = 'b' AND version = 1)
         WHERE object_id = 'b' AND version = 2;",
    )
    .unwrap();
    assert!(matches!(
        store.object_value_at("b", 2),
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(
        store.object_value_at("b", 1).unwrap().unwrap().as_slice(),
        b"bravo secret",
        "positive control"
    );
    // A store with different keys cannot read anything.
    let stranger = SqliteStore::open(
        &path,
        Arc::new(KeyRing::generate(&mut |b: &mut [u8]| b.fill(0xee))),
    )
    .unwrap();
    assert!(stranger.object_value_at("b", 1).is_err());
}

// ---------------------------------------------------------------- sessions, handles

#[test]
fn sessions_round_trip_and_are_immutable() {
    let store = SqliteStore::open_in_memory(keys()).unwrap();
    let s = SessionRecord {
        id: "s1".into(),
        caller: "alice".into(),
        envelope: TaskEnvelope {
            request: "pay invoice 42".into(),
            trusted_targets: vec!["bob@example.com".into()],
            ..TaskEnvelope::default()
        },
        created_at: UnixMillis(5),
        expires_at: UnixMillis(u64::MAX),
    };
    store.put_session(&s).unwrap();
    assert_eq!(store.session("s1").unwrap(), Some(s.clone()));
    assert!(store.session("s2").unwrap().is_none());
    let hijack = SessionRecord {
        caller: "mallory".into(),
        ..s.clone()
    };
    assert!(matches!(
        store.put_session(&hijack),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.session("s1").unwrap(), Some(s));
}

fn handle(id: &str, session: &str, created: u64) -> HandleRecord {
    HandleRecord {
        id: HandleId(id.into()),
        caller: "alice".into(),
        session: session.into(),
        object_id: "o1".into(),
        version: 3,
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

#[test]
fn handles_round_trip_revoke_and_list() {
    let store = SqliteStore::open_in_memory(keys()).unwrap();
    let h1 = handle("hdl_ib_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "s1", 20);
    let h2 = HandleRecord {
        sensitivity: Sensitivity::Low,
        anchored: false,
        allowed_sinks: vec![],
        ..handle("hdl_em_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "s1", 10)
    };
    let h3 = handle("hdl_ib_cccccccccccccccccccccccccccccccc", "s2", 5);
    for h in [&h1, &h2, &h3] {
        store.put_handle(h).unwrap();
    }
    assert!(matches!(
        store.put_handle(&h1),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.handle(&h1.id).unwrap(), Some(h1.clone()));
    assert!(
        store
            .handle(&HandleId("hdl_ib_zzzz".into()))
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store.handles_for_session("s1").unwrap(),
        vec![h2.clone(), h1.clone()]
    );
    assert!(store.handles_for_session("s3").unwrap().is_empty());
    assert!(store.revoke_handle(&h1.id).unwrap());
    assert!(!store.revoke_handle(&h1.id).unwrap(), "already revoked");
    assert!(
        !store
            .revoke_handle(&HandleId("hdl_ib_zzzz".into()))
            .unwrap(),
        "unknown"
    );
    assert_eq!(
        store.handle(&h1.id).unwrap(),
        Some(HandleRecord {
            revoked: true,
            ..h1
        })
    );
}

#[test]
fn reusable_handle_by_session_key_and_validity() {
    let store = SqliteStore::open_in_memory(keys()).unwrap();
    let h1 = handle("hdl_ib_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "s1", 20);
    let h2 = handle("hdl_ib_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "s1", 30);
    let h3 = handle("hdl_ib_cccccccccccccccccccccccccccccccc", "s2", 40);
    store.put_handle_keyed(&h1, Some("reuse:k:1")).unwrap();
    store.put_handle_keyed(&h2, Some("reuse:k:1")).unwrap();
    store.put_handle_keyed(&h3, Some("reuse:k:1")).unwrap();
    store
        .put_handle(&handle("hdl_ib_dddddddddddddddddddddddddddddddd", "s1", 50))
        .unwrap();
    // Positive control: the newest live handle of the session under the key.
    assert_eq!(
        store
            .reusable_handle("s1", "reuse:k:1", UnixMillis(0))
            .unwrap(),
        Some(h2.clone())
    );
    assert_eq!(
        store
            .reusable_handle("s2", "reuse:k:1", UnixMillis(0))
            .unwrap(),
        Some(h3)
    );
    assert!(
        store
            .reusable_handle("s1", "reuse:k:2", UnixMillis(0))
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .reusable_handle("s3", "reuse:k:1", UnixMillis(0))
            .unwrap()
            .is_none()
    );
    // Valid long enough: h2 lives until 1030, h1 until 1020.
    assert_eq!(
        store
            .reusable_handle("s1", "reuse:k:1", UnixMillis(1025))
            .unwrap(),
        Some(h2.clone())
    );
    assert!(
        store
            .reusable_handle("s1", "reuse:k:1", UnixMillis(1031))
            .unwrap()
            .is_none()
    );
    // A revoked handle is never reused; the older live one is.
    store.revoke_handle(&h2.id).unwrap();
    assert_eq!(
        store
            .reusable_handle("s1", "reuse:k:1", UnixMillis(0))
            .unwrap(),
        Some(h1)
    );
}

// ---------------------------------------------------------------- actions and approvals

fn confirmation(k: &KeyRing, id: &ActionId) -> Confirmation {
    Confirmation::seal(
        ConfirmationClaims {
            action_id: id.clone(),
            binding: binding(),
            confirmer: "operator".into(),
            confirmed_at: UnixMillis(200),
            expires_at: UnixMillis(900),
        },
        k,
    )
    .unwrap()
}

#[test]
fn approvals_are_decided_exactly_once() {
    let k = keys();
    let store = SqliteStore::open_in_memory(Arc::clone(&k)).unwrap();
    assert!(
        matches!(
            store.create_approval(&act(1), UnixMillis(1)),
            Err(StoreError::NotFound(_))
        ),
        "no action"
    );
    for n in 1..=3 {
        store.put_action(&action(&act(n))).unwrap();
        store
            .create_approval(&act(n), UnixMillis(100 + u64::from(n)))
            .unwrap();
    }
    assert!(matches!(
        store.put_action(&action(&act(1))),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.action(&act(1)).unwrap(), Some(action(&act(1))));
    store.create_approval(&act(1), UnixMillis(999)).unwrap();
    assert_eq!(
        store.approval(&act(1)).unwrap().unwrap().created_at,
        UnixMillis(101),
        "idempotent"
    );

    let c = confirmation(&k, &act(1));
    assert!(matches!(
        store.decide_approval(&act(2), true, "operator", UnixMillis(200), Some(c.clone())),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.decide_approval(&act(1), false, "operator", UnixMillis(200), Some(c.clone())),
        Err(StoreError::Invalid(_))
    ));
    let decided = store
        .decide_approval(&act(1), true, "operator", UnixMillis(200), Some(c.clone()))
        .unwrap();
    assert_eq!(decided.state, ApprovalState::Approved);
    assert_eq!(decided.decided_at, Some(UnixMillis(200)));
    assert_eq!(decided.decided_by.as_deref(), Some("operator"));
    assert_eq!(decided.confirmation.as_ref(), Some(&c));
    assert!(
        decided.confirmation.as_ref().unwrap().verifies(&k),
        "stored confirmation still verifies"
    );

    let again = store.decide_approval(&act(1), false, "mallory", UnixMillis(300), None);
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(
        store.approval(&act(1)).unwrap(),
        Some(decided),
        "second decision changed nothing"
    );
    assert!(matches!(
        store.decide_approval(&act(9), true, "op", UnixMillis(1), None),
        Err(StoreError::NotFound(_))
    ));

    let denied = store
        .decide_approval(&act(2), false, "cli", UnixMillis(250), None)
        .unwrap();
    assert_eq!(
        (denied.state, denied.confirmation),
        (ApprovalState::Denied, None)
    );

    let pending = store.list_approvals(Some(ApprovalState::Pending)).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0.action_id, act(3));
    assert_eq!(pending[0].1, action(&act(3)));
    let all = store.list_approvals(None).unwrap();
    assert_eq!(
        all.iter()
            .map(|(p, _)| p.action_id.clone())
            .collect::<Vec<_>>(),
        vec![act(1), act(2), act(3)]
    );
    assert_eq!(
        store
            .list_approvals(Some(ApprovalState::Denied))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn concurrent_decisions_one_wins() {
    let (_dir, path) = temp_db();
    let k = keys();
    let setup = SqliteStore::open(&path, Arc::clone(&k)).unwrap();
    setup.put_action(&action(&act(1))).unwrap();
    setup.create_approval(&act(1), UnixMillis(1)).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let results: Vec<_> = (0..8)
        .map(|i| {
            let (path, k, barrier) = (path.clone(), Arc::clone(&k), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let store = SqliteStore::open(&path, k).unwrap();
                barrier.wait();
                store.decide_approval(&act(1), i % 2 == 0, &format!("op{i}"), UnixMillis(2), None)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(_) | Err(StoreError::Conflict(_)))),
        "{results:?}"
    );
    let conn = raw(&path);
    let tamper = conn.execute(
        "UPDATE approvals SET state = 'approved', decided_by = 'mallory'",
        [],
    );
    assert!(
        tamper
            .unwrap_err()
            .to_string()
            .contains("decided approval cannot change")
    );
}

// ---------------------------------------------------------------- audit

fn event(n: u64) -> AuditEvent {
    AuditEvent {
        session: Some("s1".into()),
        action_id: Some(act(u32::try_from(n).unwrap()).0),
        reason: n.is_multiple_of(2).then_some(ReasonCode::Replay),
        detail: serde_json::json!({ "n": n, "ratio": 0.1 + 0.2, "tiny": 5e-324, "big": 1.797_693_134_862_315_7e308, "count": u64::MAX }),
        ..AuditEvent::new(AuditKind::Preview, UnixMillis(n))
    }
}

#[test]
fn audit_chain_appends_verifies_and_pages() {
    let (_dir, path) = temp_db();
    let k = keys();
    let store = SqliteStore::open(&path, Arc::clone(&k)).unwrap();
    assert_eq!(store.verify_audit().unwrap(), 0, "empty log verifies");
    for n in 1..=5 {
        let r = store.append_audit(event(n)).unwrap();
        assert_eq!(r.seq, n);
    }
    drop(store);
    let store = SqliteStore::open(&path, Arc::clone(&k)).unwrap();
    assert_eq!(
        store.verify_audit().unwrap(),
        5,
        "verifies after a reload from disk"
    );
    let page = store.audit_records(2, 2).unwrap();
    assert_eq!(page.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(page[0].event, event(2));
    assert_eq!(page[1].prev, page[0].mac);
    assert!(store.audit_records(6, 10).unwrap().is_empty());
    assert_eq!(store.audit_records(0, usize::MAX).unwrap().len(), 5);
}

#[test]
fn audit_is_append_only_in_sql() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    for n in 1..=3 {
        store.append_audit(event(n)).unwrap();
    }
    let conn = raw(&path);
    let update = conn.execute("UPDATE audit SET event = '{}' WHERE seq = 2", []);
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = conn.execute("DELETE FROM audit WHERE seq = 3", []);
    assert!(
        delete
            .unwrap_err()
            .to_string()
            .contains("only once a checkpoint covers them")
    );
    assert_eq!(store.verify_audit().unwrap(), 3);

    // Someone with write access drops the trigger and edits a record: the keyed chain notices.
    conn.execute_batch("DROP TRIGGER audit_no_update").unwrap();
    let forged = serde_json::to_string(&AuditEvent {
        reason: None,
        ..event(2)
    })
    .unwrap();
    conn.execute("UPDATE audit SET event = ?1 WHERE seq = 2", [forged])
        .unwrap();
    assert_eq!(
        store.verify_audit().unwrap_err(),
        StoreError::Audit(AuditError::Broken(2))
    );
}

/// A stored audit row whose text or index columns were changed in ways the MAC over the
/// parsed event does not see — an unknown field, a duplicated key whose last copy restores
/// the genuine value, a re-encoded (reordered) object, `kind`/`at` columns that disagree with
/// the event — fails verification and listing (red-team F4: such rows verified while a reader
/// of the raw table saw the forgery). Positive control: the untouched log verifies.
#[test]
fn audit_rows_altered_outside_the_mac_fail_verification() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    for n in 1..=3 {
        store.append_audit(event(n)).unwrap();
    }
    assert_eq!(store.verify_audit().unwrap(), 3, "positive control");
    let conn = raw(&path);
    conn.execute_batch("DROP TRIGGER audit_no_update").unwrap();
    let genuine: String = conn
        .query_row("SELECT event FROM audit WHERE seq = 2", [], |r| r.get(0))
        .unwrap();
    let (kind, at): (String, i64) = conn
        .query_row("SELECT kind, at FROM audit WHERE seq = 2", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let body = genuine.strip_prefix('{').unwrap();
    let tampered_texts = [
        // An extra field a raw reader sees.
        format!("{{\"note\":\"approved by ceo\",{body}"),
        // A duplicated key inside `detail`: the forged first copy, the genuine last one (what
        // the parser keeps).
        genuine.replacen("\"detail\":{", "\"detail\":{\"n\":999,", 1),
        // Whitespace: the same JSON, another text.
        genuine.replace(',', ", "),
    ];
    for text in tampered_texts {
        conn.execute("UPDATE audit SET event = ?1 WHERE seq = 2", [&text])
            .unwrap();
        let err = store.verify_audit().unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains("audit record 2")),
            "{text}: {err:?}"
        );
        assert!(
            store.audit_records(0, 10).is_err(),
            "listing refuses it too"
        );
    }
    conn.execute("UPDATE audit SET event = ?1 WHERE seq = 2", [&genuine])
        .unwrap();
    assert_eq!(store.verify_audit().unwrap(), 3, "restored");
    for (column, value) in [("kind", "\"read\"".to_owned()), ("at", "0".to_owned())] {
        conn.execute_batch(&format!(
            "UPDATE audit SET {column} = {} WHERE seq = 2",
            value.replace('"', "'")
        ))
        .unwrap();
        let err = store.verify_audit().unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains("columns")),
            "{column}: {err:?}"
        );
        conn.execute(
            "UPDATE audit SET kind = ?1, at = ?2 WHERE seq = 2",
            rusqlite::params![kind, at],
        )
        .unwrap();
    }
    assert_eq!(store.verify_audit().unwrap(), 3, "restored");
}

#[test]
fn concurrent_appends_from_two_stores_form_one_chain() {
    let (_dir, path) = temp_db();
    let k = keys();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (path, k) = (path.clone(), Arc::clone(&k));
            std::thread::spawn(move || {
                let store = SqliteStore::open(&path, k).unwrap();
                for n in 0..25 {
                    store
                        .append_audit(AuditEvent::new(AuditKind::Read, UnixMillis(t * 100 + n)))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        SqliteStore::open(&path, k).unwrap().verify_audit().unwrap(),
        100
    );
}

// ---------------------------------------------------------------- schema

#[test]
fn schema_is_versioned_and_newer_files_are_refused() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 12);
    drop(store);
    assert_eq!(
        SqliteStore::open(&path, keys())
            .unwrap()
            .schema_version()
            .unwrap(),
        12,
        "reopen is a no-op"
    );
    raw(&path).pragma_update(None, "user_version", 99).unwrap();
    assert_eq!(
        SqliteStore::open(&path, keys()).unwrap_err(),
        StoreError::SchemaTooNew {
            found: 99,
            supported: 12
        }
    );
    let journal: String = raw(&path)
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
}

/// Retention (issue 14 item 5): the grow-only per-session counters refuse a `DELETE` while
/// their session's record exists (a stored session never gets a budget or a grant use back),
/// and allow it once the record is gone (the sweep deletes the record first, in the same
/// transaction).
#[test]
fn grow_only_counters_are_deleted_only_after_their_session() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path, keys()).unwrap();
    store
        .put_session(&SessionRecord {
            id: "s1".into(),
            caller: "alice".into(),
            envelope: TaskEnvelope::default(),
            created_at: UnixMillis(1),
            expires_at: UnixMillis(2),
        })
        .unwrap();
    assert_eq!(store.charge_budget("s1", 5).unwrap(), Some(1));
    assert!(store.take_grant_use("s1", "g", 5).unwrap());
    let conn = raw(&path);
    for table in ["speculation_budget", "grant_uses"] {
        let refused = conn.execute(&format!("DELETE FROM {table} WHERE session = 's1'"), []);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("while their session exists")),
            "{table}: {refused:?}"
        );
    }
    conn.execute("DELETE FROM sessions WHERE id = 's1'", [])
        .unwrap();
    for table in ["speculation_budget", "grant_uses"] {
        assert_eq!(
            conn.execute(&format!("DELETE FROM {table} WHERE session = 's1'"), [])
                .unwrap(),
            1,
            "{table}"
        );
    }
    assert_eq!(store.budget_spent("s1").unwrap(), 0);
}
