//! Removing what sandboxes wrote, from the host, without ever leaving the
//! directory being removed.
//!
//! A sandbox's directory holds whatever its tasks made: symlinks to host
//! paths, directories nested deeper than any path may be long, directories
//! no one may enter (overlayfs leaves its work directory mode 000). The
//! removal names its target by one checked component beneath a directory
//! the backend made, and works on descriptors from there down: every
//! directory is opened with `O_NOFOLLOW` relative to its parent's
//! descriptor, every entry unlinked relative to its directory's, so no
//! symlink is followed and no path is resolved twice. It climbs back up
//! through `..`, checked against the directory it came from, holding two
//! descriptors at a time whatever the depth.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{IoContext, LocalError};

/// Removes `parent/name` (a file, or a directory and everything in it);
/// true when it existed. `name` must be one plain component: no `/`, not
/// `.` or `..`, not empty. Nothing outside `parent/name` is touched, even
/// when the tree holds symlinks.
///
/// # Errors
///
/// A `name` that is not one plain component; `parent` not a directory (a
/// symlink to one included); an entry that cannot be removed, or a tree
/// that changed under the removal.
pub(crate) fn remove_beneath(parent: &Path, name: &str) -> Result<bool, LocalError> {
    let context = || format!("removing {}", parent.join(name).display());
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(LocalError::Rejected(format!(
            "`{name}` is not a name of one entry of {}",
            parent.display()
        )));
    }
    let parent_fd = match open_dir(rustix::fs::CWD, parent.as_os_str()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(false),
        Err(error) => return Err(io::Error::from(error)).context(context),
    };
    let name = CString::new(name).expect("checked for NUL");
    match remove_entry(&parent_fd, &name) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(error) => Err(io::Error::from(error)).context(context),
    }
}

/// Removes the tree at `path` beneath its parent, as [`remove_beneath`]
/// does; true when it existed.
///
/// # Errors
///
/// As [`remove_beneath`]'s; also a path with no last component.
pub fn remove_tree(path: &Path) -> Result<bool, LocalError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(OsStr::to_str))
    else {
        return Err(LocalError::Rejected(format!(
            "{} names no entry of a directory",
            path.display()
        )));
    };
    remove_beneath(parent, name)
}

