//! Line framing for the stdio MCP front end (issue 12 item 2): every line a client sends gets
//! exactly one answer, also when no library parser could read it.
//!
//! rmcp's stdio transport drops without a word a line that is not UTF-8 or not JSON, one
//! nested past `serde_json`'s 128 levels, and one longer than its 16 MiB cap. [`LineFramed`]
//! reads the lines itself and hands rmcp only messages it has already accepted:
//!
//! - a line longer than `max_line` bytes is discarded as it streams in (at most `max_line`
//!   bytes of it are ever held, to recover its id) and answered `-32600` with its id when the
//!   start of the line names one;
//! - bytes that are not JSON (invalid UTF-8 included) are answered `-32700` with id `null`;
//! - JSON nested deeper than [`MESSAGE_MAX_DEPTH`] (the one depth limit, scanned before any
//!   library parser) is answered `-32600`, a duplicate object key `-32602`
//!   (`invalid_arguments`, naming the key), both with the id when it can be recovered;
//! - JSON that is not a JSON-RPC message (a batch, a request without a method) is answered
//!   `-32600`; a notification (no id) of an unknown shape is ignored, as JSON-RPC requires.
//!
//! Answers to refused lines are sent on a spawned task through the wrapped writer transport,
//! so a cancelled `receive` (rmcp polls it inside a `select!`) never loses one, and the partial
//! line being read lives on the struct, so a cancelled read resumes where it stopped.

use rmcp::RoleServer;
use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use secureclaw_core::rawjson::{MESSAGE_MAX_DEPTH, RawJsonError, recover_id, scan};
use serde_json::Value;
use std::borrow::Cow;
use std::future::Future;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Why a line was refused before rmcp saw it (for logs and the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRefusal {
    /// Longer than the line limit.
    TooLarge,
    /// Not JSON, or not UTF-8.
    NotJson,
    /// Nested deeper than [`MESSAGE_MAX_DEPTH`].
    TooDeep,
    /// An object with the same key twice.
    DuplicateKey,
    /// More values than [`secureclaw_core::rawjson::MESSAGE_MAX_VALUES`].
    TooManyValues,
    /// JSON, but not a JSON-RPC message the server accepts (a batch, no method).
    NotJsonRpc,
}

impl LineRefusal {
    /// A stable reason code (`parse_error`, `request_too_large`, …).
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::TooLarge => "request_too_large",
            Self::NotJson => "parse_error",
            Self::TooDeep => "request_too_deep",
            Self::DuplicateKey => "duplicate_key",
            Self::TooManyValues => "request_too_many_values",
            Self::NotJsonRpc => "invalid_request",
        }
    }
}

/// Called once for every refused line, with the reason and the recovered id (if any).
pub type OnRefusal = std::sync::Arc<dyn Fn(LineRefusal, Option<&RequestId>) + Send + Sync>;

/// A server transport that reads newline-delimited JSON-RPC from `R` with the checks of the
/// module docs, and sends through `W` (a transport used only for sending, e.g. rmcp's
/// [`rmcp::transport::async_rw::AsyncRwTransport`] over an empty reader and stdout).
pub struct LineFramed<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max_line: usize,
    /// Set after an oversized line was answered, until its newline has been read.
    discarding: bool,
    write: W,
    on_refusal: Option<OnRefusal>,
}

/// One step of the bounded line reader.
enum Read {
    /// A whole line (without its newline) is in `line`.
    Line,
    /// A line went past the limit; `line` holds its first `max_line` bytes.
    Oversized,
    /// End of input (an unterminated last line is dropped: nobody is left to answer).
    Eof,
}

