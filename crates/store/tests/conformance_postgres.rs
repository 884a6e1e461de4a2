//! The storage conformance suite ([`secureclaw_store::conformance`]) against the PostgreSQL
//! store: a scratch database per check; [`Subject::reopen`] connects another replica (its own
//! pool and replica id) to the same database.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common_pg;

use common_pg::Scratch;
use secureclaw_core::KeyRing;
use secureclaw_core::store::Store;
use secureclaw_store::PgStore;
use secureclaw_store::conformance::Subject;
use std::sync::Arc;

struct Pg {
    // Dropped first: the pool closes before the database is dropped.
    store: Arc<PgStore>,
    keys: Arc<KeyRing>,
    scratch: Scratch,
}

#[async_trait::async_trait]
impl Subject for Pg {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn keys(&self) -> Arc<KeyRing> {
        self.keys.clone()
    }

    async fn reopen(&self) -> Result<Arc<dyn Store>, String> {
        PgStore::connect(&self.scratch.url, self.keys.clone())
            .await
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(|e| e.to_string())
    }

    /// Every row of every table as text, plus the `bytea` columns' raw bytes.
    async fn raw_bytes(&self) -> Result<Vec<u8>, String> {
        let raw = self.scratch.raw().await;
        let mut bytes = Vec::new();
        for table in [
            "sessions",
            "vault_objects",
            "handles",
            "actions",
            "approvals",
            "ledger",
            "audit",
            "grant_uses",
            "read_amounts",
            "written_sets",
            "written_values",
            "held_calls",
        ] {
            for row in raw
                .query(&format!("SELECT t::text FROM {table} t"), &[])
                .await
                .map_err(|e| e.to_string())?
            {
                let text: String = row.get(0);
                bytes.extend(text.into_bytes());
            }
        }
        for table in ["vault_objects", "held_calls", "written_values"] {
            for row in raw
                .query(&format!("SELECT nonce, ciphertext FROM {table}"), &[])
                .await
                .map_err(|e| e.to_string())?
            {
                let nonce: Vec<u8> = row.get(0);
                let ciphertext: Vec<u8> = row.get(1);
                bytes.extend(nonce);
                bytes.extend(ciphertext);
            }
        }
        Ok(bytes)
    }

    /// On a direct connection: disable the user triggers of `tables`, then run `sql`.
    async fn tamper(&self, tables: &[&str], sql: &str) -> Result<(), String> {
        let raw = self.scratch.raw().await;
        for table in tables {
            raw.batch_execute(&format!("ALTER TABLE {table} DISABLE TRIGGER USER"))
                .await
                .map_err(|e| e.to_string())?;
        }
        raw.batch_execute(sql).await.map_err(|e| e.to_string())
    }
}

async fn postgres() -> Option<Pg> {
    let admin = common_pg::admin_url().await?;
    let scratch = Scratch::create(&admin).await;
    let keys = common_pg::keys();
    let store = Arc::new(
        PgStore::connect(&scratch.url, keys.clone())
            .await
            .unwrap_or_else(|e| panic!("cannot open the PostgreSQL store: {e}")),
    );
    Some(Pg {
        store,
        keys,
        scratch,
    })
}

secureclaw_store::conformance_tests!(postgres);
