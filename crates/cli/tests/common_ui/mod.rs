//! `secureclaw serve` with the demo office, a raw HTTP/1.1 client that keeps headers, and the
//! office's sent mail, for the approvals page tests (`approvals_ui.rs`, `approvals_browser.rs`).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const EXE: &str = env!("CARGO_BIN_EXE_secureclaw");
pub const OPERATOR: &str = "test-operator-token-0123456789";
pub const SEND: &str = "office__send_email";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP response: status, headers (names lower-cased, in order) and body text.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request with `Connection: close` and extra `headers`.
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((resp.as_str(), ""));
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A JSON API request with a bearer token.
pub fn api(port: u16, method: &str, path: &str, token: &str, body: &Value) -> Value {
    let auth = format!("Bearer {token}");
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let r = request(
        port,
        method,
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    r.json()
}

pub struct Server {
    child: Child,
    pub port: u16,
    pub office: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `serve` with the demo office over stdio in `dir`.
pub fn serve_office(dir: &Path) -> Server {
    serve_office_with(dir, "")
}

/// [`serve_office`] with `extra` appended to the configuration (TOML tables).
pub fn serve_office_with(dir: &Path, extra: &str) -> Server {
    let port = free_port();
    let office = dir.join("office.json");
    let cfg = dir.join("secureclaw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nhttp_bind = \"127.0.0.1:{port}\"\n\n\
             [[upstream]]\nid = \"office\"\ntransport = \"stdio\"\ncommand = {EXE:?}\nargs = [\"demo-tools\", \"--state\", {:?}]\n\n{extra}",
            office.display().to_string()
        ),
    )
    .unwrap();
    let child = Command::new(EXE)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("SECURECLAW_OPERATOR_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("serve.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let server = Server {
        child,
        port,
        office,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("server on port {port} did not start");
}

impl Server {
    /// A runtime session whose task names only `approver@corp.example`: mail to anyone else
    /// needs the user's confirmation.
    pub fn session(&self) -> String {
        let v = api(
            self.port,
            "POST",
            "/v1/sessions",
            OPERATOR,
            &json!({"caller": "web-runtime", "task": {"request": "Send INV-42 to approver@corp.example"}}),
        );
        v["session_id"].as_str().unwrap().to_owned()
    }

    /// The runtime's `send_email` to carol (not in the task), re-issued with `approval`.
    pub fn send(&self, session: &str, subject: &str, approval: Option<&str>) -> Value {
        let mut body = json!({"tool": SEND, "arguments": {
            "to": "carol@other.example", "subject": subject, "body": "Invoice INV-42 for sign-off."}});
        if let Some(a) = approval {
            body["approval"] = json!(a);
        }
        api(self.port, "POST", "/v1/call", session, &body)
    }

    /// How many mails with `subject` the office has sent.
    pub fn sent(&self, subject: &str) -> usize {
        if !self.office.exists() {
            return 0;
        }
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(&self.office).unwrap()).unwrap();
        state["sent"]
            .as_array()
            .map(|a| a.iter().filter(|m| m["subject"] == subject).count())
            .unwrap_or(0)
    }

    /// Action ids of the pending approvals, from the operator API.
    pub fn pending(&self) -> Vec<String> {
        let v = api(
            self.port,
            "GET",
            "/v1/approvals?state=pending",
            OPERATOR,
            &Value::Null,
        );
        v["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["action_id"].as_str().unwrap().to_owned())
            .collect()
    }
}
