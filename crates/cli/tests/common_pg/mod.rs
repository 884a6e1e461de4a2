//! A scratch PostgreSQL database per test, for the process tests that run `secureclaw serve
//! --store postgres://…`, on the server named by `SECURECLAW_TEST_PG_URL` (an administrative
//! URL; CI sets it, and an unreachable server then fails the test). Unset, the default server
//! is tried and, if it is unreachable, the test is skipped with a message.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

/// The default administrative URL.
pub const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

pub async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Run `sql` on the database at `url`; the rows.
pub fn query(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    block_on(async {
        connect(url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach {url}: {e}"))
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("`{sql}` failed: {e}"))
    })
}

/// The administrative URL, or `None` (after saying why) to skip.
pub fn admin_url() -> Option<String> {
    if let Ok(url) = std::env::var("SECURECLAW_TEST_PG_URL") {
        return Some(url);
    }
    match block_on(connect(DEFAULT_PG)) {
        Ok(_) => Some(DEFAULT_PG.to_owned()),
        Err(e) => {
            eprintln!(
                "SKIPPED: no PostgreSQL server at {DEFAULT_PG} ({e}) and SECURECLAW_TEST_PG_URL \
                 is unset; set it to run the PostgreSQL process tests"
            );
            None
        }
    }
}

/// A database created for one test, dropped (with its connections) on drop.
pub struct Scratch {
    pub admin: String,
    pub name: String,
    pub url: String,
}

impl Scratch {
    pub fn create(admin: &str) -> Self {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        let name = format!(
            "sc_cli_{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        );
        query(admin, &format!("CREATE DATABASE {name}"));
        let (base, q) = admin
            .split_once('?')
            .map_or((admin, None), |(b, q)| (b, Some(q)));
        let prefix = base.rsplit_once('/').unwrap().0;
        let url = match q {
            Some(q) => format!("{prefix}/{name}?{q}"),
            None => format!("{prefix}/{name}"),
        };
        Self {
            admin: admin.to_owned(),
            name,
            url,
        }
    }

    /// Terminate every connection to the scratch database but this one's own: what the
    /// replicas see when the database server restarts.
    pub fn terminate_backends(&self) -> usize {
        query(
            &self.admin,
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = '{}' AND pid <> pg_backend_pid()",
                self.name
            ),
        )
        .len()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let done = block_on(async { connect(&self.admin).await?.batch_execute(&sql).await });
        if let Err(e) = done {
            eprintln!("warning: scratch database {} not dropped: {e}", self.name);
        }
    }
}

/// Run `sql` (any statements) on the database at `url`.
pub fn execute(url: &str, sql: &str) {
    block_on(async {
        connect(url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach {url}: {e}"))
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("`{sql}` failed: {e}"));
    });
}

/// Let every replica's lease lapse, as 30 s without renewal would: the next gateway to start
/// reports every reservation left in flight as dangling. Only for replicas known to be dead.
pub fn lapse_leases(url: &str) {
    execute(
        url,
        "DO $$ BEGIN IF to_regclass('replicas') IS NOT NULL THEN \
         UPDATE replicas SET lease_until = now() - interval '1 second'; END IF; END $$",
    );
}
