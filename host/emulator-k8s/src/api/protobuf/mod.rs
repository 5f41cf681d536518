//! Bodies in `application/vnd.kubernetes.protobuf`, as kubectl's typed
//! clients send built-in kinds (`kubectl create namespace`): the 4-byte
//! magic `k8s\0`, then a `runtime.Unknown` envelope whose `raw` holds the
//! object. The messages below are the fields of upstream's
//! `generated.proto` files the emulator reads, by their field numbers;
//! the decoded object becomes the JSON the rest of the server reads.
//! A kind without messages here is a 415 naming those it decodes.

mod pods;

use std::collections::BTreeMap;

use prost::Message;
use serde_json::{Value, json};

use crate::status::{ApiError, ApiResult};

/// The media type.
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// `k8s.io/apimachinery/pkg/runtime.Unknown`.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
}

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

/// `meta/v1.ObjectMeta`: what a client may set on a create.
#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

/// `core/v1.Namespace`.
#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

/// `core/v1.NamespaceSpec`.
#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

/// `core/v1.ConfigMap`.
#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

/// `core/v1.Secret`.
#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    type_: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

/// `core/v1.ServiceAccount` (`kubectl create serviceaccount`).
#[derive(Clone, PartialEq, Message)]
struct ServiceAccount {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    secrets: Vec<ObjectReference>,
    #[prost(message, repeated, tag = "3")]
    image_pull_secrets: Vec<LocalObjectReference>,
    #[prost(bool, optional, tag = "4")]
    automount_service_account_token: Option<bool>,
}

/// `core/v1.ObjectReference`.
#[derive(Clone, PartialEq, Message)]
struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "7")]
    field_path: Option<String>,
}

/// `core/v1.LocalObjectReference`.
#[derive(Clone, PartialEq, Message)]
struct LocalObjectReference {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
}

/// `core/v1.Service` (`kubectl create service`); its status is the
/// server's.
#[derive(Clone, PartialEq, Message)]
struct Service {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<ServiceSpec>,
}

/// `core/v1.ServiceSpec`.
#[derive(Clone, PartialEq, Message)]
struct ServiceSpec {
    #[prost(message, repeated, tag = "1")]
    ports: Vec<ServicePort>,
    #[prost(btree_map = "string, string", tag = "2")]
    selector: BTreeMap<String, String>,
    #[prost(string, optional, tag = "3")]
    cluster_ip: Option<String>,
    #[prost(string, repeated, tag = "18")]
    cluster_ips: Vec<String>,
    #[prost(string, optional, tag = "4")]
    type_: Option<String>,
    #[prost(string, repeated, tag = "5")]
    external_ips: Vec<String>,
    #[prost(string, optional, tag = "7")]
    session_affinity: Option<String>,
    #[prost(string, optional, tag = "8")]
    load_balancer_ip: Option<String>,
    #[prost(string, repeated, tag = "9")]
    load_balancer_source_ranges: Vec<String>,
    #[prost(string, optional, tag = "10")]
    external_name: Option<String>,
    #[prost(string, optional, tag = "11")]
    external_traffic_policy: Option<String>,
    #[prost(int32, optional, tag = "12")]
    health_check_node_port: Option<i32>,
    #[prost(bool, optional, tag = "13")]
    publish_not_ready_addresses: Option<bool>,
    #[prost(message, optional, tag = "14")]
    session_affinity_config: Option<SessionAffinityConfig>,
    #[prost(string, optional, tag = "17")]
    ip_family_policy: Option<String>,
    #[prost(string, repeated, tag = "19")]
    ip_families: Vec<String>,
    #[prost(bool, optional, tag = "20")]
    allocate_load_balancer_node_ports: Option<bool>,
    #[prost(string, optional, tag = "21")]
    load_balancer_class: Option<String>,
    #[prost(string, optional, tag = "22")]
    internal_traffic_policy: Option<String>,
    #[prost(string, optional, tag = "23")]
    traffic_distribution: Option<String>,
}

/// `core/v1.SessionAffinityConfig`.
#[derive(Clone, PartialEq, Message)]
struct SessionAffinityConfig {
    #[prost(message, optional, tag = "1")]
    client_ip: Option<ClientIpConfig>,
}

