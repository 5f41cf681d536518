//! sandfleet-images against a real registry (Debian's `docker-registry`,
//! the CNCF distribution registry) on loopback: images built and pushed
//! by the tests, pulled, imported, pruned.

mod auth;
mod bad_input;
mod import;
mod pull;
mod store_ops;
mod support;
