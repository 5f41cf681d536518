//! The objects the driver writes: a template per (run, image), its warm
//! pool (named like it, so a pool is keyed by template and image), and
//! claims. Run labels go on every object and into the pod template, where
//! they reach the pods (the controller strips only `agents.x-k8s.io/*`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, LocalObjectReference, PodAffinity, PodAffinityTerm, PodSpec,
    PodTemplateSpec, ResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::api::networking::v1::{NetworkPolicyIngressRule, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use sandfleet_core::{LABEL_RUN_ID, Labels, TemplateSpec};

use crate::config::K8sConfig;
use crate::resources::{
    Lifecycle, NameRef, SandboxClaim, SandboxClaimSpec, SandboxNetworkPolicy, SandboxTemplate,
    SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
};

/// The container every sandbox pod runs commands in.
pub(crate) const CONTAINER: &str = "sandbox";

/// Label on a template and its pool naming the image (hashed into the
/// name, so kept readable here for operators).
pub(crate) const LABEL_TEMPLATE: &str = "sandfleet.io/template";

/// The template for `spec` in `namespace`.
///
/// # Errors
///
/// When `pod_spec` in the configuration does not merge into a pod spec.
pub(crate) fn template(
    spec: &TemplateSpec,
    config: &K8sConfig,
    namespace: &str,
) -> Result<SandboxTemplate, String> {
    let mut labels = spec.labels.clone();
    labels.insert(LABEL_TEMPLATE.into(), spec.name.clone());
    let pod = pod_template(spec, config, &labels)?;
    let mut template = SandboxTemplate::new(
        &spec.name,
        SandboxTemplateSpec {
            pod_template: pod,
            service: config.service.then_some(true),
            network_policy: (!spec.network).then(offline),
        },
    );
    template.metadata.namespace = Some(namespace.to_string());
    template.metadata.labels = Some(labels);
    Ok(template)
}

/// The rules of sandboxes that must not reach the network: no egress at
/// all; in, as by default, only the sandbox router (namespace
/// `agent-sandbox-system`, label `app=sandbox-router`).
fn offline() -> SandboxNetworkPolicy {
    let selector = |key: &str, value: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..LabelSelector::default()
    };
    SandboxNetworkPolicy {
        ingress: vec![NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(selector(
                    "kubernetes.io/metadata.name",
                    "agent-sandbox-system",
                )),
                pod_selector: Some(selector("app", "sandbox-router")),
                ..NetworkPolicyPeer::default()
            }]),
            ..NetworkPolicyIngressRule::default()
        }],
        egress: Vec::new(),
    }
}

fn pod_template(
    spec: &TemplateSpec,
    config: &K8sConfig,
    labels: &Labels,
) -> Result<PodTemplateSpec, String> {
    let requests = BTreeMap::from([
        ("cpu".to_string(), Quantity(format!("{}m", spec.cpu_milli))),
        (
            "memory".to_string(),
            Quantity(format!("{}Mi", spec.memory_mib)),
        ),
        (
            "ephemeral-storage".to_string(),
            Quantity(format!("{}Mi", spec.disk_mib)),
        ),
    ]);
    let limit = |key: &str, configured: &Option<String>| {
        (
            key.to_string(),
            configured
                .clone()
                .map(Quantity)
                .unwrap_or_else(|| requests[key].clone()),
        )
    };
    let limits = BTreeMap::from([
        limit("cpu", &config.limits.cpu),
        limit("memory", &config.limits.memory),
        limit("ephemeral-storage", &config.limits.ephemeral_storage),
    ]);
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        command: Some(config.entrypoint.clone()),
        image_pull_policy: config.image_pull_policy.clone(),
        env: (!spec.env.is_empty()).then(|| {
            spec.env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: Some(value.clone()),
                    ..EnvVar::default()
                })
                .collect()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: Some(limits),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    let run_selector = spec.labels.get(LABEL_RUN_ID).map(|run| LabelSelector {
        match_labels: Some(BTreeMap::from([(LABEL_RUN_ID.to_string(), run.clone())])),
        ..LabelSelector::default()
    });
    let affinity = match run_selector {
        Some(selector) if config.colocate => Some(Affinity {
            pod_affinity: Some(PodAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(selector),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                ..PodAffinity::default()
            }),
            ..Affinity::default()
        }),
        _ => None,
    };
    let pod = PodSpec {
        containers: vec![container],
        automount_service_account_token: Some(false),
        runtime_class_name: config.runtime_class.clone(),
        node_selector: (!config.node_selector.is_empty()).then(|| config.node_selector.clone()),
        image_pull_secrets: config
            .pull_secret
            .as_ref()
            .map(|name| vec![LocalObjectReference { name: name.clone() }]),
        affinity,
        ..PodSpec::default()
    };
    Ok(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some({
            let mut pod = merge_pod_spec(pod, &config.pod_spec)?;
            if let Some(toolbox) = &config.toolbox {
                crate::toolbox::equip(&mut pod, toolbox, config.image_pull_policy.as_ref());
            }
            pod
        }),
    })
}

