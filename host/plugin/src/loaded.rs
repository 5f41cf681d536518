//! One loaded version of a plugin: its pre-linked component, its limits and a
//! small pool of idle instances, reused across calls until one traps.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use wasmtime::component::InstancePre;
use wasmtime::{Store, Trap};

use crate::calls::CallCounter;
use crate::contract::{Contract, Kind};
use crate::deadline;
use crate::error::{CallError, CallErrorKind, LoadError, PluginRef, Source};
use crate::host::{Compiled, HostInner, Tier};
use crate::limits::Limits;
use crate::store::StoreState;

/// A plugin world as the host sees it: how to pre-link and instantiate it.
pub(crate) trait World: Sized + Send + Sync + 'static {
    /// The world this binding serves; `None` serves any (dynamic calls).
    const KIND: Option<Kind>;
    type Pre: Send + Sync;
    type Instance: Send;

    fn pre(pre: InstancePre<StoreState>, contract: &Contract) -> wasmtime::Result<Self::Pre>;
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance>;
}

/// wasmtime's default bound on the bytes a guest hands the host in one call.
const HOSTCALL_FUEL: usize = 128 << 20;

/// Idle instances kept per plugin version; more concurrent callers than this
/// instantiate fresh ones (~15 µs) and drop them afterwards.
const MAX_IDLE: usize = 16;

/// Facts about a loaded version, for status reports.
#[derive(Debug, Clone)]
pub struct VersionInfo {
    /// Name and version.
    pub plugin: PluginRef,
    /// World.
    pub kind: Kind,
    /// Contract version.
    pub contract: String,
    /// Where it came from.
    pub source: Source,
    /// When it started serving.
    pub loaded_at: SystemTime,
    /// Time to compile or load from cache.
    pub compile_time: Duration,
    /// Which compiler built the serving code.
    pub tier: Tier,
}

pub(crate) struct Loaded<W: World> {
    pub(crate) info: VersionInfo,
    pre: W::Pre,
    host: Arc<HostInner>,
    limits: Limits,
    idle: Mutex<Vec<Live<W>>>,
    counter: Arc<CallCounter>,
    /// The first fault a fallback answered for this version, and which
    /// built-in answers its calls since.
    fault: OnceLock<String>,
}

struct Live<W: World> {
    store: Store<StoreState>,
    instance: W::Instance,
}

impl<W: World> Loaded<W> {
    /// `counter` counts its calls and faults (see [`crate::calls`]).
    pub(crate) fn new(
        host: Arc<HostInner>,
        compiled: Compiled,
        counter: Arc<CallCounter>,
    ) -> Result<Self, LoadError> {
        let origin = compiled.source.to_string();
        if let Some(expected) = W::KIND
            && compiled.contract.kind != expected
        {
            return Err(LoadError::WrongWorld {
                origin,
                name: compiled.plugin.name.to_string(),
                found: compiled.contract.kind,
                expected,
            });
        }
        let invalid = |e: wasmtime::Error| LoadError::Invalid {
            origin: origin.clone(),
            detail: format!("does not link against this host: {e:#}"),
        };
        let pre = host
            .linker(compiled.tier)
            .instantiate_pre(&compiled.component)
            .map_err(invalid)?;
        let pre = W::pre(pre, &compiled.contract).map_err(invalid)?;
        let limits = host.config.limits.of(compiled.contract.kind);
        Ok(Loaded {
            info: VersionInfo {
                plugin: compiled.plugin,
                kind: compiled.contract.kind,
                contract: compiled.contract.version,
                source: compiled.source,
                loaded_at: SystemTime::now(),
                compile_time: compiled.compile_time,
                tier: compiled.tier,
            },
            pre,
            host,
            limits,
            idle: Mutex::new(Vec::new()),
            counter,
            fault: OnceLock::new(),
        })
    }

