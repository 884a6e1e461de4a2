//! `secureclaw eval ghost --queries DIR` (issue 18): the default labeler measured on a query
//! set in a directory, without editing the source tree.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_secureclaw");

#[test]
fn eval_ghost_measures_a_query_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sensitive.tsv"),
        "health\tjust diagnosed with multiple sclerosis what now\tmultiple sclerosis\n\
         finance\tbest savings account rates\tsavings account\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("neutral.tsv"),
        "weather\tweather tomorrow chicago\t\ncooking\tdrunken noodles recipe\t\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("neutral_decoys.txt"), "2\n").unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(EXE)
        .args(["eval", "ghost", "--markdown", "--queries"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // a markdown table with every split and the decoy rows
    assert!(stdout.contains("| split | set | n | leaked |"), "{stdout}");
    assert!(
        stdout.contains("| all | neutral/non-decoy | 1 |"),
        "{stdout}"
    );
    assert!(stdout.contains("| all | sensitive | 2 |"), "{stdout}");
    // the neutral-looking "sensitive" query is sent as is: a leak, listed with its line
    assert!(
        stdout.contains("LEAK 2 [finance] \"best savings account rates\""),
        "{stdout}"
    );
    assert!(!stdout.contains("LEAK 1 "), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let all = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["split"] == "all" && r["set"] == "sensitive")
        .unwrap();
    assert_eq!(all["leaked"], 0.5);

    // a directory without the files is an error, not an empty report
    let out = Command::new(EXE)
        .args(["eval", "ghost", "--queries"])
        .arg(dir.path().join("nope"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read the query set"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
