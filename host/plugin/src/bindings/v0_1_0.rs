//! Bindings of contract 0.1.0 (`wit/since_v0.1.0`), and the conversions
//! between its values and the latest version's.
//!
//! `types` is unchanged since 0.1.0, so these bindings reuse the latest
//! version's Rust types for it (`with`); `host` keeps its own module, since
//! a 0.1.0 component imports it under its 0.1.0 name. Values of the
//! interfaces that changed or that carry their own types are converted:
//! arguments from the latest version's shapes, answers into them.

#![allow(missing_docs, reason = "generated bindings; documented in wit/")]
#![allow(unreachable_pub, reason = "generated bindings")]

use super::latest;

pub(crate) mod placement {
    wasmtime::component::bindgen!({
        world: "placement-policy",
        path: "../../wit/since_v0.1.0",
        with: {
            "sandfleet:plugin/types": crate::bindings::v0_2_0::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) mod sizing {
    wasmtime::component::bindgen!({
        world: "sizing-policy",
        path: "../../wit/since_v0.1.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": crate::bindings::v0_2_0::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) mod reset {
    wasmtime::component::bindgen!({
        world: "reset-check",
        path: "../../wit/since_v0.1.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": crate::bindings::v0_2_0::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) mod adapter {
    wasmtime::component::bindgen!({
        world: "task-adapter",
        path: "../../wit/since_v0.1.0",
        with: {
            "sandfleet:plugin/host": super::placement::sandfleet::plugin::host,
            "sandfleet:plugin/types": crate::bindings::v0_2_0::placement::sandfleet::plugin::types,
        },
    });
}

pub(crate) use placement::sandfleet::plugin::host;

use adapter::exports::sandfleet::plugin::adapter as old_adapter;
use latest::adapter::exports::sandfleet::plugin::adapter as new_adapter;
use latest::placement::exports::sandfleet::plugin::placement as new_placement;
use latest::reset::exports::sandfleet::plugin::reset as new_reset;
use latest::sizing::exports::sandfleet::plugin::sizing as new_sizing;
use placement::exports::sandfleet::plugin::placement as old_placement;
use reset::exports::sandfleet::plugin::reset as old_reset;
use sizing::exports::sandfleet::plugin::sizing as old_sizing;

/// Maps each case of a field-less enum onto the case of the same name.
macro_rules! same_cases {
    ($from:ty => $to:ty { $($case:ident),* $(,)? }) => {
        impl From<$from> for $to {
            fn from(value: $from) -> Self {
                match value {
                    $(<$from>::$case => <$to>::$case,)*
                }
            }
        }
    };
}

// Arguments: latest → 0.1.0.

same_cases!(new_placement::DemandKind => old_placement::DemandKind { Pool, Claim });

impl From<&new_placement::Demand> for old_placement::Demand {
    fn from(demand: &new_placement::Demand) -> Self {
        old_placement::Demand {
            kind: demand.kind.into(),
            image: demand.image,
            count: demand.count,
            sequence: demand.sequence,
        }
    }
}

impl From<&new_placement::Clusters> for old_placement::Clusters {
    fn from(clusters: &new_placement::Clusters) -> Self {
        old_placement::Clusters {
            free_slots: clusters.free_slots.clone(),
            live: clusters.live.clone(),
            warm_ready: clusters.warm_ready.clone(),
            weight: clusters.weight.clone(),
            cpu_free_milli: clusters.cpu_free_milli.clone(),
            memory_free_mib: clusters.memory_free_mib.clone(),
            unhealthy: clusters.unhealthy.clone(),
            with_image: clusters.with_image.clone(),
        }
    }
}

same_cases!(new_sizing::Strategy => old_sizing::Strategy { None, Naive, Sliding, Pipelined });

impl From<&new_sizing::Limits> for old_sizing::Limits {
    fn from(limits: &new_sizing::Limits) -> Self {
        old_sizing::Limits {
            strategy: limits.strategy.into(),
            max_concurrent: limits.max_concurrent,
            max_warmpool_size: limits.max_warmpool_size,
            warm_per_task: limits.warm_per_task,
            disk: limits.disk.map(|disk| old_sizing::DiskBudget {
                avg_image_mib: disk.avg_image_mib,
                node_disk_mib: disk.node_disk_mib,
                nodes: disk.nodes,
                headroom_percent: disk.headroom_percent,
            }),
        }
    }
}

same_cases!(new_adapter::GradeStatus => old_adapter::GradeStatus { Passed, Failed, Error });
same_cases!(new_adapter::SolutionState => old_adapter::SolutionState { Missing, Empty, Present });

/// 0.1.0's `graded` has no `infra`: a 0.1.0 adapter never reports one.
impl From<&new_adapter::Graded> for old_adapter::Graded {
    fn from(graded: &new_adapter::Graded) -> Self {
        old_adapter::Graded {
            task_id: graded.task_id.clone(),
            status: graded.status.into(),
            solution: graded.solution.into(),
        }
    }
}

// Answers and imports: 0.1.0 → latest.

same_cases!(host::LogLevel => latest::host::LogLevel { Trace, Debug, Info, Warn, Error });

impl From<old_sizing::FleetPlan> for new_sizing::FleetPlan {
    fn from(plan: old_sizing::FleetPlan) -> Self {
        new_sizing::FleetPlan {
            replicas: plan.replicas,
            windows: plan
                .windows
                .into_iter()
                .map(|window| new_sizing::Window {
                    images: window.images,
                })
                .collect(),
            peak_warm: plan.peak_warm,
        }
    }
}

impl From<old_reset::Verdict> for new_reset::Verdict {
    fn from(verdict: old_reset::Verdict) -> Self {
        match verdict {
            old_reset::Verdict::Clean => new_reset::Verdict::Clean,
            old_reset::Verdict::Dirty(reason) => new_reset::Verdict::Dirty(reason),
        }
    }
}

same_cases!(old_adapter::GradeStatus => new_adapter::GradeStatus { Passed, Failed, Error });
same_cases!(old_adapter::TimeoutRule => new_adapter::TimeoutRule { Fail, Error });
same_cases!(old_adapter::TestStatus => new_adapter::TestStatus { Passed, Failed, Skipped, Error, Xfail });

impl From<old_adapter::AdapterInfo> for new_adapter::AdapterInfo {
    fn from(info: old_adapter::AdapterInfo) -> Self {
        new_adapter::AdapterInfo {
            name: info.name,
            version: info.version,
            summary: info.summary,
            settings: info
                .settings
                .into_iter()
                .map(|setting| new_adapter::SettingInfo {
                    key: setting.key,
                    summary: setting.summary,
                    default_value: setting.default_value,
                })
                .collect(),
        }
    }
}

/// 0.1.0 scripts evaluate where the work ran.
impl From<old_adapter::Script> for new_adapter::Script {
    fn from(script: old_adapter::Script) -> Self {
        new_adapter::Script {
            files: script
                .files
                .into_iter()
                .map(|file| new_adapter::File {
                    path: file.path,
                    contents: file.contents,
                    mode: file.mode,
                })
                .collect(),
            setup: script.setup,
            evaluate: script.evaluate,
            env: script.env,
            workdir: script.workdir,
            timeout_rule: script.timeout_rule.into(),
            evaluate_in: new_adapter::EvaluationSite::WorkSandbox,
        }
    }
}

/// A 0.1.0 status is always one of the five words; its value is the word
/// as the SWE-bench harness spells it (`PASSED`), which is what reports of
/// such adapters always showed.
fn test_table(tests: Vec<old_adapter::TestResult>) -> new_adapter::TestTable {
    let mut table = new_adapter::TestTable::empty();
    for test in tests {
        let value = match test.status {
            old_adapter::TestStatus::Passed => "PASSED",
            old_adapter::TestStatus::Failed => "FAILED",
            old_adapter::TestStatus::Skipped => "SKIPPED",
            old_adapter::TestStatus::Error => "ERROR",
            old_adapter::TestStatus::Xfail => "XFAIL",
        };
        table.push(&test.name, value, test.status.into());
    }
    table
}

/// A 0.1.0 grade always carries a reward and never an infra failure.
impl From<old_adapter::GradeResult> for new_adapter::GradeResult {
    fn from(grade: old_adapter::GradeResult) -> Self {
        new_adapter::GradeResult {
            status: grade.status.into(),
            reward: Some(grade.reward),
            tests: test_table(grade.tests),
            report: grade.report,
            detail: grade.detail,
            infra: None,
        }
    }
}

/// `parse-log`'s answer.
pub(crate) fn parsed_tests(tests: Vec<old_adapter::TestResult>) -> new_adapter::TestTable {
    test_table(tests)
}
