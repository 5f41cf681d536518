//! Claiming a sandbox: a `SandboxClaim` of a unique name, created once and
//! waited on through the run's shared watch until its sandbox is ready,
//! deleted again whenever it did not become one the engine can use.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use sandfleet_core::{
    BackendError, ErrorKind, Labels, SandboxHandle, TemplateRef, validate_labels,
};

use super::{HandleData, K8sBackend};
use crate::claims::{NotReady, Seen, wait_ready};
use crate::errors::is_not_found;
use crate::objects;
use crate::preflight::MANAGER;
use crate::resources::{POD_NAME_ANNOTATION, Sandbox, SandboxClaim};

/// The shortest try at a claim worth making: the controller waits 2 s for
/// a warm sandbox before it makes a cold one, whose pod must then be
/// scheduled and started. A shorter try could only time out before the
/// scheduler or the kubelet had said why.
const MIN_TRY: Duration = Duration::from_secs(5);

impl K8sBackend {
    /// A claim of `template` that binds by `deadline`, or an error saying
    /// whether the engine may claim again.
    pub(super) async fn claim_within(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        validate_labels(labels).map_err(|e| {
            self.error(
                ErrorKind::Invalid,
                format!("claim of {}: {e}", template.name),
            )
        })?;
        // Tokio's clock, which is the std clock except under a test's
        // paused time, where the waits below advance it.
        let now = tokio::time::Instant::now().into_std();
        let left = deadline.saturating_duration_since(now);
        let bind_by = match self.config.bind_timeout {
            Some(bind) => deadline.min(now + bind),
            // Half of what is left, so the engine may claim again, but never
            // a try too short to bind.
            None => now + (left / 2).max(MIN_TRY.min(left)),
        };
        match self.claim_once(template, labels, bind_by).await {
            // Did not bind (upstream #1367: cold creates lost under load):
            // it was deleted; the engine makes it again, once there is time
            // for it, under the run's retry budget.
            Err(error)
                if error.kind() == ErrorKind::Timeout
                    && deadline
                        .saturating_duration_since(tokio::time::Instant::now().into_std())
                        >= MIN_TRY =>
            {
                Err(self.error(
                    ErrorKind::Unavailable,
                    format!("{}; claiming again", error.message()),
                ))
            }
            other => other,
        }
    }

    /// One attempt at a claim: create it, wait on the run's watch until it
    /// is ready or `bind_by`, then read its sandbox.
    async fn claim_once(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        bind_by: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        let watch = self.watch(&template.run_id).await?;
        let name = format!("sfc-{:016x}", crate::random());
        let mut seen = watch.follow(&name);
        let outcome = self
            .create_and_wait(template, labels, &name, &mut seen, bind_by)
            .await;
        watch.forget(&name);
        outcome
    }

