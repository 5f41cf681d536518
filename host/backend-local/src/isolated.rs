//! A namespaced sandbox's life: the cgroup it keeps from creation to
//! destruction, and its init, which can be replaced.
//!
//! The init is started over the sandbox's directory by the helper
//! (`namespace`), probed before the sandbox is offered (the isolation probe
//! runs in it as a command would), and killed to end the sandbox. A scrub
//! for reuse kills it too and starts a new one over the same workdir
//! layer: everything else a task could have changed (`/`, `/root`, `/etc`,
//! `/tmp`, `/dev/shm`, its processes, its mounts) is made anew, so nothing
//! outside the workdir, which the reset check restores and verifies,
//! outlives a task. The new init is probed as the first was.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_jail::cgroup::Cgroups;
use sandfleet_jail::protocol::{TmpfsSizes, Volume, WorkdirMode};
use tokio::process::Child;

use crate::blocking;
use crate::disk::Members;
use crate::error::{IoContext, LocalError};
use crate::namespace::{self, Entry, InitSpec};
use crate::process::{self, Process, ProcessIdentity};
use crate::sandbox::Site;
use crate::templates::Template;

/// How long a killed sandbox's processes get to leave its cgroups.
const CGROUP_DRAIN: Duration = Duration::from_secs(5);

/// How long a killed process gets to exit.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// A sandbox's cgroup: the same for every init it has.
#[derive(Debug, Clone)]
pub(crate) struct SandboxCgroup {
    cgroups: Cgroups,
    /// Its path under each hierarchy.
    relative: PathBuf,
    /// Its directory in each hierarchy.
    dirs: Vec<PathBuf>,
}

impl SandboxCgroup {
    /// Pids of every process in it.
    pub(crate) fn processes(&self) -> Vec<i32> {
        self.cgroups.processes(&self.relative)
    }

