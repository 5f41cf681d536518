//! Sealing a sandbox's writable layer: copying what a task wrote into a
//! new directory that later sandboxes stack, read-only, under their own
//! writable layers (a snapshot's layer).
//!
//! The source is hostile: a task made every entry of it. The copy works
//! on descriptors, as `remove` does: every directory opened with
//! `O_NOFOLLOW` relative to its parent's, every file checked to be the
//! regular file that was listed before a byte of it is read, no symlink
//! followed (a link is copied as a link), so nothing outside the layer is
//! read and nothing outside the new directory is written. Only data is
//! copied, never a hole: a sparse file of a terabyte with a byte in it
//! costs a byte. What overlayfs made in the layer carries over as overlayfs
//! reads it in a lower layer: whiteouts (character devices 0/0) as
//! whiteouts, and an opaque directory's mark as `user.overlay.opaque`, the
//! name sandboxes' overlays (mounted with `userxattr`) read. Owners, modes
//! and times are kept (a byte-compiled Python file is checked against its
//! source's time); an entry the task made unreadable even to its owner
//! (`chmod 000`), which a rootless seal cannot read past as root would, is
//! lent its owner's access for the copy and given its mode back. Sockets
//! and other devices are left out. Files linked more than once within the
//! layer stay linked in the copy, their data copied once (a name the link
//! cannot be made at, in a directory the task left unreadable, gets a copy
//! of its own).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{
    AtFlags, Dir, FileType, Gid, Mode, OFlags, SeekFrom, Stat, Timespec, Timestamps, Uid,
    XattrFlags,
};
use rustix::io::Errno;

use crate::error::{IoContext, LocalError};

/// The deepest directory nesting a seal copies: it holds two descriptors
/// per level.
pub(crate) const MAX_DEPTH: usize = 200;

/// The names overlayfs marks an opaque directory with, as the mount that
/// wrote the layer may have used either.
const OPAQUE: [&CStr; 2] = [c"user.overlay.opaque", c"trusted.overlay.opaque"];

/// Copies the tree at `from` (a directory) to `to`, which must not exist;
/// returns the bytes of file data copied. On an error, `to` may hold part
/// of the copy: the caller removes it.
///
/// # Errors
///
/// [`LocalError::Rejected`] for a tree deeper than [`MAX_DEPTH`];
/// [`LocalError::Io`] naming the entry that could not be read or written.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<u64, LocalError> {
    let from_name = CString::new(from.as_os_str().as_encoded_bytes())
        .map_err(|_| LocalError::Rejected(format!("{} holds a NUL", from.display())))?;
    let top = rustix::fs::statat(rustix::fs::CWD, &from_name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(io::Error::from)
        .context(|| format!("reading {}", from.display()))?;
    let (source, lent) = open_lending(rustix::fs::CWD, &from_name, &top, Lend::Dir)
        .map_err(io::Error::from)
        .context(|| format!("opening {}", from.display()))?;
    if !same_file(&rustix::fs::fstat(&source), &top) {
        return Err(LocalError::Rejected(format!(
            "{} is not the directory that was listed",
            from.display()
        )));
    }
    let (parent, name) = match (to.parent(), to.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        _ => {
            return Err(LocalError::Rejected(format!(
                "{} names no entry of a directory",
                to.display()
            )));
        }
    };
    let parent = open_dir(rustix::fs::CWD, parent.as_os_str().as_encoded_bytes())
        .map_err(io::Error::from)
        .context(|| format!("opening {}", parent.display()))?;
    let name = CString::new(name.as_encoded_bytes())
        .map_err(|_| LocalError::Rejected(format!("{} holds a NUL", to.display())))?;
    let target = make_dir(&parent, &name)
        .map_err(io::Error::from)
        .context(|| format!("creating {}", to.display()))?;
    let root = open_dir(&parent, name.to_bytes())
        .map_err(io::Error::from)
        .context(|| format!("opening {}", to.display()))?;
    let mut copy = Copy {
        bytes: 0,
        from,
        path: Vec::new(),
        root,
        linked: HashMap::new(),
    };
    copy.tree(source, lent, target, &top)?;
    Ok(copy.bytes)
}

