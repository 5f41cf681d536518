//! Reading the placement contract's cluster table.
//!
//! The host passes the clusters as columns — entry `i` of every list of
//! numbers describes cluster `i` — with the yes/no facts (unhealthy, holds
//! the image) as sorted lists of indices, because columns of numbers cross
//! into a plugin as one copy each. A policy mostly wants rows: this module
//! walks the columns as [`ClusterRow`]s without copying them.

use crate::placement::Clusters;

/// One cluster as a row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterRow {
    /// The cluster's index, the answer `place` returns to pick it.
    pub index: u32,
    /// Sandboxes that can still start on it (free pod slots).
    pub free_slots: u32,
    /// Sandboxes this host runs on it.
    pub live: u32,
    /// Warm sandboxes of the demanded image ready to be claimed.
    pub warm_ready: u32,
    /// The operator's weight (default 1).
    pub weight: u32,
    /// Free CPU in millicores.
    pub cpu_free_milli: u32,
    /// Free memory in MiB.
    pub memory_free_mib: u32,
    /// It passed its last health check.
    pub healthy: bool,
    /// It holds the demanded image (a template, a pool or a cached copy).
    pub has_image: bool,
}

impl Clusters {
    /// How many clusters the table describes.
    pub fn len(&self) -> usize {
        self.free_slots.len()
    }

    /// Whether the table describes no cluster.
    pub fn is_empty(&self) -> bool {
        self.free_slots.is_empty()
    }

    /// Every cluster, in index order. A column shorter than `free-slots`
    /// (which the host never sends) ends the rows early rather than panic.
    pub fn rows(&self) -> impl Iterator<Item = ClusterRow> + '_ {
        let count = self.len();
        self.free_slots
            .iter()
            .zip(&self.live)
            .zip(&self.warm_ready)
            .zip(&self.weight)
            .zip(&self.cpu_free_milli)
            .zip(&self.memory_free_mib)
            .zip(membership(count, &self.unhealthy))
            .zip(membership(count, &self.with_image))
            .enumerate()
            .map(
                |(
                    index,
                    (
                        ((((((&free_slots, &live), &warm_ready), &weight), &cpu), &memory), sick),
                        has_image,
                    ),
                )| {
                    ClusterRow {
                        index: index as u32,
                        free_slots,
                        live,
                        warm_ready,
                        weight,
                        cpu_free_milli: cpu,
                        memory_free_mib: memory,
                        healthy: !sick,
                        has_image,
                    }
                },
            )
    }

    /// The clusters a policy may pick: the healthy ones, or all of them
    /// when none is healthy (a degraded fleet still gets an answer).
    pub fn candidates(&self) -> impl Iterator<Item = ClusterRow> + '_ {
        let all_unhealthy = self.unhealthy.len() >= self.len();
        self.rows().filter(move |row| all_unhealthy || row.healthy)
    }

    /// Whether every cluster failed its last health check.
    pub fn all_unhealthy(&self) -> bool {
        self.unhealthy.len() >= self.len()
    }
}

/// Marks, for clusters `0..len`, whether each index is in `sorted` (a list
/// of indices in increasing order, as the contract guarantees for
/// `unhealthy` and `with-image`). Indices past `len` are ignored.
pub fn membership(len: usize, sorted: &[u32]) -> impl Iterator<Item = bool> + '_ {
    let mut next = sorted.iter().peekable();
    (0..len as u32).map(move |index| {
        while next.next_if(|&&i| i < index).is_some() {}
        next.next_if(|&&i| i == index).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Clusters {
        Clusters {
            free_slots: vec![4, 0, 9],
            live: vec![1, 2, 3],
            warm_ready: vec![0, 5, 1],
            weight: vec![1, 1, 3],
            cpu_free_milli: vec![100, 200, 300],
            memory_free_mib: vec![10, 20, 30],
            unhealthy: vec![2],
            with_image: vec![0, 2],
        }
    }

    #[test]
    fn rows_put_each_column_and_index_list_in_place() {
        let rows: Vec<ClusterRow> = table().rows().collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[2],
            ClusterRow {
                index: 2,
                free_slots: 9,
                live: 3,
                warm_ready: 1,
                weight: 3,
                cpu_free_milli: 300,
                memory_free_mib: 30,
                healthy: false,
                has_image: true,
            }
        );
        assert_eq!(
            rows.iter().map(|r| r.healthy).collect::<Vec<_>>(),
            [true, true, false]
        );
        assert_eq!(
            rows.iter().map(|r| r.has_image).collect::<Vec<_>>(),
            [true, false, true]
        );
        assert_eq!(rows[1].warm_ready, 5);
    }

    #[test]
    fn a_short_column_ends_the_rows_instead_of_panicking() {
        let mut short = table();
        short.memory_free_mib.pop();
        assert_eq!(short.rows().count(), 2);
    }

    #[test]
    fn candidates_skip_unhealthy_unless_all_are() {
        let indices = |c: &Clusters| c.candidates().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(indices(&table()), [0, 1]);
        let mut sick = table();
        sick.unhealthy = vec![0, 1, 2];
        assert!(sick.all_unhealthy());
        assert_eq!(indices(&sick), [0, 1, 2]);
        let empty = Clusters {
            free_slots: vec![],
            live: vec![],
            warm_ready: vec![],
            weight: vec![],
            cpu_free_milli: vec![],
            memory_free_mib: vec![],
            unhealthy: vec![],
            with_image: vec![],
        };
        assert!(empty.is_empty());
        assert_eq!(empty.candidates().count(), 0);
    }

    #[test]
    fn membership_follows_sorted_indices() {
        let marks: Vec<bool> = membership(5, &[1, 3]).collect();
        assert_eq!(marks, [false, true, false, true, false]);
        assert_eq!(membership(3, &[]).filter(|&m| m).count(), 0);
        assert_eq!(membership(2, &[1, 7]).collect::<Vec<_>>(), [false, true]);
    }
}