impl<R, W> LineFramed<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: Transport<RoleServer>,
{
    /// Read lines of at most `max_line` bytes (without the newline) from `read`; answer and
    /// send through `write`.
    pub fn new(read: R, write: W, max_line: usize) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line,
            discarding: false,
            write,
            on_refusal: None,
        }
    }

    /// Call `hook` for every refused line (to audit it).
    #[must_use]
    pub fn on_refusal(mut self, hook: OnRefusal) -> Self {
        self.on_refusal = Some(hook);
        self
    }

    /// Read up to the next newline without holding more than `max_line` bytes. Cancel-safe:
    /// bytes are consumed from the reader only together with their copy into `line`.
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                self.line.clear();
                return Ok(Read::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let body = newline.unwrap_or(available.len());
            let consumed = newline.map_or(body, |n| n.saturating_add(1));
            let mut outcome = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else {
                let room = self.max_line.saturating_sub(self.line.len());
                let take = body.min(room);
                self.line
                    .extend_from_slice(available.get(..take).unwrap_or_default());
                if body > room {
                    // Over the limit: answered now, the rest of the line is skipped as it comes.
                    self.discarding = newline.is_none();
                    outcome = Some(Read::Oversized);
                } else if newline.is_some() {
                    outcome = Some(Read::Line);
                }
            }
            self.read.consume(consumed);
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
    }

    fn refuse(
        &mut self,
        why: LineRefusal,
        id: Option<RequestId>,
        code: ErrorCode,
        message: String,
    ) {
        tracing::info!(
            reason = why.code(),
            "refused a stdio MCP line before parsing"
        );
        if let Some(hook) = &self.on_refusal {
            hook(why, id.as_ref());
        }
        let reply: TxJsonRpcMessage<RoleServer> =
            JsonRpcMessage::error(ErrorData::new(code, Cow::Owned(message), None), id);
        let send = self.write.send(reply);
        tokio::spawn(async move {
            if let Err(e) = send.await {
                tracing::debug!(error = %e, "could not answer a refused line");
            }
        });
    }

    /// The line read so far; the buffer starts empty again (a long line's memory is freed).
    fn take_line(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.line)
    }

    /// Check one complete line; `Some` is a message for rmcp.
    fn accept(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        if let Err(e) = scan(line, MESSAGE_MAX_DEPTH) {
            let (why, code, message) = match &e {
                RawJsonError::Syntax(_) => {
                    self.refuse(
                        LineRefusal::NotJson,
                        None,
                        ErrorCode::PARSE_ERROR,
                        "parse error: the line is not valid JSON (or not UTF-8)".to_owned(),
                    );
                    return None;
                }
                RawJsonError::TooDeep { .. } => (
                    LineRefusal::TooDeep,
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "invalid request: {e} (arguments may nest {} levels)",
                        secureclaw_core::canonical::MAX_DEPTH
                    ),
                ),
                RawJsonError::DuplicateKey { .. } => (
                    LineRefusal::DuplicateKey,
                    ErrorCode::INVALID_PARAMS,
                    format!("invalid_arguments: {e}"),
                ),
                RawJsonError::TooManyValues { .. } => (
                    LineRefusal::TooManyValues,
                    ErrorCode::INVALID_REQUEST,
                    format!("invalid request: {e} (send a large document as one string)"),
                ),
            };
            self.refuse(why, request_id(line), code, message);
            return None;
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
            Ok(message) => Some(message),
            Err(e) => {
                let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
                let notification = value.get("method").is_some() && value.get("id").is_none();
                if notification {
                    // JSON-RPC never answers a notification.
                    // Not the parser's message: it may quote a value from the line.
                    tracing::debug!(category = ?e.classify(), "ignored a notification of an unknown shape");
                } else {
                    let message = if value.is_array() {
                        "invalid request: batches are not supported".to_owned()
                    } else {
                        "invalid request: not a JSON-RPC 2.0 request, notification or response"
                            .to_owned()
                    };
                    self.refuse(
                        LineRefusal::NotJsonRpc,
                        request_id(line),
                        ErrorCode::INVALID_REQUEST,
                        message,
                    );
                }
                None
            }
        }
    }
}

/// The id of a refused line, when it can be recovered and is a JSON-RPC id.
fn request_id(line: &[u8]) -> Option<RequestId> {
    recover_id(line).and_then(|v| serde_json::from_value::<RequestId>(v).ok())
}