/// A directory being copied, with the entries of it still to copy.
struct Frame {
    source: OwnedFd,
    /// The mode the source had, where the seal lent its owner the right to
    /// enter it: given back when the frame is done with, even on an error.
    lent: Option<Mode>,
    target: OwnedFd,
    stat: Stat,
    pending: Vec<CString>,
}

impl Drop for Frame {
    fn drop(&mut self) {
        if let Some(mode) = self.lent {
            let _ = rustix::fs::fchmod(&self.source, mode);
        }
    }
}

struct Copy<'a> {
    bytes: u64,
    from: &'a Path,
    /// The names leading to the directory being copied, for errors and
    /// links.
    path: Vec<CString>,
    /// The copy's top directory.
    root: OwnedFd,
    /// Files of more than one link copied so far, by the source's device
    /// and inode: their copy's path from `root`.
    linked: HashMap<(u64, u64), CString>,
}

impl Copy<'_> {
    fn tree(
        &mut self,
        source: OwnedFd,
        lent: Option<Mode>,
        target: OwnedFd,
        top: &Stat,
    ) -> Result<(), LocalError> {
        let pending = self.entries(&source)?;
        let mut frames = vec![Frame {
            source,
            lent,
            target,
            stat: *top,
            pending,
        }];
        while let Some(frame) = frames.last_mut() {
            let Some(name) = frame.pending.pop() else {
                let done = frames.pop().expect("a frame is on the stack");
                self.finish_dir(&done.source, &done.target, &done.stat)?;
                self.path.pop();
                continue;
            };
            let stat = rustix::fs::statat(&frame.source, &name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| self.error(&name, "reading", e))?;
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => {
                    if frames.len() >= MAX_DEPTH {
                        return Err(LocalError::Rejected(format!(
                            "{} nests directories deeper than {MAX_DEPTH}",
                            self.from.display()
                        )));
                    }
                    let frame = frames.last().expect("a frame is on the stack");
                    let (source, lent) = open_lending(&frame.source, &name, &stat, Lend::Dir)
                        .map_err(|e| self.error(&name, "opening", e))?;
                    if !same_file(&rustix::fs::fstat(&source), &stat) {
                        return Err(self.error(&name, "opening", Errno::NOTDIR));
                    }
                    let target = make_dir(&frame.target, &name)
                        .map_err(|e| self.error(&name, "creating", e))?;
                    let pending = self.entries(&source)?;
                    self.path.push(name);
                    frames.push(Frame {
                        source,
                        lent,
                        target,
                        stat,
                        pending,
                    });
                }
                kind => {
                    let frame = frames.last().expect("a frame is on the stack");
                    if self.link(&frame.target, &name, &stat, kind) {
                        continue;
                    }
                    self.entry(&frame.source, &frame.target, &name, &stat, kind)
                        .map_err(|e| self.error(&name, "copying", e))?;
                    if kind == FileType::RegularFile && stat.st_nlink > 1 {
                        let path = self.path_of(&name);
                        self.linked.insert((stat.st_dev, stat.st_ino), path);
                    }
                }
            }
        }
        Ok(())
    }

    /// Links `name` in `target` to the copy of the file `stat` describes
    /// when another name of it was copied already; says whether it did.
    fn link(&self, target: &OwnedFd, name: &CStr, stat: &Stat, kind: FileType) -> bool {
        if kind != FileType::RegularFile || stat.st_nlink < 2 {
            return false;
        }
        let Some(first) = self.linked.get(&(stat.st_dev, stat.st_ino)) else {
            return false;
        };
        rustix::fs::linkat(&self.root, first, target, name, AtFlags::empty()).is_ok()
    }

    /// The path of entry `name` of the directory being copied, from the
    /// copy's top.
    fn path_of(&self, name: &CStr) -> CString {
        let mut path = Vec::new();
        for part in self.path.iter().map(|p| p.as_c_str()).chain([name]) {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(part.to_bytes());
        }
        CString::new(path).expect("names hold no NUL")
    }

    /// The names in directory `dir`, but `.` and `..`.
    fn entries(&self, dir: &OwnedFd) -> Result<Vec<CString>, LocalError> {
        let listed = (|| {
            let mut names = Vec::new();
            for entry in Dir::read_from(dir)? {
                let name = entry?.file_name().to_owned();
                if name.to_bytes() != b"." && name.to_bytes() != b".." {
                    names.push(name);
                }
            }
            Ok(names)
        })();
        listed.map_err(|e: Errno| self.error(c".", "listing", e))
    }

    /// Copies one entry that is not a directory.
    fn entry(
        &mut self,
        dir: &OwnedFd,
        target: &OwnedFd,
        name: &CStr,
        stat: &Stat,
        kind: FileType,
    ) -> rustix::io::Result<()> {
        let mode = Mode::from_raw_mode(stat.st_mode & 0o7777);
        match kind {
            FileType::RegularFile => {
                let (file, lent) = open_lending(dir, name, stat, Lend::File)?;
                if let Some(mode) = lent {
                    // Read access is checked at the open alone.
                    rustix::fs::fchmod(&file, mode)?;
                }
                if !same_file(&rustix::fs::fstat(&file), stat) {
                    // It was replaced between the listing and the open.
                    return Err(Errno::STALE);
                }
                let copy = rustix::fs::openat(
                    target,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
                    Mode::from_raw_mode(0o600),
                )?;
                self.bytes += copy_data(&file, &copy, stat.st_size as u64)?;
                rustix::fs::fchown(&copy, owner(stat), group(stat))?;
                rustix::fs::fchmod(&copy, mode)?;
                rustix::fs::futimens(&copy, &times(stat))
            }
            FileType::Symlink => {
                let link = rustix::fs::readlinkat(dir, name, Vec::new())?;
                rustix::fs::symlinkat(&link, target, name)?;
                self.finish_entry(target, name, stat)
            }
            FileType::CharacterDevice if stat.st_rdev == 0 => {
                // A whiteout: the file is deleted from the layers below.
                rustix::fs::mknodat(target, name, FileType::CharacterDevice, mode, 0)?;
                self.finish_entry(target, name, stat)
            }
            FileType::Fifo => {
                rustix::fs::mknodat(target, name, FileType::Fifo, mode, 0)?;
                self.finish_entry(target, name, stat)
            }
            _ => Ok(()),
        }
    }

    /// Sets the owner and times of entry `name` (never following it).
    fn finish_entry(&self, target: &OwnedFd, name: &CStr, stat: &Stat) -> rustix::io::Result<()> {
        rustix::fs::chownat(
            target,
            name,
            owner(stat),
            group(stat),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
        rustix::fs::utimensat(target, name, &times(stat), AtFlags::SYMLINK_NOFOLLOW)
    }

    /// Gives a copied directory its source's opaque mark, owner, mode and
    /// times, once everything in it is copied (which changed its time).
    fn finish_dir(
        &self,
        source: &OwnedFd,
        target: &OwnedFd,
        stat: &Stat,
    ) -> Result<(), LocalError> {
        let finished = (|| {
            if is_opaque(source) {
                rustix::fs::fsetxattr(target, OPAQUE[0], b"y", XattrFlags::empty())?;
            }
            rustix::fs::fchown(target, owner(stat), group(stat))?;
            rustix::fs::fchmod(target, Mode::from_raw_mode(stat.st_mode & 0o7777))?;
            rustix::fs::futimens(target, &times(stat))
        })();
        finished.map_err(|e| self.error(c".", "finishing", e))
    }

    fn error(&self, name: &CStr, doing: &str, error: Errno) -> LocalError {
        let mut path = self.from.to_path_buf();
        for part in self.path.iter().map(|p| p.as_c_str()).chain([name]) {
            path.push(String::from_utf8_lossy(part.to_bytes()).as_ref());
        }
        LocalError::Io {
            context: format!("sealing a sandbox's layer: {doing} {}", path.display()),
            source: io::Error::from(error),
        }
    }
}

