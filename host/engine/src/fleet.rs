//! The fleet as the engine sees it: clusters, the templates and warm pools
//! it made on them, and placement decisions. Keeps its own count of what it
//! asked for, because asking every backend before every decision is slow.
//! Every request that is safe to repeat goes through the run's retries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, LABEL_TASK, RunId, SandboxHandle,
    TemplateRef, TemplateSpec, label_value, template_name,
};
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind, PlacementPolicy};
use sandfleet_report::events::SegmentKind;
use tokio::sync::Mutex;
use tracing::Instrument;

use crate::error::{RunError, StepError};
use crate::forks::PreparedSnapshots;
use crate::images::ImageTable;
use crate::phases::{Phase, PhaseTimes};
use crate::prepare::PreparedPools;
use crate::rate::CreatePace;
use crate::retry::Retries;
use crate::settings::FleetSettings;
use crate::timeline::{On, Timeline};

/// Consecutive failures after which placement treats a cluster as
/// unhealthy, until a request to it succeeds again.
const UNHEALTHY_AFTER: u32 = 3;

/// One configured backend instance.
#[derive(Clone)]
pub struct Cluster {
    /// Its name in the configuration.
    pub name: String,
    /// The kind of backend, for reports only (the engine never branches on it).
    pub kind: String,
    /// The operator's weight for placement.
    pub weight: u32,
    /// The driver.
    pub backend: Arc<dyn Backend>,
    /// The host's pace of sandbox creation, shared with every other
    /// cluster and run built from the same connections (none: unpaced).
    pub pace: Option<Arc<CreatePace>>,
}

/// A sandbox the engine holds, with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) cluster: usize,
    pub(crate) image: usize,
    pub(crate) handle: SandboxHandle,
    /// Set, shared by every copy, when a call on the sandbox said it is
    /// gone ([`sandfleet_core::ErrorKind::SandboxLost`]).
    lost: Arc<OnceLock<String>>,
    /// It is a fork of its image's prepared snapshot: its prepare hook has
    /// run already ([`crate::forks`]).
    pub(crate) prepared: bool,
}

impl Claimed {
    /// Sandbox `handle` of `image`, claimed on `cluster`.
    pub(crate) fn new(cluster: usize, image: usize, handle: SandboxHandle) -> Self {
        Claimed {
            cluster,
            image,
            handle,
            lost: Arc::default(),
            prepared: false,
        }
    }

    /// Notes that `error`, from a call on the sandbox, says it is gone.
    pub(crate) fn note(&self, error: &BackendError) {
        if error.kind() == ErrorKind::SandboxLost {
            let _ = self.lost.set(error.to_string());
        }
    }

    /// Why the sandbox is gone, when a call on it said so.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }
}

#[derive(Default)]
struct Books {
    templates: HashMap<(usize, usize), TemplateRef>,
    /// Image → (cluster, replicas asked for) of its warm pool.
    pools: HashMap<usize, (usize, u32)>,
    /// Claimed sandboxes per cluster.
    claimed: Vec<u32>,
}

/// Counters for the report.
#[derive(Debug, Default)]
pub(crate) struct FleetCounts {
    pub(crate) claims: AtomicU64,
    pub(crate) warm_total: AtomicU64,
    pub(crate) warm_peak: AtomicU64,
    /// Sandboxes whose prepare hook passed.
    pub(crate) prepared: AtomicU64,
    /// Sandboxes released because their prepare hook failed or overran.
    pub(crate) prepare_failed: AtomicU64,
    /// Sandboxes forked from their image's prepared snapshot.
    pub(crate) forked: AtomicU64,
    /// Recycled sandboxes reset by restoring their snapshot (the rest of
    /// the resets were the reset check's).
    pub(crate) restored: AtomicU64,
    /// Set-ups run for group members.
    pub(crate) group_set_ups: AtomicU64,
    /// Group members that ran in a fork of their group's set-up.
    pub(crate) group_forks: AtomicU64,
}

