//! Schema migrations, tracked in `PRAGMA user_version`.
//!
//! Migration `n` (1-based) brings the schema from version `n - 1` to `n`. Migrations are only
//! ever appended; a released migration is never edited.

use crate::{StoreError, sql};
use rusqlite::{Connection, TransactionBehavior};

/// Version 1: every table, index and integrity trigger.
const V1: &str = r"
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    caller      TEXT NOT NULL,
    envelope    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE vault_objects (
    object_id   TEXT NOT NULL,
    version     INTEGER NOT NULL,
    kid         TEXT NOT NULL,
    nonce       BLOB NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BLOB NOT NULL,
    PRIMARY KEY (object_id, version)
) STRICT;
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX vault_objects_nonce ON vault_objects (kid, nonce);

CREATE TABLE handles (
    id             TEXT PRIMARY KEY,
    caller         TEXT NOT NULL,
    session        TEXT NOT NULL,
    object_id      TEXT NOT NULL,
    version        INTEGER NOT NULL,
    label          TEXT NOT NULL,
    sensitivity    TEXT NOT NULL CHECK (sensitivity IN ('low', 'medium', 'high')),
    source         TEXT NOT NULL,
    anchored       INTEGER NOT NULL CHECK (anchored IN (0, 1)),
    allowed_sinks  TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    revoked        INTEGER NOT NULL CHECK (revoked IN (0, 1))
) STRICT;
CREATE INDEX handles_session ON handles (session, created_at);

CREATE TABLE actions (
    action_id           TEXT PRIMARY KEY,
    session             TEXT NOT NULL,
    caller              TEXT NOT NULL,
    tool                TEXT NOT NULL,
    binding_kid         TEXT NOT NULL,
    binding             TEXT NOT NULL,
    needs_confirmation  INTEGER NOT NULL CHECK (needs_confirmation IN (0, 1)),
    created_at          INTEGER NOT NULL,
    request_json        TEXT NOT NULL,
    display             TEXT NOT NULL
) STRICT;

CREATE TABLE approvals (
    action_id     TEXT PRIMARY KEY REFERENCES actions (action_id),
    state         TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    decided_by    TEXT,
    confirmation  TEXT
) STRICT;
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE TRIGGER approvals_decided_once BEFORE UPDATE ON approvals
WHEN OLD.state <> 'pending' OR NEW.action_id IS NOT OLD.action_id
BEGIN
    SELECT RAISE(ABORT, 'a decided approval cannot change');
END;

CREATE TABLE ledger (
    action_id      TEXT PRIMARY KEY,
    binding_kid    TEXT NOT NULL,
    binding        TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('reserved', 'executed', 'failed')),
    reserved_at    INTEGER NOT NULL,
    finished_at    INTEGER,
    result_digest  TEXT,
    failure        TEXT
) STRICT;
CREATE INDEX ledger_state ON ledger (state, reserved_at);
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'ledger entries cannot be deleted');
END;
CREATE TRIGGER ledger_forward_only BEFORE UPDATE ON ledger
WHEN OLD.state <> 'reserved'
  OR NEW.state = 'reserved'
  OR NEW.action_id IS NOT OLD.action_id
  OR NEW.binding_kid IS NOT OLD.binding_kid
  OR NEW.binding IS NOT OLD.binding
  OR NEW.reserved_at IS NOT OLD.reserved_at
BEGIN
    SELECT RAISE(ABORT, 'ledger entries only move from reserved to executed or failed');
END;

CREATE TABLE audit (
    seq    INTEGER PRIMARY KEY,
    kid    TEXT NOT NULL,
    prev   TEXT NOT NULL,
    mac    TEXT NOT NULL,
    kind   TEXT NOT NULL,
    at     INTEGER NOT NULL,
    event  TEXT NOT NULL
) STRICT;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
";

/// Version 2: ledger state `outcome_unknown` — a dispatched effect whose outcome the executor
/// could not learn (transport closed, upstream exited, session expired, timeout after dispatch).
/// SQLite cannot alter a CHECK constraint, so the table is rebuilt with its rows.
const V2: &str = r"
DROP TRIGGER ledger_no_delete;
DROP TRIGGER ledger_forward_only;
ALTER TABLE ledger RENAME TO ledger_v1;
CREATE TABLE ledger (
    action_id      TEXT PRIMARY KEY,
    binding_kid    TEXT NOT NULL,
    binding        TEXT NOT NULL,
    state          TEXT NOT NULL
                   CHECK (state IN ('reserved', 'executed', 'failed', 'outcome_unknown')),
    reserved_at    INTEGER NOT NULL,
    finished_at    INTEGER,
    result_digest  TEXT,
    failure        TEXT
) STRICT;
INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at, finished_at,
                    result_digest, failure)
    SELECT action_id, binding_kid, binding, state, reserved_at, finished_at, result_digest,
           failure
    FROM ledger_v1;
