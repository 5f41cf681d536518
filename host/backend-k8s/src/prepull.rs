//! Pre-pulling a run's images on every node the cluster's node selector
//! matches: per image, one DaemonSet whose pods run it, waited on until
//! every node's pod is ready — the image is then in every node's cache —
//! and deleted.

use std::collections::BTreeMap;
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use sandfleet_core::{LABEL_RUN_ID, RunId};

use crate::config::K8sConfig;
use crate::objects::name_hash;

/// Label naming a pre-pull DaemonSet's pods.
pub(crate) const LABEL_PREPULL: &str = "sandfleet.io/prepull";

/// The DaemonSet that pulls `image` for `run`: its one container runs the
/// image's entrypoint, which a pod must for its node to count as holding it.
pub(crate) fn daemon_set(run: &RunId, image: &str, config: &K8sConfig) -> DaemonSet {
    let name = format!("sf-prepull-{}", name_hash(&format!("{run}/{image}")));
    let mut labels = run.labels();
    labels.insert(LABEL_PREPULL.into(), name.clone());
    let mut pod = PodSpec {
        containers: vec![Container {
            name: "image".into(),
            image: Some(image.to_string()),
            command: Some(config.entrypoint.clone()),
            image_pull_policy: config.image_pull_policy.clone(),
            ..Container::default()
        }],
        automount_service_account_token: Some(false),
        node_selector: (!config.node_selector.is_empty()).then(|| config.node_selector.clone()),
        image_pull_secrets: config.pull_secret.as_ref().map(|name| {
            vec![k8s_openapi::api::core::v1::LocalObjectReference { name: name.clone() }]
        }),
        runtime_class_name: config.runtime_class.clone(),
        termination_grace_period_seconds: Some(0),
        ..PodSpec::default()
    };
    if let Some(toolbox) = &config.toolbox {
        crate::toolbox::equip(&mut pod, toolbox, config.image_pull_policy.as_ref());
    }
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(LABEL_PREPULL.to_string(), name)])),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

/// Why a pre-pull failed.
#[derive(Debug)]
pub(crate) enum PrepullError {
    /// The API server refused a request.
    Api(&'static str, kube::Error),
    /// Nodes still lacked images at the deadline.
    Timeout { ready: i32, nodes: i32 },
}

/// Creates the DaemonSet, waits until its pod on every matching node is
/// ready, and deletes it (also when the wait fails). Returns the nodes.
pub(crate) async fn prepull(
    daemon_sets: Api<DaemonSet>,
    daemon_set: DaemonSet,
    deadline: Instant,
) -> Result<i32, PrepullError> {
    let name = daemon_set.metadata.name.clone().expect("named");
    match daemon_sets
        .create(&PostParams::default(), &daemon_set)
        .await
    {
        Ok(_) => {}
        // Left by a run that stopped mid-pull: it pulls the same images.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(PrepullError::Api("create", error)),
    }
    let waited = wait(&daemon_sets, &name, deadline).await;
    let deleted = daemon_sets.delete(&name, &DeleteParams::background()).await;
    let nodes = waited?;
    match deleted {
        Ok(_) => Ok(nodes),
        Err(error) if crate::errors::is_not_found(&error) => Ok(nodes),
        Err(error) => Err(PrepullError::Api("delete", error)),
    }
}

async fn wait(
    daemon_sets: &Api<DaemonSet>,
    name: &str,
    deadline: Instant,
) -> Result<i32, PrepullError> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(daemon_sets.clone(), config));
    let mut last = (0, -1);
    let done = tokio::time::timeout_at(deadline.into(), async {
        while let Some(event) = events.next().await {
            let (Ok(watcher::Event::Apply(ds)) | Ok(watcher::Event::InitApply(ds))) = event else {
                continue;
            };
            let Some(status) = ds.status else { continue };
            let observed =
                status.observed_generation.unwrap_or(0) >= ds.metadata.generation.unwrap_or(0);
            last = (status.number_ready, status.desired_number_scheduled);
            if observed && status.number_ready >= status.desired_number_scheduled {
                return status.desired_number_scheduled;
            }
        }
        -1
    })
    .await;
    match done {
        Ok(nodes) if nodes >= 0 => Ok(nodes),
        _ => Err(PrepullError::Timeout {
            ready: last.0,
            nodes: last.1.max(0),
        }),
    }
}

/// The label selector of a run's pre-pull DaemonSets.
pub(crate) fn run_selector(run: &RunId) -> String {
    format!("{LABEL_RUN_ID}={},{LABEL_PREPULL}", run.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_image_is_the_container_of_one_pod_per_node_named_by_run_and_image() {
        let run = RunId::new("r1").unwrap();
        let config = K8sConfig {
            node_selector: BTreeMap::from([("pool".into(), "sb".into())]),
            ..K8sConfig::default()
        };
        let value = serde_json::to_value(daemon_set(&run, "a:1", &config)).unwrap();
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["image"], "a:1");
        assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
        assert_eq!(pod["nodeSelector"]["pool"], "sb");
        let other = serde_json::to_value(daemon_set(&run, "b:2", &config)).unwrap();
        assert_ne!(value["metadata"]["name"], other["metadata"]["name"]);
        let name = value["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            value["spec"]["selector"]["matchLabels"][LABEL_PREPULL],
            name
        );
        assert_eq!(value["metadata"]["labels"][LABEL_RUN_ID], "r1");
    }
}
