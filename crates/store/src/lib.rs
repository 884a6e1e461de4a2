//! # SecureClaw durable store
//!
//! The trusted state of a gateway in one embedded SQLite database (DESIGN.md §2
//! `secureclaw-store`, §3 "Single use and crash safety" and "Handles"):
//!
//! - **sessions** with their trusted task envelopes;
//! - the **vault**: protected values, encrypted at rest with ChaCha20-Poly1305
//!   ([`secureclaw_core::vault`]) under the ring's vault key, one random nonce per record; the
//!   associated data binds each ciphertext to its object id *and* version;
//! - **handle records** (never the values they stand for);
//! - **actions** (previews: binding digest, canonical request JSON, approver display text)
//!   and their **approvals**;
//! - the **single-use ledger** behind the executor's acceptance predicate
//!   ([`secureclaw_core::acceptance::SingleUseLedger`], check 11);
//! - the **audit log**, a keyed hash chain ([`secureclaw_core::audit`]);
//! - **speculation budgets**: per-session disclosure counters, shared by every process on the
//!   file and kept across restarts;
//! - **held speculative calls and branch states**: deferred calls sealed under the vault key
//!   until their branch is promoted or abandoned (taken exactly once), with per-session caps
//!   enforced in the same transaction, and the settled state of every branch;
//! - **rate-limit token buckets** per session and per (session, tool), shared by every
//!   process on the file;
//! - **task state**: uses of limited task grants, keyed digests of amounts anchored reads
//!   returned, and each session's bounded written set (values sealed under the vault key).
//!
//! ## Retention
//!
//! Session-scoped state (everything above but actions, approvals, the ledger and the audit
//! log) is removed in bounded batches some time after its session or handle expired
//! ([`secureclaw_core::store::RetentionStore`]); the accountability record is kept.
//!
//! ## Durability and crash safety
//!
//! The database runs in WAL mode with `synchronous=FULL`: a committed ledger reservation
//! survives power loss, so an action id that was reserved before a crash is never reserved —
//! and executed — again (at-most-once). With `synchronous=NORMAL` the last transactions before a
//! power cut could be lost, which would reopen a window for re-execution. A reservation that
//! never reached `executed` or `failed` is reported by
//! [`SqliteStore::dangling_reservations`] and never becomes executable again.
//!
//! Every storage failure is an [`StoreError::Unavailable`] (or the ledger's
//! [`LedgerError`](secureclaw_core::acceptance::LedgerError)); callers map it to the reason code
//! `store_unavailable` and fail closed. Nothing here falls back to memory.
//!
//! ## Integrity in the schema
//!
//! Triggers refuse every `UPDATE` and `DELETE` on the audit table, every `DELETE` on the
//! ledger, any ledger update other than `reserved → executed | failed`, and any change to a
//! decided approval, so that even SQL run by mistake against the database cannot reopen a
//! spent action id or rewrite history. (An attacker with write access to the file can drop
//! triggers; the audit chain is keyed so that such edits are still detected by
//! [`SqliteStore::verify_audit`].)
//!
//! ## Integers
//!
//! SQLite integers are signed 64-bit. Times ([`UnixMillis`](secureclaw_core::UnixMillis)),
//! versions and sequence numbers are `u64`; they are stored bit-for-bit (`u64 as i64`), so
//! every value round-trips exactly. SQL ordering is only meaningful below 2^63, which every real
//! timestamp and counter is.
//!
//! ## Concurrency
//!
//! One connection behind a [`Mutex`]. The inherent API is synchronous; the storage traits of
//! [`secureclaw_core::store`] are implemented by calling it inline (each call is a short local
//! transaction), so an async caller briefly blocks its worker thread. Several [`SqliteStore`]s — in one process or in several — may open the
//! same file: every write that must be atomic is one statement or one `BEGIN IMMEDIATE`
//! transaction, and the ledger's primary key makes a double reservation impossible.

mod actions;
mod audit;
#[cfg(feature = "conformance")]
pub mod conformance;
mod effects;
mod grants;
mod handles;
mod held;
mod ledger;
mod pins;
pub mod postgres;
mod retention;
mod schema;
mod sessions;
mod speculation;
mod task_state;
mod vault;

mod traits;

pub use postgres::PgStore;

/// The records and the error type live in the core ([`secureclaw_core::store`]); they are
/// re-exported here so that existing paths keep working.
pub use secureclaw_core::store::{
    ActionRecord, ApprovalRecord, ApprovalState, LedgerEntry, LedgerState, SessionRecord,
    StoreError,
};

