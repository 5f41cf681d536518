//! The root filesystem of a sandbox of an OCI image: the image's layers
//! are its whole `/`, and nothing of the host's root filesystem is in it.
//!
//! ```text
//! /            overlay: the layers (read-only) under layer/root, which every init gets new
//! <workdir>    overlay: the image's <workdir> under layer/upper, which a restart keeps
//! /dev /proc   as in a directory image's sandbox
//! /tmp         as in a directory image's sandbox
//! /etc/hosts, /etc/hostname   written into the root's own layer
//! ```
//!
//! Each layer is opened beneath the store's layer directory (no link
//! followed) before anything is mounted, and named to overlayfs by its
//! descriptor (`/proc/self/fd/N`): a few bytes per layer, whatever the
//! store's path, and the path overlayfs shows in the mount table. The
//! layers go to overlayfs one `fsconfig(lowerdir+)` each (Linux 6.8 and
//! later), which has no limit on the whole list; older kernels take one
//! `mount(2)` option string of at most a page, which these names keep to
//! about 16 bytes a layer, so some 240 layers (overlayfs stacks at most
//! 500 in any case). The overlays use `userxattr`: the init is root of a
//! user namespace only, which cannot read the `trusted.overlay.*`
//! attributes opaque directories are marked with, so the store marks them
//! `user.overlay.opaque` too.
//!
//! The workdir is an overlay of its own over a read-only view of the
//! image, so a scrub that starts the sandbox again keeps what a task wrote
//! there and nothing else. Everything written into the image's own root
//! is written after the pivot, through descriptors opened without
//! following links: a link in a hostile image resolves inside the
//! sandbox, never on the host.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::UnmountFlags;

use crate::overlay::{
    SnapshotPart, fd_path, mount_overlay, open_dir, snapshot_layers, stage, unstage,
};
use crate::protocol::{StartRequest, WorkdirMode};
use crate::rootfs::{self, LAYER};
use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID};

/// Staging mount point of the image's read-only view, the lower layer of
/// the workdir's overlay; detached once that overlay is made.
const IMAGE_VIEW: &str = ".sandfleet-image";

