//! Host processes: reading `/proc`, finding the commands of unisolated
//! sandboxes by their marker, and killing processes through pidfds so a
//! recycled pid is never hit.
//!
//! Sandbox processes carry a marker `sandfleet-sandbox:<run-id>:<id>`: a
//! namespaced sandbox's init as its `argv[0]` (for people reading `ps`;
//! nothing reads it back, since a task can name its own processes so), the
//! commands of a plain (unisolated) sandbox in the environment variable
//! [`MARKER_ENV`], by inheritance. Plain sandboxes keep no record of their
//! commands, so a reap finds them by that marker, among processes of
//! sandfleet's own user, and only ever kills what it finds.
//!
//! Also here: running a helper tool (`cp`, `git`) with a bound.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};
use sandfleet_core::RunId;
use tokio::process::Command;

use crate::error::{IoContext, LocalError};

/// What every sandbox marker starts with.
const MARKER_PREFIX: &str = "sandfleet-sandbox:";

/// The environment variable carrying the marker of a plain sandbox's
/// commands.
pub(crate) const MARKER_ENV: &str = "SANDFLEET_SANDBOX";

/// The marker of sandbox `sandbox_id` of run `run_id`.
pub(crate) fn sandbox_marker(run_id: &RunId, sandbox_id: &str) -> String {
    format!("{MARKER_PREFIX}{run_id}:{sandbox_id}")
}

/// Splits a marker into run id and sandbox id.
fn parse_marker(marker: &str) -> Option<(&str, &str)> {
    marker.strip_prefix(MARKER_PREFIX)?.split_once(':')
}

/// A process as it was when seen: its pid and its start time in clock ticks
/// after boot (field 22 of `/proc/<pid>/stat`). A recycled pid has another
/// start time, so the pair names one process for as long as the machine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) struct ProcessIdentity {
    /// The pid in the host's pid namespace.
    pub(crate) pid: i32,
    /// Clock ticks after boot when it started.
    pub(crate) start_time: u64,
}

impl ProcessIdentity {
    /// The process now running as `pid`, if any.
    pub(crate) fn of(pid: i32) -> Option<Self> {
        read_stat(pid).map(|stat| ProcessIdentity {
            pid,
            start_time: stat.start_time,
        })
    }
}

/// The fields of `/proc/<pid>/stat` this crate uses.
struct Stat {
    zombie: bool,
    /// Stopped by a signal (or a tracer): it runs nothing until continued.
    stopped: bool,
    /// The kernel is tearing it down (`PF_EXITING`): it will not run
    /// another instruction of its own.
    exiting: bool,
    group: u32,
    start_time: u64,
}

/// `PF_EXITING` in the flags of `/proc/<pid>/stat` (field 9).
const PF_EXITING: u64 = 0x4;

fn read_stat(pid: i32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself contain
    // spaces and parentheses; the fields after the last `)` start at field 3.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Stat {
        zombie: *fields.first()? == "Z",
        stopped: matches!(*fields.first()?, "T" | "t"),
        exiting: fields.get(6)?.parse::<u64>().ok()? & PF_EXITING != 0,
        group: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Pids of every process visible in `/proc`.
fn all_pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every process (by host pid) in the pid namespace of process `pid`,
/// found from the host's `/proc`: nothing inside the namespace can hide one.
pub(crate) fn pid_namespace_members(pid: i32) -> Vec<i32> {
    let Ok(namespace) = fs::read_link(format!("/proc/{pid}/ns/pid")) else {
        return Vec::new();
    };
    all_pids()
        .into_iter()
        .filter(|other| {
            fs::read_link(format!("/proc/{other}/ns/pid")).is_ok_and(|ns| ns == namespace)
        })
        .collect()
}

/// The plain-sandbox marker process `pid` carries, if any: the value of
/// [`MARKER_ENV`] in its environment, for a process of sandfleet's own
/// user (the only one plain sandboxes' commands run as).
fn plain_marker_of(pid: i32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let owner = fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    if owner != rustix::process::geteuid().as_raw() {
        return None;
    }
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let wanted = format!("{MARKER_ENV}=");
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(wanted.as_bytes()))
        .and_then(|value| String::from_utf8(value.to_vec()).ok())
}

