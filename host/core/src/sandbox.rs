//! Templates and sandboxes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::run::{LABEL_RUN_ID, Labels, RunId};

/// What a template makes: sandboxes of one image with these resources.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TemplateSpec {
    /// Template name, unique per run and image ([`crate::template_name`]).
    pub name: String,
    /// The image, as the backend knows it (a local image name, a container
    /// image reference).
    pub image: String,
    /// CPU in millicores (request and limit, unless a backend splits them).
    pub cpu_milli: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// Ephemeral disk in MiB.
    pub disk_mib: u32,
    /// Whether sandboxes may reach the network.
    pub network: bool,
    /// Environment every command in these sandboxes gets.
    pub env: BTreeMap<String, String>,
    /// Labels for the template and everything made from it; the run id
    /// ([`crate::LABEL_RUN_ID`]) is among them.
    pub labels: Labels,
}

impl TemplateSpec {
    /// The run the template belongs to, named by its labels once they are
    /// checked ([`crate::validate_labels`]).
    ///
    /// # Errors
    ///
    /// A sentence naming the template: a label that is not valid, or no
    /// valid run id ([`crate::LABEL_RUN_ID`]) among them.
    pub fn run_id(&self) -> Result<RunId, String> {
        crate::validate_labels(&self.labels).map_err(|e| format!("template {}: {e}", self.name))?;
        let run = self
            .labels
            .get(LABEL_RUN_ID)
            .ok_or_else(|| format!("template {}: its labels carry no {LABEL_RUN_ID}", self.name))?;
        RunId::new(run.as_str()).map_err(|e| format!("template {}: {e}", self.name))
    }
}

/// A template the backend has made ready.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TemplateRef {
    /// The template's name.
    pub name: String,
    /// The image it makes sandboxes of.
    pub image: String,
    /// The run it belongs to.
    pub run_id: RunId,
}

/// A claimed sandbox. Returned only once the sandbox can run commands.
///
/// Serializable, so a daemon that restarts can find its sandboxes again
/// from handles it persisted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SandboxHandle {
    /// Backend-unique id.
    pub id: String,
    /// The cluster (configured backend instance) it runs on.
    pub cluster: String,
    /// The template it came from.
    pub template: String,
    /// The run it belongs to.
    pub run_id: RunId,
    /// Host name inside the sandbox, for logs.
    pub hostname: String,
    /// A network endpoint for the sandbox, where the backend has one.
    pub endpoint: Option<String>,
    /// What the driver needs to reach the sandbox again (a pod's name and
    /// namespace, an exec endpoint and its headers), in the driver's own
    /// serialization; opaque to everyone else. Empty when it needs nothing.
    #[serde(default)]
    pub driver: String,
}

/// How long a claimed sandbox lives without renewal, where the backend
/// enforces one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