pub(crate) struct Fleet {
    pub(crate) run_id: RunId,
    pub(crate) clusters: Vec<Cluster>,
    capacity: Vec<Capacity>,
    capabilities: Vec<Capabilities>,
    pub(crate) images: ImageTable,
    pub(crate) settings: FleetSettings,
    placement: PlacementPolicy,
    pub(crate) phases: Arc<PhaseTimes>,
    pub(crate) timeline: Arc<Timeline>,
    pub(crate) retries: Arc<Retries>,
    books: Mutex<Books>,
    /// Pools of prepared sandboxes, for images with a prepare hook.
    pub(crate) prepared: PreparedPools,
    /// Prepared snapshots, for images with a prepare hook on clusters
    /// with snapshots.
    pub(crate) prepared_snapshots: PreparedSnapshots,
    /// Warm sandboxes kept now, in backend pools and prepared ones.
    warm_now: AtomicU64,
    /// Consecutive failed requests per cluster.
    failures: Vec<AtomicU32>,
    sequence: AtomicU64,
    pub(crate) counts: FleetCounts,
}

/// What a fleet is made of.
pub(crate) struct FleetSpec {
    pub(crate) run_id: RunId,
    pub(crate) clusters: Vec<Cluster>,
    /// Per cluster, what it said it can hold.
    pub(crate) capacity: Vec<Capacity>,
    /// The run's images; sandboxes and pools refer to them by index.
    pub(crate) images: Vec<String>,
    pub(crate) settings: FleetSettings,
    pub(crate) placement: PlacementPolicy,
    /// Where its steps are drawn (a batch run's `events.jsonl`).
    pub(crate) timeline: Arc<Timeline>,
}

impl Fleet {
    pub(crate) fn new(spec: FleetSpec, phases: Arc<PhaseTimes>, retries: Arc<Retries>) -> Self {
        let FleetSpec {
            run_id,
            clusters,
            capacity,
            images,
            settings,
            placement,
            timeline,
        } = spec;
        let books = Books {
            claimed: vec![0; clusters.len()],
            ..Books::default()
        };
        Fleet {
            capabilities: clusters.iter().map(|c| c.backend.capabilities()).collect(),
            failures: clusters.iter().map(|_| AtomicU32::new(0)).collect(),
            run_id,
            clusters,
            capacity,
            images: ImageTable::new(images),
            settings,
            placement,
            phases,
            timeline,
            retries,
            books: Mutex::new(books),
            sequence: AtomicU64::new(0),
            counts: FleetCounts::default(),
            prepared: PreparedPools::default(),
            prepared_snapshots: PreparedSnapshots::default(),
            warm_now: AtomicU64::new(0),
        }
    }

