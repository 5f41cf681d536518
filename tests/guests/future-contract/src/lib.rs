//! A placement policy built against a contract version (99.0.0) that the host
//! does not serve. Loading it must fail with a clear error.

#![allow(missing_docs, reason = "test guest")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "wit",
});

struct Future;

impl exports::sandfleet::plugin::placement::Guest for Future {
    fn place(clusters: u32) -> u32 {
        clusters
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(Future);
