//! An OpenSandbox cluster's table in the fleet file.
//!
//! ```toml
//! [[clusters]]
//! name = "east"
//! backend = "opensandbox"
//! [clusters.opensandbox]
//! url_env = "OPENSANDBOX_BASE_URL"      # or url = "https://…"
//! api_key_env = "OPENSANDBOX_API_KEY"   # never the key itself
//! endpoint_mode = "direct"              # or "proxy" (through the server)
//! timeout = "10m"                       # sandbox TTL; renewed while claimed
//! limits = { cpu = "4", memory = "8Gi", ephemeral_storage = "20Gi" }  # requests come from [fleet]
//! # direct_scheme = "https"            # execd endpoints behind a TLS gateway (default http)
//! pools = { "python:3.12" = "py-pool" }  # a server pool (extensions.poolRef) per image
//! # pool = "swe-pool"                   # every other image's (a pool is one image's pods)
//! pool_fallback = true                  # create directly when a pool is full
//! background_after = "15m"              # commands allowed longer are polled, not streamed
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use sandfleet_transport::TransportConfig;
use serde::{Deserialize, Deserializer};

/// How commands reach execd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EndpointMode {
    /// Straight to the sandbox's endpoint (no API key is ever sent there).
    #[default]
    Direct,
    /// Through the server's proxy route (the API key goes with it).
    Proxy,
}

/// Limits set apart from requests, so a test suite that needs 8 GiB at its
/// peak does not reserve 8 GiB per sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// CPU limit as the server takes it ("4", "500m"); default: the request.
    pub cpu: Option<String>,
    /// Memory limit ("8Gi"); default: the request.
    pub memory: Option<String>,
    /// Ephemeral storage limit ("20Gi"); default: the request
    /// (`[fleet] disk_mib`).
    pub ephemeral_storage: Option<String>,
}

