//! Sandboxes: private copies of a template's image in which commands run.
//!
//! A **namespaced** sandbox ([`crate::isolated`]) is an init in its own
//! user, mount, pid, ipc, uts (and, unless its template may use the
//! network, net) namespaces and its own cgroups, with a root filesystem of
//! its own (see `host/jail`): the host's system directories read-only, a
//! filtered `/etc`, private `/dev`, `/proc` (masked), `/tmp` and `/root`,
//! and the image at the workdir as an overlay (or a copy where overlayfs is
//! not allowed). Before it is offered, the isolation probe runs in it as a
//! command would and must find the host out of reach; a sandbox that fails
//! it is destroyed. Commands enter it through the helper, confined: no
//! `CAP_SYS_ADMIN`, `no_new_privs`, seccomp, no terminal, nothing
//! inherited. Its writes (workdir and `/tmp`) land in the sandbox
//! directory's `layer/`, bounded by the template's disk ([`crate::disk`]).
//! A scrub for reuse starts it again over its workdir layer.
//!
//! A sandbox of an OCI image ([`crate::oci`]) is confined the same way,
//! but its root filesystem is its image's layers under a writable layer
//! of its own, with nothing of the host's; writes anywhere in it count
//! against its disk, and a scrub keeps only the workdir's.
//!
//! A **plain** sandbox (`isolation = "none"`, [`crate::plain`]) is a
//! directory, and its commands run unisolated on the host.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_core::{ExecRequest, RunId};
use sandfleet_jail::cgroup::Cgroups;
use sandfleet_jail::protocol::{Action, IdMap, Volume, WorkdirMode};
use tokio::process::Command;

use crate::blocking;
use crate::discard::Discards;
use crate::disk::DiskLimit;
use crate::error::{IoContext, LocalError};
use crate::exec::Leader;
use crate::freeze::freeze;
use crate::isolated::{Isolated, Place};
use crate::lookup;
use crate::namespace::{self, Entry, SANDBOX_PATH};
use crate::oci::OciImage;
use crate::plain::{self, PathMap};
use crate::process::{self, MarkerScope};
use crate::remove::remove_tree;
use crate::seal::copy_tree;
use crate::snapshot::SealedLayer;
use crate::state::{RunDir, SANDBOX_META, SandboxMeta, StateDir, unix_now, write_record};
use crate::templates::{Isolation, Template};

/// How long a plain sandbox's processes get to exit after SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How long starting a scrubbed sandbox again may take.
const RESTART_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and how a backend makes its sandboxes, for every run.
#[derive(Debug)]
pub(crate) struct Site {
    /// The state directory (canonical).
    pub(crate) state: StateDir,
    /// How sandboxes are isolated.
    pub(crate) isolation: Isolation,
    /// The number in the next sandbox id.
    pub(crate) next_id: AtomicU64,
    /// How sandbox ids appear on the host.
    pub(crate) ids: IdMap,
    /// The host's root as this process's user namespace numbers it, which
    /// no sandbox may map (the probe checks).
    pub(crate) host_root_uid: Option<u32>,
    /// Host `/etc` entries sandboxes see.
    pub(crate) etc: Vec<String>,
    /// The cgroup controllers that limit sandboxes; `None` where they
    /// cannot be used (preflight says why).
    pub(crate) cgroups: Option<Cgroups>,
    /// The cgroup sandboxes' cgroups are made in.
    pub(crate) cgroup_parent: PathBuf,
    /// Host paths no sandbox may see (the state directory).
    pub(crate) hidden: Vec<String>,
    /// Released sandboxes' directories being removed.
    pub(crate) discards: Discards,
}

