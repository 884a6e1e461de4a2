//! PostgreSQL schema migrations, tracked in the table `secureclaw_schema` (one row per
//! applied version).
//!
//! Migration `n` (1-based) brings the schema from version `n - 1` to `n`. Migrations are only
//! ever appended; a released migration is never edited. They run in one transaction under a
//! transaction-scoped advisory lock, so replicas starting at once apply each exactly once.

use super::db;
use secureclaw_core::store::StoreError;

/// Advisory lock key that serializes migrations ("SCMIGRAT" in ASCII).
const MIGRATE_LOCK: i64 = 0x5343_4d49_4752_4154;

/// Version 1: every table, index and integrity trigger.
const V1: &str = r"
CREATE FUNCTION secureclaw_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0];
    RETURN NULL;
END
$$;

CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    caller      TEXT NOT NULL,
    envelope    TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);

CREATE TABLE vault_objects (
    object_id   TEXT NOT NULL,
    version     BIGINT NOT NULL,
    kid         TEXT NOT NULL,
    nonce       BYTEA NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BYTEA NOT NULL,
    PRIMARY KEY (object_id, version)
);
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX vault_objects_nonce ON vault_objects (kid, nonce);

CREATE TABLE handles (
    id             TEXT PRIMARY KEY,
    caller         TEXT NOT NULL,
    session        TEXT NOT NULL,
    object_id      TEXT NOT NULL,
    version        BIGINT NOT NULL,
    label          TEXT NOT NULL,
    sensitivity    TEXT NOT NULL CHECK (sensitivity IN ('low', 'medium', 'high')),
    source         TEXT NOT NULL,
    anchored       BOOLEAN NOT NULL,
    allowed_sinks  TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    revoked        BOOLEAN NOT NULL,
    reuse_key      TEXT
);
CREATE INDEX handles_session ON handles (session, created_at);
CREATE INDEX handles_reuse ON handles (session, reuse_key, created_at)
    WHERE reuse_key IS NOT NULL;

CREATE TABLE actions (
    action_id           TEXT PRIMARY KEY,
    session             TEXT NOT NULL,
    caller              TEXT NOT NULL,
    tool                TEXT NOT NULL,
    binding_kid         TEXT NOT NULL,
    binding             TEXT NOT NULL,
    needs_confirmation  BOOLEAN NOT NULL,
    created_at          BIGINT NOT NULL,
    request_json        TEXT NOT NULL,
    display             TEXT NOT NULL
);

CREATE TABLE approvals (
    action_id     TEXT PRIMARY KEY REFERENCES actions (action_id),
    state         TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
    created_at    BIGINT NOT NULL,
    decided_at    BIGINT,
    decided_by    TEXT,
    confirmation  TEXT
);
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE FUNCTION secureclaw_approval_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'pending' OR NEW.action_id IS DISTINCT FROM OLD.action_id THEN
        RAISE EXCEPTION 'a decided approval cannot change';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER approvals_decided_once BEFORE UPDATE ON approvals
    FOR EACH ROW EXECUTE FUNCTION secureclaw_approval_once();
CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('approvals cannot be deleted');

-- Gateway replicas and their leases: a reservation names the replica that made it, and only a
-- reservation whose replica's lease has lapsed is reported as dangling by another replica.
CREATE TABLE replicas (
    id           TEXT PRIMARY KEY,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until  TIMESTAMPTZ NOT NULL
);

CREATE TABLE ledger (
    action_id      TEXT PRIMARY KEY,
    binding_kid    TEXT NOT NULL,
    binding        TEXT NOT NULL,
    state          TEXT NOT NULL
                   CHECK (state IN ('reserved', 'executed', 'failed', 'outcome_unknown')),
    reserved_at    BIGINT NOT NULL,
    finished_at    BIGINT,
    result_digest  TEXT,
    failure        TEXT,
    replica        TEXT NOT NULL
);
CREATE INDEX ledger_state ON ledger (state, reserved_at);
CREATE FUNCTION secureclaw_ledger_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'reserved'
       OR NEW.state = 'reserved'
       OR NEW.action_id IS DISTINCT FROM OLD.action_id
       OR NEW.binding_kid IS DISTINCT FROM OLD.binding_kid
       OR NEW.binding IS DISTINCT FROM OLD.binding
       OR NEW.reserved_at IS DISTINCT FROM OLD.reserved_at
       OR NEW.replica IS DISTINCT FROM OLD.replica THEN
        RAISE EXCEPTION 'ledger entries only move from reserved to executed, failed or outcome_unknown';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_forward_only BEFORE UPDATE ON ledger
    FOR EACH ROW EXECUTE FUNCTION secureclaw_ledger_forward();
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('ledger entries cannot be deleted');
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('ledger entries cannot be deleted');

