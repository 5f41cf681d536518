//! File system steps that stay inside a directory given as a file
//! descriptor: resolving a path beneath it (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, so neither `..`, an absolute
//! symlink nor a symlink leading out can take a write elsewhere), and
//! removing a tree without following its symlinks (the trees are layers
//! whose content an image's author chose).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How every path beneath a layer's root is resolved.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// Opens the directory `path` beneath `root` for use as a `*at` anchor.
pub(crate) fn open_dir_beneath(root: BorrowedFd<'_>, path: &Path) -> rustix::io::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    rustix::fs::openat2(
        root,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
}

/// Opens the directory `path` beneath `root` for reading and metadata
/// (xattrs, modes), refusing symlinks anywhere on the way: used to revisit
/// a directory the layer created, which must still be one.
pub(crate) fn open_real_dir(root: BorrowedFd<'_>, path: &Path) -> rustix::io::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        BENEATH | ResolveFlags::NO_SYMLINKS,
    )
}

/// The type of `name` in `dir`, not following a symlink; `None` when
/// there is nothing there.
pub(crate) fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<Option<FileType>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `name` from `dir` whatever it is, a directory with everything
/// in it; nothing there is fine.
pub(crate) fn remove_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    match kind_at(dir, name)? {
        None => Ok(()),
        Some(FileType::Directory) => remove_tree_at(dir, name),
        Some(_) => Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
    }
}

/// Removes the directory `name` of `dir` and everything in it, never
/// following a symlink. A directory the caller may not read or write
/// (a layer's `0500` or `0000` directory, unpacked by an unprivileged
/// caller who owns it) is opened up first.
pub(crate) fn remove_tree_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let open = || {
        rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let fd = match open() {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ACCESS) => {
            // It is a directory (NOFOLLOW would have said ENOTDIR or
            // ELOOP otherwise), so the chmod reaches no symlink target.
            rustix::fs::chmodat(dir, name, Mode::RWXU, AtFlags::empty())?;
            open()?
        }
        Err(e) => return Err(e.into()),
    };
    // Entries are removed only after they are all listed: removing while
    // reading a directory stream may skip some.
    make_writable(fd.as_fd())?;
    let mut children = Vec::new();
    for entry in Dir::read_from(&fd)? {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            children.push((child.to_vec(), entry.file_type()));
        }
    }
    for (child, kind) in children {
        let child = OsStr::from_bytes(&child);
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::Unknown => kind_at(fd.as_fd(), child)? == Some(FileType::Directory),
            _ => false,
        };
        if is_dir {
            remove_tree_at(fd.as_fd(), child)?;
        } else {
            match rustix::fs::unlinkat(&fd, child, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    drop(fd);
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Adds the owner's write and search bits to a directory that lacks them.
fn make_writable(fd: BorrowedFd<'_>) -> io::Result<()> {
    let stat = rustix::fs::fstat(fd)?;
    let mode = Mode::from_raw_mode(stat.st_mode) & Mode::from_raw_mode(0o7777);
    if !mode.contains(Mode::WUSR | Mode::XUSR) {
        rustix::fs::fchmod(fd, mode | Mode::RWXU)?;
    }
    Ok(())
}

/// Removes the tree at `path` (a store directory, not a layer's content)
/// with [`remove_tree_at`].
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no parent"));
    };
    let parent = match rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    remove_tree_at(parent.as_fd(), name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    #[test]
    fn removes_locked_trees_without_following_symlinks() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), "y").unwrap();
        symlink(outside.path(), tree.join("a/out")).unwrap();
        std::fs::set_permissions(tree.join("a/b"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(tree.join("a"), std::fs::Permissions::from_mode(0o000)).unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(outside.path().join("keep").exists());
        remove_tree(&tree).unwrap();
    }

    #[test]
    fn paths_do_not_resolve_outside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("in")).unwrap();
        symlink("/etc", root.join("abs")).unwrap();
        symlink("../..", root.join("up")).unwrap();
        symlink("in", root.join("rel")).unwrap();
        let fd = rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert!(open_dir_beneath(fd.as_fd(), Path::new("rel")).is_ok());
        assert_eq!(
            open_dir_beneath(fd.as_fd(), Path::new("abs")).unwrap_err(),
            Errno::XDEV
        );
        assert_eq!(
            open_dir_beneath(fd.as_fd(), Path::new("up")).unwrap_err(),
            Errno::XDEV
        );
        assert_eq!(
            open_dir_beneath(fd.as_fd(), Path::new("in/../..")).unwrap_err(),
            Errno::XDEV
        );
        assert!(open_real_dir(fd.as_fd(), Path::new("rel")).is_err());
    }
}
