//! Snapshots of claimed sandboxes, forks from them and restores to them
//! ([`sandfleet_core::Snapshots`]).
//!
//! A snapshot seals what its sandbox has written into a layer of its own
//! (`seal`) under `<state>/runs/<run>/snapshots/<id>/`, beside a record
//! of it (`snapshot.json`), while the sandbox's processes are stopped; the
//! sandbox runs on over its own writable layer. A snapshot's layers are
//! those of the sandbox it was taken of (a fork snapshotted again stacks
//! one more) and its own, lowest first: a fork is a new sandbox over its
//! image and those layers (read-only, shared, never copied) with an empty
//! writable layer of its own, and a restore starts a sandbox again over
//! them with its whole writable layer dropped. Deleting a snapshot removes
//! its record at once and its layer once no sandbox or other snapshot
//! stacks it. A backend dropped (or a process that crashed) leaves its
//! snapshots on disk, as it leaves its sandboxes' directories: the run's
//! reap removes every snapshot of the run with the run's directory.
//! Process memory is not captured.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sandfleet_core::{Labels, RunId, SandboxHandle, SnapshotRef, TemplateRef};
use tokio::sync::Semaphore;

use crate::backend::Inner;
use crate::blocking;
use crate::error::{IoContext, LocalError};
use crate::inventory::Held;
use crate::remove::{remove_beneath, remove_tree};
use crate::sandbox::Sandbox;
use crate::state::{read_record, unix_now, write_record};
use crate::templates::Template;

/// The record in a snapshot's directory; removed when it is deleted.
pub(crate) const SNAPSHOT_RECORD: &str = "snapshot.json";

/// How many forks of one request start at once: each runs the helper and
/// the isolation probe, which a machine of few cores serves in turn.
const FORK_STARTS: usize = 8;

/// A sealed layer on disk: once its snapshot is deleted, removed when the
/// last snapshot or sandbox stacking it lets go.
#[derive(Debug)]
pub(crate) struct SealedLayer {
    dir: PathBuf,
    deleted: AtomicBool,
}

