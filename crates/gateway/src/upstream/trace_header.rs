//! The HTTP client of a Streamable HTTP upstream: rmcp's reqwest client, plus the W3C
//! `traceparent` header on every `tools/call` whose `_meta` carries one ([`crate::otel`]).
//!
//! rmcp's transport sends each message from its own worker task, where the caller's span is
//! gone, and its per-transport custom headers are fixed at connection. The trace context
//! travels with the message instead: the gateway puts it into the request's
//! `_meta.traceparent` (MCP's SEP-414 key, which every upstream receives), and this client
//! copies that value into the header of the POST that carries the request. Every other
//! method is rmcp's own client unchanged.

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// Redirects followed for one request (rmcp's default client's limit).
const MAX_REDIRECTS: usize = 10;

/// rmcp's reqwest client for Streamable HTTP that also sends `traceparent`.
#[derive(Clone)]
pub(super) struct TraceHeaderClient(reqwest::Client);

impl TraceHeaderClient {
    /// The client rmcp's `StreamableHttpClientTransport::from_config` would build: no idle
    /// connection pooling, and only same-origin 307/308 redirects followed (a 301/302/303
    /// would turn the POST into a bodyless GET; a cross-origin one would replay the session
    /// id and the bearer token to another host).
    ///
    /// # Errors
    /// The client's own message if it cannot be built (no TLS provider).
    pub(super) fn new() -> Result<Self, String> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let preserves_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|original| original.origin() == attempt.url().origin());
            if !preserves_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("exceeded {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .map(Self)
            .map_err(|e| e.to_string())
    }
}

/// `headers` plus `traceparent` when `message` is a `tools/call` whose `_meta` has one.
fn with_traceparent(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let ClientJsonRpcMessage::Request(request) = message
        && let ClientRequest::CallToolRequest(call) = &request.request
        && let Some(value) = call.params.meta.as_ref().and_then(|m| m.get_traceparent())
        && crate::otel::TraceParent::parse(value).is_some()
        && let Ok(value) = HeaderValue::from_str(value)
    {
        headers.insert(HeaderName::from_static(crate::otel::TRACEPARENT), value);
    }
    headers
}

impl StreamableHttpClient for TraceHeaderClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            max_sse_event_size,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<Self::Error>>> + Send + '_ {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
    + '_ {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
    + '_ {
        self.0.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::with_traceparent;
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest,
        JsonRpcRequest, RequestId, RequestMetaObject,
    };
    use std::collections::HashMap;

    fn call(meta: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("pay");
        if let Some(tp) = meta {
            let mut m = RequestMetaObject::new();
            m.set_traceparent(tp);
            params.meta = Some(m);
        }
        ClientJsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(1),
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        ))
    }

    #[test]
    fn a_calls_traceparent_becomes_the_header() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let h = with_traceparent(&call(Some(tp)), HashMap::new());
        let sent: Vec<(&str, &str)> = h
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap_or_default()))
            .collect();
        assert_eq!(sent, [("traceparent", tp)]);
        assert!(with_traceparent(&call(None), HashMap::new()).is_empty());
        assert!(with_traceparent(&call(Some("00-zz\r\nx: y")), HashMap::new()).is_empty());
    }
}
