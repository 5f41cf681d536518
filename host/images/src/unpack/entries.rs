//! Writing each kind of entry: a directory, a file, a symlink, a hard
//! link, a FIFO, a whiteout or an opaque marker, created at its name
//! relative to its parent's descriptor and never followed, with its owner
//! mapped through [`Ownership`](crate::Ownership).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, XattrFlags};
use rustix::io::Errno;

use crate::error::Error;
use crate::fsx;

use super::beneath::clean;
use super::{DirMeta, Header, Unpacker, times};

impl Unpacker<'_> {
    pub(super) fn directory(
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

    pub(super) fn file<R: Read>(
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

    pub(super) fn symlink(
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

    pub(super) fn hard_link(
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

    pub(super) fn fifo(
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

    pub(super) fn whiteout(
        &mut self,
        parent: &Path,
        hidden: &OsStr,
        shown: &str,
    ) -> Result<(), Error> {
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

    pub(super) fn opaque(&mut self, parent: &Path, shown: &str) -> Result<(), Error> {
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

    pub(super) fn chown_at(
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
}

fn uid_of(uid: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(uid)
}

fn gid_of(gid: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(gid)
}
