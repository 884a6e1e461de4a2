//! The group-commit writer (issue 14 item 3): one writer at a time applies the audit appends
//! and ledger outcomes of many callers in one store transaction, so concurrent callers share
//! one fsync.
//!
//! Callers queue their writes ([`GroupWriter::write`] waits until they are durable,
//! [`GroupWriter::submit`] does not). When the queue has no writer, the caller that queued
//! starts one: a task that takes everything queued (up to [`MAX_GROUP`] writes), commits it
//! with [`EffectStore::apply_group`](secureclaw_core::store::EffectStore::apply_group), answers
//! each caller, and repeats until the queue is empty. Callers that arrive while a group
//! commits wait for the next group: the batch grows with the load, and one caller alone pays
//! one transaction, as before.
//!
//! - **Order.** Groups are committed in queue order, and a group's writes in queue order, so
//!   a caller's own writes land in the order it queued them.
//! - **Failure isolation.** If a group of several callers fails, each caller's writes are
//!   retried alone, so one caller's bad write (a refused insert) fails only that caller.
//! - **Fail closed.** Every caller gets the store's answer for its own writes; a writer task
//!   that dies (its runtime shut down) drops its callers' answers, which they see as
//!   [`StoreError::Unavailable`]; the queue keeps the rest for the next writer.
//! - **Linger.** A group holding only audit records nobody waits for ([`GroupWriter::submit`]:
//!   a read's `read` record; not an effect's post-effect ledger outcome, which the next call's
//!   decisions read) waits up to [`SUBMIT_LINGER`] for
//!   more before it commits, so that one client's back-to-back calls share a transaction and
//!   an fsync instead of paying one each (BENCHMARKS.md §13). A caller that waits
//!   ([`GroupWriter::write`], [`GroupWriter::flush`]) ends the wait at once and joins the
//!   group: nobody who waits is delayed by it.
//! - **Audit chain.** The store reads the chain head inside each group's transaction (under
//!   its audit lock), so the chain stays one gap-free chain with every other appender (the
//!   CLI, other processes, other replicas).

