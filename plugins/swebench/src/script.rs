//! `prepare`: the files and the command that evaluate a patch the way the
//! harness's `run_instance` does.
//!
//! The harness copies the patch to `/tmp/patch.diff`, tries its apply
//! commands in order, and on success runs `/bin/bash /eval.sh`, whose output
//! becomes `test_output.txt`. Here one command does all of that, so that its
//! output is exactly the eval script's log; when no apply command works it
//! prints the harness's `>>>>> Patch Apply Failed` notice instead, which
//! grading recognises as a bad code.

use crate::error::InvalidInput;
use crate::eval_script::{PythonInstance, python_eval_script, with_exit_code_record};
use crate::grader::GraderVersion;
use crate::spec::{self, Language};
use crate::task::{Task, TaskData, WORKDIR};

/// Where the harness puts the model patch.
pub(crate) const PATCH_PATH: &str = "/tmp/patch.diff";
/// Where the harness puts the eval script.
pub(crate) const EVAL_SCRIPT_PATH: &str = "/eval.sh";

/// A file the host writes into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScriptFile {
    /// Absolute path.
    pub(crate) path: String,
    /// Contents.
    pub(crate) contents: String,
    /// Unix permission bits.
    pub(crate) mode: u32,
}

/// A command the host runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    /// Program and arguments.
    pub(crate) argv: Vec<String>,
    /// Kill after this many milliseconds.
    pub(crate) timeout_ms: u64,
    /// Interleave stderr into stdout, as `docker exec` output does.
    pub(crate) merge_stderr: bool,
}

/// Everything the host runs for one task. A timed-out run is graded (as an
/// error with no report, the harness's verdict), so 5.x's run report can
/// classify it as the harness does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Script {
    /// The patch (when there is one) and the eval script.
    pub(crate) files: Vec<ScriptFile>,
    /// The one command whose output `grade` reads.
    pub(crate) evaluate: Vec<Command>,
    /// `/testbed`.
    pub(crate) workdir: String,
    /// Where the evaluate command runs (the `evaluation` setting).
    pub(crate) evaluation: crate::settings::Evaluation,
}

/// `prepare`: the script that evaluates `solution` (the model patch) on `task`.
/// Without a solution it runs the eval script on the untouched tree (5.x's
/// `--no-patch` mode); `grade` then reports `patch_is_None` like the harness.
///
/// # Errors
///
/// When the task is not this adapter's, or no eval script can be built for it
/// (a 5.x row without `eval_script` whose repo/version 4.1.0 cannot script
/// either, or a row without `base_commit`/`test_patch`).
pub(crate) fn prepare(task: &Task, solution: Option<&str>) -> Result<Script, InvalidInput> {
    let data = TaskData::decode(task)?;
    let eval_script = ScriptFile {
        path: EVAL_SCRIPT_PATH.into(),
        contents: eval_script(&data)?,
        mode: 0o644,
    };
    let patch = solution.map(|patch| ScriptFile {
        path: PATCH_PATH.into(),
        contents: patch.to_owned(),
        mode: 0o644,
    });
    let apply_patch = match solution {
        Some(_) => apply_patch_script(data.grader),
        None => String::new(),
    };
    Ok(Script {
        files: patch.into_iter().chain([eval_script]).collect(),
        evaluate: vec![Command {
            argv: vec![
                "/bin/bash".into(),
                "-c".into(),
                format!("{apply_patch}exec /bin/bash {EVAL_SCRIPT_PATH}\n"),
            ],
            timeout_ms: data.timeout_s.saturating_mul(1_000),
            merge_stderr: true,
        }],
        workdir: WORKDIR.to_owned(),
        evaluation: data.evaluation,
    })
}

/// The eval script the harness would run: 4.1.0 generates it from the spec
/// table; 5.x takes the row's `eval_script` (or, for rows that predate that
/// column, the 4.1.0 script) and records the test command's exit code.
fn eval_script(data: &TaskData) -> Result<String, InvalidInput> {
    match (data.grader, &data.eval_script) {
        (GraderVersion::V4_1_0, _) => generated_eval_script(data),
        (GraderVersion::V5_0_2, Some(row_script)) => Ok(with_exit_code_record(row_script)),
        (GraderVersion::V5_0_2, None) => Ok(with_exit_code_record(&generated_eval_script(data)?)),
    }
}

