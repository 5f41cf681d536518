//! The scheduler and the kubelets of every node, driven by pod and node events: pods
//! without a node are bound (or marked Unschedulable with the scheduler's message and a
//! `FailedScheduling` event, and retried when capacity frees up); a bound pod's images
//! are pulled into its node's cache as its `imagePullPolicy` says (an OCI image from
//! its registry, for real; an image that cannot be pulled leaves it Pending in
//! `ErrImagePull`, then `ImagePullBackOff`, and a registry's failure is tried again
//! with back-off; `Never` and an image the node lacks, `ErrImageNeverPull`), its init
//! containers run in order, each to its end in a sandbox of its own, sharing the pod's
//! `emptyDir` volumes (`volumes`; pods of plain processes only pull them), it runs
//! as a local sandbox with an IP from 127.42.0.0/16, and it goes `Succeeded` or
//! `Failed` when its container's command exits — it is never restarted. A pod whose
//! RuntimeClass names a handler the runtime lacks stays Pending with a
//! `FailedCreatePodSandBox` event. The command's output is the container's log
//! (`pods/log`). A deleted pod's sandbox is destroyed, and its logs dropped.
//!
//! One module per job: `bind` is the scheduler's side (binding pending pods where
//! `scheduler` chooses), `pull` pulls a pod's images into the nodes' image cache
//! (`node_images`), `start` runs a bound pod to its end in a sandbox of the container
//! runtime (`runtime`), `volumes` makes its `emptyDir`s, and `addresses` hands out pod
//! IPs; this module follows the pod events.

mod addresses;
mod bind;
pub(crate) mod container_log;
mod network;
pub(crate) mod node_images;
mod pull;
pub(crate) mod pull_model;
pub(crate) mod quantity;
pub(crate) mod runtime;
pub(crate) mod scheduler;
mod start;
mod volumes;

pub(crate) use start::evict_for_storage;

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::PodNetwork;
use crate::client::{self, Client, NODES, PODS};
use crate::state::State;
use crate::store::{EventType, next_batch, now_rfc3339};
use addresses::Addresses;
use runtime::Runtime;

pub(crate) use pull::default_pull_policy;

/// The kubelet's field manager and event source.
const KUBELET: &str = "kubelet";
/// The scheduler's.
const SCHEDULER: &str = "default-scheduler";

/// What the kubelets share.
struct Kubelet {
    state: Arc<State>,
    runtime: Arc<Runtime>,
    /// The RuntimeClass handlers the nodes' container runtime has.
    handlers: Vec<String>,
    /// Whether pods their NetworkPolicies let out share this host's network.
    pod_network: PodNetwork,
    addresses: Mutex<Addresses>,
    /// Pods (by uid) whose start has begun.
    started: Mutex<HashSet<String>>,
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn condition(kind: &str, status: &str) -> Value {
    json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now_rfc3339()})
}

fn containers(pod: &Value, field: &str) -> Vec<Value> {
    pod["spec"][field].as_array().cloned().unwrap_or_default()
}

impl Kubelet {
    fn client(&self, manager: &'static str) -> Client<'_> {
        Client::new(&self.state, manager)
    }

    fn patch_status(&self, pod: &Value, status: Value) -> Option<Value> {
        let (ns, name) = client::names(pod);
        let c = self.client(KUBELET);
        // A pod deleted and recreated under the same name is not this one.
        if c.get(PODS, &ns, &name)
            .is_none_or(|p| p["metadata"]["uid"] != pod["metadata"]["uid"])
        {
            return None;
        }
        c.merge_patch(PODS, &ns, &name, &json!({"status": status}), true)
            .ok()
    }

    /// What a pod event asks of the scheduler and the kubelets.
    fn observe(
        self: &Arc<Self>,
        kind: EventType,
        pod: &Value,
        pending: &mut BTreeSet<(String, String)>,
        retry: &mut bool,
    ) {
        let pod_uid = uid(pod);
        if kind == EventType::Deleted {
            *retry = true;
            let was_started = self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&pod_uid);
            self.runtime.forget_logs(&pod_uid);
            if let Some(ip) = pod["status"]["podIP"].as_str() {
                self.addresses
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .give_back(ip);
            }
            if was_started {
                let runtime = self.runtime.clone();
                tokio::spawn(async move { runtime.stop(&pod_uid).await });
            }
            return;
        }
        if is_terminal(pod) {
            *retry = true;
            return;
        }
        if client::deleting(pod) {
            return;
        }
        if pod["spec"]["nodeName"].is_null() {
            if pod["spec"]["schedulerName"]
                .as_str()
                .is_none_or(|s| s == SCHEDULER)
            {
                pending.insert(client::names(pod));
            }
            return;
        }
        if pod["status"]["phase"] == "Pending"
            && self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(pod_uid)
        {
            tokio::spawn(self.clone().start(pod.clone()));
        }
    }
}

/// Run the scheduler and the kubelets until the store's change channel closes.
pub(crate) async fn run(
    state: Arc<State>,
    runtime: Arc<Runtime>,
    handlers: Vec<String>,
    pod_network: PodNetwork,
) {
    let kubelet = Arc::new(Kubelet {
        state: state.clone(),
        runtime,
        handlers,
        pod_network,
        addresses: Mutex::new(Addresses::new()),
        started: Mutex::new(HashSet::new()),
    });
    let mut informer = state.store.informer();
    let mut pending = BTreeSet::new();
    let mut unschedulable: BTreeSet<(String, String)> = BTreeSet::new();
    let pods_key = PODS.key();
    let nodes_key = NODES.key();
    let mut retry = false;
    for pod in Client::new(&state, KUBELET).list(PODS, None) {
        kubelet.observe(EventType::Added, &pod, &mut pending, &mut retry);
    }
    loop {
        if retry {
            pending.append(&mut unschedulable);
            retry = false;
        }
        let attempted = pending.clone();
        kubelet.schedule(&mut pending);
        for key in attempted {
            if Client::new(&state, SCHEDULER)
                .get(PODS, &key.0, &key.1)
                .is_some_and(|p| p["spec"]["nodeName"].is_null())
            {
                unschedulable.insert(key);
            }
        }
        let Some(events) = next_batch(&mut informer, None).await else {
            return;
        };
        for e in events {
            if *e.resource == *pods_key {
                kubelet.observe(e.kind, &e.object, &mut pending, &mut retry);
            } else if *e.resource == *nodes_key && e.kind != EventType::Modified {
                retry = true;
            }
        }
    }
}
