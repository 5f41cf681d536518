//! A bound pod run to its end: its images pulled, its sandbox made, Running with an
//! IP, then its main command followed to `Succeeded` or `Failed`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::container_log::{ContainerLog, ReadOptions};
use super::network;
use super::runtime::init_key;
use super::volumes::PodVolumes;
use super::{KUBELET, Kubelet, condition, containers, default_pull_policy, quantity, uid};
use crate::PodNetwork;
use crate::client::{self, Client, NETWORK_POLICIES, NODES, PODS, RUNTIME_CLASSES};
use crate::state::State;
use crate::store::now_rfc3339;
use sandfleet_backend_local::DISK_LIMIT_PASSED;
use sandfleet_emulator_runtime::Shape;

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

impl Kubelet {
    /// Pull, make the sandbox, report Running; then follow the main command, if any.
    pub(super) async fn start(self: Arc<Self>, pod: Value) {
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let c = self.client(KUBELET);
        if let Some(message) = self.sandbox_refusal(&pod) {
            // The kubelet retries the pod's sandbox with back-off, but a
            // handler its runtime lacks never comes: the pod stays Pending.
            c.event(&pod, "Warning", "FailedCreatePodSandBox", &message);
            return;
        }
        let mut all = containers(&pod, "initContainers");
        let main = containers(&pod, "containers");
        all.extend(main.iter().cloned());
        let pulls_before = self.runtime.images().node_images(&node).len();
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
        if self.runtime.images().node_images(&node).len() != pulls_before {
            self.publish_node_images(&node);
        }
        if self.state.faults.evict_now() {
            let message = "The node was low on resource: memory. (injected fault: evict)";
            let status = json!({"phase": "Failed", "reason": "Evicted", "message": message});
            if let Some(p) = self.patch_status(&pod, status) {
                c.event(&p, "Warning", "Evicted", message);
            }
            return;
        }
        let Some(first) = main.first() else { return };
        let pod_uid = uid(&pod);
        let volumes = match self.runtime.pod_volumes(&pod_uid, &pod, &all) {
            Ok(volumes) => volumes,
            Err(message) => {
                self.cannot_run(
                    &pod,
                    &format!("failed to mount the pod's volumes: {message}"),
                );
                return;
            }
        };
        let init = containers(&pod, "initContainers");
        let network = self.pod_network == PodNetwork::Host && {
            let namespace = client::names(&pod).0;
            network::egress_to_host(&pod, &c.list(NETWORK_POLICIES, Some(&namespace)))
        };
        let names: Vec<String> = all
            .iter()
            .filter_map(|ct| ct["name"].as_str().map(str::to_string))
            .collect();
        // Open before anything runs, so a client that sees a container started finds
        // its log.
        let logs = self.runtime.open_logs(&pod_uid, &names);
        let (init_logs, logs) = logs.split_at(init.len().min(logs.len()));
        // Pods of plain processes share the host's root: there is nothing of
        // theirs an init container could prepare, and a sandbox per init container
        // would copy its image each time.
        // The container IDs of the init containers that ran.
        let mut init_ids: Vec<String> = Vec::new();
        if !self.runtime.is_plain() {
            for (index, (ct, log)) in init.iter().zip(init_logs).enumerate() {
                let started = now_rfc3339();
                let key = init_key(&pod_uid, index);
                let (id, ended) = self.run_init(&key, ct, &volumes, network, log).await;
                init_ids.extend(id);
                let (ns, name) = client::names(&pod);
                if c.get(PODS, &ns, &name).is_none_or(|p| uid(&p) != pod_uid) {
                    self.runtime.stop(&pod_uid).await;
                    return;
                }
                let failure = match ended {
                    Ok(0) => continue,
                    Ok(code) => Terminated {
                        exit: code,
                        reason: "Error",
                        message: failure_message(log),
                    },
                    Err(error) => Terminated {
                        exit: 128,
                        reason: "StartError",
                        message: format!("{error:#}"),
                    },
                };
                self.init_failed(&pod, &init, index, &init_ids, &failure, &started);
                self.runtime.stop(&pod_uid).await;
                return;
            }
        }
        let (env, shape) = container_setup(first, &main, network);
        let image = first["image"].as_str().unwrap_or_default();
        let workdir = first["workingDir"].as_str().map(str::to_string);
        let sandbox = match self
            .runtime
            .start(&pod_uid, image, shape, env, workdir, volumes.mounts(first))
            .await
        {
            Ok(s) => s,
            Err(error) => {
                self.cannot_run(&pod, &format!("failed to create the sandbox: {error}"));
                return;
            }
        };
        let (ns, name) = client::names(&pod);
        if c.get(PODS, &ns, &name).is_none_or(|p| uid(&p) != pod_uid) {
            self.runtime.stop(&pod_uid).await;
            return;
        }
        let argv =
            self.runtime
                .images()
                .argv(image, strings(first, "command"), strings(first, "args"));
        if let Some(program) = argv.first()
            && let Some(refusal) = self.runtime.refuses_to_start(&sandbox, program).await
        {
            self.main_failed_to_start(&pod, &main, &refusal);
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
        let container_id = container_id(&sandbox.handle.id);
        let statuses: Vec<Value> = main
            .iter()
            .map(|ct| json!({
                "name": ct["name"], "image": ct["image"], "imageID": self.runtime.images().image_id(ct["image"].as_str().unwrap_or_default()),
                "containerID": container_id, "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }))
            .collect();
        let init: Vec<Value> = init
            .iter()
            .enumerate()
            .map(|(index, ct)| {
                let mut status = json!({
                    "name": ct["name"], "image": ct["image"], "imageID": self.runtime.images().image_id(ct["image"].as_str().unwrap_or_default()),
                    "ready": true, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
                });
                if let Some(id) = init_ids.get(index) {
                    status["containerID"] = json!(id);
                    status["state"]["terminated"]["containerID"] = json!(id);
                }
                status
            })
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
        for log in logs {
            log.end();
        }
        if self.runtime.sandbox(&pod_uid).is_none() {
            // Deleted meanwhile: the sandbox was destroyed on purpose.
            return;
        }
        // The main process stopped at the disk limit: the kubelet evicts the
        // pod, whichever of its processes noticed first.
        if let Err(error) = &result
            && error.to_string().contains(DISK_LIMIT_PASSED)
            && evict_for_storage(&self.state, &running).await
        {
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
                    "name": ct["name"], "image": ct["image"], "imageID": self.runtime.images().image_id(ct["image"].as_str().unwrap_or_default()),
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

    /// Fails `pod` whose container could not be made.
    fn cannot_run(&self, pod: &Value, message: &str) {
        let status = json!({"phase": "Failed", "reason": "ContainerCannotRun", "message": message});
        if let Some(p) = self.patch_status(pod, status) {
            self.client(KUBELET).event(&p, "Warning", "Failed", message);
        }
    }

    /// Runs init container `ct` to its end in a sandbox of its own (`key`), with
    /// the pod's volumes it mounts; returns its container ID, once it has a
    /// sandbox, and its exit code.
    async fn run_init(
        &self,
        key: &str,
        ct: &Value,
        volumes: &PodVolumes,
        network: bool,
        log: &ContainerLog,
    ) -> (Option<String>, anyhow::Result<i32>) {
        let image = ct["image"].as_str().unwrap_or_default();
        let argv = self
            .runtime
            .images()
            .argv(image, strings(ct, "command"), strings(ct, "args"));
        if argv.is_empty() {
            log.end();
            return (None, Err(anyhow::anyhow!("no command specified")));
        }
        let (env, shape) = container_setup(ct, std::slice::from_ref(ct), network);
        let workdir = ct["workingDir"].as_str().map(str::to_string);
        let sandbox = self
            .runtime
            .start(key, image, shape, env, workdir, volumes.mounts(ct))
            .await;
        let ended = match sandbox {
            Ok(sandbox) => (
                Some(container_id(&sandbox.handle.id)),
                match self.runtime.refuses_to_start(&sandbox, &argv[0]).await {
                    Some(refusal) => {
                        log.end();
                        Err(anyhow::anyhow!(refusal))
                    }
                    None => self.runtime.run_main(&sandbox, argv, log).await,
                },
            ),
            Err(error) => {
                log.end();
                (None, Err(error))
            }
        };
        self.runtime.stop(key).await;
        ended
    }

    /// Reports init container `failed` ended as `how` (`ids`: the container IDs
    /// of those that got a sandbox, in order): with
    /// `restartPolicy: Never` the pod fails; otherwise the kubelet would run it
    /// again after a back-off, and the pod stays Pending in `CrashLoopBackOff` (the
    /// emulator does not run it again).
    fn init_failed(
        &self,
        pod: &Value,
        init: &[Value],
        failed: usize,
        ids: &[String],
        how: &Terminated,
        started: &str,
    ) {
        let never = pod["spec"]["restartPolicy"].as_str() == Some("Never");
        let finished = now_rfc3339();
        let image_id = |ct: &Value| {
            self.runtime
                .images()
                .image_id(ct["image"].as_str().unwrap_or_default())
        };
        let statuses: Vec<Value> = init
            .iter()
            .enumerate()
            .map(|(index, ct)| {
                let mut status = json!({
                    "name": ct["name"], "image": ct["image"], "imageID": image_id(ct),
                    "ready": false, "started": false, "restartCount": 0,
                });
                status["state"] = match index.cmp(&failed) {
                    std::cmp::Ordering::Less => json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started, "containerID": ids[index]}}),
                    std::cmp::Ordering::Equal => {
                        let mut terminated = json!({"exitCode": how.exit, "reason": how.reason, "startedAt": started, "finishedAt": finished});
                        if let Some(id) = ids.get(index) {
                            terminated["containerID"] = json!(id);
                        }
                        if !how.message.is_empty() {
                            terminated["message"] = json!(how.message);
                        }
                        if never {
                            json!({"terminated": terminated})
                        } else {
                            status["lastState"] = json!({"terminated": terminated});
                            json!({"waiting": {"reason": "CrashLoopBackOff", "message": back_off(pod, ct["name"].as_str().unwrap_or_default())}})
                        }
                    }
                    std::cmp::Ordering::Greater => json!({"waiting": {"reason": "PodInitializing"}}),
                };
                status
            })
            .collect();
        let main: Vec<Value> = containers(pod, "containers")
            .iter()
            .map(|ct| json!({
                "name": ct["name"], "image": ct["image"], "imageID": "", "ready": false,
                "started": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}},
            }))
            .collect();
        let incomplete: Vec<&str> = init[failed..]
            .iter()
            .filter_map(|ct| ct["name"].as_str())
            .collect();
        let mut initialized = condition("Initialized", "False");
        initialized["reason"] = json!("ContainersNotInitialized");
        initialized["message"] = json!(format!(
            "containers with incomplete status: [{}]",
            incomplete.join(" ")
        ));
        let status = json!({
            "phase": if never { "Failed" } else { "Pending" },
            "conditions": [initialized, condition("Ready", "False"), condition("ContainersReady", "False"), condition("PodScheduled", "True")],
            "initContainerStatuses": statuses, "containerStatuses": main,
        });
        if let Some(p) = self.patch_status(pod, status)
            && !never
        {
            let name = init[failed]["name"].as_str().unwrap_or_default();
            let message = format!(
                "Back-off restarting failed container {name} in pod {}",
                client::names(pod).1
            );
            self.client(KUBELET)
                .event(&p, "Warning", "BackOff", &message);
        }
    }

    /// Reports that the runtime could not start `pod`'s first container
    /// (`refusal`, its words): the kubelet's `StartError`, after which it
    /// backs off before trying again, unless the pod is never restarted.
    fn main_failed_to_start(&self, pod: &Value, main: &[Value], refusal: &str) {
        let never = pod["spec"]["restartPolicy"].as_str() == Some("Never");
        let now = now_rfc3339();
        let terminated = json!({"exitCode": 128, "reason": "StartError", "message": refusal, "startedAt": "1970-01-01T00:00:00Z", "finishedAt": now});
        let name = main[0]["name"].as_str().unwrap_or_default();
        let mut status = json!({
            "name": name, "image": main[0]["image"],
            "imageID": self.runtime.images().image_id(main[0]["image"].as_str().unwrap_or_default()),
            "ready": false, "started": false, "restartCount": 0,
        });
        if never {
            status["state"] = json!({"terminated": terminated});
        } else {
            status["lastState"] = json!({"terminated": terminated});
            status["state"] =
                json!({"waiting": {"reason": "CrashLoopBackOff", "message": back_off(pod, name)}});
        }
        let mut ready = condition("Ready", "False");
        ready["reason"] = json!("ContainersNotReady");
        ready["message"] = json!(format!("containers with unready status: [{name}]"));
        let mut containers_ready = ready.clone();
        containers_ready["type"] = json!("ContainersReady");
        // A container the kubelet restarts keeps its pod Running.
        let phase = if never { "Failed" } else { "Running" };
        let pod_status = json!({
            "phase": phase,
            "conditions": [condition("Initialized", "True"), ready, containers_ready, condition("PodScheduled", "True")],
            "startTime": now, "containerStatuses": [status],
        });
        if let Some(p) = self.patch_status(pod, pod_status) {
            let c = self.client(KUBELET);
            c.event(&p, "Warning", "Failed", &format!("Error: {refusal}"));
            if !never {
                let message = format!(
                    "Back-off restarting failed container {name} in pod {}",
                    client::names(pod).1
                );
                c.event(&p, "Warning", "BackOff", &message);
            }
        }
    }

    /// Why the node's runtime cannot make `pod`'s sandbox: its RuntimeClass
    /// is gone, or names a handler the runtime is not configured with (the
    /// kubelet's `FailedCreatePodSandBox` message).
    fn sandbox_refusal(&self, pod: &Value) -> Option<String> {
        let class_name = pod["spec"]["runtimeClassName"].as_str()?;
        let Some(class) = self.client(KUBELET).get(RUNTIME_CLASSES, "", class_name) else {
            return Some(format!(
                "Failed to create pod sandbox: RuntimeClass \"{class_name}\" not found"
            ));
        };
        let handler = class["handler"].as_str().unwrap_or_default();
        (!self.handlers.iter().any(|h| h == handler)).then(|| {
            format!(
                "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"{handler}\" is configured"
            )
        })
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
}

/// The kubelet's message for a container it waits to restart.
fn back_off(pod: &Value, container: &str) -> String {
    format!(
        "back-off 10s restarting failed container={container} pod={}_{}({})",
        pod["metadata"]["name"].as_str().unwrap_or_default(),
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        uid(pod),
    )
}

/// The container ID of the container running in sandbox `id`.
fn container_id(id: &str) -> String {
    format!("sandfleet://{id}")
}

/// How a container ended, as its status reports it.
struct Terminated {
    exit: i32,
    reason: &'static str,
    message: String,
}

/// The strings of `ct[field]` (a container's `command` or `args`).
fn strings(ct: &Value, field: &str) -> Vec<String> {
    ct[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

/// Container `ct`'s environment (its literal `env` values) and its sandbox's
/// shape: its CPU and memory limits (or requests), the disk of `disk_from`'s
/// `ephemeral-storage` limits, past which the kubelet evicts, and `network`.
fn container_setup(
    ct: &Value,
    disk_from: &[Value],
    network: bool,
) -> (Vec<(String, String)>, Shape) {
    let env: Vec<(String, String)> = ct["env"]
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
        ct["resources"]["limits"][name]
            .as_str()
            .or_else(|| ct["resources"]["requests"][name].as_str())
    };
    let cpu = limit("cpu")
        .and_then(quantity::milli)
        .map_or(1000, |m| m.clamp(10, 64_000) as u32);
    let memory = limit("memory")
        .and_then(quantity::units)
        .map_or(1024, |b| (b / (1024 * 1024)).clamp(16, 1 << 20) as u32);
    let disk = ephemeral_storage_limit(disk_from).map_or(Shape::DEFAULT_DISK_MIB, |b| {
        b.div_ceil(1024 * 1024).clamp(1, u128::from(u32::MAX)) as u32
    });
    let shape = Shape {
        cpu_milli: cpu,
        memory_mib: memory,
        disk_mib: disk,
        network,
    };
    (env, shape)
}

/// The sum of `containers`' `ephemeral-storage` limits in bytes, when any
/// sets one.
fn ephemeral_storage_limit(containers: &[Value]) -> Option<u128> {
    containers
        .iter()
        .filter_map(|c| {
            c["resources"]["limits"]["ephemeral-storage"]
                .as_str()
                .and_then(quantity::units)
        })
        .reduce(|a, b| a + b)
}

/// `bytes` as a quantity, in the largest binary unit that divides it.
fn binary_quantity(bytes: u128) -> String {
    let units = [
        ("Ti", 1u128 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    units
        .iter()
        .find(|(_, size)| bytes >= *size && bytes.is_multiple_of(*size))
        .map_or_else(
            || bytes.to_string(),
            |(unit, size)| format!("{}{unit}", bytes / size),
        )
}

/// Evicts `pod` as the kubelet does when its writes pass its containers'
/// ephemeral-storage limits (the sandbox's disk limit stopped a command):
/// `Failed`, reason `Evicted`, a Warning event, its sandbox stopped. A pod
/// with no such limit is left alone: only the command failed. True when
/// the pod was evicted (or is gone).
pub(crate) async fn evict_for_storage(state: &Arc<State>, pod: &Value) -> bool {
    let Some(limit) = ephemeral_storage_limit(&containers(pod, "containers")) else {
        return false;
    };
    let message = format!(
        "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
        binary_quantity(limit)
    );
    let c = Client::new(state, KUBELET);
    let (ns, name) = client::names(pod);
    let pod_uid = uid(pod);
    if c.get(PODS, &ns, &name).is_none_or(|p| uid(&p) != pod_uid) {
        return true;
    }
    let status = json!({"phase": "Failed", "reason": "Evicted", "message": message});
    if let Ok(evicted) = c.merge_patch(PODS, &ns, &name, &json!({"status": status}), true) {
        c.event(&evicted, "Warning", "Evicted", &message);
    }
    state.runtime.stop(&pod_uid).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_storage_limit_is_its_containers_sum_shown_as_the_kubelet_shows_it() {
        let containers = [
            json!({"resources": {"limits": {"ephemeral-storage": "16Mi"}}}),
            json!({"resources": {"requests": {"ephemeral-storage": "1Gi"}}}),
            json!({"resources": {"limits": {"ephemeral-storage": "1Gi"}}}),
        ];
        let limit = ephemeral_storage_limit(&containers).unwrap();
        assert_eq!(limit, (1 << 30) + (16 << 20));
        assert_eq!(binary_quantity(limit), "1040Mi");
        assert_eq!(binary_quantity(2 << 30), "2Gi");
        assert_eq!(binary_quantity(1500), "1500");
        // Requests alone set no limit: nothing to evict for.
        assert_eq!(ephemeral_storage_limit(&containers[1..2]), None);
    }
}
