//! Templates and sandboxes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::run::Labels;

/// What a template makes: sandboxes of one image with these resources.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TemplateSpec {
    /// Template name, unique within a run and backend (derived from the image).
    pub name: String,
    /// The image, as the backend knows it (a local image name, a container
    /// image reference).
    pub image: String,
    /// CPU request in millicores.
    pub cpu_milli: u32,
    /// Memory request in MiB.
    pub memory_mib: u32,
    /// Ephemeral disk request in MiB.
    pub disk_mib: u32,
    /// Whether sandboxes may reach the network.
    pub network: bool,
    /// Environment every command in these sandboxes gets.
    pub env: BTreeMap<String, String>,
    /// Labels for the template and everything made from it (run id included).
    pub labels: Labels,
}

/// A template the backend has made ready.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TemplateRef {
    /// The template's name.
    pub name: String,
    /// The image it makes sandboxes of.
    pub image: String,
}

/// A claimed sandbox. Returned only once the sandbox can run commands.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SandboxHandle {
    /// Backend-unique id.
    pub id: String,
    /// The cluster (configured backend instance) it runs on.
    pub cluster: String,
    /// The template it came from.
    pub template: String,
    /// Host name inside the sandbox, for logs.
    pub hostname: String,
    /// A network endpoint for the sandbox, where the backend has one.
    pub endpoint: Option<String>,
}

/// How long a claimed sandbox lives without renewal, where the backend
/// enforces one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
