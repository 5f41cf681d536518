//! A task whose script evaluates in a fresh sandbox (the swebench adapter,
//! 5.0.2, `evaluation = fresh`): the client's changes since setup are
//! graded in a new sandbox; nothing in the lease's sandbox runs the grade.

use sandfleet_test_support::calc;
use serde_json::json;

use crate::Served;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_evaluation_grades_the_work_and_not_the_work_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("images/calc");
    calc::write_image(&image);
    std::fs::write(dir.path().join("tasks.jsonl"), "").unwrap();
    let config = dir.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            r#"[run]
dataset = "tasks.jsonl"

[adapter]
name = "swebench"
settings = {{ grader-version = "swebench-5.0.2", evaluation = "fresh" }}

[api]
state_dir = "serve"

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"
workdir = "/testbed"

[clusters.local.images]
calc = {{ path = "{}", git = true }}
"#,
            image.display()
        ),
    )
    .unwrap();
    let served = Served::start_in(dir, config).await;
    let row = calc::row("calc__calc-1", calc::RUN_TEST);
    let evaluate = |lease: String| {
        let served = &served;
        async move {
            let (status, graded) = served
                .post(&format!("/v1/leases/{lease}/evaluate"), json!({}))
                .await;
            assert_eq!(status, 200, "{graded}");
            graded
        }
    };

    // An agent that games the test: the grade ignores it, and the lease's
    // own copy stays as the agent left it (the eval script, which restores
    // the test, never ran there).
    let cheat = served.acquire(json!({ "task": row })).await;
    served
        .exec(
            &cheat.id,
            json!({"command": "echo 'exit 0' > tests/test_add.sh"}),
        )
        .await;
    let graded = evaluate(cheat.id.clone()).await;
    assert_eq!(graded["status"], "failed", "{graded}");
    let left = served
        .exec(&cheat.id, json!({"argv": ["cat", "tests/test_add.sh"]}))
        .await;
    assert_eq!(left["stdout"], "exit 0\n");

    // An agent that fixes the code passes.
    let fixer = served.acquire(json!({ "task": row })).await;
    served
        .exec(
            &fixer.id,
            json!({"command": "sed -i 's/a - b/a + b/' calc.py"}),
        )
        .await;
    let graded = evaluate(fixer.id.clone()).await;
    assert_eq!(graded["status"], "ok", "{graded}");
    assert_eq!(graded["grade"]["status"], "passed", "{graded}");
    served.stop().await;
}
