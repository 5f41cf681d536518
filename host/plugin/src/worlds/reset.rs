//! The `reset-check` world.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::{Handle, check_commands};
use crate::bindings::latest::reset as bindings;
use crate::contract::{Contract, Kind};
use crate::error::CallError;
use crate::loaded::{VersionInfo, World};
use crate::store::StoreState;

pub use crate::bindings::latest::reset::exports::sandfleet::plugin::reset::Verdict;
pub use crate::bindings::types::{Command, CommandOutput, Task};

pub(crate) struct ResetWorld;

impl World for ResetWorld {
    const KIND: Option<Kind> = Some(Kind::Reset);
    type Pre = bindings::ResetCheckPre<StoreState>;
    type Instance = bindings::ResetCheck;

    fn pre(pre: InstancePre<StoreState>, _: &Contract) -> wasmtime::Result<Self::Pre> {
        bindings::ResetCheckPre::new(pre)
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }
}

/// A reset check: makes recycling a sandbox safe.
#[derive(Clone)]
pub struct ResetCheck(pub(crate) Handle<ResetWorld>);

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

    /// The version serving now.
    pub fn version(&self) -> VersionInfo {
        self.0.version()
    }
}
