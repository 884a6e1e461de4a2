//! W3C trace context for OpenTelemetry traces (issue 15): the `traceparent` a request brings
//! in, and the one the gateway passes on to an upstream.
//!
//! The gateway's spans are ordinary `tracing` spans. Whether they reach a collector is the
//! binary's choice: `secureclaw serve` and `wrap` install a `tracing-opentelemetry` layer and
//! an OTLP exporter when `[telemetry] otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//! (see the binary's `telemetry` module). Without that layer no subscriber wants the spans,
//! so `tracing` does not build them, and every function here is a no-op: no parent is set,
//! [`current_traceparent`] is `None` and nothing is sent upstream.
//!
//! The spans (names are fixed; attributes are names and codes only — **never** an argument
//! value, a handle id or any text of a result):
//!
//! | span | where | attributes |
//! |---|---|---|
//! | `tool_call` | [`crate::Gateway::call`], [`crate::Gateway::preview`], [`crate::Gateway::commit`] | `operation` (`call`, `preview`, `commit`), `tool` (the catalog name, `unknown` for a name no upstream provides), `upstream`, `decision`, `reason`, `monitor_action` |
//! | `preview` | the write path's PREVIEW | — |
//! | `policy` | the policy decision of a preview or a read | `decision` (`allow`, `confirm`, `deny`), `reason` |
//! | `accept` | the executor's acceptance predicate at COMMIT | `outcome` (`accepted` or the reason code) |
//! | `upstream_call` | one `tools/call` to an upstream | `upstream`, `tool` (the upstream's own name), `outcome` (`ok`, `tool_error`, `timeout`, `error`, …) |
//! | `declassify` | the summary of every result (read path and committed effects) | `handles` (how many were issued), `cut` (the summary left entries out) |
//!
//! Trace context: the front ends run a call in [`with_parent`] with the `traceparent` of the
//! MCP request's `_meta` or of the HTTP API's `traceparent` header; the `tool_call` span then
//! continues that trace. Each upstream `tools/call` carries the `upstream_call` span's context
//! as `_meta.traceparent`, and an HTTP upstream also as the `traceparent` header. Only the ids
//! and the sampled flag cross: `tracestate` and baggage are neither read nor sent. A
//! `traceparent` chosen by the runtime passes its trace id (16 bytes) on to the upstreams;
//! it never carries anything the runtime did not already hold.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `_meta` key and HTTP header that carry a W3C trace context (`traceparent`).
pub const TRACEPARENT: &str = "traceparent";

/// A parsed W3C `traceparent` (version `00`): trace id, parent span id and trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: TraceId,
    span_id: SpanId,
    flags: TraceFlags,
}

impl TraceParent {
    /// Parse `value` as a W3C `traceparent`: `VV-TTTT…(32 hex)-SSSS…(16 hex)-FF`, lower-case
    /// hex, with a known version (`ff` is invalid; a later version may carry more fields after
    /// the four, which are ignored) and neither id all zeros. `None` for anything else: a
    /// malformed context is dropped and the call starts a new trace.
    #[must_use]
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        let mut parts = value.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) {
            return None;
        }
        if !hex(flags, 2) || (version == "00" && parts.next().is_some()) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags: TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        })
    }

    /// The trace id, 32 lower-case hex digits.
    #[must_use]
    pub fn trace_id(&self) -> String {
        self.trace_id.to_string()
    }

    /// The parent span id, 16 lower-case hex digits.
    #[must_use]
    pub fn span_id(&self) -> String {
        self.span_id.to_string()
    }

    fn context(self) -> opentelemetry::Context {
        opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
            self.trace_id,
            self.span_id,
            self.flags,
            true,
            TraceState::default(),
        ))
    }
}

impl std::fmt::Display for TraceParent {
    /// The header form: `00-{trace id}-{span id}-{flags}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.span_id,
            self.flags.to_u8()
        )
    }
}

tokio::task_local! {
    /// The remote parent of the `tool_call` spans started in [`with_parent`].
    static PARENT: Option<TraceParent>;
}

/// Run `work` with `parent` (a request's `traceparent`, if it had a valid one) as the parent
/// of the `tool_call` span that a [`crate::Gateway::call`], `preview` or `commit` inside it
/// starts. Front ends wrap each tool call in this; without it a call starts a new trace.
pub async fn with_parent<F: std::future::Future>(
    parent: Option<TraceParent>,
    work: F,
) -> F::Output {
    PARENT.scope(parent, work).await
}

/// Give `span` (just created, not yet entered) the remote parent of the enclosing
/// [`with_parent`], if any.
pub(crate) fn adopt_parent(span: &tracing::Span) {
    if span.is_disabled() {
        return;
    }
    if let Ok(Some(parent)) = PARENT.try_with(|p| *p) {
        // Fails only without an OpenTelemetry layer (nothing to parent then).
        let _ = span.set_parent(parent.context());
    }
}

/// The `traceparent` of the current span (the `upstream_call` span when an upstream is
/// called), if an OpenTelemetry layer records it.
#[must_use]
pub fn current_traceparent() -> Option<TraceParent> {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    sc.is_valid().then(|| TraceParent {
        trace_id: sc.trace_id(),
        span_id: sc.span_id(),
        flags: TraceFlags::new(sc.trace_flags().to_u8() & TraceFlags::SAMPLED.to_u8()),
    })
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    #[test]
    fn traceparent_parses_and_prints_back() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(v).unwrap();
        assert_eq!(p.to_string(), v);
        assert_eq!(p.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id(), "00f067aa0ba902b7");
        // A later version may append fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
    }

    #[test]
    fn malformed_traceparents_are_dropped() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert!(TraceParent::parse(bad).is_none(), "{bad}");
        }
    }
}
