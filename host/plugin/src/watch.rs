//! Hot reload: watches a plugin directory and loads what changes.
//!
//! A file is loaded once it is complete: after it is closed from writing or
//! renamed into place (editors write a temporary file and rename it), and
//! after no further event for it arrived for a short debounce period. Plain
//! modify events only push the deadline back, because `cp` fires them while
//! the file is still half written. A removed file hands the name back to the
//! built-in plugin, if there is one.
//!
//! A directory mounted from a Kubernetes ConfigMap or Secret changes without
//! an event about its plugin files: each `name.wasm` is a symlink into
//! `..data`, itself a symlink the kubelet swaps (by rename) to a new
//! timestamped directory. An event about an entry whose name starts with
//! `..` therefore rescans the directory once it settles: a file whose bytes
//! are not the version serving its name is loaded, and a name whose file is
//! gone is unloaded. A symlink created in the directory is complete at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher as _};

use crate::registry::{Registry, is_plugin_file};

/// Quiet time after the last event for a file before it is loaded.
pub const DEBOUNCE: Duration = Duration::from_millis(2);

/// Watches a directory for as long as it lives.
pub struct PluginWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// A directory could not be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch plugin directory {path}: {source}")]
pub struct WatchError {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub source: notify::Error,
}

impl Registry {
    /// Starts reloading plugins from `dir` when its files change. Loading
    /// happens on a thread of the watcher's own, never on an async runtime.
    ///
    /// # Errors
    ///
    /// When the directory cannot be watched.
    pub fn watch(self: &Arc<Self>, dir: &Path) -> Result<PluginWatcher, WatchError> {
        let (events, receiver) = mpsc::channel::<notify::Result<Event>>();
        let mut watcher = notify::recommended_watcher(events).map_err(|source| WatchError {
            path: dir.to_path_buf(),
            source,
        })?;
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|source| WatchError {
                path: dir.to_path_buf(),
                source,
            })?;
        let registry = Arc::downgrade(self);
        let dir = dir.to_path_buf();
        std::thread::Builder::new()
            .name("plugin-reload".into())
            .spawn(move || {
                let mut debouncer = Debouncer::default();
                loop {
                    let wait = debouncer
                        .next_deadline()
                        .map(|at| at.saturating_duration_since(Instant::now()));
                    let received = match wait {
                        Some(wait) => receiver.recv_timeout(wait),
                        None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match received {
                        Ok(Ok(event)) => debouncer.observe(&event, Instant::now()),
                        Ok(Err(e)) => tracing::warn!("plugin directory watch error: {e}"),
                        Err(RecvTimeoutError::Timeout) => {}
                        // The watcher was dropped.
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let now = Instant::now();
                    let due = debouncer.take_due(now);
                    let rescan = debouncer.take_rescan(now);
                    if due.is_empty() && !rescan {
                        continue;
                    }
                    let Some(registry) = registry.upgrade() else {
                        return;
                    };
                    for path in due {
                        if path.exists() {
                            // Failures are recorded in the registry's status.
                            let _ = registry.reload_file(&path);
                        } else {
                            registry.unload_file(&path);
                        }
                    }
                    if rescan {
                        registry.rescan(&dir, &debouncer);
                    }
                }
            })
            .expect("spawn the plugin reload thread");
        Ok(PluginWatcher { _watcher: watcher })
    }

    /// Brings what serves in line with the files of `dir` after its
    /// `..data` link was swapped, leaving alone the files `debouncer` still
    /// waits on (a write in progress).
    fn rescan(&self, dir: &Path, debouncer: &Debouncer) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| is_plugin_file(path) && !debouncer.waits_on(path))
            .collect();
        files.sort();
        for path in &files {
            // Failures are recorded in the registry's status.
            let _ = self.reload_if_changed(path);
        }
        for gone in self.files_serving_from(dir) {
            if !gone.exists() && !debouncer.waits_on(&gone) {
                self.unload_file(&gone);
            }
        }
    }
}

/// Per-file debounce state, driven by explicit instants so it is testable
/// without a clock.
#[derive(Default)]
struct Debouncer {
    /// File → (load after this instant, a complete write was seen).
    pending: HashMap<PathBuf, (Instant, bool)>,
    /// Rescan the directory after this instant (a `..` entry changed).
    rescan: Option<Instant>,
}

