//! `examples/hostile.toml`: tasks that try to break out of their sandboxes,
//! run by the binary on the quickstart's own cluster config, as a user
//! would run it. Every attack fails inside its sandbox, the host is as it
//! was, and a 500 MB flood neither fails the infrastructure nor grows the
//! host process. Its forged process names delete nothing when a run is
//! killed and reaped either.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{processes_running, repo, results, run_id, sandfleet, stderr};

/// Where `forged-process-name` aims the reap: the absolute one, and
/// `<state>/runs/<run>/sandboxes/../../../sandfleet-hostile-victim` with
/// the example's state directory.
fn victims() -> [std::path::PathBuf; 2] {
    [
        "/tmp/sandfleet-hostile-victim".into(),
        repo().join("target/sandfleet-state/sandfleet-hostile-victim"),
    ]
}

/// Makes each victim directory, with a file to be left alone.
fn plant_victims() {
    for dir in victims() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep"), "host data").unwrap();
    }
}

fn victims_untouched() {
    for dir in victims() {
        assert_eq!(
            std::fs::read_to_string(dir.join("keep")).ok().as_deref(),
            Some("host data"),
            "{} was removed",
            dir.display()
        );
    }
}

/// Peak resident memory of process `pid` so far, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

#[test]
fn the_hostile_example_fails_every_attack_and_leaves_the_host_alone() {
    let out = tempfile::tempdir().unwrap();
    let id = run_id("hostile");
    let stat_interval = std::fs::read_to_string("/proc/sys/vm/stat_interval").unwrap();
    plant_victims();
    // Started the way a careless wrapper would start it: with a descriptor
    // of the host's / left open (bash's `exec 7</` has no close-on-exec).
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec 7</; exec {} run examples/hostile.toml --out {} --run-id {id}",
            env!("CARGO_BIN_EXE_sandfleet"),
            out.path().display()
        ))
        .current_dir(repo())
        // Events at info carry task ids and command output to the console,
        // with levels a formatter might colour: neither may put an escape
        // on a console that is no terminal.
        .env("SANDFLEET_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `exec` keeps the pid: this is sandfleet's. Its peak memory is read
    // until it exits; the last reading is the run's peak, less whatever the
    // last few milliseconds added.
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut peak_kib = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the hostile run did not finish");
        if let Some(kib) = peak_rss_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("run {id}: 0 ok, 22 failed, 0 infra_error")),
        "{stdout}\n{stderr}"
    );
    for record in results(out.path()) {
        assert_eq!(record["status"], "failed", "{record}");
    }
    let flood = results(out.path())
        .into_iter()
        .find(|r| r["task_id"] == "flood-then-fail")
        .unwrap();
    assert_eq!(
        flood["output_dropped"],
        (500u64 << 20) - (16 << 20),
        "{flood}"
    );
    assert!(
        peak_kib > 0 && peak_kib < 200 * 1024,
        "sandfleet peaked at {peak_kib} KiB"
    );
    // Over the disk limit is the task's failure, and says so.
    for id in ["disk-deleted-but-held", "disk-inodes"] {
        let record = results(out.path())
            .into_iter()
            .find(|r| r["task_id"] == id)
            .unwrap();
        let log = std::fs::read_to_string(out.path().join(format!("logs/{id}.log"))).unwrap();
        assert!(
            log.contains("passed its disk limit (256 MiB"),
            "{record}\n{log}"
        );
    }
    // Ids that once shared a log file have one each.
    let logs: Vec<String> = std::fs::read_dir(out.path().join("logs"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    for echoed in ["from-a-space", "from-a-lookalike"] {
        assert_eq!(
            logs.iter().filter(|log| log.contains(echoed)).count(),
            1,
            "{echoed}"
        );
    }
    // The host is as it was.
    assert!(!Path::new("/usr/sandfleet-hostile").exists());
    victims_untouched();
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/stat_interval").unwrap(),
        stat_interval
    );
    // The task id with an escape sequence and a newline is shown escaped.
    let console = format!("{stdout}{stderr}");
    assert!(console.contains("evil\\u{1b}[2J\\nid failed"), "{console}");
    assert!(
        !console.contains('\u{1b}'),
        "a raw escape reached the console: {console:?}"
    );
}

#[test]
fn forged_process_names_delete_nothing_when_a_killed_run_is_reaped() {
    plant_victims();
    let out = tempfile::tempdir().unwrap();
    let id = run_id("hostile-reap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["run", "examples/hostile.toml", "--out"])
        .arg(out.path())
        .args(["--run-id", &id])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed while the forged processes live, leaving them to the reap.
    let forged = format!("sandfleet-sandbox:{id}:/tmp/sandfleet-hostile-victim");
    let deadline = Instant::now() + Duration::from_secs(300);
    while processes_running(&forged).is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before forged-process-name ran"
        );
        assert!(Instant::now() < deadline, "forged-process-name never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let reap = sandfleet(&["reap", "--run-id", &id, "examples/hostile.toml"]);
    assert!(reap.status.success(), "{}", stderr(&reap));
    assert_eq!(processes_running(&forged), Vec::<String>::new());
    victims_untouched();
}
