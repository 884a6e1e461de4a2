//! The bypass suite as an ordinary test: the whole suite runs in process against the real
//! stack and every case must pass (so `scripts/test` covers it).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use secureclaw_eval::payment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bypass_suite_passes_in_process() {
    let report = secureclaw_eval::run_in_process().await.unwrap();
    let s = report.summary();
    assert!(report.ok(), "{}", report.table());
    assert_eq!(s.skipped, 0, "{}", report.table());
    assert_eq!(s.passed, s.total);
    assert!(s.total >= 80, "only {} cases", s.total);
    assert_eq!((s.false_accepts, s.false_denies), (0, 0));
    // Paper Table 18: 1 allow / 4 deny with the boundary on, 5 allow with it off.
    assert_eq!(report.tally(payment::ON), (1, 4));
    assert_eq!(report.tally(payment::OFF), (5, 0));
    // Every Table 17 row is present: 25 attacks and 4 positive controls at least.
    let t17 = report
        .cases
        .iter()
        .filter(|c| c.category.starts_with("T17"))
        .count();
    assert!(t17 >= 29, "{t17} Table 17 cases");
    // Authorization semantics (issue 11): every item's attack and its positive control.
    let semantics = report
        .cases
        .iter()
        .filter(|c| c.category == secureclaw_eval::semantics::SEMANTICS)
        .count();
    assert!(semantics >= 30, "{semantics} semantics cases");
    // The JSON report has the documented shape.
    let json = report.to_json();
    assert_eq!(json["summary"]["total"], s.total);
    assert_eq!(json["summary"]["false_accepts"], 0);
    let first = &json["cases"][0];
    for key in ["category", "name", "expected", "observed", "reason", "pass"] {
        assert!(first.get(key).is_some(), "case without `{key}`: {first}");
    }
}
