//! R2E-Gym's only log parser, `parse_log_pytest` from
//! `repo_analysis/execution_log_parser.py`. R2E-Gym's `parse_log_fn` hands it
//! to every repository, so the row's `repo_name` never changes the parser.
//!
//! It reads the section after pytest's "short test summary info" banner and
//! keeps its quirks, because rewards depend on them:
//!
//! * only the text between the first banner and a second one (if any) counts;
//! * a line is classified by the first of `PASSED`, `FAILED`, `ERROR` it
//!   *contains*, anywhere in the line;
//! * the name is everything after the first `::`, with further `::` turned
//!   into `.`, so the file path is dropped and tests of the same name in two
//!   files share one key (the last line wins, at the first line's position);
//! * for `FAILED` and `ERROR` lines the name ends at the first `" - "` (the
//!   start of pytest's message), for `PASSED` lines it does not;
//! * an `ERROR` line without `::` (a collection error) gets the empty name.

use serde::Serialize;

use crate::{Failure, OrderedMap, TestStatus, TestTable, python};

/// The statuses the parser can produce, named as R2E-Gym spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Status {
    Passed,
    Failed,
    Error,
}

impl Status {
    /// The name R2E-Gym's status maps hold, e.g. `PASSED`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::Failed => "FAILED",
            Status::Error => "ERROR",
        }
    }

    /// Whether pytest's message after `" - "` is cut off the name.
    fn cuts_message(self) -> bool {
        !matches!(self, Status::Passed)
    }

    /// The status a line counts as: the first name it contains, in R2E-Gym's
    /// order of checks.
    fn of_line(line: &str) -> Option<Status> {
        [Status::Passed, Status::Failed, Status::Error]
            .into_iter()
            .find(|status| line.contains(status.as_str()))
    }
}

/// Test name to status, in the order names first appear in the log.
pub(crate) type StatusMap = OrderedMap<String, Status>;

/// The parser names `parse-log` accepts: R2E-Gym's function name, and the
/// name sandfleet's reference data files it under.
pub(crate) const PARSER_NAMES: [&str; 2] = ["parse_log_pytest", "r2e_parse_log_pytest"];

const SUMMARY_BANNER: &str = "short test summary info";

/// Runs the parser called `parser` (one of [`PARSER_NAMES`]) on `log`.
pub(crate) fn parse_named(parser: &str, log: &str) -> Result<TestTable, Failure> {
    if PARSER_NAMES.contains(&parser) {
        Ok(test_table(&parse_log_pytest(log)))
    } else {
        Err(Failure::invalid_input(format!(
            "unknown parser `{parser}`; r2egym has {}",
            PARSER_NAMES.map(|name| format!("`{name}`")).join(", ")
        )))
    }
}

/// The contract's form of a status map, in the same order: the statuses are
/// R2E-Gym's three words, each with what it counts as.
pub(crate) fn test_table(statuses: &StatusMap) -> TestTable {
    const STATUSES: [Status; 3] = [Status::Passed, Status::Failed, Status::Error];
    let mut table = TestTable {
        names: String::new(),
        name_ends: Vec::with_capacity(statuses.len()),
        statuses: Vec::with_capacity(statuses.len()),
        status_values: STATUSES.map(|status| status.as_str().to_owned()).to_vec(),
        status_kinds: vec![TestStatus::Passed, TestStatus::Failed, TestStatus::Error],
    };
    for (name, status) in statuses {
        table.names.push_str(name);
        table.name_ends.push(table.names.len() as u32);
        let index = STATUSES
            .iter()
            .position(|known| known == status)
            .unwrap_or_default();
        table.statuses.push(index as u32);
    }
    table
}

/// A table's tests as `(name, status)` pairs, for tests.
#[cfg(test)]
pub(crate) fn rows(table: &TestTable) -> Vec<(&str, TestStatus)> {
    let starts = std::iter::once(0).chain(table.name_ends.iter().copied());
    starts
        .zip(&table.name_ends)
        .zip(&table.statuses)
        .map(|((start, &end), &status)| {
            (
                &table.names[start as usize..end as usize],
                table.status_kinds[status as usize],
            )
        })
        .collect()
}

