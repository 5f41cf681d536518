//! The host programs a build runs, and how: mmdebstrap and the chroot
//! steps in namespaces of their own that die with the build, so a killed
//! build leaves nothing running; every failure told in one line.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::PATH;

/// Unpacks a layer blob into `rootfs`, owners kept.
pub(super) fn untar(blob: &Path, rootfs: &Path) -> Result<(), String> {
    run(
        Command::new("tar")
            .args(["--numeric-owner", "-xpzf"])
            .arg(blob)
            .arg("-C")
            .arg(rootfs),
        "unpacking a layer",
    )
}

/// Runs `script` with bash in `rootfs` through `chroot`, with a clean
/// environment (`PATH`, `HOME`, `LANG`, pip offline, and `env`).
pub(super) fn chroot(
    rootfs: &Path,
    env: &[(String, String)],
    script: &str,
    what: &str,
) -> Result<(), String> {
    let mut command = contained("/usr/sbin/chroot");
    command.arg(rootfs).args([
        "/usr/bin/env",
        "-i",
        &format!("PATH={PATH}"),
        "HOME=/root",
        "LANG=C.UTF-8",
        "PIP_NO_INDEX=1",
        "PIP_NO_CACHE_DIR=1",
        "PIP_NO_BUILD_ISOLATION=0",
        "PIP_DISABLE_PIP_VERSION_CHECK=1",
    ]);
    command.args(env.iter().map(|(k, v)| format!("{k}={v}")));
    command.args(["/bin/bash", "-c", script]);
    run(&mut command, what)
}

/// `program` in a mount and a pid namespace of its own, killed with
/// everything it started when the build is (`setpriv --pdeathsig`,
/// `unshare --kill-child`): a killed build leaves no process writing into
/// its work directory and none of mmdebstrap's mounts (`/proc`, `/sys`,
/// `/dev/pts` of its chroot) on the host.
pub(super) fn contained(program: &str) -> Command {
    let mut command = Command::new("/usr/bin/setpriv");
    command.args([
        "--pdeathsig",
        "KILL",
        "/usr/bin/unshare",
        "--pid",
        "--kill-child",
    ]);
    command.args(["--mount", "--propagation", "private", "--", program]);
    command
}

/// Runs `command`; an error names `what`, the exit status and the first
/// error line the command printed (else its last line).
pub(super) fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", command.get_program()))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The first error apt, mmdebstrap or pip reports says what failed (a
    // mirror that cannot be reached); the last line says that it did.
    let lines = || stderr.lines().chain(stdout.lines());
    let said = lines()
        .find(|l| l.starts_with("E: ") || l.starts_with("ERROR: "))
        .or_else(|| lines().rfind(|l| !l.trim().is_empty()))
        .unwrap_or("(no output)")
        .trim();
    Err(format!("{what} failed ({}): {said}", output.status))
}

pub(super) fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

pub(super) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}
