//! # PostgreSQL store, for several gateway replicas on one database
//!
//! [`PgStore`] implements the storage traits of [`secureclaw_core::store`] on PostgreSQL
//! (`tokio-postgres` behind a `deadpool-postgres` pool), with the same contracts as the SQLite
//! store and the same conformance suite. Several gateways (replicas) may share one database:
//!
//! - **single use** is the primary key of `ledger`: a reservation is one
//!   `INSERT … ON CONFLICT (action_id) DO NOTHING`, atomic across every connection of every
//!   replica;
//! - **one audit chain** with several writers: an append takes the transaction-scoped advisory
//!   lock [`AUDIT_LOCK`], reads the last record and inserts the next in the same transaction,
//!   so appends from every replica serialize into one gap-free chain;
//! - **append-only** is enforced in the database: triggers refuse `UPDATE` and `TRUNCATE` on
//!   `audit` and `audit_checkpoints`, `DELETE` of an audit record no archive checkpoint covers
//!   and of any checkpoint, `DELETE` and `TRUNCATE` on `ledger`, any ledger update other than
//!   `reserved → executed | failed | outcome_unknown`, and any change to a decided approval;
//! - **dangling reservations** name the replica that made them (a random id per process) and
//!   each replica holds a lease in `replicas`, renewed in the background: a starting replica
//!   reports as dangling only reservations of its own or of replicas whose lease has lapsed
//!   (times are the database server's `now()`, so replicas' clocks do not matter), never
//!   another live replica's commit in flight;
//! - **speculation budgets** are one row per session, charged by one
//!   `INSERT … ON CONFLICT DO UPDATE … WHERE spent < limit`, so a budget is spent once across
//!   replicas; triggers refuse lowering or deleting a counter;
//! - **task state** (grant uses, read amounts, the written set) is per session: a grant use is
//!   taken by one `INSERT … ON CONFLICT DO UPDATE … WHERE used < limit`; appends to a
//!   session's written set lock its `written_sets` row (`SELECT … FOR UPDATE`), so they
//!   serialize across replicas and number the values gap-free;
//! - **held speculative calls and branch states** are per session: every hold and every
//!   settlement first locks the session's `held_sessions` row (`SELECT … FOR UPDATE`), so
//!   the held-call caps hold for all replicas together and a settled branch's calls are taken
//!   (deleted as they are returned) by exactly one replica; the calls are sealed under the
//!   vault key;
//! - **rate-limit buckets** (per session and per (session, tool)) are rows taken in one
//!   transaction that locks the session bucket first, so replicas share one rate;
//! - **versioned migrations** ([`schema`]) are applied at connect, under an advisory lock;
//! - **fail closed**: every connection, pool or SQL failure is [`StoreError::Unavailable`];
//!   nothing is ever answered from memory.
//!
//! Why `tokio-postgres` + `deadpool-postgres` (rather than `sqlx`): the gateway already runs
//! on tokio; `tokio-postgres` is the maintained native driver underneath most of the
//! ecosystem, with no compile-time query checking that would need a database at build time
//! and no macros; `deadpool-postgres` is a small, widely used pool for it with wait/create
//! timeouts, so a database that stops answering turns into errors (fail closed) instead of
//! hanging calls.
//!
//! Connections to a remote server use TLS, verified with rustls, unless the URL says
//! `sslmode=disable` ([`tls`]: the URL's `sslmode` and `sslrootcert`, and the safe default).
//! The vault key never reaches the database: values are encrypted in the gateway.
//!
//! Integers: times, versions and sequence numbers are `u64`, stored bit-for-bit as `BIGINT`
//! (as in the SQLite store).

mod effects;
mod grants;
mod pins;
mod retention;
mod schema;
mod tls;

use crate::{corrupt, int, uint};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use secureclaw_core::acceptance::{LedgerError, SingleUseLedger};
use secureclaw_core::audit::{
    self, ArchiveSegment, AuditCheckpoint, AuditEvent, AuditRecord, LogVerified,
};
use secureclaw_core::binding::BindingDigest;
use secureclaw_core::confirmation::Confirmation;
use secureclaw_core::contract::BranchState;
use secureclaw_core::handle::{HandleId, HandleRecord, Sensitivity};
use secureclaw_core::keys::{KeyId, KeyRing};
use secureclaw_core::store::check_segment;
use secureclaw_core::store::{
    ActionRecord, ActionStore, ApprovalRecord, ApprovalState, AuditSink, HeldBounds, HeldCall,
    HoldOutcome, LedgerEntry, LedgerState, LedgerStore, RateLimitStore, RateLimits, RateTake,
    SessionRecord, SessionStore, SpeculationStore, StoreError, TaskStateStore, TokenBucket,
    VaultStore, WrittenBounds, WrittenRows, WrittenValue, take_tokens,
};
use secureclaw_core::vault::{self, SealedValue, VaultError};
use secureclaw_core::{ActionId, UnixMillis};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::ToSql;
use zeroize::Zeroizing;

/// Advisory lock key that serializes audit appends ("SCAUDIT\0" in ASCII).
pub const AUDIT_LOCK: i64 = 0x5343_4155_4449_5400;

/// How long a replica's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(30);

/// How often the lease is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// How long a call waits for a pooled connection, a new connection or a recycle check.
const POOL_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest number of connections one replica holds.
const POOL_SIZE: usize = 16;

/// The error type of the driver.
pub(crate) type PgError = tokio_postgres::Error;

/// Any driver failure: the store is unavailable (fail closed). The server's message is kept,
/// never the statement's parameters.
pub(crate) fn db(e: PgError) -> StoreError {
    match e.as_db_error() {
        Some(d) => StoreError::Unavailable(format!("postgres: {}", d.message())),
        None => StoreError::Unavailable(format!("postgres: {}", with_causes(&e))),
    }
}

