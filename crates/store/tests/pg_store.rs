//! PostgreSQL-specific properties beyond the conformance suite: versioned migrations,
//! append-only and forward-only enforced by triggers, reservations attributed to replicas with
//! leases, and failing closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common_pg;

use common_pg::Scratch;
use secureclaw_core::acceptance::SingleUseLedger;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::keys::KeyId;
use secureclaw_core::store::{
    ActionRecord, ActionStore, AuditSink, LedgerStore, SessionStore, StoreError,
};
use secureclaw_core::{ActionId, UnixMillis};
use secureclaw_store::PgStore;

fn binding() -> BindingDigest {
    BindingDigest {
        kid: KeyId("bind-1".into()),
        digest: "ab".repeat(32),
    }
}

async fn scratch() -> Option<Scratch> {
    let admin = common_pg::admin_url().await?;
    Some(Scratch::create(&admin).await)
}

#[tokio::test]
async fn migrations_are_versioned_idempotent_and_newer_databases_refused() {
    let Some(db) = scratch().await else { return };
    let keys = common_pg::keys();
    let first = PgStore::connect(&db.url, keys.clone()).await.unwrap();
    assert_eq!(first.schema_version().await.unwrap(), 10);
    // Several replicas starting at once migrate once.
    let (a, b) = tokio::join!(
        PgStore::connect(&db.url, keys.clone()),
        PgStore::connect(&db.url, keys.clone())
    );
    assert_eq!(a.unwrap().schema_version().await.unwrap(), 10);
    assert_eq!(b.unwrap().schema_version().await.unwrap(), 10);
    let raw = db.raw().await;
    let rows: i64 = raw
        .query_one("SELECT count(*) FROM secureclaw_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 10);
    raw.execute("INSERT INTO secureclaw_schema (version) VALUES (99)", &[])
        .await
        .unwrap();
    let newer = PgStore::connect(&db.url, keys).await;
    assert!(
        matches!(
            newer,
            Err(StoreError::SchemaTooNew {
                found: 99,
                supported: 10
            })
        ),
        "{newer:?}"
    );
}

#[tokio::test]
async fn triggers_keep_audit_append_only_and_ledger_forward_only() {
    let Some(db) = scratch().await else { return };
    let store = PgStore::connect(&db.url, common_pg::keys()).await.unwrap();
    store
        .append_audit(AuditEvent::new(AuditKind::Preview, UnixMillis(1)))
        .await
        .unwrap();
    let id = ActionId("act_trigger".into());
    assert!(store.reserve(&id, &binding(), UnixMillis(1)).await.unwrap());
    store
        .mark_executed(&id, "digest", UnixMillis(2))
        .await
        .unwrap();
    let action = ActionRecord {
        action_id: id.clone(),
        session: "s".into(),
        caller: "alice".into(),
        tool: "t".into(),
        binding: binding(),
        needs_confirmation: true,
        created_at: UnixMillis(1),
        request_json: "{}".into(),
        display: "t()".into(),
    };
    store.put_action(&action).await.unwrap();
    store.create_approval(&id, UnixMillis(1)).await.unwrap();
    store
        .decide_approval(&id, false, "operator", UnixMillis(2), None)
        .await
        .unwrap();
    let raw = db.raw().await;
    for sql in [
        "UPDATE audit SET event = '{}'",
        "DELETE FROM audit",
        "TRUNCATE audit",
        "DELETE FROM ledger",
        "TRUNCATE ledger",
        "UPDATE ledger SET state = 'reserved'",
        "UPDATE ledger SET state = 'failed'",
        "UPDATE approvals SET state = 'approved'",
        "DELETE FROM approvals",
    ] {
        assert!(raw.batch_execute(sql).await.is_err(), "`{sql}` was allowed");
    }
    // Positive control: the guarded rows are still there and the chain verifies.
    assert_eq!(store.verify_audit().await.unwrap(), 1);
    let n: i64 = raw
        .query_one("SELECT count(*) FROM ledger", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test]
async fn dangling_reservations_are_attributed_to_replicas_with_leases() {
    let Some(db) = scratch().await else { return };
    let keys = common_pg::keys();
    let a = PgStore::connect(&db.url, keys.clone()).await.unwrap();
    let b = PgStore::connect(&db.url, keys.clone()).await.unwrap();
    assert_ne!(a.replica_id(), b.replica_id());
    let id = ActionId("act_in_flight".into());
    assert!(a.reserve(&id, &binding(), UnixMillis(1)).await.unwrap());
    // Replica A's commit is in flight: B (starting, or running) never reports it.
    assert!(b.dangling_reservations().await.unwrap().is_empty());
    let c = PgStore::connect(&db.url, keys.clone()).await.unwrap();
    assert!(c.dangling_reservations().await.unwrap().is_empty());
    // A sees its own reservation, as the SQLite store does.
    let own = a.dangling_reservations().await.unwrap();
    assert_eq!(own.len(), 1);
    // A dies; once its lease has lapsed, the reservation is dangling for everyone.
    let replica_a = a.replica_id().to_owned();
    drop(a);
    db.raw()
        .await
        .execute(
            "UPDATE replicas SET lease_until = now() - interval '1 second' WHERE id = $1",
            &[&replica_a],
        )
        .await
        .unwrap();
    let found = b.dangling_reservations().await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].action_id, id);
    // B renewing its own lease does not revive A's.
    b.renew_lease().await.unwrap();
    assert_eq!(c.dangling_reservations().await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_fails_closed() {
    // Port 1 on loopback: nothing listens there.
    let got = PgStore::connect(
        "postgres://postgres@127.0.0.1:1/test?connect_timeout=2",
        common_pg::keys(),
    )
    .await;
    assert!(matches!(got, Err(StoreError::Unavailable(_))), "{got:?}");
}

#[tokio::test]
async fn a_database_gone_under_a_running_store_fails_closed() {
    let Some(db) = scratch().await else { return };
    let store = PgStore::connect(&db.url, common_pg::keys()).await.unwrap();
    let id = ActionId("act_gone".into());
    // Positive control.
    assert!(store.session("nobody").await.unwrap().is_none());
    let name = db.name.clone();
    drop(db);
    assert!(
        store.reserve(&id, &binding(), UnixMillis(1)).await.is_err(),
        "a reservation without a database must be an error, never Ok(true) from memory ({name})"
    );
    assert!(
        store
            .append_audit(AuditEvent::new(AuditKind::Preview, UnixMillis(1)))
            .await
            .is_err()
    );
    assert!(store.session("nobody").await.is_err());
}