use rusqlite::Connection;
use secureclaw_core::KeyRing;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite store. `Send + Sync`; share it with an [`Arc`].
pub struct SqliteStore {
    conn: Mutex<Connection>,
    keys: Arc<KeyRing>,
    path: Option<String>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Open (or create) the database at `path` and bring its schema up to date.
    ///
    /// Creates the parent directory (mode 0700 on Unix) and, for a new file, restricts it to
    /// mode 0600. Sets WAL journal mode, `synchronous=FULL`, a 5 s busy timeout and foreign
    /// keys, then applies pending migrations in one immediate transaction (safe when two
    /// processes start at once). `keys` supplies the vault key (values at rest) and the audit
    /// key (chain MACs).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if the directory, file or pragmas fail;
    /// [`StoreError::SchemaTooNew`] if a newer build wrote the file.
    pub fn open(path: &Path, keys: Arc<KeyRing>) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir)?;
        }
        let existed = path.exists();
        let mut conn = Connection::open(path).map_err(sql)?;
        if !existed {
            restrict_file(path)?;
        }
        configure(&conn, true)?;
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            keys,
            path: Some(path.display().to_string()),
        })
    }

    /// A private in-memory database (tests, `demo`). Same schema and behaviour, no durability.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if SQLite cannot allocate the database.
    pub fn open_in_memory(keys: Arc<KeyRing>) -> Result<Self, StoreError> {
        let mut conn = Connection::open_in_memory().map_err(sql)?;
        configure(&conn, false)?;
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            keys,
            path: None,
        })
    }

    /// The schema version of the open database (`PRAGMA user_version`).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        let conn = self.conn()?;
        schema::user_version(&conn)
    }

    /// Copy the write-ahead log into the main database file and truncate the log
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`), e.g. before a file-level backup.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], also when a reader prevents a full checkpoint.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(sql)?;
        if busy != 0 {
            return Err(StoreError::Unavailable(
                "wal checkpoint could not complete".into(),
            ));
        }
        Ok(())
    }

    /// Lock the connection. A poisoned lock fails closed: whatever panicked may have left a
    /// transaction half done.
    fn conn(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.conn
            .lock()
            .map_err(|_| StoreError::Unavailable("connection lock poisoned".into()))
    }
}

/// Run `f` (one or more transactions on `conn`) with `synchronous=NORMAL`, then restore
/// `synchronous=FULL` (issue 14 item 2). In WAL mode such a commit is atomic and ordered but
/// not yet synced; the next `FULL` commit's sync of the WAL file makes it durable with
/// everything before it, so a crash can lose only the `NORMAL` commits since the last sync —
/// for state whose loss is harmless (rate-limit buckets), never for the ledger, actions,
/// approvals or audit records. If `FULL` cannot be restored the connection is not used with
/// the weaker setting: the error is returned, and the next use tries the restore again.
///
/// # Errors
/// `f`'s error, or [`StoreError::Unavailable`] if a pragma cannot be set.
pub(crate) fn without_fsync<T>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    // Deliberately not through the statement cache: SQLite applies `PRAGMA synchronous = …`
    // while *preparing* the statement (pragma.c emits no code for it), so re-running a cached
    // one would change nothing and leave the previous level in force.
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql)?;
    let result = f(conn);
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql)?;
    result
}

/// Prepared statements kept per connection (issue 14 item 4: SQL was re-parsed on every
/// statement, about 10 % of an effect's CPU and 17 % of a read's). Every statement the store
/// runs outside migrations, archiving and retention goes through
/// [`Connection::prepare_cached`] (about 80 distinct texts); the cache is an LRU, so a capacity
/// below that count would evict statements of the call path whenever a rarely used one (a
/// speculation or grant statement) runs, and every statement is parsed once per connection.
const STATEMENT_CACHE: usize = 128;

/// `execute` and `query_row` through the connection's prepared-statement cache
/// ([`Connection::prepare_cached`]); drop-in for the uncached methods of the same shape.
trait Cached {
    /// [`Connection::execute`], with the statement parsed once per connection.
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
    /// [`Connection::query_row`], with the statement parsed once per connection.
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

fn configure(conn: &Connection, file_backed: bool) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner stability guarantee: a statement's plan does not depend on the values
    // bound to it. Without it, a cached statement whose planning looked at a bound value (an
    // equality term's heuristic truth probability does, for any `col = ?`) is marked expired
    // when the statement cache clears its bindings on return, and SQLite parses and plans it
    // again on its next step: the statement cache saved nothing for `approved_unused`,
    // `outcome_unknown_tool` and `written_since`, about 11 % of an effect's CPU under load
    // (BENCHMARKS.md §14; test `cached_statements_are_not_prepared_again`).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(sql)?;
    if file_backed {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "cannot enable wal journal mode (got `{mode}`)"
            )));
        }
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sql)?;
    let fk: i64 = conn
        .pragma_query_value(None, "foreign_keys", |r| r.get(0))
        .map_err(sql)?;
    if fk != 1 {
        return Err(StoreError::Unavailable("cannot enable foreign keys".into()));
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| StoreError::Unavailable(format!("cannot create `{}`: {e}", dir.display())))
}

fn restrict_file(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            StoreError::Unavailable(format!("cannot restrict `{}`: {e}", path.display()))
        })?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Any SQLite failure: the store is unavailable.
fn sql(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Stored JSON that does not decode.
fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// A `u64` as the SQLite integer with the same bits (see the module docs).
fn int(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

/// Inverse of [`int`].
fn uint(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cached statement of the effect path runs again without being parsed again (its
    /// `SQLITE_STMTSTATUS_REPREPARE` count stays 0) on a configured connection, and — the
    /// control, showing the test can fail — is prepared again on every use without the
    /// planner stability guarantee.
    #[test]
    fn cached_statements_are_not_prepared_again() {
        use rusqlite::StatementStatus;
        const SQL: &str = "SELECT 1 FROM ledger l JOIN actions a ON a.action_id = l.action_id
             WHERE a.session = ?1 AND a.tool = ?2 AND l.state = 'outcome_unknown' LIMIT 1";
        fn reprepares(conn: &Connection) -> i32 {
            for (session, tool) in [("s1", "mail__send"), ("s2", "pay"), ("s3", "mail__send")] {
                let mut stmt = conn.prepare_cached(SQL).unwrap();
                let _ = stmt.exists(rusqlite::params![session, tool]).unwrap();
            }
            conn.prepare_cached(SQL)
                .unwrap()
                .get_status(StatementStatus::RePrepare)
        }
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db.sqlite"), keys()).unwrap();
        assert_eq!(reprepares(&store.conn().unwrap()), 0);
        let plain = Connection::open(dir.path().join("db.sqlite")).unwrap();
        assert!(
            reprepares(&plain) >= 2,
            "control: without QPSG the statement is prepared again"
        );
    }
    use secureclaw_core::binding::BindingDigest;
    use secureclaw_core::keys::KeyId;
    use secureclaw_core::{ActionId, UnixMillis};

    fn keys() -> Arc<KeyRing> {
        Arc::new(KeyRing::generate(&mut |b: &mut [u8]| b.fill(7)))
    }

    fn binding() -> BindingDigest {
        BindingDigest {
            kid: KeyId("bind-1".into()),
            digest: "ab".repeat(32),
        }
    }

    #[test]
    fn store_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SqliteStore>();
    }

    #[test]
    fn integers_round_trip_bit_exact() {
        for v in [0, 1, i64::MAX as u64, u64::MAX] {
            assert_eq!(uint(int(v)), v);
        }
    }

    #[test]
    fn locked_database_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = SqliteStore::open(&path, keys()).unwrap();
        store
            .conn()
            .unwrap()
            .busy_timeout(Duration::from_millis(50))
            .unwrap();
        // Another process holds the write lock for longer than the busy timeout.
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let id = ActionId("act_locked".into());
        let got = store.reserve(&id, &binding(), UnixMillis(1));
        assert!(
            got.is_err(),
            "a locked ledger must be an error, got {got:?}"
        );
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(
            store.reserve(&id, &binding(), UnixMillis(1)),
            Ok(true),
            "positive control"
        );
    }

    #[test]
    fn poisoned_lock_fails_closed() {
        let store = Arc::new(SqliteStore::open_in_memory(keys()).unwrap());
        let s = Arc::clone(&store);
        let joined = std::thread::spawn(move || {
            let _guard = s.conn.lock().unwrap();
            std::panic::panic_any("poison the connection lock");
        })
        .join();
        assert!(joined.is_err());
        let got = store.reserve(&ActionId("act_poison".into()), &binding(), UnixMillis(1));
        assert!(
            got.is_err(),
            "a poisoned store must be an error, got {got:?}"
        );
        assert!(matches!(
            store.action(&ActionId("act_poison".into())),
            Err(StoreError::Unavailable(_))
        ));
    }
}
