//! What a task prints or is named cannot hurt the run: floods of output are
//! capped and graded, logs never collide, long messages are cut.

use sandfleet_engine::{CancellationToken, FleetSettings, Strategy};

use crate::fixture::{Fixture, row};

fn settings() -> FleetSettings {
    FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 2,
        max_output: 1 << 20,
        ..FleetSettings::default()
    }
}

fn results(fixture: &Fixture) -> Vec<serde_json::Value> {
    std::fs::read_to_string(fixture.out_dir().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_output_fails_the_task_not_the_infrastructure() {
    let fixture = Fixture::new(1);
    // 300 MB of output from a solution that then fails.
    let rows = vec![row(
        "flood",
        "img0",
        "head -c 300M /dev/zero | tr '\\0' x; exit 1",
        60,
    )];
    let spec = fixture.spec(fixture.backend(), settings(), CancellationToken::new());
    let report = sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();
    assert_eq!(
        (report.tasks.failed, report.tasks.infra_error),
        (1, 0),
        "{}",
        report.render()
    );
    let record = &results(&fixture)[0];
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(
        record["output_dropped"],
        (300 << 20) - (1 << 20),
        "{record}"
    );
    // The log holds what was kept, and says what was dropped.
    let log = std::fs::read(fixture.out_dir().join("logs/flood.log")).unwrap();
    assert!(log.len() < (1 << 20) + 4096, "{} bytes", log.len());
    let tail = String::from_utf8_lossy(&log[log.len() - 200..]).into_owned();
    assert!(
        tail.contains("dropped past the limit of 1048576 bytes"),
        "{tail}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ids_that_sanitise_alike_get_their_own_logs() {
    let fixture = Fixture::new(1);
    let rows = vec![
        row("col/a", "img0", "echo from-slash", 30),
        row("col_a", "img0", "echo from-underscore", 30),
        // `a b` once became `a_b-c8687a08`, a name a task may also have.
        row("a b", "img0", "echo from-space", 30),
        row("a_b-c8687a08", "img0", "echo from-lookalike", 30),
    ];
    let spec = fixture.spec(fixture.backend(), settings(), CancellationToken::new());
    let report = sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();
    assert_eq!(report.tasks.ok, 4, "{}", report.render());
    let logs: Vec<(String, String)> = std::fs::read_dir(fixture.out_dir().join("logs"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            (entry.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    assert_eq!(logs.len(), 4, "{logs:?}");
    let log_of = |echoed: &str| {
        logs.iter()
            .find(|(_, text)| text.contains(echoed))
            .unwrap()
            .0
            .as_str()
    };
    assert_eq!(log_of("from-underscore"), "col_a.log");
    assert!(log_of("from-slash").starts_with("col_a~"), "{logs:?}");
    assert_eq!(log_of("from-lookalike"), "a_b-c8687a08.log");
    assert!(log_of("from-space").starts_with("a_b~"), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_test_field_is_cut_in_the_result_line() {
    let fixture = Fixture::new(1);
    // A 1 MiB command line, over the kernel's 128 KiB for one argument: it
    // refuses to start it (unisolated, it is the host's execve that
    // refuses), and the error must not carry it whole into results.jsonl.
    let huge = format!("echo {}", "y".repeat(1 << 20));
    let rows = vec![row("huge", "img0", &huge, 30)];
    let spec = fixture.spec(
        fixture.plain_backend(),
        settings(),
        CancellationToken::new(),
    );
    sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();
    let line = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    assert!(
        line.len() < 64 << 10,
        "a result line of {} bytes",
        line.len()
    );
    let record: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(record["status"], "infra_error", "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(error.contains("more bytes]"), "{error}");
}
