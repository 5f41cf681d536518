//! The lifecycle API's and execd's JSON, as much of it as the driver uses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes`: of an image or of a snapshot, never both.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSandbox<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<Image<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) snapshot_id: Option<&'a str>,
    pub(crate) entrypoint: &'a [String],
    pub(crate) timeout: u64,
    pub(crate) resource_limits: Resources,
    pub(crate) resource_requests: Resources,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) metadata: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) extensions: Option<Extensions<'a>>,
    /// Egress through the server's sidecar: absent, the sandbox's network
    /// is the runtime's (open).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) network_policy: Option<NetworkPolicy>,
}

/// The egress sidecar's policy (`NetworkPolicy` of the lifecycle API).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NetworkPolicy {
    /// `allow` or `deny`: what no rule matches gets.
    pub(crate) default_action: &'static str,
    /// Ordered rules; none with `deny` is deny-all.
    pub(crate) egress: Vec<NetworkRule>,
}

#[derive(Debug, Serialize)]
pub(crate) struct NetworkRule {
    pub(crate) action: &'static str,
    pub(crate) target: String,
}

impl NetworkPolicy {
    /// No egress at all: what `[fleet] network = false` asks for.
    pub(crate) fn deny_all() -> Self {
        NetworkPolicy {
            default_action: "deny",
            egress: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Image<'a> {
    pub(crate) uri: &'a str,
}

/// `resourceLimits` / `resourceRequests`: a map of Kubernetes quantities.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Resources {
    pub(crate) cpu: String,
    pub(crate) memory: String,
    /// `[fleet] disk_mib`; left out when it is 0.
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub(crate) ephemeral_storage: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Extensions<'a> {
    pub(crate) pool_ref: &'a str,
}

/// A sandbox as the server describes it.
#[derive(Debug, Deserialize)]
pub(crate) struct Sandbox {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) status: Option<Status>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Status {
    #[serde(default)]
    pub(crate) state: String,
}

/// `GET /v1/sandboxes`.
#[derive(Debug, Deserialize)]
pub(crate) struct SandboxPage {
    pub(crate) items: Vec<Sandbox>,
    pub(crate) pagination: Pagination,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pagination {
    pub(crate) has_next_page: bool,
}

/// `POST /v1/sandboxes/{id}/snapshots`.
#[derive(Debug, Serialize)]
pub(crate) struct CreateSnapshot<'a> {
    pub(crate) name: &'a str,
}

/// A snapshot as the server describes it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Snapshot {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    pub(crate) status: SnapshotStatus,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SnapshotStatus {
    /// `Creating`, `Ready`, `Failed`, `Deleting`, or one the API adds later.
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

/// `GET /v1/snapshots`.
#[derive(Debug, Deserialize)]
pub(crate) struct SnapshotPage {
    pub(crate) items: Vec<Snapshot>,
    pub(crate) pagination: Pagination,
}

/// `GET /v1/sandboxes/{id}/endpoints/{port}`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// `host[:port][/path]`, no scheme.
    pub(crate) endpoint: String,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
}

/// `POST /command`.
#[derive(Debug, Serialize)]
pub(crate) struct Command<'a> {
    pub(crate) command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cwd: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) envs: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) background: bool,
}

/// `GET /command/status/{id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct CommandStatus {
    pub(crate) running: bool,
    #[serde(default)]
    pub(crate) exit_code: Option<i32>,
    #[serde(default)]
    pub(crate) error: Option<String>,
}

/// What the driver keeps in a handle's `driver` field.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct HandleData {
    /// execd, as `http(s)://host[:port][/path]`.
    pub(crate) execd: String,
    /// Headers the server said every execd request needs.
    pub(crate) headers: BTreeMap<String, String>,
}
