//! The fleet file (`fleet.toml`): parsing, defaults and validation.
//!
//! Every table rejects unknown keys. Errors name the file, line and column
//! and the key. Relative paths are resolved against the file's directory.
//! Secrets never appear inline: a setting that needs one names the
//! environment variable holding it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandfleet_backend_k8s::K8sConfig;
use sandfleet_backend_local::LocalConfig;
use sandfleet_backend_opensandbox::OpenSandboxConfig;
use sandfleet_engine::settings_de::{duration, positive};
use sandfleet_engine::{FleetSettings, ImageRewrite, PrepareHooks};
use sandfleet_plugin::{Kind, KindLimits, Limits};
use serde::{Deserialize, Deserializer};

use crate::api::ApiConfig;
use crate::prepare::PrepareConfig;
use crate::shared::SharedPoolConfig;

/// A parsed, validated fleet file.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// `[run]`: the dataset, solutions, output and epochs.
    pub run: RunConfig,
    /// `[adapter]`: the task adapter and its settings.
    pub adapter: AdapterConfig,
    /// `[fleet]`: strategy, concurrency, pools, limits.
    pub fleet: FleetSettings,
    /// `[plugins]`: which plugins serve each role, and their limits.
    pub plugins: PluginsConfig,
    /// `[[clusters]]`, in file order (placement indices).
    pub clusters: Vec<ClusterConfig>,
    /// `[api]`: the daemon's address, token, limits and state.
    pub api: ApiConfig,
    /// `[[shared_pools]]`, in file order.
    pub shared_pools: Vec<SharedPoolConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[run]`: what to run and where its results go.
pub struct RunConfig {
    /// Prefix of generated run ids.
    #[serde(default = "default_run_name")]
    pub name: String,
    /// The dataset: JSONL, one row per task.
    pub dataset: PathBuf,
    /// Solutions to evaluate: JSONL rows with an id (`id`, `task_id` or
    /// `instance_id`) and a solution (`solution`, `model_patch` or `patch`).
    #[serde(default)]
    pub solutions: Option<PathBuf>,
    /// Output directory, unless `--out` says otherwise.
    #[serde(default)]
    pub out: Option<PathBuf>,
    /// Passes over the dataset.
    #[serde(default = "one", deserialize_with = "positive")]
    pub epochs: u32,
    /// Image prefixes mapped to a mirror (`"docker.io/" =
    /// "mirror.example/hub/"`), for every backend; results keep the task's
    /// own image.
    #[serde(default)]
    pub image_rewrite: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[adapter]`: the task adapter plugin and its settings.
pub struct AdapterConfig {
    /// The task adapter plugin.
    pub name: String,
    /// Settings handed to the adapter (see `sandfleet plugin check`).
    #[serde(default)]
    pub settings: BTreeMap<String, SettingValue>,
    /// `[adapter.prepare]`: the prepare hook of every image of the
    /// adapter's tasks that has no `[prepare."<image>"]` of its own.
    #[serde(default)]
    pub prepare: Option<PrepareConfig>,
}

/// An adapter setting: written as a string, number or boolean, handed over as text.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingValue(
    /// The value as text.
    pub String,
);

impl<'de> Deserialize<'de> for SettingValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(deserializer)? {
            toml::Value::String(s) => Ok(SettingValue(s)),
            toml::Value::Integer(n) => Ok(SettingValue(n.to_string())),
            toml::Value::Float(x) => Ok(SettingValue(x.to_string())),
            toml::Value::Boolean(b) => Ok(SettingValue(b.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "a setting must be a string, number or boolean, not {}",
                other.type_str()
            ))),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[plugins]`: the plugin directory, the plugin serving each role, and limits.
pub struct PluginsConfig {
    /// A directory of `<name>.wasm` plugins overriding the built-ins; the
    /// daemon reloads them when they change.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    #[serde(default = "default_placement")]
    /// The placement policy.
    pub placement: String,
    #[serde(default = "default_sizing")]
    /// The sizing policy.
    pub sizing: String,
    /// The reset check for recycling.
    #[serde(default)]
    pub reset: Option<String>,
    /// Where compiled plugins are cached (default: the user's cache dir).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// How many MiB the cache may hold; the least recently used compiled
    /// plugins go first.
    #[serde(default = "default_cache_budget_mib")]
    pub cache_budget_mib: u64,
    /// Meter fuel (then `fuel` limits apply).
    #[serde(default)]
    pub fuel: bool,
    /// Limits per plugin kind.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// What answers a call that faults, in every mode (`run`, `serve`,
    /// the daemon's batch runs and leases).
    #[serde(default)]
    pub fallback: PluginFallback,
}