DROP TABLE ledger_v1;
CREATE INDEX ledger_state ON ledger (state, reserved_at);
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'ledger entries cannot be deleted');
END;
CREATE TRIGGER ledger_forward_only BEFORE UPDATE ON ledger
WHEN OLD.state <> 'reserved'
  OR NEW.state = 'reserved'
  OR NEW.action_id IS NOT OLD.action_id
  OR NEW.binding_kid IS NOT OLD.binding_kid
  OR NEW.binding IS NOT OLD.binding
  OR NEW.reserved_at IS NOT OLD.reserved_at
BEGIN
    SELECT RAISE(ABORT, 'ledger entries only move from reserved to executed, failed or outcome_unknown');
END;
";

/// Version 3, "handle reuse" (branch wt-d, issue 11 item 10): a value read again in the same
/// session, with the same classification, keeps its handle. `reuse_key` is the keyed digest of
/// [`secureclaw_core::handle::handle_reuse_key`] (never the plaintext); `NULL` for handles
/// minted without one. Merging with another branch that appends its own migration: keep both,
/// in merge order, and renumber only the constant names — each migration is self-contained.
const V3_HANDLE_REUSE: &str = r"
ALTER TABLE handles ADD COLUMN reuse_key TEXT;
CREATE INDEX handles_reuse ON handles (session, reuse_key, created_at)
    WHERE reuse_key IS NOT NULL;
";

/// Version 4, "shared speculation budget" (issue 13 item 4): the per-session disclosure budget
/// of the speculative contracts, kept in the database so that it is spent once across every
/// process on the file and survives a restart. Counters only grow: decreasing or deleting one
/// would let a session re-spend its budget.
const V4_SPECULATION_BUDGET: &str = r"
CREATE TABLE speculation_budget (
    session  TEXT PRIMARY KEY,
    spent    INTEGER NOT NULL CHECK (spent >= 1)
);
CREATE TRIGGER speculation_budget_grows BEFORE UPDATE ON speculation_budget
    WHEN NEW.spent < OLD.spent OR NEW.session IS NOT OLD.session
BEGIN
    SELECT RAISE(ABORT, 'budget counters only grow');
END;
CREATE TRIGGER speculation_budget_no_delete BEFORE DELETE ON speculation_budget
BEGIN
    SELECT RAISE(ABORT, 'budget counters cannot be deleted');
END;
";

/// Version 5, "protected objects" (branch wt-authz, issue 11 item 3): per session, the keyed
/// digests of the objects whose content the session saw only as handles
/// ([`secureclaw_core::protect`]). Self-contained, like V3.
const V5_PROTECTED_OBJECTS: &str = r"
CREATE TABLE protected_objects (
    session  TEXT NOT NULL,
    key      TEXT NOT NULL,
    PRIMARY KEY (session, key)
) STRICT, WITHOUT ROWID;
";

/// Version 6, "task state" (branch wt-state, issues 11 and 13): per-session authorization
/// state shared by every process on the file ([`secureclaw_core::store::TaskStateStore`]).
/// `grant_uses` counts unconfirmed uses of limited task grants; `read_amounts` holds keyed
/// digests of amounts anchored reads returned; `written_sets` and `written_values` are the
/// bounded written set, each value sealed under the vault key (never in clear) and numbered
/// per session. Everything only grows. Self-contained, like V3.
const V6_TASK_STATE: &str = r"
CREATE TABLE grant_uses (
    session    TEXT NOT NULL,
    grant_key  TEXT NOT NULL,
    used       INTEGER NOT NULL CHECK (used >= 1),
    PRIMARY KEY (session, grant_key)
) STRICT;
CREATE TRIGGER grant_uses_grow BEFORE UPDATE ON grant_uses
    WHEN NEW.used < OLD.used OR NEW.session IS NOT OLD.session
      OR NEW.grant_key IS NOT OLD.grant_key
BEGIN
    SELECT RAISE(ABORT, 'grant uses only grow');
END;
CREATE TRIGGER grant_uses_no_delete BEFORE DELETE ON grant_uses
BEGIN
    SELECT RAISE(ABORT, 'grant uses cannot be deleted');
