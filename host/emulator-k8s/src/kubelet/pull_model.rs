//! What a pull costs a node: a fixed latency, the image's bytes over the
//! node's bandwidth, and the wait for one of the node's pull slots (a
//! kubelet pulls one image at a time unless told otherwise:
//! `serializeImagePulls`, then `maxParallelImagePulls`). A directory image
//! has no bytes of its own; a size can be given per image name, so a
//! rehearsal of hundreds of images pays pulls of their real sizes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The cost of pulls on every node.
#[derive(Debug, Clone, Default)]
pub struct PullModel {
    /// What every pull costs on top of its bytes.
    pub latency: Duration,
    /// Bytes a second a node pulls at (`None`: bytes cost nothing).
    pub bandwidth: Option<u64>,
    /// Bytes of images by name, for images without a size of their own
    /// (directories).
    pub sizes: HashMap<String, u64>,
    /// Pulls a node makes at once (`None`: any number).
    pub per_node: Option<usize>,
}

impl PullModel {
    /// How long pulling `bytes` takes, latency included.
    pub(crate) fn cost(&self, bytes: u64) -> Duration {
        let transfer = match self.bandwidth {
            Some(rate) if rate > 0 => Duration::from_secs_f64(bytes as f64 / rate as f64),
            _ => Duration::ZERO,
        };
        self.latency + transfer
    }
}

/// The nodes' pull slots, and the most pulls one node made at once.
#[derive(Debug, Default)]
pub(crate) struct NodePulls {
    pub(crate) model: PullModel,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    peak: Arc<AtomicUsize>,
    started: AtomicUsize,
}

/// A pull under way on a node: its slot, given back when dropped.
pub(crate) struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
    node: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = in_flight.get_mut(&self.node) {
            *count -= 1;
        }
    }
}

impl NodePulls {
    pub(crate) fn new(model: PullModel) -> Self {
        NodePulls {
            model,
            ..NodePulls::default()
        }
    }

    /// Waits for a pull slot on `node`.
    pub(crate) async fn slot(&self, node: &str) -> Slot {
        let permit = match self.model.per_node {
            Some(limit) => {
                let semaphore = self
                    .slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(node.to_string())
                    .or_insert_with(|| Arc::new(Semaphore::new(limit.max(1))))
                    .clone();
                Some(semaphore.acquire_owned().await.expect("never closed"))
            }
            None => None,
        };
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let count = in_flight.entry(node.to_string()).or_default();
        *count += 1;
        self.peak.fetch_max(*count, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        Slot {
            _permit: permit,
            node: node.to_string(),
            in_flight: self.in_flight.clone(),
        }
    }

    /// The most pulls one node has made at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Pulls started on every node so far.
    pub(crate) fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[test]
    fn a_pull_costs_its_latency_and_its_bytes_over_the_bandwidth() {
        let model = PullModel {
            latency: Duration::from_millis(100),
            bandwidth: Some(1 << 20),
            ..PullModel::default()
        };
        assert_eq!(model.cost(1 << 21), Duration::from_millis(2100));
        assert_eq!(PullModel::default().cost(1 << 30), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_node_pulls_no_more_at_once_than_its_slots() {
        let pulls = NodePulls::new(PullModel {
            per_node: Some(2),
            ..PullModel::default()
        });
        let first = pulls.slot("a").await;
        let _second = pulls.slot("a").await;
        let _elsewhere = pulls.slot("b").await;
        let third = pulls.slot("a");
        tokio::pin!(third);
        assert!(
            third.as_mut().now_or_never().is_none(),
            "a third pull started on a node of two slots"
        );
        drop(first);
        let _third = third.await;
        assert_eq!(pulls.peak(), 2);
        assert_eq!(pulls.started(), 4);
    }
}
