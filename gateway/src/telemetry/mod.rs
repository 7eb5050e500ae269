//! OpenTelemetry traces, off by default. With `[telemetry] otlp_endpoint` (or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`/`_TRACES_ENDPOINT`) Tether's spans are exported over
//! OTLP/HTTP with protobuf by a batch processor on a thread of its own. Only spans with
//! [`TARGET`] are exported (never log events), and the log output never shows them. With
//! traces off no layer sees those spans, so each is a disabled span: creating one costs a
//! cached interest check and nothing is evaluated. The spans themselves are in `spans`.

mod export;
pub mod spans;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::filter::{filter_fn, FilterFn};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::{Config, ConfigError};

/// The target of every span Tether exports, and of nothing else.
pub const TARGET: &str = "tether::otel";

/// Whether traces are on (read on paths that would otherwise parse headers for nothing).
static ENABLED: AtomicBool = AtomicBool::new(false);

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What every run span says of the agent, fixed at start.
struct AgentAttributes {
    name: String,
    /// `invoke_agent {name}`.
    span_name: String,
    provider: &'static str,
    address: String,
    port: i64,
    store: &'static str,
}

static AGENT: OnceLock<AgentAttributes> = OnceLock::new();

/// The exporter while traces are on.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// The `tracing` layer that turns Tether's spans into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_filter(filter_fn(|m| m.target() == TARGET))
    }

    /// Exports what is still queued and stops the exporter.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("tether: exporting the last traces failed: {error}");
        }
    }
}

/// A filter for the log output: everything but Tether's spans.
pub fn not_spans() -> FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    filter_fn(|m| m.target() != TARGET)
}

/// The OpenTelemetry protocol names the standard variables may ask for.
const PROTOCOL_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Starts the exporter when traces are configured; `None` when they are off. Honours
/// `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` (`otlp` or `none`), the OTLP endpoint,
/// headers and timeout variables, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_TRACES_SAMPLER`(`_ARG`) and `OTEL_BSP_*`; a variable's value wins over the file's.
pub fn start(config: &Config) -> Result<Option<Traces>, ConfigError> {
    let (telemetry, upstream) = (&config.telemetry, &config.upstream);
    let bad = |key: &str, message: String| ConfigError {
        key: key.to_owned(),
        message,
        location: None,
    };
    if variable("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match variable("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(bad(
                "OTEL_TRACES_EXPORTER",
                format!("{other:?}: Tether exports otlp (or none)"),
            ))
        }
    }
    for name in PROTOCOL_VARIABLES {
        if let Some(p) = variable(name).filter(|p| p != "http/protobuf") {
            return Err(bad(
                name,
                format!("{p:?}: Tether exports OTLP over HTTP with protobuf (http/protobuf)"),
            ));
        }
    }
    let from_environment = variable("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || variable("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(export::Ureq::new());
    match (&telemetry.otlp_endpoint, from_environment) {
        (_, true) => {}
        (Some(base), false) => builder = builder.with_endpoint(format!("{base}/v1/traces")),
        (None, false) => return Ok(None),
    }
    let exporter = builder
        .build()
        .map_err(|e| bad("telemetry.otlp_endpoint", e.to_string()))?;
    let mut resource = Resource::builder();
    if variable("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("tether");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("tether");
    let (address, port) = match upstream.authority.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(80)),
        None => (upstream.authority.clone(), 80),
    };
    let postgres =
        config.store.starts_with("postgres://") || config.store.starts_with("postgresql://");
    let _ = AGENT.set(AgentAttributes {
        span_name: format!("invoke_agent {}", telemetry.agent_name),
        name: telemetry.agent_name.clone(),
        provider: spans::provider_name(config.protocol),
        address,
        port,
        store: if postgres { "postgresql" } else { "sqlite" },
    });
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some(Traces { provider, tracer }))
}
