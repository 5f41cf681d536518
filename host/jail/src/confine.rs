//! What a command gives up before it runs: descriptors it inherited,
//! signal dispositions, capabilities beyond what container runtimes leave
//! a container's root, the chance to gain privileges by exec, the system
//! calls of [`crate::seccomp`], and files larger than the sandbox's disk.
//!
//! The command still runs as the root of the sandbox's user namespace, with
//! the capabilities to own, chmod and chown files and switch users inside it
//! (installing packages, writing anywhere in its writable layers), but
//! without `CAP_SYS_ADMIN` or any other capability that reaches mounts,
//! kernel settings, devices or other processes.

use rustix::process::{Resource, Rlimit};
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::{seccomp, sys};

/// Docker's default capability set, less `NET_RAW` and `MKNOD`.
pub(crate) const KEPT: CapabilitySet = CapabilitySet::CHOWN
    .union(CapabilitySet::DAC_OVERRIDE)
    .union(CapabilitySet::FOWNER)
    .union(CapabilitySet::FSETID)
    .union(CapabilitySet::KILL)
    .union(CapabilitySet::SETGID)
    .union(CapabilitySet::SETUID)
    .union(CapabilitySet::SETPCAP)
    .union(CapabilitySet::NET_BIND_SERVICE)
    .union(CapabilitySet::SYS_CHROOT)
    .union(CapabilitySet::AUDIT_WRITE)
    .union(CapabilitySet::SETFCAP);

/// Confines the calling process; run just before `execve`.
pub(crate) fn apply(file_size_limit: Option<u64>) -> Result<(), String> {
    sys::close_from(3).map_err(|e| format!("closing inherited descriptors: {e}"))?;
    sys::reset_signal_dispositions();
    sys::block_signals(false).map_err(|e| format!("unblocking signals: {e}"))?;
    if let Some(limit) = file_size_limit {
        let limit = Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        };
        rustix::process::setrlimit(Resource::Fsize, limit)
            .map_err(|e| format!("RLIMIT_FSIZE: {e}"))?;
    }
    drop_capabilities()?;
    rustix::thread::set_no_new_privs(true).map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    seccomp::install()
}

fn drop_capabilities() -> Result<(), String> {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(63);
    for capability in 0..=last {
        if KEPT.bits() & (1 << capability) == 0 {
            sys::drop_bounding_capability(capability).map_err(|e| {
                format!("dropping capability {capability} from the bounding set: {e}")
            })?;
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| format!("clearing the ambient capabilities: {e}"))?;
    let current = rustix::thread::capabilities(None).map_err(|e| format!("capget: {e}"))?;
    let kept = current.permitted & KEPT;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: kept,
            permitted: kept,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| format!("capset: {e}"))
}
