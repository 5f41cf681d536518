//! `{{name}}`: a sandfleet reset check for tasks in a git work tree. The
//! baseline records the commit; the reset returns the tree to it, removes
//! untracked files and probes the tree with `git status`; the sandbox is
//! clean when every reset command succeeded and the probe printed nothing.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::reset::{Command, CommandOutput, ResetCheck, Task, Verdict};

struct Check;

fn git(task: &Task, args: &[&str]) -> Command {
    let mut argv = vec!["git".to_string(), "-C".to_string(), task.workdir.clone()];
    argv.extend(args.iter().map(|arg| arg.to_string()));
    Command {
        argv,
        timeout_ms: 60_000,
        merge_stderr: false,
    }
}

/// The commit the baseline recorded.
fn baseline_commit(baseline: &[CommandOutput]) -> Result<&str, Failure> {
    match baseline.first() {
        Some(head) if head.exit_code == 0 && !head.stdout.trim().is_empty() => {
            Ok(head.stdout.trim())
        }
        Some(head) => Err(Failure::invalid_input(format!(
            "baseline: git rev-parse HEAD exited {}: {}",
            head.exit_code,
            head.stderr.trim()
        ))),
        None => Err(Failure::invalid_input(
            "baseline: no output of git rev-parse HEAD",
        )),
    }
}

impl ResetCheck for Check {
    fn baseline(task: Task) -> Result<Vec<Command>, Failure> {
        Ok(vec![git(&task, &["rev-parse", "HEAD"])])
    }

    fn reset(task: Task, baseline: Vec<CommandOutput>) -> Result<Vec<Command>, Failure> {
        let commit = baseline_commit(&baseline)?;
        Ok(vec![
            git(&task, &["reset", "--hard", commit]),
            git(&task, &["clean", "-fdx"]),
            git(&task, &["status", "--porcelain"]),
        ])
    }

    fn verify(
        _task: Task,
        baseline: Vec<CommandOutput>,
        outputs: Vec<CommandOutput>,
    ) -> Result<Verdict, Failure> {
        baseline_commit(&baseline)?;
        if let Some(failed) = outputs.iter().find(|output| output.exit_code != 0) {
            return Ok(Verdict::Dirty(format!(
                "a reset command exited {}: {}",
                failed.exit_code,
                failed.stderr.trim()
            )));
        }
        match outputs.last().map(|status| status.stdout.trim()) {
            Some("") | None => Ok(Verdict::Clean),
            Some(changes) => Ok(Verdict::Dirty(changes.to_string())),
        }
    }
}

sandfleet_plugin_sdk::reset_check!(Check);
