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
/// workdir, which need not be the top itself, and runs git so that nothing
/// the task left in the repository's config runs as part of the reset: no
/// hook (a `reference-transaction` hook runs on every ref update), no
/// file-system monitor (which `git status` would start).
pub(crate) const AT_REPOSITORY_TOP: &str =
    "git() { command git -c core.fsmonitor=false -c core.hooksPath=/dev/null \"$@\"; }
top=$(git rev-parse --show-toplevel) || exit 1
cd \"$top\" || exit 1
";

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

/// `digests PREFIX FILE...` prints `PREFIX<file>\0<sha256>\0` per file, in
/// order, from one `sha256sum -z` for all of them (names unescaped, records
/// NUL-ended); where that does not give one record per file (no `-z`, an
/// unreadable file), one `sha256sum` per file, an unreadable one with an
/// empty digest.
pub(crate) const DIGESTS: &str = r#"digests() {
  local prefix=$1 record sum records=()
  shift
  [ "$#" -eq 0 ] && return 0
  while IFS= read -r -d '' record; do
    records+=("$record")
  done < <(sha256sum -z -- "$@" 2>/dev/null)
  if [ "${#records[@]}" -eq "$#" ]; then
    for record in "${records[@]}"; do
      printf '%s%s\0%s\0' "$prefix" "${record:66}" "${record:0:64}"
    done
  else
    for record; do
      sum=$(sha256sum < "$record" 2>/dev/null)
      printf '%s%s\0%s\0' "$prefix" "$record" "${sum:0:64}"
    done
  fi
}
"#;
