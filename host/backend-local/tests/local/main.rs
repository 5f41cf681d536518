//! The local backend against real processes and namespaces on this machine.

mod common;
mod escape;
mod exec;
mod images;
mod isolation;
mod lifecycle;
mod oci;
mod oci_image;
mod plain;
mod reap;
mod rootless;
mod sandbox_shell;
mod snapshots;
mod spawn;
