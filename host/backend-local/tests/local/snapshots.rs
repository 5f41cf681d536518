//! Snapshots, forks and restores on real sandboxes.

use std::time::Instant;

use sandfleet_backend_local::IsolationMode;
use sandfleet_core::{Backend, ErrorKind, SandboxHandle, Snapshots, snapshots_of};

use sandfleet_test_support::snapshots as contract;

use crate::common::{
    self, Fixture, PATIENCE, TestBackend, claim, sandbox_dirs, sh, sh_ok, template,
};

fn deadline() -> Instant {
    Instant::now() + PATIENCE
}

fn snapshots(backend: &TestBackend) -> &dyn Snapshots {
    snapshots_of(&backend.backend).unwrap()
}

async fn has(backend: &TestBackend, sandbox: &SandboxHandle, path: &str) -> bool {
    sh(backend, sandbox, &format!("test -e {path}"))
        .await
        .exit_code
        == 0
}

#[tokio::test]
async fn the_snapshot_contract_holds() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "app").await;
    let source = claim(&backend, &template).await;
    let (snapshot, forks) = contract::forks_hold_the_snapshot_and_their_own_writes(
        &backend.backend,
        &source,
        &backend.run_id,
        3,
        PATIENCE,
    )
    .await;
    assert_eq!(snapshot.template, template);
    let other = sandfleet_core::RunId::generate("other");
    contract::refused_forks_make_nothing(
        &backend.backend,
        &snapshot,
        &backend.run_id,
        &other,
        PATIENCE,
    )
    .await;
    // Deleted, the snapshot's forks run on over its layer.
    for fork in &forks {
        assert_eq!(sh_ok(&backend, fork, "cat before.txt").await, "before\n");
    }
}

#[tokio::test]
async fn what_overlayfs_keeps_a_fork_keeps_and_snapshots_of_forks_stack() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "app").await;
    let source = claim(&backend, &template).await;
    sh_ok(
        &backend,
        &source,
        "echo before > before.txt && rm README.md && mkdir -p src/new && echo x > src/new/x \
         && truncate -s 512M sparse && echo tail >> sparse && ln -s /etc/hostname link",
    )
    .await;
    let snapshot = snapshots(&backend)
        .snapshot(&source, &backend.labels(), deadline())
        .await
        .unwrap();
    let forks = snapshots(&backend)
        .fork(&snapshot, 2, &backend.labels(), deadline())
        .await
        .unwrap();
    for fork in &forks {
        // A file the task deleted stays deleted in the forks.
        assert!(!has(&backend, fork, "README.md").await, "{}", fork.id);
        assert_eq!(
            sh_ok(&backend, fork, "cat src/new/x src/app.py").await,
            "x\nprint('hello')\n"
        );
        assert_eq!(
            sh_ok(&backend, fork, "stat -c %s sparse; tail -c 5 sparse").await,
            "536870917\ntail\n"
        );
        assert_eq!(
            sh_ok(&backend, fork, "readlink link").await,
            "/etc/hostname\n"
        );
    }

    // A snapshot of a fork stacks on its snapshot: its forks have both.
    sh_ok(
        &backend,
        &forks[0],
        "echo mine > mine.txt && echo changed > before.txt",
    )
    .await;
    let second = snapshots(&backend)
        .snapshot(&forks[0], &backend.labels(), deadline())
        .await
        .unwrap();
    let grandchild = snapshots(&backend)
        .fork(&second, 1, &backend.labels(), deadline())
        .await
        .unwrap();
    assert_eq!(
        sh_ok(
            &backend,
            &grandchild[0],
            "cat before.txt mine.txt src/new/x"
        )
        .await,
        "changed\nmine\nx\n"
    );

    // Deleted, the first snapshot is listed no more, and what stacks it
    // runs on.
    snapshots(&backend)
        .delete_snapshot(&snapshot)
        .await
        .unwrap();
    assert_eq!(
        sh_ok(&backend, &forks[1], "cat before.txt").await,
        "before\n"
    );
    assert_eq!(
        sh_ok(&backend, &grandchild[0], "cat src/new/x").await,
        "x\n"
    );
    let listed = snapshots(&backend)
        .list_snapshots(&backend.run_id)
        .await
        .unwrap();
    assert_eq!(listed, [second]);
}

