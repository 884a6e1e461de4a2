//! Set-up shared by the process tests that run `secureclaw serve` (`operator.rs`,
//! `serve_http.rs`, `fault_upstream.rs`, `crash_safety.rs`, `replicas.rs`, `bypass_http.rs`):
//! a free port, a child process killed on drop, waiting for a listener, one raw HTTP/1.1
//! exchange, and a reproducible random source.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const EXE: &str = env!("CARGO_BIN_EXE_secureclaw");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process, killed and reaped when dropped (on every path, panics included).
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawn `cmd` (wrapped at once, so the child is killed and reaped on every path) and wait up
/// to 60 s until something accepts connections on `port`.
pub fn serve_on(cmd: &mut Command, port: u16) -> Server {
    let server = Server(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("server on port {port} did not start");
}

/// One HTTP/1.1 request with `Connection: close` and `Content-Type: application/json`, with
/// `Authorization: Bearer <token>` if `token` is given and `body` as the body; the whole raw
/// response. `Err` when the server cannot be reached or the connection breaks (expected around
/// a kill).
pub fn exchange(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    Ok(resp)
}

/// The status code and the body of a raw response (panics if it has no status).
pub fn status_and_body(resp: &str) -> (u16, &str) {
    let status: u16 = resp.split_whitespace().nth(1).unwrap().parse().unwrap();
    let payload = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
    (status, payload)
}

/// xorshift64*: reproducible kill times from a printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