    /// Kills whatever is in it until it is empty, within [`CGROUP_DRAIN`]
    /// (a killed process leaves its cgroup a moment after it is gone).
    async fn drain(&self) -> Result<(), LocalError> {
        let until = Instant::now() + CGROUP_DRAIN;
        loop {
            let cgroup = self.clone();
            let left = blocking(move || {
                Ok(cgroup
                    .processes()
                    .into_iter()
                    .filter_map(|pid| ProcessIdentity::of(pid).and_then(Process::open))
                    .collect::<Vec<_>>())
            })
            .await?;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(LocalError::Failed(format!(
                    "cgroup {}: processes are still in it after {CGROUP_DRAIN:?} of killing",
                    self.relative.display()
                )));
            }
            process::kill_all(left, STOP_WAIT).await;
        }
    }

    /// Empties and removes it.
    async fn remove(&self) -> Result<(), LocalError> {
        let until = Instant::now() + CGROUP_DRAIN;
        loop {
            self.drain().await?;
            let cgroup = self.clone();
            let removed = blocking(move || {
                cgroup
                    .cgroups
                    .remove(&cgroup.relative)
                    .context(|| format!("removing cgroup {}", cgroup.relative.display()))
            })
            .await;
            match removed {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() >= until => return Err(error),
                // Emptied, but the kernel has not let go of it yet.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

/// One init of a sandbox and the supervisor that waits for it.
#[derive(Debug)]
struct Init {
    /// Killing it ends every process of its pid namespace.
    process: Process,
    /// Reaped once the init is gone; taken by the first stop.
    supervisor: Mutex<Option<Child>>,
}

impl Init {
    /// Kills the init and reaps its supervisor.
    async fn stop(&self) {
        self.process.kill();
        let supervisor = self
            .supervisor
            .lock()
            .expect("supervisor lock poisoned")
            .take();
        if let Some(mut supervisor) = supervisor {
            namespace::stop(&mut supervisor, Some(&self.process)).await;
        }
    }
}

impl Drop for Init {
    /// An init dropped without a stop (its owner dropped the backend, or a
    /// claim was cancelled, even while the sandbox was being probed) stops
    /// running; its supervisor then exits, and its directory and cgroups are
    /// left for `reap`.
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// What of its writable layer a sandbox started again keeps.
#[derive(Debug, Clone, Copy)]
enum Keep {
    /// The workdir's writes (a scrub for reuse).
    Workdir,
    /// Nothing (a restore to a snapshot).
    Nothing,
}

/// Where a sandbox lives: what every init of it is started with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) site: &'a Site,
    pub(crate) template: &'a Template,
    pub(crate) id: &'a str,
    pub(crate) dir: &'a Path,
    pub(crate) marker: &'a str,
    /// The snapshot layers it starts from, lowest first.
    pub(crate) snapshots: &'a [PathBuf],
    /// Host directories mounted into it.
    pub(crate) volumes: &'a [Volume],
}

/// A namespaced sandbox.
#[derive(Debug)]
pub(crate) struct Isolated {
    /// The init now running; a scrub puts a new one in its place.
    init: Mutex<Arc<Init>>,
    /// Its cgroup, when cgroups are enforced.
    cgroup: Option<SandboxCgroup>,
}

impl Isolated {
    /// Makes the sandbox in `place.dir` (new and empty): its layout, its
    /// cgroup and its first init, probed. Whatever it made is undone when
    /// it fails.
    pub(crate) async fn create(
        place: Place<'_>,
        deadline: Instant,
    ) -> Result<(Isolated, WorkdirMode), LocalError> {
        namespace::prepare_dir(place.dir, &place.site.ids)?;
        let cgroup = match &place.site.cgroups {
            Some(cgroups) => {
                let relative = place.site.cgroup_of(&place.template.run_id, place.id);
                let limits = place.template.resources.cgroup_limits();
                let (made, path) = (cgroups.clone(), relative.clone());
                let dirs = blocking(move || {
                    made.create(&path, &limits)
                        .context(|| format!("creating the cgroup of sandbox {}", path.display()))
                })
                .await?;
                Some(SandboxCgroup {
                    cgroups: cgroups.clone(),
                    relative,
                    dirs,
                })
            }
            None => None,
        };
        match start(place, cgroup.as_ref(), false, deadline).await {
            Ok((init, workdir)) => Ok((
                Isolated {
                    init: Mutex::new(Arc::new(init)),
                    cgroup,
                },
                workdir,
            )),
            Err(error) => {
                if let Some(cgroup) = cgroup
                    && let Err(cleanup) = cgroup.remove().await
                {
                    tracing::warn!(sandbox = place.id, error = %cleanup, "removing the cgroup of a sandbox that failed to start");
                }
                Err(error)
            }
        }
    }

    fn current(&self) -> Arc<Init> {
        Arc::clone(&self.init.lock().expect("init lock poisoned"))
    }

    /// The init now running.
    pub(crate) fn init(&self) -> ProcessIdentity {
        self.current().process.identity()
    }

    /// Whether its init is alive (dying counts as dead: a command that ended
    /// because its init was killed is reaped before the init exits).
    pub(crate) fn is_alive(&self) -> bool {
        !self.current().process.is_ending()
    }

    /// Its cgroup's directories, for commands to join.
    pub(crate) fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.cgroup
            .as_ref()
            .map_or_else(Vec::new, |cgroup| cgroup.dirs.clone())
    }

    /// Where the sandbox's processes are found from the host: its cgroup,
    /// or, without cgroups, its pid namespace (nothing inside can hide one
    /// from either).
    pub(crate) fn members(&self) -> Members {
        match &self.cgroup {
            Some(cgroup) => Members::Cgroup(cgroup.clone()),
            None => Members::PidNamespace(self.init().pid),
        }
    }

    /// Ends everything running in the sandbox and starts it again over the
    /// same workdir layer, with everything else new; the new init is probed
    /// before this returns. On an error the sandbox must not be used again.
    pub(crate) async fn restart(
        &self,
        place: Place<'_>,
        deadline: Instant,
    ) -> Result<(), LocalError> {
        self.start_again(place, Keep::Workdir, deadline).await
    }

    /// Ends everything running in the sandbox and starts it again over an
    /// empty writable layer, so that it holds only its image and
    /// `place.snapshots`; the new init is probed before this returns. On an
    /// error the sandbox must not be used again.
    pub(crate) async fn reset(
        &self,
        place: Place<'_>,
        deadline: Instant,
    ) -> Result<(), LocalError> {
        self.start_again(place, Keep::Nothing, deadline).await
    }

    async fn start_again(
        &self,
        place: Place<'_>,
        keep: Keep,
        deadline: Instant,
    ) -> Result<(), LocalError> {
        self.current().stop().await;
        if let Some(cgroup) = &self.cgroup {
            cgroup.drain().await?;
        }
        let (dir, ids) = (place.dir.to_path_buf(), place.site.ids);
        blocking(move || match keep {
            Keep::Workdir => namespace::renew_layer(&dir, &ids),
            Keep::Nothing => namespace::empty_layer(&dir, &ids),
        })
        .await?;
        let kept = matches!(keep, Keep::Workdir);
        let (init, _) = start(place, self.cgroup.as_ref(), kept, deadline).await?;
        *self.init.lock().expect("init lock poisoned") = Arc::new(init);
        Ok(())
    }

    /// Kills everything running in the sandbox and removes its cgroup.
    /// Safe to call more than once.
    pub(crate) async fn shutdown(&self) -> Result<(), LocalError> {
        self.current().stop().await;
        match &self.cgroup {
            Some(cgroup) => cgroup.remove().await,
            None => Ok(()),
        }
    }
}

/// Starts an init in `place` and probes it; `workdir_kept` when the layer
/// already holds the workdir of an earlier init. A init that fails its
/// probe is stopped.
async fn start(
    place: Place<'_>,
    cgroup: Option<&SandboxCgroup>,
    workdir_kept: bool,
    deadline: Instant,
) -> Result<(Init, WorkdirMode), LocalError> {
    let Place {
        site,
        template,
        id,
        dir,
        marker,
        snapshots,
        volumes,
    } = place;
    let cgroup_dirs = cgroup.map_or_else(Vec::new, |cgroup| cgroup.dirs.clone());
    let spec = InitSpec {
        sandbox_dir: dir,
        image: template.source.to_request(),
        workdir: &template.workdir,
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
        workdir_kept,
        snapshots,
        volumes,
    };
    let running = namespace::start(&spec, deadline).await?;
    let workdir = running.started.workdir;
    let init = Init {
        process: running.init,
        supervisor: Mutex::new(Some(running.supervisor)),
    };
    let entry = Entry {
        init: init.process.identity(),
        own_network: !template.share_network,
        cgroups: &cgroup_dirs,
        file_size_limit: None,
    };
    let mut hidden = site.hidden.clone();
    hidden.push(template.source.host_dir().display().to_string());
    let own_root = template.source.oci().is_some();
    let report = match entry
        .probe(
            &template.workdir,
            hidden,
            site.host_root_uid,
            own_root,
            volumes,
        )
        .await
    {
        Ok(report) => report,
        Err(error) => {
            init.stop().await;
            return Err(error);
        }
    };
    if !report.failures.is_empty() {
        init.stop().await;
        return Err(LocalError::Isolation(format!(
            "sandbox {id} failed its isolation probe and was destroyed: {}",
            report.failures.join("; ")
        )));
    }
    Ok((init, workdir))
}
