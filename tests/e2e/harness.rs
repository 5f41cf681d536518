//! `sandfleet prepare`, `grade` and `parse-log` on the reference data: the
//! built-in adapters graded from files must equal the official harnesses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{repo, sandfleet, stderr, stdout};

fn data() -> PathBuf {
    repo().join("../shared/data/swebench")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn golden(folder: &str) -> Vec<Value> {
    let mut cases: Vec<(PathBuf, Value)> = std::fs::read_dir(data().join("golden").join(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (p.clone(), read_json(&p)))
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    cases.into_iter().map(|(_, case)| case).collect()
}

fn write_lines(path: &Path, rows: &[Value]) {
    let text: String = rows.iter().map(|row| format!("{row}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn prepare_writes_the_harness_eval_scripts_byte_for_byte() {
    let out = tempfile::tempdir().unwrap();
    let instances = data().join("instances-sample.jsonl");
    let output = sandfleet(&[
        "prepare",
        "--adapter",
        "swebench",
        "--grader-version",
        "swebench-4.1.0",
        "--instances",
        instances.to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    for id in [
        "django__django-16255",
        "django__django-15136",
        "pylint-dev__astroid-1268",
    ] {
        let written = std::fs::read(out.path().join(id).join("eval.sh")).unwrap();
        let expected =
            std::fs::read(data().join(format!("golden/eval-scripts/{id}.eval.sh"))).unwrap();
        assert!(
            written == expected,
            "{id}: eval.sh differs from the harness's"
        );
        let task = read_json(&out.path().join(id).join("task.json"));
        let meta = read_json(&data().join("golden/eval-scripts/meta.json"));
        let image = task["image"].as_str().unwrap();
        assert!(
            meta.to_string().contains(&format!("\"{image}\"")),
            "{id}: image {image} is not among meta.json's names"
        );
    }
}

#[test]
fn grade_reproduces_the_harness_report_for_every_golden_case() {
    for version in ["swebench-4.1.0", "swebench-5.0.2"] {
        // Several cases share an instance id: grade them in batches of distinct ids.
        let mut batches: Vec<Vec<Value>> = Vec::new();
        for case in golden("grading") {
            let id = case["input"]["instance"]["instance_id"].clone();
            match batches.iter_mut().find(|b| {
                b.iter()
                    .all(|c| c["input"]["instance"]["instance_id"] != id)
            }) {
                Some(batch) => batch.push(case),
                None => batches.push(vec![case]),
            }
        }
        let mut checked = 0;
        for batch in batches {
            let dir = tempfile::tempdir().unwrap();
            let logs = dir.path().join("logs");
            let instances: Vec<Value> = batch
                .iter()
                .map(|c| c["input"]["instance"].clone())
                .collect();
            let predictions: Vec<Value> = batch
                .iter()
                .map(|c| c["input"]["prediction"].clone())
                .collect();
            write_lines(&dir.path().join("instances.jsonl"), &instances);
            write_lines(&dir.path().join("predictions.jsonl"), &predictions);
            for case in &batch {
                let case_dir =
                    logs.join(case["input"]["instance"]["instance_id"].as_str().unwrap());
                std::fs::create_dir_all(&case_dir).unwrap();
                std::fs::write(
                    case_dir.join("test_output.txt"),
                    case["input"]["log"].as_str().unwrap(),
                )
                .unwrap();
            }
            let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
            let output = sandfleet(&[
                "grade",
                "--adapter",
                "swebench",
                "--grader-version",
                version,
                "--instances",
                &path("instances.jsonl"),
                "--predictions",
                &path("predictions.jsonl"),
                "--log-dir",
                logs.to_str().unwrap(),
            ]);
            assert!(output.status.success(), "{version}: {}", stderr(&output));
            for case in &batch {
                let id = case["input"]["instance"]["instance_id"].as_str().unwrap();
                let expected = &case["expected"][version];
                let report_path = logs.join(id).join("report.json");
                // Where the harness raised, `report` records the exception.
                if expected["report"].is_object() && expected["report"].get("exception").is_none() {
                    assert_eq!(
                        read_json(&report_path),
                        expected["report"],
                        "{version} {}: report.json",
                        case["case"]
                    );
                } else {
                    assert!(
                        !report_path.exists(),
                        "{version} {}: the harness writes no report",
                        case["case"]
                    );
                }
                if let Some(map) = expected["get_logs_eval"]["status_map"].as_object()
                    && expected["get_logs_eval"]["found"] == true
                {
                    let written = read_json(&logs.join(id).join("status_map.json"));
                    assert_eq!(
                        written.as_object().unwrap(),
                        map,
                        "{version} {}: status map",
                        case["case"]
                    );
                }
                let grade = read_json(&logs.join(id).join("grade.json"));
                let resolved = expected["resolved"] == true;
                assert_eq!(
                    grade["status"] == "passed",
                    resolved,
                    "{version} {}: {grade}",
                    case["case"]
                );
                checked += 1;
            }
            assert!(dir.path().join("logs/run_report.json").exists());
        }
        assert_eq!(checked, 40, "{version}");
    }
}

#[test]
fn grade_reports_a_bad_instance_and_grades_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cases = golden("grading");
    let good = &cases[0]["input"];
    let id = good["instance"]["instance_id"].as_str().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(logs.join(id)).unwrap();
    std::fs::write(
        logs.join(id).join("test_output.txt"),
        good["log"].as_str().unwrap(),
    )
    .unwrap();
    let missing_log = json!({"instance_id": "nobody__nothing-1", "repo": "django/django", "version": "4.0",
        "FAIL_TO_PASS": [], "PASS_TO_PASS": []});
    let unknown_repo =
        json!({"instance_id": "acme__widgets-1", "repo": "acme/widgets", "version": "1.0"});
    write_lines(
        &dir.path().join("instances.jsonl"),
        &[missing_log, good["instance"].clone(), unknown_repo],
    );
    let output = sandfleet(&[
        "grade",
        "--adapter",
        "swebench",
        "--grader-version",
        "swebench-4.1.0",
        "--instances",
        dir.path().join("instances.jsonl").to_str().unwrap(),
        "--log-dir",
        logs.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let errors = stderr(&output);
    assert!(
        errors.contains("instances.jsonl:1: ")
            && errors.contains("nobody__nothing-1/test_output.txt: cannot read"),
        "{errors}"
    );
    assert!(
        errors.contains("instances.jsonl:3:") && errors.contains("acme/widgets"),
        "{errors}"
    );
    assert!(
        stdout(&output).contains("graded 1 instance(s)"),
        "{}",
        stdout(&output)
    );
    assert!(logs.join(id).join("grade.json").exists());
}

#[test]
fn parse_log_prints_the_parsers_status_map() {
    for case in ["flask_all_pass", "unicode_ids"] {
        let log = data().join(format!("golden/parsers/parse_log_pytest/{case}.log"));
        let expected = read_json(&data().join(format!(
            "golden/parsers/parse_log_pytest/{case}.expected.json"
        )));
        let output = sandfleet(&[
            "parse-log",
            "--adapter",
            "swebench",
            "--grader-version",
            "swebench-5.0.2",
            "--parser",
            "parse_log_pytest",
            log.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let printed: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(printed, expected["swebench-5.0.2"]["status_map"], "{case}");
    }
}

#[test]
fn grade_gives_r2e_gyms_reward_for_each_golden_case() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let mut rows = Vec::new();
    let mut expected_rewards = BTreeMap::new();
    for (index, case) in golden("r2e").into_iter().enumerate() {
        let input = &case["input"];
        let id = format!("case{index}");
        rows.push(json!({
            "commit_hash": id,
            "repo_name": input["repo_name"],
            "docker_image": format!("namanjain12/{}_final:{id}", input["repo_name"].as_str().unwrap()),
            "parsed_commit_content": "{\"file_diffs\": []}",
            "expected_output_json": input["expected_output_json"],
        }));
        std::fs::create_dir_all(logs.join(&id)).unwrap();
        std::fs::write(
            logs.join(&id).join("test_output.txt"),
            input["output"].as_str().unwrap(),
        )
        .unwrap();
        std::fs::write(
            logs.join(&id).join("exit_code"),
            input["exit_code"].to_string(),
        )
        .unwrap();
        let reward =
            &case["expected"]["r2e-gym@69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0"]["reward"];
        // None where R2E-Gym raised: grade.json then carries no reward.
        expected_rewards.insert(id, reward.as_f64());
    }
    write_lines(&dir.path().join("instances.jsonl"), &rows);
    let output = sandfleet(&[
        "grade",
        "--adapter",
        "r2egym",
        "--instances",
        dir.path().join("instances.jsonl").to_str().unwrap(),
        "--log-dir",
        logs.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(expected_rewards.len(), 8);
    for (id, reward) in expected_rewards {
        let grade = read_json(&logs.join(&id).join("grade.json"));
        assert_eq!(
            grade.get("reward").and_then(Value::as_f64),
            reward,
            "{id}: {grade}"
        );
        if reward.is_none() {
            assert_eq!(grade["status"], "error", "{id}: {grade}");
        }
        assert!(logs.join(&id).join("status_map.json").exists());
    }
}
