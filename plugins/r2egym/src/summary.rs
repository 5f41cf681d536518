//! The run-level report: how many tasks ended in each status, and which.

use serde::Serialize;

use crate::{Failure, GradeStatus, Graded, SolutionState};

#[derive(Serialize, Default)]
struct Summary<'a> {
    total_instances: usize,
    passed_instances: usize,
    failed_instances: usize,
    error_instances: usize,
    /// Passed over total, the mean of R2E-Gym's 0/1 rewards.
    pass_rate: f64,
    passed_ids: Vec<&'a str>,
    failed_ids: Vec<&'a str>,
    error_ids: Vec<&'a str>,
    empty_solution_ids: Vec<&'a str>,
    missing_solution_ids: Vec<&'a str>,
}

/// Summarizes `results` as JSON; ids are sorted so reruns compare equal.
pub(crate) fn summarize(results: &[Graded]) -> Result<String, Failure> {
    let mut summary = Summary {
        total_instances: results.len(),
        ..Summary::default()
    };
    for graded in results {
        let id = graded.task_id.as_str();
        match graded.status {
            GradeStatus::Passed => summary.passed_ids.push(id),
            GradeStatus::Failed => summary.failed_ids.push(id),
            GradeStatus::Error => summary.error_ids.push(id),
        }
        match graded.solution {
            SolutionState::Empty => summary.empty_solution_ids.push(id),
            SolutionState::Missing => summary.missing_solution_ids.push(id),
            SolutionState::Present => {}
        }
    }
    for ids in [
        &mut summary.passed_ids,
        &mut summary.failed_ids,
        &mut summary.error_ids,
        &mut summary.empty_solution_ids,
        &mut summary.missing_solution_ids,
    ] {
        ids.sort_unstable();
    }
    summary.passed_instances = summary.passed_ids.len();
    summary.failed_instances = summary.failed_ids.len();
    summary.error_instances = summary.error_ids.len();
    if !results.is_empty() {
        summary.pass_rate = summary.passed_instances as f64 / results.len() as f64;
    }
    serde_json::to_string_pretty(&summary)
        .map_err(|error| Failure::internal(format!("cannot encode the summary: {error}")))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn graded(id: &str, status: GradeStatus, solution: SolutionState) -> Graded {
        Graded {
            task_id: id.into(),
            status,
            solution,
            infra: None,
        }
    }

    #[test]
    fn counts_and_ids_per_status() {
        let results = [
            graded("c", GradeStatus::Passed, SolutionState::Present),
            graded("a", GradeStatus::Failed, SolutionState::Empty),
            graded("b", GradeStatus::Passed, SolutionState::Present),
            graded("d", GradeStatus::Error, SolutionState::Missing),
        ];
        let summary: Value = serde_json::from_str(&summarize(&results).unwrap()).unwrap();
        assert_eq!(
            summary,
            json!({
                "total_instances": 4,
                "passed_instances": 2,
                "failed_instances": 1,
                "error_instances": 1,
                "pass_rate": 0.5,
                "passed_ids": ["b", "c"],
                "failed_ids": ["a"],
                "error_ids": ["d"],
                "empty_solution_ids": ["a"],
                "missing_solution_ids": ["d"],
            })
        );
    }

    #[test]
    fn an_empty_run_has_a_zero_pass_rate() {
        let summary: Value = serde_json::from_str(&summarize(&[]).unwrap()).unwrap();
        assert_eq!(summary["pass_rate"], 0.0);
        assert_eq!(summary["total_instances"], 0);
    }
}
