//! Sandboxes: private copies of a template's image in which commands run.
//!
//! A **namespaced** sandbox is an init in its own user, mount, pid, ipc, uts
//! (and, unless its template may use the network, net) namespaces, with a
//! root filesystem of its own: the host's system directories read-only,
//! private `/dev`, `/proc`, `/tmp`, `/root`, and the image at the workdir as
//! an overlay (or a copy where overlayfs is not allowed). Commands enter it
//! with `nsenter`.
//!
//! A **plain** sandbox, where namespaces are not available, is a directory:
//! `<sandbox>/rootfs/<workdir>` holds a copy of the image and
//! `<sandbox>/rootfs/tmp` stands for `/tmp`. Commands run on the host, in
//! their own process group, with `HOME` and `TMPDIR` inside that directory;
//! the working directory and every argv item that is the workdir or `/tmp`
//! or starts with `<one of them>/` are rewritten into it. That is a best
//! effort: paths inside scripts or other strings are not rewritten, and a
//! command can reach anything on the host.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_core::{ExecRequest, RunId};
use tokio::process::{Child, Command};

use crate::blocking;
use crate::error::{IoContext, LocalError};
use crate::exec::Leader;
use crate::namespace::{self, InitSpec, SANDBOX_PATH};
use crate::process::{self, MARKER_ENV, MarkerScope, Process, run_tool};
use crate::state::{RunDir, SANDBOX_META, SandboxMeta, remove_tree, unix_now, write_record};

/// How long a plain sandbox's processes get to exit after SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How sandboxes are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Isolation {
    /// Linux namespaces.
    Namespaces,
    /// None: directories and host processes.
    Plain,
}

/// How a sandbox's workdir was made from its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WorkdirCopy {
    /// An overlay: the image below, the sandbox's writes in its own upper dir.
    Overlay,
    /// A full copy (reflinked where the filesystem can).
    Copy,
}