use secureclaw_core::store::{GroupOutcome, GroupWrite, Store, StoreError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// Most writes one group commit takes (a single caller's writes are never split).
pub(crate) const MAX_GROUP: usize = 512;

/// How long a group of records nobody waits for waits for more before it commits: 10 ms. A
/// crash (SIGKILL, power loss) can lose the records queued in that window, which README "What
/// survives a crash" allows for these records only.
pub(crate) const SUBMIT_LINGER: Duration = Duration::from_millis(10);

type Reply = oneshot::Sender<Result<GroupOutcome, StoreError>>;

/// One caller's writes and where its answer goes (`None`: nobody waits).
struct Job {
    writes: Vec<GroupWrite>,
    reply: Option<Reply>,
}

impl Job {
    fn answer(self, result: Result<GroupOutcome, StoreError>) {
        match (self.reply, result) {
            // A caller that stopped waiting does not need its answer.
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            // Nobody waits for a submitted write: its loss is at least logged.
            (None, Err(e)) => {
                tracing::error!(error = %e, writes = self.writes.len(), "a record queued without waiting could not be written");
            }
            (None, Ok(_)) => {}
        }
    }
}

impl Job {
    /// Whether a group of such jobs may wait for more: nobody waits for it and it is audit
    /// records only. A ledger outcome (`executed`, `failed`, …) never waits: the next call's
    /// decisions read it (an entry still `reserved` is an outcome unknown to them).
    fn may_linger(&self) -> bool {
        self.reply.is_none()
            && self
                .writes
                .iter()
                .all(|w| matches!(w, GroupWrite::Audit(_)))
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A writer task is running (and will look at the queue again before it stops).
    writing: bool,
}

/// Lock the queue. Nothing panics while holding it; should it ever be poisoned, the queue is
/// still consistent (every change is one push or pop), so it is used as is.
fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The group-commit writer of one gateway.
pub(crate) struct GroupWriter {
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
    /// Signalled when a caller that waits queues something: ends a linger at once.
    waiter: Arc<Notify>,
    linger: Duration,
}

impl GroupWriter {
    /// A writer for `store` with the [`SUBMIT_LINGER`]; no task runs until something is queued.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self::with_linger(store, SUBMIT_LINGER)
    }

    /// A writer whose groups of records nobody waits for wait `linger` for more
    /// (`Duration::ZERO`: commit at once).
    pub(crate) fn with_linger(store: Arc<dyn Store>, linger: Duration) -> Self {
        Self {
            store,
            queue: Arc::default(),
            waiter: Arc::new(Notify::new()),
            linger,
        }
    }

    /// Queue `writes` and wait until the group holding them is committed: `Ok` means durable.
    ///
    /// # Errors
    /// The store's error for these writes (nothing of them is stored), or
    /// [`StoreError::Unavailable`] if no writer can run or it stopped before answering.
    pub(crate) async fn write(&self, writes: Vec<GroupWrite>) -> Result<GroupOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job {
            writes,
            reply: Some(reply),
        })?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("group writer stopped before answering".into()))?
    }

    /// Queue `writes` without waiting for them: they are committed with the next group. For
    /// records whose loss in a crash is acceptable (the caller's answer does not depend on
    /// them).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if no writer can run (no async runtime).
    pub(crate) fn submit(&self, writes: Vec<GroupWrite>) -> Result<(), StoreError> {
        self.enqueue(Job {
            writes,
            reply: None,
        })
    }

    /// Wait until everything queued before this call is committed (or failed): at shutdown,
    /// and before the audit log is exported, so that records queued with [`Self::submit`]
    /// are there. Returns at once when nothing is queued or being written.
    pub(crate) async fn flush(&self) {
        {
            let q = lock(&self.queue);
            if q.jobs.is_empty() && !q.writing {
                return;
            }
        }
        // An empty job is answered in queue order, after every job queued before it.
        let _ = self.write(Vec::new()).await;
    }

    fn enqueue(&self, job: Job) -> Result<(), StoreError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("no async runtime for the group writer".into()))?;
        let urgent = !job.may_linger();
        let start = {
            let mut q = lock(&self.queue);
            q.jobs.push_back(job);
            !std::mem::replace(&mut q.writing, true)
        };
        if start {
            runtime.spawn(drain(
                Arc::clone(&self.store),
                Arc::clone(&self.queue),
                Arc::clone(&self.waiter),
                self.linger,
            ));
        } else if urgent {
            // A writer lingering over audit records nobody waits for commits now, with this
            // job: a caller waits for it, or it is a ledger outcome the next call reads.
            self.waiter.notify_one();
        }
        Ok(())
    }
}

/// Clears `writing` if the writer task is dropped before it finished (its runtime shut down),
/// so that the next caller starts a new one for what is still queued.
struct Writing {
    queue: Arc<Mutex<Queue>>,
    finished: bool,
}

impl Drop for Writing {
    fn drop(&mut self) {
        if !self.finished {
            lock(&self.queue).writing = false;
        }
    }
}

/// The writer task: commit groups until the queue is empty.
async fn drain(
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
    waiter: Arc<Notify>,
    linger: Duration,
) {
    let mut guard = Writing {
        queue: Arc::clone(&queue),
        finished: false,
    };
    let mut jobs = take(&mut lock(&queue), MAX_GROUP);
    loop {
        let writes: usize = jobs.iter().map(|j| j.writes.len()).sum();
        if !linger.is_zero() && writes < MAX_GROUP && jobs.iter().all(Job::may_linger) {
            // Nobody waits for this group: let it gather the next records (or a caller that
            // waits, which ends the linger) before paying a transaction and an fsync.
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                () = waiter.notified() => {}
            }
            let more = take(&mut lock(&queue), MAX_GROUP.saturating_sub(writes));
            jobs.extend(more);
        }
        let answers = commit(&store, jobs).await;
        // Decide what comes next before answering: once a caller has its answer this task
        // has either stopped or holds the next group, so nothing ever waits on a writer that
        // is parked between groups (which matters when its runtime is no longer driven).
        let next = {
            let mut q = lock(&queue);
            let next = take(&mut q, MAX_GROUP);
            if next.is_empty() {
                // Decided under the lock: a caller queueing after this starts a new writer.
                q.writing = false;
                guard.finished = true;
            }
            next
        };
        for (job, result) in answers {
            job.answer(result);
        }
        if next.is_empty() {
            return;
        }
        jobs = next;
    }
}

