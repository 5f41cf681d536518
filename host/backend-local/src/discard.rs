//! Released sandboxes' directories, removed off the release's path: a
//! release returns once the sandbox's processes are dead and its cgroup is
//! gone, and its directory (whatever the task wrote) is moved aside in one
//! rename and removed in the background. Removing a tree on a busy disk
//! takes tens of milliseconds that no caller needs to wait for; a reap
//! waits for every removal under way before it removes the run, so nothing
//! is left and no two removals meet in one tree.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::blocking;
use crate::error::{IoContext, LocalError};
use crate::remove::remove_tree;

/// The directory beside a run's `sandboxes/` that released sandboxes'
/// directories are moved to.
const DISCARDED: &str = "discarded";

/// Numbers the moved directories, process-wide: a sandbox id can come back
/// (another backend on the same state directory), a moved name must not.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Removals under way.
#[derive(Debug)]
pub(crate) struct Discards {
    under_way: watch::Sender<usize>,
}

impl Default for Discards {
    fn default() -> Self {
        Discards {
            under_way: watch::Sender::new(0),
        }
    }
}

impl Discards {
    /// Moves `sandbox_dir` (`<run>/sandboxes/<id>`) to `<run>/discarded/`
    /// and removes it there in the background. Where it cannot be moved, it
    /// is removed in place, now.
    pub(crate) async fn discard(&self, sandbox_dir: &Path) -> Result<(), LocalError> {
        let Some(moved) = Self::aside(sandbox_dir) else {
            let dir = sandbox_dir.to_path_buf();
            return blocking(move || remove_tree(&dir).map(drop)).await;
        };
        let dir = sandbox_dir.to_path_buf();
        let renamed = moved.clone();
        let parked = blocking(move || {
            std::fs::create_dir_all(renamed.parent().expect("a moved directory has a parent"))
                .and_then(|()| std::fs::rename(&dir, &renamed))
                .context(|| format!("moving {} aside", dir.display()))
        })
        .await;
        if let Err(error) = parked {
            tracing::debug!(%error, "removing the sandbox's directory in place");
            let dir = sandbox_dir.to_path_buf();
            return blocking(move || remove_tree(&dir).map(drop)).await;
        }
        self.under_way.send_modify(|n| *n += 1);
        let under_way = self.under_way.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(error) = remove_tree(&moved) {
                tracing::warn!(dir = %moved.display(), %error, "removing a released sandbox's directory failed; the run's reap removes it");
            }
            under_way.send_modify(|n| *n -= 1);
        });
        Ok(())
    }

    /// Returns once no removal is under way.
    pub(crate) async fn settled(&self) {
        let mut under_way = self.under_way.subscribe();
        // The sender lives in `self`: the channel cannot close.
        let _ = under_way.wait_for(|n| *n == 0).await;
    }

    /// Where `sandbox_dir` goes: `<run>/discarded/<id>~<n>`.
    fn aside(sandbox_dir: &Path) -> Option<PathBuf> {
        let id = sandbox_dir.file_name()?.to_str()?;
        let run = sandbox_dir.parent()?.parent()?;
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        Some(run.join(DISCARDED).join(format!("{id}~{number}")))
    }
}
