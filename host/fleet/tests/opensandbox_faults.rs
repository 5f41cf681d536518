//! The OpenSandbox fault matrix: the quickstart, loaded from the shipped
//! `examples/quickstart-opensandbox.toml` with its own relative paths, run
//! by the engine through the real driver against the emulator with one
//! production fault switched on at a time. For every switch, two endings:
//!
//! - the run finishes: every task gets the local run's status, no command
//!   started twice (the emulator counts starts per `SANDFLEET_COMMAND_ID`),
//!   and no sandbox is left after teardown. A create the server failed
//!   (`port-500`) is not repeated: its task is an `infra_error` naming the
//!   500, and a rerun into the same directory finishes it;
//! - the run dies mid-way (its runtime dropped with every task in it, as a
//!   `kill -9` would leave things): every result it had written is still
//!   there, intact, no command started twice, and `reap` leaves nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_backend_opensandbox::OpenSandboxBackend;
use sandfleet_core::RunId;
use sandfleet_emulator_opensandbox::{Emulator, EmulatorConfig, Faults, images_from_fleet};
use sandfleet_engine::Plugins;
use sandfleet_engine::{CancellationToken, Cluster, LogProgress, RunSpec, WorkItem};
use sandfleet_fleet::setup::{self, Connections};
use sandfleet_fleet::{BackendConfig, FleetConfig};
use sandfleet_test_support::quickstart::{expected_statuses, repo, results};

/// How a switch is set up: the fault text, and whether the cluster asks for
/// a server pool (`pool-max` only bites pooled creates).
struct Switch {
    faults: &'static str,
    pooled: bool,
    /// Tasks the fault may leave as `infra_error` for a rerun.
    infra_errors: usize,
    /// The client's idle expiry, when the test scales the file's 3 s down
    /// with the server's keep-alive.
    idle_timeout: Option<Duration>,
}

/// What the fleet file gives the engine, with the cluster pointed at the
/// emulator (the file reads its URL and key from the environment, which
/// tests running side by side in one process cannot share).
struct Loaded {
    config: FleetConfig,
    plugins: Plugins,
    items: Vec<WorkItem>,
}

/// Loads the shipped fleet file. Off any async runtime: plugin calls made
/// while loading use blocking I/O shims.
fn load() -> Loaded {
    let config = FleetConfig::load(&repo().join("examples/quickstart-opensandbox.toml")).unwrap();
    let plugins = setup::plugins(&config).unwrap();
    let dataset = setup::dataset(&config, &plugins.adapter).unwrap();
    let solutions = setup::solutions(config.run.solutions.as_deref()).unwrap();
    let items = setup::work_items(&config, &dataset, &solutions);
    Loaded {
        config,
        plugins,
        items,
    }
}

fn clusters(loaded: &Loaded, switch: &Switch, emulator: &Emulator) -> Vec<Cluster> {
    let connections = Connections::new(loaded.config.fleet.create_rate).unwrap();
    loaded
        .config
        .clusters
        .iter()
        .map(|cluster| {
            let BackendConfig::OpenSandbox { opensandbox } = &cluster.backend else {
                panic!("the example's clusters are OpenSandbox clusters");
            };
            let mut opensandbox = opensandbox.clone();
            if let Some(idle) = switch.idle_timeout {
                opensandbox.transport.idle_timeout = idle;
            }
            if switch.pooled {
                opensandbox.pool = Some("swe-pool".into());
            }
            let backend = OpenSandboxBackend::with_server(
                &cluster.name,
                opensandbox,
                &emulator.base_url(),
                Some(emulator.api_key().to_string()),
                connections.http(),
            )
            .unwrap();
            Cluster {
                name: cluster.name.clone(),
                kind: cluster.backend.kind().to_string(),
                weight: cluster.weight,
                backend: Arc::new(backend),
                pace: connections.pace(),
            }
        })
        .collect()
}