/// Statements through the connection's prepared-statement cache (issue 14 item 4).
///
/// Each pooled connection keeps the statements it has prepared (deadpool-postgres'
/// `StatementCache`, one per connection, living as long as the connection; the pool recycles
/// with [`RecyclingMethod::Fast`], which never runs `DISCARD ALL`), so a statement of the call
/// path is parsed and planned by the server once per connection instead of on every call —
/// the plain `execute("SQL", …)` of tokio-postgres prepares an unnamed statement first, one
/// more round trip each time. Same parameters, same results and errors as the uncached
/// methods of the same name; the statement text must be a single statement.
#[async_trait]
pub(crate) trait PgCached: deadpool_postgres::GenericClient {
    /// `execute`, with `sql` prepared once per connection.
    async fn execute_c(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, PgError> {
        let stmt = self.prepare_cached(sql).await?;
        self.execute(&stmt, params).await
    }

    /// `query`, with `sql` prepared once per connection.
    async fn query_c(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, PgError> {
        let stmt = self.prepare_cached(sql).await?;
        self.query(&stmt, params).await
    }

    /// `query_opt`, with `sql` prepared once per connection.
    async fn query_opt_c(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, PgError> {
        let stmt = self.prepare_cached(sql).await?;
        self.query_opt(&stmt, params).await
    }

    /// `query_one`, with `sql` prepared once per connection.
    async fn query_one_c(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, PgError> {
        let stmt = self.prepare_cached(sql).await?;
        self.query_one(&stmt, params).await
    }
}

impl<C: deadpool_postgres::GenericClient + ?Sized> PgCached for C {}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("postgres pool: {}", with_causes(&e)))
}

/// `e` followed by each error in its source chain (`: cause`), skipping a cause whose text the
/// previous one already shows: a TLS failure then names its reason (an unknown issuer, a name
/// the certificate does not hold) instead of only "error performing TLS handshake".
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !c.is_empty() && !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
    }
    text
}

/// The PostgreSQL store. `Send + Sync`; share it with an [`Arc`]. Dropping it stops the lease
/// renewal (the lease then lapses after at most [`LEASE`]).
pub struct PgStore {
    pool: Pool,
    keys: Arc<KeyRing>,
    replica: String,
    renewal: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

fn random_hex(bytes: usize) -> Result<String, StoreError> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b)
        .map_err(|e| StoreError::Unavailable(format!("random source failed: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl PgStore {
    /// Connect to the database at `url` (`postgres://user@host:port/db?…`, a libpq-style URL:
    /// what `tokio-postgres` accepts, plus `sslrootcert` and the `verify-*` modes; TLS as
    /// [`tls`] describes), apply pending migrations, and
    /// register this process as a replica with a fresh id and a lease renewed in the
    /// background. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if the URL does not parse, the server cannot be reached or
    /// a statement fails; [`StoreError::SchemaTooNew`] if a newer build migrated the database.
    pub async fn connect(url: &str, keys: Arc<KeyRing>) -> Result<Self, StoreError> {
        let url = tls::StoreUrl::parse(url)?;
        let connector = url.connector()?;
        let mut pg = url.config;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(POOL_TIMEOUT);
        }
        let manager = Manager::from_config(
            pg,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(POOL_TIMEOUT),
                create: Some(POOL_TIMEOUT),
                recycle: Some(POOL_TIMEOUT),
            })
            .build()
            .map_err(|e| StoreError::Unavailable(format!("postgres pool: {e}")))?;
        {
            let mut client = pool.get().await.map_err(pool_error)?;
            schema::migrate(&mut client).await?;
        }
        let replica = format!("rep_{}", random_hex(12)?);
        let lease_secs = i64::try_from(LEASE.as_secs()).unwrap_or(i64::MAX);
        pool.get()
            .await
            .map_err(pool_error)?
            .execute_c(
                "INSERT INTO replicas (id, lease_until)
                 VALUES ($1, now() + make_interval(secs => $2::bigint))",
                &[&replica, &lease_secs],
            )
            .await
            .map_err(db)?;
        let renewal = tokio::spawn(renew(pool.clone(), replica.clone()));
        Ok(Self {
            pool,
            keys,
            replica,
            renewal,
        })
    }

    /// This replica's id (`rep_…`), recorded with each of its reservations.
    #[must_use]
    pub fn replica_id(&self) -> &str {
        &self.replica
    }

    /// The schema version of the database.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn schema_version(&self) -> Result<u32, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let v = schema::version(&tx).await?;
        tx.commit().await.map_err(db)?;
        Ok(v)
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Renew this replica's lease now (the background task does so every 10 s).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn renew_lease(&self) -> Result<(), StoreError> {
        renew_once(&self.pool, &self.replica).await
    }
}

async fn renew_once(pool: &Pool, replica: &str) -> Result<(), StoreError> {
    let lease_secs = i64::try_from(LEASE.as_secs()).unwrap_or(i64::MAX);
    pool.get()
        .await
        .map_err(pool_error)?
        .execute_c(
            "INSERT INTO replicas (id, lease_until)
             VALUES ($1, now() + make_interval(secs => $2::bigint))
             ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until",
            &[&replica, &lease_secs],
        )
        .await
        .map_err(db)?;
    Ok(())
}

/// The background lease renewal: every [`RENEW_EVERY`], for as long as the store lives. A
/// failed renewal is logged; if the database stays unreachable the lease lapses, and another
/// replica starting then reports this one's reservations as dangling (a report: nothing is
/// re-executed, since reservations are never executed again).
async fn renew(pool: Pool, replica: String) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if let Err(e) = renew_once(&pool, &replica).await {
            tracing::warn!(replica, error = %e, "lease renewal failed");
        }
    }
}

// ------------------------------------------------------------------------------- decoding

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    i: usize,
    what: &str,
) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| corrupt(what, e))
}

const SESSION_COLUMNS: &str = "id, caller, envelope, created_at, expires_at";

fn session_row(r: &tokio_postgres::Row) -> Result<SessionRecord, StoreError> {
    let envelope: String = get(r, 2, "session")?;
    Ok(SessionRecord {
        id: get(r, 0, "session")?,
        caller: get(r, 1, "session")?,
        envelope: serde_json::from_str(&envelope).map_err(|e| corrupt("task envelope", e))?,
        created_at: UnixMillis(uint(get(r, 3, "session")?)),
        expires_at: UnixMillis(uint(get(r, 4, "session")?)),
    })
}

const HANDLE_COLUMNS: &str = "id, caller, session, object_id, version, label, sensitivity, \
                              source, anchored, allowed_sinks, created_at, expires_at, revoked";

fn handle_row(r: &tokio_postgres::Row) -> Result<HandleRecord, StoreError> {
    let sensitivity: String = get(r, 6, "handle")?;
    let sensitivity = match sensitivity.as_str() {
        "low" => Sensitivity::Low,
        "medium" => Sensitivity::Medium,
        "high" => Sensitivity::High,
        other => return Err(StoreError::Corrupt(format!("handle sensitivity `{other}`"))),
    };
    let sinks: String = get(r, 9, "handle")?;
    Ok(HandleRecord {
        id: HandleId(get(r, 0, "handle")?),
        caller: get(r, 1, "handle")?,
        session: get(r, 2, "handle")?,
        object_id: get(r, 3, "handle")?,
        version: uint(get(r, 4, "handle")?),
        label: get(r, 5, "handle")?,
        sensitivity,
        source: get(r, 7, "handle")?,
        anchored: get(r, 8, "handle")?,
        allowed_sinks: serde_json::from_str(&sinks)
            .map_err(|e| corrupt("handle allowed sinks", e))?,
        created_at: UnixMillis(uint(get(r, 10, "handle")?)),
        expires_at: UnixMillis(uint(get(r, 11, "handle")?)),
        revoked: get(r, 12, "handle")?,
    })
}

