//! Image pulls as the kubelet makes them: the default `imagePullPolicy`, events for
//! each attempt, `ErrImagePull` then `ImagePullBackOff` for a failed one (tried again
//! with back-off when a registry may yet answer), and the node's image list.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::node_images::PullError;
use super::{KUBELET, Kubelet};
use crate::client::{self, NODES, PODS};

/// After `ErrImagePull`, the kubelet backs off before saying `ImagePullBackOff`.
const PULL_BACKOFF: Duration = Duration::from_secs(1);
/// The back-off before a registry pull is tried again starts here (the kubelet's
/// 10 s, scaled down) and doubles up to [`PULL_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_secs(2);
/// The longest back-off between pulls (the kubelet's is 300 s).
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(30);

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
    pub(super) async fn pull_image(
        self: &Arc<Self>,
        pod: &Value,
        node: &str,
        image: &str,
        container: &str,
        policy: &str,
    ) -> bool {
        let c = self.client(KUBELET);
        if self.runtime.images().cached(node, image) && policy != "Always" {
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
                    let pulling = pulled.took.saturating_sub(pulled.waited).as_secs_f64();
                    let message = match pulled.size {
                        Some(size) => format!(
                            "Successfully pulled image \"{image}\" in {pulling:.3}s ({took:.3}s including waiting). Image size: {size} bytes."
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

    pub(super) fn publish_node_images(&self, node: &str) {
        let images: Vec<Value> = self
            .runtime
            .images()
            .node_image_entries(node)
            .into_iter()
            .map(|(names, size)| json!({"names": names, "sizeBytes": size}))
            .collect();
        let patch = json!({"status": {"images": images}});
        let _ = self
            .client(KUBELET)
            .merge_patch(NODES, "", node, &patch, true);
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
