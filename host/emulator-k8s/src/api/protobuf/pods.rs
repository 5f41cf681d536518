//! Workloads in protobuf: `apps/v1` Deployments (`kubectl create
//! deployment`) and the pod template they carry, by the field numbers of
//! upstream's `apps/v1` and `core/v1` `generated.proto`. The pod fields
//! read are those a workload made by hand or by kubectl sets: containers
//! (image, command, ports, environment, resources, mounts), init
//! containers, the pod's policies, names and selectors, and `emptyDir`
//! volumes.

use std::collections::BTreeMap;

use prost::Message;
use serde_json::{Value, json};

use super::{Fields, LocalObjectReference, ObjectMeta, metadata};

/// `apps/v1.Deployment`; its status is the server's.
#[derive(Clone, PartialEq, Message)]
pub(super) struct Deployment {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<DeploymentSpec>,
}

/// `apps/v1.DeploymentSpec`.
#[derive(Clone, PartialEq, Message)]
struct DeploymentSpec {
    #[prost(int32, optional, tag = "1")]
    replicas: Option<i32>,
    #[prost(message, optional, tag = "2")]
    selector: Option<LabelSelector>,
    #[prost(message, optional, tag = "3")]
    template: Option<PodTemplateSpec>,
    #[prost(message, optional, tag = "4")]
    strategy: Option<DeploymentStrategy>,
    #[prost(int32, optional, tag = "5")]
    min_ready_seconds: Option<i32>,
    #[prost(int32, optional, tag = "6")]
    revision_history_limit: Option<i32>,
    #[prost(bool, optional, tag = "7")]
    paused: Option<bool>,
    #[prost(int32, optional, tag = "9")]
    progress_deadline_seconds: Option<i32>,
}

/// `apps/v1.DeploymentStrategy`.
#[derive(Clone, PartialEq, Message)]
struct DeploymentStrategy {
    #[prost(string, optional, tag = "1")]
    type_: Option<String>,
}

/// `meta/v1.LabelSelector`.
#[derive(Clone, PartialEq, Message)]
struct LabelSelector {
    #[prost(btree_map = "string, string", tag = "1")]
    match_labels: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "2")]
    match_expressions: Vec<LabelSelectorRequirement>,
}

/// `meta/v1.LabelSelectorRequirement`.
#[derive(Clone, PartialEq, Message)]
struct LabelSelectorRequirement {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    operator: Option<String>,
    #[prost(string, repeated, tag = "3")]
    values: Vec<String>,
}

/// `core/v1.PodTemplateSpec`.
#[derive(Clone, PartialEq, Message)]
struct PodTemplateSpec {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<PodSpec>,
}

/// `core/v1.PodSpec`.
#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(message, repeated, tag = "1")]
    volumes: Vec<Volume>,
    #[prost(message, repeated, tag = "2")]
    containers: Vec<Container>,
    #[prost(string, optional, tag = "3")]
    restart_policy: Option<String>,
    #[prost(int64, optional, tag = "4")]
    termination_grace_period_seconds: Option<i64>,
    #[prost(int64, optional, tag = "5")]
    active_deadline_seconds: Option<i64>,
    #[prost(string, optional, tag = "6")]
    dns_policy: Option<String>,
    #[prost(btree_map = "string, string", tag = "7")]
    node_selector: BTreeMap<String, String>,
    #[prost(string, optional, tag = "8")]
    service_account_name: Option<String>,
    #[prost(string, optional, tag = "10")]
    node_name: Option<String>,
    #[prost(bool, optional, tag = "11")]
    host_network: Option<bool>,
    #[prost(bool, optional, tag = "12")]
    host_pid: Option<bool>,
    #[prost(bool, optional, tag = "13")]
    host_ipc: Option<bool>,
    #[prost(message, repeated, tag = "15")]
    image_pull_secrets: Vec<LocalObjectReference>,
    #[prost(string, optional, tag = "16")]
    hostname: Option<String>,
    #[prost(string, optional, tag = "17")]
    subdomain: Option<String>,
    #[prost(string, optional, tag = "19")]
    scheduler_name: Option<String>,
    #[prost(message, repeated, tag = "20")]
    init_containers: Vec<Container>,
    #[prost(bool, optional, tag = "21")]
    automount_service_account_token: Option<bool>,
    #[prost(string, optional, tag = "24")]
    priority_class_name: Option<String>,
    #[prost(string, optional, tag = "29")]
    runtime_class_name: Option<String>,
    #[prost(bool, optional, tag = "30")]
    enable_service_links: Option<bool>,
}