const ACTION_COLUMNS: &str = "a.action_id, a.session, a.caller, a.tool, a.binding_kid, \
     a.binding, a.needs_confirmation, a.created_at, a.request_json, a.display";
const APPROVAL_COLUMNS: &str =
    "p.action_id, p.state, p.created_at, p.decided_at, p.decided_by, p.confirmation";

/// [`ACTION_COLUMNS`] starting at column `at`.
fn action_row(r: &tokio_postgres::Row, at: usize) -> Result<ActionRecord, StoreError> {
    Ok(ActionRecord {
        action_id: ActionId(get(r, at, "action")?),
        session: get(r, at + 1, "action")?,
        caller: get(r, at + 2, "action")?,
        tool: get(r, at + 3, "action")?,
        binding: BindingDigest {
            kid: KeyId(get(r, at + 4, "action")?),
            digest: get(r, at + 5, "action")?,
        },
        needs_confirmation: get(r, at + 6, "action")?,
        created_at: UnixMillis(uint(get(r, at + 7, "action")?)),
        request_json: get(r, at + 8, "action")?,
        display: get(r, at + 9, "action")?,
    })
}

/// [`APPROVAL_COLUMNS`] starting at column 0.
fn approval_row(r: &tokio_postgres::Row) -> Result<ApprovalRecord, StoreError> {
    let state: String = get(r, 1, "approval")?;
    let decided_at: Option<i64> = get(r, 3, "approval")?;
    let confirmation: Option<String> = get(r, 5, "approval")?;
    Ok(ApprovalRecord {
        action_id: ActionId(get(r, 0, "approval")?),
        state: ApprovalState::parse(&state)?,
        created_at: UnixMillis(uint(get(r, 2, "approval")?)),
        decided_at: decided_at.map(|t| UnixMillis(uint(t))),
        decided_by: get(r, 4, "approval")?,
        confirmation: confirmation
            .map(|c| serde_json::from_str(&c))
            .transpose()
            .map_err(|e| corrupt("approval confirmation", e))?,
    })
}

const LEDGER_COLUMNS: &str =
    "action_id, binding_kid, binding, state, reserved_at, finished_at, result_digest, failure";

fn ledger_row(r: &tokio_postgres::Row) -> Result<LedgerEntry, StoreError> {
    let state: String = get(r, 3, "ledger entry")?;
    let finished_at: Option<i64> = get(r, 5, "ledger entry")?;
    Ok(LedgerEntry {
        action_id: ActionId(get(r, 0, "ledger entry")?),
        binding: BindingDigest {
            kid: KeyId(get(r, 1, "ledger entry")?),
            digest: get(r, 2, "ledger entry")?,
        },
        state: LedgerState::parse(&state)?,
        reserved_at: UnixMillis(uint(get(r, 4, "ledger entry")?)),
        finished_at: finished_at.map(|t| UnixMillis(uint(t))),
        result_digest: get(r, 6, "ledger entry")?,
        failure: get(r, 7, "ledger entry")?,
    })
}

const AUDIT_COLUMNS: &str = "seq, kid, prev, mac, event, kind, at";

fn audit_row(r: &tokio_postgres::Row) -> Result<AuditRecord, StoreError> {
    let event: String = get(r, 4, "audit record")?;
    let kind: String = get(r, 5, "audit record")?;
    crate::audit::decode_stored(crate::audit::StoredAudit {
        seq: uint(get(r, 0, "audit record")?),
        kid: get(r, 1, "audit record")?,
        prev: get(r, 2, "audit record")?,
        mac: get(r, 3, "audit record")?,
        event: &event,
        kind: &kind,
        at: get(r, 6, "audit record")?,
    })
}

/// The associated data binding a ciphertext to its object and version (as in SQLite).
fn aad(object_id: &str, version: u64) -> String {
    format!("{object_id}@v{version}")
}

fn vault_error(e: VaultError) -> StoreError {
    crate::vault::vault_error("vault value", e)
}

/// The sealed value in the columns `kid, nonce, ciphertext` starting at column `at`.
fn sealed_at(r: &tokio_postgres::Row, at: usize, what: &str) -> Result<SealedValue, StoreError> {
    Ok(SealedValue {
        kid: KeyId(get(r, at, what)?),
        nonce: get(r, at + 1, what)?,
        ciphertext: get(r, at + 2, what)?,
    })
}

// --------------------------------------------------------------------------------- traits

#[async_trait]
impl SessionStore for PgStore {
    async fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let envelope =
            serde_json::to_string(&record.envelope).map_err(|e| corrupt("task envelope", e))?;
        let inserted = self
            .client()
            .await?
            .execute_c(
                "INSERT INTO sessions (id, caller, envelope, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                &[
                    &record.id,
                    &record.caller,
                    &envelope,
                    &int(record.created_at.0),
                    &int(record.expires_at.0),
                ],
            )
            .await
            .map_err(db)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "session `{}` already exists",
                record.id
            )));
        }
        Ok(())
    }

    async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(session_row).transpose()
    }

    async fn protect_objects(&self, session: &str, keys: &[String]) -> Result<(), StoreError> {
        self.add_keys("protected_objects", "key", session, keys)
            .await
    }

    async fn any_protected(&self, session: &str, keys: &[String]) -> Result<bool, StoreError> {
        self.any_key("protected_objects", "key", session, keys)
            .await
    }
}

impl PgStore {
    /// Add `keys` to the per-session set `table` (a fixed table name) keyed by
    /// (`session`, `column`), idempotently.
    async fn add_keys(
        &self,
        table: &str,
        column: &str,
        session: &str,
        keys: &[String],
    ) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.client()
            .await?
            .execute_c(
                &format!(
                    "INSERT INTO {table} (session, {column})
                     SELECT $1, k FROM unnest($2::text[]) AS k
                     ON CONFLICT (session, {column}) DO NOTHING"
                ),
                &[&session, &keys],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Whether the per-session set `table` (a fixed table name) holds any of `keys` for
    /// `session` in `column`.
    async fn any_key(
        &self,
        table: &str,
        column: &str,
        session: &str,
        keys: &[String],
    ) -> Result<bool, StoreError> {
        if keys.is_empty() {
            return Ok(false);
        }
        self.client()
            .await?
            .query_one_c(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM {table}
                                    WHERE session = $1 AND {column} = ANY($2::text[]))"
                ),
                &[&session, &keys],
            )
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)
    }
}

