//! A Kubernetes cluster's table in the fleet file.
//!
//! ```toml
//! [[clusters]]
//! name = "east"
//! backend = "k8s"
//! [clusters.k8s]
//! kubeconfig = "~/.kube/east.yaml"   # default: $KUBECONFIG, else ~/.kube/config
//! context = "east-admin"             # default: the file's current context
//! # in_cluster = true                 # the pod's service account instead
//! namespace = "sandboxes"
//! node_selector = { "pool" = "sandbox" }
//! image_pull_policy = "IfNotPresent"
//! runtime_class = "gvisor"
//! pull_secret = "registry-creds"
//! limits = { cpu = "4", memory = "8Gi" }   # requests come from [fleet]
//! colocate = true                    # a run's sandboxes prefer one node
//! lease = "10m"                      # a claim's shutdownTime, renewed while held
//! exec = "session"                   # or "oneshot"
//! pod_spec = { priorityClassName = "batch" }   # merged into every pod spec
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// How commands reach a sandbox's pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// One long-lived shell per sandbox, many commands over one websocket.
    #[default]
    Session,
    /// A new pods/exec websocket per command.
    Oneshot,
}

/// Limits set apart from requests.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU limit ("4", "500m"); default: the request.
    pub cpu: Option<String>,
    /// Memory limit ("8Gi"); default: the request.
    pub memory: Option<String>,
    /// Ephemeral storage limit ("20Gi"); default: the request.
    pub ephemeral_storage: Option<String>,
}

/// The `[clusters.k8s]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct K8sConfig {
    /// The kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    pub context: Option<String>,
    /// Use the pod's service account (in-cluster config) instead of a
    /// kubeconfig.
    pub in_cluster: bool,
    /// Where templates, pools and claims are made.
    pub namespace: String,
    /// Nodes sandboxes may run on (and whose capacity counts).
    pub node_selector: BTreeMap<String, String>,
    /// `Always`, `IfNotPresent` or `Never`.
    pub image_pull_policy: Option<String>,
    /// The pods' RuntimeClass.
    pub runtime_class: Option<String>,
    /// A docker-registry Secret in `namespace` for pulling images.
    pub pull_secret: Option<String>,
    /// Limits, apart from the requests `[fleet]` sets.
    pub limits: Limits,
    /// A run's sandboxes prefer nodes that already run one (soft pod
    /// affinity), so images are pulled on fewer nodes.
    pub colocate: bool,
    /// The container's command (it must keep running).
    pub entrypoint: Vec<String>,
    /// The shell commands run in.
    pub shell: String,
    /// An image with a static busybox at `/bin/busybox` (`busybox:1.37-musl`)
    /// whose programs the pods run instead of the task image's: for images
    /// without `/bin/sh`, `tail` or `true` (distroless). The default
    /// `entrypoint` and `shell` then come from it.
    pub toolbox: Option<String>,
    /// Sandboxes get a headless service (and a DNS name on the handle).
    pub service: bool,
    /// A claim's life without renewal (its `lifecycle.shutdownTime`).
    #[serde(deserialize_with = "duration")]
    pub lease: Duration,
    /// How long a claim may take to bind before it is deleted and made
    /// again (once); default: half the claim's time.
    #[serde(deserialize_with = "opt_duration")]
    pub bind_timeout: Option<Duration>,
    /// How commands run.
    pub exec: ExecMode,
    /// The agent-sandbox controller's Deployment, `namespace/name`.
    pub controller: String,
    /// Fields merged into every pod spec (camelCase, as in a manifest).
    pub pod_spec: BTreeMap<String, serde_json::Value>,
}

impl Default for K8sConfig {
    fn default() -> Self {
        K8sConfig {
            kubeconfig: None,
            context: None,
            in_cluster: false,
            namespace: "default".into(),
            node_selector: BTreeMap::new(),
            image_pull_policy: None,
            runtime_class: None,
            pull_secret: None,
            limits: Limits::default(),
            colocate: false,
            entrypoint: vec!["tail".into(), "-f".into(), "/dev/null".into()],
            shell: "/bin/sh".into(),
            toolbox: None,
            service: false,
            lease: Duration::from_secs(600),
            bind_timeout: None,
            exec: ExecMode::Session,
            controller: "agent-sandbox-system/agent-sandbox-controller".into(),
            pod_spec: BTreeMap::new(),
        }
    }
}