/// `core/v1.Volume`: its name and source, of which `emptyDir` is read.
#[derive(Clone, PartialEq, Message)]
struct Volume {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(message, optional, tag = "2")]
    source: Option<VolumeSource>,
}

/// `core/v1.VolumeSource`.
#[derive(Clone, PartialEq, Message)]
struct VolumeSource {
    #[prost(message, optional, tag = "2")]
    empty_dir: Option<EmptyDirVolumeSource>,
}

/// `core/v1.EmptyDirVolumeSource`.
#[derive(Clone, PartialEq, Message)]
struct EmptyDirVolumeSource {
    #[prost(string, optional, tag = "1")]
    medium: Option<String>,
    #[prost(message, optional, tag = "2")]
    size_limit: Option<Quantity>,
}

/// `core/v1.Container`.
#[derive(Clone, PartialEq, Message)]
struct Container {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    image: Option<String>,
    #[prost(string, repeated, tag = "3")]
    command: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    args: Vec<String>,
    #[prost(string, optional, tag = "5")]
    working_dir: Option<String>,
    #[prost(message, repeated, tag = "6")]
    ports: Vec<ContainerPort>,
    #[prost(message, repeated, tag = "7")]
    env: Vec<EnvVar>,
    #[prost(message, optional, tag = "8")]
    resources: Option<ResourceRequirements>,
    #[prost(message, repeated, tag = "9")]
    volume_mounts: Vec<VolumeMount>,
    #[prost(string, optional, tag = "13")]
    termination_message_path: Option<String>,
    #[prost(string, optional, tag = "14")]
    image_pull_policy: Option<String>,
    #[prost(bool, optional, tag = "16")]
    stdin: Option<bool>,
    #[prost(bool, optional, tag = "17")]
    stdin_once: Option<bool>,
    #[prost(bool, optional, tag = "18")]
    tty: Option<bool>,
    #[prost(string, optional, tag = "20")]
    termination_message_policy: Option<String>,
}

/// `core/v1.ContainerPort`.
#[derive(Clone, PartialEq, Message)]
struct ContainerPort {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(int32, optional, tag = "2")]
    host_port: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    container_port: Option<i32>,
    #[prost(string, optional, tag = "4")]
    protocol: Option<String>,
    #[prost(string, optional, tag = "5")]
    host_ip: Option<String>,
}

/// `core/v1.EnvVar` with a literal value.
#[derive(Clone, PartialEq, Message)]
struct EnvVar {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
}

/// `core/v1.ResourceRequirements`.
#[derive(Clone, PartialEq, Message)]
struct ResourceRequirements {
    #[prost(btree_map = "string, message", tag = "1")]
    limits: BTreeMap<String, Quantity>,
    #[prost(btree_map = "string, message", tag = "2")]
    requests: BTreeMap<String, Quantity>,
}

/// `api/resource.Quantity`: its canonical string.
#[derive(Clone, PartialEq, Message)]
struct Quantity {
    #[prost(string, optional, tag = "1")]
    string: Option<String>,
}

/// `core/v1.VolumeMount`.
#[derive(Clone, PartialEq, Message)]
struct VolumeMount {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(bool, optional, tag = "2")]
    read_only: Option<bool>,
    #[prost(string, optional, tag = "3")]
    mount_path: Option<String>,
    #[prost(string, optional, tag = "4")]
    sub_path: Option<String>,
}

impl Deployment {
    /// The Deployment as JSON (`apiVersion` and `kind` set by the caller).
    ///
    /// # Errors
    /// A volume of another source than `emptyDir`, named: this decoder does
    /// not read it, and storing the pod without it would change it.
    pub(super) fn into_json(self) -> Result<Value, String> {
        let spec = self.spec.unwrap_or_default();
        let spec = Fields::default()
            .value("replicas", spec.replicas.map(|r| json!(r)))
            .value("selector", spec.selector.map(label_selector))
            .value("template", spec.template.map(pod_template).transpose()?)
            .value(
                "strategy",
                spec.strategy
                    .map(|s| Fields::default().text("type", s.type_).into()),
            )
            .number("minReadySeconds", spec.min_ready_seconds)
            .value(
                "revisionHistoryLimit",
                spec.revision_history_limit.map(|r| json!(r)),
            )
            .truth("paused", spec.paused)
            .value(
                "progressDeadlineSeconds",
                spec.progress_deadline_seconds.map(|s| json!(s)),
            );
        Ok(json!({
            "metadata": metadata(self.metadata.unwrap_or_default()),
            "spec": Value::from(spec),
        }))
    }
}

