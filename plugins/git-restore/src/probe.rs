//! The probes: commands that describe the sandbox's state. `baseline` runs
//! them on the pristine sandbox and `reset` runs them again after restoring
//! it, so the two descriptions compare field by field. Their outputs are
//! parsed by [`crate::snapshot`].

use crate::Command;
use crate::options::Options;
use crate::shell::{AT_REPOSITORY_TOP, DIGESTS, LIST_PROCESSES, bash};

/// The probes, in the order their commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `<sha>\n<branch ref or (detached)>\n`
    Head,
    /// `<sha> <ref>` lines.
    Refs,
    /// `<entries> <path under the logs dir>` lines.
    Reflogs,
    /// `git status --porcelain=v1 -z` with ignored entries.
    Status,
    /// `git submodule status --recursive` lines.
    Submodules,
    /// NUL-separated `(origin, key\nvalue)` pairs from `git config`, then
    /// `(hook:<name>, <sha256>)` pairs.
    GitConfig,
    /// NUL-separated `(file:<path>, <sha256>)` and `(var:<name>, <value>)`
    /// pairs.
    Environment,
    /// NUL-separated `(<entry>, <sha256 of its listing>)` pairs, one per
    /// untracked or ignored entry that is not bytecode.
    UntrackedContents,
    /// `<pid> <start time> <comm>` lines.
    Processes,
    /// NUL-terminated names of the entries of the temporary directory.
    TmpEntries,
    /// NUL-terminated `git ls-files -v` records of index entries marked
    /// assume-unchanged (a lowercase tag) or skip-worktree (`S`): marks
    /// that hide a changed file from git itself.
    IndexFlags,
}

impl Probe {
    /// The probes, in the order their commands run.
    pub(crate) const ALL: [Probe; 11] = [
        Probe::Head,
        Probe::Refs,
        Probe::Reflogs,
        Probe::Status,
        Probe::Submodules,
        Probe::GitConfig,
        Probe::Environment,
        Probe::UntrackedContents,
        Probe::Processes,
        Probe::TmpEntries,
        Probe::IndexFlags,
    ];

    /// The probe's place in [`Probe::ALL`], and so among the outputs.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The probe's name: its command's `$0`, and how errors name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Probe::Head => "probe-head",
            Probe::Refs => "probe-refs",
            Probe::Reflogs => "probe-reflogs",
            Probe::Status => "probe-status",
            Probe::Submodules => "probe-submodules",
            Probe::GitConfig => "probe-git-config",
            Probe::Environment => "probe-environment",
            Probe::UntrackedContents => "probe-untracked-contents",
            Probe::Processes => "probe-processes",
            Probe::TmpEntries => "probe-tmp-entries",
            Probe::IndexFlags => "probe-index-flags",
        }
    }

    fn command(self, options: &Options) -> Command {
        let in_repository = |script: &str| format!("{AT_REPOSITORY_TOP}{script}");
        let (script, args, timeout_secs) = match self {
            Probe::Head => (in_repository(HEAD), vec![], 30),
            Probe::Refs => (
                in_repository("git for-each-ref --format='%(objectname) %(refname)'\n"),
                vec![],
                60,
            ),
            Probe::Reflogs => (in_repository(REFLOGS), vec![], 60),
            Probe::Status => (in_repository(STATUS), vec![], 300),
            Probe::Submodules => (
                in_repository("[ -f .gitmodules ] || exit 0\ngit submodule status --recursive\n"),
                vec![],
                120,
            ),
            Probe::GitConfig => (in_repository(&format!("{DIGESTS}{GIT_CONFIG}")), vec![], 30),
            Probe::Environment => (format!("{DIGESTS}{ENVIRONMENT}"), vec![], 30),
            Probe::UntrackedContents => (in_repository(UNTRACKED_CONTENTS), vec![], 600),
            Probe::Processes => (format!("{LIST_PROCESSES}{PRINT_PROCESSES}"), vec![], 30),
            Probe::TmpEntries => (TMP_ENTRIES.to_owned(), vec![options.tmp_dir.clone()], 60),
            Probe::IndexFlags => (in_repository(FLAGGED_INDEX_ENTRIES), vec![], 60),
        };
        bash(self.name(), &script, args, timeout_secs)
    }
}

/// The probe commands, in [`Probe::ALL`] order.
pub(crate) fn commands(options: &Options) -> Vec<Command> {
    Probe::ALL
        .iter()
        .map(|probe| probe.command(options))
        .collect()
}

