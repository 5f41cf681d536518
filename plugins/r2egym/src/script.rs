//! The commands the host runs for a task, and which of their outputs `grade`
//! reads.
//!
//! R2E-Gym images hold the repository in `/testbed`, its virtualenv in
//! `/testbed/.venv`, the test script in `/testbed/run_tests.sh` (it runs
//! `pytest -rA r2e_tests` from `/testbed`) and the tests in `/r2e_tests`.
//! `DockerRuntime.setup_env` links the virtualenv into `/root`, clears Python
//! bytecode and moves `run_tests.sh` and `r2e_tests` to `/root`, where the
//! agent is not meant to look. R2E-Gym then linked `/root/r2e_tests` straight
//! back into `/testbed` for the whole rollout, which left the tests readable
//! by the agent; here the link exists only while the tests run.
//!
//! | step              | where                      | what                                                  |
//! |-------------------|----------------------------|-------------------------------------------------------|
//! | `prepare-sandbox` | setup (fresh: evaluate too) | `setup_env` (minus installing `chardet`, a tool dependency of R2E-Gym's agent) and hiding the tests |
//! | `apply-solution`  | evaluate, with a patch     | `git apply --whitespace=fix`, as `DockerRuntime.apply_patch` |
//! | `expose-tests`    | evaluate                   | link `/root/r2e_tests` into `/testbed`                |
//! | `run-tests`       | evaluate                   | `/bin/sh -c "timeout 300 bash /root/run_tests.sh "`    |
//! | `hide-tests`      | evaluate, in place only    | remove the link again                                 |
//!
//! Every step can run twice without harm, so a recycled sandbox or a host
//! that runs setup before a fresh evaluation is fine.

use crate::row::TaskData;
use crate::settings::Grading;
use crate::test_run;
use crate::{Command, EvaluationSite, Failure, File, Script, Setting, Task, TimeoutRule};

/// The repository inside R2E-Gym images.
pub(crate) const REPO_PATH: &str = "/testbed";

/// Entries of the repository that setup moves to `/root` (R2E-Gym's
/// `SKIP_FILES_NEW`).
pub(crate) const HIDDEN_FROM_REPO: [&str; 2] = ["run_tests.sh", "r2e_tests"];

/// The `PATH` R2E-Gym gives every command (`DOCKER_PATH`).
pub(crate) const SANDBOX_PATH: &str = "/root/.venv/bin:/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the solution patch is written before setup.
pub(crate) const SOLUTION_PATCH: &str = "/tmp/sandfleet-r2egym-solution.patch";

/// One command of the script, named for reports and for `grade`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    PrepareSandbox,
    ApplySolution,
    ExposeTests,
    RunTests,
    HideTests,
}

impl Step {
    /// The step's name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::PrepareSandbox => "prepare-sandbox",
            Step::ApplySolution => "apply-solution",
            Step::ExposeTests => "expose-tests",
            Step::RunTests => "run-tests",
            Step::HideTests => "hide-tests",
        }
    }

    /// What a non-zero exit of this step means for the grade; `None` when the
    /// step's exit status does not decide the grade.
    pub(crate) fn failure_meaning(self) -> Option<&'static str> {
        match self {
            Step::PrepareSandbox => Some("preparing the sandbox failed"),
            Step::ApplySolution => Some("the solution patch did not apply"),
            Step::ExposeTests => Some("the hidden tests could not be put back"),
            // run-tests is judged by R2E-Gym's rules; hide-tests only tidies up.
            Step::RunTests | Step::HideTests => None,
        }
    }

    /// The command the host runs.
    pub(crate) fn command(self) -> Command {
        match self {
            Step::PrepareSandbox => bash(prepare_sandbox_script(), 600),
            Step::ApplySolution => Command {
                argv: ["git", "apply", "--whitespace=fix", SOLUTION_PATCH]
                    .map(str::to_owned)
                    .to_vec(),
                timeout_ms: 120_000,
                merge_stderr: false,
            },
            Step::ExposeTests => bash(EXPOSE_TESTS.to_owned(), 60),
            Step::RunTests => Command {
                argv: vec!["/bin/sh".into(), "-c".into(), test_run::shell_command()],
                // R2E-Gym's own deadline: the script's limit plus five seconds.
                timeout_ms: (test_run::TIMEOUT_SECS + 5) * 1000,
                // `exec_run(stdout=True, stderr=True)` interleaves both streams.
                merge_stderr: true,
            },
            Step::HideTests => bash(HIDE_TESTS.to_owned(), 60),
        }
    }
}

