//! The fleet as the engine sees it: clusters, the templates and warm pools
//! it made on them, and placement decisions. Keeps its own count of what it
//! asked for, because asking every backend before every decision is slow.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sandfleet_core::{
    Backend, BackendError, Capacity, LABEL_TASK, RunId, SandboxHandle, TemplateRef, TemplateSpec,
};
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind, PlacementPolicy};
use tokio::sync::Mutex;

use crate::blocking::call_plugin;
use crate::error::RunError;
use crate::phases::{Phase, PhaseTimes};
use crate::rate::CreateRate;
use crate::settings::FleetSettings;

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
}

/// A sandbox the engine holds, with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) cluster: usize,
    pub(crate) image: usize,
    pub(crate) handle: SandboxHandle,
}

#[derive(Default)]
struct Books {
    templates: HashMap<(usize, usize), TemplateRef>,
    /// Image → (cluster, replicas asked for) of its warm pool.
    pools: HashMap<usize, (usize, u32)>,
    /// Claimed sandboxes per cluster.
    claimed: Vec<u32>,
    warm_now: u32,
}

/// Counters for the report.
#[derive(Debug, Default)]
pub(crate) struct FleetCounts {
    pub(crate) claims: AtomicU64,
    pub(crate) warm_total: AtomicU64,
    pub(crate) warm_peak: AtomicU64,
}

pub(crate) struct Fleet {
    pub(crate) run_id: RunId,
    pub(crate) clusters: Vec<Cluster>,
    capacity: Vec<Capacity>,
    pub(crate) images: Vec<String>,
    settings: FleetSettings,
    placement: PlacementPolicy,
    rate: Option<CreateRate>,
    phases: Arc<PhaseTimes>,
    books: Mutex<Books>,
    sequence: AtomicU64,
    pub(crate) counts: FleetCounts,
}

impl Fleet {
    pub(crate) fn new(
        run_id: RunId,
        clusters: Vec<Cluster>,
        capacity: Vec<Capacity>,
        images: Vec<String>,
        settings: FleetSettings,
        placement: PlacementPolicy,
        phases: Arc<PhaseTimes>,
    ) -> Self {
        let books = Books {
            claimed: vec![0; clusters.len()],
            ..Books::default()
        };
        Fleet {
            rate: settings.create_rate.map(CreateRate::new),
            run_id,
            clusters,
            capacity,
            images,
            settings,
            placement,
            phases,
            books: Mutex::new(books),
            sequence: AtomicU64::new(0),
            counts: FleetCounts::default(),
        }
    }

    /// Warms the pools of `images` with `replicas` each, in waves of at most
    /// `warm_create_budget` new sandboxes, waiting for each wave to be ready.
    pub(crate) async fn warm(&self, images: &[(usize, u32)]) -> Result<(), RunError> {
        let mut placed = Vec::new();
        for &(image, replicas) in images.iter().filter(|(_, r)| *r > 0) {
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
            let template = self.template(cluster, image).await?;
            self.phases.record(Phase::CreateWarmpool, started.elapsed());
            placed.push((cluster, image, template, replicas));
        }
        let budget = self.settings.warm_create_budget.max(1);
        let mut asked: Vec<u32> = vec![0; placed.len()];
        while asked.iter().zip(&placed).any(|(a, p)| *a < p.3) {
            let mut left = budget;
            let started = Instant::now();
            for (slot, (cluster, image, template, replicas)) in placed.iter().enumerate() {
                let more = (replicas - asked[slot]).min(left);
                if more == 0 {
                    continue;
                }
                if let Some(rate) = &self.rate {
                    rate.acquire(more).await;
                }
                asked[slot] += more;
                left -= more;
                self.clusters[*cluster]
                    .backend
                    .warm(template, asked[slot])
                    .await?;
                self.note_warm(*image, *cluster, asked[slot]).await;
            }
            self.phases.record(Phase::CreateWarmpool, started.elapsed());
            let started = Instant::now();
            for (slot, (cluster, _, template, _)) in placed.iter().enumerate() {
                self.wait_ready(*cluster, template, asked[slot]).await?;
            }
            self.phases.record(Phase::WaitPoolReady, started.elapsed());
        }
        Ok(())
    }

    /// Releases the pools of `images`; idempotent.
    pub(crate) async fn unwarm(&self, images: &[usize]) -> Result<(), RunError> {
        for &image in images {
            let pool = self.books.lock().await.pools.remove(&image);
            let Some((cluster, replicas)) = pool else {
                continue;
            };
            let template = self.template(cluster, image).await?;
            self.clusters[cluster].backend.unwarm(&template).await?;
            self.books.lock().await.warm_now -= replicas;
        }
        Ok(())
    }

    /// Images whose pools are warm now.
    pub(crate) async fn warm_images(&self) -> Vec<usize> {
        let mut images: Vec<usize> = self.books.lock().await.pools.keys().copied().collect();
        images.sort_unstable();
        images
    }