/// The next group: queued jobs in order, up to `limit` writes (at least one job when `limit`
/// is [`MAX_GROUP`]; none that would pass a smaller `limit`).
fn take(q: &mut Queue, limit: usize) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut writes = 0usize;
    while let Some(next) = q.jobs.front() {
        let first = jobs.is_empty() && limit == MAX_GROUP;
        if !first && writes.saturating_add(next.writes.len()) > limit {
            break;
        }
        writes = writes.saturating_add(next.writes.len());
        if let Some(job) = q.jobs.pop_front() {
            jobs.push(job);
        }
    }
    jobs
}

type Answer = (Job, Result<GroupOutcome, StoreError>);

/// One [`EffectStore::apply_group`](secureclaw_core::store::EffectStore::apply_group) call,
/// run on a blocking thread: the SQLite store commits (and waits for its fsync) inline in its
/// async methods, which would otherwise hold up every other task of the runtime's thread for
/// the fsync — on the single-thread runtime of `wrap` (BENCHMARKS.md §12) that is the answer
/// to the read whose record is being committed. The future is driven there with
/// [`tokio::runtime::Handle::block_on`], so a store that does I/O on the runtime (PostgreSQL)
/// works the same.
///
/// # Errors
/// The store's error, or [`StoreError::Unavailable`] if the blocking thread could not run.
async fn apply(
    store: &Arc<dyn Store>,
    writes: Vec<GroupWrite>,
) -> Result<GroupOutcome, StoreError> {
    let store = Arc::clone(store);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(store.apply_group(&writes)))
        .await
        .map_err(|e| StoreError::Unavailable(format!("group commit thread failed: {e}")))?
}

/// Commit `jobs` as one group; if that fails, each job alone. Returns each job's answer.
async fn commit(store: &Arc<dyn Store>, jobs: Vec<Job>) -> Vec<Answer> {
    let mut answers = Vec::with_capacity(jobs.len());
    if jobs.len() > 1 {
        let all: Vec<GroupWrite> = jobs.iter().flat_map(|j| j.writes.iter().cloned()).collect();
        if let Ok(outcome) = apply(store, all).await {
            let mut records = outcome.audit.into_iter();
            for job in jobs {
                let audits = job
                    .writes
                    .iter()
                    .filter(|w| matches!(w, GroupWrite::Audit(_)))
                    .count();
                let unchanged = outcome
                    .unchanged
                    .iter()
                    .filter(|id| job.writes.iter().any(|w| ledger_id(w) == Some(*id)))
                    .cloned()
                    .collect();
                let own = GroupOutcome {
                    audit: records.by_ref().take(audits).collect(),
                    unchanged,
                };
                answers.push((job, Ok(own)));
            }
            return answers;
        }
    }
    for job in jobs {
        let result = if job.writes.is_empty() {
            Ok(GroupOutcome::default())
        } else {
            apply(store, job.writes.clone()).await
        };
        answers.push((job, result));
    }
    answers
}

