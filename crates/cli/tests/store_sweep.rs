//! `secureclaw store sweep` (issue 14 item 5): the retention sweep on a state directory's
//! SQLite store, run as an operator would; a dry run removes nothing, a sweep removes the
//! expired session's state and keeps the live one, the approval and the audit chain.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::EXE;
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::handle::{HandleId, HandleRecord, Sensitivity};
use secureclaw_core::keys::{KeyId, KeyRing, KeyRingFile};
use secureclaw_core::store::{ActionRecord, SessionRecord};
use secureclaw_core::{ActionId, TaskEnvelope, UnixMillis};
use secureclaw_store::SqliteStore;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

fn run(state: &Path, args: &[&str]) -> Output {
    Command::new(EXE)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("SECURECLAW_STORE")
        .env_remove("SECURECLAW_KEYS")
        .env_remove("SECURECLAW_KEYS_FILE")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn now() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn handle(id: char, session: &str, object: &str) -> HandleRecord {
    HandleRecord {
        id: HandleId(format!("hdl_ib_{}", id.to_string().repeat(32))),
        caller: "alice".into(),
        session: session.into(),
        object_id: object.into(),
        version: 1,
        label: "iban".into(),
        sensitivity: Sensitivity::High,
        source: "office__read_invoice".into(),
        anchored: true,
        allowed_sinks: vec![],
        created_at: UnixMillis(1),
        // The handle outlives its session: it goes with the session.
        expires_at: UnixMillis(now() + 86_400_000),
        revoked: false,
    }
}

/// A state directory with keys (made by `keys list`), an expired and a live session, each
/// with a handle and its vault value, a pending approval of the expired session and one
/// audit record.
fn seeded() -> (tempfile::TempDir, Arc<KeyRing>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    stdout(&run(state, &["keys", "list"]));
    let file: KeyRingFile =
        serde_json::from_str(&std::fs::read_to_string(state.join("keys.json")).unwrap()).unwrap();
    let keys = Arc::new(KeyRing::from_file(&file).unwrap());
    let store = SqliteStore::open(&state.join("secureclaw.db"), keys.clone()).unwrap();
    store
        .append_audit(AuditEvent::new(AuditKind::Session, UnixMillis(5)))
        .unwrap();
    for (id, expires, h, object, nonce) in [
        ("ses_old", 10, 'a', "obj_old", [1u8; 12]),
        ("ses_live", now() + 86_400_000, 'b', "obj_live", [2u8; 12]),
    ] {
        store
            .put_session(&SessionRecord {
                id: id.into(),
                caller: "alice".into(),
                envelope: TaskEnvelope::default(),
                created_at: UnixMillis(1),
                expires_at: UnixMillis(expires),
            })
            .unwrap();
        store
            .put_object(object, 1, b"DE89370400440532013000", nonce)
            .unwrap();
        store.put_handle(&handle(h, id, object)).unwrap();
    }
    let action = ActionId(format!("act_{:026}", 1));
    store
        .put_action(&ActionRecord {
            action_id: action.clone(),
            session: "ses_old".into(),
            caller: "alice".into(),
            tool: "bank__pay_invoice".into(),
            binding: BindingDigest {
                kid: KeyId("bind-1".into()),
                digest: "ab".repeat(32),
            },
            needs_confirmation: true,
            created_at: UnixMillis(5),
            request_json: "{}".into(),
            display: "bank__pay_invoice: pay 120.00 EUR".into(),
        })
        .unwrap();
    store.create_approval(&action, UnixMillis(5)).unwrap();
    (dir, keys)
}

#[test]
fn store_sweep_removes_expired_session_state_and_keeps_the_record() {
    let (dir, keys) = seeded();
    let state = dir.path();
    let help = stdout(&run(state, &["store", "sweep", "--help"]));
    assert!(
        help.contains("retention_ms") && help.contains("--dry-run"),
        "{help}"
    );

    let dry = stdout(&run(state, &["store", "sweep", "--dry-run"]));
    assert!(dry.contains("would remove"), "{dry}");
    let line = |text: &str, kind: &str| -> u64 {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `{kind}` line in {text}"))
    };
    assert_eq!(line(&dry, "sessions"), 1, "{dry}");
    assert_eq!(line(&dry, "handles"), 1, "{dry}");
    assert_eq!(line(&dry, "vault_objects"), 1, "{dry}");
    let store = SqliteStore::open(&state.join("secureclaw.db"), keys.clone()).unwrap();
    assert!(
        store.session("ses_old").unwrap().is_some(),
        "a dry run removes nothing"
    );

    let swept: Value =
        serde_json::from_str(&stdout(&run(state, &["store", "sweep", "--json"]))).unwrap();
    assert_eq!(swept["dry_run"], false);
    assert_eq!(swept["removed"]["sessions"], 1, "{swept}");
    assert_eq!(swept["removed"]["handles"], 1, "{swept}");
    assert_eq!(swept["removed"]["vault_objects"], 1, "{swept}");
    assert_eq!(swept["total"], 3, "{swept}");
    assert!(store.session("ses_old").unwrap().is_none());
    assert!(store.object_value_at("obj_old", 1).unwrap().is_none());
    assert!(store.session("ses_live").unwrap().is_some());
    assert!(store.object_value_at("obj_live", 1).unwrap().is_some());

    let again = stdout(&run(state, &["store", "sweep"]));
    assert_eq!(
        line(&again, "total"),
        0,
        "a second sweep finds nothing: {again}"
    );

    // The approval of the swept session is still listed, as ended; the chain verifies.
    let list = stdout(&run(state, &["approvals", "list"]));
    assert!(list.contains("act_") && list.contains("ended"), "{list}");
    let verify = stdout(&run(state, &["audit", "verify"]));
    assert!(verify.contains("audit log OK: 1 record"), "{verify}");
}

#[test]
fn store_sweep_follows_the_config_and_refuses_nonsense() {
    let (dir, _keys) = seeded();
    let state = dir.path();
    let config = state.join("secureclaw.toml");
    std::fs::write(&config, "[store]\nretention_ms = 0\n").unwrap();
    let off = stdout(&run(
        state,
        &["store", "sweep", "-c", config.to_str().unwrap()],
    ));
    assert!(off.contains("sweeping is off"), "{off}");
    // An explicit age sweeps anyway.
    let forced = stdout(&run(
        state,
        &[
            "store",
            "sweep",
            "-c",
            config.to_str().unwrap(),
            "--older-than-ms",
            "0",
            "--json",
        ],
    ));
    let forced: Value = serde_json::from_str(&forced).unwrap();
    assert_eq!(forced["removed"]["sessions"], 1, "{forced}");

    std::fs::write(&config, "[store]\nsweep_batch = 0\n").unwrap();
    let bad = run(state, &["store", "sweep", "-c", config.to_str().unwrap()]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("store.sweep_batch"), "{err}");
}

/// `serve` sweeps at start-up and logs what it removed; `[store] retention_ms = 0` warns.
#[test]
fn serve_sweeps_in_the_background() {
    let (dir, keys) = seeded();
    let state = dir.path();
    let other = tempfile::tempdir().unwrap();
    for (retention, expect) in [
        ("0", "retention_ms = 0"),
        ("1000", "retention sweep removed expired session state"),
    ] {
        let port = common::free_port();
        let config = other.path().join("secureclaw.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n[store]\nretention_ms = {retention}\nsweep_interval_ms = 1000\n"
            ),
        )
        .unwrap();
        let log = other.path().join(format!("serve-{retention}.log"));
        let server = common::serve_on(
            Command::new(EXE)
                .arg("--state-dir")
                .arg(state)
                .args(["serve", "--config"])
                .arg(&config)
                .env(
                    "SECURECLAW_OPERATOR_TOKEN",
                    "test-operator-token-0123456789",
                )
                .env_remove("SECURECLAW_STORE")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::from(
                    std::fs::File::create(&log).unwrap(),
                )),
            port,
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains(expect) || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        drop(server);
        assert!(text.contains(expect), "{text}");
    }
    let store = SqliteStore::open(&state.join("secureclaw.db"), keys).unwrap();
    assert!(
        store.session("ses_old").unwrap().is_none(),
        "swept by serve"
    );
    assert!(store.session("ses_live").unwrap().is_some());
    // The seeded record and, if the deny-on-timeout sweep ran before the kill, the denial of
    // the seeded approval (pending for far longer than `[gateway.approvals] timeout_ms`).
    let n = store.verify_audit().unwrap();
    assert!(n == 1 || n == 2, "{n} records");
    for r in store.audit_records(2, 10).unwrap() {
        assert_eq!(r.event.kind, AuditKind::Confirmation);
        assert_eq!(r.event.detail["confirmer"], "timeout");
    }
}
