//! A reset check that records a baseline, then traps on every reset: a
//! custom check whose fault the built-in `git-restore` answers, with a
//! baseline of its own.

#![allow(missing_docs, reason = "test guest")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "reset-check",
    path: "../../../wit/since_v0.1.0",
});

use exports::sandfleet::plugin::reset::{Guest, Verdict};
use sandfleet::plugin::types::{Command, CommandOutput, Failure, Task};

struct FaultyReset;

impl Guest for FaultyReset {
    fn baseline(_task: Task) -> Result<Vec<Command>, Failure> {
        Ok(vec![Command {
            argv: vec!["true".to_string()],
            timeout_ms: 0,
            merge_stderr: false,
        }])
    }

    fn reset(_task: Task, _baseline: Vec<CommandOutput>) -> Result<Vec<Command>, Failure> {
        panic!("deliberate trap in reset")
    }

    fn verify(
        _task: Task,
        _baseline: Vec<CommandOutput>,
        _outputs: Vec<CommandOutput>,
    ) -> Result<Verdict, Failure> {
        Ok(Verdict::Clean)
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(FaultyReset);
