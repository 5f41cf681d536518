//! The `placement-policy` world.

use super::off_runtime;
use crate::error::{CallError, CallErrorKind};

pub use crate::bindings::latest::placement::exports::sandfleet::plugin::placement::{
    Clusters, Demand, DemandKind,
};

/// One cluster's state, a row of the [`Clusters`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterState {
    /// Passed its last health check.
    pub healthy: bool,
    /// Holds the demanded image (template, pool or cached copy).
    pub has_image: bool,
    /// Sandboxes that can still start there.
    pub free_slots: u32,
    /// Sandboxes this host runs there.
    pub live: u32,
    /// Warm sandboxes of the demanded image ready to be claimed.
    pub warm_ready: u32,
    /// The operator's weight.
    pub weight: u32,
    /// Free CPU in millicores.
    pub cpu_free_milli: u32,
    /// Free memory in MiB.
    pub memory_free_mib: u32,
}

impl Clusters {
    /// The columnar table the contract passes, from one row per cluster.
    pub fn from_states(states: &[ClusterState]) -> Self {
        let column = |f: fn(&ClusterState) -> u32| states.iter().map(f).collect();
        let indices = |f: fn(&ClusterState) -> bool| {
            (0..states.len() as u32)
                .filter(|&i| f(&states[i as usize]))
                .collect()
        };
        Clusters {
            free_slots: column(|s| s.free_slots),
            live: column(|s| s.live),
            warm_ready: column(|s| s.warm_ready),
            weight: column(|s| s.weight),
            cpu_free_milli: column(|s| s.cpu_free_milli),
            memory_free_mib: column(|s| s.memory_free_mib),
            unhealthy: indices(|s| !s.healthy),
            with_image: indices(|s| s.has_image),
        }
    }

    fn column_lengths(&self) -> [(&'static str, usize); 6] {
        [
            ("free-slots", self.free_slots.len()),
            ("live", self.live.len()),
            ("warm-ready", self.warm_ready.len()),
            ("weight", self.weight.len()),
            ("cpu-free-milli", self.cpu_free_milli.len()),
            ("memory-free-mib", self.memory_free_mib.len()),
        ]
    }

    fn index_lists(&self) -> [(&'static str, &[u32]); 2] {
        [
            ("unhealthy", &self.unhealthy),
            ("with-image", &self.with_image),
        ]
    }

    /// How many clusters the table describes.
    pub fn len(&self) -> usize {
        self.free_slots.len()
    }

    /// True when it describes none.
    pub fn is_empty(&self) -> bool {
        self.free_slots.is_empty()
    }
}

super::typed_world!(
    /// A placement policy: picks the cluster for each warm pool and claim.
    PlacementPolicy,
    PlacementWorld,
    Placement,
    placement::{PlacementPolicyPre, PlacementPolicy},
    PlacementPre,
    PlacementInstance
);

impl PlacementPolicy {
    /// [`PlacementPolicy::place_blocking`] on tokio's blocking pool; the form
    /// to call from async code (see [`PlacementPolicy`]).
    ///
    /// # Errors
    ///
    /// As [`PlacementPolicy::place_blocking`]; [`CallErrorKind::HostPanic`]
    /// when the host panicked during the call.
    pub fn place(
        &self,
        demand: &Demand,
        clusters: &Clusters,
    ) -> impl Future<Output = Result<u32, CallError>> + Send + 'static + use<> {
        let (this, demand, clusters) = (self.clone(), *demand, clusters.clone());
        off_runtime(self.0.plugin(), "place", move || {
            this.place_blocking(&demand, &clusters)
        })
    }

    /// Returns the index of the cluster that gets `demand`, on the calling
    /// thread, which must not be an async runtime's worker.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or answers with an
    /// index that is not a cluster's.
    pub fn place_blocking(&self, demand: &Demand, clusters: &Clusters) -> Result<u32, CallError> {
        if let Err(detail) = check_columns(clusters.column_lengths(), clusters.index_lists()) {
            let plugin = self.0.current();
            return Err(plugin.error("place", CallErrorKind::InvalidArguments(detail)));
        }
        self.0.call(
            "place",
            |instance, store| match instance {
                PlacementInstance::V0_1_0(old) => old.sandfleet_plugin_placement().call_place(
                    store,
                    demand.into(),
                    &clusters.into(),
                ),
                PlacementInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_placement()
                    .call_place(store, *demand, clusters),
            },
            |&index| check_index(index, clusters.len()),
        )
    }
}

/// Every column describes the same clusters, and the index lists name
/// clusters in increasing order.
pub(crate) fn check_columns<'a>(
    lengths: impl IntoIterator<Item = (&'static str, usize)>,
    index_lists: impl IntoIterator<Item = (&'static str, &'a [u32])>,
) -> Result<(), String> {
    let mut lengths = lengths.into_iter();
    let Some((first, count)) = lengths.next() else {
        return Ok(());
    };
    if let Some((name, len)) = lengths.find(|&(_, len)| len != count) {
        return Err(format!(
            "column `{name}` has {len} entries but `{first}` has {count}; every column needs one entry per cluster"
        ));
    }
    for (name, indices) in index_lists {
        if let Some(pair) = indices.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(format!(
                "`{name}` must list cluster indices in increasing order, but {} comes before {}",
                pair[0], pair[1]
            ));
        }
        if let Some(&index) = indices.iter().find(|&&i| i as usize >= count) {
            return Err(format!(
                "`{name}` names cluster {index}, but there are {count} clusters"
            ));
        }
    }
    Ok(())
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