/// Which marked processes to look for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MarkerScope<'a> {
    /// Every sandbox of a run.
    Run(&'a RunId),
    /// One sandbox.
    Sandbox(&'a RunId, &'a str),
}

impl MarkerScope<'_> {
    fn matches(&self, marker: &str) -> bool {
        match (parse_marker(marker), self) {
            (Some((run, _)), MarkerScope::Run(wanted)) => run == wanted.as_str(),
            (Some((run, id)), MarkerScope::Sandbox(wanted_run, wanted_id)) => {
                run == wanted_run.as_str() && id == *wanted_id
            }
            (None, _) => false,
        }
    }
}

/// Every live command of a plain sandbox in `scope`, held by pidfd: to be
/// killed, never to name anything.
///
/// Reading a process's environment is the costly part of a scan (about
/// 40 µs a process: a release among 1,000 other sandboxes' commands took
/// 44 ms), so the marked processes found are kept, each with its pidfd,
/// and a later scan reads only the pids it has not seen: a kept pidfd that
/// is not readable is the same live process, its marker as found. Only
/// marked processes are kept: an unmarked one may still be a command
/// between its fork and its exec, so it is read again every time.
pub(crate) fn find_plain(scope: MarkerScope<'_>) -> Vec<Process> {
    static SEEN: LazyLock<Mutex<HashMap<i32, Marked>>> = LazyLock::new(Mutex::default);
    let mut seen = SEEN.lock().expect("marked processes lock poisoned");
    let own_pid = std::process::id() as i32;
    let pids: HashSet<i32> = all_pids()
        .into_iter()
        .filter(|&pid| pid != own_pid)
        .collect();
    seen.retain(|pid, _| pids.contains(pid));
    let mut found = Vec::new();
    let mut take = |marked: &Marked| {
        if scope.matches(&marked.marker)
            && let Some(process) = marked.process.try_clone()
        {
            found.push(process);
        }
    };
    for pid in pids {
        // Checked after listing: a kept process still alive holds its pid,
        // so the listed pid is that process and not a later one.
        if let Some(marked) = seen.get(&pid).filter(|marked| !marked.process.has_exited()) {
            take(marked);
            continue;
        }
        seen.remove(&pid);
        let Some(marked) = Marked::read(pid) else {
            continue;
        };
        take(&marked);
        if seen.len() < max_kept_pidfds() {
            seen.insert(pid, marked);
        }
    }
    found
}

/// A process found with a plain-sandbox marker.
struct Marked {
    process: Process,
    marker: String,
}

impl Marked {
    /// The process `pid` and its marker, if it has one.
    fn read(pid: i32) -> Option<Self> {
        let marker = plain_marker_of(pid)?;
        let process = Process::open(ProcessIdentity::of(pid)?)?;
        // The pidfd pins what we kill; the marker must still be on it.
        (plain_marker_of(pid).as_deref() == Some(marker.as_str()))
            .then_some(Marked { process, marker })
    }
}

/// How many marked processes' pidfds [`find_plain`] keeps: a quarter of
/// the descriptors this process may open, so that keeping them never
/// starves its sockets and files; past it, the rest are read every time.
fn max_kept_pidfds() -> usize {
    static MAX: LazyLock<usize> = LazyLock::new(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        usize::try_from(limit / 4).unwrap_or(usize::MAX).min(16_384)
    });
    *MAX
}

/// A process held by a pidfd: signals reach it or nothing, never a process
/// that later got the same pid.
#[derive(Debug)]
pub(crate) struct Process {
    identity: ProcessIdentity,
    pidfd: OwnedFd,
}

impl Process {
    /// Opens the process `identity` names; `None` when it is gone or its pid
    /// now belongs to another process.
    pub(crate) fn open(identity: ProcessIdentity) -> Option<Self> {
        let pidfd =
            rustix::process::pidfd_open(Pid::from_raw(identity.pid)?, PidfdFlags::empty()).ok()?;
        // Checked after opening: the pidfd now holds whatever process had the
        // pid, and only the start time tells whether it is the one we mean.
        (ProcessIdentity::of(identity.pid) == Some(identity)).then_some(Process { identity, pidfd })
    }

    /// Another handle on the same process; `None` when out of descriptors.
    fn try_clone(&self) -> Option<Self> {
        Some(Process {
            identity: self.identity,
            pidfd: self.pidfd.try_clone().ok()?,
        })
    }

