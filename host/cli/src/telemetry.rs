//! Where the command's events and spans go.
//!
//! Events go to stderr, filtered by `SANDFLEET_LOG` (default `warn`), with
//! every field's control characters escaped: fields carry task ids,
//! commands' output and what tasks named their files, and none of it may
//! move the cursor, rewrite the screen or forge a line of the operator's
//! terminal. When
//! an OTLP endpoint is configured the OpenTelemetry way
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! for traces alone), spans are also exported to it over OTLP/HTTP
//! (protobuf), filtered by `SANDFLEET_TRACE` (default `info`: runs, tasks,
//! claims and commands; `debug` adds every plugin call). Without an
//! endpoint nothing is exported and no exporter is built.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use sandfleet_engine::printable;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format;
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
        .fmt_fields(escaped_fields())
        .with_ansi(colours_on_stderr())
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

/// Whether levels are coloured: only on a terminal, and never under
/// `NO_COLOR` (no-color.org). A log file or a CI console gets no escape
/// sequences at all, so none can be mistaken for a task's.
fn colours_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Event and span fields as the default formatter writes them (the message
/// bare, the others `name=value`), each value escaped.
fn escaped_fields() -> impl for<'writer> FormatFields<'writer> + 'static {
    format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        let text = printable(&text);
        if field.name() == "message" {
            write!(writer, "{text}")
        } else {
            write!(writer, "{}={text}", field.name())
        }
    })
    .delimited(" ")
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything the formatter wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_tasks_text_cannot_drive_the_terminal() {
        let written = Written::default();
        let sink = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(escaped_fields())
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\rforged\nERROR fake line";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::warn_span!("task", task = hostile);
            let _in = span.enter();
            tracing::warn!(stderr = hostile, "quarantined: {hostile}");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        // One line, and no control character but its end.
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            !text.trim_end_matches('\n').chars().any(char::is_control),
            "{text:?}"
        );
        assert!(text.contains("\\u{1b}[2J"), "{text}");
    }
}
