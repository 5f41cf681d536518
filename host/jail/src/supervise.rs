//! `sandfleet-jail start`: clones the sandbox's init into its namespaces,
//! maps its ids, puts it in its cgroups, waits for it to build its root
//! filesystem, reports, then waits for it to end.
//!
//! ```text
//! supervisor (host namespaces)              init (new namespaces, pid 1)
//!   clone ───────────────────────────────▶  waits on `go`
//!   uid_map, gid_map, cgroup.procs
//!   write `go` ──────────────────────────▶  becomes root, builds the rootfs
//!   reads `report` until EOF  ◀───────────  "workdir overlay", then execs
//!                                           itself as `pid1` (report closes)
//!   prints `Started`, waits for the init
//! ```

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::pipe::{PipeFlags, pipe_with};
use rustix::process::{Pid, Signal, WaitOptions};

use crate::creds::{self, Ended};
use crate::protocol::{
    EXIT_SETUP, INIT_RECORD, IdMap, Image, ProcessRef, StartRequest, Started, Volume, WorkdirMode,
};
use crate::rootfs;
use crate::sys::{self, Forked};

pub(crate) fn main() -> i32 {
    match run() {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "sandfleet-jail: {message}");
            EXIT_SETUP
        }
    }
}

fn run() -> Result<i32, String> {
    // The init inherits this session, with no controlling terminal.
    crate::enter::leave_the_terminal()?;
    // Whatever started sandfleet may have left descriptors open (a
    // directory of the host, say); none may reach a sandbox.
    sys::close_from(3).map_err(|e| format!("closing inherited descriptors: {e}"))?;
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| format!("reading the request: {e}"))?;
    let request: StartRequest =
        serde_json::from_slice(&input).map_err(|e| format!("a malformed request: {e}"))?;
    check_canonical(&request.sandbox_dir)?;
    match &request.image {
        Image::Directory(dir) => check_canonical(dir)?,
        Image::Layers { dir, layers } => {
            check_canonical(dir)?;
            for layer in layers {
                check_beneath(layer)?;
            }
        }
    }
    for snapshot in &request.snapshots {
        check_canonical(snapshot)?;
    }
    for volume in &request.volumes {
        check_canonical(&volume.source)?;
        Volume::check_target(&volume.target)?;
    }
    // The init executes this same program again as the sandbox's pid 1.
    let program = rustix::fs::open(
        "/proc/self/exe",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("opening /proc/self/exe: {e}"))?;
    let (go_read, go_write) = pipe_with(PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (report_read, report_write) =
        pipe_with(PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let mut flags = sys::CLONE_NEWUSER
        | sys::CLONE_NEWNS
        | sys::CLONE_NEWPID
        | sys::CLONE_NEWIPC
        | sys::CLONE_NEWUTS;
    if request.own_network {
        flags |= sys::CLONE_NEWNET;
    }
    let init =
        match sys::clone_into(flags).map_err(|e| format!("clone into new namespaces: {e}"))? {
            Forked::Child => {
                drop((go_write, report_read));
                rootfs::init(&request, go_read, report_write, program)
            }
            Forked::Parent(pid) => pid,
        };
    drop((go_read, report_write, program));
    let guard = KillOnDrop(init);
    record_init(&request.sandbox_dir, init)?;
    write_id_maps(init, &request.ids)?;
    for dir in &request.cgroups {
        let procs = dir.join("cgroup.procs");
        fs::write(&procs, init.to_string())
            .map_err(|e| format!("adding the init to {}: {e}", procs.display()))?;
    }
    let mut go = File::from(go_write);
    go.write_all(b"g")
        .map_err(|e| format!("releasing the init: {e}"))?;
    let mut report = String::new();
    File::from(report_read)
        .read_to_string(&mut report)
        .map_err(|e| format!("reading the init's report: {e}"))?;
    // Held until here: the init checks that the supervisor is alive by it.
    drop(go);
    let workdir = parse_report(&report)?;
    let started = Started { workdir, pid: init };
    let mut stdout = std::io::stdout();
    let line = serde_json::to_string(&started).expect("Started serializes");
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("reporting: {e}"))?;
    // Let go of the pipe so the reader sees its end.
    let null = rustix::fs::open("/dev/null", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("opening /dev/null: {e}"))?;
    rustix::stdio::dup2_stdout(&null).map_err(|e| format!("closing stdout: {e}"))?;
    std::mem::forget(guard);
    wait_for(init)
}

/// Writes the init's [`INIT_RECORD`] (whole, by rename) while the init still
/// waits on `go`: a reap finds every init that ever ran a command.
fn record_init(sandbox_dir: &Path, init: i32) -> Result<(), String> {
    let process = ProcessRef::of(init).ok_or("the init exited before it was released")?;
    let json = serde_json::to_vec(&process).expect("ProcessRef serializes");
    let record = sandbox_dir.join(INIT_RECORD);
    let partial = sandbox_dir.join(format!("{INIT_RECORD}.partial"));
    fs::write(&partial, json)
        .and_then(|()| fs::rename(&partial, &record))
        .map_err(|e| format!("recording the init in {}: {e}", record.display()))
}

