//! How a version comes to serve a name: compiled at the load's urgency,
//! built for its world with its call counter, swapped into the name's
//! slot (a takeover recorded), and, when it came as a baseline build,
//! replaced later by its optimized build on one background thread.

use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::contract::Kind;
use crate::error::{LoadError, Source};
use crate::host::{Compiled, Tier};
use crate::loaded::{Loaded, VersionInfo};
use crate::worlds::adapter::AdapterWorld;
use crate::worlds::placement::PlacementWorld;
use crate::worlds::reset::ResetWorld;
use crate::worlds::sizing::SizingWorld;

use super::slots::{AnyLoaded, Slotted};
use super::{Registry, Takeover};

/// A baseline build to replace with an optimized one.
pub(super) struct Reoptimize {
    name: String,
    version: Arc<str>,
    bytes: Vec<u8>,
    source: Source,
}

/// How much a load may trade code quality for time to serving.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Urgency {
    /// Start-up and explicit loads: Cranelift, through the cache.
    Optimized,
    /// Hot reloads: whatever serves soonest.
    Soon,
}

impl Registry {
    pub(super) fn compile_and_install(
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

    pub(super) fn install_unconditionally(
        &self,
        compiled: Compiled,
    ) -> Result<VersionInfo, LoadError> {
        let loaded = self.build_any(compiled)?;
        self.install_any(loaded, None)
            .map(|installed| installed.expect("an install without a condition always installs"))
    }

    /// The loaded form of `compiled`, for its world, counting its calls
    /// with every other build of its version.
    pub(super) fn build_any(&self, compiled: Compiled) -> Result<AnyLoaded, LoadError> {
        fn build<W: Slotted>(
            registry: &Registry,
            compiled: Compiled,
        ) -> Result<AnyLoaded, LoadError> {
            let counter = registry
                .calls
                .of(&compiled.plugin.name, &compiled.plugin.version);
            let loaded = Loaded::<W>::new(registry.host.inner.clone(), compiled, counter)?;
            Ok(W::wrap_loaded(Arc::new(loaded)))
        }
        match compiled.contract.kind {
            Kind::Placement => build::<PlacementWorld>(self, compiled),
            Kind::Sizing => build::<SizingWorld>(self, compiled),
            Kind::Reset => build::<ResetWorld>(self, compiled),
            Kind::Adapter => build::<AdapterWorld>(self, compiled),
        }
    }

    /// Installs `loaded`; with `replacing`, only while that version's
    /// baseline build is the one serving (`Ok(None)` otherwise).
    pub(super) fn install_any(
        &self,
        loaded: AnyLoaded,
        replacing: Option<&str>,
    ) -> Result<Option<VersionInfo>, LoadError> {
        match loaded {
            AnyLoaded::Placement(loaded) => self.install_world(loaded, replacing),
            AnyLoaded::Sizing(loaded) => self.install_world(loaded, replacing),
            AnyLoaded::Reset(loaded) => self.install_world(loaded, replacing),
            AnyLoaded::Adapter(loaded) => self.install_world(loaded, replacing),
        }
    }

    fn install_world<W: Slotted>(
        &self,
        loaded: Arc<Loaded<W>>,
        replacing: Option<&str>,
    ) -> Result<Option<VersionInfo>, LoadError> {
        let info = loaded.info.clone();
        let name = info.plugin.name.to_string();
        let mut state = self.write();
        let entry = state.entries.entry(name.clone()).or_default();
        if let Some(current) = &entry.slot {
            let found = current.info().kind;
            if found != W::SLOT_KIND {
                return Err(LoadError::WrongWorld {
                    origin: info.source.to_string(),
                    name,
                    found: W::SLOT_KIND,
                    expected: found,
                });
            }
        }
        if let Some(version) = replacing
            && !entry
                .slot
                .as_ref()
                .is_some_and(|slot| serves_baseline_of(&slot.info(), version))
        {
            return Ok(None);
        }
        let before = entry.slot.as_ref().map(|slot| slot.info().plugin);
        match entry.slot.as_ref().and_then(W::unwrap) {
            Some(slot) => slot.store(loaded),
            None => entry.slot = Some(W::wrap(Arc::new(ArcSwap::new(loaded)))),
        }
        let took_over = entry.removed || before.as_ref() != Some(&info.plugin);
        entry.removed = false;
        if replacing.is_none() {
            entry.last_error = None;
        }
        drop(state);
        if took_over {
            self.takeovers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Takeover {
                    plugin: info.plugin.clone(),
                    kind: info.kind,
                    source: info.source.clone(),
                    at: SystemTime::now(),
                });
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
            .and_then(|compiled| self.build_any(compiled))
            .and_then(|loaded| self.install_any(loaded, Some(&job.version)));
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
}

pub(super) fn serves_baseline_of(info: &VersionInfo, version: &str) -> bool {
    info.tier == Tier::Baseline && &*info.plugin.version == version
}
