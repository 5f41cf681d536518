//! Holding a sandbox's processes still while its files are copied: every
//! process found in it (its cgroup, or its pid namespace) is stopped with
//! SIGSTOP, which no process can catch or ignore, until a look finds no
//! process it has not stopped; they are continued when the freeze ends.
//!
//! A cgroup freezer would do the same without a signal, but v1 hierarchies
//! (this project's CI machines among them) need a freezer hierarchy of
//! their own; stopping works wherever the sandbox's members can be found.
//! What a task sees of it: a process it had stopped itself is continued
//! at the thaw.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::blocking;
use crate::disk::Members;
use crate::error::LocalError;
use crate::process::{Process, ProcessIdentity};

/// How many looks for processes not yet stopped (a process forking as fast
/// as it can makes one new child per look at most).
const MAX_LOOKS: usize = 64;

/// How long stopped processes get to come to a halt (one in the middle of
/// a system call halts when the call returns).
const HALT_WAIT: Duration = Duration::from_secs(2);

/// A sandbox's processes, stopped until this is dropped.
#[derive(Debug)]
pub(crate) struct Frozen {
    stopped: Vec<Process>,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for process in &self.stopped {
            process.signal(Signal::CONT);
        }
    }
}

/// Stops every process of `members` and waits until each has halted.
///
/// # Errors
///
/// [`LocalError::Failed`] when new processes keep appearing after
/// [`MAX_LOOKS`] looks, or one does not halt within [`HALT_WAIT`]; the
/// processes stopped so far are continued.
pub(crate) async fn freeze(members: Members) -> Result<Frozen, LocalError> {
    blocking(move || {
        let mut frozen = Frozen {
            stopped: Vec::new(),
        };
        let mut seen: HashSet<ProcessIdentity> = HashSet::new();
        let mut settled = false;
        for _ in 0..MAX_LOOKS {
            let mut new = false;
            for pid in members.pids() {
                let Some(identity) = ProcessIdentity::of(pid) else {
                    continue;
                };
                if !seen.insert(identity) {
                    continue;
                }
                if let Some(process) = Process::open(identity) {
                    process.signal(Signal::STOP);
                    frozen.stopped.push(process);
                    new = true;
                }
            }
            if !new {
                settled = true;
                break;
            }
        }
        if !settled {
            return Err(LocalError::Failed(format!(
                "new processes kept appearing while {} were stopped",
                frozen.stopped.len()
            )));
        }
        let until = Instant::now() + HALT_WAIT;
        while !frozen.stopped.iter().all(Process::is_still) {
            if Instant::now() >= until {
                return Err(LocalError::Failed(format!(
                    "a stopped process did not halt within {HALT_WAIT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(frozen)
    })
    .await
}
