//! The plugin host: one wasmtime engine with its settings, the linker every
//! plugin is instantiated against, the compiled cache and the epoch ticker.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings::host;
use crate::cache::{ArtifactCache, CacheOutcome, hex_sha256};
use crate::contract::{self, Contract};
use crate::error::{LoadError, PluginRef, Source};
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
    /// Where compiled components are cached; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// Instances alive at once across all plugins (pooling allocator slots).
    pub max_instances: u32,
    /// How often the epoch advances; deadlines are enforced to within one tick.
    pub epoch_tick: Duration,
    /// Reuse an instance for later calls until it traps. Off, every call gets
    /// a fresh instance (about 15 µs more per call), so a plugin cannot carry
    /// state from one call to the next even by accident.
    pub reuse_instances: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            limits: KindLimits::default(),
            fuel: false,
            cache_dir: None,
            max_instances: 256,
            epoch_tick: Duration::from_millis(5),
            reuse_instances: true,
        }
    }
}

/// Why a host could not be created.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// wasmtime rejected the configuration.
    #[error("cannot set up the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The cache directory cannot be created.
    #[error("cannot use the plugin cache directory {path}: {source}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Compiles, checks and instantiates plugins. Cheap to clone; clones share
/// one engine.
#[derive(Clone)]
pub struct PluginHost {
    pub(crate) inner: Arc<HostInner>,
}

pub(crate) struct HostInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    cache: Option<ArtifactCache>,
    pub(crate) config: HostConfig,
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
        let engine = new_engine(&config, true)
            .or_else(|pooled| {
                // Some machines cannot reserve the address space the pooling
                // allocator wants; on-demand allocation still works there.
                tracing::warn!("pooling allocator unavailable ({pooled:#}); allocating on demand");
                new_engine(&config, false)
            })
            .map_err(HostError::Engine)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(HostError::Engine)?;
        host::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(HostError::Engine)?;
        let cache = match &config.cache_dir {
            Some(dir) => {
                Some(
                    ArtifactCache::new(dir.clone()).map_err(|source| HostError::Cache {
                        path: dir.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        spawn_epoch_ticker(&engine, config.epoch_tick);
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                cache,
                config,
            }),
        })
    }

    /// The host's settings.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Compiles `bytes` (through the cache) and identifies the world and
    /// contract version it implements. Blocking and CPU-heavy: call it off
    /// the async runtime.
    ///
    /// # Errors
    ///
    /// When the bytes are not a component, fail to compile, or implement no
    /// world of a contract version this host serves.
    pub fn compile(&self, name: &str, bytes: &[u8], source: Source) -> Result<Compiled, LoadError> {
        let origin = match &source {
            Source::Builtin => format!("built-in `{name}`"),
            other => other.to_string(),
        };
        contract::check_component_header(bytes, &origin)?;
        let sha256 = hex_sha256(bytes);
        let started = Instant::now();
        let compiled = match &self.inner.cache {
            Some(cache) => cache.load(&self.inner.engine, bytes, &sha256),
            None => Component::new(&self.inner.engine, bytes).map(|c| (c, CacheOutcome::Disabled)),
        };
        let (component, cache) = compiled.map_err(|e| LoadError::Invalid {
            origin: origin.clone(),
            detail: format!("does not compile: {e:#}"),
        })?;
        let compile_time = started.elapsed();
        let contract = contract::identify(&self.inner.engine, &component, &origin)?;
        Ok(Compiled {
            plugin: PluginRef {
                name: name.into(),
                version: format!("sha256:{}", &sha256[..12]).into(),
            },
            sha256,
            source,
            contract,
            size: bytes.len(),
            compile_time,
            cache,
            component,
        })
    }
}

fn new_engine(config: &HostConfig, pooling: bool) -> wasmtime::Result<Engine> {
    let mut wasm = Config::new();
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

/// Advances the engine's epoch every `tick` until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("plugin-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .expect("spawn the epoch ticker thread");
}
