//! Bindings of contract 0.2.0 (`wit/since_v0.2.0`), the latest.
//!
//! The first world generates the shared interfaces (`host`, `types`); the
//! others reuse them through `with`, so one `host` implementation serves all.

#![allow(missing_docs, reason = "generated bindings; documented in wit/")]
#![allow(unreachable_pub, reason = "generated bindings")]

pub(crate) mod placement {
    wasmtime::component::bindgen!({
        world: "placement-policy",
        path: "../../wit/since_v0.2.0",
    });
}

pub(crate) mod sizing {
    wasmtime::component::bindgen!({
        world: "sizing-policy",
        path: "../../wit/since_v0.2.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": super::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) mod reset {
    wasmtime::component::bindgen!({
        world: "reset-check",
        path: "../../wit/since_v0.2.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": super::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) mod adapter {
    wasmtime::component::bindgen!({
        world: "task-adapter",
        path: "../../wit/since_v0.2.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": super::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) use placement::sandfleet::plugin::host;
pub(crate) use placement::sandfleet::plugin::types;
