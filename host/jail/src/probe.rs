//! The isolation probe: run inside a new sandbox, confined exactly as a
//! command would be, before the sandbox is offered. Each check is what an
//! escape would need; the sandbox is served only if every one fails to
//! reach the host.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::mount::MountFlags;

use crate::protocol::{ProbeReport, ProbeRequest};
use crate::rootfs;

/// `CAP_SYS_ADMIN`, the capability that reaches mounts.
const CAP_SYS_ADMIN: u32 = 21;

/// Runs every check; `workdir` is the sandbox's workdir.
pub(crate) fn run(request: &ProbeRequest, workdir: &str) -> ProbeReport {
    let volumes = |writable_only: bool| {
        request
            .volumes
            .iter()
            .filter(move |volume| !(writable_only && volume.read_only))
            .map(|volume| volume.target.clone())
    };
    let mut writable = rootfs::writable_mounts(workdir);
    writable.extend(volumes(true));
    let mut failures = Vec::new();
    let mut fail = |message: String| failures.push(message);
    check_mounts(&writable, request.own_root, &mut fail);
    if request.own_root {
        let mut expected = rootfs::own_root_mounts(workdir);
        expected.extend(volumes(false));
        check_own_root(&expected, &mut fail);
    }
    check_root(request, &mut fail);
    check_status(&mut fail);
    check_proc(&mut fail);
    check_terminal(&mut fail);
    check_descriptors(&mut fail);
    ProbeReport { failures }
}

/// One line of `/proc/self/mountinfo`: the mount point and its per-mount
/// options.
struct Mount {
    point: String,
    read_only: bool,
}

fn mounts() -> Result<Vec<Mount>, String> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let options = fields.next()?;
            Some(Mount {
                point: unescape(point),
                read_only: options.split(',').any(|option| option == "ro"),
            })
        })
        .collect())
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes.get(i + 1..i + 4).filter(|_| bytes[i] == b'\\');
        match escaped
            .and_then(|digits| u8::from_str_radix(std::str::from_utf8(digits).ok()?, 8).ok())
        {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount but the sandbox's own writable ones is read-only, and stays
/// so: writing fails, remounting fails. Over the host's root, its `/usr`
/// is one of them.
fn check_mounts(writable: &[String], own_root: bool, fail: &mut impl FnMut(String)) {
    let mounts = match mounts() {
        Ok(mounts) => mounts,
        Err(error) => return fail(error),
    };
    let is_writable = |point: &str| writable.iter().any(|allowed| allowed == point);
    for mount in mounts.iter().filter(|mount| !is_writable(&mount.point)) {
        let point = Path::new(&mount.point);
        if !mount.read_only {
            fail(format!("{} is mounted writable", mount.point));
        }
        let is_dir = fs::symlink_metadata(point).is_ok_and(|meta| meta.is_dir());
        if is_dir {
            let probe = point.join(".sandfleet-probe");
            if fs::File::create_new(&probe).is_ok() {
                let _ = fs::remove_file(&probe);
                fail(format!("{} accepted a new file", mount.point));
            }
        }
        if rustix::mount::mount_remount(point, MountFlags::BIND, "").is_ok() {
            fail(format!("{} could be remounted writable", mount.point));
        }
    }
    if !own_root
        && !mounts
            .iter()
            .any(|mount| mount.point == "/usr" && mount.read_only)
    {
        fail("the host's /usr is not mounted read-only".into());
    }
}

/// An image's sandbox has only the mounts it makes itself: any other one
/// would show something of the host.
fn check_own_root(expected: &[String], fail: &mut impl FnMut(String)) {
    let Ok(mounts) = mounts() else {
        return;
    };
    for mount in mounts {
        if !expected.contains(&mount.point) {
            fail(format!(
                "{} is mounted in a sandbox whose root is its image's",
                mount.point
            ));
        }
    }
}

/// The sandbox's `/` is not the host's, and host paths that must stay out of
/// reach are not there.
fn check_root(request: &ProbeRequest, fail: &mut impl FnMut(String)) {
    match fs::metadata("/") {
        Ok(root) if (root.dev(), root.ino()) == request.host_root => {
            fail("the sandbox's / is the host's /".into());
        }
        Ok(_) => {}
        Err(error) => fail(format!("cannot stat /: {error}")),
    }
    for path in &request.hidden {
        if fs::symlink_metadata(path).is_ok() {
            fail(format!("the host's {path} is visible"));
        }
    }
    match fs::read_to_string("/proc/self/uid_map") {
        Ok(map) => {
            if request
                .host_root_uid
                .is_some_and(|root| maps_outside(&map, root))
            {
                fail(format!(
                    "the host's root is mapped into the sandbox: uid_map {}",
                    map.trim()
                ));
            }
        }
        Err(error) => fail(format!("cannot read /proc/self/uid_map: {error}")),
    }
}

/// Whether a `/proc/<pid>/uid_map` maps the outside id `uid` to any id.
fn maps_outside(map: &str, uid: u32) -> bool {
    crate::uid_map::extents(map)
        .iter()
        .any(|extent| extent.inside_of(u64::from(uid)).is_some())
}

/// No `CAP_SYS_ADMIN`, `no_new_privs` set, seccomp filtering.
fn check_status(fail: &mut impl FnMut(String)) {
    let status = match fs::read_to_string("/proc/self/status") {
        Ok(status) => status,
        Err(error) => return fail(format!("cannot read /proc/self/status: {error}")),
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or_default()
    };
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        let bits = u64::from_str_radix(field(set), 16).unwrap_or(u64::MAX);
        if bits & (1 << CAP_SYS_ADMIN) != 0 {
            fail(format!("commands hold CAP_SYS_ADMIN ({set} {bits:016x})"));
        }
    }
    if field("NoNewPrivs") != "1" {
        fail("commands can gain privileges by exec (NoNewPrivs is not set)".into());
    }
    if field("Seccomp") != "2" {
        fail("commands run without a seccomp filter".into());
    }
}

