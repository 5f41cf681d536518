//! What a cluster's `[clusters.<name>.transport]` table sets.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// How a cluster's HTTP client behaves. Equal configurations share one
/// client; any difference gets its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// Idle connections are closed after this; keep it below the server's
    /// keep-alive timeout (uvicorn's default was 5 s).
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Connecting gives up after this.
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// Reads and small writes of the lifecycle API.
    #[serde(deserialize_with = "duration")]
    pub lifecycle_timeout: Duration,
    /// Creating a sandbox (servers answer once it runs).
    #[serde(deserialize_with = "duration")]
    pub create_timeout: Duration,
    /// Added to a command's own timeout for its whole request.
    #[serde(deserialize_with = "duration")]
    pub command_slack: Duration,
    /// File uploads and downloads.
    #[serde(deserialize_with = "duration")]
    pub file_timeout: Duration,
    /// Idle connections kept per host.
    pub max_idle_per_host: usize,
    /// Attempts of one call, the first included.
    pub attempts: u32,
    /// The cluster's commands may safely run twice, so they are retried
    /// like idempotent calls.
    pub idempotent_commands: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            idle_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(5),
            lifecycle_timeout: Duration::from_secs(30),
            create_timeout: Duration::from_secs(120),
            command_slack: Duration::from_secs(30),
            file_timeout: Duration::from_secs(300),
            max_idle_per_host: 64,
            attempts: 3,
            idempotent_commands: false,
        }
    }
}

impl TransportConfig {
    /// Checks values that would make every call fail.
    ///
    /// # Errors
    ///
    /// A sentence naming the bad key.
    pub fn validate(&self) -> Result<(), String> {
        if self.attempts == 0 {
            return Err("transport.attempts must be at least 1".into());
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("lifecycle_timeout", self.lifecycle_timeout),
            ("create_timeout", self.create_timeout),
            ("file_timeout", self.file_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("transport.{key} must be more than 0"));
            }
        }
        Ok(())
    }
}

/// A duration written as humans do (`"3s"`, `"1m 30s"`).
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("`{text}` is not a duration: {e}")))
}
