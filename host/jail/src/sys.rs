//! The system calls `rustix` has no safe wrapper for. Every `unsafe` block
//! of the jail is here, each with why it is sound.
//!
//! The jail is single-threaded from its first instruction to its last, which
//! is what makes `fork` and `clone` without `CLONE_VM` sound here: the child
//! is a copy of the only thread, so no lock (the allocator's, stdio's) can
//! be held by a thread that does not exist in the child.

#![allow(unsafe_code, reason = "the system calls below have no safe wrapper")]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Namespace flags of `clone(2)`.
pub(crate) use libc::{
    CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, CLONE_NEWUTS,
};

/// `MOUNT_ATTR_*` and `AT_*` values of `mount_setattr(2)`.
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const AT_EMPTY_PATH: libc::c_int = 0x1000;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn check(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Which side of a fork or clone this is.
pub(crate) enum Forked {
    /// The parent, with the child's pid.
    Parent(i32),
    /// The child.
    Child,
}

/// `clone(flags | SIGCHLD)` without a new stack or shared memory: a `fork`
/// whose child starts in new namespaces.
pub(crate) fn clone_into(flags: libc::c_int) -> io::Result<Forked> {
    let flags = libc::c_ulong::try_from(flags | libc::SIGCHLD).expect("clone flags are positive");
    // SAFETY: without CLONE_VM the child gets a copy of the address space,
    // as with fork, and the process is single-threaded (module docs). The
    // null stack means "the parent's", which the copy makes private.
    let pid = check(unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    })?;
    Ok(if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid as i32)
    })
}

/// `fork(2)`.
pub(crate) fn fork() -> io::Result<Forked> {
    // SAFETY: the process is single-threaded (module docs).
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets `attrs` (`MOUNT_ATTR_*`) on the mount `tree` refers to and on every
/// mount below it, in one step: there is no moment at which a submount is
/// left writable.
pub(crate) fn set_tree_attributes(tree: BorrowedFd<'_>, attrs: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed, and
    // the empty path is a NUL-terminated string; the kernel only reads both.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// A NULL-terminated array of pointers into `strings`, for `execve`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `execve(path, argv, envp)`; returns only on failure.
pub(crate) fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let (argv, envp) = (pointers(argv), pointers(envp));
    // SAFETY: every pointer points into a live NUL-terminated string and
    // both arrays end with NULL.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// `execveat(program, "", argv, envp, AT_EMPTY_PATH)`: executes the file
/// `program` refers to; returns only on failure.
pub(crate) fn execute_fd(program: BorrowedFd<'_>, argv: &[CString], envp: &[CString]) -> io::Error {
    let (argv, envp) = (pointers(argv), pointers(envp));
    // SAFETY: as for `execve`; the path is the empty string.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            program.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            AT_EMPTY_PATH,
        )
    };
    io::Error::last_os_error()
}

/// Closes every descriptor from `first` up.
pub(crate) fn close_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors; nothing in this process
    // uses one above `first` after this call (callers are about to exec or
    // hold their descriptors below it).
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) }).map(drop)
}

/// Marks every descriptor from `first` up close-on-exec.
pub(crate) fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: only sets a flag on descriptors.
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) })
        .map(drop)
}

/// Removes capability number `capability` from the bounding set.
pub(crate) fn drop_bounding_capability(capability: u32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let result = unsafe {
        libc::prctl(
            libc::PR_CAPBSET_DROP,
            libc::c_ulong::from(capability),
            0,
            0,
            0,
        )
    };
    check(result.into()).map(drop)
}

fn full_signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigfillset(&mut set);
        set
    }
}

/// Blocks (`true`) or unblocks (`false`) every signal.
pub(crate) fn block_signals(block: bool) -> io::Result<()> {
    let set = full_signal_set();
    let how = if block {
        libc::SIG_SETMASK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: `set` is initialised; the old mask is not wanted.
    let result = unsafe { libc::sigprocmask(how, &set, std::ptr::null_mut()) };
    check(result.into()).map(drop)
}

/// Waits until a signal arrives (all must be blocked) and returns its
/// number.
pub(crate) fn wait_for_signal() -> io::Result<i32> {
    let set = full_signal_set();
    loop {
        // SAFETY: `set` is initialised; the info is not wanted.
        let signal = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        match signal {
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            -1 => return Err(io::Error::last_os_error()),
            signal => return Ok(signal),
        }
    }
}

/// Restores the default action of every signal a command could inherit as
/// ignored.
pub(crate) fn reset_signal_dispositions() {
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is always a valid disposition; failures (for
        // numbers that are not signals) are harmless.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Ends this process by `signal`, as the command it waited for ended.
pub(crate) fn die_by(signal: i32) -> ! {
    // SAFETY: plain signal calls; the default action of a fatal signal ends
    // the process, and exit follows for one that does not.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let _ = block_signals(false);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// Brings the loopback device of the current network namespace up.
pub(crate) fn loopback_up() -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketType, socket};
    let socket = socket(AddressFamily::INET, SocketType::DGRAM, None)?;
    // SAFETY: ifreq is plain data; the name is copied with its NUL.
    let mut request = unsafe { std::mem::zeroed::<libc::ifreq>() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write `request`, a
    // valid ifreq, through a live socket.
    unsafe {
        check(
            libc::ioctl(
                socket.as_raw_fd(),
                request_of(libc::SIOCGIFFLAGS),
                &mut request,
            )
            .into(),
        )?;
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(socket.as_raw_fd(), request_of(libc::SIOCSIFFLAGS), &request).into())?;
    }
    Ok(())
}

/// `unshare(CLONE_NEWUSER)`: the calling process enters a new user
/// namespace, unmapped until its maps are written. The kernel refuses it
/// (`EINVAL`) in a process with more than one thread.
pub(crate) fn unshare_user_namespace() -> io::Result<()> {
    // SAFETY: unshare with a namespace flag changes no memory; the caller
    // is single-threaded, as the kernel requires for CLONE_NEWUSER.
    check(unsafe { libc::unshare(CLONE_NEWUSER) }.into()).map(drop)
}

/// The login name of `uid` through the C library (and so NSS: a cluster's
/// LDAP users are named as `newuidmap` names them), if it has one.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain data that getpwuid_r fills in; its strings
    // point into `buffer`, which outlives every read of them below.
    unsafe {
        let mut entry = std::mem::zeroed::<libc::passwd>();
        let mut found = std::ptr::null_mut::<libc::passwd>();
        let status = libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if status != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        CStr::from_ptr(entry.pw_name)
            .to_str()
            .ok()
            .map(str::to_string)
    }
}

/// An `ioctl` request as the kernel and seccomp see it: the C libraries
/// declare the constants with other types (glibc an unsigned long, musl an
/// int), the number is the same.
#[allow(
    clippy::unnecessary_cast,
    reason = "a cast on one C library, a conversion on the other"
)]
pub(crate) const fn request_number(request: libc::Ioctl) -> u64 {
    request as u64
}

/// `number` as this C library's `ioctl` takes its request.
#[allow(
    clippy::unnecessary_cast,
    clippy::cast_possible_truncation,
    reason = "a cast on one C library, a narrowing to the kernel's 32-bit request on the other"
)]
const fn request_of(number: u64) -> libc::Ioctl {
    number as libc::Ioctl
}
