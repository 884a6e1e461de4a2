//! `secureclaw audit archive` and `audit verify` after archiving (issue 14 item 5), run as an
//! operator would on a state directory's SQLite store: archived segments are written,
//! checkpointed and pruned; the log verifies from the latest checkpoint and each archive
//! file against its checkpoint; tampered files and a tampered log are refused; `serve`
//! archives by itself with `[store] audit_archive_dir`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::EXE;
use secureclaw_core::UnixMillis;
use secureclaw_core::audit::{AuditEvent, AuditKind, AuditRecord};
use secureclaw_core::keys::{KeyRing, KeyRingFile};
use secureclaw_store::SqliteStore;
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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A state directory with keys (made by `keys list`) and `n` audit records at times 1..=n.
fn seeded(n: u64) -> (tempfile::TempDir, Arc<KeyRing>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    stdout(&run(state, &["keys", "list"]));
    let file: KeyRingFile =
        serde_json::from_str(&std::fs::read_to_string(state.join("keys.json")).unwrap()).unwrap();
    let keys = Arc::new(KeyRing::from_file(&file).unwrap());
    let store = open(state, &keys);
    for i in 1..=n {
        store
            .append_audit(AuditEvent::new(AuditKind::Read, UnixMillis(i)))
            .unwrap();
    }
    (dir, keys)
}

fn open(state: &Path, keys: &Arc<KeyRing>) -> SqliteStore {
    SqliteStore::open(&state.join("secureclaw.db"), keys.clone()).unwrap()
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn archive_prunes_and_verify_proves_the_rest_and_the_files() {
    let (dir, keys) = seeded(10);
    let state = dir.path();
    let out = tempfile::tempdir().unwrap();
    let a1 = out.path().join("a1.jsonl");
    let a1s = a1.to_str().unwrap();

    let text = stdout(&run(
        state,
        &["audit", "archive", "--through-seq", "4", "--out", a1s],
    ));
    assert!(
        text.contains("archived audit records 1..=4 (4 records)"),
        "{text}"
    );
    let lines: Vec<AuditRecord> = std::fs::read_to_string(&a1)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "the file holds the segment with its chain fields"
    );
    let store = open(state, &keys);
    assert_eq!(
        store.audit_records(0, 100).unwrap().first().map(|r| r.seq),
        Some(5),
        "records 1..=4 are pruned"
    );
    let text = stdout(&run(state, &["audit", "verify"]));
    assert!(
        text.contains("6 records verified from checkpoint at seq 4") && text.contains(&sha256(&a1)),
        "{text}"
    );
    let text = stdout(&run(state, &["audit", "verify", "--archive", a1s]));
    assert!(
        text.contains("records 1..=4 verified against the checkpoint at seq 4"),
        "{text}"
    );

    // Refused, nothing pruned: an existing file, a sequence number past the log.
    let again = run(
        state,
        &["audit", "archive", "--through-seq", "6", "--out", a1s],
    );
    assert!(
        !again.status.success() && stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    let past = run(
        state,
        &[
            "audit",
            "archive",
            "--through-seq",
            "99",
            "--out-dir",
            out.path().to_str().unwrap(),
        ],
    );
    assert!(
        !past.status.success() && stderr(&past).contains("records 5..=10"),
        "{}",
        stderr(&past)
    );
    assert_eq!(
        store.verify_audit().unwrap(),
        6,
        "nothing pruned by refusals"
    );

    // The second archive (everything older than 1 ms: all kept) starts at the checkpoint.
    let text = stdout(&run(
        state,
        &[
            "audit",
            "archive",
            "--older-than",
            "1ms",
            "--out-dir",
            out.path().to_str().unwrap(),
        ],
    ));
    assert!(
        text.contains("archived audit records 5..=10 (6 records)"),
        "{text}"
    );
    let a2 = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("audit-000000000005-000000000010-")
        })
        .expect("the archive named by its range");
    let text = stdout(&run(state, &["audit", "verify"]));
    assert!(
        text.contains("0 records verified from checkpoint at seq 10"),
        "{text}"
    );
    let text = stdout(&run(
        state,
        &[
            "audit",
            "verify",
            "--archive",
            a1s,
            "--archive",
            a2.to_str().unwrap(),
        ],
    ));
    assert!(
        text.contains("records 5..=10 verified against the checkpoint at seq 10"),
        "{text}"
    );
    let nothing = stdout(&run(
        state,
        &[
            "audit",
            "archive",
            "--older-than",
            "1ms",
            "--out-dir",
            out.path().to_str().unwrap(),
        ],
    ));
    assert!(nothing.contains("nothing to archive"), "{nothing}");

    // A new record continues after the checkpoint, not from seq 1.
    let r = store
        .append_audit(AuditEvent::new(AuditKind::Read, UnixMillis(11)))
        .unwrap();
    let a2_last: AuditRecord = serde_json::from_str(
        std::fs::read_to_string(&a2)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (r.seq, &r.prev),
        (11, &a2_last.mac),
        "seq 11 after the checkpoint's MAC"
    );
    let text = stdout(&run(state, &["audit", "verify"]));
    assert!(
        text.contains("1 record verified from checkpoint at seq 10"),
        "{text}"
    );

    // Altered archive files are refused: an edited record, a dropped record.
    let edited = out.path().join("edited.jsonl");
    let body = std::fs::read_to_string(&a1).unwrap();
    std::fs::write(&edited, body.replacen("\"at\":2", "\"at\":3", 1)).unwrap();
    let dropped = out.path().join("dropped.jsonl");
    std::fs::write(
        &dropped,
        body.lines()
            .take(3)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    for bad in [&edited, &dropped] {
        let o = run(
            state,
            &["audit", "verify", "--archive", bad.to_str().unwrap()],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("no checkpoint names"), "{}", stderr(&o));
    }
}

