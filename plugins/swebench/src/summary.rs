//! `summarize`: the run report the harness's `make_run_report` writes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::grade::GradeStatus;
use crate::grader::GraderVersion;
use crate::python_json::dumps_indent4;

/// Whether a task had a model patch, for the report's `empty_patch_ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SolutionState {
    /// `model_patch` is `None`.
    Missing,
    /// `model_patch` is `""`.
    Empty,
    /// A patch.
    Present,
}

/// How 5.x classified a task's failure (`classify_logs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classified {
    /// The signature's name.
    pub(crate) reason: String,
    /// The `environment` tier; else `ambiguous`.
    pub(crate) environment: bool,
}

/// One graded task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Graded {
    /// The instance id.
    pub(crate) task_id: String,
    /// Its grade.
    pub(crate) status: GradeStatus,
    /// Whether it had a patch.
    pub(crate) solution: SolutionState,
    /// Its grade's classification, if any.
    pub(crate) infra: Option<Classified>,
}

/// The run report, as `print(json.dumps(report, indent=4), file=f)` writes it.
///
/// Every graded task was submitted. A task without a patch is an empty-patch
/// instance (the harness never runs it); a passed task is completed and
/// resolved, a failed one completed and unresolved, and an errored one an
/// error instance. Fields that describe the harness's own Docker state
/// (`unstopped_*`, `unremoved_images`, 5.x only) are empty: the host owns the
/// sandboxes. 5.x's infrastructure classification of the unresolved and
/// errored instances (`infra_failure_*`, `ambiguous_failure_*`,
/// `failure_reasons`) comes from each grade, which classified its log.
pub(crate) fn run_report(grader: GraderVersion, results: &[Graded]) -> String {
    let mut completed = BTreeSet::new();
    let mut resolved = BTreeSet::new();
    let mut unresolved = BTreeSet::new();
    let mut empty_patch = BTreeSet::new();
    let mut errors = BTreeSet::new();
    let mut infra_failures = BTreeSet::new();
    let mut ambiguous_failures = BTreeSet::new();
    let mut failure_reasons = BTreeMap::new();
    for result in results {
        let id = result.task_id.as_str();
        if result.solution != SolutionState::Present {
            empty_patch.insert(id);
            continue;
        }
        if let Some(infra) = result
            .infra
            .as_ref()
            .filter(|_| result.status != GradeStatus::Passed)
        {
            failure_reasons.insert(id, infra.reason.as_str());
            if infra.environment {
                infra_failures.insert(id);
            } else {
                ambiguous_failures.insert(id);
            }
        }
        match result.status {
            GradeStatus::Passed => {
                completed.insert(id);
                resolved.insert(id);
            }
            GradeStatus::Failed => {
                completed.insert(id);
                unresolved.insert(id);
            }
            GradeStatus::Error => {
                errors.insert(id);
            }
        }
    }
    let submitted: BTreeSet<&str> = results
        .iter()
        .map(|result| result.task_id.as_str())
        .collect();
    let none: BTreeSet<&str> = BTreeSet::new();
    let is_5x = grader == GraderVersion::V5_0_2;

    let mut report = Map::new();
    let mut field = |key: &str, value: Value| {
        report.insert(key.to_owned(), value);
    };
    field("total_instances", json!(results.len()));
    field("submitted_instances", json!(submitted.len()));
    field("completed_instances", json!(completed.len()));
    field("resolved_instances", json!(resolved.len()));
    field("unresolved_instances", json!(unresolved.len()));
    if is_5x {
        field("infra_failure_instances", json!(infra_failures.len()));
        field(
            "ambiguous_failure_instances",
            json!(ambiguous_failures.len()),
        );
    }
    field("empty_patch_instances", json!(empty_patch.len()));
    field("error_instances", json!(errors.len()));
    field("completed_ids", json!(completed));
    field("incomplete_ids", json!(none));
    field("empty_patch_ids", json!(empty_patch));
    field("submitted_ids", json!(submitted));
    field("resolved_ids", json!(resolved));
    field("unresolved_ids", json!(unresolved));
    if is_5x {
        field("infra_failure_ids", json!(infra_failures));
        field("ambiguous_failure_ids", json!(ambiguous_failures));
        field("failure_reasons", json!(failure_reasons));
    }
    field("error_ids", json!(errors));
    field("schema_version", json!(2));
    if is_5x {
        field("unstopped_instances", json!(0));
        field("unstopped_containers", json!(none));
        field("unremoved_images", json!(none));
    }
    dumps_indent4(&Value::Object(report)) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graded(id: &str, status: GradeStatus, solution: SolutionState) -> Graded {
        Graded {
            task_id: id.into(),
            status,
            solution,
            infra: None,
        }
    }

    fn classified(mut graded: Graded, reason: &str, environment: bool) -> Graded {
        graded.infra = Some(Classified {
            reason: reason.into(),
            environment,
        });
        graded
    }

    /// `make_run_report` (swebench 5.0.2 `harness/reporting.py`, lines
    /// 88-107): unresolved and errored instances with a signature go to
    /// `infra_failure_ids` (environment tier) or `ambiguous_failure_ids`,
    /// with the reason in `failure_reasons`; they stay in their own lists.
    #[test]
    fn classified_failures_are_listed_by_tier_in_5x_only() {
        let results = [
            classified(
                graded("oom", GradeStatus::Error, SolutionState::Present),
                "out_of_memory",
                true,
            ),
            classified(
                graded("slow", GradeStatus::Error, SolutionState::Present),
                "tests_timed_out",
                false,
            ),
            classified(
                graded("mod", GradeStatus::Failed, SolutionState::Present),
                "missing_module",
                false,
            ),
            graded("ok", GradeStatus::Passed, SolutionState::Present),
        ];
        let report: Value =
            serde_json::from_str(&run_report(GraderVersion::V5_0_2, &results)).unwrap();
        assert_eq!(report["infra_failure_ids"], json!(["oom"]));
        assert_eq!(report["ambiguous_failure_ids"], json!(["mod", "slow"]));
        assert_eq!(report["infra_failure_instances"], json!(1));
        assert_eq!(report["ambiguous_failure_instances"], json!(2));
        assert_eq!(
            report["failure_reasons"],
            json!({"mod": "missing_module", "oom": "out_of_memory", "slow": "tests_timed_out"})
        );
        assert_eq!(report["error_ids"], json!(["oom", "slow"]));
        assert_eq!(report["unresolved_ids"], json!(["mod"]));
        let old: Value =
            serde_json::from_str(&run_report(GraderVersion::V4_1_0, &results)).unwrap();
        assert!(old.get("infra_failure_ids").is_none());
    }

    #[test]
    fn tasks_land_in_the_harness_buckets() {
        let results = [
            graded("b", GradeStatus::Passed, SolutionState::Present),
            graded("a", GradeStatus::Failed, SolutionState::Present),
            graded("c", GradeStatus::Error, SolutionState::Present),
            graded("d", GradeStatus::Error, SolutionState::Empty),
            graded("e", GradeStatus::Error, SolutionState::Missing),
        ];
        let report: Value =
            serde_json::from_str(&run_report(GraderVersion::V4_1_0, &results)).unwrap();
        assert_eq!(report["completed_ids"], json!(["a", "b"]));
        assert_eq!(report["resolved_ids"], json!(["b"]));
        assert_eq!(report["unresolved_ids"], json!(["a"]));
        assert_eq!(report["error_ids"], json!(["c"]));
        assert_eq!(report["empty_patch_ids"], json!(["d", "e"]));
        assert_eq!(report["submitted_ids"], json!(["a", "b", "c", "d", "e"]));
        assert_eq!(report["total_instances"], json!(5));
    }

    #[test]
    fn each_version_writes_its_own_fields_in_order() {
        let keys = |grader| {
            let report: Map<String, Value> =
                serde_json::from_str(&run_report(grader, &[])).unwrap();
            report.keys().cloned().collect::<Vec<_>>().join(",")
        };
        assert_eq!(
            keys(GraderVersion::V4_1_0),
            "total_instances,submitted_instances,completed_instances,resolved_instances,unresolved_instances,\
             empty_patch_instances,error_instances,completed_ids,incomplete_ids,empty_patch_ids,submitted_ids,\
             resolved_ids,unresolved_ids,error_ids,schema_version"
        );
        assert_eq!(
            keys(GraderVersion::V5_0_2),
            "total_instances,submitted_instances,completed_instances,resolved_instances,unresolved_instances,\
             infra_failure_instances,ambiguous_failure_instances,empty_patch_instances,error_instances,\
             completed_ids,incomplete_ids,empty_patch_ids,submitted_ids,resolved_ids,unresolved_ids,\
             infra_failure_ids,ambiguous_failure_ids,failure_reasons,error_ids,schema_version,\
             unstopped_instances,unstopped_containers,unremoved_images"
        );
    }
}
