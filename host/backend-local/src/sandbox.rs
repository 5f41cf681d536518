//! Sandboxes: private copies of a template's image in which commands run.
//!
//! A **namespaced** sandbox is an init in its own user, mount, pid, ipc, uts
//! (and, unless its template may use the network, net) namespaces and its
//! own cgroups, with a root filesystem of its own (see `host/jail`): the
//! host's system directories read-only, a filtered `/etc`, private `/dev`,
//! `/proc` (masked), `/tmp` and `/root`, and the image at the workdir as an
//! overlay (or a copy where overlayfs is not allowed). Before it is
//! offered, the isolation probe runs in it as a command would and must find
//! the host out of reach; a sandbox that fails it is destroyed. Commands
//! enter it through the helper, confined: no `CAP_SYS_ADMIN`,
//! `no_new_privs`, seccomp, nothing inherited. Its writes (workdir and
//! `/tmp`) land in the sandbox directory's `layer/`, bounded by the
//! template's disk.
//!
//! A **plain** sandbox (`isolation = "none"`) is a directory:
//! `<sandbox>/rootfs/<workdir>` holds a copy of the image and
//! `<sandbox>/rootfs/tmp` stands for `/tmp`. Commands run on the host, in
//! their own process group, with `HOME` and `TMPDIR` inside that directory;
//! the working directory and every argv item that is the workdir or `/tmp`
//! or starts with `<one of them>/` are rewritten into it. That is a best
//! effort: paths inside scripts or other strings are not rewritten, and a
//! command can reach anything on the host.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_core::{ExecRequest, RunId};
use sandfleet_jail::cgroup::{Cgroups, Limits};
use sandfleet_jail::protocol::{Action, IdMap, TmpfsSizes, WorkdirMode};
use tokio::process::{Child, Command};

use crate::blocking;
use crate::config::SandboxLimits;
use crate::error::{IoContext, LocalError};
use crate::exec::{DiskLimit, Leader};
use crate::namespace::{self, Entry, InitSpec, SANDBOX_PATH};
use crate::process::{self, MARKER_ENV, MarkerScope, Process, ProcessIdentity, run_tool};
use crate::state::{
    RunDir, SANDBOX_META, SandboxMeta, StateDir, remove_tree, unix_now, write_record,
};

/// How long a plain sandbox's processes get to exit after SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How long a destroyed sandbox's cgroups may take to empty.
const CGROUP_DRAIN: Duration = Duration::from_secs(5);

/// How sandboxes are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Isolation {
    /// Linux namespaces.
    Namespaces,
    /// None: directories and host processes.
    Plain,
}

/// What each sandbox of a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resources {
    /// Memory (the cgroup's limit), in MiB.
    pub(crate) memory_mib: u32,
    /// CPU (a CFS quota), in millicores.
    pub(crate) cpu_milli: u32,
    /// Its writable layer (workdir and `/tmp`), in MiB.
    pub(crate) disk_mib: u32,
    /// Processes and tmpfs sizes.
    pub(crate) limits: SandboxLimits,
}

impl Resources {
    fn cgroup_limits(&self) -> Limits {
        Limits {
            memory_bytes: Some(u64::from(self.memory_mib) << 20),
            cpu_milli: Some(self.cpu_milli),
            pids: Some(self.limits.pids),
        }
    }

    fn disk_bytes(&self) -> u64 {
        u64::from(self.disk_mib) << 20
    }
}

/// A template made ready: what its sandboxes are made of.
#[derive(Debug)]
pub(crate) struct Template {
    /// The template's name.
    pub(crate) name: String,
    /// The run it belongs to, and with it every sandbox made from it.
    pub(crate) run_id: RunId,
    /// The image name.
    pub(crate) image: String,
    /// The directory sandboxes are copies of (canonical).
    pub(crate) image_dir: PathBuf,
    /// Whether its sandboxes keep the host's network.
    pub(crate) share_network: bool,
    /// Environment every command gets.
    pub(crate) env: Vec<(String, String)>,
    /// The start of its sandboxes' ids: the name, made id-safe.
    pub(crate) id_prefix: String,
    /// What each sandbox may use.
    pub(crate) resources: Resources,
}

