//! Getting ahead of claims: warm pools (one `SandboxWarmPool` per template,
//! scaled by server-side apply and watched until enough of its sandboxes
//! are ready), and images pre-pulled onto every matching node.

use std::time::Instant;

use async_trait::async_trait;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use sandfleet_core::{
    BackendError, ErrorKind, ImagePulls, ImageToPull, LABEL_RUN_ID, Labels, PoolStatus,
    PullProgress, RunId, TemplateRef, WarmPools, validate_labels,
};

use super::{K8sBackend, REAP_PAUSE};
use crate::objects;
use crate::preflight::MANAGER;
use crate::prepull::PrepullError;
use crate::resources::SandboxWarmPool;

#[async_trait]
impl WarmPools for K8sBackend {
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        validate_labels(labels)
            .map_err(|e| self.error(ErrorKind::Invalid, format!("pool {}: {e}", template.name)))?;
        self.apply_pool(&template.name, replicas, labels).await
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        // Scaled to zero, not deleted: cold claims still go through it.
        match self
            .apply_pool(&template.name, 0, &template.run_id.labels())
            .await
        {
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        let pools = self.api::<SandboxWarmPool>().await?;
        let pool = pools
            .get(&template.name)
            .await
            .map_err(|e| self.api_error(&format!("read warm pool {}", template.name), e))?;
        Ok(pool_status(&pool))
    }

    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        let pools = self.api::<SandboxWarmPool>().await?;
        let config = watcher::Config::default().fields(&format!("metadata.name={}", template.name));
        let mut events = std::pin::pin!(watcher(pools, config));
        let mut last = PoolStatus::default();
        let waited = tokio::time::timeout_at(deadline.into(), async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pool) | watcher::Event::InitApply(pool)) => {
                        last = pool_status(&pool);
                        if last.ready >= at_least {
                            return Ok(last);
                        }
                    }
                    // DELETED is an answer, not a pool with 0 ready (agent-sandbox-rl #1736).
                    Ok(watcher::Event::Delete(_)) => {
                        return Err(self.error(
                            ErrorKind::NotFound,
                            format!("warm pool {} was deleted while it was filling", template.name),
                        ));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(cluster = %self.name, pool = %template.name, %error, "pool watch failed; resuming");
                        tokio::time::sleep(REAP_PAUSE).await;
                    }
                }
            }
            Err(self.error(ErrorKind::Failed, "the pool watch ended"))
        })
        .await;
        match waited {
            Ok(outcome) => outcome,
            Err(_) => Err(self.error(
                ErrorKind::Timeout,
                format!(
                    "warm pool {}: {} of {at_least} sandboxes ready at the deadline",
                    template.name, last.ready
                ),
            )),
        }
    }
}

impl K8sBackend {
    async fn apply_pool(
        &self,
        template: &str,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        // Once: the engine retries warm and unwarm as a whole.
        let pools = self.api_once::<SandboxWarmPool>().await?;
        let pool = objects::pool(template, &self.config.namespace, replicas, labels);
        pools
            .patch(
                template,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&pool),
            )
            .await
            .map(drop)
            .map_err(|e| {
                self.api_error(
                    &format!("apply warm pool {template} ({replicas} replicas)"),
                    e,
                )
            })
    }
}

fn pool_status(pool: &SandboxWarmPool) -> PoolStatus {
    let ready = pool.status.as_ref().map_or(0, |s| s.ready_replicas);
    PoolStatus {
        desired: u32::try_from(pool.spec.replicas).unwrap_or(0),
        ready: u32::try_from(ready).unwrap_or(0),
    }
}

#[async_trait]
impl ImagePulls for K8sBackend {
    /// Every image asked for, of a size the nodes know: a node that holds
    /// one already pulls nothing.
    async fn images_to_pull(&self, images: &[String]) -> Vec<ImageToPull> {
        images
            .iter()
            .map(|image| ImageToPull {
                image: image.clone(),
                bytes: Ok(None),
            })
            .collect()
    }

    /// Through a DaemonSet carrying `labels`, deleted once every matching
    /// node has the image (or at the deadline); the nodes report no
    /// layers, so `progress` hears nothing.
    async fn pull_image(
        &self,
        image: &str,
        labels: &Labels,
        _progress: PullProgress<'_>,
    ) -> Result<(), BackendError> {
        let Some(timeout) = self.prepull else {
            return Err(self.error(
                ErrorKind::Unsupported,
                "the cluster was not asked to pre-pull images",
            ));
        };
        let run = labels
            .get(LABEL_RUN_ID)
            .and_then(|id| RunId::new(id.clone()).ok())
            .ok_or_else(|| {
                self.error(
                    ErrorKind::Invalid,
                    format!("pre-pull of {image}: the labels carry no {LABEL_RUN_ID}"),
                )
            })?;
        let deadline = Instant::now() + timeout;
        let daemon_sets = self.api::<DaemonSet>().await?;
        let daemon_set = crate::prepull::daemon_set(&run, image, &self.config);
        match crate::prepull::prepull(daemon_sets, daemon_set, deadline).await {
            Ok(nodes) => {
                tracing::info!(cluster = %self.name, %image, nodes, "pre-pulled");
                Ok(())
            }
            Err(PrepullError::Api(verb, error)) => {
                Err(self.api_error(&format!("{verb} the pre-pull DaemonSet of {image}"), error))
            }
            Err(PrepullError::Timeout { ready, nodes }) => Err(self.error(
                ErrorKind::Timeout,
                format!("pre-pull of {image}: {ready} of {nodes} nodes had it at the deadline"),
            )),
        }
    }
}
