//! The reset check run for real on a temporary git repository.
//!
//! Commands run inside a private PID namespace whose init is `sleep`, like a
//! sandbox's: the kill step there can only reach processes of the namespace,
//! never this machine's. The temporary directory the reset cleans is a
//! scratch directory, never the real `/tmp`. Needs root, for `unshare`.
//!
//! The commands come from the git-restore component and their outputs go
//! back to it, through the test kit, as the host would run them.

use std::path::{Path, PathBuf};
use std::process::{self, Child, Stdio};
use std::time::{Duration, Instant};
use std::{fs, thread};

use sandfleet_testkit::TestPlugin;
use sandfleet_testkit::reset::{Command, CommandOutput, ResetCheck, Task, Verdict};
use serde_json::json;

/// A PID namespace with `sleep infinity` as its init.
struct Sandbox {
    unshare: Child,
    init: u32,
}

impl Sandbox {
    fn start() -> Sandbox {
        let mut unshare = process::Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sleep", "infinity"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare starts (these tests need root)");
        let children = format!("/proc/{0}/task/{0}/children", unshare.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        let init = loop {
            let listed = fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = listed.split_whitespace().next() {
                break pid.parse().unwrap();
            }
            if Instant::now() > deadline {
                let _ = unshare.kill();
                panic!("the namespace's init did not start");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let sandbox = Sandbox { unshare, init };
        // Never run a kill step unless it is certainly confined.
        let view = sandbox.shell("/", "cat /proc/1/comm; ls -d /proc/[0-9]* | wc -l");
        assert_eq!(
            view.lines().next(),
            Some("sleep"),
            "not inside the namespace: {view}"
        );
        let visible: usize = view.lines().nth(1).unwrap().trim().parse().unwrap();
        assert!(visible < 10, "the namespace sees {visible} processes");
        sandbox
    }

    fn run(&self, command: &Command, workdir: &Path) -> CommandOutput {
        let output = process::Command::new("nsenter")
            .args(["-t", &self.init.to_string(), "-p", "-m", "--", "env", "-C"])
            .arg(workdir)
            .args(&command.argv)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        CommandOutput {
            exit_code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            timed_out: false,
            duration_ms: 0,
        }
    }

    fn run_all(&self, commands: &[Command], workdir: &Path) -> Vec<CommandOutput> {
        commands
            .iter()
            .map(|command| self.run(command, workdir))
            .collect()
    }

    /// A shell snippet in the namespace, which must succeed.
    fn shell(&self, workdir: &str, script: &str) -> String {
        let command = Command {
            argv: vec!["bash".into(), "-c".into(), script.into()],
            timeout_ms: 0,
            merge_stderr: false,
        };
        let output = self.run(&command, Path::new(workdir));
        assert_eq!(output.exit_code, 0, "{script}: {}", output.stderr);
        output.stdout
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Killing the init ends every process of the namespace.
        let _ = process::Command::new("kill")
            .args(["-KILL", &self.init.to_string()])
            .status();
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A repository as an image ships it: committed files, a tag and a second
/// branch, an ignored virtualenv and an untracked data file; and a scratch
/// temporary directory with one entry of its own.
struct Fixture {
    dir: PathBuf,
    sandbox: Sandbox,
    task: Task,
    check: ResetCheck,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("git-restore-{name}-{}", process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("tmp")).unwrap();
        fs::write(dir.join("tmp/keep.txt"), "the image's own\n").unwrap();
        let sandbox = Sandbox::start();
        sandbox.shell(
            dir.to_str().unwrap(),
            r#"set -e
git init -q -b main repo && cd repo
git config user.name image && git config user.email image@example.com
printf 'venv/\n*.log\n' > .gitignore
echo one > tracked.txt
git add . && git commit -qm base && git tag v1 && git branch other
echo two >> tracked.txt && git commit -qam second
mkdir -p venv/lib && echo 'VERSION = 1' > venv/lib/pkg.py
echo 'a,b' > data.csv
"#,
        );
        let task = Task {
            id: name.into(),
            image: "example/image:latest".into(),
            workdir: dir.join("repo").to_string_lossy().into_owned(),
            data: json!({"git_restore": {"tmp_dir": dir.join("tmp")}}).to_string(),
        };
        let check = TestPlugin::load(sandfleet_guests::GIT_RESTORE)
            .expect("the git-restore component loads")
            .reset_check()
            .expect("git-restore is a reset check");
        Fixture {
            dir,
            sandbox,
            task,
            check,
        }
    }

    fn repo(&self) -> PathBuf {
        self.dir.join("repo")
    }

    fn in_repo(&self, script: &str) -> String {
        self.sandbox.shell(&self.task.workdir, script)
    }

    fn baseline(&self) -> Vec<CommandOutput> {
        let outputs = self.sandbox.run_all(
            &self.check.baseline_blocking(&self.task).unwrap(),
            &self.repo(),
        );
        for output in &outputs {
            assert_eq!(output.exit_code, 0, "baseline: {}", output.stderr);
        }
        outputs
    }

    /// The reset's commands: its actions, then the baseline's probes again.
    fn reset_commands(&self, baseline: &[CommandOutput]) -> Vec<Command> {
        let commands = self.check.reset_blocking(&self.task, baseline).unwrap();
        let probes = self.check.baseline_blocking(&self.task).unwrap();
        let actions = commands.len() - probes.len();
        assert!(actions > 0, "the reset has actions");
        let argvs = |commands: &[Command]| -> Vec<Vec<String>> {
            commands
                .iter()
                .map(|command| command.argv.clone())
                .collect()
        };
        assert_eq!(
            argvs(&commands[actions..]),
            argvs(&probes),
            "the reset ends with the probes"
        );
        commands
    }

    fn reset(&self, baseline: &[CommandOutput]) -> Vec<CommandOutput> {
        let commands = self.reset_commands(baseline);
        self.sandbox.run_all(&commands, &self.repo())
    }

    fn verify(&self, baseline: &[CommandOutput], outputs: &[CommandOutput]) -> Verdict {
        self.check
            .verify_blocking(&self.task, baseline, outputs)
            .unwrap()
    }

    /// Every difference after the reset, beyond the five a verdict names:
    /// one verdict per probe, with the actions' outputs replaced by successes
    /// and every other probe's output taken from the baseline, so it names
    /// that probe's differences only.
    fn differences(&self, baseline: &[CommandOutput], outputs: &[CommandOutput]) -> Vec<String> {
        let actions = outputs.len() - baseline.len();
        let mut found = Vec::new();
        for probe in 0..baseline.len() {
            let mut view: Vec<CommandOutput> = (0..actions).map(|_| succeeded()).collect();
            view.extend_from_slice(baseline);
            view[actions + probe] = outputs[actions + probe].clone();
            if let Verdict::Dirty(reason) = self.verify(baseline, &view) {
                assert!(
                    !reason.ends_with(" more"),
                    "probe {probe} alone has more differences than a verdict names: {reason}"
                );
                found.extend(reason.split("; ").map(str::to_owned));
            }
        }
        found
    }
}

/// What a command that did nothing and succeeded reports.
fn succeeded() -> CommandOutput {
    CommandOutput {
        exit_code: 0,
        stdout: String::new(),
        stderr: String::new(),
        timed_out: false,
        duration_ms: 0,
    }
}

/// A reset command's name (its `$0`), for messages.
fn step_name(command: &Command) -> &str {
    command.argv.get(3).map_or("?", String::as_str)
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn dirty_reason(verdict: Verdict) -> String {
    match verdict {
        Verdict::Dirty(reason) => reason,
        Verdict::Clean => panic!("expected a dirty verdict"),
    }
}

/// What an agent typically leaves behind; all of it can be undone.
const AGENT_MESS: &str = r#"set -e
echo hacked >> tracked.txt
echo new > new.txt
echo noise > debug.log
mkdir -p pkg/__pycache__ && touch pkg/__pycache__/mod.cpython-311.pyc
git -c user.name=agent -c user.email=agent@example.com commit -qam 'agent fix'
git rev-parse HEAD > "$TMPDIR_FOR_TEST/agent-commit"
git checkout -qb agent-branch
git tag agent-tag
echo stash-me >> tracked.txt && git stash -q
(setsid sleep 1000 > /dev/null 2>&1 &)
mkdir -p "$TMPDIR_FOR_TEST/junk" && echo x > "$TMPDIR_FOR_TEST/junk/file" && touch "$TMPDIR_FOR_TEST/.hidden"
"#;

#[test]
fn a_reset_undoes_what_an_agent_leaves_behind() {
    let fixture = Fixture::new("clean");
    let baseline = fixture.baseline();
    let pristine = fixture.in_repo("git rev-parse HEAD");
    let tmp = fixture.dir.join("tmp");
    fixture.in_repo(&format!(
        "export TMPDIR_FOR_TEST='{}'\n{AGENT_MESS}",
        tmp.display()
    ));
    let agent_commit = fs::read_to_string(tmp.join("agent-commit")).unwrap();
    assert!(fixture.in_repo("ps -e -o comm=").contains("sleep"));

    let commands = fixture.reset_commands(&baseline);
    let outputs = fixture.sandbox.run_all(&commands, &fixture.repo());
    for (command, output) in commands.iter().zip(&outputs) {
        assert_eq!(
            output.exit_code,
            0,
            "{}: {}",
            step_name(command),
            output.stderr
        );
    }
    let verdict = fixture.verify(&baseline, &outputs);
    assert!(matches!(verdict, Verdict::Clean), "{verdict:?}");

    // And it is clean by direct inspection too.
    assert_eq!(fixture.in_repo("git rev-parse HEAD"), pristine);
    assert_eq!(
        fixture.in_repo("git symbolic-ref HEAD"),
        "refs/heads/main\n"
    );
    assert_eq!(fixture.in_repo("git status --porcelain"), "?? data.csv\n");
    assert_eq!(
        fixture.in_repo("git branch --format='%(refname:short)'"),
        "main\nother\n"
    );
    assert_eq!(fixture.in_repo("git tag"), "v1\n");
    assert_eq!(fixture.in_repo("git stash list"), "");
    assert_eq!(fixture.in_repo("cat venv/lib/pkg.py"), "VERSION = 1\n");
    let agent_commit = agent_commit.trim();
    assert_eq!(
        fixture.in_repo(&format!(
            "git cat-file -e {agent_commit} 2>/dev/null || echo pruned"
        )),
        "pruned\n",
        "the agent's commit must not be reachable by the next task"
    );
    assert!(!fixture.in_repo("git reflog --all").contains("agent"));
    // The agent's sleep is dead; only the init sleeps on (zombies aside: the
    // namespace's init does not reap them).
    let sleeping: Vec<_> = fixture
        .in_repo("ps -e -o pid=,stat=,comm=")
        .lines()
        .filter(|line| {
            line.ends_with(" sleep") && !line.split_whitespace().nth(1).unwrap().starts_with('Z')
        })
        .map(|line| line.split_whitespace().next().unwrap().to_owned())
        .collect();
    assert_eq!(sleeping, ["1"]);
    let mut left: Vec<_> = fs::read_dir(&tmp)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["keep.txt"]);
}

#[test]
fn what_a_reset_cannot_undo_is_named() {
    let fixture = Fixture::new("irreversible");
    let baseline = fixture.baseline();
    fixture.in_repo(
        "rm data.csv && echo 'import os' > venv/lib/new_package.py && git config core.editor vim",
    );
    let outputs = fixture.reset(&baseline);
    let reason = dirty_reason(fixture.verify(&baseline, &outputs));
    assert!(
        reason.contains("`data.csv` (untracked at the baseline) is gone"),
        "{reason}"
    );
    assert!(
        reason.contains("the contents of `venv/` changed"),
        "{reason}"
    );
    assert!(
        reason.contains("git config `core.editor` (file:.git/config) changed"),
        "{reason}"
    );
}

#[test]
fn a_skipped_reset_step_leaves_named_dirt() {
    let fixture = Fixture::new("skipped");
    let baseline = fixture.baseline();
    let tmp = fixture.dir.join("tmp");
    fixture.in_repo(&format!(
        "export TMPDIR_FOR_TEST='{}'\n{AGENT_MESS}",
        tmp.display()
    ));
    let pristine = String::from_utf8(
        process::Command::new("git")
            .args(["-C", fixture.task.workdir.as_str(), "rev-parse", "main~1"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();

    // The host "forgot" to kill processes and to restore the refs.
    let commands = fixture.reset_commands(&baseline);
    let skipped = [0, 2];
    assert_eq!(
        skipped.map(|index| step_name(&commands[index])),
        ["kill-processes", "restore-refs"]
    );
    let outputs: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(index, command)| {
            if skipped.contains(&index) {
                succeeded()
            } else {
                fixture.sandbox.run(command, &fixture.repo())
            }
        })
        .collect();
    let reason = dirty_reason(fixture.verify(&baseline, &outputs));
    assert!(
        reason.contains(&format!("instead of the pristine {}", pristine.trim())),
        "{reason}"
    );
    assert!(
        reason.contains("HEAD is refs/heads/agent-branch instead of refs/heads/main"),
        "{reason}"
    );
    assert!(
        reason.ends_with(" more"),
        "beyond five, differences are counted: {reason}"
    );

    // Everything the verdict summarised, in full: as many differences as it
    // named and counted.
    let found = fixture.differences(&baseline, &outputs);
    let more: usize = reason
        .rsplit_once("; and ")
        .and_then(|(_, count)| count.strip_suffix(" more"))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("a count of the rest: {reason}"));
    assert_eq!(found.len(), 5 + more, "{reason}\n{found:#?}");
    for expected in [
        "ref `refs/heads/agent-branch` appeared",
        "ref `refs/tags/agent-tag` appeared",
        "ref `refs/stash` appeared",
        "(sleep) is still running",
        "ref `refs/heads/main` is at",
    ] {
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected}: {found:#?}"
        );
    }
    // The steps that did run did their part: the junk in tmp is gone.
    assert!(!found.iter().any(|f| f.contains("junk")), "{found:#?}");
}

#[test]
fn a_head_that_no_longer_exists_makes_the_reset_fail() {
    let fixture = Fixture::new("unrestorable");
    let baseline = fixture.baseline();
    // The agent rewrites history and garbage-collects the pristine commits.
    fixture.in_repo(
        r#"set -e
git checkout -q --orphan rewritten
git -c user.name=agent -c user.email=agent@example.com commit -qm 'from scratch'
git branch -D -q main other && git tag -d v1 > /dev/null
git reflog expire --expire=now --all && git gc -q --prune=now
"#,
    );
    let outputs = fixture.reset(&baseline);
    let reason = dirty_reason(fixture.verify(&baseline, &outputs));
    assert!(
        reason.starts_with("reset step `restore-refs` failed with exit code"),
        "{reason}"
    );
    assert!(reason.contains("stderr:"), "{reason}");
}

#[test]
fn a_changed_added_or_removed_hook_is_named_and_untouched_ones_are_not() {
    let fixture = Fixture::new("hooks");
    fixture.in_repo(
        "cd .git/hooks && rm -f ./*.sample && printf '#!/bin/sh\\n' > pre-commit && \
         printf '#!/bin/sh\\n' > 'post checkout' && printf 'x\\n' > -dash && \
         printf 'keep\\n' > post-merge",
    );
    let baseline = fixture.baseline();
    let pristine = fixture.verify(&baseline, &fixture.reset(&baseline));
    assert!(matches!(pristine, Verdict::Clean), "{pristine:?}");
    fixture.in_repo(
        "cd .git/hooks && echo 'curl evil' >> -dash && rm 'post checkout' && \
         printf '#!/bin/sh\\n' > pre-push",
    );
    let outputs = fixture.reset(&baseline);
    let reason = dirty_reason(fixture.verify(&baseline, &outputs));
    for hook in ["-dash", "post checkout", "pre-push"] {
        assert!(
            reason.contains(&format!("git hook `{hook}` changed")),
            "{hook}: {reason}"
        );
    }
    assert!(
        !reason.contains("pre-commit") && !reason.contains("post-merge"),
        "{reason}"
    );
}

/// Finding 11 of the escape suite: a file hidden from git by an index flag
/// survived a reset that judged the sandbox clean, and the next task's
/// failing test came out passing.
#[test]
fn a_file_hidden_by_an_index_flag_is_restored_and_a_flag_left_is_named() {
    for flag in ["--skip-worktree", "--assume-unchanged"] {
        let fixture = Fixture::new(&format!("flag{flag}"));
        let baseline = fixture.baseline();
        fixture.in_repo(&format!(
            "git update-index {flag} tracked.txt && echo poisoned > tracked.txt && \
             test -z \"$(git status --porcelain tracked.txt)\""
        ));
        let outputs = fixture.reset(&baseline);
        let verdict = fixture.verify(&baseline, &outputs);
        assert!(matches!(verdict, Verdict::Clean), "{flag}: {verdict:?}");
        assert_eq!(
            fixture.in_repo("cat tracked.txt"),
            "one\ntwo\n",
            "{flag}: the hidden change survived the reset"
        );
        assert_eq!(
            fixture.in_repo("git ls-files -v tracked.txt"),
            "H tracked.txt\n"
        );

        // A flag set after the reset, where no reset clears it, is dirt.
        fixture.in_repo(&format!("git update-index {flag} tracked.txt"));
        let probes = fixture.check.baseline_blocking(&fixture.task).unwrap();
        let mut after: Vec<CommandOutput> = (baseline.len()..outputs.len())
            .map(|_| succeeded())
            .collect();
        after.extend(fixture.sandbox.run_all(&probes, &fixture.repo()));
        let reason = dirty_reason(fixture.verify(&baseline, &after));
        let name = flag.trim_start_matches("--");
        assert!(
            reason.contains(&format!("`tracked.txt` is marked {name} in the index")),
            "{reason}"
        );
    }
}

/// A hook or file-system monitor the task configured never runs as part of
/// the reset: they could undo the reset behind it.
#[test]
fn nothing_the_task_configured_in_git_runs_during_the_reset() {
    let fixture = Fixture::new("hooks");
    let baseline = fixture.baseline();
    let ran = fixture.dir.join("ran");
    fixture.in_repo(&format!(
        r#"set -e
printf '#!/bin/sh\ntouch {ran}/hook\n' > .git/hooks/reference-transaction
chmod +x .git/hooks/reference-transaction
printf '#!/bin/sh\ntouch {ran}/fsmonitor\n' > ../fsmonitor
chmod +x ../fsmonitor
git config core.fsmonitor "$PWD/../fsmonitor"
mkdir -p {ran} && rm -f {ran}/*
git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x
rm -f {ran}/*
"#,
        ran = ran.display()
    ));
    let outputs = fixture.reset(&baseline);
    let entries: Vec<_> = fs::read_dir(&ran)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(entries.is_empty(), "ran during the reset: {entries:?}");
    // The changed config and the new hook are still named as dirt.
    let reason = dirty_reason(fixture.verify(&baseline, &outputs));
    assert!(reason.contains("core.fsmonitor"), "{reason}");
}
