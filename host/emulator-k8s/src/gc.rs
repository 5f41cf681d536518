//! Garbage collection by `ownerReferences`, as the kube-controller-manager does it:
//! an object whose owners are all gone is deleted (background propagation); an owner
//! deleted with `Foreground` keeps a `foregroundDeletion` finalizer until its dependents
//! with `blockOwnerDeletion` are gone; with `Orphan` its dependents lose the reference
//! and stay. A namespace being deleted is emptied first.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::state::State;
use crate::store::rv_of;

fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn deleting(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
}

fn owner_refs(object: &Value) -> Vec<Value> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

struct Item {
    resource: Arc<str>,
    namespace: String,
    name: String,
    object: Arc<Value>,
}

/// Store keys of the Events: recorders never give them owners or
/// finalizers, and they leave by their TTL, so the collector passes them
/// by. (Each deletion starts a pass over every object; with the Events of
/// an hour in it, a long run's passes grew with every claim it made.)
const EVENT_RESOURCES: [&str; 2] = ["/events", "events.k8s.io/events"];

fn snapshot(state: &State) -> Vec<Item> {
    let mut items = Vec::new();
    for resource in state.store.resources() {
        if EVENT_RESOURCES.contains(&&*resource) {
            continue;
        }
        let (objects, _) = state.store.list(&resource, None);
        for object in objects {
            items.push(Item {
                resource: resource.clone(),
                namespace: object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                name: object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                object,
            });
        }
    }
    items
}

fn rewrite(state: &State, item: &Item, change: impl FnOnce(&mut Value)) {
    let mut object = (*item.object).clone();
    change(&mut object);
    // A conflict means someone else wrote first; the next pass sees the new state.
    let _ = state.store.update(
        &item.resource,
        &item.namespace,
        &item.name,
        object,
        Some(rv_of(&item.object)),
        false,
    );
}

fn remove_finalizer(state: &State, item: &Item, finalizer: &str) {
    rewrite(state, item, |o| {
        let kept: Vec<Value> = finalizers(o)
            .into_iter()
            .filter(|f| f != finalizer)
            .map(Value::String)
            .collect();
        o["metadata"]["finalizers"] = Value::Array(kept);
    });
}

fn delete(state: &State, item: &Item, foreground: bool) {
    if foreground
        && !finalizers(&item.object)
            .iter()
            .any(|f| f == "foregroundDeletion")
    {
        rewrite(state, item, |o| {
            let mut list = o["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            list.push(json!("foregroundDeletion"));
            o["metadata"]["finalizers"] = Value::Array(list);
        });
        if let Some(fresh) = state.store.get(&item.resource, &item.namespace, &item.name) {
            let _ = state.store.delete(
                &item.resource,
                &item.namespace,
                &item.name,
                (Some(uid(&fresh)), None),
                false,
            );
        }
        return;
    }
    let _ = state.store.delete(
        &item.resource,
        &item.namespace,
        &item.name,
        (Some(uid(&item.object)), None),
        false,
    );
}

/// One pass over every object. Returns whether it changed anything.
pub(crate) fn collect(state: &State) -> bool {
    let before = state.store.current_rv();
    let items = snapshot(state);
    let by_uid: HashMap<&str, &Item> = items.iter().map(|i| (uid(&i.object), i)).collect();
    let mut dependents: HashMap<&str, Vec<&Item>> = HashMap::new();
    for item in &items {
        for r in item.object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(owner) = r["uid"].as_str() {
                dependents.entry(owner).or_default().push(item);
            }
        }
    }
    let mut handled: HashSet<&str> = HashSet::new();
    for item in items.iter().filter(|i| deleting(&i.object)) {
        let finals = finalizers(&item.object);
        let owner_uid = uid(&item.object);
        let deps = dependents.get(owner_uid).cloned().unwrap_or_default();
        if finals.iter().any(|f| f == "orphan") {
            for d in &deps {
                rewrite(state, d, |o| {
                    let kept: Vec<Value> = owner_refs(o)
                        .into_iter()
                        .filter(|r| r["uid"].as_str() != Some(owner_uid))
                        .collect();
                    o["metadata"]["ownerReferences"] = Value::Array(kept);
                });
                handled.insert(uid(&d.object));
            }
            remove_finalizer(state, item, "orphan");
        } else if finals.iter().any(|f| f == "foregroundDeletion") {
            let mut blocking = false;
            for d in &deps {
                let blocks = owner_refs(&d.object).iter().any(|r| {
                    r["uid"].as_str() == Some(owner_uid) && r["blockOwnerDeletion"] == json!(true)
                });
                blocking |= blocks;
                if !deleting(&d.object) {
                    let has_own = dependents.contains_key(uid(&d.object));
                    delete(state, d, has_own);
                }
                handled.insert(uid(&d.object));
            }
            if !blocking {
                remove_finalizer(state, item, "foregroundDeletion");
            }
        }
    }
    for item in &items {
        let refs = owner_refs(&item.object);
        if refs.is_empty() || handled.contains(uid(&item.object)) || deleting(&item.object) {
            continue;
        }
        let (solid, dangling): (Vec<&Value>, Vec<&Value>) = refs
            .iter()
            .partition(|r| r["uid"].as_str().is_some_and(|u| by_uid.contains_key(u)));
        if dangling.is_empty() {
            continue;
        }
        if solid.is_empty() {
            delete(state, item, false);
        } else {
            let keep: Vec<Value> = solid.into_iter().cloned().collect();
            rewrite(state, item, |o| {
                o["metadata"]["ownerReferences"] = Value::Array(keep)
            });
        }
    }
    state.store.current_rv() != before
}