/// Copies the data of `from` (`size` bytes) to `to`, skipping holes: only
/// the ranges `SEEK_DATA` finds are copied, and the size is set after.
fn copy_data(from: &OwnedFd, to: &OwnedFd, size: u64) -> rustix::io::Result<u64> {
    let mut copied = 0;
    let mut at = 0u64;
    while at < size {
        let data = match rustix::fs::seek(from, SeekFrom::Data(at)) {
            Ok(data) => data,
            // No data after `at`: the rest is a hole.
            Err(Errno::NXIO) => break,
            Err(error) => return Err(error),
        };
        let hole = rustix::fs::seek(from, SeekFrom::Hole(data))?.min(size);
        let (mut read_at, mut write_at) = (data, data);
        while read_at < hole {
            let want = usize::try_from(hole - read_at).unwrap_or(usize::MAX);
            let moved = rustix::fs::copy_file_range(
                from,
                Some(&mut read_at),
                to,
                Some(&mut write_at),
                want,
            )?;
            if moved == 0 {
                // The file shrank under the copy: what was read is kept.
                break;
            }
            copied += moved as u64;
        }
        at = hole;
    }
    rustix::fs::ftruncate(to, size)?;
    Ok(copied)
}

fn is_opaque(dir: &OwnedFd) -> bool {
    OPAQUE.iter().any(|name| {
        let mut value = [0u8; 1];
        matches!(rustix::fs::fgetxattr(dir, *name, &mut value), Ok(1) if value[0] == b'y')
    })
}

