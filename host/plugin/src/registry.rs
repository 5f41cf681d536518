//! The registry: plugin name → the version serving now.
//!
//! Loading compiles and checks a component off to the side, then swaps it in
//! atomically. Calls already running finish on the version they started on.
//! A failed load leaves the serving version alone and is recorded in the
//! plugin's status, logged, and counted.
//!
//! A hot reload that misses the compiled cache serves a baseline build first
//! (see [`crate::host`]); one background thread then compiles the optimized
//! build and swaps it in, unless another version has replaced the baseline
//! build by then.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::calls::{CallCounters, PluginCalls};
use crate::contract::Kind;
use crate::error::{LoadError, LookupError, Source};
use crate::host::{Compiled, PluginHost, Tier};
use crate::loaded::{Loaded, VersionInfo, World};
use crate::worlds::adapter::{AdapterWorld, TaskAdapter};
use crate::worlds::placement::{PlacementPolicy, PlacementWorld};
use crate::worlds::reset::{ResetCheck, ResetWorld};
use crate::worlds::sizing::{SizingPolicy, SizingWorld};
use crate::worlds::{Handle, Slot};

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
    /// Fallbacks to a built-in per plugin name.
    fallbacks: Mutex<BTreeMap<String, u64>>,
    calls: CallCounters,
    /// Feeds the optimizing thread, started on first use.
    optimizer: Mutex<Option<Sender<Reoptimize>>>,
}

/// A baseline build to replace with an optimized one.
struct Reoptimize {
    name: String,
    version: Arc<str>,
    bytes: Vec<u8>,
    source: Source,
}

/// How much a load may trade code quality for time to serving.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Urgency {
    /// Start-up and explicit loads: Cranelift, through the cache.
    Optimized,
    /// Hot reloads: whatever serves soonest.
    Soon,
}

#[derive(Default)]
struct State {
    builtins: BTreeMap<String, &'static [u8]>,
    entries: BTreeMap<String, Entry>,
}

struct Entry {
    slot: Option<AnySlot>,
    last_error: Option<(String, SystemTime)>,
}

enum AnySlot {
    Placement(Slot<PlacementWorld>),
    Sizing(Slot<SizingWorld>),
    Reset(Slot<ResetWorld>),
    Adapter(Slot<AdapterWorld>),
}

impl AnySlot {
    fn info(&self) -> VersionInfo {
        match self {
            AnySlot::Placement(slot) => slot.load().info.clone(),
            AnySlot::Sizing(slot) => slot.load().info.clone(),
            AnySlot::Reset(slot) => slot.load().info.clone(),
            AnySlot::Adapter(slot) => slot.load().info.clone(),
        }
    }
}

/// Moves a world's slot in and out of [`AnySlot`].
trait Slotted: World {
    const SLOT_KIND: Kind;
    fn wrap(slot: Slot<Self>) -> AnySlot;
    fn unwrap(any: &AnySlot) -> Option<&Slot<Self>>;
}

macro_rules! slotted {
    ($world:ty, $variant:ident) => {
        impl Slotted for $world {
            const SLOT_KIND: Kind = Kind::$variant;
            fn wrap(slot: Slot<Self>) -> AnySlot {
                AnySlot::$variant(slot)
            }
            fn unwrap(any: &AnySlot) -> Option<&Slot<Self>> {
                match any {
                    AnySlot::$variant(slot) => Some(slot),
                    _ => None,
                }
            }
        }
    };
}
slotted!(PlacementWorld, Placement);
slotted!(SizingWorld, Sizing);
slotted!(ResetWorld, Reset);
slotted!(AdapterWorld, Adapter);

