//! OpenTelemetry trace export (issue 15): the `[telemetry]` table, and the
//! `tracing-opentelemetry` layer with its OTLP/HTTP exporter.
//!
//! On when `[telemetry] otlp_endpoint` is set in the config of `serve` or `wrap`, or else
//! when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the traces URL as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL: `/v1/traces` is appended) is set; off
//! otherwise. Off, nothing of this is installed and the gateway's spans are not even built
//! (no subscriber wants them: the log layer takes events only).
//!
//! On, spans go through the SDK's batch processor, on its own thread, to
//! `POST {endpoint}/v1/traces` (OTLP protobuf over HTTP): a tool call only queues its spans
//! and never waits for the collector; when the queue is full, spans are dropped. A failed
//! export is logged as a warning at most once a minute. At exit the queue is flushed (at
//! most 5 s). Only spans of SecureClaw's own crates are exported, and no log event: what a
//! span carries is its declared attributes, which are names and codes only
//! (`secureclaw_gateway::otel` lists them).

use anyhow::{Result, bail};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde::Deserialize;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing_subscriber::{Layer, Registry};

/// Environment variable with the OTLP base URL (`/v1/traces` is appended).
const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Environment variable with the OTLP traces URL (used as is).
const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// How long one export may take, and how long the flush at exit may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one warning about failed exports per this interval.
const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// `[telemetry]`: OpenTelemetry trace export.
///
/// ```toml
/// [telemetry]
/// otlp_endpoint = "http://localhost:4318"  # OTLP/HTTP base URL; traces go to …/v1/traces
/// service_name = "secureclaw-prod"         # default: $OTEL_SERVICE_NAME, else "secureclaw"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySection {
    /// Base URL of an OTLP/HTTP collector (`http://host:4318`); spans are posted to
    /// `{otlp_endpoint}/v1/traces`. Unset: `$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `$OTEL_EXPORTER_OTLP_ENDPOINT`, else no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans. Default: `$OTEL_SERVICE_NAME`, else `secureclaw`.
    pub service_name: Option<String>,
}

impl TelemetrySection {
    /// Check the table: an endpoint must be an `http://` or `https://` URL with a host and
    /// no query or fragment; a service name must not be empty.
    ///
    /// # Errors
    /// A message naming the key and what is wrong.
    pub fn validate(&self) -> Result<()> {
        if let Some(endpoint) = &self.otlp_endpoint {
            traces_url(endpoint, true)
                .map_err(|e| anyhow::anyhow!("telemetry.otlp_endpoint `{endpoint}`: {e}"))?;
        }
        if self
            .service_name
            .as_deref()
            .is_some_and(|s| s.trim().is_empty())
        {
            bail!("telemetry.service_name must not be empty");
        }
        Ok(())
    }
}

/// Where and as what spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The full traces URL (`…/v1/traces`).
    pub traces_url: String,
    /// `service.name`, if configured (else the SDK's: `$OTEL_SERVICE_NAME` or ours).
    pub service_name: Option<String>,
}

