//! Rootless sandboxes with more ids than one: a process an ordinary user
//! started enters a user namespace in which it is root, the user's own
//! uid and gid mapped to 0 and its subordinate ranges (`/etc/subuid`,
//! `/etc/subgid`) to the ids from 1, as rootless podman runs. Only the
//! setuid helpers `newuidmap` and `newgidmap` (shadow's `uidmap`) may
//! write such maps, and they check the ranges against those files.
//!
//! Inside, the process may give files to any of those ids and map them
//! into its sandboxes' namespaces, so an image's owners are kept (its
//! `agent` user owns its home) where without a range every file belongs to
//! the sandbox's root. The host sees the sandboxes' ids as the user's
//! subordinate ids, which belong to no one else.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::sys;

/// Set to `0` (or `false`, `off`, `no`) to stay out of the namespace (every
/// file the sandbox's root's, as without a range).
pub const OPT_OUT: &str = "SANDFLEET_SUBORDINATE_IDS";

/// A subordinate range: `count` ids from `start`, which the namespace
/// maps from its id 1 on (its 0 being the user's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The first subordinate id.
    pub start: u32,
    /// How many follow it that are mapped.
    pub count: u32,
}

/// What [`enter`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entered {
    /// The process is now root in a new user namespace of `1 + count`
    /// uids and gids.
    Namespace {
        /// The uids mapped from 1 on.
        uids: Range,
        /// The gids mapped from 1 on.
        gids: Range,
    },
    /// It stays as it was, as it should: it is root, has no range, or was
    /// told to.
    NotNeeded(String),
    /// It stays as it was although the user has a range, for this reason
    /// (a missing `newuidmap`, a kernel without unprivileged user
    /// namespaces): worth a warning.
    Unavailable(String),
}

/// The most subordinate ids a namespace takes: sandboxes use 65536 ids
/// (0–65535), the namespace's root being the first.
const MOST_IDS: u32 = 65535;

/// Enters the user's subordinate ids when it has them (see the module
/// docs); a no-op for root, for a user without a range in `/etc/subuid` and
/// `/etc/subgid`, where `newuidmap` is not installed or cannot gain its
/// privilege (`no_new_privs`), where the kernel gives unprivileged users
/// no user namespaces, and when
/// `SANDFLEET_SUBORDINATE_IDS=0`. Call it first in `main`, before any
/// thread starts: the kernel moves only a single-threaded process into a
/// user namespace.
///
/// # Errors
///
/// When the process has threads already, or when `newuidmap` or
/// `newgidmap` refused the range: the process is then in a user namespace
/// without ids and must exit.
pub fn enter() -> Result<Entered, String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    if rustix::process::geteuid().is_root() {
        return Ok(Entered::NotNeeded("running as root".into()));
    }
    if let Some(value) = std::env::var_os(OPT_OUT)
        && ["0", "false", "off", "no"]
            .iter()
            .any(|off| value.eq_ignore_ascii_case(off))
    {
        return Ok(Entered::NotNeeded(format!("{OPT_OUT}={}", value.display())));
    }
    let name = sys::user_name(uid);
    let who = name.clone().unwrap_or_else(|| format!("uid {uid}"));
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let Some(uids) = range_of(&read("/etc/subuid"), name.as_deref(), uid) else {
        return Ok(Entered::NotNeeded(format!(
            "/etc/subuid gives {who} no range"
        )));
    };
    // subgid lines name their owner by user too.
    let Some(gids) = range_of(&read("/etc/subgid"), name.as_deref(), uid) else {
        return Ok(Entered::NotNeeded(format!(
            "/etc/subgid gives {who} no range"
        )));
    };
    let (Some(newuidmap), Some(newgidmap)) = (installed("newuidmap"), installed("newgidmap"))
    else {
        return Ok(Entered::Unavailable(format!(
            "{who} has subordinate ids, but newuidmap and newgidmap are not installed \
             (Debian and Ubuntu: the `uidmap` package; Fedora: `shadow-utils`)"
        )));
    };
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    if status_field(&status, "NoNewPrivs:") == Some(1) {
        // The setuid helpers would run without their privilege.
        return Ok(Entered::Unavailable(format!(
            "{who} has subordinate ids, but this process runs with no_new_privs (a container's \
             allowPrivilegeEscalation: false, systemd's NoNewPrivileges=yes), under which \
             newuidmap cannot map them"
        )));
    }
    let threads = status_field(&status, "Threads:")
        .ok_or_else(|| "/proc/self/status names no thread count".to_string())?;
    if threads != 1 {
        return Err(format!(
            "entering the subordinate ids needs a single-threaded process; this one has \
             {threads} threads"
        ));
    }
    // The helpers must start outside the namespace: within it their setuid
    // bit means nothing. Each waits for a line on its stdin.
    let pid = std::process::id().to_string();
    let mut mappers = Vec::new();
    for (helper, own, range) in [(&newuidmap, uid, uids), (&newgidmap, gid, gids)] {
        mappers.push(spawn_mapper(helper, &pid, own, range)?);
    }
    if let Err(error) = sys::unshare_user_namespace() {
        for mapper in &mut mappers {
            let _ = mapper.kill();
            let _ = mapper.wait();
        }
        return Ok(Entered::Unavailable(format!(
            "this kernel gives {who} no user namespace ({error})"
        )));
    }
    for mapper in mappers {
        map(mapper)?;
    }
    if !rustix::process::geteuid().is_root() {
        return Err(
            "the user namespace's maps were written but this process is not its root".into(),
        );
    }
    Ok(Entered::Namespace { uids, gids })
}

