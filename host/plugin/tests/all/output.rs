//! A plugin's stdout, stderr and `log` calls become `tracing` events tagged
//! with the plugin's name and version.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::{demand, load, registry, three_clusters};

const TALK: u32 = 6;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn stdout_stderr_and_log_calls_are_logged_under_the_plugins_name() {
    let registry = registry();
    load(&registry, "talker", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("talker").unwrap();
    let version = policy.version().plugin.version.to_string();

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let answer = tracing::subscriber::with_default(subscriber, || {
        policy.place(&demand(TALK), &three_clusters())
    });
    assert_eq!(answer.unwrap(), 0);

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
            .to_string()
    };
    for (needle, level) in [
        ("said on stdout", "INFO"),
        ("said on stderr", "WARN"),
        ("said through the host log", "WARN"),
    ] {
        let line = line(needle);
        assert!(line.contains(level), "{line}");
        assert!(line.contains("plugin=\"talker\""), "{line}");
        assert!(line.contains(&version), "{line}");
    }
}
