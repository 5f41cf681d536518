//! What `run`, `plan` and `preflight` share: plugins, the dataset, the
//! solutions and the clusters, each checked before anything is created.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use sandfleet_backend_k8s::{K8sBackend, K8sClients};
use sandfleet_backend_local::LocalBackend;
use sandfleet_backend_opensandbox::OpenSandboxBackend;
use sandfleet_engine::{CallObserver, Cluster, CreatePace, Observed, Plugins, WorkItem};
use sandfleet_plugin::adapter::{Setting, TaskAdapter};
use sandfleet_plugin::{CallErrorKind, HostConfig, PluginHost, Registry};
use sandfleet_transport::Clients;

use crate::config::{BackendConfig, FleetConfig, PluginFallback};

/// Loads the built-in plugins and the plugin directory, watches the
/// directory (every mode reloads: `run`, `serve` and the daemon's batch
/// runs), and looks up the plugins the configuration names, each with the
/// built-in that answers its faults when `[plugins] fallback = "builtin"`.
pub fn plugins(config: &FleetConfig) -> anyhow::Result<Plugins> {
    let host = PluginHost::new(HostConfig {
        limits: config.plugins.limits.resolve(),
        fuel: config.plugins.fuel,
        cache_dir: config
            .plugins
            .cache_dir
            .clone()
            .or_else(crate::default_cache_dir),
        cache_budget: config.plugins.cache_budget_mib << 20,
        ..HostConfig::default()
    })?;
    let registry = Registry::new(host);
    registry.set_builtin_fallback(config.plugins.fallback == PluginFallback::Builtin);
    if let Err(errors) =
        registry.add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
    {
        bail!("built-in plugins failed to load:\n{}", lines(&errors));
    }
    if let Some(dir) = &config.plugins.dir
        && let Err(errors) = registry.load_dir(dir)
    {
        bail!(
            "plugins in {} failed to load:\n{}",
            dir.display(),
            lines(&errors)
        );
    }
    let named = |role: &str, name: &str| {
        format!("{}: [plugins] {role} = \"{name}\"", config.path.display())
    };
    Ok(Plugins {
        adapter: registry.adapter(&config.adapter.name).with_context(|| {
            format!(
                "{}: [adapter] name = \"{}\"",
                config.path.display(),
                config.adapter.name
            )
        })?,
        placement: registry
            .placement(&config.plugins.placement)
            .with_context(|| named("placement", &config.plugins.placement))?,
        sizing: registry
            .sizing(&config.plugins.sizing)
            .with_context(|| named("sizing", &config.plugins.sizing))?,
        reset: match &config.plugins.reset {
            Some(name) => Some(
                registry
                    .reset_check(name)
                    .with_context(|| named("reset", name))?,
            ),
            None => None,
        },
        watcher: match &config.plugins.dir {
            Some(dir) => Some(Arc::new(registry.watch(dir)?)),
            None => None,
        },
        registry,
    })
}

