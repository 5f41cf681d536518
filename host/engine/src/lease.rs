//! Keeping claimed sandboxes alive on backends whose sandboxes expire
//! ([`sandfleet_core::Capabilities::lease_ttl`]): a renewal every third of
//! the TTL until the sandbox is released. A renewal that fails for good
//! marks the lease lost; the task then ends as `infra_error`, never with a
//! grade taken from a sandbox that may have gone.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sandfleet_core::{Backend, SandboxHandle};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::retry::Retries;

/// The renewals of one claimed sandbox; dropping it stops them.
pub(crate) struct LeaseKeeper {
    renewing: Option<JoinHandle<()>>,
    lost: Arc<OnceLock<String>>,
}

impl LeaseKeeper {
    /// Renews `sandbox` on `backend` every `ttl / 3` (nothing when `ttl` is
    /// `None`), each renewal retried within `retries`.
    pub(crate) fn keep(
        backend: Arc<dyn Backend>,
        sandbox: SandboxHandle,
        ttl: Option<Duration>,
        retries: Arc<Retries>,
    ) -> Self {
        let lost = Arc::new(OnceLock::new());
        let renewing = ttl.map(|ttl| {
            let lost = lost.clone();
            tokio::spawn(
                async move {
                    let every = ttl / 3;
                    loop {
                        tokio::time::sleep(every).await;
                        let renewed = retries
                            .idempotent("renewal", || backend.renew(&sandbox, ttl))
                            .await;
                        if let Err(error) = renewed {
                            tracing::warn!(sandbox = %sandbox.id, %error, "lease lost");
                            let _ = lost.set(format!(
                                "the lease on sandbox {} was lost: {error}",
                                sandbox.id
                            ));
                            return;
                        }
                    }
                }
                .in_current_span(),
            )
        });
        LeaseKeeper { renewing, lost }
    }

    /// Why the lease was lost, if it was.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        if let Some(renewing) = self.renewing.take() {
            renewing.abort();
        }
    }
}
