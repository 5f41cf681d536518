//! [`LocalBackend`]: the [`Backend`] trait over sandboxes on this machine,
//! with warm pools, a limit on live sandboxes, and run-owned state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandfleet_core::{
    Backend, BackendError, Capacity, ExecRequest, ExecResult, Labels, OutputSink, Owned,
    PoolStatus, Preflight, Reaped, RunId, SandboxHandle, TemplateRef, TemplateSpec,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use sandfleet_jail::cgroup::{Cgroups, Limits};
use sandfleet_jail::protocol::IdMap;

use crate::config::{IsolationMode, LocalConfig};
use crate::error::{IoContext, LocalError};
use crate::namespace::SANDBOX_PATH;
use crate::pool::Pool;
use crate::process::ProcessIdentity;
use crate::sandbox::{Isolation, Resources, Sandbox, Site, Template};
use crate::state::{
    self, PoolRecord, RunRecord, StateDir, TemplateRecord, remove_record, unix_now, write_record,
};
use crate::{exec, ids, image, machine};

/// How long a warm sandbox may take to become ready.
const WARM_CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound on `put_file` and `get_file`.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);

/// Writes stdin to `$1` with mode `$2`, creating parent directories.
const PUT_FILE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")" && cat >"$1" && chmod "$2" "$1""#;

/// Prints file `$1`, or exits with status `$2` when there is no such file.
const GET_FILE_SCRIPT: &str = r#"[ -f "$1" ] || exit "$2"; exec cat -- "$1""#;

/// The status `GET_FILE_SCRIPT` exits with for a missing file: `EX_NOINPUT`
/// from sysexits.h.
const MISSING_FILE: i32 = 66;

/// The embedded local backend: sandboxes on this machine, isolated with
/// Linux namespaces, cgroups, dropped capabilities and seccomp (or, with
/// `isolation = "none"`, not at all).
///
/// Everything it makes belongs to the run it was created for and lives in
/// `<state>/runs/<run-id>/`. Dropping the backend kills its sandboxes'
/// processes but leaves their directories for [`Backend::reap`] (or
/// [`crate::reap_run`]).
pub struct LocalBackend {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    config: LocalConfig,
    state: StateDir,
    site: Site,
    /// What preflight warns about: no isolation, or limits that are not
    /// enforced.
    warnings: Vec<String>,
    max_sandboxes: u32,
    /// One permit per sandbox that may exist; every live sandbox holds one.
    slots: Arc<Semaphore>,
    /// Bounds how many warm sandboxes are being made at once.
    warm_creations: Semaphore,
    /// The tasks making warm sandboxes; a reap of this backend's own run
    /// waits for them, so none lands in the run's directory after it.
    warming: TaskTracker,
    /// Image directories by image name. Held across a build, so the same
    /// image is never built twice at once.
    images: tokio::sync::Mutex<HashMap<String, PathBuf>>,
    live: Mutex<Live>,
}

/// The backend's sandboxes and templates.
#[derive(Default)]
struct Live {
    templates: HashMap<String, Arc<Template>>,
    pools: HashMap<String, Pool<Held>>,
    claimed: HashMap<String, Held>,
}

/// A live sandbox and the slot it occupies until it is destroyed (in-flight
/// commands may still hold the sandbox itself).
struct Held {
    sandbox: Arc<Sandbox>,
    _slot: OwnedSemaphorePermit,
}

