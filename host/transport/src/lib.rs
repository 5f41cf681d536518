//! The HTTP client policy every sandfleet driver uses.
//!
//! - One [`Transport`] (a pooled `reqwest` client) per distinct
//!   [`TransportConfig`], keyed by the whole configuration, so two clusters
//!   configured differently never share a pool ([`Clients`]).
//! - Idle connections expire below the server's keep-alive (default 3 s), so
//!   a request is never written to a socket the server is closing.
//! - Retries by what is safe ([`Call`]): a connection that failed before the
//!   request left, on any method; a connection lost before any response, and
//!   429/503 (after `Retry-After`), only for idempotent calls; commands never,
//!   unless the cluster says its commands are idempotent.
//! - Every failure becomes a [`sandfleet_core::BackendError`] of the right
//!   kind, with the server's own code and message ([`HttpFailure`]), and is
//!   counted ([`Stats`]).

mod call;
mod clients;
mod config;
mod failure;
mod retry;
mod stats;

pub use call::{Call, CallKind, NotDelivered};
pub use clients::{Clients, Transport};
pub use config::TransportConfig;
pub use failure::HttpFailure;
pub use stats::Stats;
