//! What commands run against: a lease, or a shared-pool session pinned to
//! one of its pool's sandboxes.

use std::future::Future;

use sandfleet_engine::Lease;
use tokio::sync::{RwLock, RwLockMappedWriteGuard, RwLockReadGuard, RwLockWriteGuard};

use super::Refusal;
use super::activity::InUse;
use super::executions::Executions;

/// Anything exec runs against.
pub(crate) trait Holder: Send + Sync + 'static {
    /// How errors and spans name it: "lease `l-…`", "session `s-…`".
    fn name(&self) -> String;
    /// Its sandbox's lease.
    fn lease(&self) -> &LeaseCell;
    /// Its executions by idempotency key.
    fn executions(&self) -> &Executions;
    /// Holds its idle clock while a command runs.
    fn in_use(&self) -> InUse;
    /// Its own refusal once its sandbox is gone for good, given why the
    /// backend said the sandbox is lost when it did. A lease has none: the
    /// backend's error already says the lease's sandbox is lost; a session
    /// says its state went with it.
    fn lost(&self, _backend_says: Option<&str>) -> Option<Refusal> {
        None
    }
}

/// A sandbox's lease, held or released for good. Only this type takes the
/// lease out, and only under its write lock, so no one can see a holder
/// without a sandbox that is not released: a recycle keeps the lock from
/// taking the lease to putting its successor back.
pub(crate) struct LeaseCell(RwLock<Option<Lease>>);

impl LeaseCell {
    pub(crate) fn new(lease: Lease) -> Self {
        LeaseCell(RwLock::new(Some(lease)))
    }

    /// The lease, shared; `None` once released.
    pub(crate) async fn read(&self) -> Option<RwLockReadGuard<'_, Lease>> {
        RwLockReadGuard::try_map(self.0.read().await, Option::as_ref).ok()
    }

    /// The lease, alone; `None` once released.
    pub(crate) async fn write(&self) -> Option<RwLockMappedWriteGuard<'_, Lease>> {
        RwLockWriteGuard::try_map(self.0.write().await, Option::as_mut).ok()
    }

    /// Takes the lease out for good, once nothing holds it.
    pub(crate) async fn release(&self) -> Option<Lease> {
        self.0.write().await.take()
    }

    /// Takes the lease out for good if nothing holds it now.
    pub(crate) fn try_release(&self) -> Option<Lease> {
        self.0.try_write().ok()?.take()
    }

    /// Hands the lease to `replace` (which consumes it, as
    /// `Session::recycle` does) and keeps what it gives back, answering
    /// with it still locked. When `replace` fails, or is dropped half-way,
    /// the lease went with it and the cell stays released. `None` when it
    /// was released already.
    pub(crate) async fn replace<T, E, F>(
        &self,
        replace: impl FnOnce(Lease) -> F,
    ) -> Option<Result<(RwLockMappedWriteGuard<'_, Lease>, T), E>>
    where
        F: Future<Output = Result<(Lease, T), E>>,
    {
        let mut guard = self.0.write().await;
        let lease = guard.take()?;
        Some(replace(lease).await.map(|(successor, value)| {
            (
                RwLockWriteGuard::map(guard, |cell| cell.insert(successor)),
                value,
            )
        }))
    }
}