    /// Runs `call` on an instance under this plugin's limits.
    ///
    /// A trap of any kind drops the instance (wasmtime refuses further calls
    /// on it); the next call gets a fresh one. The call runs in a
    /// `plugin_call` span (debug level) with the plugin's name, version and
    /// the function, so the plugin's own log lines and the caller's can be
    /// told apart per call.
    pub(crate) fn call<R>(
        &self,
        function: &'static str,
        call: impl FnOnce(&W::Instance, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.call_within(function, self.limits, call)
    }

    /// As [`Loaded::call`], under `limits` instead of the kind's (a call
    /// whose input scales them). An instance whose memory grew past the
    /// kind's cap is not kept: linear memory never shrinks, and an idle
    /// instance should not hold on to the memory of its largest call.
    pub(crate) fn call_within<R>(
        &self,
        function: &'static str,
        limits: Limits,
        call: impl FnOnce(&W::Instance, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let span = tracing::debug_span!(
            "plugin_call",
            plugin = &*self.info.plugin.name,
            version = &*self.info.plugin.version,
            function,
        );
        let _entered = span.enter();
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut live = match idle {
            Some(live) => live,
            None => self
                .instantiate()
                .map_err(|e| self.error(function, self.classify(e, false, limits)))?,
        };
        deadline::arm(
            &mut live.store,
            limits.deadline,
            self.host.config.epoch_tick,
        );
        if self.host.config.fuel
            && let Some(fuel) = limits.fuel
        {
            live.store
                .set_fuel(fuel)
                .map_err(|e| self.error(function, CallErrorKind::Instantiate(e.to_string())))?;
        }
        let limiter = &mut live.store.data_mut().limiter;
        limiter.cap_hit = false;
        limiter.memory_cap = limits.memory_cap;
        // What a guest hands back cannot exceed what its memory holds; the
        // store's own bound (128 MiB) would refuse the answer of a call whose
        // cap grew with its input.
        live.store
            .set_hostcall_fuel(HOSTCALL_FUEL.max(limits.memory_cap as usize));
        match call(&live.instance, &mut live.store) {
            Ok(result) => {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let small = live.store.data().limiter.memory_size <= self.limits.memory_cap;
                if self.host.config.reuse_instances && small && idle.len() < MAX_IDLE {
                    idle.push(live);
                }
                Ok(result)
            }
            Err(e) => {
                let cap_hit = live.store.data().limiter.cap_hit;
                Err(self.error(function, self.classify(e, cap_hit, limits)))
            }
        }
    }

    /// Counts a call of the contract's functions that ended in `outcome`.
    pub(crate) fn count<T>(&self, outcome: &Result<T, CallError>) {
        self.counter.record(
            outcome
                .as_ref()
                .err()
                .is_some_and(CallError::is_plugin_fault),
        );
    }

    /// Whether this version faulted once and a fallback answers its calls.
    pub(crate) fn faulted(&self) -> bool {
        self.fault.get().is_some()
    }

    /// The fault after which a fallback answers this version's calls.
    pub(crate) fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    /// Records that `fault` made `fallback` answer this version's calls
    /// from now on, and logs it the first time only (many calls may fault
    /// at once).
    pub(crate) fn fell_back_after(&self, fault: &CallError, fallback: &Loaded<W>) {
        let message = format!(
            "{fault}; the built-in `{}` ({}) answers its calls until a new version loads",
            fallback.info.plugin.name, fallback.info.plugin.version
        );
        if self.fault.set(message).is_ok() {
            tracing::warn!(
                plugin = &*self.info.plugin.name,
                version = &*self.info.plugin.version,
                function = fault.function,
                fallback = &*fallback.info.plugin.name,
                "{}",
                self.fault().unwrap_or_default()
            );
        }
    }

    /// Counts a call of this version that its fallback answered.
    pub(crate) fn count_fallback(&self) {
        self.counter.record_fallback();
    }

    /// The limits of this plugin's kind.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn error(&self, function: &'static str, kind: CallErrorKind) -> CallError {
        CallError {
            plugin: self.info.plugin.clone(),
            function,
            kind,
        }
    }

    fn instantiate(&self) -> wasmtime::Result<Live<W>> {
        let state = StoreState::new(self.info.plugin.clone(), self.limits.memory_cap);
        let mut store = Store::new(self.host.engine(self.info.tier), state);
        store.limiter(|state| &mut state.limiter);
        deadline::install(&mut store, self.host.config.epoch_tick);
        // Instantiation runs guest start code: give it the call deadline too.
        deadline::arm(
            &mut store,
            self.limits.deadline,
            self.host.config.epoch_tick,
        );
        if self.host.config.fuel {
            store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX))?;
        }
        let instance = W::instantiate(&self.pre, &mut store)?;
        Ok(Live { store, instance })
    }

    fn classify(&self, error: wasmtime::Error, cap_hit: bool, limits: Limits) -> CallErrorKind {
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallErrorKind::Deadline(limits.deadline),
            Some(Trap::OutOfFuel) => CallErrorKind::OutOfFuel(limits.fuel.unwrap_or(0)),
            _ if cap_hit => CallErrorKind::MemoryCap(limits.memory_cap),
            Some(trap) => CallErrorKind::Trap(trap.to_string()),
            None => CallErrorKind::Trap(format!("{error:#}")),
        }
    }
}
