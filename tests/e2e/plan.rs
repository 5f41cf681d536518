//! `sandfleet plan` and `sandfleet preflight`, which look and create nothing.

use crate::{sandfleet, stderr, stdout};

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
    assert!((8..=32).contains(&peak), "peak {peak}: {text}");
    assert_eq!(number_after("would hold "), 92, "{text}");
    assert!(text.contains("100 tasks over 8 images"), "{text}");
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
