//! A scratch PostgreSQL database per test, on the server named by `SECURECLAW_TEST_PG_URL`
//! (an administrative URL; default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! With `SECURECLAW_TEST_PG_URL` set, an unreachable server fails the test (CI sets it). Unset,
//! the default server is tried and, if it is unreachable, the test is skipped with a message.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;

/// The default administrative URL.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// `url` with its database name replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let (prefix, _) = base
        .rsplit_once('/')
        .expect("a postgres:// URL with a database");
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

/// The administrative URL to use, or `None` (after saying why) to skip.
pub async fn admin_url() -> Option<String> {
    if let Ok(url) = std::env::var("SECURECLAW_TEST_PG_URL") {
        return Some(url);
    }
    match tokio_postgres::connect(DEFAULT_URL, tokio_postgres::NoTls).await {
        Ok(_) => Some(DEFAULT_URL.to_owned()),
        Err(e) => {
            eprintln!(
                "SKIPPED: no PostgreSQL server at {DEFAULT_URL} ({e}) and SECURECLAW_TEST_PG_URL \
                 is unset; set it to run the PostgreSQL tests"
            );
            None
        }
    }
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the PostgreSQL server at {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// A database created for one test and dropped (with its connections) when this is dropped.
pub struct Scratch {
    admin_url: String,
    /// The database's name.
    pub name: String,
    /// A URL for it.
    pub url: String,
}

impl Scratch {
    /// Create `sc_test_<random>` on the server of `admin_url`.
    pub async fn create(admin_url: &str) -> Self {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        let name = format!(
            "sc_test_{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        );
        admin(admin_url)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        Self {
            admin_url: admin_url.to_owned(),
            url: with_database(admin_url, &name),
            name,
        }
    }

    /// A direct connection to the scratch database (for raw SQL).
    pub async fn raw(&self) -> tokio_postgres::Client {
        admin(&self.url).await
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // Dropped inside a runtime: do the async drop on a thread of its own and wait for it.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                admin(&url)
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!("warning: scratch database could not be dropped: {done:?}");
        }
    }
}

/// A fresh key ring.
pub fn keys() -> Arc<secureclaw_core::KeyRing> {
    Arc::new(secureclaw_core::KeyRing::generate(&mut |b: &mut [u8]| {
        getrandom::fill(b).unwrap();
    }))
}
