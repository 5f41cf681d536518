//! Objects returned by list requests, per resource (`sandboxes.agents.x-k8s.io`),
//! as kube-apiserver counts them in `apiserver_storage_list_returned_objects_total`:
//! for tests that show a client reads only the objects it needs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::registry::Resource;

/// The live counts.
#[derive(Debug, Default)]
pub(crate) struct ListedObjects {
    by_resource: Mutex<BTreeMap<String, u64>>,
}

impl ListedObjects {
    /// Counts `count` objects of `resource` returned by one list.
    pub(crate) fn add(&self, resource: &Resource, count: usize) {
        let name = match resource.group.as_str() {
            "" => resource.plural.clone(),
            group => format!("{}.{group}", resource.plural),
        };
        *self
            .by_resource
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += count as u64;
    }

    /// Objects of `resource` (`plural.group`, or `plural` for the core
    /// group) returned by lists so far.
    pub(crate) fn of(&self, resource: &str) -> u64 {
        self.by_resource
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource)
            .copied()
            .unwrap_or(0)
    }
}
