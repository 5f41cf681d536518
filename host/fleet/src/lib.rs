//! The fleet file and what it builds, shared by the `sandfleet` command and
//! the daemon: [`FleetConfig`] parses and validates `fleet.toml` (every error
//! names file, line, column and key), and [`setup`] turns it into plugins,
//! tasks, solutions and cluster drivers, each checked before anything is
//! created.

mod api;
mod config;
mod prepare;
pub mod setup;
mod shared;
#[cfg(test)]
mod test_fleet;

pub use api::{ApiConfig, DEFAULT_LISTEN};
pub use config::{
    AdapterConfig, BackendConfig, ClusterConfig, ConfigError, FleetConfig, LimitsConfig,
    PluginFallback, PluginsConfig, RunConfig, SettingValue,
};
pub use prepare::PrepareConfig;
pub use shared::SharedPoolConfig;

/// Where compiled plugins are cached between runs: `$XDG_CACHE_HOME` or
/// `~/.cache`, under `sandfleet/plugins`. As the XDG base directory
/// specification says, a variable that is empty or not an absolute path is
/// ignored (a relative one would put the cache wherever a command runs).
pub fn default_cache_dir() -> Option<std::path::PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(std::path::PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    let base = absolute("XDG_CACHE_HOME").or_else(|| Some(absolute("HOME")?.join(".cache")))?;
    Some(base.join("sandfleet").join("plugins"))
}
