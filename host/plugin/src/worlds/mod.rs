//! Typed wrappers, one per world: the only way the rest of sandfleet calls
//! plugins. Each call runs on the version current when it starts, under that
//! kind's limits, and its answer is checked against the contract.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use crate::bindings::types::{Failure, FailureKind};
use crate::error::{CallError, CallErrorKind, PluginRef};
use crate::loaded::{Loaded, VersionInfo, World};

pub mod adapter;
pub mod placement;
pub mod reset;
pub mod sizing;

/// Declares a typed world: the marker type, its [`World`] impl, one enum
/// of pre-linked components and one of instances with a variant per
/// contract version (`bindings::v0_1_0`, `bindings::v0_2_0`, generated from
/// `$module`'s `$pre` and `$instance`), and the public wrapper holding a
/// [`Handle`]. Calls match on the instance and convert an older version's
/// values to and from the latest's (`bindings::v0_1_0`).
macro_rules! typed_world {
    (
        $(#[$doc:meta])* $wrapper:ident, $world:ident, $kind:ident,
        $module:ident :: { $pre:ident, $instance:ident },
        $pre_enum:ident, $instance_enum:ident
    ) => {
        pub(crate) struct $world;

        /// The pre-linked component, by contract version.
        pub(crate) enum $pre_enum {
            V0_1_0(crate::bindings::v0_1_0::$module::$pre<crate::store::StoreState>),
            V0_2_0(crate::bindings::v0_2_0::$module::$pre<crate::store::StoreState>),
        }

        /// A live instance, by contract version.
        pub(crate) enum $instance_enum {
            V0_1_0(crate::bindings::v0_1_0::$module::$instance),
            V0_2_0(crate::bindings::v0_2_0::$module::$instance),
        }

        impl crate::loaded::World for $world {
            const KIND: Option<crate::contract::Kind> = Some(crate::contract::Kind::$kind);
            type Pre = $pre_enum;
            type Instance = $instance_enum;

            fn pre(
                pre: wasmtime::component::InstancePre<crate::store::StoreState>,
                contract: &crate::contract::Contract,
            ) -> wasmtime::Result<Self::Pre> {
                use crate::bindings::Version;
                Ok(match Version::of(&contract.version) {
                    Some(Version::V0_1_0) => $pre_enum::V0_1_0(
                        crate::bindings::v0_1_0::$module::$pre::new(pre)?,
                    ),
                    Some(Version::V0_2_0) => $pre_enum::V0_2_0(
                        crate::bindings::v0_2_0::$module::$pre::new(pre)?,
                    ),
                    None => wasmtime::bail!(
                        "contract version {} is not served by this host",
                        contract.version
                    ),
                })
            }

            fn instantiate(
                pre: &Self::Pre,
                store: &mut wasmtime::Store<crate::store::StoreState>,
            ) -> wasmtime::Result<Self::Instance> {
                Ok(match pre {
                    $pre_enum::V0_1_0(pre) => $instance_enum::V0_1_0(pre.instantiate(store)?),
                    $pre_enum::V0_2_0(pre) => $instance_enum::V0_2_0(pre.instantiate(store)?),
                })
            }
        }

        $(#[$doc])*
        ///
        /// # Calling from async code
        ///
        /// Every call comes in two forms. `name(...)` returns a future that
        /// runs the call on tokio's blocking pool: call it, and only it, from
        /// async code. `name_blocking(...)` runs the call on the calling
        /// thread, for threads that are not a tokio runtime's (the CLI's
        /// commands, tests, benches).
        ///
        /// A call runs wasm to completion without yielding (microseconds, at
        /// most the deadline), and a guest that writes to stdout or stderr
        /// goes through wasmtime-wasi's synchronous shims, which `block_on`
        /// a future: on a runtime's worker thread that panics ("Cannot start
        /// a runtime from within a runtime") or stalls every task sharing
        /// the thread. The async form keeps that knowledge here, so its
        /// callers just `.await`. Its arguments are cloned before it
        /// returns, so the future is `Send + 'static` and can be spawned.
        #[derive(Clone)]
        pub struct $wrapper(pub(crate) super::Handle<$world>);

        impl $wrapper {
            /// The version serving now (for a pinned handle: its version).
            pub fn version(&self) -> crate::loaded::VersionInfo {
                self.0.version()
            }

            /// A handle on the version serving now that later reloads do
            /// not change, so that one piece of work is answered by one
            /// version. The fallback, if any, still answers its faults.
            pub fn pin(&self) -> Self {
                Self(self.0.pin())
            }

            /// Whether the built-in fallback answered a call made through
            /// this handle (each pinned handle keeps its own flag).
            pub fn fell_back(&self) -> bool {
                self.0.fell_back()
            }

            /// The built-in that answers this plugin's faults, if any.
            pub fn fallback(&self) -> Option<crate::PluginRef> {
                self.0.fallback()
            }
        }
    };
}
pub(crate) use typed_world;

/// The current version of a named plugin; swapped atomically on reload.
pub(crate) type Slot<W> = Arc<ArcSwap<Loaded<W>>>;

/// Which version a handle calls.
enum Serving<W: World> {
    /// Whatever version serves the plugin's name now: a reload swaps it
    /// under every handle at once.
    Current(Slot<W>),
    /// One version, whatever reloads come (see [`Handle::pin`]).
    Pinned(Arc<Loaded<W>>),
}

impl<W: World> Clone for Serving<W> {
    fn clone(&self) -> Self {
        match self {
            Serving::Current(slot) => Serving::Current(slot.clone()),
            Serving::Pinned(loaded) => Serving::Pinned(loaded.clone()),
        }
    }
}

/// What every typed wrapper holds: the version it calls, and the built-in
/// that answers in its place when that version faults.
pub(crate) struct Handle<W: World> {
    serving: Serving<W>,
    /// The built-in of the same world that answers a call the plugin
    /// faulted on (`[plugins] fallback = "builtin"`); `None` when faults
    /// are the caller's to handle.
    fallback: Option<Arc<Loaded<W>>>,
    /// Set once the fallback answered a call made through this handle or
    /// a clone of it; a pinned handle gets a flag of its own.
    fell_back: Arc<AtomicBool>,
}

impl<W: World> Clone for Handle<W> {
    fn clone(&self) -> Self {
        Handle {
            serving: self.serving.clone(),
            fallback: self.fallback.clone(),
            fell_back: self.fell_back.clone(),
        }
    }
}

impl<W: World> Handle<W> {
    pub(crate) fn new(slot: Slot<W>, fallback: Option<Arc<Loaded<W>>>) -> Self {
        Handle {
            serving: Serving::Current(slot),
            fallback,
            fell_back: Arc::default(),
        }
    }

    /// A handle on the version serving now, kept whatever reloads come, so
    /// that the calls of one piece of work (a task's prepare and its grade,
    /// a sandbox's baseline and its resets) are answered by one version.
    pub(crate) fn pin(&self) -> Self {
        Handle {
            serving: Serving::Pinned(self.current()),
            fallback: self.fallback.clone(),
            fell_back: Arc::default(),
        }
    }

    /// Whether the fallback answered a call made through this handle.
    pub(crate) fn fell_back(&self) -> bool {
        self.fell_back.load(Ordering::Relaxed)
    }

    /// The built-in that answers this handle's faults.
    pub(crate) fn fallback(&self) -> Option<PluginRef> {
        self.fallback
            .as_ref()
            .map(|builtin| builtin.info.plugin.clone())
    }

    pub(crate) fn current(&self) -> Arc<Loaded<W>> {
        match &self.serving {
            Serving::Current(slot) => slot.load_full(),
            Serving::Pinned(loaded) => loaded.clone(),
        }
    }

    pub(crate) fn version(&self) -> VersionInfo {
        self.current().info.clone()
    }

    /// The name and version serving now.
    pub(crate) fn plugin(&self) -> PluginRef {
        self.current().info.plugin.clone()
    }

    /// Calls `function` and turns the plugin's own `failure` into
    /// [`CallErrorKind::Declined`]; `check` then vets a successful answer.
    pub(crate) fn call<T>(
        &self,
        function: &'static str,
        call: impl Fn(
            &W::Instance,
            &mut wasmtime::Store<crate::store::StoreState>,
        ) -> wasmtime::Result<Result<T, Failure>>,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<T, CallError> {
        self.call_sized(function, 0, call, check)
    }

    /// As [`Handle::call`], for a call that takes `input_bytes` of input:
    /// it runs under the kind's limits scaled for that much input
    /// ([`crate::Limits::scaled_for_input`]).
    ///
    /// A fault (trap, overrun, broken answer) of a plugin with a fallback
    /// is answered by the fallback; so is every later call of that
    /// version, which faulted once and is not tried again (a plugin that
    /// spins to its deadline would cost every call the deadline). A new
    /// version of the plugin gets its own chance.
    pub(crate) fn call_sized<T>(
        &self,
        function: &'static str,
        input_bytes: usize,
        call: impl Fn(
            &W::Instance,
            &mut wasmtime::Store<crate::store::StoreState>,
        ) -> wasmtime::Result<Result<T, Failure>>,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<T, CallError> {
        let plugin = self.current();
        let fallback = self
            .fallback
            .as_ref()
            .filter(|builtin| builtin.info.plugin != plugin.info.plugin);
        let Some(fallback) = fallback else {
            return checked_call(&plugin, function, input_bytes, &call, &check);
        };
        if !plugin.faulted() {
            match checked_call(&plugin, function, input_bytes, &call, &check) {
                Err(fault) if fault.is_plugin_fault() => plugin.fell_back_after(&fault, fallback),
                answered => return answered,
            }
        }
        plugin.count_fallback();
        self.fell_back.store(true, Ordering::Relaxed);
        checked_call(fallback, function, input_bytes, &call, &check)
    }
}

/// One call of `function` on `plugin`, its answer checked and counted.
fn checked_call<W: World, T>(
    plugin: &Loaded<W>,
    function: &'static str,
    input_bytes: usize,
    call: &impl Fn(
        &W::Instance,
        &mut wasmtime::Store<crate::store::StoreState>,
    ) -> wasmtime::Result<Result<T, Failure>>,
    check: &impl Fn(&T) -> Result<(), String>,
) -> Result<T, CallError> {
    let limits = plugin.limits().scaled_for_input(input_bytes);
    let outcome = plugin
        .call_within(function, limits, call)
        .and_then(|answer| answer.map_err(|failure| plugin.error(function, declined(failure))))
        .and_then(|value| {
            check(&value)
                .map_err(|detail| plugin.error(function, CallErrorKind::Contract(detail)))?;
            Ok(value)
        });
    plugin.count(&outcome);
    outcome
}

/// Runs `call`, a blocking call of `function` on `plugin`, on tokio's
/// blocking pool, under the caller's subscriber and inside its current span,
/// so its log lines read as if it ran where it was awaited. A panic becomes
/// [`CallErrorKind::HostPanic`], a runtime that shut down before the call
/// ran [`CallErrorKind::Cancelled`]. Outside a tokio runtime (no worker
/// thread to protect) the call runs on the polling thread.
pub(crate) async fn off_runtime<T: Send + 'static>(
    plugin: PluginRef,
    function: &'static str,
    call: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, CallError> {
    let error = |kind| CallError {
        plugin: plugin.clone(),
        function,
        kind,
    };
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let parent = tracing::Span::current();
    let call = move || tracing::dispatcher::with_default(&dispatch, || parent.in_scope(call));
    if tokio::runtime::Handle::try_current().is_err() {
        return std::panic::catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|payload| {
            Err(error(CallErrorKind::HostPanic(panic_message(&*payload))))
        });
    }
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result,
        Err(join) if join.is_panic() => Err(error(CallErrorKind::HostPanic(panic_message(
            &*join.into_panic(),
        )))),
        Err(_) => Err(error(CallErrorKind::Cancelled)),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(message), _) => (*message).to_string(),
        (None, Some(message)) => message.clone(),
        (None, None) => "(a panic without a message)".to_string(),
    }
}

fn declined(failure: Failure) -> CallErrorKind {
    CallErrorKind::Declined {
        kind: match failure.kind {
            FailureKind::InvalidInput => "invalid-input",
            FailureKind::Unsatisfiable => "unsatisfiable",
            FailureKind::Internal => "internal",
        },
        message: failure.message,
    }
}

/// Every command must name a program.
pub(crate) fn check_commands<'a>(
    argvs: impl IntoIterator<Item = &'a [String]>,
    what: &str,
) -> Result<(), String> {
    for (index, argv) in argvs.into_iter().enumerate() {
        if argv.first().is_none_or(|program| program.is_empty()) {
            return Err(format!("{what} command {index} has an empty argv"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin() -> PluginRef {
        PluginRef {
            name: "p".into(),
            version: "sha256:000000000000".into(),
        }
    }

    #[tokio::test]
    async fn a_panic_on_the_blocking_pool_becomes_a_call_error() {
        let error = off_runtime::<u32>(plugin(), "place", || panic!("deliberate"))
            .await
            .unwrap_err();
        assert_eq!(error.function, "place");
        assert!(
            matches!(&error.kind, CallErrorKind::HostPanic(message) if message == "deliberate"),
            "{error}"
        );
        assert!(!error.is_plugin_fault());
        assert_eq!(
            error.to_string(),
            "plugin `p` (sha256:000000000000) place: panicked the host: deliberate"
        );
    }

    #[test]
    fn outside_a_runtime_the_call_runs_on_the_polling_thread() {
        let caller = std::thread::current().id();
        let ran_on = poll_to_completion(off_runtime(plugin(), "plan", move || {
            Ok(std::thread::current().id())
        }));
        assert_eq!(ran_on.unwrap(), caller);
        let error = poll_to_completion(off_runtime::<()>(plugin(), "plan", || {
            panic!("{}", String::from("formatted"))
        }))
        .unwrap_err();
        assert!(matches!(&error.kind, CallErrorKind::HostPanic(m) if m == "formatted"));
    }

    /// Polls `future` to completion on this thread, with no runtime.
    fn poll_to_completion<F: std::future::Future>(future: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        let mut future = std::pin::pin!(future);
        let mut context = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
                return output;
            }
            std::thread::yield_now();
        }
    }
}