/// `core/v1.ClientIPConfig`.
#[derive(Clone, PartialEq, Message)]
struct ClientIpConfig {
    #[prost(int32, optional, tag = "1")]
    timeout_seconds: Option<i32>,
}

/// `core/v1.ServicePort`.
#[derive(Clone, PartialEq, Message)]
struct ServicePort {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    port: Option<i32>,
    #[prost(message, optional, tag = "4")]
    target_port: Option<IntOrString>,
    #[prost(int32, optional, tag = "5")]
    node_port: Option<i32>,
    #[prost(string, optional, tag = "6")]
    app_protocol: Option<String>,
}

/// `util/intstr.IntOrString`: `type` 0 is the int, 1 the string.
#[derive(Clone, PartialEq, Message)]
struct IntOrString {
    #[prost(int64, optional, tag = "1")]
    type_: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    int_val: Option<i32>,
    #[prost(string, optional, tag = "3")]
    str_val: Option<String>,
}

/// The kinds decoded, as a 415 names them.
const DECODED: &str = "application/vnd.kubernetes.protobuf (v1 Namespace, ConfigMap, Secret, \
                       ServiceAccount, Service; apps/v1 Deployment)";

/// The object a protobuf body holds, as JSON.
///
/// # Errors
/// A 400 for a body that is not a protobuf envelope, a 415 for a kind the
/// emulator does not decode.
pub(crate) fn decode(body: &[u8]) -> ApiResult<Value> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as {PROTOBUF}: {why}"
        ))
    };
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it does not start with the k8s\\0 magic".into()))?;
    let unknown = Unknown::decode(envelope).map_err(|e| bad(e.to_string()))?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(bad("encoded contents are not supported".into()));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let (api_version, kind) = (
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
    );
    let raw = unknown.raw.unwrap_or_default();
    let bad_object = |e: prost::DecodeError| bad(format!("{api_version} {kind}: {e}"));
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            let namespace = Namespace::decode(raw.as_slice()).map_err(bad_object)?;
            let mut object = json!({"metadata": metadata(namespace.metadata.unwrap_or_default())});
            if let Some(spec) = namespace.spec
                && !spec.finalizers.is_empty()
            {
                object["spec"] = json!({"finalizers": spec.finalizers});
            }
            object
        }
        ("v1", "ConfigMap") => {
            let map = ConfigMap::decode(raw.as_slice()).map_err(bad_object)?;
            let mut object = json!({"metadata": metadata(map.metadata.unwrap_or_default())});
            if !map.data.is_empty() {
                object["data"] = json!(map.data);
            }
            if !map.binary_data.is_empty() {
                object["binaryData"] = base64_values(map.binary_data);
            }
            if let Some(immutable) = map.immutable {
                object["immutable"] = json!(immutable);
            }
            object
        }
        ("v1", "Secret") => {
            let secret = Secret::decode(raw.as_slice()).map_err(bad_object)?;
            let mut object = json!({"metadata": metadata(secret.metadata.unwrap_or_default())});
            if !secret.data.is_empty() {
                object["data"] = base64_values(secret.data);
            }
            if !secret.string_data.is_empty() {
                object["stringData"] = json!(secret.string_data);
            }
            if let Some(kind) = secret.type_.filter(|t| !t.is_empty()) {
                object["type"] = json!(kind);
            }
            if let Some(immutable) = secret.immutable {
                object["immutable"] = json!(immutable);
            }
            object
        }
        ("v1", "ServiceAccount") => {
            let account = ServiceAccount::decode(raw.as_slice()).map_err(bad_object)?;
            let mut object = json!({"metadata": metadata(account.metadata.unwrap_or_default())});
            if !account.secrets.is_empty() {
                object["secrets"] = account.secrets.into_iter().map(reference).collect();
            }
            if !account.image_pull_secrets.is_empty() {
                object["imagePullSecrets"] = account
                    .image_pull_secrets
                    .into_iter()
                    .map(|r| Value::from(Fields::default().text("name", r.name)))
                    .collect();
            }
            if let Some(automount) = account.automount_service_account_token {
                object["automountServiceAccountToken"] = json!(automount);
            }
            object
        }
        ("apps/v1", "Deployment") => pods::Deployment::decode(raw.as_slice())
            .map_err(bad_object)?
            .into_json()
            .map_err(|why| unsupported(&format!("{api_version} {kind}: {why}")))?,
        ("v1", "Service") => {
            let service = Service::decode(raw.as_slice()).map_err(bad_object)?;
            json!({
                "metadata": metadata(service.metadata.unwrap_or_default()),
                "spec": service_spec(service.spec.unwrap_or_default()),
            })
        }
        _ => {
            return Err(unsupported(&format!(
                "this emulator does not decode {api_version} {kind} from protobuf"
            )));
        }
    };
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

