//! Groups: G rollouts of one task from one set-up, as RL samples a group
//! of rollouts per prompt. The first member to run claims a sandbox, runs
//! the task's set-up there and snapshots it ([`sandfleet_core::Snapshots`]);
//! every other member runs in a fork of that snapshot with its set-up
//! already done, and each member is graded on its own. On a cluster
//! without snapshots every member sets up a sandbox of its own (said once
//! per cluster). The snapshot is deleted once the group's last member has
//! its record; a run that stops first leaves it to the run's reap.
//!
//! A fork starts from a task's set-up, not from its image, so it serves
//! its member only: it is never recycled for another task.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sandfleet_core::{BackendError, ErrorKind, LABEL_TASK, SnapshotRef, label_value, snapshots_of};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::error::StepError;
use crate::evaluation::SetUp;
use crate::fleet::{Claimed, Fleet};
use crate::results::ResultKey;
use crate::task::WorkItem;

/// Which rollout of its task's group a work item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Member {
    /// From 0.
    pub index: u32,
    /// Rollouts in the group.
    pub size: u32,
}

impl WorkItem {
    /// The result this item makes: its task, epoch and member.
    pub fn key(&self) -> ResultKey<'_> {
        (
            &self.task.id,
            self.epoch,
            self.member.map(|member| member.index),
        )
    }

    /// The `size` rollouts of this item's task, as members of one group;
    /// the item alone when `size` is 1.
    pub fn group(self, size: u32) -> Vec<WorkItem> {
        if size <= 1 {
            return vec![self];
        }
        (0..size)
            .map(|index| WorkItem {
                member: Some(Member { index, size }),
                ..self.clone()
            })
            .collect()
    }
}

/// Where a group's members start.
#[derive(Clone)]
pub(crate) enum Base {
    /// Set up once and snapshotted: the other members fork the snapshot.
    Snapshot {
        snapshot: SnapshotRef,
        cluster: usize,
        /// What the set-up left, for members whose set-up it stands for.
        set_up: Arc<SetUp>,
    },
    /// The sandbox set up first cannot be snapshotted: every member sets
    /// up its own.
    EachSetsUp,
}

/// One group of a run: a task in an epoch.
pub(crate) struct Group {
    pub(crate) base: OnceCell<Base>,
    /// Members of this run still to finish.
    unrecorded: AtomicU32,
}

/// A group is a task in an epoch.
type GroupKey = (String, u32);

/// The run's groups, and what they cost.
#[derive(Default)]
pub(crate) struct Groups {
    groups: Mutex<HashMap<GroupKey, Arc<Group>>>,
    /// Clusters whose lack of snapshots was said.
    said: Mutex<HashSet<usize>>,
}

/// Group totals, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GroupCounts {
    /// Set-ups run for group members: one per group on clusters that
    /// snapshot, one per member elsewhere.
    pub set_ups: u64,
    /// Members that ran in a fork of their group's set-up.
    pub forked: u64,
}

impl Groups {
    /// The groups of `pending`, each counting its members to be recorded.
    pub(crate) fn of(pending: &[WorkItem]) -> Self {
        let mut groups: HashMap<GroupKey, Arc<Group>> = HashMap::new();
        for item in pending.iter().filter(|item| item.member.is_some()) {
            groups
                .entry((item.task.id.clone(), item.epoch))
                .or_insert_with(|| {
                    Arc::new(Group {
                        base: OnceCell::new(),
                        unrecorded: AtomicU32::new(0),
                    })
                })
                .unrecorded
                .fetch_add(1, Ordering::Relaxed);
        }
        Groups {
            groups: Mutex::new(groups),
            ..Groups::default()
        }
    }

    /// The group `item` is a member of.
    pub(crate) fn group_of(&self, item: &WorkItem) -> Option<Arc<Group>> {
        item.member?;
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.get(&(item.task.id.clone(), item.epoch)).cloned()
    }

    /// Counts `item`'s last attempt; after the group's last, deletes its
    /// snapshot.
    pub(crate) async fn finished(&self, item: &WorkItem, fleet: &Fleet) {
        let Some(group) = self.group_of(item) else {
            return;
        };
        if group.unrecorded.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(item.task.id.clone(), item.epoch));
        if let Some(Base::Snapshot {
            snapshot, cluster, ..
        }) = group.base.get()
            && let Some(snapshots) = fleet.clusters[*cluster].backend.snapshots()
            && let Err(error) = snapshots.delete_snapshot(snapshot).await
        {
            tracing::warn!(snapshot = %snapshot.id, %error, "deleting a group's snapshot failed; the run's reap removes it");
        }
    }

    /// Logs once per cluster that its groups set up every member.
    pub(crate) fn say_unforkable(&self, fleet: &Fleet, cluster: usize) {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if said.insert(cluster) {
            tracing::info!(
                "cluster `{}` cannot snapshot sandboxes: every member of a group sets up its own \
                 sandbox there",
                fleet.clusters[cluster].name
            );
        }
    }
}

impl Fleet {
    /// A fork of a group's `snapshot` on `cluster` for `item`, on the
    /// books as a claim of `image`.
    pub(crate) async fn fork_member(
        &self,
        snapshot: &SnapshotRef,
        cluster: usize,
        image: usize,
        item: &WorkItem,
    ) -> Result<Claimed, StepError> {
        let backend = self.clusters[cluster].backend.as_ref();
        let snapshots = snapshots_of(backend).map_err(|e| StepError::backend("fork", e))?;
        let mut labels = self.run_id.labels();
        labels.insert(LABEL_TASK.to_string(), label_value(&item.task.id));
        let deadline = Instant::now() + self.settings.claim_timeout;
        let handles = self
            .retries
            .idempotent("fork", || snapshots.fork(snapshot, 1, &labels, deadline))
            .await
            .map_err(|e| StepError::backend("fork", e))?;
        self.adopt(cluster, image, handles)
            .await
            .pop()
            .ok_or_else(|| {
                let message = format!("a fork of snapshot {} made no sandbox", snapshot.id);
                let error =
                    BackendError::new(ErrorKind::Failed, &self.clusters[cluster].name, message);
                StepError::backend("fork", error)
            })
    }
}
