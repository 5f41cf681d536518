//! sandfleet's embedded local backend: sandboxes on this machine.
//!
//! An image is a named local directory (a source tree or a root
//! filesystem), optionally snapshotted into a one-commit git repository
//! (module `image`), or an OCI image pulled into the state directory's
//! layer store and run as its whole root filesystem (module `oci`). A sandbox is a private copy-on-write view of its image
//! at the workdir, isolated by Linux namespaces, cgroups, dropped
//! capabilities and seccomp, set up and entered by the embedded
//! `sandfleet-jail` helper (`jail`, `namespace`, `sandbox`, `isolated`;
//! host ids in `ids`), probed before it is offered, and started again over
//! its workdir layer when it is scrubbed for reuse; with `isolation =
//! "none"`, a plain directory with best-effort path mapping (`plain`). Warm pools keep
//! sandboxes ready to claim (`pool`). Everything a run creates lives under
//! `<state>/runs/<run-id>/` and in its cgroups, and every sandbox's init is
//! recorded there by the helper before it runs anything, so [`reap_run`]
//! removes what a crashed run left from those records and cgroups alone,
//! never from anything a task could set (`state`, `process`), and removes
//! trees without following their links (`remove`).
//! One backend serves any number of runs: `inventory` keeps each run's
//! templates and pools and the claimed sandboxes; `backend` is the
//! [`sandfleet_core::Backend`] implementation, with its operations by
//! concern in `templates`, `warming`, `claims`, `files` and `checks`
//! (preflight, capacity). The other modules: `config` (the cluster's TOML
//! table), `exec` (one command with timeout, output caps and streaming),
//! `disk` (the disk limit, measured while commands run), `spawn` (a command handed back running, with live stdin and
//! output pipes: [`LocalBackend::spawn`]), `machine` (the machine's size),
//! `error`.
//!
//! Enforced: the template's memory and cpu (cgroups) and disk (a measure of
//! the writable layer's blocks, inodes and deleted-but-held files, and
//! `RLIMIT_FSIZE`), processes, tmpfs sizes. Not
//! enforced: sandbox lifetimes (`renew`). Linux only.

mod backend;
mod checks;
mod claims;
mod config;
mod discard;
mod disk;
mod error;
mod exec;
mod files;
mod freeze;
mod ids;
mod image;
mod inventory;
mod isolated;
mod jail;
mod lookup;
mod machine;
mod namespace;
mod oci;
mod plain;
mod pool;
mod process;
mod remove;
mod sandbox;
mod seal;
mod snapshot;
mod spawn;
mod state;
mod templates;
mod warming;

pub use backend::LocalBackend;
pub use config::{
    ImageSource, IsolationMode, LimitOverrides, LocalConfig, OciSource, RegistrySettings,
    SandboxLimits,
};
pub use disk::DISK_LIMIT_PASSED;
pub use error::LocalError;
pub use ids::layer_ownership;
pub use remove::remove_tree;
pub use sandfleet_jail::protocol::Volume;
pub use sandfleet_jail::subordinate;
pub use spawn::{Exit, SpawnRequest, Spawned};
pub use state::{SnapshotsHeld, list_run, reap_run, snapshots_held};

/// Runs blocking filesystem work (whole trees, `/proc` scans) off the async
/// worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LocalError> + Send + 'static,
) -> Result<T, LocalError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| LocalError::Failed(format!("a blocking task failed: {e}")))?
}
