//! The case runner against real components: passing cases pass, wrong
//! expectations fail with a readable diff, and faults are recognised.

use std::path::Path;

use sandfleet_testkit::cases::{self, CasesError};
use sandfleet_testkit::{DynamicPlugin, TestPlugin};

fn plugin(path: &str) -> DynamicPlugin {
    TestPlugin::load(path).unwrap().dynamic().unwrap()
}

fn run(path: &str, text: &str) -> cases::Report {
    cases::run_text(&plugin(path), text, Path::new("cases.toml")).unwrap()
}

const CLUSTERS: &str = r#"
args.demand = { kind = "claim", image = 0, count = 1 }
args.clusters = [{ free-slots = 1 }, { free-slots = 5 }, { free-slots = 9, healthy = false }]
"#;

#[test]
fn passing_and_failing_cases_are_told_apart_with_a_diff() {
    let report = run(
        sandfleet_guests::LEAST_LOADED,
        &format!(
            r#"
world = "placement-policy"

[[case]]
name = "emptiest healthy cluster"
call = "place"
{CLUSTERS}
expect.ok = 1

[[case]]
name = "wrongly expects the unhealthy one"
call = "place"
{CLUSTERS}
expect.ok = 2

[[case]]
name = "no clusters"
call = "place"
args.demand = {{ kind = "claim" }}
args.clusters = {{}}
expect.error = "invalid-input"
expect.message = "no clusters"

[[case]]
name = "columns as a table"
call = "place"
args.demand = {{ kind = "claim" }}
args.clusters = {{ free-slots = [3, 4], live = [0, 0], warm-ready = [0, 0], weight = [1, 1], cpu-free-milli = [0, 0], memory-free-mib = [0, 0], unhealthy = [1] }}
expect.ok = 0

[[case]]
name = "ragged columns are refused before the call"
call = "place"
args.demand = {{ kind = "claim" }}
args.clusters = {{ free-slots = [3, 4], live = [0] }}
expect.fault = "invalid-arguments"
expect.message = "column `live` has 1 entries but `free-slots` has 2"
"#
        ),
    );
    let verdicts: Vec<(&str, bool)> = report
        .outcomes
        .iter()
        .map(|o| (o.name.as_str(), o.passed))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ("emptiest healthy cluster", true),
            ("wrongly expects the unhealthy one", false),
            ("no clusters", true),
            ("columns as a table", true),
            ("ragged columns are refused before the call", true),
        ]
    );
    assert_eq!(report.failed(), 1);
    let rendered = report.render();
    assert!(
        rendered.contains("FAIL  wrongly expects the unhealthy one\n"),
        "{rendered}"
    );
    assert!(rendered.contains("value: expected 2, got 1"), "{rendered}");
    assert!(
        rendered.ends_with("5 cases: 4 passed, 1 failed\n"),
        "{rendered}"
    );
}

#[test]
fn faults_are_matched_by_kind() {
    let report = run(
        sandfleet_guests::MISBEHAVE,
        r#"
[[case]]
name = "spins"
call = "place"
args = { demand = { image = 1 }, clusters = [{}] }
expect.fault = "deadline"

[[case]]
name = "hogs"
call = "place"
args = { demand = { image = 2 }, clusters = [{}] }
expect.fault = "memory-cap"

[[case]]
name = "traps"
call = "place"
args = { demand = { image = 3 }, clusters = [{}] }
expect.fault = "trap"

[[case]]
name = "answers out of range"
call = "place"
args = { demand = { image = 4 }, clusters = [{}, {}] }
expect = { fault = "contract", message = "index 2 is out of range" }

[[case]]
name = "a deadline is not a trap"
call = "place"
args = { demand = { image = 1 }, clusters = [{}] }
expect.fault = "trap"
"#,
    );
    let passed: Vec<bool> = report.outcomes.iter().map(|o| o.passed).collect();
    assert_eq!(
        passed,
        vec![true, true, true, true, false],
        "{}",
        report.render()
    );
    assert!(report.outcomes[4].problems[0].contains("expected a `trap` fault"));
}

#[test]
fn records_compare_partially_and_name_the_differing_field() {
    let report = run(
        sandfleet_guests::PROPORTIONAL,
        r#"
[[case]]
name = "sliding windows"
call = "plan"
args.tasks = [6, 3, 1]
args.limits = { strategy = "sliding", max-concurrent = 4, max-warmpool-size = 8 }
expect.ok = { replicas = [2, 1, 1], windows = [{ images = [0, 1, 2] }] }

[[case]]
name = "wrong window"
call = "plan"
args.tasks = [6, 3, 1]
args.limits = { strategy = "sliding", max-concurrent = 4, max-warmpool-size = 8 }
expect.ok = { windows = [{ images = [0, 2] }] }
"#,
    );
    assert!(report.outcomes[0].passed, "{}", report.render());
    assert!(!report.outcomes[1].passed);
    assert_eq!(
        report.outcomes[1].problems,
        vec![".windows[0].images: expected [0,2], got [0,1,2]"]
    );
}

#[test]
fn mistakes_in_a_case_fail_that_case_with_a_clear_message() {
    let report = run(
        sandfleet_guests::LEAST_LOADED,
        r#"
[[case]]
name = "unknown function"
call = "plan"
expect.ok = 1

[[case]]
name = "unknown field"
call = "place"
args = { demand = { colour = "red" }, clusters = {} }
expect.ok = 1

[[case]]
name = "bad enum"
call = "place"
args = { demand = { kind = "grab" }, clusters = {} }
expect.ok = 1

[[case]]
name = "missing argument"
call = "place"
args = { demand = {} }
expect.ok = 1

[[case]]
name = "still runs"
call = "place"
args = { demand = {}, clusters = [{}] }
expect.ok = 0
"#,
    );
    let problems: Vec<String> = report
        .outcomes
        .iter()
        .map(|o| o.problems.join("; "))
        .collect();
    assert_eq!(
        problems,
        vec![
            "no function `plan` (the plugin has: place)".to_string(),
            "args.demand: unknown field `colour` (fields: kind, image, count, sequence)"
                .to_string(),
            "args.demand.kind: expected one of pool, claim, found `\"grab\"`".to_string(),
            "missing argument `args.clusters`".to_string(),
            String::new(),
        ]
    );
}

#[test]
fn a_file_for_another_world_or_with_bad_toml_is_refused() {
    let plugin = plugin(sandfleet_guests::LEAST_LOADED);
    let error =
        cases::run_text(&plugin, "world = \"sizing-policy\"", Path::new("c.toml")).unwrap_err();
    assert!(matches!(error, CasesError::WrongWorld { .. }));
    assert_eq!(
        error.to_string(),
        "c.toml: the cases are for a sizing-policy, but the plugin is a placement-policy"
    );
    let error = cases::run_text(&plugin, "[[case]]\nname = \n", Path::new("c.toml")).unwrap_err();
    let message = error.to_string();
    assert!(message.starts_with("c.toml: "), "{message}");
    assert!(message.contains("line 2"), "{message}");
}