/// Refuses paths with `.`, `..`, symlinks or a trailing `/`: mounts are set
/// up from canonical paths only, so what the sandbox sees is exactly what
/// was asked for.
fn check_canonical(path: &Path) -> Result<(), String> {
    let canonical = fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if canonical == path {
        Ok(())
    } else {
        Err(format!(
            "{} is not canonical (it is {})",
            path.display(),
            canonical.display()
        ))
    }
}

/// Refuses a layer name that could leave its directory: only plain
/// components (the layers are opened beneath it without following links).
fn check_beneath(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(format!("layer `{name}` is not a plain relative path"))
    }
}

/// Writes the init's uid and gid maps. Unprivileged, only one id can be
/// mapped, and `setgroups` must be denied first.
fn write_id_maps(init: i32, ids: &IdMap) -> Result<(), String> {
    let proc = Path::new("/proc").join(init.to_string());
    let write = |file: &str, contents: String| {
        fs::write(proc.join(file), &contents)
            .map_err(|e| format!("writing {file} `{}` for the init: {e}", contents.trim()))
    };
    if !rustix::process::geteuid().is_root() {
        write("setgroups", "deny".to_string())?;
    }
    let own =
        |file: &str| fs::read_to_string(Path::new("/proc/self").join(file)).unwrap_or_default();
    write("uid_map", id_map(ids.uid, ids.count, &own("uid_map")))?;
    write("gid_map", id_map(ids.gid, ids.count, &own("gid_map")))
}

/// The map of `count` ids from 0 onto this namespace's ids from `first`,
/// in one line per extent of `own` (this process's map) it crosses: the
/// kernel takes a line only when its ids lie in one extent of the parent's
/// map, and a rootless namespace maps its root and its other ids apart.
fn id_map(first: u32, count: u32, own: &str) -> String {
    let end = u64::from(first) + u64::from(count);
    let mut cuts: Vec<u64> = crate::uid_map::extents(own)
        .iter()
        .map(|extent| extent.inside)
        .filter(|&start| start > u64::from(first) && start < end)
        .collect();
    cuts.sort_unstable();
    cuts.push(end);
    let mut map = String::new();
    let mut from = u64::from(first);
    for cut in cuts {
        map.push_str(&format!(
            "{} {from} {}\n",
            from - u64::from(first),
            cut - from
        ));
        from = cut;
    }
    map
}

fn parse_report(report: &str) -> Result<WorkdirMode, String> {
    let mut workdir = None;
    for line in report.lines() {
        if let Some(error) = line.strip_prefix("error ") {
            return Err(error.to_string());
        }
        workdir = match line {
            "workdir overlay" => Some(WorkdirMode::Overlay),
            "workdir copy" => Some(WorkdirMode::Copy),
            _ => workdir,
        };
    }
    workdir.ok_or_else(|| "the init exited while it was being set up".to_string())
}

/// Waits for the init and exits as it did.
fn wait_for(init: i32) -> Result<i32, String> {
    Ok(match creds::wait_for(init, "the init")? {
        Ended::Exited(code) => code,
        Ended::Killed(signal) => 128 + signal,
    })
}

/// Kills the init unless the setup got through.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

/// Whether the supervisor still holds the write end of `go`: the init calls
/// this after arranging to die with it, which closes the window in which it
/// could have died unnoticed.
pub(crate) fn supervisor_alive(go: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(go, PollFlags::IN)];
    match poll(&mut fds, Some(&Timespec::default())) {
        Ok(_) => !fds[0].revents().contains(PollFlags::HUP),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_the_workdir_or_the_error() {
        assert_eq!(parse_report("workdir overlay\n"), Ok(WorkdirMode::Overlay));
        assert_eq!(parse_report("workdir copy\n"), Ok(WorkdirMode::Copy));
        assert_eq!(
            parse_report("workdir copy\nerror executing the init: ENOENT\n"),
            Err("executing the init: ENOENT".to_string())
        );
        assert!(parse_report("").unwrap_err().contains("exited"));
    }

    #[test]
    fn a_map_is_cut_where_the_parent_maps_apart() {
        let host = "         0          0 4294967295\n";
        assert_eq!(id_map(0x7000_0000, 65536, host), "0 1879048192 65536\n");
        let rootless = "         0        999          1\n         1 1000000000      65535\n";
        assert_eq!(id_map(0, 65536, rootless), "0 0 1\n1 1 65535\n");
        assert_eq!(id_map(1, 100, rootless), "0 1 100\n");
        assert_eq!(
            id_map(999, 1, ""),
            "0 999 1\n",
            "unprivileged: only its own id"
        );
    }

    #[test]
    fn layer_names_stay_beneath_their_directory() {
        check_beneath("0123abcd/root").unwrap();
        for bad in ["", "/abs", "../up", "a/../../b", "./a"] {
            assert!(check_beneath(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_canonical_paths_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let canonical = fs::canonicalize(dir.path()).unwrap();
        check_canonical(&canonical).unwrap();
        let dotted = canonical.join("a/..");
        fs::create_dir(canonical.join("a")).unwrap();
        assert!(
            check_canonical(&dotted)
                .unwrap_err()
                .contains("not canonical")
        );
        std::os::unix::fs::symlink(&canonical, canonical.join("link")).unwrap();
        assert!(check_canonical(&canonical.join("link")).is_err());
    }
}
