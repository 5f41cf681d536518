//! The differences between the baseline and the sandbox after its reset, each
//! as one sentence a person can act on.

use std::collections::{BTreeMap, BTreeSet};

use crate::options::Options;
use crate::snapshot::{Entry, Process, Snapshot};

/// Every difference that makes the sandbox unsafe to reuse.
pub(crate) fn differences(baseline: &Snapshot, after: &Snapshot, options: &Options) -> Vec<String> {
    let mut found = Vec::new();
    head(baseline, after, &mut found);
    map(
        &baseline.refs,
        &after.refs,
        "ref",
        Values::Shown,
        &mut found,
    );
    reflogs(baseline, after, &mut found);
    status(baseline, after, options, &mut found);
    if baseline.submodules != after.submodules {
        found.push(format!(
            "submodules differ: {:?} at the baseline, {:?} now",
            baseline.submodules, after.submodules
        ));
    }
    if options.check_git_config {
        git_config(&baseline.git_config, &after.git_config, &mut found);
    }
    if options.check_environment {
        map(
            &baseline.variables,
            &after.variables,
            "environment variable",
            Values::Hidden,
            &mut found,
        );
        map(
            &baseline.shell_files,
            &after.shell_files,
            "shell start-up file",
            Values::Hidden,
            &mut found,
        );
    }
    if options.check_untracked_contents {
        for (path, sum) in &after.untracked_contents {
            if baseline
                .untracked_contents
                .get(path)
                .is_some_and(|before| before != sum)
            {
                found.push(format!(
                    "the contents of `{path}` changed (files added, removed or rewritten, e.g. \
                     packages installed)"
                ));
            }
        }
    }
    processes(&baseline.processes, &after.processes, &mut found);
    tmp_entries(baseline, after, options, &mut found);
    index_flags(baseline, after, &mut found);
    found
}

fn head(baseline: &Snapshot, after: &Snapshot, found: &mut Vec<String>) {
    if baseline.head.sha != after.head.sha {
        found.push(format!(
            "HEAD is at {} instead of the pristine {}",
            after.head.sha, baseline.head.sha
        ));
    }
    if baseline.head.branch != after.head.branch {
        let describe =
            |branch: &Option<String>| branch.clone().unwrap_or_else(|| "detached".into());
        found.push(format!(
            "HEAD is {} instead of {}",
            describe(&after.head.branch),
            describe(&baseline.head.branch)
        ));
    }
}

/// Whether a difference may show values: commit ids may, environment
/// variables may hold secrets and do not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Values {
    Shown,
    Hidden,
}

/// Names (and values, when shown) that appeared, vanished or changed.
fn map(
    baseline: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    what: &str,
    values: Values,
    found: &mut Vec<String>,
) {
    let show_values = values == Values::Shown;
    for (name, value) in after {
        match baseline.get(name) {
            None if show_values => found.push(format!("{what} `{name}` appeared (at {value})")),
            None => found.push(format!("{what} `{name}` appeared")),
            Some(before) if before != value && show_values => found.push(format!(
                "{what} `{name}` is at {value}, the baseline had {before}"
            )),
            Some(before) if before != value => found.push(format!("{what} `{name}` changed")),
            Some(_) => {}
        }
    }
    for name in baseline.keys().filter(|name| !after.contains_key(*name)) {
        found.push(format!("{what} `{name}` is gone"));
    }
}

fn reflogs(baseline: &Snapshot, after: &Snapshot, found: &mut Vec<String>) {
    for (path, entries) in &after.reflogs {
        match baseline.reflogs.get(path) {
            None => found.push(format!("reflog `{path}` appeared")),
            Some(before) if entries > before => found.push(format!(
                "reflog `{path}` has {entries} entries, the baseline had {before}"
            )),
            Some(_) => {}
        }
    }
}

/// Python rewrites bytecode as it pleases (R2E-Gym's setup deletes it), so
/// bytecode coming or going is never dirt; the reset removes new bytecode.
fn is_bytecode(path: &str) -> bool {
    path.ends_with(".pyc") || path == "__pycache__/" || path.ends_with("/__pycache__/")
}

fn status(baseline: &Snapshot, after: &Snapshot, options: &Options, found: &mut Vec<String>) {
    let relevant = |snapshot: &Snapshot| -> BTreeSet<Entry> {
        snapshot
            .status
            .iter()
            .filter(|entry| match entry {
                Entry::Untracked(path) | Entry::Ignored(path) => !is_bytecode(path),
                Entry::Changed { .. } => true,
            })
            .cloned()
            .collect()
    };
    let (before, now) = (relevant(baseline), relevant(after));
    for entry in now.difference(&before) {
        found.push(match entry {
            Entry::Changed { code, path } => {
                format!("`{path}` differs from HEAD (git status `{code}`)")
            }
            Entry::Untracked(path) => format!("untracked `{path}` was not there at the baseline"),
            Entry::Ignored(path) => format!("ignored `{path}` was not there at the baseline"),
        });
    }
    for entry in before.difference(&now) {
        match entry {
            Entry::Changed { code, path } => found.push(format!(
                "`{path}` was modified at the baseline (git status `{code}`); a reset to HEAD \
                 cannot reproduce that"
            )),
            Entry::Untracked(path) | Entry::Ignored(path) if !options.may_vanish(path) => found
                .push(format!(
                    "`{path}` (untracked at the baseline) is gone; git cannot bring it back"
                )),
            Entry::Untracked(_) | Entry::Ignored(_) => {}
        }
    }
}