impl LocalBackend {
    /// A local cluster named `name` whose sandboxes belong to `run_id`.
    /// Cheap: whether sandboxes can be isolated here is found out by
    /// [`Backend::preflight`], which makes and probes one, and by the probe
    /// every sandbox passes before it is offered.
    ///
    /// # Errors
    ///
    /// [`BackendError::Rejected`] for an invalid configuration (a sandbox
    /// uid range that overlaps host users, say), [`BackendError::Unavailable`]
    /// when the state directory cannot be set up or used.
    pub fn new(name: &str, config: LocalConfig, run_id: RunId) -> Result<Self, BackendError> {
        let rejected = |detail: String| BackendError::Rejected {
            backend: name.to_string(),
            detail,
        };
        let unavailable = |detail: String| BackendError::Unavailable {
            backend: name.to_string(),
            detail,
        };
        config.validate().map_err(rejected)?;
        let configured = config.state_dir().map_err(rejected)?;
        std::fs::create_dir_all(&configured)
            .context(|| format!("state_dir {}: cannot create it", configured.display()))
            .map_err(|e| unavailable(e.to_string()))?;
        // Sandboxes are set up from canonical paths only.
        let root = configured
            .canonicalize()
            .context(|| format!("resolving state_dir {}", configured.display()))
            .map_err(|e| unavailable(e.to_string()))?;
        let state = StateDir::new(root);
        let mut warnings = Vec::new();
        let ids = ids::sandbox_ids(config.sandbox_uid_base).map_err(rejected)?;
        let isolation = match config.isolation {
            IsolationMode::Namespaces => {
                check_searchable(state.root(), &ids).map_err(unavailable)?;
                Isolation::Namespaces
            }
            IsolationMode::None => {
                warnings.push(
                    "isolation = \"none\": sandboxes are plain directories and their commands run \
                     unisolated on the host, with only the workdir and /tmp mapped into the sandbox"
                        .to_string(),
                );
                Isolation::Plain
            }
        };
        let run = state.run(&run_id);
        let cgroup_parent = PathBuf::from(&config.cgroup_parent);
        let cgroups = match isolation {
            Isolation::Namespaces => match usable_cgroups(&cgroup_parent, &run_id) {
                Ok(cgroups) => Some(cgroups),
                Err(why) => {
                    warnings.push(format!(
                        "cgroup limits are not enforced ({why}): a sandbox's memory, cpu and \
                         processes are unbounded; run as root, or set cgroup_parent to a cgroup \
                         delegated to this user"
                    ));
                    None
                }
            },
            Isolation::Plain => None,
        };
        let owner = ProcessIdentity::of(std::process::id() as i32)
            .ok_or_else(|| unavailable("cannot read this process's /proc/self/stat".into()))?;
        let record = RunRecord {
            run_id: run_id.clone(),
            owner,
            started_at: unix_now(),
            cgroup_parent: cgroups.as_ref().map(|_| cgroup_parent.clone()),
        };
        write_record(&run.record(), &record).map_err(|e| {
            unavailable(format!(
                "state_dir {} is not writable: {e}",
                state.root().display()
            ))
        })?;
        let cores = machine::cores();
        let max_sandboxes = config.max_sandboxes(cores);
        let hidden = std::iter::once(state.root())
            .chain(config.hidden_paths.iter().map(PathBuf::as_path))
            .map(|path| path.display().to_string())
            .collect();
        Ok(LocalBackend {
            inner: Arc::new(Inner {
                name: name.to_string(),
                site: Site {
                    run_id,
                    run,
                    workdir: config.workdir.clone(),
                    isolation,
                    next_id: AtomicU64::new(1),
                    ids,
                    etc: config.etc_entries(),
                    cgroups,
                    cgroup_parent,
                    hidden,
                },
                config,
                state,
                warnings,
                max_sandboxes,
                slots: Arc::new(Semaphore::new(max_sandboxes as usize)),
                warm_creations: Semaphore::new(cores as usize),
                warming: TaskTracker::new(),
                images: tokio::sync::Mutex::new(HashMap::new()),
                live: Mutex::new(Live::default()),
            }),
        })
    }

    /// The state directory (canonical).
    pub fn state_dir(&self) -> &Path {
        self.inner.state.root()
    }

    fn error(&self, error: LocalError) -> BackendError {
        error.into_backend(&self.inner.name)
    }
}

/// Fails unless the sandboxes' root can reach `state_dir`: the mounts are
/// made as that user, so every directory above the state directory must be
/// searchable by others (root's home, mode 0700, is not).
fn check_searchable(state_dir: &Path, ids: &IdMap) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if ids.count == 1 {
        // Unprivileged, the sandbox's root is the user who owns the state.
        return Ok(());
    }
    for dir in state_dir.ancestors() {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 && meta.uid() != ids.uid {
            return Err(format!(
                "state_dir {}: {} (mode {:o}) cannot be entered by the sandboxes' root (host uid \
                 {}); choose a state_dir whose directories are searchable by others, such as \
                 /var/lib/sandfleet",
                state_dir.display(),
                dir.display(),
                mode & 0o7777,
                ids.uid
            ));
        }
    }
    Ok(())
}

