//! Prepare hooks in the fleet file: `[prepare."<image>"]` for one image,
//! `[adapter.prepare]` for every image of the adapter's tasks that has none
//! of its own.
//!
//! ```toml
//! [prepare."lean4-mathlib"]
//! commands = ["lake env lean Warm.lean", ["python3", "-c", "import torch"]]
//! timeout = "20m"      # for all the commands together
//! expected = "15m"     # what `sandfleet plan` counts on (optional)
//! workdir = "/workspace"
//! each_sandbox = false # true: run in every new sandbox, never fork
//! ```
//!
//! Where a cluster can snapshot sandboxes, the commands run once there and
//! the image's sandboxes start from a snapshot of the prepared one;
//! `each_sandbox = true` keeps running them in every new sandbox.
//!
//! A command is a shell line (run by `sh -c`) or an argv list.

use std::time::Duration;

use sandfleet_engine::PrepareHook;
use sandfleet_engine::settings_de::duration;
use serde::{Deserialize, Deserializer};

/// The default bound on a prepare.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One `[prepare."<image>"]` or `[adapter.prepare]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareConfig {
    /// The commands, in order.
    #[serde(deserialize_with = "commands")]
    pub commands: Vec<Vec<String>>,
    /// Bound on all of them together (default 10 minutes).
    #[serde(default = "default_timeout", deserialize_with = "timeout")]
    pub timeout: Duration,
    /// How long a prepare is expected to take, for `sandfleet plan`.
    #[serde(default, deserialize_with = "expected")]
    pub expected: Option<Duration>,
    /// Where the commands run (default: the backend's).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Run them in every new sandbox even where the cluster can fork one
    /// prepared sandbox's snapshot.
    #[serde(default)]
    pub each_sandbox: bool,
}

impl PrepareConfig {
    /// The engine's hook.
    pub fn hook(&self) -> PrepareHook {
        PrepareHook {
            commands: self.commands.clone(),
            timeout: self.timeout,
            workdir: self.workdir.clone(),
            expected: self.expected,
            each_sandbox: self.each_sandbox,
        }
    }
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// A shell line or an argv list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    Shell(String),
    Argv(Vec<String>),
}

fn commands<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Vec<String>>, D::Error> {
    let commands = Vec::<Command>::deserialize(deserializer)?;
    if commands.is_empty() {
        return Err(serde::de::Error::custom(
            "prepare `commands` is empty: give at least one command",
        ));
    }
    commands
        .into_iter()
        .enumerate()
        .map(|(index, command)| match command {
            Command::Shell(line) if !line.trim().is_empty() => {
                Ok(vec!["sh".to_string(), "-c".to_string(), line])
            }
            Command::Argv(argv) if argv.first().is_some_and(|p| !p.is_empty()) => Ok(argv),
            _ => Err(serde::de::Error::custom(format!(
                "prepare `commands[{index}]` names no program"
            ))),
        })
        .collect()
}

fn timeout<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let timeout = duration(deserializer)?;
    if timeout.is_zero() {
        return Err(serde::de::Error::custom(
            "prepare `timeout` must be more than 0 (it bounds the prepare commands)",
        ));
    }
    Ok(timeout)
}

fn expected<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PrepareConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn shell_lines_and_argv_lists_both_become_argv() {
        let config = parse(
            "commands = [\"lake build\", [\"python3\", \"-c\", \"import x\"]]\ntimeout = \"20m\"\nexpected = \"15m\"\n",
        )
        .unwrap();
        let hook = config.hook();
        assert_eq!(
            hook.commands,
            [
                vec!["sh", "-c", "lake build"],
                vec!["python3", "-c", "import x"]
            ]
        );
        assert_eq!(hook.timeout, Duration::from_secs(1200));
        assert_eq!(hook.expected, Some(Duration::from_secs(900)));
        assert_eq!(
            parse("commands = [\"true\"]\n").unwrap().timeout,
            DEFAULT_TIMEOUT
        );
    }

    #[test]
    fn a_zero_timeout_and_empty_commands_are_named() {
        let error = parse("commands = [\"true\"]\ntimeout = \"0s\"\n").unwrap_err();
        assert!(
            error.contains("prepare `timeout` must be more than 0"),
            "{error}"
        );
        let error = parse("commands = []\n").unwrap_err();
        assert!(error.contains("prepare `commands` is empty"), "{error}");
        let error = parse("commands = [\"true\", []]\n").unwrap_err();
        assert!(error.contains("`commands[1]` names no program"), "{error}");
        let error = parse("commands = [\"true\"]\ntimout = \"1m\"\n").unwrap_err();
        assert!(error.contains("unknown field `timout`"), "{error}");
    }

    #[test]
    fn a_fleet_file_gives_images_their_own_hook_and_the_adapter_s_to_the_rest() {
        let text = "[run]\ndataset = \"t.jsonl\"\n[adapter]\nname = \"generic\"\n[adapter.prepare]\ncommands = [\"echo adapter\"]\n[prepare.\"docker.io/lean:4\"]\ncommands = [\"lake build\"]\ntimeout = \"20m\"\n[fleet]\ninfra_retries = 2\n[[clusters]]\nname = \"here\"\nbackend = \"local\"\n";
        let config = crate::test_fleet::parse(text).unwrap();
        let hooks = &config.fleet.prepare;
        assert_eq!(
            hooks.for_image("docker.io/lean:4").unwrap().commands,
            [vec!["sh", "-c", "lake build"]]
        );
        assert_eq!(
            hooks.for_image("python").unwrap().commands,
            [vec!["sh", "-c", "echo adapter"]]
        );
        assert_eq!(config.fleet.infra_retries, 2);
        let error =
            crate::test_fleet::parse(&text.replace("timeout = \"20m\"", "timeout = \"0s\""))
                .unwrap_err();
        assert!(
            error.starts_with("/cfg/fleet.toml:9:11: prepare `timeout` must be more than 0"),
            "{error}"
        );
    }
}
