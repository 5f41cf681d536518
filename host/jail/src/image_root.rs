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

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MoveMountFlags, UnmountFlags,
};

use crate::protocol::{StartRequest, WorkdirMode};
use crate::rootfs::{self, LAYER};
use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID};

/// Staging mount point of the image's read-only view, the lower layer of
/// the workdir's overlay; detached once that overlay is made.
const IMAGE_VIEW: &str = ".sandfleet-image";

/// The most `mount(2)` takes as its options: one page.
const OPTIONS_LIMIT: usize = 4095;

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
    let mut lowers = Vec::with_capacity(layers.len() + 1);
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
    drop((lowers, upper, work, empty, store, sandbox_layer));
    let resolv = (!request.own_network)
        .then(|| fs::read("/etc/resolv.conf").ok())
        .flatten();
    rootfs::pivot_into(&root)?;
    write_identity(&request.hostname, resolv.as_deref())?;
    make_workdir(&request.workdir)?;
    rootfs::make_tmp()?;
    for staging in [IMAGE_VIEW, LAYER] {
        let path = Path::new("/").join(staging);
        rustix::mount::unmount(&path, UnmountFlags::DETACH)
            .map_err(|e| format!("detaching {}: {e}", path.display()))?;
        fs::remove_dir(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    Ok(WorkdirMode::Overlay)
}

/// Opens directory `path` beneath `dir` as a path descriptor, following
/// no link (`resolve` adds to that).
fn open_dir(dir: impl AsFd, path: &Path, resolve: ResolveFlags) -> Result<OwnedFd, String> {
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
fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Mounts on `target` an overlay of `lowers` (topmost first) and, when
/// given, the upper and work directories; nosuid and nodev. With `xino`,
/// every file shows the overlay's device, even where the layers are on
/// different filesystems (the workdir's, over the image's view): the disk
/// limit finds a sandbox's deleted but held files by that device.
fn mount_overlay(
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
/// image has none) under the layer's `upper`.
fn make_workdir(workdir: &str) -> Result<(), String> {
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
    mount_overlay(
        target,
        &[fd_path(&lower)],
        Some((
            &layer.join("upper").display().to_string(),
            &layer.join("work").display().to_string(),
        )),
        true,
    )
    .map_err(|e| format!("mounting the workdir {workdir}: {e}"))
}
