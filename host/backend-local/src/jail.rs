//! The embedded `sandfleet-jail` helper (`host/jail`), held in a sealed
//! memfd and run from there: nothing on disk to go missing or be replaced,
//! and nothing a sandbox could write through its init's `/proc/1/exe`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

use rustix::fs::{MemfdFlags, SealFlags};
use sandfleet_jail::protocol::{self, EnterRequest};
use tokio::process::Command;

use crate::error::{IoContext, LocalError};

/// The helper, built by `build.rs` for this target's musl twin.
const PROGRAM: &[u8] = include_bytes!(env!("SANDFLEET_JAIL"));

static SEALED: OnceLock<Result<OwnedFd, String>> = OnceLock::new();

fn seal() -> Result<OwnedFd, String> {
    let create = |flags| rustix::fs::memfd_create("sandfleet-jail", flags);
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // MFD_EXEC keeps the memfd executable where `vm.memfd_noexec` would
    // make it not; kernels before 6.3 refuse the flag and need none.
    let memfd = create(flags | MemfdFlags::EXEC)
        .or_else(|_| create(flags))
        .map_err(|e| format!("memfd_create: {e}"))?;
    let mut file = std::fs::File::from(memfd);
    io::Write::write_all(&mut file, PROGRAM).map_err(|e| format!("writing the memfd: {e}"))?;
    let memfd = OwnedFd::from(file);
    rustix::fs::fcntl_add_seals(
        &memfd,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )
    .map_err(|e| format!("sealing the memfd: {e}"))?;
    Ok(memfd)
}

/// A command running the helper in `mode` (`start` or `enter`), with an
/// empty environment and `/` as its directory.
fn command(mode: &str) -> Result<Command, LocalError> {
    let memfd = SEALED
        .get_or_init(seal)
        .as_ref()
        .map_err(|e| LocalError::Failed(format!("cannot load the sandbox helper: {e}")))?;
    // The child resolves /proc/self/fd/N before exec closes N (CLOEXEC).
    let mut command = Command::new(format!("/proc/self/fd/{}", memfd.as_raw_fd()));
    command
        .arg0("sandfleet-jail")
        .arg(mode)
        .env_clear()
        .current_dir("/");
    Ok(command)
}

/// The command that starts a sandbox: the caller writes the
/// [`sandfleet_jail::protocol::StartRequest`] to its stdin.
pub(crate) fn start_command() -> Result<Command, LocalError> {
    command("start")
}

/// The command that runs `request` in a sandbox, and the header to write
/// to its stdin before the command's own input.
pub(crate) fn enter_command(request: &EnterRequest) -> Result<(Command, Vec<u8>), LocalError> {
    Ok((command("enter")?, protocol::encode_header(request)))
}

/// Parses what `start` printed.
pub(crate) fn parse_started(line: &str) -> Result<protocol::Started, LocalError> {
    serde_json::from_str(line.trim())
        .map_err(io::Error::other)
        .context(|| format!("the sandbox helper answered `{}`", line.trim()))
}
