//! The registry: plugin name → the version serving now.
//!
//! Loading compiles and checks a component off to the side, then swaps it in
//! atomically. Calls already running finish on the version they started on.
//! A failed load leaves the serving version alone and is recorded in the
//! plugin's status, logged, and counted.
//!
//! A name keeps one slot for the registry's life: handles taken before a
//! reload, a removal or a re-add of the file all see what serves the name
//! now. With the built-in fallback on ([`Registry::set_builtin_fallback`]),
//! every handle carries the built-in that answers its plugin's faults (see
//! [`crate::worlds`]).
//!
//! A hot reload that misses the compiled cache serves a baseline build first
//! (see [`crate::host`]); one background thread then compiles the optimized
//! build and swaps it in, unless another version has replaced the baseline
//! build by then.
//!
//! The table of names is in `slots`; how a version gets into it, in
//! `install`.

mod install;
mod slots;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::SystemTime;

use crate::cache::hex_sha256;
use crate::calls::{CallCounters, PluginCalls};
use crate::contract::Kind;
use crate::error::{LoadError, LookupError, Source};
use crate::host::{Compiled, PluginHost, version_of};
use crate::loaded::{Loaded, VersionInfo};
use crate::worlds::Handle;
use crate::worlds::adapter::TaskAdapter;
use crate::worlds::placement::PlacementPolicy;
use crate::worlds::reset::ResetCheck;
use crate::worlds::sizing::SizingPolicy;

use install::{Reoptimize, Urgency};
use slots::{AnySlot, BuiltinEntry, Slotted, State};

/// What the registry knows about one plugin name.
#[derive(Debug, Clone)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// The version serving now; `None` when no version ever loaded.
    pub serving: Option<VersionInfo>,
    /// The last failed load, if it came after the serving version loaded.
    pub last_error: Option<String>,
    /// When that failure happened.
    pub last_error_at: Option<SystemTime>,
    /// The fault after which the built-in fallback answers the serving
    /// version's calls, naming the call and the built-in.
    pub fault: Option<String>,
    /// The plugin's file was removed and no built-in has its name: lookups
    /// fail, while handles taken before keep the last version.
    pub removed: bool,
}

/// A version that started serving a plugin name.
#[derive(Debug, Clone)]
pub struct Takeover {
    /// The name and the version that took it over.
    pub plugin: crate::PluginRef,
    /// Its world.
    pub kind: Kind,
    /// Where it came from.
    pub source: Source,
    /// When it took over.
    pub at: SystemTime,
}

/// A plugin compiled into the embedding binary, for [`Registry::add_builtins`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// The plugin's name; a file `<name>.wasm` in the plugin directory overrides it.
    pub name: &'static str,
    /// The component's bytes.
    pub wasm: &'static [u8],
}

impl From<(&'static str, &'static [u8])> for Builtin {
    fn from((name, wasm): (&'static str, &'static [u8])) -> Self {
        Builtin { name, wasm }
    }
}

/// Loads seen by a registry since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// Versions that started serving.
    pub loaded: u64,
    /// Loads that failed (the previous version kept serving).
    pub failed: u64,
}

/// Plugin name → current version, for all four worlds.
pub struct Registry {
    host: PluginHost,
    state: RwLock<State>,
    loaded: AtomicU64,
    failed: AtomicU64,
    myself: Weak<Registry>,
    /// Whether handles carry the built-in that answers their faults.
    builtin_fallback: AtomicBool,
    /// Every version that started serving a name, in order.
    takeovers: Mutex<Vec<Takeover>>,
    calls: CallCounters,
    /// Feeds the optimizing thread, started on first use.
    optimizer: Mutex<Option<Sender<Reoptimize>>>,
}

impl Registry {
    /// An empty registry on `host`.
    pub fn new(host: PluginHost) -> Arc<Self> {
        Arc::new_cyclic(|myself| Registry {
            host,
            state: RwLock::default(),
            loaded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            myself: myself.clone(),
            builtin_fallback: AtomicBool::new(false),
            takeovers: Mutex::new(Vec::new()),
            calls: CallCounters::default(),
            optimizer: Mutex::new(None),
        })
    }

    /// The host plugins run on.
    pub fn host(&self) -> &PluginHost {
        &self.host
    }

