//! The eval script: applies the test patch, runs the tests between the
//! output markers, and resets the test files.

use crate::diff;
use crate::error::InvalidInput;
use crate::spec::VersionSpec;

/// Marks where the test command's output starts (as an xtrace line).
pub(crate) const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
/// Marks where the test command's output ends.
pub(crate) const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
/// 5.x prints the test command's exit status after the end marker, prefixed by this.
pub(crate) const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";

/// The conda environment and checkout every SWE-bench image has.
const ENV_NAME: &str = "testbed";
const REPO_DIRECTORY: &str = "/testbed";
const HEREDOC_DELIMITER: &str = "EOF_114329324912";

/// The shebang and shell flags every eval script starts with (no `-e`: the
/// test files must be reset even when the tests fail).
const HEADER: [&str; 2] = ["#!/bin/bash", "set -uxo pipefail"];

/// What 4.1.0's `make_eval_script_list_py` needs from an instance.
pub(crate) struct PythonInstance<'a> {
    /// `repo`, which decides the test-directive rule.
    pub(crate) repo: &'a str,
    /// `base_commit`, which the test files are reset to.
    pub(crate) base_commit: &'a str,
    /// `test_patch`.
    pub(crate) test_patch: &'a str,
    /// The repo version's specs.
    pub(crate) spec: &'a VersionSpec,
}

/// swebench 4.1.0's `TestSpec.eval_script` for a Python repo, byte for byte.
///
/// # Errors
///
/// When unidiff could not parse the test patch.
pub(crate) fn python_eval_script(instance: &PythonInstance<'_>) -> Result<String, InvalidInput> {
    let PythonInstance {
        repo,
        base_commit,
        test_patch,
        spec,
    } = *instance;
    let test_files = diff::modified_files(test_patch)?;
    let reset_tests = format!("git checkout {base_commit} {}", test_files.join(" "));
    let test_command = std::iter::once(spec.test_cmd.clone())
        .chain(diff::test_directives(repo, test_patch))
        .collect::<Vec<_>>()
        .join(" ");
    let activate = [
        "source /opt/miniconda3/bin/activate".to_owned(),
        format!("conda activate {ENV_NAME}"),
    ];

    let mut lines: Vec<String> = HEADER.map(str::to_owned).to_vec();
    lines.extend(activate.iter().cloned());
    lines.push(format!("cd {REPO_DIRECTORY}"));
    lines.extend(spec.eval_commands.iter().cloned());
    lines.extend([
        format!("git config --global --add safe.directory {REPO_DIRECTORY}"),
        format!("cd {REPO_DIRECTORY}"),
        // Informational: the log records the tree the tests ran on.
        "git status".to_owned(),
        "git show".to_owned(),
        format!("git -c core.fileMode=false diff {base_commit}"),
    ]);
    lines.extend(activate);
    lines.extend(spec.install.iter().cloned());
    lines.extend([
        reset_tests.clone(),
        format!("git apply -v - <<'{HEREDOC_DELIMITER}'\n{test_patch}\n{HEREDOC_DELIMITER}"),
        format!(": '{START_TEST_OUTPUT}'"),
        test_command,
        format!(": '{END_TEST_OUTPUT}'"),
        reset_tests,
    ]);
    Ok(lines.join("\n") + "\n")
}

/// The script 5.0.2 runs for a row's `eval_script` column: `parse_eval_script`
/// drops the header lines (wherever they are), then `record_test_exit_code`
/// captures `$?` right before the first line naming the end marker and
/// echoes it right after, outside the parsed region. A script without the
/// marker is left as it is.
pub(crate) fn with_exit_code_record(eval_script: &str) -> String {
    let mut lines: Vec<&str> = crate::pystr::strip(eval_script)
        .split('\n')
        .filter(|line| !HEADER.contains(line))
        .collect();
    let exit_code_var = "SWEBENCH_TEST_EXIT_CODE";
    let echo_exit_code = format!("echo \"{TEST_EXIT_CODE}: ${exit_code_var}\"");
    let capture_exit_code = format!("{exit_code_var}=$?");
    if let Some(end) = lines.iter().position(|line| line.contains(END_TEST_OUTPUT)) {
        lines.insert(end + 1, &echo_exit_code);
        lines.insert(end, &capture_exit_code);
    }
    HEADER
        .iter()
        .copied()
        .chain(lines)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_lines_wrap_the_first_end_marker() {
        let script =
            "#!/bin/bash\nset -uxo pipefail\npytest\n: '>>>>> End Test Output'\ngit checkout x\n\n";
        assert_eq!(
            with_exit_code_record(script),
            "#!/bin/bash\nset -uxo pipefail\npytest\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\n\
             echo \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\ngit checkout x\n"
        );
    }

    #[test]
    fn scripts_without_the_marker_only_lose_their_header() {
        assert_eq!(
            with_exit_code_record("#!/bin/bash\necho hi\n"),
            "#!/bin/bash\nset -uxo pipefail\necho hi\n"
        );
    }
}
