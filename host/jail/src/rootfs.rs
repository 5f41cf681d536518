//! The init's side of `start`: become the root of the new user namespace,
//! build the sandbox's root filesystem, pivot into it, and execute this
//! program again as the sandbox's pid 1.
//!
//! The root filesystem, from the sandbox's point of view:
//!
//! ```text
//! /                tmpfs (nosuid, nodev, sized)          the sandbox's own
//! /usr /bin /lib…  the host's, read-only (nosuid, nodev)  submounts included
//! /etc             tmpfs with allowed host entries bound read-only, and its own hosts and hostname
//! /dev             tmpfs (nosuid, nodev, noexec): null zero full random urandom, a private pts, shm
//! /proc            proc, with /proc/sys, /proc/bus… read-only and /proc/kcore, /proc/keys… masked
//! /tmp             overlay of layer/empty and layer/tmp (nosuid, nodev)
//! <workdir>        overlay of the image (read-only) and layer/upper (nosuid, nodev)
//! <volume target>  a host directory of the request's (nosuid, nodev, ro if asked)
//! ```
//!
//! That is a directory image's root; an OCI image's is made by
//! [`crate::image_root`] from the image's layers alone, with the same
//! `/dev`, `/proc` and `/tmp`.
//!
//! Read-only binds are made with `open_tree` and `mount_setattr(AT_RECURSIVE)`
//! on the detached copy before it is attached: every submount is read-only
//! from the moment it is visible, and nothing matches paths against
//! `/proc/self/mountinfo`. The host paths of the image and the layer are
//! mounted at staging points, the overlay is made from those in-sandbox
//! paths after the pivot, and the staging mounts are then detached, so the
//! sandbox's mount table names no host directory of sandfleet's.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};
use rustix::process::Signal;

use crate::creds;
use crate::image_root;
use crate::overlay::{SnapshotPart, mount_overlay, snapshot_layers, stage, unstage};
use crate::protocol::{Image, StartRequest, WorkdirMode};
use crate::supervise::supervisor_alive;
use crate::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use crate::volumes;

/// Top-level host directories the sandbox runs the host's tools from.
const SYSTEM_DIRS: [&str; 8] = [
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt",
];

/// Device nodes bound from the host's `/dev`. Not `tty`: it opens the
/// caller's controlling terminal, and a sandbox has none to reach.
const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// `/proc` files hidden behind `/dev/null`, as container runtimes do.
pub(crate) const MASKED_FILES: [&str; 7] = [
    "kcore",
    "keys",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "kallsyms",
];

/// `/proc` directories hidden behind an empty read-only tmpfs.
const MASKED_DIRS: [&str; 3] = ["acpi", "scsi", "asound"];

/// `/proc` entries made read-only.
const READ_ONLY_PROC: [&str; 5] = ["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// Staging mount points of the image and of the writable layer: the
/// sandbox directory's `layer/`, holding `upper` and `work` (the workdir's
/// overlay), and `tmp`, `tmpwork` and `empty` (`/tmp`'s). The overlays keep
/// their layers once the staging mounts are detached.
const LOWER: &str = ".sandfleet-lower";
pub(crate) const LAYER: &str = ".sandfleet-layer";

/// The mount points of a sandbox that may be writable; the isolation probe
/// requires every other mount to be read-only.
pub(crate) fn writable_mounts(workdir: &str) -> Vec<String> {
    [
        "/", "/etc", "/dev", "/dev/pts", "/dev/shm", "/proc", "/tmp", workdir,
    ]
    .into_iter()
    .map(String::from)
    .chain(DEVICES.iter().map(|node| format!("/dev/{node}")))
    .collect()
}

/// Every mount point of a sandbox whose root is an image's: the writable
/// ones and `/proc`'s masks. Anything else mounted there would be the
/// host's.
pub(crate) fn own_root_mounts(workdir: &str) -> Vec<String> {
    let proc = MASKED_FILES
        .iter()
        .chain(&MASKED_DIRS)
        .chain(&READ_ONLY_PROC)
        .map(|name| format!("/proc/{name}"));
    writable_mounts(workdir).into_iter().chain(proc).collect()
}

/// Runs in the child of `clone`; never returns.
pub(crate) fn init(request: &StartRequest, go: OwnedFd, report: OwnedFd, program: OwnedFd) -> ! {
    let mut report = File::from(report);
    let workdir = match setup(request, &go) {
        Ok(workdir) => workdir,
        Err(error) => {
            let _ = writeln!(report, "error {error}");
            std::process::exit(1);
        }
    };
    let mode = match workdir {
        WorkdirMode::Overlay => "overlay",
        WorkdirMode::Copy => "copy",
    };
    let _ = writeln!(report, "workdir {mode}");
    let error = exec_pid1(request, &program);
    let _ = writeln!(report, "error executing the init: {error}");
    std::process::exit(1)
}

fn setup(request: &StartRequest, go: &OwnedFd) -> Result<WorkdirMode, String> {
    let mut byte = [0; 1];
    // The supervisor writes `go` once the id maps are in place; end of file
    // means it gave up.
    match rustix::io::read(go, &mut byte) {
        Ok(1) => {}
        _ => return Err("the supervisor went away before releasing the init".into()),
    }
    creds::become_root()?;
    // Changing credentials clears the parent-death signal, so it is set
    // only now, and the supervisor checked for afterwards.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if !supervisor_alive(go) {
        return Err("the supervisor went away".into());
    }
    if request.own_network {
        sys::loopback_up().map_err(|e| format!("bringing up the loopback device: {e}"))?;
    }
    rustix::system::sethostname(request.hostname.as_bytes())
        .map_err(|e| format!("sethostname: {e}"))?;
    build(request)
}

