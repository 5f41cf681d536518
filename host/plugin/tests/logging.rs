//! What plugins log: their stdout, stderr and `log` calls become `tracing`
//! events tagged with the plugin's name and version, and an async call's
//! events follow the caller's span and subscriber onto the blocking pool.
//!
//! A test binary of its own: `tracing` caches per call site whether any
//! subscriber wants its events, process-wide, and tests that call the same
//! plugins with no subscriber at all, on other threads, can race that
//! cache into "nobody" while a test here is capturing.

#[allow(dead_code, reason = "this binary uses a few of the shared fixtures")]
#[path = "all/fixtures.rs"]
mod fixtures;

use std::io::Write;
use std::sync::{Arc, Mutex};

use fixtures::{demand, load, patient_registry, registry, three_clusters};
use tracing::Instrument;

/// The `misbehave` guest's image that writes to stdout, stderr and the host log.
const TALK: u32 = 6;

/// Log output kept in memory, for tests of what plugins log.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// A plain-text subscriber that writes events up to `level` here.
    pub(crate) fn subscriber(
        &self,
        level: tracing::Level,
    ) -> impl tracing::Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish()
    }

    /// The first line that contains `needle`.
    pub(crate) fn line(&self, needle: &str) -> String {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
            .to_string()
    }
}

#[test]
fn stdout_stderr_and_log_calls_are_logged_under_the_plugins_name() {
    let registry = registry();
    load(&registry, "talker", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("talker").unwrap();
    let version = policy.version().plugin.version.to_string();

    let captured = Captured::default();
    let answer =
        tracing::subscriber::with_default(captured.subscriber(tracing::Level::INFO), || {
            policy.place_blocking(&demand(TALK), &three_clusters())
        });
    assert_eq!(answer.unwrap(), 0);

    for (needle, level) in [
        ("said on stdout", "INFO"),
        ("said on stderr", "WARN"),
        ("said through the host log", "WARN"),
    ] {
        let line = captured.line(needle);
        assert!(line.contains(level), "{line}");
        assert!(line.contains("plugin=\"talker\""), "{line}");
        assert!(line.contains(&version), "{line}");
    }
}

#[tokio::test]
async fn a_calls_log_lines_carry_the_callers_span_and_a_plugin_call_span() {
    let registry = patient_registry();
    load(&registry, "talker", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("talker").unwrap();
    let version = policy.version().plugin.version.to_string();

    let captured = Captured::default();
    // Scoped to this thread: the call must carry it to the blocking pool.
    let _default = tracing::subscriber::set_default(captured.subscriber(tracing::Level::DEBUG));
    let answer = policy
        .place(&demand(TALK), &three_clusters())
        .instrument(tracing::info_span!("task", id = "t-1"))
        .await;
    assert_eq!(answer.unwrap(), 0);

    let line = captured.line("said on stdout");
    let span = format!(
        "task{{id=\"t-1\"}}:plugin_call{{plugin=\"talker\" version=\"{version}\" function=\"place\"}}"
    );
    assert!(line.contains(&span), "expected {span} in {line}");
}
