//! The scheduler's side: pending pods bound to the node [`super::scheduler`] chooses,
//! or marked Unschedulable with its message and a `FailedScheduling` event.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Kubelet, SCHEDULER, condition, scheduler};
use crate::client::{self, NODES, PODS};

impl Kubelet {
    /// Bind every pending pod it can, in creation order.
    pub(super) fn schedule(&self, pending: &mut BTreeSet<(String, String)>) {
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
}
