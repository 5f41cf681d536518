//! The plugin host: the wasmtime engines with their settings, the linkers
//! plugins are instantiated against, the compiled cache and the epoch ticker.
//!
//! Plugins are compiled by Cranelift. A hot reload, though, must serve the
//! new version quickly, and Cranelift takes about a second per megabyte of
//! code on a small machine, so a reload that misses the cache is compiled
//! first by Winch, wasmtime's baseline compiler (several times faster to
//! compile, slower code), and replaced by the Cranelift build once that is
//! done (see [`crate::registry`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, EngineWeak as WeakEngine, InstanceAllocationStrategy, PoolingAllocationConfig,
    Strategy,
};

use crate::bindings::host;
use crate::cache::{ArtifactCache, CacheOutcome, hex_sha256};
use crate::contract::{self, Contract};
use crate::error::{LoadError, PluginRef, Source};
use crate::function_cache::{FunctionCache, FunctionReuse};
use crate::limits::KindLimits;
use crate::store::StoreState;

/// How a [`PluginHost`] is set up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Limits per plugin kind.
    pub limits: KindLimits,
    /// Meter fuel. Changes the generated code, so it is part of the cache key;
    /// the per-kind `fuel` limits take effect only when this is on.
    pub fuel: bool,
    /// Where compiled components (and Cranelift's compiled functions, which
    /// a rebuilt plugin mostly shares with its last build) are cached;
    /// `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// How many bytes the cache directory may hold: past it, the least
    /// recently used components go, and the function table, kept to a
    /// quarter of it, is rewritten with what the last compiles used.
    pub cache_budget: u64,
    /// Instances alive at once across all plugins (pooling allocator slots).
    pub max_instances: u32,
    /// How often the epoch advances; deadlines are enforced to within one tick.
    pub epoch_tick: Duration,
    /// Reuse an instance for later calls until it traps. Off, every call gets
    /// a fresh instance (about 15 µs more per call), so a plugin cannot carry
    /// state from one call to the next even by accident.
    pub reuse_instances: bool,
    /// Serve a hot-reloaded plugin that misses the cache from a baseline
    /// (Winch) build while the optimized build compiles in the background.
    /// Off, or where Winch is unavailable, a reload waits for Cranelift.
    pub baseline_first: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            limits: KindLimits::default(),
            fuel: false,
            cache_dir: None,
            cache_budget: DEFAULT_CACHE_BUDGET,
            max_instances: 256,
            epoch_tick: Duration::from_millis(5),
            reuse_instances: true,
            baseline_first: true,
        }
    }
}

/// [`HostConfig::cache_budget`]'s default: about 60 Python plugins'
/// compiled components (30 MB each) with their function table.
pub const DEFAULT_CACHE_BUDGET: u64 = 2 << 30;

/// Why a host could not be created.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// wasmtime rejected the configuration.
    #[error("cannot set up the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The cache directory cannot be created.
    #[error("cannot use the plugin cache directory {path}: {error}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why (in the message, not as a source, so it prints once).
        error: std::io::Error,
    },
}

/// Compiles, checks and instantiates plugins. Cheap to clone; clones share
/// one engine.
#[derive(Clone)]
pub struct PluginHost {
    pub(crate) inner: Arc<HostInner>,
}

pub(crate) struct HostInner {
    optimized: Compiler,
    baseline: Option<Compiler>,
    cache: Option<ArtifactCache>,
    /// The optimized engine's function cache.
    functions: Option<Arc<FunctionCache>>,
    pub(crate) config: HostConfig,
}

/// An engine and the linker bound to it; components of one tier run only on
/// that tier's engine.
struct Compiler {
    engine: Engine,
    linker: Linker<StoreState>,
}

impl Compiler {
    fn new(engine: Engine) -> wasmtime::Result<Self> {
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // Every served version's `host` import, under its own versioned name.
        host::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state)?;
        crate::bindings::v0_1_0::host::add_to_linker::<_, HasSelf<StoreState>>(
            &mut linker,
            |state| state,
        )?;
        Ok(Compiler { engine, linker })
    }
}

/// Which compiler built a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Winch: quick to compile, slower to run; replaced by an optimized build.
    Baseline,
    /// Cranelift.
    Optimized,
}

/// Whether a compile may be answered from the compiled cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// From the cache when it holds a trustworthy entry.
    Cached,
    /// Compiled regardless, then stored.
    Fresh,
}

impl HostInner {
    pub(crate) fn engine(&self, tier: Tier) -> &Engine {
        &self.compiler(tier).engine
    }

    pub(crate) fn linker(&self, tier: Tier) -> &Linker<StoreState> {
        &self.compiler(tier).linker
    }