/// What answers a plugin call that faults (a trap, an overrun deadline or
/// memory cap, an answer that breaks the contract): `[plugins] fallback`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginFallback {
    /// Nothing: the call fails (a task is an `infra_error`, a placement or
    /// sizing fault stops a run).
    #[default]
    None,
    /// The built-in plugin of the same name, or of the same kind
    /// (`least-loaded`, `proportional`, `git-restore`; an adapter only of
    /// its own name), from the fault on, until a new version of the plugin
    /// loads.
    Builtin,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[plugins.limits]`: deadline, memory and fuel per plugin kind.
pub struct LimitsConfig {
    #[serde(default)]
    placement: KindLimitConfig,
    #[serde(default)]
    sizing: KindLimitConfig,
    #[serde(default)]
    reset: KindLimitConfig,
    #[serde(default)]
    adapter: KindLimitConfig,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindLimitConfig {
    #[serde(default, deserialize_with = "opt_duration")]
    deadline: Option<Duration>,
    #[serde(default)]
    memory_mib: Option<NonZeroU32>,
    #[serde(default)]
    fuel: Option<u64>,
}

/// Adapters grade whole test logs, which can take far longer than a
/// placement decision.
const DEFAULT_ADAPTER_DEADLINE: Duration = Duration::from_secs(5);

impl LimitsConfig {
    /// The limits per kind: the configured ones over the defaults.
    pub fn resolve(&self) -> KindLimits {
        let mut limits = KindLimits::default();
        limits.adapter.deadline = DEFAULT_ADAPTER_DEADLINE;
        for (kind, config) in [
            (Kind::Placement, self.placement),
            (Kind::Sizing, self.sizing),
            (Kind::Reset, self.reset),
            (Kind::Adapter, self.adapter),
        ] {
            let base = limits.of(kind);
            limits.set(
                kind,
                Limits {
                    deadline: config.deadline.unwrap_or(base.deadline),
                    memory_cap: config
                        .memory_mib
                        .map_or(base.memory_cap, |mib| u64::from(mib.get()) << 20),
                    fuel: config.fuel.or(base.fuel),
                },
            );
        }
        limits
    }
}

#[derive(Debug, Clone)]
/// One `[[clusters]]` entry.
pub struct ClusterConfig {
    /// Its name, unique in the file.
    pub name: String,
    /// Its weight for weighted placement (default 1).
    pub weight: u32,
    /// Its backend and the backend's table.
    pub backend: BackendConfig,
}

/// A cluster's backend, chosen by its `backend` key, and that backend's own
/// table (`[clusters.<backend>]`, every key defaulted). A new kind of
/// backend is a new variant with its table type.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "backend", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// The embedded local backend.
    Local {
        #[serde(default)]
        /// `[clusters.local]`.
        local: LocalConfig,
    },
    /// An OpenSandbox server (its lifecycle API and execd).
    OpenSandbox {
        #[serde(default)]
        /// `[clusters.opensandbox]`.
        opensandbox: OpenSandboxConfig,
    },
    /// A Kubernetes cluster running agent-sandbox.
    K8s {
        #[serde(default)]
        /// `[clusters.k8s]`.
        k8s: K8sConfig,
    },
}

impl BackendConfig {
    /// The `backend` key's value.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::Local { .. } => "local",
            BackendConfig::OpenSandbox { .. } => "opensandbox",
            BackendConfig::K8s { .. } => "k8s",
        }
    }

    /// Makes relative paths in the backend's table relative to `base`.
    fn resolve_paths(&mut self, base: &Path) {
        match self {
            BackendConfig::Local { local } => local.resolve_paths(base),
            // Its paths are URLs and environment variables.
            BackendConfig::OpenSandbox { .. } => {}
            BackendConfig::K8s { k8s } => k8s.resolve_paths(base),
        }
    }
}

#[derive(Deserialize)]
struct RawCluster {
    name: String,
    #[serde(default = "one", deserialize_with = "positive")]
    weight: u32,
    #[serde(flatten)]
    backend: BackendConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    run: RunConfig,
    adapter: AdapterConfig,
    #[serde(default)]
    fleet: FleetSettings,
    #[serde(default)]
    plugins: Option<PluginsConfig>,
    #[serde(default)]
    clusters: Vec<toml::Spanned<RawCluster>>,
    #[serde(default)]
    api: ApiConfig,
    #[serde(default)]
    prepare: BTreeMap<String, PrepareConfig>,
    #[serde(default)]
    shared_pools: Vec<toml::Spanned<SharedPoolConfig>>,
}

/// A fleet file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    /// The file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    #[error("{location}: {message}")]
    /// The file says something unusable.
    Invalid {
        /// `file:line:column`, or the file alone.
        location: String,
        /// What is wrong.
        message: String,
    },
}

impl FleetConfig {
    /// Reads and validates the fleet file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text`, read from `path` (which names errors and
    /// anchors relative paths).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            location: location(path, text, e.span()),
            message: e.message().trim_end().to_string(),
        })?;
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base = absolute.parent().unwrap_or(Path::new("/")).to_path_buf();
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };

        let mut run = raw.run;
        run.dataset = resolve(&run.dataset);
        run.solutions = run.solutions.as_deref().map(resolve);
        run.out = run.out.as_deref().map(resolve);

        let mut plugins = raw.plugins.unwrap_or_else(|| PluginsConfig {
            dir: None,
            placement: default_placement(),
            sizing: default_sizing(),
            reset: None,
            cache_dir: None,
            cache_budget_mib: default_cache_budget_mib(),
            fuel: false,
            limits: LimitsConfig::default(),
            fallback: PluginFallback::None,
        });
        plugins.dir = plugins.dir.as_deref().map(resolve);
        plugins.cache_dir = plugins.cache_dir.as_deref().map(resolve);

        if raw.clusters.is_empty() {
            return Err(ConfigError::Invalid {
                location: path.display().to_string(),
                message: "no [[clusters]]: add at least one (for example `backend = \"local\"`)"
                    .into(),
            });
        }
        let mut clusters: Vec<ClusterConfig> = Vec::new();
        for spanned in raw.clusters {
            let span = spanned.span();
            let cluster = spanned.into_inner();
            let invalid = |message: String| ConfigError::Invalid {
                location: location(path, text, Some(span.clone())),
                message,
            };
            if clusters.iter().any(|c| c.name == cluster.name) {
                return Err(invalid(format!(
                    "a cluster named `{}` is already defined",
                    cluster.name
                )));
            }
            let mut backend = cluster.backend;
            backend.resolve_paths(&base);
            clusters.push(ClusterConfig {
                name: cluster.name,
                weight: cluster.weight,
                backend,
            });
        }

        let mut fleet = raw.fleet;
        fleet.epochs = run.epochs;
        fleet.image_rewrite = ImageRewrite::new(run.image_rewrite.clone());
        fleet.prepare = PrepareHooks::new(
            raw.prepare
                .iter()
                .map(|(image, prepare)| (image.clone(), prepare.hook()))
                .collect(),
            raw.adapter.prepare.as_ref().map(PrepareConfig::hook),
        );
        let mut shared_pools: Vec<SharedPoolConfig> = Vec::new();
        for spanned in raw.shared_pools {
            let span = spanned.span();
            let pool = spanned.into_inner();
            if shared_pools.iter().any(|p| p.name == pool.name) {
                return Err(ConfigError::Invalid {
                    location: location(path, text, Some(span)),
                    message: format!("a shared pool named `{}` is already defined", pool.name),
                });
            }
            shared_pools.push(pool);
        }
        if fleet.recycle && plugins.reset.is_none() {
            return Err(ConfigError::Invalid {
                location: path.display().to_string(),
                message: "[fleet] recycle = true needs a reset check: set [plugins] reset (for example \"git-restore\")".into(),
            });
        }
        Ok(FleetConfig {
            path: path.to_path_buf(),
            run,
            adapter: raw.adapter,
            fleet,
            plugins,
            clusters,
            api: ApiConfig {
                state_dir: raw.api.state_dir.as_deref().map(resolve),
                ..raw.api
            },
            shared_pools,
        })
    }
}

