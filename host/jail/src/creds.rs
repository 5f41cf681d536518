//! What the init and commands share as children of the jail: taking the
//! root ids of the user namespace they were put in, and being waited for.

use rustix::process::{Pid, WaitOptions};
use rustix::thread::{Gid, Uid};

/// Takes uid and gid 0 of the current user namespace (and with them every
/// capability in it), with no supplementary groups where groups can be set
/// (unprivileged, `setgroups` is denied and there are none to drop).
pub(crate) fn become_root() -> Result<(), String> {
    rustix::thread::set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT)
        .map_err(|e| format!("setresgid(0): {e}"))?;
    match rustix::thread::set_thread_groups(&[]) {
        Ok(()) | Err(rustix::io::Errno::PERM) => {}
        Err(error) => return Err(format!("setgroups: {error}")),
    }
    rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT)
        .map_err(|e| format!("setresuid(0): {e}"))
}

/// How a child ended.
pub(crate) enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// This signal killed it.
    Killed(i32),
}

/// Waits for child `pid` to end; `what` names it in an error.
pub(crate) fn wait_for(pid: i32, what: &str) -> Result<Ended, String> {
    let pid = Pid::from_raw(pid).expect("a child's pid is positive");
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                if let Some(code) = status.exit_status() {
                    return Ok(Ended::Exited(code));
                }
                if let Some(signal) = status.terminating_signal() {
                    return Ok(Ended::Killed(signal));
                }
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(format!("waiting for {what}: {error}")),
        }
    }
}
