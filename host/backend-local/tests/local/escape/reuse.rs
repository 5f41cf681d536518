//! Finding 11: a recycled sandbox kept what a task left outside the
//! workdir, where no reset check looks: a `.pth` file in `/root/.local`
//! that made every later Python exit 0, an `/etc/ld.so.preload` that loaded
//! into every later command (the reset check's among them), and a daemon it
//! started that lived into the next task. A scrub now starts the sandbox
//! again over its workdir layer: everything else is new, every process
//! gone, and the workdir is left for the reset check to restore.

use super::{Kind, setups};
use crate::common::{init_of, pid_namespace_members};
use sandfleet_core::{Backend, Recycling};

/// What a task plants outside the workdir, and a change inside it.
const PLANT: &str = r#"
set -e
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site"
echo 'import os; os._exit(0)' > "$site/zz-poison.pth"
echo /tmp/poison.so > /etc/ld.so.preload
echo poison > /dev/shm/poison
echo poison > /tmp/poison
mkdir -p /var/lib/poison
echo poison > /var/lib/poison/file
echo 'alias git=true' >> /root/.bashrc
setsid sh -c 'while :; do echo tampered > /workspace/tampered; sleep 0.2; done' </dev/null >/dev/null 2>&1 &
echo task-change > /workspace/task-file
"#;

/// Checks that what [`PLANT`] left outside the workdir (and `also`) is
/// gone: the init it ran under and every process of its pid namespace, the
/// poison, every file.
async fn nothing_planted_is_left(
    setup: &super::Setup,
    sandbox: &sandfleet_core::SandboxHandle,
    init: i32,
    also: &[&str],
) {
    assert!(pid_namespace_members(init).is_empty(), "{}", setup.label);
    let fresh = init_of(&setup.run_id, &sandbox.id);
    assert_eq!(pid_namespace_members(fresh), [fresh], "{}", setup.label);
    let python = setup.sh(sandbox, "python3 -c 'raise SystemExit(3)'").await;
    assert_eq!(python.exit_code, 3, "{}: {python:?}", setup.label);
    let outside = [
        "/etc/ld.so.preload",
        "/dev/shm/poison",
        "/tmp/poison",
        "/var/lib/poison",
        "/root/.local",
        "/root/.bashrc",
    ];
    for gone in outside.iter().chain(also) {
        setup
            .refused(sandbox, &format!("test -e {gone} || test -L {gone}"))
            .await;
    }
}

#[tokio::test]
async fn finding_11_a_scrub_leaves_nothing_of_a_task_outside_the_workdir() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let init = init_of(&setup.run_id, &sandbox.id);
        setup.sh_ok(&sandbox, PLANT).await;
        // The poison works before the scrub: Python exits 0 whatever it runs.
        let poisoned = setup.sh(&sandbox, "python3 -c 'raise SystemExit(3)'").await;
        assert_eq!(poisoned.exit_code, 0, "{}: {poisoned:?}", setup.label);

        setup.backend.scrub(&sandbox).await.unwrap();

        nothing_planted_is_left(&setup, &sandbox, init, &[]).await;
        // The workdir is the reset check's: the task's change is still
        // there for it to see and undo.
        let kept = setup.sh_ok(&sandbox, "cat /workspace/task-file").await;
        assert_eq!(kept, "task-change\n", "{}", setup.label);
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn a_restore_to_a_snapshot_leaves_nothing_of_a_task_anywhere() {
    for setup in setups().await {
        let snapshots = setup
            .backend
            .snapshots()
            .expect("isolated sandboxes snapshot");
        let deadline = || std::time::Instant::now() + crate::common::PATIENCE;
        let sandbox = setup.claim().await;
        setup
            .sh_ok(&sandbox, "echo set-up > /workspace/set-up")
            .await;
        // An OCI image's root is its own, and its snapshot holds it all.
        let oci = setup.kind == Kind::Oci;
        if oci {
            setup.sh_ok(&sandbox, "echo set-up > /etc/set-up").await;
        }
        let snapshot = snapshots
            .snapshot(&sandbox, &setup.run_id.labels(), deadline())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", setup.label));
        let init = init_of(&setup.run_id, &sandbox.id);
        setup.sh_ok(&sandbox, PLANT).await;

        snapshots
            .restore(&sandbox, &snapshot, deadline())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", setup.label));

        // Unlike a scrub, a restore leaves nothing in the workdir either:
        // only what the snapshot holds.
        let workdir = ["/workspace/task-file", "/workspace/tampered"];
        nothing_planted_is_left(&setup, &sandbox, init, &workdir).await;
        let kept = setup.sh_ok(&sandbox, "cat /workspace/set-up").await;
        assert_eq!(kept, "set-up\n", "{}", setup.label);
        if oci {
            let kept = setup.sh_ok(&sandbox, "cat /etc/set-up").await;
            assert_eq!(kept, "set-up\n", "{}", setup.label);
        }
        setup.backend.release(&sandbox).await.unwrap();
    }
}