    /// Its pid and start time.
    pub(crate) fn identity(&self) -> ProcessIdentity {
        self.identity
    }

    /// Sends SIGKILL. True when that ended it; false when it had already
    /// exited (a zombie takes signals, but is gone) or was already exiting
    /// (a killed pid namespace's init stays exiting, out of `/proc`'s sight
    /// and signallable, until every other process of its namespace is
    /// reaped). The signal goes out either way. A leader that exited while
    /// its other threads run shows as a zombie, not as exiting, and counts:
    /// the signal ends those threads.
    pub(crate) fn kill(&self) -> bool {
        let exiting = read_stat(self.identity.pid).is_some_and(|stat| stat.exiting && !stat.zombie);
        self.signal(Signal::KILL) && !exiting
    }

    /// Sends `signal`. True when it was delivered, false when the process
    /// had already exited.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        if self.has_exited() {
            return false;
        }
        match rustix::process::pidfd_send_signal(&self.pidfd, signal) {
            Ok(()) => true,
            Err(Errno::SRCH) => false,
            Err(error) => {
                tracing::warn!(pid = self.identity.pid, %error, "cannot signal process");
                false
            }
        }
    }

    /// Whether it is stopped, or gone (a process that exited runs nothing
    /// either).
    pub(crate) fn is_still(&self) -> bool {
        self.has_exited()
            || read_stat(self.identity.pid).is_none_or(|stat| stat.stopped || stat.zombie)
    }

    /// Whether it has exited.
    pub(crate) fn has_exited(&self) -> bool {
        self.poll_exit(Duration::ZERO)
    }

    /// Whether it has exited or is exiting. A killed pid namespace's init
    /// stays exiting until every other process of its namespace is reaped,
    /// so a command entered into the namespace ends before its init does.
    pub(crate) fn is_ending(&self) -> bool {
        self.has_exited() || read_stat(self.identity.pid).is_none_or(|stat| stat.exiting)
    }

    /// Waits up to `timeout` for it to exit; true when it did.
    pub(crate) async fn exited_within(self, timeout: Duration) -> bool {
        // A blocking poll on a worker thread: registering the pidfd with
        // tokio's reactor needs `unsafe` in this tokio.
        tokio::task::spawn_blocking(move || self.poll_exit(timeout))
            .await
            .unwrap_or(false)
    }

    /// Polls the pidfd, which turns readable once the process has exited.
    fn poll_exit(&self, timeout: Duration) -> bool {
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        loop {
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(ready) => return ready > 0,
                Err(Errno::INTR) => continue,
                // A pidfd that cannot be polled belongs to no live process.
                Err(_) => return true,
            }
        }
    }
}

/// Kills `processes` and waits up to `timeout` for all of them to exit.
/// Returns how many were killed (running, not exiting, when signalled).
pub(crate) async fn kill_all(processes: Vec<Process>, timeout: Duration) -> usize {
    let killed = processes.iter().filter(|process| process.kill()).count();
    let mut waits = tokio::task::JoinSet::new();
    for process in processes {
        waits.spawn(async move {
            let pid = process.identity.pid;
            if !process.exited_within(timeout).await {
                tracing::warn!(pid, ?timeout, "process still running after SIGKILL");
            }
        });
    }
    waits.join_all().await;
    killed
}