impl Registry {
    /// An empty registry on `host`.
    pub fn new(host: PluginHost) -> Arc<Self> {
        Arc::new_cyclic(|myself| Registry {
            host,
            state: RwLock::default(),
            loaded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            myself: myself.clone(),
            fallbacks: Mutex::new(BTreeMap::new()),
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
            self.write()
                .builtins
                .insert(builtin.name.to_string(), builtin.wasm);
            let overridden = self.read().entries.get(builtin.name).is_some_and(|entry| {
                entry
                    .slot
                    .as_ref()
                    .is_some_and(|slot| matches!(slot.info().source, Source::File(_)))
            });
            if !overridden
                && let Err(e) = self.load_bytes(builtin.name, builtin.wasm, Source::Builtin)
            {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
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
    /// again, or, without one, the plugin is gone for new lookups (handles
    /// already held keep the last version).
    pub fn unload_file(&self, path: &Path) {
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            return;
        };
        let serving_from_path = self.read().entries.get(&name).is_some_and(|entry| {
            entry
                .slot
                .as_ref()
                .is_some_and(|slot| slot.info().source == Source::File(path.to_path_buf()))
        });
        if !serving_from_path {
            return;
        }
        let builtin = self.read().builtins.get(&name).copied();
        match builtin {
            Some(wasm) => {
                tracing::info!(plugin = %name, "{} removed; the built-in serves again", path.display());
                // A built-in that loaded at start-up loads again.
                let _ = self.load_bytes(&name, wasm, Source::Builtin);
            }
            None => {
                tracing::info!(plugin = %name, "{} removed; plugin unloaded", path.display());
                self.write().entries.remove(&name);
            }
        }
    }

    /// After `fault` (a trap, an overrun, a broken contract at call time),
    /// makes a built-in serve under the faulting plugin's name: the
    /// built-in of that name, else `default` (the built-in of its kind).
    /// Handles already held see it at their next call. The plugin's file
    /// serves again when it changes. Recorded as the plugin's last error,
    /// logged and counted ([`Registry::fallback_counts`]).
    ///
    /// Returns `None` when there is nothing to fall back to: the version
    /// that faulted is no longer serving (a newer one, or the built-in,
    /// serves already) or there is no such built-in.
    pub fn fall_back(&self, fault: &crate::CallError, default: &str) -> Option<VersionInfo> {
        let name = fault.plugin.name.to_string();
        let faulted_serving = self
            .read()
            .entries
            .get(&name)
            .and_then(|entry| entry.slot.as_ref())
            .is_some_and(|slot| {
                let info = slot.info();
                info.plugin.version == fault.plugin.version && info.source != Source::Builtin
            });
        if !faulted_serving {
            return None;
        }
        let (which, wasm) = {
            let state = self.read();
            [name.as_str(), default]
                .into_iter()
                .find_map(|which| state.builtins.get(which).map(|w| (which.to_string(), *w)))?
        };
        let installed = self.compile_and_install(&name, wasm, Source::Builtin, Urgency::Optimized);
        let info = match self.record(&name, installed) {
            Ok(info) => info,
            Err(e) => {
                tracing::error!(plugin = %name, "falling back to the built-in `{which}` failed: {e}");
                return None;
            }
        };
        let message =
            format!("{fault}; the built-in `{which}` serves until the plugin's file changes");
        tracing::warn!(plugin = %name, "{message}");
        if let Some(entry) = self.write().entries.get_mut(&name) {
            entry.last_error = Some((message, SystemTime::now()));
        }
        *self
            .fallbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += 1;
        Some(info)
    }

    /// Fallbacks to a built-in so far, per plugin name.
    pub fn fallback_counts(&self) -> BTreeMap<String, u64> {
        self.fallbacks
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
        let Some(entry) = state.entries.get(name) else {
            return Err(LookupError::NotFound {
                name: name.to_string(),
                available: state.entries.keys().cloned().collect::<Vec<_>>().join(", "),
            });
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
                Some(slot) => Ok(Handle::new(slot.clone())),
                None => Err(LookupError::WrongKind {
                    name: name.to_string(),
                    found: any.info().kind,
                    expected: W::SLOT_KIND,
                }),
            },
        }
    }

    fn compile_and_install(
        &self,
        name: &str,
        bytes: &[u8],
        source: Source,
        urgency: Urgency,
    ) -> Result<VersionInfo, LoadError> {
        // Compiling is the slow part and takes no lock.
        let compiled = match urgency {
            Urgency::Optimized => self.host.compile(name, bytes, source.clone())?,
            Urgency::Soon => self.host.compile_quickly(name, bytes, source.clone())?,
        };
        let info = self.install_unconditionally(compiled)?;
        if info.tier == Tier::Baseline {
            self.reoptimize_later(Reoptimize {
                name: name.to_string(),
                version: info.plugin.version.clone(),
                bytes: bytes.to_vec(),
                source,
            });
        }
        Ok(info)
    }

    fn install_unconditionally(&self, compiled: Compiled) -> Result<VersionInfo, LoadError> {
        self.install_any(compiled, None)
            .map(|installed| installed.expect("an install without a condition always installs"))
    }

    /// Installs `compiled`; with `replacing`, only while that version's
    /// baseline build is the one serving (`Ok(None)` otherwise).
    fn install_any(
        &self,
        compiled: Compiled,
        replacing: Option<&str>,
    ) -> Result<Option<VersionInfo>, LoadError> {
        match compiled.contract.kind {
            Kind::Placement => self.install_world::<PlacementWorld>(compiled, replacing),
            Kind::Sizing => self.install_world::<SizingWorld>(compiled, replacing),
            Kind::Reset => self.install_world::<ResetWorld>(compiled, replacing),
            Kind::Adapter => self.install_world::<AdapterWorld>(compiled, replacing),
        }
    }

    fn install_world<W: Slotted>(
        &self,
        compiled: Compiled,
        replacing: Option<&str>,
    ) -> Result<Option<VersionInfo>, LoadError> {
        let name = compiled.plugin.name.to_string();
        if let Some(current) = self.read().entries.get(&name).and_then(|e| e.slot.as_ref()) {
            let found = current.info().kind;
            if found != W::SLOT_KIND {
                return Err(LoadError::WrongWorld {
                    origin: compiled.source.to_string(),
                    name,
                    found: W::SLOT_KIND,
                    expected: found,
                });
            }
        }
        let counter = self.calls.of(&name, &compiled.plugin.version);
        let loaded = Arc::new(Loaded::<W>::new(
            self.host.inner.clone(),
            compiled,
            counter,
        )?);
        let info = loaded.info.clone();
        let mut state = self.write();
        let entry = state.entries.entry(name).or_insert(Entry {
            slot: None,
            last_error: None,
        });
        if let Some(version) = replacing
            && !entry
                .slot
                .as_ref()
                .is_some_and(|slot| serves_baseline_of(&slot.info(), version))
        {
            return Ok(None);
        }
        match entry.slot.as_ref().and_then(W::unwrap) {
            Some(slot) => slot.store(loaded),
            None => entry.slot = Some(W::wrap(Arc::new(ArcSwap::new(loaded)))),
        }
        if replacing.is_none() {
            entry.last_error = None;
        }
        Ok(Some(info))
    }

    fn reoptimize_later(&self, job: Reoptimize) {
        let mut optimizer = self.optimizer.lock().unwrap_or_else(|e| e.into_inner());
        let sender = optimizer.get_or_insert_with(|| {
            let (sender, jobs) = channel::<Reoptimize>();
            let registry = self.myself.clone();
            std::thread::Builder::new()
                .name("plugin-optimize".into())
                .spawn(move || {
                    // Ends when the registry, which owns the sender, is dropped.
                    while let Ok(job) = jobs.recv() {
                        let Some(registry) = registry.upgrade() else {
                            return;
                        };
                        registry.reoptimize(job);
                    }
                })
                .expect("spawn the plugin-optimize thread");
            sender
        });
        // The thread outlives every sender but panics; then reloads stay baseline.
        let _ = sender.send(job);
    }

    fn reoptimize(&self, job: Reoptimize) {
        let still_baseline = self
            .read()
            .entries
            .get(&job.name)
            .and_then(|entry| entry.slot.as_ref())
            .is_some_and(|slot| serves_baseline_of(&slot.info(), &job.version));
        if !still_baseline {
            return;
        }
        let result = self
            .host
            .compile(&job.name, &job.bytes, job.source)
            .and_then(|compiled| self.install_any(compiled, Some(&job.version)));
        match result {
            Ok(Some(info)) => tracing::info!(
                plugin = job.name,
                version = %info.plugin.version,
                compile_ms = info.compile_time.as_secs_f64() * 1e3,
                "optimized build serving"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(
                plugin = job.name,
                version = %job.version,
                "optimized build failed; the baseline build keeps serving: {e}"
            ),
        }
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
                    let entry = state.entries.entry(name.to_string()).or_insert(Entry {
                        slot: None,
                        last_error: None,
                    });
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

fn serves_baseline_of(info: &VersionInfo, version: &str) -> bool {
    info.tier == Tier::Baseline && &*info.plugin.version == version
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

    #[test]
    fn a_fault_hands_the_name_to_its_builtin_until_the_file_changes() {
        let registry = Registry::new(PluginHost::new(HostConfig::default()).unwrap());
        registry
            .add_builtins(
                sandfleet_guests::BUILTINS
                    .iter()
                    .filter(|b| b.name == "least-loaded")
                    .map(|b| (b.name, b.wasm)),
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("least-loaded.wasm");
        std::fs::copy(sandfleet_guests::MISBEHAVE, &file).unwrap();
        registry.load_file(&file).unwrap();
        let policy = registry.placement("least-loaded").unwrap();
        let idle = ClusterState {
            healthy: true,
            has_image: false,
            free_slots: 8,
            live: 0,
            warm_ready: 0,
            weight: 1,
            cpu_free_milli: 4000,
            memory_free_mib: 8192,
        };
        let clusters = Clusters::from_states(&[idle, idle]);
        // The misbehaving guest traps on image 3.
        let trap = Demand {
            kind: DemandKind::Claim,
            image: 3,
            count: 1,
            sequence: 0,
        };
        let fault = policy.place_blocking(&trap, &clusters).unwrap_err();
        assert!(fault.is_plugin_fault(), "{fault}");

        let serving = registry.fall_back(&fault, "least-loaded").unwrap();
        assert_eq!(serving.source, Source::Builtin);
        // The handle already held answers from the built-in now.
        assert!(policy.place_blocking(&trap, &clusters).is_ok());
        assert_eq!(registry.fallback_counts()["least-loaded"], 1);
        let status = registry.status("least-loaded").unwrap();
        assert!(
            status
                .last_error
                .unwrap()
                .contains("the built-in `least-loaded` serves"),
            "the fault is shown"
        );
        // The same fault reported again (another caller) changes nothing.
        assert!(registry.fall_back(&fault, "least-loaded").is_none());
        assert_eq!(registry.fallback_counts()["least-loaded"], 1);
        // The file serves again once it is loaded again.
        registry.load_file(&file).unwrap();
        assert!(matches!(policy.version().source, Source::File(_)));
    }
}
