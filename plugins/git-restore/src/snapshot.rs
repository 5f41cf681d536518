//! The probes' outputs, parsed: one description of the sandbox.

use std::collections::{BTreeMap, BTreeSet};

use crate::CommandOutput;
use crate::probe::Probe;

/// What HEAD is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) sha: String,
    /// The branch ref HEAD points to; `None` when detached.
    pub(crate) branch: Option<String>,
}

/// An entry `git status` reports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Entry {
    /// A tracked path that differs from HEAD, with its two-letter code.
    Changed {
        code: String,
        path: String,
    },
    Untracked(String),
    Ignored(String),
}

/// A process, identified by pid and start time (pids are reused).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Process {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) comm: String,
}

impl Process {
    /// How the kill step names a process to spare.
    pub(crate) fn identity(&self) -> String {
        format!("{}:{}", self.pid, self.start)
    }
}

/// The sandbox as the probes saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) head: Head,
    pub(crate) refs: BTreeMap<String, String>,
    pub(crate) reflogs: BTreeMap<String, usize>,
    pub(crate) status: Vec<Entry>,
    pub(crate) submodules: Vec<String>,
    /// `origin\tkey=value` (and `hook:<name>\t<sha256>`) records.
    pub(crate) git_config: BTreeSet<String>,
    pub(crate) shell_files: BTreeMap<String, String>,
    pub(crate) variables: BTreeMap<String, String>,
    pub(crate) untracked_contents: BTreeMap<String, String>,
    pub(crate) processes: Vec<Process>,
    pub(crate) tmp_entries: BTreeSet<String>,
    /// `<tag> <path>` of index entries marked assume-unchanged or
    /// skip-worktree.
    pub(crate) index_flags: BTreeSet<String>,
}

/// Environment variables every command sees differently.
const VOLATILE_VARIABLES: [&str; 4] = ["PWD", "OLDPWD", "SHLVL", "_"];

