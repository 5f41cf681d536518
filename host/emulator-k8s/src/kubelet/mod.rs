//! The scheduler and the kubelets of every node, driven by pod and node events: pods
//! without a node are bound (or marked Unschedulable with the scheduler's message and a
//! `FailedScheduling` event, and retried when capacity frees up); a bound pod's images
//! are pulled into its node's cache as its `imagePullPolicy` says (an OCI image from
//! its registry, for real; an image that cannot be pulled leaves it Pending in
//! `ErrImagePull`, then `ImagePullBackOff`, and a registry's failure is tried again
//! with back-off; `Never` and an image the node lacks, `ErrImageNeverPull`), it runs
//! as a local sandbox with
//! an IP from 127.42.0.0/16, and it goes `Succeeded` or `Failed` when its container's
//! command exits — it is never restarted. The command's output is the container's log
//! (`pods/log`). A deleted pod's sandbox is destroyed, and its logs dropped.

pub(crate) mod container_log;
pub(crate) mod quantity;
pub(crate) mod runtime;
pub(crate) mod scheduler;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::client::{self, Client, NODES, PODS};
use crate::state::State;
use crate::store::{EventType, next_batch, now_rfc3339};
use container_log::{ContainerLog, ReadOptions};
use runtime::{PullError, Runtime};

/// The kubelet's field manager and event source.
const KUBELET: &str = "kubelet";
/// The scheduler's.
const SCHEDULER: &str = "default-scheduler";
/// After `ErrImagePull`, the kubelet backs off before saying `ImagePullBackOff`.
const PULL_BACKOFF: Duration = Duration::from_secs(1);
/// The back-off before a registry pull is tried again starts here (the kubelet's
/// 10 s, scaled down) and doubles up to [`PULL_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_secs(2);
/// The longest back-off between pulls (the kubelet's is 300 s).
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Pod IPs: 127.42.0.0/16 (loopback only), not `.0`, `.1` (the nodes') or `.255`.
#[derive(Default)]
struct Addresses {
    used: BTreeSet<u16>,
    next: u16,
}

impl Addresses {
    fn take(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..=u16::MAX {
            let n = self.next;
            self.next = self.next.wrapping_add(1);
            if matches!(n & 0xff, 0 | 1 | 255) || self.used.contains(&n) {
                continue;
            }
            self.used.insert(n);
            return Some(Ipv4Addr::new(127, 42, (n >> 8) as u8, (n & 0xff) as u8));
        }
        None
    }

    fn give_back(&mut self, ip: &str) {
        if let Ok(ip) = ip.parse::<Ipv4Addr>() {
            let o = ip.octets();
            self.used.remove(&(u16::from(o[2]) << 8 | u16::from(o[3])));
        }
    }
}

/// What the kubelets share.
struct Kubelet {
    state: Arc<State>,
    runtime: Arc<Runtime>,
    addresses: Mutex<Addresses>,
    /// Pods (by uid) whose start has begun.
    started: Mutex<HashSet<String>>,
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn condition(kind: &str, status: &str) -> Value {
    json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now_rfc3339()})
}

fn containers(pod: &Value, field: &str) -> Vec<Value> {
    pod["spec"][field].as_array().cloned().unwrap_or_default()
}

/// A failed container's termination message: the tail of its log, as the kubelet
/// reads it under `terminationMessagePolicy: FallbackToLogsOnError` (the last 80
/// lines, at most 2048 bytes of them). The emulator does so for every pod, since it
/// reads no `terminationMessagePath` file.
fn failure_message(log: &ContainerLog) -> String {
    let tail = log.read(&ReadOptions {
        tail_lines: Some(80),
        limit_bytes: Some(2048),
        ..ReadOptions::default()
    });
    String::from_utf8_lossy(&tail).trim().to_string()
}