/// Builds the root of `request` from `layers` (beneath `dir`, lowest
/// first) and pivots into it; returns how the workdir was made.
pub(crate) fn build(
    request: &StartRequest,
    dir: &Path,
    layers: &[String],
) -> Result<WorkdirMode, String> {
    let root = request.sandbox_dir.join("rootfs");
    let layer = request.sandbox_dir.join("layer");
    let store = open_dir(CWD, dir, ResolveFlags::empty())?;
    // A snapshot's files lie over the image's, the latest snapshot topmost.
    let mut lowers = snapshot_layers(request, SnapshotPart::Root)?;
    for name in layers.iter().rev() {
        lowers.push(open_dir(&store, Path::new(name), ResolveFlags::BENEATH)?);
    }
    let sandbox_layer = open_dir(CWD, &layer, ResolveFlags::empty())?;
    let upper = open_dir(&sandbox_layer, Path::new("root"), ResolveFlags::BENEATH)?;
    let work = open_dir(&sandbox_layer, Path::new("rootwork"), ResolveFlags::BENEATH)?;
    let names: Vec<String> = lowers.iter().map(fd_path).collect();
    mount_overlay(
        &root,
        &names,
        Some((&fd_path(&upper), &fd_path(&work))),
        false,
    )
    .map_err(|e| {
        format!(
            "mounting the image's {} layers as the root: {e}",
            layers.len()
        )
    })?;
    // A sandbox's own mounts go on directories of the image, made new where
    // the image has something else there (a link would lead off the root).
    for (name, mode) in [
        ("dev", 0o755),
        ("proc", 0o555),
        ("tmp", 0o1777),
        (LAYER, 0o755),
    ] {
        mount_point(&root, name, mode)?;
    }
    rootfs::build_dev(&root, request)?;
    rootfs::build_proc(&root)?;
    rootfs::bind(
        &layer,
        &root.join(LAYER),
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )?;
    // The view needs two lower layers to be mounted without an upper one;
    // the empty one adds nothing.
    let empty = open_dir(&sandbox_layer, Path::new("empty"), ResolveFlags::BENEATH)?;
    let mut view_names = names;
    view_names.push(fd_path(&empty));
    mount_point(&root, IMAGE_VIEW, 0o755)?;
    mount_overlay(&root.join(IMAGE_VIEW), &view_names, None, false)
        .map_err(|e| format!("mounting the image's view: {e}"))?;
    let workdir_lowers = stage(&root, &snapshot_layers(request, SnapshotPart::Workdir)?)?;
    drop((lowers, upper, work, empty, store, sandbox_layer));
    let resolv = (!request.own_network)
        .then(|| fs::read("/etc/resolv.conf").ok())
        .flatten();
    rootfs::pivot_into(&root)?;
    write_identity(&request.hostname, resolv.as_deref())?;
    make_workdir(&request.workdir, &workdir_lowers)?;
    unstage(&workdir_lowers)?;
    rootfs::make_tmp()?;
    for staging in [IMAGE_VIEW, LAYER] {
        let path = Path::new("/").join(staging);
        rustix::mount::unmount(&path, UnmountFlags::DETACH)
            .map_err(|e| format!("detaching {}: {e}", path.display()))?;
        fs::remove_dir(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    Ok(WorkdirMode::Overlay)
}

/// Makes `root/name` a directory to mount on: what the image has there
/// that is not a directory (a link, a file) is removed first.
fn mount_point(root: &Path, name: &str, mode: u32) -> Result<(), String> {
    let root_fd = open_dir(CWD, root, ResolveFlags::empty())?;
    match rustix::fs::statat(&root_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_dir() => return Ok(()),
        Ok(_) => rustix::fs::unlinkat(&root_fd, name, AtFlags::empty())
            .map_err(|e| format!("removing /{name} of the image: {e}"))?,
        Err(Errno::NOENT) => {}
        Err(error) => return Err(format!("/{name} of the image: {error}")),
    }
    rustix::fs::mkdirat(&root_fd, name, Mode::from_raw_mode(mode))
        .map_err(|e| format!("creating /{name}: {e}"))
}

/// Writes `/etc/hostname` and `/etc/hosts` (and, sharing the host's
/// network, its `resolv.conf`) into the root's own layer, replacing what
/// the image has there.
fn write_identity(hostname: &str, resolv: Option<&[u8]>) -> Result<(), String> {
    mount_point(Path::new("/"), "etc", 0o755)?;
    let etc = open_dir(CWD, Path::new("/etc"), ResolveFlags::empty())?;
    let hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{hostname}\n");
    let hostname = format!("{hostname}\n");
    let mut files: Vec<(&str, &[u8])> = vec![
        ("hostname", hostname.as_bytes()),
        ("hosts", hosts.as_bytes()),
    ];
    if let Some(resolv) = resolv {
        files.push(("resolv.conf", resolv));
    }
    for (name, contents) in files {
        match rustix::fs::unlinkat(&etc, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(error) => return Err(format!("replacing /etc/{name}: {error}")),
        }
        let file = rustix::fs::openat(
            &etc,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| format!("creating /etc/{name}: {e}"))?;
        fs::File::from(file)
            .write_all(contents)
            .map_err(|e| format!("writing /etc/{name}: {e}"))?;
    }
    Ok(())
}

/// Mounts the workdir: the image's directory there (or nothing, where the
/// image has none) under `snapshots` (topmost first) and the layer's
/// `upper`.
fn make_workdir(workdir: &str, snapshots: &[PathBuf]) -> Result<(), String> {
    let view = open_dir(CWD, &Path::new("/").join(IMAGE_VIEW), ResolveFlags::empty())?;
    let relative = workdir.trim_start_matches('/');
    let lower = match rustix::fs::openat2(
        &view,
        relative,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(lower) => lower,
        Err(Errno::NOENT) => open_dir(
            CWD,
            &Path::new("/").join(LAYER).join("empty"),
            ResolveFlags::empty(),
        )?,
        Err(error) => {
            return Err(format!(
                "the image's {workdir} cannot be the workdir ({error}): it must be a directory \
                 reached without links"
            ));
        }
    };
    let target = Path::new(workdir);
    rootfs::make_dir(target, 0o755)?;
    let layer = Path::new("/").join(LAYER);
    let mut lowers: Vec<String> = snapshots.iter().map(|p| p.display().to_string()).collect();
    lowers.push(fd_path(&lower));
    mount_overlay(
        target,
        &lowers,
        Some((
            &layer.join("upper").display().to_string(),
            &layer.join("work").display().to_string(),
        )),
        true,
    )
    .map_err(|e| format!("mounting the workdir {workdir}: {e}"))
}
