//! The state directory: its layout, the records kept in it, and finding and
//! removing what a run owns from the directory and `/proc` alone.
//!
//! ```text
//! <state>/
//!   images/<name>-<content-hash>/       git snapshots of images (a cache shared by runs)
//!   runs/<run-id>/
//!     run.json                          run id, owner pid and start time, start time of the run
//!     templates/<template>.json         templates made ready by the run
//!     pools/<template>.json             warm pools and their size
//!     sandboxes/<sandbox-id>/            0700, owned by the sandbox's root
//!       meta.json                       template, isolation, creation time
//!       init.json                       the init's pid and start time, written by the helper before the init runs
//!       init.log                        stderr of the sandbox helper
//!       rootfs/                         the root mount point
//!       layer/upper/ layer/work/        the workdir overlay's upper and work dirs
//!       layer/tmp/ layer/tmpwork/       the same for /tmp
//! ```
//!
//! A run's sandboxes' cgroups are `<hierarchy>/<cgroup_parent>/<run-id>/<sandbox-id>`;
//! `run.json` names the parent, so a reap removes them too.
//!
//! A reap learns what to kill and remove from these records, the cgroups
//! and the directory's entries alone: never from anything a task can set,
//! such as a process's name or environment (a task names its processes as
//! it likes). Sandbox ids are checked against the form this backend gives
//! them before they name anything, and trees are removed beneath their
//! parent without following a link ([`crate::remove`]). The one exception
//! is unisolated (`isolation = "none"`) sandboxes, whose commands are found
//! by a marker in their environment to be killed, never to name a path.
//!
//! Records are small JSON files written whole (temporary file, then rename),
//! so a crash never leaves half a record. They are written with blocking
//! calls from async code on purpose: each is a few hundred bytes, and
//! whole-tree work (hashing, copying, removing) goes to blocking threads.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandfleet_core::{Labels, Owned, Reaped, RunId, file_stem};
use sandfleet_jail::cgroup::Cgroups;
use sandfleet_jail::protocol::{INIT_RECORD, ProcessRef, WorkdirMode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::blocking;
use crate::error::{IoContext, LocalError};
use crate::process::{self, MarkerScope, Process, ProcessIdentity};
use crate::remove::remove_beneath;
use crate::snapshot::snapshot_ids;
use crate::templates::Isolation;

/// How long reaping waits for killed processes to exit.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// A state directory.
#[derive(Debug, Clone)]
pub(crate) struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub(crate) fn new(root: PathBuf) -> Self {
        StateDir { root }
    }

    /// The directory itself.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The image cache.
    pub(crate) fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// The directory of run `run_id`.
    pub(crate) fn run(&self, run_id: &RunId) -> RunDir {
        RunDir {
            root: self.runs().join(run_id.as_str()),
        }
    }

    /// Where runs' directories are.
    fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }
}

/// The directory of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunDir {
    root: PathBuf,
}

impl RunDir {
    pub(crate) fn record(&self) -> PathBuf {
        self.root.join("run.json")
    }

    fn templates(&self) -> PathBuf {
        self.root.join("templates")
    }

    fn pools(&self) -> PathBuf {
        self.root.join("pools")
    }

    /// Where snapshots of the run live.
    pub(crate) fn snapshots(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    /// Where sandboxes of the run live.
    pub(crate) fn sandboxes(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    /// The record of template `name`.
    pub(crate) fn template(&self, name: &str) -> PathBuf {
        self.templates().join(format!("{}.json", file_stem(name)))
    }

    /// The record of the warm pool of template `name`.
    pub(crate) fn pool(&self, template: &str) -> PathBuf {
        self.pools().join(format!("{}.json", file_stem(template)))
    }
}

/// `run.json`: who owns the run.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) run_id: RunId,
    /// The process that created the run's objects.
    pub(crate) owner: ProcessIdentity,
    /// Seconds since the Unix epoch.
    pub(crate) started_at: u64,
    /// The cgroup its sandboxes' cgroups are in (`<parent>/<run-id>/…`),
    /// when cgroups limit them.
    #[serde(default)]
    pub(crate) cgroup_parent: Option<PathBuf>,
}

/// `templates/<name>.json`.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct TemplateRecord {
    pub(crate) name: String,
    pub(crate) image: String,
    /// The directory sandboxes of this template are copies of.
    pub(crate) image_dir: PathBuf,
    pub(crate) network: bool,
    pub(crate) labels: Labels,
}

/// `pools/<template>.json`.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct PoolRecord {
    pub(crate) template: String,
    pub(crate) desired: u32,
}

/// `sandboxes/<id>/meta.json`, written once the sandbox is ready.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct SandboxMeta {
    pub(crate) id: String,
    pub(crate) run_id: RunId,
    pub(crate) template: String,
    pub(crate) isolation: Isolation,
    pub(crate) workdir_copy: WorkdirMode,
    /// Seconds since the Unix epoch.
    pub(crate) created_at: u64,
}