END;

CREATE TABLE read_amounts (
    session  TEXT NOT NULL,
    digest   TEXT NOT NULL,
    PRIMARY KEY (session, digest)
) STRICT, WITHOUT ROWID;

CREATE TABLE written_sets (
    session  TEXT PRIMARY KEY,
    count    INTEGER NOT NULL CHECK (count >= 0),
    bytes    INTEGER NOT NULL CHECK (bytes >= 0),
    full     INTEGER NOT NULL CHECK (full IN (0, 1))
) STRICT;
CREATE TRIGGER written_sets_grow BEFORE UPDATE ON written_sets
    WHEN NEW.count < OLD.count OR NEW.bytes < OLD.bytes OR NEW.full < OLD.full
      OR NEW.session IS NOT OLD.session
BEGIN
    SELECT RAISE(ABORT, 'written sets only grow');
END;
CREATE TRIGGER written_sets_no_delete BEFORE DELETE ON written_sets
BEGIN
    SELECT RAISE(ABORT, 'written sets cannot be deleted');
END;

CREATE TABLE written_values (
    session     TEXT NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    digest      TEXT NOT NULL,
    kid         TEXT NOT NULL,
    nonce       BLOB NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BLOB NOT NULL,
    PRIMARY KEY (session, seq)
) STRICT;
CREATE UNIQUE INDEX written_values_digest ON written_values (session, digest);
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX written_values_nonce ON written_values (kid, nonce);
CREATE TRIGGER written_values_no_update BEFORE UPDATE ON written_values
BEGIN
    SELECT RAISE(ABORT, 'written values cannot change');
END;
CREATE TRIGGER written_values_no_delete BEFORE DELETE ON written_values
BEGIN
    SELECT RAISE(ABORT, 'written values cannot be deleted');
END;
";

/// Version 7, "shared speculation state and rates" (branch wt-spec, issue 13 item 4, issue 12
/// item 6): the branch states of speculative calls (`spec_branches`: a branch is `pending`
/// once a call is held for it and moves once to `promoted` or `abandoned`, never back), the
/// held calls themselves (`held_calls`, sealed under the vault key, deleted when their branch
/// settles) with their per-session totals and sequence (`held_sessions`, locked by every hold
/// and settlement), and the rate-limit token buckets per session (`*`) and per (session,
/// tool) (`t:<tool>`). Self-contained, like V3.
const V7_SPECULATION_STATE: &str = r"
CREATE TABLE spec_branches (
    session  TEXT NOT NULL,
    branch   TEXT NOT NULL,
    state    TEXT NOT NULL CHECK (state IN ('pending', 'promoted', 'abandoned')),
    PRIMARY KEY (session, branch)
) STRICT;
CREATE TRIGGER spec_branches_settle_once BEFORE UPDATE ON spec_branches
    WHEN OLD.state <> 'pending' OR NEW.state = 'pending'
      OR NEW.session IS NOT OLD.session OR NEW.branch IS NOT OLD.branch
BEGIN
    SELECT RAISE(ABORT, 'a branch settles once');
END;
CREATE TRIGGER spec_branches_no_delete BEFORE DELETE ON spec_branches
BEGIN
    SELECT RAISE(ABORT, 'branch states cannot be deleted');
END;

CREATE TABLE held_sessions (
    session   TEXT PRIMARY KEY,
    calls     INTEGER NOT NULL CHECK (calls >= 0),
    bytes     INTEGER NOT NULL CHECK (bytes >= 0),
    next_seq  INTEGER NOT NULL CHECK (next_seq >= 0)
) STRICT;

CREATE TABLE held_calls (
    session     TEXT NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    branch      TEXT NOT NULL,
    bytes       INTEGER NOT NULL CHECK (bytes >= 0),
    kid         TEXT NOT NULL,
    nonce       BLOB NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BLOB NOT NULL,
    PRIMARY KEY (session, seq)
) STRICT;
CREATE INDEX held_calls_branch ON held_calls (session, branch, seq);
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX held_calls_nonce ON held_calls (kid, nonce);
CREATE TRIGGER held_calls_no_update BEFORE UPDATE ON held_calls
BEGIN
    SELECT RAISE(ABORT, 'held calls cannot change');
END;

CREATE TABLE rate_buckets (
    session       TEXT NOT NULL,
    scope         TEXT NOT NULL,
    milli_tokens  INTEGER NOT NULL CHECK (milli_tokens >= 0),
    at            INTEGER NOT NULL,
    PRIMARY KEY (session, scope)
) STRICT;
";