impl Debouncer {
    fn observe(&mut self, event: &Event, now: Instant) {
        let complete = match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Remove(_) => true,
            // A symlink is made whole in one call.
            EventKind::Create(_) => event.paths.iter().all(|path| is_symlink(path)),
            // Writes in progress: wait longer, but do not load yet.
            EventKind::Modify(_) => false,
            _ => return,
        };
        if event.paths.iter().any(|path| is_atomic_writer_entry(path)) {
            self.rescan = Some(now + DEBOUNCE);
        }
        for path in event.paths.iter().filter(|path| is_plugin_file(path)) {
            let entry = self.pending.entry(path.clone()).or_insert((now, false));
            entry.0 = now + DEBOUNCE;
            entry.1 |= complete;
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .values()
            .filter(|(_, complete)| *complete)
            .map(|(at, _)| *at)
            .chain(self.rescan)
            .min()
    }

    /// Whether a rescan is due, forgetting it if so.
    fn take_rescan(&mut self, now: Instant) -> bool {
        let due = self.rescan.is_some_and(|at| at <= now);
        if due {
            self.rescan = None;
        }
        due
    }

    /// Whether an event about `path` is still settling.
    fn waits_on(&self, path: &Path) -> bool {
        self.pending.contains_key(path)
    }

    fn take_due(&mut self, now: Instant) -> Vec<PathBuf> {
        let due: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(_, (at, complete))| *complete && *at <= now)
            .map(|(path, _)| path.clone())
            .collect();
        for path in &due {
            self.pending.remove(path);
        }
        due
    }
}

fn is_symlink(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_symlink())
}

/// `..data`, `..data_tmp` and the timestamped `..2024_…` directories the
/// kubelet's atomic writer keeps a ConfigMap or Secret volume's files in.
fn is_atomic_writer_entry(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with(".."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RenameMode};

    fn event(kind: EventKind, path: &str) -> Event {
        Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn a_file_loads_once_after_its_last_complete_write_settles() {
        let start = Instant::now();
        let mut debouncer = Debouncer::default();
        debouncer.observe(
            &event(EventKind::Create(CreateKind::File), "/p/a.wasm"),
            start,
        );
        debouncer.observe(
            &event(
                EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                "/p/a.wasm",
            ),
            start,
        );
        // Written but not closed: nothing to load, however long we wait.
        assert_eq!(debouncer.next_deadline(), None);
        assert!(debouncer.take_due(start + DEBOUNCE * 10).is_empty());

        let closed = start + Duration::from_millis(5);
        debouncer.observe(
            &event(
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                "/p/a.wasm",
            ),
            closed,
        );
        assert!(debouncer.take_due(closed + DEBOUNCE / 2).is_empty());
        // Another write within the window pushes the load back.
        let again = closed + DEBOUNCE / 2;
        debouncer.observe(
            &event(
                EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                "/p/a.wasm",
            ),
            again,
        );
        assert!(debouncer.take_due(closed + DEBOUNCE).is_empty());
        assert_eq!(
            debouncer.take_due(again + DEBOUNCE),
            vec![PathBuf::from("/p/a.wasm")]
        );
        assert!(debouncer.take_due(again + DEBOUNCE * 10).is_empty());
    }

    #[test]
    fn a_swapped_data_link_rescans_the_directory_once_it_settles() {
        let now = Instant::now();
        let mut debouncer = Debouncer::default();
        debouncer.observe(
            &event(
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                "/p/..data",
            ),
            now,
        );
        assert_eq!(debouncer.next_deadline(), Some(now + DEBOUNCE));
        assert!(!debouncer.take_rescan(now));
        let later = now + DEBOUNCE / 2;
        debouncer.observe(
            &event(
                EventKind::Remove(notify::event::RemoveKind::Folder),
                "/p/..2026_01_01_00_00_00.1",
            ),
            later,
        );
        assert!(!debouncer.take_rescan(now + DEBOUNCE));
        assert!(debouncer.take_rescan(later + DEBOUNCE));
        assert!(!debouncer.take_rescan(later + DEBOUNCE * 10), "once");
        assert!(debouncer.take_due(later + DEBOUNCE).is_empty());
    }

    #[test]
    fn renames_and_removals_count_and_other_files_do_not() {
        let now = Instant::now();
        let mut debouncer = Debouncer::default();
        debouncer.observe(
            &event(
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                "/p/b.wasm",
            ),
            now,
        );
        debouncer.observe(
            &event(
                EventKind::Remove(notify::event::RemoveKind::File),
                "/p/c.wasm",
            ),
            now,
        );
        debouncer.observe(
            &event(
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                "/p/.b.wasm.tmp",
            ),
            now,
        );
        debouncer.observe(
            &event(
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                "/p/notes.txt",
            ),
            now,
        );
        let mut due = debouncer.take_due(now + DEBOUNCE);
        due.sort();
        assert_eq!(
            due,
            vec![PathBuf::from("/p/b.wasm"), PathBuf::from("/p/c.wasm")]
        );
    }
}