fn bash(script: String, timeout_secs: u64) -> Command {
    Command {
        argv: vec!["bash".into(), "-c".into(), script],
        timeout_ms: timeout_secs * 1000,
        merge_stderr: false,
    }
}

/// `setup_env`, made idempotent, then a check that the tests are out of reach.
fn prepare_sandbox_script() -> String {
    let hide_repo_entries = HIDDEN_FROM_REPO
        .iter()
        .map(|name| {
            // A link is what expose-tests left behind; anything else is the
            // image's own file and moves to /root as in R2E-Gym.
            format!(
                "if [ -L /testbed/{name} ]; then rm -f /testbed/{name}; \
                 elif [ -e /testbed/{name} ]; then mv /testbed/{name} /root/{name}; fi\n"
            )
        })
        .collect::<String>();
    let reachable = HIDDEN_FROM_REPO
        .iter()
        .map(|name| format!("/testbed/{name} "))
        .collect::<String>();
    format!(
        r#"# R2E-Gym ignores failures of the environment links; so does this.
[ -e /root/.venv ] || [ -L /root/.venv ] || ln -s /testbed/.venv /root/.venv
mkdir -p /root/.local/bin
ln -sf /testbed/.venv/bin/python /root/.local/bin/python
ln -sf /testbed/.venv/bin/python /root/.local/bin/python3
find /testbed/.venv/bin -type f -executable -exec ln -sf {{}} /root/.local/bin/ \; 2>/dev/null
for tree in /testbed /r2e_tests /root/r2e_tests; do
  if [ -d "$tree" ] && [ ! -L "$tree" ]; then
    find "$tree" -name '*.pyc' -delete
    find "$tree" -name '__pycache__' -prune -exec rm -rf {{}} +
  fi
done
{hide_repo_entries}if [ -e /r2e_tests ] && [ ! -L /r2e_tests ]; then mv /r2e_tests /root/r2e_tests; fi
left=""
for path in {reachable}/r2e_tests; do
  if [ -e "$path" ] || [ -L "$path" ]; then left="$left $path"; fi
done
if [ -n "$left" ]; then echo "the tests are still within the agent's reach:$left" >&2; exit 1; fi
"#
    )
}

const EXPOSE_TESTS: &str = r#"# Whatever the agent left at /testbed/r2e_tests goes; only the held-out tests run.
rm -rf /testbed/r2e_tests
missing=""
[ -d /root/r2e_tests ] || missing="$missing /root/r2e_tests"
[ -f /root/run_tests.sh ] || missing="$missing /root/run_tests.sh"
if [ -n "$missing" ]; then echo "the hidden tests are missing:$missing" >&2; exit 1; fi
ln -s /root/r2e_tests /testbed/r2e_tests
"#;

const HIDE_TESTS: &str = "if [ -L /testbed/r2e_tests ]; then rm -f /testbed/r2e_tests; fi\n";

/// The setup commands: the same in both modes, since the agent's sandbox
/// needs the tests hidden either way.
pub(crate) fn setup_steps() -> Vec<Step> {
    vec![Step::PrepareSandbox]
}

