//! The script run for real: each command executes in a throwaway copy of this
//! machine's root file system (an overlay in a private mount namespace, so
//! nothing outside a temporary directory changes), laid out like an R2E-Gym
//! image: a git repository in `/testbed` with `run_tests.sh`, and the
//! held-out tests in `/r2e_tests`. Needs root, for `unshare` and `mount`.
//!
//! The script comes from the r2egym component and its outputs go back to it,
//! through the test kit, as the host would run them.

use std::fs;
use std::path::PathBuf;
use std::process;

use sandfleet_testkit::TestPlugin;
use sandfleet_testkit::adapter::{
    Command, CommandOutput, GradeResult, GradeStatus, Script, Setting, Task, TaskAdapter,
};
use serde_json::json;

/// Mounts the overlay, then runs the command in it with the given workdir,
/// environment (`KEY=VALUE` words) and, when asked, stderr merged into stdout.
const ENTER_SANDBOX: &str = r#"set -e
upper=$1 work=$2 root=$3 merge=$4 workdir=$5; shift 5
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=/,upperdir=$upper,workdir=$work" "$root"
mount --rbind /proc "$root/proc"
mount --rbind /dev "$root/dev"
set +e
if [ "$merge" = 1 ]; then exec chroot "$root" /usr/bin/env -C "$workdir" "$@" 2>&1; fi
exec chroot "$root" /usr/bin/env -C "$workdir" "$@"
"#;

