//! The local backend against real processes and namespaces on this machine.

mod common;
mod escape;
mod exec;
mod images;
mod isolation;
mod lifecycle;
mod plain;
mod reap;
mod spawn;
