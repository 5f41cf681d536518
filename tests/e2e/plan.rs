//! `sandfleet plan` on agent-sandbox-rl's skewed example.

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