/// The first `owner:start:count` line of a subuid or subgid file whose
/// owner is `name` or the number `id`, cut to the ids a namespace takes.
pub fn range_of(file: &str, name: Option<&str>, id: u32) -> Option<Range> {
    let id = id.to_string();
    file.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let owner = fields.next()?;
        if owner != id && Some(owner) != name {
            return None;
        }
        let start: u32 = fields.next()?.parse().ok()?;
        let count: u32 = fields.next()?.parse().ok()?;
        (count > 0).then(|| Range {
            start,
            count: count.min(MOST_IDS),
        })
    })
}

/// `program` on `PATH`, or in `/usr/bin` when `PATH` lacks it.
fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The number after `name` in `/proc/<pid>/status`.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|value| value.trim().parse().ok())
}

/// `helper pid 0 own 1 start count`, once a line arrives on its stdin.
fn spawn_mapper(helper: &Path, pid: &str, own: u32, range: Range) -> Result<Child, String> {
    Command::new("/bin/sh")
        .args(["-c", "read -r _ && exec \"$@\"", "sh"])
        .arg(helper)
        .args([pid, "0", &own.to_string(), "1"])
        .args(["1", &range.start.to_string(), &range.count.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", helper.display()))
}

/// Lets a mapper run and waits for it to write its map.
fn map(mut mapper: Child) -> Result<(), String> {
    let said_go = mapper
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(b"\n"))
        .transpose();
    let output = mapper
        .wait_with_output()
        .map_err(|e| format!("waiting for a newuidmap helper: {e}"))?;
    if let Err(error) = said_go {
        return Err(format!("signalling a newuidmap helper: {error}"));
    }
    if !output.status.success() {
        return Err(format!(
            "mapping the subordinate ids failed ({}): {}; set {OPT_OUT}=0 to run without them",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_found_by_name_or_number_and_cut_to_what_sandboxes_use() {
        let file = "alice:100000:65536\n# a comment\n1001:300000:1000\nbob:200000:0\n";
        assert_eq!(
            range_of(file, Some("alice"), 1000),
            Some(Range {
                start: 100_000,
                count: MOST_IDS
            })
        );
        assert_eq!(
            range_of(file, None, 1001),
            Some(Range {
                start: 300_000,
                count: 1000
            })
        );
        assert_eq!(range_of(file, Some("bob"), 1002), None, "an empty range");
        assert_eq!(range_of(file, Some("carol"), 1003), None);
        assert_eq!(range_of("garbage\nalice:x:1\n", Some("alice"), 1), None);
    }
}
