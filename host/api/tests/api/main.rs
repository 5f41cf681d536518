//! The daemon over real HTTP on loopback, in-process, on the local backend
//! with the quickstart's images and the built-in plugins (or on the
//! OpenSandbox emulator, in-process too). One test binary, one module per
//! concern. (The binary's own tests — signals, the token,
//! restarts, the Python client — are in tests/e2e/serve.rs.)

mod bad_input;
mod errors;
mod exec;
mod fresh;
mod grafana;
mod leases;
mod plugins;
mod pools_runs;
mod shared;
mod snapshots;
mod ui;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandfleet_api::{Daemon, LeaseView, Options};
use sandfleet_emulator_opensandbox::{
    Emulator, EmulatorConfig, Faults, Runtime, images_from_fleet,
};
use sandfleet_test_support::quickstart::repo;
use serde_json::{Value, json};

/// How long any condition may take to come true.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// A daemon on a fleet file of its own, in a temporary directory.
pub(crate) struct Served {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) daemon: Option<Daemon>,
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
}

/// The fleet file: the quickstart's images and dataset, recycling through
/// git-restore, the local backend under `dir`; `api` and `plugins` are
/// extra lines for those tables.
pub(crate) fn fleet_file(dir: &Path, api: &str, plugins: &str) -> PathBuf {
    let images = repo().join("examples/quickstart/images");
    let local = format!(
        r#"[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"
max_sandboxes = 40

[clusters.local.images]
calc = {{ path = "{images}/calc", git = true }}
textkit = {{ path = "{images}/textkit", git = true }}
shellutils = {{ path = "{images}/shellutils", git = true }}
"#,
        images = images.display(),
    );
    fleet_file_on(dir, api, plugins, &local)
}

/// [`fleet_file`] with `clusters` (the `[[clusters]]` tables) instead of
/// the local backend.
pub(crate) fn fleet_file_on(dir: &Path, api: &str, plugins: &str, clusters: &str) -> PathBuf {
    let text = format!(
        r#"[run]
name = "apitest"
dataset = "{dataset}"

[adapter]
name = "generic"

[fleet]
max_concurrent = 4
claim_timeout = "60s"
recycle = true

[plugins]
reset = "git-restore"
{plugins}

[api]
state_dir = "serve"
{api}

{clusters}"#,
        dataset = repo().join("examples/quickstart/tasks.jsonl").display(),
    );
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The environment variable an OpenSandbox cluster of these tests reads its
/// API key from. The daemon reads keys from the environment only, and tests
/// sharing one process cannot set it safely; cargo sets this one for every
/// test it runs, so its value is the emulator's key.
const EMULATOR_KEY_ENV: &str = "CARGO_PKG_NAME";

/// An OpenSandbox emulator serving the quickstart's images as plain
/// sandboxes, with `faults` switched on.
pub(crate) async fn opensandbox_emulator(faults: &str) -> Emulator {
    opensandbox_emulator_on(Runtime::Plain, faults).await
}

/// [`opensandbox_emulator`] with sandboxes of `runtime` (plain ones have no
/// snapshots).
pub(crate) async fn opensandbox_emulator_on(runtime: Runtime, faults: &str) -> Emulator {
    let quickstart = repo().join("examples/quickstart.toml");
    let mut config = EmulatorConfig::new(images_from_fleet(&quickstart).unwrap());
    config.runtime = runtime;
    config.faults = faults.parse::<Faults>().unwrap();
    config.api_key = Some(
        std::env::var(EMULATOR_KEY_ENV)
            .unwrap_or_else(|_| panic!("{EMULATOR_KEY_ENV} is unset: run the tests with cargo")),
    );
    Emulator::start(config).await.unwrap()
}

/// The `[[clusters]]` table of cluster `os` on `emulator`; `table` is extra
/// lines for its `[clusters.opensandbox]`.
/// The fleet file at `path` with `[fleet] network = true`: a cluster that
/// takes an image from a server pool must, since OpenSandbox takes no
/// networkPolicy with a poolRef and the driver refuses an offline
/// template of a pooled image.
pub(crate) fn online(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("[fleet]\n"), "{text}");
    std::fs::write(
        path,
        text.replacen("[fleet]\n", "[fleet]\nnetwork = true\n", 1),
    )
    .unwrap();
}

