//! Volumes: host directories mounted into a sandbox at paths its image
//! chooses nothing about.
//!
//! Each source is cloned as a detached mount before the pivot, while host
//! paths can still be named, with its attributes (`nosuid`, `nodev`, and
//! `ro` when asked) set before it is visible anywhere. After the pivot,
//! once the sandbox's own mounts are in place, each is attached to a mount
//! point made one component at a time beneath the sandbox's root, never
//! through a link: an image that puts a link or a file on the path gets an
//! error naming it, not a mount somewhere else. Only the init runs in the
//! sandbox then, so nothing inside can change the path between the checks
//! and the mount.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use crate::protocol::Volume;
use crate::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// A volume's source, cloned and not yet attached.
pub(crate) struct Detached {
    tree: OwnedFd,
    target: String,
}

/// Clones every source (run before the pivot).
pub(crate) fn detach(volumes: &[Volume]) -> Result<Vec<Detached>, String> {
    volumes
        .iter()
        .map(|volume| {
            let tree = rustix::mount::open_tree(
                CWD,
                &volume.source,
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE,
            )
            .map_err(|e| format!("volume {}: open_tree: {e}", volume.source.display()))?;
            let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if volume.read_only {
                attrs |= MOUNT_ATTR_RDONLY;
            }
            sys::set_tree_attributes(tree.as_fd(), attrs)
                .map_err(|e| format!("volume {}: mount_setattr: {e}", volume.source.display()))?;
            Ok(Detached {
                tree,
                target: volume.target.clone(),
            })
        })
        .collect()
}

/// Attaches each volume at its mount point in the sandbox (run after the
/// pivot, in the sandbox's root).
pub(crate) fn attach(volumes: Vec<Detached>) -> Result<(), String> {
    for volume in volumes {
        let point = mount_point(&volume.target)?;
        rustix::mount::move_mount(
            &volume.tree,
            "",
            &point,
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(|e| format!("mounting the volume on {}: {e}", volume.target))?;
    }
    Ok(())
}

/// Opens `target`, making each missing directory on the way, beneath `/`
/// and through no link.
fn mount_point(target: &str) -> Result<OwnedFd, String> {
    let mut dir = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("volume mount point {target}: opening /: {e}"))?;
    let mut reached = String::new();
    for component in Path::new(target).components() {
        let Component::Normal(name) = component else {
            continue;
        };
        reached.push('/');
        reached.push_str(&name.to_string_lossy());
        let next = match open_beneath(&dir, Path::new(name)) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(error) => {
                        return Err(format!(
                            "volume mount point {target}: creating {reached}: {error}"
                        ));
                    }
                }
                open_beneath(&dir, Path::new(name))
            }
            other => other,
        };
        dir = next.map_err(|error| match error {
            Errno::LOOP | Errno::NOTDIR | Errno::XDEV => format!(
                "volume mount point {target}: {reached} is not a directory reached without links \
                 in the image"
            ),
            error => format!("volume mount point {target}: {reached}: {error}"),
        })?;
    }
    Ok(dir)
}

fn open_beneath(dir: impl AsFd, path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        dir,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}
