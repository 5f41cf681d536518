//! `sandfleet-jail enter`: runs one command (or the isolation probe) in a
//! sandbox.
//!
//! It joins the sandbox's cgroups, enters every namespace of its init at
//! once through a pidfd (so a recycled pid can never be entered), takes the
//! sandbox's root ids, and forks: the child is in the sandbox's pid
//! namespace, confines itself ([`crate::confine`]) and executes the command;
//! the parent stays outside, waits, and exits as the command did.

use std::ffi::{CString, OsStr};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::process::{Pid, PidfdFlags};
use rustix::thread::ThreadNameSpaceType;

use crate::confine;
use crate::creds::{self, Ended};
use crate::probe;
use crate::protocol::{
    self, Action, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SETUP, EnterRequest, ProcessRef,
};
use crate::sys::{self, Forked};

/// The `PATH` a command gets when its environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub(crate) fn main() -> i32 {
    match run() {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(io::stderr(), "sandfleet-jail: {message}");
            EXIT_SETUP
        }
    }
}

/// Unbuffered stdin: the header is read exactly, and every byte after it is
/// left for the command.
struct RawStdin;

impl Read for RawStdin {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::io::read(rustix::stdio::stdin(), buffer)?)
    }
}

fn run() -> Result<i32, String> {
    leave_the_terminal()?;
    sys::close_from(3).map_err(|e| format!("closing inherited descriptors: {e}"))?;
    let request = protocol::read_header(&mut RawStdin)
        .map_err(|e| format!("reading the request header: {e}"))?;
    let init = open_init(request.init)?;
    for dir in &request.cgroups {
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, "0").map_err(|e| format!("joining {}: {e}", procs.display()))?;
    }
    let mut namespaces = ThreadNameSpaceType::USER
        | ThreadNameSpaceType::MOUNT
        | ThreadNameSpaceType::PROCESS_ID
        | ThreadNameSpaceType::INTER_PROCESS_COMMUNICATION
        | ThreadNameSpaceType::HOST_NAME_AND_NIS_DOMAIN_NAME;
    if request.own_network {
        namespaces |= ThreadNameSpaceType::NETWORK;
    }
    // Entering the mount namespace also sets the root and the working
    // directory to its root: the sandbox's.
    rustix::thread::move_into_thread_name_spaces(init.as_fd(), namespaces)
        .map_err(|e| format!("entering the sandbox (init pid {}): {e}", request.init.pid))?;
    creds::become_root()?;
    match sys::fork().map_err(|e| format!("fork: {e}"))? {
        Forked::Child => std::process::exit(child(&request)),
        Forked::Parent(pid) => wait_for(pid),
    }
}

/// Starts a session of its own, which has no controlling terminal, before
/// anything of the sandbox's: the command it forks inherits it, so nothing
/// a task runs can open the terminal sandfleet was started from (and push
/// input into it with `TIOCSTI`). The helper also leads the command's
/// process group, as the backend's timeout kill expects.
pub(crate) fn leave_the_terminal() -> Result<(), String> {
    rustix::process::setsid()
        .map(drop)
        .map_err(|e| format!("setsid: {e} (the helper must not lead a process group)"))
}

/// A pidfd of the sandbox's init, checked to be the process the backend
/// started.
fn open_init(init: ProcessRef) -> Result<OwnedFd, String> {
    let gone = || format!("the sandbox's init (pid {}) is gone", init.pid);
    let pid = Pid::from_raw(init.pid).ok_or_else(gone)?;
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).map_err(|_| gone())?;
    // Checked after opening: the pidfd holds whatever process had the pid.
    if ProcessRef::of(init.pid) != Some(init) {
        return Err(gone());
    }
    Ok(pidfd)
}

/// Waits for the command and exits as it did.
fn wait_for(child: i32) -> Result<i32, String> {
    match creds::wait_for(child, "the command")? {
        Ended::Exited(code) => Ok(code),
        Ended::Killed(signal) => sys::die_by(signal),
    }
}

/// In the sandbox's pid namespace: confine, then run the action.
fn child(request: &EnterRequest) -> i32 {
    let fail = |code: i32, message: String| {
        let _ = writeln!(io::stderr(), "sandfleet-jail: {message}");
        code
    };
    if let Err(error) = rustix::process::chdir(request.workdir.as_str()) {
        return fail(
            EXIT_SETUP,
            format!("cannot change directory to {}: {error}", request.workdir),
        );
    }
    if let Err(error) = confine::apply(request.file_size_limit) {
        return fail(EXIT_SETUP, error);
    }
    if let Some(user) = &request.user
        && let Err(error) = crate::user::switch(user)
    {
        return fail(EXIT_SETUP, error);
    }
    match &request.action {
        Action::Probe(probe) => {
            let report = probe::run(probe, &request.workdir);
            let json = serde_json::to_string(&report).expect("reports serialize");
            match writeln!(io::stdout(), "{json}") {
                Ok(()) => 0,
                Err(error) => fail(EXIT_SETUP, format!("writing the probe's report: {error}")),
            }
        }
        Action::Exec { argv } => {
            let (code, message) = exec_on_path(argv, &request.env);
            fail(code, message)
        }
    }
}

/// Executes `argv` as `execvpe` would, over the `PATH` in `env`; returns
/// the exit code and message for the failure when it cannot.
fn exec_on_path(argv: &[String], env: &[(String, String)]) -> (i32, String) {
    let Some(program) = argv.first() else {
        return (EXIT_SETUP, "no program to run".into());
    };
    let to_c = |s: &[u8]| CString::new(s).ok();
    let Some(args) = argv
        .iter()
        .map(|a| to_c(a.as_bytes()))
        .collect::<Option<Vec<_>>>()
    else {
        return (
            EXIT_SETUP,
            format!("`{program}`: an argument contains a NUL byte"),
        );
    };
    let Some(envp) = env
        .iter()
        .map(|(k, v)| to_c(format!("{k}={v}").as_bytes()))
        .collect::<Option<Vec<_>>>()
    else {
        return (
            EXIT_SETUP,
            "an environment variable contains a NUL byte".into(),
        );
    };
    let candidates: Vec<std::path::PathBuf> = if program.contains('/') {
        vec![program.into()]
    } else {
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
        path.split(':')
            .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(program))
            .collect()
    };
    let mut denied = None;
    for candidate in candidates {
        let Some(path) = to_c(OsStr::as_bytes(candidate.as_os_str())) else {
            continue;
        };
        let error = sys::execve(&path, &args, &envp);
        match error.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => {}
            Some(libc::EACCES) => denied = Some(error),
            _ => return (EXIT_NOT_EXECUTABLE, format!("`{program}`: {error}")),
        }
    }
    match denied {
        Some(error) => (EXIT_NOT_EXECUTABLE, format!("`{program}`: {error}")),
        None => (
            EXIT_NOT_FOUND,
            format!("`{program}`: No such file or directory"),
        ),
    }
}
