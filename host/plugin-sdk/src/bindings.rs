//! The bindings `wit-bindgen` generates for every world of every supported
//! contract version, one module per version (`v0_1_0`, `v0_2_0`) and world.
//!
//! Each world is generated through a one-line wrapper world of its own name
//! (`placement-policy-v0-2-0` includes `sandfleet:plugin/placement-policy@0.2.0`)
//! because `wit-bindgen` names its exported macros after the world, and two
//! versions of one world in one crate would otherwise clash. The component's
//! exports are the contract's interfaces either way, so the host cannot tell.
//! Within a version the worlds share one `types` and one `host` module; the
//! `types` interface is the same in every version, so older versions reuse
//! the newest one's Rust types (and [`crate::types::Failure`]'s helpers).

#![allow(missing_docs, reason = "generated bindings; documented in wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]
#![allow(unreachable_pub, reason = "generated bindings")]
#![allow(clippy::allow_attributes_without_reason, reason = "generated bindings")]

/// One world's bindings in module `$module`; the export macro is
/// `$module::export!`, usable from other crates.
macro_rules! world {
    ($module:ident, $dir:literal, $wrapper:literal, $bindings:literal, { $($with:tt)* }) => {
        pub mod $module {
            wit_bindgen::generate!({
                inline: $wrapper,
                path: $dir,
                pub_export_macro: true,
                default_bindings_module: $bindings,
                with: { $($with)* },
            });
        }
    };
}

/// Contract 0.2.0 (`wit/since_v0.2.0`), the latest.
pub mod v0_2_0 {
    world!(
        placement,
        "wit/since_v0.2.0",
        "package sandfleet:sdk@0.2.0; world placement-policy-v0-2-0 { include sandfleet:plugin/placement-policy@0.2.0; }",
        "sandfleet_plugin_sdk::v0_2_0::placement",
        {
            "sandfleet:plugin/types@0.2.0": generate,
            "sandfleet:plugin/host@0.2.0": generate,
        }
    );
    world!(
        sizing,
        "wit/since_v0.2.0",
        "package sandfleet:sdk@0.2.0; world sizing-policy-v0-2-0 { include sandfleet:plugin/sizing-policy@0.2.0; }",
        "sandfleet_plugin_sdk::v0_2_0::sizing",
        {
            "sandfleet:plugin/types@0.2.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.2.0": crate::v0_2_0::host,
        }
    );
    world!(
        reset,
        "wit/since_v0.2.0",
        "package sandfleet:sdk@0.2.0; world reset-check-v0-2-0 { include sandfleet:plugin/reset-check@0.2.0; }",
        "sandfleet_plugin_sdk::v0_2_0::reset",
        {
            "sandfleet:plugin/types@0.2.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.2.0": crate::v0_2_0::host,
        }
    );
    world!(
        adapter,
        "wit/since_v0.2.0",
        "package sandfleet:sdk@0.2.0; world task-adapter-v0-2-0 { include sandfleet:plugin/task-adapter@0.2.0; }",
        "sandfleet_plugin_sdk::v0_2_0::adapter",
        {
            "sandfleet:plugin/types@0.2.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.2.0": crate::v0_2_0::host,
        }
    );

    pub use placement::sandfleet::plugin::{host, types};
}

/// Contract 0.1.0 (`wit/since_v0.1.0`), for plugins that must keep loading
/// in hosts that serve only 0.1.0.
pub mod v0_1_0 {
    world!(
        placement,
        "wit/since_v0.1.0",
        "package sandfleet:sdk@0.1.0; world placement-policy-v0-1-0 { include sandfleet:plugin/placement-policy@0.1.0; }",
        "sandfleet_plugin_sdk::v0_1_0::placement",
        {
            "sandfleet:plugin/types@0.1.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.1.0": generate,
        }
    );
    world!(
        sizing,
        "wit/since_v0.1.0",
        "package sandfleet:sdk@0.1.0; world sizing-policy-v0-1-0 { include sandfleet:plugin/sizing-policy@0.1.0; }",
        "sandfleet_plugin_sdk::v0_1_0::sizing",
        {
            "sandfleet:plugin/types@0.1.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.1.0": crate::v0_1_0::host,
        }
    );
    world!(
        reset,
        "wit/since_v0.1.0",
        "package sandfleet:sdk@0.1.0; world reset-check-v0-1-0 { include sandfleet:plugin/reset-check@0.1.0; }",
        "sandfleet_plugin_sdk::v0_1_0::reset",
        {
            "sandfleet:plugin/types@0.1.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.1.0": crate::v0_1_0::host,
        }
    );
    world!(
        adapter,
        "wit/since_v0.1.0",
        "package sandfleet:sdk@0.1.0; world task-adapter-v0-1-0 { include sandfleet:plugin/task-adapter@0.1.0; }",
        "sandfleet_plugin_sdk::v0_1_0::adapter",
        {
            "sandfleet:plugin/types@0.1.0": crate::v0_2_0::types,
            "sandfleet:plugin/host@0.1.0": crate::v0_1_0::host,
        }
    );

    pub use crate::v0_2_0::types;
    pub use placement::sandfleet::plugin::host;
}
