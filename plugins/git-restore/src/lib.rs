//! `git-restore`: the reset check that lets sandboxes of one image be reused
//! between tasks.
//!
//! * `baseline` probes the fresh sandbox (`probe`): HEAD and its branch,
//!   every ref and reflog, the untracked and ignored entries of the repository
//!   (with a fingerprint of their contents), submodules, git config and hooks,
//!   the environment, the processes alive, and the entries of `/tmp`.
//! * `reset` kills every process started since, puts refs, HEAD, index, work
//!   tree, submodules and reflogs back, prunes the objects only the agent's
//!   history reached, removes new entries of `/tmp` (`action`), and runs
//!   the same probes again.
//! * `verify` compares the two sets of probes (`compare`) and names every
//!   difference, or a reset step that failed.
//!
//! `check` holds the three operations.
//!
//! The plugin never touches the sandbox: it returns commands (bash scripts
//! whose data travels as arguments, never spliced into the script) and reads
//! their outputs. Options come from the `git_restore` object of `task.data`
//! when there is one (`options`); everything has a default:
//!
//! ```json
//! {"git_restore": {
//!     "tmp_dir": "/tmp",
//!     "may_vanish": ["run_tests.sh", "r2e_tests"],
//!     "check_environment": true,
//!     "check_git_config": true,
//!     "check_untracked_contents": true
//! }}
//! ```
//!
//! `guest` exports the three operations as a component, and that component
//! is what the tests call (through `sandfleet-testkit`).

mod action;
mod check;
mod compare;
mod guest;
mod options;
mod probe;
mod shell;
mod snapshot;

use sandfleet_plugin_sdk::types::{Command, CommandOutput, Failure, Task};
use sandfleet_plugin_sdk::v0_1_0::reset::exports::sandfleet::plugin::reset::Verdict;