    /// Notes how a request to `cluster` went, for its health.
    fn health<T>(&self, cluster: usize, result: &Result<T, BackendError>) {
        let failures = &self.failures[cluster];
        match result {
            Ok(_) => failures.store(0, Ordering::Relaxed),
            Err(_) => {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Warms the pools of `images` with `replicas` each, in waves of at most
    /// `warm_create_budget` new sandboxes, waiting for each wave to be ready.
    /// Clusters whose backend has no pools are skipped (every claim there
    /// is made on demand).
    /// Images with a prepare hook get a pool of prepared sandboxes instead
    /// (see [`crate::prepare`]), filled alongside.
    pub(crate) async fn warm(self: &Arc<Self>, images: &[(usize, u32)]) -> Result<(), RunError> {
        let mut prepared = tokio::task::JoinSet::new();
        for &(image, replicas) in images
            .iter()
            .filter(|(i, r)| *r > 0 && self.hook(*i).is_some())
        {
            let fleet = Arc::clone(self);
            prepared
                .spawn(async move { fleet.fill_prepared(image, replicas).await }.in_current_span());
        }
        let started = Instant::now();
        let backend_pools = self.warm_backend_pools(images).await;
        let mut filled = Ok(());
        while let Some(done) = prepared.join_next().await {
            let done = done
                .map_err(|e| RunError::Internal(format!("filling a prepared pool failed: {e}")))
                .and_then(|filled| filled.map_err(RunError::from));
            if filled.is_ok() {
                filled = done;
            }
        }
        if self.settings.prepare.is_empty() {
            return backend_pools;
        }
        self.phases.record(Phase::WaitPoolReady, started.elapsed());
        backend_pools.and(filled)
    }

    /// The backend warm pools of the images without a prepare hook.
    async fn warm_backend_pools(&self, images: &[(usize, u32)]) -> Result<(), RunError> {
        let mut placed = Vec::new();
        for &(image, replicas) in images
            .iter()
            .filter(|(i, r)| *r > 0 && self.hook(*i).is_none())
        {
            // Kept warm from an earlier window or epoch (`keep_warm`).
            let warm_already = self
                .books
                .lock()
                .await
                .pools
                .get(&image)
                .is_some_and(|&(_, r)| r >= replicas);
            if warm_already {
                continue;
            }
            let started = Instant::now();
            let cluster = self.place(DemandKind::Pool, image, replicas).await?;
            let Some(pools) = self.clusters[cluster].backend.pools() else {
                continue;
            };
            let template = self.template(cluster, image).await?;
            self.phases.record(Phase::CreateWarmpool, started.elapsed());
            placed.push((cluster, pools, image, template, replicas));
        }
        let budget = self.settings.warm_create_budget.max(1);
        let mut asked: Vec<u32> = vec![0; placed.len()];
        let labels = self.run_id.labels();
        while asked.iter().zip(&placed).any(|(a, p)| *a < p.4) {
            let mut left = budget;
            let started = Instant::now();
            for (slot, (cluster, pools, image, template, replicas)) in placed.iter().enumerate() {
                let more = (replicas - asked[slot]).min(left);
                if more == 0 {
                    continue;
                }
                if let Some(pace) = &self.clusters[*cluster].pace {
                    pace.admit(more).await;
                }
                asked[slot] += more;
                left -= more;
                let size = asked[slot];
                let warmed = self
                    .retries
                    .idempotent("warm", || pools.warm(template, size, &labels))
                    .await;
                self.health(*cluster, &warmed);
                warmed.map_err(|e| StepError::backend("warm", e))?;
                self.note_warm(*image, *cluster, size).await;
            }
            self.phases.record(Phase::CreateWarmpool, started.elapsed());
            let started = Instant::now();
            for (slot, (_, pools, _, template, _)) in placed.iter().enumerate() {
                let deadline = Instant::now() + self.settings.pool_ready_timeout;
                let at_least = asked[slot];
                self.retries
                    .idempotent("a pool's readiness", || {
                        pools.wait_pool_ready(template, at_least, deadline)
                    })
                    .await?;
            }
            self.phases.record(Phase::WaitPoolReady, started.elapsed());
        }
        Ok(())
    }

    /// Releases the pools of `images`; idempotent.
    pub(crate) async fn unwarm(&self, images: &[usize]) -> Result<(), RunError> {
        for &image in images {
            if self.hook(image).is_some() {
                self.unwarm_prepared(image).await;
                continue;
            }
            let pool = self.books.lock().await.pools.remove(&image);
            let Some((cluster, replicas)) = pool else {
                continue;
            };
            // Only pools a backend has are in the books.
            let Some(pools) = self.clusters[cluster].backend.pools() else {
                continue;
            };
            let template = self.template(cluster, image).await?;
            self.retries
                .idempotent("unwarm", || pools.unwarm(&template))
                .await?;
            self.timeline
                .pool(&self.clusters[cluster].name, &self.images[image], 0);
            self.note_fewer_warm(replicas);
        }
        Ok(())
    }

    /// The backend warm pools kept now: cluster, image and template.
    pub(crate) async fn warm_pools(&self) -> Vec<(usize, usize, TemplateRef)> {
        let books = self.books.lock().await;
        let mut pools: Vec<_> = books
            .pools
            .iter()
            .filter_map(|(&image, &(cluster, _))| {
                let template = books.templates.get(&(cluster, image))?;
                Some((cluster, image, template.clone()))
            })
            .collect();
        pools.sort_unstable_by_key(|(cluster, image, _)| (*cluster, *image));
        pools
    }

    /// Images whose pools are warm now.
    pub(crate) async fn warm_images(&self) -> Vec<usize> {
        let mut images: Vec<usize> = self.books.lock().await.pools.keys().copied().collect();
        images.extend(self.prepared_images());
        images.sort_unstable();
        images.dedup();
        images
    }

    /// Claims a sandbox of `image` for `task_id`, on the cluster placement picks.
    pub(crate) async fn claim(&self, image: usize, task_id: &str) -> Result<Claimed, StepError> {
        let started = Instant::now();
        let cluster = self.place(DemandKind::Claim, image, 1).await?;
        let span = tracing::info_span!(
            "claim",
            cluster = %self.clusters[cluster].name,
            image = %self.images[image],
            sandbox = tracing::field::Empty,
        );
        let recorded = span.clone();
        async {
            let template = self.template(cluster, image).await?;
            let warm_there = self
                .books
                .lock()
                .await
                .pools
                .get(&image)
                .is_some_and(|&(c, _)| c == cluster);
            if !warm_there && let Some(pace) = &self.clusters[cluster].pace {
                pace.admit(1).await;
            }
            let mut labels = self.run_id.labels();
            labels.insert(LABEL_TASK.to_string(), label_value(task_id));
            let (handle, prepared) =
                match self.fork_prepared(cluster, image, &template, &labels).await {
                    Some(forked) => (forked?, true),
                    None => {
                        let deadline = Instant::now() + self.settings.claim_timeout;
                        let backend = &self.clusters[cluster].backend;
                        let claimed = self
                            .retries
                            .idempotent("claim", || backend.claim(&template, &labels, deadline))
                            .await;
                        self.health(cluster, &claimed);
                        (claimed.map_err(|e| StepError::backend("claim", e))?, false)
                    }
                };
            recorded.record("sandbox", handle.id.as_str());
            tracing::debug!("claimed");
            self.books.lock().await.claimed[cluster] += 1;
            self.counts.claims.fetch_add(1, Ordering::Relaxed);
            self.phases.record(Phase::Claim, started.elapsed());
            let claimed = Claimed::new(cluster, image, handle);
            self.timeline
                .segment(SegmentKind::Claim, started, self.on(&claimed), true);
            Ok(Claimed {
                prepared,
                ..claimed
            })
        }
        .instrument(span)
        .await
    }

    /// Takes sandboxes of `image` that `cluster` made without a claim
    /// (forks of a snapshot) onto the books, as claims.
    pub(crate) async fn adopt(
        &self,
        cluster: usize,
        image: usize,
        handles: Vec<SandboxHandle>,
    ) -> Vec<Claimed> {
        let count = handles.len() as u64;
        self.books.lock().await.claimed[cluster] += count as u32;
        self.counts.claims.fetch_add(count, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|handle| Claimed::new(cluster, image, handle))
            .collect()
    }

    /// Releases a claimed sandbox on its backend (idempotent there); the
    /// books are kept by [`Fleet::forget_claim`], once.
    pub(crate) async fn release_on_backend(&self, claimed: &Claimed) -> Result<(), BackendError> {
        let released = self.clusters[claimed.cluster]
            .backend
            .release(&claimed.handle)
            .await;
        self.health(claimed.cluster, &released);
        released
    }

    /// Takes a released (or abandoned) sandbox off the books.
    pub(crate) async fn forget_claim(&self, claimed: &Claimed) {
        let mut books = self.books.lock().await;
        books.claimed[claimed.cluster] = books.claimed[claimed.cluster].saturating_sub(1);
    }

    /// Sandboxes of this run that exist on every cluster, as the backends see them.
    pub(crate) async fn count_live(&self) -> Result<usize, BackendError> {
        let mut live = 0;
        for cluster in &self.clusters {
            live += cluster
                .backend
                .list_owned(&self.run_id)
                .await?
                .sandboxes
                .len();
        }
        Ok(live)
    }

    /// The cluster placement picks; a fault is answered by the placement
    /// handle's fallback, if it has one.
    async fn place(&self, kind: DemandKind, image: usize, count: u32) -> Result<usize, StepError> {
        let clusters = self.table(image).await;
        let demand = Demand {
            kind,
            image: image as u32,
            count,
            sequence: self.sequence.fetch_add(1, Ordering::Relaxed),
        };
        let index = self
            .placement
            .place(&demand, &clusters)
            .await
            .map_err(|e| StepError::plugin("placement", e))?;
        Ok(index as usize)
    }

    /// The placement table for a decision about `image`: a cluster that
    /// cannot make the image, or whose last requests failed, is unhealthy;
    /// what a cluster cannot tell about itself counts as unbounded.
    async fn table(&self, image: usize) -> Clusters {
        let books = self.books.lock().await;
        let image_name = &self.images[image];
        let states: Vec<ClusterState> = self
            .clusters
            .iter()
            .enumerate()
            .map(|(index, cluster)| {
                let warm_here = books
                    .pools
                    .iter()
                    .filter(|(_, (c, _))| *c == index)
                    .map(|(_, (_, r))| r)
                    .sum::<u32>();
                let live = books.claimed[index] + warm_here;
                let capacity = self.capacity[index];
                let used = |per_sandbox: u32| u64::from(live) * u64::from(per_sandbox);
                let free = |total: Option<u64>, per_sandbox: u32| {
                    total.map_or(u32::MAX, |total| {
                        total
                            .saturating_sub(used(per_sandbox))
                            .min(u64::from(u32::MAX)) as u32
                    })
                };
                let healthy = self.capabilities[index].images.can_make(image_name)
                    && self.failures[index].load(Ordering::Relaxed) < UNHEALTHY_AFTER;
                ClusterState {
                    healthy,
                    has_image: books.templates.contains_key(&(index, image)),
                    free_slots: capacity
                        .sandbox_slots
                        .map_or(u32::MAX, |slots| slots.saturating_sub(live)),
                    live,
                    warm_ready: books
                        .pools
                        .get(&image)
                        .filter(|(c, _)| *c == index)
                        .map_or(0, |(_, r)| *r),
                    weight: cluster.weight,
                    cpu_free_milli: free(capacity.cpu_milli, self.settings.cpu_milli),
                    memory_free_mib: free(capacity.memory_mib, self.settings.memory_mib),
                }
            })
            .collect();
        Clusters::from_states(&states)
    }

    /// The cluster and replicas of `image`'s warm pool, when it has one.
    pub(crate) async fn pool(&self, image: usize) -> Option<(usize, u32)> {
        self.books.lock().await.pools.get(&image).copied()
    }

    pub(crate) async fn template(
        &self,
        cluster: usize,
        image: usize,
    ) -> Result<TemplateRef, StepError> {
        if let Some(template) = self.books.lock().await.templates.get(&(cluster, image)) {
            return Ok(template.clone());
        }
        let spec = TemplateSpec {
            name: template_name(&self.run_id, &self.images[image]),
            // What the cluster pulls; records keep the task's own image.
            image: self.settings.image_rewrite.apply(&self.images[image]),
            cpu_milli: self.settings.cpu_milli,
            memory_mib: self.settings.memory_mib,
            disk_mib: self.settings.disk_mib,
            network: self.settings.network,
            env: Default::default(),
            labels: self.run_id.labels(),
        };
        let backend = &self.clusters[cluster].backend;
        let made = self
            .retries
            .idempotent("ensure_template", || backend.ensure_template(&spec))
            .await;
        self.health(cluster, &made);
        let template = made.map_err(|e| StepError::backend("template", e))?;
        self.books
            .lock()
            .await
            .templates
            .insert((cluster, image), template.clone());
        Ok(template)
    }

    /// Whether `cluster`'s backend can scrub a used sandbox for reuse.
    pub(crate) fn can_scrub(&self, cluster: usize) -> bool {
        self.clusters[cluster].backend.recycling().is_some()
    }

    /// Counts `more` warm sandboxes kept now (in a backend's pool or a
    /// prepared one).
    pub(crate) fn note_more_warm(&self, more: u32) {
        let more = u64::from(more);
        let now = self.warm_now.fetch_add(more, Ordering::Relaxed) + more;
        self.counts.warm_total.fetch_add(more, Ordering::Relaxed);
        self.counts.warm_peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts `fewer` warm sandboxes kept now.
    pub(crate) fn note_fewer_warm(&self, fewer: u32) {
        self.warm_now.fetch_sub(u64::from(fewer), Ordering::Relaxed);
    }

    /// Where `claimed` is, by name.
    pub(crate) fn on<'a>(&'a self, claimed: &'a Claimed) -> On<'a> {
        On {
            cluster: &self.clusters[claimed.cluster].name,
            sandbox: &claimed.handle.id,
            image: &self.images[claimed.image],
        }
    }

    async fn note_warm(&self, image: usize, cluster: usize, replicas: u32) {
        let mut books = self.books.lock().await;
        let before = books
            .pools
            .insert(image, (cluster, replicas))
            .map_or(0, |(_, r)| r);
        drop(books);
        self.timeline
            .pool(&self.clusters[cluster].name, &self.images[image], replicas);
        self.note_more_warm(replicas - before);
    }
}
