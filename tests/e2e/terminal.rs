//! Finding 9 of the escape suite, as a person meets it: `sandfleet run`
//! typed into an interactive shell on a terminal, with a task that pushes a
//! command into the terminal's input (`TIOCSTI`) for that shell to run once
//! sandfleet exits. The task is `examples/hostile/tasks.jsonl`'s
//! `terminal-inject`, on the example's own cluster config.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{repo, run_id};

/// What the task types into the terminal creates this file.
const INJECTED: &str = "/tmp/sandfleet-hostile-tty";

/// A fleet file in `dir` with `examples/hostile.toml`'s cluster and only
/// its `terminal-inject` task.
fn fleet(dir: &Path) -> std::path::PathBuf {
    let task = std::fs::read_to_string(repo().join("examples/hostile/tasks.jsonl"))
        .unwrap()
        .lines()
        .find(|line| line.contains("\"terminal-inject\""))
        .expect("examples/hostile/tasks.jsonl has terminal-inject")
        .to_string();
    std::fs::write(dir.join("tasks.jsonl"), format!("{task}\n")).unwrap();
    let example = std::fs::read_to_string(repo().join("examples/hostile.toml")).unwrap();
    let examples = repo().join("examples");
    let fleet = example
        .replace("\"hostile/tasks.jsonl\"", "\"tasks.jsonl\"")
        .replace("\"../", &format!("\"{}/../", examples.display()))
        .replace(
            "\"quickstart/",
            &format!("\"{}/quickstart/", examples.display()),
        );
    let path = dir.join("fleet.toml");
    std::fs::write(&path, fleet).unwrap();
    path
}

#[test]
fn a_task_cannot_type_into_the_terminal_sandfleet_was_started_from() {
    let _ = std::fs::remove_file(INJECTED);
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet(dir.path());
    let id = run_id("terminal");
    // `script` runs the shell on a pseudo-terminal of its own, as its
    // controlling terminal, as a terminal emulator would.
    let mut terminal = Command::new("script")
        .args(["--quiet", "--flush", "--return", "--command"])
        .arg("bash --norc --noprofile -i")
        .arg("/dev/null")
        .env("PS1", "$ ")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut keyboard = terminal.stdin.take().unwrap();
    let mut screen = terminal.stdout.take().unwrap();
    let (shown, seen) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0; 4096];
        while let Ok(n) = screen.read(&mut buffer) {
            if n == 0 || shown.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    writeln!(
        keyboard,
        "{} run {} --out {} --run-id {id} </dev/null >/dev/null 2>&1; echo sandfleet-exited-$?",
        env!("CARGO_BIN_EXE_sandfleet"),
        fleet.display(),
        dir.path().join("out").display(),
    )
    .unwrap();
    // The shell echoes the line as typed; its output follows, once
    // sandfleet has exited.
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !text.contains("sandfleet-exited-0") {
        let left = deadline.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => panic!("sandfleet did not exit 0: {text}"),
        }
    }
    // Whatever was typed into the terminal while sandfleet ran is read by
    // the shell before this.
    writeln!(keyboard, "exit").unwrap();
    drop(keyboard);
    let deadline = Instant::now() + Duration::from_secs(30);
    while terminal.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the shell did not exit: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !Path::new(INJECTED).exists(),
        "the task typed a command into the user's shell, which ran it: {text}"
    );
    let results = std::fs::read_to_string(dir.path().join("out/results.jsonl")).unwrap();
    assert!(results.contains("\"status\":\"failed\""), "{results}");
}