impl Template {
    /// A sandbox id prefix for template `name`: lowercase letters, digits and
    /// `-`, so ids are valid host names and directory names.
    pub(crate) fn id_prefix(name: &str) -> String {
        let prefix: String = name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(32)
            .collect();
        let prefix = prefix.trim_matches('-');
        if prefix.is_empty() {
            "sandbox".to_string()
        } else {
            prefix.to_string()
        }
    }
}

/// Where and how a backend makes its sandboxes, for every run.
#[derive(Debug)]
pub(crate) struct Site {
    /// The state directory (canonical).
    pub(crate) state: StateDir,
    /// The workdir inside sandboxes.
    pub(crate) workdir: String,
    /// How sandboxes are isolated.
    pub(crate) isolation: Isolation,
    /// The number in the next sandbox id.
    pub(crate) next_id: AtomicU64,
    /// How sandbox ids appear on the host.
    pub(crate) ids: IdMap,
    /// Host `/etc` entries sandboxes see.
    pub(crate) etc: Vec<String>,
    /// The cgroup controllers that limit sandboxes; `None` where they
    /// cannot be used (preflight says why).
    pub(crate) cgroups: Option<Cgroups>,
    /// The cgroup sandboxes' cgroups are made in.
    pub(crate) cgroup_parent: PathBuf,
    /// Host paths no sandbox may see (the state directory).
    pub(crate) hidden: Vec<String>,
}

impl Site {
    /// The cgroup of sandbox `id` of run `run_id`, relative to each
    /// hierarchy.
    fn cgroup_of(&self, run_id: &RunId, id: &str) -> PathBuf {
        self.cgroup_parent.join(run_id.as_str()).join(id)
    }

    /// The directory of run `run_id`.
    pub(crate) fn run(&self, run_id: &RunId) -> RunDir {
        self.state.run(run_id)
    }
}

/// A live sandbox.
#[derive(Debug)]
pub(crate) struct Sandbox {
    id: String,
    run_id: RunId,
    template: Arc<Template>,
    dir: PathBuf,
    workdir: String,
    marker: String,
    jail: Jail,
}

/// What holds a sandbox's processes.
#[derive(Debug)]
enum Jail {
    Namespaces(Box<Namespaced>),
    Plain { paths: PathMap },
}

/// A namespaced sandbox's init, supervisor and cgroups.
#[derive(Debug)]
struct Namespaced {
    /// The init: killing it ends the sandbox.
    init: Process,
    /// Reaped once the init is gone; taken by the first shutdown.
    supervisor: Mutex<Option<Child>>,
    /// The cgroups (relative path and directories), when enforced.
    cgroup: Option<(Cgroups, PathBuf, Vec<PathBuf>)>,
    /// The init's mount table as the sandbox was offered.
    mounts: String,
}

impl Namespaced {
    fn cgroup_dirs(&self) -> &[PathBuf] {
        self.cgroup
            .as_ref()
            .map_or(&[], |(_, _, dirs)| dirs.as_slice())
    }

    /// Kills the init (and with it the sandbox), reaps the supervisor,
    /// kills whatever is left in the cgroups and removes them.
    async fn shutdown(&self) -> Result<(), LocalError> {
        self.init.kill();
        let supervisor = self
            .supervisor
            .lock()
            .expect("supervisor lock poisoned")
            .take();
        if let Some(mut supervisor) = supervisor {
            namespace::stop(&mut supervisor, Some(&self.init)).await;
        }
        match &self.cgroup {
            Some((cgroups, relative, _)) => remove_cgroup(cgroups.clone(), relative.clone()).await,
            None => Ok(()),
        }
    }
}

