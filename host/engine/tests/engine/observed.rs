//! The wrapper every cluster is built with: each call is heard once it
//! finishes, with its cluster, its operation and how it ended.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sandfleet_core::{Backend, ExecRequest, TemplateSpec};
use sandfleet_engine::{BackendCall, CallObserver, Observed, Operation};

use tracing_subscriber::layer::SubscriberExt;

use crate::fixture::Fixture;

#[derive(Default)]
struct Heard(Mutex<Vec<(String, Operation, &'static str)>>);

impl CallObserver for Heard {
    fn observe(&self, call: &BackendCall<'_>) {
        self.0
            .lock()
            .unwrap()
            .push((call.cluster.to_string(), call.operation, call.outcome));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_is_heard_with_its_cluster_operation_and_outcome() {
    let fixture = Fixture::new(1);
    let heard = Arc::new(Heard::default());
    let backend = Observed::new(fixture.backend(), Some(heard.clone()));
    let labels = fixture.run_id.labels();
    let template = backend
        .ensure_template(&fixture.template_spec("img0"))
        .await
        .unwrap();
    let sandbox = backend
        .claim(&template, &labels, Instant::now() + Duration::from_secs(60))
        .await
        .unwrap();
    let request = ExecRequest {
        argv: vec!["true".into()],
        workdir: None,
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        merge_stderr: false,
        stdin: None,
        max_output: None,
    };
    backend.exec(&sandbox, &request, None).await.unwrap();
    backend.release(&sandbox).await.unwrap();
    let error = backend.exec(&sandbox, &request, None).await.unwrap_err();
    backend.reap(&fixture.run_id).await.unwrap();

    let heard = heard.0.lock().unwrap().clone();
    let cluster = backend.name().to_string();
    assert_eq!(
        heard,
        [
            (cluster.clone(), Operation::EnsureTemplate, "ok"),
            (cluster.clone(), Operation::Claim, "ok"),
            (cluster.clone(), Operation::Exec, "ok"),
            (cluster.clone(), Operation::Release, "ok"),
            (cluster.clone(), Operation::Exec, error.kind().name()),
            (cluster, Operation::Reap, "ok"),
        ]
    );
    assert_ne!(error.kind().name(), "ok");
}

/// A span's id and its fields as last recorded.
type SpanSeen = (u64, BTreeMap<String, String>);

/// The `backend` spans opened.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanSeen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attributes: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attributes.metadata().name() == "backend" {
            let mut fields = BTreeMap::new();
            attributes.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push((id.into_u64(), fields));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(s, _)| *s == id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

impl Spans {
    /// The spans of `operation` whose `field` is `value` (other tests'
    /// spans are heard too).
    fn of(&self, operation: &str, field: &str, value: &str) -> Vec<BTreeMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, fields)| {
                fields.get("operation").is_some_and(|o| o == operation)
                    && fields.get(field).is_some_and(|v| v == value)
            })
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

/// The spans of the whole test process. A global subscriber, not a
/// scoped one: a callsite first reached by a test on another thread
/// before a scoped subscriber exists keeps no interest in it, and its spans
/// would be lost now and then.
fn spans() -> &'static Spans {
    static SPANS: OnceLock<Spans> = OnceLock::new();
    SPANS.get_or_init(|| {
        let spans = Spans::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone()))
            .expect("no other test sets a global subscriber");
        spans
    })
}

#[tokio::test(flavor = "current_thread")]
async fn every_call_runs_in_a_span_naming_its_cluster_and_what_it_is_about() {
    let spans = spans();
    let fixture = Fixture::new(1);
    let backend = Observed::new(fixture.backend(), None);
    let labels = fixture.run_id.labels();
    let template = backend
        .ensure_template(&TemplateSpec {
            // No other test's template has this name.
            name: "spanned".into(),
            ..fixture.template_spec("img0")
        })
        .await
        .unwrap();
    let sandbox = backend
        .claim(&template, &labels, Instant::now() + Duration::from_secs(60))
        .await
        .unwrap();
    backend.release(&sandbox).await.unwrap();
    backend.reap(&fixture.run_id).await.unwrap();

    let cluster = backend.name();
    let claims = spans.of("claim", "template", &template.name);
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0]["cluster"], cluster);
    assert_eq!(claims[0]["template"], template.name);
    // Recorded once the claim is made.
    assert_eq!(claims[0]["sandbox"], sandbox.id);
    assert!(!spans.of("release", "sandbox", &sandbox.id).is_empty());
    let reaps = spans.of("reap", "run", fixture.run_id.as_str());
    assert_eq!(reaps.len(), 1, "{reaps:?}");
    assert_eq!(reaps[0]["cluster"], cluster);
}
