//! What every request handler and background task shares.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::authz::Authorizer;
use crate::executions::Counters;
use crate::faults::Faults;
use crate::kubelet::runtime::Runtime;
use crate::listed::ListedObjects;
use crate::registry::Registry;
use crate::store::Store;

/// The server's shared state.
pub(crate) struct State {
    /// Every object.
    pub(crate) store: Store,
    /// What is served.
    pub(crate) registry: Registry,
    /// The bearer token clients must send.
    pub(crate) token: String,
    /// `https://host:port`, for legacy discovery's server address.
    pub(crate) server_address: String,
    /// How often a watch that allows bookmarks gets one.
    pub(crate) bookmark_interval: Duration,
    /// Injected faults.
    pub(crate) faults: Faults,
    /// What the token's user may not do.
    pub(crate) authz: Authorizer,
    /// Runs pods as local sandboxes.
    pub(crate) runtime: Arc<Runtime>,
    /// Client connections open now.
    pub(crate) connections: AtomicUsize,
    /// What pods/exec has started.
    pub(crate) executions: Counters,
    /// Objects lists have returned.
    pub(crate) listed: ListedObjects,
}
