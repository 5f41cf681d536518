//! Every golden parser case, for both harness versions, through the
//! component's `parse-log`.

use crate::common;

use serde_json::{Value, json};

#[test]
fn every_parser_case_matches_both_versions() {
    let adapter = common::adapter();
    let mut checked = 0;
    for parser_dir in common::sorted_entries(&common::golden("parsers")) {
        let parser = common::file_name(&parser_dir);
        for expected_path in common::sorted_entries(&parser_dir) {
            let Some(case) = common::file_name(&expected_path)
                .strip_suffix(".expected.json")
                .map(str::to_owned)
            else {
                continue;
            };
            let log = common::read(&parser_dir.join(format!("{case}.log")));
            let expected: Value = common::read_json(&expected_path);
            for grader in common::GRADERS {
                let want = &expected[grader];
                let got = match adapter.parse_log_blocking(&parser, &log, &common::grader(grader)) {
                    Ok(tests) => json!({ "status_map": common::status_map(&tests) }),
                    Err(error) => {
                        let message = common::declined::<()>(Err(error));
                        common::exception_json(&common::raised(&message, &parser, grader))
                    }
                };
                common::assert_same_json(
                    &got,
                    &common::comparable_result(want),
                    &format!("{parser}/{case} ({grader})"),
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 42, "21 cases x 2 versions");
}