CREATE TABLE audit (
    seq    BIGINT PRIMARY KEY CHECK (seq >= 1),
    kid    TEXT NOT NULL,
    prev   TEXT NOT NULL,
    mac    TEXT NOT NULL,
    kind   TEXT NOT NULL,
    at     BIGINT NOT NULL,
    event  TEXT NOT NULL
);
CREATE TRIGGER audit_no_update_or_delete BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('audit log is append-only');
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('audit log is append-only');
";

/// Version 2, the shared speculation budget (issue 13 item 4): the per-session disclosure
/// budget of the speculative contracts, charged by one `INSERT … ON CONFLICT DO UPDATE … WHERE
/// spent < limit` so that replicas racing for the last unit charge it once. Counters only grow:
/// decreasing or deleting one would let a session re-spend its budget.
const V2_SPECULATION_BUDGET: &str = r"
CREATE TABLE speculation_budget (
    session  TEXT PRIMARY KEY,
    spent    BIGINT NOT NULL CHECK (spent >= 1)
);
CREATE FUNCTION secureclaw_budget_grows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.spent < OLD.spent OR NEW.session IS DISTINCT FROM OLD.session THEN
        RAISE EXCEPTION 'budget counters only grow';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER speculation_budget_grows BEFORE UPDATE ON speculation_budget
    FOR EACH ROW EXECUTE FUNCTION secureclaw_budget_grows();
CREATE TRIGGER speculation_budget_no_delete BEFORE DELETE ON speculation_budget
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('budget counters cannot be deleted');
CREATE TRIGGER speculation_budget_no_truncate BEFORE TRUNCATE ON speculation_budget
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('budget counters cannot be deleted');
";

/// Version 3, "protected objects" (issue 11 item 3): per session, the keyed digests of the
/// objects whose content the session saw only as handles ([`secureclaw_core::protect`]).
const V3_PROTECTED_OBJECTS: &str = r"
CREATE TABLE protected_objects (
    session  TEXT NOT NULL,
    key      TEXT NOT NULL,
    PRIMARY KEY (session, key)
);
";

/// Version 4, "task state" (branch wt-state, issues 11 and 13): per-session authorization
/// state shared by every replica ([`secureclaw_core::store::TaskStateStore`]). `grant_uses`
/// counts unconfirmed uses of limited task grants, taken by one `INSERT … ON CONFLICT DO UPDATE
/// … WHERE used < limit`; `read_amounts` holds keyed digests of amounts anchored reads
/// returned; `written_sets` (one row per session, locked by every append) and
/// `written_values` are the bounded written set, each value sealed under the vault key and
/// numbered per session. Everything only grows: triggers refuse lowering, deleting or
/// truncating. (`is_full`, not `full`: `FULL` is a reserved word in PostgreSQL.)
const V4_TASK_STATE: &str = r"
CREATE TABLE grant_uses (
    session    TEXT NOT NULL,
    grant_key  TEXT NOT NULL,
    used       BIGINT NOT NULL CHECK (used >= 1),
    PRIMARY KEY (session, grant_key)
);
CREATE FUNCTION secureclaw_grant_uses_grow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.used < OLD.used OR NEW.session IS DISTINCT FROM OLD.session
       OR NEW.grant_key IS DISTINCT FROM OLD.grant_key THEN
        RAISE EXCEPTION 'grant uses only grow';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER grant_uses_grow BEFORE UPDATE ON grant_uses
    FOR EACH ROW EXECUTE FUNCTION secureclaw_grant_uses_grow();
CREATE TRIGGER grant_uses_no_delete BEFORE DELETE ON grant_uses
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('grant uses cannot be deleted');
CREATE TRIGGER grant_uses_no_truncate BEFORE TRUNCATE ON grant_uses
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('grant uses cannot be deleted');

CREATE TABLE read_amounts (
    session  TEXT NOT NULL,
    digest   TEXT NOT NULL,
    PRIMARY KEY (session, digest)
);

