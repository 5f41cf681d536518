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
//!
//! Where an entry may go is decided in `beneath`; how each kind is
//! written, in `entries`.

mod beneath;
mod entries;

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use tar::EntryType;

use crate::digest::Digest;
use crate::error::Error;
use crate::fsx;
use crate::ownership::Ownership;

use beneath::clean;

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
