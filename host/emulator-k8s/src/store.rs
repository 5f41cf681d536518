//! The generic object store: every object of every resource as a JSON value, keyed by
//! resource (`group/plural`), namespace and name. It owns what the API server stamps on
//! objects — a global, monotonically increasing `resourceVersion`, `uid`,
//! `creationTimestamp`, `generation` (bumped when anything outside `metadata` and
//! `status` changes), `generateName`, `deletionTimestamp` while finalizers remain — and
//! the event history that watches replay, kept for a bounded window.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// Created.
    Added,
    /// Changed (including getting a `deletionTimestamp`).
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The watch event's `type`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One entry of the history.
#[derive(Debug)]
pub(crate) struct Event {
    /// The resourceVersion this change produced.
    pub(crate) rv: u64,
    /// `group/plural` of the object.
    pub(crate) resource: Arc<str>,
    /// Namespace ("" for cluster-scoped).
    pub(crate) namespace: String,
    /// What happened.
    pub(crate) kind: EventType,
    /// The object after the change (for DELETED: its last state, with the new RV).
    pub(crate) object: Arc<Value>,
    /// The object before the change (None for ADDED): lets a selector-filtered watch
    /// tell an object entering or leaving its selection.
    pub(crate) previous: Option<Arc<Value>>,
}

/// Why a store operation failed; the API layer turns these into Statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    /// No such object.
    #[error("not found")]
    NotFound,
    /// The name is taken.
    #[error("already exists")]
    AlreadyExists,
    /// The precondition (resourceVersion or uid) no longer holds.
    #[error("conflict")]
    Conflict,
    /// The asked resourceVersion is older than the kept history.
    #[error("resource version {asked} is older than the history ({oldest})")]
    Gone {
        /// The asked RV.
        asked: u64,
        /// The oldest RV a watch can start from.
        oldest: u64,
    },
}

/// The result of a delete.
#[derive(Debug, Clone)]
pub(crate) enum Deleted {
    /// The object is gone.
    Removed(Arc<Value>),
    /// Finalizers remain: the object got a `deletionTimestamp` and stays.
    Pending(Arc<Value>),
}

type Objects = BTreeMap<(String, String), Arc<Value>>;

struct Inner {
    rv: u64,
    objects: BTreeMap<Arc<str>, Objects>,
    history: VecDeque<Arc<Event>>,
    window: usize,
    /// Events up to and including this RV have been dropped from the history.
    compacted_through: u64,
    tallies: BTreeMap<Arc<str>, Tally>,
}

/// What a resource has held over the store's life: for rehearsals that show
/// how many objects a client made and the most that existed at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Objects created.
    pub created: u64,
    /// The most objects that existed at once (being deleted included).
    pub peak: u64,
    /// Objects that exist now.
    pub live: u64,
}

/// The store, shared by every handler and controller.
pub(crate) struct Store {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    /// The in-process consumers' event queues (controllers, kubelet, collector):
    /// every event reaches them, however far the watch history has been compacted.
    informers: Mutex<Vec<mpsc::UnboundedSender<Arc<Event>>>>,
}

/// The events an informer has queued: waits for the first (until `deadline`, if
/// any; then the batch is empty) and takes every one queued behind it. `None` once the
/// store is gone.
pub(crate) async fn next_batch(
    informer: &mut mpsc::UnboundedReceiver<Arc<Event>>,
    deadline: Option<tokio::time::Instant>,
) -> Option<Vec<Arc<Event>>> {
    let first = match deadline {
        Some(at) => match tokio::time::timeout_at(at, informer.recv()).await {
            Ok(first) => Some(first?),
            Err(_) => None,
        },
        None => Some(informer.recv().await?),
    };
    let mut batch: Vec<Arc<Event>> = first.into_iter().collect();
    while let Ok(more) = informer.try_recv() {
        batch.push(more);
    }
    Some(batch)
}