/// Kills what is left in cgroup `relative` (commands' helpers outlive the
/// sandbox's pid namespace by a moment) and removes it, within
/// [`CGROUP_DRAIN`].
async fn remove_cgroup(cgroups: Cgroups, relative: PathBuf) -> Result<(), LocalError> {
    let until = Instant::now() + CGROUP_DRAIN;
    loop {
        let (scan, path) = (cgroups.clone(), relative.clone());
        let left = blocking(move || {
            Ok(scan
                .processes(&path)
                .into_iter()
                .filter_map(|pid| ProcessIdentity::of(pid).and_then(Process::open))
                .collect::<Vec<_>>())
        })
        .await?;
        process::kill_all(left, STOP_WAIT).await;
        let (remove, path) = (cgroups.clone(), relative.clone());
        let removed = blocking(move || {
            remove
                .remove(&path)
                .context(|| format!("removing cgroup {}", path.display()))
        })
        .await;
        match removed {
            Ok(()) => return Ok(()),
            Err(error) if Instant::now() >= until => return Err(error),
            // A killed process leaves its cgroup a moment after it is gone.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A command ready to run in a sandbox.
pub(crate) struct Prepared {
    /// The command, program and arguments set.
    pub(crate) command: Command,
    /// Bytes to write to its stdin before the request's own.
    pub(crate) stdin_prefix: Vec<u8>,
    /// Who leads its process group.
    pub(crate) leader: Leader,
}

impl Sandbox {
    /// Makes a sandbox of `template` and returns it ready to run commands,
    /// or fails (having removed what it made) at `deadline`.
    pub(crate) async fn create(
        site: &Site,
        template: Arc<Template>,
        deadline: Instant,
    ) -> Result<Sandbox, LocalError> {
        let (id, dir) = allocate_dir(site, &template)?;
        let run_id = template.run_id.clone();
        let marker = process::sandbox_marker(&run_id, &id);
        let made = match site.isolation {
            Isolation::Namespaces => {
                make_namespaced(site, &template, &id, &dir, &marker, deadline).await
            }
            Isolation::Plain => make_plain(site, &template, &dir, deadline).await,
        };
        let (jail, workdir_copy) = match made {
            Ok(made) => made,
            Err(error) => {
                if let Err(cleanup) = blocking(move || remove_tree(&dir)).await {
                    tracing::warn!(sandbox = id, error = %cleanup, "cleaning up a failed sandbox");
                }
                return Err(error);
            }
        };
        let sandbox = Sandbox {
            id,
            run_id: run_id.clone(),
            template,
            dir,
            workdir: site.workdir.clone(),
            marker,
            jail,
        };
        let meta = SandboxMeta {
            id: sandbox.id.clone(),
            run_id,
            template: sandbox.template.name.clone(),
            isolation: site.isolation,
            workdir_copy,
            init: match &sandbox.jail {
                Jail::Namespaces(namespaced) => Some(namespaced.init.identity()),
                Jail::Plain { .. } => None,
            },
            created_at: unix_now(),
        };
        if let Err(error) = write_record(&sandbox.dir.join(SANDBOX_META), &meta) {
            if let Err(cleanup) = sandbox.destroy().await {
                tracing::warn!(sandbox = sandbox.id, error = %cleanup, "cleaning up a failed sandbox");
            }
            return Err(error);
        }
        Ok(sandbox)
    }

    /// The sandbox's id (also its host name).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its template.
    pub(crate) fn template(&self) -> &Template {
        &self.template
    }

    /// Whether it can still run commands: a namespaced sandbox dies with its
    /// init (dying counts: a command that ended because its init was killed
    /// is reaped before the init exits).
    pub(crate) fn is_alive(&self) -> bool {
        match &self.jail {
            Jail::Namespaces(namespaced) => !namespaced.init.is_ending(),
            Jail::Plain { .. } => true,
        }
    }

    /// Fails when the sandbox can no longer run commands.
    pub(crate) fn check_alive(&self) -> Result<(), LocalError> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(LocalError::SandboxLost(format!(
                "sandbox {}: its init has exited",
                self.id
            )))
        }
    }

    /// What a command (`program`) that ended came to for the sandbox: its
    /// end is the sandbox's when the init died meanwhile (entering a dead
    /// sandbox fails like a command would; told apart so the engine sees an
    /// infrastructure error), and it was stopped when its writes passed the
    /// disk limit (`disk_exceeded`: bytes written).
    pub(crate) fn check_ran(
        &self,
        program: &str,
        disk_exceeded: Option<u64>,
    ) -> Result<(), LocalError> {
        if !self.is_alive() {
            return Err(LocalError::SandboxLost(format!(
                "sandbox {} ended while `{program}` ran",
                self.id
            )));
        }
        match disk_exceeded {
            Some(used) => Err(LocalError::Failed(format!(
                "sandbox {}: `{program}` was stopped: the sandbox's writes ({} MiB) passed its disk \
                 limit of {} MiB (the template's disk_mib)",
                self.id,
                used >> 20,
                self.template.resources.disk_mib
            ))),
            None => Ok(()),
        }
    }

    /// Whether `path` (in the sandbox's view) lies inside the sandbox. Always
    /// true for a namespaced sandbox; for a plain one, only the workdir and
    /// `/tmp` are (anything else is the host's).
    pub(crate) fn contains(&self, path: &str) -> bool {
        match &self.jail {
            Jail::Namespaces(_) => true,
            Jail::Plain { paths } => !path.starts_with('/') || paths.to_host(path).is_some(),
        }
    }

    /// The bound on what commands may write, where it is enforced.
    pub(crate) fn disk_limit(&self) -> Option<DiskLimit> {
        match &self.jail {
            Jail::Namespaces(_) => Some(DiskLimit {
                dirs: namespace::writable_dirs(&self.dir).to_vec(),
                bytes: self.template.resources.disk_bytes(),
            }),
            Jail::Plain { .. } => None,
        }
    }

    /// The command that runs `request` in the sandbox, ready for
    /// [`crate::exec::run`]: entered into the sandbox with exactly the
    /// template's and the request's environment, or, for a plain sandbox,
    /// `env -i -C <workdir> VARS... ARGV...` with paths mapped.
    pub(crate) fn command(&self, request: &ExecRequest) -> Result<Prepared, LocalError> {
        let program = request.argv.first().ok_or_else(|| {
            LocalError::Rejected(format!("sandbox {}: a command needs an argv", self.id))
        })?;
        let extra_env = self.template.env.iter().chain(&request.env);
        if let Some((name, _)) = extra_env
            .clone()
            .find(|(name, _)| name.is_empty() || name.contains(['=', '\0']))
        {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: `{name}` is not a valid environment variable name",
                self.id
            )));
        }
        let workdir = match request.workdir.as_deref() {
            None => self.workdir.clone(),
            Some(dir) if dir.starts_with('/') => dir.to_string(),
            Some(relative) => format!("{}/{relative}", self.workdir),
        };
        let mut vars = vec![("PATH".to_string(), SANDBOX_PATH.to_string())];
        match &self.jail {
            Jail::Namespaces(namespaced) => {
                vars.push(("HOME".to_string(), "/root".to_string()));
                vars.extend(extra_env.cloned());
                let entry = Entry {
                    init: namespaced.init.identity(),
                    own_network: !self.template.share_network,
                    cgroups: namespaced.cgroup_dirs(),
                    file_size_limit: Some(self.template.resources.disk_bytes()),
                };
                let action = Action::Exec {
                    argv: request.argv.clone(),
                };
                let (command, stdin_prefix) = entry.command(&workdir, vars, action)?;
                Ok(Prepared {
                    command,
                    stdin_prefix,
                    leader: Leader::Helper,
                })
            }
            Jail::Plain { paths } => {
                if program.contains('=') {
                    // `env` would take it for a variable.
                    return Err(LocalError::Rejected(format!(
                        "sandbox {}: program `{program}` contains `=`",
                        self.id
                    )));
                }
                vars.push(("HOME".to_string(), paths.host_dir("/root")));
                vars.push(("TMPDIR".to_string(), paths.host_dir("/tmp")));
                vars.extend(extra_env.cloned());
                // Last, so no command environment can drop it and hide from reap.
                vars.push((MARKER_ENV.to_string(), self.marker.clone()));
                let mut command = Command::new("env");
                command
                    .env_clear()
                    .env("PATH", SANDBOX_PATH)
                    .args(["-i", "-C"])
                    .arg(paths.map_arg(&workdir))
                    .args(vars.iter().map(|(name, value)| format!("{name}={value}")))
                    .args(request.argv.iter().map(|arg| paths.map_arg(arg)));
                Ok(Prepared {
                    command,
                    stdin_prefix: Vec::new(),
                    leader: Leader::Command,
                })
            }
        }
    }

    /// Stops every process in the sandbox but its init, and fails when its
    /// mounts are not the ones it was offered with. Processes are found from
    /// the host: every process in the sandbox's pid namespace, and every
    /// process in its cgroups.
    pub(crate) async fn scrub(&self) -> Result<(), LocalError> {
        let namespaced = match &self.jail {
            Jail::Namespaces(namespaced) => namespaced,
            Jail::Plain { .. } => {
                process::kill_all(self.marked_processes().await?, STOP_WAIT).await;
                return Ok(());
            }
        };
        let init = namespaced.init.identity().pid;
        let until = Instant::now() + STOP_WAIT;
        // Killed until none is left: killed processes stay in the namespace
        // as zombies until the init has reaped them, and a process forking
        // meanwhile is caught on a later pass.
        loop {
            let cgroup = namespaced.cgroup.clone();
            let left = blocking(move || {
                let mut pids = process::pid_namespace_members(init);
                if let Some((cgroups, relative, _)) = &cgroup {
                    pids.extend(cgroups.processes(relative));
                }
                pids.retain(|&pid| pid != init);
                pids.sort_unstable();
                pids.dedup();
                Ok(pids)
            })
            .await?;
            if left.is_empty() {
                break;
            }
            if Instant::now() >= until {
                return Err(LocalError::Failed(format!(
                    "sandbox {}: processes {left:?} are still in it after {STOP_WAIT:?} of killing",
                    self.id
                )));
            }
            for process in left
                .into_iter()
                .filter_map(|pid| ProcessIdentity::of(pid).and_then(Process::open))
            {
                process.kill();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let path = format!("/proc/{init}/mountinfo");
        let now =
            fs::read_to_string(&path).context(|| format!("sandbox {}: reading {path}", self.id))?;
        match first_difference(&namespaced.mounts, &now) {
            Some(changed) => Err(LocalError::Failed(format!(
                "sandbox {}: its mounts changed since it was made ({changed})",
                self.id
            ))),
            None => Ok(()),
        }
    }

    async fn marked_processes(&self) -> Result<Vec<Process>, LocalError> {
        let (run_id, id) = (self.run_id.clone(), self.id.clone());
        blocking(move || {
            Ok(process::find_marked(MarkerScope::Sandbox(&run_id, &id))
                .into_iter()
                .map(|marked| marked.process)
                .collect())
        })
        .await
    }

    /// Kills everything running in the sandbox and removes its directory
    /// and cgroups. Safe to call more than once.
    pub(crate) async fn destroy(&self) -> Result<(), LocalError> {
        match &self.jail {
            Jail::Namespaces(namespaced) => namespaced.shutdown().await?,
            Jail::Plain { .. } => {
                process::kill_all(self.marked_processes().await?, STOP_WAIT).await;
            }
        }
        let dir = self.dir.clone();
        blocking(move || remove_tree(&dir)).await?;
        Ok(())
    }
}

impl Drop for Namespaced {
    /// A sandbox dropped without `destroy` (its owner dropped the backend, or
    /// a claim was cancelled, even while the sandbox was being probed) stops
    /// running; its supervisor then exits, and its directory and cgroups are
    /// left for `reap`.
    fn drop(&mut self) {
        self.init.kill();
    }
}

/// The first line where two mount tables differ, for the error.
fn first_difference(before: &str, now: &str) -> Option<String> {
    let (mut old, mut new) = (before.lines(), now.lines());
    loop {
        match (old.next(), new.next()) {
            (None, None) => return None,
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), None) => return Some(format!("gone: {a}")),
            (_, Some(b)) => return Some(format!("now: {b}")),
        }
    }
}

