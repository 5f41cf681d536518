//! sandfleet's Kubernetes driver for kubernetes-sigs/agent-sandbox.
//!
//! Templates and warm pools are written by server-side apply (field manager
//! `sandfleet`), one of each per run and image; every template has a pool,
//! empty until warmed, because a v1beta1 claim names a pool. Claims carry
//! the run's labels (outside `agents.x-k8s.io/`, which the controller
//! strips) and a `lifecycle.shutdownTime` the engine's lease renews; their
//! readiness comes from one shared watch per namespace and run. Commands
//! go straight to the sandbox's pod over `pods/exec` websockets — a
//! persistent shell per sandbox by default — with no router in between.
//! Release deletes the claim; reap deletes one run's claims, pools and
//! templates, and counts the sandboxes they owned through owner references.

mod backend;
mod claims;
mod client;
mod config;
mod errors;
mod exec;
mod files;
mod frames;
mod objects;
mod preflight;
mod prepull;
mod quantity;
mod resources;
mod scrub;
mod toolbox;

pub use backend::K8sBackend;
pub use client::K8sClients;
pub use config::{ExecMode, K8sConfig, Limits};
pub use preflight::{PREFLIGHT_ACCESS, PREPULL_ACCESS};
pub use resources::{
    Sandbox, SandboxClaim, SandboxClaimSpec, SandboxClaimStatus, SandboxSpec, SandboxStatus,
    SandboxTemplate, SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
    SandboxWarmPoolStatus,
};

/// 64 bits from std's per-process random hasher keys: unique names for
/// claims and command markers, not secrets.
pub(crate) fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
