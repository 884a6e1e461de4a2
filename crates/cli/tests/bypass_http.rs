//! `secureclaw bypass --url`: the suite against a running `secureclaw serve` (the demo office
//! behind it over stdio), through the HTTP API only. In-process-only cases must say SKIP. Run
//! twice: with the default SQLite store, and with `--store postgres://…` on a scratch database
//! (skipped with a message when no PostgreSQL server is configured or reachable; see
//! `common_pg`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common;
mod common_pg;

use common::{EXE, free_port};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const OPERATOR: &str = "bypass-operator-token-0123456789";

/// The demo office behind `secureclaw serve`, classified as `GatewayConfig::demo_office()`
/// classifies it (the README's example configuration for `bypass --url`).
fn demo_office_config(port: u16, office: &Path) -> String {
    format!(
        r#"[server]
http_bind = "127.0.0.1:{port}"

[[gateway.classify]]
upstream = "office"
tool = "read_invoice"
path = "/iban"
label = "payee_iban"
sensitivity = "high"
allowed_sinks = ["office__pay_invoice"]
anchor = true

[[gateway.classify]]
upstream = "office"
tool = "read_invoice"
path = "/contact_email"
label = "counterparty_email"
sensitivity = "medium"
allowed_sinks = ["office__save_draft"]
anchor = true

[[gateway.tools]]
tool = "office__save_draft"
destructive = false
targets = []

[[gateway.tools]]
tool = "office__send_email"
sink = "egress"

[[gateway.tools]]
tool = "office__pay_invoice"
sink = "egress"
financial = true

[[upstream]]
id = "office"
transport = "stdio"
command = {exe:?}
args = ["demo-tools", "--state", {office:?}]
"#,
        exe = EXE,
        office = office.display().to_string()
    )
}

#[test]
fn bypass_suite_against_a_running_server() {
    bypass_suite(None);
}

/// The same suite, the server keeping its state in PostgreSQL (issue 13).
#[test]
fn bypass_suite_against_a_running_server_on_postgres() {
    let Some(admin) = common_pg::admin_url() else {
        return;
    };
    let db = common_pg::Scratch::create(&admin);
    bypass_suite(Some(&db.url));
    // The server kept its state there: sessions, the ledger and the audit chain.
    for table in ["sessions", "ledger", "audit"] {
        let n = common_pg::query(&db.url, &format!("SELECT count(*) FROM {table}"));
        assert!(n[0].get::<_, i64>(0) > 0, "nothing in `{table}`");
    }
}

fn bypass_suite(store: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("secureclaw.toml");
    std::fs::write(
        &config,
        demo_office_config(port, &dir.path().join("office.json")),
    )
    .unwrap();
    let mut cmd = Command::new(EXE);
    cmd.arg("--state-dir").arg(dir.path().join("state"));
    if let Some(url) = store {
        cmd.args(["--store", url]);
    }
    cmd.args(["serve", "--config"])
        .arg(&config)
        .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _server = common::serve_on(&mut cmd, port);
    let json = dir.path().join("bypass.json");
    let out = Command::new(EXE)
        .args(["bypass", "--url", &format!("http://127.0.0.1:{port}")])
        .arg("--json")
        .arg(&json)
        .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bypass --url failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("SKIP (in-process only"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &report["summary"];
    assert_eq!(report["mode"], "http");
    assert_eq!(s["false_accepts"], 0, "{stdout}");
    assert_eq!(s["false_denies"], 0, "{stdout}");
    assert_eq!(s["failed"], 0, "{stdout}");
    let skipped = s["skipped"].as_u64().unwrap();
    let passed = s["passed"].as_u64().unwrap();
    assert!(skipped > 0 && passed >= 60, "{s}");
    assert_eq!(passed + skipped, s["total"].as_u64().unwrap());
    // Every skip says why.
    for c in report["cases"].as_array().unwrap() {
        if c["pass"].is_null() {
            assert!(
                c["observed"]
                    .as_str()
                    .unwrap()
                    .starts_with("SKIP (in-process only"),
                "{c}"
            );
        }
    }
}
