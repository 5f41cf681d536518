//! Cgroups for sandboxes: finding the memory, cpu and pids controllers
//! (cgroup v1 hierarchies, the v2 unified hierarchy, or a mix), making a
//! sandbox's cgroup with its limits, and removing it.
//!
//! A sandbox's cgroup is `<parent>/<run-id>/<sandbox-id>` under each
//! hierarchy that has one of the controllers; `<parent>` is `sandfleet`
//! unless configured. Its init joins it before it runs anything, and every
//! command joins it before it enters the sandbox, so whatever runs in the
//! sandbox is counted; the sandbox has no `/sys` of its own and cannot
//! leave it.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The controllers sandboxes are limited by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    /// Memory: an OOM kill stays inside the sandbox.
    Memory,
    /// CPU time: a quota of the sandbox's millicores.
    Cpu,
    /// Processes and threads.
    Pids,
}

impl Controller {
    /// Every controller, in order.
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Cpu, Controller::Pids];

    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }
}

/// Which cgroup version a hierarchy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller (or group of controllers).
    V1,
    /// The unified hierarchy.
    V2,
}

/// Where one controller is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// The controller.
    pub controller: Controller,
    /// The hierarchy's mount point.
    pub root: PathBuf,
    /// Its version.
    pub version: Version,
}

/// A sandbox's limits; `None` leaves one unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory, in bytes (swap is not allowed on top).
    pub memory_bytes: Option<u64>,
    /// CPU, in millicores.
    pub cpu_milli: Option<u32>,
    /// Processes and threads.
    pub pids: Option<u32>,
}

/// The CFS period quotas are given against: 100 ms, the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

/// The controllers found on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroups {
    hierarchies: Vec<Hierarchy>,
}

impl Cgroups {
    /// Finds the controllers from this process's mount table.
    pub fn detect() -> Cgroups {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Cgroups::from_mountinfo(&mountinfo, |root| {
            fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
        })
    }

    /// Finds the controllers in `mountinfo`; `v2_controllers` reads a v2
    /// hierarchy's `cgroup.controllers`. A controller bound to a v1
    /// hierarchy is not available in v2, so v1 is preferred.
    pub fn from_mountinfo(mountinfo: &str, v2_controllers: impl Fn(&Path) -> String) -> Cgroups {
        let mut v1 = Vec::new();
        let mut v2 = Vec::new();
        for line in mountinfo.lines() {
            let Some((mount, fs)) = line.split_once(" - ") else {
                continue;
            };
            let Some(point) = mount.split(' ').nth(4) else {
                continue;
            };
            let mut fs = fs.split(' ');
            let (fstype, _source, options) = (fs.next(), fs.next(), fs.next().unwrap_or_default());
            let root = PathBuf::from(point);
            let (found, names, version) = match fstype {
                Some("cgroup") => (&mut v1, options.replace(',', " "), Version::V1),
                Some("cgroup2") => (&mut v2, v2_controllers(&root), Version::V2),
                _ => continue,
            };
            let names: BTreeSet<&str> = names.split_whitespace().collect();
            for controller in Controller::ALL {
                if names.contains(controller.name()) {
                    found.push(Hierarchy {
                        controller,
                        root: root.clone(),
                        version,
                    });
                }
            }
        }
        let mut hierarchies = Vec::new();
        for controller in Controller::ALL {
            let found = v1
                .iter()
                .chain(&v2)
                .find(|h| h.controller == controller)
                .cloned();
            hierarchies.extend(found);
        }
        Cgroups { hierarchies }
    }

    /// The controllers found, each with its hierarchy.
    pub fn hierarchies(&self) -> &[Hierarchy] {
        &self.hierarchies
    }

    /// The controllers that were not found.
    pub fn missing(&self) -> Vec<Controller> {
        Controller::ALL
            .into_iter()
            .filter(|c| !self.hierarchies.iter().any(|h| h.controller == *c))
            .collect()
    }

    /// The directories of cgroup `relative` (one per hierarchy).
    pub fn dirs(&self, relative: &Path) -> Vec<PathBuf> {
        let roots: BTreeSet<&Path> = self.hierarchies.iter().map(|h| h.root.as_path()).collect();
        roots.into_iter().map(|root| root.join(relative)).collect()
    }