/// Opens directory `name` of `dir`, refusing a symlink.
fn open_dir(dir: impl std::os::fd::AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Device and inode: what a directory reached again through `..` must be.
fn identity(fd: &OwnedFd) -> rustix::io::Result<(u64, u64)> {
    let stat = rustix::fs::fstat(fd)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// Opens directory `name` of `dir`; where it may not be entered (mode
/// 000), makes it the owner's to enter first. Only a real directory is
/// changed: it is checked without following a link, and only its owner
/// (or root, who needs no change) can change it.
fn enter(dir: &OwnedFd, name: &CStr) -> rustix::io::Result<OwnedFd> {
    match open_dir(dir, OsStr::from_bytes(name.to_bytes())) {
        Err(Errno::ACCESS) => {
            let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
                return Err(Errno::NOTDIR);
            }
            rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
            open_dir(dir, OsStr::from_bytes(name.to_bytes()))
        }
        opened => opened,
    }
}

/// Removes entry `name` of `dir`: unlinks a non-directory, or empties a
/// directory depth first and removes it.
fn remove_entry(dir: &OwnedFd, name: &CStr) -> rustix::io::Result<()> {
    let top = match enter(dir, name) {
        Ok(fd) => fd,
        // A file, a symlink (never followed) or anything else that is not
        // a directory.
        Err(Errno::NOTDIR | Errno::LOOP) => {
            return rustix::fs::unlinkat(dir, name, AtFlags::empty());
        }
        Err(error) => return Err(error),
    };
    // The directories entered below `top`, outermost first.
    let mut entered: Vec<Entered> = Vec::new();
    let mut current = top;
    let mut pending = empty_but_subdirectories(&current)?;
    loop {
        if let Some(child_name) = pending.pop() {
            let child = enter(&current, &child_name)?;
            entered.push(Entered {
                name: child_name,
                parent: identity(&current)?,
                siblings: pending,
            });
            current = child;
            pending = empty_but_subdirectories(&current)?;
            continue;
        }
        let Some(done) = entered.pop() else {
            break;
        };
        let parent = open_dir(&current, OsStr::new(".."))?;
        if identity(&parent)? != done.parent {
            // Moved while it was being removed: nothing a removal of a
            // dead sandbox's tree should ever see.
            return Err(Errno::STALE);
        }
        rustix::fs::unlinkat(&parent, &done.name, AtFlags::REMOVEDIR)?;
        current = parent;
        pending = done.siblings;
    }
    drop(current);
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// A directory the removal is inside of.
struct Entered {
    /// Its name in its parent.
    name: CString,
    /// Its parent's identity, checked when `..` leads back there.
    parent: (u64, u64),
    /// Its parent's subdirectories still to remove.
    siblings: Vec<CString>,
}

/// Unlinks every entry of `dir` that is not a directory and returns the
/// names of those that are.
fn empty_but_subdirectories(dir: &OwnedFd) -> rustix::io::Result<Vec<CString>> {
    let mut subdirectories = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let file_type = match entry.file_type() {
            FileType::Unknown => {
                let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                FileType::from_raw_mode(stat.st_mode)
            }
            known => known,
        };
        if file_type == FileType::Directory {
            subdirectories.push(name.to_owned());
        } else {
            match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(subdirectories)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    #[test]
    fn a_tree_goes_and_what_its_links_point_at_stays() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), "host").unwrap();
        let base = tempfile::tempdir().unwrap();
        let tree = base.path().join("sb-1");
        fs::create_dir_all(tree.join("a/b")).unwrap();
        fs::write(tree.join("a/b/file"), "x").unwrap();
        symlink(outside.path(), tree.join("a/to-host")).unwrap();
        symlink(outside.path().join("keep"), tree.join("to-file")).unwrap();
        // Overlayfs's work directory: mode 000.
        fs::create_dir_all(tree.join("work/work")).unwrap();
        fs::set_permissions(tree.join("work/work"), fs::Permissions::from_mode(0o000)).unwrap();
        assert!(remove_beneath(base.path(), "sb-1").unwrap());
        assert!(!tree.exists());
        assert_eq!(
            fs::read_to_string(outside.path().join("keep")).unwrap(),
            "host"
        );
        assert!(!remove_beneath(base.path(), "sb-1").unwrap());
    }

    #[test]
    fn a_symlink_named_for_removal_is_removed_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), "host").unwrap();
        let base = tempfile::tempdir().unwrap();
        symlink(outside.path(), base.path().join("sb-2")).unwrap();
        assert!(remove_beneath(base.path(), "sb-2").unwrap());
        assert!(outside.path().join("keep").exists());
    }

    #[test]
    fn names_that_leave_the_parent_are_refused() {
        let base = tempfile::tempdir().unwrap();
        for name in ["", ".", "..", "../x", "/etc", "a/b", "a\0b"] {
            let error = remove_beneath(base.path(), name).unwrap_err().to_string();
            assert!(
                error.contains("is not a name of one entry"),
                "{name:?}: {error}"
            );
        }
    }

    #[test]
    fn a_parent_that_is_a_symlink_is_refused() {
        let real = tempfile::tempdir().unwrap();
        fs::create_dir(real.path().join("sb-3")).unwrap();
        let base = tempfile::tempdir().unwrap();
        symlink(real.path(), base.path().join("sandboxes")).unwrap();
        assert!(remove_beneath(&base.path().join("sandboxes"), "sb-3").is_err());
        assert!(real.path().join("sb-3").exists());
    }

    #[test]
    fn a_tree_deeper_than_any_path_is_removed() {
        let base = tempfile::tempdir().unwrap();
        let top = base.path().join("deep");
        fs::create_dir(&top).unwrap();
        // 3,000 levels of `dddddddd/` is 27,000 bytes: no path reaches the
        // bottom, so the levels are made relative to each other.
        let mut dir = rustix::fs::open(&top, OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..3000 {
            rustix::fs::mkdirat(&dir, "dddddddd", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_dir(&dir, OsStr::new("dddddddd")).unwrap();
        }
        rustix::fs::openat(
            &dir,
            "leaf",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(dir);
        assert!(remove_beneath(base.path(), "deep").unwrap());
        assert!(!top.exists());
    }
}