/// The file name of `meta.json` inside a sandbox directory.
pub(crate) const SANDBOX_META: &str = "meta.json";

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Writes `value` as JSON to `path` atomically, creating parent directories.
pub(crate) fn write_record(path: &Path, value: &impl Serialize) -> Result<(), LocalError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| LocalError::Failed(format!("encoding {}: {e}", path.display())))?;
    // Unique per writer: two writers of one record (concurrent claims
    // making the same template) each rename their own whole file.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let partial = path.with_extension(format!(
        "json.partial-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    fs::write(&partial, json).context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path).context(|| format!("renaming {} into place", partial.display()))
}

/// Reads a JSON record.
pub(crate) fn read_record<T: DeserializeOwned>(path: &Path) -> Result<T, LocalError> {
    let bytes = fs::read(path).context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| LocalError::Failed(format!("{} is not a valid record: {e}", path.display())))
}

/// A name for a file or cgroup made only to see that it can be made, unique
/// to this process and call: backends set up at once on one state_dir (or
/// cgroup parent) must not remove each other's probe.
pub(crate) fn probe_name(prefix: &str) -> String {
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{call}", std::process::id())
}

/// Removes a record; one that is already gone is fine.
pub(crate) fn remove_record(path: &Path) -> Result<(), LocalError> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(error).context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Whether `name` has the form of a sandbox id this backend gives: a
/// template's id prefix and a number, lowercase letters, digits and `-`
/// (so never a path, `.` or `..`).
pub(crate) fn is_sandbox_id(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The sandbox ids among the directories of `sandboxes`; anything else
/// there is reported and left to the removal of the run's directory.
fn sandbox_ids(sandboxes: &Path) -> Result<Vec<String>, LocalError> {
    let mut ids = entry_names(sandboxes, false)?;
    ids.retain(|name| {
        let valid = is_sandbox_id(name);
        if !valid {
            tracing::warn!(
                entry = ?name,
                dir = %sandboxes.display(),
                "not a sandbox id; left to the run's removal"
            );
        }
        valid
    });
    Ok(ids)
}

/// Names of the directories or record files (without `.json`) in `dir`.
fn entry_names(dir: &Path, records: bool) -> Result<Vec<String>, LocalError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).context(|| format!("listing {}", dir.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let name = if records {
            match name.strip_suffix(".json") {
                Some(stem) => stem.to_string(),
                None => continue,
            }
        } else if entry.path().is_dir() {
            name
        } else {
            continue;
        };
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Names in the records of one kind: the `name` or `template` they hold.
fn record_names<T: DeserializeOwned>(
    dir: &Path,
    name_of: fn(T) -> String,
) -> Result<Vec<String>, LocalError> {
    let mut names = Vec::new();
    for stem in entry_names(dir, true)? {
        let path = dir.join(format!("{stem}.json"));
        match read_record::<T>(&path) {
            Ok(record) => names.push(name_of(record)),
            // A record that cannot be read still names something the run owns.
            Err(error) => {
                tracing::warn!(%error, "unreadable record");
                names.push(stem);
            }
        }
    }
    Ok(names)
}

/// What run `run_id` owns in `state_dir`: its templates, warm pools and
/// sandboxes. Works for any run, live or crashed.
pub async fn list_run(state_dir: &Path, run_id: &RunId) -> Result<Owned, LocalError> {
    let run = StateDir::new(state_dir.to_path_buf()).run(run_id);
    blocking(move || {
        Ok(Owned {
            templates: record_names(&run.templates(), |r: TemplateRecord| r.name)?,
            pools: record_names(&run.pools(), |r: PoolRecord| r.template)?,
            sandboxes: sandbox_ids(&run.sandboxes())?,
            snapshots: snapshot_ids(&run.snapshots())?,
        })
    })
    .await
}

/// The snapshots every run keeps in `state_dir`, and the disk their layers
/// take (blocks, a file linked twice counted once; links not followed).
/// `sandfleet images prune --budget` counts them: they share the disk with
/// the layer store, and only a run's reap removes them.
pub async fn snapshots_held(state_dir: &Path) -> Result<SnapshotsHeld, LocalError> {
    let runs = StateDir::new(state_dir.to_path_buf()).runs();
    blocking(move || {
        let mut held = SnapshotsHeld::default();
        let mut seen = std::collections::HashSet::new();
        for run in entry_names(&runs, false)? {
            let snapshots = runs.join(&run).join("snapshots");
            held.snapshots += snapshot_ids(&snapshots)?.len();
            for meta in walkdir::WalkDir::new(&snapshots)
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
            {
                if seen.insert((meta.dev(), meta.ino())) {
                    held.bytes += meta.blocks() * 512;
                }
            }
        }
        Ok(held)
    })
    .await
}

/// What [`snapshots_held`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotsHeld {
    /// Snapshots, over every run.
    pub snapshots: usize,
    /// Bytes of disk their layers take.
    pub bytes: u64,
}

/// Removes everything run `run_id` owns in `state_dir`: kills its processes
/// (the inits its sandboxes' helpers recorded, every process in its
/// cgroups, and the commands of its unisolated sandboxes), removes its
/// cgroups, sandbox directories and records, and returns the counts.
/// Idempotent: a second call finds nothing. Images are a cache shared by
/// runs and stay.
pub async fn reap_run(state_dir: &Path, run_id: &RunId) -> Result<Reaped, LocalError> {
    let state = StateDir::new(state_dir.to_path_buf());
    let run = state.run(run_id);
    let runs = state.runs();
    let scan_run = run.clone();
    let scan_id = run_id.clone();
    let (targets, sandboxes, cgroup) =
        blocking(move || find_run_processes(&scan_run, &scan_id)).await?;
    let mut processes = process::kill_all(targets, REAP_WAIT).await;
    if let Some((cgroups, relative)) = cgroup {
        // Commands' helpers sit in the cgroups outside the sandboxes' pid
        // namespaces; they go once their sandbox has.
        let (scan, path) = (cgroups.clone(), relative.clone());
        let left = blocking(move || Ok(open_all(scan.processes(&path)))).await?;
        processes += process::kill_all(left, REAP_WAIT).await;
        blocking(move || {
            cgroups
                .remove(&relative)
                .context(|| format!("removing cgroup {}", relative.display()))
        })
        .await?;
    }
    let run_name = run_id.as_str().to_string();
    blocking(move || {
        let templates = entry_names(&run.templates(), true)?.len();
        let pools = entry_names(&run.pools(), true)?.len();
        let snapshots = snapshot_ids(&run.snapshots())?.len();
        for id in &sandboxes {
            remove_beneath(&run.sandboxes(), id)?;
        }
        remove_beneath(&runs, &run_name)?;
        Ok(Reaped {
            templates,
            pools,
            sandboxes: sandboxes.len(),
            processes,
            snapshots,
        })
    })
    .await
}

/// Processes still running among `pids`, held by pidfd.
fn open_all(pids: Vec<i32>) -> Vec<Process> {
    pids.into_iter()
        .filter_map(|pid| ProcessIdentity::of(pid).and_then(Process::open))
        .collect()
}

/// What a reap of a run kills and removes.
type RunRemains = (Vec<Process>, Vec<String>, Option<(Cgroups, PathBuf)>);

/// The init a sandbox's helper recorded in directory `dir`, if it still
/// runs.
pub(crate) fn recorded_init(dir: &Path) -> Option<Process> {
    let record: ProcessRef = read_record(&dir.join(INIT_RECORD)).ok()?;
    Process::open(ProcessIdentity {
        pid: record.pid,
        start_time: record.start_time,
    })
}

/// The live processes of a run, deduplicated, the ids of its sandboxes
/// (from its directory only), and its cgroup.
fn find_run_processes(run: &RunDir, run_id: &RunId) -> Result<RunRemains, LocalError> {
    let record = read_record::<RunRecord>(&run.record()).ok();
    if let Some(record) = &record
        && Process::open(record.owner).is_some()
        && record.owner.pid != std::process::id() as i32
    {
        tracing::warn!(
            run = %run_id,
            owner = record.owner.pid,
            "reaping a run whose owner is still running"
        );
    }
    let cgroup = record
        .and_then(|record| record.cgroup_parent)
        .map(|parent| (Cgroups::detect(), parent.join(run_id.as_str())));
    let sandboxes = sandbox_ids(&run.sandboxes())?;
    // A sandbox without an init record never ran a command: its helper
    // writes the record before the init is let go.
    let mut targets: Vec<Process> = sandboxes
        .iter()
        .filter_map(|id| recorded_init(&run.sandboxes().join(id)))
        .collect();
    targets.extend(process::find_plain(MarkerScope::Run(run_id)));
    Ok((targets, sandboxes, cgroup))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_writers_of_one_record_both_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("templates/t.json");
        std::thread::scope(|scope| {
            for desired in 0..8 {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..50 {
                        let record = PoolRecord {
                            template: "t".into(),
                            desired,
                        };
                        write_record(path, &record).unwrap();
                    }
                });
            }
        });
        let read: PoolRecord = read_record(&path).unwrap();
        assert!(read.desired < 8);
        // No partial file is left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn records_round_trip_and_removal_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/pool.json");
        let record = PoolRecord {
            template: "t".into(),
            desired: 3,
        };
        write_record(&path, &record).unwrap();
        let read: PoolRecord = read_record(&path).unwrap();
        assert_eq!((read.template.as_str(), read.desired), ("t", 3));
        remove_record(&path).unwrap();
        remove_record(&path).unwrap();
        let error = read_record::<PoolRecord>(&path).unwrap_err().to_string();
        assert!(error.contains("a/b/pool.json"), "{error}");
    }

    #[tokio::test]
    async fn reaping_an_unknown_run_finds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunId::new("never-ran").unwrap();
        assert_eq!(reap_run(dir.path(), &run).await.unwrap(), Reaped::default());
        assert_eq!(list_run(dir.path(), &run).await.unwrap(), Owned::default());
    }
}