CREATE TABLE written_sets (
    session  TEXT PRIMARY KEY,
    count    BIGINT NOT NULL CHECK (count >= 0),
    bytes    BIGINT NOT NULL CHECK (bytes >= 0),
    is_full  BOOLEAN NOT NULL
);
CREATE FUNCTION secureclaw_written_sets_grow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.count < OLD.count OR NEW.bytes < OLD.bytes OR (OLD.is_full AND NOT NEW.is_full)
       OR NEW.session IS DISTINCT FROM OLD.session THEN
        RAISE EXCEPTION 'written sets only grow';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER written_sets_grow BEFORE UPDATE ON written_sets
    FOR EACH ROW EXECUTE FUNCTION secureclaw_written_sets_grow();
CREATE TRIGGER written_sets_no_delete BEFORE DELETE ON written_sets
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('written sets cannot be deleted');
CREATE TRIGGER written_sets_no_truncate BEFORE TRUNCATE ON written_sets
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('written sets cannot be deleted');

CREATE TABLE written_values (
    session     TEXT NOT NULL,
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    digest      TEXT NOT NULL,
    kid         TEXT NOT NULL,
    nonce       BYTEA NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BYTEA NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE UNIQUE INDEX written_values_digest ON written_values (session, digest);
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX written_values_nonce ON written_values (kid, nonce);
CREATE TRIGGER written_values_no_update BEFORE UPDATE ON written_values
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('written values cannot change');
CREATE TRIGGER written_values_no_delete BEFORE DELETE ON written_values
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('written values cannot be deleted');
CREATE TRIGGER written_values_no_truncate BEFORE TRUNCATE ON written_values
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('written values cannot be deleted');
";

/// Version 5, "shared speculation state and rates" (branch wt-spec, issue 13 item 4, issue 12
/// item 6): branch states (`spec_branches`: `pending` once a call is held, then once
/// `promoted` or `abandoned`, never back), held calls sealed under the vault key
/// (`held_calls`, deleted when their branch settles) with per-session totals and sequence
/// (`held_sessions`, locked by every hold and settlement), and the rate-limit token buckets
/// per session (`*`) and per (session, tool) (`t:<tool>`).
const V5_SPECULATION_STATE: &str = r"
CREATE TABLE spec_branches (
    session  TEXT NOT NULL,
    branch   TEXT NOT NULL,
    state    TEXT NOT NULL CHECK (state IN ('pending', 'promoted', 'abandoned')),
    PRIMARY KEY (session, branch)
);
CREATE FUNCTION secureclaw_branch_settles_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'pending' OR NEW.state = 'pending'
       OR NEW.session IS DISTINCT FROM OLD.session OR NEW.branch IS DISTINCT FROM OLD.branch THEN
        RAISE EXCEPTION 'a branch settles once';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER spec_branches_settle_once BEFORE UPDATE ON spec_branches
    FOR EACH ROW EXECUTE FUNCTION secureclaw_branch_settles_once();
CREATE TRIGGER spec_branches_no_delete BEFORE DELETE ON spec_branches
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('branch states cannot be deleted');
CREATE TRIGGER spec_branches_no_truncate BEFORE TRUNCATE ON spec_branches
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('branch states cannot be deleted');

CREATE TABLE held_sessions (
    session   TEXT PRIMARY KEY,
    calls     BIGINT NOT NULL CHECK (calls >= 0),
    bytes     BIGINT NOT NULL CHECK (bytes >= 0),
    next_seq  BIGINT NOT NULL CHECK (next_seq >= 0)
);

CREATE TABLE held_calls (
    session     TEXT NOT NULL,
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    branch      TEXT NOT NULL,
    bytes       BIGINT NOT NULL CHECK (bytes >= 0),
    kid         TEXT NOT NULL,
    nonce       BYTEA NOT NULL CHECK (length(nonce) = 12),
    ciphertext  BYTEA NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE INDEX held_calls_branch ON held_calls (session, branch, seq);
-- A nonce must never be reused under one ChaCha20-Poly1305 key.
CREATE UNIQUE INDEX held_calls_nonce ON held_calls (kid, nonce);
CREATE TRIGGER held_calls_no_update BEFORE UPDATE ON held_calls
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('held calls cannot change');

CREATE TABLE rate_buckets (
    session       TEXT NOT NULL,
    scope         TEXT NOT NULL,
    milli_tokens  BIGINT NOT NULL CHECK (milli_tokens >= 0),
    at            BIGINT NOT NULL,
    PRIMARY KEY (session, scope)
);
";

/// Version 6: actions found by session and binding (an identical re-issue finds its
/// approval without `_meta`).
const V6_ACTIONS_BY_BINDING: &str = r"
CREATE INDEX actions_session_binding ON actions (session, binding);
";

/// Version 7: tool-definition pins (issue 16 item 4).
const V7_TOOL_PINS: &str = r"
CREATE TABLE tool_pins (
    upstream    TEXT NOT NULL,
    tool        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    definition  TEXT NOT NULL,
    pinned_at   BIGINT NOT NULL,
    PRIMARY KEY (upstream, tool)
);
";

/// Version 8, "retention" (issue 14 item 5): the indexes the retention sweep needs (expired
/// sessions and handles oldest first; the handles that still reference a vault object), and
/// the no-delete triggers of the grow-only per-session tables relaxed to "not while the
/// session's record exists": the sweep deletes a session's record first, then its counters,
/// in one transaction, so a stored session never gets a budget, a grant use or a branch back.
/// `TRUNCATE` stays refused.
const V8_RETENTION: &str = r"
CREATE INDEX sessions_expiry ON sessions (expires_at);
CREATE INDEX handles_expiry ON handles (expires_at);
CREATE INDEX handles_object ON handles (object_id);

CREATE FUNCTION secureclaw_refuse_while_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session) THEN
        RAISE EXCEPTION '%', TG_ARGV[0];
    END IF;
    RETURN OLD;
END
$$;
DROP TRIGGER speculation_budget_no_delete ON speculation_budget;
CREATE TRIGGER speculation_budget_no_delete BEFORE DELETE ON speculation_budget
    FOR EACH ROW EXECUTE FUNCTION
    secureclaw_refuse_while_session('budget counters cannot be deleted while their session exists');
DROP TRIGGER grant_uses_no_delete ON grant_uses;
CREATE TRIGGER grant_uses_no_delete BEFORE DELETE ON grant_uses
    FOR EACH ROW EXECUTE FUNCTION
    secureclaw_refuse_while_session('grant uses cannot be deleted while their session exists');
DROP TRIGGER written_sets_no_delete ON written_sets;
CREATE TRIGGER written_sets_no_delete BEFORE DELETE ON written_sets
    FOR EACH ROW EXECUTE FUNCTION
    secureclaw_refuse_while_session('written sets cannot be deleted while their session exists');
DROP TRIGGER written_values_no_delete ON written_values;
CREATE TRIGGER written_values_no_delete BEFORE DELETE ON written_values
    FOR EACH ROW EXECUTE FUNCTION
    secureclaw_refuse_while_session('written values cannot be deleted while their session exists');
DROP TRIGGER spec_branches_no_delete ON spec_branches;
CREATE TRIGGER spec_branches_no_delete BEFORE DELETE ON spec_branches
    FOR EACH ROW EXECUTE FUNCTION
    secureclaw_refuse_while_session('branch states cannot be deleted while their session exists');
";

/// Version 9: standing grants (issue 15 item 1). A use is taken by one conditional `UPDATE`
/// (`used < max_uses`, not expired, not revoked); the trigger keeps a grant's binding fixed,
/// its count growing and its revocation final.
const V9_STANDING_GRANTS: &str = r"
CREATE TABLE standing_grants (
    id              TEXT PRIMARY KEY,
    session         TEXT NOT NULL,
    task_digest     TEXT NOT NULL,
    upstream        TEXT NOT NULL,
    tool            TEXT NOT NULL,
    action_id       TEXT NOT NULL,
    arguments_json  TEXT NOT NULL,
    display         TEXT NOT NULL,
    max_amount      BIGINT,
    created_by      TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    max_uses        BIGINT,
    used            BIGINT NOT NULL DEFAULT 0 CHECK (used >= 0),
    revoked_by      TEXT,
    revoked_at      BIGINT
);
CREATE INDEX standing_grants_session_tool ON standing_grants (session, tool);
CREATE FUNCTION secureclaw_standing_grants_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.session IS DISTINCT FROM OLD.session
       OR NEW.task_digest IS DISTINCT FROM OLD.task_digest
       OR NEW.upstream IS DISTINCT FROM OLD.upstream OR NEW.tool IS DISTINCT FROM OLD.tool
       OR NEW.action_id IS DISTINCT FROM OLD.action_id
       OR NEW.arguments_json IS DISTINCT FROM OLD.arguments_json
       OR NEW.max_amount IS DISTINCT FROM OLD.max_amount
       OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
       OR NEW.max_uses IS DISTINCT FROM OLD.max_uses OR NEW.used < OLD.used
       OR (OLD.revoked_at IS NOT NULL AND (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at
                                           OR NEW.revoked_by IS DISTINCT FROM OLD.revoked_by))
    THEN
        RAISE EXCEPTION 'a standing grant only counts uses and is revoked once';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER standing_grants_fixed BEFORE UPDATE ON standing_grants
    FOR EACH ROW EXECUTE FUNCTION secureclaw_standing_grants_fixed();
";

/// Version 10, "audit archive" (issue 14 item 5): archive checkpoints
/// ([`secureclaw_core::audit::AuditCheckpoint`]), append-only, and the audit table's delete
/// trigger relaxed to "not past the latest checkpoint": a record can be deleted only once a
/// checkpoint (stored first, in the same transaction) covers it. Updates and `TRUNCATE` stay
/// refused.
const V10_AUDIT_ARCHIVE: &str = r"
CREATE TABLE audit_checkpoints (
    seq             BIGINT PRIMARY KEY,
    first_seq       BIGINT NOT NULL,
    mac             TEXT NOT NULL,
    count           BIGINT NOT NULL,
    archive_sha256  TEXT NOT NULL,
    archive         TEXT NOT NULL,
    at              BIGINT NOT NULL,
    prev            TEXT NOT NULL,
    kid             TEXT NOT NULL,
    checkpoint_mac  TEXT NOT NULL
);
CREATE TRIGGER audit_checkpoints_no_update_or_delete BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('audit checkpoints cannot change');
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION secureclaw_refuse('audit checkpoints cannot change');

CREATE FUNCTION secureclaw_audit_delete_archived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seq > coalesce((SELECT max(seq) FROM audit_checkpoints), 0) THEN
        RAISE EXCEPTION 'audit records can be deleted only once a checkpoint covers them';
    END IF;
    RETURN OLD;
END
$$;
DROP TRIGGER audit_no_update_or_delete ON audit;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION secureclaw_refuse('audit log is append-only');
CREATE TRIGGER audit_delete_archived_only BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION secureclaw_audit_delete_archived();
";

/// All migrations, in order.
const MIGRATIONS: &[&str] = &[
    V1,
    V2_SPECULATION_BUDGET,
    V3_PROTECTED_OBJECTS,
    V4_TASK_STATE,
    V5_SPECULATION_STATE,
    V6_ACTIONS_BY_BINDING,
    V7_TOOL_PINS,
    V8_RETENTION,
    V9_STANDING_GRANTS,
    V10_AUDIT_ARCHIVE,
];

/// The highest schema version this build knows.
pub(super) fn supported() -> u32 {
    u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX)
}

/// The applied schema version (0 for an empty database).
pub(super) async fn version(client: &tokio_postgres::Transaction<'_>) -> Result<u32, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('secureclaw_schema') IS NOT NULL", &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if !exists {
        return Ok(0);
    }
    let v: Option<i32> = client
        .query_one("SELECT max(version) FROM secureclaw_schema", &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    u32::try_from(v.unwrap_or(0))
        .map_err(|_| StoreError::Corrupt(format!("schema version `{v:?}` is out of range")))
}

/// Apply every migration above the database's version, atomically.
pub(super) async fn migrate(client: &mut deadpool_postgres::Client) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
        .await
        .map_err(db)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS secureclaw_schema (
             version     INTEGER PRIMARY KEY,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(db)?;
    let found = version(&tx).await?;
    let supported = supported();
    if found > supported {
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    for (version, migration) in (1i32..)
        .zip(MIGRATIONS)
        .skip(usize::try_from(found).unwrap_or(usize::MAX))
    {
        tx.batch_execute(migration).await.map_err(db)?;
        tx.execute(
            "INSERT INTO secureclaw_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(db)?;
    }
    tx.commit().await.map_err(db)
}
