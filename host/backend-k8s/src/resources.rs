//! agent-sandbox's four resources, v1beta1, as typed Rust objects: only the
//! fields the driver writes or reads (unknown fields are ignored when read,
//! absent ones are never sent, so server-side apply owns exactly what is
//! written here).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyIngressRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The group of SandboxTemplate, SandboxWarmPool and SandboxClaim.
pub(crate) const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// The group of Sandbox.
pub(crate) const CORE_GROUP: &str = "agents.x-k8s.io";
/// The only version the driver speaks.
pub(crate) const VERSION: &str = "v1beta1";

/// The Sandbox annotation naming its pod.
pub(crate) const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";

/// The label the controller puts on a claimed sandbox (cold or adopted):
/// its claim's uid.
pub(crate) const CLAIM_UID_LABEL: &str = "agents.x-k8s.io/claim-uid";

/// The label the controller puts on a warm pool's unclaimed member: the
/// pool's name hash.
pub(crate) const WARM_POOL_SANDBOX_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";

/// The four CRDs a cluster must serve, by name.
pub(crate) const CRDS: [&str; 4] = [
    "sandboxes.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
];

/// A sandbox: one pod (and optionally a headless service) the controller
/// keeps. The driver only reads them.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "agents.x-k8s.io",
    version = "v1beta1",
    kind = "Sandbox",
    namespaced,
    status = "SandboxStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// The pod the sandbox runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// Whether it has a headless service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,
}

/// What the controller reports about a sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// `Ready`, `Suspended`, `Finished`, …
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The pod's addresses.
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<String>,
    /// The node the pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The service's cluster DNS name, when it has one.
    #[serde(
        default,
        rename = "serviceFQDN",
        skip_serializing_if = "Option::is_none"
    )]
    pub service_fqdn: Option<String>,
}

/// A blueprint of sandboxes: what a warm pool fills with.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxTemplate",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplateSpec {
    /// The pod every sandbox of this template runs.
    pub pod_template: PodTemplateSpec,
    /// Whether sandboxes get a headless service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,
    /// The traffic its sandboxes may have; `None`: the controller's default
    /// (in from the sandbox router only, out to public addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<SandboxNetworkPolicy>,
}

/// A template's own network rules, which the controller writes into the
/// template's NetworkPolicy for both directions: traffic one way is allowed
/// only when a rule that way matches it, so a direction without rules
/// allows none.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SandboxNetworkPolicy {
    /// What may reach the sandboxes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// What the sandboxes may reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<NetworkPolicyEgressRule>,
}

/// A pool of warm sandboxes of one template.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxWarmPool",
    namespaced,
    status = "SandboxWarmPoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolSpec {
    /// Warm sandboxes to keep.
    pub replicas: i32,
    /// The template they are made from.
    pub sandbox_template_ref: NameRef,
}

/// A reference by name, in the same namespace.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct NameRef {
    /// The object's name.
    pub name: String,
}

/// What the controller reports about a warm pool.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    /// Members that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Members that are Ready.
    #[serde(default)]
    pub ready_replicas: i32,
}

/// A request for one sandbox from a warm pool (or made cold through it).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxClaim",
    namespaced,
    status = "SandboxClaimStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimSpec {
    /// The pool to take a sandbox from (v1beta1 claims name a pool, not a
    /// template).
    pub warm_pool_ref: NameRef,
    /// When the claim expires and what then happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// A claim's expiry.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// RFC 3339 time at which the claim expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<String>,
    /// `Delete`, `DeleteForeground` or `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_policy: Option<String>,
}

/// What the controller reports about a claim.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    /// `Ready` (forwarded from the sandbox or a reason it is not), `Finished`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The sandbox bound to the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<ClaimedSandbox>,
}

/// The sandbox a claim got.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedSandbox {
    /// Its name (a warm one is `<pool>-xxxxx`, never assumed).
    #[serde(default)]
    pub name: String,
    /// Its pod's addresses.
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<String>,
}

/// A condition of `conditions` by type.
pub(crate) fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}
