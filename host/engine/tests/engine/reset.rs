//! A reset phase is one exec round trip, and what the reset check sees of
//! it is what it would have seen from one exec per command: exit codes,
//! both streams byte for byte, merged stderr, timeouts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_core::{Backend, ExecRequest};
use sandfleet_engine::reset::{ExecContext, Joined};
use sandfleet_engine::{CancellationToken, FleetSettings, Strategy};
use sandfleet_plugin::adapter::Command;

use crate::fixture::{Fixture, row};
use crate::recording::Recording;
use crate::recycle::run_recycling;

fn command(argv: &[&str], timeout_ms: u64, merge_stderr: bool) -> Command {
    Command {
        argv: argv.iter().map(|&word| word.to_owned()).collect(),
        timeout_ms,
        merge_stderr,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn joined_commands_give_each_command_the_output_it_gives_alone() {
    let fixture = Fixture::new(1);
    let backend = fixture.backend_with_images(true);
    let labels = fixture.run_id.labels();
    let template = backend
        .ensure_template(&fixture.template_spec("img0"))
        .await
        .unwrap();
    let sandbox = backend
        .claim(&template, &labels, Instant::now() + Duration::from_secs(60))
        .await
        .unwrap();
    let commands = [
        command(
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            10_000,
            false,
        ),
        command(&["true"], 10_000, false),
        command(
            &["sh", "-c", "printf 'no newline'; printf e1 >&2; printf e2"],
            10_000,
            true,
        ),
        command(&["sh", "-c", "sleep 5; echo late"], 300, false),
        command(&["sh", "-c", "cat; echo after; exit 1"], 10_000, false),
        command(
            &["printf", "%s|", "it's", "a b", "$HOME", "line\nbreak", "\\"],
            10_000,
            false,
        ),
        command(&["git", "status", "--porcelain"], 0, false),
    ];
    let mut alone = Vec::new();
    for command in &commands {
        let request = ExecRequest {
            argv: command.argv.clone(),
            workdir: Some("/workspace".into()),
            env: Vec::new(),
            timeout: match command.timeout_ms {
                0 => Duration::from_secs(600),
                ms => Duration::from_millis(ms),
            },
            merge_stderr: command.merge_stderr,
            stdin: None,
            max_output: Some(1 << 20),
        };
        let result = backend.exec(&sandbox, &request, None).await.unwrap();
        alone.push((
            result.exit_code,
            String::from_utf8(result.stdout).unwrap(),
            String::from_utf8(result.stderr).unwrap(),
            result.timed_out,
        ));
    }
    let joined = Joined::new(&commands).unwrap();
    let context = ExecContext {
        workdir: "/workspace",
        env: &[],
        max_output: 1 << 20,
    };
    let result = backend
        .exec(&sandbox, &joined.request(&context), None)
        .await
        .unwrap();
    let together: Vec<_> = joined
        .split(&result)
        .unwrap()
        .into_iter()
        .map(|o| (o.exit_code, o.stdout, o.stderr, o.timed_out))
        .collect();
    assert_eq!(together, alone);
    // What each command did, so that the comparison is not between two
    // equally wrong answers.
    assert_eq!(alone[0], (3, "out\n".into(), "err\n".into(), false));
    assert_eq!(alone[2].1, "no newlinee1e2");
    assert!(alone[3].3, "the sleep outlived its timeout: {:?}", alone[3]);
    assert_eq!(alone[4], (1, "after\n".into(), String::new(), false));
    assert_eq!(alone[5].1, "it's|a b|$HOME|line\nbreak|\\|");
    backend.release(&sandbox).await.unwrap();
}

/// Runs `rows` one at a time on one git image and returns the argv of every
/// exec.
async fn execs_of(rows: &[String], recycle: bool) -> Vec<Vec<String>> {
    let fixture = Fixture::new(1);
    let recording = Arc::new(Recording::new(fixture.backend_with_images(true)));
    let mut spec = fixture.spec(
        recording.clone(),
        FleetSettings {
            strategy: Strategy::None,
            max_concurrent: 1,
            recycle,
            reset_by_snapshot: false,
            ..FleetSettings::default()
        },
        CancellationToken::new(),
    );
    spec.plugins = fixture.plugins(Some("git-restore"));
    let report = sandfleet_engine::run(spec, fixture.items(rows))
        .await
        .unwrap();
    assert_eq!(report.tasks.ok, rows.len(), "{}", report.render());
    let expected_reuses = if recycle { rows.len() - 1 } else { 0 };
    assert_eq!(
        report.recycle.reused,
        expected_reuses,
        "{}",
        report.render()
    );
    recording.execs.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_is_one_exec_round_trip_and_so_is_the_baseline() {
    let rows: Vec<String> = (0..3)
        .map(|n| row(&format!("t{n}"), "img0", "echo dirt >> README", 30))
        .collect();
    let fresh = execs_of(&rows, false).await;
    let recycled = execs_of(&rows, true).await;
    // One baseline on the first sandbox, then one reset before each of the
    // two tasks that reuse it; the tasks' own execs are the same.
    assert_eq!(recycled.len(), fresh.len() + 3, "{recycled:#?}");
    let joined = recycled
        .iter()
        .filter(|argv| argv.len() == 3 && argv[2].contains("sandfleet-reset-"))
        .count();
    assert_eq!(joined, 3, "{recycled:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_step_that_fails_quarantines_the_sandbox_even_when_the_probes_look_clean() {
    let fixture = Fixture::new(1);
    // A stale index lock: the tree, refs and status look pristine, but the
    // reset's `git reset --hard` cannot take the lock, and the next task's
    // git would fail the same way.
    let rows = vec![
        row("leaves-a-lock", "img0", "touch .git/index.lock", 30),
        row("needs-no-lock", "img0", "test ! -e .git/index.lock", 30),
    ];
    let report = run_recycling(&fixture, &rows).await;
    assert_eq!(report.recycle.quarantined, 1, "{}", report.render());
    assert_eq!(report.recycle.reused, 0, "{}", report.render());
    assert_eq!(report.tasks.ok, 2, "{}", report.render());
}