fn label_selector(selector: LabelSelector) -> Value {
    let expressions: Vec<Value> = selector
        .match_expressions
        .into_iter()
        .map(|e| {
            Fields::default()
                .text("key", e.key)
                .text("operator", e.operator)
                .texts("values", e.values)
                .into()
        })
        .collect();
    Fields::default()
        .map("matchLabels", selector.match_labels)
        .list("matchExpressions", expressions)
        .into()
}

fn pod_template(template: PodTemplateSpec) -> Result<Value, String> {
    let mut meta = metadata(template.metadata.unwrap_or_default());
    // A zero `metav1.Time` is not omitted: Go writes it as null, as the API
    // server shows a template's metadata.
    meta["creationTimestamp"] = Value::Null;
    let spec = pod_spec(template.spec.unwrap_or_default())?;
    Ok(json!({"metadata": meta, "spec": spec}))
}

fn pod_spec(spec: PodSpec) -> Result<Value, String> {
    let volumes = spec
        .volumes
        .into_iter()
        .map(|volume| {
            let Some(empty_dir) = volume.source.and_then(|s| s.empty_dir) else {
                return Err(format!(
                    "volume `{}`: only emptyDir volumes are decoded from protobuf",
                    volume.name.unwrap_or_default()
                ));
            };
            let source = Fields::default()
                .text("medium", empty_dir.medium)
                .text("sizeLimit", empty_dir.size_limit.and_then(|q| q.string));
            Ok(Fields::default()
                .text("name", volume.name)
                .value("emptyDir", Some(source.into()))
                .into())
        })
        .collect::<Result<Vec<Value>, String>>()?;
    let secrets: Vec<Value> = spec
        .image_pull_secrets
        .into_iter()
        .map(|r| Fields::default().text("name", r.name).into())
        .collect();
    Ok(Fields::default()
        .list("volumes", volumes)
        .list(
            "initContainers",
            spec.init_containers.into_iter().map(container).collect(),
        )
        // Not `omitempty`: a pod spec always has its containers.
        .value(
            "containers",
            Some(json!(
                spec.containers
                    .into_iter()
                    .map(container)
                    .collect::<Vec<_>>()
            )),
        )
        .text("restartPolicy", spec.restart_policy)
        .value(
            "terminationGracePeriodSeconds",
            spec.termination_grace_period_seconds.map(|s| json!(s)),
        )
        .value(
            "activeDeadlineSeconds",
            spec.active_deadline_seconds.map(|s| json!(s)),
        )
        .text("dnsPolicy", spec.dns_policy)
        .map("nodeSelector", spec.node_selector)
        .text("serviceAccountName", spec.service_account_name)
        .text("nodeName", spec.node_name)
        .truth("hostNetwork", spec.host_network)
        .truth("hostPID", spec.host_pid)
        .truth("hostIPC", spec.host_ipc)
        .list("imagePullSecrets", secrets)
        .text("hostname", spec.hostname)
        .text("subdomain", spec.subdomain)
        .text("schedulerName", spec.scheduler_name)
        .flag(
            "automountServiceAccountToken",
            spec.automount_service_account_token,
        )
        .text("priorityClassName", spec.priority_class_name)
        .text("runtimeClassName", spec.runtime_class_name)
        .flag("enableServiceLinks", spec.enable_service_links)
        .into())
}

