//! The plugins a run or a session uses, and the run report's account of
//! which versions served it.
//!
//! Placement and sizing handles follow their names, so a reload mid-run
//! serves the next decision. The adapter and the reset check are pinned by
//! each task and sandbox (see `task` and `recycle`), so one version
//! prepares and grades a task. The registry keeps every version that took
//! a name over and counts its calls; the report lists each version that
//! served the run, with when it took over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sandfleet_plugin::adapter::TaskAdapter;
use sandfleet_plugin::placement::PlacementPolicy;
use sandfleet_plugin::reset::ResetCheck;
use sandfleet_plugin::sizing::SizingPolicy;
use sandfleet_plugin::{LookupError, PluginCalls, PluginRef, PluginWatcher, Registry};
use serde::Serialize;

/// The plugins of a run or a session, looked up in one registry. Clones
/// share the handles and the watcher.
#[derive(Clone)]
pub struct Plugins {
    /// Where they come from: reloads, fallbacks, versions and call counts.
    pub registry: Arc<Registry>,
    /// The task adapter.
    pub adapter: TaskAdapter,
    /// The placement policy.
    pub placement: PlacementPolicy,
    /// The sizing policy.
    pub sizing: SizingPolicy,
    /// The reset check, needed for recycling.
    pub reset: Option<ResetCheck>,
    /// Reloads the plugin directory while a clone of it lives, when one
    /// is watched.
    pub watcher: Option<Arc<PluginWatcher>>,
}

/// One plugin version that served a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginServed {
    /// The plugin's name.
    pub name: String,
    /// Its world: `placement-policy`, `sizing-policy`, `reset-check` or
    /// `task-adapter`.
    pub world: String,
    /// Its version.
    pub version: String,
    /// Where it came from: a file, or `built-in`.
    pub source: String,
    /// When it took the name over (RFC 3339), before or during the run.
    pub took_over_at: String,
    /// Its calls during the run.
    pub calls: u64,
    /// Of those, the calls that faulted.
    pub faults: u64,
    /// Calls the built-in fallback answered in its place during the run.
    pub fallbacks: u64,
}

impl Plugins {
    /// The plugins of these names in `registry`, with no directory watched.
    ///
    /// # Errors
    ///
    /// The first name the registry cannot serve in its role.
    pub fn named(
        registry: Arc<Registry>,
        adapter: &str,
        placement: &str,
        sizing: &str,
        reset: Option<&str>,
    ) -> Result<Self, LookupError> {
        Ok(Plugins {
            adapter: registry.adapter(adapter)?,
            placement: registry.placement(placement)?,
            sizing: registry.sizing(sizing)?,
            reset: reset.map(|name| registry.reset_check(name)).transpose()?,
            watcher: None,
            registry,
        })
    }

    /// Each role's plugin version serving now, as `name version`.
    pub(crate) fn serving(&self) -> BTreeMap<String, String> {
        [
            ("adapter", self.adapter.version().plugin),
            ("placement", self.placement.version().plugin),
            ("sizing", self.sizing.version().plugin),
        ]
        .into_iter()
        .chain(self.reset.as_ref().map(|r| ("reset", r.version().plugin)))
        .map(|(role, plugin)| {
            (
                role.to_string(),
                format!("{} {}", plugin.name, plugin.version),
            )
        })
        .collect()
    }

    /// The names whose versions may serve the run: each role's plugin and
    /// the built-in that answers its faults.
    fn names(&self) -> BTreeSet<String> {
        let roles: [(PluginRef, Option<PluginRef>); 3] = [
            (self.adapter.version().plugin, self.adapter.fallback()),
            (self.placement.version().plugin, self.placement.fallback()),
            (self.sizing.version().plugin, self.sizing.fallback()),
        ];
        let reset = self
            .reset
            .as_ref()
            .map(|r| (r.version().plugin, r.fallback()));
        roles
            .into_iter()
            .chain(reset)
            .flat_map(|(plugin, fallback)| std::iter::once(plugin).chain(fallback))
            .map(|plugin| plugin.name.to_string())
            .collect()
    }
}

/// The registry's call counts when a run started, to count the run's own.
pub(crate) struct CallsAtStart(Vec<PluginCalls>);

impl CallsAtStart {
    pub(crate) fn take(registry: &Registry) -> Self {
        CallsAtStart(registry.call_counts())
    }

    /// Every version of the run's plugins that answered a call since the
    /// start, or serves one of its names now, in the order they took over.
    pub(crate) fn served(&self, plugins: &Plugins) -> Vec<PluginServed> {
        let names = plugins.names();
        let before: BTreeMap<(&str, &str), &PluginCalls> = self
            .0
            .iter()
            .map(|c| ((c.name.as_str(), c.version.as_str()), c))
            .collect();
        let now = plugins.registry.call_counts();
        let serving_now: BTreeSet<(String, String)> = plugins
            .registry
            .statuses()
            .into_iter()
            .filter_map(|status| {
                let serving = status.serving?;
                Some((status.name, serving.plugin.version.to_string()))
            })
            .collect();
        let mut served = Vec::new();
        let mut seen = BTreeSet::new();
        for takeover in plugins.registry.takeovers() {
            let (name, version) = (
                takeover.plugin.name.to_string(),
                takeover.plugin.version.to_string(),
            );
            if !names.contains(&name) || !seen.insert((name.clone(), version.clone())) {
                continue;
            }
            let counted = |pick: fn(&PluginCalls) -> u64| {
                let key = (name.as_str(), version.as_str());
                let total = now
                    .iter()
                    .find(|c| (c.name.as_str(), c.version.as_str()) == key)
                    .map_or(0, pick);
                total - before.get(&key).map_or(0, |c| pick(c))
            };
            let calls = counted(|c| c.calls);
            if calls == 0 && !serving_now.contains(&(name.clone(), version.clone())) {
                continue;
            }
            served.push(PluginServed {
                world: takeover.kind.world().to_string(),
                source: takeover.source.to_string(),
                took_over_at: humantime::format_rfc3339_millis(takeover.at).to_string(),
                calls,
                faults: counted(|c| c.faults),
                fallbacks: counted(|c| c.fallbacks),
                name,
                version,
            });
        }
        served
    }
}
