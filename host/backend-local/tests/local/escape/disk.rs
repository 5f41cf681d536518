//! Finding 12: the disk limit counted only the files it could see in the
//! writable layer. Files deleted but held open put 806 MiB on the host's
//! disk with `disk_mib = 256`, `fallocate` reserved 1,500 MiB before the
//! once-a-second check stopped it, and 60,000 empty files passed. And going
//! over the limit made the task an infrastructure error, so a task could
//! turn its own failure into one. Now held and preallocated blocks and
//! inodes count, `fallocate` is refused, and a command stopped at the
//! limit fails with the reason.

use sandfleet_core::Backend;
use sandfleet_core::ExecResult;

use super::{Setup, setups_with};

/// The template's disk for these tests: 64 MiB, 4,096 inodes.
const DISK_MIB: u32 = 64;

async fn setups() -> Vec<Setup> {
    setups_with(|_| {}, |spec| spec.disk_mib = DISK_MIB).await
}

/// The command failed because the disk limit stopped it.
fn stopped(setup: &Setup, result: &ExecResult) {
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.exit_code, -1, "{}: {stderr}", setup.label);
    assert!(
        stderr.contains("the command was stopped") && stderr.contains("disk limit (64 MiB"),
        "{}: {stderr}",
        setup.label
    );
}

#[tokio::test]
async fn finding_12_deleted_but_held_files_count_against_the_disk() {
    // Four 40 MiB files, each under the largest file the sandbox may
    // write, each deleted while a process keeps it open, then held.
    let script = r#"
import os, time
held = []
for i in range(4):
    path = "/workspace/held-%d" % i
    f = open(path, "wb")
    os.unlink(path)
    for _ in range(40):
        f.write(b"\0" * (1 << 20))
    f.flush()
    held.append(f)
time.sleep(10)
"#;
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let result = setup.sh(&sandbox, &format!("python3 -c '{script}'")).await;
        stopped(&setup, &result);
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_12_space_cannot_be_reserved_ahead_of_writing() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        for flags in ["", "--keep-size"] {
            let stderr = setup
                .refused(
                    &sandbox,
                    &format!("fallocate {flags} -l 1G /workspace/reserved"),
                )
                .await;
            assert!(
                stderr.contains("not supported") || stderr.contains("unsupported"),
                "{}: {stderr}",
                setup.label
            );
        }
        let size = setup
            .sh_ok(
                &sandbox,
                "du -sk /workspace/reserved 2>/dev/null | cut -f1 || echo 0",
            )
            .await;
        assert!(
            size.trim().parse::<u64>().unwrap_or(0) < 1024,
            "{}: {size}",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_12_empty_files_count_against_the_disk() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        // 6,000 empty files: more inodes than a 64 MiB filesystem has.
        let result = setup
            .sh(
                &sandbox,
                "mkdir /workspace/many && cd /workspace/many && touch $(seq 6000)",
            )
            .await;
        stopped(&setup, &result);
        setup.backend.release(&sandbox).await.unwrap();
    }
}