    async fn create_and_wait(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        name: &str,
        seen: &mut tokio::sync::watch::Receiver<crate::claims::Seen>,
        bind_by: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        // Once: the engine retries a claim as a whole, under a new name.
        let claims = self.api_once::<SandboxClaim>().await?;
        let claim = objects::claim(
            name,
            &template.name,
            &self.config.namespace,
            labels,
            objects::time_after(self.config.lease),
        );
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        if let Err(error) = claims.create(&params, &claim).await {
            // Unless the server refused it (4xx) or it never left, the
            // claim may exist with its answer lost (a cut connection, a 5xx
            // after the write): delete it by its unique name, or it holds a
            // sandbox until its shutdown time while the engine claims again.
            let refused =
                matches!(&error, kube::Error::Api(status) if (400..500).contains(&status.code));
            let error = self.api_error(&format!("create claim {name} of {}", template.name), error);
            if !refused && error.kind() != (ErrorKind::Transport { sent: false }) {
                self.discard_claim(name).await;
            }
            return Err(error);
        }
        let ready = match wait_ready(seen, bind_by.into()).await {
            Ok(ready) => ready,
            Err(not_ready) => {
                let waiting_on = match &not_ready {
                    NotReady::Timeout(_) => {
                        let last = seen.borrow().clone();
                        self.pod_waiting_on(name, &last).await
                    }
                    _ => None,
                };
                if not_ready != NotReady::Deleted {
                    self.discard_claim(name).await;
                }
                return Err(self.not_ready(name, &template.name, not_ready, waiting_on));
            }
        };
        let sandbox_name = ready
            .status
            .as_ref()
            .and_then(|s| s.sandbox.as_ref())
            .map(|s| s.name.clone())
            .expect("a ready claim names its sandbox");
        // Retrying: the claim is bound, and failing here would discard it.
        let sandboxes = self.api::<Sandbox>().await?;
        let sandbox = match sandboxes.get(&sandbox_name).await {
            Ok(sandbox) => sandbox,
            Err(error) => {
                self.discard_claim(name).await;
                let kind = if is_not_found(&error) {
                    ErrorKind::SandboxLost
                } else {
                    crate::errors::kind_of(&error)
                };
                return Err(self.error(
                    kind,
                    format!(
                        "claim {name}: its sandbox {sandbox_name}: {}",
                        crate::client::one_line(&error)
                    ),
                ));
            }
        };
        let pod = sandbox
            .annotations()
            .get(POD_NAME_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| sandbox_name.clone());
        let status = sandbox.status.unwrap_or_default();
        let pod_ips = if status.pod_ips.is_empty() {
            ready
                .status
                .as_ref()
                .and_then(|s| s.sandbox.as_ref())
                .map(|s| s.pod_ips.clone())
                .unwrap_or_default()
        } else {
            status.pod_ips
        };
        let data = HandleData {
            claim: name.to_string(),
            sandbox: sandbox_name,
            pod: pod.clone(),
            namespace: self.config.namespace.clone(),
            pod_ips: pod_ips.clone(),
            service_fqdn: status.service_fqdn.clone(),
        };
        Ok(SandboxHandle {
            id: name.to_string(),
            cluster: self.name.clone(),
            template: template.name.clone(),
            run_id: template.run_id.clone(),
            hostname: pod,
            endpoint: status.service_fqdn.or_else(|| pod_ips.first().cloned()),
            driver: serde_json::to_string(&data).expect("handle data serializes"),
        })
    }

    /// What the pod of claim `claim`'s sandbox was waiting on when the
    /// claim gave up (`last`: the claim as the watch last showed it): the
    /// scheduler's or the kubelet's reason, which the claim's own `Ready`
    /// condition does not carry. `None` when there is no pod yet or it
    /// waits on nothing it names.
    async fn pod_waiting_on(&self, claim: &str, last: &Seen) -> Option<String> {
        // A cold sandbox is named like its claim; an adopted one is named
        // in the claim's status.
        let sandbox = match last {
            Seen::Present(seen) => seen
                .status
                .as_ref()
                .and_then(|s| s.sandbox.as_ref())
                .map(|s| s.name.clone())
                .filter(|name| !name.is_empty()),
            _ => None,
        }
        .unwrap_or_else(|| claim.to_string());
        let sandboxes = self.api::<Sandbox>().await.ok()?;
        let pod = match sandboxes.get_opt(&sandbox).await {
            Ok(Some(found)) => found
                .annotations()
                .get(POD_NAME_ANNOTATION)
                .cloned()
                .unwrap_or(sandbox),
            _ => return None,
        };
        let pods = self.api::<Pod>().await.ok()?;
        let pod = pods.get_opt(&pod).await.ok()??;
        let said = match waiting_on(&pod) {
            Some(said) => said,
            None => self.last_warning(&pod).await?,
        };
        Some(match self.keep_alive_missing(&said) {
            Some(hint) => format!("{said}; {hint}"),
            None => said,
        })
    }

    /// What to do when the image lacks the program that keeps its container
    /// running (a runtime's `executable file not found` naming it): images
    /// without a shell need a toolbox.
    fn keep_alive_missing(&self, said: &str) -> Option<String> {
        let program = self.config.entrypoint.first()?;
        let missing = said.contains(&format!("exec: \"{program}\": executable file not found"))
            || said.contains(&format!(
                "exec: \"{program}\": stat {program}: no such file"
            ));
        (missing && self.config.toolbox.is_none()).then(|| {
            format!(
                "the image has no `{program}` to keep its container running: for images without \
                 a shell, name a toolbox image in the cluster's config (toolbox = \
                 \"busybox:1.37-musl\")"
            )
        })
    }

