//! Options, read from the `git_restore` object of `task.data` when the task's
//! data is a JSON object that has one (the reset world passes no settings).
//! Everything has a default, so tasks of any adapter can use the check:
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
//! The options must be the same for the baseline, reset and verify calls of a
//! sandbox; they are, when they come from tasks of one adapter and image.

use serde::Deserialize;
use serde_json::Value;

use crate::{Failure, Task};

/// The key of `task.data` the options live under.
pub(crate) const KEY: &str = "git_restore";

/// What the check does beyond git, and where.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Options {
    /// The directory whose new entries the reset removes (tests point it at a
    /// scratch directory).
    pub(crate) tmp_dir: String,
    /// Untracked entries of the repository (paths from its top, as
    /// `git status` prints them, without a trailing `/`) that a task removes
    /// on purpose, e.g. tests an adapter hides; their absence is not dirt.
    pub(crate) may_vanish: Vec<String>,
    /// Compare the environment and the shell start-up files.
    pub(crate) check_environment: bool,
    /// Compare git config (all scopes) and the repository's hooks.
    pub(crate) check_git_config: bool,
    /// Compare the contents of untracked and ignored entries (a virtualenv in
    /// the repository, build products), bytecode aside.
    pub(crate) check_untracked_contents: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tmp_dir: "/tmp".to_owned(),
            may_vanish: Vec::new(),
            check_environment: true,
            check_git_config: true,
            check_untracked_contents: true,
        }
    }
}

impl Options {
    /// The options `task` carries, or the defaults.
    pub(crate) fn of(task: &Task) -> Result<Options, Failure> {
        let Ok(Value::Object(mut data)) = serde_json::from_str::<Value>(&task.data) else {
            return Ok(Options::default());
        };
        let Some(value) = data.remove(KEY) else {
            return Ok(Options::default());
        };
        let options: Options = serde_json::from_value(value)
            .map_err(|error| Failure::invalid_input(format!("task.data `{KEY}`: {error}")))?;
        options.validated()
    }

    fn validated(self) -> Result<Options, Failure> {
        let tmp = self.tmp_dir.trim_end_matches('/');
        if !self.tmp_dir.starts_with('/') || tmp.is_empty() {
            return Err(Failure::invalid_input(format!(
                "task.data `{KEY}.tmp_dir` must be an absolute directory other than `/`, not `{}`",
                self.tmp_dir
            )));
        }
        Ok(self)
    }

    /// Whether `path` (as `git status` prints it) may be missing after a reset.
    pub(crate) fn may_vanish(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        self.may_vanish
            .iter()
            .any(|allowed| allowed.trim_end_matches('/') == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(data: &str) -> Task {
        Task {
            id: "t".into(),
            image: "i".into(),
            workdir: "/testbed".into(),
            data: data.into(),
        }
    }

    #[test]
    fn data_without_options_gives_the_defaults() {
        for data in ["", "not json", "[1]", r#"{"repo": "x"}"#] {
            assert_eq!(
                Options::of(&task(data)).unwrap(),
                Options::default(),
                "{data}"
            );
        }
    }

    #[test]
    fn options_are_read_and_the_rest_defaulted() {
        let options = Options::of(&task(
            r#"{"git_restore": {"tmp_dir": "/scratch", "may_vanish": ["r2e_tests"]}}"#,
        ))
        .unwrap();
        assert_eq!(options.tmp_dir, "/scratch");
        assert!(options.may_vanish("r2e_tests/"));
        assert!(!options.may_vanish("run_tests.sh"));
        assert!(options.check_environment);
    }

    #[test]
    fn bad_options_name_the_field() {
        let unknown = Options::of(&task(r#"{"git_restore": {"tmpdir": "/x"}}"#)).unwrap_err();
        assert!(unknown.message.contains("tmpdir"), "{}", unknown.message);
        for tmp in ["/", "tmp", ""] {
            let data = format!(r#"{{"git_restore": {{"tmp_dir": "{tmp}"}}}}"#);
            let failure = Options::of(&task(&data)).unwrap_err();
            assert!(failure.message.contains("tmp_dir"), "{}", failure.message);
        }
    }
}
