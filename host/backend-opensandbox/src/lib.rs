//! sandfleet's OpenSandbox driver.
//!
//! Sandboxes are created through the lifecycle API (`POST /v1/sandboxes`,
//! never repeated: a create that may have arrived is found by its metadata
//! and deleted instead), made ready before a claim returns (execd's
//! endpoint, then `/ping`), and driven through execd: commands stream
//! their events and the driver finishes at the terminal event instead of
//! waiting out execd's grace tail. Releases are DELETEs (404 is success),
//! renewals set an absolute expiry, and reaping lists by the run's metadata.
//! Snapshots are the API's own (`/v1/snapshots`): forks are creates with a
//! `snapshotId`, and a snapshot's name carries its run, since snapshots have
//! no metadata; there is no restore in place.
//! The management API key goes to the lifecycle API and, in server-proxy
//! mode, to the proxied execd — never to a direct sandbox endpoint, which
//! runs untrusted code.

mod backend;
mod background;
mod config;
mod events;
mod exec;
mod files;
mod wire;

pub use backend::OpenSandboxBackend;
pub use config::{EndpointMode, OpenSandboxConfig, ResourceLimits, Scheme};

/// 64 bits from std's per-process random hasher keys: unique names for a
/// claim and for multipart boundaries, not secrets.
pub(crate) fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