/// Version 8: actions found by session and binding (an identical re-issue finds its
/// approval without `_meta`).
const V8_ACTIONS_BY_BINDING: &str = "
CREATE INDEX actions_session_binding ON actions (session, binding);
";

/// Version 9: tool-definition pins (issue 16 item 4).
const V9_TOOL_PINS: &str = "
CREATE TABLE tool_pins (
    upstream    TEXT NOT NULL,
    tool        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    definition  TEXT NOT NULL,
    pinned_at   INTEGER NOT NULL,
    PRIMARY KEY (upstream, tool)
) STRICT;
";

/// Version 10, "retention" (issue 14 item 5): the indexes the retention sweep needs (expired
/// sessions and handles oldest first; the handles that still reference a vault object), and
/// the no-delete triggers of the grow-only per-session tables relaxed to "not while the
/// session's record exists": the sweep deletes a session's record first, then its counters,
/// in one transaction, so a stored session never gets a budget, a grant use or a branch back.
const V10_RETENTION: &str = "
CREATE INDEX sessions_expiry ON sessions (expires_at);
CREATE INDEX handles_expiry ON handles (expires_at);
CREATE INDEX handles_object ON handles (object_id);

DROP TRIGGER speculation_budget_no_delete;
CREATE TRIGGER speculation_budget_no_delete BEFORE DELETE ON speculation_budget
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session)
BEGIN
    SELECT RAISE(ABORT, 'budget counters cannot be deleted while their session exists');
END;
DROP TRIGGER grant_uses_no_delete;
CREATE TRIGGER grant_uses_no_delete BEFORE DELETE ON grant_uses
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session)
BEGIN
    SELECT RAISE(ABORT, 'grant uses cannot be deleted while their session exists');
END;
DROP TRIGGER written_sets_no_delete;
CREATE TRIGGER written_sets_no_delete BEFORE DELETE ON written_sets
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session)
BEGIN
    SELECT RAISE(ABORT, 'written sets cannot be deleted while their session exists');
END;
DROP TRIGGER written_values_no_delete;
CREATE TRIGGER written_values_no_delete BEFORE DELETE ON written_values
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session)
BEGIN
    SELECT RAISE(ABORT, 'written values cannot be deleted while their session exists');
END;
DROP TRIGGER spec_branches_no_delete;
CREATE TRIGGER spec_branches_no_delete BEFORE DELETE ON spec_branches
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session)
BEGIN
    SELECT RAISE(ABORT, 'branch states cannot be deleted while their session exists');
END;
";

/// Version 11: standing grants (issue 15 item 1). A use is taken by one conditional `UPDATE`
/// (`used < max_uses`, not expired, not revoked); the triggers keep a grant's binding fixed,
/// its count growing and its revocation final.
const V11_STANDING_GRANTS: &str = "
CREATE TABLE standing_grants (
    id              TEXT PRIMARY KEY,
    session         TEXT NOT NULL,
    task_digest     TEXT NOT NULL,
    upstream        TEXT NOT NULL,
    tool            TEXT NOT NULL,
    action_id       TEXT NOT NULL,
    arguments_json  TEXT NOT NULL,
    display         TEXT NOT NULL,
    max_amount      INTEGER,
    created_by      TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    max_uses        INTEGER,
    used            INTEGER NOT NULL DEFAULT 0,
    revoked_by      TEXT,
    revoked_at      INTEGER
) STRICT;
CREATE INDEX standing_grants_session_tool ON standing_grants (session, tool);
CREATE TRIGGER standing_grants_fixed BEFORE UPDATE ON standing_grants
    WHEN NEW.id IS NOT OLD.id OR NEW.session IS NOT OLD.session
      OR NEW.task_digest IS NOT OLD.task_digest OR NEW.upstream IS NOT OLD.upstream
      OR NEW.tool IS NOT OLD.tool OR NEW.action_id IS NOT OLD.action_id
      OR NEW.arguments_json IS NOT OLD.arguments_json OR NEW.max_amount IS NOT OLD.max_amount
      OR NEW.expires_at IS NOT OLD.expires_at OR NEW.max_uses IS NOT OLD.max_uses
      OR NEW.used < OLD.used
      OR (OLD.revoked_at IS NOT NULL AND (NEW.revoked_at IS NOT OLD.revoked_at
                                          OR NEW.revoked_by IS NOT OLD.revoked_by))
BEGIN
    SELECT RAISE(ABORT, 'a standing grant only counts uses and is revoked once');