    /// Claims a sandbox of `image` for `task_id`, on the cluster placement picks.
    pub(crate) async fn claim(&self, image: usize, task_id: &str) -> Result<Claimed, RunError> {
        let started = Instant::now();
        let cluster = self.place(DemandKind::Claim, image, 1).await?;
        let template = self.template(cluster, image).await?;
        let warm_there = self
            .books
            .lock()
            .await
            .pools
            .get(&image)
            .is_some_and(|&(c, _)| c == cluster);
        if !warm_there && let Some(rate) = &self.rate {
            rate.acquire(1).await;
        }
        let mut labels = self.run_id.labels();
        labels.insert(LABEL_TASK.to_string(), label_value(task_id));
        let deadline = Instant::now() + self.settings.claim_timeout;
        let handle = self.clusters[cluster]
            .backend
            .claim(&template, &labels, deadline)
            .await?;
        self.books.lock().await.claimed[cluster] += 1;
        self.counts.claims.fetch_add(1, Ordering::Relaxed);
        self.phases.record(Phase::Claim, started.elapsed());
        Ok(Claimed {
            cluster,
            image,
            handle,
        })
    }

    /// Releases a claimed sandbox; idempotent on the backend.
    pub(crate) async fn release(&self, claimed: &Claimed) -> Result<(), BackendError> {
        let result = self.clusters[claimed.cluster]
            .backend
            .release(&claimed.handle)
            .await;
        let mut books = self.books.lock().await;
        books.claimed[claimed.cluster] = books.claimed[claimed.cluster].saturating_sub(1);
        result
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

    async fn place(&self, kind: DemandKind, image: usize, count: u32) -> Result<usize, RunError> {
        let clusters = self.table(image).await;
        let demand = Demand {
            kind,
            image: image as u32,
            count,
            sequence: self.sequence.fetch_add(1, Ordering::Relaxed),
        };
        let policy = self.placement.clone();
        let index = call_plugin(move || policy.place(&demand, &clusters)).await?;
        Ok(index as usize)
    }

    async fn table(&self, image: usize) -> Clusters {
        let books = self.books.lock().await;
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
                ClusterState {
                    healthy: true,
                    has_image: books.templates.contains_key(&(index, image)),
                    free_slots: capacity.sandbox_slots.saturating_sub(live),
                    live,
                    warm_ready: books
                        .pools
                        .get(&image)
                        .filter(|(c, _)| *c == index)
                        .map_or(0, |(_, r)| *r),
                    weight: cluster.weight,
                    cpu_free_milli: capacity.cpu_milli.min(u64::from(u32::MAX)) as u32,
                    memory_free_mib: capacity.memory_mib.min(u64::from(u32::MAX)) as u32,
                }
            })
            .collect();
        Clusters::from_states(&states)
    }

    async fn template(&self, cluster: usize, image: usize) -> Result<TemplateRef, RunError> {
        if let Some(template) = self.books.lock().await.templates.get(&(cluster, image)) {
            return Ok(template.clone());
        }
        let spec = TemplateSpec {
            name: template_name(&self.images[image]),
            image: self.images[image].clone(),
            cpu_milli: self.settings.cpu_milli,
            memory_mib: self.settings.memory_mib,
            disk_mib: self.settings.disk_mib,
            network: self.settings.network,
            env: Default::default(),
            labels: self.run_id.labels(),
        };
        let template = self.clusters[cluster]
            .backend
            .ensure_template(&spec)
            .await?;
        self.books
            .lock()
            .await
            .templates
            .insert((cluster, image), template.clone());
        Ok(template)
    }

    async fn note_warm(&self, image: usize, cluster: usize, replicas: u32) {
        let mut books = self.books.lock().await;
        let before = books
            .pools
            .insert(image, (cluster, replicas))
            .map_or(0, |(_, r)| r);
        books.warm_now += replicas - before;
        self.counts
            .warm_total
            .fetch_add(u64::from(replicas - before), Ordering::Relaxed);
        self.counts
            .warm_peak
            .fetch_max(u64::from(books.warm_now), Ordering::Relaxed);
    }

    async fn wait_ready(
        &self,
        cluster: usize,
        template: &TemplateRef,
        replicas: u32,
    ) -> Result<(), RunError> {
        let backend = &self.clusters[cluster].backend;
        let deadline = Instant::now() + self.settings.pool_ready_timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            let status = backend.pool_status(template).await?;
            if status.ready >= replicas {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BackendError::Timeout {
                    backend: self.clusters[cluster].name.clone(),
                    what: format!(
                        "warm pool of `{}` to reach {replicas} ready (it has {})",
                        template.image, status.ready
                    ),
                    after: self.settings.pool_ready_timeout,
                }
                .into());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

/// A template name from an image name: lowercase letters, digits and `-`,
/// with a short hash so distinct images never collide.
pub(crate) fn template_name(image: &str) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    image.hash(&mut hasher);
    let stem: String = image
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    format!("{}-{:08x}", stem.trim_matches('-'), hasher.finish() as u32)
}

/// A task id as a label value (at most 63 characters of `[a-zA-Z0-9-_.]`).
fn label_value(task_id: &str) -> String {
    task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_names_are_clean_and_distinct() {
        let a = template_name("swebench/sweb.eval.x86_64.django_1776_django-16255:latest");
        assert!(
            a.starts_with("swebench-sweb-eval-x86-64-django-1776-dj-"),
            "{a}"
        );
        assert_eq!(a.len(), 40 + 1 + 8);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(template_name("calc"), template_name("Calc"));
        assert_eq!(label_value("django__django-16255"), "django__django-16255");
        assert_eq!(label_value("a/b c"), "a_b_c");
    }
}
