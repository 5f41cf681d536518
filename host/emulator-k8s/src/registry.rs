//! What the server serves: built-in resources and those CustomResourceDefinitions
//! register, with the discovery documents (aggregated v2/v2beta1 and legacy) and the
//! minimal OpenAPI v3 that lets `kubectl apply` validate through `fieldValidation=Strict`.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::status::ApiError;

/// Where a CRD's scale subresource reads and writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScalePaths {
    /// `.spec.replicas`.
    pub(crate) spec_replicas: String,
    /// `.status.replicas`.
    pub(crate) status_replicas: String,
    /// `.status.selector`, when declared.
    pub(crate) label_selector: Option<String>,
}

/// One served version of a resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Version {
    /// `v1beta1`.
    pub(crate) name: String,
    /// The structural schema (`openAPIV3Schema`), for custom resources.
    pub(crate) schema: Option<Value>,
    /// Whether `/status` is a subresource (then the main resource ignores status writes).
    pub(crate) status: bool,
    /// The scale subresource.
    pub(crate) scale: Option<ScalePaths>,
    /// A CRD version's `additionalPrinterColumns`, for tables.
    pub(crate) columns: Vec<Value>,
}

/// A resource the server serves.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resource {
    /// API group ("" for core).
    pub(crate) group: String,
    /// Served versions, preferred first.
    pub(crate) versions: Vec<Version>,
    /// `sandboxes`.
    pub(crate) plural: String,
    /// `sandbox`.
    pub(crate) singular: String,
    /// `Sandbox`.
    pub(crate) kind: String,
    /// `SandboxList`.
    pub(crate) list_kind: String,
    /// `kubectl` short names.
    pub(crate) short_names: Vec<String>,
    /// `kubectl get all` categories.
    pub(crate) categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// Defined by a CRD (custom resources accept only JSON merge patches, not strategic).
    pub(crate) custom: bool,
    /// Other subresources served (e.g. `exec`, `log` for pods).
    pub(crate) extra_subresources: Vec<Subresource>,
}

/// A subresource besides `status` and `scale`, as discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subresource {
    /// `exec`.
    pub(crate) name: &'static str,
    /// The kind it answers with, e.g. `PodExecOptions`.
    pub(crate) kind: &'static str,
    /// The RBAC verbs it takes (`get` for a GET, `create` for a POST).
    pub(crate) verbs: &'static [&'static str],
}

impl Resource {
    /// The store key: `group/plural`.
    pub(crate) fn key(&self) -> Arc<str> {
        Arc::from(format!("{}/{}", self.group, self.plural))
    }

    /// `plural.group` (or `plural` for core), as error messages name the resource.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `group/version` (or `version` for core).
    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The verbs discovery lists: access reviews are create-only.
    pub(crate) fn verbs(&self) -> Value {
        if self.group == "authorization.k8s.io" {
            json!(["create"])
        } else {
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        }
    }

    /// The served version named `version`.
    pub(crate) fn version(&self, version: &str) -> Option<&Version> {
        self.versions.iter().find(|v| v.name == version)
    }
}

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short_names: &[&str],
    status: bool,
) -> Resource {
    Resource {
        group: group.into(),
        versions: vec![Version {
            name: version.into(),
            schema: None,
            status,
            scale: None,
            columns: Vec::new(),
        }],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        short_names: short_names.iter().map(|s| (*s).to_string()).collect(),
        categories: Vec::new(),
        namespaced,
        custom: false,
        extra_subresources: Vec::new(),
    }
}

fn builtins() -> Vec<Resource> {
    let mut pods = builtin("", "v1", "pods", "Pod", true, &["po"], true);
    // As a real API server describes them: exec is a GET or a POST; log only a GET.
    pods.extra_subresources = vec![
        Subresource {
            name: "exec",
            kind: "PodExecOptions",
            verbs: &["create", "get"],
        },
        Subresource {
            name: "log",
            kind: "Pod",
            verbs: &["get"],
        },
        Subresource {
            name: "binding",
            kind: "Binding",
            verbs: &["create"],
        },
    ];
    pods.categories = vec!["all".into()];
    let mut services = builtin("", "v1", "services", "Service", true, &["svc"], true);
    services.categories = vec!["all".into()];
    let scale = Some(ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    });
    let mut deployments = builtin(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
    );
    deployments.versions[0].scale = scale.clone();
    deployments.categories = vec!["all".into()];
    let mut replicasets = builtin(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
    );
    replicasets.versions[0].scale = scale;
    let mut daemonsets = builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true);
    daemonsets.categories = vec!["all".into()];
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
        pods,
        services,
        builtin("", "v1", "nodes", "Node", false, &["no"], true),
        builtin("", "v1", "events", "Event", true, &["ev"], false),
        builtin(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            true,
        ),
        builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
        builtin("", "v1", "secrets", "Secret", true, &[], false),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            false,
        ),
        deployments,
        replicasets,
        daemonsets,
        builtin(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            false,
        ),
        builtin(
            "node.k8s.io",
            "v1",
            "runtimeclasses",
            "RuntimeClass",
            false,
            &[],
            false,
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
        ),
    ]
}

