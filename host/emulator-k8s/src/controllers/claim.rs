//! The SandboxClaim controller (`extensions/controllers/sandboxclaim_controller.go`):
//! the sandbox a claim has (status, then its annotation, then one named like it), else
//! warm adoption (candidates with pod IPs, Ready ones first, on the node holding most
//! candidates; the claim annotation PUT, then an RV-locked merge patch moving the
//! sandbox to the claim), else after the cold-start delay a cold Sandbox named like the
//! claim; the Ready and Finished conditions; expiry by shutdown time or TTL after
//! finishing, and the shutdown policies. Cleanup is by garbage collection only.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};

use super::names::{self, WARM_POOL_SANDBOX};
use super::template::blueprint;
use super::{Memory, Requeue, Tuning, time_field, until};
use crate::client::{self, CLAIMS, Client, SANDBOXES, TEMPLATES, WARM_POOLS};

/// How often a claim looks again for a warm candidate before it goes cold.
const CANDIDATE_RETRY: Duration = Duration::from_millis(500);
/// Attempts at adopting one of the candidates.
const ADOPTION_ATTEMPTS: usize = 3;
/// A claim whose pool does not exist looks again after this long (and on pool events).
const POOL_NOT_FOUND_RETRY: Duration = Duration::from_secs(60);