/// A 415 saying what was not decoded, and what would be.
fn unsupported(what: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, {DECODED}; {what}"
        ),
    )
}

/// A JSON object of the fields Go's encoder would write: empty strings,
/// lists and zero numbers left out (`omitempty`), as a protobuf body
/// carries every field of a struct whatever its value.
#[derive(Default)]
struct Fields(serde_json::Map<String, Value>);

impl Fields {
    fn text(mut self, key: &str, value: Option<String>) -> Self {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.0.insert(key.into(), json!(value));
        }
        self
    }

    fn texts(mut self, key: &str, values: Vec<String>) -> Self {
        if !values.is_empty() {
            self.0.insert(key.into(), json!(values));
        }
        self
    }

    fn number(mut self, key: &str, value: Option<i32>) -> Self {
        if let Some(value) = value.filter(|v| *v != 0) {
            self.0.insert(key.into(), json!(value));
        }
        self
    }

    /// A Go `bool` under `omitempty`: written only when true.
    fn truth(mut self, key: &str, value: Option<bool>) -> Self {
        if value == Some(true) {
            self.0.insert(key.into(), json!(true));
        }
        self
    }

    /// A list, written when it has items.
    fn list(mut self, key: &str, items: Vec<Value>) -> Self {
        if !items.is_empty() {
            self.0.insert(key.into(), Value::Array(items));
        }
        self
    }

    /// A string map, written when it has entries.
    fn map(mut self, key: &str, entries: BTreeMap<String, String>) -> Self {
        if !entries.is_empty() {
            self.0.insert(key.into(), json!(entries));
        }
        self
    }

    /// A `*bool`: present whatever its value.
    fn flag(mut self, key: &str, value: Option<bool>) -> Self {
        if let Some(value) = value {
            self.0.insert(key.into(), json!(value));
        }
        self
    }

    fn value(mut self, key: &str, value: Option<Value>) -> Self {
        if let Some(value) = value {
            self.0.insert(key.into(), value);
        }
        self
    }
}

impl From<Fields> for Value {
    fn from(fields: Fields) -> Value {
        Value::Object(fields.0)
    }
}

fn reference(r: ObjectReference) -> Value {
    Fields::default()
        .text("kind", r.kind)
        .text("namespace", r.namespace)
        .text("name", r.name)
        .text("uid", r.uid)
        .text("apiVersion", r.api_version)
        .text("resourceVersion", r.resource_version)
        .text("fieldPath", r.field_path)
        .into()
}

fn service_spec(spec: ServiceSpec) -> Value {
    let ports = spec.ports.into_iter().map(service_port).collect();
    let affinity = spec
        .session_affinity_config
        .and_then(|c| c.client_ip)
        .map(|ip| json!({"clientIP": Value::from(Fields::default().number("timeoutSeconds", ip.timeout_seconds))}));
    Fields::default()
        .list("ports", ports)
        .map("selector", spec.selector)
        .text("clusterIP", spec.cluster_ip)
        .texts("clusterIPs", spec.cluster_ips)
        .text("type", spec.type_)
        .texts("externalIPs", spec.external_ips)
        .text("sessionAffinity", spec.session_affinity)
        .text("loadBalancerIP", spec.load_balancer_ip)
        .texts("loadBalancerSourceRanges", spec.load_balancer_source_ranges)
        .text("externalName", spec.external_name)
        .text("externalTrafficPolicy", spec.external_traffic_policy)
        .number("healthCheckNodePort", spec.health_check_node_port)
        .truth("publishNotReadyAddresses", spec.publish_not_ready_addresses)
        .value("sessionAffinityConfig", affinity)
        .text("ipFamilyPolicy", spec.ip_family_policy)
        .texts("ipFamilies", spec.ip_families)
        .flag(
            "allocateLoadBalancerNodePorts",
            spec.allocate_load_balancer_node_ports,
        )
        .text("loadBalancerClass", spec.load_balancer_class)
        .text("internalTrafficPolicy", spec.internal_traffic_policy)
        .text("trafficDistribution", spec.traffic_distribution)
        .into()
}

