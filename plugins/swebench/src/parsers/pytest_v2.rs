//! `parse_log_pytest_v2` (astropy, scikit-learn, sphinx): pytest output that
//! may be coloured, and older pytest's `test-id STATUS` lines.

use crate::grader::GraderVersion;
use crate::pystr;
use crate::status_map::{FAILED, STATUSES, StatusMap};

use super::pytest::{is_skip_summary, starts_with_status};

/// `parse_log_pytest_v2`.
///
/// 4.1.0 keeps one token on each side (an id with spaces is cut short, and a
/// status-last line records its second token as the status); 5.0.2 joins the
/// tokens back into the id, cuts a `FAILED` message at the first ` - `, and
/// drops skip summaries.
pub(super) fn parse(log: &str, grader: GraderVersion) -> StatusMap {
    let mut map = StatusMap::for_log(log);
    let colour_code = crate::lazy_regex!(r"\[(\d+)m");
    for line in log.split('\n') {
        let line = without_controls(&colour_code.replace_all(line, ""));
        if starts_with_status(&line) {
            let line = match (grader, line.starts_with(FAILED)) {
                (GraderVersion::V4_1_0, true) => line.replace(" - ", " "),
                (GraderVersion::V5_0_2, true) => {
                    line.split(" - ").next().unwrap_or_default().to_owned()
                }
                (_, false) => line,
            };
            let tokens: Vec<&str> = pystr::split(&line).collect();
            if tokens.len() < 2 {
                continue;
            }
            let (status, test) = (tokens[0], tokens[1]);
            match grader {
                GraderVersion::V4_1_0 => map.insert(test, status),
                GraderVersion::V5_0_2 if is_skip_summary(status, test) => {}
                GraderVersion::V5_0_2 => map.insert(&tokens[1..].join(" "), status),
            }
        } else if STATUSES.iter().any(|status| line.ends_with(status)) {
            let tokens: Vec<&str> = pystr::split(&line).collect();
            let Some((&status, test)) = tokens.split_last().filter(|(_, test)| !test.is_empty())
            else {
                continue;
            };
            match grader {
                GraderVersion::V4_1_0 => map.insert(tokens[0], tokens[1]),
                GraderVersion::V5_0_2 => map.insert(&test.join(" "), status),
            }
        }
    }
    map
}

/// `line.translate(...)` deleting the control characters U+0001..U+001F
/// (ANSI escapes have lost their `[..m` already; NUL is kept).
fn without_controls(line: &str) -> String {
    line.chars()
        .filter(|c| !('\u{1}'..='\u{1f}').contains(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_controls_are_stripped_before_matching() {
        let map = parse("\u{1b}[32mPASSED\u{1b}[0m a.py::t\n", GraderVersion::V4_1_0);
        assert_eq!(map.get("a.py::t"), Some("PASSED"));
    }

    #[test]
    fn versions_differ_on_ids_with_spaces() {
        let log = "PASSED a.py::t[x y]\na.py::u[p q] FAILED\n";
        let old = parse(log, GraderVersion::V4_1_0);
        assert_eq!(
            old.iter().collect::<Vec<_>>(),
            [("a.py::t[x", "PASSED"), ("a.py::u[p", "q]")]
        );
        let new = parse(log, GraderVersion::V5_0_2);
        assert_eq!(
            new.iter().collect::<Vec<_>>(),
            [("a.py::t[x y]", "PASSED"), ("a.py::u[p q]", "FAILED")]
        );
    }

    #[test]
    fn failed_messages_are_cut_differently() {
        let log = "FAILED a.py::t - boom - again\n";
        assert_eq!(
            parse(log, GraderVersion::V4_1_0).get("a.py::t"),
            Some("FAILED")
        );
        assert_eq!(
            parse(log, GraderVersion::V5_0_2).get("a.py::t"),
            Some("FAILED")
        );
        let spaced = "FAILED a.py::t[a - b]\n";
        assert_eq!(
            parse(spaced, GraderVersion::V5_0_2).get("a.py::t[a"),
            Some("FAILED")
        );
    }
}