/// The traces URL for `endpoint`: with `append`, `endpoint` is a base URL and `/v1/traces`
/// is appended (after its path, if any).
fn traces_url(endpoint: &str, append: bool) -> std::result::Result<String, String> {
    let url = reqwest::Url::parse(endpoint.trim()).map_err(|e| {
        format!("not a URL ({e}); write the collector's OTLP/HTTP address, such as http://localhost:4318")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be http or https, not `{}` (OTLP over gRPC is not supported; use the collector's OTLP/HTTP port, usually 4318)",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("the URL must not have a query or a fragment".to_owned());
    }
    let mut out = url.to_string();
    if append {
        out = format!("{}/v1/traces", out.trim_end_matches('/'));
    }
    Ok(out)
}

/// Whether and where to export: `section`'s endpoint, else the environment's (read with
/// `env`). `None` when none is set.
///
/// # Errors
/// An invalid endpoint (in the config or the environment), named.
pub fn export_of(
    section: &TelemetrySection,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Export>> {
    section.validate()?;
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let traces_url = if let Some(endpoint) = &section.otlp_endpoint {
        traces_url(endpoint, true)
            .map_err(|e| anyhow::anyhow!("telemetry.otlp_endpoint `{endpoint}`: {e}"))?
    } else if let Some(url) = env(ENV_TRACES_ENDPOINT) {
        traces_url(&url, false)
            .map_err(|e| anyhow::anyhow!("{ENV_TRACES_ENDPOINT} `{url}`: {e}"))?
    } else if let Some(url) = env(ENV_ENDPOINT) {
        traces_url(&url, true).map_err(|e| anyhow::anyhow!("{ENV_ENDPOINT} `{url}`: {e}"))?
    } else {
        return Ok(None);
    };
    Ok(Some(Export {
        traces_url,
        service_name: section.service_name.clone(),
    }))
}

/// The `[telemetry]` table of the config file at `path` (only that table; a file that cannot
/// be read or parsed gives the default, and the full load reports it).
///
/// # Errors
/// A `[telemetry]` table with unknown keys or values of the wrong type.
pub fn section_of_file(path: &std::path::Path) -> Result<TelemetrySection> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(TelemetrySection::default());
    };
    let Ok(value) = toml::from_str::<toml::Value>(&text) else {
        return Ok(TelemetrySection::default());
    };
    match value.get("telemetry") {
        Some(table) => table
            .clone()
            .try_into()
            .map_err(|e| anyhow::anyhow!("{}: [telemetry]: {e}", path.display())),
        None => Ok(TelemetrySection::default()),
    }
}

/// The export pipeline, shut down (flushed) by [`Pipeline::shutdown`] at exit.
#[derive(Debug)]
pub struct Pipeline(SdkTracerProvider);

impl Pipeline {
    /// Export what is still queued (at most [`EXPORT_TIMEOUT`]) and stop.
    pub fn shutdown(self) {
        if let Err(e) = self.0.shutdown_with_timeout(EXPORT_TIMEOUT) {
            tracing::warn!(target: "secureclaw::telemetry", error = %e, "flushing the spans at exit failed");
        }
    }
}

/// The `tracing` layer that exports SecureClaw's spans to `export`, and its pipeline.
///
/// # Errors
/// The exporter cannot be built (the message says why).
pub fn layer(export: &Export) -> Result<(Box<dyn Layer<Registry> + Send + Sync>, Pipeline)> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(export.traces_url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| anyhow::anyhow!("OTLP exporter for `{}`: {e}", export.traces_url))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    resource = match &export.service_name {
        Some(name) => resource.with_service_name(name.clone()),
        None if std::env::var_os("OTEL_SERVICE_NAME").is_some() => resource,
        None => resource.with_service_name("secureclaw"),
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Warned::new(exporter, export.traces_url.clone()))
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("secureclaw");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        // Spans only, and only SecureClaw's own: a log event never becomes a span event, and
        // a library's span (rmcp logs whole protocol messages) never reaches the collector.
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_span() && meta.target().starts_with("secureclaw")
        }))
        .boxed();
    Ok((layer, Pipeline(provider)))
}

/// An exporter that logs its failures (a warning at most once per [`WARN_INTERVAL`]).
#[derive(Debug)]
struct Warned<E> {
    inner: E,
    url: String,
    last: Mutex<Option<Instant>>,
}

impl<E> Warned<E> {
    fn new(inner: E, url: String) -> Self {
        Self {
            inner,
            url,
            last: Mutex::new(None),
        }
    }

    /// Warn about `error` unless a warning went out less than [`WARN_INTERVAL`] ago.
    fn warn(&self, error: &dyn std::fmt::Display) {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < WARN_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            target: "secureclaw::telemetry",
            collector = %self.url,
            error = %error,
            "exporting spans failed; tool calls are not affected (spans are dropped; next warning in a minute at the earliest)"
        );
    }
}

impl<E: SpanExporter> SpanExporter for Warned<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.warn(e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn endpoint_from_config_or_environment() {
        let none = TelemetrySection::default();
        assert_eq!(export_of(&none, env(&[])).unwrap(), None);
        let from_env = export_of(&none, env(&[(ENV_ENDPOINT, "http://collector:4318/")]))
            .unwrap()
            .unwrap();
        assert_eq!(from_env.traces_url, "http://collector:4318/v1/traces");
        let traces = export_of(
            &none,
            env(&[
                (ENV_ENDPOINT, "http://ignored:4318"),
                (ENV_TRACES_ENDPOINT, "https://c.example/otlp/traces"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(traces.traces_url, "https://c.example/otlp/traces");
        let configured = TelemetrySection {
            otlp_endpoint: Some("http://127.0.0.1:4318/base".into()),
            service_name: Some("gw-1".into()),
        };
        let export = export_of(&configured, env(&[(ENV_ENDPOINT, "http://other:1")]))
            .unwrap()
            .unwrap();
        assert_eq!(export.traces_url, "http://127.0.0.1:4318/base/v1/traces");
        assert_eq!(export.service_name.as_deref(), Some("gw-1"));
    }

    #[test]
    fn invalid_endpoints_are_named() {
        for (bad, says) in [
            ("localhost:4318", "scheme"),
            ("grpc://collector:4317", "scheme"),
            ("not a url", "not a URL"),
            ("http://collector:4318/?x=1", "query"),
        ] {
            let section = TelemetrySection {
                otlp_endpoint: Some(bad.into()),
                service_name: None,
            };
            let err = format!("{:#}", section.validate().unwrap_err());
            assert!(
                err.contains("telemetry.otlp_endpoint") && err.contains(says),
                "{bad}: {err}"
            );
        }
        let err = format!(
            "{:#}",
            export_of(
                &TelemetrySection::default(),
                env(&[(ENV_ENDPOINT, "collector:4318")])
            )
            .unwrap_err()
        );
        assert!(err.contains(ENV_ENDPOINT), "{err}");
        let empty = TelemetrySection {
            otlp_endpoint: None,
            service_name: Some(" ".into()),
        };
        assert!(empty.validate().is_err());
    }
}