#[async_trait]
impl VaultStore for PgStore {
    async fn put_object(
        &self,
        object_id: &str,
        version: u64,
        plaintext: &[u8],
        nonce: [u8; 12],
    ) -> Result<(), StoreError> {
        let sealed = vault::seal(&self.keys, &aad(object_id, version), plaintext, nonce)
            .map_err(vault_error)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let used = tx
            .query_opt_c(
                "SELECT 1 FROM vault_objects WHERE kid = $1 AND nonce = $2",
                &[&sealed.kid.0, &sealed.nonce],
            )
            .await
            .map_err(db)?
            .is_some();
        if used {
            return Err(StoreError::Invalid(format!(
                "nonce already used under vault key `{}`",
                sealed.kid
            )));
        }
        let inserted = tx
            .execute_c(
                "INSERT INTO vault_objects (object_id, version, kid, nonce, ciphertext)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (object_id, version) DO NOTHING",
                &[
                    &object_id,
                    &int(version),
                    &sealed.kid.0,
                    &sealed.nonce,
                    &sealed.ciphertext,
                ],
            )
            .await
            .map_err(db)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "vault object `{object_id}` version {version} already exists"
            )));
        }
        tx.commit().await.map_err(db)
    }

    async fn object_value(
        &self,
        object_id: &str,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        self.load_object(object_id, None).await
    }

    async fn object_value_at(
        &self,
        object_id: &str,
        version: u64,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        self.load_object(object_id, Some(version)).await
    }

    async fn put_handle_keyed(
        &self,
        record: &HandleRecord,
        reuse_key: Option<&str>,
    ) -> Result<(), StoreError> {
        let sinks = serde_json::to_string(&record.allowed_sinks)
            .map_err(|e| corrupt("handle allowed sinks", e))?;
        let inserted = self
            .client()
            .await?
            .execute_c(
                &format!(
                    "INSERT INTO handles ({HANDLE_COLUMNS}, reuse_key)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[
                    &record.id.0,
                    &record.caller,
                    &record.session,
                    &record.object_id,
                    &int(record.version),
                    &record.label,
                    &record.sensitivity.as_str(),
                    &record.source,
                    &record.anchored,
                    &sinks,
                    &int(record.created_at.0),
                    &int(record.expires_at.0),
                    &record.revoked,
                    &reuse_key,
                ],
            )
            .await
            .map_err(db)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "handle `{}` already exists",
                record.id
            )));
        }
        Ok(())
    }

    async fn handle(&self, id: &HandleId) -> Result<Option<HandleRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {HANDLE_COLUMNS} FROM handles WHERE id = $1"),
                &[&id.0],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(handle_row).transpose()
    }

    async fn reusable_handle(
        &self,
        session: &str,
        reuse_key: &str,
        valid_until: UnixMillis,
    ) -> Result<Option<HandleRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!(
                    "SELECT {HANDLE_COLUMNS} FROM handles
                     WHERE session = $1 AND reuse_key = $2 AND NOT revoked AND expires_at >= $3
                     ORDER BY created_at DESC, id LIMIT 1"
                ),
                &[&session, &reuse_key, &int(valid_until.0)],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(handle_row).transpose()
    }

    async fn revoke_handle(&self, id: &HandleId) -> Result<bool, StoreError> {
        let changed = self
            .client()
            .await?
            .execute_c(
                "UPDATE handles SET revoked = TRUE WHERE id = $1 AND NOT revoked",
                &[&id.0],
            )
            .await
            .map_err(db)?;
        Ok(changed == 1)
    }

    async fn handles_for_session(&self, session: &str) -> Result<Vec<HandleRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                &format!(
                    "SELECT {HANDLE_COLUMNS} FROM handles WHERE session = $1
                     ORDER BY created_at, id"
                ),
                &[&session],
            )
            .await
            .map_err(db)?;
        rows.iter().map(handle_row).collect()
    }
}

impl PgStore {
    async fn load_object(
        &self,
        object_id: &str,
        version: Option<u64>,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT version, kid, nonce, ciphertext FROM vault_objects
                 WHERE object_id = $1 AND ($2::bigint IS NULL OR version = $2)
                 ORDER BY version DESC LIMIT 1",
                &[&object_id, &version.map(int)],
            )
            .await
            .map_err(db)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let stored_version: i64 = get(&row, 0, "vault object")?;
        let sealed = sealed_at(&row, 1, "vault object")?;
        vault::open(&self.keys, &aad(object_id, uint(stored_version)), &sealed)
            .map(Some)
            .map_err(vault_error)
    }
}

#[async_trait]
impl ActionStore for PgStore {
    async fn put_action(&self, record: &ActionRecord) -> Result<(), StoreError> {
        effects::insert_action(&self.client().await?, record).await
    }