/// R2E-Gym's `parse_log_pytest`.
pub(crate) fn parse_log_pytest(log: &str) -> StatusMap {
    let mut statuses = StatusMap::default();
    let Some(start) = log.find(SUMMARY_BANNER) else {
        return statuses;
    };
    // `log.split(banner)[1]`: up to the next banner, if there is one.
    let after_banner = &log[start + SUMMARY_BANNER.len()..];
    let section = after_banner
        .find(SUMMARY_BANNER)
        .map_or(after_banner, |end| &after_banner[..end]);
    for line in python::strip(section).split('\n') {
        let Some(status) = Status::of_line(line) else {
            continue;
        };
        let name = line.split("::").skip(1).collect::<Vec<_>>().join(".");
        let name = if status.cuts_message() {
            python::before(&name, " - ").to_owned()
        } else {
            name
        };
        // Like a Python dict: a repeated name keeps its place, takes the new status.
        statuses.insert(name, status);
    }
    statuses
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(log: &str) -> Vec<(String, &'static str)> {
        parse_log_pytest(log)
            .into_iter()
            .map(|(name, status)| (name, status.as_str()))
            .collect()
    }

    fn pairs(expected: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        expected
            .iter()
            .map(|(name, status)| (name.to_string(), *status))
            .collect()
    }

    #[test]
    fn parsers_are_found_by_either_name() {
        let log = "short test summary info\nERROR a.py::test_e\n";
        for name in PARSER_NAMES {
            let results = parse_named(name, log).unwrap();
            assert_eq!(rows(&results), [("test_e", TestStatus::Error)]);
            assert_eq!(results.status_values[results.statuses[0] as usize], "ERROR");
        }
        let unknown = parse_named("parse_log_django", log).unwrap_err();
        assert!(
            unknown
                .message
                .contains("`parse_log_pytest`, `r2e_parse_log_pytest`"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn a_log_without_the_banner_has_no_tests() {
        assert!(parse_log_pytest("PASSED r2e_tests/test_1.py::test_a\n").is_empty());
    }

    #[test]
    fn names_drop_the_file_and_join_classes_with_dots() {
        let log = "== short test summary info ==\n\
                   PASSED r2e_tests/test_1.py::TestImage::test_open\n\
                   FAILED r2e_tests/test_1.py::test_b[x] - assert 1 == 2\n\
                   ERROR r2e_tests/test_2.py::test_c - fixture 'db' not found\n\
                   SKIPPED [1] r2e_tests/test_2.py:12: no network\n\
                   == 1 failed, 1 passed, 1 error in 0.1s ==";
        assert_eq!(
            parsed(log),
            pairs(&[
                ("TestImage.test_open", "PASSED"),
                ("test_b[x]", "FAILED"),
                ("test_c", "ERROR"),
            ])
        );
    }

    #[test]
    fn passed_lines_keep_their_dash_suffix_and_win_over_later_words() {
        let log = "short test summary info\n\
                   PASSED t.py::test_p[a - b]\n\
                   FAILED t.py::test_f - expected PASSED\n";
        assert_eq!(
            parsed(log),
            pairs(&[
                ("test_p[a - b]", "PASSED"),
                ("test_f - expected PASSED", "PASSED")
            ])
        );
    }

    #[test]
    fn a_collection_error_has_the_empty_name() {
        let log = "short test summary info\nERROR r2e_tests/test_1.py - ImportError: x\n";
        assert_eq!(parsed(log), pairs(&[("", "ERROR")]));
    }

    #[test]
    fn only_the_text_up_to_a_second_banner_counts() {
        let log = "short test summary info\nPASSED a.py::test_a\n\
                   short test summary info\nPASSED a.py::test_b\n";
        assert_eq!(parsed(log), pairs(&[("test_a", "PASSED")]));
    }

    #[test]
    fn a_repeated_name_keeps_its_first_place_and_last_status() {
        let log = "short test summary info\nPASSED a.py::test_x\nPASSED a.py::test_y\n\
                   FAILED b.py::test_x - boom";
        assert_eq!(
            parsed(log),
            pairs(&[("test_x", "FAILED"), ("test_y", "PASSED")])
        );
    }

    #[test]
    fn carriage_returns_and_colours_stay_in_names() {
        // parse_log_pytest itself splits on "\n" only; run_tests strips "\r"
        // and colours before it is called during grading.
        let log = "short test summary info\r\nPASSED a.py::\u{1b}[32mtest_a\u{1b}[0m\r\nx";
        assert_eq!(
            parsed(log),
            pairs(&[("\u{1b}[32mtest_a\u{1b}[0m\r", "PASSED")])
        );
    }
}