/// The evaluate commands, in order; `grade` receives one output per step.
///
/// * in place: the agent's changes are already in the sandbox; a solution
///   patch, when given, is applied on top.
/// * fresh: the host evaluates in a new sandbox of the image, handing over
///   the work sandbox's changes as the solution (none: the pristine image is
///   evaluated); the steps repeat the sandbox preparation instead of relying
///   on setup having run.
pub(crate) fn evaluate_steps(grading: Grading, solution: Option<&str>) -> Vec<Step> {
    let mut steps = Vec::with_capacity(5);
    if grading == Grading::Fresh {
        steps.push(Step::PrepareSandbox);
    }
    if has_patch(solution) {
        steps.push(Step::ApplySolution);
    }
    steps.extend([Step::ExposeTests, Step::RunTests]);
    if grading == Grading::InPlace {
        steps.push(Step::HideTests);
    }
    steps
}

/// An empty solution changes nothing, so there is nothing to apply.
fn has_patch(solution: Option<&str>) -> bool {
    solution.is_some_and(|patch| !patch.trim().is_empty())
}

/// The script for `task`, evaluating `solution` when there is one.
pub(crate) fn prepare(task: &Task, solution: Option<&str>) -> Result<Script, Failure> {
    let data = TaskData::of(task)?;
    let evaluate = evaluate_steps(data.grading, solution);
    let files = match solution {
        Some(patch) if has_patch(solution) => vec![File {
            path: SOLUTION_PATCH.to_owned(),
            contents: patch.as_bytes().to_vec(),
            mode: 0o644,
        }],
        _ => Vec::new(),
    };
    Ok(Script {
        files,
        setup: setup_steps().into_iter().map(Step::command).collect(),
        evaluate: evaluate.into_iter().map(Step::command).collect(),
        env: vec![Setting {
            key: "PATH".into(),
            value: SANDBOX_PATH.into(),
        }],
        workdir: REPO_PATH.to_owned(),
        // R2E-Gym grades a run that hit its limit like any other (its output
        // becomes the timeout message), so the grade decides.
        timeout_rule: TimeoutRule::Fail,
        evaluate_in: match data.grading {
            Grading::InPlace => EvaluationSite::WorkSandbox,
            Grading::Fresh => EvaluationSite::FreshSandbox,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(steps: &[Step]) -> Vec<&'static str> {
        steps.iter().map(|step| step.name()).collect()
    }

    #[test]
    fn in_place_runs_the_tests_between_exposing_and_hiding_them() {
        let steps = evaluate_steps(Grading::InPlace, None);
        assert_eq!(names(&steps), ["expose-tests", "run-tests", "hide-tests"]);
        let patched = evaluate_steps(Grading::InPlace, Some("diff --git a/x b/x\n"));
        assert_eq!(
            names(&patched),
            ["apply-solution", "expose-tests", "run-tests", "hide-tests"]
        );
    }

    #[test]
    fn fresh_prepares_the_sandbox_itself() {
        let steps = evaluate_steps(Grading::Fresh, Some("diff\n"));
        assert_eq!(
            names(&steps),
            [
                "prepare-sandbox",
                "apply-solution",
                "expose-tests",
                "run-tests"
            ]
        );
        for nothing_to_apply in [Some(" \n"), None] {
            assert_eq!(
                names(&evaluate_steps(Grading::Fresh, nothing_to_apply)),
                ["prepare-sandbox", "expose-tests", "run-tests"]
            );
        }
    }

    #[test]
    fn run_tests_is_r2e_gyms_exact_command() {
        let command = Step::RunTests.command();
        assert_eq!(
            command.argv,
            ["/bin/sh", "-c", "timeout 300 bash /root/run_tests.sh "]
        );
        assert!(command.merge_stderr);
        assert!(
            command.timeout_ms > 300_000,
            "the script's own limit must fire first"
        );
    }

    #[test]
    fn prepare_sandbox_hides_every_entry_and_checks_the_result() {
        let script = prepare_sandbox_script();
        for name in HIDDEN_FROM_REPO {
            assert!(script.contains(&format!("mv /testbed/{name} /root/{name}")));
            assert!(
                script.contains(&format!("/testbed/{name} ")),
                "checked: {name}"
            );
        }
        assert!(script.contains("mv /r2e_tests /root/r2e_tests"));
        assert!(script.contains("exit 1"));
    }
}