fn spec(
    loaded: &Loaded,
    switch: &Switch,
    clusters: Vec<Cluster>,
    run_id: &RunId,
    out: &Path,
) -> RunSpec {
    let mut settings = loaded.config.fleet.clone();
    // A server pool's sandboxes keep the pool's network: OpenSandbox takes
    // no networkPolicy with a poolRef, and the driver refuses an offline
    // template of a pooled image.
    settings.network |= switch.pooled;
    RunSpec {
        run_id: run_id.clone(),
        settings,
        clusters,
        plugins: loaded.plugins.clone(),
        out_dir: out.to_path_buf(),
        cancel: CancellationToken::new(),
        progress: Arc::new(LogProgress),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The emulator, in a runtime of its own that outlives any run's.
fn emulator(server: &tokio::runtime::Runtime, switch: &Switch) -> Emulator {
    let images = images_from_fleet(&repo().join("examples/quickstart.toml")).unwrap();
    let mut config = EmulatorConfig::new(images);
    config.faults = switch.faults.parse::<Faults>().unwrap();
    server.block_on(Emulator::start(config)).unwrap()
}

fn finishes_like_the_local_run(switch: Switch) {
    let loaded = load();
    let server = runtime();
    let emulator = emulator(&server, &switch);
    let out = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let run_id = RunId::generate(name);
        let spec = spec(
            &loaded,
            &switch,
            clusters(&loaded, &switch, &emulator),
            &run_id,
            out.path(),
        );
        runtime()
            .block_on(sandfleet_engine::run(spec, loaded.items.clone()))
            .unwrap()
    };
    let report = run("os-matrix");
    let infra: Vec<serde_json::Value> = results(out.path())
        .into_iter()
        .filter(|r| r["status"] == "infra_error")
        .collect();
    assert!(
        infra.len() <= switch.infra_errors,
        "{}: {infra:?}",
        switch.faults
    );
    if !infra.is_empty() {
        for record in &infra {
            let error = record["error"].as_str().unwrap_or_default();
            assert!(error.contains("500"), "{}: {record}", switch.faults);
        }
        run("os-matrix-rerun");
    }

    assert_eq!(
        latest_statuses(out.path()),
        expected_statuses(),
        "{}: {report:?}",
        switch.faults
    );
    let executions = emulator.executions();
    assert!(
        executions.repeated_markers().is_empty(),
        "{}: commands started twice: {:?}",
        switch.faults,
        executions.repeated_markers()
    );
    assert_eq!(
        emulator.live_sandboxes(),
        0,
        "{}: sandboxes left after teardown",
        switch.faults
    );
    server.block_on(emulator.shutdown());
}

/// Each task's last status (a rerun appends the lines it adds).
fn latest_statuses(out: &Path) -> Vec<(String, String, String)> {
    let mut latest = std::collections::BTreeMap::new();
    for (task, status, grade) in statuses_in_order(out) {
        latest.insert(task, (status, grade));
    }
    latest
        .into_iter()
        .map(|(task, (status, grade))| (task, status, grade))
        .collect()
}

fn statuses_in_order(out: &Path) -> Vec<(String, String, String)> {
    results(out)
        .iter()
        .map(|r| {
            (
                r["task_id"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
                r["grade"]["status"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect()
}

fn a_crash_loses_no_result_and_reap_leaves_nothing(switch: Switch) {
    let loaded = load();
    let server = runtime();
    let emulator = emulator(&server, &switch);
    let out = tempfile::tempdir().unwrap();
    let run_id = RunId::generate("os-matrix-crash");

    let crashing = runtime();
    let run = crashing.spawn(sandfleet_engine::run(
        spec(
            &loaded,
            &switch,
            clusters(&loaded, &switch, &emulator),
            &run_id,
            out.path(),
        ),
        loaded.items.clone(),
    ));
    // Dies once a few tasks have finished and others are in flight.
    let deadline = Instant::now() + Duration::from_secs(120);
    while results(out.path()).len() < 4 {
        assert!(
            !run.is_finished() && Instant::now() < deadline,
            "{}: the run ended or stalled before 4 results",
            switch.faults
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = std::fs::read_to_string(out.path().join("results.jsonl")).unwrap();
    crashing.shutdown_background();

    // What was written stays written, line for line, each a finished task.
    let after = std::fs::read_to_string(out.path().join("results.jsonl")).unwrap();
    assert!(after.starts_with(&before), "{}", switch.faults);
    let expected = expected_statuses();
    for line in statuses_in_order(out.path()) {
        let injected = line.1 == "infra_error" && switch.infra_errors > 0;
        assert!(
            injected || expected.contains(&line),
            "{}: {line:?} is not the local run's",
            switch.faults
        );
    }

    let reaper = runtime();
    let clusters = clusters(&loaded, &switch, &emulator);
    reaper
        .block_on(sandfleet_engine::reap(&clusters, &run_id))
        .unwrap();
    let remaining = reaper.block_on(clusters[0].backend.list_owned(&run_id));
    assert!(
        remaining.unwrap().sandboxes.is_empty(),
        "{}: the run's sandboxes survived the reap",
        switch.faults
    );
    assert_eq!(emulator.live_sandboxes(), 0, "{}", switch.faults);
    let executions = emulator.executions();
    assert!(
        executions.repeated_markers().is_empty(),
        "{}: {:?}",
        switch.faults,
        executions.repeated_markers()
    );
    server.block_on(emulator.shutdown());
}

/// One test per switch and ending, so a failure names its fault.
macro_rules! matrix {
    ($($name:ident: $faults:literal, pooled = $pooled:literal, infra_errors = $infra:literal, idle_ms = $idle:expr;)*) => {
        mod finished {
            $(
                #[test]
                fn $name() {
                    super::finishes_like_the_local_run(super::Switch {
                        faults: $faults,
                        pooled: $pooled,
                        infra_errors: $infra,
                        idle_timeout: $idle.map(std::time::Duration::from_millis),
                    });
                }
            )*
        }
        mod crashed {
            $(
                #[test]
                fn $name() {
                    super::a_crash_loses_no_result_and_reap_leaves_nothing(super::Switch {
                        faults: $faults,
                        pooled: $pooled,
                        infra_errors: $infra,
                        idle_timeout: $idle.map(std::time::Duration::from_millis),
                    });
                }
            )*
        }
    };
}

matrix! {
    // The server drops sockets idle 1 s; the client's pool lets them go
    // after 0.5 s (the file's 3 s against uvicorn's old 5 s, scaled down so
    // the quickstart's idle gaps cross it: with the pool's idle expiry at
    // 30 s this test fails).
    keepalive: "keepalive=1s", pooled = false, infra_errors = 0, idle_ms = Some(500);
    execd_late: "execd-late=500", pooled = false, infra_errors = 0, idle_ms = None;
    grace_tail: "grace-tail", pooled = false, infra_errors = 0, idle_ms = None;
    cut_tail: "cut-tail", pooled = false, infra_errors = 0, idle_ms = None;
    pool_max: "pool-max=2", pooled = true, infra_errors = 0, idle_ms = None;
    flaky: "flaky=0.1,seed=7", pooled = false, infra_errors = 0, idle_ms = None;
    port_500: "port-500", pooled = false, infra_errors = 1, idle_ms = None;
}

/// A throttled release is the engine's to retry, and only the engine's: the
/// driver sends each one once and the transport adds no tries of its own,
/// so the server sees each release once plus the retries the run's budget
/// paid for — and the run's closing reap (nobody else's to retry) as often
/// as the transport's attempts.
#[test]
fn a_throttled_release_is_sent_as_often_as_the_run_budget_pays_for() {
    const BUDGET: u32 = 3;
    let switch = Switch {
        faults: "throttle-deletes",
        pooled: false,
        infra_errors: 0,
        idle_timeout: None,
    };
    let mut loaded = load();
    loaded.config.fleet.retry_budget = BUDGET;
    loaded.items.truncate(2);
    let server = runtime();
    let emulator = emulator(&server, &switch);
    let out = tempfile::tempdir().unwrap();
    let run_id = RunId::generate("os-throttled");
    let spec = spec(
        &loaded,
        &switch,
        clusters(&loaded, &switch, &emulator),
        &run_id,
        out.path(),
    );
    // The sandboxes outlive the run: its closing reap says so, having
    // tried every one.
    let error = runtime()
        .block_on(sandfleet_engine::run(spec, loaded.items.clone()))
        .unwrap_err();
    assert!(error.to_string().contains("429"), "{error}");
    assert!(
        error.to_string().contains("2 of the 2 objects of run")
            && error.to_string().contains("(2 sandboxes, 0 snapshots)"),
        "{error}"
    );

    let executions = emulator.executions();
    let created = executions.sandboxes_created;
    assert_eq!(created, 2, "one sandbox per task");
    let attempts = u64::from(sandfleet_transport::TransportConfig::default().attempts);
    assert_eq!(
        executions.delete_requests,
        created + u64::from(BUDGET) + created * attempts,
        "each release once, the budget's retries, and the closing reap's attempts at every sandbox"
    );
    assert_eq!(executions.sandboxes_deleted, 0);
    server.block_on(emulator.shutdown());
}
