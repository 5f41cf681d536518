//! What a run owns in its namespace, found by label selectors only: a
//! reap in a namespace shared with other teams reads its own run's
//! objects, never every Sandbox there.
//!
//! Templates, pools and claims carry the run's label. Sandboxes do not
//! (the controller builds their labels itself), but it labels each with
//! its owner: a pool's member with the pool's name hash, a claimed
//! sandbox (cold or adopted) with its claim's uid.

use std::collections::HashSet;
use std::fmt::Debug;
use std::time::Instant;

use kube::Resource;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::core::{ObjectList, PartialObjectMeta};
use sandfleet_core::{BackendError, ErrorKind, LABEL_RUN_ID, RunId};
use serde::de::DeserializeOwned;

use super::{K8sBackend, REAP_PAUSE, REAP_WAIT};
use crate::objects::name_hash;
use crate::resources::{
    CLAIM_UID_LABEL, Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool,
    WARM_POOL_SANDBOX_LABEL,
};

/// Values in one set-based selector: a few kilobytes of URL at most.
const VALUES_PER_SELECTOR: usize = 64;

/// The names of what a run owns.
pub(super) struct OwnedObjects {
    pub(super) templates: Vec<String>,
    pub(super) pools: Vec<String>,
    pub(super) claims: Vec<String>,
    pub(super) sandboxes: Vec<String>,
    /// The selectors its sandboxes were found by.
    sandbox_selectors: Vec<String>,
}

impl K8sBackend {
    /// What `run` owns: its templates, pools and claims by the run's label,
    /// and the sandboxes those pools and claims own, by the labels the
    /// controller gives them (ownership itself checked on the owner
    /// references).
    pub(super) async fn owned(&self, run: &RunId) -> Result<OwnedObjects, BackendError> {
        let templates = self.of_run::<SandboxTemplate>(run, "templates").await?;
        let pools = self.of_run::<SandboxWarmPool>(run, "warm pools").await?;
        let claims = self.of_run::<SandboxClaim>(run, "claims").await?;
        let owners: HashSet<String> = pools
            .items
            .iter()
            .map(|p| &p.metadata)
            .chain(claims.items.iter().map(|c| &c.metadata))
            .filter_map(|m| m.uid.clone())
            .collect();
        let sandbox_selectors: Vec<String> = in_selectors(
            WARM_POOL_SANDBOX_LABEL,
            pools.items.iter().map(|p| name_hash(&p.name_any())),
        )
        .into_iter()
        .chain(in_selectors(
            CLAIM_UID_LABEL,
            claims.items.iter().filter_map(ResourceExt::uid),
        ))
        .collect();
        let mut sandboxes = Vec::new();
        for selector in &sandbox_selectors {
            sandboxes.extend(
                self.sandboxes_by(selector)
                    .await?
                    .into_iter()
                    .filter(|s| s.owner_references().iter().any(|o| owners.contains(&o.uid)))
                    .map(|s| s.name_any()),
            );
        }
        sandboxes.sort();
        sandboxes.dedup();
        Ok(OwnedObjects {
            templates: names(templates),
            pools: names(pools),
            claims: names(claims),
            sandboxes,
            sandbox_selectors,
        })
    }

    /// The metadata of the `kind` objects carrying `run`'s label.
    async fn of_run<K>(
        &self,
        run: &RunId,
        kind: &str,
    ) -> Result<ObjectList<PartialObjectMeta<K>>, BackendError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let selector = ListParams::default().labels(&format!("{LABEL_RUN_ID}={}", run.as_str()));
        self.api::<K>()
            .await?
            .list_metadata(&selector)
            .await
            .map_err(|e| self.api_error(&format!("list {kind} of run {run}"), e))
    }

    /// The sandboxes `selector` selects (their metadata).
    async fn sandboxes_by(
        &self,
        selector: &str,
    ) -> Result<Vec<PartialObjectMeta<Sandbox>>, BackendError> {
        self.api::<Sandbox>()
            .await?
            .list_metadata(&ListParams::default().labels(selector))
            .await
            .map(|listed| listed.items)
            .map_err(|e| self.api_error(&format!("list sandboxes ({selector})"), e))
    }

    /// Waits until none of `owned`'s sandboxes exists, or [`REAP_WAIT`],
    /// looking by the selectors they were found by.
    pub(super) async fn wait_gone(&self, owned: &OwnedObjects) -> Result<(), BackendError> {
        if owned.sandboxes.is_empty() {
            return Ok(());
        }
        let until = Instant::now() + REAP_WAIT;
        loop {
            let mut left = 0;
            for selector in &owned.sandbox_selectors {
                left += self
                    .sandboxes_by(selector)
                    .await?
                    .iter()
                    .filter(|s| owned.sandboxes.contains(&s.name_any()))
                    .count();
            }
            if left == 0 {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(self.error(
                    ErrorKind::Timeout,
                    format!(
                        "{left} sandboxes were still being removed after {}",
                        humantime::format_duration(REAP_WAIT)
                    ),
                ));
            }
            tokio::time::sleep(REAP_PAUSE).await;
        }
    }
}

/// The names of what `list` holds.
fn names<K: Resource + Clone>(list: ObjectList<PartialObjectMeta<K>>) -> Vec<String> {
    list.items.iter().map(ResourceExt::name_any).collect()
}

/// `key in (…)` selectors over `values`, a bounded number of values each;
/// none when there are no values (an empty set would select nothing, and
/// no selector at all would select everything).
fn in_selectors(key: &str, values: impl Iterator<Item = String>) -> Vec<String> {
    let values: Vec<String> = values.collect();
    values
        .chunks(VALUES_PER_SELECTOR)
        .map(|chunk| format!("{key} in ({})", chunk.join(",")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_bounded_and_none_for_no_values() {
        assert!(in_selectors("k", std::iter::empty()).is_empty());
        let selectors = in_selectors("k", (0..130).map(|n| n.to_string()));
        assert_eq!(selectors.len(), 3);
        assert!(selectors[0].starts_with("k in (0,1,"), "{}", selectors[0]);
        assert!(selectors[2].ends_with("(128,129)"), "{}", selectors[2]);
    }
}