/// What the owner of an entry it must read is lent.
#[derive(Clone, Copy)]
enum Lend {
    /// Listing it and looking names up in it.
    Dir,
    /// Reading it.
    File,
}

/// Opens entry `name` of `dir`, listed as `stat`, to read. Where its mode
/// keeps out even its owner (a task's `chmod 000`, which only root's
/// `CAP_DAC_READ_SEARCH` reads past, and a rootless seal runs as the
/// owner, not as root), the owner is lent the access first, and the mode
/// to give back is answered. The sandbox is frozen while it is sealed, so
/// nothing swaps the listed entry for a link between the look and the
/// change.
fn open_lending(
    dir: impl std::os::fd::AsFd,
    name: &CStr,
    stat: &Stat,
    lend: Lend,
) -> rustix::io::Result<(OwnedFd, Option<Mode>)> {
    let open = || match lend {
        Lend::Dir => open_dir(&dir, name.to_bytes()),
        Lend::File => rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ),
    };
    match open() {
        Err(Errno::ACCESS) if stat.st_uid == rustix::process::geteuid().as_raw() => {
            let mode = stat.st_mode & 0o7777;
            let access = match lend {
                Lend::Dir => 0o500,
                Lend::File => 0o400,
            };
            let original = Mode::from_raw_mode(mode);
            rustix::fs::chmodat(
                &dir,
                name,
                Mode::from_raw_mode(mode | access),
                AtFlags::empty(),
            )?;
            match open() {
                Ok(fd) => Ok((fd, Some(original))),
                Err(error) => {
                    let _ = rustix::fs::chmodat(&dir, name, original, AtFlags::empty());
                    Err(error)
                }
            }
        }
        opened => opened.map(|fd| (fd, None)),
    }
}

fn open_dir(dir: impl std::os::fd::AsFd, name: &[u8]) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Makes directory `name` in `dir`, private until it is finished, and
/// opens it.
fn make_dir(dir: &OwnedFd, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
    open_dir(dir, name.to_bytes())
}

/// Whether what was opened is what was listed.
fn same_file(opened: &rustix::io::Result<Stat>, listed: &Stat) -> bool {
    opened
        .as_ref()
        .is_ok_and(|stat| stat.st_dev == listed.st_dev && stat.st_ino == listed.st_ino)
}

fn owner(stat: &Stat) -> Option<Uid> {
    Some(Uid::from_raw(stat.st_uid))
}

fn group(stat: &Stat) -> Option<Gid> {
    Some(Gid::from_raw(stat.st_gid))
}

