//! What sandfleet's placement policies share: the component glue
//! ([`placement_policy!`]) and reading the contract's cluster table, where
//! each measure is a column and yes/no facts are sorted lists of cluster
//! indices.

/// Generates the `placement-policy` world's bindings in the calling crate,
/// re-exports its types (`Demand`, `DemandKind`, `Clusters`, `Failure`,
/// `FailureKind`), and exports `$place` — a
/// `fn(&Demand, &Clusters) -> Result<u32, Failure>` — as the component's
/// `place`. The calling crate lives in `policies/` and depends on
/// `wit-bindgen`. Natively the export is left out: the export names contain
/// `:`, which a host shared library cannot link, and native builds exist for
/// tests and benchmarks of `$place` itself.
#[macro_export]
macro_rules! placement_policy {
    ($place:path) => {
        wit_bindgen::generate!({
            world: "placement-policy",
            path: "../../wit/since_v0.1.0",
        });

        pub use exports::sandfleet::plugin::placement::{Clusters, Demand, DemandKind};
        pub use sandfleet::plugin::types::{Failure, FailureKind};

        struct Policy;

        impl exports::sandfleet::plugin::placement::Guest for Policy {
            fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
                $place(&demand, &clusters)
            }
        }

        #[cfg(target_arch = "wasm32")]
        export!(Policy);
    };
}

/// Marks, for clusters `0..len`, whether each index is in `sorted` (a list
/// of indices in increasing order, as the contract guarantees).
pub fn membership(len: usize, sorted: &[u32]) -> impl Iterator<Item = bool> + '_ {
    let mut next = sorted.iter().peekable();
    (0..len as u32).map(move |index| {
        while next.next_if(|&&i| i < index).is_some() {}
        next.next_if(|&&i| i == index).is_some()
    })
}

/// The clusters a policy may pick: the healthy ones, or all of them when
/// none is healthy (a degraded fleet still gets an answer).
pub fn candidates(len: usize, unhealthy: &[u32]) -> impl Iterator<Item = usize> + '_ {
    let all_unhealthy = unhealthy.len() >= len;
    membership(len, unhealthy)
        .enumerate()
        .filter(move |&(_, sick)| all_unhealthy || !sick)
        .map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_follows_sorted_indices() {
        let marks: Vec<bool> = membership(5, &[1, 3]).collect();
        assert_eq!(marks, [false, true, false, true, false]);
        assert_eq!(membership(3, &[]).filter(|&m| m).count(), 0);
        // Indices past the end are ignored.
        assert_eq!(membership(2, &[1, 7]).collect::<Vec<_>>(), [false, true]);
    }

    #[test]
    fn candidates_skip_unhealthy_unless_all_are() {
        assert_eq!(candidates(4, &[0, 2]).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(candidates(2, &[0, 1]).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(candidates(0, &[]).count(), 0);
    }
}
