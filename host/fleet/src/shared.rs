//! `[[shared_pools]]`: a fixed set of long-lived sandboxes that the daemon
//! multiplexes many small stateful sessions over (tool-calling RL: a
//! Python interpreter, a code-execution tool), each session pinned to one
//! sandbox.
//!
//! ```toml
//! [[shared_pools]]
//! name = "python-tool"
//! image = "python-sandbox"
//! size = 8                        # K sandboxes
//! max_sessions_per_sandbox = 64
//! probe = ["python3", "-c", "pass"]
//! probe_interval = "10s"          # 3 failed probes in a row evict a sandbox
//! idle_timeout = "10m"            # sessions unused this long are dropped
//! ```

use std::time::Duration;

use sandfleet_engine::settings_de::{duration, positive};
use serde::{Deserialize, Deserializer};

/// One `[[shared_pools]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPoolConfig {
    /// Its name: `/v1/shared/<name>/sessions`.
    #[serde(deserialize_with = "name")]
    pub name: String,
    /// The image of its sandboxes.
    pub image: String,
    /// How many sandboxes it keeps (K).
    #[serde(deserialize_with = "size")]
    pub size: u32,
    /// Sessions one sandbox takes at most.
    #[serde(
        default = "default_max_sessions",
        deserialize_with = "max_sessions_per_sandbox"
    )]
    pub max_sessions_per_sandbox: u32,
    /// The command that says a sandbox is healthy (exit 0 in time).
    #[serde(default = "default_probe", deserialize_with = "probe")]
    pub probe: Vec<String>,
    /// How often each sandbox is probed; also the probe's own timeout.
    #[serde(
        default = "default_probe_interval",
        deserialize_with = "probe_interval"
    )]
    pub probe_interval: Duration,
    /// A session with no call for this long is dropped.
    #[serde(default = "default_idle_timeout", deserialize_with = "idle_timeout")]
    pub idle_timeout: Duration,
    /// Where sessions' commands start (default `/workspace`).
    #[serde(default)]
    pub workdir: Option<String>,
}

fn default_max_sessions() -> u32 {
    64
}

fn default_probe() -> Vec<String> {
    vec!["true".to_string()]
}

fn default_probe_interval() -> Duration {
    Duration::from_secs(10)
}

fn default_idle_timeout() -> Duration {
    Duration::from_secs(600)
}

fn name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    let fits = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !fits {
        return Err(serde::de::Error::custom(format!(
            "shared pool `name` `{name}`: use 1 to 63 letters, digits, `-`, `_` or `.` (it is part of a URL)"
        )));
    }
    Ok(name)
}

fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    positive(deserializer).map_err(|_| {
        serde::de::Error::custom(
            "shared pool `size` must be at least 1 (the number of shared sandboxes, K)",
        )
    })
}

fn max_sessions_per_sandbox<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    positive(deserializer).map_err(|_| {
        serde::de::Error::custom("shared pool `max_sessions_per_sandbox` must be at least 1")
    })
}

fn probe<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(deserializer)?;
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err(serde::de::Error::custom(
            "shared pool `probe` is empty: give the argv of a command that exits 0 in a healthy sandbox (for example [\"true\"])",
        ));
    }
    Ok(argv)
}

fn probe_interval<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    nonzero(deserializer, "probe_interval")
}

fn idle_timeout<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    nonzero(deserializer, "idle_timeout")
}

fn nonzero<'de, D: Deserializer<'de>>(deserializer: D, key: &str) -> Result<Duration, D::Error> {
    let value = duration(deserializer)?;
    if value.is_zero() {
        return Err(serde::de::Error::custom(format!(
            "shared pool `{key}` must be more than 0"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SharedPoolConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_every_key() {
        let pool = parse("name = \"py\"\nimage = \"calc\"\nsize = 4\n").unwrap();
        assert_eq!(
            (pool.size, pool.max_sessions_per_sandbox, pool.probe),
            (4, 64, vec!["true".to_string()])
        );
        assert_eq!(pool.probe_interval, Duration::from_secs(10));
        let pool = parse(
            "name = \"py\"\nimage = \"calc\"\nsize = 2\nmax_sessions_per_sandbox = 3\nprobe = [\"python3\", \"-c\", \"pass\"]\nprobe_interval = \"250ms\"\nidle_timeout = \"1m\"\nworkdir = \"/srv\"\n",
        )
        .unwrap();
        assert_eq!(pool.probe[0], "python3");
        assert_eq!(pool.probe_interval, Duration::from_millis(250));
        assert_eq!(pool.idle_timeout, Duration::from_secs(60));
        assert_eq!(pool.workdir.as_deref(), Some("/srv"));
    }

    #[test]
    fn bad_values_name_their_field() {
        let error = parse("name = \"py\"\nimage = \"calc\"\nsize = 0\n").unwrap_err();
        assert!(
            error.contains("shared pool `size` must be at least 1"),
            "{error}"
        );
        let error = parse("name = \"py\"\nimage = \"calc\"\nsize = 1\nprobe = []\n").unwrap_err();
        assert!(error.contains("shared pool `probe` is empty"), "{error}");
        let error = parse("name = \"a/b\"\nimage = \"calc\"\nsize = 1\n").unwrap_err();
        assert!(error.contains("shared pool `name` `a/b`"), "{error}");
        let error = parse("name = \"py\"\nimage = \"calc\"\nsize = 1\nprobe_interval = \"0s\"\n")
            .unwrap_err();
        assert!(
            error.contains("shared pool `probe_interval` must be more than 0"),
            "{error}"
        );
        let error = parse("name = \"py\"\nimage = \"calc\"\nsize = 1\nslots = 2\n").unwrap_err();
        assert!(error.contains("unknown field `slots`"), "{error}");
    }

    const FLEET: &str = "[run]\ndataset = \"t.jsonl\"\n[adapter]\nname = \"generic\"\n[[clusters]]\nname = \"here\"\nbackend = \"local\"\n";

    use crate::test_fleet::parse as fleet;

    #[test]
    fn a_fleet_file_keeps_its_pools_in_order_and_locates_bad_ones() {
        let text = format!(
            "{FLEET}[[shared_pools]]\nname = \"a\"\nimage = \"calc\"\nsize = 4\n[[shared_pools]]\nname = \"b\"\nimage = \"calc\"\nsize = 1\n"
        );
        let names: Vec<String> = fleet(&text)
            .unwrap()
            .shared_pools
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        let error = fleet(&format!(
            "{FLEET}[[shared_pools]]\nname = \"a\"\nimage = \"calc\"\nsize = 0\n"
        ))
        .unwrap_err();
        assert!(
            error.starts_with("/cfg/fleet.toml:11:8: shared pool `size` must be at least 1"),
            "{error}"
        );
        let error = fleet(&format!(
            "{text}[[shared_pools]]\nname = \"a\"\nimage = \"x\"\nsize = 1\n"
        ))
        .unwrap_err();
        assert!(error.starts_with("/cfg/fleet.toml:16:"), "{error}");
        assert!(
            error.contains("a shared pool named `a` is already defined"),
            "{error}"
        );
    }
}
