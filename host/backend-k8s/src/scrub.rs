//! Making a claimed sandbox fit for another task: every process in the pod
//! but pid 1 (the container's init or entrypoint) and the entrypoint itself
//! is killed, until none is left. The pod's pid namespace is its own (the
//! template never sets `hostPID` or `shareProcessNamespace`, and
//! [`crate::K8sConfig`] refuses a `pod_spec` that does), so nothing outside
//! the sandbox can be hit.

use crate::exec::{Target, exit_code};

/// How long a scrub may take.
const SCRUB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Rounds of killing before the scrub gives up.
const ROUNDS: u32 = 20;

/// Kills everything in the pod but pid 1 and the processes running
/// `entrypoint`.
///
/// # Errors
///
/// A sentence saying why the sandbox cannot be reused.
pub(crate) async fn scrub(target: &Target, entrypoint: &[String]) -> Result<(), String> {
    // Spares its own ancestors too: where a runtime starts exec'd commands
    // through a shim inside the pod's pid namespace, killing the shim would
    // end the scrub itself.
    const SCRUB: &str = r#"want=$1; rounds=$2; chain=" "; a=$$; while [ "$a" -gt 0 ] 2>/dev/null; do chain="$chain$a "; s=$(cat "/proc/$a/stat" 2>/dev/null) || break; s=${s##*) }; set -- $s; a=$2; done; i=0; while [ "$i" -lt "$rounds" ]; do i=$((i+1)); left=0; for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] && continue; case "$chain" in *" $p "*) continue;; esac; s=$(cat "$d/stat" 2>/dev/null) || continue; case "$s" in *") Z "*) continue;; esac; c=$(tr '\000' ' ' < "$d/cmdline" 2>/dev/null); [ "$c" = "$want" ] && continue; kill -KILL "$p" 2>/dev/null && left=$((left+1)); done; [ "$left" = 0 ] && exit 0; sleep 0.05; done; echo "processes survived $rounds rounds of kills" >&2; exit 4"#;
    let want: String = entrypoint.iter().map(|word| format!("{word} ")).collect();
    let argv = target.shell.script(SCRUB, &[want, ROUNDS.to_string()]);
    let mut process = target
        .start(argv, false)
        .await
        .map_err(|e| format!("cannot exec the scrub: {}", crate::client::one_line(&e)))?;
    let status = process.take_status();
    let (Some(stdout), Some(stderr)) = (process.stdout(), process.stderr()) else {
        unreachable!("stdout and stderr were asked for");
    };
    let ended = tokio::time::timeout(SCRUB_TIMEOUT, async {
        let (_, said) = tokio::join!(drain(stdout), drain(stderr));
        let status = match status {
            Some(status) => status.await,
            None => None,
        };
        (said, status)
    })
    .await;
    let Ok((said, status)) = ended else {
        return Err(format!(
            "the scrub did not end within {}",
            humantime::format_duration(SCRUB_TIMEOUT)
        ));
    };
    match status.map(|s| exit_code(&s)) {
        Some(0) => Ok(()),
        Some(code) => Err(format!("scrub exited {code}: {}", said.trim())),
        None => Err("the scrub's exec ended without a status".into()),
    }
}

async fn drain(mut stream: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}