pub(crate) fn opensandbox_cluster(emulator: &Emulator, table: &str) -> String {
    format!(
        r#"[[clusters]]
name = "os"
backend = "opensandbox"

[clusters.opensandbox]
url = "{url}"
api_key_env = "{EMULATOR_KEY_ENV}"
{table}
"#,
        url = emulator.base_url(),
    )
}

impl Served {
    pub(crate) async fn start(api: &str, plugins: &str) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let config = fleet_file(dir.path(), api, plugins);
        Self::start_in(dir, config).await
    }

    pub(crate) async fn start_in(dir: tempfile::TempDir, config: PathBuf) -> Served {
        // The drivers' HTTP client is built without a TLS crypto provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let daemon = Daemon::start(Options {
            config,
            listen: Some("127.0.0.1:0".parse().unwrap()),
        })
        .await
        .unwrap();
        let base = format!("http://{}", daemon.addr());
        Served {
            dir,
            daemon: Some(daemon),
            base,
            http: reqwest::Client::new(),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn run_id(&self) -> String {
        self.daemon.as_ref().unwrap().run_id().to_string()
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Sandbox directories the daemon's run has now.
    pub(crate) fn sandboxes(&self) -> usize {
        sandfleet_test_support::sandbox_dirs(&self.state_dir(), &self.run_id())
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The status of `DELETE path`.
    pub(crate) async fn delete(&self, path: &str) -> u16 {
        let response = self.http.delete(self.url(path)).send().await.unwrap();
        response.status().as_u16()
    }

    /// The `/metrics` text.
    pub(crate) async fn metrics(&self) -> String {
        let response = self.http.get(self.url("/metrics")).send().await.unwrap();
        response.text().await.unwrap()
    }

    pub(crate) async fn acquire(&self, body: Value) -> LeaseView {
        let (status, lease) = self.post("/v1/leases", body).await;
        assert_eq!(status, 201, "{lease}");
        serde_json::from_value(lease).unwrap()
    }

    pub(crate) async fn exec(&self, lease: &str, body: Value) -> Value {
        let (status, result) = self.post(&format!("/v1/leases/{lease}/exec"), body).await;
        assert_eq!(status, 200, "{result}");
        result
    }

    pub(crate) async fn release(&self, lease: &str) {
        let response = self
            .http
            .delete(self.url(&format!("/v1/leases/{lease}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 204);
    }

    /// Stops the daemon as SIGTERM does and waits until it has released
    /// everything.
    pub(crate) async fn stop(mut self) {
        let daemon = self.daemon.take().unwrap();
        daemon.stop();
        daemon.wait().await.unwrap();
    }
}

impl Drop for Served {
    /// A test that failed before [`Served::stop`] still removes the
    /// daemon's sandboxes (their processes outlive the test's runtime).
    fn drop(&mut self) {
        let Some(daemon) = self.daemon.take() else {
            return;
        };
        let (state, run_id) = (self.state_dir(), daemon.run_id().clone());
        let reaped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(sandfleet_backend_local::reap_run(&state, &run_id))
        })
        .join();
        if !matches!(reaped, Ok(Ok(_))) {
            eprintln!("could not reap the daemon's sandboxes after a failed test");
        }
    }
}

/// Waits until `condition` holds, polling; fails after [`PATIENCE`].
pub(crate) async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + PATIENCE;
    while !condition().await {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The quickstart's dataset rows and solutions, by task id.
pub(crate) fn quickstart_rows() -> Vec<(Value, Option<String>)> {
    let repo = repo();
    let tasks = std::fs::read_to_string(repo.join("examples/quickstart/tasks.jsonl")).unwrap();
    let solutions: Vec<Value> =
        std::fs::read_to_string(repo.join("examples/quickstart/solutions.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    tasks
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            let solution = solutions
                .iter()
                .find(|s| s["id"] == row["id"])
                .and_then(|s| s["solution"].as_str().map(str::to_string));
            (row, solution)
        })
        .collect()
}

/// `{"image": image}`.
pub(crate) fn image(name: &str) -> Value {
    json!({ "image": name })
}
