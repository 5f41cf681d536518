//! The seccomp filter every command runs under: the system calls container
//! runtimes refuse to an unprivileged container fail with `EPERM`, so a
//! command cannot rebuild its mounts, make namespaces of its own (where it
//! would hold every capability again), load kernel code, or reach the
//! kernel's keyrings, clocks, swap and modules. `clone3` fails with
//! `ENOSYS`, its flags being out of a filter's reach, so C libraries fall
//! back to `clone`, whose namespace flags are checked. The terminal
//! `ioctl`s that inject input (`TIOCSTI`) or drive the console
//! (`TIOCLINUX`) fail with `EPERM` whatever descriptor they name, and
//! `fallocate` fails with `EOPNOTSUPP`, as on filesystems without it (C
//! libraries then write the blocks, which the disk limit sees growing
//! instead of appearing at once).
//!
//! Everything else is allowed: the capabilities the command lacks are the
//! first barrier ([`crate::confine`]), and this filter is the second.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Refused outright.
const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lookup_dcookie,
];

/// `ioctl` requests refused on every descriptor: pushing bytes into a
/// terminal's input queue, and the Linux console's control calls.
const DENIED_IOCTLS: [u64; 2] = [
    crate::sys::request_number(libc::TIOCSTI),
    crate::sys::request_number(libc::TIOCLINUX),
];

/// `clone` flags that make namespaces.
const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        ARCH,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| format!("compiling the seccomp filter: {e}"))
}

fn filters() -> Result<[BpfProgram; 3], String> {
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    // `clone`'s flags are its first argument on x86_64 and aarch64 alike.
    let namespace_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|condition| SeccompRule::new(vec![condition]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("building the clone rule: {e}"))?;
    denied.insert(libc::SYS_clone, namespace_rules);
    // The request is an `unsigned int` to the kernel: only the low 32 bits
    // are compared, so bits set above them cannot slip a request past.
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|&request| {
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)
                .and_then(|condition| SeccompRule::new(vec![condition]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("building the ioctl rule: {e}"))?;
    denied.insert(libc::SYS_ioctl, ioctl_rules);
    let no_clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let no_fallocate = BTreeMap::from([(libc::SYS_fallocate, Vec::new())]);
    Ok([
        compile(denied, libc::EPERM)?,
        compile(no_clone3, libc::ENOSYS)?,
        compile(no_fallocate, libc::EOPNOTSUPP)?,
    ])
}

/// Installs the filters on the calling thread (which must have
/// `no_new_privs`).
pub(crate) fn install() -> Result<(), String> {
    for filter in filters()? {
        seccompiler::apply_filter(&filter)
            .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_architecture() {
        let [denied, clone3, fallocate] = filters().unwrap();
        // One check per denied call, clone flag and ioctl, plus the arch
        // check.
        assert!(
            denied.len() > DENIED.len() + NAMESPACE_FLAGS.len() + DENIED_IOCTLS.len(),
            "{}",
            denied.len()
        );
        assert!(!clone3.is_empty());
        assert!(!fallocate.is_empty());
    }
}
