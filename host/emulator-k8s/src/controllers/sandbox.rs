//! The Sandbox controller (`controllers/sandbox_controller.go`): PVCs from the volume
//! claim templates, the pod named like the Sandbox (never updated but for label and
//! annotation drift, never recreated once it failed), the headless Service when asked,
//! suspension, expiry, and the status conditions.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::names::{self, SANDBOX_NAME_HASH};
use super::{Requeue, time_field, until};
use crate::client::{self, Client, PODS, PVCS, SANDBOXES, SERVICES};

/// The domain in service FQDNs (upstream flag default).
const CLUSTER_DOMAIN: &str = "cluster.local";

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The labels a sandbox's pod carries (`createPod`): the template's minus system keys,
/// then the tracking hash, the extension labels, and the normalized `created-by`.
fn pod_labels(sandbox: &Value, hash: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut labels = BTreeMap::new();
    let mut user_keys = Vec::new();
    for (k, v) in string_map(&sandbox["spec"]["podTemplate"]["metadata"]["labels"]) {
        if !names::is_system_key(&k) {
            user_keys.push(k.clone());
            labels.insert(k, v);
        }
    }
    labels.insert(SANDBOX_NAME_HASH.into(), hash.into());
    let pool_owned = client::controller_of(sandbox).is_some_and(|r| r["kind"] == "SandboxWarmPool");
    if pool_owned && let Some(v) = client::label(sandbox, names::WARM_POOL_SANDBOX) {
        labels.insert(names::WARM_POOL_SANDBOX.into(), v.into());
    }
    if let Some(v) = client::label(sandbox, names::TEMPLATE_REF_HASH) {
        labels.insert(names::TEMPLATE_REF_HASH.into(), v.into());
    }
    if let Some(v) = client::label(sandbox, names::CREATED_BY).filter(|v| !v.is_empty()) {
        labels.insert(
            names::CREATED_BY.into(),
            names::normalize_created_by(v).into(),
        );
    }
    user_keys.sort();
    (labels, user_keys)
}

fn pod_annotations(sandbox: &Value) -> BTreeMap<String, String> {
    string_map(&sandbox["spec"]["podTemplate"]["metadata"]["annotations"])
        .into_iter()
        .filter(|(k, _)| !names::is_system_key(k))
        .collect()
}

fn new_pod(sandbox: &Value, name: &str, hash: &str) -> Value {
    let (labels, label_keys) = pod_labels(sandbox, hash);
    let mut annotations = pod_annotations(sandbox);
    let annotation_keys: Vec<String> = annotations.keys().cloned().collect();
    if !label_keys.is_empty() {
        annotations.insert(names::PROPAGATED_LABELS.into(), label_keys.join(","));
    }
    if !annotation_keys.is_empty() {
        annotations.insert(
            names::PROPAGATED_ANNOTATIONS.into(),
            annotation_keys.join(","),
        );
    }
    let mut spec = sandbox["spec"]["podTemplate"]["spec"].clone();
    let mut volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
    for vct in sandbox["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let vct_name = vct["metadata"]["name"].as_str().unwrap_or_default();
        let volume = json!({"name": vct_name, "persistentVolumeClaim": {"claimName": format!("{vct_name}-{name}")}});
        match volumes.iter_mut().find(|v| v["name"] == vct_name) {
            Some(existing) => *existing = volume,
            None => volumes.push(volume),
        }
    }
    if !volumes.is_empty() {
        spec["volumes"] = Value::Array(volumes);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "labels": labels, "annotations": annotations,
            "ownerReferences": [client::controller_ref(sandbox)],
        },
        "spec": spec,
    })
}

fn ensure_pvcs(c: &Client<'_>, sandbox: &Value, ns: &str, name: &str, hash: &str) {
    for vct in sandbox["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let vct_name = vct["metadata"]["name"].as_str().unwrap_or_default();
        let pvc_name = format!("{vct_name}-{name}");
        if c.get(PVCS, ns, &pvc_name).is_some() {
            continue;
        }
        let mut labels = string_map(&vct["metadata"]["labels"]);
        labels.insert(SANDBOX_NAME_HASH.into(), hash.into());
        let pvc = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc_name, "labels": labels, "annotations": vct["metadata"]["annotations"].as_object().cloned().unwrap_or_default(), "ownerReferences": [client::controller_ref(sandbox)]},
            "spec": vct["spec"],
        });
        if let Err(error) = c.create(PVCS, ns, pvc) {
            tracing::debug!(%error, "creating a sandbox PVC");
        }
    }
}

