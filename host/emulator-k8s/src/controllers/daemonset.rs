//! The DaemonSet controller: one pod per node matching the template's node selector,
//! pinned to its node by required node affinity on `metadata.name` (as the upstream
//! controller does), and the status counts. An image pre-pull DaemonSet thereby pulls
//! its images into every node's cache.

use serde_json::{Value, json};

use super::Requeue;
use crate::client::{self, Client, DAEMONSETS, NODES, PODS};

fn node_matches(template: &Value, node: &Value) -> bool {
    template["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| node["metadata"]["labels"][k] == *v)
}

fn pinned_node(pod: &Value) -> Option<&str> {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        .as_str()
        .or_else(|| pod["spec"]["nodeName"].as_str())
}

fn new_pod(ds: &Value, node: &str) -> Value {
    let template = &ds["spec"]["template"];
    let (_, name) = client::names(ds);
    let mut spec = template["spec"].clone();
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}],
    });
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-"),
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [client::controller_ref(ds)],
        },
        "spec": spec,
    })
}

fn owned_pods(c: &Client<'_>, ds: &Value) -> Vec<Value> {
    let (ns, _) = client::names(ds);
    c.list(PODS, Some(&ns))
        .into_iter()
        .filter(|p| client::controlled_by(p, ds) && !client::deleting(p))
        .map(|p| (*p).clone())
        .collect()
}

/// Reconcile one DaemonSet.
pub(super) fn reconcile(c: &Client<'_>, ns: &str, name: &str) -> Requeue {
    let ds = (*c.get(DAEMONSETS, ns, name)?).clone();
    if client::deleting(&ds) {
        return None;
    }
    let template = &ds["spec"]["template"];
    let pods = owned_pods(c, &ds);
    let nodes: Vec<String> = c
        .list(NODES, None)
        .into_iter()
        .filter(|n| node_matches(template, n))
        .map(|n| client::names(&n).1)
        .collect();
    for node in &nodes {
        if !pods.iter().any(|p| pinned_node(p) == Some(node.as_str()))
            && let Err(error) = c.create(PODS, ns, new_pod(&ds, node))
        {
            tracing::debug!(%error, daemonset = name, "creating a daemon pod");
        }
    }
    for pod in &pods {
        if !pinned_node(pod).is_some_and(|n| nodes.iter().any(|x| x == n)) {
            let (pns, pname) = client::names(pod);
            let _ = c.delete(PODS, &pns, &pname, "Background", None);
        }
    }
    let pods = owned_pods(c, &ds);
    let scheduled = pods
        .iter()
        .filter(|p| p["spec"]["nodeName"].is_string())
        .count();
    let ready = pods
        .iter()
        .filter(|p| client::condition_true(p, "Ready"))
        .count();
    let status = json!({
        "desiredNumberScheduled": nodes.len(),
        "currentNumberScheduled": scheduled,
        "updatedNumberScheduled": pods.len(),
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": nodes.len().saturating_sub(ready),
        "numberMisscheduled": 0,
        "observedGeneration": ds["metadata"]["generation"],
    });
    if ds["status"] != status
        && let Err(error) = c.merge_patch(DAEMONSETS, ns, name, &json!({"status": status}), true)
    {
        tracing::debug!(%error, "writing daemonset status");
    }
    None
}
