//! The in-process client the controllers, the scheduler and the kubelet write
//! through: the same verbs (create, PUT, merge patch, status, delete) a remote client
//! sends, run by the API layer, so their writes get the same defaults, validation,
//! managed fields, resourceVersion checks and watch events.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::{self, DeleteOptions, Query, Target};
use crate::registry::Resource;
use crate::state::State;
use crate::status::{ApiError, ApiResult};

/// A resource as `group`, `version`, `plural`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Gvr {
    /// API group ("" for core).
    pub(crate) group: &'static str,
    /// Served version.
    pub(crate) version: &'static str,
    /// Plural name.
    pub(crate) plural: &'static str,
}

impl Gvr {
    /// The store key (`group/plural`).
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }
}

/// Core pods.
pub(crate) const PODS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "pods",
};
/// Core services.
pub(crate) const SERVICES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "services",
};
/// Core persistent volume claims.
pub(crate) const PVCS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
};
/// Core events.
pub(crate) const EVENTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "events",
};
/// Core nodes.
pub(crate) const NODES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "nodes",
};
/// apps/v1 daemon sets.
pub(crate) const DAEMONSETS: Gvr = Gvr {
    group: "apps",
    version: "v1",
    plural: "daemonsets",
};
/// networking.k8s.io/v1 network policies.
pub(crate) const NETWORK_POLICIES: Gvr = Gvr {
    group: "networking.k8s.io",
    version: "v1",
    plural: "networkpolicies",
};
/// node.k8s.io/v1 runtime classes.
pub(crate) const RUNTIME_CLASSES: Gvr = Gvr {
    group: "node.k8s.io",
    version: "v1",
    plural: "runtimeclasses",
};
/// agents.x-k8s.io/v1beta1 sandboxes.
pub(crate) const SANDBOXES: Gvr = Gvr {
    group: "agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxes",
};
/// Sandbox templates.
pub(crate) const TEMPLATES: Gvr = Gvr {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxtemplates",
};
/// Sandbox warm pools.
pub(crate) const WARM_POOLS: Gvr = Gvr {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxwarmpools",
};
/// Sandbox claims.
pub(crate) const CLAIMS: Gvr = Gvr {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxclaims",
};

/// A client acting as one field manager.
#[derive(Clone, Copy)]
pub(crate) struct Client<'a> {
    state: &'a State,
    manager: &'static str,
}

impl<'a> Client<'a> {
    /// A client writing as `manager`.
    pub(crate) fn new(state: &'a State, manager: &'static str) -> Self {
        Self { state, manager }
    }

    /// Whether `gvr` is served (a CRD may not be registered yet).
    pub(crate) fn serves(&self, gvr: Gvr) -> bool {
        self.resource(gvr).is_some()
    }

    fn resource(&self, gvr: Gvr) -> Option<Arc<Resource>> {
        self.state.registry.find(gvr.group, gvr.version, gvr.plural)
    }

    fn target(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: Option<&str>,
        subresource: Option<&str>,
    ) -> ApiResult<Target> {
        let resource = self
            .resource(gvr)
            .ok_or_else(|| ApiError::no_route(&format!("{}/{}", gvr.key(), gvr.version)))?;
        Ok(Target {
            namespace: resource.namespaced.then(|| namespace.to_string()),
            resource,
            version: gvr.version.to_string(),
            name: name.map(str::to_string),
            subresource: subresource.map(str::to_string),
        })
    }

    fn query(&self) -> Query {
        Query(vec![("fieldManager".into(), self.manager.into())])
    }

    /// One object, as stored.
    pub(crate) fn get(&self, gvr: Gvr, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.state.store.get(&gvr.key(), namespace, name)
    }

    /// Every object of `gvr` in `namespace` (None: all).
    pub(crate) fn list(&self, gvr: Gvr, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.state.store.list(&gvr.key(), namespace).0
    }

    /// POST.
    pub(crate) fn create(&self, gvr: Gvr, namespace: &str, object: Value) -> ApiResult<Value> {
        let target = self.target(gvr, namespace, None, None)?;
        Ok(api::create(self.state, &target, &self.query(), self.manager, object)?.object)
    }

