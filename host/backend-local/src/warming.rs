//! Warm pools: how many ready sandboxes each template keeps, filling them
//! within the free slots, and waiting until one is ready.

use std::sync::Arc;
use std::time::Instant;

use sandfleet_core::{Labels, PoolStatus, TemplateRef};
use tokio::sync::OwnedSemaphorePermit;

use crate::backend::{Inner, WARM_CREATE_TIMEOUT};
use crate::error::LocalError;
use crate::inventory::Held;
use crate::pool::Pool;
use crate::sandbox::Sandbox;
use crate::state::{PoolRecord, remove_record, write_record};
use crate::templates::Template;

impl Inner {
    pub(crate) async fn warm(
        self: &Arc<Self>,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), LocalError> {
        let run_id = Inner::run_of(labels, template)?;
        let name = &template.name;
        let made = self.live().template(&run_id, name)?;
        if replicas > self.max_sandboxes {
            return Err(LocalError::Rejected(format!(
                "a warm pool of {replicas} for template `{name}` exceeds max_sandboxes = {}",
                self.max_sandboxes
            )));
        }
        write_record(
            &self.site.run(&run_id).pool(name),
            &PoolRecord {
                template: name.to_string(),
                desired: replicas,
            },
        )?;
        let surplus = self
            .live()
            .run(&run_id)
            .pools
            .entry(name.to_string())
            .or_default()
            .set_desired(replicas);
        self.destroy_all(surplus).await;
        self.refill(&made);
        Ok(())
    }

    pub(crate) async fn unwarm(self: &Arc<Self>, template: &TemplateRef) -> Result<(), LocalError> {
        let surplus = self
            .live()
            .pool(&template.run_id, &template.name)
            .map(|pool| pool.set_desired(0))
            .unwrap_or_default();
        remove_record(&self.site.run(&template.run_id).pool(&template.name))?;
        self.destroy_all(surplus).await;
        self.refill_all();
        Ok(())
    }

    pub(crate) fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, LocalError> {
        let mut live = self.live();
        live.template(&template.run_id, &template.name)?;
        Ok(live
            .pool(&template.run_id, &template.name)
            .map(|pool| pool.status())
            .unwrap_or_default())
    }

    /// Waits for the pool to have `at_least` ready sandboxes, woken by every
    /// change to a pool rather than polling.
    pub(crate) async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, LocalError> {
        loop {
            // Registered before the check, so a change between the two wakes it.
            let changed = self.pools_changed.notified();
            let status = self.pool_status(template)?;
            if status.ready >= at_least {
                return Ok(status);
            }
            let budget = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(budget, changed).await.is_err() {
                return Err(LocalError::Timeout {
                    what: format!(
                        "warm pool of `{}` to reach {at_least} ready (it has {})",
                        template.image, status.ready
                    ),
                    after: budget,
                });
            }
        }
    }

    /// Starts making warm sandboxes for `template`'s pool, as far as it is
    /// short and slots are free. Creations that fail are logged and not
    /// retried; the next claim or release refills again.
    pub(crate) fn refill(self: &Arc<Self>, template: &Arc<Template>) {
        let mut slots = Vec::new();
        let warming = {
            let mut live = self.live();
            let run = live.run(&template.run_id);
            let Some(pool) = run.pools.get_mut(&template.name) else {
                return;
            };
            for _ in 0..pool.shortfall() {
                let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
                    break;
                };
                pool.creation_started();
                slots.push(slot);
            }
            run.warming.clone()
        };
        for slot in slots {
            warming.spawn(Arc::clone(self).make_warm(Arc::clone(template), slot));
        }
    }

    /// Refills every pool (after slots were freed).
    pub(crate) fn refill_all(self: &Arc<Self>) {
        let templates = self.live().pooled_templates();
        for template in &templates {
            self.refill(template);
        }
    }

    async fn make_warm(self: Arc<Self>, template: Arc<Template>, slot: OwnedSemaphorePermit) {
        let made = {
            // The semaphore is never closed, so this always gets a permit.
            let _turn = self.starts.acquire().await;
            let deadline = Instant::now() + WARM_CREATE_TIMEOUT;
            Sandbox::create(
                &self.site,
                Arc::clone(&template),
                Vec::new(),
                Vec::new(),
                deadline,
            )
            .await
        };
        let made = match made {
            Ok(sandbox) => Some(Held {
                sandbox: Arc::new(sandbox),
                _slot: slot,
            }),
            Err(error) => {
                tracing::warn!(cluster = %self.name, template = %template.name, %error,
                    "making a warm sandbox failed");
                None
            }
        };
        let surplus = match self.live().pool(&template.run_id, &template.name) {
            Some(pool) => pool.creation_finished(made),
            // The pool was reaped meanwhile.
            None => made,
        };
        self.pools_changed.notify_waiters();
        if let Some(surplus) = surplus {
            self.destroy_all(vec![surplus]).await;
            self.refill_all();
        }
    }

    /// A ready sandbox from `template`'s pool, when there is one.
    pub(crate) fn take_warm(&self, template: &Template) -> Option<Held> {
        let taken = self
            .live()
            .pool(&template.run_id, &template.name)
            .and_then(Pool::take);
        if taken.is_some() {
            self.pools_changed.notify_waiters();
        }
        taken
    }
}