/// `extra` (the configuration's `pod_spec`) merged over `pod`: its keys
/// replace the driver's, as in a JSON merge patch.
fn merge_pod_spec(
    pod: PodSpec,
    extra: &BTreeMap<String, serde_json::Value>,
) -> Result<PodSpec, String> {
    if extra.is_empty() {
        return Ok(pod);
    }
    let mut value = serde_json::to_value(pod).map_err(|e| e.to_string())?;
    let object = value.as_object_mut().expect("a pod spec is an object");
    for (key, extra) in extra {
        object.insert(key.clone(), extra.clone());
    }
    serde_json::from_value(value).map_err(|e| format!("pod_spec does not make a pod spec: {e}"))
}

/// The warm pool of `template`, named like it.
pub(crate) fn pool(
    template: &str,
    namespace: &str,
    replicas: u32,
    labels: &Labels,
) -> SandboxWarmPool {
    let mut labels = labels.clone();
    labels.insert(LABEL_TEMPLATE.into(), template.to_string());
    let mut pool = SandboxWarmPool::new(
        template,
        SandboxWarmPoolSpec {
            replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
            sandbox_template_ref: NameRef {
                name: template.to_string(),
            },
        },
    );
    pool.metadata.namespace = Some(namespace.to_string());
    pool.metadata.labels = Some(labels);
    pool
}

/// A claim named `name` on the pool of `template`, expiring at
/// `shutdown_time` (RFC 3339), deleted by the controller then.
pub(crate) fn claim(
    name: &str,
    template: &str,
    namespace: &str,
    labels: &Labels,
    shutdown_time: String,
) -> SandboxClaim {
    let mut claim = SandboxClaim::new(
        name,
        SandboxClaimSpec {
            warm_pool_ref: NameRef {
                name: template.to_string(),
            },
            lifecycle: Some(Lifecycle {
                shutdown_time: Some(shutdown_time),
                shutdown_policy: Some("Delete".into()),
            }),
        },
    );
    claim.metadata.namespace = Some(namespace.to_string());
    claim.metadata.labels = Some(labels.clone());
    claim
}

/// agent-sandbox's `NameHash`: FNV-1a, 32 bits, in 8 hex digits. The
/// controller labels objects with it, and it makes short stable names.
pub(crate) fn name_hash(name: &str) -> String {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:08x}")
}