fn times(stat: &Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: stat.st_atime,
            tv_nsec: stat.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: stat.st_mtime,
            tv_nsec: stat.st_mtime_nsec as _,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, symlink};

    use super::*;

    #[test]
    fn links_are_copied_as_links_and_what_they_point_at_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret"), "host secret").unwrap();
        let layer = dir.path().join("layer");
        fs::create_dir(&layer).unwrap();
        symlink(outside.join("secret"), layer.join("to-file")).unwrap();
        symlink(&outside, layer.join("to-dir")).unwrap();

        let sealed = dir.path().join("sealed");
        assert_eq!(copy_tree(&layer, &sealed).unwrap(), 0);

        for name in ["to-file", "to-dir"] {
            let meta = fs::symlink_metadata(sealed.join(name)).unwrap();
            assert!(meta.file_type().is_symlink(), "{name}");
        }
        assert_eq!(
            fs::read_link(sealed.join("to-file")).unwrap(),
            outside.join("secret")
        );
        assert_eq!(fs::read_dir(&sealed).unwrap().count(), 2);
    }

    #[test]
    fn only_data_is_copied_never_a_hole() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        fs::create_dir(&layer).unwrap();
        let sparse = fs::File::create(layer.join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        std::os::unix::fs::FileExt::write_at(&sparse, b"end", (1 << 40) - 3).unwrap();
        drop(sparse);
        fs::write(layer.join("dense"), vec![7u8; 100_000]).unwrap();

        let sealed = dir.path().join("sealed");
        let copied = copy_tree(&layer, &sealed).unwrap();

        assert!((100_003..200_000).contains(&copied), "{copied}");
        let meta = fs::metadata(sealed.join("sparse")).unwrap();
        assert_eq!(meta.len(), 1 << 40);
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        assert_eq!(fs::read(sealed.join("dense")).unwrap(), vec![7u8; 100_000]);
    }

    #[test]
    fn whiteouts_opaque_marks_fifos_modes_and_times_carry_over() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        fs::create_dir_all(layer.join("opaque/inner")).unwrap();
        rustix::fs::setxattr(
            layer.join("opaque"),
            "user.overlay.opaque",
            b"y",
            XattrFlags::empty(),
        )
        .unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            layer.join("deleted"),
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o000),
            0,
        )
        .unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            layer.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
        fs::write(layer.join("script"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(
            layer.join("script"),
            std::os::unix::fs::PermissionsExt::from_mode(0o751),
        )
        .unwrap();
        let old = Timestamps {
            last_access: Timespec {
                tv_sec: 1_000_000,
                tv_nsec: 0,
            },
            last_modification: Timespec {
                tv_sec: 1_234_567,
                tv_nsec: 89,
            },
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            layer.join("script"),
            &old,
            AtFlags::empty(),
        )
        .unwrap();

        let sealed = dir.path().join("sealed");
        copy_tree(&layer, &sealed).unwrap();

        let whiteout = fs::symlink_metadata(sealed.join("deleted")).unwrap();
        assert!(whiteout.file_type().is_char_device() && whiteout.rdev() == 0);
        let mut mark = [0u8; 4];
        let read = rustix::fs::getxattr(sealed.join("opaque"), "user.overlay.opaque", &mut mark);
        assert_eq!(read.map(|n| &mark[..n]), Ok(&b"y"[..]));
        assert!(sealed.join("opaque/inner").is_dir());
        let fifo = fs::symlink_metadata(sealed.join("fifo")).unwrap();
        assert!(fifo.file_type().is_fifo());
        assert_eq!(fifo.mode() & 0o7777, 0o640);
        let script = fs::metadata(sealed.join("script")).unwrap();
        assert_eq!(script.mode() & 0o7777, 0o751);
        assert_eq!((script.mtime(), script.mtime_nsec()), (1_234_567, 89));
    }

    #[test]
    fn files_linked_twice_stay_linked_and_their_data_is_copied_once() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        fs::create_dir_all(layer.join("a/deep")).unwrap();
        fs::create_dir(layer.join("b")).unwrap();
        fs::write(layer.join("a/deep/data"), vec![1u8; 50_000]).unwrap();
        fs::hard_link(layer.join("a/deep/data"), layer.join("b/again")).unwrap();
        fs::hard_link(layer.join("a/deep/data"), layer.join("top")).unwrap();
        fs::write(layer.join("single"), "one").unwrap();

        let sealed = dir.path().join("sealed");
        let copied = copy_tree(&layer, &sealed).unwrap();

        assert_eq!(
            copied, 50_003,
            "the linked file's data was copied more than once"
        );
        let first = fs::metadata(sealed.join("a/deep/data")).unwrap();
        assert_eq!(first.nlink(), 3);
        for name in ["b/again", "top"] {
            let other = fs::metadata(sealed.join(name)).unwrap();
            assert_eq!(other.ino(), first.ino(), "{name}");
        }
        assert_eq!(fs::metadata(sealed.join("single")).unwrap().nlink(), 1);
    }

    #[test]
    fn a_tree_deeper_than_the_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        let mut deep = layer.clone();
        for _ in 0..MAX_DEPTH + 1 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        let error = copy_tree(&layer, &dir.path().join("sealed")).unwrap_err();
        assert!(matches!(error, LocalError::Rejected(_)), "{error}");
        assert!(error.to_string().contains("deeper than 200"), "{error}");
    }
}
