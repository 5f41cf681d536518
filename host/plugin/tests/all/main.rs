//! Integration tests of the plugin host with real components: one test binary,
//! one module per concern.

mod asynchronous;
mod cache;
mod fixtures;
mod guests;
mod limits;
mod loading;
mod reload;
mod versions;

pub(crate) use fixtures::*;
