//! The state directory: key ring, SQLite database and operator token.
//!
//! Default location: `$SECURECLAW_HOME`, else `$XDG_STATE_HOME/secureclaw`, else
//! `~/.local/state/secureclaw`. Keys are generated on first run into `keys.json` with mode
//! 0600, or loaded from the file named by `--keys` / `$SECURECLAW_KEYS_FILE`, or from the JSON
//! in `$SECURECLAW_KEYS`.

use anyhow::{Context, Result, bail};
use secureclaw_core::keys::{KeyRing, KeyRingFile};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where state lives, resolved from flags and environment.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SECURECLAW_HOME") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("secureclaw");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/state/secureclaw")
}

/// Create `dir` (mode 0700).
pub fn ensure_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create state directory `{}`", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict permissions of `{}`", dir.display()))?;
    }
    Ok(())
}

/// Write `bytes` to a new file with mode 0600 (fails if it exists).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .with_context(|| format!("cannot create `{}`", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    f.sync_all().ok();
    Ok(())
}

pub fn random_fill(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        // No entropy means no safe keys; refuse loudly rather than continue.
        eprintln!("secureclaw: the operating system random source failed");
        std::process::exit(70);
    }
}

/// Load the key ring (see module docs), generating one in `dir/keys.json` on first run.
pub fn load_keys(dir: &Path, keys_file: Option<&Path>) -> Result<KeyRing> {
    let parse = |text: &str, origin: &str| -> Result<KeyRing> {
        let file: KeyRingFile = serde_json::from_str(text)
            .with_context(|| format!("{origin}: not a valid key ring file"))?;
        KeyRing::from_file(&file).with_context(|| format!("{origin}: invalid key ring"))
    };
    if let Ok(json) = std::env::var("SECURECLAW_KEYS") {
        return parse(&json, "$SECURECLAW_KEYS");
    }
    let explicit = keys_file
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SECURECLAW_KEYS_FILE").map(PathBuf::from));
    if let Some(path) = explicit {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read key file `{}`", path.display()))?;
        return parse(&text, &path.display().to_string());
    }
    let path = dir.join("keys.json");
    if path.exists() {
        check_private(&path)?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read `{}`", path.display()))?;
        return parse(&text, &path.display().to_string());
    }
    ensure_dir(dir)?;
    let ring = KeyRing::generate(&mut random_fill);
    let json = serde_json::to_vec_pretty(&ring.to_file())?;
    write_private(&path, &json)?;
    tracing::info!(path = %path.display(), "generated a new key ring");
    Ok(ring)
}

/// Save a modified key ring over `dir/keys.json` (rotation, retirement).
pub fn save_keys(dir: &Path, ring: &KeyRing) -> Result<()> {
    let path = dir.join("keys.json");
    let tmp = dir.join("keys.json.new");
    let _ = std::fs::remove_file(&tmp);
    write_private(&tmp, &serde_json::to_vec_pretty(&ring.to_file())?)?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot replace `{}`", path.display()))?;
    Ok(())
}

fn check_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            bail!(
                "`{}` is readable by other users (mode {:o}); run `chmod 600 {}`",
                path.display(),
                mode & 0o777,
                path.display()
            );
        }
    }
    Ok(())
}

/// The operator token: `$SECURECLAW_OPERATOR_TOKEN`, else `dir/operator.token` (generated).
/// The process that holds it registers it with the detectors (never shown to the runtime).
pub fn operator_token(dir: &Path) -> Result<String> {
    if let Ok(t) = std::env::var("SECURECLAW_OPERATOR_TOKEN") {
        if t.len() < 16 {
            bail!("$SECURECLAW_OPERATOR_TOKEN must be at least 16 characters");
        }
        mask_operator_token(&t);
        return Ok(t);
    }
    let path = dir.join("operator.token");
    if path.exists() {
        check_private(&path)?;
        let token = std::fs::read_to_string(&path)?.trim().to_owned();
        mask_operator_token(&token);
        return Ok(token);
    }
    ensure_dir(dir)?;
    let mut bytes = [0u8; 24];
    random_fill(&mut bytes);
    let token = format!("sco_{}", secureclaw_core::encoding::base32(&bytes));
    write_private(&path, token.as_bytes())?;
    mask_operator_token(&token);
    Ok(token)
}

/// Where the operator token comes from, for start-up messages: `from $SECURECLAW_OPERATOR_TOKEN`
/// when that is set (no file is written then), otherwise `in <dir>/operator.token`.
pub fn operator_token_source(dir: &Path) -> String {
    if std::env::var_os("SECURECLAW_OPERATOR_TOKEN").is_some() {
        "from $SECURECLAW_OPERATOR_TOKEN".to_owned()
    } else {
        format!("in {}", dir.join("operator.token").display())
    }
}

/// Register the operator token (and its body without `sco_`) with the detectors: a token this
/// program generated (`sco_` + base32) is random, so its fragments are found too
/// ([`secureclaw_core::detect::add_random_secret`]); one the operator chose is found whole.
fn mask_operator_token(token: &str) {
    use secureclaw_core::detect::{add_exact_secret, add_random_secret};
    match token.strip_prefix("sco_") {
        Some(body) => {
            add_random_secret(token);
            add_random_secret(body);
        }
        None => add_exact_secret(token),
    }
}

/// Register the secrets this process holds with the detectors
/// ([`secureclaw_core::detect::add_exact_secret`]), so that no tool result, tool listing or
/// upstream log line shows them to the runtime in any format the detectors cannot otherwise
/// know: the operator token (and its body without `sco_`; `$SECURECLAW_OPERATOR_TOKEN` is
/// free-form), every key of the key ring (its 64 hex characters), and the password of a
/// PostgreSQL store URL. Reads the token file only if it exists (never creates it).
pub fn register_own_secrets(
    dir: &Path,
    keys: &secureclaw_core::keys::KeyRing,
    store_url: Option<&str>,
) {
    use secureclaw_core::detect::add_exact_secret;
    let token = std::env::var("SECURECLAW_OPERATOR_TOKEN").ok().or_else(|| {
        std::fs::read_to_string(dir.join("operator.token"))
            .ok()
            .map(|t| t.trim().to_owned())
    });
    if let Some(token) = token {
        mask_operator_token(&token);
    }
    for key in keys.to_file().keys {
        secureclaw_core::detect::add_random_secret(&key.secret_hex);
    }
    if let Some(password) = store_url
        .and_then(|u| u.parse::<tokio_postgres::Config>().ok())
        .and_then(|c| c.get_password().map(<[u8]>::to_vec))
        .and_then(|p| String::from_utf8(p).ok())
    {
        add_exact_secret(&password);
    }
}

/// Path of the database in `dir`.
pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("secureclaw.db")
}