impl K8sConfig {
    /// Makes a relative kubeconfig path relative to `base` (the fleet
    /// file's directory).
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(path) = &self.kubeconfig
            && path.is_relative()
        {
            self.kubeconfig = Some(base.join(path));
        }
    }

    /// Checks the values serde cannot.
    ///
    /// # Errors
    ///
    /// A sentence naming the key that is wrong.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.in_cluster && (self.kubeconfig.is_some() || self.context.is_some()) {
            return Err("in_cluster = true takes no kubeconfig or context".into());
        }
        if !is_dns_label(&self.namespace) {
            return Err(format!(
                "namespace `{}` is not a DNS label (lowercase letters, digits and `-`)",
                self.namespace
            ));
        }
        if let Some(policy) = &self.image_pull_policy
            && !matches!(policy.as_str(), "Always" | "IfNotPresent" | "Never")
        {
            return Err(format!(
                "image_pull_policy `{policy}`: expected Always, IfNotPresent or Never"
            ));
        }
        if self.lease < Duration::from_secs(60) {
            return Err(format!(
                "lease must be at least 60s, not {}",
                humantime::format_duration(self.lease)
            ));
        }
        if self.entrypoint.is_empty() {
            return Err("entrypoint must name a program".into());
        }
        if self
            .toolbox
            .as_ref()
            .is_some_and(|image| image.trim().is_empty())
        {
            return Err("toolbox must name an image (one with a static /bin/busybox)".into());
        }
        if self.controller.split_once('/').is_none() {
            return Err(format!(
                "controller `{}`: expected namespace/name",
                self.controller
            ));
        }
        // A scrub kills every process it sees in the pod: it must see only
        // the sandbox's.
        for key in ["hostPID", "shareProcessNamespace", "containers"] {
            if self.pod_spec.contains_key(key) {
                return Err(format!(
                    "pod_spec may not set `{key}`: a sandbox's pod runs one container in its own pid namespace"
                ));
            }
        }
        for (key, value) in &self.node_selector {
            sandfleet_core::validate_label(key, value)
                .map_err(|e| format!("node_selector: {e}"))?;
        }
        Ok(())
    }

    /// The configuration as the driver uses it: with a toolbox, the default
    /// entrypoint and shell are the toolbox's (ones set in the file are
    /// kept).
    pub(crate) fn settled(mut self) -> Self {
        if self.toolbox.is_some() {
            let defaults = K8sConfig::default();
            if self.entrypoint == defaults.entrypoint {
                self.entrypoint = crate::toolbox::entrypoint();
            }
            if self.shell == defaults.shell {
                self.shell = crate::toolbox::shell();
            }
        }
        self
    }

    /// How the driver's scripts and sessions run in a pod.
    pub(crate) fn pod_shell(&self) -> crate::toolbox::Shell {
        crate::toolbox::Shell::new(&self.shell, self.toolbox.is_some())
    }

    /// The node selector as a label selector string.
    pub(crate) fn node_selector_string(&self) -> String {
        self.node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("`{text}` is not a duration: {e}")))
}

fn opt_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_parses_and_unknown_keys_are_named() {
        let config: K8sConfig = toml::from_str(
            r#"
kubeconfig = "kc.yaml"
context = "dev"
namespace = "sandboxes"
node_selector = { "pool" = "sandbox" }
image_pull_policy = "IfNotPresent"
runtime_class = "gvisor"
pull_secret = "creds"
limits = { cpu = "4", memory = "8Gi" }
colocate = true
lease = "15m"
bind_timeout = "20s"
exec = "oneshot"
pod_spec = { priorityClassName = "batch" }
toolbox = "busybox:1.37-musl"
"#,
        )
        .unwrap();
        config.validate().unwrap();
        // The toolbox brings the keep-alive and the shell that were left
        // at their defaults.
        let settled = config.clone().settled();
        assert_eq!(
            settled.entrypoint,
            ["/.sandfleet/bin/tail", "-f", "/dev/null"]
        );
        assert_eq!(settled.shell, "/.sandfleet/bin/sh");
        let own = K8sConfig {
            entrypoint: vec!["/app/serve".into()],
            ..config.clone()
        }
        .settled();
        assert_eq!(own.entrypoint, ["/app/serve"]);
        assert_eq!(config.exec, ExecMode::Oneshot);
        assert_eq!(config.bind_timeout, Some(Duration::from_secs(20)));
        assert_eq!(config.node_selector_string(), "pool=sandbox");
        assert_eq!(config.pod_spec["priorityClassName"], "batch");
        let mut relative = config;
        relative.resolve_paths(Path::new("/cfg"));
        assert_eq!(relative.kubeconfig, Some(PathBuf::from("/cfg/kc.yaml")));
        let error = toml::from_str::<K8sConfig>("kube_config = \"x\"").unwrap_err();
        assert!(
            error.to_string().contains("unknown field `kube_config`"),
            "{error}"
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |config: K8sConfig| config.validate().unwrap_err();
        let base = K8sConfig::default;
        assert!(
            bad(K8sConfig {
                namespace: "Bad_NS".into(),
                ..base()
            })
            .starts_with("namespace")
        );
        assert!(
            bad(K8sConfig {
                image_pull_policy: Some("Sometimes".into()),
                ..base()
            })
            .starts_with("image_pull_policy")
        );
        assert!(
            bad(K8sConfig {
                lease: Duration::from_secs(5),
                ..base()
            })
            .starts_with("lease")
        );
        assert!(
            bad(K8sConfig {
                in_cluster: true,
                context: Some("x".into()),
                ..base()
            })
            .starts_with("in_cluster")
        );
        assert!(
            bad(K8sConfig {
                controller: "nope".into(),
                ..base()
            })
            .starts_with("controller")
        );
        let selector = K8sConfig {
            node_selector: BTreeMap::from([("bad key".into(), "v".into())]),
            ..base()
        };
        assert!(bad(selector).starts_with("node_selector"));
        let shared = K8sConfig {
            pod_spec: BTreeMap::from([("hostPID".into(), true.into())]),
            ..base()
        };
        assert!(bad(shared).starts_with("pod_spec may not set `hostPID`"));
        let blank = K8sConfig {
            toolbox: Some(" ".into()),
            ..base()
        };
        assert!(bad(blank).starts_with("toolbox must name an image"));
    }
}