/// `file:line:column` of a byte span.
fn location(path: &Path, text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else {
        return path.display().to_string();
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    format!("{}:{line}:{column}", path.display())
}

fn default_run_name() -> String {
    "run".to_string()
}

fn default_placement() -> String {
    "least-loaded".to_string()
}

fn default_sizing() -> String {
    "proportional".to_string()
}

fn default_cache_budget_mib() -> u64 {
    sandfleet_plugin::DEFAULT_CACHE_BUDGET >> 20
}

fn one() -> u32 {
    1
}

/// A duration, when given.
fn opt_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fleet::{MINIMAL, parse};

    #[test]
    fn a_minimal_file_gets_defaults_and_resolved_paths() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.run.dataset, PathBuf::from("/cfg/tasks.jsonl"));
        assert_eq!(config.fleet, FleetSettings::default());
        assert_eq!(config.plugins.placement, "least-loaded");
        assert_eq!(
            config.plugins.limits.resolve().adapter.deadline,
            DEFAULT_ADAPTER_DEADLINE
        );
        assert_eq!(config.clusters[0].backend.kind(), "local");
    }

    #[test]
    fn an_unknown_key_names_file_line_column_and_key() {
        let text = MINIMAL.replace("[adapter]\n", "[adapter]\ncolour = \"red\"\n");
        let error = parse(&text).unwrap_err();
        assert!(
            error.starts_with("/cfg/fleet.toml:6:1: unknown field `colour`"),
            "{error}"
        );
    }

    #[test]
    fn unknown_keys_in_a_cluster_and_its_backend_table_are_named() {
        let text = MINIMAL.replace("backend = \"local\"", "backend = \"local\"\nwieght = 2");
        let error = parse(&text).unwrap_err();
        assert!(error.contains("unknown field `wieght`"), "{error}");
        assert!(error.starts_with("/cfg/fleet.toml:"), "{error}");
        let text = format!("{MINIMAL}\n[clusters.local]\nmax_sandbox = 3\n");
        let error = parse(&text).unwrap_err();
        assert!(error.contains("unknown field `max_sandbox`"), "{error}");
    }

    #[test]
    fn malformed_toml_and_bad_values_are_located() {
        let error = parse("[run\n").unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:1:"), "{error}");
        let text = format!("{MINIMAL}\n[fleet]\nmax_concurrent = 0\n");
        let error = parse(&text).unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:13:18:"), "{error}");
        let text = format!("{MINIMAL}\n[fleet]\nclaim_timeout = \"soon\"\n");
        let error = parse(&text).unwrap_err();
        assert!(error.contains("`soon` is not a duration"), "{error}");
        let text = MINIMAL.replace("backend = \"local\"", "backend = \"cloud\"");
        let error = parse(&text).unwrap_err();
        assert!(
            error
                .contains("unknown variant `cloud`, expected one of `local`, `opensandbox`, `k8s`"),
            "{error}"
        );
    }

    #[test]
    fn image_rewrites_reach_the_fleet_settings() {
        let text = MINIMAL.replace(
            "[run]\n",
            "[run]\nimage_rewrite = { \"docker.io/\" = \"mirror.local/\" }\n",
        );
        let config = parse(&text).unwrap();
        assert_eq!(
            config
                .fleet
                .image_rewrite
                .apply("docker.io/library/python:3.12"),
            "mirror.local/library/python:3.12"
        );
    }

    #[test]
    fn a_k8s_cluster_resolves_its_kubeconfig_and_names_unknown_keys() {
        let text = MINIMAL.replace(
            "backend = \"local\"",
            "backend = \"k8s\"\n[clusters.k8s]\nkubeconfig = \"kc.yaml\"\nnamespace = \"sb\"",
        );
        let config = parse(&text).unwrap();
        let BackendConfig::K8s { k8s } = &config.clusters[0].backend else {
            panic!("{:?}", config.clusters[0].backend);
        };
        assert_eq!(k8s.kubeconfig.as_deref(), Some(Path::new("/cfg/kc.yaml")));
        assert_eq!(
            (k8s.namespace.as_str(), config.clusters[0].backend.kind()),
            ("sb", "k8s")
        );
        let error = parse(&format!("{text}\nnode_selectr = {{}}\n")).unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:"), "{error}");
        assert!(error.contains("unknown field `node_selectr`"), "{error}");
    }

    #[test]
    fn recycling_needs_a_reset_check_and_clusters_need_unique_names() {
        let text = format!("{MINIMAL}\n[fleet]\nrecycle = true\n");
        assert!(parse(&text).unwrap_err().contains("needs a reset check"));
        let text = format!("{MINIMAL}\n[[clusters]]\nname = \"here\"\nbackend = \"local\"\n");
        let error = parse(&text).unwrap_err();
        assert!(
            error.contains("a cluster named `here` is already defined"),
            "{error}"
        );
        assert!(
            parse("[run]\ndataset = \"x\"\n[adapter]\nname = \"g\"\n")
                .unwrap_err()
                .contains("no [[clusters]]")
        );
    }
}
