//! The r2egym component through the test kit, one test binary: R2E-Gym's
//! reference outputs, the reward parity cases, and the script run for
//! real. (One binary, not one per file: each links the test kit's
//! wasmtime.)

mod golden;
mod parity;
mod sandbox;