    async fn action(&self, id: &ActionId) -> Result<Option<ActionRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {ACTION_COLUMNS} FROM actions a WHERE a.action_id = $1"),
                &[&id.0],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(|r| action_row(r, 0)).transpose()
    }

    async fn create_approval(&self, id: &ActionId, at: UnixMillis) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let known = tx
            .query_opt_c("SELECT 1 FROM actions WHERE action_id = $1", &[&id.0])
            .await
            .map_err(db)?
            .is_some();
        if !known {
            return Err(StoreError::NotFound(format!("action `{id}`")));
        }
        tx.execute_c(
            "INSERT INTO approvals (action_id, state, created_at) VALUES ($1, 'pending', $2)
             ON CONFLICT (action_id) DO NOTHING",
            &[&id.0, &int(at.0)],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn approval(&self, id: &ActionId) -> Result<Option<ApprovalRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {APPROVAL_COLUMNS} FROM approvals p WHERE p.action_id = $1"),
                &[&id.0],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(approval_row).transpose()
    }

    async fn approved_unused(
        &self,
        session: &str,
        binding: &BindingDigest,
        decided_since: UnixMillis,
    ) -> Result<Option<ActionId>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT a.action_id FROM actions a JOIN approvals p ON p.action_id = a.action_id
                 WHERE a.session = $1 AND a.binding_kid = $2 AND a.binding = $3
                   AND p.state = 'approved' AND p.decided_at >= $4
                   AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.action_id = a.action_id)
                 ORDER BY p.decided_at DESC, a.action_id LIMIT 1",
                &[
                    &session,
                    &binding.kid.0,
                    &binding.digest,
                    &i64::try_from(decided_since.0).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(db)?;
        row.map(|r| r.try_get::<_, String>(0).map(ActionId))
            .transpose()
            .map_err(db)
    }

    async fn denied_binding(
        &self,
        session: &str,
        binding: &BindingDigest,
    ) -> Result<bool, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT 1 FROM actions a JOIN approvals p ON p.action_id = a.action_id
                 WHERE a.session = $1 AND a.binding_kid = $2 AND a.binding = $3
                   AND p.state = 'denied'
                 LIMIT 1",
                &[&session, &binding.kid.0, &binding.digest],
            )
            .await
            .map_err(db)?;
        Ok(row.is_some())
    }

    async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<(ApprovalRecord, ActionRecord)>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                &format!(
                    "SELECT {APPROVAL_COLUMNS}, {ACTION_COLUMNS}
                     FROM approvals p JOIN actions a ON a.action_id = p.action_id
                     WHERE $1::text IS NULL OR p.state = $1
                     ORDER BY p.created_at, p.action_id"
                ),
                &[&state.map(ApprovalState::as_str)],
            )
            .await
            .map_err(db)?;
        rows.iter()
            .map(|r| Ok((approval_row(r)?, action_row(r, 6)?)))
            .collect()
    }

    async fn decide_approval(
        &self,
        id: &ActionId,
        approve: bool,
        by: &str,
        at: UnixMillis,
        confirmation: Option<Confirmation>,
    ) -> Result<ApprovalRecord, StoreError> {
        crate::actions::check_decision(id, approve, confirmation.as_ref())?;
        let state = if approve {
            ApprovalState::Approved
        } else {
            ApprovalState::Denied
        };
        let confirmation_json = confirmation
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| corrupt("confirmation", e))?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let changed = tx
            .execute_c(
                "UPDATE approvals SET state = $2, decided_at = $3, decided_by = $4,
                                      confirmation = $5
                 WHERE action_id = $1 AND state = 'pending'",
                &[&id.0, &state.as_str(), &int(at.0), &by, &confirmation_json],
            )
            .await
            .map_err(db)?;
        let row = tx
            .query_opt_c(
                &format!("SELECT {APPROVAL_COLUMNS} FROM approvals p WHERE p.action_id = $1"),
                &[&id.0],
            )
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!("approval for `{id}`")));
        };
        let record = approval_row(&row)?;
        if changed != 1 {
            return Err(StoreError::Conflict(format!(
                "approval for `{id}` is already {}",
                record.state.as_str()
            )));
        }
        Ok(record)
    }
}

#[async_trait]
impl SingleUseLedger for PgStore {
    /// One `INSERT … ON CONFLICT (action_id) DO NOTHING`; `Ok(true)` iff this call inserted
    /// the row. Any failure is an error, never `Ok(true)`.
    async fn reserve(
        &self,
        action_id: &ActionId,
        binding: &BindingDigest,
        at: UnixMillis,
    ) -> Result<bool, LedgerError> {
        let client = self
            .client()
            .await
            .map_err(|e| LedgerError(e.to_string()))?;
        let inserted = effects::insert_reservation(&client, action_id, binding, at, &self.replica)
            .await
            .map_err(|e| LedgerError(db(e).to_string()))?;
        Ok(inserted == 1)
    }
}

impl PgStore {
    async fn finish(
        &self,
        id: &ActionId,
        update: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let changed = tx.execute_c(update, params).await.map_err(db)?;
        if changed == 1 {
            return tx.commit().await.map_err(db);
        }
        let state: Option<String> = match tx
            .query_opt_c("SELECT state FROM ledger WHERE action_id = $1", &[&id.0])
            .await
            .map_err(db)?
        {
            Some(row) => Some(get(&row, 0, "ledger entry")?),
            None => None,
        };
        match state {
            None => Err(StoreError::NotFound(format!("ledger entry `{id}`"))),
            Some(state) => Err(StoreError::Conflict(format!(
                "ledger entry `{id}` is already {state}"
            ))),
        }
    }
}

#[async_trait]
impl LedgerStore for PgStore {
    async fn mark_executed(
        &self,
        id: &ActionId,
        result_digest: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(
            id,
            effects::MARK_EXECUTED,
            &[&id.0, &int(at.0), &result_digest],
        )
        .await
    }

    async fn mark_failed(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(id, effects::MARK_FAILED, &[&id.0, &int(at.0), &reason])
            .await
    }

    async fn mark_outcome_unknown(
        &self,
        id: &ActionId,
        reason: &str,
        at: UnixMillis,
    ) -> Result<(), StoreError> {
        self.finish(
            id,
            effects::MARK_OUTCOME_UNKNOWN,
            &[&id.0, &int(at.0), &reason],
        )
        .await
    }

    async fn ledger_entry(&self, id: &ActionId) -> Result<Option<LedgerEntry>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                &format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE action_id = $1"),
                &[&id.0],
            )
            .await
            .map_err(db)?;
        row.as_ref().map(ledger_row).transpose()
    }

    async fn outcome_unknown_tool(&self, session: &str, tool: &str) -> Result<bool, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT 1 FROM ledger l JOIN actions a ON a.action_id = l.action_id
                 WHERE a.session = $1 AND a.tool = $2
                   AND l.state = 'outcome_unknown' LIMIT 1",
                &[&session, &tool],
            )
            .await
            .map_err(db)?;
        Ok(row.is_some())
    }

    /// Reservations still `reserved` made by this replica or by a replica whose lease has
    /// lapsed (or that never registered), oldest first — never another live replica's.
    async fn dangling_reservations(&self) -> Result<Vec<LedgerEntry>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_c(
                &format!(
                    "SELECT {LEDGER_COLUMNS} FROM ledger l
                     WHERE l.state = 'reserved'
                       AND (l.replica = $1 OR NOT EXISTS (
                            SELECT 1 FROM replicas r
                            WHERE r.id = l.replica AND r.lease_until > now()))
                     ORDER BY l.reserved_at, l.action_id"
                ),
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        rows.iter().map(ledger_row).collect()
    }
}

