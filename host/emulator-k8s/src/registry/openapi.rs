//! The OpenAPI v3 endpoints: an index of group-versions, each with a hash clients
//! cache by, and per group-version a document just rich enough for kubectl to trust
//! the server's own field validation.

use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use super::Registry;

impl Registry {
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
