//! `secureclaw demo --speculative` end to end: the binary runs the Ghost Tool Calls demo (the
//! lease example, without and with issue-time privacy contracts) against its own research
//! providers, exits 0, and its providers' logs and the re-check command agree with the
//! transcript.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn requests(path: &std::path::Path) -> Vec<Value> {
    let log: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    log["requests"].as_array().cloned().unwrap_or_default()
}

#[test]
fn speculative_demo_keeps_ghost_intent_from_providers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_secureclaw");
    let started = Instant::now();
    let out = Command::new(exe)
        .args(["demo", "--speculative", "--dir"])
        .arg(dir.path())
        .env_remove("SECURECLAW_STATE_DIR")
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    for line in [
        "== run A: naive speculation",
        "== run B: issue-time privacy contracts",
        "provider search received: web_search {\"q\":\"tenant rights lease termination penalty\"}",
        "provider search received: web_search {\"q\":\"[topic] penalty\"}",
        "-> shadowed   monitor: shadow",
        "local substitute (local) received: rates_lookup {\"product\":\"current personal loan rates\"}",
        "-> deferred   monitor: defer:low_confidence",
        "-> deferred   monitor: defer:effect_precommit",
        "released local__calendar_lookup as committed: completed",
        "abandon notice: completed (1 held calls discarded unsent)",
        "|Δ_provider|: naive 8, contracts 4",
        "check ok: no intent-revealing text from the naive run reached an external provider",
        "check ok: contracts: none of the 2 deferred-then-abandoned calls reached a provider",
        "check ok: |Δ_provider| with contracts (4) is smaller than without (8)",
        "demo OK",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("UNEXPECTED"), "{stdout}");

    // Ground truth: the providers' own logs.
    let naive = dir.path().join("naive/providers");
    let guarded = dir.path().join("contracts/providers");
    assert_eq!(requests(&naive.join("loans.json")).len(), 1);
    assert!(requests(&guarded.join("loans.json")).is_empty());
    for provider in ["search", "loans", "workspace"] {
        let text = serde_json::to_string(&requests(&guarded.join(format!("{provider}.json"))))
            .unwrap()
            .to_lowercase();
        for phrase in ["lease", "tenant", "landlord", "apartments near me", "loan"] {
            assert!(!text.contains(phrase), "{provider} saw {phrase:?}: {text}");
        }
    }
    let office: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("contracts/office.json")).unwrap())
            .unwrap();
    assert_eq!(office["sent"].as_array().map(Vec::len), Some(0));

    // The printed re-check command reproduces the exposure report from the audit log.
    let recheck = stdout
        .lines()
        .filter(|l| l.contains("trace exposure --session"))
        .nth(1)
        .unwrap();
    let args: Vec<&str> = recheck.split_whitespace().collect();
    assert!(args[0].ends_with("secureclaw"), "{recheck}");
    let check = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(check.status.success(), "{check:?}");
    let table = String::from_utf8_lossy(&check.stdout);
    let provider = table
        .lines()
        .find(|l| l.starts_with("provider "))
        .unwrap_or_default();
    assert_eq!(
        provider.split_whitespace().last(),
        Some("4"),
        "provider row {provider:?} in:\n{table}"
    );

    // Negative controls: an unknown session and a directory without state are errors, and
    // the latter is not created.
    let session_at = args.iter().position(|a| *a == "--session").unwrap() + 1;
    let mut wrong: Vec<&str> = args[1..].to_vec();
    wrong[session_at - 1] = "no-such-session";
    let out = Command::new(args[0]).args(&wrong).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown session"));
    let empty = dir.path().join("no-state-here");
    let out = Command::new(args[0])
        .args(["trace", "exposure", "--session", "x", "--state-dir"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!empty.exists(), "trace must not create a state directory");
}
