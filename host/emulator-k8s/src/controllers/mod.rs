//! agent-sandbox's controllers (`../shared/specs/agent-sandbox/SEMANTICS.md` §0–4) and
//! the DaemonSet controller, run in-process against the store: every change is an event
//! that marks the objects whose reconcile it may affect (level-triggered, like
//! controller-runtime's work queues), and time-based transitions (claim cold start,
//! expiry, warm-member readiness) are bounded requeues, never a polling timer.
//!
//! The controllers read the store itself, not a lagging informer cache, so what they
//! just wrote is what they see next: the warm pool's expectations are met by
//! construction, and the invariant they protect (a pool never above `spec.replicas`)
//! is a test.

mod claim;
mod daemonset;
pub(crate) mod names;
mod sandbox;
mod template;
mod warmpool;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{self, Client};
use crate::state::State;
use crate::store::{Event, next_batch};

/// The field manager (and event source) of the agent-sandbox controllers.
pub(crate) const MANAGER: &str = "agent-sandbox-controller";

/// Time-based behaviour, shortened by tests.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// A warm member not Ready after this long is replaced (upstream: 5m).
    pub warm_ready_timeout: Duration,
    /// A claim with no warm candidate that has a pod IP goes cold after this long
    /// (upstream: 2 s, retried every 500 ms).
    pub cold_start_after: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            warm_ready_timeout: Duration::from_secs(300),
            cold_start_after: Duration::from_secs(2),
        }
    }
}

/// What one reconcile is about, or a set of them to find at reconcile time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Key {
    Sandbox(String, String),
    Template(String, String),
    Pool(String, String),
    Claim(String, String),
    DaemonSet(String, String),
    /// The pools using a template, and their claims.
    TemplateUsers(String, String),
    /// The claims naming a pool.
    PoolClaims(String, String),
    /// Every DaemonSet (a node changed).
    AllDaemonSets,
}

/// State the controllers keep between passes (upstream keeps these in memory too).
#[derive(Default)]
struct Memory {
    /// When the claim controller first saw each claim (by uid).
    first_seen: HashMap<String, Instant>,
    /// Members already reported `WarmPoolNotProgressing` (by uid).
    reported_unschedulable: BTreeSet<String>,
    /// Sandboxes carrying each pool's label, by (namespace, pool name hash): the
    /// per-pool index upstream's claim controller keeps from Sandbox events, so a
    /// claim or a pool pass looks at its members, not at every sandbox.
    labelled: HashMap<(String, String), BTreeSet<String>>,
}

impl Memory {
    fn pool_label(object: &Value) -> Option<(String, String)> {
        let hash = client::label(object, names::WARM_POOL_SANDBOX)?;
        Some((
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            hash.to_string(),
        ))
    }

    /// Follow one Sandbox event.
    fn index(&mut self, event: &Event) {
        let name = event.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        if let Some(before) = event.previous.as_deref().and_then(Self::pool_label)
            && let Some(set) = self.labelled.get_mut(&before)
        {
            set.remove(name);
        }
        if event.kind != crate::store::EventType::Deleted
            && let Some(now) = Self::pool_label(&event.object)
        {
            self.labelled
                .entry(now)
                .or_default()
                .insert(name.to_string());
        }
    }

    /// Rebuild the index from the store.
    fn reindex(&mut self, c: &Client<'_>) {
        self.labelled.clear();
        for sb in c.list(client::SANDBOXES, None) {
            if let Some(key) = Self::pool_label(&sb) {
                let name = sb["metadata"]["name"].as_str().unwrap_or_default();
                self.labelled
                    .entry(key)
                    .or_default()
                    .insert(name.to_string());
            }
        }
    }