fn container(c: Container) -> Value {
    let ports: Vec<Value> = c
        .ports
        .into_iter()
        .map(|p| {
            Fields::default()
                .text("name", p.name)
                .number("hostPort", p.host_port)
                // Not `omitempty`: a port always has its number.
                .value("containerPort", Some(json!(p.container_port.unwrap_or(0))))
                .text("protocol", p.protocol)
                .text("hostIP", p.host_ip)
                .into()
        })
        .collect();
    let env: Vec<Value> = c
        .env
        .into_iter()
        .map(|e| {
            Fields::default()
                .text("name", e.name)
                .text("value", e.value)
                .into()
        })
        .collect();
    let mounts: Vec<Value> = c
        .volume_mounts
        .into_iter()
        .map(|m| {
            Fields::default()
                .text("name", m.name)
                .truth("readOnly", m.read_only)
                .text("mountPath", m.mount_path)
                .text("subPath", m.sub_path)
                .into()
        })
        .collect();
    let quantities = |map: BTreeMap<String, Quantity>| {
        let map: serde_json::Map<String, Value> = map
            .into_iter()
            .filter_map(|(name, q)| Some((name, json!(q.string?))))
            .collect();
        (!map.is_empty()).then_some(Value::Object(map))
    };
    let resources = c.resources.unwrap_or_default();
    // Not `omitempty`: a container always has its (perhaps empty) resources.
    let resources = Fields::default()
        .value("limits", quantities(resources.limits))
        .value("requests", quantities(resources.requests));
    Fields::default()
        .text("name", c.name)
        .text("image", c.image)
        .texts("command", c.command)
        .texts("args", c.args)
        .text("workingDir", c.working_dir)
        .list("ports", ports)
        .list("env", env)
        .value("resources", Some(resources.into()))
        .list("volumeMounts", mounts)
        .text("terminationMessagePath", c.termination_message_path)
        .text("imagePullPolicy", c.image_pull_policy)
        .truth("stdin", c.stdin)
        .truth("stdinOnce", c.stdin_once)
        .truth("tty", c.tty)
        .text("terminationMessagePolicy", c.termination_message_policy)
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantity(text: &str) -> Quantity {
        Quantity {
            string: Some(text.into()),
        }
    }

    #[test]
    fn a_pod_template_keeps_what_go_would_write_and_drops_protobufs_zero_values() {
        let tools = Container {
            name: Some("tools".into()),
            image: Some("busybox".into()),
            command: vec!["cp".into(), "/bin/busybox".into(), "/t/".into()],
            resources: Some(ResourceRequirements::default()),
            volume_mounts: vec![VolumeMount {
                name: Some("t".into()),
                mount_path: Some("/t".into()),
                read_only: Some(false),
                sub_path: Some(String::new()),
            }],
            stdin: Some(false),
            ..Container::default()
        };
        let main = Container {
            name: Some("main".into()),
            image: Some("task".into()),
            env: vec![EnvVar {
                name: Some("MODE".into()),
                value: Some("fast".into()),
            }],
            resources: Some(ResourceRequirements {
                limits: BTreeMap::from([("ephemeral-storage".into(), quantity("1Gi"))]),
                requests: BTreeMap::from([("cpu".into(), quantity("500m"))]),
            }),
            volume_mounts: vec![VolumeMount {
                name: Some("t".into()),
                mount_path: Some("/t".into()),
                read_only: Some(true),
                sub_path: None,
            }],
            termination_message_path: Some(String::new()),
            ..Container::default()
        };
        let deployment = Deployment {
            metadata: None,
            spec: Some(DeploymentSpec {
                replicas: Some(0),
                template: Some(PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        volumes: vec![Volume {
                            name: Some("t".into()),
                            source: Some(VolumeSource {
                                empty_dir: Some(EmptyDirVolumeSource::default()),
                            }),
                        }],
                        init_containers: vec![tools],
                        containers: vec![main],
                        host_network: Some(false),
                        automount_service_account_token: Some(false),
                        node_selector: BTreeMap::from([("pool".into(), "a".into())]),
                        ..PodSpec::default()
                    }),
                }),
                paused: Some(false),
                ..DeploymentSpec::default()
            }),
        };
        let mut other_source = deployment.clone();
        let template = other_source.spec.as_mut().unwrap().template.as_mut();
        template
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .volumes
            .push(Volume {
                name: Some("claim".into()),
                source: Some(VolumeSource::default()),
            });
        assert_eq!(
            other_source.into_json().unwrap_err(),
            "volume `claim`: only emptyDir volumes are decoded from protobuf"
        );
        let decoded = Deployment::decode(deployment.encode_to_vec().as_slice())
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(
            decoded["spec"],
            json!({
                // A `*int32`: zero is kept.
                "replicas": 0,
                "template": {"metadata": {"creationTimestamp": null}, "spec": {
                    "volumes": [{"name": "t", "emptyDir": {}}],
                    "initContainers": [{"name": "tools", "image": "busybox",
                        "command": ["cp", "/bin/busybox", "/t/"], "resources": {},
                        "volumeMounts": [{"name": "t", "mountPath": "/t"}]}],
                    "containers": [{"name": "main", "image": "task",
                        "env": [{"name": "MODE", "value": "fast"}],
                        "resources": {"limits": {"ephemeral-storage": "1Gi"}, "requests": {"cpu": "500m"}},
                        "volumeMounts": [{"name": "t", "readOnly": true, "mountPath": "/t"}]}],
                    "nodeSelector": {"pool": "a"},
                    "automountServiceAccountToken": false,
                }},
            })
        );
    }
}
