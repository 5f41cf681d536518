//! The `placement-policy` world.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::Handle;
use crate::bindings::latest::placement as bindings;
use crate::contract::{Contract, Kind};
use crate::error::CallError;
use crate::loaded::{VersionInfo, World};
use crate::store::StoreState;

pub use crate::bindings::latest::placement::exports::sandfleet::plugin::placement::{
    ClusterLoad, Demand, DemandKind,
};

pub(crate) struct PlacementWorld;

impl World for PlacementWorld {
    const KIND: Option<Kind> = Some(Kind::Placement);
    type Pre = bindings::PlacementPolicyPre<StoreState>;
    type Instance = bindings::PlacementPolicy;

    fn pre(pre: InstancePre<StoreState>, _: &Contract) -> wasmtime::Result<Self::Pre> {
        bindings::PlacementPolicyPre::new(pre)
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }
}

/// A placement policy: picks the cluster for each warm pool and claim.
#[derive(Clone)]
pub struct PlacementPolicy(pub(crate) Handle<PlacementWorld>);

impl PlacementPolicy {
    /// Returns the index into `clusters` of the cluster that gets `demand`.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or answers with an
    /// index that is not in `clusters`.
    pub fn place(&self, demand: &Demand, clusters: &[ClusterLoad]) -> Result<u32, CallError> {
        self.0.call(
            "place",
            |instance, store| {
                instance
                    .sandfleet_plugin_placement()
                    .call_place(store, *demand, clusters)
            },
            |&index| check_index(index, clusters.len()),
        )
    }

    /// The version serving now.
    pub fn version(&self) -> VersionInfo {
        self.0.version()
    }
}

pub(crate) fn check_index(index: u32, clusters: usize) -> Result<(), String> {
    if (index as usize) < clusters {
        Ok(())
    } else {
        Err(format!(
            "cluster index {index} is out of range (there are {clusters} clusters)"
        ))
    }
}