fn build(request: &StartRequest) -> Result<WorkdirMode, String> {
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    let volumes = volumes::detach(&request.volumes)?;
    let workdir = match &request.image {
        Image::Directory(image_dir) => build_over_host(request, image_dir),
        Image::Layers { dir, layers } => image_root::build(request, dir, layers),
    }?;
    volumes::attach(volumes)?;
    Ok(workdir)
}

/// The root of a directory image's sandbox: the host's system directories,
/// and the image at the workdir.
fn build_over_host(request: &StartRequest, image_dir: &Path) -> Result<WorkdirMode, String> {
    let root = request.sandbox_dir.join("rootfs");
    mount_tmpfs(
        &root,
        "sandfleet-root",
        &format!("mode=0755,size={}m", request.sizes.root_mib),
        MountFlags::NOSUID | MountFlags::NODEV,
    )?;
    for name in SYSTEM_DIRS {
        let host = Path::new("/").join(name);
        let target = root.join(name);
        match fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = fs::read_link(&host).map_err(|e| format!("{}: {e}", host.display()))?;
                std::os::unix::fs::symlink(&link, &target)
                    .map_err(|e| format!("{}: {e}", target.display()))?;
            }
            Ok(meta) if meta.is_dir() => {
                make_dir(&target, 0o755)?;
                bind(
                    &host,
                    &target,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                )?;
            }
            _ => {}
        }
    }
    build_etc(&root, request)?;
    build_dev(&root, request)?;
    build_proc(&root)?;
    make_dir(&root.join("root"), 0o700)?;
    let (lower, layer) = (root.join(LOWER), root.join(LAYER));
    make_dir(&lower, 0o755)?;
    bind(
        image_dir,
        &lower,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )?;
    make_dir(&layer, 0o755)?;
    bind(
        &request.sandbox_dir.join("layer"),
        &layer,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )?;
    let snapshots = stage(&root, &snapshot_layers(request, SnapshotPart::Workdir)?)?;
    pivot_into(&root)?;
    let workdir = if snapshots.is_empty() {
        make_workdir(&request.workdir, request.workdir_kept)?
    } else {
        make_snapshot_workdir(&request.workdir, &snapshots)?
    };
    unstage(&snapshots)?;
    make_tmp()?;
    for staging in [LOWER, LAYER] {
        let path = Path::new("/").join(staging);
        rustix::mount::unmount(&path, UnmountFlags::DETACH)
            .map_err(|e| format!("detaching {}: {e}", path.display()))?;
    }
    for staging in [LOWER, LAYER] {
        let path = Path::new("/").join(staging);
        fs::remove_dir(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    Ok(workdir)
}

pub(crate) fn make_dir(path: &Path, mode: u32) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

fn make_file(path: &Path) -> Result<(), String> {
    File::create(path)
        .map(drop)
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// `mount(2)` of a filesystem (not a bind) with `options` as its data.
fn mount_fs(
    source: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    options: &str,
) -> rustix::io::Result<()> {
    let options = CString::new(options).map_err(|_| rustix::io::Errno::INVAL)?;
    rustix::mount::mount(source, target, fstype, flags, Some(options.as_c_str()))
}

fn mount_tmpfs(
    target: &Path,
    source: &str,
    options: &str,
    flags: MountFlags,
) -> Result<(), String> {
    mount_fs(source, target, "tmpfs", flags, options)
        .map_err(|e| format!("mounting a tmpfs on {}: {e}", target.display()))
}

/// Binds `source` (with everything mounted below it) on `target`, with
/// `attrs` set on the whole tree before it is attached.
pub(crate) fn bind(source: &Path, target: &Path, attrs: u64) -> Result<(), String> {
    let tree = rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )
    .map_err(|e| format!("open_tree {}: {e}", source.display()))?;
    attach(&tree, source, target, attrs)
}

fn attach(tree: &OwnedFd, source: &Path, target: &Path, attrs: u64) -> Result<(), String> {
    sys::set_tree_attributes(tree.as_fd(), attrs)
        .map_err(|e| format!("mount_setattr on {}: {e}", source.display()))?;
    rustix::mount::move_mount(
        tree,
        "",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| format!("mounting {} on {}: {e}", source.display(), target.display()))
}

fn build_etc(root: &Path, request: &StartRequest) -> Result<(), String> {
    let etc = root.join("etc");
    make_dir(&etc, 0o755)?;
    mount_tmpfs(
        &etc,
        "sandfleet-etc",
        "mode=0755,size=4m",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
    )?;
    for entry in &request.etc {
        let host = Path::new("/etc").join(entry);
        let target = etc.join(entry);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue;
        };
        if let Some(parent) = target.parent() {
            make_dir(parent, 0o755)?;
        }
        if meta.file_type().is_symlink() {
            let link = fs::read_link(&host).map_err(|e| format!("{}: {e}", host.display()))?;
            std::os::unix::fs::symlink(&link, &target)
                .map_err(|e| format!("{}: {e}", target.display()))?;
            continue;
        }
        if meta.is_dir() {
            make_dir(&target, 0o755)?;
        } else {
            make_file(&target)?;
        }
        bind(
            &host,
            &target,
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )?;
    }
    let hostname = &request.hostname;
    for (name, contents) in [
        ("hostname", format!("{hostname}\n")),
        (
            "hosts",
            format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{hostname}\n"),
        ),
    ] {
        fs::write(etc.join(name), contents).map_err(|e| format!("writing /etc/{name}: {e}"))?;
    }
    Ok(())
}