/// Waits up to `timeout` until no member of process group `group` is alive;
/// a zombie waiting for its reaper counts as gone. A killed process closes
/// its pipes before it has finished exiting, so the end of a command's
/// output does not yet mean that its group is gone. True when it is.
pub(crate) async fn group_gone_within(group: u32, timeout: Duration) -> bool {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let alive = all_pids()
            .into_iter()
            .any(|pid| read_stat(pid).is_some_and(|stat| stat.group == group && !stat.zombie));
        if !alive {
            return true;
        }
        if tokio::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Sends SIGKILL to every member of process group `group` but its leader,
/// in a few passes to catch children forked meanwhile.
pub(crate) fn kill_group_but_leader(group: u32) {
    for _ in 0..3 {
        let members: Vec<i32> = all_pids()
            .into_iter()
            .filter(|&pid| {
                u32::try_from(pid).is_ok_and(|pid| pid != group)
                    && read_stat(pid).is_some_and(|stat| stat.group == group && !stat.zombie)
            })
            .collect();
        if members.is_empty() {
            return;
        }
        for pid in members.into_iter().filter_map(Pid::from_raw) {
            match rustix::process::kill_process(pid, Signal::KILL) {
                Ok(()) | Err(Errno::SRCH) => {}
                Err(error) => {
                    tracing::warn!(pid = pid.as_raw_nonzero().get(), %error, "cannot kill process")
                }
            }
        }
    }
}

/// Sends SIGKILL to process group `group`; a group that is already gone is
/// not an error.
pub(crate) fn kill_group(group: u32) {
    let Some(pid) = i32::try_from(group).ok().and_then(Pid::from_raw) else {
        return;
    };
    match rustix::process::kill_process_group(pid, Signal::KILL) {
        Ok(()) | Err(Errno::SRCH) => {}
        Err(error) => tracing::warn!(group, %error, "cannot kill process group"),
    }
}

/// Runs a helper tool (`cp`, `git`) to completion within `timeout`; a
/// failure carries `what` and the tool's stderr.
pub(crate) async fn run_tool(
    mut command: Command,
    what: &str,
    timeout: Duration,
) -> Result<(), LocalError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().context(|| format!("{what}: starting"))?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| LocalError::Timeout {
            what: what.to_string(),
            after: timeout,
        })?
        .context(|| what.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LocalError::Failed(format!(
            "{what}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_match_their_run_and_sandbox_only() {
        let run = RunId::new("run-1").unwrap();
        let marker = sandbox_marker(&run, "py-3");
        assert_eq!(parse_marker(&marker), Some(("run-1", "py-3")));
        assert!(MarkerScope::Run(&run).matches(&marker));
        assert!(MarkerScope::Sandbox(&run, "py-3").matches(&marker));
        assert!(!MarkerScope::Sandbox(&run, "py-30").matches(&marker));
        let other = RunId::new("run-10").unwrap();
        assert!(!MarkerScope::Run(&other).matches(&marker));
        assert!(!MarkerScope::Run(&run).matches("sandfleet-sandboxrun-1:x"));
    }

    /// A `sleep` child marked as `marker`'s command, or unmarked.
    fn sleeper(marker: Option<&str>) -> std::process::Child {
        let mut command = std::process::Command::new("sleep");
        command.arg("60").env_remove(MARKER_ENV);
        if let Some(marker) = marker {
            command.env(MARKER_ENV, marker);
        }
        command.spawn().unwrap()
    }

    fn found_pids(scope: MarkerScope<'_>) -> Vec<i32> {
        let mut pids: Vec<i32> = find_plain(scope)
            .iter()
            .map(|process| process.identity().pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    #[test]
    fn a_scan_finds_the_commands_it_kept_and_new_ones_and_drops_those_that_exited() {
        let run = RunId::generate("kept");
        let marker = sandbox_marker(&run, "s-1");
        let mut first = sleeper(Some(&marker));
        let mut other_sandbox = sleeper(Some(&sandbox_marker(&run, "s-2")));
        let mut unmarked = sleeper(None);
        let scope = MarkerScope::Sandbox(&run, "s-1");
        assert_eq!(found_pids(scope), vec![first.id() as i32]);
        // Found again from what the first scan kept, with a newcomer read.
        let mut second = sleeper(Some(&marker));
        let mut both = vec![first.id() as i32, second.id() as i32];
        both.sort_unstable();
        assert_eq!(found_pids(scope), both);
        first.kill().unwrap();
        first.wait().unwrap();
        assert_eq!(found_pids(scope), vec![second.id() as i32]);
        let run_wide = found_pids(MarkerScope::Run(&run));
        assert_eq!(run_wide.len(), 2, "{run_wide:?}");
        assert!(run_wide.contains(&(other_sandbox.id() as i32)));
        for child in [&mut second, &mut other_sandbox, &mut unmarked] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(found_pids(MarkerScope::Run(&run)).is_empty());
    }

    #[test]
    fn a_process_seen_unmarked_is_found_once_it_runs_with_a_marker() {
        // A command's process is unmarked between its fork and its exec; a
        // scan in that window must not settle that it is no command.
        let run = RunId::generate("late");
        let marker = sandbox_marker(&run, "s-1");
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read -r _; exec env \"$0\" sleep 60"])
            .arg(format!("{MARKER_ENV}={marker}"))
            .env_remove(MARKER_ENV)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let scope = MarkerScope::Sandbox(&run, "s-1");
        assert!(found_pids(scope).is_empty());
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
        // `env` execs `sleep` with the marker in the same process; wait
        // until `sleep` runs there.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|exe| !exe.to_string_lossy().ends_with("/sleep"))
        {
            assert!(std::time::Instant::now() < deadline, "sleep never ran");
            std::thread::yield_now();
        }
        assert_eq!(found_pids(scope), vec![pid]);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn identity_tells_a_live_process_from_a_recycled_pid() {
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        let process = Process::open(me).unwrap();
        assert!(!process.has_exited());
        let recycled = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(Process::open(recycled).is_none());
    }

    #[tokio::test]
    async fn killed_processes_are_waited_for() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id().unwrap() as i32;
        let identity = ProcessIdentity::of(pid).unwrap();
        let process = Process::open(identity).unwrap();
        // Our own child stays a zombie until reaped, which the pidfd still
        // reports as exited.
        let reaper = tokio::spawn(async move { child.wait().await });
        assert_eq!(kill_all(vec![process], Duration::from_secs(5)).await, 1);
        assert!(!reaper.await.unwrap().unwrap().success());
        assert!(Process::open(identity).is_none());
    }

    /// A cancelled sandbox's init is killed with its namespace: it stays
    /// exiting while a process of its namespace waits for a parent outside
    /// to reap it. A reap that finds it then has killed nothing.
    #[tokio::test]
    async fn a_process_already_exiting_is_not_counted_as_killed() {
        use std::process::Command as StdCommand;
        use std::time::Instant;
        // pid 1 of a new pid namespace: `sleep`, the child of `unshare`.
        let unshare = match StdCommand::new("unshare")
            .args(["--pid", "--fork", "sleep", "60"])
            .spawn()
        {
            Ok(child) => child,
            Err(error) => {
                eprintln!("skipped: unshare: {error}");
                return;
            }
        };
        let mut left = Leftovers(vec![unshare]);
        let Some(init) = only_child(left.0[0].id() as i32) else {
            eprintln!(
                "skipped: no pid namespace (unshare: {:?})",
                left.0[0].wait()
            );
            return;
        };
        // A member of that namespace whose parent, outside it, is stopped
        // and so leaves it a zombie once killed.
        let nsenter = StdCommand::new("nsenter")
            .args(["--target", &init.to_string(), "--pid", "sleep", "60"])
            .spawn()
            .unwrap();
        let outside = Pid::from_raw(nsenter.id() as i32).unwrap();
        left.0.push(nsenter);
        only_child(outside.as_raw_nonzero().get()).expect("nsenter forks its command");
        rustix::process::kill_process(outside, Signal::STOP).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Stopped before the kill, or it could reap its child first.
        while !read_stat(outside.as_raw_nonzero().get()).is_some_and(|stat| stat.stopped) {
            assert!(Instant::now() < deadline, "nsenter never stopped");
            std::thread::yield_now();
        }
        let identity = ProcessIdentity::of(init).unwrap();
        assert!(
            Process::open(identity).unwrap().kill(),
            "a running init is ended by the kill"
        );
        while !read_stat(init).is_some_and(|stat| stat.exiting && !stat.zombie) {
            assert!(Instant::now() < deadline, "the init never became exiting");
            std::thread::yield_now();
        }
        // It stays exiting until nsenter, continued, reaps its child.
        let exiting = Process::open(identity).unwrap();
        assert!(!exiting.kill(), "an exiting init was counted as killed");
        rustix::process::kill_process(outside, Signal::CONT).unwrap();
        assert!(exiting.exited_within(Duration::from_secs(10)).await);
    }

    /// Children killed and reaped however the test ends.
    struct Leftovers(Vec<std::process::Child>);

    impl Drop for Leftovers {
        fn drop(&mut self) {
            for child in self.0.iter_mut().rev() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// The one child of `parent`, once it has one (within 10 s).
    fn only_child(parent: i32) -> Option<i32> {
        use std::time::Instant;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let children =
                fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
            if let Some(child) = children.split_whitespace().next() {
                return child.parse().ok();
            }
            if Instant::now() >= deadline || read_stat(parent).is_none_or(|stat| stat.zombie) {
                return None;
            }
            std::thread::yield_now();
        }
    }
}
