//! The sandfleet plugin test kit.
//!
//! Load a plugin's `.wasm` component and call it from ordinary `#[test]`s
//! through the same typed wrappers the host uses, under the same limits:
//!
//! ```no_run
//! use sandfleet_testkit::{TestPlugin, fixtures};
//!
//! let plugin = TestPlugin::load("target/wasm32-wasip2/release/my_policy.wasm")?;
//! let policy = plugin.placement()?;
//! let clusters = fixtures::clusters(&[fixtures::cluster(1), fixtures::cluster(5)]);
//! assert_eq!(policy.place_blocking(&fixtures::claim(0), &clusters)?, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Or describe cases in TOML and run them with [`cases::run`] (which is what
//! `sandfleet plugin test FILE CASES.toml` does).

pub mod cases;
pub mod fixtures;
mod values;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sandfleet_plugin::adapter::TaskAdapter;
use sandfleet_plugin::placement::PlacementPolicy;
use sandfleet_plugin::reset::ResetCheck;
use sandfleet_plugin::sizing::SizingPolicy;
pub use sandfleet_plugin::{
    CallError, CallErrorKind, DynamicPlugin, HostConfig, Kind, KindLimits, Limits, LoadError,
    LookupError, PluginHost, Registry, Source, VersionInfo, adapter, placement, reset, sizing,
};

/// A plugin loaded for testing.
pub struct TestPlugin {
    registry: Arc<Registry>,
    name: String,
    wasm: Vec<u8>,
}

impl TestPlugin {
    /// Loads the component at `path` on the shared test host (see
    /// [`shared_host`] for its limits; compiled artifacts are cached under the
    /// system temp directory).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a plugin of a served contract.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        Self::load_on(shared_host().clone(), path.as_ref())
    }

    /// Loads the component at `path` on a host of its own with `config`
    /// (for testing behaviour under other limits).
    ///
    /// # Errors
    ///
    /// As [`TestPlugin::load`], and when the host cannot be created.
    pub fn load_with(path: impl AsRef<Path>, config: HostConfig) -> Result<Self, LoadError> {
        let host = PluginHost::new(config).map_err(|e| LoadError::Invalid {
            origin: path.as_ref().display().to_string(),
            detail: e.to_string(),
        })?;
        Self::load_on(host, path.as_ref())
    }

    fn load_on(host: PluginHost, path: &Path) -> Result<Self, LoadError> {
        let registry = Registry::new(host);
        let info = registry.load_file(path)?;
        let wasm = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(TestPlugin {
            registry,
            name: info.plugin.name.to_string(),
            wasm,
        })
    }

    /// Name, version, world and source of the loaded component.
    pub fn info(&self) -> VersionInfo {
        self.registry
            .status(&self.name)
            .and_then(|status| status.serving)
            .expect("a loaded test plugin is serving")
    }

    /// The plugin as a placement policy.
    ///
    /// # Errors
    ///
    /// When it implements another world.
    pub fn placement(&self) -> Result<PlacementPolicy, LookupError> {
        self.registry.placement(&self.name)
    }

    /// The plugin as a sizing policy.
    ///
    /// # Errors
    ///
    /// When it implements another world.
    pub fn sizing(&self) -> Result<SizingPolicy, LookupError> {
        self.registry.sizing(&self.name)
    }

    /// The plugin as a reset check.
    ///
    /// # Errors
    ///
    /// When it implements another world.
    pub fn reset_check(&self) -> Result<ResetCheck, LookupError> {
        self.registry.reset_check(&self.name)
    }

    /// The plugin as a task adapter.
    ///
    /// # Errors
    ///
    /// When it implements another world.
    pub fn adapter(&self) -> Result<TaskAdapter, LookupError> {
        self.registry.adapter(&self.name)
    }

    /// The plugin for calls by function name with dynamic values.
    ///
    /// # Errors
    ///
    /// When the component does not link (it loaded before, so only on a
    /// broken host).
    pub fn dynamic(&self) -> Result<DynamicPlugin, LoadError> {
        let host = self.registry.host();
        let compiled = host.compile(&self.name, &self.wasm, Source::Memory)?;
        DynamicPlugin::new(host, compiled)
    }
}

/// The deadline of adapter calls on the shared test host: the daemon's
/// default, since grading a whole test log takes far longer than a placement
/// decision (and a loaded test machine must not turn that into a fault).
pub const ADAPTER_DEADLINE: Duration = Duration::from_secs(5);

/// One host for all tests of a process, so every component compiles once.
/// Its limits are the defaults, except that adapter calls have
/// [`ADAPTER_DEADLINE`]; use [`TestPlugin::load_with`] to test under others.
pub fn shared_host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut limits = KindLimits::default();
        limits.adapter.deadline = ADAPTER_DEADLINE;
        PluginHost::new(HostConfig {
            limits,
            cache_dir: Some(std::env::temp_dir().join("sandfleet-testkit-cache")),
            ..HostConfig::default()
        })
        .expect("create the shared test host")
    })
}