#[async_trait]
impl AuditSink for PgStore {
    /// Under the advisory lock [`AUDIT_LOCK`], in one transaction: read the last record,
    /// chain the next, insert it. Appends from every replica thus form one chain.
    async fn append_audit(&self, event: AuditEvent) -> Result<AuditRecord, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let mut head = effects::lock_head(&tx).await?;
        let record = self.append_in(&tx, &mut head, event).await?;
        tx.commit().await.map_err(db)?;
        Ok(record)
    }

    async fn audit_records(
        &self,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .await?
            .query_c(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit WHERE seq >= $1 ORDER BY seq LIMIT $2"),
                &[&from, &limit],
            )
            .await
            .map_err(db)?;
        rows.iter().map(audit_row).collect()
    }

    /// The checkpoints and the records in one read-only `REPEATABLE READ` transaction (one
    /// snapshot, so an archive committed meanwhile is seen whole or not at all).
    async fn verify_audit_log(&self) -> Result<LogVerified, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db)?;
        let cps = checkpoints(&tx).await?;
        let rows = tx
            .query_c(
                &format!("SELECT {AUDIT_COLUMNS} FROM audit ORDER BY seq"),
                &[],
            )
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        let records = rows.iter().map(audit_row).collect::<Result<Vec<_>, _>>()?;
        Ok(audit::verify_log(&self.keys, &cps, &records)?)
    }

    async fn audit_checkpoints(&self) -> Result<Vec<AuditCheckpoint>, StoreError> {
        let client = self.client().await?;
        checkpoints(&client).await
    }

    /// Under the advisory lock [`AUDIT_LOCK`] (as appenders), in one transaction: check the
    /// segment, store its checkpoint, delete its records.
    async fn archive_audit(&self, segment: &ArchiveSegment) -> Result<AuditCheckpoint, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        effects::lock_head(&tx).await?;
        let latest = tx
            .query_opt_c(
                &format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq DESC LIMIT 1"
                ),
                &[],
            )
            .await
            .map_err(db)?
            .map(|r| checkpoint_row(&r))
            .transpose()?;
        let (first, last) = (int(segment.first_seq), int(segment.seq));
        let found = tx
            .query_one_c(
                "SELECT count(*), (SELECT mac FROM audit WHERE seq = $2)
                 FROM audit WHERE seq >= $1 AND seq <= $2",
                &[&first, &last],
            )
            .await
            .map_err(db)?;
        let rows: i64 = get(&found, 0, "audit segment")?;
        let mac: Option<String> = get(&found, 1, "audit segment")?;
        check_segment(
            segment,
            latest.as_ref().map_or(0, AuditCheckpoint::seq),
            (u64::try_from(rows).unwrap_or(0), mac.as_deref()),
        )?;
        let cp = audit::seal_checkpoint(&self.keys, latest.as_ref(), segment.clone())?;
        tx.execute_c(
            &format!(
                "INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            &[
                &first,
                &last,
                &cp.segment.mac,
                &int(cp.segment.count),
                &cp.segment.archive_sha256,
                &cp.segment.archive,
                &int(cp.segment.at.0),
                &cp.prev,
                &cp.kid.0,
                &cp.checkpoint_mac,
            ],
        )
        .await
        .map_err(db)?;
        tx.execute_c(
            "DELETE FROM audit WHERE seq >= $1 AND seq <= $2",
            &[&first, &last],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(cp)
    }
}

const CHECKPOINT_COLUMNS: &str =
    "first_seq, seq, mac, count, archive_sha256, archive, at, prev, kid, checkpoint_mac";

fn checkpoint_row(r: &tokio_postgres::Row) -> Result<AuditCheckpoint, StoreError> {
    const WHAT: &str = "audit checkpoint";
    Ok(AuditCheckpoint {
        segment: ArchiveSegment {
            first_seq: uint(get(r, 0, WHAT)?),
            seq: uint(get(r, 1, WHAT)?),
            mac: get(r, 2, WHAT)?,
            count: uint(get(r, 3, WHAT)?),
            archive_sha256: get(r, 4, WHAT)?,
            archive: get(r, 5, WHAT)?,
            at: UnixMillis(uint(get(r, 6, WHAT)?)),
        },
        prev: get(r, 7, WHAT)?,
        kid: KeyId(get(r, 8, WHAT)?),
        checkpoint_mac: get(r, 9, WHAT)?,
    })
}

/// Every checkpoint, oldest first.
async fn checkpoints<C: deadpool_postgres::GenericClient>(
    c: &C,
) -> Result<Vec<AuditCheckpoint>, StoreError> {
    c.query_c(
        &format!("SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq"),
        &[],
    )
    .await
    .map_err(db)?
    .iter()
    .map(checkpoint_row)
    .collect()
}

/// A stored budget counter as `u32`.
fn budget_count(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("budget counter `{v}`")))
}