/// An RFC 3339 time `after` from now, to the second.
pub(crate) fn time_after(after: std::time::Duration) -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(
            i64::try_from(after.as_secs()).unwrap_or(i64::MAX / 2),
        ))
        .unwrap_or(jiff::Timestamp::MAX);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandfleet_core::RunId;

    fn spec() -> TemplateSpec {
        TemplateSpec {
            name: "sf-calc-1234".into(),
            image: "calc".into(),
            cpu_milli: 500,
            memory_mib: 256,
            disk_mib: 1024,
            network: false,
            env: BTreeMap::from([("A".into(), "1".into())]),
            labels: RunId::new("r1").unwrap().labels(),
        }
    }

    #[test]
    fn the_template_carries_run_labels_into_its_pods_and_splits_requests_from_limits() {
        let config = K8sConfig {
            limits: crate::config::Limits {
                memory: Some("1Gi".into()),
                ..Default::default()
            },
            colocate: true,
            node_selector: BTreeMap::from([("pool".into(), "sb".into())]),
            pod_spec: BTreeMap::from([("priorityClassName".into(), "batch".into())]),
            ..K8sConfig::default()
        };
        let template = template(&spec(), &config, "ns").unwrap();
        let value = serde_json::to_value(&template).unwrap();
        assert_eq!(value["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
        assert_eq!(value["metadata"]["labels"][LABEL_RUN_ID], "r1");
        let pod = &value["spec"]["podTemplate"];
        assert_eq!(pod["metadata"]["labels"][LABEL_RUN_ID], "r1");
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["resources"]["requests"]["memory"], "256Mi");
        assert_eq!(container["resources"]["limits"]["memory"], "1Gi");
        assert_eq!(container["resources"]["limits"]["cpu"], "500m");
        assert_eq!(pod["spec"]["priorityClassName"], "batch");
        assert_eq!(pod["spec"]["nodeSelector"]["pool"], "sb");
        let affinity = &pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(
            affinity["podAffinityTerm"]["labelSelector"]["matchLabels"][LABEL_RUN_ID],
            "r1"
        );
        // Nothing the driver does not own is sent (server-side apply would
        // take ownership of it).
        assert!(value["spec"].get("service").is_none(), "{value}");
        // No network: nothing out, in from the router only.
        assert_eq!(
            value["spec"]["networkPolicy"],
            serde_json::json!({"ingress": [{"from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
                "podSelector": {"matchLabels": {"app": "sandbox-router"}},
            }]}]})
        );
        let online = TemplateSpec {
            network: true,
            ..spec()
        };
        let value = serde_json::to_value(super::template(&online, &config, "ns").unwrap()).unwrap();
        assert!(value["spec"].get("networkPolicy").is_none(), "{value}");
        let bad = K8sConfig {
            pod_spec: BTreeMap::from([("nodeSelector".into(), "nope".into())]),
            ..K8sConfig::default()
        };
        assert!(
            super::template(&spec(), &bad, "ns")
                .unwrap_err()
                .starts_with("pod_spec")
        );
    }

    #[test]
    fn name_hash_is_fnv1a_32_in_eight_hex_digits() {
        // The offset basis, and FNV-1a's published vectors.
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("foobar"), "bf9cf968");
    }

    #[test]
    fn claims_name_their_pool_and_expire_with_delete() {
        let claim = claim(
            "c1",
            "sf-calc-1234",
            "ns",
            &spec().labels,
            time_after(std::time::Duration::from_secs(60)),
        );
        let value = serde_json::to_value(&claim).unwrap();
        assert_eq!(value["spec"]["warmPoolRef"]["name"], "sf-calc-1234");
        assert_eq!(value["spec"]["lifecycle"]["shutdownPolicy"], "Delete");
        let time = value["spec"]["lifecycle"]["shutdownTime"].as_str().unwrap();
        assert!(time.ends_with('Z') && time.len() == 20, "{time}");
        let pool = pool("sf-calc-1234", "ns", 3, &spec().labels);
        let value = serde_json::to_value(&pool).unwrap();
        assert_eq!(value["spec"]["replicas"], 3);
        assert_eq!(value["spec"]["sandboxTemplateRef"]["name"], "sf-calc-1234");
    }
}
