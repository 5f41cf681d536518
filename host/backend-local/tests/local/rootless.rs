//! Rootless: an ordinary user pulls an OCI image, unpacks it and runs a
//! sandbox of it, with every file its own on the host and its sandbox's
//! root's inside, as rootless runtimes keep them without a subordinate id
//! range, and snapshots and forks it. Run as root, the test drops to `nobody` for real (`setpriv`) and
//! runs [`child`] of this same test binary as that user.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use sandfleet_core::{Backend, snapshots_of};

use crate::common::PATIENCE;
use crate::oci_image;
use crate::sandbox_shell::{claim_image, sh_ok};

/// `nobody`.
const USER: u32 = 65534;

const DIR_VAR: &str = "SANDFLEET_ROOTLESS_DIR";
const REFERENCE_VAR: &str = "SANDFLEET_ROOTLESS_REFERENCE";

/// Why this kernel refuses user namespaces to unprivileged users, if it
/// does.
fn userns_refused() -> Option<String> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|v| v.trim().to_string())
    };
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some("kernel.unprivileged_userns_clone = 0".into());
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some("kernel.apparmor_restrict_unprivileged_userns = 1".into());
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user.max_user_namespaces = 0".into());
    }
    None
}

#[tokio::test]
async fn an_unprivileged_user_pulls_unpacks_and_runs_an_oci_image() {
    if let Some(why) = userns_refused() {
        eprintln!("SKIPPED: this kernel gives unprivileged users no user namespaces ({why})");
        return;
    }
    if !rustix::process::geteuid().is_root() {
        // The whole suite runs rootless then; this test needs root only to
        // become someone else.
        eprintln!("SKIPPED: only root can drop to another user; the other tests run as this one");
        return;
    }
    let served = oci_image::serve("rootless/calc", &[], oci_image::escape_config()).await;
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(USER), Some(USER)).unwrap();
    let output = Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={USER}"),
            "--clear-groups",
            "--",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "rootless::child", "--ignored", "--nocapture"])
        .env(DIR_VAR, dir.path())
        .env(REFERENCE_VAR, &served.reference)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the unprivileged run failed:\n{said}"
    );
    assert!(
        said.contains("1 passed"),
        "the child test did not run:\n{said}"
    );
    // On the host, everything it made is the user's: the layers and what
    // the sandbox wrote as its root.
    let mut owners = std::collections::BTreeSet::new();
    for entry in walkdir::WalkDir::new(dir.path().join("state")) {
        let entry = entry.unwrap();
        owners.insert(entry.metadata().unwrap().uid());
    }
    assert_eq!(owners, [USER].into(), "owners on the host");
}

/// The unprivileged side, run by the test above as `nobody`.
#[tokio::test]
#[ignore = "run as an unprivileged user by an_unprivileged_user_pulls_unpacks_and_runs_an_oci_image"]
async fn child() {
    let (Ok(dir), Ok(reference)) = (std::env::var(DIR_VAR), std::env::var(REFERENCE_VAR)) else {
        panic!("run by an_unprivileged_user_pulls_unpacks_and_runs_an_oci_image");
    };
    assert!(!rustix::process::geteuid().is_root());
    let state = Path::new(&dir).join("state");
    let (backend, run_id, sandbox) = claim_image(&state, reference, "rootless").await;
    // Inside, the sandbox's root owns the image's files and its own.
    let seen = sh_ok(
        &backend,
        &sandbox,
        "id -u; stat -c %u /usr/bin/env; echo hi > written; stat -c %u written; \
         python3 -c 'print(1 + 1)'",
    )
    .await;
    assert_eq!(seen, "0\n0\n0\n2\n");
    // A directory and a file the task locked even its owner out of: the
    // sandbox's root reads past that, the host's ordinary user does not,
    // and a snapshot still holds them as they were, and leaves them so.
    sh_ok(
        &backend,
        &sandbox,
        "mkdir locked && echo kept > locked/file && chmod 000 locked/file locked",
    )
    .await;
    let snapshots = snapshots_of(&backend).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let snapshot = snapshots
        .snapshot(&sandbox, &run_id.labels(), deadline)
        .await
        .unwrap();
    let modes = "stat -c %a locked locked/file; cat locked/file";
    assert_eq!(sh_ok(&backend, &sandbox, modes).await, "0\n0\nkept\n");
    let forks = snapshots
        .fork(&snapshot, 1, &run_id.labels(), deadline)
        .await
        .unwrap();
    assert_eq!(sh_ok(&backend, &forks[0], modes).await, "0\n0\nkept\n");
    backend.release(&forks[0]).await.unwrap();
    snapshots.delete_snapshot(&snapshot).await.unwrap();
    backend.release(&sandbox).await.unwrap();
}
