//! What tests of OCI pulls share: a real registry (the CNCF distribution
//! registry from Debian's `docker-registry`) started on a free loopback
//! port ([`registry`]), and images built in Rust and pushed to it with
//! the distribution API ([`image`]): layer tars with whiteouts, opaque
//! markers, links, owners, hostile entries or real files of the host,
//! compressed three ways, with their configs, manifests and indexes; and
//! the host's own programs with their libraries, for images that run them
//! ([`host`]); and a real SWE-bench instance's image, built from Debian
//! packages and PyPI wheels in the harness's three layers and cached
//! ([`swebench`]).
//!
//! Used by `sandfleet-images`' registry tests and by the local backend's
//! tests of sandboxes of OCI images.

pub mod host;
pub mod image;
pub mod registry;
pub mod swebench;