/// The current time as Kubernetes writes it (`2006-01-02T15:04:05Z`).
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The five-character suffix `generateName` appends (Kubernetes' alphabet: no vowels,
/// no look-alike digits).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// Everything of an object except `metadata` and `status`: what `generation` tracks.
fn generation_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

/// The object's `metadata.resourceVersion` as a number (0 when absent or malformed).
pub(crate) fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

impl Store {
    /// An empty store keeping the last `window` events for watches.
    pub(crate) fn new(window: usize) -> Self {
        let (changed, _) = watch::channel(0);
        Self {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                window: window.max(1),
                compacted_through: 0,
                tallies: BTreeMap::new(),
            }),
            changed,
            informers: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data that is still consistent
        // (every mutation completes before it is published), so keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that sees the latest RV whenever anything changes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The latest resourceVersion.
    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest RV a watch may start from.
    pub(crate) fn oldest_rv(&self) -> u64 {
        self.lock().compacted_through
    }

    /// Every event from now on, in order, for an in-process consumer; `None` once the
    /// store is gone.
    pub(crate) fn informer(&self) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }

    fn record(&self, inner: &mut Inner, event: Event) {
        let event = Arc::new(event);
        // Under the store's lock, so consumers get events in resourceVersion order.
        self.informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|tx| tx.send(event.clone()).is_ok());
        inner.history.push_back(event);
        while inner.history.len() > inner.window {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted_through = old.rv;
            }
        }
        self.changed.send_replace(inner.rv);
    }

    /// Create an object: names it from `generateName` when it has no name, stamps uid,
    /// creationTimestamp, resourceVersion and generation 1. With `dry_run` nothing is kept.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when the name is taken.
    pub(crate) fn create(
        &self,
        resource: &Arc<str>,
        namespace: &str,
        mut object: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let objects = inner.objects.entry(resource.clone()).or_default();
        let meta = &mut object["metadata"];
        let mut name = meta["name"].as_str().unwrap_or_default().to_string();
        if name.is_empty() {
            let prefix = meta["generateName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            loop {
                name = format!("{prefix}{}", random_suffix());
                if !objects.contains_key(&(namespace.to_string(), name.clone())) {
                    break;
                }
            }
        }
        let key = (namespace.to_string(), name.clone());
        if objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        let rv = inner.rv + 1;
        let meta = object["metadata"]
            .as_object_mut()
            .expect("the API layer makes metadata an object");
        meta.insert("name".into(), json!(name));
        if namespace.is_empty() {
            meta.remove("namespace");
        } else {
            meta.insert("namespace".into(), json!(namespace));
        }
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        let object = Arc::new(object);
        if dry_run {
            return Ok(object);
        }
        inner.rv = rv;
        inner
            .objects
            .get_mut(resource)
            .expect("entry made above")
            .insert(key, object.clone());
        let live = inner.objects[resource].len() as u64;
        let tally = inner.tallies.entry(resource.clone()).or_default();
        tally.created += 1;
        tally.peak = tally.peak.max(live);
        self.record(
            &mut inner,
            Event {
                rv,
                resource: resource.clone(),
                namespace: namespace.to_string(),
                kind: EventType::Added,
                object: object.clone(),
                previous: None,
            },
        );
        Ok(object)
    }

    /// One object.
    pub(crate) fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .objects
            .get(resource)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object of a resource (in one namespace, or all), sorted by namespace and
    /// name, and the RV the list is consistent at.
    pub(crate) fn list(&self, resource: &str, namespace: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = match inner.objects.get(resource) {
            None => Vec::new(),
            Some(objects) => match namespace {
                None => objects.values().cloned().collect(),
                Some(ns) => objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, inner.rv)
    }

    /// What `resource` (its store key, `group/plural`) has held.
    pub(crate) fn tally(&self, resource: &str) -> Tally {
        let inner = self.lock();
        let tally = inner.tallies.get(resource).copied().unwrap_or_default();
        Tally {
            live: inner.objects.get(resource).map_or(0, |o| o.len() as u64),
            ..tally
        }
    }

    /// Every resource that currently holds objects.
    pub(crate) fn resources(&self) -> Vec<Arc<str>> {
        self.lock().objects.keys().cloned().collect()
    }

    /// Replace an object. `expected_rv` (when given) must match the stored one; uid and
    /// creationTimestamp are kept, `generation` is bumped when the non-metadata,
    /// non-status part changed. An object being deleted whose last finalizer goes is
    /// removed. An unchanged object is not written (no new RV, no event).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], or [`StoreError::Conflict`] on a stale RV.
    pub(crate) fn update(
        &self,
        resource: &Arc<str>,
        namespace: &str,
        name: &str,
        mut object: Value,
        expected_rv: Option<u64>,
        dry_run: bool,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let old = inner
            .objects
            .get(resource)
            .and_then(|o| o.get(&key))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        if let Some(rv) = expected_rv
            && rv != rv_of(&old)
        {
            return Err(StoreError::Conflict);
        }
        {
            let meta = object["metadata"]
                .as_object_mut()
                .expect("the API layer makes metadata an object");
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "generation",
            ] {
                match old["metadata"].get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
            meta.insert("name".into(), json!(name));
            if !namespace.is_empty() {
                meta.insert("namespace".into(), json!(namespace));
            }
            meta.insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
        }
        if object == *old {
            return Ok(old);
        }
        if generation_part(&object) != generation_part(&old) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            object["metadata"]["generation"] = json!(generation);
        }
        let rv = inner.rv + 1;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let terminating = old["metadata"].get("deletionTimestamp").is_some();
        let object = Arc::new(object);
        if dry_run {
            return Ok(object);
        }
        inner.rv = rv;
        let kind = if terminating && !has_finalizers(&object) {
            inner
                .objects
                .get_mut(resource)
                .expect("found above")
                .remove(&key);
            EventType::Deleted
        } else {
            inner
                .objects
                .get_mut(resource)
                .expect("found above")
                .insert(key, object.clone());
            EventType::Modified
        };
        self.record(
            &mut inner,
            Event {
                rv,
                resource: resource.clone(),
                namespace: namespace.to_string(),
                kind,
                object: object.clone(),
                previous: Some(old),
            },
        );
        Ok(object)
    }

    /// Delete an object, or mark it with `deletionTimestamp` while finalizers remain.
    /// `precondition` is an optional `(uid, resourceVersion)` pair that must match.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], or [`StoreError::Conflict`] when a precondition fails.
    pub(crate) fn delete(
        &self,
        resource: &Arc<str>,
        namespace: &str,
        name: &str,
        precondition: (Option<&str>, Option<u64>),
        dry_run: bool,
    ) -> Result<Deleted, StoreError> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let old = inner
            .objects
            .get(resource)
            .and_then(|o| o.get(&key))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        if let Some(uid) = precondition.0
            && old["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(StoreError::Conflict);
        }
        if let Some(rv) = precondition.1
            && rv != rv_of(&old)
        {
            return Err(StoreError::Conflict);
        }
        if dry_run {
            return Ok(Deleted::Removed(old));
        }
        let rv = inner.rv + 1;
        inner.rv = rv;
        let mut object = (*old).clone();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let (kind, result) = if has_finalizers(&old) {
            if old["metadata"].get("deletionTimestamp").is_some() {
                inner.rv -= 1;
                return Ok(Deleted::Pending(old));
            }
            object["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let object = Arc::new(object);
            inner
                .objects
                .get_mut(resource)
                .expect("found above")
                .insert(key, object.clone());
            (EventType::Modified, Deleted::Pending(object))
        } else {
            inner
                .objects
                .get_mut(resource)
                .expect("found above")
                .remove(&key);
            (EventType::Deleted, Deleted::Removed(Arc::new(object)))
        };
        let object = match &result {
            Deleted::Removed(o) | Deleted::Pending(o) => o.clone(),
        };
        self.record(
            &mut inner,
            Event {
                rv,
                resource: resource.clone(),
                namespace: namespace.to_string(),
                kind,
                object,
                previous: Some(old),
            },
        );
        Ok(result)
    }

    /// Every event of every resource after `since` (exclusive), for the garbage collector.
    ///
    /// # Errors
    /// [`StoreError::Gone`] when events after `since` have been dropped from the history.
    pub(crate) fn all_events_since(
        &self,
        since: u64,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let inner = self.lock();
        if since < inner.compacted_through {
            return Err(StoreError::Gone {
                asked: since,
                oldest: inner.compacted_through,
            });
        }
        let start = inner.history.partition_point(|e| e.rv <= since);
        Ok((inner.history.range(start..).cloned().collect(), inner.rv))
    }

    /// Every event after `since` (exclusive) for a resource, optionally in one namespace.
    ///
    /// # Errors
    /// [`StoreError::Gone`] when events after `since` have been dropped from the history.
    pub(crate) fn events_since(
        &self,
        resource: &str,
        namespace: Option<&str>,
        since: u64,
    ) -> Result<(Vec<Arc<Event>>, u64), StoreError> {
        let (events, rv) = self.all_events_since(since)?;
        let events = events
            .into_iter()
            .filter(|e| &*e.resource == resource && namespace.is_none_or(|ns| e.namespace == ns))
            .collect();
        Ok((events, rv))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res() -> Arc<str> {
        Arc::from("/pods")
    }

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"x": 1}})
    }

    #[test]
    fn resource_versions_increase_and_stale_updates_conflict() {
        let store = Store::new(100);
        let a = store.create(&res(), "default", pod("a"), false).unwrap();
        let b = store.create(&res(), "default", pod("b"), false).unwrap();
        assert!(rv_of(&b) > rv_of(&a));
        let mut changed = (*a).clone();
        changed["spec"]["x"] = json!(2);
        let updated = store
            .update(
                &res(),
                "default",
                "a",
                changed.clone(),
                Some(rv_of(&a)),
                false,
            )
            .unwrap();
        assert_eq!(updated["metadata"]["generation"], json!(2));
        assert_eq!(updated["metadata"]["uid"], a["metadata"]["uid"]);
        let err = store
            .update(&res(), "default", "a", changed, Some(rv_of(&a)), false)
            .unwrap_err();
        assert_eq!(err, StoreError::Conflict);
    }

    #[test]
    fn a_tally_counts_creates_and_the_most_objects_at_once() {
        let store = Store::new(100);
        store.create(&res(), "default", pod("a"), false).unwrap();
        store.create(&res(), "default", pod("b"), false).unwrap();
        store
            .delete(&res(), "default", "a", (None, None), false)
            .unwrap();
        store.create(&res(), "default", pod("c"), false).unwrap();
        store.create(&res(), "default", pod("d"), true).unwrap();
        assert_eq!(
            store.tally(&res()),
            Tally {
                created: 3,
                peak: 2,
                live: 2
            }
        );
        assert_eq!(store.tally("/services"), Tally::default());
    }

    #[test]
    fn metadata_only_changes_keep_the_generation() {
        let store = Store::new(100);
        let a = store.create(&res(), "default", pod("a"), false).unwrap();
        let mut labelled = (*a).clone();
        labelled["metadata"]["labels"] = json!({"k": "v"});
        let updated = store
            .update(&res(), "default", "a", labelled, None, false)
            .unwrap();
        assert_eq!(updated["metadata"]["generation"], json!(1));
        assert!(rv_of(&updated) > rv_of(&a));
    }

    #[test]
    fn generate_name_makes_distinct_names() {
        let store = Store::new(100);
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let obj = json!({"metadata": {"generateName": "w-"}});
            let made = store.create(&res(), "default", obj, false).unwrap();
            let name = made["metadata"]["name"].as_str().unwrap().to_string();
            assert!(name.starts_with("w-") && name.len() == 7, "{name}");
            names.insert(name);
        }
        assert_eq!(names.len(), 50);
    }

    #[test]
    fn finalizers_hold_a_deleted_object_until_removed() {
        let store = Store::new(100);
        let mut obj = pod("a");
        obj["metadata"]["finalizers"] = json!(["x/y"]);
        store.create(&res(), "default", obj, false).unwrap();
        let Deleted::Pending(marked) = store
            .delete(&res(), "default", "a", (None, None), false)
            .unwrap()
        else {
            panic!("finalizer should hold the object");
        };
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        let mut cleared = (*marked).clone();
        cleared["metadata"]["finalizers"] = json!([]);
        store
            .update(&res(), "default", "a", cleared, None, false)
            .unwrap();
        assert!(store.get("/pods", "default", "a").is_none());
        let (events, _) = store.events_since("/pods", None, 0).unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
    }

    #[test]
    fn history_window_compacts_and_reports_gone() {
        let store = Store::new(3);
        for i in 0..5 {
            store
                .create(&res(), "default", pod(&format!("p{i}")), false)
                .unwrap();
        }
        assert_eq!(store.oldest_rv(), 2);
        assert!(matches!(
            store.events_since("/pods", None, 1),
            Err(StoreError::Gone {
                asked: 1,
                oldest: 2
            })
        ));
        let (events, rv) = store.events_since("/pods", None, 2).unwrap();
        assert_eq!(events.iter().map(|e| e.rv).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(rv, 5);
    }
}
