//! The Kubernetes emulator's integration tests: one test binary, one module
//! per concern, the helpers they share in `common`.

mod agent_sandbox;
mod cluster;
mod common;
mod controllers;
mod kube_client;
mod kubectl;
mod logs;
mod oci;
mod watch;
