//! What the daemon keeps, apart from how it is asked over HTTP: the tables
//! of leases, batch runs and shared pools, what commands run against, and
//! the idle clock they share.
//! Nothing here imports axum or HTTP types; a refusal is a [`Refusal`],
//! which `crate::error` gives its status. One tie remains: a holder keeps
//! the exec layer's record of its commands by idempotency key
//! (`crate::http::Executions`), which the domain carries and never reads.

pub(crate) mod activity;
pub(crate) mod holder;
pub(crate) mod leases;
pub(crate) mod pools;
mod refusal;
pub(crate) mod runs;

pub(crate) use refusal::Refusal;