    fn compiler(&self, tier: Tier) -> &Compiler {
        match (tier, &self.baseline) {
            (Tier::Baseline, Some(baseline)) => baseline,
            _ => &self.optimized,
        }
    }
}

/// A component compiled and identified, not yet serving.
pub struct Compiled {
    /// Name and version.
    pub plugin: PluginRef,
    /// Full sha256 of the component's bytes.
    pub sha256: String,
    /// Where the bytes came from.
    pub source: Source,
    /// World and contract version.
    pub contract: Contract,
    /// Size of the component in bytes.
    pub size: usize,
    /// Time spent compiling (or loading from the cache).
    pub compile_time: Duration,
    /// How the compiled cache was used.
    pub cache: CacheOutcome,
    /// How many functions Cranelift reused from the function cache and how
    /// many it compiled; `None` when nothing was compiled with it.
    pub functions: Option<FunctionReuse>,
    /// Which compiler built it.
    pub tier: Tier,
    pub(crate) component: Component,
}

impl PluginHost {
    /// Creates a host: the engine (Cranelift, component model, epoch
    /// interruption, pooling allocator), the linker and the epoch ticker.
    ///
    /// # Errors
    ///
    /// When wasmtime rejects the configuration or the cache directory cannot
    /// be created.
    pub fn new(config: HostConfig) -> Result<Self, HostError> {
        let cache = match &config.cache_dir {
            Some(dir) => Some(
                ArtifactCache::new(dir.clone(), config.cache_budget).map_err(|error| {
                    HostError::Cache {
                        path: dir.clone(),
                        error,
                    }
                })?,
            ),
            None => None,
        };
        let functions = cache
            .as_ref()
            .map(|cache| Arc::new(FunctionCache::new(cache.dir(), config.cache_budget / 4)));
        let engine = new_engine(&config, Tier::Optimized, true, functions.as_ref())
            .or_else(|pooled| {
                // Some machines cannot reserve the address space the pooling
                // allocator wants; on-demand allocation still works there.
                tracing::warn!("pooling allocator unavailable ({pooled:#}); allocating on demand");
                new_engine(&config, Tier::Optimized, false, functions.as_ref())
            })
            .map_err(HostError::Engine)?;
        let optimized = Compiler::new(engine).map_err(HostError::Engine)?;
        // Baseline builds serve for the seconds an optimized build takes:
        // allocating on demand spares a second pool's address space.
        let baseline = config
            .baseline_first
            .then(|| new_engine(&config, Tier::Baseline, false, None).and_then(Compiler::new))
            .and_then(|built| {
                built
                    .inspect_err(|e| {
                        tracing::info!(
                            "no baseline compiler here ({e:#}); reloads wait for Cranelift"
                        );
                    })
                    .ok()
            });
        let engines = std::iter::once(&optimized)
            .chain(&baseline)
            .map(|compiler| compiler.engine.weak())
            .collect();
        spawn_epoch_ticker(engines, config.epoch_tick);
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                optimized,
                baseline,
                cache,
                functions,
                config,
            }),
        })
    }

    /// The host's settings.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Compiles `bytes` with Cranelift (through the cache) and identifies the
    /// world and contract version it implements. Blocking and CPU-heavy:
    /// call it off the async runtime.
    ///
    /// # Errors
    ///
    /// When the bytes are not a component, fail to compile, or implement no
    /// world of a contract version this host serves.
    pub fn compile(&self, name: &str, bytes: &[u8], source: Source) -> Result<Compiled, LoadError> {
        self.compile_optimized(name, bytes, &hex_sha256(bytes), source, Lookup::Cached)
    }

    /// As [`PluginHost::compile`], but always compiled, whatever the cache
    /// holds, so [`Compiled::compile_time`] is Cranelift's own; the result
    /// is then stored in the cache, so the loads after it need not compile.
    ///
    /// # Errors
    ///
    /// As [`PluginHost::compile`].
    pub fn compile_fresh(
        &self,
        name: &str,
        bytes: &[u8],
        source: Source,
    ) -> Result<Compiled, LoadError> {
        self.compile_optimized(name, bytes, &hex_sha256(bytes), source, Lookup::Fresh)
    }

    /// As [`PluginHost::compile`], but quick: from the cache when it holds
    /// an optimized build, else with the baseline compiler when the host has
    /// one (see [`HostConfig::baseline_first`]).
    ///
    /// # Errors
    ///
    /// As [`PluginHost::compile`].
    pub fn compile_quickly(
        &self,
        name: &str,
        bytes: &[u8],
        source: Source,
    ) -> Result<Compiled, LoadError> {
        let sha256 = hex_sha256(bytes);
        let cached = self
            .inner
            .cache
            .as_ref()
            .is_some_and(|cache| cache.contains(&self.inner.optimized.engine, &sha256));
        let tier = if cached || self.inner.baseline.is_none() {
            Tier::Optimized
        } else {
            Tier::Baseline
        };
        self.compile_as(name, bytes, &sha256, source.clone(), tier, Lookup::Cached)
            .or_else(|error| match tier {
                // Winch does not take every module; Cranelift has the last word.
                Tier::Baseline => {
                    tracing::debug!(
                        plugin = name,
                        "baseline build failed ({error}); compiling it optimized"
                    );
                    self.compile_optimized(name, bytes, &sha256, source, Lookup::Cached)
                }
                Tier::Optimized => Err(error),
            })
    }

    fn compile_optimized(
        &self,
        name: &str,
        bytes: &[u8],
        sha256: &str,
        source: Source,
        lookup: Lookup,
    ) -> Result<Compiled, LoadError> {
        self.compile_as(name, bytes, sha256, source, Tier::Optimized, lookup)
    }

    fn compile_as(
        &self,
        name: &str,
        bytes: &[u8],
        sha256: &str,
        source: Source,
        tier: Tier,
        lookup: Lookup,
    ) -> Result<Compiled, LoadError> {
        let origin = match &source {
            Source::Builtin => format!("built-in `{name}`"),
            other => other.to_string(),
        };
        contract::check_component_header(bytes, &origin)?;
        let engine = self.inner.engine(tier);
        let started = Instant::now();
        // Only optimized builds are cached: a baseline build is a stopgap.
        let cache = self
            .inner
            .cache
            .as_ref()
            .filter(|_| tier == Tier::Optimized);
        let compiling = self
            .inner
            .functions
            .as_ref()
            .filter(|_| tier == Tier::Optimized)
            .map(FunctionCache::compiling);
        let compiled = match (cache, lookup) {
            (Some(cache), Lookup::Cached) => cache.load(engine, bytes, sha256),
            _ => Component::new(engine, bytes).map(|c| (c, CacheOutcome::Disabled)),
        };
        let (component, mut outcome) = compiled.map_err(|e| LoadError::Invalid {
            origin: origin.clone(),
            detail: format!("does not compile: {e:#}"),
        })?;
        let compile_time = started.elapsed();
        let functions = compiling
            .map(|compiling| compiling.reuse())
            .filter(|_| outcome != CacheOutcome::Hit);
        if let (Some(cache), Lookup::Fresh) = (cache, lookup) {
            cache.store(engine, sha256, &component);
            outcome = CacheOutcome::Stored;
        }
        let contract = contract::identify(engine, &component, &origin)?;
        Ok(Compiled {
            plugin: PluginRef {
                name: name.into(),
                version: version_of(sha256).into(),
            },
            sha256: sha256.to_string(),
            source,
            contract,
            size: bytes.len(),
            compile_time,
            cache: outcome,
            functions,
            tier,
            component,
        })
    }
}

