//! `examples/hostile.toml`: tasks that try to break out of their sandboxes,
//! run by the binary on the quickstart's own cluster config, as a user
//! would run it. Every attack fails inside its sandbox, the host is as it
//! was, and a 500 MB flood neither fails the infrastructure nor grows the
//! host process.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{repo, results, run_id};

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
        .env("SANDFLEET_LOG", "warn")
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
        stdout.contains(&format!("run {id}: 0 ok, 9 failed, 0 infra_error")),
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
    // The host is as it was.
    assert!(!Path::new("/usr/sandfleet-hostile").exists());
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/stat_interval").unwrap(),
        stat_interval
    );
    // The task id with an escape sequence and a newline is shown escaped.
    let console = format!("{stdout}{stderr}");
    assert!(console.contains("evil\\u{1b}[2J\\nid failed"), "{console}");
    assert!(
        !console.contains('\u{1b}'),
        "a raw escape reached the console"
    );
}
