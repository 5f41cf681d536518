//! The README's two OpenSandbox commands: `sandfleet devcluster
//! opensandbox` with the production faults in one process, and
//! `sandfleet run examples/quickstart-opensandbox.toml` against it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::signals::{signal, wait};
use crate::{repo, results, run_id, stderr};
use sandfleet_test_support::quickstart::{expected_statuses, statuses};

#[test]
fn the_quickstart_on_the_faulty_emulator_gives_the_local_runs_statuses() {
    let scratch = tempfile::tempdir().unwrap();
    let env_file = scratch.path().join("opensandbox.env");
    let (mut server, env) = start_devcluster(&[
        "--images-from",
        "examples/quickstart.toml",
        "--faults",
        "keepalive=5s,execd-late=500,cut-tail,flaky=0.05",
        "--write-env",
        env_file.to_str().unwrap(),
    ]);
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["OPENSANDBOX_BASE_URL", "OPENSANDBOX_API_KEY"]);
    let written = std::fs::read_to_string(&env_file).unwrap();
    assert!(written.contains(&format!("OPENSANDBOX_API_KEY={}", env[1].1)));

    let out = scratch.path().join("out");
    let id = run_id("opensandbox");
    let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args([
            "run",
            "examples/quickstart-opensandbox.toml",
            "--run-id",
            &id,
            "--out",
        ])
        .arg(&out)
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .envs(env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(statuses(&out), expected_statuses(), "{}", stderr(&output));
    let truncate = results(&out)
        .into_iter()
        .find(|r| r["task_id"] == "textkit-truncate")
        .unwrap();
    assert_eq!(truncate["timed_out"], true);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["releases"]["failed"], 0, "{report}");

    // A wrong key stops the run at preflight, before any sandbox exists.
    let refused_out = scratch.path().join("refused");
    let refused = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["run", "examples/quickstart-opensandbox.toml", "--out"])
        .arg(&refused_out)
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .env("OPENSANDBOX_BASE_URL", &env[0].1)
        .env("OPENSANDBOX_API_KEY", "not-the-key")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains("opensandbox: list sandboxes: GET /v1/sandboxes: 401"),
        "{said}"
    );
    assert!(
        said.contains("check the key in $OPENSANDBOX_API_KEY"),
        "{said}"
    );
    assert!(results(&refused_out).is_empty(), "{said}");

    signal(&server, "-TERM");
    let status = wait(&mut server);
    assert!(status.success(), "devcluster exited {status}");
}

/// `sandfleet devcluster opensandbox` with `args`, from the repository, and
/// the `NAME=value` lines it printed once ready (it prints nothing else).
pub(crate) fn start_devcluster(args: &[&str]) -> (Child, Vec<(String, String)>) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["devcluster", "opensandbox"])
        .args(args)
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut env = Vec::new();
    for line in BufReader::new(server.stdout.take().unwrap()).lines() {
        if let Some((name, value)) = line.unwrap().split_once('=') {
            env.push((name.to_string(), value.to_string()));
        }
        if env.len() == 2 {
            break;
        }
    }
    (server, env)
}