impl Site {
    /// The cgroup of sandbox `id` of run `run_id`, relative to each
    /// hierarchy.
    pub(crate) fn cgroup_of(&self, run_id: &RunId, id: &str) -> PathBuf {
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
    /// How its workdir was made: snapshots need an overlay.
    workdir_mode: WorkdirMode,
    /// The snapshot layers it runs over, lowest first (none for a sandbox
    /// of its image alone).
    layers: Mutex<Vec<Arc<SealedLayer>>>,
    /// Host directories mounted into it, every time it starts.
    volumes: Vec<Volume>,
}

/// What holds a sandbox's processes.
#[derive(Debug)]
enum Jail {
    Isolated(Isolated),
    Plain(PathMap),
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
    /// Makes a sandbox of `template` over snapshot `layers` (lowest first;
    /// none for the image alone) and returns it ready to run commands, or
    /// fails (having removed what it made) at `deadline`.
    pub(crate) async fn create(
        site: &Site,
        template: Arc<Template>,
        layers: Vec<Arc<SealedLayer>>,
        volumes: Vec<Volume>,
        deadline: Instant,
    ) -> Result<Sandbox, LocalError> {
        let (id, dir) = allocate_dir(site, &template)?;
        let run_id = template.run_id.clone();
        let marker = process::sandbox_marker(&run_id, &id);
        let snapshots = layer_dirs(&layers);
        let made = match site.isolation {
            Isolation::Namespaces => {
                let place = Place {
                    site,
                    template: &template,
                    id: &id,
                    dir: &dir,
                    marker: &marker,
                    snapshots: &snapshots,
                    volumes: &volumes,
                };
                Isolated::create(place, deadline)
                    .await
                    .map(|(isolated, workdir)| (Jail::Isolated(isolated), workdir))
            }
            Isolation::Plain if !layers.is_empty() => Err(LocalError::Rejected(
                "sandboxes with isolation = \"none\" cannot start from a snapshot".into(),
            )),
            Isolation::Plain if !volumes.is_empty() => Err(LocalError::Rejected(
                "sandboxes with isolation = \"none\" cannot mount volumes".into(),
            )),
            Isolation::Plain => plain::make(&template, &template.workdir, &dir, deadline)
                .await
                .map(|paths| (Jail::Plain(paths), WorkdirMode::Copy)),
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
            workdir: template.workdir.clone(),
            template,
            dir,
            marker,
            jail,
            workdir_mode: workdir_copy,
            layers: Mutex::new(layers),
            volumes,
        };
        let meta = SandboxMeta {
            id: sandbox.id.clone(),
            run_id,
            template: sandbox.template.name.clone(),
            isolation: site.isolation,
            workdir_copy,
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

    /// Its template, shared.
    pub(crate) fn template_arc(&self) -> Arc<Template> {
        Arc::clone(&self.template)
    }

    /// Whether it can still run commands: a namespaced sandbox dies with its
    /// init.
    pub(crate) fn is_alive(&self) -> bool {
        match &self.jail {
            Jail::Isolated(isolated) => isolated.is_alive(),
            Jail::Plain(_) => true,
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

    /// Whether `program` would be found, as a command with `env` and
    /// `workdir` would look for it: what a container runtime checks before
    /// it starts a container's process. A plain sandbox's bare names are
    /// looked for on the host; other plain programs are taken as found.
    ///
    /// # Errors
    ///
    /// [`LocalError::SandboxLost`] when the sandbox has ended.
    pub(crate) fn finds_program(
        &self,
        program: &str,
        env: &[(String, String)],
        workdir: Option<&str>,
    ) -> Result<bool, LocalError> {
        self.check_alive()?;
        let image = self.template.source.oci();
        let path = image
            .into_iter()
            .flat_map(|image| image.env.iter())
            .chain(&self.template.env)
            .chain(env)
            .rfind(|(name, _)| name == "PATH")
            .map_or_else(
                || image.and_then(OciImage::path).unwrap_or(SANDBOX_PATH),
                |(_, value)| value.as_str(),
            );
        let workdir = match workdir {
            None => self.workdir.clone(),
            Some(dir) if dir.starts_with('/') => dir.to_string(),
            Some(relative) => format!("{}/{relative}", self.workdir),
        };
        match &self.jail {
            Jail::Isolated(isolated) => lookup::executable_in_root(
                isolated.init(),
                &lookup::candidates(program, path, &workdir),
            ),
            Jail::Plain(_) => {
                Ok(program.contains('/') || namespace::executable_on(path, program).is_some())
            }
        }
    }

    /// Fails when the sandbox died while `program` ran: entering a dead
    /// sandbox fails like a command would, and is told apart here so the
    /// engine sees an infrastructure error. A command that exited 0 ran to
    /// its end (a sandbox's death kills what runs in it, and a failed entry
    /// exits non-zero), so its sandbox ending after it, as a pod's does
    /// when its main process sees what the command made, takes nothing
    /// from its result: the kubelet answers such an exec with its status.
    pub(crate) fn check_ended_alive(
        &self,
        program: &str,
        exited_0: bool,
    ) -> Result<(), LocalError> {
        if exited_0 || self.is_alive() {
            Ok(())
        } else {
            Err(LocalError::SandboxLost(format!(
                "sandbox {} ended while `{program}` ran",
                self.id
            )))
        }
    }

    /// Whether `path` (in the sandbox's view) lies inside the sandbox. Always
    /// true for a namespaced sandbox; for a plain one, only the workdir and
    /// `/tmp` are (anything else is the host's).
    pub(crate) fn contains(&self, path: &str) -> bool {
        match &self.jail {
            Jail::Isolated(_) => true,
            Jail::Plain(paths) => !path.starts_with('/') || paths.to_host(path).is_some(),
        }
    }

    /// The bound on what commands may write, where it is enforced.
    pub(crate) fn disk_limit(&self) -> Option<DiskLimit> {
        match &self.jail {
            Jail::Isolated(isolated) => {
                let init = isolated.init().pid;
                let mut mounts = vec![self.workdir.clone(), "/tmp".to_string()];
                if self.template.source.oci().is_some() {
                    mounts.push("/".to_string());
                }
                Some(DiskLimit {
                    dirs: namespace::writable_dirs(&self.dir).to_vec(),
                    bytes: self.template.resources.disk_bytes(),
                    members: isolated.members(),
                    init,
                    mounts,
                })
            }
            Jail::Plain(_) => None,
        }
    }

    /// The command that runs `request` in the sandbox, ready for
    /// [`crate::exec::run`]: entered into the sandbox with exactly the
    /// template's and the request's environment, or, for a plain sandbox,
    /// `env -i -C <workdir> VARS... ARGV...` with paths mapped.
    pub(crate) fn command(&self, request: &ExecRequest) -> Result<Prepared, LocalError> {
        if request.argv.is_empty() {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: a command needs an argv",
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
        let image = self.template.source.oci();
        let path = image.and_then(OciImage::path).unwrap_or(SANDBOX_PATH);
        let mut vars = vec![("PATH".to_string(), path.to_string())];
        match &self.jail {
            Jail::Isolated(isolated) => {
                vars.push(("HOME".to_string(), "/root".to_string()));
                // The image's environment, then the template's and the
                // request's over it: a later entry of a name wins.
                if let Some(image) = image {
                    vars.extend(image.env.iter().cloned());
                }
                vars.extend(extra_env.cloned());
                let cgroups = isolated.cgroup_dirs();
                let entry = Entry {
                    init: isolated.init(),
                    own_network: !self.template.share_network,
                    cgroups: &cgroups,
                    file_size_limit: Some(self.template.resources.disk_bytes()),
                };
                let action = Action::Exec {
                    argv: request.argv.clone(),
                };
                let vars = last_wins(vars);
                let user = image.and_then(|image| image.user.clone());
                let (command, stdin_prefix) = entry.command(&workdir, vars, user, action)?;
                Ok(Prepared {
                    command,
                    stdin_prefix,
                    leader: Leader::Helper,
                })
            }
            Jail::Plain(paths) => {
                let command = paths
                    .command(request, &workdir, vars, extra_env.cloned(), &self.marker)
                    .map_err(|why| LocalError::Rejected(format!("sandbox {}: {why}", self.id)))?;
                Ok(Prepared {
                    command,
                    stdin_prefix: Vec::new(),
                    leader: Leader::Command,
                })
            }
        }
    }

    /// Makes the sandbox fit for another task: a namespaced one is started
    /// again over its workdir layer (every process, mount and write outside
    /// the workdir goes; the reset check restores the workdir), a plain one
    /// has its commands killed.
    pub(crate) async fn scrub(&self, site: &Site) -> Result<(), LocalError> {
        match &self.jail {
            Jail::Isolated(isolated) => {
                let snapshots = layer_dirs(&self.layers());
                isolated
                    .restart(
                        self.place(site, &snapshots),
                        Instant::now() + RESTART_TIMEOUT,
                    )
                    .await
            }
            Jail::Plain(_) => {
                process::kill_all(self.plain_processes().await?, STOP_WAIT).await;
                Ok(())
            }
        }
    }

    fn place<'a>(&'a self, site: &'a Site, snapshots: &'a [PathBuf]) -> Place<'a> {
        Place {
            site,
            template: &self.template,
            id: &self.id,
            dir: &self.dir,
            marker: &self.marker,
            snapshots,
            volumes: &self.volumes,
        }
    }

    /// The snapshot layers it runs over, lowest first.
    pub(crate) fn layers(&self) -> Vec<Arc<SealedLayer>> {
        self.layers.lock().expect("layers lock poisoned").clone()
    }

    /// Copies what the sandbox has written (its workdir's and, for an OCI
    /// image, its root's writable layer) into `into` (new: `upper` and
    /// `root` are made in it), its processes stopped meanwhile so the copy
    /// is of one moment; returns the bytes copied. The sandbox runs on
    /// unchanged.
    ///
    /// # Errors
    ///
    /// [`LocalError::Rejected`] for a sandbox whose writes are not in a
    /// layer of their own (`isolation = "none"`, or a workdir copied where
    /// overlayfs is not allowed).
    pub(crate) async fn seal(&self, into: &Path) -> Result<u64, LocalError> {
        let Jail::Isolated(isolated) = &self.jail else {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: a sandbox with isolation = \"none\" cannot be snapshotted",
                self.id
            )));
        };
        if self.workdir_mode != WorkdirMode::Overlay {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: its workdir is a copy (overlayfs is not allowed here), which cannot \
                 be snapshotted",
                self.id
            )));
        }
        self.check_alive()?;
        let frozen = freeze(isolated.members()).await?;
        let (layer, into) = (self.dir.join("layer"), into.to_path_buf());
        let copied = blocking(move || {
            let mut bytes = 0;
            for part in ["upper", "root"] {
                bytes += copy_tree(&layer.join(part), &into.join(part))?;
            }
            Ok(bytes)
        })
        .await;
        drop(frozen);
        copied
    }

    /// Puts the sandbox back to `layers` (a snapshot's): every process in
    /// it ends and its whole writable layer goes, and it starts again over
    /// its image and those layers. On an error it must not be used again.
    pub(crate) async fn restore(
        &self,
        site: &Site,
        layers: Vec<Arc<SealedLayer>>,
        deadline: Instant,
    ) -> Result<(), LocalError> {
        let Jail::Isolated(isolated) = &self.jail else {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: a sandbox with isolation = \"none\" cannot be restored",
                self.id
            )));
        };
        let snapshots = layer_dirs(&layers);
        isolated
            .reset(self.place(site, &snapshots), deadline)
            .await?;
        *self.layers.lock().expect("layers lock poisoned") = layers;
        Ok(())
    }

    async fn plain_processes(&self) -> Result<Vec<process::Process>, LocalError> {
        let (run_id, id) = (self.run_id.clone(), self.id.clone());
        blocking(move || Ok(process::find_plain(MarkerScope::Sandbox(&run_id, &id)))).await
    }

    /// Kills everything running in the sandbox and removes its directory
    /// and cgroups. Safe to call more than once.
    pub(crate) async fn destroy(&self) -> Result<(), LocalError> {
        self.stop().await?;
        let dir = self.dir.clone();
        blocking(move || remove_tree(&dir)).await?;
        Ok(())
    }

    /// As [`Sandbox::destroy`], its directory removed in the background
    /// (a reap waits for it): for a release, which waits on nothing the
    /// sandbox left on disk.
    pub(crate) async fn release(&self, site: &Site) -> Result<(), LocalError> {
        self.stop().await?;
        site.discards.discard(&self.dir).await
    }

    /// Ends everything running in the sandbox.
    async fn stop(&self) -> Result<(), LocalError> {
        match &self.jail {
            Jail::Isolated(isolated) => isolated.shutdown().await,
            Jail::Plain(_) => {
                process::kill_all(self.plain_processes().await?, STOP_WAIT).await;
                Ok(())
            }
        }
    }
}

