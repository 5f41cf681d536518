//! A CustomResourceDefinition read into the resource it serves, refused with the
//! API server's 422 when a required name is missing or does not match.

use serde_json::{Value, json};

use super::{Resource, ScalePaths, Version, version_priority};
use crate::status::ApiError;

/// A CRD's served resource, read from its spec.
///
/// # Errors
/// A 422 naming the missing field.
pub(crate) fn resource_from_crd(crd: &Value) -> Result<Resource, ApiError> {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &crd["spec"];
    let invalid = |field: &str, message: &str| {
        ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            vec![crate::status::Cause {
                reason: "FieldValueRequired".into(),
                message: message.into(),
                field: field.into(),
            }],
        )
    };
    let text = |v: &Value, field: &str| -> Result<String, ApiError> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| invalid(field, "Required value"))
    };
    let group = text(&spec["group"], "spec.group")?;
    let names = &spec["names"];
    let plural = text(&names["plural"], "spec.names.plural")?;
    let kind = text(&names["kind"], "spec.names.kind")?;
    if name != format!("{plural}.{group}") {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            vec![crate::status::Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                ),
                field: "metadata.name".into(),
            }],
        ));
    }
    let scope = text(&spec["scope"], "spec.scope")?;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut versions = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        if v["served"] == json!(false) {
            continue;
        }
        let sub = &v["subresources"];
        let scale = sub.get("scale").map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"]
                .as_str()
                .unwrap_or(".spec.replicas")
                .into(),
            status_replicas: s["statusReplicasPath"]
                .as_str()
                .unwrap_or(".status.replicas")
                .into(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
        });
        versions.push(Version {
            name: text(&v["name"], "spec.versions[].name")?,
            schema: v["schema"].get("openAPIV3Schema").cloned(),
            columns: v["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            status: sub.get("status").is_some(),
            scale,
        });
    }
    if versions.is_empty() {
        return Err(invalid(
            "spec.versions",
            "Required value: must have at least one served version",
        ));
    }
    versions.sort_by(|a, b| version_priority(&a.name, &b.name));
    Ok(Resource {
        group,
        versions,
        singular: names["singular"]
            .as_str()
            .map_or_else(|| kind.to_lowercase(), str::to_string),
        list_kind: names["listKind"]
            .as_str()
            .map_or_else(|| format!("{kind}List"), str::to_string),
        plural,
        kind,
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        namespaced: scope == "Namespaced",
        custom: true,
        extra_subresources: Vec::new(),
    })
}