/// A component's version as [`PluginRef::version`] spells it, from the
/// hex sha256 of its bytes.
pub(crate) fn version_of(sha256: &str) -> String {
    format!("sha256:{}", &sha256[..12])
}

fn new_engine(
    config: &HostConfig,
    tier: Tier,
    pooling: bool,
    functions: Option<&Arc<FunctionCache>>,
) -> wasmtime::Result<Engine> {
    let mut wasm = Config::new();
    if let Some(functions) = functions {
        wasm.enable_incremental_compilation(Arc::clone(functions) as Arc<dyn wasmtime::CacheStore>)?;
    }
    wasm.strategy(match tier {
        Tier::Baseline => Strategy::Winch,
        Tier::Optimized => Strategy::Cranelift,
    });
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(config.fuel)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    if pooling {
        let slots = config.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        // A wasip2 component holds a few core instances (the program, the WASI
        // adapter and its shims) and one or two memories and tables.
        pool.total_component_instances(slots)
            .total_core_instances(slots * 4)
            .total_memories(slots * 2)
            .total_tables(slots * 2)
            .max_memory_size(config.limits.max_memory_cap() as usize);
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&wasm)
}

/// Advances the engines' epochs every `tick` until the host is dropped.
fn spawn_epoch_ticker(engines: Vec<WeakEngine>, tick: Duration) {
    std::thread::Builder::new()
        .name("plugin-epoch".into())
        .spawn(move || {
            loop {
                let mut alive = false;
                for engine in engines.iter().filter_map(WeakEngine::upgrade) {
                    engine.increment_epoch();
                    alive = true;
                }
                if !alive {
                    return;
                }
                std::thread::sleep(tick);
            }
        })
        .expect("spawn the epoch ticker thread");
}