/// `vars` with one entry per name, holding its last value, in the order
/// names first appear: C libraries read the first of duplicates, and
/// every layer of the environment (image, template, request) overrides the
/// one before it.
fn last_wins(vars: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        match out.iter_mut().find(|(known, _)| *known == name) {
            Some(entry) => entry.1 = value,
            None => out.push((name, value)),
        }
    }
    out
}

/// The directories of `layers`, in order.
fn layer_dirs(layers: &[Arc<SealedLayer>]) -> Vec<PathBuf> {
    layers
        .iter()
        .map(|layer| layer.dir().to_path_buf())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_variable_replaces_an_earlier_one_in_place() {
        let vars = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            last_wins(vars(&[("PATH", "/a"), ("HOME", "/root"), ("PATH", "/b")])),
            vars(&[("PATH", "/b"), ("HOME", "/root")])
        );
    }

    #[test]
    fn id_prefixes_are_host_name_safe() {
        assert_eq!(Template::id_prefix("SWE/django__4.2"), "swe-django--4-2");
        assert_eq!(Template::id_prefix("--"), "sandbox");
        assert_eq!(Template::id_prefix(&"x".repeat(99)).len(), 32);
        for name in ["SWE/django__4.2", "--", "../..", "a b"] {
            let id = format!("{}-17", Template::id_prefix(name));
            assert!(crate::state::is_sandbox_id(&id), "{id}");
        }
    }
}