/// The ledger entry a write changes, if it is a ledger outcome.
fn ledger_id(write: &GroupWrite) -> Option<&secureclaw_core::ActionId> {
    match write {
        GroupWrite::Action(_) | GroupWrite::Audit(_) | GroupWrite::Reserve { .. } => None,
        GroupWrite::Executed { id, .. }
        | GroupWrite::Failed { id, .. }
        | GroupWrite::OutcomeUnknown { id, .. } => Some(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secureclaw_core::KeyRing;
    use secureclaw_core::audit::{AuditEvent, AuditKind};
    use secureclaw_core::binding::BindingDigest;
    use secureclaw_core::store::{ActionRecord, LedgerState};
    use secureclaw_core::{ActionId, KeyId, UnixMillis};
    use secureclaw_store::SqliteStore;

    fn store() -> (tempfile::TempDir, Arc<SqliteStore>) {
        let dir = tempfile::tempdir().unwrap();
        let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| b.fill(7)));
        let store = SqliteStore::open(&dir.path().join("db.sqlite"), keys).unwrap();
        (dir, Arc::new(store))
    }

    fn event(n: u64) -> AuditEvent {
        let mut ev = AuditEvent::new(AuditKind::Read, UnixMillis(n));
        ev.action_id = Some(format!("act_{n}"));
        ev
    }

    fn binding() -> BindingDigest {
        BindingDigest {
            kid: KeyId("bind-1".into()),
            digest: "ab".repeat(32),
        }
    }

    fn action(id: &ActionId) -> ActionRecord {
        ActionRecord {
            action_id: id.clone(),
            session: "s1".into(),
            caller: "alice".into(),
            tool: "mail__send".into(),
            binding: binding(),
            needs_confirmation: false,
            created_at: UnixMillis(1),
            request_json: "{}".into(),
            display: "mail__send".into(),
        }
    }

    /// Many concurrent callers: every write lands, the chain is one gap-free chain that
    /// verifies, and each caller gets back exactly its own records.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_callers_share_groups_and_keep_one_chain() {
        let (_dir, store) = store();
        let writer = Arc::new(GroupWriter::new(store.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..16u64 {
            let writer = Arc::clone(&writer);
            tasks.spawn(async move {
                for n in 0..10u64 {
                    let ev = event(t * 100 + n);
                    let out = writer
                        .write(vec![GroupWrite::Audit(ev.clone())])
                        .await
                        .unwrap();
                    assert_eq!(out.audit.len(), 1);
                    assert_eq!(out.audit[0].event, ev, "a caller got another's record");
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        assert_eq!(store.verify_audit().unwrap(), 160);
    }

    /// A refused write fails only its own caller; the other callers of the same group commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_bad_write_fails_only_its_caller() {
        let (dir, store) = store();
        let conn = rusqlite::Connection::open(dir.path().join("db.sqlite")).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse_commit BEFORE INSERT ON audit WHEN NEW.kind = 'commit'
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
        let writer = Arc::new(GroupWriter::new(store.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8u64 {
            let writer = Arc::clone(&writer);
            tasks.spawn(async move {
                let kind = if t == 3 {
                    AuditKind::Commit
                } else {
                    AuditKind::Read
                };
                let ev = AuditEvent::new(kind, UnixMillis(t));
                (t, writer.write(vec![GroupWrite::Audit(ev)]).await)
            });
        }
        while let Some(done) = tasks.join_next().await {
            let (t, result) = done.unwrap();
            if t == 3 {
                assert!(
                    matches!(result, Err(StoreError::Unavailable(_))),
                    "{result:?}"
                );
            } else {
                assert_eq!(result.unwrap().audit.len(), 1, "positive control");
            }
        }
        assert_eq!(store.verify_audit().unwrap(), 7);
    }

    /// The commit record and the executed mark are one write: all or nothing. A ledger
    /// outcome for an entry that is not reserved changes nothing and is reported.
    #[tokio::test]
    async fn outcome_and_record_commit_together() {
        let (_dir, store) = store();
        let writer = GroupWriter::new(store.clone());
        let id = ActionId("act_group_1".into());
        assert!(
            store
                .record_and_reserve(
                    &action(&id),
                    &[event(1), event(2)],
                    &binding(),
                    UnixMillis(1)
                )
                .unwrap()
        );
        let executed = GroupWrite::Executed {
            id: id.clone(),
            result_digest: "d".into(),
            at: UnixMillis(2),
        };
        let out = writer
            .write(vec![GroupWrite::Audit(event(3)), executed.clone()])
            .await
            .unwrap();
        assert!(out.unchanged.is_empty());
        assert_eq!(
            store.ledger_entry(&id).unwrap().unwrap().state,
            LedgerState::Executed
        );
        // A second outcome changes nothing: reported, and its record still lands.
        let out = writer
            .write(vec![GroupWrite::Audit(event(4)), executed])
            .await
            .unwrap();
        assert_eq!(out.unchanged, vec![id.clone()]);
        assert_eq!(store.verify_audit().unwrap(), 4);
    }

    /// Reservations of concurrent callers share groups (explicit commits, issue 14 item 3):
    /// of many callers reserving one id exactly one succeeds and every other gets
    /// `Conflict` (the group holding two of them fails and its jobs are retried alone), while
    /// callers reserving fresh ids in the same groups all succeed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_reservations_of_one_id_succeed_once() {
        let (_dir, store) = store();
        let writer = Arc::new(GroupWriter::new(store.clone()));
        let contested = ActionId("act_contested".into());
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..32u64 {
            let writer = Arc::clone(&writer);
            let id = if t % 2 == 0 {
                contested.clone()
            } else {
                ActionId(format!("act_fresh_{t}"))
            };
            tasks.spawn(async move {
                let reserve = GroupWrite::Reserve {
                    id: id.clone(),
                    binding: binding(),
                    at: UnixMillis(t),
                };
                (id, writer.write(vec![reserve]).await)
            });
        }
        let (mut won, mut conflicts, mut fresh) = (0, 0, 0);
        while let Some(done) = tasks.join_next().await {
            let (id, result) = done.unwrap();
            match (id == contested, result) {
                (true, Ok(_)) => won += 1,
                (true, Err(StoreError::Conflict(_))) => conflicts += 1,
                (false, Ok(_)) => fresh += 1,
                (c, other) => panic!("contested {c}: {other:?}"),
            }
        }
        assert_eq!((won, conflicts, fresh), (1, 15, 16));
        assert_eq!(
            store.ledger_entry(&contested).unwrap().unwrap().state,
            LedgerState::Reserved
        );
    }

    /// A write nobody waits for is still committed (by the running writer).
    #[tokio::test]
    async fn submitted_writes_are_committed() {
        let (_dir, store) = store();
        let writer = GroupWriter::new(store.clone());
        writer.submit(vec![GroupWrite::Audit(event(1))]).unwrap();
        // A durable write queued after it is committed after it (queue order).
        writer
            .write(vec![GroupWrite::Audit(event(2))])
            .await
            .unwrap();
        let records = store.audit_records(0, 10).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].event, event(1));
    }

    /// Records nobody waits for linger, and a caller that waits ends the linger at once:
    /// with a linger of an hour, a lone `read` record is still uncommitted after the writer
    /// task has run, and a waiting write then returns (well before the hour: the test's
    /// 60 s bound is a hang guard, not a timing threshold), landing after it in one group.
    #[tokio::test]
    async fn submitted_records_linger_and_a_waiting_caller_ends_the_linger() {
        let (_dir, store) = store();
        let writer = GroupWriter::with_linger(store.clone(), Duration::from_secs(3600));
        writer.submit(vec![GroupWrite::Audit(event(1))]).unwrap();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            store.verify_audit().unwrap(),
            0,
            "committed without lingering"
        );
        writer.submit(vec![GroupWrite::Audit(event(2))]).unwrap();
        let waited = tokio::time::timeout(
            Duration::from_secs(60),
            writer.write(vec![GroupWrite::Audit(event(3))]),
        )
        .await
        .expect("a waiting caller waited for the linger")
        .unwrap();
        assert_eq!(waited.audit.len(), 1);
        let records = store.audit_records(0, 10).unwrap();
        let events: Vec<_> = records.iter().map(|r| r.event.clone()).collect();
        assert_eq!(events, vec![event(1), event(2), event(3)], "queue order");
    }

    /// A ledger outcome queued without waiting (an effect's `commit` + `executed`) never
    /// lingers: the next call's decisions read it, and an entry left `reserved` for the
    /// linger would be taken for an outcome unknown (found by the bypass suite). With a
    /// one-hour linger it is still committed at once (the 60 s bound is a hang guard).
    #[tokio::test]
    async fn ledger_outcomes_do_not_linger() {
        let (_dir, store) = store();
        let writer = GroupWriter::with_linger(store.clone(), Duration::from_secs(3600));
        let id = ActionId("act_no_linger".into());
        assert!(
            store
                .record_and_reserve(&action(&id), &[event(1)], &binding(), UnixMillis(1))
                .unwrap()
        );
        let executed = GroupWrite::Executed {
            id: id.clone(),
            result_digest: "d".into(),
            at: UnixMillis(2),
        };
        writer
            .submit(vec![GroupWrite::Audit(event(2)), executed])
            .unwrap();
        let committed = tokio::time::timeout(Duration::from_secs(60), async {
            while store.ledger_entry(&id).unwrap().unwrap().state != LedgerState::Executed {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(committed.is_ok(), "the executed mark lingered");
    }

    /// A ledger outcome queued while a group of read records lingers ends the linger: it is
    /// not held back behind them (found by `tests/pins.rs`, whose restart saw the entry
    /// still `reserved`).
    #[tokio::test]
    async fn a_ledger_outcome_ends_a_linger() {
        let (_dir, store) = store();
        let writer = GroupWriter::with_linger(store.clone(), Duration::from_secs(3600));
        let id = ActionId("act_ends_linger".into());
        assert!(
            store
                .record_and_reserve(&action(&id), &[event(1)], &binding(), UnixMillis(1))
                .unwrap()
        );
        writer.submit(vec![GroupWrite::Audit(event(2))]).unwrap();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let executed = GroupWrite::Executed {
            id: id.clone(),
            result_digest: "d".into(),
            at: UnixMillis(2),
        };
        writer.submit(vec![executed]).unwrap();
        let committed = tokio::time::timeout(Duration::from_secs(60), async {
            while store.ledger_entry(&id).unwrap().unwrap().state != LedgerState::Executed {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(committed.is_ok(), "the executed mark waited for the linger");
        assert_eq!(
            store.verify_audit().unwrap(),
            2,
            "the lingering record went with it"
        );
    }

    /// Positive controls: a lone submitted record is committed without anyone waiting, with
    /// the default linger and without one.
    #[tokio::test]
    async fn submitted_records_commit_without_a_waiting_caller() {
        for linger in [SUBMIT_LINGER, Duration::ZERO] {
            let (_dir, store) = store();
            let writer = GroupWriter::with_linger(store.clone(), linger);
            writer.submit(vec![GroupWrite::Audit(event(1))]).unwrap();
            let committed = tokio::time::timeout(Duration::from_secs(60), async {
                while store.verify_audit().unwrap() == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
            assert!(committed.is_ok(), "never committed (linger {linger:?})");
        }
    }

    /// `record_and_reserve` is all or nothing: an id already reserved stores nothing.
    #[tokio::test]
    async fn record_and_reserve_is_all_or_nothing() {
        let (_dir, store) = store();
        let id = ActionId("act_group_2".into());
        assert!(store.reserve(&id, &binding(), UnixMillis(1)).unwrap());
        let got = store.record_and_reserve(&action(&id), &[event(1)], &binding(), UnixMillis(2));
        assert_eq!(got, Ok(false), "a second reservation must not be made");
        assert!(
            store.action(&id).unwrap().is_none(),
            "nothing may be stored"
        );
        assert_eq!(store.verify_audit().unwrap(), 0);
        let fresh = ActionId("act_group_3".into());
        assert_eq!(
            store.record_and_reserve(&action(&fresh), &[event(1)], &binding(), UnixMillis(2)),
            Ok(true),
            "positive control"
        );
        assert_eq!(
            store.ledger_entry(&fresh).unwrap().unwrap().state,
            LedgerState::Reserved
        );
        assert_eq!(store.verify_audit().unwrap(), 1);
    }
}