pub(crate) fn build_dev(root: &Path, request: &StartRequest) -> Result<(), String> {
    let dev = root.join("dev");
    make_dir(&dev, 0o755)?;
    mount_tmpfs(
        &dev,
        "sandfleet-dev",
        "mode=0755,size=1m",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
    )?;
    for node in DEVICES {
        let target = dev.join(node);
        make_file(&target)?;
        bind(
            &Path::new("/dev").join(node),
            &target,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
        )?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))
            .map_err(|e| format!("linking /dev/{link}: {e}"))?;
    }
    let pts = dev.join("pts");
    make_dir(&pts, 0o755)?;
    // Terminals for the programs that want one; a sandbox works without.
    if let Err(error) = mount_fs(
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    ) {
        let _ = writeln!(std::io::stderr(), "sandfleet-jail: no /dev/pts: {error}");
    }
    let shm = dev.join("shm");
    make_dir(&shm, 0o1777)?;
    mount_tmpfs(
        &shm,
        "sandfleet-shm",
        &format!("mode=1777,size={}m", request.sizes.shm_mib),
        MountFlags::NOSUID | MountFlags::NODEV,
    )
}

pub(crate) fn build_proc(root: &Path) -> Result<(), String> {
    let proc = root.join("proc");
    make_dir(&proc, 0o555)?;
    mount_fs(
        "proc",
        &proc,
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        "",
    )
    .map_err(|e| format!("mounting /proc: {e}"))?;
    let null = root.join("dev/null");
    for name in MASKED_FILES {
        let target = proc.join(name);
        if target.exists() {
            bind(
                &null,
                &target,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
            )?;
        }
    }
    for name in MASKED_DIRS {
        let target = proc.join(name);
        if target.is_dir() {
            mount_tmpfs(
                &target,
                "sandfleet-masked",
                "mode=0555,size=0",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            )?;
        }
    }
    for name in READ_ONLY_PROC {
        let target = proc.join(name);
        if target.exists() {
            bind(
                &target,
                &target,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
            )?;
        }
    }
    Ok(())
}

