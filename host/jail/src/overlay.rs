//! Overlay mounts made from directory descriptors, and the snapshot
//! layers a sandbox starts from.
//!
//! Every lower layer is opened without following links before anything is
//! mounted, and named to overlayfs by its descriptor (`/proc/self/fd/N`):
//! a few bytes per layer whatever its host path, the path the mount table
//! shows, and still valid after the pivot hides the host's tree. A
//! snapshot layer holds `upper` (the files of the workdir) and `root` (an
//! OCI image root's, outside the workdir), as sealed from a sandbox's
//! writable layer by the backend. The workdir's overlay is made after the
//! pivot, where overlayfs refuses a layer on a mount outside the
//! sandbox's namespace (the host's, detached by the pivot): its snapshot
//! layers are bound, read-only, at staging points in the new root first,
//! and detached once the overlay holds them.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MoveMountFlags};

use crate::protocol::StartRequest;
use crate::rootfs;
use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// The staging mount points of the workdir's snapshot layers, numbered.
const STAGING: &str = ".sandfleet-snapshot-";

/// The most `mount(2)` takes as its options: one page.
const OPTIONS_LIMIT: usize = 4095;

/// Which part of a snapshot layer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SnapshotPart {
    /// The workdir's files.
    Workdir,
    /// An OCI image root's files outside the workdir.
    Root,
}

/// The `part` of each of the request's snapshot layers, opened, topmost
/// first (as overlayfs stacks lower layers).
pub(crate) fn snapshot_layers(
    request: &StartRequest,
    part: SnapshotPart,
) -> Result<Vec<OwnedFd>, String> {
    let name = match part {
        SnapshotPart::Workdir => "upper",
        SnapshotPart::Root => "root",
    };
    request
        .snapshots
        .iter()
        .rev()
        .map(|layer| {
            let dir = open_dir(CWD, layer, ResolveFlags::empty())?;
            open_dir(&dir, Path::new(name), ResolveFlags::BENEATH)
        })
        .collect()
}

/// Binds each of `layers` (opened, topmost first) read-only at a staging
/// point in `root`, the root to pivot into; returns their paths as seen
/// after the pivot, in the same order.
pub(crate) fn stage(root: &Path, layers: &[OwnedFd]) -> Result<Vec<PathBuf>, String> {
    let mut staged = Vec::with_capacity(layers.len());
    for (index, layer) in layers.iter().enumerate() {
        let name = format!("{STAGING}{index}");
        rootfs::make_dir(&root.join(&name), 0o755)?;
        rootfs::bind(
            Path::new(&fd_path(layer)),
            &root.join(&name),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )?;
        staged.push(Path::new("/").join(name));
    }
    Ok(staged)
}

/// Detaches and removes the staging points [`stage`] made, once the
/// overlay that stacks them is mounted.
pub(crate) fn unstage(staged: &[PathBuf]) -> Result<(), String> {
    for path in staged {
        rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH)
            .map_err(|e| format!("detaching {}: {e}", path.display()))?;
        std::fs::remove_dir(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Opens directory `path` beneath `dir` as a path descriptor, following
/// no link (`resolve` adds to that).
pub(crate) fn open_dir(
    dir: impl AsFd,
    path: &Path,
    resolve: ResolveFlags,
) -> Result<OwnedFd, String> {
    rustix::fs::openat2(
        dir,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| format!("opening {}: {e}", path.display()))
}

/// The path of descriptor `fd`, as overlayfs is given it.
pub(crate) fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Mounts on `target` an overlay of `lowers` (topmost first) and, when
/// given, the upper and work directories; nosuid and nodev. With `xino`,
/// every file shows the overlay's device, even where the layers are on
/// different filesystems (the workdir's, over the image's view): the disk
/// limit finds a sandbox's deleted but held files by that device.
pub(crate) fn mount_overlay(
    target: &Path,
    lowers: &[String],
    upper: Option<(&str, &str)>,
    xino: bool,
) -> Result<(), String> {
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(|e| format!("fsopen overlay: {e}"))?;
    let set = |key: &str, value: &str| {
        rustix::mount::fsconfig_set_string(&fs, key, value).map_err(|e| (key.to_string(), e))
    };
    let configured = (|| {
        set("source", "sandfleet-image")?;
        for lower in lowers {
            set("lowerdir+", lower)?;
        }
        if let Some((upper, work)) = upper {
            set("upperdir", upper)?;
            set("workdir", work)?;
        }
        rustix::mount::fsconfig_set_flag(&fs, "userxattr")
            .map_err(|e| ("userxattr".to_string(), e))?;
        if xino {
            set("xino", "on")?;
        }
        rustix::mount::fsconfig_create(&fs).map_err(|e| ("create".to_string(), e))
    })();
    match configured {
        Ok(()) => {}
        // Before Linux 6.8 overlayfs has no `lowerdir+`.
        Err((key, Errno::INVAL)) if key == "lowerdir+" => {
            return legacy_overlay(target, lowers, upper, xino);
        }
        Err((key, error)) => return Err(format!("fsconfig {key}: {error}")),
    }
    let tree = rustix::mount::fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(|e| format!("fsmount overlay: {e}"))?;
    rustix::mount::move_mount(
        &tree,
        "",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| format!("mounting on {}: {e}", target.display()))
}

/// The same overlay through `mount(2)`, whose options must fit in a page.
fn legacy_overlay(
    target: &Path,
    lowers: &[String],
    upper: Option<(&str, &str)>,
    xino: bool,
) -> Result<(), String> {
    let mut options = format!("lowerdir={}", lowers.join(":"));
    if let Some((upper, work)) = upper {
        options.push_str(&format!(",upperdir={upper},workdir={work}"));
    }
    options.push_str(",userxattr");
    if xino {
        options.push_str(",xino=on");
    }
    if options.len() > OPTIONS_LIMIT {
        return Err(format!(
            "{} layers need {} bytes of mount options, more than the {OPTIONS_LIMIT} this \
             kernel takes (Linux 6.8 and later take any number)",
            lowers.len(),
            options.len()
        ));
    }
    let data = CString::new(options).map_err(|e| e.to_string())?;
    rustix::mount::mount(
        "sandfleet-image",
        target,
        "overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(data.as_c_str()),
    )
    .map_err(|e| format!("mount overlay on {}: {e}", target.display()))
}
