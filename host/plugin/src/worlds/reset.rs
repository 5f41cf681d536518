//! The `reset-check` world.

use super::check_commands;
use crate::bindings::latest::reset as bindings;
use crate::error::CallError;
use crate::store::StoreState;

pub use crate::bindings::latest::reset::exports::sandfleet::plugin::reset::Verdict;
pub use crate::bindings::types::{Command, CommandOutput, Task};

super::typed_world!(
    /// A reset check: makes recycling a sandbox safe.
    ResetCheck,
    ResetWorld,
    Reset,
    bindings::ResetCheckPre<StoreState>,
    bindings::ResetCheck
);

impl ResetCheck {
    /// Commands that record the pristine state of a fresh sandbox.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a
    /// command without a program.
    pub fn baseline(&self, task: &Task) -> Result<Vec<Command>, CallError> {
        self.0.call(
            "baseline",
            |instance, store| instance.sandfleet_plugin_reset().call_baseline(store, task),
            |commands| check_commands(commands.iter().map(|c| c.argv.as_slice()), "baseline"),
        )
    }

    /// Commands that reset a used sandbox and probe its state.
    ///
    /// # Errors
    ///
    /// As [`ResetCheck::baseline`].
    pub fn reset(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
    ) -> Result<Vec<Command>, CallError> {
        self.0.call(
            "reset",
            |instance, store| {
                instance
                    .sandfleet_plugin_reset()
                    .call_reset(store, task, baseline)
            },
            |commands| check_commands(commands.iter().map(|c| c.argv.as_slice()), "reset"),
        )
    }

    /// Judges the reset commands' outputs against the baseline.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps or overruns a limit.
    pub fn verify(
        &self,
        task: &Task,
        baseline: &[CommandOutput],
        outputs: &[CommandOutput],
    ) -> Result<Verdict, CallError> {
        self.0.call(
            "verify",
            |instance, store| {
                instance
                    .sandfleet_plugin_reset()
                    .call_verify(store, task, baseline, outputs)
            },
            |_| Ok(()),
        )
    }
}