fn generated_eval_script(data: &TaskData) -> Result<String, InvalidInput> {
    let id = &data.instance_id;
    let context = |message: String| InvalidInput::new(format!("instance `{id}`: {message}"));
    let (repo_spec, version_spec) =
        spec::lookup(&data.repo, &data.version).map_err(|error| context(error.0))?;
    if repo_spec.language != Language::Python {
        return Err(context(format!(
            "swebench 4.1.0 eval scripts are generated for Python repos only; `{}` needs an `eval_script` column (grader swebench-5.0.2)",
            data.repo
        )));
    }
    let required = |field: &str, value: &Option<String>| {
        value.clone().ok_or_else(|| {
            context(format!(
                "field `{field}` is missing; the eval script needs it"
            ))
        })
    };
    let base_commit = required("base_commit", &data.base_commit)?;
    let test_patch = required("test_patch", &data.test_patch)?;
    python_eval_script(&PythonInstance {
        repo: &data.repo,
        base_commit: &base_commit,
        test_patch: &test_patch,
        spec: version_spec,
    })
    .map_err(|error| context(format!("field `test_patch`: {}", error.0)))
}

/// `GIT_APPLY_CMDS` of each version, tried in order.
const APPLY_COMMANDS_4_1_0: [&str; 3] = [
    "git apply --verbose",
    "git apply --verbose --reject",
    "patch --batch --fuzz=5 -p1 -i",
];
const APPLY_COMMANDS_5_0_2: [&str; 4] = [
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
];

/// The harness's apply loop as a shell prelude. 5.x restores a pristine tree
/// before each retry (a failed `--reject` leaves debris behind) and, when every
/// command failed, accepts a patch that turns out to be applied already. On
/// failure the last command's output follows the notice, as in the harness's log.
fn apply_patch_script(grader: GraderVersion) -> String {
    let is_5x = grader == GraderVersion::V5_0_2;
    let commands: &[&str] = if is_5x {
        &APPLY_COMMANDS_5_0_2
    } else {
        &APPLY_COMMANDS_4_1_0
    };
    let commands: Vec<String> = commands
        .iter()
        .map(|command| format!("'{command}'"))
        .collect();
    // 5.x: every attempt after the first starts from a pristine tree.
    let (retry_state, restore_tree) = if is_5x {
        (
            "tried=\n",
            "  if [ -n \"$tried\" ]; then { git checkout -- . ; git clean -fd; } >/dev/null 2>&1; fi\n  tried=1\n",
        )
    } else {
        ("", "")
    };
    let accept_applied = if is_5x {
        format!(
            "if [ -z \"$applied\" ] && git apply --check --reverse {PATCH_PATH} >/dev/null 2>&1; then applied=1; fi\n"
        )
    } else {
        String::new()
    };
    format!(
        "applied=\n{retry_state}for apply in {commands}; do\n\
         {restore_tree}  if output=$($apply {PATCH_PATH} 2>&1); then applied=1; break; fi\ndone\n\
         {accept_applied}\
         if [ -z \"$applied\" ]; then printf '%s:\\n%s\\n' '>>>>> Patch Apply Failed' \"$output\"; exit 1; fi\n",
        commands = commands.join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apply_chain_follows_each_version() {
        let old = apply_patch_script(GraderVersion::V4_1_0);
        assert!(old.contains(
            "'git apply --verbose' 'git apply --verbose --reject' 'patch --batch --fuzz=5 -p1 -i'"
        ));
        assert!(!old.contains("git checkout") && !old.contains("--reverse"));
        let new = apply_patch_script(GraderVersion::V5_0_2);
        assert!(
            new.contains("'git apply --verbose --3way'")
                && new.contains("'patch --batch --forward --fuzz=5 -p1 -i'")
        );
        assert!(
            new.contains("git checkout -- .")
                && new.contains("git apply --check --reverse /tmp/patch.diff")
        );
    }
}
