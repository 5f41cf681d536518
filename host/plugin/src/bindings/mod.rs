//! Host-side bindings of every contract version this host serves.
//!
//! Each published version is frozen in `wit/since_vX.Y.Z/` and gets one module
//! here. `latest` names the newest; the typed wrappers speak its types and
//! convert older versions' values (each old module holds its conversions).

pub(crate) mod v0_1_0;
pub(crate) mod v0_2_0;

pub(crate) use latest::{host, types};
pub(crate) use v0_2_0 as latest;

/// Contract versions this host can load, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.2.0", "0.1.0"];

/// A contract version this host serves, as the typed wrappers dispatch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V0_1_0,
    V0_2_0,
}

impl Version {
    /// The version a component's exports name; `None` when this host does
    /// not serve it (`contract::identify` rejects those first).
    pub(crate) fn of(version: &str) -> Option<Version> {
        match version {
            "0.1.0" => Some(Version::V0_1_0),
            "0.2.0" => Some(Version::V0_2_0),
            _ => None,
        }
    }
}
