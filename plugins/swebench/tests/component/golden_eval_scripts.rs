//! The golden eval scripts (byte for byte), image names and test directives,
//! through the component's `load` and `prepare`.

use crate::common;

use sandfleet_testkit::adapter::{EvaluationSite, Script, Setting, Task, TaskAdapter, TimeoutRule};
use serde_json::Value;

fn sample_row(instance_id: &str) -> Value {
    common::sample_rows()
        .into_iter()
        .find(|row| row["instance_id"] == instance_id)
        .unwrap_or_else(|| panic!("{instance_id} is in the sample"))
}

fn settings(grader: &str, namespace: Option<&str>) -> Vec<Setting> {
    let mut pairs = vec![("grader-version", grader)];
    pairs.extend(namespace.map(|namespace| ("namespace", namespace)));
    common::settings(&pairs)
}

fn load(adapter: &TaskAdapter, row: &Value, settings: &[Setting]) -> Task {
    adapter
        .load_blocking(&row.to_string(), settings)
        .unwrap_or_else(|error| panic!("load: {error}"))
}

fn prepare(adapter: &TaskAdapter, task: &Task, patch: Option<&str>) -> Script {
    adapter
        .prepare_blocking(task, patch)
        .unwrap_or_else(|error| panic!("prepare: {error}"))
}

fn golden_script(name: &str) -> String {
    common::read(&common::golden("eval-scripts").join(name))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item.as_str().expect("a string"))
        .collect()
}

/// The script runs `test_cmd` on the test directives and resets exactly the
/// modified test files (the harness joins both lists with spaces).
fn assert_test_lines(
    script: &str,
    test_cmd: &str,
    directives: &[&str],
    base_commit: &str,
    modified_files: &[&str],
    context: &str,
) {
    let (test_command, reset) = common::test_command_and_reset(script);
    let expected_command = std::iter::once(test_cmd)
        .chain(directives.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        test_command, expected_command,
        "{context}: test command and directives"
    );
    assert_eq!(
        reset,
        format!("git checkout {base_commit} {}", modified_files.join(" ")),
        "{context}: modified test files"
    );
}

#[test]
fn eval_scripts_and_image_names_match_meta() {
    let adapter = common::adapter();
    let meta = common::read_json(&common::golden("eval-scripts").join("meta.json"));
    let meta = meta.as_object().unwrap();
    assert_eq!(meta.len(), 3);
    for (instance_id, expected) in meta {
        let row = sample_row(instance_id);
        let patch = row["patch"].as_str().unwrap();
        let base_commit = expected["base_commit"].as_str().unwrap();
        assert_eq!(row["base_commit"], base_commit, "{instance_id}");

        // swebench 4.1.0
        let old = &expected["swebench-4.1.0"];
        let task = load(&adapter, &row, &settings("swebench-4.1.0", None));
        assert_eq!(task.image, old["instance_image_key"], "{instance_id}");
        let local = load(&adapter, &row, &settings("swebench-4.1.0", Some("none")));
        assert_eq!(
            local.image, old["instance_image_key_namespace_none"],
            "{instance_id}"
        );
        let script = prepare(&adapter, &task, Some(patch));
        let old_script = golden_script(old["eval_script_file"].as_str().unwrap());
        assert_eq!(
            common::eval_script(&script),
            old_script,
            "{instance_id}: 4.1.0 eval script"
        );
        assert_test_lines(
            common::eval_script(&script),
            old["test_cmd"].as_str().unwrap(),
            &strings(&old["test_directives"]),
            base_commit,
            &strings(&old["modified_test_files"]),
            &format!("{instance_id} (4.1.0)"),
        );

        // swebench 5.0.2, with the 4.1.0 script in the row's eval_script column
        let new = &expected["swebench-5.0.2"];
        let new_script = golden_script(new["eval_script_file"].as_str().unwrap());
        let mut row_5x = row.clone();
        row_5x["eval_script"] = Value::from(old_script);
        let task = load(&adapter, &row_5x, &settings("swebench-5.0.2", None));
        assert_eq!(task.image, new["image_name"], "{instance_id}");
        assert_eq!(
            task.image, new["task_checks_expected_image"],
            "{instance_id}"
        );
        let local = load(&adapter, &row_5x, &settings("swebench-5.0.2", Some("none")));
        assert_eq!(
            local.image, new["image_name_namespace_none"],
            "{instance_id}"
        );
        let script = prepare(&adapter, &task, Some(patch));
        assert_eq!(
            common::eval_script(&script),
            new_script,
            "{instance_id}: 5.0.2 eval script"
        );
        assert_test_lines(
            common::eval_script(&script),
            old["test_cmd"].as_str().unwrap(),
            &strings(&old["test_directives"]),
            base_commit,
            &strings(&new["modified_test_files"]),
            &format!("{instance_id} (5.0.2)"),
        );

        // A 4.x-era row graded by 5.0.2 gets the same script from the 4.1.0 table.
        let task = load(&adapter, &row, &settings("swebench-5.0.2", None));
        let script = prepare(&adapter, &task, Some(patch));
        assert_eq!(
            common::eval_script(&script),
            new_script,
            "{instance_id}: 5.0.2 eval script from the 4.1.0 table"
        );
    }
}