/// The cgroup controllers sandboxes can be limited by, once a cgroup for
/// the run could be made under `parent` in every one of them.
fn usable_cgroups(parent: &Path, run_id: &RunId) -> Result<Cgroups, String> {
    let cgroups = Cgroups::detect();
    let missing = cgroups.missing();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
        return Err(format!("no {} controller is mounted", names.join(", ")));
    }
    let probe = parent.join(run_id.as_str()).join("probe");
    cgroups
        .create(&probe, &Limits::default())
        .and_then(|_| cgroups.remove(&probe))
        .map_err(|e| e.to_string())?;
    Ok(cgroups)
}

impl Inner {
    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().expect("backend state lock poisoned")
    }

    fn template(&self, name: &str) -> Result<Arc<Template>, LocalError> {
        self.live()
            .templates
            .get(name)
            .cloned()
            .ok_or_else(|| LocalError::NotFound(format!("template `{name}`")))
    }

    /// Fails for a handle of another cluster.
    fn check_cluster(&self, handle: &SandboxHandle) -> Result<(), LocalError> {
        if handle.cluster == self.name {
            Ok(())
        } else {
            Err(LocalError::NotFound(format!(
                "sandbox {} (it belongs to cluster `{}`)",
                handle.id, handle.cluster
            )))
        }
    }

    /// The claimed sandbox `handle` names.
    fn claimed(&self, handle: &SandboxHandle) -> Result<Arc<Sandbox>, LocalError> {
        self.check_cluster(handle)?;
        self.live()
            .claimed
            .get(&handle.id)
            .map(|held| Arc::clone(&held.sandbox))
            .ok_or_else(|| LocalError::NotFound(format!("sandbox {}", handle.id)))
    }

    async fn image_dir(&self, name: &str) -> Result<PathBuf, LocalError> {
        let source = self.config.images.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.config.images.keys().map(String::as_str).collect();
            LocalError::NotFound(format!(
                "image `{name}` (this cluster's images: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        let mut images = self.images.lock().await;
        if let Some(dir) = images.get(name) {
            return Ok(dir.clone());
        }
        // Run as root, sandboxes need their own copy, owned by their root.
        let owners = (self.site.isolation == Isolation::Namespaces && self.site.ids.count > 1)
            .then_some(self.site.ids);
        let dir = image::prepare(name, source, &self.state.images(), owners).await?;
        // Sandboxes are set up from canonical paths only.
        let dir = dir
            .canonicalize()
            .context(|| format!("image `{name}`: resolving {}", dir.display()))?;
        images.insert(name.to_string(), dir.clone());
        Ok(dir)
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, LocalError> {
        if spec.network && !self.config.network {
            return Err(LocalError::Rejected(format!(
                "template `{}` asks for network access, which this cluster does not allow \
                 (set `network = true` in its config)",
                spec.name
            )));
        }
        let env: Vec<(String, String)> = spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let reference = TemplateRef {
            name: spec.name.clone(),
            image: spec.image.clone(),
        };
        if let Some(existing) = self.live().templates.get(&spec.name) {
            let same = existing.image == spec.image
                && existing.share_network == spec.network
                && existing.env == env;
            return if same {
                Ok(reference)
            } else {
                Err(LocalError::Rejected(format!(
                    "template `{}` already exists with another image, network or environment",
                    spec.name
                )))
            };
        }
        let image_dir = self.image_dir(&spec.image).await?;
        write_record(
            &self.site.run.template(&spec.name),
            &TemplateRecord {
                name: spec.name.clone(),
                image: spec.image.clone(),
                image_dir: image_dir.clone(),
                network: spec.network,
                labels: spec.labels.clone(),
            },
        )?;
        let overrides = self
            .config
            .images
            .get(&spec.image)
            .map(|source| source.limits)
            .unwrap_or_default();
        let template = Arc::new(Template {
            name: spec.name.clone(),
            image: spec.image.clone(),
            image_dir,
            share_network: spec.network,
            env,
            id_prefix: Template::id_prefix(&spec.name),
            resources: Resources {
                memory_mib: spec.memory_mib,
                cpu_milli: spec.cpu_milli,
                disk_mib: spec.disk_mib,
                limits: self.config.limits.with(overrides),
            },
        });
        self.live()
            .templates
            .entry(spec.name.clone())
            .or_insert(template);
        Ok(reference)
    }

    async fn warm(self: &Arc<Self>, name: &str, replicas: u32) -> Result<(), LocalError> {
        let template = self.template(name)?;
        if replicas > self.max_sandboxes {
            return Err(LocalError::Rejected(format!(
                "a warm pool of {replicas} for template `{name}` exceeds max_sandboxes = {}",
                self.max_sandboxes
            )));
        }
        write_record(
            &self.site.run.pool(name),
            &PoolRecord {
                template: name.to_string(),
                desired: replicas,
            },
        )?;
        let surplus = self
            .live()
            .pools
            .entry(name.to_string())
            .or_default()
            .set_desired(replicas);
        self.destroy_all(surplus).await;
        self.refill(&template);
        Ok(())
    }

    async fn unwarm(self: &Arc<Self>, name: &str) -> Result<(), LocalError> {
        let surplus = self
            .live()
            .pools
            .get_mut(name)
            .map(|pool| pool.set_desired(0))
            .unwrap_or_default();
        remove_record(&self.site.run.pool(name))?;
        self.destroy_all(surplus).await;
        self.refill_all();
        Ok(())
    }

    fn pool_status(&self, name: &str) -> Result<PoolStatus, LocalError> {
        self.template(name)?;
        Ok(self
            .live()
            .pools
            .get(name)
            .map(Pool::status)
            .unwrap_or_default())
    }

    /// Starts making warm sandboxes for `template`'s pool, as far as it is
    /// short and slots are free. Creations that fail are logged and not
    /// retried; the next claim or release refills again.
    fn refill(self: &Arc<Self>, template: &Arc<Template>) {
        let mut slots = Vec::new();
        {
            let mut live = self.live();
            let Some(pool) = live.pools.get_mut(&template.name) else {
                return;
            };
            for _ in 0..pool.shortfall() {
                let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
                    break;
                };
                pool.creation_started();
                slots.push(slot);
            }
        }
        for slot in slots {
            self.warming
                .spawn(Arc::clone(self).make_warm(Arc::clone(template), slot));
        }
    }

    /// Refills every pool (after slots were freed).
    fn refill_all(self: &Arc<Self>) {
        let templates: Vec<Arc<Template>> = {
            let live = self.live();
            live.pools
                .keys()
                .filter_map(|name| live.templates.get(name).cloned())
                .collect()
        };
        for template in &templates {
            self.refill(template);
        }
    }

    async fn make_warm(self: Arc<Self>, template: Arc<Template>, slot: OwnedSemaphorePermit) {
        let made = {
            // The semaphore is never closed, so this always gets a permit.
            let _turn = self.warm_creations.acquire().await;
            let deadline = Instant::now() + WARM_CREATE_TIMEOUT;
            Sandbox::create(&self.site, Arc::clone(&template), deadline).await
        };
        let made = match made {
            Ok(sandbox) => Some(Held {
                sandbox: Arc::new(sandbox),
                _slot: slot,
            }),
            Err(error) => {
                tracing::warn!(cluster = %self.name, template = %template.name, %error,
                    "making a warm sandbox failed");
                None
            }
        };
        let surplus = match self.live().pools.get_mut(&template.name) {
            Some(pool) => pool.creation_finished(made),
            // The pool was reaped meanwhile.
            None => made,
        };
        if let Some(surplus) = surplus {
            self.destroy_all(vec![surplus]).await;
            self.refill_all();
        }
    }

    async fn claim(
        self: &Arc<Self>,
        name: &str,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, LocalError> {
        let template = self.template(name)?;
        let held = loop {
            let warm = self.live().pools.get_mut(name).and_then(Pool::take);
            match warm {
                Some(held) if held.sandbox.is_alive() => {
                    self.refill(&template);
                    break held;
                }
                Some(dead) => {
                    tracing::warn!(
                        sandbox = dead.sandbox.id(),
                        "discarding a warm sandbox whose init died"
                    );
                    self.destroy_all(vec![dead]).await;
                }
                None => break self.make_cold(template, deadline).await?,
            }
        };
        let sandbox = &held.sandbox;
        tracing::debug!(cluster = %self.name, sandbox = sandbox.id(), ?labels, "claimed");
        let handle = SandboxHandle {
            id: sandbox.id().to_string(),
            cluster: self.name.clone(),
            template: sandbox.template().name.clone(),
            hostname: sandbox.id().to_string(),
            endpoint: None,
        };
        self.live().claimed.insert(handle.id.clone(), held);
        Ok(handle)
    }

    async fn make_cold(
        &self,
        template: Arc<Template>,
        deadline: Instant,
    ) -> Result<Held, LocalError> {
        let budget = deadline.saturating_duration_since(Instant::now());
        let slot = tokio::time::timeout(budget, Arc::clone(&self.slots).acquire_owned())
            .await
            .map_err(|_| LocalError::Timeout {
                what: format!(
                    "a free sandbox slot (max_sandboxes = {} are live)",
                    self.max_sandboxes
                ),
                after: budget,
            })?
            .map_err(|_| LocalError::Failed("the sandbox slots were closed".into()))?;
        let sandbox = Sandbox::create(&self.site, template, deadline).await?;
        Ok(Held {
            sandbox: Arc::new(sandbox),
            _slot: slot,
        })
    }

    async fn exec(
        &self,
        handle: &SandboxHandle,
        request: &ExecRequest,
        sink: Option<&OutputSink>,
    ) -> Result<ExecResult, LocalError> {
        let sandbox = self.claimed(handle)?;
        let program = request.argv.first().map_or("", String::as_str);
        if !sandbox.is_alive() {
            return Err(LocalError::Failed(format!(
                "sandbox {}: its init has exited",
                sandbox.id()
            )));
        }
        let prepared = sandbox.command(request)?;
        let disk = sandbox.disk_limit();
        let ran = exec::run(
            prepared.command,
            prepared.stdin_prefix,
            prepared.leader,
            request,
            sink,
            disk.as_ref(),
        )
        .await
        .context(|| format!("sandbox {}: running `{program}`", sandbox.id()))?;
        // Entering a dead sandbox fails like a command would; tell the two
        // apart so the engine sees an infrastructure error.
        if !sandbox.is_alive() {
            return Err(LocalError::Failed(format!(
                "sandbox {} ended while `{program}` ran",
                sandbox.id()
            )));
        }
        if let Some(used) = ran.disk_exceeded {
            return Err(LocalError::Failed(format!(
                "sandbox {}: `{program}` was stopped: the sandbox's writes ({} MiB) passed its disk \
                 limit of {} MiB (the template's disk_mib)",
                sandbox.id(),
                used >> 20,
                sandbox.template().resources.disk_mib
            )));
        }
        Ok(ran.result)
    }

    async fn scrub(&self, handle: &SandboxHandle) -> Result<(), LocalError> {
        self.claimed(handle)?.scrub().await
    }

    async fn put_file(
        &self,
        handle: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), LocalError> {
        let sandbox = self.claimed(handle)?;
        if !sandbox.contains(path) {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: {path} is outside the sandbox (without namespaces, a sandbox holds \
                 only its workdir and /tmp)",
                sandbox.id()
            )));
        }
        let request = ExecRequest {
            argv: [
                "sh",
                "-c",
                PUT_FILE_SCRIPT,
                "sh",
                path,
                &format!("{:o}", mode & 0o7777),
            ]
            .map(String::from)
            .to_vec(),
            stdin: Some(contents.to_vec()),
            timeout: FILE_TIMEOUT,
            ..ExecRequest::default()
        };
        let result = self.exec(handle, &request, None).await?;
        if result.exit_code == 0 {
            Ok(())
        } else {
            Err(file_failure(sandbox.id(), "writing", path, &result))
        }
    }

    async fn get_file(&self, handle: &SandboxHandle, path: &str) -> Result<Vec<u8>, LocalError> {
        let request = ExecRequest {
            argv: [
                "sh",
                "-c",
                GET_FILE_SCRIPT,
                "sh",
                path,
                &MISSING_FILE.to_string(),
            ]
            .map(String::from)
            .to_vec(),
            timeout: FILE_TIMEOUT,
            ..ExecRequest::default()
        };
        let result = self.exec(handle, &request, None).await?;
        match result.exit_code {
            0 => Ok(result.stdout),
            MISSING_FILE => Err(LocalError::NotFound(format!(
                "file {path} in sandbox {}",
                handle.id
            ))),
            _ => Err(file_failure(&handle.id, "reading", path, &result)),
        }
    }

    async fn release(self: &Arc<Self>, handle: &SandboxHandle) -> Result<(), LocalError> {
        self.check_cluster(handle)?;
        let Some(held) = self.live().claimed.remove(&handle.id) else {
            return Ok(());
        };
        let destroyed = held.sandbox.destroy().await;
        drop(held);
        self.refill_all();
        destroyed
    }

    /// Destroys sandboxes concurrently, logging failures: their slots are
    /// free either way, and `reap` removes what is left.
    async fn destroy_all(&self, sandboxes: Vec<Held>) {
        let mut destroying = tokio::task::JoinSet::new();
        for held in sandboxes {
            destroying.spawn(async move {
                if let Err(error) = held.sandbox.destroy().await {
                    tracing::warn!(sandbox = held.sandbox.id(), %error, "destroying a sandbox failed");
                }
            });
        }
        destroying.join_all().await;
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, LocalError> {
        // Our own run: forget everything first so that no refill makes new
        // sandboxes, but keep the sandboxes (whose drop kills them) until the
        // reap has killed and counted their processes.
        let forgotten = if *run_id == self.site.run_id {
            let forgotten = std::mem::take(&mut *self.live());
            // Sandboxes still being made find their pool gone and destroy
            // themselves; wait for that before removing the run's directory.
            self.warming.close();
            if tokio::time::timeout(WARM_CREATE_TIMEOUT, self.warming.wait())
                .await
                .is_err()
            {
                tracing::warn!(cluster = %self.name, "warm sandboxes still being made at reap");
            }
            self.warming.reopen();
            Some(forgotten)
        } else {
            None
        };
        let reaped = state::reap_run(self.state.root(), run_id).await;
        drop(forgotten);
        reaped
    }

    async fn preflight(self: &Arc<Self>) -> Preflight {
        let mut report = Preflight::default();
        let probe_file = self.state.root().join(".preflight");
        match std::fs::write(&probe_file, b"") {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe_file);
            }
            Err(error) => report.failures.push(format!(
                "state_dir {} is not writable: {error}",
                self.state.root().display()
            )),
        }
        let mut tools = vec!["sh", "cp"];
        if self.site.isolation == Isolation::Plain {
            tools.push("env");
        }
        if self.config.images.values().any(|source| source.git) {
            tools.push("git");
        }
        for tool in tools {
            if !on_sandbox_path(tool) {
                report.failures.push(format!(
                    "`{tool}` is not in any directory of {SANDBOX_PATH}"
                ));
            }
        }
        report.warnings.extend(self.warnings.iter().cloned());
        // Every task of an image with no directory would fail at warm-up,
        // after other pools were already created: refuse the run up front.
        for (name, source) in &self.config.images {
            if !source.path.is_dir() {
                report.failures.push(format!(
                    "image `{name}`: {} is not a directory",
                    source.path.display()
                ));
            }
        }
        if self.site.isolation == Isolation::Namespaces {
            match self.probe_isolation().await {
                Ok(()) => report.notes.push(self.isolation_note()),
                Err(error) => report.failures.push(format!(
                    "sandboxes cannot be isolated here, so none will be made: {error}"
                )),
            }
        }
        report
    }

    /// Makes a sandbox of an empty image (through the probe every sandbox
    /// passes) and destroys it.
    async fn probe_isolation(self: &Arc<Self>) -> Result<(), LocalError> {
        let image_dir = self.state.root().join("probe-image");
        std::fs::create_dir_all(&image_dir)
            .context(|| format!("creating {}", image_dir.display()))?;
        let template = Arc::new(Template {
            name: "isolation-probe".into(),
            image: "isolation-probe".into(),
            image_dir,
            share_network: false,
            env: Vec::new(),
            id_prefix: "isolation-probe".into(),
            resources: Resources {
                memory_mib: 64,
                cpu_milli: 100,
                disk_mib: 16,
                limits: self.config.limits,
            },
        });
        let deadline = Instant::now() + WARM_CREATE_TIMEOUT;
        let sandbox = Sandbox::create(&self.site, template, deadline).await?;
        sandbox.destroy().await
    }

    /// What sandboxes of this cluster are confined by, for preflight.
    fn isolation_note(&self) -> String {
        let root = if self.site.ids.count == 1 {
            format!("the calling user (uid {})", self.site.ids.uid)
        } else {
            format!(
                "host uids {}..{} (sandbox_uid_base)",
                self.site.ids.uid,
                self.site.ids.uid + self.site.ids.count
            )
        };
        let limits = match &self.site.cgroups {
            Some(cgroups) => cgroups
                .hierarchies()
                .iter()
                .map(|h| {
                    format!(
                        "{} ({:?}, {})",
                        h.controller.name(),
                        h.version,
                        h.root.display()
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            None => "none".to_string(),
        };
        format!(
            "sandboxes are isolated (namespaces, read-only host directories, masked /proc, no \
             CAP_SYS_ADMIN, no_new_privs, seccomp) and probed before use; their root is {root}; \
             cgroup limits enforced: {limits}"
        )
    }

    fn capacity(&self) -> Result<Capacity, LocalError> {
        Ok(Capacity {
            nodes: 1,
            cpu_milli: u64::from(machine::cores()) * 1000,
            memory_mib: machine::memory_available_mib()?,
            disk_mib_per_node: machine::disk_free_mib(self.state.root())?,
            sandbox_slots: self.max_sandboxes,
        })
    }
}

/// The error for a file operation whose command failed.
fn file_failure(sandbox_id: &str, doing: &str, path: &str, result: &ExecResult) -> LocalError {
    LocalError::Failed(format!(
        "sandbox {sandbox_id}: {doing} {path} failed (exit code {}{}): {}",
        result.exit_code,
        if result.timed_out { ", timed out" } else { "" },
        String::from_utf8_lossy(&result.stderr).trim()
    ))
}

/// Whether `tool` is an executable file in a directory of [`SANDBOX_PATH`].
fn on_sandbox_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    SANDBOX_PATH.split(':').any(|dir| {
        std::fs::metadata(Path::new(dir).join(tool))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

#[async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &str {
        &self.inner.name
    }

    async fn preflight(&self) -> Preflight {
        self.inner.preflight().await
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        self.inner.capacity().map_err(|e| self.error(e))
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        self.inner
            .ensure_template(spec)
            .await
            .map_err(|e| self.error(e))
    }

    async fn warm(&self, template: &TemplateRef, replicas: u32) -> Result<(), BackendError> {
        self.inner
            .warm(&template.name, replicas)
            .await
            .map_err(|e| self.error(e))
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        self.inner
            .unwarm(&template.name)
            .await
            .map_err(|e| self.error(e))
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        self.inner
            .pool_status(&template.name)
            .map_err(|e| self.error(e))
    }

    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.inner
            .claim(&template.name, labels, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.inner
            .exec(sandbox, request, output)
            .await
            .map_err(|e| self.error(e))
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        self.inner
            .put_file(sandbox, path, contents, mode)
            .await
            .map_err(|e| self.error(e))
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        self.inner
            .get_file(sandbox, path)
            .await
            .map_err(|e| self.error(e))
    }

    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.scrub(sandbox).await.map_err(|e| self.error(e))
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.release(sandbox).await.map_err(|e| self.error(e))
    }

    /// Checks that the sandbox exists. Lifetimes are not enforced: a claimed
    /// sandbox lives until it is released or its run is reaped.
    async fn renew(&self, sandbox: &SandboxHandle, _ttl: Duration) -> Result<(), BackendError> {
        self.inner
            .claimed(sandbox)
            .map(drop)
            .map_err(|e| self.error(e))
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        state::list_run(self.inner.state.root(), run_id)
            .await
            .map_err(|e| self.error(e))
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        self.inner.reap(run_id).await.map_err(|e| self.error(e))
    }
}
