//! Discovery: the aggregated documents (`apidiscovery.k8s.io` v2 and v2beta1) kubectl
//! asks for first, and the legacy `APIVersions`, `APIGroupList`, `APIGroup` and
//! `APIResourceList` answers older clients walk.

use serde_json::{Value, json};

use super::Registry;

impl Registry {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
