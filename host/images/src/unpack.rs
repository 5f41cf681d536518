//! Unpacking one layer tar into a directory that overlayfs can use as a
//! lower layer, without ever writing outside it.
//!
//! - Every path is cleaned lexically (a leading `/` or `./` dropped, `a/..`
//!   folded); a path whose `..` climbs above the layer is refused.
//! - Parents are resolved beneath the layer's root with `openat2`
//!   (`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`): a symlink of the layer
//!   may be followed while it stays inside, and a path through an absolute
//!   symlink or one leading out fails (`EXDEV`) and refuses the layer.
//!   Docker's chrooted extraction would rebase such a path into the layer
//!   instead; no image builder writes one.
//! - The last component is created with `*at` calls relative to its
//!   parent's descriptor, never followed (`O_EXCL | O_NOFOLLOW`, `linkat`
//!   without `AT_SYMLINK_FOLLOW`); whatever an earlier entry left at that
//!   name is removed first (later entries win, as in tar).
//! - Hard links must name an entry of the same layer, resolved the same
//!   way.
//! - Whiteouts: `.wh.NAME` becomes a 0/0 character device `NAME`
//!   (allowed without `CAP_MKNOD` since Linux 5.8); `.wh..wh..opq` marks
//!   its directory opaque with `user.overlay.opaque=y` (what overlayfs
//!   reads when mounted with `userxattr` in a user namespace) and, as
//!   root, `trusted.overlay.opaque=y` too (what a mount without `userxattr`
//!   reads). Other `.wh..wh.` entries (aufs bookkeeping) are skipped.
//! - Modes (set-id bits included: the sandboxes' mounts are `nosuid`),
//!   mtimes, symlinks, FIFOs; device nodes are skipped; extended
//!   attributes from PAX headers (file capabilities, SELinux labels) are
//!   not applied.
//! - Owners through [`Ownership`]. Directories are created owner-writable
//!   and get their modes and mtimes at the end, deepest first, so a
//!   `0555` directory can still be filled and keeps its mtime.
//! - Limits on entries and bytes bound what a hostile layer can cost.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;
use tar::EntryType;

use crate::digest::Digest;
use crate::error::Error;
use crate::fsx;
use crate::ownership::Ownership;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// Bounds on what one layer may hold.
#[derive(Clone, Copy, Debug)]
pub struct UnpackLimits {
    /// Entries (files, directories, links, whiteouts).
    pub max_entries: u64,
    /// Bytes of regular file content.
    pub max_bytes: u64,
}

impl Default for UnpackLimits {
    /// 4 million entries and 256 GiB: far above any real image, and a
    /// bound on a tar made to exhaust inodes or disk.
    fn default() -> Self {
        UnpackLimits {
            max_entries: 4_000_000,
            max_bytes: 256 << 30,
        }
    }
}

/// What a layer held.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unpacked {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

/// Who and what an unpack is for, to name in errors.
pub(crate) struct Job {
    pub(crate) reference: String,
    pub(crate) layer: Digest,
    pub(crate) ownership: Ownership,
    pub(crate) limits: UnpackLimits,
}

/// Unpacks the tar read from `tar` into the existing, empty directory
/// `root`. Reading fails as [`Error::CorruptLayer`] (a read error from
/// `tar` itself, such as a broken download, is the caller's to tell
/// apart), an escape as [`Error::HostileLayer`].
pub(crate) fn unpack<R: Read>(tar: R, root: &Path, job: &Job) -> Result<(Unpacked, R), Error> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(&job.reference, "opening", root, e.into()))?;
    let mut unpacker = Unpacker {
        job,
        root: root_fd,
        root_path: root,
        is_root: rustix::process::geteuid().is_root(),
        parent: None,
        dirs: Vec::new(),
        root_meta: None,
        done: Unpacked::default(),
    };
    let mut archive = tar::Archive::new(tar);
    let entries = archive.entries().map_err(|e| unpacker.corrupt(&e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| unpacker.corrupt(&e))?;
        unpacker.entry(&mut entry)?;
    }
    unpacker.finish_dirs()?;
    Ok((unpacker.done, archive.into_inner()))
}

