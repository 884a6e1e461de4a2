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
        return Ok((keys, Arc::new(store)));
    }
    let db = state::db_path(dir);
    let store = SqliteStore::open(&db, keys.clone())
        .with_context(|| format!("cannot open database `{}`", db.display()))?;
    Ok((keys, Arc::new(store)))
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