#[tokio::test]
async fn a_restore_drops_everything_since_the_snapshot_and_keeps_the_sandbox() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "app").await;
    let sandbox = claim(&backend, &template).await;
    sh_ok(&backend, &sandbox, "echo kept > kept.txt").await;
    let snapshot = snapshots(&backend)
        .snapshot(&sandbox, &backend.labels(), deadline())
        .await
        .unwrap();
    sh_ok(
        &backend,
        &sandbox,
        "echo later > later.txt && rm kept.txt && echo x > /tmp/x && \
         (setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    // Running (two matches for the moment the loop has forked `sleep` and
    // not yet started it, which shares its command line).
    assert_eq!(
        sh_ok(
            &backend,
            &sandbox,
            "pgrep -f '[w]hile :' >/dev/null && echo running"
        )
        .await,
        "running\n"
    );

    snapshots(&backend)
        .restore(&sandbox, &snapshot, deadline())
        .await
        .unwrap();

    assert_eq!(
        sh_ok(&backend, &sandbox, "cat kept.txt README.md").await,
        "kept\n# app\n"
    );
    for gone in ["later.txt", "/tmp/x"] {
        assert!(!has(&backend, &sandbox, gone).await, "{gone}");
    }
    assert_eq!(
        sh_ok(&backend, &sandbox, "pgrep -c -f '[w]hile :' || true").await,
        "0\n"
    );
    // Restored twice, it is the snapshot again.
    sh_ok(&backend, &sandbox, "echo again > later.txt").await;
    snapshots(&backend)
        .restore(&sandbox, &snapshot, deadline())
        .await
        .unwrap();
    assert!(!has(&backend, &sandbox, "later.txt").await);
}

#[tokio::test]
async fn bad_requests_are_refused_and_leave_nothing_behind() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let app = template(&backend, "app").await;
    let other = template(&backend, "other").await;
    let sandbox = claim(&backend, &app).await;
    let stranger = claim(&backend, &other).await;
    let snapshot = snapshots(&backend)
        .snapshot(&sandbox, &backend.labels(), deadline())
        .await
        .unwrap();

    for count in [0, 100_000] {
        let error = snapshots(&backend)
            .fork(&snapshot, count, &backend.labels(), deadline())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
        assert!(error.to_string().contains(&snapshot.id), "{error}");
    }
    let error = snapshots(&backend)
        .restore(&stranger, &snapshot, deadline())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert!(
        error.to_string().contains(&snapshot.id) && error.to_string().contains(&stranger.id),
        "{error}"
    );

    backend.release(&stranger).await.unwrap();
    let error = snapshots(&backend)
        .snapshot(&stranger, &backend.labels(), deadline())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    // Nothing was made by the refusals: one snapshot, one sandbox.
    assert_eq!(
        snapshots(&backend)
            .list_snapshots(&backend.run_id)
            .await
            .unwrap(),
        [snapshot]
    );
    assert_eq!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).len(), 1);

    let plain = Fixture::new(IsolationMode::None).backend();
    let error = snapshots_of(&plain.backend).map(drop).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported);
    assert!(error.to_string().starts_with("local: "), "{error}");
}

#[tokio::test]
async fn sixty_four_forks_of_one_snapshot_all_answer() {
    let mut fixture = Fixture::new(IsolationMode::Namespaces);
    fixture.config.max_sandboxes = Some(65);
    let backend = fixture.backend();
    if !backend.preflight().await.failures.is_empty() {
        return;
    }
    let template = template(&backend, "app").await;
    let source = claim(&backend, &template).await;
    sh_ok(&backend, &source, "echo shared > shared.txt").await;
    let snapshot = snapshots(&backend)
        .snapshot(&source, &backend.labels(), deadline())
        .await
        .unwrap();
    let forks = snapshots(&backend)
        .fork(
            &snapshot,
            64,
            &backend.labels(),
            Instant::now() + 4 * PATIENCE,
        )
        .await
        .unwrap();
    let mut ids: Vec<&str> = forks.iter().map(|f| f.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 64);
    for fork in &forks {
        assert_eq!(
            sh_ok(&backend, fork, "cat shared.txt; hostname").await,
            format!("shared\n{}\n", fork.id)
        );
    }
    // The source and its 64 forks fill the cluster: each holds a slot.
    let error = snapshots(&backend)
        .fork(&snapshot, 1, &backend.labels(), Instant::now())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
}