/// Why a claim has no sandbox.
enum Failure {
    Reason(&'static str, String),
}

fn ready_from(
    claim: &Value,
    sandbox: Option<&Value>,
    failure: Option<&Failure>,
    expired: bool,
) -> Value {
    let generation = &claim["metadata"]["generation"];
    let not_ready = |reason: &str, message: &str| json!({"type": "Ready", "status": "False", "reason": reason, "message": message, "observedGeneration": generation});
    if let Some(Failure::Reason(reason, message)) = failure {
        return not_ready(reason, message);
    }
    if expired {
        return not_ready("ClaimExpired", "Claim expired. Sandbox cleanup initiated.");
    }
    let Some(sandbox) = sandbox else {
        return not_ready("SandboxMissing", "Sandbox does not exist");
    };
    match client::condition(sandbox, "Ready") {
        Some(r) if r["reason"] == "SandboxExpired" => not_ready(
            "SandboxExpired",
            "Underlying Sandbox resource has expired independently of the Claim.",
        ),
        Some(r) => {
            let mut forwarded = r.clone();
            forwarded["observedGeneration"] = generation.clone();
            forwarded
        }
        None => not_ready("SandboxNotReady", "Sandbox is not ready"),
    }
}

fn write_status(
    c: &Client<'_>,
    claim: &Value,
    sandbox: Option<&Value>,
    failure: Option<&Failure>,
    expired: bool,
) {
    let (ns, name) = client::names(claim);
    let mut conds = vec![ready_from(claim, sandbox, failure, expired)];
    if let Some(finished) = sandbox.and_then(|s| client::condition(s, "Finished")) {
        conds.push(finished.clone());
    } else if expired && let Some(kept) = client::condition(claim, "Finished") {
        conds.push(kept.clone());
    }
    let old = &claim["status"]["conditions"];
    let conditions = client::merge_conditions(Some(old), conds);
    // Forwarded conditions keep the sandbox's transition time.
    let mut status = json!({"conditions": conditions});
    match sandbox {
        Some(sb) => {
            let mut entry = json!({"name": sb["metadata"]["name"]});
            if let Some(ips) = sb["status"].get("podIPs") {
                entry["podIPs"] = ips.clone();
            }
            status["sandbox"] = entry;
        }
        None if failure.is_none() => status["sandbox"] = json!({}),
        None => {
            if let Some(kept) = claim["status"].get("sandbox") {
                status["sandbox"] = kept.clone();
            }
        }
    }
    if claim["status"] == status {
        return;
    }
    let mut patch = status.clone();
    if let Some(old) = claim["status"].as_object() {
        for k in old.keys() {
            if patch.get(k).is_none() {
                patch[k.as_str()] = Value::Null;
            }
        }
    }
    if patch["sandbox"].is_object() && claim["status"]["sandbox"].is_object() {
        for k in claim["status"]["sandbox"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
        {
            if patch["sandbox"].get(&k).is_none() {
                patch["sandbox"][k.as_str()] = Value::Null;
            }
        }
    }
    if let Err(error) = c.merge_patch(CLAIMS, &ns, &name, &json!({"status": patch}), true) {
        tracing::debug!(%error, claim = name, "writing claim status");
    }
}

/// When the claim expires: the earlier of its shutdown time and the TTL after its
/// sandbox finished (`internal/lifecycle/expiry.go`).
fn expiry(claim: &Value) -> Option<SystemTime> {
    let lifecycle = &claim["spec"]["lifecycle"];
    let shutdown = time_field(&lifecycle["shutdownTime"]);
    let ttl = lifecycle["ttlSecondsAfterFinished"]
        .as_u64()
        .and_then(|ttl| {
            client::condition(claim, "Finished")
                .filter(|f| f["status"] == "True")
                .and_then(|f| time_field(&f["lastTransitionTime"]))
                .map(|t| t + Duration::from_secs(ttl))
        });
    match (shutdown, ttl) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn expire(c: &Client<'_>, claim: &Value, sandbox: Option<&Value>) -> Requeue {
    let (ns, name) = client::names(claim);
    let already = client::condition(claim, "Ready").is_some_and(|r| r["reason"] == "ClaimExpired");
    if !already {
        c.event(claim, "Normal", "ClaimExpired", "Claim expired");
        write_status(c, claim, sandbox, None, true);
    }
    match claim["spec"]["lifecycle"]["shutdownPolicy"].as_str() {
        Some("Delete") => {
            let _ = c.delete(
                CLAIMS,
                &ns,
                &name,
                "Background",
                claim["metadata"]["uid"].as_str(),
            );
        }
        Some("DeleteForeground") => {
            let _ = c.delete(
                CLAIMS,
                &ns,
                &name,
                "Foreground",
                claim["metadata"]["uid"].as_str(),
            );
        }
        _ => {
            if let Some(sb) = sandbox {
                let (sns, sname) = client::names(sb);
                let _ = c.delete(
                    SANDBOXES,
                    &sns,
                    &sname,
                    "Background",
                    sb["metadata"]["uid"].as_str(),
                );
            }
        }
    }
    None
}

fn string_map(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// The pod template metadata of a sandbox serving `claim`: the template's, the claim's
/// identity and template hash, its `created-by`, and `additionalPodMetadata`.
fn pod_metadata(claim: &Value, template: &Value, template_hash: &str) -> Value {
    let base = &template["spec"]["podTemplate"]["metadata"];
    let mut labels = string_map(&base["labels"]);
    let mut annotations = string_map(&base["annotations"]);
    labels.insert(names::CLAIM_UID.into(), claim["metadata"]["uid"].clone());
    labels.insert(names::TEMPLATE_REF_HASH.into(), json!(template_hash));
    match client::label(claim, names::CREATED_BY).filter(|v| !v.is_empty()) {
        Some(v) => labels.insert(names::CREATED_BY.into(), json!(v)),
        None => labels.remove(names::CREATED_BY),
    };
    let extra = &claim["spec"]["additionalPodMetadata"];
    labels.extend(string_map(&extra["labels"]));
    annotations.extend(string_map(&extra["annotations"]));
    let mut meta = json!({"labels": labels});
    if !annotations.is_empty() {
        meta["annotations"] = Value::Object(annotations);
    }
    meta
}

/// The metadata keys a claim may not add to pods.
fn invalid_metadata(claim: &Value) -> Option<String> {
    let extra = &claim["spec"]["additionalPodMetadata"];
    for field in ["labels", "annotations"] {
        for key in extra[field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if names::is_system_key(key) {
                return Some(format!(
                    "additionalPodMetadata.{field}: key {key:?} uses a reserved prefix"
                ));
            }
        }
    }
    None
}

/// Merge the claim's env into the blueprint's containers by the template's policy.
fn inject_env(claim: &Value, template: &Value, spec: &mut Value) -> Result<(), Failure> {
    let env = claim["spec"]["env"].as_array().cloned().unwrap_or_default();
    if env.is_empty() {
        return Ok(());
    }
    let policy = template["spec"]["envVarsInjectionPolicy"]
        .as_str()
        .unwrap_or("Disallowed");
    if policy == "Disallowed" {
        return Err(Failure::Reason(
            "EnvVarsInjectionRejected",
            "the SandboxTemplate's envVarsInjectionPolicy is Disallowed".into(),
        ));
    }
    for container in spec["podTemplate"]["spec"]["containers"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let mut list = container["env"].as_array().cloned().unwrap_or_default();
        for var in &env {
            let existing = list.iter().position(|e| e["name"] == var["name"]);
            match (existing, policy) {
                (Some(_), "Allowed") => {
                    return Err(Failure::Reason(
                        "EnvVarsInjectionRejected",
                        format!(
                            "env var {} is set by the template; its policy is Allowed, not Overrides",
                            var["name"]
                        ),
                    ));
                }
                (Some(i), _) => list[i] = var.clone(),
                (None, _) => list.push(var.clone()),
            }
        }
        container["env"] = Value::Array(list);
    }
    Ok(())
}

fn merge_vcts(claim: &Value, template: &Value, spec: &mut Value) -> Result<(), Failure> {
    let vcts = claim["spec"]["volumeClaimTemplates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if vcts.is_empty() {
        return Ok(());
    }
    let policy = template["spec"]["volumeClaimTemplatesPolicy"]
        .as_str()
        .unwrap_or("Disallowed");
    if policy == "Disallowed" {
        return Err(Failure::Reason(
            "VolumeClaimTemplatesError",
            "the SandboxTemplate's volumeClaimTemplatesPolicy is Disallowed".into(),
        ));
    }
    let mut list = spec["volumeClaimTemplates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for vct in vcts {
        let name = &vct["metadata"]["name"];
        match list.iter().position(|v| v["metadata"]["name"] == *name) {
            Some(_) if policy == "Allowed" => {
                return Err(Failure::Reason(
                    "VolumeClaimTemplatesError",
                    format!("volume claim template {name} is set by the template"),
                ));
            }
            Some(i) => list[i] = vct,
            None => list.push(vct),
        }
    }
    spec["volumeClaimTemplates"] = Value::Array(list);
    Ok(())
}

fn create_cold(
    c: &Client<'_>,
    claim: &Value,
    template: &Value,
    template_name: &str,
) -> Result<Value, Failure> {
    let (ns, name) = client::names(claim);
    let mut spec = blueprint(template);
    let template_hash = names::name_hash(template_name);
    spec["podTemplate"]["metadata"] = pod_metadata(claim, template, &template_hash);
    inject_env(claim, template, &mut spec)?;
    merge_vcts(claim, template, &mut spec)?;
    let mut labels = json!({
        names::CLAIM_UID: claim["metadata"]["uid"],
        names::LAUNCH_TYPE: "cold",
        names::TEMPLATE_REF_HASH: template_hash,
    });
    if let Some(by) = client::label(claim, names::CREATED_BY) {
        labels[names::CREATED_BY] = json!(by);
    }
    let sandbox = json!({
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [client::controller_ref(claim)]},
        "spec": spec,
    });
    match c.create(SANDBOXES, &ns, sandbox) {
        Ok(made) => {
            c.event(
                claim,
                "Normal",
                "SandboxProvisioned",
                &format!("Created Sandbox {name}"),
            );
            Ok(made)
        }
        Err(e) if e.code == 409 => Err(Failure::Reason(
            "SandboxCreatePending",
            "Sandbox already created; waiting for cache to converge".into(),
        )),
        Err(e) => Err(Failure::Reason(
            "ReconcilerError",
            format!("Error seen: {}", e.message),
        )),
    }
}

/// Candidates of `pool` in the order adoption tries them.
fn candidates(c: &Client<'_>, memory: &Memory, pool: &Value) -> Vec<std::sync::Arc<Value>> {
    let members: Vec<std::sync::Arc<Value>> = super::warmpool::active_members(c, memory, pool)
        .into_iter()
        .filter(|sb| {
            sb["status"]["podIPs"]
                .as_array()
                .is_some_and(|ips| !ips.is_empty())
        })
        .collect();
    let any_ready = members.iter().any(|m| client::condition_true(m, "Ready"));
    let mut chosen: Vec<std::sync::Arc<Value>> = members
        .into_iter()
        .filter(|m| !any_ready || client::condition_true(m, "Ready"))
        .collect();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for m in &chosen {
        *per_node
            .entry(
                m["status"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
            .or_default() += 1;
    }
    // Most candidates on the node first, then the oldest, then by name.
    chosen.sort_by_cached_key(|s| {
        let on_node = per_node
            .get(s["status"]["nodeName"].as_str().unwrap_or_default())
            .copied()
            .unwrap_or(0);
        (
            std::cmp::Reverse(on_node),
            super::created_at(s),
            client::names(s).1,
        )
    });
    chosen
}

/// Move `candidate` to `claim`: the claim annotation (PUT), then the RV-locked patch.
fn adopt(
    c: &Client<'_>,
    claim: &Value,
    candidate: &Value,
    template: Option<&Value>,
    template_name: &str,
) -> Result<Value, ()> {
    let (ns, sb_name) = client::names(candidate);
    let mut annotated = claim.clone();
    annotated["metadata"]["annotations"][names::CLAIM_SANDBOX_NAME] = json!(sb_name);
    if let Some(map) = annotated.as_object_mut() {
        map.remove("status");
    }
    let claim = c.update(CLAIMS, annotated).map_err(|_| ())?;
    let template_hash = client::label(candidate, names::TEMPLATE_REF_HASH)
        .map_or_else(|| names::name_hash(template_name), str::to_string);
    let mut labels = Map::new();
    for k in [
        WARM_POOL_SANDBOX,
        names::POD_TEMPLATE_HASH,
        names::TEMPLATE_HASH,
    ] {
        labels.insert(k.into(), Value::Null);
    }
    labels.insert(names::LAUNCH_TYPE.into(), json!("warm"));
    labels.insert(names::TEMPLATE_REF_HASH.into(), json!(template_hash));
    labels.insert(names::CLAIM_UID.into(), claim["metadata"]["uid"].clone());
    let pod_meta = match template {
        Some(t) => pod_metadata(&claim, t, &template_hash),
        None => {
            let mut meta = candidate["spec"]["podTemplate"]["metadata"].clone();
            meta["labels"][names::CLAIM_UID] = claim["metadata"]["uid"].clone();
            meta
        }
    };
    let mut spec_meta = pod_meta;
    // A merge patch replaces maps key by key: null what the new metadata drops.
    let old_meta = &candidate["spec"]["podTemplate"]["metadata"];
    for field in ["labels", "annotations"] {
        for key in old_meta[field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
        {
            if spec_meta[field].get(&key).is_none() {
                spec_meta[field][key.as_str()] = Value::Null;
            }
        }
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": candidate["metadata"]["resourceVersion"],
            "labels": labels,
            "annotations": {names::POD_NAME: sb_name},
            "ownerReferences": [client::controller_ref(&claim)],
        },
        "spec": {"podTemplate": {"metadata": spec_meta}},
    });
    match c.merge_patch(SANDBOXES, &ns, &sb_name, &patch, false) {
        Ok(adopted) => {
            c.event(
                &claim,
                "Normal",
                "SandboxAdopted",
                &format!("Adopted warm Sandbox {sb_name}"),
            );
            Ok(adopted)
        }
        Err(_) => {
            // Lost the race: take the annotation back so the next pass chooses afresh.
            if let Some(fresh) = c.get(CLAIMS, &ns, &client::names(&claim).1) {
                let mut undone = (*fresh).clone();
                if let Some(a) = undone["metadata"]["annotations"].as_object_mut() {
                    a.remove(names::CLAIM_SANDBOX_NAME);
                }
                if let Some(map) = undone.as_object_mut() {
                    map.remove("status");
                }
                let _ = c.update(CLAIMS, undone);
            }
            Err(())
        }
    }
}

/// The sandbox a claim already has: by status, annotation, then name.
fn existing(c: &Client<'_>, claim: &Value) -> Option<Value> {
    let (ns, name) = client::names(claim);
    let by_status = claim["status"]["sandbox"]["name"]
        .as_str()
        .filter(|s| !s.is_empty());
    let by_annotation = client::annotation(claim, names::CLAIM_SANDBOX_NAME);
    [by_status, by_annotation, Some(name.as_str())]
        .into_iter()
        .flatten()
        .find_map(|n| c.get(SANDBOXES, &ns, n))
        .filter(|sb| client::controlled_by(sb, claim))
        .map(|sb| (*sb).clone())
}

/// Reconcile one SandboxClaim.
pub(super) fn reconcile(
    c: &Client<'_>,
    tuning: &Tuning,
    memory: &mut Memory,
    ns: &str,
    name: &str,
) -> Requeue {
    let mut claim = (*c.get(CLAIMS, ns, name)?).clone();
    if client::deleting(&claim) {
        return None;
    }
    let uid = claim["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let first_seen = *memory.first_seen.entry(uid).or_insert_with(Instant::now);
    if client::annotation(&claim, names::FIRST_OBSERVED).is_none() {
        let patch = json!({"metadata": {"annotations": {names::FIRST_OBSERVED: crate::store::now_rfc3339()}}});
        if let Ok(updated) = c.merge_patch(CLAIMS, ns, name, &patch, false) {
            claim = updated;
        }
    }
    let sandbox = existing(c, &claim);
    let mut requeue = None;
    if let Some(at) = expiry(&claim) {
        if at <= SystemTime::now() {
            return expire(c, &claim, sandbox.as_ref());
        }
        requeue = Some(until(at));
    }
    if let Some(sb) = &sandbox {
        write_status(c, &claim, Some(sb), None, false);
        return requeue;
    }
    if let Some(message) = invalid_metadata(&claim) {
        write_status(
            c,
            &claim,
            None,
            Some(&Failure::Reason("InvalidMetadata", message)),
            false,
        );
        return requeue;
    }
    let pool_name = claim["spec"]["warmPoolRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(pool) = c.get(WARM_POOLS, ns, &pool_name) else {
        let failure = Failure::Reason(
            "WarmPoolNotFound",
            format!("SandboxWarmPool {pool_name:?} not found"),
        );
        write_status(c, &claim, None, Some(&failure), false);
        return Some(POOL_NOT_FOUND_RETRY);
    };
    let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let template = c.get(TEMPLATES, ns, &template_name);
    let forced_cold = claim["spec"]["env"]
        .as_array()
        .is_some_and(|e| !e.is_empty())
        || claim["spec"]["volumeClaimTemplates"]
            .as_array()
            .is_some_and(|v| !v.is_empty());
    if !forced_cold {
        let list = candidates(c, memory, &pool);
        if list.is_empty() && first_seen.elapsed() < tuning.cold_start_after {
            return Some(
                CANDIDATE_RETRY
                    .min(tuning.cold_start_after.saturating_sub(first_seen.elapsed()))
                    .max(Duration::from_millis(1)),
            );
        }
        for candidate in list.iter().take(ADOPTION_ATTEMPTS) {
            if let Ok(adopted) = adopt(c, &claim, candidate, template.as_deref(), &template_name) {
                let claim = c
                    .get(CLAIMS, ns, name)
                    .map_or(claim.clone(), |c| (*c).clone());
                write_status(c, &claim, Some(&adopted), None, false);
                return requeue;
            }
        }
        if !list.is_empty() {
            let failure = Failure::Reason(
                "AdoptionConflict",
                "every candidate was taken; the next pass retries from a converged view".into(),
            );
            write_status(c, &claim, None, Some(&failure), false);
            return Some(CANDIDATE_RETRY);
        }
    }
    let Some(template) = template else {
        let failure = Failure::Reason(
            "TemplateNotFound",
            format!("SandboxTemplate {template_name:?} not found"),
        );
        write_status(c, &claim, None, Some(&failure), false);
        return requeue;
    };
    match create_cold(c, &claim, &template, &template_name) {
        Ok(made) => write_status(c, &claim, Some(&made), None, false),
        Err(failure) => write_status(c, &claim, None, Some(&failure), false),
    }
    requeue
}
