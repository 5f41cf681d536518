//! What a pull tells its caller as it goes, and how the engine hears it
//! ([`sandfleet_core::PullEvent`]).

use crate::digest::Digest;

/// What a pull reports as it goes, for a display like `docker pull`'s.
/// Layer events may come from several layers at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressEvent {
    /// The reference resolved to a manifest with these layers.
    Resolved {
        /// The manifest's digest.
        manifest: Digest,
        /// The layers' blob digests and sizes, lowest first.
        layers: Vec<(Digest, u64)>,
    },
    /// The layer is in the store already.
    LayerExists {
        /// The layer's blob digest.
        layer: Digest,
    },
    /// Another pull (in this process or another) is fetching the layer.
    LayerWaiting {
        /// The layer's blob digest.
        layer: Digest,
    },
    /// Bytes of the layer downloaded so far.
    LayerProgress {
        /// The layer's blob digest.
        layer: Digest,
        /// Bytes so far.
        done: u64,
        /// Bytes in all.
        total: u64,
    },
    /// A layer's fetch failed and will be tried again.
    LayerRetrying {
        /// The layer's blob digest.
        layer: Digest,
        /// Why.
        reason: String,
    },
    /// The layer is unpacked and verified.
    LayerDone {
        /// The layer's blob digest.
        layer: Digest,
    },
}

impl From<ProgressEvent> for sandfleet_core::PullEvent {
    /// The event as a backend reports it to the engine, layers named by
    /// their digests' text.
    fn from(event: ProgressEvent) -> Self {
        use sandfleet_core::PullEvent;
        match event {
            ProgressEvent::Resolved { layers, .. } => PullEvent::Resolved {
                layers: layers
                    .into_iter()
                    .map(|(layer, size)| (layer.to_string(), size))
                    .collect(),
            },
            ProgressEvent::LayerExists { layer } => PullEvent::LayerExists {
                layer: layer.to_string(),
            },
            ProgressEvent::LayerWaiting { layer } => PullEvent::LayerWaiting {
                layer: layer.to_string(),
            },
            ProgressEvent::LayerProgress { layer, done, total } => PullEvent::LayerProgress {
                layer: layer.to_string(),
                done,
                total,
            },
            ProgressEvent::LayerRetrying { layer, reason } => PullEvent::LayerRetrying {
                layer: layer.to_string(),
                reason,
            },
            ProgressEvent::LayerDone { layer } => PullEvent::LayerDone {
                layer: layer.to_string(),
            },
        }
    }
}

/// The progress callback's type.
pub type Progress<'a> = &'a (dyn Fn(ProgressEvent) + Send + Sync);
