//! `[api]`: how `sandfleet serve` listens and what it allows. Every key is
//! optional; the token itself is never in the file, only the name of the
//! environment variable that holds it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sandfleet_engine::settings_de::{duration, positive};
use serde::{Deserialize, Deserializer};

/// The daemon's settings (`[api]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Where to listen (default `127.0.0.1:7878`); `--listen` overrides it.
    /// A non-loopback address needs a token.
    pub listen: SocketAddr,
    /// The environment variable holding the bearer token every request
    /// but `/healthz` must carry. Without it, requests need no token.
    pub token_env: Option<String>,
    /// A lease with no call for this long is released.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Largest JSON request body, in KiB (`max_body_kib`).
    #[serde(rename = "max_body_kib", deserialize_with = "kib")]
    pub max_body: usize,
    /// Largest file upload, in MiB (`max_upload_mib`).
    #[serde(rename = "max_upload_mib", deserialize_with = "mib")]
    pub max_upload: usize,
    /// After SIGTERM/SIGINT, how long running requests may finish before
    /// every lease and pool is released.
    #[serde(deserialize_with = "duration")]
    pub grace_period: Duration,
    /// Where the daemon keeps its run id, lease handles and batch runs, so
    /// a restart can release what a killed instance left. Relative to the
    /// fleet file; default `$XDG_STATE_HOME/sandfleet/serve`.
    pub state_dir: Option<PathBuf>,
    /// Leases that may be live at once.
    #[serde(deserialize_with = "positive")]
    pub max_leases: u32,
}

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: DEFAULT_LISTEN.parse().expect("a valid address"),
            token_env: None,
            idle_timeout: Duration::from_secs(600),
            max_body: 1 << 20,
            max_upload: 64 << 20,
            grace_period: Duration::from_secs(30),
            state_dir: None,
            max_leases: 4096,
        }
    }
}

impl ApiConfig {
    /// The state directory: the configured one, or the user's default.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.state_dir.clone().or_else(|| {
            let base = std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state"))
                })?;
            Some(base.join("sandfleet").join("serve"))
        })
    }
}

fn kib<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    positive(deserializer).map(|kib| (kib as usize) << 10)
}

fn mib<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    positive(deserializer).map(|mib| (mib as usize) << 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginFallback;
    use crate::test_fleet::{MINIMAL, parse};

    #[test]
    fn api_keys_default_and_parse_with_state_dir_relative_to_the_file() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.api, ApiConfig::default());
        assert_eq!(config.plugins.fallback, PluginFallback::None);
        let text = format!(
            "{MINIMAL}\n[api]\nlisten = \"127.0.0.1:9000\"\ntoken_env = \"TOKEN\"\nidle_timeout = \"90s\"\nmax_body_kib = 2\nmax_upload_mib = 3\ngrace_period = \"5s\"\nstate_dir = \"serve\"\nmax_leases = 10\n"
        );
        let api = parse(&text).unwrap().api;
        assert_eq!(api.listen.port(), 9000);
        assert_eq!(api.token_env.as_deref(), Some("TOKEN"));
        assert_eq!(api.idle_timeout, Duration::from_secs(90));
        assert_eq!((api.max_body, api.max_upload), (2 << 10, 3 << 20));
        assert_eq!(api.grace_period, Duration::from_secs(5));
        assert_eq!(api.state_dir(), Some(PathBuf::from("/cfg/serve")));
        assert_eq!(api.max_leases, 10);
        let text = MINIMAL.replace(
            "[[clusters]]",
            "[plugins]\nfallback = \"builtin\"\n\n[[clusters]]",
        );
        assert_eq!(
            parse(&text).unwrap().plugins.fallback,
            PluginFallback::Builtin
        );
    }

    #[test]
    fn bad_api_keys_name_file_line_and_key() {
        let error = parse(&format!("{MINIMAL}\n[api]\nidle_timout = \"1m\"\n")).unwrap_err();
        assert!(
            error.starts_with("/cfg/fleet.toml:13:1: unknown field `idle_timout`"),
            "{error}"
        );
        let error = parse(&format!("{MINIMAL}\n[api]\nlisten = \"localhost\"\n")).unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:13:10:"), "{error}");
        let error = parse(&format!("{MINIMAL}\n[api]\nmax_body_kib = 0\n")).unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:13:16:"), "{error}");
        let text = MINIMAL.replace(
            "[[clusters]]",
            "[plugins]\nfallback = \"wasm\"\n\n[[clusters]]",
        );
        assert!(parse(&text).unwrap_err().contains("unknown variant `wasm`"));
    }
}
