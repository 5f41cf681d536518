//! A call's deadline, counted in the CPU time of the thread running it.
//!
//! A plugin cannot wait on anything (it has no files, network, clock or
//! sleep), so the only time it can take that is its own is the CPU it
//! computes with; wall time adds whatever else the host runs. Counted in
//! wall time, a busy host turned correct plugins into faulting ones: a
//! JavaScript placement policy's first call, and a 100 MB log's grade,
//! passed their deadlines while other work held the cores, and a fault
//! sends every later call to the fallback. So the epoch ticker only says
//! when to look: at each deadline in ticks the store's callback reads the
//! thread's CPU clock, and the call goes on for what its budget has left.
//! A call the host cannot run at all still ends, at
//! [`WALL_CEILING_FACTOR`] times its deadline of wall time.
//!
//! A call runs start to end on one thread (the host's calls are
//! synchronous; async callers hand them to tokio's blocking pool), which is
//! what makes the thread's CPU clock the call's.

use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::store::StoreState;

/// How many times its deadline a call may take in wall time, the host too
/// busy to run it, before it ends whatever CPU it has used.
pub const WALL_CEILING_FACTOR: u32 = 10;

/// What one call may still use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallClock {
    cpu_at_start: Duration,
    cpu_budget: Duration,
    wall_ceiling: Instant,
}

impl CallClock {
    /// A clock for a call starting now on this thread.
    pub(crate) fn start(deadline: Duration) -> Self {
        CallClock {
            cpu_at_start: thread_cpu(),
            cpu_budget: deadline,
            wall_ceiling: Instant::now() + deadline * WALL_CEILING_FACTOR,
        }
    }

    /// The time the call may still run, or `None` once its CPU budget or
    /// its wall ceiling is spent.
    fn remaining(&self) -> Option<Duration> {
        let cpu_left = self
            .cpu_budget
            .checked_sub(thread_cpu().saturating_sub(self.cpu_at_start))
            .filter(|left| !left.is_zero())?;
        let wall_left = self
            .wall_ceiling
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())?;
        Some(cpu_left.min(wall_left))
    }
}

impl Default for CallClock {
    /// Spent: a store's clock is armed before each call, so a new store
    /// need not read the CPU clock.
    fn default() -> Self {
        CallClock {
            cpu_at_start: Duration::ZERO,
            cpu_budget: Duration::ZERO,
            wall_ceiling: Instant::now(),
        }
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let now = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Epoch ticks that cover `time`, one more for the tick under way.
fn ticks(time: Duration, tick: Duration) -> u64 {
    (time.as_nanos() / tick.as_nanos().max(1)) as u64 + 1
}

/// Makes `store` end a call (as a [`Trap::Interrupt`]) once the clock
/// [`arm`] gave it runs out, looking at it every time the epoch passes the
/// deadline it set, with the epoch advancing every `tick`.
pub(crate) fn install(store: &mut Store<StoreState>, tick: Duration) {
    store.epoch_deadline_callback(move |context| match context.data().clock.remaining() {
        Some(left) => Ok(UpdateDeadline::Continue(ticks(left, tick))),
        None => Err(Trap::Interrupt.into()),
    });
}

/// Gives the next call of `store` `deadline` of CPU time from now.
pub(crate) fn arm(store: &mut Store<StoreState>, deadline: Duration, tick: Duration) {
    store.data_mut().clock = CallClock::start(deadline);
    store.set_epoch_deadline(ticks(deadline, tick));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns CPU on this thread until its clock has advanced by `cpu`.
    fn spin(cpu: Duration) {
        let until = thread_cpu() + cpu;
        while thread_cpu() < until {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_clock_runs_down_with_the_threads_cpu_not_with_wall_time() {
        let clock = CallClock::start(Duration::from_millis(50));
        // Wall time without CPU: a blocked thread, as a descheduled one.
        std::thread::sleep(Duration::from_millis(80));
        let left = clock.remaining().expect("no CPU used yet");
        assert!(left > Duration::from_millis(45), "{left:?}");
        spin(Duration::from_millis(60));
        assert_eq!(clock.remaining(), None);
    }

    #[test]
    fn a_call_that_cannot_run_ends_at_its_wall_ceiling() {
        let clock = CallClock::start(Duration::from_millis(2));
        std::thread::sleep(Duration::from_millis(2) * WALL_CEILING_FACTOR);
        assert_eq!(clock.remaining(), None);
    }

    #[test]
    fn another_threads_cpu_is_not_the_calls() {
        let clock = CallClock::start(Duration::from_millis(30));
        std::thread::spawn(|| spin(Duration::from_millis(60)))
            .join()
            .unwrap();
        assert!(clock.remaining().is_some());
    }
}
