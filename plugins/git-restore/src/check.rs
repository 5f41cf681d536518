//! The reset world's three operations.

use crate::action::{self, Action};
use crate::compare::differences;
use crate::options::Options;
use crate::probe::{self, Probe};
use crate::snapshot::{Snapshot, stderr_tail};
use crate::{Command, CommandOutput, Failure, Task, Verdict};

/// How many differences a verdict names before it summarises the rest.
const NAMED_DIFFERENCES: usize = 5;

/// The commands that record the pristine state: the probes.
pub(crate) fn baseline(task: &Task) -> Result<Vec<Command>, Failure> {
    Ok(probe::commands(&Options::of(task)?))
}

/// The reset actions, then the probes again.
pub(crate) fn reset(task: &Task, baseline: &[CommandOutput]) -> Result<Vec<Command>, Failure> {
    let options = Options::of(task)?;
    let baseline = Snapshot::parse(baseline)
        .map_err(|error| Failure::invalid_input(format!("the baseline is unusable: {error}")))?;
    let mut commands = action::commands(&baseline, &options);
    commands.extend(probe::commands(&options));
    Ok(commands)
}

/// Clean when every reset action succeeded and the probes match the baseline.
pub(crate) fn verify(
    task: &Task,
    baseline: &[CommandOutput],
    outputs: &[CommandOutput],
) -> Result<Verdict, Failure> {
    let options = Options::of(task)?;
    let expected = Action::ALL.len() + Probe::ALL.len();
    if outputs.len() != expected {
        return Err(Failure::invalid_input(format!(
            "expected {expected} outputs ({} reset actions, then {} probes), got {}",
            Action::ALL.len(),
            Probe::ALL.len(),
            outputs.len()
        )));
    }
    let baseline = match Snapshot::parse(baseline) {
        Ok(baseline) => baseline,
        Err(error) => return Ok(Verdict::Dirty(format!("the baseline is unusable: {error}"))),
    };
    let (action_outputs, probe_outputs) = outputs.split_at(Action::ALL.len());
    let mut found: Vec<String> = Action::ALL
        .iter()
        .zip(action_outputs)
        .filter(|(_, output)| output.exit_code != 0 || output.timed_out)
        .map(|(action, output)| {
            let how = if output.timed_out {
                "timed out".to_owned()
            } else {
                format!("failed with exit code {}", output.exit_code)
            };
            format!(
                "reset step `{}` {how}{}",
                action.name(),
                stderr_tail(output)
            )
        })
        .collect();
    match Snapshot::parse(probe_outputs) {
        Ok(after) => found.extend(differences(&baseline, &after, &options)),
        Err(error) => found.push(error),
    }
    Ok(verdict(found))
}