/// Picks the next free sandbox id and creates its directory.
fn allocate_dir(site: &Site, template: &Template) -> Result<(String, PathBuf), LocalError> {
    let parent = site.run(&template.run_id).sandboxes();
    std::fs::create_dir_all(&parent).context(|| format!("creating {}", parent.display()))?;
    loop {
        let number = site.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{number}", template.id_prefix);
        let dir = parent.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            // Another process (or backend) made it first.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error).context(|| format!("creating {}", dir.display())),
        }
    }
}

async fn make_namespaced(
    site: &Site,
    template: &Template,
    id: &str,
    dir: &Path,
    marker: &str,
    deadline: Instant,
) -> Result<(Jail, WorkdirMode), LocalError> {
    namespace::prepare_dir(dir, &site.ids)?;
    let cgroup = match &site.cgroups {
        Some(cgroups) => {
            let relative = site.cgroup_of(&template.run_id, id);
            let made = cgroups.clone();
            let limits = template.resources.cgroup_limits();
            let dirs = blocking(move || {
                made.create(&relative, &limits)
                    .context(|| format!("creating the cgroup of sandbox {}", relative.display()))
            })
            .await?;
            Some((cgroups.clone(), site.cgroup_of(&template.run_id, id), dirs))
        }
        None => None,
    };
    let cgroup_dirs = cgroup
        .as_ref()
        .map_or(Vec::new(), |(_, _, dirs)| dirs.clone());
    let spec = InitSpec {
        sandbox_dir: dir,
        image_dir: &template.image_dir,
        workdir: &site.workdir,
        sandbox_id: id,
        marker,
        share_network: template.share_network,
        ids: site.ids,
        etc: &site.etc,
        sizes: TmpfsSizes {
            root_mib: template.resources.limits.root_mib,
            shm_mib: template.resources.limits.shm_mib,
        },
        cgroups: &cgroup_dirs,
    };
    let running = match namespace::start(&spec, deadline).await {
        Ok(running) => running,
        Err(error) => {
            if let Some((cgroups, relative, _)) = cgroup {
                let _ = remove_cgroup(cgroups, relative).await;
            }
            return Err(error);
        }
    };
    let workdir = running.started.workdir;
    let mut namespaced = Namespaced {
        init: running.init,
        supervisor: Mutex::new(Some(running.supervisor)),
        cgroup,
        mounts: String::new(),
    };
    match vet(site, template, id, &namespaced).await {
        Ok(mounts) => {
            namespaced.mounts = mounts;
            Ok((Jail::Namespaces(Box::new(namespaced)), workdir))
        }
        Err(error) => {
            if let Err(cleanup) = namespaced.shutdown().await {
                tracing::warn!(sandbox = id, error = %cleanup, "stopping a sandbox that failed its probe");
            }
            Err(error)
        }
    }
}

