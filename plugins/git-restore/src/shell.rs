//! Building blocks of the scripts the plugin hands out.

use crate::Command;

/// A `bash -c` command named `name` (its `$0`, so bash's own error messages
/// say which step failed); `args` become `$1`, `$2`, ... so no value is ever
/// quoted into the script.
pub(crate) fn bash(
    name: &str,
    script: &str,
    args: impl IntoIterator<Item = String>,
    timeout_secs: u64,
) -> Command {
    let mut argv = vec![
        "bash".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        name.to_owned(),
    ];
    argv.extend(args);
    Command {
        argv,
        timeout_ms: timeout_secs * 1000,
        merge_stderr: false,
    }
}

/// Every git script starts at the top of the repository that holds the task's
/// workdir, which need not be the top itself.
pub(crate) const AT_REPOSITORY_TOP: &str =
    "top=$(git rev-parse --show-toplevel) || exit 1\ncd \"$top\" || exit 1\n";

/// Fills `processes` with `<pid> <start time> <comm>` for every process but
/// this shell and its ancestors (the host's way in), kernel threads and
/// zombies. Builtins only, so the shell starts no child that would list
/// itself.
pub(crate) const LIST_PROCESSES: &str = r#"list_processes() {
  local pid=$BASHPID chain=" " stat fields comm dir
  while [ "$pid" -gt 0 ] && read -r stat < "/proc/$pid/stat"; do
    chain+="$pid "
    fields=(${stat##*) })
    pid=${fields[1]}
  done
  processes=()
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case $chain in *" $pid "*) continue ;; esac
    read -r stat < "$dir/stat" 2>/dev/null || continue
    fields=(${stat##*) })
    case ${fields[0]} in Z|X) continue ;; esac
    (( fields[6] & 0x200000 )) && continue
    comm=${stat#*(}
    comm=${comm%)*}
    processes+=("$pid ${fields[19]} ${comm//[$'\t\n ']/_}")
  done
}
"#;