/// Patch the pod's label and annotation drift (the spec is never updated).
fn patch_drift(c: &Client<'_>, sandbox: &Value, pod: &Value, hash: &str) {
    let (labels, _) = pod_labels(sandbox, hash);
    let current = string_map(&pod["metadata"]["labels"]);
    let mut label_patch = Map::new();
    for (k, v) in &labels {
        if current.get(k) != Some(v) {
            label_patch.insert(k.clone(), json!(v));
        }
    }
    if current.contains_key(names::WARM_POOL_SANDBOX)
        && !labels.contains_key(names::WARM_POOL_SANDBOX)
    {
        label_patch.insert(names::WARM_POOL_SANDBOX.into(), Value::Null);
    }
    let current_annotations = string_map(&pod["metadata"]["annotations"]);
    let mut annotation_patch = Map::new();
    for (k, v) in pod_annotations(sandbox) {
        if current_annotations.get(&k) != Some(&v) {
            annotation_patch.insert(k, json!(v));
        }
    }
    if label_patch.is_empty() && annotation_patch.is_empty() {
        return;
    }
    let (ns, name) = client::names(pod);
    let patch = json!({"metadata": {"labels": label_patch, "annotations": annotation_patch}});
    if let Err(error) = c.merge_patch(PODS, &ns, &name, &patch, false) {
        tracing::debug!(%error, "patching pod drift");
    }
}

fn set_pod_name_annotation(c: &Client<'_>, ns: &str, name: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {names::POD_NAME: value}}});
    if let Err(error) = c.merge_patch(SANDBOXES, ns, name, &patch, false) {
        tracing::debug!(%error, "setting the pod-name annotation");
    }
}

fn ensure_service(
    c: &Client<'_>,
    sandbox: &Value,
    ns: &str,
    name: &str,
    hash: &str,
) -> Option<Value> {
    let existing = c.get(SERVICES, ns, name).map(|s| (*s).clone());
    match sandbox["spec"]["service"].as_bool() {
        Some(true) => {
            if existing.is_some() {
                return existing;
            }
            let ports: Vec<Value> = sandbox["spec"]["podTemplate"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|ct| ct["ports"].as_array().cloned().unwrap_or_default())
                .map(|p| {
                    let mut port = json!({"port": p["containerPort"], "targetPort": p["containerPort"], "protocol": p["protocol"].as_str().unwrap_or("TCP")});
                    if let Some(n) = p["name"].as_str() {
                        port["name"] = json!(n);
                    }
                    port
                })
                .collect();
            let service = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "labels": {SANDBOX_NAME_HASH: hash}, "ownerReferences": [client::controller_ref(sandbox)]},
                "spec": {"clusterIP": "None", "clusterIPs": ["None"], "selector": {SANDBOX_NAME_HASH: hash}, "ports": ports},
            });
            c.create(SERVICES, ns, service).ok()
        }
        Some(false) => {
            if let Some(svc) = &existing
                && client::controlled_by(svc, sandbox)
            {
                let _ = c.delete(SERVICES, ns, name, "Background", None);
            }
            None
        }
        None => existing,
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, generation: &Value) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message, "observedGeneration": generation})
}

