//! A small fleet in a temporary directory: images, a dataset, plugins and a
//! local backend.

use std::path::PathBuf;
use std::sync::Arc;

use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig,
};
use sandfleet_core::{Backend, RunId, TemplateSpec};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, Plugins, RunSpec, WorkItem,
};
use sandfleet_plugin::{HostConfig, PluginHost, PluginWatcher, Registry};

pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) run_id: RunId,
    registry: Arc<Registry>,
}

impl Fixture {
    /// `images` named `img0..`, each a directory with one file.
    pub(crate) fn new(images: usize) -> Self {
        Self::with_fallback(images, false)
    }

    /// As [`Fixture::new`]; with `fallback`, the built-ins answer the
    /// plugins' faults.
    pub(crate) fn with_fallback(images: usize, fallback: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..images {
            let image = dir.path().join("images").join(format!("img{i}"));
            std::fs::create_dir_all(&image).unwrap();
            std::fs::write(image.join("README"), format!("image {i}\n")).unwrap();
        }
        let registry = Registry::new(PluginHost::new(test_host_config()).unwrap());
        registry.set_builtin_fallback(fallback);
        registry
            .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
            .unwrap();
        Fixture {
            run_id: RunId::generate("engine-test"),
            dir,
            registry,
        }
    }

    /// A new run id, as a second invocation of the CLI would have.
    pub(crate) fn next_run(&mut self) {
        self.run_id = RunId::generate("engine-test");
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub(crate) fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The last run's events (`events.jsonl`) of `kind` (`segment`,
    /// `task`, `mark`, `pool`).
    pub(crate) fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.out_dir().join("events.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let last_run = lines.iter().rposition(|e| e["e"] == "run").unwrap();
        lines[last_run..]
            .iter()
            .filter(|e| e["e"] == kind)
            .cloned()
            .collect()
    }

    /// A template of fixture image `image` carrying the run's labels.
    pub(crate) fn template_spec(&self, image: &str) -> TemplateSpec {
        TemplateSpec {
            name: image.into(),
            image: image.into(),
            cpu_milli: 1000,
            memory_mib: 256,
            disk_mib: 256,
            network: false,
            env: Default::default(),
            labels: self.run_id.labels(),
        }
    }

    /// The local backend with every fixture image mapped.
    pub(crate) fn backend(&self) -> Arc<LocalBackend> {
        self.backend_with_images(false)
    }

    /// The local backend with every fixture image mapped; `git` snapshots
    /// each image as a git repository.
    pub(crate) fn backend_with_images(&self, git: bool) -> Arc<LocalBackend> {
        self.backend_isolated(git, IsolationMode::Namespaces)
    }

    /// The local backend with `isolation = "none"`.
    pub(crate) fn plain_backend(&self) -> Arc<LocalBackend> {
        self.backend_isolated(false, IsolationMode::None)
    }

    fn backend_isolated(&self, git: bool, isolation: IsolationMode) -> Arc<LocalBackend> {
        let images = std::fs::read_dir(self.dir.path().join("images"))
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (
                    name,
                    ImageSource {
                        path,
                        git,
                        limits: LimitOverrides::default(),
                    },
                )
            })
            .collect();
        let config = LocalConfig {
            state_dir: Some(self.state_dir()),
            isolation,
            images,
            ..LocalConfig::default()
        };
        Arc::new(LocalBackend::new("local", config).unwrap())
    }

    /// Work items from generic-adapter rows.
    pub(crate) fn items(&self, rows: &[String]) -> Vec<WorkItem> {
        let adapter = self.registry.adapter("generic").unwrap();
        rows.iter()
            .map(|row| WorkItem {
                task: adapter.load_blocking(row, &[]).unwrap(),
                solution: None,
                epoch: 0,
                member: None,
            })
            .collect()
    }

    /// The built-in `generic` adapter, `least-loaded` placement and
    /// `proportional` sizing, with the reset check `reset`.
    pub(crate) fn plugins(&self, reset: Option<&str>) -> Plugins {
        self.plugins_named("least-loaded", reset)
    }

    /// The `generic` adapter and `proportional` sizing, with the placement
    /// policy `placement` and the reset check `reset`.
    pub(crate) fn plugins_named(&self, placement: &str, reset: Option<&str>) -> Plugins {
        Plugins::named(
            self.registry.clone(),
            "generic",
            placement,
            "proportional",
            reset,
        )
        .unwrap()
    }

    /// The directory `plugins/`, holding `files` (name, bytes), loaded and
    /// watched by the fixture's registry while the watcher lives.
    pub(crate) fn plugin_dir(&self, files: &[(&str, &[u8])]) -> (PathBuf, PluginWatcher) {
        let dir = self.dir.path().join("plugins");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.join(format!("{name}.wasm")), bytes).unwrap();
        }
        self.registry.load_dir(&dir).unwrap();
        let watcher = self.registry.watch(&dir).unwrap();
        (dir, watcher)
    }

    /// The registry plugins come from.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn spec(
        &self,
        backend: Arc<dyn Backend>,
        settings: FleetSettings,
        cancel: CancellationToken,
    ) -> RunSpec {
        RunSpec {
            run_id: self.run_id.clone(),
            settings,
            clusters: vec![Cluster {
                name: "local".to_string(),
                kind: "local".to_string(),
                weight: 1,
                backend,
                pace: None,
            }],
            plugins: self.plugins(None),
            out_dir: self.out_dir(),
            cancel,
            progress: Arc::new(LogProgress),
        }
    }
}

/// The plugin host's settings for these tests: compiled components cached
/// under the target directory, so the built-ins are compiled once for the
/// whole suite rather than once per test.
pub(crate) fn test_host_config() -> HostConfig {
    HostConfig {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        ..HostConfig::default()
    }
}

/// A generic-adapter row.
pub(crate) fn row(id: &str, image: &str, test: &str, timeout_s: u64) -> String {
    serde_json::json!({"id": id, "image": image, "test": test, "timeout_s": timeout_s}).to_string()
}
