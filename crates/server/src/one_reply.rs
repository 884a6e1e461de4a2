//! One reply per request on a stdio MCP connection (issue 12): a JSON-RPC request whose id is
//! still in flight is answered with a JSON-RPC error (`-32600`) by this transport wrapper and
//! never reaches the service. rmcp would dispatch it a second time (its table of requests in
//! flight is keyed by id, and a duplicate silently replaces the first entry).
//!
//! An id is in flight from the moment the request is received until the service sends its
//! response or error, even after the client cancels it: the call runs on (calls are detached)
//! and its answer could otherwise reach a later request that reused the id (red-team round 2
//! of 2026-12-03). A cancelled request, which rmcp never answers, frees its id once its call
//! can no longer answer (the drain time after the cancel). (Streamable HTTP sessions get the same rule from [`crate::mcp_http`].)
//!
//! When the client closes its input, the end is passed on to the service only once every
//! request in flight has been answered (at most [`OneReply::drain_within`] later): rmcp gives
//! in-flight requests five seconds after the input ends and then drops them, so a client that
//! wrote a call and closed stdin (a one-shot client) lost the reply of an effect that ran, and
//! the process exited with the effect's outcome unrecorded (red-team of 2026-12-03).

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A server transport that refuses duplicate in-flight request ids.
pub struct OneReply<T> {
    inner: T,
    in_flight: Arc<Mutex<HashSet<RequestId>>>,
    /// Signalled whenever a request leaves `in_flight`.
    answered: Arc<tokio::sync::Notify>,
    on_duplicate: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The input has ended.
    ended: bool,
    drain: Duration,
}

impl<T> OneReply<T> {
    /// Wrap `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            in_flight: Arc::default(),
            answered: Arc::default(),
            on_duplicate: None,
            ended: false,
            drain: Duration::from_secs(60),
        }
    }

    /// After the input ends, wait at most `drain` (default 60 s) for the requests still in
    /// flight to be answered before the service is told the input ended.
    #[must_use]
    pub fn drain_within(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    fn release(&self, id: &RequestId) {
        release(&self.in_flight, &self.answered, id);
    }

    /// Call `hook` for every refused duplicate (to audit it).
    #[must_use]
    pub fn on_duplicate(mut self, hook: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.on_duplicate = Some(hook);
        self
    }
}

/// Take `id` out of `in_flight`, signalling `answered` if it was there.
fn release(in_flight: &Mutex<HashSet<RequestId>>, answered: &tokio::sync::Notify, id: &RequestId) {
    let removed = in_flight
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
    if removed {
        answered.notify_waiters();
    }
}

/// Wait until no request is in flight, or `drain` has passed (a free function holding only
/// `Send` parts, so that `receive` stays `Send` whatever the inner transport is).
async fn drained(
    in_flight: Arc<Mutex<HashSet<RequestId>>>,
    answered: Arc<tokio::sync::Notify>,
    drain: Duration,
) {
    let deadline = tokio::time::Instant::now() + drain;
    loop {
        let notified = answered.notified();
        let left = in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        if left == 0 {
            return;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            tracing::warn!(
                in_flight = left,
                "the client closed its input; requests still running after the drain time get no reply"
            );
            return;
        }
    }
}

