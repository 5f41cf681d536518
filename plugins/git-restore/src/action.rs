//! The reset's actions, in order, each built from the baseline: kill what the
//! task started, put git back, remove new temporary files. Each is its own
//! command, so a failure names the step.

use crate::Command;
use crate::options::Options;
use crate::probe::FLAGGED_INDEX_ENTRIES;
use crate::shell::{AT_REPOSITORY_TOP, LIST_PROCESSES, bash};
use crate::snapshot::{Entry, Snapshot};

/// One step of the reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// SIGKILL every process not alive at the baseline, except init and the
    /// command itself, until none is left. First, so nothing writes while
    /// the rest restores.
    KillProcesses,
    /// Index flags that hide a file from git (assume-unchanged,
    /// skip-worktree) cleared, but for those the baseline had: before the
    /// hard reset, which would pass such a file by.
    RestoreIndexFlags,
    /// Refs and HEAD as at the baseline (new branches, tags and the stash go),
    /// no operation in progress, index and work tree at HEAD.
    RestoreRefs,
    /// `git clean -ffdx` sparing the baseline's untracked and ignored entries
    /// (a virtualenv, build products), then submodules at their recorded
    /// commits, reset and cleaned.
    CleanWorktree,
    /// Reflogs cut back to their baseline length, so the next task cannot find
    /// this one's commits through them, then `git prune` of the objects only
    /// they reached (skipped when there is nothing it could remove).
    RestoreReflogs,
    /// Entries of the temporary directory the baseline did not have go.
    CleanTmp,
}

impl Action {
    /// The steps, in the order their commands run.
    pub(crate) const ALL: [Action; 6] = [
        Action::KillProcesses,
        Action::RestoreIndexFlags,
        Action::RestoreRefs,
        Action::CleanWorktree,
        Action::RestoreReflogs,
        Action::CleanTmp,
    ];

    /// The step's name: its command's `$0`, and how verdicts name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::KillProcesses => "kill-processes",
            Action::RestoreIndexFlags => "restore-index-flags",
            Action::RestoreRefs => "restore-refs",
            Action::CleanWorktree => "clean-worktree",
            Action::RestoreReflogs => "restore-reflogs",
            Action::CleanTmp => "clean-tmp",
        }
    }

    fn command(self, baseline: &Snapshot, options: &Options) -> Command {
        let in_repository = |script: &str| format!("{AT_REPOSITORY_TOP}{script}");
        match self {
            Action::KillProcesses => bash(
                self.name(),
                &format!("{LIST_PROCESSES}{KILL_PROCESSES}"),
                baseline.processes.iter().map(|process| process.identity()),
                60,
            ),
            Action::RestoreIndexFlags => bash(
                self.name(),
                &in_repository(&format!(
                    "{RESTORE_INDEX_FLAGS_START}{FLAGGED_INDEX_ENTRIES}{RESTORE_INDEX_FLAGS_END}"
                )),
                baseline.index_flags.iter().cloned(),
                120,
            ),
            Action::RestoreRefs => {
                let head = [
                    baseline.head.sha.clone(),
                    baseline.head.branch.clone().unwrap_or_default(),
                ];
                let refs = baseline
                    .refs
                    .iter()
                    .map(|(name, sha)| format!("{sha} {name}"));
                bash(
                    self.name(),
                    &in_repository(RESTORE_REFS),
                    head.into_iter().chain(refs),
                    300,
                )
            }
            Action::CleanWorktree => bash(
                self.name(),
                &in_repository(CLEAN_WORKTREE),
                baseline.status.iter().filter_map(|entry| match entry {
                    Entry::Untracked(path) | Entry::Ignored(path) => Some(exclude_pattern(path)),
                    Entry::Changed { .. } => None,
                }),
                600,
            ),
            Action::RestoreReflogs => bash(
                self.name(),
                &in_repository(RESTORE_REFLOGS),
                baseline
                    .reflogs
                    .iter()
                    .map(|(path, count)| format!("{count} {path}")),
                600,
            ),
            Action::CleanTmp => bash(
                self.name(),
                CLEAN_TMP,
                std::iter::once(options.tmp_dir.clone())
                    .chain(baseline.tmp_entries.iter().cloned()),
                300,
            ),
        }
    }
}