/// Kernel settings are read-only and the masked files are empty.
fn check_proc(fail: &mut impl FnMut(String)) {
    for path in [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/stat_interval",
        "/proc/sysrq-trigger",
    ] {
        // Opening for writing writes nothing.
        if rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).is_ok() {
            fail(format!("{path} can be opened for writing"));
        }
    }
    for name in rootfs::MASKED_FILES {
        let path = Path::new("/proc").join(name);
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        // Masked by a bind of /dev/null (character device 1:3).
        let null = meta.file_type().is_char_device() && meta.rdev() == libc::makedev(1, 3);
        if !null {
            fail(format!("{} is not masked", path.display()));
        }
    }
}

/// No controlling terminal: a terminal a command could reach would be the
/// host user's, whose input queue `TIOCSTI` writes to.
fn check_terminal(fail: &mut impl FnMut(String)) {
    let stat = match fs::read_to_string("/proc/self/stat") {
        Ok(stat) => stat,
        Err(error) => return fail(format!("cannot read /proc/self/stat: {error}")),
    };
    // Field 7, the controlling terminal's device number; fields after the
    // command name's last `)` start at field 3.
    let terminal = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(4)?.parse::<i64>().ok());
    match terminal {
        Some(0) => {}
        Some(device) => fail(format!(
            "commands have a controlling terminal (device {device:#x})"
        )),
        None => fail(format!(
            "cannot read the terminal from /proc/self/stat: {stat}"
        )),
    }
    if Path::new("/dev/tty").exists() {
        fail("/dev/tty exists".into());
    }
}

/// Nothing is open but stdin, stdout and stderr.
fn check_descriptors(fail: &mut impl FnMut(String)) {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return fail("cannot list /proc/self/fd".into());
    };
    // read_dir holds one descriptor of its own: the directory being listed.
    let open: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    if open.len() > 1 {
        fail(format!("descriptors {open:?} are open in commands"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_that_reaches_the_host_root_is_found_wherever_it_does() {
        // A root of the host's namespace maps sandboxes from a high base;
        // a map that reached its 0 (or spanned it) gives the sandbox the
        // host's root.
        assert!(!maps_outside("0 1879048192 65536\n", 0));
        assert!(maps_outside("0 0 1\n", 0));
        assert!(maps_outside("0 1879048192 1\n1 0 65535\n", 0));
        // Unprivileged, a sandbox maps only its user.
        assert!(!maps_outside("0 1000 1\n", 0));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/tab\011x\134"), "/tab\tx\\");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/bad\04"), r"/bad\04");
    }
}