END;
";

/// Version 12, "audit archive" (issue 14 item 5): archive checkpoints
/// ([`secureclaw_core::audit::AuditCheckpoint`]), append-only, and the audit table's no-delete
/// trigger relaxed to "not past the latest checkpoint": a record can be deleted only once a
/// checkpoint (stored first, in the same transaction) covers it.
const V12_AUDIT_ARCHIVE: &str = "
CREATE TABLE audit_checkpoints (
    seq             INTEGER PRIMARY KEY,
    first_seq       INTEGER NOT NULL,
    mac             TEXT NOT NULL,
    count           INTEGER NOT NULL,
    archive_sha256  TEXT NOT NULL,
    archive         TEXT NOT NULL,
    at              INTEGER NOT NULL,
    prev            TEXT NOT NULL,
    kid             TEXT NOT NULL,
    checkpoint_mac  TEXT NOT NULL
) STRICT;
CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'audit checkpoints cannot change');
END;
CREATE TRIGGER audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'audit checkpoints cannot be deleted');
END;
DROP TRIGGER audit_no_delete;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    WHEN OLD.seq > coalesce((SELECT max(seq) FROM audit_checkpoints), 0)
BEGIN
    SELECT RAISE(ABORT, 'audit records can be deleted only once a checkpoint covers them');
END;
";

/// All migrations, in order.
const MIGRATIONS: &[&str] = &[
    V1,
    V2,
    V3_HANDLE_REUSE,
    V4_SPECULATION_BUDGET,
    V5_PROTECTED_OBJECTS,
    V6_TASK_STATE,
    V7_SPECULATION_STATE,
    V8_ACTIONS_BY_BINDING,
    V9_TOOL_PINS,
    V10_RETENTION,
    V11_STANDING_GRANTS,
    V12_AUDIT_ARCHIVE,
];

/// `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> Result<u32, StoreError> {
    let v: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql)?;
    u32::try_from(v)
        .map_err(|_| StoreError::Corrupt(format!("schema version `{v}` is out of range")))
}

/// Apply every migration above the file's version, atomically.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let supported = u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX);
    // Immediate: two processes opening a fresh file at once must not both migrate.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql)?;
    let found = user_version(&tx)?;
    if found > supported {
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    for (version, migration) in (1u32..)
        .zip(MIGRATIONS)
        .skip(usize::try_from(found).unwrap_or(usize::MAX))
    {
        tx.execute_batch(migration).map_err(sql)?;
        tx.pragma_update(None, "user_version", version)
            .map_err(sql)?;
    }
    tx.commit().map_err(sql)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// A version-1 file keeps its ledger rows and accepts `outcome_unknown` after migration.
    #[test]
    fn v2_keeps_ledger_rows_and_allows_outcome_unknown() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            "INSERT INTO ledger (action_id, binding_kid, binding, state, reserved_at)
             VALUES ('a', 'k', 'b', 'reserved', 1), ('c', 'k', 'b', 'reserved', 2);
             UPDATE ledger SET state = 'executed', finished_at = 3, result_digest = 'd'
             WHERE action_id = 'c';",
        )
        .unwrap();
        assert!(
            conn.execute(
                "UPDATE ledger SET state = 'outcome_unknown' WHERE action_id = 'a'",
                []
            )
            .is_err(),
            "version 1 refuses the new state"
        );
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 12);
        let rows: Vec<(String, String)> = conn
            .prepare("SELECT action_id, state FROM ledger ORDER BY action_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                ("a".into(), "reserved".into()),
                ("c".into(), "executed".into())
            ]
        );
        conn.execute(
            "UPDATE ledger SET state = 'outcome_unknown' WHERE action_id = 'a'",
            [],
        )
        .unwrap();
        assert!(conn.execute("DELETE FROM ledger", []).is_err());
        assert!(
            conn.execute(
                "UPDATE ledger SET state = 'reserved' WHERE action_id = 'a'",
                []
            )
            .is_err()
        );
    }

    /// A version-2 file keeps its handle rows (without a reuse key) after migration 3.
    #[test]
    fn v3_keeps_handle_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        conn.execute_batch(V2).unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute_batch(
            "INSERT INTO handles VALUES ('h1', 'alice', 's1', 'o1', 1, 'iban', 'high', 'x__y', 1,
             '[]', 1, 2, 0);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 12);
        let key: Option<String> = conn
            .query_row("SELECT reuse_key FROM handles WHERE id = 'h1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(key, None);
    }
}