/// The reset actions, in [`Action::ALL`] order.
pub(crate) fn commands(baseline: &Snapshot, options: &Options) -> Vec<Command> {
    Action::ALL
        .iter()
        .map(|action| action.command(baseline, options))
        .collect()
}

/// A `git clean -e` pattern that matches exactly `path` (from the repository
/// top; a trailing `/` keeps meaning "directory"): anchored with a leading
/// `/`, with glob characters and trailing spaces escaped.
pub(crate) fn exclude_pattern(path: &str) -> String {
    let (name, slash) = match path.strip_suffix('/') {
        Some(name) => (name, "/"),
        None => (path, ""),
    };
    let kept = name.trim_end_matches(' ');
    let mut pattern = String::with_capacity(path.len() + 8);
    pattern.push('/');
    for c in kept.chars() {
        if matches!(c, '\\' | '*' | '?' | '[') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    for _ in kept.len()..name.len() {
        pattern.push_str("\\ ");
    }
    pattern.push_str(slash);
    pattern
}

/// `$@` holds `<pid>:<start>` of the baseline's processes. Ten rounds, so a
/// process that forks while being killed is caught too.
const KILL_PROCESSES: &str = r#"declare -A spare
for identity; do spare[$identity]=1; done
for round in 1 2 3 4 5 6 7 8 9 10; do
  list_processes
  victims=()
  for process in "${processes[@]}"; do
    read -r pid start comm <<< "$process"
    [ "$pid" = 1 ] && continue
    [ -n "${spare[$pid:$start]+set}" ] && continue
    victims+=("$pid")
  done
  [ "${#victims[@]}" -eq 0 ] && exit 0
  kill -KILL "${victims[@]}" 2>/dev/null
  sleep 0.2
done
echo "still running after 10 rounds of SIGKILL: ${victims[*]}" >&2
exit 1
"#;

/// `$@` holds the baseline's flagged records (`<tag> <path>`); the
/// flagged entries now come from [`FLAGGED_INDEX_ENTRIES`] between the two
/// halves.
const RESTORE_INDEX_FLAGS_START: &str = r#"declare -A keep
for record; do keep[$record]=1; done
mapfile -d '' flagged < <(
"#;

const RESTORE_INDEX_FLAGS_END: &str = r#")
clear=()
for record in "${flagged[@]}"; do
  [ -n "${keep[$record]+set}" ] || clear+=("${record:2}")
done
[ "${#clear[@]}" -eq 0 ] && exit 0
# One flag per call: update-index keeps only the last of several.
git update-index --no-skip-worktree -- "${clear[@]}" &&
  git update-index --no-assume-unchanged -- "${clear[@]}"
"#;

/// `$1` is the baseline's HEAD commit, `$2` its branch ref (empty when
/// detached), the rest `<sha> <ref>` for every baseline ref.
const RESTORE_REFS: &str = r#"head=$1 branch=$2
shift 2
declare -A baseline current
for entry; do baseline[${entry#* }]=${entry%% *}; done
while read -r sha ref; do current[$ref]=$sha; done < <(git for-each-ref --format='%(objectname) %(refname)')
updates=()
for ref in "${!current[@]}"; do
  [ -n "${baseline[$ref]+set}" ] || updates+=("delete $ref")
done
for ref in "${!baseline[@]}"; do
  [ "${current[$ref]-}" = "${baseline[$ref]}" ] || updates+=("update $ref ${baseline[$ref]}")
done
if [ "${#updates[@]}" -gt 0 ]; then
  printf '%s\n' "${updates[@]}" | git update-ref --stdin || exit 1
fi
git_dir=$(git rev-parse --git-dir) || exit 1
states=()
for state in rebase-merge rebase-apply sequencer MERGE_HEAD MERGE_MSG MERGE_MODE AUTO_MERGE \
             CHERRY_PICK_HEAD REVERT_HEAD BISECT_LOG BISECT_START BISECT_TERMS BISECT_NAMES \
             BISECT_EXPECTED_REV BISECT_ANCESTORS_OK; do
  [ -e "${git_dir:?}/$state" ] || [ -L "$git_dir/$state" ] && states+=("$git_dir/$state")
done
if [ "${#states[@]}" -gt 0 ]; then
  rm -rf -- "${states[@]}" || exit 1
fi
if [ -n "$branch" ]; then
  git symbolic-ref HEAD "$branch" || exit 1
else
  git update-ref --no-deref HEAD "$head" || exit 1
fi
git reset -q --hard "$head"
"#;

/// `$@` holds `git clean -e` patterns for the baseline's untracked and ignored
/// entries.
const CLEAN_WORKTREE: &str = r#"excludes=()
for pattern; do excludes+=(-e "$pattern"); done
git clean -ffdxq "${excludes[@]}" || exit 1
if [ -f .gitmodules ]; then
  git submodule update -q --recursive --force || exit 1
  git submodule foreach -q --recursive 'git reset -q --hard && git clean -ffdxq' || exit 1
fi
"#;

/// `$@` holds `<entries> <path>` for every baseline reflog (paths under the
/// logs directory).
const RESTORE_REFLOGS: &str = r#"paths=$(git rev-parse --git-path logs --git-path objects --git-path shallow) || exit 1
{ read -r logs; read -r objects; read -r shallow; } <<< "$paths"
if [ -d "$logs" ]; then
  declare -A keep
  for entry; do keep[${entry#* }]=${entry%% *}; done
  while IFS= read -r -d '' log; do
    name=${log#"$logs"/}
    if [ -z "${keep[$name]+set}" ]; then
      rm -f "$log" || exit 1
      continue
    fi
    # Counted as the probe counts: a builtin, no process per reflog.
    mapfile -t lines < "$log" || exit 1
    if [ "${#lines[@]}" -gt "${keep[$name]}" ]; then
      if [ "${keep[$name]}" -eq 0 ]; then
        : > "$log.git-restore"
      else
        printf '%s\n' "${lines[@]:0:${keep[$name]}}" > "$log.git-restore"
      fi && mv "$log.git-restore" "$log" || exit 1
    fi
  done < <(find "$logs" -type f -print0)
fi
# Prune removes only loose objects (and temporary files, and shallow entries
# of a shallow clone); with none of those it would walk every reachable
# object of the repository for nothing.
if [ -e "$shallow" ] || [ -n "$(find "$objects" \( -path "$objects/[0-9a-f][0-9a-f]/*" \
     -o -path "$objects/pack/tmp_*" -o -name 'tmp_*' \) -print -quit)" ]; then
  git prune --expire=now
fi
"#;

/// `$1` is the temporary directory, the rest the names of its baseline entries.
const CLEAN_TMP: &str = r#"tmp=$1
shift
[ -d "$tmp" ] || exit 0
declare -A keep
for name; do keep[$name]=1; done
shopt -s nullglob dotglob
failed=0
for entry in "$tmp"/*; do
  [ -n "${keep[${entry##*/}]+set}" ] || rm -rf -- "$entry" || failed=1
done
exit $failed
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclude_patterns_match_exactly_one_path() {
        assert_eq!(exclude_pattern(".venv/"), "/.venv/");
        assert_eq!(exclude_pattern("run_tests.sh"), "/run_tests.sh");
        assert_eq!(exclude_pattern("a b/c*d?[e]\\f"), "/a b/c\\*d\\?\\[e]\\\\f");
        assert_eq!(exclude_pattern("trail  "), "/trail\\ \\ ");
        assert_eq!(exclude_pattern("!important #1"), "/!important #1");
    }

    #[test]
    fn the_worktree_clean_spares_baseline_entries_bytecode_included() {
        let commands = commands(&crate::snapshot::sample(), &Options::default());
        let clean = &commands[Action::CleanWorktree as usize];
        assert_eq!(clean.argv[3], "clean-worktree");
        assert_eq!(
            clean.argv[4..],
            ["/run_tests.sh", "/.venv/", "/pkg/__pycache__/"]
        );
    }

    #[test]
    fn tmp_cleaning_keeps_the_baseline_entries_of_the_configured_directory() {
        let options = Options {
            tmp_dir: "/scratch".into(),
            ..Options::default()
        };
        let commands = commands(&crate::snapshot::sample(), &options);
        assert_eq!(
            commands[Action::CleanTmp as usize].argv[4..],
            ["/scratch", ".X11-unix"]
        );
    }
}
