//! Bodies in `application/vnd.kubernetes.protobuf`, as kubectl's typed
//! clients send built-in kinds (`kubectl create namespace`): the 4-byte
//! magic `k8s\0`, then a `runtime.Unknown` envelope whose `raw` holds the
//! object. The messages below are the fields of upstream's
//! `generated.proto` files the emulator reads, by their field numbers;
//! the decoded object becomes the JSON the rest of the server reads.
//! A kind without messages here is a 415 naming those it decodes.

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

/// The kinds decoded, as a 415 names them.
const DECODED: &str = "application/vnd.kubernetes.protobuf (v1 Namespace, ConfigMap, Secret)";

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
        _ => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types \
                     include: application/json, application/yaml, {DECODED}; this emulator does \
                     not decode {api_version} {kind} from protobuf"
                ),
            ));
        }
    };
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
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
        let other = decode(&body("apps/v1", "Deployment", Vec::new())).unwrap_err();
        assert_eq!(other.code, 415);
        assert!(
            other.message.contains("apps/v1 Deployment"),
            "{}",
            other.message
        );
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
    }
}