    /// PUT (with the object's resourceVersion as the precondition).
    pub(crate) fn update(&self, gvr: Gvr, object: Value) -> ApiResult<Value> {
        let (namespace, name) = names(&object);
        let target = self.target(gvr, &namespace, Some(&name), None)?;
        Ok(api::update(self.state, &target, &self.query(), self.manager, object)?.object)
    }

    /// A JSON merge patch of the object (`status`: of its status subresource). A
    /// `metadata.resourceVersion` in the patch makes it a precondition.
    pub(crate) fn merge_patch(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> ApiResult<Value> {
        let target = self.target(gvr, namespace, Some(name), status.then_some("status"))?;
        let body = patch.to_string();
        Ok(api::patch(
            self.state,
            &target,
            &self.query(),
            self.manager,
            "application/merge-patch+json",
            body.as_bytes(),
        )?
        .object)
    }

    /// DELETE with a propagation policy.
    pub(crate) fn delete(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        propagation: &str,
        uid: Option<&str>,
    ) -> ApiResult<Value> {
        let target = self.target(gvr, namespace, Some(name), None)?;
        let options = DeleteOptions {
            propagation: propagation.to_string(),
            uid: uid.map(str::to_string),
            ..DeleteOptions::default()
        };
        api::delete(self.state, &target, &options)
    }

    /// Record a core/v1 Event about `object` (best effort, as recorders are).
    pub(crate) fn event(&self, object: &Value, kind: &str, reason: &str, message: &str) {
        let meta = &object["metadata"];
        let namespace = meta["namespace"].as_str().unwrap_or("default");
        let name = meta["name"].as_str().unwrap_or_default();
        let now = crate::store::now_rfc3339();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": namespace},
            "involvedObject": {
                "apiVersion": object["apiVersion"], "kind": object["kind"], "name": name,
                "namespace": namespace, "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": self.manager},
            "reportingComponent": self.manager,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let Err(error) = self.create(EVENTS, namespace, event) {
            tracing::debug!(%error, reason, "recording an event failed");
        }
    }
}

/// `(namespace, name)` of an object.
pub(crate) fn names(object: &Value) -> (String, String) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// A controller owner reference to `owner` (`controller` and `blockOwnerDeletion`
/// true, as `SetControllerReference` writes).
pub(crate) fn controller_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// The controller owner reference of `object`, if any.
pub(crate) fn controller_of(object: &Value) -> Option<&Value> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))
}

/// Whether `object` is controlled by an owner of `kind` with `uid`.
pub(crate) fn controlled_by(object: &Value, owner: &Value) -> bool {
    controller_of(object)
        .is_some_and(|r| r["uid"] == owner["metadata"]["uid"] && r["kind"] == owner["kind"])
}

/// A label value of an object.
pub(crate) fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["labels"][key].as_str()
}

/// An annotation value of an object.
pub(crate) fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["annotations"][key].as_str()
}

/// Whether the object is being deleted.
pub(crate) fn deleting(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
}

/// A condition of `type` in `status.conditions`.
pub(crate) fn condition<'v>(object: &'v Value, kind: &str) -> Option<&'v Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether condition `kind` is `True`.
pub(crate) fn condition_true(object: &Value, kind: &str) -> bool {
    condition(object, kind).is_some_and(|c| c["status"] == "True")
}

/// Merge `new` conditions into `old` ones by type, keeping `lastTransitionTime` where
/// the status did not change (as `meta.SetStatusCondition` does).
pub(crate) fn merge_conditions(old: Option<&Value>, new: Vec<Value>) -> Value {
    let now = crate::store::now_rfc3339();
    let previous = old.and_then(Value::as_array).cloned().unwrap_or_default();
    let merged: Vec<Value> = new
        .into_iter()
        .map(|mut c| {
            let before = previous.iter().find(|p| p["type"] == c["type"]);
            c["lastTransitionTime"] = match before {
                Some(p) if p["status"] == c["status"] => p["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            c
        })
        .collect();
    Value::Array(merged)
}