    /// The sandboxes in `namespace` labelled as members of the pool whose name hashes
    /// to `hash`.
    fn labelled(&self, c: &Client<'_>, namespace: &str, hash: &str) -> Vec<Arc<Value>> {
        self.labelled
            .get(&(namespace.to_string(), hash.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|name| c.get(client::SANDBOXES, namespace, name))
            .filter(|sb| client::label(sb, names::WARM_POOL_SANDBOX) == Some(hash))
            .collect()
    }
}

/// What a reconcile asks for next: run again after this long.
type Requeue = Option<Duration>;

/// The keys an event marks dirty.
fn keys_of(event: &Event, out: &mut BTreeSet<Key>) {
    let object = &event.object;
    let (ns, name) = client::names(object);
    for o in std::iter::once(object).chain(event.previous.as_ref()) {
        for r in o["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let owner = r["name"].as_str().unwrap_or_default().to_string();
            let key = match r["kind"].as_str() {
                Some("Sandbox") => Key::Sandbox(ns.clone(), owner),
                Some("SandboxWarmPool") => Key::Pool(ns.clone(), owner),
                Some("SandboxClaim") => Key::Claim(ns.clone(), owner),
                Some("SandboxTemplate") => Key::Template(ns.clone(), owner),
                Some("DaemonSet") => Key::DaemonSet(ns.clone(), owner),
                _ => continue,
            };
            out.insert(key);
        }
    }
    let resource = &*event.resource;
    let key = if resource == client::SANDBOXES.key() {
        Key::Sandbox(ns, name)
    } else if resource == client::TEMPLATES.key() {
        out.insert(Key::TemplateUsers(ns.clone(), name.clone()));
        Key::Template(ns, name)
    } else if resource == client::WARM_POOLS.key() {
        out.insert(Key::PoolClaims(ns.clone(), name.clone()));
        Key::Pool(ns, name)
    } else if resource == client::CLAIMS.key() {
        Key::Claim(ns, name)
    } else if resource == client::DAEMONSETS.key() {
        Key::DaemonSet(ns, name)
    } else if resource == client::NODES.key() {
        Key::AllDaemonSets
    } else {
        return;
    };
    out.insert(key);
}

/// Makes the key of one object from its namespace and name.
type KeyOf = fn(String, String) -> Key;

/// Every key there is (after a resync).
fn all_keys(c: &Client<'_>) -> BTreeSet<Key> {
    let mut out = BTreeSet::new();
    let kinds: [(client::Gvr, KeyOf); 5] = [
        (client::SANDBOXES, Key::Sandbox),
        (client::TEMPLATES, Key::Template),
        (client::WARM_POOLS, Key::Pool),
        (client::CLAIMS, Key::Claim),
        (client::DAEMONSETS, Key::DaemonSet),
    ];
    for (gvr, make) in kinds {
        for o in c.list(gvr, None) {
            let (ns, name) = client::names(&o);
            out.insert(make(ns, name));
        }
    }
    out
}

/// Expand the set keys into the objects they name.
fn expand(c: &Client<'_>, key: Key, out: &mut Vec<Key>) {
    match key {
        Key::TemplateUsers(ns, template) => {
            for pool in c.list(client::WARM_POOLS, Some(&ns)) {
                if pool["spec"]["sandboxTemplateRef"]["name"] == template.as_str() {
                    let (_, name) = client::names(&pool);
                    expand(c, Key::PoolClaims(ns.clone(), name.clone()), out);
                    out.push(Key::Pool(ns.clone(), name));
                }
            }
        }
        Key::PoolClaims(ns, pool) => {
            for claim in c.list(client::CLAIMS, Some(&ns)) {
                if claim["spec"]["warmPoolRef"]["name"] == pool.as_str() {
                    out.push(Key::Claim(ns.clone(), client::names(&claim).1));
                }
            }
        }
        Key::AllDaemonSets => {
            for ds in c.list(client::DAEMONSETS, None) {
                let (ns, name) = client::names(&ds);
                out.push(Key::DaemonSet(ns, name));
            }
        }
        other => out.push(other),
    }
}

fn reconcile(c: &Client<'_>, tuning: &Tuning, memory: &mut Memory, key: &Key) -> Requeue {
    match key {
        Key::Sandbox(ns, name) => sandbox::reconcile(c, ns, name),
        Key::Template(ns, name) => template::reconcile(c, ns, name),
        Key::Pool(ns, name) => warmpool::reconcile(c, tuning, memory, ns, name),
        Key::Claim(ns, name) => claim::reconcile(c, tuning, memory, ns, name),
        Key::DaemonSet(ns, name) => daemonset::reconcile(c, ns, name),
        Key::TemplateUsers(..) | Key::PoolClaims(..) | Key::AllDaemonSets => None,
    }
}

/// Run the controllers until the store's change channel closes.
pub(crate) async fn run(state: Arc<State>, tuning: Tuning) {
    let c = Client::new(&state, MANAGER);
    // Subscribed before the first look, so nothing falls between the two.
    let mut informer = state.store.informer();
    let mut memory = Memory::default();
    memory.reindex(&c);
    let mut dirty = all_keys(&c);
    let mut requeue: BTreeMap<Key, Instant> = BTreeMap::new();
    let sandboxes = client::SANDBOXES.key();
    loop {
        let now = Instant::now();
        let due: Vec<Key> = requeue
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            requeue.remove(&key);
            dirty.insert(key);
        }
        let mut keys = Vec::new();
        for key in std::mem::take(&mut dirty) {
            expand(&c, key, &mut keys);
        }
        keys.sort();
        keys.dedup();
        for (i, key) in keys.iter().enumerate() {
            if let Some(after) = reconcile(&c, &tuning, &mut memory, key) {
                let at = Instant::now() + after;
                let slot = requeue.entry(key.clone()).or_insert(at);
                *slot = (*slot).min(at);
            }
            if i % 64 == 63 {
                tokio::task::yield_now().await;
            }
        }
        let next = requeue.values().min().map(|at| (*at).into());
        let Some(events) = next_batch(&mut informer, next).await else {
            return;
        };
        for e in &events {
            if *e.resource == *sandboxes {
                memory.index(e);
            }
            keys_of(e, &mut dirty);
        }
    }
}

/// `metadata.creationTimestamp` as a system time.
pub(crate) fn created_at(object: &Value) -> Option<std::time::SystemTime> {
    object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|s| humantime::parse_rfc3339(s).ok())
}

/// How long until `at` (zero when past).
fn until(at: std::time::SystemTime) -> Duration {
    at.duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
}

/// An RFC 3339 time field as a system time.
fn time_field(value: &Value) -> Option<std::time::SystemTime> {
    value
        .as_str()
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
}