fn ready_condition(sandbox: &Value, pod: Option<&Value>, service: Option<&Value>) -> Value {
    let generation = &sandbox["metadata"]["generation"];
    let suspended = sandbox["spec"]["operatingMode"] == "Suspended";
    let not_ready =
        |reason: &str, message: &str| condition("Ready", "False", reason, message, generation);
    if suspended {
        let message = if pod.is_some() {
            "Sandbox is suspending"
        } else {
            "Sandbox is suspended"
        };
        return not_ready("SandboxSuspended", message);
    }
    let phase = pod.and_then(|p| p["status"]["phase"].as_str());
    match phase {
        Some("Succeeded") => return not_ready("PodSucceeded", "Pod completed successfully"),
        Some("Failed") => return not_ready("PodFailed", "Pod failed"),
        _ => {}
    }
    let mut pod_ready = false;
    let mut message = match (pod, phase) {
        (None, _) => "Pod does not exist".to_string(),
        (Some(p), Some("Running")) => match client::condition(p, "Ready") {
            Some(c) if c["status"] == "True" => {
                if p["status"]["podIPs"].as_array().is_none_or(Vec::is_empty) {
                    "Pod is Ready but has no podIPs yet".into()
                } else {
                    pod_ready = true;
                    "Pod is Ready".into()
                }
            }
            _ => "Pod is Running but not Ready".into(),
        },
        (Some(_), phase) => format!("Pod exists with phase: {}", phase.unwrap_or_default()),
    };
    let service_required = sandbox["spec"]["service"]
        .as_bool()
        .unwrap_or(service.is_some());
    let mut service_ready = true;
    if service_required {
        service_ready = service.is_some();
        message.push_str(if service_ready {
            "; Service Exists"
        } else {
            "; Service does not exist"
        });
    }
    if pod_ready && service_ready {
        condition("Ready", "True", "DependenciesReady", &message, generation)
    } else {
        not_ready("DependenciesNotReady", &message)
    }
}

fn conditions(sandbox: &Value, pod: Option<&Value>, service: Option<&Value>) -> Vec<Value> {
    let generation = &sandbox["metadata"]["generation"];
    let mut out = vec![ready_condition(sandbox, pod, service)];
    let suspending = sandbox["spec"]["operatingMode"] == "Suspended";
    out.push(match (suspending, pod) {
        (false, _) => condition(
            "Suspended",
            "False",
            "NotSuspended",
            "Sandbox is not suspended",
            generation,
        ),
        (true, None) => condition(
            "Suspended",
            "True",
            "PodTerminated",
            "Pod has been terminated. Sandbox is suspended",
            generation,
        ),
        (true, Some(_)) => condition(
            "Suspended",
            "False",
            "PodTerminating",
            "Pod is terminating. Sandbox is suspending",
            generation,
        ),
    });
    if let Some(p) = pod {
        out.push(match client::condition(p, "PodScheduled") {
            Some(pc) => {
                let status = pc["status"].as_str().unwrap_or("Unknown");
                let reason = pc["reason"].as_str().filter(|r| !r.is_empty()).unwrap_or(
                    if status == "True" {
                        "PodScheduled"
                    } else {
                        "PodSchedulingUnknown"
                    },
                );
                condition(
                    "PodScheduled",
                    status,
                    reason,
                    pc["message"].as_str().unwrap_or_default(),
                    generation,
                )
            }
            None => condition(
                "PodScheduled",
                "Unknown",
                "PodSchedulingUnknown",
                "Pod has not reported a PodScheduled condition yet",
                generation,
            ),
        });
        match p["status"]["phase"].as_str() {
            Some("Succeeded") => out.push(condition(
                "Finished",
                "True",
                "PodSucceeded",
                "Pod completed successfully",
                generation,
            )),
            Some("Failed") => out.push(condition(
                "Finished",
                "True",
                "PodFailed",
                "Pod failed",
                generation,
            )),
            _ => {}
        }
    }
    out
}

fn write_status(c: &Client<'_>, sandbox: &Value, status: Value) {
    if sandbox["status"] == status {
        return;
    }
    let (ns, name) = client::names(sandbox);
    // A merge patch: fields the new status lacks are removed explicitly.
    let mut patch = status;
    if let (Some(old), Some(new)) = (sandbox["status"].as_object(), patch.as_object_mut()) {
        for k in old.keys() {
            if !new.contains_key(k) {
                new.insert(k.clone(), Value::Null);
            }
        }
    }
    if let Err(error) = c.merge_patch(SANDBOXES, &ns, &name, &json!({"status": patch}), true) {
        tracing::debug!(%error, "writing sandbox status");
    }
}