fn lines(errors: &[impl std::fmt::Display]) -> String {
    errors
        .iter()
        .map(|e| format!("  {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks settings against the keys the adapter declares: unknown keys and
/// missing required ones are errors naming `origin`.
pub fn check_settings(
    adapter: &TaskAdapter,
    settings: &[Setting],
    origin: &str,
) -> anyhow::Result<()> {
    let info = adapter.describe_blocking()?;
    let known: Vec<&str> = info.settings.iter().map(|s| s.key.as_str()).collect();
    if let Some(unknown) = settings.iter().find(|s| !known.contains(&s.key.as_str())) {
        bail!(
            "{origin}: adapter `{}` has no setting `{}` (its settings: {})",
            info.name,
            unknown.key,
            known.join(", ")
        );
    }
    if let Some(missing) = info
        .settings
        .iter()
        .find(|s| s.default_value.is_none() && !settings.iter().any(|given| given.key == s.key))
    {
        bail!(
            "{origin}: adapter `{}` needs the setting `{}`: {}",
            info.name,
            missing.key,
            missing.summary
        );
    }
    Ok(())
}

/// The adapter settings from the configuration.
pub fn adapter_settings(config: &FleetConfig) -> Vec<Setting> {
    config
        .adapter
        .settings
        .iter()
        .map(|(key, value)| Setting {
            key: key.clone(),
            value: value.0.clone(),
        })
        .collect()
}

/// Loads every dataset row through the adapter. All bad rows are reported
/// together, each as `file:line: message`.
pub fn tasks(
    config: &FleetConfig,
    adapter: &TaskAdapter,
) -> anyhow::Result<Vec<sandfleet_plugin::adapter::Task>> {
    dataset(config, adapter).map(|dataset| dataset.tasks)
}

/// The dataset's tasks, and the group sizes its rows set for themselves.
pub struct Dataset {
    /// The tasks, in row order.
    pub tasks: Vec<sandfleet_plugin::adapter::Task>,
    /// The `group_size` of each row that gives one, by task id.
    pub group_sizes: HashMap<String, u32>,
}

impl Dataset {
    /// Rollouts of `task` per epoch: its row's `group_size`, else the
    /// fleet's.
    pub fn group_size(&self, config: &FleetConfig, task: &str) -> u32 {
        self.group_sizes
            .get(task)
            .copied()
            .unwrap_or(config.fleet.group_size)
    }
}

/// Loads the dataset as [`tasks`] does, with each row's own `group_size`.
///
/// # Errors
///
/// As [`tasks`], and for a `group_size` that is not a positive whole
/// number, naming the file and line.
pub fn dataset(config: &FleetConfig, adapter: &TaskAdapter) -> anyhow::Result<Dataset> {
    let path = &config.run.dataset;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the dataset", path.display()))?;
    let settings = adapter_settings(config);
    check_settings(
        adapter,
        &settings,
        &format!("{}: [adapter] settings", config.path.display()),
    )?;
    let mut tasks = Vec::new();
    let mut group_sizes = HashMap::new();
    let mut errors = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, row) in text.lines().enumerate() {
        let line = index + 1;
        if row.trim().is_empty() {
            continue;
        }
        let (row, group_size) = match host_fields(row) {
            Ok(split) => split,
            Err(message) => {
                errors.push(format!("{}:{line}: {message}", path.display()));
                continue;
            }
        };
        match adapter.load_blocking(&row, &settings) {
            Ok(task) => {
                if let Some(first) = seen.insert(task.id.clone(), line) {
                    errors.push(format!(
                        "{}:{line}: task id `{}` is already used on line {first}",
                        path.display(),
                        task.id
                    ));
                }
                if let Some(size) = group_size {
                    group_sizes.insert(task.id.clone(), size);
                }
                tasks.push(task);
            }
            Err(e) => {
                // The adapter's own message names the field; faults say more.
                let message = match &e.kind {
                    CallErrorKind::Declined { message, .. } => message.clone(),
                    _ => e.to_string(),
                };
                errors.push(format!("{}:{line}: {message}", path.display()));
            }
        }
    }
    if !errors.is_empty() {
        const SHOWN: usize = 20;
        let more = errors.len().saturating_sub(SHOWN);
        errors.truncate(SHOWN);
        if more > 0 {
            errors.push(format!("... and {more} more"));
        }
        bail!(
            "the dataset has bad rows; nothing was started:\n  {}",
            errors.join("\n  ")
        );
    }
    if tasks.is_empty() {
        bail!("{}: the dataset has no rows", path.display());
    }
    Ok(Dataset { tasks, group_sizes })
}

/// A row's fields for the host rather than the adapter: the row without
/// them, which the adapter loads, and the row's `group_size`.
fn host_fields(row: &str) -> Result<(Cow<'_, str>, Option<u32>), String> {
    const GROUP_SIZE: &str = "group_size";
    if !row.contains(GROUP_SIZE) {
        return Ok((Cow::Borrowed(row), None));
    }
    let mut value: serde_json::Value = match serde_json::from_str(row) {
        Ok(value) => value,
        // The adapter names what is wrong with the row.
        Err(_) => return Ok((Cow::Borrowed(row), None)),
    };
    let Some(size) = value.as_object_mut().and_then(|row| row.remove(GROUP_SIZE)) else {
        return Ok((Cow::Borrowed(row), None));
    };
    let size = size
        .as_u64()
        .and_then(|size| u32::try_from(size).ok())
        .filter(|&size| size > 0)
        .ok_or_else(|| format!("`{GROUP_SIZE}` must be a positive whole number, not {size}"))?;
    Ok((Cow::Owned(value.to_string()), Some(size)))
}

/// Solutions by task id, from JSONL rows with an id field (`id`, `task_id`
/// or `instance_id`) and a solution field (`solution`, `model_patch` or
/// `patch`; `null` means no solution).
pub fn solutions(path: Option<&Path>) -> anyhow::Result<HashMap<String, Option<String>>> {
    let Some(path) = path else {
        return Ok(HashMap::new());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the solutions", path.display()))?;
    let mut solutions = HashMap::new();
    for (index, row) in text.lines().enumerate() {
        if row.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), index + 1);
        let value: serde_json::Value =
            serde_json::from_str(row).with_context(|| format!("{}: not valid JSON", at()))?;
        let id = ["id", "task_id", "instance_id"]
            .iter()
            .find_map(|key| value.get(key).and_then(|v| v.as_str()))
            .with_context(|| format!("{}: no `id`, `task_id` or `instance_id` string", at()))?;
        let solution = ["solution", "model_patch", "patch"]
            .iter()
            .find_map(|key| value.get(key))
            .with_context(|| format!("{}: no `solution`, `model_patch` or `patch` field", at()))?;
        let solution = match solution {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            _ => bail!("{}: the solution must be a string or null", at()),
        };
        solutions.insert(id.to_string(), solution);
    }
    Ok(solutions)
}

/// The work of a run: every task in every epoch, with its solution, as a
/// group of its row's `group_size` (else `[fleet] group_size`) rollouts.
pub fn work_items(
    config: &FleetConfig,
    dataset: &Dataset,
    solutions: &HashMap<String, Option<String>>,
) -> Vec<WorkItem> {
    (0..config.run.epochs)
        .flat_map(|epoch| {
            dataset.tasks.iter().flat_map(move |task| {
                let size = dataset.group_size(config, &task.id);
                WorkItem {
                    task: task.clone(),
                    solution: solutions.get(&task.id).cloned().flatten(),
                    epoch,
                    member: None,
                }
                .group(size)
            })
        })
        .collect()
}

/// Every cluster's capacity, each failure naming its cluster.
///
/// # Errors
///
/// When a cluster cannot say.
pub async fn capacity(clusters: &[Cluster]) -> anyhow::Result<Vec<sandfleet_core::Capacity>> {
    let mut capacity = Vec::with_capacity(clusters.len());
    for cluster in clusters {
        capacity.push(
            cluster
                .backend
                .capacity()
                .await
                .with_context(|| format!("cluster `{}`: cannot read its capacity", cluster.name))?,
        );
    }
    Ok(capacity)
}

/// The plan a run of `dataset` on `clusters` of `capacity` follows, as the
/// engine makes it: a group's members each need a sandbox.
///
/// # Errors
///
/// When the sizing policy fails or its plan does not fit.
pub async fn plan(
    config: &FleetConfig,
    plugins: &Plugins,
    dataset: &Dataset,
    clusters: &[Cluster],
    capacity: &[sandfleet_core::Capacity],
) -> anyhow::Result<sandfleet_engine::plan::Plan> {
    use sandfleet_engine::plan;
    let (images, counts) = plan::image_table(dataset.tasks.iter().flat_map(|t| {
        let members = dataset.group_size(config, &t.id) as usize;
        std::iter::repeat_n(t.image.as_str(), members)
    }));
    Ok(plan::plan(
        &plugins.sizing,
        &config.fleet,
        capacity,
        images,
        counts,
        plan::forking_clusters(clusters),
    )
    .await?)
}

/// Checks that some cluster can make every image the tasks need.
pub fn check_images(
    config: &FleetConfig,
    clusters: &[Cluster],
    tasks: &[sandfleet_plugin::adapter::Task],
) -> anyhow::Result<()> {
    sandfleet_engine::check_images(
        clusters,
        tasks
            .iter()
            .map(|t| (config.fleet.image_rewrite.apply(&t.image), t.id.clone())),
    )
    .map_err(|error| {
        let local: Vec<String> = config
            .clusters
            .iter()
            .filter(|c| matches!(c.backend, BackendConfig::Local { .. }))
            .map(|c| format!("[clusters.{}.images]", c.name))
            .collect();
        let hint = if local.is_empty() {
            String::new()
        } else {
            format!(
                "\nhint: a local cluster makes only the images mapped under {}",
                local.join(" or ")
            )
        };
        anyhow::anyhow!("{}: {error}{hint}", config.path.display())
    })
}

/// What the clusters of a process share: HTTP clients, one per distinct
/// transport configuration, and the host-wide pace of sandbox creation
/// they all obey; Kubernetes clients, one per kubeconfig and context.
/// `sandfleet run` makes one per run (one run per process); a daemon makes
/// one at start and builds every run's clusters with it, so the pace holds
/// across runs.
pub struct Connections {
    http: Clients,
    kube: K8sClients,
    pace: Option<Arc<CreatePace>>,
    observer: Option<Arc<dyn CallObserver>>,
}

impl Connections {
    /// Connections whose creates, over every cluster and run built with
    /// them, stay under `creates_per_second` (unpaced when `None`).
    ///
    /// # Errors
    ///
    /// When the rate is not a positive number.
    pub fn new(creates_per_second: Option<f64>) -> anyhow::Result<Self> {
        let pace = creates_per_second
            .map(|rate| CreatePace::new(rate).map(Arc::new))
            .transpose()
            .map_err(anyhow::Error::msg)?;
        Ok(Connections {
            http: Clients::new(),
            kube: K8sClients::new(),
            pace,
            observer: None,
        })
    }

    /// These connections, with every call of the clusters built with them
    /// reported to `observer` (the daemon's metrics).
    #[must_use]
    pub fn observed_by(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The HTTP clients.
    pub fn http(&self) -> &Clients {
        &self.http
    }

    /// The Kubernetes clients.
    pub fn kube(&self) -> &K8sClients {
        &self.kube
    }

    /// The host's pace of sandbox creation, for every cluster built with
    /// these connections.
    pub fn pace(&self) -> Option<Arc<CreatePace>> {
        self.pace.clone()
    }
}

/// The configured clusters' drivers, creating at most `[fleet]
/// create_rate` sandboxes per second between them.
pub fn clusters(config: &FleetConfig) -> anyhow::Result<Vec<Cluster>> {
    clusters_with(config, &Connections::new(config.fleet.create_rate)?)
}

/// The configured clusters' drivers, sharing `connections` (and its pace of
/// creation) with every other run built with them.
pub fn clusters_with(
    config: &FleetConfig,
    connections: &Connections,
) -> anyhow::Result<Vec<Cluster>> {
    config
        .clusters
        .iter()
        .map(|cluster| {
            let backend: Arc<dyn sandfleet_core::Backend> = match &cluster.backend {
                BackendConfig::Local { local } => {
                    Arc::new(LocalBackend::new(&cluster.name, local.clone())?)
                }
                BackendConfig::OpenSandbox { opensandbox } => Arc::new(
                    OpenSandboxBackend::new(&cluster.name, opensandbox.clone(), connections.http())
                        .with_context(|| {
                            format!("{}: cluster `{}`", config.path.display(), cluster.name)
                        })?,
                ),
                BackendConfig::K8s { k8s } => {
                    let backend = K8sBackend::new(&cluster.name, k8s.clone(), connections.kube())
                        .with_context(|| {
                        format!("{}: cluster `{}`", config.path.display(), cluster.name)
                    })?;
                    Arc::new(if config.fleet.prepull {
                        backend.pre_pulling(config.fleet.pool_ready_timeout)
                    } else {
                        backend
                    })
                }
            };
            Ok(Cluster {
                name: cluster.name.clone(),
                kind: cluster.backend.kind().to_string(),
                weight: cluster.weight,
                backend: Arc::new(Observed::new(backend, connections.observer.clone())),
                pace: connections.pace(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn every_run_built_from_one_set_of_connections_shares_one_pace() {
        let quickstart =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
        let config = FleetConfig::load(&quickstart).unwrap();
        let connections = Connections::new(Some(20.0)).unwrap();
        let first_run = clusters_with(&config, &connections).unwrap();
        let second_run = clusters_with(&config, &connections).unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let started = Instant::now();
        runtime.block_on(async {
            for i in 0..6 {
                let run = if i % 2 == 0 { &first_run } else { &second_run };
                run[0].pace.as_ref().unwrap().admit(1).await;
            }
        });
        // 20 per second between both runs: the sixth waits five periods.
        assert!(
            started.elapsed() >= Duration::from_millis(240),
            "{:?}",
            started.elapsed()
        );
        let unpaced = Connections::new(None).unwrap();
        assert!(clusters_with(&config, &unpaced).unwrap()[0].pace.is_none());
        let error = Connections::new(Some(0.0)).err().unwrap().to_string();
        assert_eq!(error, "a create rate must be positive, not 0");
    }

    #[test]
    fn a_row_sets_its_own_group_size_over_the_fleets_and_a_bad_one_names_its_line() {
        let quickstart =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
        let mut config = FleetConfig::load(&quickstart).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rows = dir.path().join("tasks.jsonl");
        std::fs::write(
            &rows,
            concat!(
                r#"{"id": "a", "image": "calc", "test": "true"}"#,
                "\n",
                r#"{"id": "b", "image": "calc", "test": "true", "group_size": 3}"#,
                "\n",
                r#"{"id": "c", "group_size": 1, "image": "calc", "test": "true"}"#,
                "\n",
            ),
        )
        .unwrap();
        config.run.dataset = rows.clone();
        config.run.epochs = 2;
        config.fleet.group_size = 2;
        let plugins = plugins(&config).unwrap();
        // The generic adapter refuses fields it does not know: the host
        // takes its own before the adapter sees the row.
        let dataset = dataset(&config, &plugins.adapter).unwrap();
        let items = work_items(&config, &dataset, &HashMap::new());

        let members = |task: &str, epoch: u32| -> Vec<Option<(u32, u32)>> {
            items
                .iter()
                .filter(|item| item.task.id == task && item.epoch == epoch)
                .map(|item| item.member.map(|m| (m.index, m.size)))
                .collect()
        };
        for epoch in 0..2 {
            assert_eq!(members("a", epoch), [Some((0, 2)), Some((1, 2))]);
            assert_eq!(
                members("b", epoch),
                [Some((0, 3)), Some((1, 3)), Some((2, 3))]
            );
            assert_eq!(members("c", epoch), [None]);
        }
        assert_eq!(items.len(), 2 * (2 + 3 + 1));

        std::fs::write(
            &rows,
            concat!(
                r#"{"id": "a", "image": "calc", "test": "true"}"#,
                "\n",
                r#"{"id": "b", "image": "calc", "test": "true", "group_size": 0}"#,
                "\n",
                r#"{"id": "c", "image": "calc", "test": "true", "group_size": "8"}"#,
                "\n",
            ),
        )
        .unwrap();
        let error = format!(
            "{:#}",
            super::dataset(&config, &plugins.adapter).err().unwrap()
        );
        let at = rows.display();
        assert!(
            error.contains(&format!(
                "{at}:2: `group_size` must be a positive whole number, not 0"
            )) && error.contains(&format!(
                "{at}:3: `group_size` must be a positive whole number, not \"8\""
            )),
            "{error}"
        );
    }
}
