//! A minimal HTTP/1.1 client for a running `secureclaw serve` (plain `http://`, one request
//! per connection). Raw bodies are sent byte for byte, so the suite can present JSON that a
//! serializer would never produce (duplicate keys, out-of-range numbers).

use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Time allowed for one request, connection included.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Errors talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL is not `http://host:port[/prefix]`.
    #[error(
        "unsupported url `{0}` (expected http://host:port; put TLS in front of the suite's side if needed)"
    )]
    Url(String),
    /// Connecting, sending or receiving failed.
    #[error("{0}")]
    Io(String),
    /// The answer is not an HTTP/1.1 response.
    #[error("malformed HTTP response")]
    Response,
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Where the server is.
#[derive(Debug, Clone)]
pub struct HttpClient {
    host: String,
    port: u16,
    prefix: String,
}

impl HttpClient {
    /// Parse `http://host[:port][/prefix]` (port 80 by default).
    ///
    /// # Errors
    /// [`HttpError::Url`] for other schemes or a malformed authority.
    pub fn new(url: &str) -> Result<Self, HttpError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::Url(url.to_owned()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h.to_owned(),
                p.parse::<u16>()
                    .map_err(|_| HttpError::Url(url.to_owned()))?,
            ),
            _ => (authority.to_owned(), 80),
        };
        if host.is_empty() {
            return Err(HttpError::Url(url.to_owned()));
        }
        Ok(Self {
            host,
            port,
            prefix: path.trim_end_matches('/').to_owned(),
        })
    }

    /// Send one request; returns the status and the body parsed as JSON (a JSON string
    /// holding the raw text if it is not JSON).
    ///
    /// # Errors
    /// [`HttpError`] for connection failures, timeouts and malformed responses.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&str>,
    ) -> Result<(u16, Value), HttpError> {
        match tokio::time::timeout(TIMEOUT, self.exchange(method, path, bearer, body)).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::Timeout(TIMEOUT)),
        }
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&str>,
    ) -> Result<(u16, Value), HttpError> {
        let io = |e: std::io::Error| HttpError::Io(e.to_string());
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let mut stream = tokio::net::TcpStream::connect((host, self.port))
            .await
            .map_err(io)?;
        let body = body.unwrap_or_default();
        let auth = bearer
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}:{}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.prefix,
            self.host,
            self.port,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.map_err(io)?;
        parse_response(&raw)
    }
}

fn parse_response(raw: &[u8]) -> Result<(u16, Value), HttpError> {
    let text = String::from_utf8_lossy(raw);
    let (head, payload) = text.split_once("\r\n\r\n").ok_or(HttpError::Response)?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::Response)?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(payload).ok_or(HttpError::Response)?
    } else {
        payload.to_owned()
    };
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok((status, value))
}

fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        s = rest.get(n..)?.strip_prefix("\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let c = HttpClient::new("http://127.0.0.1:8787").unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.prefix.as_str()),
            ("127.0.0.1", 8787, "")
        );
        let c = HttpClient::new("http://localhost/gw/").unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.prefix.as_str()),
            ("localhost", 80, "/gw")
        );
        assert!(HttpClient::new("https://x:1").is_err());
        assert!(HttpClient::new("http://:1").is_err());
    }

    #[test]
    fn responses() {
        let (s, v) =
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{\"a\":1}").unwrap();
        assert_eq!((s, v), (200, serde_json::json!({"a": 1})));
        let (s, v) = parse_response(
            b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"b\r\n4\r\n\":2}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((s, v), (401, serde_json::json!({"b": 2})));
        assert!(parse_response(b"garbage").is_err());
    }
}
