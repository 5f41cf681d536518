//! The SandboxWarmPool controller (`extensions/controllers/sandboxwarmpool_controller.go`):
//! members labelled with the pool's name hash, filled in slow-start batches (1, 2, 4, …,
//! at most 300 a pass) up to `spec.replicas` counting active and terminating members,
//! members not Ready in time replaced (kept, with a `WarmPoolNotProgressing` event, when
//! their pod is Unschedulable), scale-down of not-Ready members first then the newest,
//! orphans adopted, `Recreate` replacing members of an older blueprint, and the status.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::names::{self, WARM_POOL_SANDBOX};
use super::template::{blueprint, blueprint_hash};
use super::{Memory, Requeue, Tuning, created_at};
use crate::client::{self, Client, PODS, SANDBOXES, TEMPLATES, WARM_POOLS};

/// Most members created in one pass (upstream's batch flag default).
const MAX_CREATES_PER_PASS: usize = 300;

fn new_member(pool: &Value, template: &Value, pool_name: &str, template_name: &str) -> Value {
    let mut spec = blueprint(template);
    let bhash = blueprint_hash(&spec);
    let template_hash = names::name_hash(template_name);
    let pt_meta = &mut spec["podTemplate"]["metadata"];
    if !pt_meta.is_object() {
        *pt_meta = json!({});
    }
    for (k, v) in [
        (names::TEMPLATE_REF_HASH, &template_hash),
        (names::TEMPLATE_HASH, &bhash),
        (names::POD_TEMPLATE_HASH, &bhash),
    ] {
        pt_meta["labels"][k] = json!(v);
    }
    if pt_meta["annotations"].get(names::SAFE_TO_EVICT).is_none() {
        pt_meta["annotations"][names::SAFE_TO_EVICT] = json!("true");
    }
    json!({
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {
            "generateName": format!("{pool_name}-"),
            "labels": {
                WARM_POOL_SANDBOX: names::name_hash(pool_name),
                names::TEMPLATE_REF_HASH: template_hash,
                names::LAUNCH_TYPE: "warm",
                names::TEMPLATE_HASH: bhash,
                names::POD_TEMPLATE_HASH: bhash,
                names::CREATED_BY: "controller",
            },
            "annotations": {names::TEMPLATE_REF: template_name},
            "ownerReferences": [client::controller_ref(pool)],
        },
        "spec": spec,
    })
}

fn ready(sandbox: &Value) -> bool {
    client::condition_true(sandbox, "Ready")
}