impl SealedLayer {
    /// The layer's directory (holding `upper` and `root`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SealedLayer {
    fn drop(&mut self) {
        if !self.deleted.load(Ordering::Relaxed) {
            return;
        }
        let dir = std::mem::take(&mut self.dir);
        let remove = move || {
            if let Err(error) = remove_tree(&dir) {
                tracing::warn!(layer = %dir.display(), %error, "removing a snapshot layer");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// A snapshot held by this backend.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The template of the sandbox it was taken of; its forks' too.
    pub(crate) template: Arc<Template>,
    /// The layers its forks stack, lowest first; its own last.
    pub(crate) layers: Vec<Arc<SealedLayer>>,
    /// Bytes of file data its own layer holds.
    pub(crate) bytes: u64,
}

/// `snapshots/<id>/snapshot.json`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SnapshotRecord {
    id: String,
    run_id: RunId,
    template: String,
    image: String,
    /// The sandbox it was taken of.
    sandbox: String,
    labels: Labels,
    /// Bytes of file data its own layer holds.
    bytes: u64,
    /// Seconds since the Unix epoch.
    created_at: u64,
}

impl Inner {
    pub(crate) async fn snapshot(
        &self,
        handle: &SandboxHandle,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SnapshotRef, LocalError> {
        let sandbox = self.claimed(handle)?;
        let template = sandbox.template_arc();
        self.check_run(labels, &template.run_id)?;
        let parent = self.site.run(&template.run_id).snapshots();
        let (id, dir) = self.allocate_snapshot_dir(&parent)?;
        let sealed = match tokio::time::timeout_at(deadline.into(), sandbox.seal(&dir)).await {
            Ok(sealed) => sealed,
            Err(_) => Err(LocalError::Timeout {
                what: format!("snapshot {id} of sandbox {}", handle.id),
                after: deadline.saturating_duration_since(Instant::now()),
            }),
        };
        let record = SnapshotRecord {
            id: id.clone(),
            run_id: template.run_id.clone(),
            template: template.name.clone(),
            image: template.image.clone(),
            sandbox: handle.id.clone(),
            labels: labels.clone(),
            bytes: *sealed.as_ref().unwrap_or(&0),
            created_at: unix_now(),
        };
        let recorded = sealed
            .and_then(|bytes| self.check_budget(&id, &handle.id, bytes))
            .and_then(|()| write_record(&dir.join(SNAPSHOT_RECORD), &record));
        if let Err(error) = recorded {
            let failed = dir.clone();
            if let Err(cleanup) = blocking(move || remove_tree(&failed)).await {
                tracing::warn!(snapshot = id, error = %cleanup, "removing a failed snapshot");
            }
            return Err(error);
        }
        let mut layers = sandbox.layers();
        layers.push(Arc::new(SealedLayer {
            dir,
            deleted: AtomicBool::new(false),
        }));
        tracing::debug!(cluster = %self.name, sandbox = handle.id, snapshot = id, bytes = record.bytes, "snapshot taken");
        let snapshot = Arc::new(Snapshot {
            template: Arc::clone(&template),
            layers,
            bytes: record.bytes,
        });
        self.live().snapshots.insert(id.clone(), snapshot);
        Ok(self.snapshot_ref(id, &template))
    }

    pub(crate) async fn fork(
        self: &Arc<Self>,
        reference: &SnapshotRef,
        count: u32,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<Vec<SandboxHandle>, LocalError> {
        if count == 0 {
            return Err(LocalError::Rejected(format!(
                "a fork of snapshot {} needs a count of at least 1",
                reference.id
            )));
        }
        if count > self.max_sandboxes {
            return Err(LocalError::Rejected(format!(
                "{count} forks of snapshot {} are more than the cluster can hold \
                 (max_sandboxes = {})",
                reference.id, self.max_sandboxes
            )));
        }
        let snapshot = self.held_snapshot(reference)?;
        self.check_run(labels, &snapshot.template.run_id)?;
        sandfleet_core::validate_labels(labels).map_err(|e| LocalError::Rejected(e.to_string()))?;
        let mut slots = self.take_slots(count, deadline).await?;
        let starts = Arc::new(Semaphore::new(FORK_STARTS));
        let mut making = tokio::task::JoinSet::new();
        for _ in 0..count {
            let slot = slots.split(1).expect("one slot per fork was taken");
            let (inner, template) = (Arc::clone(self), Arc::clone(&snapshot.template));
            let (layers, starts) = (snapshot.layers.clone(), Arc::clone(&starts));
            making.spawn(async move {
                let _start = starts.acquire_owned().await;
                let sandbox =
                    Sandbox::create(&inner.site, template, layers, Vec::new(), deadline).await?;
                Ok::<_, LocalError>(Held {
                    sandbox: Arc::new(sandbox),
                    _slot: slot,
                })
            });
        }
        let mut made = Vec::with_capacity(count as usize);
        let mut failed = None;
        while let Some(joined) = making.join_next().await {
            match joined {
                Ok(Ok(held)) => made.push(held),
                Ok(Err(error)) => {
                    failed.get_or_insert(error);
                }
                Err(error) => {
                    failed.get_or_insert(LocalError::Failed(format!(
                        "a fork's start failed: {error}"
                    )));
                }
            }
        }
        if let Some(error) = failed {
            self.destroy_all(made).await;
            return Err(error);
        }
        let handles: Vec<SandboxHandle> = made
            .iter()
            .map(|held| self.handle_of(&held.sandbox))
            .collect();
        let mut live = self.live();
        for (handle, held) in handles.iter().zip(made) {
            live.claimed.insert(handle.id.clone(), held);
        }
        Ok(handles)
    }

    pub(crate) async fn restore(
        &self,
        handle: &SandboxHandle,
        reference: &SnapshotRef,
        deadline: Instant,
    ) -> Result<(), LocalError> {
        let sandbox = self.claimed(handle)?;
        let snapshot = self.held_snapshot(reference)?;
        let template = sandbox.template();
        if snapshot.template.name != template.name || snapshot.template.run_id != template.run_id {
            return Err(LocalError::Rejected(format!(
                "snapshot {} is of template {} (image {}), and sandbox {} of template {} \
                 (image {}): a sandbox is restored only to a snapshot of its own template",
                reference.id,
                snapshot.template.name,
                snapshot.template.image,
                handle.id,
                template.name,
                template.image
            )));
        }
        sandbox
            .restore(&self.site, snapshot.layers.clone(), deadline)
            .await
    }

    pub(crate) async fn delete_snapshot(&self, reference: &SnapshotRef) -> Result<(), LocalError> {
        self.check_snapshot_cluster(reference)?;
        let held = self.live().snapshots.remove(&reference.id);
        let parent = self.site.run(reference.run_id()).snapshots();
        let id = reference.id.clone();
        blocking(move || {
            match held {
                // Its layer stays while forks (or snapshots of them) stack
                // it; without its record it is no longer listed.
                Some(snapshot) => {
                    let own = snapshot
                        .layers
                        .last()
                        .expect("a snapshot has its own layer");
                    own.deleted.store(true, Ordering::Relaxed);
                    let record = own.dir().join(SNAPSHOT_RECORD);
                    match std::fs::remove_file(&record) {
                        Ok(()) => Ok(()),
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        Err(error) => {
                            Err(error).context(|| format!("removing {}", record.display()))
                        }
                    }
                }
                // A snapshot another process made (one that crashed): no
                // sandbox here stacks it.
                None if parent.join(&id).join(SNAPSHOT_RECORD).exists() => {
                    remove_beneath(&parent, &id).map(drop)
                }
                None => Ok(()),
            }
        })
        .await
    }

    pub(crate) async fn list_snapshots(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<SnapshotRef>, LocalError> {
        let parent = self.site.run(run_id).snapshots();
        let records = blocking(move || snapshot_records(&parent)).await?;
        Ok(records
            .into_iter()
            .map(|record| SnapshotRef {
                id: record.id,
                cluster: self.name.clone(),
                template: TemplateRef {
                    name: record.template,
                    image: record.image,
                    run_id: record.run_id,
                },
                driver: String::new(),
            })
            .collect())
    }

    /// Fails when `bytes` more would put the snapshots this backend holds
    /// over the cluster's `snapshot_budget_mib`.
    fn check_budget(&self, id: &str, sandbox: &str, bytes: u64) -> Result<(), LocalError> {
        let Some(budget_mib) = self.config.snapshot_budget_mib else {
            return Ok(());
        };
        let held: u64 = self.live().snapshots.values().map(|s| s.bytes).sum();
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        if held + bytes <= budget_mib << 20 {
            return Ok(());
        }
        Err(LocalError::NoRoom(format!(
            "snapshot {id} of sandbox {sandbox}: its {} MiB would put the cluster's snapshots at \
             {} MiB, over snapshot_budget_mib = {budget_mib}; delete snapshots or raise the budget",
            mib(bytes),
            mib(held + bytes)
        )))
    }

    fn snapshot_ref(&self, id: String, template: &Template) -> SnapshotRef {
        SnapshotRef {
            id,
            cluster: self.name.clone(),
            template: TemplateRef {
                name: template.name.clone(),
                image: template.image.clone(),
                run_id: template.run_id.clone(),
            },
            driver: String::new(),
        }
    }

    fn check_snapshot_cluster(&self, reference: &SnapshotRef) -> Result<(), LocalError> {
        if reference.cluster == self.name {
            Ok(())
        } else {
            Err(LocalError::NotFound(format!(
                "snapshot {} (it belongs to cluster `{}`)",
                reference.id, reference.cluster
            )))
        }
    }

    fn held_snapshot(&self, reference: &SnapshotRef) -> Result<Arc<Snapshot>, LocalError> {
        self.check_snapshot_cluster(reference)?;
        self.live()
            .snapshots
            .get(&reference.id)
            .cloned()
            .ok_or_else(|| LocalError::NotFound(format!("snapshot {}", reference.id)))
    }

    /// Fails unless `labels` name run `run_id` (or no run).
    fn check_run(&self, labels: &Labels, run_id: &RunId) -> Result<(), LocalError> {
        match labels.get(sandfleet_core::LABEL_RUN_ID) {
            Some(run) if run != run_id.as_str() => Err(LocalError::Rejected(format!(
                "labels name run {run}, but the snapshot belongs to run {run_id}: a snapshot and \
                 its forks belong to the run of the sandbox it was taken of"
            ))),
            _ => Ok(()),
        }
    }

    /// Picks the next free snapshot id and creates its directory, which
    /// only the sandboxes' root may enter (their inits open its layers).
    fn allocate_snapshot_dir(&self, parent: &Path) -> Result<(String, PathBuf), LocalError> {
        use std::os::unix::fs::{PermissionsExt, chown};
        std::fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
        loop {
            let number = self.site.next_id.fetch_add(1, Ordering::Relaxed);
            let id = format!("snapshot-{number}");
            let dir = parent.join(&id);
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    let ids = self.site.ids;
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                        .and_then(|()| chown(&dir, Some(ids.uid), Some(ids.gid)))
                        .context(|| format!("setting up {}", dir.display()))?;
                    return Ok((id, dir));
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error).context(|| format!("creating {}", dir.display())),
            }
        }
    }
}

/// The records of the snapshots in `parent` (a run's `snapshots/`), in id
/// order; a directory without one (deleted, or never finished) is none.
fn snapshot_records(parent: &Path) -> Result<Vec<SnapshotRecord>, LocalError> {
    let entries = match std::fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).context(|| format!("listing {}", parent.display())),
    };
    let mut records = Vec::new();
    for entry in entries {
        let entry = entry.context(|| format!("listing {}", parent.display()))?;
        let path = entry.path().join(SNAPSHOT_RECORD);
        if path.exists() {
            records.push(read_record::<SnapshotRecord>(&path)?);
        }
    }
    records.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(records)
}

/// The ids of the snapshots in `parent` (a run's `snapshots/`).
pub(crate) fn snapshot_ids(parent: &Path) -> Result<Vec<String>, LocalError> {
    Ok(snapshot_records(parent)?
        .into_iter()
        .map(|record| record.id)
        .collect())
}
