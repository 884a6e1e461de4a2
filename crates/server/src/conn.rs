//! The HTTP server loop with connection limits (issue 12 item 6): `axum::serve` reads headers
//! and bodies without a deadline and keeps idle connections forever, so 20,100 idle
//! connections once exhausted the gateway's file descriptors and `/health` stopped answering.
//!
//! [`serve`] accepts connections itself and serves each with hyper's HTTP/1 connection
//! builder, under [`ConnLimits`]:
//!
//! - **connections**: at most `max_connections` in all and `max_connections_per_peer` from one
//!   IP address; a connection over either is closed at once, before anything is read;
//! - **in-flight requests per peer**: at most `max_in_flight_per_peer` requests (a response
//!   body still streaming counts) from one IP address; more get `429` with a JSON error;
//! - **header read timeout**: the request line and headers must arrive within
//!   `header_read_timeout` of the connection starting to wait for them (also between
//!   keep-alive requests), or the connection is closed;
//! - **body read timeout**: a request body must arrive whole within `body_read_timeout` of
//!   its headers, or reading it fails (the handler answers an error);
//! - **idle timeout**: a connection with no request in flight and no bytes read or written
//!   for `idle_timeout` is closed.
//!
//! Every accepted connection gets `TCP_NODELAY` (see [`crate::nodelay_listener`]). Limits are
//! per gateway process; a refused connection or request is logged, never a body.

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Limits on the HTTP server's connections and requests. Durations must be positive and
/// counts at least 1 (the binary validates its configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections in all. Default 1024.
    pub max_connections: usize,
    /// Open connections from one IP address. Default 64.
    pub max_connections_per_peer: usize,
    /// Requests in flight from one IP address (a streaming response counts until it ends).
    /// Default 64.
    pub max_in_flight_per_peer: usize,
    /// Time allowed for a request's line and headers. Default 10 s.
    pub header_read_timeout: Duration,
    /// Time allowed for a request's body once its headers are in. Default 30 s.
    pub body_read_timeout: Duration,
    /// A connection with nothing in flight and no traffic for this long is closed.
    /// Default 60 s.
    pub idle_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_peer: 64,
            max_in_flight_per_peer: 64,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Default)]
struct Peer {
    connections: usize,
    in_flight: usize,
}

/// Connection and request counts, shared by every connection of one server.
struct Counts {
    limits: ConnLimits,
    total: AtomicUsize,
    peers: Mutex<HashMap<IpAddr, Peer>>,
}

/// The address a peer is counted under: every loopback address (all of `127.0.0.0/8`, `::1`,
/// and IPv4-mapped loopback) is one peer, so that a local process cannot open connections from
/// thousands of `127.x.y.z` addresses and exhaust `max_connections` for everyone (red-team F7).
#[must_use]
pub fn peer_key(ip: IpAddr) -> IpAddr {
    let loopback = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    if loopback {
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    } else {
        ip
    }
}

impl Counts {
    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection slot for `ip`, or `None` over a connection limit.
    fn connect(self: &Arc<Self>, ip: IpAddr) -> Option<ConnSlot> {
        let mut peers = self.peers();
        if self.total.load(Ordering::SeqCst) >= self.limits.max_connections {
            return None;
        }
        let peer = peers.entry(ip).or_default();
        if peer.connections >= self.limits.max_connections_per_peer {
            return None;
        }
        peer.connections = peer.connections.saturating_add(1);
        self.total.fetch_add(1, Ordering::SeqCst);
        Some(ConnSlot {
            counts: self.clone(),
            ip,
        })
    }

    /// A request slot for `ip`, or `None` over the in-flight limit.
    fn request(self: &Arc<Self>, ip: IpAddr, activity: &Arc<Activity>) -> Option<RequestSlot> {
        let mut peers = self.peers();
        let peer = peers.entry(ip).or_default();
        if peer.in_flight >= self.limits.max_in_flight_per_peer {
            return None;
        }
        peer.in_flight = peer.in_flight.saturating_add(1);
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        Some(RequestSlot {
            counts: self.clone(),
            ip,
            activity: activity.clone(),
        })
    }

    fn release(&self, ip: IpAddr, connection: bool) {
        let mut peers = self.peers();
        if let Some(peer) = peers.get_mut(&ip) {
            if connection {
                peer.connections = peer.connections.saturating_sub(1);
            } else {
                peer.in_flight = peer.in_flight.saturating_sub(1);
            }
            if peer.connections == 0 && peer.in_flight == 0 {
                peers.remove(&ip);
            }
        }
        if connection {
            self.total.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One open connection, counted until dropped.
struct ConnSlot {
    counts: Arc<Counts>,
    ip: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.counts.release(self.ip, true);
    }
}

/// One request in flight, counted until its response body is finished or dropped.
struct RequestSlot {
    counts: Arc<Counts>,
    ip: IpAddr,
    activity: Arc<Activity>,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.activity.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.activity.touch();
        self.counts.release(self.ip, false);
    }
}

/// Traffic on one connection: when bytes last moved, and how many requests are in flight.
struct Activity {
    start: Instant,
    /// Milliseconds after `start` of the last read or write.
    last: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::SeqCst);
    }

    fn idle_since(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::SeqCst))
    }
}

