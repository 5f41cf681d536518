//! What the server serves: built-in resources and those CustomResourceDefinitions
//! register, with the discovery documents (aggregated v2/v2beta1 and legacy) and the
//! minimal OpenAPI v3 that lets `kubectl apply` validate through `fieldValidation=Strict`.
//!
//! One module per job: `builtins` lists the kinds every cluster serves, `crd` reads
//! a CustomResourceDefinition into a served resource, `discovery` answers the
//! discovery endpoints and `openapi` the OpenAPI v3 ones.

mod builtins;
mod crd;
mod discovery;
mod openapi;

use std::cmp::Ordering;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

pub(crate) use crd::resource_from_crd;

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

/// The set of served resources; CRDs add and remove entries.
pub(crate) struct Registry {
    resources: RwLock<Vec<Arc<Resource>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            resources: RwLock::new(builtins::builtins().into_iter().map(Arc::new).collect()),
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
}