#[test]
fn every_image_name_vector_matches_both_versions() {
    let adapter = common::adapter();
    let vectors = common::read_json(&common::golden("eval-scripts").join("image-names.json"));
    let vectors = vectors.as_array().unwrap();
    assert_eq!(vectors.len(), 10);
    for vector in vectors {
        let instance_id = vector["instance_id"].as_str().unwrap();
        let namespace = vector["namespace"].as_str();
        for grader in common::GRADERS {
            // A real row renamed to this id.
            let mut row = sample_row("django__django-16255");
            row["instance_id"] = Value::from(instance_id);
            let settings = common::settings(&[
                ("grader-version", grader),
                ("namespace", namespace.unwrap_or("none")),
                ("arch", vector["arch"].as_str().unwrap()),
                ("tag", vector["tag"].as_str().unwrap()),
            ]);
            assert_eq!(
                load(&adapter, &row, &settings).image,
                vector[grader],
                "{vector}"
            );
        }
        if let Some(expected_image) = vector["swebench-5.0.2_task_checks_expected_image"].as_str() {
            assert_eq!(expected_image, vector["swebench-5.0.2"], "{vector}");
        }
    }
}

#[test]
fn prepare_runs_the_apply_chain_then_the_eval_script() {
    let adapter = common::adapter();
    let row = sample_row("pylint-dev__astroid-1268");
    let task = load(
        &adapter,
        &row,
        &common::settings(&[("grader-version", "swebench-5.0.2"), ("timeout-s", "90")]),
    );
    let script = prepare(&adapter, &task, Some("the patch"));
    assert_eq!(script.workdir, "/testbed");
    let paths: Vec<&str> = script.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(paths, [common::PATCH_PATH, common::EVAL_SCRIPT_PATH]);
    assert_eq!(script.files[0].contents, b"the patch");
    assert!(script.setup.is_empty() && script.env.is_empty());
    // A timed-out run is graded (an error without a report, the harness's
    // verdict), so that 5.x can classify it.
    assert_eq!(script.timeout_rule, TimeoutRule::Fail);
    assert_eq!(script.evaluate_in, EvaluationSite::WorkSandbox);
    let [command] = script.evaluate.as_slice() else {
        panic!("one evaluate command")
    };
    assert_eq!(command.timeout_ms, 90_000);
    assert!(command.merge_stderr);
    assert_eq!(command.argv[..2], ["/bin/bash", "-c"]);
    assert!(command.argv[2].ends_with("exec /bin/bash /eval.sh\n"));

    let without_patch = prepare(&adapter, &task, None);
    assert_eq!(without_patch.files.len(), 1);
    assert_eq!(
        without_patch.evaluate[0].argv[2],
        "exec /bin/bash /eval.sh\n"
    );
}

#[test]
fn every_sample_row_loads_and_prepares_under_both_versions() {
    let adapter = common::adapter();
    let rows = common::sample_rows();
    assert_eq!(rows.len(), 14);
    for row in &rows {
        let id = row["instance_id"].as_str().unwrap();
        // The HuggingFace form: lists as JSON-encoded strings.
        let mut encoded = row.clone();
        for field in ["FAIL_TO_PASS", "PASS_TO_PASS"] {
            encoded[field] = Value::from(row[field].to_string());
        }
        for grader in common::GRADERS {
            for form in [row, &encoded] {
                let task = load(&adapter, form, &settings(grader, None));
                let data: Value = serde_json::from_str(&task.data).unwrap();
                assert_eq!(data["FAIL_TO_PASS"], row["FAIL_TO_PASS"], "{id}");
                assert_eq!(data["PASS_TO_PASS"], row["PASS_TO_PASS"], "{id}");
                let script = prepare(&adapter, &task, row["patch"].as_str());
                let eval_script = common::eval_script(&script);
                assert!(
                    eval_script.contains(row["test_patch"].as_str().unwrap()),
                    "{id}"
                );
                let exit_code_lines = eval_script.matches("SWEBENCH_TEST_EXIT_CODE").count();
                assert_eq!(
                    exit_code_lines,
                    if grader == "swebench-5.0.2" { 2 } else { 0 },
                    "{id}"
                );
            }
        }
    }
}