/// Delete everything in a namespace (finalizers of its objects are dropped: nothing
/// else would ever remove them once the namespace is gone).
pub(crate) fn empty_namespace(state: &State, namespace: &str) {
    for resource in state.registry.all().iter().filter(|r| r.namespaced) {
        let key = resource.key();
        let (objects, _) = state.store.list(&key, Some(namespace));
        for object in objects {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if !finalizers(&object).is_empty() {
                let mut cleared = (*object).clone();
                cleared["metadata"]["finalizers"] = json!([]);
                let _ = state
                    .store
                    .update(&key, namespace, name, cleared, None, false);
            }
            let _ = state
                .store
                .delete(&key, namespace, name, (None, None), false);
        }
    }
}

/// Whether a new object names an owner that does not exist (by kind, name and uid):
/// the collector deletes such a dependent. A lookup per reference, so that the whole
/// store is walked only when an object may really have lost its owner.
fn dangling(state: &State, object: &Value) -> bool {
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    owner_refs(object).iter().any(|r| {
        let api_version = r["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = r["kind"].as_str().unwrap_or_default();
        let Some(resource) = state
            .registry
            .all()
            .into_iter()
            .find(|res| res.group == group && res.kind == kind)
        else {
            return true;
        };
        let ns = if resource.namespaced { namespace } else { "" };
        let name = r["name"].as_str().unwrap_or_default();
        state
            .store
            .get(&resource.key(), ns, name)
            .is_none_or(|owner| owner["metadata"]["uid"] != r["uid"])
    })
}

/// How many times its last pass's length the collector waits before the
/// next pass. A pass reads every object, so with hundreds of claims
/// released a second (a pass per batch of deletions, 4-7 ms each over a
/// thousand objects) the collector took a fifth of a core; spaced so, it
/// takes at most a twentieth, and a small store's passes (tens of
/// microseconds) wait next to nothing. A real controller manager's
/// collector is no quicker: it works from queues.
const SPACING: u32 = 19;

/// Run the collector until the store is dropped: a pass whenever an event may have
/// left a dependent without its owner or an owner waiting for its dependents.
pub(crate) async fn run(state: Arc<State>) {
    let mut informer = state.store.informer();
    let mut not_before = tokio::time::Instant::now();
    while let Some(events) = crate::store::next_batch(&mut informer, None).await {
        let needed = events.iter().any(|e| {
            e.kind == crate::store::EventType::Deleted
                || deleting(&e.object)
                || (e.kind == crate::store::EventType::Added && dangling(&state, &e.object))
        });
        if !needed {
            continue;
        }
        tokio::time::sleep_until(not_before).await;
        // What happened meanwhile is in the store this pass reads.
        while informer.try_recv().is_ok() {}
        let started = tokio::time::Instant::now();
        // Each pass's own writes are events too; loop until a pass is quiet.
        for _ in 0..16 {
            if !collect(&state) {
                break;
            }
        }
        not_before = tokio::time::Instant::now() + started.elapsed() * SPACING;
    }
}
