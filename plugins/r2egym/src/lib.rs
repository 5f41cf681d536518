//! `r2egym`: the task adapter for R2E-Gym datasets (`R2E-Gym/R2E-Gym-Lite`,
//! `R2E-Gym-Subset`, ...), behaving like R2E-Gym's own runtime
//! (`DockerRuntime` at commit 69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0):
//!
//! * setup prepares the image as `setup_env` does and moves `run_tests.sh` and
//!   `r2e_tests` out of the repository, so the agent cannot read the tests it
//!   is graded on (`script`);
//! * evaluation links the tests back, runs `timeout 300 bash /root/run_tests.sh`
//!   exactly as R2E-Gym does and reads the combined output (`test_run`);
//! * grading parses the pytest "short test summary info" section
//!   (`log_parser`) and pays 1.0 only when the parsed map equals the row's
//!   `expected_output_json` under R2E-Gym's comparison rules (`reward`).
//!
//! Everything is a pure function of its arguments; `guest` exports it as a
//! component, and that component is what the tests call (through
//! `sandfleet-testkit`).

mod ansi;
mod grade;
mod guest;
mod log_parser;
mod pyjson;
mod python;
mod reward;
mod row;
mod script;
mod settings;
mod summary;
mod test_run;

use sandfleet_plugin_sdk::adapter::{
    AdapterInfo, Command, CommandOutput, EvaluationSite, Failure, File, GradeResult, GradeStatus,
    Graded, Script, Setting, SettingInfo, SolutionState, Task, TestStatus, TestTable, TimeoutRule,
};

/// An insertion-ordered map, as Python's dicts are. Hashing is deterministic
/// (fixed SipHash keys) rather than seeded from WASI randomness: plugins are
/// pure functions.
pub(crate) type OrderedMap<K, V> =
    indexmap::IndexMap<K, V, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;

/// The adapter's name, as `describe` reports it.
pub(crate) const NAME: &str = "r2egym";