/// Runs the isolation probe in a new sandbox and returns its mount table
/// when the probe found nothing wrong.
async fn vet(
    site: &Site,
    template: &Template,
    id: &str,
    namespaced: &Namespaced,
) -> Result<String, LocalError> {
    let entry = Entry {
        init: namespaced.init.identity(),
        own_network: !template.share_network,
        cgroups: namespaced.cgroup_dirs(),
        file_size_limit: None,
    };
    let mut hidden = site.hidden.clone();
    hidden.push(template.image_dir.display().to_string());
    let report = entry.probe(&site.workdir, hidden).await?;
    if !report.failures.is_empty() {
        return Err(LocalError::Isolation(format!(
            "sandbox {id} failed its isolation probe and was destroyed: {}",
            report.failures.join("; ")
        )));
    }
    let pid = namespaced.init.identity().pid;
    fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .context(|| format!("sandbox {id}: reading its mount table"))
}

async fn make_plain(
    site: &Site,
    template: &Template,
    dir: &Path,
    deadline: Instant,
) -> Result<(Jail, WorkdirMode), LocalError> {
    let paths = PathMap::new(dir.join("rootfs"), &site.workdir);
    let workdir = PathBuf::from(paths.host_dir(&site.workdir));
    for created in [
        workdir.as_path(),
        Path::new(&paths.host_dir("/tmp")),
        Path::new(&paths.host_dir("/root")),
    ] {
        std::fs::create_dir_all(created).context(|| format!("creating {}", created.display()))?;
    }
    let mut copy = Command::new("cp");
    copy.args(["-a", "--reflink=auto"])
        .arg(template.image_dir.join("."))
        .arg(&workdir);
    let budget = deadline.saturating_duration_since(Instant::now());
    let what = format!(
        "copying image `{}` into {}",
        template.image,
        workdir.display()
    );
    run_tool(copy, &what, budget).await?;
    Ok((Jail::Plain { paths }, WorkdirMode::Copy))
}