    /// The pod's newest Warning event, for what its status does not name: a
    /// kubelet that cannot make its sandbox (`FailedCreatePodSandBox`) or
    /// mount its volumes leaves the pod Pending with no reason.
    async fn last_warning(&self, pod: &Pod) -> Option<String> {
        let uid = pod.metadata.uid.as_deref()?;
        let events = self.api::<Event>().await.ok()?;
        let params =
            ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning"));
        let listed = events.list(&params).await.ok()?;
        let newest = listed.items.into_iter().max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
        })?;
        Some(format!(
            "{}: {}",
            newest.reason.unwrap_or_default(),
            newest.message.unwrap_or_default()
        ))
    }

    fn not_ready(
        &self,
        claim: &str,
        template: &str,
        not_ready: NotReady,
        waiting_on: Option<String>,
    ) -> BackendError {
        match not_ready {
            NotReady::Terminal(kind, reason, message) => self.error(
                kind,
                format!("claim {claim} of {template}: {reason}: {message}"),
            ),
            NotReady::Deleted => self.error(
                ErrorKind::SandboxLost,
                format!("claim {claim} of {template} was deleted before it was ready"),
            ),
            NotReady::Timeout(reason) => {
                let said: Vec<String> = reason
                    .into_iter()
                    .chain(waiting_on.map(|pod| format!("its pod: {pod}")))
                    .collect();
                self.error(
                    ErrorKind::Timeout,
                    format!(
                        "claim {claim} of {template} did not bind in time ({}); deleted",
                        if said.is_empty() {
                            "no status yet".to_string()
                        } else {
                            said.join("; ")
                        }
                    ),
                )
            }
        }
    }

    async fn discard_claim(&self, name: &str) {
        // Retried here: nothing else will remove it before its shutdown time.
        if let Err(error) = self.delete_claim(name, false).await {
            tracing::warn!(cluster = %self.name, claim = name, %error, "cannot delete a claim that was not used");
        }
    }
}

/// Why `pod` is not running, as the scheduler or the kubelet said it:
/// `Unschedulable: 0/3 nodes are available: …` while it has no node,
/// else the first container (init containers first) waiting on something
/// other than its own creation (`ErrImagePull: …`).
fn waiting_on(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let said = |reason: &str, message: Option<&String>| match message {
        Some(message) if !message.is_empty() => format!("{reason}: {message}"),
        _ => reason.to_string(),
    };
    if let Some(scheduled) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        let reason = scheduled.reason.as_deref().unwrap_or("Unschedulable");
        return Some(said(reason, scheduled.message.as_ref()));
    }
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|container| {
            let waiting = container.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            if reason == "ContainerCreating" || reason == "PodInitializing" {
                return None;
            }
            // A back-off says only that it waits; why the container ended
            // is in its last state.
            let ended = container
                .last_state
                .as_ref()
                .and_then(|last| last.terminated.as_ref())
                .map(|ended| {
                    let reason = ended.reason.as_deref().unwrap_or("Error");
                    format!(
                        " (last ended {}, exit code {})",
                        said(reason, ended.message.as_ref()),
                        ended.exit_code
                    )
                });
            Some(said(reason, waiting.message.as_ref()) + &ended.unwrap_or_default())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn a_pod_says_what_the_scheduler_or_the_kubelet_waits_on() {
        let unschedulable = pod(serde_json::json!({"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient ephemeral-storage.",
        }]}));
        assert_eq!(
            waiting_on(&unschedulable).as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient ephemeral-storage.")
        );
        let pulling = pod(serde_json::json!({
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "initContainerStatuses": [{"name": "i", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}}],
            "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}}],
        }));
        assert_eq!(
            waiting_on(&pulling).as_deref(),
            Some("ErrImagePull: pull access denied")
        );
        let starting = pod(
            serde_json::json!({"containerStatuses": [{"name": "c", "image": "x", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(waiting_on(&starting), None);
        let looping = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            "lastState": {"terminated": {"exitCode": 128, "reason": "StartError",
                "message": "exec: \"tail\": executable file not found in $PATH"}},
        }]}));
        assert_eq!(
            waiting_on(&looping).as_deref(),
            Some(
                "CrashLoopBackOff: back-off 10s (last ended StartError: exec: \"tail\": \
                 executable file not found in $PATH, exit code 128)"
            )
        );
    }
}
