//! The component's exports, forwarded to [`crate::check`].

use crate::exports::sandfleet::plugin::reset::Guest;
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

// Exported only in the component: natively several plugins may share one
// binary and their export symbols would collide.
#[cfg(target_arch = "wasm32")]
crate::export!(GitRestore with_types_in crate);
