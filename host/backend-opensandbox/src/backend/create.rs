//! Making one sandbox: its create (of the template's image, through a
//! server pool where one is mapped, or of a snapshot), never repeated, and
//! its readiness (execd's endpoint, then `/ping`) before it is handed out.
//! A create whose answer may have been lost is found by its claim label and
//! deleted; a sandbox that never becomes ready is deleted.

use std::collections::BTreeMap;
use std::time::Instant;

use reqwest::Method;
use sandfleet_core::{
    BackendError, ErrorKind, LABEL_RUN_ID, Labels, RunId, SandboxHandle, TemplateRef, TemplateSpec,
    validate_labels,
};
use sandfleet_transport::CallKind;

use super::{LABEL_CLAIM, OpenSandboxBackend};
use crate::wire::{CreateSandbox, Extensions, Image, NetworkPolicy, Resources, Sandbox};

/// What a sandbox is made of.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source<'a> {
    /// The template's image.
    Image,
    /// A snapshot (`snapshotId`): its files, the template's resources.
    Snapshot(&'a str),
}

impl OpenSandboxBackend {
    /// The spec run `run`'s template `template` was ensured with.
    pub(super) fn spec_of(
        &self,
        run: &RunId,
        template: &str,
    ) -> Result<TemplateSpec, BackendError> {
        self.templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(run.clone(), template.to_string()))
            .cloned()
            .ok_or_else(|| {
                self.error(
                    ErrorKind::NotFound,
                    format!("template {template} was never ensured"),
                )
            })
    }

    /// Refuses a template whose `[fleet] network = false` cannot be kept:
    /// the server takes no `networkPolicy` with a pool (a pool's pods are
    /// made before the request), so a pooled sandbox would have whatever
    /// network its pool gives it.
    pub(super) fn check_network(&self, spec: &TemplateSpec) -> Result<(), BackendError> {
        let Some(pool) = self
            .config
            .server_pool(&spec.image)
            .filter(|_| !spec.network)
        else {
            return Ok(());
        };
        let key = if self.config.pools.contains_key(&spec.image) {
            format!("pools.{:?}", spec.image)
        } else {
            "pool".to_string()
        };
        Err(self.error(
            ErrorKind::Invalid,
            format!(
                "template {} ({}): [fleet] network = false asks for a networkPolicy that denies \
                 all egress, which OpenSandbox refuses with a server pool, and \
                 clusters.{}.opensandbox.{key} sends {} to pool `{pool}`: set [fleet] network = \
                 true to take the pool's own network, or take the image out of the pool",
                spec.name, spec.image, self.name, spec.image
            ),
        ))
    }

    /// Makes a sandbox of `spec` from `source` carrying `labels`, and
    /// returns it once it can run commands, or fails at `deadline`.
    pub(super) async fn make(
        &self,
        spec: &TemplateSpec,
        template: &TemplateRef,
        labels: &Labels,
        source: Source<'_>,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        let claim = format!("{:016x}", crate::random());
        let mut labels: BTreeMap<String, String> = labels.clone();
        labels.insert(LABEL_CLAIM.to_string(), sandfleet_core::label_value(&claim));
        validate_labels(&labels).map_err(|e| {
            self.error(
                ErrorKind::Invalid,
                format!("metadata of a sandbox of {}: {e}", template.name),
            )
        })?;
        // A snapshot's files are not a pool's image.
        let pool = match source {
            Source::Image => self.config.server_pool(&spec.image),
            Source::Snapshot(_) => None,
        };
        let created = match self.create(spec, &labels, source, pool).await {
            Err(error)
                if pool.is_some()
                    && self.config.pool_fallback
                    && matches!(
                        error.kind(),
                        ErrorKind::Throttled { .. } | ErrorKind::Unavailable | ErrorKind::NotFound
                    ) =>
            {
                tracing::info!(cluster = %self.name, pool, %error, "the server pool cannot serve; creating directly (pool_fallback)");
                self.create(spec, &labels, source, None).await
            }
            other => other,
        };
        let created = match created {
            Ok(created) => created,
            Err(error) => {
                // An answer that may have been lost after the server made
                // the sandbox: find it by its claim label and delete it.
                if matches!(
                    error.kind(),
                    ErrorKind::Transport { sent: true } | ErrorKind::Timeout
                ) {
                    self.clean_up_claim(&template.run_id, &labels[LABEL_CLAIM])
                        .await;
                }
                return Err(error);
            }
        };
        let ready = async {
            let ready_by = deadline.min(Instant::now() + self.config.ready_timeout);
            let execd = self.endpoint(&created.id, ready_by).await?;
            self.wait_for_execd(&created.id, &execd, ready_by).await?;
            Ok::<_, BackendError>(execd)
        }
        .await;
        let execd = match ready {
            Ok(execd) => execd,
            Err(error) => {
                if let Err(cleanup) = self.delete(&created.id).await {
                    tracing::warn!(cluster = %self.name, sandbox = %created.id, error = %cleanup, "cannot delete a sandbox that never became ready");
                }
                return Err(error);
            }
        };
        Ok(SandboxHandle {
            hostname: created.id.clone(),
            endpoint: Some(execd.execd.clone()),
            driver: serde_json::to_string(&execd).expect("handle data serializes"),
            id: created.id,
            cluster: self.name.clone(),
            template: template.name.clone(),
            run_id: template.run_id.clone(),
        })
    }

    /// Creates a sandbox of `spec` from `source` carrying `labels`; never
    /// repeated.
    async fn create(
        &self,
        spec: &TemplateSpec,
        labels: &Labels,
        source: Source<'_>,
        pool: Option<&str>,
    ) -> Result<Sandbox, BackendError> {
        let requests = Resources {
            cpu: format!("{}m", spec.cpu_milli),
            memory: format!("{}Mi", spec.memory_mib),
            ephemeral_storage: (spec.disk_mib > 0).then(|| format!("{}Mi", spec.disk_mib)),
        };
        let configured = &self.config.limits;
        let limits = Resources {
            cpu: configured
                .cpu
                .clone()
                .unwrap_or_else(|| requests.cpu.clone()),
            memory: configured
                .memory
                .clone()
                .unwrap_or_else(|| requests.memory.clone()),
            ephemeral_storage: configured
                .ephemeral_storage
                .clone()
                .or_else(|| requests.ephemeral_storage.clone()),
        };
        let (image, snapshot_id) = match source {
            Source::Image => (Some(Image { uri: &spec.image }), None),
            Source::Snapshot(id) => (None, Some(id)),
        };
        let body = CreateSandbox {
            image,
            snapshot_id,
            entrypoint: &self.config.entrypoint,
            timeout: self.config.timeout.as_secs(),
            resource_limits: limits,
            resource_requests: requests,
            env: spec.env.clone(),
            metadata: labels,
            extensions: pool.map(|pool_ref| Extensions { pool_ref }),
            // Offline unless the fleet asks for the network: the server's
            // egress sidecar denies everything. With the network, nothing
            // is sent and the runtime's own network applies.
            network_policy: (!spec.network).then(NetworkPolicy::deny_all),
        };
        let from = match (source, pool) {
            (Source::Snapshot(id), _) => format!(" from snapshot {id}"),
            (Source::Image, Some(pool)) => format!(" from server pool `{pool}`"),
            (Source::Image, None) => String::new(),
        };
        let call = self
            .lifecycle(
                Method::POST,
                "/sandboxes",
                CallKind::Create,
                format!("create a sandbox of {} ({}){from}", spec.name, spec.image),
            )
            .json(serde_json::to_value(&body).expect("the body serializes"));
        self.json(&call).await
    }

    /// Deletes what a create whose answer was lost may have made.
    async fn clean_up_claim(&self, run: &RunId, claim: &str) {
        let filter = [(LABEL_RUN_ID, run.as_str()), (LABEL_CLAIM, claim)];
        match self.list(&filter).await {
            Ok(ids) => {
                for id in ids {
                    if let Err(error) = self.delete(&id).await {
                        tracing::warn!(cluster = %self.name, sandbox = %id, %error, "cannot delete a sandbox whose create failed");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(cluster = %self.name, claim, %error, "cannot look for a sandbox whose create failed")
            }
        }
    }
}