/// A sandbox: the overlay's writable layer, kept between commands.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!("r2egym-sandbox-{name}-{}", process::id()));
        let _ = fs::remove_dir_all(&dir);
        for part in ["upper", "work", "root"] {
            fs::create_dir_all(dir.join(part)).unwrap();
        }
        let sandbox = Sandbox { dir };
        sandbox.shell(IMAGE);
        sandbox
    }

    fn run(&self, command: &Command, workdir: &str, env: &[Setting]) -> CommandOutput {
        let path = |part: &str| self.dir.join(part).to_string_lossy().into_owned();
        let merge = if command.merge_stderr { "1" } else { "0" };
        let output = process::Command::new("unshare")
            .args([
                "--mount",
                "--fork",
                "bash",
                "-c",
                ENTER_SANDBOX,
                "enter-sandbox",
            ])
            .args([
                path("upper"),
                path("work"),
                path("root"),
                merge.into(),
                workdir.into(),
            ])
            .args(
                env.iter()
                    .map(|setting| format!("{}={}", setting.key, setting.value)),
            )
            .args(&command.argv)
            .output()
            .expect("unshare runs (these tests need root)");
        CommandOutput {
            exit_code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            timed_out: false,
            duration_ms: 0,
        }
    }

    /// A shell snippet as root in `/`, which must succeed.
    fn shell(&self, script: &str) -> String {
        let command = Command {
            argv: vec!["bash".into(), "-c".into(), script.into()],
            timeout_ms: 0,
            merge_stderr: false,
        };
        let output = self.run(&command, "/", &[]);
        assert_eq!(
            output.exit_code, 0,
            "{script}\nstdout: {}\nstderr: {}",
            output.stdout, output.stderr
        );
        output.stdout
    }

    fn exists(&self, path: &str) -> bool {
        self.shell(&format!(
            "if [ -e {path} ] || [ -L {path} ]; then echo yes; fi"
        )) == "yes\n"
    }

    /// What the host does with a script: files, then setup; the agent's turn
    /// is up to the caller.
    fn set_up(&self, script: &Script) {
        for file in &script.files {
            let contents = String::from_utf8(file.contents.clone()).unwrap();
            self.shell(&format!("cat > {} <<'PATCH'\n{contents}PATCH\n", file.path));
        }
        for command in &script.setup {
            let output = self.run(command, &script.workdir, &script.env);
            assert_eq!(output.exit_code, 0, "setup: {}", output.stderr);
        }
    }

    fn evaluate(&self, script: &Script) -> Vec<CommandOutput> {
        script
            .evaluate
            .iter()
            .map(|command| self.run(command, &script.workdir, &script.env))
            .collect()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// An R2E-Gym-like image: `add` is broken, one held-out test checks it and
/// one checks something already true. `run_tests.sh` prints a pytest-style
/// summary, as `pytest -rA r2e_tests` would.
const IMAGE: &str = r#"set -e
mkdir -p /testbed/.venv/bin /r2e_tests
ln -s /usr/bin/true /testbed/.venv/bin/python
cd /testbed
git init -q
printf 'def add(a, b):\n    return a - b\n' > calc.py
printf '.venv/\n' > .gitignore
git add calc.py .gitignore
git -c user.name=r2e -c user.email=r2e@example.com commit -qm base
cat > run_tests.sh <<'SH'
echo "============================= test session starts =============================="
echo "=========================== short test summary info ============================"
for test in r2e_tests/test_*.sh; do
  name=$(basename "$test" .sh)
  if bash "$test"; then echo "PASSED $test::$name"; else echo "FAILED $test::$name - assert"; fi
done
echo "warning from the test runner" >&2
SH
echo 'grep -q "return a + b" calc.py' > /r2e_tests/test_add.sh
echo 'test -f calc.py' > /r2e_tests/test_exists.sh
mkdir -p __pycache__ && touch __pycache__/calc.cpython-38.pyc
"#;

const FIX: &str = concat!(
    "diff --git a/calc.py b/calc.py\n",
    "--- a/calc.py\n",
    "+++ b/calc.py\n",
    "@@ -1,2 +1,2 @@\n",
    " def add(a, b):\n",
    "-    return a - b\n",
    "+    return a + b\n",
);

fn adapter() -> TaskAdapter {
    TestPlugin::load(sandfleet_guests::R2EGYM)
        .expect("the r2egym component loads")
        .adapter()
        .expect("r2egym is a task adapter")
}

fn task(adapter: &TaskAdapter, grading: &str) -> Task {
    let row = json!({
        // A repository R2E-Gym has a parser for (`parse_log_fn`); the image
        // is a small calculator laid out like R2E-Gym's.
        "repo_name": "numpy",
        "docker_image": "namanjain12/calc_final:abc",
        "commit_hash": "abc",
        "parsed_commit_content": "{}",
        "expected_output_json": json!({"test_add": "PASSED", "test_exists": "PASSED"}).to_string(),
    });
    let settings = [Setting {
        key: "grading".into(),
        value: grading.into(),
    }];
    adapter.load_blocking(&row.to_string(), &settings).unwrap()
}

fn prepare(adapter: &TaskAdapter, task: &Task, solution: Option<&str>) -> Script {
    adapter.prepare_blocking(task, solution).unwrap()
}

fn graded(
    adapter: &TaskAdapter,
    task: &Task,
    solution: Option<&str>,
    outputs: &[CommandOutput],
) -> GradeResult {
    adapter.grade_blocking(task, solution, outputs).unwrap()
}

#[test]
fn in_place_hides_the_tests_from_the_agent_and_grades_its_fix() {
    let adapter = adapter();
    let sandbox = Sandbox::new("in-place");
    let task = task(&adapter, "in-place");
    let script = prepare(&adapter, &task, None);
    sandbox.set_up(&script);

    // The agent's view: no tests, no test script, no bytecode.
    for hidden in [
        "/testbed/r2e_tests",
        "/testbed/run_tests.sh",
        "/r2e_tests",
        "/testbed/__pycache__",
    ] {
        assert!(
            !sandbox.exists(hidden),
            "{hidden} is still there after setup"
        );
    }
    assert!(sandbox.exists("/root/r2e_tests/test_add.sh"));
    assert!(sandbox.exists("/root/.venv"));

    // Unsolved: the held-out test fails, reward 0.
    let outputs = sandbox.evaluate(&script);
    let result = graded(&adapter, &task, None, &outputs);
    assert_eq!(result.status, GradeStatus::Failed, "{}", result.detail);
    assert_eq!(result.detail, "`test_add` is FAILED, expected PASSED");
    assert!(
        outputs[1].stdout.contains("warning from the test runner"),
        "stderr is merged"
    );
    assert!(
        !sandbox.exists("/testbed/r2e_tests"),
        "the tests are hidden again"
    );

    // The agent fixes the bug (and plants its own "tests", which must not run).
    sandbox.shell("sed -i 's/a - b/a + b/' /testbed/calc.py && mkdir /testbed/r2e_tests && touch /testbed/r2e_tests/test_fake.sh");
    let result = graded(&adapter, &task, None, &sandbox.evaluate(&script));
    assert_eq!(result.status, GradeStatus::Passed, "{}", result.detail);
    assert_eq!(result.reward, Some(1.0));

    // Setup again (a recycled sandbox) is harmless.
    sandbox.set_up(&script);
    let result = graded(&adapter, &task, None, &sandbox.evaluate(&script));
    assert_eq!(result.reward, Some(1.0), "{}", result.detail);
}

#[test]
fn fresh_grading_applies_the_patch_in_a_new_sandbox() {
    let adapter = adapter();
    let task = task(&adapter, "fresh");
    let script = prepare(&adapter, &task, Some(FIX));

    // Whether or not the host runs setup first, the evaluation stands alone.
    for run_setup in [false, true] {
        let sandbox = Sandbox::new(if run_setup { "fresh-setup" } else { "fresh" });
        if run_setup {
            sandbox.set_up(&script);
        } else {
            let file = &script.files[0];
            let contents = String::from_utf8(file.contents.clone()).unwrap();
            sandbox.shell(&format!("cat > {} <<'PATCH'\n{contents}PATCH\n", file.path));
        }
        let result = graded(&adapter, &task, Some(FIX), &sandbox.evaluate(&script));
        assert_eq!(
            result.status,
            GradeStatus::Passed,
            "setup {run_setup}: {}",
            result.detail
        );
    }

    // A patch for another file does not apply: an error, not a failure.
    let broken = FIX.replace("return a - b", "return a * b");
    let script = prepare(&adapter, &task, Some(&broken));
    let sandbox = Sandbox::new("fresh-broken");
    sandbox.set_up(&script);
    let result = graded(&adapter, &task, Some(&broken), &sandbox.evaluate(&script));
    assert_eq!(result.status, GradeStatus::Error);
    assert!(
        result
            .detail
            .starts_with("the solution patch did not apply"),
        "{}",
        result.detail
    );
}
