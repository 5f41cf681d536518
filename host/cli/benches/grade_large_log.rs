//! Time and peak memory of `sandfleet grade` on one large generated test log
//! (a pytest `-rA` summary;
//! `plugins/swebench/tests/component/common/big_log.rs`, the log the parity
//! test grades against the harness's report), for each size:
//! the real binary and the built-in swebench component, graded as 5.0.2.
//!
//! Peak memory is the child's maximum resident set size (`wait4`), which
//! counts the host, the component's linear memory and the files written.
//!
//! Run: `cargo bench -p sandfleet --bench grade_large_log [-- --lines N,N,...]`
//! (default: 3,000,000, 4,300,000 and 21,500,000 tests: about 71, 102 and
//! 512 MB).

#![allow(
    unsafe_code,
    reason = "wait4 is the one call that gives a child's own peak RSS; neither std nor rustix wraps it"
)]

use std::fs::File;
use std::io::BufWriter;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[path = "../../../plugins/swebench/tests/component/common/big_log.rs"]
#[allow(
    dead_code,
    reason = "the bench writes logs to files; the tests build them in memory"
)]
mod big_log;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// Writes one instance and its log of `lines` tests under `dir`; the log's size.
fn lay_out(dir: &Path, lines: u64) -> u64 {
    let id = "pallets__flask-90200";
    let row = serde_json::json!({
        "instance_id": id, "repo": "pallets/flask", "version": "2.3",
        "FAIL_TO_PASS": ["t.py::c[0]"], "PASS_TO_PASS": ["t.py::c[1]", "t.py::c[999]"],
        "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
    });
    let prediction =
        serde_json::json!({"instance_id": id, "model_name_or_path": "m", "model_patch": "diff"});
    std::fs::write(dir.join("instances.jsonl"), format!("{row}\n")).unwrap();
    std::fs::write(dir.join("predictions.jsonl"), format!("{prediction}\n")).unwrap();
    let logs = dir.join("logs").join(id);
    std::fs::create_dir_all(&logs).unwrap();
    let path = logs.join("test_output.txt");
    let mut out = BufWriter::new(File::create(&path).unwrap());
    big_log::write_big_log(&mut out, lines).unwrap();
    drop(out);
    std::fs::metadata(path).unwrap().len()
}

/// Runs `sandfleet grade` on `dir`: wall seconds, peak RSS in bytes.
fn grade(dir: &Path) -> (f64, u64) {
    let started = Instant::now();
    #[allow(clippy::zombie_processes, reason = "wait4 below reaps it")]
    let child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args([
            "grade",
            "--adapter",
            "swebench",
            "--grader-version",
            "swebench-5.0.2",
        ])
        .arg("--instances")
        .arg(dir.join("instances.jsonl"))
        .arg("--predictions")
        .arg(dir.join("predictions.jsonl"))
        .arg("--log-dir")
        .arg(dir.join("logs"))
        .spawn()
        .expect("run sandfleet");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals that outlive the call.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as i32, "wait4");
    let seconds = started.elapsed().as_secs_f64();
    let exit = std::process::ExitStatus::from_raw(status);
    assert!(exit.success(), "sandfleet grade failed: {exit}");
    (seconds, usage.ru_maxrss as u64 * 1024)
}

fn main() {
    let lines: Vec<u64> = arg("--lines")
        .unwrap_or_else(|| "3000000,4300000,21500000".to_owned())
        .split(',')
        .map(|n| n.parse().expect("--lines N,N,..."))
        .collect();
    println!(
        "{:>12} {:>10} {:>9} {:>12} {:>10}",
        "tests", "log_mb", "grade_s", "peak_rss_mb", "rss/log"
    );
    for lines in lines {
        let dir = tempfile::tempdir().unwrap();
        let bytes = lay_out(dir.path(), lines);
        let (seconds, rss) = grade(dir.path());
        let report = dir.path().join("logs/pallets__flask-90200/report.json");
        assert!(report.exists(), "no report for {lines} tests");
        let mb = |bytes: u64| bytes as f64 / 1e6;
        println!(
            "{lines:>12} {:>10.1} {seconds:>9.2} {:>12.1} {:>10.2}",
            mb(bytes),
            mb(rss),
            rss as f64 / bytes as f64
        );
    }
}