    /// Makes cgroup `relative` in every hierarchy and sets `limits`; returns
    /// its directories, for the sandbox's processes to join. On failure,
    /// removes what it made.
    pub fn create(&self, relative: &Path, limits: &Limits) -> io::Result<Vec<PathBuf>> {
        let made = self.create_dirs(relative).and_then(|dirs| {
            for hierarchy in &self.hierarchies {
                write_limit(hierarchy, &hierarchy.root.join(relative), limits)?;
            }
            Ok(dirs)
        });
        if made.is_err() {
            let _ = self.remove(relative);
        }
        made
    }

    fn create_dirs(&self, relative: &Path) -> io::Result<Vec<PathBuf>> {
        for hierarchy in self.hierarchies.iter().filter(|h| h.version == Version::V2) {
            // v2 needs each controller enabled in every ancestor's
            // subtree_control; the leaf's parent holds no processes, so
            // enabling it there is allowed.
            let mut dir = hierarchy.root.clone();
            for component in relative.parent().into_iter().flat_map(Path::components) {
                enable(&dir, hierarchy.controller)?;
                dir.push(component);
                create_dir(&dir)?;
            }
            enable(&dir, hierarchy.controller)?;
        }
        let dirs = self.dirs(relative);
        for dir in &dirs {
            fs::create_dir_all(dir).map_err(|e| with_path(e, dir))?;
        }
        Ok(dirs)
    }

    /// Removes cgroup `relative`; it must have no processes left. Missing
    /// directories are not an error.
    pub fn remove(&self, relative: &Path) -> io::Result<()> {
        let mut result = Ok(());
        for dir in self.dirs(relative) {
            if let Err(error) = remove_tree(&dir) {
                result = Err(error);
            }
        }
        result
    }

    /// Pids (on the host) of the processes in cgroup `relative` and below.
    pub fn processes(&self, relative: &Path) -> Vec<i32> {
        let mut pids = BTreeSet::new();
        for dir in self.dirs(relative) {
            collect_processes(&dir, &mut pids);
        }
        pids.into_iter().collect()
    }
}

fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

fn create_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => Err(with_path(error, dir)),
        _ => Ok(()),
    }
}

fn enable(dir: &Path, controller: Controller) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let enabled = fs::read_to_string(&file).map_err(|e| with_path(e, &file))?;
    if enabled
        .split_whitespace()
        .any(|name| name == controller.name())
    {
        return Ok(());
    }
    fs::write(&file, format!("+{}", controller.name())).map_err(|e| with_path(e, &file))
}

fn write_limit(hierarchy: &Hierarchy, dir: &Path, limits: &Limits) -> io::Result<()> {
    let write = |file: &str, value: String| {
        let path = dir.join(file);
        fs::write(&path, &value).map_err(|e| with_path(e, &path))
    };
    // Swap limits exist only where swap accounting is on.
    let write_if_present = |file: &str, value: String| {
        if dir.join(file).exists() {
            write(file, value)
        } else {
            Ok(())
        }
    };
    match (hierarchy.controller, hierarchy.version) {
        (Controller::Memory, Version::V1) => {
            if let Some(bytes) = limits.memory_bytes {
                write("memory.limit_in_bytes", bytes.to_string())?;
                write_if_present("memory.memsw.limit_in_bytes", bytes.to_string())?;
            }
        }
        (Controller::Memory, Version::V2) => {
            if let Some(bytes) = limits.memory_bytes {
                write("memory.max", bytes.to_string())?;
                write_if_present("memory.swap.max", "0".into())?;
            }
        }
        (Controller::Cpu, Version::V1) => {
            if let Some(milli) = limits.cpu_milli {
                write("cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                write("cpu.cfs_quota_us", cpu_quota_us(milli).to_string())?;
            }
        }
        (Controller::Cpu, Version::V2) => {
            if let Some(milli) = limits.cpu_milli {
                write(
                    "cpu.max",
                    format!("{} {CPU_PERIOD_US}", cpu_quota_us(milli)),
                )?;
            }
        }
        (Controller::Pids, _) => {
            if let Some(pids) = limits.pids {
                write("pids.max", pids.to_string())?;
            }
        }
    }
    Ok(())
}

/// The CFS quota per [`CPU_PERIOD_US`] for `milli` millicores; the kernel's
/// minimum is 1 ms.
fn cpu_quota_us(milli: u32) -> u64 {
    (u64::from(milli) * CPU_PERIOD_US / 1000).max(1000)
}

fn collect_processes(dir: &Path, pids: &mut BTreeSet<i32>) {
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(
            procs
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok()),
        );
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_processes(&entry.path(), pids);
            }
        }
    }
}