impl<R, W> Transport<RoleServer> for LineFramed<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: Transport<RoleServer>,
{
    type Error = W::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.write.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(Read::Line) => {
                    let line = self.take_line();
                    if let Some(message) = self.accept(&line) {
                        return Some(message);
                    }
                }
                Ok(Read::Oversized) => {
                    let start = self.take_line();
                    let limit = self.max_line;
                    self.refuse(
                        LineRefusal::TooLarge,
                        request_id(&start),
                        ErrorCode::INVALID_REQUEST,
                        format!("invalid request: the message is larger than {limit} bytes"),
                    );
                }
                Ok(Read::Eof) => return None,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read from stdin");
                    return None;
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.write.close()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::{LineFramed, LineRefusal};
    use rmcp::RoleServer;
    use rmcp::model::JsonRpcMessage;
    use rmcp::transport::Transport;
    use rmcp::transport::async_rw::AsyncRwTransport;
    use serde_json::Value;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A line far over the limit, streamed in small pieces, is answered once with the id from
    /// its start, never held whole, and the next line is delivered.
    #[tokio::test]
    async fn an_oversized_line_is_answered_and_skipped_as_it_streams() {
        let (mut client_write, server_read) = tokio::io::duplex(4096);
        let (server_write, client_read) = tokio::io::duplex(1 << 16);
        let writer = AsyncRwTransport::<RoleServer, _, _>::new(tokio::io::empty(), server_write);
        let refused = Arc::new(Mutex::new(Vec::new()));
        let seen = refused.clone();
        let mut framed = LineFramed::new(server_read, writer, 1024).on_refusal(Arc::new(
            move |why: LineRefusal, id: Option<&rmcp::model::RequestId>| {
                seen.lock().unwrap().push((why, id.cloned()));
            },
        ));
        tokio::spawn(async move {
            client_write
                .write_all(br#"{"jsonrpc":"2.0","id":"big","method":"ping","params":{"x":""#)
                .await
                .unwrap();
            let chunk = vec![b'a'; 4096];
            for _ in 0..256 {
                client_write.write_all(&chunk).await.unwrap();
            }
            client_write.write_all(b"\"}}\n").await.unwrap();
            client_write
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
                .await
                .unwrap();
        });
        let message = framed.receive().await.expect("the next line");
        let JsonRpcMessage::Request(request) = message else {
            panic!("not a request: {message:?}");
        };
        assert_eq!(request.id, rmcp::model::RequestId::Number(2));
        assert!(
            framed.line.capacity() <= 1024 * 2,
            "{}",
            framed.line.capacity()
        );
        let mut lines = BufReader::new(client_read).lines();
        let answer: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(answer["id"], "big", "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        assert_eq!(
            *refused.lock().unwrap(),
            vec![(
                LineRefusal::TooLarge,
                Some(rmcp::model::RequestId::String("big".into()))
            )]
        );
    }

    /// Blank lines and notifications of unknown shape get no answer; a line of exactly the
    /// limit is accepted.
    #[tokio::test]
    async fn notifications_and_blank_lines_are_not_answered() {
        let ping = br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
        let (mut client_write, server_read) = tokio::io::duplex(4096);
        let (server_write, _client_read) = tokio::io::duplex(1 << 16);
        let writer = AsyncRwTransport::<RoleServer, _, _>::new(tokio::io::empty(), server_write);
        let refused = Arc::new(Mutex::new(0usize));
        let seen = refused.clone();
        let mut framed = LineFramed::new(server_read, writer, ping.len()).on_refusal(Arc::new(
            move |_: LineRefusal, _: Option<&rmcp::model::RequestId>| {
                *seen.lock().unwrap() += 1;
            },
        ));
        client_write.write_all(b"\n  \r\n").await.unwrap();
        client_write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":5}\n")
            .await
            .unwrap();
        client_write.write_all(ping).await.unwrap();
        client_write.write_all(b"\n").await.unwrap();
        let message = framed.receive().await.expect("the ping");
        assert!(matches!(message, JsonRpcMessage::Request(_)), "{message:?}");
        assert_eq!(*refused.lock().unwrap(), 0);
    }
}
