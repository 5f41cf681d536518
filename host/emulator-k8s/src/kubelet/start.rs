//! A bound pod run to its end: its images pulled, its sandbox made, Running with an
//! IP, then its main command followed to `Succeeded` or `Failed`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::container_log::{ContainerLog, ReadOptions};
use super::{KUBELET, Kubelet, condition, containers, default_pull_policy, quantity, uid};
use crate::client::{self, Client, NODES, PODS, RUNTIME_CLASSES};
use crate::state::State;
use crate::store::now_rfc3339;
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
        if self.state.faults.evict_now() {
            let message = "The node was low on resource: memory. (injected fault: evict)";
            let status = json!({"phase": "Failed", "reason": "Evicted", "message": message});
            if let Some(p) = self.patch_status(&pod, status) {
                c.event(&p, "Warning", "Evicted", message);
            }
            return;
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
        // The kubelet evicts a pod whose writes pass its containers'
        // ephemeral-storage limits; the sandbox's disk limit stops them.
        let disk = ephemeral_storage_limit(&main).map_or(Shape::DEFAULT_DISK_MIB, |b| {
            b.div_ceil(1024 * 1024).clamp(1, u128::from(u32::MAX)) as u32
        });
        let image = first["image"].as_str().unwrap_or_default();
        let pod_uid = uid(&pod);
        let workdir = first["workingDir"].as_str().map(str::to_string);
        let sandbox = match self
            .runtime
            .start(
                &pod_uid,
                image,
                Shape {
                    cpu_milli: cpu,
                    memory_mib: memory,
                    disk_mib: disk,
                },
                env,
                workdir,
            )
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
/// with no such limit is left alone: only the command failed.
pub(crate) async fn evict_for_storage(state: &Arc<State>, pod: &Value) {
    let Some(limit) = ephemeral_storage_limit(&containers(pod, "containers")) else {
        return;
    };
    let message = format!(
        "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
        binary_quantity(limit)
    );
    let c = Client::new(state, KUBELET);
    let (ns, name) = client::names(pod);
    let pod_uid = uid(pod);
    if c.get(PODS, &ns, &name).is_none_or(|p| uid(&p) != pod_uid) {
        return;
    }
    let status = json!({"phase": "Failed", "reason": "Evicted", "message": message});
    if let Ok(evicted) = c.merge_patch(PODS, &ns, &name, &json!({"status": status}), true) {
        c.event(&evicted, "Warning", "Evicted", &message);
    }
    state.runtime.stop(&pod_uid).await;
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
