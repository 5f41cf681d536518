//! Creates under way against teardown: a create is counted before it checks
//! that teardown has not begun, so teardown either sees the create (and
//! waits for it, bounded) or the create sees teardown (and makes nothing).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::host::CREATE_TIMEOUT;

/// The creates under way, and whether teardown has begun.
#[derive(Debug, Default)]
pub struct CreateGate {
    closed: AtomicBool,
    creating: AtomicUsize,
    created: Notify,
}

/// One create under way, counted until it is dropped.
#[derive(Debug)]
pub struct Creating<'a>(&'a CreateGate);

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0.creating.fetch_sub(1, Ordering::SeqCst);
        self.0.created.notify_waiters();
    }
}

impl CreateGate {
    /// Counts a create until the guard is dropped; `None` once teardown has
    /// begun.
    pub fn enter(&self) -> Option<Creating<'_>> {
        self.creating.fetch_add(1, Ordering::SeqCst);
        let counted = Creating(self);
        (!self.is_closed()).then_some(counted)
    }

    /// Whether teardown has begun: a create that got this far stops before
    /// it makes a sandbox, or removes the one it made.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Begins teardown: no create enters after this; waits for those under
    /// way, at most [`CREATE_TIMEOUT`].
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + CREATE_TIMEOUT;
        loop {
            let notified = self.created.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.creating.load(Ordering::SeqCst) == 0
                || tokio::time::timeout_at(deadline, notified).await.is_err()
            {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn teardown_waits_for_a_create_that_entered_and_refuses_later_ones() {
        let gate = std::sync::Arc::new(CreateGate::default());
        let creating = gate.enter().expect("open");
        let closing = tokio::spawn({
            let gate = gate.clone();
            async move { gate.close().await }
        });
        tokio::task::yield_now().await;
        assert!(gate.is_closed());
        assert!(gate.enter().is_none());
        assert!(!closing.is_finished());
        drop(creating);
        closing.await.unwrap();
    }
}