/// Kubernetes' version order: GA before beta before alpha, higher numbers first, then
/// non-Kubernetes names alphabetically.
pub(crate) fn version_priority(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u32, u32)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u32 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        for (stage, rank) in [("beta", 2), ("alpha", 1)] {
            if let Some(n) = tail.strip_prefix(stage) {
                return Some((rank, major, n.parse().ok()?));
            }
        }
        None
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

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

/// The set of served resources; CRDs add and remove entries.
pub(crate) struct Registry {
    resources: RwLock<Vec<Arc<Resource>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            resources: RwLock::new(builtins().into_iter().map(Arc::new).collect()),
        }
    }
}

impl Registry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Resource>>> {
        self.resources.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every served resource.
    pub(crate) fn all(&self) -> Vec<Arc<Resource>> {
        self.read().clone()
    }

    /// The resource `plural` served at `group/version`.
    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.read()
            .iter()
            .find(|r| r.group == group && r.plural == plural && r.version(version).is_some())
            .cloned()
    }

    /// Whether anything is served at `group/version`.
    pub(crate) fn serves(&self, group: &str, version: &str) -> bool {
        self.read()
            .iter()
            .any(|r| r.group == group && r.version(version).is_some())
    }

    /// Add or replace a custom resource (keyed by group and plural).
    pub(crate) fn register(&self, resource: Resource) {
        let mut all = self.resources.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|r| !(r.group == resource.group && r.plural == resource.plural));
        all.push(Arc::new(resource));
    }

    /// Remove a custom resource.
    pub(crate) fn unregister(&self, group: &str, plural: &str) {
        let mut all = self.resources.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|r| !(r.custom && r.group == group && r.plural == plural));
    }

    /// Groups in discovery order (core first, then by name), each with its versions in
    /// priority order.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let all = self.read();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for r in all.iter() {
            let entry = match groups.iter_mut().find(|(g, _)| *g == r.group) {
                Some(e) => e,
                None => {
                    groups.push((r.group.clone(), Vec::new()));
                    groups.last_mut().expect("just pushed")
                }
            };
            for v in &r.versions {
                if !entry.1.contains(&v.name) {
                    entry.1.push(v.name.clone());
                }
            }
        }
        for (_, versions) in &mut groups {
            versions.sort_by(|a, b| version_priority(a, b));
        }
        groups.sort_by(|a, b| match (a.0.is_empty(), b.0.is_empty()) {
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => a.0.cmp(&b.0),
        });
        groups
    }

    fn resources_at(&self, group: &str, version: &str) -> Vec<Arc<Resource>> {
        self.read()
            .iter()
            .filter(|r| r.group == group && r.version(version).is_some())
            .cloned()
            .collect()
    }

    /// The aggregated discovery document (`apidiscovery.k8s.io/<api_version>`) for
    /// `/api` (`core == true`) or `/apis`.
    pub(crate) fn aggregated(&self, core: bool, api_version: &str) -> Value {
        let items: Vec<Value> = self
            .groups()
            .into_iter()
            .filter(|(g, _)| g.is_empty() == core)
            .map(|(group, versions)| {
                let versions: Vec<Value> = versions
                    .iter()
                    .map(|v| {
                        let resources: Vec<Value> = self
                            .resources_at(&group, v)
                            .iter()
                            .map(|r| {
                                let gvk = json!({"group": r.group, "version": v, "kind": r.kind});
                                let version = r.version(v).expect("filtered by version");
                                let mut subs = Vec::new();
                                if version.status {
                                    subs.push(json!({"subresource": "status", "responseKind": gvk, "verbs": ["get", "patch", "update"]}));
                                }
                                if version.scale.is_some() {
                                    subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}));
                                }
                                for s in &r.extra_subresources {
                                    subs.push(json!({"subresource": s.name, "responseKind": {"group": "", "version": "", "kind": s.kind}, "verbs": s.verbs}));
                                }
                                let mut entry = json!({
                                    "resource": r.plural,
                                    "responseKind": gvk,
                                    "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                                    "singularResource": r.singular,
                                    "verbs": r.verbs(),
                                });
                                if !r.short_names.is_empty() {
                                    entry["shortNames"] = json!(r.short_names);
                                }
                                if !r.categories.is_empty() {
                                    entry["categories"] = json!(r.categories);
                                }
                                if !subs.is_empty() {
                                    entry["subresources"] = Value::Array(subs);
                                }
                                entry
                            })
                            .collect();
                        json!({"version": v, "resources": resources, "freshness": "Current"})
                    })
                    .collect();
                let metadata = if group.is_empty() {
                    json!({"creationTimestamp": null})
                } else {
                    json!({"name": group, "creationTimestamp": null})
                };
                json!({"metadata": metadata, "versions": versions})
            })
            .collect();
        json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": format!("apidiscovery.k8s.io/{api_version}"),
            "metadata": {},
            "items": items,
        })
    }

    /// Legacy `/api`: `APIVersions`.
    pub(crate) fn api_versions(&self, server_address: &str) -> Value {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        })
    }

    fn group_entry(group: &str, versions: &[String]) -> Value {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({
            "name": group,
            "versions": vs,
            "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
        })
    }

    /// Legacy `/apis`: `APIGroupList`.
    pub(crate) fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, vs)| Self::group_entry(&g, &vs))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// Legacy `/apis/G`: `APIGroup`.
    pub(crate) fn group(&self, group: &str) -> Option<Value> {
        let (g, vs) = self.groups().into_iter().find(|(g, _)| g == group)?;
        let mut entry = Self::group_entry(&g, &vs);
        entry["kind"] = json!("APIGroup");
        entry["apiVersion"] = json!("v1");
        Some(entry)
    }

    /// Legacy `/api/v1` or `/apis/G/V`: `APIResourceList`.
    pub(crate) fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let resources = self.resources_at(group, version);
        if resources.is_empty() {
            return None;
        }
        let mut list = Vec::new();
        for r in &resources {
            let mut entry = json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs(),
            });
            if !r.short_names.is_empty() {
                entry["shortNames"] = json!(r.short_names);
            }
            if !r.categories.is_empty() {
                entry["categories"] = json!(r.categories);
            }
            list.push(entry);
            let v = r.version(version).expect("filtered by version");
            let mut subs: Vec<(&str, &str, Value)> = Vec::new();
            if v.status {
                subs.push(("status", r.kind.as_str(), json!(["get", "patch", "update"])));
            }
            if v.scale.is_some() {
                subs.push(("scale", "Scale", json!(["get", "patch", "update"])));
            }
            for s in &r.extra_subresources {
                subs.push((s.name, s.kind, json!(s.verbs)));
            }
            for (sub, kind, verbs) in subs {
                list.push(json!({
                    "name": format!("{}/{sub}", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }));
            }
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
        )
    }

    /// `/openapi/v3`: one entry per group-version, with a hash that changes with what
    /// is served there (clients cache by it).
    pub(crate) fn openapi_index(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (group, versions) in self.groups() {
            for v in versions {
                let key = if group.is_empty() {
                    format!("api/{v}")
                } else {
                    format!("apis/{group}/{v}")
                };
                let hash = self.openapi_hash(&group, &v);
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash:016X}")}),
                );
            }
        }
        json!({"paths": paths})
    }

    fn openapi_hash(&self, group: &str, version: &str) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.openapi_document(group, version)
            .to_string()
            .hash(&mut hasher);
        hasher.finish()
    }

    /// The OpenAPI v3 document of one group-version: a PATCH operation on each item
    /// path with its GVK and the `fieldValidation` parameter (what kubectl looks for
    /// before it sends `fieldValidation=Strict` and leaves validation to the server).
    pub(crate) fn openapi_document(&self, group: &str, version: &str) -> Value {
        let mut paths = serde_json::Map::new();
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        for r in self.resources_at(group, version) {
            let item = if r.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
            } else {
                format!("{prefix}/{}/{{name}}", r.plural)
            };
            let gvk = json!({"group": r.group, "version": version, "kind": r.kind});
            let params = json!([
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}},
            ]);
            let op = |id: &str| {
                json!({
                    "operationId": format!("{id}{}", r.kind),
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": params,
                    "responses": {"200": {"description": "OK"}},
                })
            };
            paths.insert(
                item,
                json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
            );
        }
        json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": {}},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_ga_then_beta_then_alpha() {
        let mut vs = vec!["v1alpha1", "v1beta1", "v2", "v1", "v1beta2", "foo"];
        vs.sort_by(|a, b| version_priority(a, b));
        assert_eq!(vs, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }

    #[test]
    fn aggregated_core_item_has_no_name_and_lists_pods() {
        let reg = Registry::default();
        let doc = reg.aggregated(true, "v2");
        let item = &doc["items"][0];
        assert!(item["metadata"].get("name").is_none());
        let resources = item["versions"][0]["resources"].as_array().unwrap();
        assert!(resources.iter().any(|r| r["resource"] == "pods"));
    }
}