/// The `imagePullPolicy` Kubernetes defaults a container to: `Always` for an image
/// tagged `latest` or not tagged (nor pinned by digest), else `IfNotPresent`.
pub(crate) fn default_pull_policy(image: &str) -> String {
    let name = image.rsplit('/').next().unwrap_or(image);
    let tag = name
        .split('@')
        .next()
        .unwrap_or(name)
        .split_once(':')
        .map(|(_, t)| t);
    let always = !image.contains('@') && tag.is_none_or(|t| t == "latest");
    if always { "Always" } else { "IfNotPresent" }.to_string()
}

impl Kubelet {
    fn client(&self, manager: &'static str) -> Client<'_> {
        Client::new(&self.state, manager)
    }

    fn patch_status(&self, pod: &Value, status: Value) -> Option<Value> {
        let (ns, name) = client::names(pod);
        let c = self.client(KUBELET);
        // A pod deleted and recreated under the same name is not this one.
        if c.get(PODS, &ns, &name)
            .is_none_or(|p| p["metadata"]["uid"] != pod["metadata"]["uid"])
        {
            return None;
        }
        c.merge_patch(PODS, &ns, &name, &json!({"status": status}), true)
            .ok()
    }

    /// Bind every pending pod it can, in creation order.
    fn schedule(&self, pending: &mut BTreeSet<(String, String)>) {
        if pending.is_empty() {
            return;
        }
        let c = self.client(SCHEDULER);
        let nodes = c.list(NODES, None);
        let mut loads: Vec<scheduler::NodeLoad<'_>> =
            nodes.iter().map(|n| scheduler::NodeLoad::new(n)).collect();
        let index: BTreeMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n["metadata"]["name"].as_str().unwrap_or_default(), i))
            .collect();
        for p in c.list(PODS, None) {
            if let Some(&i) = p["spec"]["nodeName"].as_str().and_then(|n| index.get(n)) {
                loads[i].add(p);
            }
        }
        let mut queue: Vec<Value> = pending
            .iter()
            .filter_map(|(ns, name)| c.get(PODS, ns, name))
            .filter(|p| p["spec"]["nodeName"].is_null() && !client::deleting(p))
            .map(|p| (*p).clone())
            .collect();
        queue.sort_by(|a, b| {
            crate::controllers::created_at(a).cmp(&crate::controllers::created_at(b))
        });
        pending.clear();
        for pod in queue {
            let (ns, name) = client::names(&pod);
            match scheduler::choose(&pod, &loads) {
                Ok(chosen) => {
                    let node = loads[chosen].node()["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    if c.merge_patch(
                        PODS,
                        &ns,
                        &name,
                        &json!({"spec": {"nodeName": node}}),
                        false,
                    )
                    .is_err()
                    {
                        continue;
                    }
                    let status = json!({"conditions": [condition("PodScheduled", "True")]});
                    if let Some(p) = self.patch_status(&pod, status) {
                        c.event(
                            &p,
                            "Normal",
                            "Scheduled",
                            &format!("Successfully assigned {ns}/{name} to {node}"),
                        );
                        loads[chosen].add(Arc::new(p));
                    }
                }
                Err(message) => {
                    let previous = client::condition(&pod, "PodScheduled")
                        .and_then(|c| c["message"].as_str())
                        .map(str::to_string);
                    if previous.as_deref() != Some(message.as_str()) {
                        let mut cond = condition("PodScheduled", "False");
                        cond["reason"] = json!("Unschedulable");
                        cond["message"] = json!(message);
                        if let Some(p) = self.patch_status(&pod, json!({"conditions": [cond]})) {
                            c.event(&p, "Warning", "FailedScheduling", &message);
                        }
                    }
                }
            }
        }
    }

    /// Whether `pod` (this uid) still exists.
    fn exists(&self, pod: &Value) -> bool {
        let (ns, name) = client::names(pod);
        self.client(KUBELET)
            .get(PODS, &ns, &name)
            .is_some_and(|p| p["metadata"]["uid"] == pod["metadata"]["uid"])
    }

    /// Report a failed pull as the kubelet does: the container waiting in
    /// `ErrImagePull` (or `ErrImageNeverPull`) with events, then, for a pull that can
    /// succeed later, `ImagePullBackOff`. Returns whether to try again (a registry
    /// failure, the pod still there).
    async fn fail_pull(
        self: &Arc<Self>,
        pod: &Value,
        image: &str,
        container: &str,
        error: &PullError,
    ) -> bool {
        // What containerd answers the kubelet, and the kubelet's event around it.
        let rpc = match error {
            PullError::NotFound => format!(
                "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": not found (no directory or OCI image is mapped to it: --image {image}=DIR, or {{ oci = \"REF\" }} in --images-from)"
            ),
            PullError::NeedsIsolation => format!(
                "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": OCI images run in isolated pods only (--runtime namespaces), not plain ones"
            ),
            PullError::Registry {
                not_found: true,
                message,
            } => format!(
                "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {message}"
            ),
            PullError::Registry { message, .. } => format!(
                "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": {message}"
            ),
            PullError::NeverPull => String::new(),
        };
        let (reason, event_reason, message, status_message) = match error {
            PullError::NeverPull => {
                let message =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                (
                    "ErrImageNeverPull",
                    "ErrImageNeverPull",
                    message.clone(),
                    message,
                )
            }
            _ => (
                "ErrImagePull",
                "Failed",
                format!("Failed to pull image \"{image}\": {rpc}"),
                rpc,
            ),
        };
        let waiting = |reason: &str, message: &str| json!({"phase": "Pending", "containerStatuses": [{"name": container, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]});
        if let Some(p) = self.patch_status(pod, waiting(reason, &status_message)) {
            let c = self.client(KUBELET);
            c.event(&p, "Warning", event_reason, &message);
            c.event(&p, "Warning", "Failed", &format!("Error: {reason}"));
        } else {
            return false;
        }
        if *error == PullError::NeverPull {
            return false;
        }
        // The kubelet backs off before it tries again.
        tokio::time::sleep(PULL_BACKOFF).await;
        let back_off = format!("Back-off pulling image \"{image}\"");
        match self.patch_status(pod, waiting("ImagePullBackOff", &back_off)) {
            Some(p) => {
                let c = self.client(KUBELET);
                c.event(&p, "Normal", "BackOff", &back_off);
                c.event(&p, "Warning", "Failed", "Error: ImagePullBackOff");
            }
            None => return false,
        }
        // No directory or mapping appears meanwhile; a registry may get the image.
        matches!(error, PullError::Registry { .. })
    }

    /// Pull `image` for a container of `pod` on `node`, as the kubelet does: events
    /// for each attempt, and a failed registry pull tried again with back-off until
    /// it succeeds or the pod is gone. Returns whether the image is there.
    async fn pull_image(
        self: &Arc<Self>,
        pod: &Value,
        node: &str,
        image: &str,
        container: &str,
        policy: &str,
    ) -> bool {
        let c = self.client(KUBELET);
        if self.runtime.cached(node, image) && policy != "Always" {
            c.event(
                pod,
                "Normal",
                "Pulled",
                &format!("Container image \"{image}\" already present on machine"),
            );
            return true;
        }
        let mut backoff = RETRY_BACKOFF;
        loop {
            if self.runtime.knows(image) && policy != "Never" {
                c.event(
                    pod,
                    "Normal",
                    "Pulling",
                    &format!("Pulling image \"{image}\""),
                );
            }
            match self.runtime.pull(node, image, policy).await {
                Ok(pulled) => {
                    let pulled = pulled.unwrap_or_default();
                    let took = pulled.took.as_secs_f64();
                    let message = match pulled.size {
                        Some(size) => format!(
                            "Successfully pulled image \"{image}\" in {took:.3}s ({took:.3}s including waiting). Image size: {size} bytes."
                        ),
                        None => format!("Successfully pulled image \"{image}\" in {took:.3}s"),
                    };
                    c.event(pod, "Normal", "Pulled", &message);
                    return true;
                }
                Err(error) => {
                    if !self.fail_pull(pod, image, container, &error).await {
                        return false;
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(PULL_BACKOFF_MAX);
            if !self.exists(pod) {
                return false;
            }
        }
    }

    /// Pull, make the sandbox, report Running; then follow the main command, if any.
    async fn start(self: Arc<Self>, pod: Value) {
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let c = self.client(KUBELET);
        let mut all = containers(&pod, "initContainers");
        let main = containers(&pod, "containers");
        all.extend(main.iter().cloned());
        let pulls_before = self.runtime.node_images(&node).len();
        for ct in &all {
            let image = ct["image"].as_str().unwrap_or_default();
            let name = ct["name"].as_str().unwrap_or_default();
            let policy = match ct["imagePullPolicy"].as_str() {
                Some(policy) => policy.to_string(),
                None if self.runtime.is_directory(image) => "IfNotPresent".to_string(),
                None => default_pull_policy(image),
            };
            if !self.pull_image(&pod, &node, image, name, &policy).await {
                return;
            }
        }
        if self.runtime.node_images(&node).len() != pulls_before {
            self.publish_node_images(&node);
        }
        let Some(first) = main.first() else { return };
        let env: Vec<(String, String)> = first["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_string(),
                    e["value"].as_str()?.to_string(),
                ))
            })
            .collect();
        let limit = |name: &str| {
            first["resources"]["limits"][name]
                .as_str()
                .or_else(|| first["resources"]["requests"][name].as_str())
        };
        let cpu = limit("cpu")
            .and_then(quantity::milli)
            .map_or(1000, |m| m.clamp(10, 64_000) as u32);
        let memory = limit("memory")
            .and_then(quantity::units)
            .map_or(1024, |b| (b / (1024 * 1024)).clamp(16, 1 << 20) as u32);
        let image = first["image"].as_str().unwrap_or_default();
        let pod_uid = uid(&pod);
        let workdir = first["workingDir"].as_str().map(str::to_string);
        let sandbox = match self
            .runtime
            .start(&pod_uid, image, cpu, memory, env, workdir)
            .await
        {
            Ok(s) => s,
            Err(error) => {
                let message = format!("failed to create the sandbox: {error}");
                let status =
                    json!({"phase": "Failed", "reason": "ContainerCannotRun", "message": message});
                if let Some(p) = self.patch_status(&pod, status) {
                    c.event(&p, "Warning", "Failed", &message);
                }
                return;
            }
        };
        let (ns, name) = client::names(&pod);
        if c.get(PODS, &ns, &name).is_none_or(|p| uid(&p) != pod_uid) {
            self.runtime.stop(&pod_uid).await;
            return;
        }
        let Some(ip) = self
            .addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            let status = json!({"phase": "Failed", "reason": "NoAddress", "message": "no free pod address in 127.42.0.0/16"});
            self.patch_status(&pod, status);
            self.runtime.stop(&pod_uid).await;
            return;
        };
        let now = now_rfc3339();
        let container_id = format!("sandfleet://{}", sandbox.handle.id);
        let statuses: Vec<Value> = main
            .iter()
            .map(|ct| json!({
                "name": ct["name"], "image": ct["image"], "imageID": self.runtime.image_id(ct["image"].as_str().unwrap_or_default()),
                "containerID": container_id, "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }))
            .collect();
        let init: Vec<Value> = containers(&pod, "initContainers")
            .iter()
            .map(|ct| json!({
                "name": ct["name"], "image": ct["image"], "imageID": self.runtime.image_id(ct["image"].as_str().unwrap_or_default()),
                "ready": true, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            }))
            .collect();
        let host_ip = self.node_ip(&node);
        let mut status = json!({
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers", "True"), condition("Initialized", "True"),
                condition("Ready", "True"), condition("ContainersReady", "True"), condition("PodScheduled", "True"),
            ],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}],
            "startTime": now, "containerStatuses": statuses,
        });
        if !init.is_empty() {
            status["initContainerStatuses"] = Value::Array(init);
        }
        let names: Vec<String> = main
            .iter()
            .filter_map(|ct| ct["name"].as_str().map(str::to_string))
            .collect();
        // Open before the pod shows Running, so a client that sees it running finds them.
        let logs = self.runtime.open_logs(&pod_uid, &names);
        let Some(running) = self.patch_status(&pod, status) else {
            self.addresses
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .give_back(&ip.to_string());
            self.runtime.forget_logs(&pod_uid);
            self.runtime.stop(&pod_uid).await;
            return;
        };
        for ct in &main {
            let n = ct["name"].as_str().unwrap_or_default();
            c.event(
                &running,
                "Normal",
                "Created",
                &format!("Created container: {n}"),
            );
            c.event(
                &running,
                "Normal",
                "Started",
                &format!("Started container {n}"),
            );
        }
        let strings = |field: &str| -> Vec<String> {
            first[field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect()
        };
        let argv = self
            .runtime
            .argv(image, strings("command"), strings("args"));
        if argv.is_empty() {
            // No command (nor an OCI image's entrypoint or command): the container
            // idles until the pod is deleted, its log empty.
            return;
        }
        let Some(main_log) = logs.first() else {
            return;
        };
        let result = self.runtime.run_main(&sandbox, argv, main_log).await;
        // Only the first container has a process; the others end with it.
        for log in &logs {
            log.end();
        }
        if self.runtime.sandbox(&pod_uid).is_none() {
            // Deleted meanwhile: the sandbox was destroyed on purpose.
            return;
        }
        let (code, message) = match result {
            Ok(0) => (0, String::new()),
            Ok(code) => (code, failure_message(main_log)),
            Err(e) => (-1, e.to_string()),
        };
        let exit = if code < 0 { 137 } else { code };
        let (phase, reason) = if exit == 0 {
            ("Succeeded", "Completed")
        } else {
            ("Failed", "Error")
        };
        let finished = now_rfc3339();
        let statuses: Vec<Value> = main
            .iter()
            .map(|ct| {
                let mut terminated = json!({"exitCode": exit, "reason": reason, "startedAt": now, "finishedAt": finished, "containerID": container_id});
                if !message.is_empty() {
                    terminated["message"] = json!(message);
                }
                json!({
                    "name": ct["name"], "image": ct["image"], "imageID": self.runtime.image_id(ct["image"].as_str().unwrap_or_default()),
                    "containerID": container_id, "ready": false, "started": false, "restartCount": 0,
                    "state": {"terminated": terminated},
                })
            })
            .collect();
        let mut ready = condition("Ready", "False");
        ready["reason"] = json!("PodCompleted");
        let mut containers_ready = condition("ContainersReady", "False");
        containers_ready["reason"] = json!("PodCompleted");
        let status = json!({
            "phase": phase,
            "conditions": [condition("PodReadyToStartContainers", "False"), condition("Initialized", "True"), ready, containers_ready, condition("PodScheduled", "True")],
            "containerStatuses": statuses,
        });
        self.patch_status(&running, status);
        // The pod keeps its IP, as a terminated pod's status does; its sandbox is gone.
        self.runtime.stop(&pod_uid).await;
    }

    fn node_ip(&self, node: &str) -> String {
        self.client(KUBELET)
            .get(NODES, "", node)
            .and_then(|n| {
                n["status"]["addresses"]
                    .as_array()?
                    .iter()
                    .find(|a| a["type"] == "InternalIP")
                    .and_then(|a| a["address"].as_str().map(str::to_string))
            })
            .unwrap_or_else(|| "127.42.0.1".into())
    }

    fn publish_node_images(&self, node: &str) {
        let images: Vec<Value> = self
            .runtime
            .node_image_entries(node)
            .into_iter()
            .map(|(names, size)| json!({"names": names, "sizeBytes": size}))
            .collect();
        let patch = json!({"status": {"images": images}});
        let _ = self
            .client(KUBELET)
            .merge_patch(NODES, "", node, &patch, true);
    }

    /// What a pod event asks of the scheduler and the kubelets.
    fn observe(
        self: &Arc<Self>,
        kind: EventType,
        pod: &Value,
        pending: &mut BTreeSet<(String, String)>,
        retry: &mut bool,
    ) {
        let pod_uid = uid(pod);
        if kind == EventType::Deleted {
            *retry = true;
            let was_started = self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&pod_uid);
            self.runtime.forget_logs(&pod_uid);
            if let Some(ip) = pod["status"]["podIP"].as_str() {
                self.addresses
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .give_back(ip);
            }
            if was_started {
                let runtime = self.runtime.clone();
                tokio::spawn(async move { runtime.stop(&pod_uid).await });
            }
            return;
        }
        if is_terminal(pod) {
            *retry = true;
            return;
        }
        if client::deleting(pod) {
            return;
        }
        if pod["spec"]["nodeName"].is_null() {
            if pod["spec"]["schedulerName"]
                .as_str()
                .is_none_or(|s| s == SCHEDULER)
            {
                pending.insert(client::names(pod));
            }
            return;
        }
        if pod["status"]["phase"] == "Pending"
            && self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(pod_uid)
        {
            tokio::spawn(self.clone().start(pod.clone()));
        }
    }
}

/// Run the scheduler and the kubelets until the store's change channel closes.
pub(crate) async fn run(state: Arc<State>, runtime: Arc<Runtime>) {
    let kubelet = Arc::new(Kubelet {
        state: state.clone(),
        runtime,
        addresses: Mutex::new(Addresses {
            next: 2,
            ..Addresses::default()
        }),
        started: Mutex::new(HashSet::new()),
    });
    let mut informer = state.store.informer();
    let mut pending = BTreeSet::new();
    let mut unschedulable: BTreeSet<(String, String)> = BTreeSet::new();
    let pods_key = PODS.key();
    let nodes_key = NODES.key();
    let mut retry = false;
    for pod in Client::new(&state, KUBELET).list(PODS, None) {
        kubelet.observe(EventType::Added, &pod, &mut pending, &mut retry);
    }
    loop {
        if retry {
            pending.append(&mut unschedulable);
            retry = false;
        }
        let attempted = pending.clone();
        kubelet.schedule(&mut pending);
        for key in attempted {
            if Client::new(&state, SCHEDULER)
                .get(PODS, &key.0, &key.1)
                .is_some_and(|p| p["spec"]["nodeName"].is_null())
            {
                unschedulable.insert(key);
            }
        }
        let Some(events) = next_batch(&mut informer, None).await else {
            return;
        };
        for e in events {
            if *e.resource == *pods_key {
                kubelet.observe(e.kind, &e.object, &mut pending, &mut retry);
            } else if *e.resource == *nodes_key && e.kind != EventType::Modified {
                retry = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::default_pull_policy;

    #[test]
    fn images_untagged_or_latest_default_to_always_and_the_rest_to_if_not_present() {
        for (image, policy) in [
            ("python", "Always"),
            ("python:latest", "Always"),
            ("127.0.0.1:5000/team/tool", "Always"),
            ("127.0.0.1:5000/team/tool:latest", "Always"),
            ("python:3.11", "IfNotPresent"),
            ("127.0.0.1:5000/team/tool:1", "IfNotPresent"),
            ("ghcr.io/x/y@sha256:0123", "IfNotPresent"),
            ("ghcr.io/x/y:latest@sha256:0123", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), policy, "{image}");
        }
    }
}
