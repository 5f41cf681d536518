//! Throughput of `sandfleet grade` over 10,000 SWE-bench logs: the 40 golden
//! grading cases of `../shared/data/swebench/golden/grading`, each copied
//! 250 times under new instance ids, graded by the real binary with the
//! built-in swebench component.
//!
//! Run: `cargo bench -p sandfleet --bench grade_throughput [-- --logs N --jobs J]`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn main() {
    let logs: usize = arg("--logs").map_or(10_000, |n| n.parse().expect("--logs N"));
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/swebench/golden/grading");
    let mut cases: Vec<serde_json::Value> = std::fs::read_dir(&data)
        .unwrap_or_else(|e| panic!("{}: {e}", data.display()))
        .map(|entry| {
            serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    cases.sort_by_key(|case| case["case"].as_str().unwrap_or_default().to_string());

    let dir = tempfile::tempdir().unwrap();
    let (mut instances, mut predictions) = (String::new(), String::new());
    for n in 0..logs {
        let case = &cases[n % cases.len()];
        let mut instance = case["input"]["instance"].clone();
        let id = format!("{}-copy{n}", instance["instance_id"].as_str().unwrap());
        instance["instance_id"] = id.clone().into();
        let mut prediction = case["input"]["prediction"].clone();
        prediction["instance_id"] = id.clone().into();
        instances.push_str(&format!("{instance}\n"));
        predictions.push_str(&format!("{prediction}\n"));
        let log_dir = dir.path().join("logs").join(&id);
        std::fs::create_dir_all(&log_dir).unwrap();
        std::fs::write(
            log_dir.join("test_output.txt"),
            case["input"]["log"].as_str().unwrap(),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("instances.jsonl"), instances).unwrap();
    std::fs::write(dir.path().join("predictions.jsonl"), predictions).unwrap();

    let mut command = Command::new(env!("CARGO_BIN_EXE_sandfleet"));
    command
        .args([
            "grade",
            "--adapter",
            "swebench",
            "--grader-version",
            "swebench-4.1.0",
        ])
        .arg("--instances")
        .arg(dir.path().join("instances.jsonl"))
        .arg("--predictions")
        .arg(dir.path().join("predictions.jsonl"))
        .arg("--log-dir")
        .arg(dir.path().join("logs"));
    if let Some(jobs) = arg("--jobs") {
        command.args(["--jobs", &jobs]);
    }
    let started = Instant::now();
    let output = command.output().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    print!("{}", String::from_utf8_lossy(&output.stdout));
    println!(
        "sandfleet grade/{logs} logs: {seconds:.2} s, {:.0} logs/s (including process start and plugin load)",
        logs as f64 / seconds
    );
}