/// A stream that records its traffic in an [`Activity`].
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        poll
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A body that keeps something alive until it is finished or dropped.
struct Holding<B, T> {
    inner: B,
    _held: T,
}

impl<B, T> HttpBody for Holding<B, T>
where
    B: HttpBody<Data = Bytes> + Unpin,
    T: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails once its deadline has passed.
struct Deadline {
    inner: hyper::body::Incoming,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

/// The error of a request body that did not arrive within the body read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body read timeout")]
pub struct BodyReadTimeout;

/// Whether reading a body failed because of the body read timeout (anywhere in `error`'s
/// chain of sources), so that a handler can answer `408` rather than "too large".
#[must_use]
pub fn is_body_read_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<BodyReadTimeout>() {
            return true;
        }
        next = e.source();
    }
    false
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(axum::BoxError::from)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyReadTimeout))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn too_many_requests() -> Response<Body> {
    let body = serde_json::json!({"error": {"code": "too_many_requests",
        "message": "too many requests in flight from this address; wait for answers before sending more"}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Serve `app` on `listener` under `limits` until `shutdown` completes; then stop accepting
/// and let open connections finish their requests.
///
/// # Errors
/// Never for a single connection's failure (logged); only if the listener itself fails.
pub async fn serve<F>(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let counts = Arc::new(Counts {
        limits,
        total: AtomicUsize::new(0),
        peers: Mutex::new(HashMap::new()),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, or a connection reset before accept: keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ip = peer_key(peer.ip());
        let Some(slot) = counts.connect(ip) else {
            tracing::info!(peer = %peer.ip(), "connection refused: connection limit reached");
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
        tokio::spawn(connection(
            stream,
            ip,
            app.clone(),
            counts.clone(),
            slot,
            stop_rx.clone(),
        ));
    }
    let _ = stop_tx.send(true);
    Ok(())
}

async fn connection(
    stream: TcpStream,
    ip: IpAddr,
    app: Router,
    counts: Arc<Counts>,
    slot: ConnSlot,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let limits = counts.limits.clone();
    let (header_timeout, idle) = (limits.header_read_timeout, limits.idle_timeout);
    let activity = Arc::new(Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
    });
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let app = app.clone();
            let slot = counts.request(ip, &activity);
            let body_timeout = limits.body_read_timeout;
            async move {
                let Some(slot) = slot else {
                    tracing::info!(peer = %ip, "request refused: in-flight limit reached");
                    return Ok::<_, std::convert::Infallible>(too_many_requests());
                };
                let request = request.map(|inner| {
                    Body::new(Deadline {
                        inner,
                        sleep: Box::pin(tokio::time::sleep(body_timeout)),
                    })
                });
                let response = match tower::ServiceExt::oneshot(app, request).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok(response.map(|inner| Body::new(Holding { inner, _held: slot })))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = idle_for(&activity, idle) => {
                tracing::debug!(peer = %ip, "idle connection closed");
                break;
            }
        }
    }
    drop(slot);
}

/// Completes once the connection has had nothing in flight and no traffic for `idle`.
async fn idle_for(activity: &Activity, idle: Duration) {
    loop {
        let deadline = activity.idle_since() + idle;
        tokio::time::sleep_until(deadline).await;
        if activity.in_flight.load(Ordering::SeqCst) == 0
            && activity.idle_since() + idle <= Instant::now()
        {
            return;
        }
        if activity.in_flight.load(Ordering::SeqCst) > 0 {
            // Busy: look again after another idle period.
            activity.touch();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Red-team F7: every loopback source address counts as one peer.
    #[test]
    fn loopback_addresses_are_one_peer() {
        let key = |s: &str| {
            peer_key(
                s.parse::<IpAddr>()
                    .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            )
        };
        assert_eq!(key("127.0.1.2"), key("127.0.0.1"));
        assert_eq!(key("127.20.3.4"), key("127.0.0.1"));
        assert_eq!(key("::1"), key("127.0.0.1"));
        assert_eq!(key("::ffff:127.0.0.9"), key("127.0.0.1"));
        // Control: other addresses keep their own count.
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
        assert_eq!(key("10.0.0.1"), key("10.0.0.1"));
        assert_ne!(key("10.0.0.1"), key("127.0.0.1"));
    }
}