/// Makes `root` the root of the mount namespace and detaches the host's.
pub(crate) fn pivot_into(root: &Path) -> Result<(), String> {
    let open_dir = |path: &Path| {
        rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("opening {}: {e}", path.display()))
    };
    let old_root = open_dir(Path::new("/"))?;
    let new_root = open_dir(root)?;
    rustix::process::fchdir(&new_root).map_err(|e| format!("fchdir: {e}"))?;
    // pivot_root(".", ".") stacks the old root on the new one, where it is
    // unmounted without needing a directory of its own.
    rustix::process::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    rustix::process::fchdir(&old_root).map_err(|e| format!("fchdir: {e}"))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| format!("detaching the host's root: {e}"))?;
    rustix::process::chdir("/").map_err(|e| format!("chdir /: {e}"))
}

fn overlay(target: &Path, lower: &str, upper: &str, work: &str) -> rustix::io::Result<()> {
    let options = format!("lowerdir=/{lower},upperdir=/{LAYER}/{upper},workdir=/{LAYER}/{work}");
    mount_fs(
        "sandfleet-overlay",
        target,
        "overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        &options,
    )
}

/// Mounts the workdir: an overlay of the staged image and layer, or, where
/// overlayfs is not allowed, a copy of the image in the layer (made only
/// when the layer does not already hold the workdir: `kept`).
fn make_workdir(workdir: &str, kept: bool) -> Result<WorkdirMode, String> {
    let target = PathBuf::from(workdir);
    make_dir(&target, 0o755)?;
    if overlay(&target, LOWER, "upper", "work").is_ok() {
        return Ok(WorkdirMode::Overlay);
    }
    if !kept {
        let copied = std::process::Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(format!("/{LOWER}/."))
            .arg(format!("/{LAYER}/upper/"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("running cp: {e}"))?;
        if !copied.success() {
            return Err(format!("copying the image into the workdir: cp {copied}"));
        }
    }
    bind(
        &Path::new("/").join(LAYER).join("upper"),
        &target,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )?;
    Ok(WorkdirMode::Copy)
}

/// Mounts the workdir as an overlay of the staged image under the staged
/// `snapshots` (topmost first) and the layer: a snapshot's files exist
/// only as layers, so there is no copy to fall back on.
fn make_snapshot_workdir(workdir: &str, snapshots: &[PathBuf]) -> Result<WorkdirMode, String> {
    let target = PathBuf::from(workdir);
    make_dir(&target, 0o755)?;
    let mut lowers: Vec<String> = snapshots.iter().map(|p| p.display().to_string()).collect();
    lowers.push(format!("/{LOWER}"));
    let layer = Path::new("/").join(LAYER);
    mount_overlay(
        &target,
        &lowers,
        Some((
            &layer.join("upper").display().to_string(),
            &layer.join("work").display().to_string(),
        )),
        false,
    )
    .map_err(|e| format!("mounting the workdir {workdir} over its snapshot: {e}"))?;
    Ok(WorkdirMode::Overlay)
}

/// Mounts `/tmp` on the layer's `tmp`: through an overlay where overlayfs
/// works, so that the mount table does not show the layer's host path.
pub(crate) fn make_tmp() -> Result<(), String> {
    let target = Path::new("/tmp");
    make_dir(target, 0o1777)?;
    if overlay(target, &format!("{LAYER}/empty"), "tmp", "tmpwork").is_err() {
        bind(
            &Path::new("/").join(LAYER).join("tmp"),
            target,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )?;
    }
    fs::set_permissions(target, fs::Permissions::from_mode(0o1777))
        .map_err(|e| format!("chmod /tmp: {e}"))
}

/// Executes this program as the sandbox's pid 1, with the marker as its
/// `argv[0]`, no environment, and nothing open but `/dev/null`.
fn exec_pid1(request: &StartRequest, program: &OwnedFd) -> std::io::Error {
    let null = match rustix::fs::open("/dev/null", OFlags::RDWR, Mode::empty()) {
        Ok(null) => null,
        Err(error) => return error.into(),
    };
    for redirect in [
        rustix::stdio::dup2_stdin(&null),
        rustix::stdio::dup2_stdout(&null),
        rustix::stdio::dup2_stderr(&null),
    ] {
        if let Err(error) = redirect {
            return error.into();
        }
    }
    drop(null);
    if let Err(error) = sys::cloexec_from(3) {
        return error;
    }
    let argv = match CString::new(request.marker.as_str()) {
        Ok(marker) => [marker, c"pid1".to_owned()],
        Err(error) => return std::io::Error::other(error),
    };
    sys::execute_fd(program.as_fd(), &argv, &[])
}