    /// Loads built-in plugins and remembers them, so that removing a file that
    /// overrides one brings the built-in back. A plugin already loaded from a
    /// file under the same name keeps serving.
    ///
    /// The embedding binary hands them over as bytes, e.g. from
    /// `sandfleet-guests`:
    /// `registry.add_builtins(BUILTINS.iter().map(|b| (b.name, b.wasm)))`.
    ///
    /// # Errors
    ///
    /// Every built-in that failed to load (a broken build), after loading the rest.
    pub fn add_builtins(
        &self,
        builtins: impl IntoIterator<Item: Into<Builtin>>,
    ) -> Result<(), Vec<LoadError>> {
        let mut errors = Vec::new();
        for builtin in builtins {
            let builtin: Builtin = builtin.into();
            let name = builtin.name;
            // Compiled even when a file overrides it: it is that file's
            // fallback.
            let built = self
                .host
                .compile(name, builtin.wasm, Source::Builtin)
                .and_then(|compiled| self.build_any(compiled));
            let loaded = match built {
                Ok(loaded) => loaded,
                Err(e) => {
                    errors.push(self.record(name, Err(e)).unwrap_err());
                    continue;
                }
            };
            self.write().builtins.insert(
                name.to_string(),
                BuiltinEntry {
                    loaded: loaded.clone(),
                },
            );
            let overridden = self.read().entries.get(name).is_some_and(|entry| {
                entry
                    .slot
                    .as_ref()
                    .is_some_and(|slot| matches!(slot.info().source, Source::File(_)))
            });
            if !overridden {
                let installed = self
                    .install_any(loaded, None)
                    .map(|info| info.expect("an install without a condition always installs"));
                if let Err(e) = self.record(name, installed) {
                    errors.push(e);
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// With `on`, every handle looked up afterwards carries the built-in
    /// that answers its plugin's faults (a trap, an overrun, a broken
    /// answer): the built-in of the plugin's name, or of its kind
    /// ([`Kind::default_builtin`]). Set it before looking plugins up.
    pub fn set_builtin_fallback(&self, on: bool) {
        self.builtin_fallback.store(on, Ordering::Release);
    }

    /// Loads every `*.wasm` file in `dir`; each overrides the built-in of the
    /// same name.
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read, or every file that failed to load, after
    /// loading the rest.
    pub fn load_dir(&self, dir: &Path) -> Result<Vec<VersionInfo>, Vec<LoadError>> {
        let entries = std::fs::read_dir(dir).map_err(|source| {
            vec![LoadError::Read {
                path: dir.to_path_buf(),
                source,
            }]
        })?;
        let mut paths: Vec<_> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| is_plugin_file(path))
            .collect();
        paths.sort();
        let (mut loaded, mut errors) = (Vec::new(), Vec::new());
        for path in paths {
            match self.load_file(&path) {
                Ok(info) => loaded.push(info),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(loaded)
        } else {
            Err(errors)
        }
    }

    /// Loads `path` as the plugin named by its file stem and swaps it in.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, is not a component of a served contract
    /// version, or implements a different world than the plugin it replaces.
    /// The previous version keeps serving and the error is recorded.
    pub fn load_file(&self, path: &Path) -> Result<VersionInfo, LoadError> {
        self.load_path(path, Urgency::Optimized)
    }

    /// As [`Registry::load_file`], for a file that changed while serving:
    /// on a cache miss a baseline build serves until the optimized build is
    /// ready.
    pub(crate) fn reload_file(&self, path: &Path) -> Result<VersionInfo, LoadError> {
        self.load_path(path, Urgency::Soon)
    }

    /// As [`Registry::reload_file`], unless `path` holds the version that
    /// serves its name from that path already (`None`), or cannot be read
    /// (`None`: an event about it follows).
    pub(crate) fn reload_if_changed(&self, path: &Path) -> Option<Result<VersionInfo, LoadError>> {
        let bytes = std::fs::read(path).ok()?;
        let stem = path.file_stem()?.to_string_lossy().into_owned();
        let version = version_of(&hex_sha256(&bytes));
        let unchanged = self.read().entries.get(&stem).is_some_and(|entry| {
            !entry.removed
                && entry.slot.as_ref().is_some_and(|slot| {
                    let info = slot.info();
                    info.source == Source::File(path.to_path_buf())
                        && *info.plugin.version == version
                })
        });
        (!unchanged).then(|| self.load_path(path, Urgency::Soon))
    }

    /// The files of `dir` that serve a name now.
    pub(crate) fn files_serving_from(&self, dir: &Path) -> Vec<std::path::PathBuf> {
        self.read()
            .entries
            .values()
            .filter(|entry| !entry.removed)
            .filter_map(|entry| match entry.slot.as_ref()?.info().source {
                Source::File(path) if path.parent() == Some(dir) => Some(path),
                _ => None,
            })
            .collect()
    }

    fn load_path(&self, path: &Path, urgency: Urgency) -> Result<VersionInfo, LoadError> {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_plugin_name(&stem) {
            return Err(LoadError::BadName {
                path: path.to_path_buf(),
                stem,
            });
        }
        let result = std::fs::read(path)
            .map_err(|source| LoadError::Read {
                path: path.to_path_buf(),
                source,
            })
            .and_then(|bytes| {
                self.compile_and_install(&stem, &bytes, Source::File(path.to_path_buf()), urgency)
            });
        self.record(&stem, result)
    }

    /// Loads `bytes` as plugin `name` and swaps it in.
    ///
    /// # Errors
    ///
    /// As [`Registry::load_file`].
    pub fn load_bytes(
        &self,
        name: &str,
        bytes: &[u8],
        source: Source,
    ) -> Result<VersionInfo, LoadError> {
        let result = self.compile_and_install(name, bytes, source, Urgency::Optimized);
        self.record(name, result)
    }

    /// Swaps in a component compiled by [`PluginHost::compile`] or
    /// [`PluginHost::compile_quickly`] on this registry's host, as it is: a
    /// baseline build stays baseline.
    ///
    /// # Errors
    ///
    /// As [`Registry::load_file`].
    pub fn install(&self, compiled: Compiled) -> Result<VersionInfo, LoadError> {
        let name = compiled.plugin.name.to_string();
        let result = self.install_unconditionally(compiled);
        self.record(&name, result)
    }

    /// Handles the removal of `path`: the built-in of the same name serves
    /// again, or, without one, the name is marked removed: lookups fail,
    /// handles already held keep the last version, and a file of the name
    /// added back serves them all again.
    pub fn unload_file(&self, path: &Path) {
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            return;
        };
        let serving_from_path = self.read().entries.get(&name).is_some_and(|entry| {
            !entry.removed
                && entry
                    .slot
                    .as_ref()
                    .is_some_and(|slot| slot.info().source == Source::File(path.to_path_buf()))
        });
        if !serving_from_path {
            return;
        }
        let builtin = self.read().builtins.get(&name).map(|b| b.loaded.clone());
        match builtin {
            Some(loaded) => {
                tracing::info!(plugin = %name, "{} removed; the built-in serves again", path.display());
                let installed = self
                    .install_any(loaded, None)
                    .map(|info| info.expect("an install without a condition always installs"));
                let _ = self.record(&name, installed);
            }
            None => {
                tracing::info!(plugin = %name, "{} removed; plugin unloaded", path.display());
                if let Some(entry) = self.write().entries.get_mut(&name) {
                    entry.removed = true;
                }
            }
        }
    }

    /// Every version that started serving a name since the registry was
    /// made, in order (a baseline build replaced by its optimized build is
    /// one version).
    pub fn takeovers(&self) -> Vec<Takeover> {
        self.takeovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Calls and faults so far of every version that loaded, sorted by
    /// name and version (a fault: a trap, an overrun, a broken contract).
    pub fn call_counts(&self) -> Vec<PluginCalls> {
        self.calls.snapshot()
    }

    /// The placement policy `name`.
    ///
    /// # Errors
    ///
    /// When there is no such plugin, it is another kind, or it never loaded.
    pub fn placement(&self, name: &str) -> Result<PlacementPolicy, LookupError> {
        self.handle(name).map(PlacementPolicy)
    }

    /// The sizing policy `name`.
    ///
    /// # Errors
    ///
    /// As [`Registry::placement`].
    pub fn sizing(&self, name: &str) -> Result<SizingPolicy, LookupError> {
        self.handle(name).map(SizingPolicy)
    }

    /// The reset check `name`.
    ///
    /// # Errors
    ///
    /// As [`Registry::placement`].
    pub fn reset_check(&self, name: &str) -> Result<ResetCheck, LookupError> {
        self.handle(name).map(ResetCheck)
    }

    /// The task adapter `name`.
    ///
    /// # Errors
    ///
    /// As [`Registry::placement`].
    pub fn adapter(&self, name: &str) -> Result<TaskAdapter, LookupError> {
        self.handle(name).map(TaskAdapter)
    }

    /// The status of every plugin name, sorted by name.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        self.read()
            .entries
            .iter()
            .map(|(name, entry)| PluginStatus {
                name: name.clone(),
                serving: entry.slot.as_ref().map(AnySlot::info),
                last_error: entry.last_error.as_ref().map(|(e, _)| e.clone()),
                last_error_at: entry.last_error.as_ref().map(|(_, at)| *at),
                fault: entry.slot.as_ref().and_then(AnySlot::fault),
                removed: entry.removed,
            })
            .collect()
    }

    /// The status of plugin `name`.
    pub fn status(&self, name: &str) -> Option<PluginStatus> {
        self.statuses()
            .into_iter()
            .find(|status| status.name == name)
    }

    /// A number that grows with every load attempt, successful or not: a
    /// cheap way to notice that something changed without reading statuses.
    pub fn generation(&self) -> u64 {
        self.loaded.load(Ordering::Acquire) + self.failed.load(Ordering::Acquire)
    }

    /// Successful and failed loads so far.
    pub fn load_counts(&self) -> LoadCounts {
        LoadCounts {
            loaded: self.loaded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    fn handle<W: Slotted>(&self, name: &str) -> Result<Handle<W>, LookupError> {
        let state = self.read();
        let entry = match state.entries.get(name) {
            Some(entry) if !entry.removed => entry,
            _ => {
                return Err(LookupError::NotFound {
                    name: name.to_string(),
                    available: state
                        .entries
                        .iter()
                        .filter(|(_, entry)| !entry.removed)
                        .map(|(name, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        };
        match &entry.slot {
            None => Err(LookupError::Failed {
                name: name.to_string(),
                error: entry
                    .last_error
                    .as_ref()
                    .map_or_else(String::new, |(e, _)| e.clone()),
            }),
            Some(any) => match W::unwrap(any) {
                Some(slot) => Ok(Handle::new(slot.clone(), self.fallback_of(&state, name))),
                None => Err(LookupError::WrongKind {
                    name: name.to_string(),
                    found: any.info().kind,
                    expected: W::SLOT_KIND,
                }),
            },
        }
    }

    /// The built-in that answers for plugin `name` when it faults: the
    /// built-in of that name, else its kind's default; none while the
    /// fallback is off.
    fn fallback_of<W: Slotted>(&self, state: &State, name: &str) -> Option<Arc<Loaded<W>>> {
        if !self.builtin_fallback.load(Ordering::Acquire) {
            return None;
        }
        [Some(name), W::SLOT_KIND.default_builtin()]
            .into_iter()
            .flatten()
            .find_map(|which| {
                let builtin = state.builtins.get(which)?;
                W::unwrap_loaded(&builtin.loaded).cloned()
            })
    }
    fn record(
        &self,
        name: &str,
        result: Result<VersionInfo, LoadError>,
    ) -> Result<VersionInfo, LoadError> {
        match &result {
            Ok(info) => {
                self.loaded.fetch_add(1, Ordering::Release);
                tracing::info!(
                    plugin = name,
                    version = %info.plugin.version,
                    kind = %info.kind,
                    source = %info.source,
                    compile_ms = info.compile_time.as_secs_f64() * 1e3,
                    "plugin loaded"
                );
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Release);
                let serving = {
                    let mut state = self.write();
                    let entry = state.entries.entry(name.to_string()).or_default();
                    entry.last_error = Some((e.to_string(), SystemTime::now()));
                    entry.slot.as_ref().map(|slot| slot.info().plugin.version)
                };
                match serving {
                    Some(version) => {
                        tracing::error!(plugin = name, %version, "plugin load failed; the serving version stays: {e}")
                    }
                    None => tracing::error!(plugin = name, "plugin load failed: {e}"),
                }
            }
        }
        result
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Plugin files are `<name>.wasm`; hidden files (editors' and copy tools'
/// temporaries) are ignored.
pub(crate) fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
        && path
            .file_name()
            .is_some_and(|name| !name.to_string_lossy().starts_with('.'))
}

fn is_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostConfig;
    use crate::worlds::placement::{ClusterState, Clusters, Demand, DemandKind};

    fn idle() -> ClusterState {
        ClusterState {
            healthy: true,
            has_image: false,
            free_slots: 8,
            live: 0,
            warm_ready: 0,
            weight: 1,
            cpu_free_milli: 4000,
            memory_free_mib: 8192,
        }
    }

    /// The misbehaving guest traps on image 3 and answers cluster 0 for
    /// the images it does not misbehave on.
    fn demand(image: u32) -> Demand {
        Demand {
            kind: DemandKind::Claim,
            image,
            count: 1,
            sequence: 0,
        }
    }

    fn registry_with(builtin: &str, fallback: bool) -> Arc<Registry> {
        let registry = Registry::new(PluginHost::new(HostConfig::default()).unwrap());
        registry.set_builtin_fallback(fallback);
        registry
            .add_builtins(
                sandfleet_guests::BUILTINS
                    .iter()
                    .filter(|b| b.name == builtin)
                    .map(|b| (b.name, b.wasm)),
            )
            .unwrap();
        registry
    }

    #[test]
    fn a_fault_is_answered_by_the_builtin_of_the_kind_until_a_new_version_loads() {
        let registry = registry_with("least-loaded", true);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("misbehave.wasm");
        std::fs::copy(sandfleet_guests::MISBEHAVE, &file).unwrap();
        let faulty = registry.load_file(&file).unwrap();
        let policy = registry.placement("misbehave").unwrap();
        let clusters = Clusters::from_states(&[idle(), idle()]);
        assert_eq!(policy.place_blocking(&demand(0), &clusters).unwrap(), 0);
        assert!(!policy.fell_back());

        // The trap is answered by the built-in, and so is every later call
        // of the version that trapped, image 0 included.
        assert!(policy.place_blocking(&demand(3), &clusters).is_ok());
        assert!(policy.place_blocking(&demand(0), &clusters).is_ok());
        assert!(policy.fell_back());
        let counts = registry.call_counts();
        let of = |name: &str| counts.iter().find(|c| c.name == name).unwrap().clone();
        let file_counts = of("misbehave");
        assert_eq!(
            (file_counts.calls, file_counts.faults, file_counts.fallbacks),
            (2, 1, 2),
            "one answer, one trap, two calls answered in its place"
        );
        assert_eq!(of("least-loaded").calls, 2);
        let status = registry.status("misbehave").unwrap();
        assert_eq!(status.serving.unwrap().plugin, faulty.plugin);
        let fault = status.fault.expect("the fault is shown");
        assert!(
            fault.contains("place: trapped") && fault.contains("the built-in `least-loaded`"),
            "{fault}"
        );

        // The file loaded again is a new chance: it answers, and faults
        // again.
        std::fs::write(
            &file,
            sandfleet_test_support::salted(
                &std::fs::read(sandfleet_guests::MISBEHAVE).unwrap(),
                1,
                0,
            ),
        )
        .unwrap();
        registry.load_file(&file).unwrap();
        assert!(registry.status("misbehave").unwrap().fault.is_none());
        assert_eq!(policy.place_blocking(&demand(0), &clusters).unwrap(), 0);
    }

    #[test]
    fn without_the_fallback_a_fault_is_the_callers() {
        let registry = registry_with("least-loaded", false);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("misbehave.wasm");
        std::fs::copy(sandfleet_guests::MISBEHAVE, &file).unwrap();
        registry.load_file(&file).unwrap();
        let policy = registry.placement("misbehave").unwrap();
        let clusters = Clusters::from_states(&[idle()]);
        let fault = policy.place_blocking(&demand(3), &clusters).unwrap_err();
        assert!(fault.is_plugin_fault(), "{fault}");
        assert!(policy.place_blocking(&demand(0), &clusters).is_ok());
        assert!(registry.status("misbehave").unwrap().fault.is_none());
    }

    #[test]
    fn a_pinned_handle_keeps_its_version_and_a_removed_name_keeps_its_slot() {
        let registry = registry_with("least-loaded", false);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mine.wasm");
        std::fs::copy(sandfleet_guests::MISBEHAVE, &file).unwrap();
        let first = registry.load_file(&file).unwrap().plugin;
        let following = registry.placement("mine").unwrap();
        let pinned = following.pin();

        std::fs::remove_file(&file).unwrap();
        registry.unload_file(&file);
        assert!(matches!(
            registry.placement("mine"),
            Err(LookupError::NotFound { .. })
        ));
        assert!(registry.status("mine").unwrap().removed);
        assert_eq!(following.version().plugin, first, "held handles keep it");

        std::fs::write(
            &file,
            sandfleet_test_support::salted(
                &std::fs::read(sandfleet_guests::MISBEHAVE).unwrap(),
                1,
                0,
            ),
        )
        .unwrap();
        let second = registry.load_file(&file).unwrap().plugin;
        assert_ne!(second, first);
        assert_eq!(following.version().plugin, second, "the same slot again");
        assert_eq!(pinned.version().plugin, first, "pinned before the swap");
        assert!(!registry.status("mine").unwrap().removed);
        let took_over: Vec<_> = registry
            .takeovers()
            .into_iter()
            .filter(|t| &*t.plugin.name == "mine")
            .map(|t| t.plugin)
            .collect();
        assert_eq!(took_over, [first, second]);
    }
}
