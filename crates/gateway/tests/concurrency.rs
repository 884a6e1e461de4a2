//! Concurrency of the commit path: 64 commits of one action id race across threads and two
//! gateway instances over one database (exactly one effect), and a thousand distinct actions
//! commit concurrently (each exactly once; `SECURECLAW_CONCURRENCY_COMMITS` changes the
//! number). Bounded to a few seconds.
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
use serde_json::json;
use std::collections::BTreeSet;

const COUNT: &str = "test__count";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_commits_of_one_action_execute_once() {
    let h = Harness::new().await;
    let second = h.restarted().await;
    let p = h
        .preview(&h.session, COUNT, json!({"to": APPROVER, "n": 1}))
        .await
        .unwrap();
    assert_eq!(p.decision, PreviewDecision::Allow);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let gw = if i % 2 == 0 {
            h.gw.clone()
        } else {
            second.clone()
        };
        let (session, action, artifact) =
            (h.session.clone(), p.action_id.clone(), p.artifact.clone());
        tasks.push(tokio::spawn(async move {
            gw.commit(
                &session,
                COUNT,
                args(json!({"to": APPROVER, "n": 1})),
                &action,
                Some(&artifact),
            )
            .await
        }));
    }
    let mut completed_count = 0;
    for t in tasks {
        let o = t.await.unwrap();
        match reason(&o) {
            None => completed_count += 1,
            Some(r) => assert_eq!(r, ReasonCode::Replay, "{o:?}"),
        }
    }
    assert_eq!(completed_count, 1);
    assert_eq!(
        h.test.effects(),
        1,
        "one action id, more than one upstream effect"
    );
    h.assert_audit_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_distinct_commits_each_execute_once() {
    let n_commits: usize = std::env::var("SECURECLAW_CONCURRENCY_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let h = Harness::new().await;
    let second = h.restarted().await;
    let started = std::time::Instant::now();
    let mut previews = Vec::new();
    for n in 0..n_commits {
        let p = h
            .preview(&h.session, COUNT, json!({"to": APPROVER, "n": n}))
            .await
            .unwrap();
        assert_eq!(p.decision, PreviewDecision::Allow);
        previews.push((n, p));
    }
    let mut tasks = Vec::new();
    for (n, p) in previews {
        let gw = if n % 2 == 0 {
            h.gw.clone()
        } else {
            second.clone()
        };
        let session = h.session.clone();
        tasks.push(tokio::spawn(async move {
            gw.commit(
                &session,
                COUNT,
                args(json!({"to": APPROVER, "n": n})),
                &p.action_id,
                Some(&p.artifact),
            )
            .await
        }));
    }
    for t in tasks {
        let o = t.await.unwrap();
        completed(&o);
    }
    assert_eq!(h.test.effects(), n_commits);
    let received: Vec<u64> = h
        .test
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a["n"].as_u64().unwrap())
        .collect();
    let distinct: BTreeSet<u64> = received.iter().copied().collect();
    assert_eq!(
        received.len(),
        n_commits,
        "an action executed more than once"
    );
    assert_eq!(
        distinct.len(),
        n_commits,
        "an action executed more than once"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
    h.store.verify_audit().unwrap();
}

/// One-shot calls (preview and commit in one `call`, issue 14 item 2) from 8 concurrent clients
/// on one gateway: the action, its preview and decision records and the reservation are one
/// group-committed write before the effect, the commit record and the `executed` mark one
/// after it. Each call runs exactly once, every action has its four records (preview,
/// decision, commit, read) and an `executed` entry, and the chain verifies.
/// `SECURECLAW_GROUP_CALLS` sets the calls per client (default 25).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_shot_calls_from_concurrent_clients_each_run_once_with_their_records() {
    let per_client: usize = std::env::var("SECURECLAW_GROUP_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let clients = 8usize;
    let h = Harness::new().await;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let gw = h.gw.clone();
        let session = h.session.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for k in 0..per_client {
                let n = c * 10_000 + k;
                let o = call_on(&gw, &session, COUNT, json!({"to": APPROVER, "n": n}), None).await;
                match o {
                    secureclaw_gateway::CallOutcome::Completed {
                        action_id: Some(id),
                        output,
                    } => {
                        assert!(!output.is_error, "{output:?}");
                        ids.push(id);
                    }
                    other => panic!("expected completed, got {other:?}"),
                }
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    let total = clients * per_client;
    assert_eq!(h.test.effects(), total, "an effect ran twice or not at all");
    let received: BTreeSet<u64> = h
        .test
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a["n"].as_u64().unwrap())
        .collect();
    assert_eq!(received.len(), total, "an action executed more than once");
    // The `commit` records and `executed` marks are queued without the callers waiting.
    h.gw.flush().await;
    let records = h.store.audit_records(0, usize::MAX).unwrap();
    let seen: BTreeSet<(String, String)> = records
        .iter()
        .filter_map(|r| {
            let kind = serde_json::to_value(r.event.kind)
                .ok()?
                .as_str()?
                .to_owned();
            Some((r.event.action_id.clone()?, kind))
        })
        .collect();
    for id in &ids {
        let entry = h.store.ledger_entry(id).unwrap().unwrap();
        assert_eq!(
            entry.state,
            secureclaw_store::LedgerState::Executed,
            "{id} is not executed"
        );
        assert!(h.store.action(id).unwrap().is_some(), "{id} has no action");
        for kind in ["preview", "decision", "commit", "read"] {
            assert!(
                seen.contains(&(id.0.clone(), kind.to_owned())),
                "{id} has no `{kind}` record"
            );
        }
    }
    h.assert_audit_clean();
}