const HEAD: &str = r#"git rev-parse --verify -q HEAD || { echo "HEAD names no commit" >&2; exit 1; }
git symbolic-ref -q HEAD || echo "(detached)"
"#;

/// Lines are counted by `mapfile`, a builtin, as the restore step counts
/// them: no process per reflog.
const REFLOGS: &str = r#"logs=$(git rev-parse --git-path logs) || exit 1
[ -d "$logs" ] || exit 0
cd "$logs" || exit 1
while IFS= read -r -d '' log; do
  mapfile -t lines < "$log" || exit 1
  printf '%s %s\n' "${#lines[@]}" "${log#./}"
done < <(find . -type f -print0)
"#;

/// Untracked directories collapse to one entry, ignored ones too
/// (`--ignored=traditional`), so a virtualenv is one line, not thousands.
const STATUS: &str =
    "git status --porcelain=v1 -z --ignored=traditional --untracked-files=normal\n";

/// The hooks directory is asked of git without the scripts' own
/// `core.hooksPath` (which points nowhere, so no hook runs).
const GIT_CONFIG: &str = r#"git config --list --show-origin -z || exit 1
hooks=$(command git rev-parse --git-path hooks) || exit 1
[ -d "$hooks" ] || exit 0
cd "$hooks" || exit 1
files=()
for hook in *; do
  [ -f "$hook" ] && files+=("$hook")
done
digests "hook:" "${files[@]}"
"#;

/// The exec environment, and the files a login or interactive shell reads
/// (an agent's shell is usually one of those).
const ENVIRONMENT: &str = r#"files=()
for file in /etc/environment /etc/profile /etc/bash.bashrc "$HOME/.bashrc" "$HOME/.profile" "$HOME/.bash_profile" /etc/profile.d/*; do
  [ -f "$file" ] && files+=("$file")
done
digests "file:" "${files[@]}"
env -0 | while IFS= read -r -d '' pair; do
  printf 'var:%s\0%s\0' "${pair%%=*}" "${pair#*=}"
done
"#;

/// One fingerprint per untracked or ignored entry: the sorted listing of its
/// files with type, size, mtime and link target. Directories contribute their
/// names only, and bytecode nothing, since Python rewrites both freely.
const UNTRACKED_CONTENTS: &str = r#"git status --porcelain=v1 -z --ignored=traditional --untracked-files=normal |
while IFS= read -r -d '' entry; do
  code=${entry:0:2}
  path=${entry:3}
  case $code in R?|C?) IFS= read -r -d '' _ ;; esac
  case $code in '??'|'!!') ;; *) continue ;; esac
  case $path in *.pyc|__pycache__/|*/__pycache__/) continue ;; esac
  sum=$(find "$path" -name __pycache__ -prune -o -name '*.pyc' -o -type d -printf '%P d\n' \
          -o -printf '%P %y %s %T@ %l\n' | LC_ALL=C sort | sha256sum | cut -c1-64)
  printf '%s\0%s\0' "$path" "$sum"
done
"#;

const PRINT_PROCESSES: &str = r#"list_processes
for process in "${processes[@]}"; do
  printf '%s\n' "$process"
done
"#;

/// `grep` exits 1 when nothing is flagged, which is no failure.
pub(crate) const FLAGGED_INDEX_ENTRIES: &str =
    "git ls-files -v -z | { grep -z '^[a-zS] ' || [ $? -eq 1 ]; }\n";

const TMP_ENTRIES: &str = r#"[ -d "$1" ] || exit 0
find "$1" -mindepth 1 -maxdepth 1 -printf '%f\0'
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_follow_the_run_order() {
        for (index, probe) in Probe::ALL.iter().enumerate() {
            assert_eq!(probe.index(), index, "{}", probe.name());
        }
    }

    #[test]
    fn every_probe_runs_bash_with_its_name_as_dollar_zero() {
        let commands = commands(&Options::default());
        assert_eq!(commands.len(), Probe::ALL.len());
        for (probe, command) in Probe::ALL.iter().zip(&commands) {
            assert_eq!(command.argv[..2], ["bash", "-c"]);
            assert_eq!(command.argv[3], probe.name());
            assert!(command.timeout_ms > 0);
        }
    }

    #[test]
    fn the_tmp_directory_is_an_argument_not_part_of_the_script() {
        let options = Options {
            tmp_dir: "/scratch dir/$(x)".into(),
            ..Options::default()
        };
        let command = Probe::TmpEntries.command(&options);
        assert_eq!(command.argv[4], "/scratch dir/$(x)");
        assert!(!command.argv[2].contains("scratch"));
    }
}