/// A template made ready: what its sandboxes are made of.
#[derive(Debug)]
pub(crate) struct Template {
    /// The template's name.
    pub(crate) name: String,
    /// The image name.
    pub(crate) image: String,
    /// The directory sandboxes are copies of.
    pub(crate) image_dir: PathBuf,
    /// Whether its sandboxes keep the host's network.
    pub(crate) share_network: bool,
    /// Environment every command gets.
    pub(crate) env: Vec<(String, String)>,
    /// The start of its sandboxes' ids: the name, made id-safe.
    pub(crate) id_prefix: String,
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

/// Where and how a backend makes its sandboxes.
#[derive(Debug)]
pub(crate) struct Site {
    /// The owning run.
    pub(crate) run_id: RunId,
    /// Its directory.
    pub(crate) run: RunDir,
    /// The workdir inside sandboxes.
    pub(crate) workdir: String,
    /// How sandboxes are isolated.
    pub(crate) isolation: Isolation,
    /// The number in the next sandbox id.
    pub(crate) next_id: AtomicU64,
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
    Namespaces {
        /// The init: killing it ends the sandbox.
        init: Process,
        /// Reaped once the init is gone; taken by the first `destroy`.
        unshare: Mutex<Option<Child>>,
    },
    Plain {
        paths: PathMap,
    },
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
        let marker = process::sandbox_marker(&site.run_id, &id);
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
            run_id: site.run_id.clone(),
            template,
            dir,
            workdir: site.workdir.clone(),
            marker,
            jail,
        };
        let meta = SandboxMeta {
            id: sandbox.id.clone(),
            run_id: site.run_id.clone(),
            template: sandbox.template.name.clone(),
            isolation: site.isolation,
            workdir_copy,
            init: match &sandbox.jail {
                Jail::Namespaces { init, .. } => Some(init.identity()),
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
    /// init.
    pub(crate) fn is_alive(&self) -> bool {
        match &self.jail {
            Jail::Namespaces { init, .. } => !init.has_exited(),
            Jail::Plain { .. } => true,
        }
    }

    /// Whether `path` (in the sandbox's view) lies inside the sandbox. Always
    /// true for a namespaced sandbox; for a plain one, only the workdir and
    /// `/tmp` are (anything else is the host's).
    pub(crate) fn contains(&self, path: &str) -> bool {
        match &self.jail {
            Jail::Namespaces { .. } => true,
            Jail::Plain { paths } => !path.starts_with('/') || paths.to_host(path).is_some(),
        }
    }

    /// The command that runs `request` in the sandbox, ready for
    /// [`crate::exec::run`]: `env -i -C <workdir> VARS... ARGV...`, entered
    /// into the namespaces, or with paths mapped for a plain sandbox; and
    /// what will lead its process group.
    pub(crate) fn command(&self, request: &ExecRequest) -> Result<(Command, Leader), LocalError> {
        let program = request.argv.first().ok_or_else(|| {
            LocalError::Rejected(format!("sandbox {}: a command needs an argv", self.id))
        })?;
        if program.contains('=') {
            // `env` would take it for a variable.
            return Err(LocalError::Rejected(format!(
                "sandbox {}: program `{program}` contains `=`",
                self.id
            )));
        }
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
        let (mut command, leader, workdir, argv) = match &self.jail {
            Jail::Namespaces { init, .. } => {
                vars.push(("HOME".to_string(), "/root".to_string()));
                vars.extend(extra_env.cloned());
                let mut command =
                    namespace::enter_command(init.identity().pid, self.template.share_network);
                command.arg("env");
                (command, Leader::Nsenter, workdir, request.argv.clone())
            }
            Jail::Plain { paths } => {
                vars.push(("HOME".to_string(), paths.host_dir("/root")));
                vars.push(("TMPDIR".to_string(), paths.host_dir("/tmp")));
                vars.extend(extra_env.cloned());
                // Last, so no command environment can drop it and hide from reap.
                vars.push((MARKER_ENV.to_string(), self.marker.clone()));
                let mut command = Command::new("env");
                command.env_clear().env("PATH", SANDBOX_PATH);
                let argv = request.argv.iter().map(|arg| paths.map_arg(arg)).collect();
                (command, Leader::Command, paths.map_arg(&workdir), argv)
            }
        };
        command
            .args(["-i", "-C"])
            .arg(workdir)
            .args(vars.iter().map(|(name, value)| format!("{name}={value}")))
            .args(argv);
        Ok((command, leader))
    }

    /// Kills everything running in the sandbox and removes its directory.
    /// Safe to call more than once.
    pub(crate) async fn destroy(&self) -> Result<(), LocalError> {
        match &self.jail {
            Jail::Namespaces { init, unshare } => {
                init.kill();
                let unshare = unshare.lock().expect("unshare lock poisoned").take();
                if let Some(mut unshare) = unshare {
                    namespace::stop(&mut unshare, Some(init)).await;
                }
            }
            Jail::Plain { .. } => {
                let (run_id, id) = (self.run_id.clone(), self.id.clone());
                let processes = blocking(move || {
                    Ok(process::find_marked(MarkerScope::Sandbox(&run_id, &id))
                        .into_iter()
                        .map(|marked| marked.process)
                        .collect())
                })
                .await?;
                process::kill_all(processes, STOP_WAIT).await;
            }
        }
        let dir = self.dir.clone();
        blocking(move || remove_tree(&dir)).await?;
        Ok(())
    }
}

impl Drop for Sandbox {
    /// A sandbox dropped without `destroy` (its owner dropped the backend, or
    /// a claim was cancelled) stops running; its directory is left for
    /// `reap`.
    fn drop(&mut self) {
        if let Jail::Namespaces { init, .. } = &self.jail {
            init.kill();
        }
    }
}

/// Picks the next free sandbox id and creates its directory.
fn allocate_dir(site: &Site, template: &Template) -> Result<(String, PathBuf), LocalError> {
    let parent = site.run.sandboxes();
    std::fs::create_dir_all(&parent).context(|| format!("creating {}", parent.display()))?;
    loop {
        let number = site.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{number}", template.id_prefix);
        let dir = parent.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            // Another backend of the same run took it.
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
) -> Result<(Jail, WorkdirCopy), LocalError> {
    namespace::prepare_dir(dir)?;
    let spec = InitSpec {
        sandbox_dir: dir,
        image_dir: &template.image_dir,
        workdir: &site.workdir,
        sandbox_id: id,
        marker,
        share_network: template.share_network,
    };
    let started = namespace::start(&spec, deadline).await?;
    Ok((
        Jail::Namespaces {
            init: started.init,
            unshare: Mutex::new(Some(started.unshare)),
        },
        started.copy,
    ))
}

async fn make_plain(
    site: &Site,
    template: &Template,
    dir: &Path,
    deadline: Instant,
) -> Result<(Jail, WorkdirCopy), LocalError> {
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
    Ok((Jail::Plain { paths }, WorkdirCopy::Copy))
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
}
