//! What the API server fills in on create, and a CRD's status.

use serde_json::{Value, json};

use crate::state::State;

use super::Target;

/// Built-in defaults the API server fills in on create. A container's
/// `imagePullPolicy` is Kubernetes' default (`Always` for `:latest` or no tag, else
/// `IfNotPresent`), except for an image mapped to a directory, which is only ever on
/// the nodes (as an image loaded into a kind cluster is): `IfNotPresent`.
pub(super) fn defaults(state: &State, target: &Target, object: &mut Value) {
    let r = &target.resource;
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => {
            let spec = &mut object["spec"];
            for (k, v) in [
                ("restartPolicy", json!("Always")),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("serviceAccountName", json!("default")),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = v;
                }
            }
            for field in ["initContainers", "containers"] {
                for c in spec[field].as_array_mut().into_iter().flatten() {
                    if c.get("imagePullPolicy").is_none() {
                        let image = c["image"].as_str().unwrap_or_default();
                        let policy = if state.runtime.is_directory(image) {
                            "IfNotPresent".to_string()
                        } else {
                            crate::kubelet::default_pull_policy(image)
                        };
                        c["imagePullPolicy"] = json!(policy);
                    }
                    if c.get("terminationMessagePath").is_none() {
                        c["terminationMessagePath"] = json!("/dev/termination-log");
                    }
                }
            }
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("", "namespaces") => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
            let name = object["metadata"]["name"].clone();
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
        }
        ("", "services") => {
            if object["spec"].get("type").is_none() {
                object["spec"]["type"] = json!("ClusterIP");
            }
            if object["spec"].get("clusterIP").is_none() {
                // Loopback only: nothing may ever send traffic to another range.
                let n = uuid::Uuid::new_v4().as_bytes()[0..2].to_vec();
                let ip = format!("127.43.{}.{}", n[0], n[1].max(1));
                object["spec"]["clusterIP"] = json!(ip);
                object["spec"]["clusterIPs"] = json!([ip]);
            }
            object["status"] = json!({"loadBalancer": {}});
        }
        ("", "persistentvolumeclaims") => {
            object["status"] = json!({"phase": "Pending"});
        }
        ("", "secrets") => {
            if object["type"].as_str().is_none_or(str::is_empty) {
                object["type"] = json!("Opaque");
            }
            // Write-only: merged into data, never stored or served.
            if let Some(Value::Object(strings)) =
                object.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                use base64::Engine;
                let engine = base64::engine::general_purpose::STANDARD;
                for (key, value) in strings {
                    let text = value.as_str().unwrap_or_default();
                    object["data"][key] = json!(engine.encode(text));
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(object),
        _ => {
            if target.has_status()
                && let Some(map) = object.as_object_mut()
            {
                map.remove("status");
            }
        }
    }
}

pub(super) fn crd_status(object: &mut Value) {
    let now = crate::store::now_rfc3339();
    let names = object["spec"]["names"].clone();
    let mut accepted = names;
    if accepted.get("singular").is_none()
        && let Some(kind) = accepted["kind"].as_str()
    {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(kind) = accepted["kind"].as_str()
    {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let stored: Vec<Value> = object["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == json!(true))
        .map(|v| v["name"].clone())
        .collect();
    object["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    });
}
