//! Typed wrappers, one per world: the only way the rest of sandfleet calls
//! plugins. Each call runs on the version current when it starts, under that
//! kind's limits, and its answer is checked against the contract.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::bindings::types::{Failure, FailureKind};
use crate::error::{CallError, CallErrorKind};
use crate::loaded::{Loaded, VersionInfo, World};

pub mod adapter;
pub mod placement;
pub mod reset;
pub mod sizing;

/// Declares a typed world: the marker type, its [`World`] impl over the
/// generated bindings, and the public wrapper holding a [`Handle`].
macro_rules! typed_world {
    ($(#[$doc:meta])* $wrapper:ident, $world:ident, $kind:ident, $pre:ty, $instance:ty) => {
        pub(crate) struct $world;

        impl crate::loaded::World for $world {
            const KIND: Option<crate::contract::Kind> = Some(crate::contract::Kind::$kind);
            type Pre = $pre;
            type Instance = $instance;

            fn pre(
                pre: wasmtime::component::InstancePre<crate::store::StoreState>,
                _: &crate::contract::Contract,
            ) -> wasmtime::Result<Self::Pre> {
                <$pre>::new(pre)
            }

            fn instantiate(
                pre: &Self::Pre,
                store: &mut wasmtime::Store<crate::store::StoreState>,
            ) -> wasmtime::Result<Self::Instance> {
                pre.instantiate(store)
            }
        }

        $(#[$doc])*
        #[derive(Clone)]
        pub struct $wrapper(pub(crate) super::Handle<$world>);

        impl $wrapper {
            /// The version serving now.
            pub fn version(&self) -> crate::loaded::VersionInfo {
                self.0.version()
            }
        }
    };
}
pub(crate) use typed_world;

/// The current version of a named plugin; swapped atomically on reload.
pub(crate) type Slot<W> = Arc<ArcSwap<Loaded<W>>>;

/// What every typed wrapper holds.
pub(crate) struct Handle<W: World> {
    slot: Slot<W>,
}

impl<W: World> Clone for Handle<W> {
    fn clone(&self) -> Self {
        Handle {
            slot: self.slot.clone(),
        }
    }
}

impl<W: World> Handle<W> {
    pub(crate) fn new(slot: Slot<W>) -> Self {
        Handle { slot }
    }

    pub(crate) fn current(&self) -> Arc<Loaded<W>> {
        self.slot.load_full()
    }

    pub(crate) fn version(&self) -> VersionInfo {
        self.slot.load().info.clone()
    }

    /// Calls `function` and turns the plugin's own `failure` into
    /// [`CallErrorKind::Declined`]; `check` then vets a successful answer.
    pub(crate) fn call<T>(
        &self,
        function: &'static str,
        call: impl FnOnce(
            &W::Instance,
            &mut wasmtime::Store<crate::store::StoreState>,
        ) -> wasmtime::Result<Result<T, Failure>>,
        check: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<T, CallError> {
        let plugin = self.current();
        let answer = plugin.call(function, call)?;
        let value = answer.map_err(|failure| plugin.error(function, declined(failure)))?;
        check(&value).map_err(|detail| plugin.error(function, CallErrorKind::Contract(detail)))?;
        Ok(value)
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