#[async_trait]
impl SpeculationStore for PgStore {
    async fn budget_spent(&self, session: &str) -> Result<u32, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT spent FROM speculation_budget WHERE session = $1",
                &[&session],
            )
            .await
            .map_err(db)?;
        match row {
            Some(r) => budget_count(get(&r, 0, "budget")?),
            None => Ok(0),
        }
    }

    /// One `INSERT … ON CONFLICT DO UPDATE … WHERE spent < limit`: PostgreSQL locks the
    /// conflicting row and re-checks the condition, so of replicas racing for the last unit
    /// exactly one is charged.
    async fn charge_budget(&self, session: &str, limit: u32) -> Result<Option<u32>, StoreError> {
        if limit == 0 {
            return Ok(None);
        }
        let row = self
            .client()
            .await?
            .query_opt_c(
                "INSERT INTO speculation_budget AS b (session, spent) VALUES ($1, 1)
                 ON CONFLICT (session) DO UPDATE SET spent = b.spent + 1 WHERE b.spent < $2
                 RETURNING spent",
                &[&session, &i64::from(limit)],
            )
            .await
            .map_err(db)?;
        match row {
            Some(r) => budget_count(get(&r, 0, "budget")?).map(Some),
            None => Ok(None),
        }
    }

    async fn branch_state(&self, session: &str, branch: &str) -> Result<BranchState, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT state FROM spec_branches WHERE session = $1 AND branch = $2",
                &[&session, &branch],
            )
            .await
            .map_err(db)?;
        match row {
            Some(r) => crate::held::branch_state(&get::<String>(&r, 0, "branch state")?),
            None => Ok(BranchState::Pending),
        }
    }

    /// One transaction that first locks the session's `held_sessions` row, so holds and
    /// settlements of one session serialize across replicas.
    async fn hold_call(
        &self,
        session: &str,
        branch: &str,
        call: &str,
        bytes: u64,
        bounds: HeldBounds,
    ) -> Result<HoldOutcome, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let (calls, held, last) = lock_held_session(&tx, session).await?;
        let state = tx_branch_state(&tx, session, branch).await?;
        if state != BranchState::Pending {
            return Ok(HoldOutcome::Settled(state));
        }
        let size = crate::task_state::bound(bytes);
        if let Some(limit) = crate::held::held_limit(calls, held, size, bounds) {
            return Ok(HoldOutcome::Limit(limit));
        }
        let seq = last.saturating_add(1);
        let sealed = crate::held::seal_held(&self.keys, session, branch, seq, call)?;
        tx.execute_c(
            "INSERT INTO spec_branches (session, branch, state) VALUES ($1, $2, 'pending')
             ON CONFLICT (session, branch) DO NOTHING",
            &[&session, &branch],
        )
        .await
        .map_err(db)?;
        tx.execute_c(
            "INSERT INTO held_calls (session, seq, branch, bytes, kid, nonce, ciphertext)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &session,
                &seq,
                &branch,
                &size,
                &sealed.kid.0,
                &sealed.nonce,
                &sealed.ciphertext,
            ],
        )
        .await
        .map_err(db)?;
        tx.execute_c(
            "UPDATE held_sessions SET calls = calls + 1, bytes = bytes + $2, next_seq = $3
             WHERE session = $1",
            &[&session, &size, &seq],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(HoldOutcome::Held(uint(seq)))
    }

    /// One transaction that first locks the session's `held_sessions` row, then settles the
    /// branch and deletes its held calls as it returns them: a concurrent settlement waits for
    /// the lock and then finds the branch settled and no calls left.
    async fn settle_branch(
        &self,
        session: &str,
        branch: &str,
        to: BranchState,
    ) -> Result<Vec<HeldCall>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        lock_held_session(&tx, session).await?;
        let cur = tx_branch_state(&tx, session, branch).await?;
        if !crate::held::settle_check(branch, cur, to)? {
            return Ok(Vec::new());
        }
        tx.execute_c(
            "INSERT INTO spec_branches (session, branch, state) VALUES ($1, $2, $3)
             ON CONFLICT (session, branch) DO UPDATE SET state = EXCLUDED.state",
            &[&session, &branch, &to.as_str()],
        )
        .await
        .map_err(db)?;
        let rows = tx
            .query_c(
                "DELETE FROM held_calls WHERE session = $1 AND branch = $2
                 RETURNING seq, bytes, kid, nonce, ciphertext",
                &[&session, &branch],
            )
            .await
            .map_err(db)?;
        let mut taken = Vec::with_capacity(rows.len());
        let mut freed = 0i64;
        for r in &rows {
            let seq: i64 = get(r, 0, "held call")?;
            let bytes: i64 = get(r, 1, "held call")?;
            let sealed = sealed_at(r, 2, "held call")?;
            taken.push(HeldCall {
                seq: uint(seq),
                call: crate::held::open_held(&self.keys, session, branch, seq, &sealed)?,
                bytes: crate::task_state::count(bytes)?,
            });
            freed = freed.saturating_add(bytes);
        }
        taken.sort_by_key(|c| c.seq);
        if !taken.is_empty() {
            let n = i64::try_from(taken.len()).unwrap_or(i64::MAX);
            tx.execute_c(
                "UPDATE held_sessions SET calls = calls - $2, bytes = bytes - $3
                 WHERE session = $1",
                &[&session, &n, &freed],
            )
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(taken)
    }

    async fn held_totals(&self, session: &str) -> Result<(u64, u64), StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT calls, bytes FROM held_sessions WHERE session = $1",
                &[&session],
            )
            .await
            .map_err(db)?;
        match row {
            Some(r) => Ok((
                crate::task_state::count(get(&r, 0, "held totals")?)?,
                crate::task_state::count(get(&r, 1, "held totals")?)?,
            )),
            None => Ok((0, 0)),
        }
    }
}

/// Create (if absent) and lock the `held_sessions` row of `session`; its calls, bytes and
/// last sequence number.
async fn lock_held_session(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
) -> Result<(i64, i64, i64), StoreError> {
    tx.execute_c(
        "INSERT INTO held_sessions (session, calls, bytes, next_seq) VALUES ($1, 0, 0, 0)
         ON CONFLICT (session) DO NOTHING",
        &[&session],
    )
    .await
    .map_err(db)?;
    let row = tx
        .query_one_c(
            "SELECT calls, bytes, next_seq FROM held_sessions WHERE session = $1 FOR UPDATE",
            &[&session],
        )
        .await
        .map_err(db)?;
    Ok((
        get(&row, 0, "held session")?,
        get(&row, 1, "held session")?,
        get(&row, 2, "held session")?,
    ))
}

/// The state of `branch` inside a transaction.
async fn tx_branch_state(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
    branch: &str,
) -> Result<BranchState, StoreError> {
    let row = tx
        .query_opt_c(
            "SELECT state FROM spec_branches WHERE session = $1 AND branch = $2",
            &[&session, &branch],
        )
        .await
        .map_err(db)?;
    match row {
        Some(r) => crate::held::branch_state(&get::<String>(&r, 0, "branch state")?),
        None => Ok(BranchState::Pending),
    }
}

/// Create a bucket row (full, at `now`) if absent and lock it; the stored bucket.
async fn lock_bucket(
    tx: &deadpool_postgres::Transaction<'_>,
    session: &str,
    scope: &str,
    burst: u32,
    now: UnixMillis,
) -> Result<TokenBucket, StoreError> {
    let full = TokenBucket::full(burst, now);
    tx.execute_c(
        "INSERT INTO rate_buckets (session, scope, milli_tokens, at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session, scope) DO NOTHING",
        &[
            &session,
            &scope,
            &crate::task_state::bound(full.milli_tokens),
            &int(now.0),
        ],
    )
    .await
    .map_err(db)?;
    let row = tx
        .query_one_c(
            "SELECT milli_tokens, at FROM rate_buckets
             WHERE session = $1 AND scope = $2 FOR UPDATE",
            &[&session, &scope],
        )
        .await
        .map_err(db)?;
    crate::held::bucket(get(&row, 0, "rate bucket")?, get(&row, 1, "rate bucket")?)
}

