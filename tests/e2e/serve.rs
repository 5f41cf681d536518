//! `sandfleet serve` as a process: the token, SIGTERM with live leases,
//! kill -9 and a restart. The Python client's own suite
//! (`clients/python/tests`, run by `.ci/run`) drives it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::signals::{signal, wait};
use crate::{eventually, processes_running, repo, sandbox_dirs, sandfleet, stderr};

const PATIENCE: Duration = Duration::from_secs(60);
const TOKEN: &str = "e2e-serve-token-7f3a";

/// A fleet file over the quickstart's images, its state in `dir`.
fn fleet(dir: &Path, api: &str) -> PathBuf {
    let images = repo().join("examples/quickstart/images");
    let text = format!(
        r#"[run]
name = "e2e-serve"
dataset = "{dataset}"

[adapter]
name = "generic"

[fleet]
recycle = true

[plugins]
reset = "git-restore"

[api]
state_dir = "serve"
{api}

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"
max_sandboxes = 24

[clusters.local.images]
calc = {{ path = "{images}/calc", git = true }}
textkit = {{ path = "{images}/textkit", git = true }}
shellutils = {{ path = "{images}/shellutils", git = true }}
"#,
        dataset = repo().join("examples/quickstart/tasks.jsonl").display(),
        images = images.display(),
    );
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A daemon started from the binary.
struct Serving {
    child: Child,
    url: String,
    run_id: String,
    http: reqwest::blocking::Client,
}

impl Serving {
    fn start(fleet: &Path) -> Serving {
        Self::start_with(fleet, &[])
    }

    fn start_with(fleet: &Path, envs: &[(String, String)]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
            .args(["serve", fleet.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .current_dir(repo())
            .envs(envs.iter().map(|(n, v)| (n.as_str(), v.as_str())))
            .env("SANDFLEET_E2E_TOKEN", TOKEN)
            .env("SANDFLEET_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // "sandfleet serve: run id ID (...)" then "listening on http://ADDR".
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines
            .next()
            .expect("the daemon printed its run id")
            .unwrap();
        let run_id = first
            .strip_prefix("sandfleet serve: run id ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{first}"))
            .to_string();
        let second = lines.next().unwrap().unwrap();
        let url = second.strip_prefix("listening on ").unwrap().to_string();
        let _ = rustls::crypto::ring::default_provider().install_default();
        Serving {
            child,
            url,
            run_id,
            http: reqwest::blocking::Client::new(),
        }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url))
            .timeout(PATIENCE);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body), Some(TOKEN))
    }
}

impl Drop for Serving {
    /// A test that failed half-way still stops its daemon, which releases
    /// what it holds.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(&self.child, "-TERM");
            let until = Instant::now() + PATIENCE;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn the_token_is_required_and_sigterm_with_20_live_leases_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet(
        dir.path(),
        "token_env = \"SANDFLEET_E2E_TOKEN\"\ngrace_period = \"30s\"",
    );
    let mut serving = Serving::start(&fleet);
    assert_eq!(serving.call("GET", "/healthz", None, None).0, 200);
    let (status, refused) = serving.call("GET", "/v1/leases", None, None);
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"]["kind"], "unauthorized");
    assert_eq!(
        serving.call("GET", "/v1/leases", None, Some("wrong")).0,
        401
    );
    let (status, ready) = serving.call("GET", "/readyz", None, Some(TOKEN));
    assert_eq!(
        (status, ready["run_id"].as_str()),
        (200, Some(serving.run_id.as_str()))
    );

    let leases: Vec<Value> = (0..20)
        .map(|i| {
            let image = ["calc", "textkit", "shellutils"][i % 3];
            json!({ "image": image })
        })
        .collect();
    let (status, batch) = serving.post("/v1/leases:batch", json!({ "leases": leases }));
    assert_eq!(status, 201, "{batch}");
    let state = dir.path().join("state");
    assert_eq!(sandbox_dirs(&state, &serving.run_id), 20);

    // A command running when SIGTERM comes finishes within the grace period.
    let first = batch["leases"][0]["id"].as_str().unwrap().to_string();
    let running = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            serving.post(
                &format!("/v1/leases/{first}/exec"),
                json!({"command": "sleep 1.2479; echo finished"}),
            )
        });
        eventually("the command to run", || {
            !processes_running("sleep 1.2479").is_empty()
        });
        signal(&serving.child, "-TERM");
        running.join().unwrap()
    });
    assert_eq!(running.0, 200, "{}", running.1);
    assert_eq!(running.1["stdout"], "finished\n");
    let status = wait(&mut serving.child);
    assert!(status.success(), "{status}");
    assert_eq!(sandbox_dirs(&state, &serving.run_id), 0);
    assert_eq!(
        processes_running(&format!("sandfleet-sandbox:{}", serving.run_id)),
        Vec::<String>::new()
    );
}

