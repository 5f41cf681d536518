//! Host-side bindings of every contract version this host serves.
//!
//! Each published version is frozen in `wit/since_vX.Y.Z/` and gets one module
//! here. `latest` names the newest; the typed wrappers speak its types and
//! convert older versions' values when there are any.

pub(crate) mod v0_1_0;

pub(crate) use latest::{host, types};
pub(crate) use v0_1_0 as latest;

/// Contract versions this host can load, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0"];