/// Config records are `origin\tkey=value`; hooks `hook:<name>\t<sha256>`.
/// Only keys are named: values may hold credentials.
fn git_config(baseline: &BTreeSet<String>, after: &BTreeSet<String>, found: &mut Vec<String>) {
    let keys: BTreeSet<&str> = baseline
        .symmetric_difference(after)
        .map(|record| {
            record
                .split_once('=')
                .map_or(record.as_str(), |(key, _)| key)
        })
        .collect();
    for key in keys {
        let (origin, name) = key.split_once('\t').unwrap_or(("", key));
        match origin.strip_prefix("hook:") {
            Some(hook) => found.push(format!("git hook `{hook}` changed")),
            None => found.push(format!("git config `{name}` ({origin}) changed")),
        }
    }
}

/// The sandbox's own init (pid 1) is the backend's, not the task's: a
/// backend may start the sandbox again to scrub it, with a new init.
fn processes(baseline: &[Process], after: &[Process], found: &mut Vec<String>) {
    let (baseline, after) = (without_init(baseline), without_init(after));
    let identities = |processes: &[&Process]| -> BTreeSet<(u32, u64)> {
        processes.iter().map(|p| (p.pid, p.start)).collect()
    };
    let (before, now) = (identities(&baseline), identities(&after));
    for process in after.iter().filter(|p| !before.contains(&(p.pid, p.start))) {
        found.push(format!(
            "process {} ({}) is still running",
            process.pid, process.comm
        ));
    }
    for process in baseline.iter().filter(|p| !now.contains(&(p.pid, p.start))) {
        found.push(format!(
            "process {} ({}) from the baseline is gone",
            process.pid, process.comm
        ));
    }
}

fn without_init(processes: &[Process]) -> Vec<&Process> {
    processes
        .iter()
        .filter(|process| process.pid != 1)
        .collect()
}

/// A flag that hides a file's changes from git, set or cleared since the
/// baseline.
fn index_flags(baseline: &Snapshot, after: &Snapshot, found: &mut Vec<String>) {
    let describe = |record: &str| {
        let (tag, path) = record.split_once(' ').unwrap_or(("", record));
        let flag = if tag == "S" {
            "skip-worktree"
        } else {
            "assume-unchanged"
        };
        format!("`{path}` is marked {flag} in the index")
    };
    for record in after.index_flags.difference(&baseline.index_flags) {
        found.push(format!("{}, which the baseline was not", describe(record)));
    }
    for record in baseline.index_flags.difference(&after.index_flags) {
        found.push(format!(
            "{} at the baseline, and is not now",
            describe(record)
        ));
    }
}