fn verdict(found: Vec<String>) -> Verdict {
    if found.is_empty() {
        return Verdict::Clean;
    }
    let mut reason = found[..found.len().min(NAMED_DIFFERENCES)].join("; ");
    if found.len() > NAMED_DIFFERENCES {
        reason.push_str(&format!("; and {} more", found.len() - NAMED_DIFFERENCES));
    }
    Verdict::Dirty(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        Task {
            id: "t".into(),
            image: "i".into(),
            workdir: "/testbed".into(),
            data: String::new(),
        }
    }

    fn output(exit_code: i32, stdout: &str, stderr: &str) -> CommandOutput {
        CommandOutput {
            exit_code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            timed_out: false,
            duration_ms: 1,
        }
    }

    /// Probe outputs describing a tiny pristine sandbox.
    fn probes() -> Vec<CommandOutput> {
        let sha = "5e34161d7286b6cd94b8e7ff09e980ede3f2c5a3";
        [
            format!("{sha}\nrefs/heads/main\n"),
            format!("{sha} refs/heads/main\n"),
            "1 HEAD\n".to_owned(),
            String::new(),
            String::new(),
            String::new(),
            "var:HOME\0/root\0".to_owned(),
            String::new(),
            "1 5 init\n".to_owned(),
            String::new(),
            String::new(),
        ]
        .iter()
        .map(|text| output(0, text, ""))
        .collect()
    }

    fn after_reset(action_outputs: Vec<CommandOutput>) -> Vec<CommandOutput> {
        let mut outputs = action_outputs;
        outputs.extend(probes());
        outputs
    }

    fn succeeded_actions() -> Vec<CommandOutput> {
        Action::ALL.iter().map(|_| output(0, "", "")).collect()
    }

    #[test]
    fn reset_runs_the_actions_then_the_probes() {
        let commands = reset(&task(), &probes()).unwrap();
        let names: Vec<_> = commands
            .iter()
            .map(|command| command.argv[3].as_str())
            .collect();
        assert_eq!(names[..Action::ALL.len()], Action::ALL.map(Action::name));
        assert_eq!(names[Action::ALL.len()..], Probe::ALL.map(Probe::name));
        // The baseline travels as arguments.
        assert_eq!(commands[0].argv[4..], ["1:5"]);
        assert!(commands[1].argv[4..].is_empty(), "no index flag to keep");
        assert_eq!(
            commands[2].argv[4..],
            [
                "5e34161d7286b6cd94b8e7ff09e980ede3f2c5a3",
                "refs/heads/main",
                "5e34161d7286b6cd94b8e7ff09e980ede3f2c5a3 refs/heads/main",
            ]
        );
        assert_eq!(commands[4].argv[4..], ["1 HEAD"]);
        assert_eq!(commands[5].argv[4..], ["/tmp"]);
    }

    #[test]
    fn a_matching_sandbox_is_clean() {
        let verdict = verify(&task(), &probes(), &after_reset(succeeded_actions())).unwrap();
        assert!(matches!(verdict, Verdict::Clean), "{verdict:?}");
    }

    #[test]
    fn a_failed_reset_step_is_named_with_its_stderr() {
        let mut actions = succeeded_actions();
        actions[3] = output(
            1,
            "",
            "warning: x\nerror: unable to unlink old 'lib/x.so': Operation not permitted\n",
        );
        let Verdict::Dirty(reason) = verify(&task(), &probes(), &after_reset(actions)).unwrap()
        else {
            panic!("a failed step cannot be clean");
        };
        assert_eq!(
            reason,
            "reset step `clean-worktree` failed with exit code 1 (stderr: warning: x | error: \
             unable to unlink old 'lib/x.so': Operation not permitted)"
        );
    }

    #[test]
    fn a_timed_out_step_is_dirty() {
        let mut actions = succeeded_actions();
        actions[0].timed_out = true;
        let Verdict::Dirty(reason) = verify(&task(), &probes(), &after_reset(actions)).unwrap()
        else {
            panic!("a timed-out step cannot be clean");
        };
        assert_eq!(reason, "reset step `kill-processes` timed out");
    }

    #[test]
    fn many_differences_are_summarised() {
        assert!(matches!(verdict(Vec::new()), Verdict::Clean));
        let found = (1..=7).map(|n| format!("d{n}")).collect();
        let Verdict::Dirty(reason) = verdict(found) else {
            panic!("differences are dirt");
        };
        assert_eq!(reason, "d1; d2; d3; d4; d5; and 2 more");
    }

    #[test]
    fn an_unusable_baseline_cannot_be_reset_and_is_never_clean() {
        let mut broken = probes();
        broken[0] = output(
            128,
            "",
            "fatal: not a git repository (or any of the parent directories): .git\n",
        );
        let failure = reset(&task(), &broken).unwrap_err();
        assert!(
            failure
                .message
                .starts_with("the baseline is unusable: probe-head exited with 128"),
            "{}",
            failure.message
        );
        let verdict = verify(&task(), &broken, &after_reset(succeeded_actions())).unwrap();
        assert!(
            matches!(verdict, Verdict::Dirty(reason) if reason.contains("not a git repository"))
        );
    }

    #[test]
    fn the_number_of_outputs_must_match_the_reset() {
        let failure = verify(&task(), &probes(), &probes()).unwrap_err();
        assert_eq!(
            failure.kind,
            sandfleet_plugin_sdk::FailureKind::InvalidInput
        );
        assert!(
            failure.message.contains("expected 17 outputs"),
            "{}",
            failure.message
        );
    }
}
