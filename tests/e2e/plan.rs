//! `sandfleet plan` and `sandfleet preflight`, which look and create nothing.

use serde_json::json;

use crate::{Scratch, results, sandfleet, stderr, stdout};

#[test]
fn the_skewed_example_plans_a_small_footprint_instead_of_one_per_task() {
    let output = sandfleet(&["plan", "examples/skewed.toml"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let number_after = |marker: &str| -> u32 {
        let rest = &text[text
            .find(marker)
            .unwrap_or_else(|| panic!("{marker:?} in {text}"))
            + marker.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let peak = number_after("at most ");
    // One sandbox per task (capped by the pool size) would hold more.
    assert!(number_after("would hold ") > peak, "{text}");
    assert!(text.contains("100 tasks over 8 images"), "{text}");
    // Measured costs say a reset costs more than a fresh local sandbox.
    assert!(
        text.contains("recycling on cluster `local` (local, recycle = false) does not pay"),
        "{text}"
    );
}

#[test]
fn preflight_of_the_quickstart_reports_this_machine_ok() {
    let output = sandfleet(&["preflight", "examples/quickstart.toml"]);
    assert!(output.status.success(), "{}", stdout(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"local (local)"), "{text}");
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("  capacity: 1 node(s), ")),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"  ok"), "{text}");
}

#[test]
fn concurrency_above_the_clusters_capacity_is_clamped_in_the_plan_and_the_run() {
    let scratch = Scratch::new();
    let rows: Vec<serde_json::Value> = (0..12)
        .map(|i| json!({"id": format!("t{i}"), "image": if i % 2 == 0 { "a" } else { "b" }, "test": "true"}))
        .collect();
    let fleet = scratch.fleet(&rows, "max_warmpool_size = 32\n");
    let text = std::fs::read_to_string(&fleet)
        .unwrap()
        .replace("max_concurrent = 4", "max_concurrent = 32")
        .replace(
            "state_dir = \"state\"",
            "state_dir = \"state\"\nmax_sandboxes = 8",
        );
    std::fs::write(&fleet, text).unwrap();

    let output = sandfleet(&["plan", fleet.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let plan = stdout(&output);
    assert!(
        plan.contains("bound: max_concurrent 32 lowered to 4: the clusters hold 8 sandboxes"),
        "{plan}"
    );
    assert!(plan.contains("; 4 running at once"), "{plan}");

    let out = scratch.path("out");
    let output = sandfleet(&[
        "run",
        fleet.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let statuses: Vec<String> = results(&out)
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, vec!["ok"; 12], "{}", stderr(&output));
}
