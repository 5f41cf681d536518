//! What the daemon keeps, apart from how it is asked over HTTP: the tables
//! of leases, snapshots, batch runs and shared pools, what commands run
//! against and the record of their commands by idempotency key, the idle
//! clock they share, the sweep that releases leases and deletes snapshots
//! idle past their time, and the errors answered last.
//! Nothing here knows of the web framework or of statuses: a refusal is a
//! [`Refusal`], a command without a result an [`executions::ExecFailure`]
//! and a snapshot or restore that failed a
//! [`snapshots::SnapshotFailure`], which `crate::error` gives their
//! statuses (the errors answered keep the status they were given as a
//! number, for operators to read).

pub(crate) mod activity;
pub(crate) mod errors;
pub(crate) mod executions;
pub(crate) mod holder;
pub(crate) mod leases;
pub(crate) mod pools;
mod refusal;
pub(crate) mod runs;
pub(crate) mod snapshots;

pub(crate) use refusal::Refusal;
