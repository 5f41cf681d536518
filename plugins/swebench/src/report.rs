//! The per-instance `report.json` the harness writes after grading.

use serde_json::{Map, Value, json};

use crate::grader::GraderVersion;
use crate::grading::{Outcome, TestsReport};
use crate::infra::InfraFailure;
use crate::python_json::dumps_indent4;

/// How far grading got, in the report's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evaluation<'a> {
    /// `model_patch` is `None`: nothing was evaluated.
    NoPatch,
    /// `get_logs_eval` found no usable results; 5.x classifies the log.
    NotFound {
        /// 5.x's infrastructure classification, when a signature matched.
        infra: Option<InfraFailure>,
    },
    /// The tests were judged.
    Graded {
        /// Per-list outcomes.
        tests: &'a TestsReport,
        /// Whether the resolution is `RESOLVED_FULL`.
        resolved: bool,
    },
}

/// `json.dumps(get_eval_report(..., include_tests_status=True), indent=4)`:
/// `{instance_id: {patch_is_None, patch_exists, patch_successfully_applied,
/// resolved[, infra_failure[, infra_failure_reason]][, tests_status]}}`,
/// where the `infra_*` keys are 5.x's.
pub(crate) fn instance_report(
    grader: GraderVersion,
    instance_id: &str,
    evaluation: Evaluation<'_>,
) -> String {
    let mut fields = Map::new();
    fields.insert(
        "patch_is_None".into(),
        json!(evaluation == Evaluation::NoPatch),
    );
    fields.insert(
        "patch_exists".into(),
        json!(evaluation != Evaluation::NoPatch),
    );
    fields.insert(
        "patch_successfully_applied".into(),
        json!(matches!(evaluation, Evaluation::Graded { .. })),
    );
    fields.insert(
        "resolved".into(),
        json!(matches!(
            evaluation,
            Evaluation::Graded { resolved: true, .. }
        )),
    );
    if grader == GraderVersion::V5_0_2 {
        let infra = match evaluation {
            Evaluation::NotFound { infra } => infra,
            Evaluation::NoPatch | Evaluation::Graded { .. } => None,
        };
        fields.insert(
            "infra_failure".into(),
            json!(infra.is_some_and(|infra| infra.environment)),
        );
        if let Some(infra) = infra {
            fields.insert("infra_failure_reason".into(), json!(infra.reason));
        }
    }
    if let Evaluation::Graded { tests, .. } = evaluation {
        fields.insert("tests_status".into(), tests_status(tests));
    }
    let mut report = Map::new();
    report.insert(instance_id.to_owned(), Value::Object(fields));
    dumps_indent4(&Value::Object(report))
}

/// The `tests_status` object, with the two lists the harness leaves empty.
fn tests_status(tests: &TestsReport) -> Value {
    let outcome =
        |outcome: &Outcome| json!({ "success": outcome.success, "failure": outcome.failure });
    let empty = Outcome::default();
    json!({
        "FAIL_TO_PASS": outcome(&tests.fail_to_pass),
        "PASS_TO_PASS": outcome(&tests.pass_to_pass),
        "FAIL_TO_FAIL": outcome(&empty),
        "PASS_TO_FAIL": outcome(&empty),
    })
}
