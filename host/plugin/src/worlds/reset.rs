//! The `reset-check` world.

use super::{check_commands, off_runtime};
use crate::error::CallError;

pub use crate::bindings::latest::reset::exports::sandfleet::plugin::reset::Verdict;
pub use crate::bindings::types::{Command, CommandOutput, Task};

super::typed_world!(
    /// A reset check: makes recycling a sandbox safe.
    ResetCheck,
    ResetWorld,
    Reset,
    reset::{ResetCheckPre, ResetCheck},
    ResetPre,
    ResetInstance
);

impl ResetCheck {
    /// [`ResetCheck::baseline_blocking`] on tokio's blocking pool; the form
    /// to call from async code (see [`ResetCheck`]).
    ///
    /// # Errors
    ///
    /// As [`ResetCheck::baseline_blocking`]; [`CallErrorKind::HostPanic`]
    /// when the host panicked during the call.
    ///
    /// [`CallErrorKind::HostPanic`]: crate::CallErrorKind::HostPanic
    pub fn baseline(
        &self,
        task: &Task,
    ) -> impl Future<Output = Result<Vec<Command>, CallError>> + Send + 'static + use<> {
        let (this, task) = (self.clone(), task.clone());
        off_runtime(self.0.plugin(), "baseline", move || {
            this.baseline_blocking(&task)
        })
    }

    /// As [`ResetCheck::reset_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`ResetCheck::reset_blocking`], and as [`ResetCheck::baseline`].
    pub fn reset(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
    ) -> impl Future<Output = Result<Vec<Command>, CallError>> + Send + 'static + use<> {
        let (this, task, baseline) = (self.clone(), task.clone(), baseline.to_vec());
        off_runtime(self.0.plugin(), "reset", move || {
            this.reset_blocking(&task, &baseline)
        })
    }

    /// As [`ResetCheck::verify_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`ResetCheck::verify_blocking`], and as [`ResetCheck::baseline`].
    pub fn verify(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
        outputs: &[CommandOutput],
    ) -> impl Future<Output = Result<Verdict, CallError>> + Send + 'static + use<> {
        let (this, task) = (self.clone(), task.clone());
        let (baseline, outputs) = (baseline.to_vec(), outputs.to_vec());
        off_runtime(self.0.plugin(), "verify", move || {
            this.verify_blocking(&task, &baseline, &outputs)
        })
    }

    /// Commands that record the pristine state of a fresh sandbox. Runs on
    /// the calling thread, which must not be an async runtime's worker.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a
    /// command without a program.
    pub fn baseline_blocking(&self, task: &Task) -> Result<Vec<Command>, CallError> {
        self.0.call(
            "baseline",
            |instance, store| match instance {
                ResetInstance::V0_1_0(old) => {
                    old.sandfleet_plugin_reset().call_baseline(store, task)
                }
                ResetInstance::V0_2_0(latest) => {
                    latest.sandfleet_plugin_reset().call_baseline(store, task)
                }
            },
            |commands| check_commands(commands.iter().map(|c| c.argv.as_slice()), "baseline"),
        )
    }

    /// Commands that reset a used sandbox and probe its state, on the
    /// calling thread.
    ///
    /// # Errors
    ///
    /// As [`ResetCheck::baseline_blocking`].
    pub fn reset_blocking(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
    ) -> Result<Vec<Command>, CallError> {
        self.0.call(
            "reset",
            |instance, store| match instance {
                ResetInstance::V0_1_0(old) => old
                    .sandfleet_plugin_reset()
                    .call_reset(store, task, baseline),
                ResetInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_reset()
                    .call_reset(store, task, baseline),
            },
            |commands| check_commands(commands.iter().map(|c| c.argv.as_slice()), "reset"),
        )
    }

    /// Judges the reset commands' outputs against the baseline, on the
    /// calling thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps or overruns a limit.
    pub fn verify_blocking(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
        outputs: &[CommandOutput],
    ) -> Result<Verdict, CallError> {
        self.0.call(
            "verify",
            |instance, store| match instance {
                ResetInstance::V0_1_0(old) => old
                    .sandfleet_plugin_reset()
                    .call_verify(store, task, baseline, outputs)
                    .map(|answer| answer.map(Verdict::from)),
                ResetInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_reset()
                    .call_verify(store, task, baseline, outputs),
            },
            |_| Ok(()),
        )
    }
}
