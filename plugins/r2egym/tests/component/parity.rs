//! Rows on which R2E-Gym's reward code raises, or accepts what a strict JSON
//! parser would not (`tests/parity/`, written by `tools/gen_reward_cases.py`
//! with what R2E-Gym's own code does): the component grades each as R2E-Gym
//! would, and where R2E-Gym raises it gives an error with no reward.

use std::path::Path;

use sandfleet_testkit::adapter::{GradeStatus, Setting};
use sandfleet_testkit::{TestPlugin, fixtures};
use serde_json::{Value, json};

const COMMIT: &str = "r2e-gym@69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0";

#[test]
fn every_case_is_graded_as_r2e_gym_computes_or_raises() {
    let adapter = TestPlugin::load(sandfleet_guests::R2EGYM)
        .unwrap()
        .adapter()
        .unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 14);
    let mut raised = 0;
    for path in paths {
        let case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let name = case["case"].as_str().unwrap();
        let input = &case["input"];
        let mut row = json!({
            "repo_name": input["repo_name"],
            "docker_image": format!("namanjain12/{}_final:abc", input["repo_name"].as_str().unwrap()),
            "commit_hash": name,
            "parsed_commit_content": "{}",
        });
        if let Some(expected) = input.get("expected_output_json") {
            row["expected_output_json"] = expected.clone();
        }
        let settings = [Setting {
            key: "grading".into(),
            value: "in-place".into(),
        }];
        let task = adapter
            .load_blocking(&row.to_string(), &settings)
            .unwrap_or_else(|error| {
                panic!("{name}: R2E-Gym builds this runtime, so load must too: {error}")
            });
        let exit_code = input["exit_code"].as_i64().unwrap() as i32;
        let outputs = [
            fixtures::output(0, ""),
            fixtures::output(exit_code, input["output"].as_str().unwrap()),
            fixtures::output(0, ""),
        ];
        let result = adapter.grade_blocking(&task, None, &outputs).unwrap();
        let report: Value = serde_json::from_str(&result.report).unwrap();
        let expected = &case["expected"][COMMIT];
        match expected.get("reward_exception") {
            Some(exception) => {
                raised += 1;
                assert_eq!(
                    result.status,
                    GradeStatus::Error,
                    "{name}: {}",
                    result.detail
                );
                assert_eq!(result.reward, None, "{name}: no invented reward");
                assert!(report.get("reward").is_none(), "{name}: {report}");
                assert_eq!(report["r2e_exception"]["type"], exception["type"], "{name}");
                assert_eq!(
                    report["r2e_exception"]["message"], exception["message"],
                    "{name}"
                );
                let says = format!(
                    "R2E-Gym raises {}: {}",
                    exception["type"].as_str().unwrap(),
                    exception["message"].as_str().unwrap()
                );
                assert!(
                    result.detail.starts_with(&says),
                    "{name}: {}",
                    result.detail
                );
            }
            None => {
                let reward = expected["reward"].as_f64().unwrap();
                assert_eq!(result.reward, Some(reward), "{name}: {}", result.detail);
                let status = if reward == 1.0 {
                    GradeStatus::Passed
                } else {
                    GradeStatus::Failed
                };
                assert_eq!(result.status, status, "{name}");
                assert!(report.get("r2e_exception").is_none(), "{name}: {report}");
            }
        }
    }
    assert_eq!(raised, 12);
}