impl<T> Transport<RoleServer> for OneReply<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        if let Some(id) = answered {
            self.release(&id);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let message = if self.ended {
                None
            } else {
                self.inner.receive().await
            };
            let Some(message) = message else {
                // Cancel-safe: rmcp may drop this future to send a reply, and call again.
                self.ended = true;
                drained(self.in_flight.clone(), self.answered.clone(), self.drain).await;
                return None;
            };
            // A cancelled request gets no reply from rmcp while its call runs on (calls are
            // detached): its id stays in flight until the call can no longer answer (the
            // drain time: the upstream timeout and 5 s), then it is free for reuse (red-team
            // round 3: it stayed in flight for the connection's life, and the drain at the
            // end of input always waited in full).
            if let JsonRpcMessage::Notification(n) = &message
                && let ClientNotification::CancelledNotification(c) = &n.notification
                && let Some(id) = c.params.request_id.clone()
            {
                let (in_flight, answered, hold) =
                    (self.in_flight.clone(), self.answered.clone(), self.drain);
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    release(&in_flight, &answered, &id);
                });
            }
            let JsonRpcMessage::Request(request) = &message else {
                return Some(message);
            };
            let fresh = self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(request.id.clone());
            if fresh {
                return Some(message);
            }
            let refusal = JsonRpcMessage::error(
                ErrorData::invalid_request(
                    "a request with this id is already in flight on this connection",
                    None,
                ),
                Some(request.id.clone()),
            );
            tracing::warn!(id = %request.id, "duplicate in-flight request id refused");
            if let Some(hook) = &self.on_duplicate {
                hook();
            }
            // Sent around the bookkeeping in `send`: the first request stays in flight.
            if self.inner.send(refusal).await.is_err() {
                return None;
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::OneReply;
    use rmcp::handler::server::ServerHandler;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
        ServerConfig,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::IntoTransport;
    use rmcp::transport::async_rw::TransportAdapterAsyncCombinedRW;
    use rmcp::{ErrorData, RoleServer, ServiceExt};
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::sync::Notify;

    #[derive(Clone, Default)]
    struct Slow {
        calls: Arc<AtomicUsize>,
        gate: Arc<Notify>,
    }

    impl ServerHandler for Slow {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn call_tool(
            &self,
            _request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.gate.notified().await;
            Ok(CallToolResult::success(vec![ContentBlock::text("ok".to_owned())]).into())
        }
    }

    /// Regression: over stdio a second request with an id still in flight was dispatched
    /// again (rmcp keys its in-flight table by id and overwrote the first entry).
    #[tokio::test]
    async fn a_duplicate_in_flight_id_is_refused_and_not_dispatched() {
        let slow = Slow::default();
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let transport = OneReply::new(IntoTransport::<
            RoleServer,
            std::io::Error,
            TransportAdapterAsyncCombinedRW,
        >::into_transport(server_io));
        let server = slow.clone();
        tokio::spawn(async move {
            if let Ok(running) = server.serve(transport).await {
                let _ = running.waiting().await;
            }
        });
        let (read, mut write) = tokio::io::split(client_io);
        let mut lines = BufReader::new(read).lines();
        let mut send = async |v: Value| {
            let mut line = v.to_string();
            line.push('\n');
            write.write_all(line.as_bytes()).await.unwrap();
        };
        send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .await;
        let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(init["id"], 1, "{init}");
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "x", "arguments": {}}});
        send(call.clone()).await;
        while slow.calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        send(call).await;
        let refusal: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(refusal["id"], 5, "{refusal}");
        assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
        slow.gate.notify_one();
        let answer: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(answer["id"], 5, "{answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "ok", "{answer}");
        assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
    }

    /// Red-team round 3 (F6): a cancelled request's id stayed in flight for the connection's
    /// life. It is held while its call could still answer (refused on reuse), then free.
    #[tokio::test]
    async fn a_cancelled_id_is_held_then_released() {
        let slow = Slow::default();
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        let transport = OneReply::new(IntoTransport::<
            RoleServer,
            std::io::Error,
            TransportAdapterAsyncCombinedRW,
        >::into_transport(server_io))
        .drain_within(std::time::Duration::from_millis(300));
        let server = slow.clone();
        tokio::spawn(async move {
            if let Ok(running) = server.serve(transport).await {
                let _ = running.waiting().await;
            }
        });
        let (read, mut write) = tokio::io::split(client_io);
        let mut lines = BufReader::new(read).lines();
        let mut send = async |v: Value| {
            let mut line = v.to_string();
            line.push('\n');
            write.write_all(line.as_bytes()).await.unwrap();
        };
        send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .await;
        let _init = lines.next_line().await.unwrap().unwrap();
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "x", "arguments": {}}});
        send(call.clone()).await;
        while slow.calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7}}),
        )
        .await;
        // Within the hold: refused.
        send(call.clone()).await;
        let refusal: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
        assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
        // After it: the id is free again and the call is dispatched.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        send(call).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while slow.calls.load(Ordering::SeqCst) < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the reuse was not dispatched"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
