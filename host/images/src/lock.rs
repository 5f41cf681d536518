//! Advisory file locks (`flock`) between the processes sharing a store.
//!
//! A lock file may be removed by whoever holds it exclusively (prune does,
//! for what it deletes); whoever then locks the old, unlinked file notices
//! that the path names another file (or none) and locks again, so two
//! holders never disagree about which file is the lock.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use rustix::io::Errno;

/// Shared (many holders) or exclusive (one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

/// A held lock, released when dropped.
#[derive(Debug)]
pub(crate) struct Lock {
    _file: File,
}

/// Takes the lock if it is free now; `None` when someone else holds it.
pub(crate) fn try_lock(path: &Path, mode: Mode) -> io::Result<Option<Lock>> {
    lock_with(path, mode, false)
}

/// Waits for the lock, in the kernel (for locks held only briefly).
pub(crate) fn lock_blocking(path: &Path, mode: Mode) -> io::Result<Lock> {
    lock_with(path, mode, true).map(|lock| lock.expect("a blocking flock returns held"))
}

/// Waits for the lock up to `deadline`, polling; `on_wait` is called once
/// if it has to wait. `Ok(None)` when the deadline passed.
pub(crate) async fn lock_until(
    path: &Path,
    mode: Mode,
    deadline: Duration,
    on_wait: impl FnOnce(),
) -> io::Result<Option<Lock>> {
    let until = Instant::now() + deadline;
    let mut on_wait = Some(on_wait);
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(lock) = try_lock(path, mode)? {
            return Ok(Some(lock));
        }
        if let Some(on_wait) = on_wait.take() {
            on_wait();
        }
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        tokio::time::sleep(pause.min(until - now)).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

fn lock_with(path: &Path, mode: Mode, block: bool) -> io::Result<Option<Lock>> {
    let operation = match (mode, block) {
        (Mode::Shared, true) => FlockOperation::LockShared,
        (Mode::Shared, false) => FlockOperation::NonBlockingLockShared,
        (Mode::Exclusive, true) => FlockOperation::LockExclusive,
        (Mode::Exclusive, false) => FlockOperation::NonBlockingLockExclusive,
    };
    loop {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match rustix::fs::flock(&file, operation) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let held = rustix::fs::fstat(&file)?;
        match rustix::fs::stat(path) {
            Ok(now) if now.st_dev == held.st_dev && now.st_ino == held.st_ino => {
                return Ok(Some(Lock { _file: file }));
            }
            Ok(_) | Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_holders_exclude_an_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.lock");
        let a = try_lock(&path, Mode::Shared).unwrap().unwrap();
        let b = try_lock(&path, Mode::Shared).unwrap().unwrap();
        assert!(try_lock(&path, Mode::Exclusive).unwrap().is_none());
        drop((a, b));
        let x = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        assert!(try_lock(&path, Mode::Shared).unwrap().is_none());
        // Removed by its holder: the next locker gets a fresh file.
        std::fs::remove_file(&path).unwrap();
        let fresh = try_lock(&path, Mode::Exclusive).unwrap();
        assert!(fresh.is_some());
        drop(x);
    }

    #[tokio::test]
    async fn waiting_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.lock");
        let _held = try_lock(&path, Mode::Exclusive).unwrap().unwrap();
        let mut waited = false;
        let got = lock_until(&path, Mode::Shared, Duration::from_millis(50), || {
            waited = true
        })
        .await
        .unwrap();
        assert!(got.is_none());
        assert!(waited);
    }
}
