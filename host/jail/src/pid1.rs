//! `sandfleet-jail pid1`: the init of a sandbox's pid namespace. It reaps
//! the orphans re-parented to it and does nothing else until it is killed,
//! which ends every process of the sandbox.

use rustix::process::WaitOptions;

use crate::sys;

pub(crate) fn main() -> i32 {
    let _ = rustix::thread::set_name(c"sandfleet-init");
    // Not dumpable: processes of the sandbox cannot read its memory or
    // open its /proc/1/exe (the sealed program) or descriptors.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // Every signal waits in the mask; SIGKILL, from the host, is the only
    // way out.
    if sys::block_signals(true).is_err() {
        return 1;
    }
    loop {
        if sys::wait_for_signal().is_err() {
            return 1;
        }
        reap();
    }
}

/// Reaps every child that has exited. (`wait`, any child; rustix's
/// `waitpid(None)` waits only for children in the caller's process group,
/// which orphans of commands never are.)
fn reap() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}
