//! `sandfleet-jail`: the helper that builds, enters and probes the local
//! backend's sandboxes.
//!
//! Sandboxes are set up by system calls in a small single-threaded process,
//! never by the multi-threaded host: forking a threaded process and then
//! allocating, or entering a user namespace from one, is unsound or refused
//! by the kernel. The backend embeds this binary and runs it from a sealed
//! memfd (as runc does since CVE-2019-5736), so nothing inside a sandbox can
//! rewrite the program its init runs. It has three modes:
//!
//! ```text
//! sandfleet-jail start   < StartRequest      supervisor: makes the sandbox, prints
//!   └── pid 1 (argv[0] = marker)             `Started`, waits for its init
//! sandfleet-jail enter   < header + stdin     enters a sandbox and runs one command
//!   └── the command (confined)                (or the isolation probe) inside it
//! ```
//!
//! * **start** ([`supervise`]) clones the init into new user, mount, pid, ipc,
//!   uts and (unless the sandbox shares the host's network) net namespaces,
//!   writes its uid and gid maps, puts it in its cgroups and lets it build
//!   its root filesystem ([`rootfs`]); the init then re-executes itself as
//!   the reaper of the sandbox's pid namespace ([`pid1`]).
//! * **enter** ([`enter`]) joins the sandbox's cgroups and namespaces
//!   through a pidfd of its init, forks into its pid namespace, confines
//!   the child ([`confine`]: capabilities, `no_new_privs`, seccomp, limits,
//!   descriptors) and executes the command, or runs the [`probe`] that
//!   checks, as a task would see it, that the host is out of reach.
//!
//! The request and answer types are in [`protocol`]; [`cgroup`] is also used
//! by the backend to create, limit and remove sandboxes' cgroups. Linux only.

pub mod cgroup;
mod confine;
mod creds;
mod enter;
mod image_root;
mod overlay;
mod pid1;
mod probe;
pub mod protocol;
mod rootfs;
mod seccomp;
pub mod subordinate;
mod supervise;
mod sys;
pub mod uid_map;
mod user;
mod volumes;

use std::io::Write;

/// The entry point of the `sandfleet-jail` binary.
pub fn main() -> ! {
    // Run from a memfd, the process would be named after its descriptor.
    let _ = rustix::thread::set_name(c"sandfleet-jail");
    let mut args = std::env::args_os().skip(1);
    let mode = args.next();
    let code = match mode.as_ref().and_then(|m| m.to_str()) {
        Some("start") => supervise::main(),
        Some("enter") => enter::main(),
        Some("pid1") => pid1::main(),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "sandfleet-jail: usage: sandfleet-jail start|enter (run by sandfleet's local backend)"
            );
            protocol::EXIT_SETUP
        }
    };
    std::process::exit(code)
}
