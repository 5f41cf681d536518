//! Snapshots through the lifecycle API: `POST /v1/sandboxes/{id}/snapshots`
//! answers `Creating` and `GET /v1/snapshots/{id}` is polled until `Ready`
//! or `Failed`; a fork is a create with `snapshotId`; `DELETE
//! /v1/snapshots/{id}` removes one (404 is success); `GET /v1/snapshots`
//! lists them. The API has no restore in place.
//!
//! A snapshot carries no metadata in the API, only a name, so the name
//! carries what labels carry elsewhere: `sandfleet/<run>/<template>/<nonce>`.
//! A run's snapshots are found by listing every snapshot and keeping the
//! run's names; a create whose answer was lost is found by its name, which
//! no other snapshot has.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::Method;
use sandfleet_core::{
    BackendError, ErrorKind, LABEL_RUN_ID, Labels, RunId, SandboxHandle, SnapshotRef, Snapshots,
    TemplateRef,
};
use sandfleet_transport::CallKind;

use super::{OpenSandboxBackend, Source};
use crate::wire::{CreateSnapshot, Snapshot, SnapshotPage};

/// What every snapshot name the driver gives starts with.
const NAME_PREFIX: &str = "sandfleet/";

/// Pause between reads of a snapshot being captured.
const CAPTURE_PAUSE: Duration = Duration::from_millis(200);

/// Forks whose create and readiness run at once: enough to overlap their
/// waits for execd, few enough not to burst a server the engine paces one
/// claim at a time.
const FORKS_AT_ONCE: usize = 8;

/// The name of a snapshot of `template` for run `run`.
fn snapshot_name(run: &RunId, template: &str) -> String {
    format!("{NAME_PREFIX}{run}/{template}/{:016x}", crate::random())
}

/// The run and template a snapshot name of the driver's carries.
fn parse_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let (run, rest) = rest.split_once('/')?;
    let (template, nonce) = rest.rsplit_once('/')?;
    (nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit())).then_some((run, template))
}

/// The outputs of `futures`, run at once, in their order (one join does not
/// warrant a futures crate).
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut running: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = running.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in running.iter_mut().zip(&mut outputs) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

impl OpenSandboxBackend {
    /// Refuses labels that do not name `run` as theirs.
    fn labels_of_run(&self, labels: &Labels, run: &RunId) -> Result<(), BackendError> {
        match labels.get(LABEL_RUN_ID) {
            Some(id) if id == run.as_str() => Ok(()),
            other => Err(self.error(
                ErrorKind::Invalid,
                format!(
                    "labels of run {} for an object of run {run}",
                    other.map_or("(none)", String::as_str)
                ),
            )),
        }
    }

    async fn read_snapshot(&self, id: &str) -> Result<Snapshot, BackendError> {
        let call = self.lifecycle(
            Method::GET,
            &format!("/snapshots/{id}"),
            CallKind::Lifecycle,
            format!("read snapshot {id}"),
        );
        self.json(&call).await
    }

    /// Every snapshot on the server, optionally only those named `name`.
    async fn all_snapshots(&self, name: Option<&str>) -> Result<Vec<Snapshot>, BackendError> {
        let filter: Vec<(&str, &str)> = name.map(|name| ("name", name)).into_iter().collect();
        let mut all = Vec::new();
        for page in 1.. {
            let call = self.page_call("/snapshots", &filter, page, "list snapshots".into())?;
            let listed: SnapshotPage = self.json(&call).await?;
            all.extend(listed.items);
            if !listed.pagination.has_next_page {
                break;
            }
        }
        Ok(all)
    }

    /// The snapshots of run `run`.
    pub(super) async fn snapshots_of_run(
        &self,
        run: &RunId,
    ) -> Result<Vec<Snapshot>, BackendError> {
        let mut all = self.all_snapshots(None).await?;
        all.retain(|snapshot| {
            snapshot
                .name
                .as_deref()
                .and_then(parse_name)
                .is_some_and(|(of, _)| of == run.as_str())
        });
        Ok(all)
    }

