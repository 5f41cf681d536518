//! Checks of an object about to be written: its identity, its name, its
//! annotations' size and, for custom resources, its schema.

use serde_json::{Value, json};

use crate::registry::resource_from_crd;
use crate::schema;
use crate::status::{ApiError, ApiResult, Cause};

use super::Target;

/// The most a single object's annotations may hold.
const MAX_ANNOTATIONS: usize = 256 * 1024;

pub(super) fn check_identity(target: &Target, object: &Value) -> ApiResult<()> {
    let expected = target.api_version();
    let r = &target.resource;
    let av = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    if !av.is_empty() && av != expected {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({expected})"
        )));
    }
    if !kind.is_empty() && kind != r.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({}) for {}",
            r.kind,
            r.qualified()
        )));
    }
    if let Some(ns) = object["metadata"]["namespace"].as_str()
        && r.namespaced
        && !ns.is_empty()
        && Some(ns) != target.namespace.as_deref()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Validate an object about to be written over `stored` (none on a create); prunes
/// unknown fields of custom resources. Returns the warnings to send.
pub(super) fn validate(
    target: &Target,
    object: &mut Value,
    validation: &str,
    stored: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let r = &target.resource;
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request is not a {} object",
            r.kind
        )));
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let display = if name.is_empty() {
        object["metadata"]["generateName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        name.clone()
    };
    let mut causes = Vec::new();
    if stored.is_none()
        && name.is_empty()
        && object["metadata"]["generateName"]
            .as_str()
            .is_none_or(str::is_empty)
    {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: name or generateName is required".into(),
            field: "metadata.name".into(),
        });
    } else if !name.is_empty() && !is_dns_subdomain(&name) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
            field: "metadata.name".into(),
        });
    }
    if let Some(annotations) = object["metadata"]["annotations"].as_object() {
        let size: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > MAX_ANNOTATIONS {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: format!("Too long: may not be more than {MAX_ANNOTATIONS} bytes"),
                field: "metadata.annotations".into(),
            });
        }
    }
    let mut warnings = Vec::new();
    if let Some(schema) = r.version(&target.version).and_then(|v| v.schema.as_ref()) {
        let findings = schema::validate(schema, object, stored);
        causes.extend(findings.causes);
        if !findings.unknown.is_empty() {
            match validation {
                "Strict" => {
                    let list: Vec<String> = findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        r.kind,
                        target.version,
                        r.kind,
                        list.join(", ")
                    )));
                }
                "Warn" => warnings.extend(
                    findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\"")),
                ),
                _ => {}
            }
        }
    }
    if r.group.is_empty() && r.plural == "pods" {
        let containers = object["spec"]["containers"].as_array();
        if containers.is_none_or(Vec::is_empty) {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.containers".into(),
            });
        }
        for (i, c) in containers.into_iter().flatten().enumerate() {
            for field in ["name", "image"] {
                if c[field].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: format!("spec.containers[{i}].{field}"),
                    });
                }
            }
        }
    }
    if r.group == "apiextensions.k8s.io" {
        resource_from_crd(object)?;
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(&r.kind, &r.group, &display, causes));
    }
    Ok(warnings)
}