#[async_trait]
impl RateLimitStore for PgStore {
    /// One transaction that locks the session's bucket row first (then the tool's), so takes
    /// of one session serialize across replicas; committed asynchronously
    /// (`synchronous_commit = off` for it alone).
    async fn take_rate(
        &self,
        session: &str,
        tool: &str,
        rates: RateLimits,
        now: UnixMillis,
    ) -> Result<RateTake, StoreError> {
        use crate::held::{SESSION_SCOPE, tool_scope};
        let scope = tool_scope(tool);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        // Asynchronous commit for this transaction only (issue 14 item 2): a crash may forget
        // the last takes, which only refills a bucket; nothing else waits for its WAL flush.
        tx.batch_execute("SET LOCAL synchronous_commit TO OFF")
            .await
            .map_err(db)?;
        let all = lock_bucket(&tx, session, SESSION_SCOPE, rates.session_burst, now).await?;
        let one = lock_bucket(&tx, session, &scope, rates.tool_burst, now).await?;
        let (all, one, decision) = take_tokens(Some(all), Some(one), rates, now);
        tx.execute_c(
            "UPDATE rate_buckets AS b SET milli_tokens = v.m, at = v.at
             FROM (VALUES ($2::text, $3::bigint, $4::bigint), ($5::text, $6::bigint, $7::bigint))
                  AS v (scope, m, at)
             WHERE b.session = $1 AND b.scope = v.scope",
            &[
                &session,
                &SESSION_SCOPE,
                &crate::task_state::bound(all.milli_tokens),
                &int(all.at.0),
                &scope,
                &crate::task_state::bound(one.milli_tokens),
                &int(one.at.0),
            ],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(decision)
    }
}

#[async_trait]
impl TaskStateStore for PgStore {
    async fn grant_uses(&self, session: &str, grant: &str) -> Result<u64, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt_c(
                "SELECT used FROM grant_uses WHERE session = $1 AND grant_key = $2",
                &[&session, &grant],
            )
            .await
            .map_err(db)?;
        match row {
            Some(r) => crate::task_state::count(get(&r, 0, "grant uses")?),
            None => Ok(0),
        }
    }

    /// One `INSERT … ON CONFLICT DO UPDATE … WHERE used < limit`: PostgreSQL locks the
    /// conflicting row and re-checks the condition, so of replicas racing for the last use
    /// exactly one takes it.
    async fn take_grant_use(
        &self,
        session: &str,
        grant: &str,
        limit: u64,
    ) -> Result<bool, StoreError> {
        if limit == 0 {
            return Ok(false);
        }
        let row = self
            .client()
            .await?
            .query_opt_c(
                "INSERT INTO grant_uses AS g (session, grant_key, used) VALUES ($1, $2, 1)
                 ON CONFLICT (session, grant_key) DO UPDATE SET used = g.used + 1
                 WHERE g.used < $3
                 RETURNING used",
                &[&session, &grant, &crate::task_state::bound(limit)],
            )
            .await
            .map_err(db)?;
        Ok(row.is_some())
    }

    async fn note_amounts(&self, session: &str, digests: &[String]) -> Result<(), StoreError> {
        self.add_keys("read_amounts", "digest", session, digests)
            .await
    }

    async fn amount_known(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        self.any_key("read_amounts", "digest", session, digests)
            .await
    }

    /// In one transaction: create the session's `written_sets` row if absent, lock it
    /// (`FOR UPDATE`), append each new value with the next `seq`, update the counters.
    async fn add_written(
        &self,
        session: &str,
        values: &[WrittenValue],
        bounds: WrittenBounds,
    ) -> Result<bool, StoreError> {
        use crate::task_state::{len, past_bounds, seal_written};
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        tx.execute_c(
            "INSERT INTO written_sets (session, count, bytes, is_full) VALUES ($1, 0, 0, FALSE)
             ON CONFLICT (session) DO NOTHING",
            &[&session],
        )
        .await
        .map_err(db)?;
        let row = tx
            .query_one_c(
                "SELECT count, bytes, is_full FROM written_sets WHERE session = $1 FOR UPDATE",
                &[&session],
            )
            .await
            .map_err(db)?;
        let mut n: i64 = get(&row, 0, "written set")?;
        let mut bytes: i64 = get(&row, 1, "written set")?;
        let mut full: bool = get(&row, 2, "written set")?;
        for v in values {
            if full {
                break;
            }
            let known = tx
                .query_opt_c(
                    "SELECT 1 FROM written_values WHERE session = $1 AND digest = $2",
                    &[&session, &v.digest],
                )
                .await
                .map_err(db)?
                .is_some();
            if known {
                continue;
            }
            let size = len(&v.value);
            if past_bounds(n, bytes, size, bounds) {
                full = true;
                break;
            }
            let sealed = seal_written(&self.keys, session, v)?;
            n += 1;
            bytes += size;
            tx.execute_c(
                "INSERT INTO written_values (session, seq, digest, kid, nonce, ciphertext)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &session,
                    &n,
                    &v.digest,
                    &sealed.kid.0,
                    &sealed.nonce,
                    &sealed.ciphertext,
                ],
            )
            .await
            .map_err(db)?;
        }
        tx.execute_c(
            "UPDATE written_sets SET count = $2, bytes = $3, is_full = $4 WHERE session = $1",
            &[&session, &n, &bytes, &full],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(full)
    }

    async fn mark_written_full(&self, session: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute_c(
                "INSERT INTO written_sets (session, count, bytes, is_full) VALUES ($1, 0, 0, TRUE)
                 ON CONFLICT (session) DO UPDATE SET is_full = TRUE",
                &[&session],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn wrote_any(&self, session: &str, digests: &[String]) -> Result<bool, StoreError> {
        self.client()
            .await?
            .query_one_c(
                "SELECT EXISTS (SELECT 1 FROM written_sets WHERE session = $1 AND is_full)
                     OR EXISTS (SELECT 1 FROM written_values
                                WHERE session = $1 AND digest = ANY($2::text[]))",
                &[&session, &digests],
            )
            .await
            .map_err(db)?
            .try_get(0)
            .map_err(db)
    }

    async fn written_since(
        &self,
        session: &str,
        after_seq: u64,
    ) -> Result<WrittenRows, StoreError> {
        let client = self.client().await?;
        let full = client
            .query_opt_c(
                "SELECT is_full FROM written_sets WHERE session = $1",
                &[&session],
            )
            .await
            .map_err(db)?
            .map(|r| get::<bool>(&r, 0, "written set"))
            .transpose()?
            .unwrap_or(false);
        let rows = client
            .query_c(
                "SELECT seq, digest, kid, nonce, ciphertext FROM written_values
                 WHERE session = $1 AND seq > $2 ORDER BY seq",
                &[&session, &crate::task_state::bound(after_seq)],
            )
            .await
            .map_err(db)?;
        drop(client);
        let mut values = Vec::with_capacity(rows.len());
        for r in &rows {
            let seq: i64 = get(r, 0, "written value")?;
            let digest: String = get(r, 1, "written value")?;
            let sealed = sealed_at(r, 2, "written value")?;
            values.push((
                uint(seq),
                crate::task_state::open_written(&self.keys, session, &digest, &sealed)?,
            ));
        }
        Ok(WrittenRows { values, full })
    }
}