    /// Deletes snapshot `id`; one already gone is deleted.
    pub(super) async fn delete_snapshot_id(&self, id: &str) -> Result<(), BackendError> {
        let call = self.lifecycle(
            Method::DELETE,
            &format!("/snapshots/{id}"),
            CallKind::Lifecycle,
            format!("delete snapshot {id}"),
        );
        match self.transport.send(&self.name, &call).await {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Deletes snapshot `id` that is of no use to anyone (failed, or made
    /// by a call that failed); one still being captured cannot be deleted
    /// yet and is left to the run's reap.
    async fn discard_snapshot(&self, id: &str) {
        if let Err(error) = self.delete_snapshot_id(id).await {
            tracing::warn!(cluster = %self.name, snapshot = id, %error, "cannot delete a snapshot that failed; the run's reap will try again");
        }
    }

    /// Waits until snapshot `id` is captured.
    async fn wait_captured(&self, id: &str, deadline: Instant) -> Result<(), BackendError> {
        loop {
            let snapshot = self.read_snapshot(id).await?;
            let status = &snapshot.status;
            match status.state.as_str() {
                "Ready" => return Ok(()),
                "Failed" => {
                    return Err(self.error(
                        ErrorKind::Failed,
                        format!(
                            "snapshot {id} failed ({}): {}",
                            status.reason.as_deref().unwrap_or("no reason"),
                            status.message.as_deref().unwrap_or("no message")
                        ),
                    ));
                }
                // Creating, or a state newer than this driver: not ready yet.
                _ if Instant::now() + CAPTURE_PAUSE < deadline => {
                    tokio::time::sleep(CAPTURE_PAUSE).await;
                }
                state => {
                    return Err(self.error(
                        ErrorKind::Timeout,
                        format!("snapshot {id} was still {state} at the deadline"),
                    ));
                }
            }
        }
    }
}

#[async_trait]
impl Snapshots for OpenSandboxBackend {
    /// The API makes sandboxes of snapshots but never puts one back.
    fn restores_in_place(&self) -> bool {
        false
    }

    async fn snapshot(
        &self,
        sandbox: &SandboxHandle,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SnapshotRef, BackendError> {
        self.labels_of_run(labels, &sandbox.run_id)?;
        let spec = self.spec_of(&sandbox.run_id, &sandbox.template)?;
        let name = snapshot_name(&sandbox.run_id, &sandbox.template);
        let call = self
            .lifecycle(
                Method::POST,
                &format!("/sandboxes/{}/snapshots", sandbox.id),
                CallKind::Lifecycle,
                format!("snapshot sandbox {}", sandbox.id),
            )
            .json(
                serde_json::to_value(CreateSnapshot { name: &name }).expect("the body serializes"),
            );
        let created: Snapshot = match self.json(&call).await {
            Ok(created) => created,
            Err(error) => {
                // An answer that may have been lost after the server took
                // the snapshot: find it by its name and delete it.
                if matches!(
                    error.kind(),
                    ErrorKind::Transport { sent: true } | ErrorKind::Timeout
                ) {
                    match self.all_snapshots(Some(&name)).await {
                        Ok(made) => {
                            for snapshot in made {
                                self.discard_snapshot(&snapshot.id).await;
                            }
                        }
                        Err(lost) => {
                            tracing::warn!(cluster = %self.name, snapshot = name, error = %lost, "cannot look for a snapshot whose create failed");
                        }
                    }
                }
                return Err(error);
            }
        };
        if let Err(error) = self.wait_captured(&created.id, deadline).await {
            self.discard_snapshot(&created.id).await;
            return Err(error);
        }
        tracing::debug!(cluster = %self.name, sandbox = %sandbox.id, snapshot = %created.id, "snapshot ready");
        Ok(SnapshotRef {
            id: created.id,
            cluster: self.name.clone(),
            template: TemplateRef {
                name: sandbox.template.clone(),
                image: spec.image,
                run_id: sandbox.run_id.clone(),
            },
            driver: String::new(),
        })
    }

    async fn fork(
        &self,
        snapshot: &SnapshotRef,
        count: u32,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<Vec<SandboxHandle>, BackendError> {
        if count == 0 {
            return Err(self.error(
                ErrorKind::Invalid,
                format!(
                    "a fork of snapshot {} needs a count of at least 1",
                    snapshot.id
                ),
            ));
        }
        if let Some(max) = self.config.max_sandboxes
            && count > max
        {
            return Err(self.error(
                ErrorKind::Invalid,
                format!(
                    "{count} forks of snapshot {} are more than max_sandboxes ({max})",
                    snapshot.id
                ),
            ));
        }
        if snapshot.cluster != self.name {
            return Err(self.error(
                ErrorKind::Invalid,
                format!(
                    "snapshot {} is of cluster {}",
                    snapshot.id, snapshot.cluster
                ),
            ));
        }
        self.labels_of_run(labels, snapshot.run_id())?;
        let template = &snapshot.template;
        let spec = self.spec_of(&template.run_id, &template.name)?;
        // At most FORKS_AT_ONCE at a time; after the first failure no
        // further fork is started, and those under way finish, so that
        // every sandbox made is known and released.
        let slots = tokio::sync::Semaphore::new(FORKS_AT_ONCE);
        let failed = AtomicBool::new(false);
        let made = join_all((0..count).map(|_| async {
            let _slot = slots
                .acquire()
                .await
                .expect("the semaphore is never closed");
            if failed.load(Ordering::Acquire) {
                return None;
            }
            let fork = self
                .make(
                    &spec,
                    template,
                    labels,
                    Source::Snapshot(&snapshot.id),
                    deadline,
                )
                .await;
            if fork.is_err() {
                failed.store(true, Ordering::Release);
            }
            Some(fork)
        }))
        .await;
        let (forks, errors): (Vec<_>, Vec<_>) = made.into_iter().flatten().partition(Result::is_ok);
        let forks: Vec<SandboxHandle> = forks.into_iter().filter_map(Result::ok).collect();
        let Some(Err(first)) = errors.into_iter().next() else {
            return Ok(forks);
        };
        for fork in &forks {
            if let Err(error) = self.delete(&fork.id).await {
                tracing::warn!(cluster = %self.name, sandbox = %fork.id, %error, "cannot release a fork of a fork that failed");
            }
        }
        Err(self.error(
            first.kind(),
            format!(
                "a fork of {count} sandboxes of snapshot {} failed after {} were made (released): {}",
                snapshot.id,
                forks.len(),
                first.message()
            ),
        ))
    }

    async fn restore(
        &self,
        sandbox: &SandboxHandle,
        snapshot: &SnapshotRef,
        _deadline: Instant,
    ) -> Result<(), BackendError> {
        Err(self.error(
            ErrorKind::Unsupported,
            format!(
                "sandbox {} cannot be put back to snapshot {} in place: the OpenSandbox API only \
                 makes new sandboxes of a snapshot (release it and fork one)",
                sandbox.id, snapshot.id
            ),
        ))
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<(), BackendError> {
        self.delete_snapshot_id(&snapshot.id).await
    }

    async fn list_snapshots(&self, run_id: &RunId) -> Result<Vec<SnapshotRef>, BackendError> {
        let listed = self.snapshots_of_run(run_id).await?;
        Ok(listed
            .into_iter()
            .map(|snapshot| {
                let template = snapshot
                    .name
                    .as_deref()
                    .and_then(parse_name)
                    .map_or_else(String::new, |(_, template)| template.to_string());
                // The image is known where the template was ensured here
                // (not after a restart: the API does not say).
                let image = self
                    .spec_of(run_id, &template)
                    .map(|spec| spec.image)
                    .unwrap_or_default();
                SnapshotRef {
                    id: snapshot.id,
                    cluster: self.name.clone(),
                    template: TemplateRef {
                        name: template,
                        image,
                        run_id: run_id.clone(),
                    },
                    driver: String::new(),
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_carries_its_run_and_template_and_no_other_name_parses() {
        let run = RunId::new("quickstart-1-abc").unwrap();
        let name = snapshot_name(&run, "sf-calc-0123456789");
        assert_eq!(
            parse_name(&name),
            Some(("quickstart-1-abc", "sf-calc-0123456789"))
        );
        assert_ne!(name, snapshot_name(&run, "sf-calc-0123456789"));
        for other in [
            "checkpoint-before-import",
            "sandfleet/quickstart-1-abc",
            "sandfleet/quickstart-1-abc/sf-calc/xyz",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }
}