/// Mode and mtime of a directory, applied when everything is in it.
struct DirMeta {
    path: PathBuf,
    mode: u32,
    mtime: i64,
}

struct Unpacker<'a> {
    job: &'a Job,
    root: OwnedFd,
    root_path: &'a Path,
    is_root: bool,
    /// The last parent directory resolved (entries come grouped by
    /// directory), dropped whenever an entry replaces anything on its path.
    parent: Option<(PathBuf, OwnedFd)>,
    dirs: Vec<DirMeta>,
    root_meta: Option<(u32, i64)>,
    done: Unpacked,
}

/// What one entry is, once its header is read.
struct Header {
    kind: EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: i64,
}

impl<'a> Unpacker<'a> {
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), Error> {
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let header = {
            let h = entry.header();
            let read = |r: io::Result<u64>| r.map_err(|e| self.corrupt(&e));
            Header {
                kind: h.entry_type(),
                mode: h.mode().map_err(|e| self.corrupt(&e))? & 0o7777,
                uid: read(h.uid())?,
                gid: read(h.gid())?,
                mtime: i64::try_from(read(h.mtime())?).unwrap_or(i64::MAX),
            }
        };
        if matches!(
            header.kind,
            EntryType::XGlobalHeader
                | EntryType::XHeader
                | EntryType::GNULongName
                | EntryType::GNULongLink
        ) {
            return Ok(());
        }
        self.done.entries += 1;
        if self.done.entries > self.job.limits.max_entries {
            return Err(self.hostile(
                &shown,
                format!(
                    "is past the limit of {} entries",
                    self.job.limits.max_entries
                ),
            ));
        }
        let path = clean(&raw)
            .ok_or_else(|| self.hostile(&shown, "climbs out of the layer with '..'".to_string()))?;
        // Old tars mark directories by a trailing slash on a file entry.
        let kind = match header.kind {
            EntryType::Regular if raw.ends_with(b"/") => EntryType::Directory,
            kind => kind,
        };
        let Some(name) = path.file_name().map(OsStr::to_os_string) else {
            // The layer's root itself ("./").
            if kind == EntryType::Directory {
                self.root_meta = Some((header.mode, header.mtime));
                self.chown_at(self.root.as_fd(), None, header.uid, header.gid, &shown)?;
            }
            return Ok(());
        };
        let parent_path = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let name_bytes = name.as_bytes();
        if name_bytes == OPAQUE.as_bytes() {
            return self.opaque(&parent_path, &shown);
        }
        if let Some(hidden) = name_bytes.strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
            if hidden.starts_with(WHITEOUT_PREFIX.as_bytes()) || hidden.is_empty() {
                return Ok(());
            }
            let hidden = OsStr::from_bytes(hidden).to_os_string();
            return self.whiteout(&parent_path, &hidden, &shown);
        }
        match kind {
            EntryType::Directory => self.directory(&path, &parent_path, &name, &header, &shown),
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                self.file(entry, &path, &parent_path, &name, &header, &shown)
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| {
                        self.hostile(&shown, "is a symlink without a target".to_string())
                    })?
                    .into_owned();
                self.symlink(&path, &parent_path, &name, &target, &header, &shown)
            }
            EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| {
                        self.hostile(&shown, "is a hard link without a target".to_string())
                    })?
                    .into_owned();
                self.hard_link(&path, &parent_path, &name, &target, &shown)
            }
            EntryType::Fifo => self.fifo(&path, &parent_path, &name, &header, &shown),
            // Device nodes would need CAP_MKNOD and have no place in a
            // sandbox's image; the sandbox's /dev is its own.
            EntryType::Char | EntryType::Block => Ok(()),
            _ => Ok(()),
        }
    }

    fn directory(
        &mut self,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        header: &Header,
        shown: &str,
    ) -> Result<(), Error> {
        let dir = self.parent_fd(parent, shown)?;
        match fsx::kind_at(dir.as_fd(), name).map_err(|e| self.write_error(path, e))? {
            Some(FileType::Directory) => {}
            existing => {
                if existing.is_some() {
                    self.replace(path, dir.as_fd(), name)?;
                }
                rustix::fs::mkdirat(&dir, name, Mode::RWXU)
                    .map_err(|e| self.write_error(path, e))?;
            }
        }
        self.chown_at(dir.as_fd(), Some(name), header.uid, header.gid, shown)?;
        self.dirs.push(DirMeta {
            path: path.to_path_buf(),
            mode: header.mode,
            mtime: header.mtime,
        });
        Ok(())
    }

    fn file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        header: &Header,
        shown: &str,
    ) -> Result<(), Error> {
        let dir = self.parent_fd(parent, shown)?;
        self.replace(path, dir.as_fd(), name)?;
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| self.write_error(path, e))?;
        let size = entry.size();
        if self.done.bytes.saturating_add(size) > self.job.limits.max_bytes {
            return Err(self.hostile(
                shown,
                format!(
                    "is past the limit of {} bytes of files",
                    self.job.limits.max_bytes
                ),
            ));
        }
        let mut file = std::fs::File::from(fd);
        // Read and write separately so that a read failure (the layer)
        // and a write failure (the disk) are told apart.
        let mut buffer = vec![0u8; 128 * 1024];
        let mut written = 0u64;
        loop {
            let n = match entry.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.corrupt(&e)),
            };
            io::Write::write_all(&mut file, &buffer[..n]).map_err(|e| {
                Error::io(&self.job.reference, "writing", &self.shown_path(path), e)
            })?;
            written += n as u64;
        }
        self.done.bytes += written;
        if let Some((uid, gid)) = self.job.ownership.map(header.uid, header.gid) {
            rustix::fs::fchown(&file, Some(uid_of(uid)), Some(gid_of(gid)))
                .map_err(|e| self.chown_error(shown, e))?;
        }
        // After the chown, which clears set-id bits.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(header.mode))
            .map_err(|e| self.write_error(path, e))?;
        rustix::fs::futimens(&file, &times(header.mtime)).map_err(|e| self.write_error(path, e))?;
        Ok(())
    }

    fn symlink(
        &mut self,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        target: &[u8],
        header: &Header,
        shown: &str,
    ) -> Result<(), Error> {
        let dir = self.parent_fd(parent, shown)?;
        self.replace(path, dir.as_fd(), name)?;
        rustix::fs::symlinkat(OsStr::from_bytes(target), &dir, name)
            .map_err(|e| self.write_error(path, e))?;
        self.chown_at(dir.as_fd(), Some(name), header.uid, header.gid, shown)?;
        rustix::fs::utimensat(&dir, name, &times(header.mtime), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.write_error(path, e))?;
        Ok(())
    }

    fn hard_link(
        &mut self,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        target: &[u8],
        shown: &str,
    ) -> Result<(), Error> {
        let target_path = clean(target).ok_or_else(|| {
            self.hostile(
                shown,
                "links to a path that climbs out of the layer".to_string(),
            )
        })?;
        let Some(target_name) = target_path.file_name().map(OsStr::to_os_string) else {
            return Err(self.hostile(shown, "links to the layer's root".to_string()));
        };
        if target_path == path {
            return Ok(());
        }
        let target_parent = target_path.parent().unwrap_or(Path::new(""));
        let from = match fsx::open_dir_beneath(self.root.as_fd(), target_parent) {
            Ok(fd) => fd,
            Err(Errno::XDEV | Errno::LOOP) => {
                return Err(self.hostile(
                    shown,
                    format!("links to {} outside the layer", target_path.display()),
                ));
            }
            Err(Errno::NOENT | Errno::NOTDIR) => return Err(self.missing_link(shown, &target_path)),
            Err(e) => return Err(self.write_error(path, e)),
        };
        match fsx::kind_at(from.as_fd(), &target_name).map_err(|e| self.write_error(path, e))? {
            None => return Err(self.missing_link(shown, &target_path)),
            Some(FileType::Directory) => {
                return Err(self.hostile(
                    shown,
                    format!("hard-links the directory {}", target_path.display()),
                ));
            }
            Some(_) => {}
        }
        let dir = self.parent_fd(parent, shown)?;
        self.replace(path, dir.as_fd(), name)?;
        rustix::fs::linkat(&from, &target_name, &dir, name, AtFlags::empty())
            .map_err(|e| self.write_error(path, e))
    }

    fn fifo(
        &mut self,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        header: &Header,
        shown: &str,
    ) -> Result<(), Error> {
        let dir = self.parent_fd(parent, shown)?;
        self.replace(path, dir.as_fd(), name)?;
        rustix::fs::mknodat(&dir, name, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
            .map_err(|e| self.write_error(path, e))?;
        self.chown_at(dir.as_fd(), Some(name), header.uid, header.gid, shown)?;
        rustix::fs::chmodat(
            &dir,
            name,
            Mode::from_raw_mode(header.mode),
            AtFlags::empty(),
        )
        .map_err(|e| self.write_error(path, e))?;
        rustix::fs::utimensat(&dir, name, &times(header.mtime), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.write_error(path, e))
    }

    fn whiteout(&mut self, parent: &Path, hidden: &OsStr, shown: &str) -> Result<(), Error> {
        let path = parent.join(hidden);
        let dir = self.parent_fd(parent, shown)?;
        self.replace(&path, dir.as_fd(), hidden)?;
        match rustix::fs::mknodat(
            &dir,
            hidden,
            FileType::CharacterDevice,
            Mode::empty(),
            rustix::fs::makedev(0, 0),
        ) {
            Ok(()) => {}
            Err(Errno::PERM) => {
                return Err(Error::Unsupported {
                    reference: self.job.reference.clone(),
                    detail: format!(
                        "layer {}: cannot make the whiteout {} (a 0/0 character device; \
                         unprivileged users may make one since Linux 5.8)",
                        self.job.layer,
                        path.display()
                    ),
                });
            }
            Err(e) => return Err(self.write_error(&path, e)),
        }
        self.chown_at(dir.as_fd(), Some(hidden), 0, 0, shown)
    }

    fn opaque(&mut self, parent: &Path, shown: &str) -> Result<(), Error> {
        // Make sure it exists (a layer may list the marker before or
        // without its directory), then mark the directory itself.
        let _ = self.parent_fd(parent, shown)?;
        let dir = fsx::open_real_dir(self.root.as_fd(), parent)
            .map_err(|e| self.resolve_error(parent, shown, e))?;
        let set = |name: &str| rustix::fs::fsetxattr(&dir, name, b"y", XattrFlags::empty());
        match set("user.overlay.opaque") {
            Ok(()) => {}
            Err(Errno::NOTSUP) => {
                return Err(Error::Unsupported {
                    reference: self.job.reference.clone(),
                    detail: format!(
                        "the store's file system at {} has no user extended attributes, which \
                         opaque directories need",
                        self.root_path.display()
                    ),
                });
            }
            Err(e) => return Err(self.write_error(parent, e)),
        }
        if self.is_root {
            // Only for mounts without `userxattr`; refused in a user
            // namespace, which is fine: those mounts read the user one.
            match set("trusted.overlay.opaque") {
                Ok(()) | Err(Errno::PERM | Errno::NOTSUP) => {}
                Err(e) => return Err(self.write_error(parent, e)),
            }
        }
        Ok(())
    }

    /// The directory `parent` (beneath the root), made with its missing
    /// ancestors when the layer did not list them.
    fn parent_fd(&mut self, parent: &Path, shown: &str) -> Result<OwnedFd, Error> {
        if let Some((cached, fd)) = &self.parent
            && cached == parent
        {
            return fd.try_clone().map_err(|e| {
                self.write_error(parent, Errno::from_io_error(&e).unwrap_or(Errno::IO))
            });
        }
        let fd = self.resolve(parent, shown, 0)?;
        self.parent = Some((
            parent.to_path_buf(),
            fd.try_clone().map_err(|e| {
                self.write_error(parent, Errno::from_io_error(&e).unwrap_or(Errno::IO))
            })?,
        ));
        Ok(fd)
    }

    fn resolve(&mut self, dir: &Path, shown: &str, depth: usize) -> Result<OwnedFd, Error> {
        match fsx::open_dir_beneath(self.root.as_fd(), dir) {
            Ok(fd) => Ok(fd),
            Err(Errno::NOENT) if depth < 4096 => {
                let (Some(up), Some(name)) = (dir.parent(), dir.file_name()) else {
                    return Err(self.resolve_error(dir, shown, Errno::NOENT));
                };
                let up_fd = self.resolve(up, shown, depth + 1)?;
                match rustix::fs::mkdirat(&up_fd, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) => self.chown_at(up_fd.as_fd(), Some(name), 0, 0, shown)?,
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(self.write_error(dir, e)),
                }
                fsx::open_dir_beneath(self.root.as_fd(), dir)
                    .map_err(|e| self.resolve_error(dir, shown, e))
            }
            Err(e) => Err(self.resolve_error(dir, shown, e)),
        }
    }

    /// Clears `name` in `dir` for a new entry at `path`, and forgets a
    /// cached parent that went with it.
    fn replace(&mut self, path: &Path, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Error> {
        if self
            .parent
            .as_ref()
            .is_some_and(|(cached, _)| cached.starts_with(path))
        {
            self.parent = None;
        }
        fsx::remove_at(dir, name)
            .map_err(|e| Error::io(&self.job.reference, "replacing", &self.shown_path(path), e))
    }

    fn chown_at(
        &self,
        dir: BorrowedFd<'_>,
        name: Option<&OsStr>,
        uid: u64,
        gid: u64,
        shown: &str,
    ) -> Result<(), Error> {
        let Some((uid, gid)) = self.job.ownership.map(uid, gid) else {
            return Ok(());
        };
        let result = match name {
            Some(name) => rustix::fs::chownat(
                dir,
                name,
                Some(uid_of(uid)),
                Some(gid_of(gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            ),
            None => rustix::fs::chownat(
                dir,
                "",
                Some(uid_of(uid)),
                Some(gid_of(gid)),
                AtFlags::EMPTY_PATH,
            ),
        };
        result.map_err(|e| self.chown_error(shown, e))
    }

    /// Modes and mtimes of directories, deepest first; a directory a
    /// later entry replaced is skipped.
    fn finish_dirs(&mut self) -> Result<(), Error> {
        self.parent = None;
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.path.components().count()));
        for dir in &dirs {
            let fd = match fsx::open_real_dir(self.root.as_fd(), &dir.path) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => continue,
                Err(e) => return Err(self.write_error(&dir.path, e)),
            };
            self.set_dir_meta(fd.as_fd(), &dir.path, dir.mode, dir.mtime)?;
        }
        let (mode, mtime) = self.root_meta.unwrap_or((0o755, 0));
        let root = fsx::open_real_dir(self.root.as_fd(), Path::new(""))
            .map_err(|e| self.write_error(Path::new(""), e))?;
        self.set_dir_meta(root.as_fd(), Path::new(""), mode, mtime)?;
        if self.root_meta.is_none() {
            // No entry for the root: keep "now" rather than the epoch.
            rustix::fs::futimens(
                &root,
                &Timestamps {
                    last_access: Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                    last_modification: Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                },
            )
            .map_err(|e| self.write_error(Path::new(""), e))?;
        }
        Ok(())
    }

    fn set_dir_meta(
        &self,
        fd: BorrowedFd<'_>,
        path: &Path,
        mode: u32,
        mtime: i64,
    ) -> Result<(), Error> {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| self.write_error(path, e))?;
        rustix::fs::futimens(fd, &times(mtime)).map_err(|e| self.write_error(path, e))
    }

    fn shown_path(&self, path: &Path) -> PathBuf {
        self.root_path.join(path)
    }

    fn corrupt(&self, error: &io::Error) -> Error {
        Error::CorruptLayer {
            reference: self.job.reference.clone(),
            layer: self.job.layer.clone(),
            detail: crate::error::one_line(&error.to_string()),
        }
    }

    fn hostile(&self, entry: &str, reason: String) -> Error {
        Error::HostileLayer {
            reference: self.job.reference.clone(),
            layer: self.job.layer.clone(),
            entry: entry.to_string(),
            reason,
        }
    }

    fn missing_link(&self, shown: &str, target: &Path) -> Error {
        self.hostile(
            shown,
            format!("hard-links {}, which is not in the layer", target.display()),
        )
    }

    fn resolve_error(&self, dir: &Path, shown: &str, errno: Errno) -> Error {
        match errno {
            Errno::XDEV | Errno::LOOP => self.hostile(
                shown,
                format!(
                    "goes through a symlink leading out of the layer ({})",
                    dir.display()
                ),
            ),
            Errno::NOTDIR => self.hostile(
                shown,
                format!("goes through {}, which is not a directory", dir.display()),
            ),
            e => self.write_error(dir, e),
        }
    }

    fn write_error(&self, path: &Path, errno: Errno) -> Error {
        Error::io(
            &self.job.reference,
            "writing",
            &self.shown_path(path),
            errno.into(),
        )
    }

    fn chown_error(&self, shown: &str, errno: Errno) -> Error {
        if errno == Errno::PERM {
            Error::Unsupported {
                reference: self.job.reference.clone(),
                detail: format!(
                    "cannot give {shown:?} its shifted owner ({}): shifted ownership needs root; \
                     use Ownership::Caller",
                    self.job.ownership
                ),
            }
        } else {
            Error::io(
                &self.job.reference,
                "changing the owner of",
                Path::new(shown),
                errno.into(),
            )
        }
    }
}