#[tokio::test]
async fn a_reap_after_a_crash_removes_the_runs_snapshots_and_forks() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "app").await;
    let source = claim(&backend, &template).await;
    sh_ok(&backend, &source, "head -c 1M /dev/zero > written").await;
    let snapshot = snapshots(&backend)
        .snapshot(&source, &backend.labels(), deadline())
        .await
        .unwrap();
    snapshots(&backend)
        .fork(&snapshot, 2, &backend.labels(), deadline())
        .await
        .unwrap();
    // What `images prune --budget` counts beside the layer store.
    let held = sandfleet_backend_local::snapshots_held(&fixture.state_dir())
        .await
        .unwrap();
    assert_eq!(held.snapshots, 1);
    assert!(
        (1 << 20..4 << 20).contains(&held.bytes),
        "{} bytes held",
        held.bytes
    );
    // The process that made them is gone; another finds them by the run.
    drop(backend);
    let after = fixture.backend();
    let listed = after.list_snapshots(&fixture.run_id).await.unwrap();
    assert_eq!(listed, std::slice::from_ref(&snapshot));
    assert_eq!(
        after.list_owned(&fixture.run_id).await.unwrap().snapshots,
        [snapshot.id]
    );
    let reaped = after.reap(&fixture.run_id).await.unwrap();
    assert_eq!((reaped.sandboxes, reaped.snapshots), (3, 1), "{reaped:?}");
    let held = sandfleet_backend_local::snapshots_held(&fixture.state_dir())
        .await
        .unwrap();
    assert_eq!((held.snapshots, held.bytes), (0, 0));
    assert!(
        after
            .list_snapshots(&fixture.run_id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !fixture
            .state_dir()
            .join("runs")
            .join(fixture.run_id.as_str())
            .exists()
    );
}

#[tokio::test]
async fn a_snapshot_past_the_clusters_budget_is_refused_and_leaves_nothing() {
    let mut fixture = Fixture::new(IsolationMode::Namespaces);
    fixture.config.snapshot_budget_mib = Some(3);
    let backend = fixture.backend();
    if !backend.preflight().await.failures.is_empty() {
        return;
    }
    let template = template(&backend, "app").await;
    let sandbox = claim(&backend, &template).await;
    sh_ok(&backend, &sandbox, "head -c 2M /dev/zero > two").await;
    let first = snapshots(&backend)
        .snapshot(&sandbox, &backend.labels(), deadline())
        .await
        .unwrap();
    // A second would hold the same 2 MiB again: 4 MiB in all.
    let error = snapshots(&backend)
        .snapshot(&sandbox, &backend.labels(), deadline())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.to_string().contains("snapshot_budget_mib = 3"),
        "{error}"
    );
    let listed = snapshots(&backend)
        .list_snapshots(&backend.run_id)
        .await
        .unwrap();
    assert_eq!(listed, std::slice::from_ref(&first));
    let dirs = std::fs::read_dir(
        fixture
            .state_dir()
            .join("runs")
            .join(fixture.run_id.as_str())
            .join("snapshots"),
    )
    .unwrap()
    .count();
    assert_eq!(dirs, 1, "the refused snapshot's directory is gone");
    // Deleting the first makes room again.
    snapshots(&backend).delete_snapshot(&first).await.unwrap();
    snapshots(&backend)
        .snapshot(&sandbox, &backend.labels(), deadline())
        .await
        .unwrap();
}
