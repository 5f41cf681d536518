//! What every backend with snapshots promises ([`sandfleet_core::Snapshots`]),
//! checked the same way on each, through files put and got: a fork holds
//! what its source held when the snapshot was taken and nothing written
//! after, keeps its own writes to itself, and belongs to the source's run;
//! a refused fork makes nothing.

use std::time::{Duration, Instant};

use sandfleet_core::{Backend, ErrorKind, Labels, RunId, SandboxHandle, SnapshotRef, snapshots_of};

/// The file the checks write before the snapshot, and the one after.
const BEFORE: &str = "/workspace/before.txt";
const AFTER: &str = "/workspace/after.txt";
const OWN: &str = "/workspace/own.txt";

async fn read(backend: &dyn Backend, sandbox: &SandboxHandle, path: &str) -> Option<String> {
    match backend.get_file(sandbox, path).await {
        Ok(bytes) => Some(String::from_utf8(bytes).unwrap()),
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => panic!("reading {path} of {}: {error}", sandbox.id),
    }
}

async fn write(backend: &dyn Backend, sandbox: &SandboxHandle, path: &str, text: &str) {
    backend
        .put_file(sandbox, path, text.as_bytes(), 0o644)
        .await
        .unwrap_or_else(|e| panic!("writing {path} of {}: {e}", sandbox.id));
}

/// Snapshots claimed `source` (of run `run`) between two writes, forks
/// `count` sandboxes of it and checks each holds the first write, not the
/// second, and its own write alone; and that the source runs on with its
/// own files. Returns the snapshot and the forks, still claimed.
pub async fn forks_hold_the_snapshot_and_their_own_writes(
    backend: &dyn Backend,
    source: &SandboxHandle,
    run: &RunId,
    count: u32,
    patience: Duration,
) -> (SnapshotRef, Vec<SandboxHandle>) {
    let snapshots = snapshots_of(backend).unwrap();
    write(backend, source, BEFORE, "before\n").await;
    let snapshot = snapshots
        .snapshot(source, &run.labels(), Instant::now() + patience)
        .await
        .unwrap();
    assert_eq!(snapshot.run_id(), run);
    assert_eq!(snapshot.cluster, backend.name());
    write(backend, source, AFTER, "after\n").await;

    let forks = snapshots
        .fork(&snapshot, count, &run.labels(), Instant::now() + patience)
        .await
        .unwrap();
    let mut ids: Vec<&str> = forks.iter().map(|f| f.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count as usize, "{ids:?}");
    assert!(!ids.contains(&source.id.as_str()));
    for fork in &forks {
        assert_eq!(&fork.run_id, run);
        write(backend, fork, OWN, &fork.id).await;
    }
    for fork in &forks {
        assert_eq!(
            read(backend, fork, BEFORE).await.as_deref(),
            Some("before\n")
        );
        assert_eq!(read(backend, fork, AFTER).await, None, "{}", fork.id);
        assert_eq!(
            read(backend, fork, OWN).await.as_deref(),
            Some(fork.id.as_str())
        );
    }
    assert_eq!(read(backend, source, OWN).await, None);
    assert_eq!(
        read(backend, source, AFTER).await.as_deref(),
        Some("after\n")
    );
    let listed = snapshots.list_snapshots(run).await.unwrap();
    assert!(listed.contains(&snapshot), "{listed:?}");
    (snapshot, forks)
}

/// Checks that forks of `snapshot` (of run `run`) are refused, making
/// nothing: a count of 0 and labels of `other` run (`Invalid`), and, once
/// the snapshot is deleted (twice, which is once), any count
/// (`NotFound`); the snapshot is then no longer listed.
pub async fn refused_forks_make_nothing(
    backend: &dyn Backend,
    snapshot: &SnapshotRef,
    run: &RunId,
    other: &RunId,
    patience: Duration,
) {
    let snapshots = snapshots_of(backend).unwrap();
    let before = backend.list_owned(run).await.unwrap().sandboxes.len();
    let fork = |count: u32, labels: Labels| async move {
        snapshots
            .fork(snapshot, count, &labels, Instant::now() + patience)
            .await
            .unwrap_err()
    };
    let none = fork(0, run.labels()).await;
    assert_eq!(none.kind(), ErrorKind::Invalid, "{none}");
    assert!(none.to_string().contains(&snapshot.id), "{none}");
    let theirs = fork(1, other.labels()).await;
    assert_eq!(theirs.kind(), ErrorKind::Invalid, "{theirs}");
    snapshots.delete_snapshot(snapshot).await.unwrap();
    snapshots.delete_snapshot(snapshot).await.unwrap();
    let gone = fork(2, run.labels()).await;
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    let listed = snapshots.list_snapshots(run).await.unwrap();
    assert!(!listed.contains(snapshot), "{listed:?}");
    let after = backend.list_owned(run).await.unwrap().sandboxes.len();
    assert_eq!(after, before, "a refused fork made a sandbox");
}
