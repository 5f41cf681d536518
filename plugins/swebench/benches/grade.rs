//! Latency of the swebench component's `grade` per log, called through the
//! test kit as the host calls it (a reused instance, the log crossing the
//! component boundary on every call).
//!
//! Logs: the real harness transcripts of `shared/data/swebench/logs` (graded
//! as swebench 5.0.2, the only version that reads their rows), and the log of
//! every golden grading case under both grader versions.
//!
//! Run:
//!
//! ```text
//! cargo bench -p plugin-swebench --bench grade
//! cargo bench -p plugin-swebench --bench grade -- real/   # criterion filter
//! SWEBENCH_GRADE_RUNS=200 cargo bench -p plugin-swebench --bench grade
//! ```
//!
//! It prints two things:
//!
//! * a summary table: every log graded `SWEBENCH_GRADE_RUNS` times (default
//!   50, `0` skips the table), with the median and p99 of each log and of
//!   all calls pooled (`overall`);
//! * criterion's group `swebench_grade`: one id per log (`real/<name>`,
//!   `golden/<case>@<grader>`) and `all-logs`, one call per log and version
//!   per iteration. Results land in
//!   `target/criterion/swebench_grade/<id>/new/estimates.json`.
//!
//! `cargo test --benches` runs each call once instead.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use sandfleet_testkit::adapter::{CommandOutput, Task, TaskAdapter};
use serde_json::{Value, json};

#[path = "../tests/component/common/mod.rs"]
mod common;

/// One log to grade: the task it belongs to and the patch it was graded with.
struct Case {
    id: String,
    task: Task,
    patch: Option<String>,
    output: CommandOutput,
}

impl Case {
    fn grade(&self, adapter: &TaskAdapter) {
        let result = adapter.grade_blocking(
            black_box(&self.task),
            black_box(self.patch.as_deref()),
            black_box(std::slice::from_ref(&self.output)),
        );
        if let Err(error) = result {
            panic!("{}: {error}", self.id);
        }
    }
}

fn logs_dir() -> std::path::PathBuf {
    common::data_dir().join("logs")
}

/// A row listing `tests` as PASS_TO_PASS, so grading judges every test.
fn real_case(
    adapter: &TaskAdapter,
    id: &str,
    log: &std::path::Path,
    parser: &str,
    tests: &Value,
) -> Case {
    let names: Vec<&String> = tests.as_object().expect("a status map").keys().collect();
    let row = json!({
        "instance_id": id,
        "repo": format!("swesmith/{id}"),
        "version": "0.0",
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": names,
        "log_parser": parser,
        "eval_type": "pass_and_fail",
        "image": "bench",
    });
    Case {
        id: format!("real/{id}"),
        task: adapter
            .load_blocking(&row.to_string(), &common::grader("swebench-5.0.2"))
            .unwrap(),
        patch: Some("patch".into()),
        output: common::output(&common::read(log)),
    }
}

fn cases(adapter: &TaskAdapter) -> Vec<Case> {
    let mut cases = Vec::new();
    let eval = logs_dir().join("swesmith-eval");
    for (id, parser) in [
        ("getmoto__moto.694ce1f4.pr_7331", "parse_log_seaborn"),
        (
            "pandas-dev__pandas.95280573.pr_53652",
            "parse_log_pytest_v2",
        ),
        ("pydantic__pydantic.acb0f10f.pr_8316", "parse_log_seaborn"),
    ] {
        let expected = common::read_json(&eval.join(id).join("expected_status_map.json"));
        cases.push(real_case(
            adapter,
            id,
            &eval.join(id).join("test_output.txt"),
            parser,
            &expected["status_map"],
        ));
    }
    let validation = logs_dir().join("swesmith-validation");
    let expected = common::read_json(&validation.join("expected_status_maps.json"));
    for file in ["test_output.txt", "test_output_pre_gold.txt"] {
        cases.push(real_case(
            adapter,
            &format!("swesmith-validation.{}", file.trim_end_matches(".txt")),
            &validation.join(file),
            "parse_log_pytest_v2",
            &expected[file],
        ));
    }
    let r2e = logs_dir().join("r2e-gym-sympy-example");
    let expected = common::read_json(&r2e.join("expected_status_map.json"));
    cases.push(real_case(
        adapter,
        "r2e-gym-sympy-example",
        &r2e.join("test_output.txt"),
        "parse_log_pytest",
        &expected["swebench_5.0.2_parse_log_pytest_for_contrast"],
    ));

    for path in common::sorted_entries(&common::golden("grading")) {
        let case = common::read_json(&path);
        let input = &case["input"];
        let name = common::file_name(&path);
        let name = name.trim_end_matches(".json");
        for grader in common::GRADERS {
            cases.push(Case {
                id: format!("golden/{name}@{}", grader.trim_start_matches("swebench-")),
                task: adapter
                    .load_blocking(&input["instance"].to_string(), &common::grader(grader))
                    .unwrap(),
                patch: input["prediction"]["model_patch"]
                    .as_str()
                    .map(str::to_owned),
                output: common::output(input["log"].as_str().unwrap()),
            });
        }
    }
    cases
}

/// The value below which `q` of the sorted samples lie (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1e6)
}

/// Grades every log `runs` times and prints per-log and pooled percentiles.
fn summary(adapter: &TaskAdapter, cases: &[Case], runs: usize) {
    println!("swebench grade latency, {runs} calls per log (µs)");
    println!(
        "{:<58} {:>9} {:>10} {:>10}",
        "log", "bytes", "median", "p99"
    );
    let mut pooled = Vec::with_capacity(cases.len() * runs);
    let mut medians = Vec::with_capacity(cases.len());
    for case in cases {
        // Warm the instance and the caches before timing.
        for _ in 0..3 {
            case.grade(adapter);
        }
        let mut samples: Vec<Duration> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                case.grade(adapter);
                start.elapsed()
            })
            .collect();
        samples.sort();
        let median = quantile(&samples, 0.5);
        println!(
            "{:<58} {:>9} {:>10} {:>10}",
            case.id,
            case.output.stdout.len(),
            micros(median),
            micros(quantile(&samples, 0.99))
        );
        medians.push(median);
        pooled.extend(samples);
    }
    pooled.sort();
    medians.sort();
    println!(
        "{:<58} {:>9} {:>10} {:>10}",
        format!("overall ({} logs, {} calls)", cases.len(), pooled.len()),
        "",
        micros(quantile(&pooled, 0.5)),
        micros(quantile(&pooled, 0.99))
    );
    println!(
        "{:<58} {:>9} {:>10} {:>10}",
        "per-log medians",
        "",
        micros(quantile(&medians, 0.5)),
        micros(quantile(&medians, 0.99))
    );
    println!();
}

fn main() {
    let adapter = common::adapter();
    let cases = cases(&adapter);
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|arg| arg == "--bench")
        && !args.iter().any(|arg| arg == "--test" || arg == "--list");
    let runs = std::env::var("SWEBENCH_GRADE_RUNS").map_or(50, |runs| {
        runs.parse()
            .expect("SWEBENCH_GRADE_RUNS is a number of calls")
    });
    if benchmarking && runs > 0 {
        summary(&adapter, &cases, runs);
    }

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    let mut group = criterion.benchmark_group("swebench_grade");
    for case in &cases {
        group.bench_function(&case.id, |b| b.iter(|| case.grade(&adapter)));
    }
    group.bench_function("all-logs", |b| {
        b.iter(|| {
            for case in &cases {
                case.grade(&adapter);
            }
        })
    });
    group.finish();
    criterion.final_summary();
}