fn service_port(port: ServicePort) -> Value {
    let target = port.target_port.and_then(|t| match t.type_.unwrap_or(0) {
        1 => t.str_val.filter(|s| !s.is_empty()).map(|s| json!(s)),
        _ => t.int_val.filter(|i| *i != 0).map(|i| json!(i)),
    });
    Fields::default()
        .text("name", port.name)
        .text("protocol", port.protocol)
        .text("appProtocol", port.app_protocol)
        // Not `omitempty`: a port is always written.
        .value("port", Some(json!(port.port.unwrap_or(0))))
        .value("targetPort", target)
        .number("nodePort", port.node_port)
        .into()
}

/// Bytes values as JSON carries them: base64.
fn base64_values(values: BTreeMap<String, Vec<u8>>) -> Value {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    Value::Object(
        values
            .into_iter()
            .map(|(key, bytes)| (key, json!(engine.encode(bytes))))
            .collect(),
    )
}

fn metadata(meta: ObjectMeta) -> Value {
    let mut out = json!({});
    let mut put = |key: &str, value: Value| {
        out[key] = value;
    };
    if let Some(name) = meta.name.filter(|n| !n.is_empty()) {
        put("name", json!(name));
    }
    if let Some(prefix) = meta.generate_name.filter(|n| !n.is_empty()) {
        put("generateName", json!(prefix));
    }
    if let Some(namespace) = meta.namespace.filter(|n| !n.is_empty()) {
        put("namespace", json!(namespace));
    }
    if !meta.labels.is_empty() {
        put("labels", json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        put("annotations", json!(meta.annotations));
    }
    if !meta.finalizers.is_empty() {
        put("finalizers", json!(meta.finalizers));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let envelope = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
        };
        [MAGIC, &envelope.encode_to_vec()].concat()
    }

    #[test]
    fn namespaces_and_secrets_decode_to_their_json_and_other_kinds_are_named_in_a_415() {
        let namespace = Namespace {
            metadata: Some(ObjectMeta {
                name: Some("team-a".into()),
                labels: BTreeMap::from([("tier".into(), "dev".into())]),
                ..ObjectMeta::default()
            }),
            spec: None,
        };
        let decoded = decode(&body("v1", "Namespace", namespace.encode_to_vec())).unwrap();
        assert_eq!(
            decoded,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team-a", "labels": {"tier": "dev"}}})
        );
        let secret = Secret {
            metadata: Some(ObjectMeta {
                name: Some("token".into()),
                ..ObjectMeta::default()
            }),
            data: BTreeMap::from([("key".into(), vec![0, 255])]),
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        let decoded = decode(&body("v1", "Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(decoded["data"]["key"], "AP8=");
        assert_eq!(decoded["type"], "Opaque");
        let other = decode(&body("apps/v1", "DaemonSet", Vec::new())).unwrap_err();
        assert_eq!(other.code, 415);
        assert!(
            other.message.contains("apps/v1 DaemonSet"),
            "{}",
            other.message
        );
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
    }

    #[test]
    fn a_service_keeps_what_go_would_write_and_drops_the_zero_values_protobuf_carries() {
        let service = Service {
            metadata: Some(ObjectMeta {
                name: Some("web".into()),
                ..ObjectMeta::default()
            }),
            spec: Some(ServiceSpec {
                ports: vec![ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(IntOrString {
                        type_: Some(1),
                        int_val: Some(0),
                        str_val: Some("http-alt".into()),
                    }),
                    node_port: Some(0),
                    app_protocol: Some(String::new()),
                }],
                cluster_ip: Some(String::new()),
                type_: Some("ClusterIP".into()),
                publish_not_ready_addresses: Some(false),
                allocate_load_balancer_node_ports: Some(false),
                ..ServiceSpec::default()
            }),
        };
        let decoded = decode(&body("v1", "Service", service.encode_to_vec())).unwrap();
        assert_eq!(
            decoded["spec"],
            json!({"ports": [{"name": "http", "protocol": "TCP", "port": 80,
                              "targetPort": "http-alt"}],
                   "type": "ClusterIP", "allocateLoadBalancerNodePorts": false})
        );
    }
}
