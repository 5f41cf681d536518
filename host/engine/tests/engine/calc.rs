//! A one-file repository (`calc`, whose `add` is broken) as a SWE-bench
//! image on the local backend, with the real swebench component (rows with
//! their own eval scripts, as 5.x rows have them): what the grading and
//! evaluation tests share.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sandfleet_backend_local::LocalBackend;
use sandfleet_core::{Backend, RunId};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, Plugins, RunReport, RunSpec,
    TaskRecord, WorkItem,
};
use sandfleet_plugin::adapter::Setting;
use sandfleet_plugin::{HostConfig, KindLimits, Limits, PluginHost, Registry};

use sandfleet_test_support::calc;
pub(crate) use sandfleet_test_support::calc::{FIX, RUN_TEST};

pub(crate) struct Harness {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) registry: Arc<Registry>,
    pub(crate) backend: Arc<LocalBackend>,
}

impl Harness {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = sandfleet_test_support::calc::local_config(dir.path());
        let registry = Registry::new(
            PluginHost::new(HostConfig {
                limits: KindLimits::uniform(Limits {
                    deadline: Duration::from_secs(30),
                    ..Limits::default()
                }),
                ..crate::fixture::test_host_config()
            })
            .unwrap(),
        );
        registry
            .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
            .unwrap();
        Harness {
            backend: Arc::new(LocalBackend::new("local", config).unwrap()),
            registry,
            dir,
        }
    }

    pub(crate) fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// A task per `(id, test command)`, each with the fix as its solution.
    pub(crate) fn items(&self, settings: &[(&str, &str)], tasks: &[(&str, &str)]) -> Vec<WorkItem> {
        let adapter = self.registry.adapter("swebench").unwrap();
        let settings: Vec<Setting> = settings
            .iter()
            .map(|(key, value)| Setting {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect();
        tasks
            .iter()
            .map(|(id, test)| {
                let row = calc::row(id, test);
                WorkItem {
                    task: adapter.load_blocking(&row.to_string(), &settings).unwrap(),
                    solution: Some(FIX.to_owned()),
                    epoch: 0,
                    member: None,
                }
            })
            .collect()
    }

    /// A run of `items`, one task at a time, to its end.
    pub(crate) async fn run(&self, items: Vec<WorkItem>) -> RunReport {
        let run_id = RunId::generate("grading-test");
        sandfleet_engine::run(self.spec(run_id, FleetSettings::default()), items)
            .await
            .unwrap()
    }

    /// A run's spec: `settings`, one task at a time.
    pub(crate) fn spec(&self, run_id: RunId, settings: FleetSettings) -> RunSpec {
        RunSpec {
            run_id,
            settings: FleetSettings {
                strategy: sandfleet_engine::Strategy::None,
                ..settings
            },
            clusters: self.clusters(),
            plugins: self.plugins(),
            out_dir: self.out_dir(),
            cancel: CancellationToken::new(),
            progress: Arc::new(LogProgress),
        }
    }

    /// The one local cluster.
    pub(crate) fn clusters(&self) -> Vec<Cluster> {
        vec![Cluster {
            name: "local".into(),
            kind: "local".into(),
            weight: 1,
            backend: self.backend.clone() as Arc<dyn Backend>,
            pace: None,
        }]
    }

    /// The swebench adapter with the built-in policies.
    pub(crate) fn plugins(&self) -> Plugins {
        Plugins::named(
            self.registry.clone(),
            "swebench",
            "least-loaded",
            "proportional",
            None,
        )
        .unwrap()
    }

    pub(crate) fn results(&self) -> Vec<TaskRecord> {
        std::fs::read_to_string(self.out_dir().join("results.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}