impl Snapshot {
    /// Parses the probes' outputs, in [`Probe::ALL`] order. The error names
    /// the probe that failed or printed something unreadable.
    pub(crate) fn parse(outputs: &[CommandOutput]) -> Result<Snapshot, String> {
        if outputs.len() != Probe::ALL.len() {
            return Err(format!(
                "expected {} probe outputs, got {}",
                Probe::ALL.len(),
                outputs.len()
            ));
        }
        for (probe, output) in Probe::ALL.iter().zip(outputs) {
            if output.exit_code != 0 {
                return Err(format!(
                    "{} exited with {}{}",
                    probe.name(),
                    output.exit_code,
                    stderr_tail(output)
                ));
            }
        }
        let text = |probe: Probe| outputs[probe.index()].stdout.as_str();
        let (shell_files, variables) = environment(text(Probe::Environment));
        Ok(Snapshot {
            head: readable(Probe::Head, head(text(Probe::Head)))?,
            refs: readable(
                Probe::Refs,
                pairs(text(Probe::Refs), |sha, name| (name, sha)),
            )?,
            reflogs: readable(Probe::Reflogs, reflogs(text(Probe::Reflogs)))?,
            status: readable(Probe::Status, status(text(Probe::Status)))?,
            submodules: text(Probe::Submodules).lines().map(str::to_owned).collect(),
            git_config: git_config(text(Probe::GitConfig)),
            shell_files,
            variables,
            untracked_contents: nul_pairs(text(Probe::UntrackedContents)).collect(),
            processes: readable(Probe::Processes, processes(text(Probe::Processes)))?,
            tmp_entries: nul_fields(text(Probe::TmpEntries))
                .map(str::to_owned)
                .collect(),
            index_flags: nul_fields(text(Probe::IndexFlags))
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// The parsed output of `probe`, or an error naming it.
fn readable<T>(probe: Probe, parsed: Option<T>) -> Result<T, String> {
    parsed.ok_or_else(|| format!("{} printed something unreadable", probe.name()))
}

/// ` (stderr: ...)` with the last lines a failing command printed.
pub(crate) fn stderr_tail(output: &CommandOutput) -> String {
    let lines: Vec<&str> = output
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        String::new()
    } else {
        format!(" (stderr: {tail})")
    }
}

fn head(text: &str) -> Option<Head> {
    let mut lines = text.lines();
    let sha = lines.next()?.trim();
    let branch = lines.next()?.trim();
    let is_sha = sha.len() >= 40 && sha.bytes().all(|b| b.is_ascii_hexdigit());
    is_sha.then(|| Head {
        sha: sha.to_owned(),
        branch: (branch != "(detached)").then(|| branch.to_owned()),
    })
}

/// Lines of `<first> <second>`, into a map keyed as `entry` says.
fn pairs<V>(
    text: &str,
    entry: impl Fn(String, String) -> (String, V),
) -> Option<BTreeMap<String, V>> {
    text.lines()
        .map(|line| {
            let (first, second) = line.split_once(' ')?;
            Some(entry(first.to_owned(), second.to_owned()))
        })
        .collect()
}

fn reflogs(text: &str) -> Option<BTreeMap<String, usize>> {
    pairs(text, |count, path| (path, count)).and_then(|counts| {
        counts
            .into_iter()
            .map(|(path, count)| Some((path, count.trim().parse().ok()?)))
            .collect()
    })
}

fn nul_fields(text: &str) -> impl Iterator<Item = &str> {
    text.split_terminator('\0')
}

fn nul_pairs(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let mut fields = nul_fields(text);
    std::iter::from_fn(move || Some((fields.next()?.to_owned(), fields.next()?.to_owned())))
}

/// `XY path` records; renames and copies carry their source as one more record.
fn status(text: &str) -> Option<Vec<Entry>> {
    let mut records = nul_fields(text);
    let mut entries = Vec::new();
    while let Some(record) = records.next() {
        let code = record.get(..2)?;
        let path = record.get(3..)?.to_owned();
        entries.push(match code {
            "??" => Entry::Untracked(path),
            "!!" => Entry::Ignored(path),
            _ => {
                if code.starts_with(['R', 'C']) {
                    records.next()?;
                }
                Entry::Changed {
                    code: code.to_owned(),
                    path,
                }
            }
        });
    }
    entries.sort();
    Some(entries)
}

fn git_config(text: &str) -> BTreeSet<String> {
    nul_pairs(text)
        .map(|(origin, record)| format!("{origin}\t{}", record.replacen('\n', "=", 1)))
        .collect()
}

fn environment(text: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut files = BTreeMap::new();
    let mut variables = BTreeMap::new();
    for (key, value) in nul_pairs(text) {
        if let Some(path) = key.strip_prefix("file:") {
            files.insert(path.to_owned(), value);
        } else if let Some(name) = key.strip_prefix("var:")
            && !VOLATILE_VARIABLES.contains(&name)
        {
            variables.insert(name.to_owned(), value);
        }
    }
    (files, variables)
}

fn processes(text: &str) -> Option<Vec<Process>> {
    let mut processes = text
        .lines()
        .map(|line| {
            let mut fields = line.splitn(3, ' ');
            Some(Process {
                pid: fields.next()?.parse().ok()?,
                start: fields.next()?.parse().ok()?,
                comm: fields.next().unwrap_or_default().to_owned(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    processes.sort();
    Some(processes)
}

/// A small pristine sandbox for other modules' tests.
#[cfg(test)]
pub(crate) fn sample() -> Snapshot {
    let sha = "5e34161d7286b6cd94b8e7ff09e980ede3f2c5a3".to_owned();
    Snapshot {
        head: Head {
            sha: sha.clone(),
            branch: Some("refs/heads/main".into()),
        },
        refs: [("refs/heads/main".to_owned(), sha)].into(),
        reflogs: [("HEAD".to_owned(), 2)].into(),
        status: vec![
            Entry::Untracked("run_tests.sh".into()),
            Entry::Ignored(".venv/".into()),
            Entry::Ignored("pkg/__pycache__/".into()),
        ],
        submodules: Vec::new(),
        git_config: ["file:.git/config\tcore.bare=false".to_owned()].into(),
        shell_files: [("/root/.bashrc".to_owned(), "f00".to_owned())].into(),
        variables: [("HOME".to_owned(), "/root".to_owned())].into(),
        untracked_contents: [(".venv/".to_owned(), "d1".to_owned())].into(),
        processes: vec![Process {
            pid: 1,
            start: 5,
            comm: "init".into(),
        }],
        tmp_entries: [".X11-unix".to_owned()].into(),
        index_flags: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "5e34161d7286b6cd94b8e7ff09e980ede3f2c5a3";

    fn outputs(texts: [&str; 11]) -> Vec<CommandOutput> {
        texts
            .iter()
            .map(|text| CommandOutput {
                exit_code: 0,
                stdout: (*text).to_owned(),
                stderr: String::new(),
                timed_out: false,
                duration_ms: 1,
            })
            .collect()
    }

    #[test]
    fn every_probe_output_is_read() {
        let snapshot = Snapshot::parse(&outputs([
            &format!("{SHA}\nrefs/heads/main\n"),
            &format!("{SHA} refs/heads/main\n{SHA} refs/tags/v1\n"),
            "3 HEAD\n1 refs/heads/main\n",
            "RM b.txt\0a.txt\0?? new file\0!! .venv/\0",
            " 0123 lib (v1)\n",
            "file:.git/config\0core.bare\nfalse\0hook:pre-commit\0abc\0",
            "file:/root/.bashrc\0f00\0var:HOME\0/root\0var:PWD\0/x\0var:MULTI\0a\nb\0",
            ".venv/\0d1\0",
            "1 100 init\n57 4242 sleep\n",
            "keep\0.X11-unix\0",
            "S docs/skipped.txt\0h src/assumed.py\0",
        ]))
        .unwrap();
        assert_eq!(snapshot.head.branch.as_deref(), Some("refs/heads/main"));
        assert_eq!(snapshot.refs["refs/tags/v1"], SHA);
        assert_eq!(snapshot.reflogs["HEAD"], 3);
        assert_eq!(
            snapshot.status,
            [
                Entry::Changed {
                    code: "RM".into(),
                    path: "b.txt".into()
                },
                Entry::Untracked("new file".into()),
                Entry::Ignored(".venv/".into()),
            ]
        );
        assert_eq!(snapshot.submodules, [" 0123 lib (v1)"]);
        assert!(
            snapshot
                .git_config
                .contains("file:.git/config\tcore.bare=false")
        );
        assert!(snapshot.git_config.contains("hook:pre-commit\tabc"));
        assert_eq!(snapshot.shell_files["/root/.bashrc"], "f00");
        assert_eq!(snapshot.variables["MULTI"], "a\nb");
        assert!(!snapshot.variables.contains_key("PWD"));
        assert_eq!(snapshot.untracked_contents[".venv/"], "d1");
        assert_eq!(snapshot.processes[1].identity(), "57:4242");
        assert!(snapshot.tmp_entries.contains(".X11-unix"));
        assert!(snapshot.index_flags.contains("S docs/skipped.txt"));
        assert!(snapshot.index_flags.contains("h src/assumed.py"));
    }

    #[test]
    fn a_detached_head_has_no_branch() {
        let head = head(&format!("{SHA}\n(detached)\n")).unwrap();
        assert_eq!(head.branch, None);
        assert!(super::head("fatal: not a git repository\n").is_none());
    }

    #[test]
    fn a_failing_probe_is_named_with_its_stderr() {
        let mut outputs = outputs(["", "", "", "", "", "", "", "", "", "", ""]);
        outputs[0].exit_code = 128;
        outputs[0].stderr = "fatal: not a git repository\n".into();
        let error = Snapshot::parse(&outputs).unwrap_err();
        assert_eq!(
            error,
            "probe-head exited with 128 (stderr: fatal: not a git repository)"
        );
    }

    #[test]
    fn unreadable_output_is_named() {
        let error = Snapshot::parse(&outputs([
            &format!("{SHA}\nrefs/heads/main\n"),
            "",
            "many HEAD\n",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
        ]))
        .unwrap_err();
        assert_eq!(error, "probe-reflogs printed something unreadable");
    }
}