fn expire(c: &Client<'_>, sandbox: &Value, ns: &str, name: &str) -> Requeue {
    let generation = &sandbox["metadata"]["generation"];
    let already =
        client::condition(sandbox, "Ready").is_some_and(|r| r["reason"] == "SandboxExpired");
    if !already {
        let mut status = sandbox["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
        conds.retain(|c| c["type"] != "Ready");
        conds.insert(
            0,
            condition(
                "Ready",
                "False",
                "SandboxExpired",
                "Sandbox has expired",
                generation,
            ),
        );
        status["conditions"] = client::merge_conditions(sandbox["status"].get("conditions"), conds);
        write_status(c, sandbox, status);
        return Some(std::time::Duration::ZERO);
    }
    let pod_name = client::annotation(sandbox, names::POD_NAME)
        .unwrap_or(name)
        .to_string();
    if let Some(pod) = c.get(PODS, ns, &pod_name)
        && client::controlled_by(&pod, sandbox)
    {
        let _ = c.delete(PODS, ns, &pod_name, "Background", None);
    }
    if let Some(svc) = c.get(SERVICES, ns, name)
        && client::controlled_by(&svc, sandbox)
    {
        let _ = c.delete(SERVICES, ns, name, "Background", None);
    }
    if sandbox["spec"]["shutdownPolicy"] == "Delete" {
        let _ = c.delete(
            SANDBOXES,
            ns,
            name,
            "Background",
            sandbox["metadata"]["uid"].as_str(),
        );
    } else {
        let conds = sandbox["status"]["conditions"].clone();
        write_status(c, sandbox, json!({"conditions": conds}));
    }
    None
}

/// Reconcile one Sandbox.
pub(super) fn reconcile(c: &Client<'_>, ns: &str, name: &str) -> Requeue {
    let sandbox = (*c.get(SANDBOXES, ns, name)?).clone();
    if client::deleting(&sandbox) {
        return None;
    }
    let mut requeue = None;
    if let Some(at) = time_field(&sandbox["spec"]["shutdownTime"]) {
        if at <= SystemTime::now() {
            return expire(c, &sandbox, ns, name);
        }
        requeue = Some(until(at));
    }
    let hash = names::name_hash(name);
    ensure_pvcs(c, &sandbox, ns, name, &hash);
    let pod_name = client::annotation(&sandbox, names::POD_NAME)
        .unwrap_or(name)
        .to_string();
    let found = c
        .get(PODS, ns, &pod_name)
        .filter(|p| client::controlled_by(p, &sandbox))
        .map(|p| (*p).clone());
    let suspended = sandbox["spec"]["operatingMode"] == "Suspended";
    let pod = match found {
        Some(_) if suspended => {
            let _ = c.delete(PODS, ns, &pod_name, "Background", None);
            set_pod_name_annotation(c, ns, name, None);
            c.get(PODS, ns, &pod_name).map(|p| (*p).clone())
        }
        Some(pod) => {
            patch_drift(c, &sandbox, &pod, &hash);
            Some(pod)
        }
        None if suspended => None,
        None => match c.create(PODS, ns, new_pod(&sandbox, name, &hash)) {
            Ok(pod) => {
                set_pod_name_annotation(c, ns, name, Some(name));
                Some(pod)
            }
            Err(error) => {
                tracing::debug!(%error, sandbox = name, "creating the pod");
                c.get(PODS, ns, name).map(|p| (*p).clone())
            }
        },
    };
    let service = ensure_service(c, &sandbox, ns, name, &hash);
    // The writes above may have changed the Sandbox (its pod-name annotation).
    let sandbox = c.get(SANDBOXES, ns, name).map_or(sandbox, |s| (*s).clone());
    let mut status = json!({
        "conditions": client::merge_conditions(sandbox["status"].get("conditions"), conditions(&sandbox, pod.as_ref(), service.as_ref())),
        "selector": format!("{SANDBOX_NAME_HASH}={hash}"),
    });
    if let Some(p) = &pod {
        let ips: Vec<Value> = p["status"]["podIPs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ip| ip["ip"].as_str().map(|s| json!(s)))
            .collect();
        if !ips.is_empty() {
            status["podIPs"] = Value::Array(ips);
        }
        if let Some(node) = p["spec"]["nodeName"].as_str() {
            status["nodeName"] = json!(node);
        }
    }
    if service.is_some() {
        status["service"] = json!(name);
        status["serviceFQDN"] = json!(format!("{name}.{ns}.svc.{CLUSTER_DOMAIN}"));
    }
    write_status(c, &sandbox, status);
    requeue
}
