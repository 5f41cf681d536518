//! Where an entry goes, without ever leaving the layer: its path cleaned
//! lexically, its parent resolved beneath the root with `openat2` (and
//! made when the layer did not list it), and whatever an earlier entry
//! left at its name cleared. Kept apart from the writing of entries so
//! that what stops a hostile layer can be read in one place.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Component, Path, PathBuf};

use rustix::fs::Mode;
use rustix::io::Errno;

use crate::error::Error;
use crate::fsx;

use super::Unpacker;

impl Unpacker<'_> {
    /// The directory `parent` (beneath the root), made with its missing
    /// ancestors when the layer did not list them.
    pub(super) fn parent_fd(&mut self, parent: &Path, shown: &str) -> Result<OwnedFd, Error> {
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
    pub(super) fn replace(
        &mut self,
        path: &Path,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Result<(), Error> {
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
}

/// The entry's path as normal components: a leading `/` and `.`
/// components dropped, `a/..` folded; `None` when `..` climbs above the
/// root.
pub(super) fn clean(raw: &[u8]) -> Option<PathBuf> {
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
