//! Vault objects: protected values, encrypted at rest (DESIGN.md §3 "Handles").
//!
//! Each (object id, version) row holds the vault key id, the 12-byte nonce and the
//! ChaCha20-Poly1305 ciphertext from [`secureclaw_core::vault::seal`]. The associated data is
//! `<object id>@v<version>`, so a ciphertext copied to another object or another version of the
//! same object does not decrypt. A unique index on (key id, nonce) refuses a reused nonce.

use crate::Cached;
use crate::{SqliteStore, StoreError, int, sql};
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use secureclaw_core::KeyRing;
use secureclaw_core::keys::KeyId;
use secureclaw_core::vault::{self, SealedValue, VaultError};
use zeroize::Zeroizing;

/// The associated data binding a ciphertext to its object and version. Unambiguous: the
/// version is the all-digit suffix after the last `@v`.
fn aad(object_id: &str, version: u64) -> String {
    format!("{object_id}@v{version}")
}

impl SqliteStore {
    /// Encrypt `plaintext` under the active vault key and store it as `version` of `object_id`.
    ///
    /// `nonce` must be 12 fresh random bytes. Versions are immutable: storing an existing
    /// (object id, version) again is refused.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version exists; [`StoreError::Invalid`] if `nonce` was
    /// already used under the active vault key; [`StoreError::Key`] if the ring has no vault
    /// key; [`StoreError::Unavailable`].
    pub fn put_object(
        &self,
        object_id: &str,
        version: u64,
        plaintext: &[u8],
        nonce: [u8; 12],
    ) -> Result<(), StoreError> {
        let sealed = vault::seal(&self.keys, &aad(object_id, version), plaintext, nonce)
            .map_err(|e| vault_error("vault value", e))?;
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let nonce_used = tx
            .query_row_cached(
                "SELECT 1 FROM vault_objects WHERE kid = ?1 AND nonce = ?2",
                params![sealed.kid.0, sealed.nonce],
                |_| Ok(()),
            )
            .optional()
            .map_err(sql)?
            .is_some();
        if nonce_used {
            return Err(StoreError::Invalid(format!(
                "nonce already used under vault key `{}`",
                sealed.kid
            )));
        }
        let inserted = tx
            .execute_cached(
                "INSERT INTO vault_objects (object_id, version, kid, nonce, ciphertext) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (object_id, version) DO NOTHING",
                params![object_id, int(version), sealed.kid.0, sealed.nonce, sealed.ciphertext],
            )
            .map_err(sql)?;
        if inserted != 1 {
            return Err(StoreError::Conflict(format!(
                "vault object `{object_id}` version {version} already exists"
            )));
        }
        tx.commit().map_err(sql)
    }

    /// The plaintext of the highest stored version of `object_id`, or `None` if there is none.
    /// The buffer is zeroed on drop.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if the ciphertext does not decrypt (tampered, moved, wrong key);
    /// [`StoreError::Key`] if its vault key is unknown or retired; [`StoreError::Unavailable`].
    pub fn object_value(&self, object_id: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        self.load_object(object_id, None)
    }

    /// The plaintext of exactly `version` of `object_id` (the version a handle record names),
    /// or `None` if that version is not stored.
    ///
    /// # Errors
    /// As [`SqliteStore::object_value`].
    pub fn object_value_at(
        &self,
        object_id: &str,
        version: u64,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        self.load_object(object_id, Some(version))
    }

    fn load_object(
        &self,
        object_id: &str,
        version: Option<u64>,
    ) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        let conn = self.conn()?;
        let row = conn
            .query_row_cached(
                "SELECT version, kid, nonce, ciphertext FROM vault_objects
                 WHERE object_id = ?1 AND (?2 IS NULL OR version = ?2)
                 ORDER BY version DESC LIMIT 1",
                params![object_id, version.map(int)],
                |r| Ok((r.get::<_, i64>(0)?, sealed_at(r, 1)?)),
            )
            .optional()
            .map_err(sql)?;
        drop(conn);
        let Some((stored_version, sealed)) = row else {
            return Ok(None);
        };
        vault::open(
            &self.keys,
            &aad(object_id, crate::uint(stored_version)),
            &sealed,
        )
        .map(Some)
        .map_err(|e| vault_error("vault value", e))
    }
}

/// A vault failure as a store error; `what` names the sealed value (`vault value`, `held call`,
/// `written value`) in the message of a ciphertext that does not decrypt.
pub(crate) fn vault_error(what: &str, e: VaultError) -> StoreError {
    match e {
        VaultError::Key(k) => StoreError::Key(k),
        VaultError::Decrypt => StoreError::Corrupt(format!("{what} does not decrypt")),
    }
}

/// Seal the text `plain` under the active vault key with a fresh random nonce, bound to `aad`
/// (the sealed rows of held calls and written values).
pub(crate) fn seal_text(
    keys: &KeyRing,
    aad: &str,
    plain: &str,
    what: &str,
) -> Result<SealedValue, StoreError> {
    let mut nonce = [0u8; 12];
    getrandom::fill(&mut nonce)
        .map_err(|e| StoreError::Unavailable(format!("random source failed: {e}")))?;
    vault::seal(keys, aad, plain.as_bytes(), nonce).map_err(|e| vault_error(what, e))
}

/// Open a value sealed by [`seal_text`].
pub(crate) fn open_text(
    keys: &KeyRing,
    aad: &str,
    sealed: &SealedValue,
    what: &str,
) -> Result<String, StoreError> {
    let plain = vault::open(keys, aad, sealed).map_err(|e| vault_error(what, e))?;
    String::from_utf8(plain.to_vec())
        .map_err(|_| StoreError::Corrupt(format!("{what} is not UTF-8")))
}

/// The sealed value in the columns `kid, nonce, ciphertext` starting at column `at`.
pub(crate) fn sealed_at(r: &Row<'_>, at: usize) -> rusqlite::Result<SealedValue> {
    Ok(SealedValue {
        kid: KeyId(r.get(at)?),
        nonce: r.get(at + 1)?,
        ciphertext: r.get(at + 2)?,
    })
}
