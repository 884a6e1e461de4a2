//! The window between an effect and its records. Regression test for a gap found while
//! writing the crash-safety harness (issue 3): the gateway marked the ledger entry `executed`
//! before appending the `commit` audit record, so a crash between the two left an effect that
//! had run with neither a `commit` nor a `crash_recovery` record (a restart reports only
//! entries still `reserved`). Now the commit record comes first; if it cannot be written the
//! entry stays `reserved` and the next start reports it. Since issue 14 item 2 the caller does
//! not wait for that write: the result is answered, and a lost write still leaves the entry
//! `reserved` and reported.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;

use common::*;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_store::LedgerState;
use serde_json::json;

#[tokio::test]
async fn an_effect_whose_commit_record_is_lost_stays_reserved_and_is_reported() {
    let h = Harness::new().await;
    // The process "dies" exactly at the commit record: that one insert fails.
    let conn = rusqlite::Connection::open(&h.db).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER die_at_commit BEFORE INSERT ON audit WHEN NEW.kind = 'commit'
         BEGIN SELECT RAISE(ABORT, 'simulated crash'); END;",
    )
    .unwrap();
    let call = json!({"to": APPROVER, "n": 1});
    let p = h
        .preview(&h.session, "test__count", call.clone())
        .await
        .unwrap();
    let o = h
        .commit(
            &h.session,
            "test__count",
            call.clone(),
            &p.action_id,
            Some(&p.artifact),
        )
        .await;
    // The commit record and the `executed` mark are written after the answer (issue 14 item
    // 2): the runtime gets the effect's result, and the lost write leaves the entry
    // `reserved`.
    assert!(
        matches!(o, secureclaw_gateway::CallOutcome::Completed { .. }),
        "the effect ran; its result is answered: {o:?}"
    );
    assert_eq!(h.test.effects(), 1);
    h.gw.flush().await;
    let entry = h.store.ledger_entry(&p.action_id).unwrap().unwrap();
    assert_eq!(
        entry.state,
        LedgerState::Reserved,
        "an effect without a commit record was marked executed: a restart would not report it"
    );
    conn.execute_batch("DROP TRIGGER die_at_commit").unwrap();
    let restarted = h.restarted().await;
    let records =
        serde_json::to_value(restarted.audit_records(0, usize::MAX).await.unwrap()).unwrap();
    assert!(
        records.as_array().unwrap().iter().any(|r| {
            r["event"]["kind"] == "crash_recovery"
                && r["event"]["action_id"] == p.action_id.0.as_str()
        }),
        "the effect has no audit record after the restart"
    );
    let o = commit_on(
        &restarted,
        &h.session,
        "test__count",
        call,
        &p.action_id,
        Some(&p.artifact),
    )
    .await;
    assert_denied(&o, ReasonCode::Replay);
    assert_eq!(h.test.effects(), 1);
    // Red-team round 2 (2026-12-03): the interrupted reservation is closed as
    // `outcome_unknown`, so a new, identical call of that tool in that session waits for the
    // user instead of running the effect a second time.
    assert_eq!(
        h.store.ledger_entry(&p.action_id).unwrap().unwrap().state,
        LedgerState::OutcomeUnknown
    );
    let again = restarted
        .call(
            &h.session,
            "test__count",
            args(json!({"to": APPROVER, "n": 1})),
            &secureclaw_gateway::CallMeta::committed(None),
        )
        .await;
    match &again {
        secureclaw_gateway::CallOutcome::Pending(r) => {
            assert_eq!(r.reason, ReasonCode::OutcomeUnknownRepeat, "{r:?}");
        }
        other => panic!("expected pending(outcome_unknown_repeat), got {other:?}"),
    }
    assert_eq!(h.test.effects(), 1);
    restarted.verify_audit().await.unwrap();
}
