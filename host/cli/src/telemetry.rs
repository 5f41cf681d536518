//! Where the command's events and spans go.
//!
//! Events go to stderr, filtered by `SANDFLEET_LOG` (default `warn`). When
//! an OTLP endpoint is configured the OpenTelemetry way
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! for traces alone), spans are also exported to it over OTLP/HTTP
//! (protobuf), filtered by `SANDFLEET_TRACE` (default `info`: runs, tasks,
//! claims and commands; `debug` adds every plugin call). Without an
//! endpoint nothing is exported and no exporter is built.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The environment variables that turn export on, in the order the
/// OpenTelemetry specification gives them precedence.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Installed telemetry; dropping it sends the spans not yet exported.
pub(crate) struct Telemetry {
    exporting: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.exporting.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("warning: exporting the last spans over OTLP failed: {error}");
        }
    }
}

/// Installs the global subscriber: stderr, and OTLP when configured.
pub(crate) fn init() -> Telemetry {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter("SANDFLEET_LOG", "warn"));
    let endpoint = ENDPOINT_VARIABLES
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    let exporting = endpoint.and_then(|endpoint| match provider() {
        Ok(provider) => Some(provider),
        Err(error) => {
            eprintln!("warning: not exporting spans to {endpoint}: {error}");
            None
        }
    });
    let export = exporting.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("sandfleet"))
            .with_filter(filter("SANDFLEET_TRACE", "info"))
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(export)
        .init();
    Telemetry { exporting }
}

/// The filter in `variable`, or `default` when it is unset or invalid (an
/// invalid one is reported).
fn filter(variable: &str, default: &str) -> EnvFilter {
    match std::env::var(variable) {
        Ok(directives) => EnvFilter::try_new(&directives).unwrap_or_else(|error| {
            eprintln!("warning: {variable}={directives:?} is not a valid filter ({error}); using {default:?}");
            EnvFilter::new(default)
        }),
        Err(_) => EnvFilter::new(default),
    }
}

/// A tracer provider batching spans to the endpoint the environment names
/// (the exporter reads the `OTEL_EXPORTER_OTLP_*` variables itself).
fn provider() -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "sandfleet".into());
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build())
}
