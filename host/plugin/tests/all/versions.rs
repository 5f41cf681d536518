//! Contract versions side by side: the host serves 0.1.0 and 0.2.0
//! components in one registry, and a 0.1.0 component built before 0.2.0
//! existed still loads and answers, its answers in 0.2.0's shapes.
//!
//! `tests/fixtures/r2egym-0.1.0.wasm` is the built-in r2egym adapter as
//! commit 9b166a4 built it (wit/since_v0.1.0, wit-bindgen 0.61, profile
//! `guest`), kept as built: sha256
//! 62c00898f37a11fa2f94ee82b7075a1992ac568a80cd07a779cee8924ee1e145.

use std::path::Path;

use sandfleet_plugin::adapter::{
    CommandOutput, EvaluationSite, GradeStatus, Graded, Setting, SolutionState, TestStatus,
};
use sandfleet_plugin::{Kind, SUPPORTED_VERSIONS, Source};

use crate::patient_registry;

fn frozen_r2egym() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/r2egym-0.1.0.wasm");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn output(exit_code: i32, stdout: &str) -> CommandOutput {
    CommandOutput {
        exit_code,
        stdout: stdout.into(),
        stderr: String::new(),
        timed_out: false,
        duration_ms: 1,
    }
}

const LOG: &str = "=== short test summary info ===\n\
                   PASSED r2e_tests/test_1.py::test_a\n\
                   FAILED r2e_tests/test_1.py::test_b - assert 0\n";

#[test]
fn a_0_1_0_component_built_before_0_2_0_loads_and_answers_beside_a_0_2_0_one() {
    let registry = patient_registry();
    registry
        .load_bytes("r2egym-old", &frozen_r2egym(), Source::Memory)
        .expect("the 0.1.0 component loads");
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    let old = registry.adapter("r2egym-old").unwrap();
    let new = registry.adapter("r2egym").unwrap();
    assert_eq!(old.version().contract, "0.1.0");
    assert_eq!(new.version().contract, "0.2.0");
    assert_eq!(old.version().kind, Kind::Adapter);

    let row = r#"{"repo_name": "numpy", "docker_image": "namanjain12/numpy_final:abc",
        "commit_hash": "abc", "parsed_commit_content": "{}",
        "expected_output_json": "{\"test_a\": \"PASSED\", \"test_b\": \"FAILED\"}"}"#;
    let settings = [Setting {
        key: "grading".into(),
        value: "in-place".into(),
    }];
    for adapter in [&old, &new] {
        let info = adapter.describe_blocking().unwrap();
        assert_eq!(info.name, "r2egym");
        let task = adapter.load_blocking(row, &settings).unwrap();
        let script = adapter.prepare_blocking(&task, None).unwrap();
        assert_eq!(script.evaluate_in, EvaluationSite::WorkSandbox);
        let outputs = [output(0, ""), output(1, LOG), output(0, "")];
        let grade = adapter.grade_blocking(&task, None, &outputs).unwrap();
        let contract = adapter.version().contract;
        assert_eq!(
            grade.status,
            GradeStatus::Passed,
            "{contract}: {}",
            grade.detail
        );
        assert_eq!(grade.reward, Some(1.0), "{contract}");
        assert!(grade.infra.is_none(), "{contract}");
        let tests: Vec<_> = grade
            .tests
            .iter()
            .map(|t| (t.name, t.value, t.status))
            .collect();
        assert_eq!(
            tests,
            [
                ("test_a", "PASSED", TestStatus::Passed),
                ("test_b", "FAILED", TestStatus::Failed)
            ],
            "{contract}"
        );
        let parsed = adapter
            .parse_log_blocking("parse_log_pytest", LOG, &[])
            .unwrap();
        assert_eq!(parsed.len(), 2, "{contract}");
        let summary = adapter
            .summarize_blocking(
                &[Graded {
                    task_id: task.id.clone(),
                    status: grade.status,
                    solution: SolutionState::Missing,
                    infra: None,
                }],
                &[],
            )
            .unwrap();
        assert!(
            summary.contains("\"passed_instances\": 1"),
            "{contract}: {summary}"
        );
    }
    // The versions differ where 0.2.0 changed: only the new one leaves out
    // the reward where R2E-Gym raises (a repository without a parser).
    let unknown_repo = row.replace("\"numpy\"", "\"django\"");
    let rewards: Vec<Option<f64>> = [&old, &new]
        .map(|adapter| {
            let task = adapter.load_blocking(&unknown_repo, &settings).unwrap();
            let outputs = [output(0, ""), output(1, LOG), output(0, "")];
            adapter
                .grade_blocking(&task, None, &outputs)
                .unwrap()
                .reward
        })
        .to_vec();
    assert_eq!(rewards, [Some(1.0), None]);
}

#[test]
fn built_ins_use_a_served_version_and_the_adapters_the_latest() {
    let host = patient_registry().host().clone();
    for builtin in sandfleet_guests::BUILTINS {
        let compiled = host
            .compile(builtin.name, builtin.wasm, Source::Builtin)
            .unwrap_or_else(|e| panic!("built-in {}: {e}", builtin.name));
        let version = compiled.contract.version;
        assert!(
            SUPPORTED_VERSIONS.contains(&version.as_str()),
            "{}: {version}",
            builtin.name
        );
        if ["swebench", "r2egym"].contains(&builtin.name) {
            assert_eq!(version, SUPPORTED_VERSIONS[0], "{}", builtin.name);
        }
    }
}