#[test]
fn a_daemon_refuses_to_start_open_to_the_network_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let fleet_path = fleet(dir.path(), "");
    let output = sandfleet(&[
        "serve",
        fleet_path.to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("refusing to listen on 0.0.0.0:0 without a token"),
        "{}",
        stderr(&output)
    );
    let fleet_path = fleet(dir.path(), "token_env = \"SANDFLEET_E2E_UNSET_TOKEN\"");
    let output = sandfleet(&["serve", fleet_path.to_str().unwrap()]);
    assert!(
        stderr(&output).contains("$SANDFLEET_E2E_UNSET_TOKEN is not set"),
        "{}",
        stderr(&output)
    );
    let fleet_path = fleet(dir.path(), "idle_timout = \"1m\"");
    let output = sandfleet(&["serve", fleet_path.to_str().unwrap()]);
    assert!(
        stderr(&output).contains("unknown field `idle_timout`"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("fleet.toml:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn after_kill_9_a_restart_releases_what_the_old_daemon_held_and_reap_works_too() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet(dir.path(), "token_env = \"SANDFLEET_E2E_TOKEN\"");
    let state = dir.path().join("state");
    let mut old = Serving::start(&fleet);
    for image in ["calc", "textkit", "calc"] {
        assert_eq!(old.post("/v1/leases", json!({ "image": image })).0, 201);
    }
    signal(&old.child, "-KILL");
    wait(&mut old.child);
    assert_eq!(sandbox_dirs(&state, &old.run_id), 3);

    let mut new = Serving::start(&fleet);
    assert_eq!(sandbox_dirs(&state, &old.run_id), 0);
    assert_eq!(
        processes_running(&format!("sandfleet-sandbox:{}", old.run_id)),
        Vec::<String>::new()
    );
    assert_eq!(new.post("/v1/leases", json!({"image": "calc"})).0, 201);
    signal(&new.child, "-KILL");
    wait(&mut new.child);
    assert_eq!(sandbox_dirs(&state, &new.run_id), 1);
    let reap = sandfleet(&["reap", "--run-id", &new.run_id, fleet.to_str().unwrap()]);
    assert!(reap.status.success(), "{}", stderr(&reap));
    assert_eq!(sandbox_dirs(&state, &new.run_id), 0);
}

#[test]
fn the_daemon_serves_an_opensandbox_devcluster_too() {
    let scratch = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args([
            "devcluster",
            "opensandbox",
            "--images-from",
            "examples/quickstart.toml",
            "--faults",
            "keepalive=5s,execd-late=500",
        ])
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Stopped however the test ends: it holds the test's stderr open.
    struct Stopped(Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = server.stdout.take().unwrap();
    let _server = Stopped(server);
    let mut envs: Vec<(String, String)> = BufReader::new(stdout)
        .lines()
        .map(Result::unwrap)
        .filter_map(|line| {
            line.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
        })
        .take(2)
        .collect();
    // The daemon's state (run id, lease handles) goes to the scratch dir.
    envs.push((
        "XDG_STATE_HOME".into(),
        scratch.path().display().to_string(),
    ));
    let fleet = repo().join("examples/quickstart-opensandbox.toml");
    let mut serving = Serving::start_with(&fleet, &envs);
    let row = json!({"id": "calc-sub", "image": "calc", "test": "python3 -m unittest -v tests.test_ops.TestSub", "env": {"PYTHONDONTWRITEBYTECODE": "1"}});
    let (status, lease) = serving.post("/v1/leases", json!({ "task": row }));
    assert_eq!(status, 201, "{lease}");
    assert_eq!(lease["cluster"], "opensandbox");
    let id = lease["id"].as_str().unwrap();
    let (status, ran) = serving.post(
        &format!("/v1/leases/{id}/exec"),
        json!({"command": "echo out; echo err >&2; exit 5"}),
    );
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["exit_code"], 5, "{ran}");
    assert_eq!(
        (&ran["stdout"], &ran["stderr"]),
        (&json!("out\n"), &json!("err\n")),
        "{ran}"
    );
    let patch = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -7,7 +7,7 @@ def add(a, b):\n \n \n def sub(a, b):\n-    return b - a\n+    return a - b\n \n \n def div(a, b):\n";
    let (status, graded) = serving.post(
        &format!("/v1/leases/{id}/evaluate"),
        json!({ "solution": patch }),
    );
    assert_eq!(status, 200, "{graded}");
    assert_eq!(graded["status"], "ok", "{graded}");
    assert_eq!(
        serving
            .call("DELETE", &format!("/v1/leases/{id}"), None, None)
            .0,
        204
    );
    signal(&serving.child, "-TERM");
    assert!(wait(&mut serving.child).success());
}