/// A log that does not verify is never archived: nothing is written, nothing pruned.
#[test]
fn archive_refuses_a_log_that_does_not_verify() {
    let (dir, keys) = seeded(5);
    let state = dir.path();
    let conn = rusqlite::Connection::open(state.join("secureclaw.db")).unwrap();
    conn.execute_batch(
        "DROP TRIGGER audit_no_update;
         UPDATE audit SET event = replace(event, '\"at\":3', '\"at\":4') WHERE seq = 3;",
    )
    .unwrap();
    drop(conn);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("a.jsonl");
    let o = run(
        state,
        &[
            "audit",
            "archive",
            "--through-seq",
            "5",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not verify, so nothing was archived"),
        "{}",
        stderr(&o)
    );
    assert!(!file.exists(), "no file written");
    // Counted in SQL: listing refuses the altered row itself (its `at` column no longer
    // matches its event).
    let conn = rusqlite::Connection::open(state.join("secureclaw.db")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 5, "nothing pruned");
    assert!(open(state, &keys).audit_records(0, 100).is_err());
}

#[test]
fn archive_help_explains_the_command() {
    let o = Command::new(EXE)
        .args(["audit", "archive", "--help"])
        .output()
        .unwrap();
    let text = stdout(&o);
    for needle in [
        "--through-seq",
        "--older-than",
        "--out-dir",
        "checkpoint",
        "audit verify --archive",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let o = Command::new(EXE)
        .args(["audit", "archive"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a bound and a target are required");
}

/// `serve` with `[store] audit_archive_dir` archives old records at start-up and logs it.
#[test]
fn serve_archives_in_the_background() {
    let (dir, keys) = seeded(3);
    let state = dir.path();
    let other = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let config = other.path().join("secureclaw.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n[store]\nsweep_interval_ms = 1000\n\
             audit_archive_dir = \"archive\"\naudit_archive_after_ms = 3600000\n"
        ),
    )
    .unwrap();
    let log = other.path().join("serve.log");
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
    let expect = "archived to";
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
    let files: Vec<_> = std::fs::read_dir(other.path().join("archive"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let store = open(state, &keys);
    let v = store.verify_audit_log().unwrap();
    let cp = v.checkpoint.expect("a checkpoint");
    assert!(
        cp.seq() >= 3,
        "the seeded records (and the start-up ones) are archived: {cp:?}"
    );
    assert_eq!(cp.segment.archive_sha256, sha256(&files[0]));
    let text = stdout(&run(
        state,
        &["audit", "verify", "--archive", files[0].to_str().unwrap()],
    ));
    assert!(text.contains("verified against the checkpoint"), "{text}");
}

/// Red-team F3: a tail deleted and regrown verifies as a chain, so `audit verify` prints the
/// head (`head: SEQ:MAC`) and `--expect-head SEQ:MAC` checks it later: the same log passes
/// (positive control, also with records after it), a log cut before SEQ and regrown to
/// the same length fails naming the record, a log cut short of SEQ fails.
#[test]
fn an_expected_head_catches_a_tail_cut_and_regrown() {
    let (dir, keys) = seeded(10);
    let state = dir.path();
    let out = stdout(&run(state, &["audit", "verify"]));
    let head = out
        .lines()
        .find_map(|l| l.strip_prefix("head: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no head line: {out}"))
        .to_owned();
    assert!(head.starts_with("10:"), "{head}");
    stdout(&run(state, &["audit", "verify", "--expect-head", &head]));
    // More records after it: still the same history.
    let store = open(state, &keys);
    store
        .append_audit(AuditEvent::new(AuditKind::Read, UnixMillis(11)))
        .unwrap();
    stdout(&run(state, &["audit", "verify", "--expect-head", &head]));
    // Cut records 8.. (as someone with write access to the file can) and regrow them.
    let conn = rusqlite::Connection::open(state.join("secureclaw.db")).unwrap();
    conn.execute_batch("DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq >= 8;")
        .unwrap();
    drop(conn);
    for i in 8..=11 {
        store
            .append_audit(AuditEvent::new(AuditKind::Preview, UnixMillis(100 + i)))
            .unwrap();
    }
    let plain = run(state, &["audit", "verify"]);
    assert!(plain.status.success(), "the chain alone cannot tell");
    let checked = run(state, &["audit", "verify", "--expect-head", &head]);
    assert_eq!(checked.status.code(), Some(2), "{}", stderr(&checked));
    assert!(
        stderr(&checked).contains("record 10 now has MAC"),
        "{}",
        stderr(&checked)
    );
    // Cut short of it.
    let conn = rusqlite::Connection::open(state.join("secureclaw.db")).unwrap();
    conn.execute_batch("DELETE FROM audit WHERE seq >= 9;")
        .unwrap();
    drop(conn);
    let short = run(state, &["audit", "verify", "--expect-head", &head]);
    assert_eq!(short.status.code(), Some(2));
    assert!(
        stderr(&short).contains("ends at seq 8"),
        "{}",
        stderr(&short)
    );
    // Malformed heads are usage errors.
    let bad = run(state, &["audit", "verify", "--expect-head", "ten:zz"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--expect-head"), "{}", stderr(&bad));
}
