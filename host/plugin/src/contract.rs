//! Which world and contract version a component implements, read from its
//! export names (`sandfleet:plugin/<interface>@<version>`).

use std::fmt;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::bindings::SUPPORTED_VERSIONS;
use crate::error::LoadError;

const PACKAGE_PREFIX: &str = "sandfleet:plugin/";

/// The four plugin worlds of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `placement-policy`: picks a cluster.
    Placement,
    /// `sizing-policy`: plans warm pools.
    Sizing,
    /// `reset-check`: resets and verifies a sandbox for reuse.
    Reset,
    /// `task-adapter`: loads, prepares and grades tasks.
    Adapter,
}

impl Kind {
    /// Every kind, in contract order.
    pub const ALL: [Kind; 4] = [Kind::Placement, Kind::Sizing, Kind::Reset, Kind::Adapter];

    /// The WIT world name.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Placement => "placement-policy",
            Kind::Sizing => "sizing-policy",
            Kind::Reset => "reset-check",
            Kind::Adapter => "task-adapter",
        }
    }

    /// The interface the world exports.
    pub fn interface(self) -> &'static str {
        match self {
            Kind::Placement => "placement",
            Kind::Sizing => "sizing",
            Kind::Reset => "reset",
            Kind::Adapter => "adapter",
        }
    }

    /// The built-in that answers for a faulting plugin of this kind that
    /// has no built-in of its own name; `None` for adapters, since another
    /// adapter cannot read this one's tasks.
    pub fn default_builtin(self) -> Option<&'static str> {
        match self {
            Kind::Placement => Some("least-loaded"),
            Kind::Sizing => Some("proportional"),
            Kind::Reset => Some("git-restore"),
            Kind::Adapter => None,
        }
    }

    fn from_interface(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.interface() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.world())
    }
}

/// What a component implements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The world.
    pub kind: Kind,
    /// The contract version, e.g. `0.1.0`.
    pub version: String,
    /// Every export name of the component.
    pub exports: Vec<String>,
}

impl Contract {
    /// The component's export that implements the world, e.g.
    /// `sandfleet:plugin/placement@0.1.0`.
    pub fn export_name(&self) -> String {
        format!("{PACKAGE_PREFIX}{}@{}", self.kind.interface(), self.version)
    }
}

/// Rejects bytes that are not a component before spending time compiling them.
pub(crate) fn check_component_header(bytes: &[u8], origin: &str) -> Result<(), LoadError> {
    const MAGIC: &[u8] = b"\0asm";
    let not_component = |detail: &str| LoadError::NotComponent {
        origin: origin.to_string(),
        detail: detail.to_string(),
    };
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(not_component(if bytes.is_empty() {
            "the file is empty"
        } else {
            "no WebAssembly header"
        }));
    }
    // Bytes 4..8: version and layer; layer 1 is a component, 0 a core module.
    match bytes[6..8] {
        [1, 0] => Ok(()),
        [0, 0] => Err(not_component(
            "it is a core module; build it as a component (target wasm32-wasip2)",
        )),
        _ => Err(not_component("unknown WebAssembly layer")),
    }
}

/// Reads the world and contract version from a compiled component's exports.
pub(crate) fn identify(
    engine: &Engine,
    component: &Component,
    origin: &str,
) -> Result<Contract, LoadError> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let mut found = Vec::new();
    for name in &exports {
        let Some(rest) = name.strip_prefix(PACKAGE_PREFIX) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if let Some(kind) = Kind::from_interface(interface) {
            found.push((kind, version.to_string()));
        }
    }
    let [(kind, version)] = found.as_slice() else {
        return Err(LoadError::NoWorld {
            origin: origin.to_string(),
            exports: if exports.is_empty() {
                "none".to_string()
            } else {
                exports.join(", ")
            },
        });
    };
    if !SUPPORTED_VERSIONS.contains(&version.as_str()) {
        return Err(LoadError::UnknownVersion {
            origin: origin.to_string(),
            found: if version.is_empty() {
                "(unversioned)".to_string()
            } else {
                version.clone()
            },
            supported: SUPPORTED_VERSIONS.join(", "),
        });
    }
    Ok(Contract {
        kind: *kind,
        version: version.clone(),
        exports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_modules_and_garbage_are_told_apart() {
        let core = b"\0asm\x01\0\0\0";
        let component = b"\0asm\x0d\0\x01\0";
        assert!(check_component_header(component, "x").is_ok());
        let err = check_component_header(core, "x.wasm")
            .unwrap_err()
            .to_string();
        assert!(err.contains("core module"), "{err}");
        let err = check_component_header(b"hello world", "x.wasm")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no WebAssembly header"), "{err}");
        let err = check_component_header(b"", "x.wasm")
            .unwrap_err()
            .to_string();
        assert!(err.contains("empty"), "{err}");
    }
}
