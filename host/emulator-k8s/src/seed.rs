//! What a fresh cluster holds: the built-in namespaces, the nodes, and the stand-in
//! `agent-sandbox-system/agent-sandbox-controller` Deployment that preflights look for.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::store::Store;

/// Namespaces that exist from the start and may not be deleted.
pub(crate) const PROTECTED_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Namespaces made at start.
pub(crate) const NAMESPACES: &[&str] = &[
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "agent-sandbox-system",
];

/// The capacity of each node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeShape {
    /// Number of nodes.
    pub count: usize,
    /// Allocatable CPU (a quantity: `8`, `7500m`).
    pub cpu: String,
    /// Allocatable memory (`32Gi`).
    pub memory: String,
    /// Allocatable pods.
    pub pods: u32,
    /// Allocatable ephemeral storage (`100Gi`).
    pub disk: String,
}

/// A node's name.
pub(crate) fn node_name(i: usize) -> String {
    format!("sandfleet-node-{i}")
}

fn node(i: usize, shape: &NodeShape) -> Value {
    let name = node_name(i);
    // Loopback only: 127.42.0.0/16 holds the nodes' and pods' addresses.
    let ip = format!("127.42.{}.1", i + 1);
    let resources = json!({
        "cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods.to_string(),
        "ephemeral-storage": shape.disk,
    });
    let now = crate::store::now_rfc3339();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "sandfleet",
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sandfleet kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "sandfleet://0.1.0"},
            "images": [],
        },
    })
}

fn controller_deployment() -> Value {
    let labels = json!({"app": "agent-sandbox-controller"});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "agent-sandbox-controller", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            // As agent-sandbox 1.0.3's extensions.yaml deploys it: one
            // controller, the extensions' controllers on by its flag.
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "agent-sandbox-controller",
                "image": "registry.k8s.io/agent-sandbox/agent-sandbox-controller:v1.0.3",
                "args": ["--leader-elect=true", "--extensions"],
            }]}},
        },
        "status": {
            "observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
        },
    })
}

/// Fill a fresh store.
///
/// # Panics
/// Never on a fresh store (the names are distinct).
pub(crate) fn seed(store: &Store, nodes: &NodeShape) {
    let namespaces: Arc<str> = Arc::from("/namespaces");
    for ns in NAMESPACES {
        let object = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        store
            .create(&namespaces, "", object, false)
            .expect("fresh store");
    }
    let node_key: Arc<str> = Arc::from("/nodes");
    for i in 0..nodes.count {
        store
            .create(&node_key, "", node(i, nodes), false)
            .expect("fresh store");
    }
    let deployments: Arc<str> = Arc::from("apps/deployments");
    store
        .create(
            &deployments,
            "agent-sandbox-system",
            controller_deployment(),
            false,
        )
        .expect("fresh store");
}
