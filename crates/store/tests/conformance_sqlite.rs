//! The storage conformance suite ([`secureclaw_store::conformance`]) against the SQLite store:
//! a file-backed database (WAL) per check, reopened through new connections as a second
//! process would.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use secureclaw_core::KeyRing;
use secureclaw_core::store::Store;
use secureclaw_store::SqliteStore;
use secureclaw_store::conformance::Subject;
use std::path::PathBuf;
use std::sync::Arc;

struct Sqlite {
    _dir: tempfile::TempDir,
    path: PathBuf,
    keys: Arc<KeyRing>,
    store: Arc<SqliteStore>,
}

#[async_trait::async_trait]
impl Subject for Sqlite {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn keys(&self) -> Arc<KeyRing> {
        self.keys.clone()
    }

    async fn reopen(&self) -> Result<Arc<dyn Store>, String> {
        SqliteStore::open(&self.path, self.keys.clone())
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(|e| e.to_string())
    }

    /// The database file and its write-ahead log, as on disk.
    async fn raw_bytes(&self) -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        for suffix in ["", "-wal"] {
            let mut file = self.path.clone().into_os_string();
            file.push(suffix);
            if let Ok(b) = std::fs::read(&file) {
                bytes.extend(b);
            }
        }
        Ok(bytes)
    }

    /// On a new connection: drop every trigger on `tables`, then run `sql`.
    async fn tamper(&self, tables: &[&str], sql: &str) -> Result<(), String> {
        let conn = rusqlite::Connection::open(&self.path).map_err(|e| e.to_string())?;
        for table in tables {
            let names: Vec<String> = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1")
                .map_err(|e| e.to_string())?
                .query_map([table], |r| r.get(0))
                .map_err(|e| e.to_string())?
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            for name in names {
                conn.execute_batch(&format!("DROP TRIGGER {name}"))
                    .map_err(|e| e.to_string())?;
            }
        }
        conn.execute_batch(sql).map_err(|e| e.to_string())
    }
}

async fn sqlite() -> Option<Sqlite> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("secureclaw.db");
    let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        getrandom::fill(b).unwrap();
    }));
    let store = Arc::new(SqliteStore::open(&path, keys.clone()).unwrap());
    Some(Sqlite {
        _dir: dir,
        path,
        keys,
        store,
    })
}

secureclaw_store::conformance_tests!(sqlite);