/// Removes a cgroup directory and the cgroups below it, deepest first
/// (cgroup directories are removed with `rmdir`, never by their files).
fn remove_tree(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(with_path(error, dir)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(with_path(error, dir)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mount table of the development machine: v1 controllers, and a
    /// unified hierarchy with none.
    const HYBRID: &str = "\
35 25 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
36 25 0:31 / /sys/fs/cgroup/cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpuacct
38 25 0:33 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
42 25 0:37 / /sys/fs/cgroup/pids rw,relatime shared:16 - cgroup cgroup rw,pids
44 25 0:39 / /sys/fs/cgroup/unified rw,relatime shared:18 - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_controllers_are_found_by_their_mount_options() {
        let cgroups = Cgroups::from_mountinfo(HYBRID, |_| String::new());
        let found: Vec<(Controller, &Path, Version)> = cgroups
            .hierarchies()
            .iter()
            .map(|h| (h.controller, h.root.as_path(), h.version))
            .collect();
        assert_eq!(
            found,
            [
                (
                    Controller::Memory,
                    Path::new("/sys/fs/cgroup/memory"),
                    Version::V1
                ),
                (
                    Controller::Cpu,
                    Path::new("/sys/fs/cgroup/cpu"),
                    Version::V1
                ),
                (
                    Controller::Pids,
                    Path::new("/sys/fs/cgroup/pids"),
                    Version::V1
                ),
            ]
        );
        assert!(cgroups.missing().is_empty());
        assert_eq!(cgroups.dirs(Path::new("sandfleet/r/s")).len(), 3);
    }

    #[test]
    fn v2_controllers_come_from_cgroup_controllers_and_share_one_directory() {
        let unified = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let cgroups = Cgroups::from_mountinfo(unified, |root| {
            assert_eq!(root, Path::new("/sys/fs/cgroup"));
            "cpuset cpu io memory pids".to_string()
        });
        assert!(
            cgroups
                .hierarchies()
                .iter()
                .all(|h| h.version == Version::V2)
        );
        assert_eq!(cgroups.hierarchies().len(), 3);
        assert_eq!(
            cgroups.dirs(Path::new("sandfleet/r/s")),
            [PathBuf::from("/sys/fs/cgroup/sandfleet/r/s")]
        );
        let without_pids = Cgroups::from_mountinfo(unified, |_| "cpu memory".to_string());
        assert_eq!(without_pids.missing(), [Controller::Pids]);
    }

    #[test]
    fn cpu_quotas_follow_millicores_with_the_kernel_minimum() {
        assert_eq!(cpu_quota_us(1000), 100_000);
        assert_eq!(cpu_quota_us(2500), 250_000);
        assert_eq!(cpu_quota_us(1), 1000);
    }

    #[test]
    fn limits_are_written_in_each_versions_files() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            cpu_milli: Some(500),
            pids: Some(128),
        };
        for (controller, version) in [
            (Controller::Memory, Version::V1),
            (Controller::Memory, Version::V2),
            (Controller::Cpu, Version::V1),
            (Controller::Cpu, Version::V2),
            (Controller::Pids, Version::V2),
        ] {
            let hierarchy = Hierarchy {
                controller,
                root: dir.path().to_path_buf(),
                version,
            };
            write_limit(&hierarchy, dir.path(), &limits).unwrap();
        }
        let read = |file: &str| fs::read_to_string(dir.path().join(file)).unwrap();
        assert_eq!(read("memory.limit_in_bytes"), "67108864");
        assert_eq!(read("memory.max"), "67108864");
        assert_eq!(read("cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("pids.max"), "128");
        assert!(!dir.path().join("memory.memsw.limit_in_bytes").exists());
    }
}
