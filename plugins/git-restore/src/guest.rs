//! The component's exports, forwarded to [`crate::check`].

use sandfleet_plugin_sdk::v0_1_0::reset::exports::sandfleet::plugin::reset::Guest;

use crate::{Command, CommandOutput, Failure, Task, Verdict, check};

struct GitRestore;

impl Guest for GitRestore {
    fn baseline(task: Task) -> Result<Vec<Command>, Failure> {
        check::baseline(&task)
    }

    fn reset(task: Task, baseline: Vec<CommandOutput>) -> Result<Vec<Command>, Failure> {
        check::reset(&task, &baseline)
    }

    fn verify(
        task: Task,
        baseline: Vec<CommandOutput>,
        outputs: Vec<CommandOutput>,
    ) -> Result<Verdict, Failure> {
        check::verify(&task, &baseline, &outputs)
    }
}

sandfleet_plugin_sdk::reset_check!(GitRestore, v0_1_0);