fn tmp_entries(baseline: &Snapshot, after: &Snapshot, options: &Options, found: &mut Vec<String>) {
    let tmp = options.tmp_dir.trim_end_matches('/');
    for name in after.tmp_entries.difference(&baseline.tmp_entries) {
        found.push(format!("`{tmp}/{name}` is still there"));
    }
    for name in baseline.tmp_entries.difference(&after.tmp_entries) {
        found.push(format!("`{tmp}/{name}` (there at the baseline) is gone"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::sample;

    fn found(change: impl FnOnce(&mut Snapshot), options: &Options) -> Vec<String> {
        let mut after = sample();
        change(&mut after);
        differences(&sample(), &after, options)
    }

    #[test]
    fn identical_snapshots_have_no_differences() {
        assert!(found(|_| {}, &Options::default()).is_empty());
    }

    #[test]
    fn bytecode_may_come_and_go() {
        let differences = found(
            |after| {
                after
                    .status
                    .retain(|entry| *entry != Entry::Ignored("pkg/__pycache__/".into()));
                after.status.push(Entry::Untracked("lib/mod.pyc".into()));
            },
            &Options::default(),
        );
        assert!(differences.is_empty(), "{differences:?}");
    }

    #[test]
    fn vanished_entries_are_dirt_unless_allowed() {
        let vanish = |after: &mut Snapshot| {
            after
                .status
                .retain(|entry| *entry != Entry::Untracked("run_tests.sh".into()));
        };
        assert_eq!(
            found(vanish, &Options::default()),
            ["`run_tests.sh` (untracked at the baseline) is gone; git cannot bring it back"]
        );
        let allowed = Options {
            may_vanish: vec!["run_tests.sh".into()],
            ..Options::default()
        };
        assert!(found(vanish, &allowed).is_empty());
    }

    #[test]
    fn new_and_modified_entries_are_named() {
        let differences = found(
            |after| {
                after.status.push(Entry::Changed {
                    code: " M".into(),
                    path: "src/app.py".into(),
                });
                after.status.push(Entry::Ignored("debug.log".into()));
            },
            &Options::default(),
        );
        assert_eq!(
            differences,
            [
                "`src/app.py` differs from HEAD (git status ` M`)",
                "ignored `debug.log` was not there at the baseline",
            ]
        );
    }

    #[test]
    fn shorter_reflogs_are_fine_longer_ones_are_not() {
        assert!(
            found(
                |after| {
                    after.reflogs.insert("HEAD".into(), 1);
                },
                &Options::default()
            )
            .is_empty()
        );
        assert_eq!(
            found(
                |after| {
                    after.reflogs.insert("HEAD".into(), 3);
                },
                &Options::default()
            ),
            ["reflog `HEAD` has 3 entries, the baseline had 2"]
        );
    }

    #[test]
    fn config_changes_name_the_key_but_not_the_value() {
        let differences = found(
            |after| {
                after
                    .git_config
                    .insert("file:.git/config\tremote.origin.url=https://token@host/x".into());
                after.git_config.insert("hook:post-checkout\tabc".into());
            },
            &Options::default(),
        );
        assert_eq!(
            differences,
            [
                "git config `remote.origin.url` (file:.git/config) changed",
                "git hook `post-checkout` changed",
            ]
        );
        assert!(!differences.concat().contains("token"));
    }

    #[test]
    fn environment_changes_name_the_variable_not_its_value() {
        let differences = found(
            |after| {
                after.variables.insert("HOME".into(), "/secret-home".into());
                after.variables.insert("API_TOKEN".into(), "hunter2".into());
                after.shell_files.clear();
            },
            &Options::default(),
        );
        assert_eq!(
            differences,
            [
                "environment variable `API_TOKEN` appeared",
                "environment variable `HOME` changed",
                "shell start-up file `/root/.bashrc` is gone",
            ]
        );
    }

    #[test]
    fn optional_checks_can_be_turned_off() {
        let change = |after: &mut Snapshot| {
            after.variables.insert("HOME".into(), "/home/agent".into());
            after
                .untracked_contents
                .insert(".venv/".into(), "d2".into());
            after.git_config.clear();
        };
        assert_eq!(found(change, &Options::default()).len(), 3);
        let lenient = Options {
            check_environment: false,
            check_git_config: false,
            check_untracked_contents: false,
            ..Options::default()
        };
        assert!(found(change, &lenient).is_empty());
    }

    #[test]
    fn processes_are_matched_by_pid_and_start_time_but_the_init_is_the_backends() {
        let mut baseline = sample();
        baseline.processes.push(Process {
            pid: 40,
            start: 6,
            comm: "server".into(),
        });
        let mut after = sample();
        // The backend started the sandbox again (a new pid 1), the baseline's
        // server is gone, and a stray survived.
        after.processes = vec![
            Process {
                pid: 1,
                start: 9,
                comm: "init".into(),
            },
            Process {
                pid: 77,
                start: 10,
                comm: "python3".into(),
            },
        ];
        assert_eq!(
            differences(&baseline, &after, &Options::default()),
            [
                "process 77 (python3) is still running",
                "process 40 (server) from the baseline is gone",
            ]
        );
    }

    #[test]
    fn index_flags_that_hide_changes_are_dirt() {
        let differences = found(
            |after| {
                after.index_flags.insert("S src/app.py".into());
                after.index_flags.insert("h setup.py".into());
            },
            &Options::default(),
        );
        assert_eq!(
            differences,
            [
                "`src/app.py` is marked skip-worktree in the index, which the baseline was not",
                "`setup.py` is marked assume-unchanged in the index, which the baseline was not",
            ]
        );
    }

    #[test]
    fn head_branch_and_tmp_differences_are_named() {
        let differences = found(
            |after| {
                after.head.sha = "0".repeat(40);
                after.head.branch = None;
                after.tmp_entries.insert("junk".into());
                after.tmp_entries.remove(".X11-unix");
            },
            &Options::default(),
        );
        assert_eq!(
            differences,
            [
                format!(
                    "HEAD is at {} instead of the pristine {}",
                    "0".repeat(40),
                    sample().head.sha
                ),
                "HEAD is detached instead of refs/heads/main".to_owned(),
                "`/tmp/junk` is still there".to_owned(),
                "`/tmp/.X11-unix` (there at the baseline) is gone".to_owned(),
            ]
        );
    }
}