fn unschedulable(c: &Client<'_>, sandbox: &Value) -> bool {
    let (ns, name) = client::names(sandbox);
    let pod_name = client::annotation(sandbox, names::POD_NAME)
        .unwrap_or(&name)
        .to_string();
    c.get(PODS, &ns, &pod_name).is_some_and(|p| {
        client::condition(&p, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable")
    })
}

fn delete_member(c: &Client<'_>, member: &Value) {
    let (ns, name) = client::names(member);
    if let Err(error) = c.delete(
        SANDBOXES,
        &ns,
        &name,
        "Background",
        member["metadata"]["uid"].as_str(),
    ) {
        tracing::debug!(%error, "deleting a warm member");
    }
}

/// Create `count` members in slow-start batches (1, 2, 4, …); a batch with a failure
/// ends the pass, as `slowStartBatch` does.
fn fill(
    c: &Client<'_>,
    pool: &Value,
    template: &Value,
    ns: &str,
    pool_name: &str,
    template_name: &str,
    count: usize,
) {
    let mut created = 0;
    let mut batch = 1;
    while created < count {
        let this = batch.min(count - created);
        let mut failed = false;
        for _ in 0..this {
            if let Err(error) = c.create(
                SANDBOXES,
                ns,
                new_member(pool, template, pool_name, template_name),
            ) {
                tracing::debug!(%error, pool = pool_name, "creating a warm member");
                failed = true;
            }
        }
        if failed {
            return;
        }
        created += this;
        batch *= 2;
    }
}

/// The pool's members that are not being deleted.
pub(super) fn active_members(c: &Client<'_>, memory: &Memory, pool: &Value) -> Vec<Arc<Value>> {
    let (ns, name) = client::names(pool);
    memory
        .labelled(c, &ns, &names::name_hash(&name))
        .into_iter()
        .filter(|sb| client::controlled_by(sb, pool) && !client::deleting(sb))
        .collect()
}

/// Reconcile one SandboxWarmPool.
pub(super) fn reconcile(
    c: &Client<'_>,
    tuning: &Tuning,
    memory: &mut Memory,
    ns: &str,
    name: &str,
) -> Requeue {
    let pool = (*c.get(WARM_POOLS, ns, name)?).clone();
    if client::deleting(&pool) {
        return None;
    }
    let hash = names::name_hash(name);
    let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let template = c.get(TEMPLATES, ns, &template_name);
    let current_hash = template.as_ref().map(|t| blueprint_hash(&blueprint(t)));
    let recreate = pool["spec"]["updateStrategy"]["type"] == "Recreate";
    let mut members: Vec<Arc<Value>> = Vec::new();
    for sb in memory.labelled(c, ns, &hash) {
        match client::controller_of(&sb) {
            Some(_) if client::controlled_by(&sb, &pool) => members.push(sb),
            Some(_) => {}
            None => {
                // An orphan of this pool: adopt it, unless it is of an older blueprint.
                let stale = current_hash
                    .as_deref()
                    .is_some_and(|h| client::label(&sb, names::TEMPLATE_HASH) != Some(h));
                if stale {
                    delete_member(c, &sb);
                } else {
                    let mut adopted = (*sb).clone();
                    adopted["metadata"]["ownerReferences"] = json!([client::controller_ref(&pool)]);
                    if let Ok(updated) = c.update(SANDBOXES, adopted) {
                        members.push(Arc::new(updated));
                    }
                }
            }
        }
    }
    let (terminating, mut active): (Vec<Arc<Value>>, Vec<Arc<Value>>) =
        members.into_iter().partition(|m| client::deleting(m));
    let now = SystemTime::now();
    let mut requeue: Requeue = None;
    let mut keep = Vec::new();
    for member in active.drain(..) {
        let stale = recreate
            && current_hash
                .as_deref()
                .is_some_and(|h| client::label(&member, names::TEMPLATE_HASH) != Some(h));
        if stale {
            delete_member(c, &member);
            continue;
        }
        if !ready(&member) {
            let deadline = created_at(&member).map(|t| t + tuning.warm_ready_timeout);
            match deadline {
                Some(d) if d <= now => {
                    if unschedulable(c, &member) {
                        let uid = member["metadata"]["uid"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        if memory.reported_unschedulable.insert(uid) {
                            c.event(
                                &pool,
                                "Warning",
                                "WarmPoolNotProgressing",
                                &format!(
                                    "Sandbox {} is not Ready: its pod is Unschedulable",
                                    client::names(&member).1
                                ),
                            );
                        }
                    } else {
                        delete_member(c, &member);
                        continue;
                    }
                }
                Some(d) => {
                    let after = d.duration_since(now).unwrap_or_default();
                    requeue = Some(requeue.map_or(after, |r| r.min(after)));
                }
                None => {}
            }
        }
        keep.push(member);
    }
    let mut active = keep;
    let desired = pool["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    let population = active.len() + terminating.len();
    if population < desired
        && let Some(template) = &template
    {
        let count = (desired - population).min(MAX_CREATES_PER_PASS);
        fill(c, &pool, template, ns, name, &template_name, count);
    } else if active.len() > desired {
        // Not Ready first, then the newest.
        active.sort_by(|a, b| {
            ready(a)
                .cmp(&ready(b))
                .then_with(|| created_at(b).cmp(&created_at(a)))
                .then_with(|| client::names(b).1.cmp(&client::names(a).1))
        });
        let excess = active.len() - desired;
        for member in active.drain(..excess) {
            delete_member(c, &member);
        }
    }
    let members = active_members(c, memory, &pool);
    let status = json!({
        "replicas": members.len(),
        "readyReplicas": members.iter().filter(|m| ready(m)).count(),
        "selector": format!("{WARM_POOL_SANDBOX}={hash}"),
        "observedGeneration": pool["metadata"]["generation"],
    });
    if pool["status"] != status
        && let Err(error) = c.merge_patch(WARM_POOLS, ns, name, &json!({"status": status}), true)
    {
        tracing::debug!(%error, "writing pool status");
    }
    requeue
}
