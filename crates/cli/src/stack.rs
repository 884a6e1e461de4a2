//! Assembling a gateway from state, policy files, configuration and upstream specs.

use crate::state;
use anyhow::{Context, Result, bail};
use secureclaw_core::store::Store;
use secureclaw_gateway::{Gateway, GatewayConfig, RmcpConnector, UpstreamSpec, system_clock};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{PgStore, SqliteStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Load the default policy set plus `files`; an invalid set is an error naming the file.
pub fn load_policy(files: &[PathBuf]) -> Result<CedarPolicy> {
    let mut extra = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("cannot read policy file `{}`", f.display()))?;
        extra.push((f.display().to_string(), text));
    }
    CedarPolicy::load(&extra).map_err(|e| anyhow::anyhow!("policy set rejected: {e}"))
}

/// Open keys (from `dir`, or the key file or environment as always) and the store: the
/// PostgreSQL database at `store_url` (`postgres://…` or `postgresql://…`) when one is given,
/// else the embedded SQLite database in `dir`. Never falls back from one to the other.
pub async fn open_state(
    dir: &Path,
    store_url: Option<&str>,
) -> Result<(Arc<secureclaw_core::keys::KeyRing>, Arc<dyn Store>)> {
    state::ensure_dir(dir)?;
    let keys = Arc::new(state::load_keys(dir, None)?);
    state::register_own_secrets(dir, &keys, store_url);
    if let Some(url) = store_url {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            bail!("store url must start with `postgres://` or `postgresql://`");
        }
        // The URL may carry a password: never print it.
        let store = PgStore::connect(url, keys.clone())
            .await
            .map_err(|e| {
                let hint = if e.to_string().contains("permission denied") {
                    "; the store's role must be able to create tables: make it the database's \
                     owner (`createdb -O <role> <db>`), or `GRANT CREATE ON SCHEMA public TO <role>` \
                     (PostgreSQL 15 no longer grants that to everyone)"
                } else {
                    ""
                };
                anyhow::anyhow!("cannot open the PostgreSQL store: {e}{hint}")
            })?;
        let store: Arc<dyn Store> = Arc::new(store);
        check_key_ring(dir, &keys, store.as_ref()).await?;
        return Ok((keys, store));
    }
    let db = state::db_path(dir);
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&db, keys.clone())
            .with_context(|| format!("cannot open database `{}`", db.display()))?,
    );
    check_key_ring(dir, &keys, store.as_ref()).await?;
    Ok((keys, store))
}

/// Refuse a key ring that did not write this store: the first audit record (after an archive:
/// the checkpoints and the first record kept) must verify with it. A replica started without the shared `keys.json` would otherwise generate its own ring,
/// serve, and break the shared audit chain for good (new-user trial), and an operator command
/// run with another ring would report tampering that never happened.
async fn check_key_ring(
    dir: &Path,
    keys: &secureclaw_core::keys::KeyRing,
    store: &dyn Store,
) -> Result<()> {
    // After an archive the log starts at the latest checkpoint: the checkpoints (MACed with
    // the audit key) and the first record kept must verify.
    let checkpoints = store
        .audit_checkpoints()
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the audit log: {e}"))?;
    let checked = match secureclaw_core::audit::verify_checkpoints(keys, &checkpoints) {
        Ok(mut start) => {
            let first = store
                .audit_records(start.last_seq().saturating_add(1), 1)
                .await
                .map_err(|e| anyhow::anyhow!("cannot read the audit log: {e}"))?;
            first.first().map_or(Ok(()), |r| start.push(keys, r))
        }
        Err(e) => Err(e),
    };
    if let Err(e) = checked {
        let why = match e {
            secureclaw_core::audit::AuditError::Key { err, .. } => err.to_string(),
            _ => "its first record does not verify with this key ring".to_owned(),
        };
        bail!(
            "the key ring in use cannot verify this store's audit log ({why}): every gateway and \
             operator command on one store must use the same keys — copy keys.json from the \
             gateway that created the store over `{}` (or point $SECURECLAW_KEYS_FILE at it); \
             nothing was written to the store",
            dir.join("keys.json").display()
        );
    }
    Ok(())
}

/// [`open_state`] for operator commands (`approvals`, `audit`, `trace`): the state must exist.
/// Without `store_url`, a missing SQLite database or key ring is an error naming the state
/// directory and how to point at the right one, instead of a new empty store (whose empty
/// approvals list would look like "nothing pending").
pub async fn open_existing_state(
    dir: &Path,
    store_url: Option<&str>,
) -> Result<(Arc<secureclaw_core::keys::KeyRing>, Arc<dyn Store>)> {
    let external_keys = std::env::var_os("SECURECLAW_KEYS").is_some()
        || std::env::var_os("SECURECLAW_KEYS_FILE").is_some();
    if !external_keys && !dir.join("keys.json").is_file() {
        bail!(
            "no SecureClaw state in `{}` (no keys.json, and none in $SECURECLAW_KEYS[_FILE]): \
             pass the state directory the gateway uses (--state-dir DIR or $SECURECLAW_STATE_DIR)",
            dir.display()
        );
    }
    if store_url.is_none() && !state::db_path(dir).is_file() {
        bail!(
            "no SecureClaw database at `{}`: pass the state directory the gateway uses \
             (--state-dir DIR), or --store postgres://… if it keeps its state in PostgreSQL",
            state::db_path(dir).display()
        );
    }
    open_state(dir, store_url).await
}

/// Start the gateway over the store of [`open_state`]; it connects every upstream of `specs`
/// itself ([`RmcpConnector`]) and keeps the connections.
pub async fn start(
    dir: &Path,
    store_url: Option<&str>,
    policy_files: &[PathBuf],
    config: GatewayConfig,
    specs: Vec<UpstreamSpec>,
) -> Result<Gateway> {
    let policy = load_policy(policy_files)?;
    let (keys, store) = open_state(dir, store_url).await?;
    let gw = Gateway::start(
        keys,
        store,
        Arc::new(policy),
        config,
        specs,
        &RmcpConnector,
        system_clock(),
    )
    .await?;
    Ok(gw)
}
