//! Where a command's program is, seen from inside a sandbox: what a
//! container runtime checks before it starts a container's process, so
//! that a missing program is a failure to start, not a process that exits.
//!
//! An isolated sandbox is looked into through its init's root
//! (`/proc/<init>/root`), every path resolved beneath it
//! (`RESOLVE_IN_ROOT`): the image's links, absolute ones included, resolve
//! as they would inside the sandbox, and never reach the host's files.

use std::os::unix::fs::PermissionsExt;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::error::LocalError;
use crate::process::ProcessIdentity;

/// The paths `execvp` would try for `program` on `path`, in order: the
/// program itself when it names a path (relative to `workdir`), else each
/// absolute directory of `path` joined with it.
pub(crate) fn candidates(program: &str, path: &str, workdir: &str) -> Vec<String> {
    if program.contains('/') {
        return vec![if program.starts_with('/') {
            program.to_string()
        } else {
            format!("{}/{program}", workdir.trim_end_matches('/'))
        }];
    }
    if program.is_empty() {
        return Vec::new();
    }
    path.split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

/// Whether one of `candidates` is an executable file in the root of the
/// sandbox whose init is `init`.
///
/// # Errors
///
/// [`LocalError::SandboxLost`] when the init is gone.
pub(crate) fn executable_in_root(
    init: ProcessIdentity,
    candidates: &[String],
) -> Result<bool, LocalError> {
    let lost = || LocalError::SandboxLost(format!("the sandbox's init {} is gone", init.pid));
    let root = rustix::fs::open(
        format!("/proc/{}/root", init.pid),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| lost())?;
    // Checked after opening: the pid may have been another process's by then.
    if ProcessIdentity::of(init.pid) != Some(init) {
        return Err(lost());
    }
    Ok(candidates.iter().any(|candidate| {
        rustix::fs::openat2(
            &root,
            candidate.trim_start_matches('/'),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .and_then(|file| rustix::fs::fstat(&file))
        .is_ok_and(|stat| {
            rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file()
                && std::fs::Permissions::from_mode(stat.st_mode).mode() & 0o111 != 0
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_looked_for_on_the_absolute_entries_of_path() {
        assert_eq!(
            candidates("tail", "/usr/bin:relative::/bin/", "/w"),
            ["/usr/bin/tail", "/bin/tail"]
        );
        assert_eq!(candidates("./run", "/usr/bin", "/w/"), ["/w/./run"]);
        assert_eq!(candidates("/opt/x", "/usr/bin", "/w"), ["/opt/x"]);
        assert!(candidates("", "/usr/bin", "/w").is_empty());
    }
}