/// The entry's path as normal components: a leading `/` and `.`
/// components dropped, `a/..` folded; `None` when `..` climbs above the
/// root.
fn clean(raw: &[u8]) -> Option<PathBuf> {
    let mut parts: Vec<Cow<'_, OsStr>> = Vec::new();
    for component in Path::new(OsStr::from_bytes(raw)).components() {
        match component {
            Component::Normal(part) => parts.push(Cow::Borrowed(part)),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let mut path = OsString::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            path.push("/");
        }
        path.push(part);
    }
    Some(PathBuf::from(OsString::from_vec(path.into_vec())))
}

fn times(mtime: i64) -> Timestamps {
    let at = Timespec {
        tv_sec: mtime,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: at,
        last_modification: at,
    }
}

fn uid_of(uid: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(uid)
}

fn gid_of(gid: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_escapes_refused() {
        let c = |raw: &str| clean(raw.as_bytes()).map(|p| p.display().to_string());
        assert_eq!(c("./usr/bin/"), Some("usr/bin".to_string()));
        assert_eq!(c("/etc/passwd"), Some("etc/passwd".to_string()));
        assert_eq!(c("a/../b"), Some("b".to_string()));
        assert_eq!(c("./"), Some(String::new()));
        assert_eq!(c("../x"), None);
        assert_eq!(c("a/../../x"), None);
    }
}