/// Where a plain sandbox's paths are on the host.
#[derive(Debug)]
struct PathMap {
    /// The directory standing for the sandbox's `/`.
    rootfs: PathBuf,
    /// Sandbox paths that are mapped: the workdir and `/tmp`.
    mapped: [String; 2],
}

impl PathMap {
    fn new(rootfs: PathBuf, workdir: &str) -> Self {
        PathMap {
            rootfs,
            mapped: [workdir.to_string(), "/tmp".to_string()],
        }
    }

    /// The host path of sandbox directory `dir`.
    fn host_dir(&self, dir: &str) -> String {
        format!("{}{dir}", self.rootfs.display())
    }

    /// The host path of `path`, when it is a mapped directory or inside one.
    fn to_host(&self, path: &str) -> Option<String> {
        self.mapped
            .iter()
            .any(|prefix| {
                path.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .then(|| self.host_dir(path))
    }

    /// `arg` with a mapped path rewritten; anything else unchanged.
    fn map_arg(&self, arg: &str) -> String {
        self.to_host(arg).unwrap_or_else(|| arg.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_map_the_workdir_and_tmp_only() {
        let paths = PathMap::new(PathBuf::from("/s/sb-1/rootfs"), "/workspace");
        assert_eq!(paths.map_arg("/workspace"), "/s/sb-1/rootfs/workspace");
        assert_eq!(
            paths.map_arg("/workspace/a/b.py"),
            "/s/sb-1/rootfs/workspace/a/b.py"
        );
        assert_eq!(paths.map_arg("/tmp/x"), "/s/sb-1/rootfs/tmp/x");
        assert_eq!(paths.map_arg("/workspacex"), "/workspacex");
        assert_eq!(paths.map_arg("/etc/hosts"), "/etc/hosts");
        assert_eq!(paths.map_arg("-c"), "-c");
        assert_eq!(paths.map_arg("cat /workspace/a"), "cat /workspace/a");
        assert_eq!(paths.to_host("/usr/bin"), None);
    }

    #[test]
    fn id_prefixes_are_host_name_safe() {
        assert_eq!(Template::id_prefix("SWE/django__4.2"), "swe-django--4-2");
        assert_eq!(Template::id_prefix("--"), "sandbox");
        assert_eq!(Template::id_prefix(&"x".repeat(99)).len(), 32);
    }

    #[test]
    fn mount_tables_are_compared_line_by_line() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        assert_eq!(first_difference("a\nb\n", "a\nc\n"), Some("now: c".into()));
        assert_eq!(first_difference("a\nb\n", "a\n"), Some("gone: b".into()));
        assert_eq!(first_difference("a\n", "a\nx\n"), Some("now: x".into()));
    }
}