/// The scheme of an execd endpoint the server names without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// execd's own plain HTTP (pod IPs, Docker's mapped ports).
    #[default]
    Http,
    /// A gateway in front of the sandboxes that speaks TLS.
    Https,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The `[clusters.opensandbox]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenSandboxConfig {
    /// The server's base URL (without `/v1`).
    pub url: Option<String>,
    /// An environment variable holding the base URL, when `url` is unset.
    pub url_env: String,
    /// The environment variable holding the API key (unset: no key).
    pub api_key_env: String,
    /// How commands reach execd.
    pub endpoint_mode: EndpointMode,
    /// The scheme of a direct endpoint the server answers without one
    /// (it never names one today): execd itself speaks plain HTTP, whatever
    /// the lifecycle URL's scheme. A scheme in the answer wins; proxied
    /// endpoints are the server's own and take the lifecycle URL's.
    pub direct_scheme: Scheme,
    /// The sandbox's TTL (at least 60 s); claimed sandboxes are renewed.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// How long a created sandbox may take to answer execd's `/ping`.
    #[serde(deserialize_with = "duration")]
    pub ready_timeout: Duration,
    /// Limits, apart from the requests `[fleet]` sets.
    pub limits: ResourceLimits,
    /// The server pool (`extensions.poolRef`) of every image not in
    /// `pools`. A server pool is the pod template of one image: set this
    /// only when the cluster is asked for that image alone, or every other
    /// image's sandboxes come from a pool of the wrong image.
    pub pool: Option<String>,
    /// A server pool per image reference (image → pool name); images not
    /// here take `pool`, or are created directly when it is unset.
    pub pools: BTreeMap<String, String>,
    /// When an image's pool is full or missing, create directly instead of
    /// failing the claim (for `pool` and `pools` alike).
    pub pool_fallback: bool,
    /// The sandbox's entrypoint.
    pub entrypoint: Vec<String>,
    /// execd's port inside the sandbox.
    pub execd_port: u16,
    /// Commands whose timeout is at least this run in background mode and
    /// are polled, so a cut stream cannot lose a long evaluation's result.
    /// Polling costs a command up to a poll interval (0.2–2 s) at its end,
    /// so the default sits above the 10-minute timeout runs and the daemon
    /// give commands that set none: those stream.
    #[serde(deserialize_with = "duration")]
    pub background_after: Duration,
    /// Sandboxes this cluster may hold, when known (capacity).
    pub max_sandboxes: Option<u32>,
    /// The HTTP client's policy.
    pub transport: TransportConfig,
}

impl Default for OpenSandboxConfig {
    fn default() -> Self {
        OpenSandboxConfig {
            url: None,
            url_env: "OPENSANDBOX_BASE_URL".into(),
            api_key_env: "OPENSANDBOX_API_KEY".into(),
            endpoint_mode: EndpointMode::Direct,
            direct_scheme: Scheme::Http,
            timeout: Duration::from_secs(600),
            ready_timeout: Duration::from_secs(30),
            limits: ResourceLimits::default(),
            pool: None,
            pools: BTreeMap::new(),
            pool_fallback: true,
            entrypoint: vec!["tail".into(), "-f".into(), "/dev/null".into()],
            execd_port: 44772,
            background_after: Duration::from_secs(15 * 60),
            max_sandboxes: None,
            transport: TransportConfig::default(),
        }
    }
}

/// Where the server is and how to prove who we are.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The base URL, without a trailing `/`.
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
}

impl OpenSandboxConfig {
    /// The server pool sandboxes of `image` come from: its entry in
    /// `pools`, else `pool`; `None` when they are created directly.
    pub fn server_pool(&self, image: &str) -> Option<&str> {
        self.pools
            .get(image)
            .or(self.pool.as_ref())
            .map(String::as_str)
    }

    /// Checks the pool names of cluster `cluster`'s table.
    ///
    /// # Errors
    ///
    /// A sentence naming the key (`clusters.<name>.opensandbox.pools."<image>"`)
    /// whose image or pool name is empty.
    pub(crate) fn validate_pools(&self, cluster: &str) -> Result<(), String> {
        let table = format!("clusters.{cluster}.opensandbox");
        if self
            .pool
            .as_deref()
            .is_some_and(|pool| pool.trim().is_empty())
        {
            return Err(format!(
                "{table}.pool: the pool name is empty (leave `pool` out to create directly)"
            ));
        }
        for (image, pool) in &self.pools {
            if image.trim().is_empty() {
                return Err(format!(
                    "{table}.pools.{image:?}: the image reference is empty (pool {pool:?})"
                ));
            }
            if pool.trim().is_empty() {
                return Err(format!(
                    "{table}.pools.{image:?}: the pool name is empty (leave the image out to use `pool` or create directly)"
                ));
            }
        }
        Ok(())
    }

    /// Reads the URL and key from the configuration and from `env` (the
    /// process environment, or a test's).
    ///
    /// # Errors
    ///
    /// A sentence naming the key or variable that is missing or wrong.
    pub(crate) fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<Resolved, String> {
        let url = match &self.url {
            Some(url) => url.clone(),
            None => env(&self.url_env).ok_or_else(|| {
                format!(
                    "no server URL: set `url`, or the environment variable {} (url_env)",
                    self.url_env
                )
            })?,
        };
        let parsed = reqwest::Url::parse(url.trim())
            .map_err(|e| format!("url {url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("url {url:?} must be http:// or https://"));
        }
        if self.timeout < Duration::from_secs(60) {
            return Err(format!(
                "timeout must be at least 60s (the server's minimum), not {}",
                humantime::format_duration(self.timeout)
            ));
        }
        if self.entrypoint.is_empty() {
            return Err("entrypoint must name a program".into());
        }
        self.transport.validate()?;
        let api_key = env(&self.api_key_env).filter(|key| !key.is_empty());
        Ok(Resolved {
            base_url: url.trim().trim_end_matches('/').to_string(),
            api_key,
        })
    }
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("`{text}` is not a duration: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "OPENSANDBOX_BASE_URL" => Some("http://127.0.0.1:8080/".into()),
            "OPENSANDBOX_API_KEY" => Some("k".into()),
            _ => None,
        }
    }

    #[test]
    fn the_url_and_key_come_from_the_named_variables() {
        let resolved = OpenSandboxConfig::default().resolve(env).unwrap();
        assert_eq!(resolved.base_url, "http://127.0.0.1:8080");
        assert_eq!(resolved.api_key.as_deref(), Some("k"));
        let elsewhere = OpenSandboxConfig {
            url_env: "NOWHERE".into(),
            ..OpenSandboxConfig::default()
        };
        let error = elsewhere.resolve(env).unwrap_err();
        assert!(error.contains("NOWHERE (url_env)"), "{error}");
    }

    #[test]
    fn bad_values_are_named() {
        let short = OpenSandboxConfig {
            timeout: Duration::from_secs(30),
            ..OpenSandboxConfig::default()
        };
        assert!(
            short
                .resolve(env)
                .unwrap_err()
                .starts_with("timeout must be at least 60s")
        );
        let ftp = OpenSandboxConfig {
            url: Some("ftp://x".into()),
            ..OpenSandboxConfig::default()
        };
        assert!(ftp.resolve(env).unwrap_err().contains("must be http"));
        let parsed: Result<OpenSandboxConfig, _> = toml::from_str("api_key = \"inline\"");
        assert!(
            parsed
                .unwrap_err()
                .to_string()
                .contains("unknown field `api_key`")
        );
    }

    #[test]
    fn an_image_in_pools_takes_its_pool_and_every_other_image_the_default() {
        let table: OpenSandboxConfig = toml::from_str(
            r#"
            pool = "swe-pool"
            pools = { "python:3.12" = "py-pool", calc = "calc-pool" }
            pool_fallback = false
            "#,
        )
        .unwrap();
        assert_eq!(table.server_pool("python:3.12"), Some("py-pool"));
        assert_eq!(table.server_pool("calc"), Some("calc-pool"));
        assert_eq!(table.server_pool("swebench/django-1"), Some("swe-pool"));
        assert!(!table.pool_fallback);
        assert_eq!(table.validate_pools("east"), Ok(()));

        let only_mapped: OpenSandboxConfig =
            toml::from_str(r#"pools = { "python:3.12" = "py-pool" }"#).unwrap();
        assert_eq!(only_mapped.server_pool("python:3.12"), Some("py-pool"));
        assert_eq!(only_mapped.server_pool("calc"), None);
        assert_eq!(OpenSandboxConfig::default().server_pool("calc"), None);
    }

    #[test]
    fn an_empty_pool_name_or_image_names_its_key() {
        let parse = |text: &str| toml::from_str::<OpenSandboxConfig>(text).unwrap();
        let empty_pool = parse(r#"pools = { "python:3.12" = " " }"#)
            .validate_pools("east")
            .unwrap_err();
        assert!(
            empty_pool.starts_with(
                r#"clusters.east.opensandbox.pools."python:3.12": the pool name is empty"#
            ),
            "{empty_pool}"
        );
        let empty_image = parse(r#"pools = { "" = "py-pool" }"#)
            .validate_pools("east")
            .unwrap_err();
        assert!(
            empty_image
                .starts_with(r#"clusters.east.opensandbox.pools."": the image reference is empty"#),
            "{empty_image}"
        );
        let empty_default = parse(r#"pool = """#).validate_pools("east").unwrap_err();
        assert!(
            empty_default.starts_with("clusters.east.opensandbox.pool: the pool name is empty"),
            "{empty_default}"
        );
        let not_a_map = toml::from_str::<OpenSandboxConfig>(r#"pools = "py-pool""#).unwrap_err();
        assert!(not_a_map.to_string().contains("pools"), "{not_a_map}");
    }
}
