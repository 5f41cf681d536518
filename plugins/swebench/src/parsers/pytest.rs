//! `parse_log_pytest`, `parse_log_pytest_options` and `parse_log_matplotlib`:
//! pytest's `-rA` short summary, one `STATUS test-id[ - message]` line per test.

use std::borrow::Cow;

use crate::grader::GraderVersion;
use crate::pystr;
use crate::status_map::{FAILED, SKIPPED, STATUSES, StatusMap};

/// `parse_log_pytest`.
pub(super) fn parse_pytest(log: &str, grader: GraderVersion) -> StatusMap {
    parse_status_first(log, grader, unchanged, unchanged)
}

/// `parse_log_pytest_options`: ids whose parameter is an absolute path keep
/// only its last component (`test_x[/tmp/abc/file]` becomes `test_x[/file]`),
/// so ids do not depend on where the tests ran.
pub(super) fn parse_pytest_options(log: &str, grader: GraderVersion) -> StatusMap {
    parse_status_first(log, grader, unchanged, shorten_path_parameter)
}

/// `parse_log_matplotlib`: newer matplotlib prints `MouseButton.LEFT` where
/// the expected ids have `1` (and `3` for `RIGHT`).
pub(super) fn parse_matplotlib(log: &str, grader: GraderVersion) -> StatusMap {
    parse_status_first(log, grader, buttons_as_numbers, unchanged)
}

/// The shared loop: a line that starts with a status records its second
/// token under its first; `FAILED` lines first lose every ` - ` so the
/// message does not glue onto the id.
fn parse_status_first(
    log: &str,
    grader: GraderVersion,
    rewrite_line: fn(&str) -> Cow<'_, str>,
    test_name: fn(&str) -> Cow<'_, str>,
) -> StatusMap {
    let mut map = StatusMap::for_log(log);
    for line in log.split('\n') {
        let line = rewrite_line(line);
        if !starts_with_status(&line) {
            continue;
        }
        let line = if line.starts_with(FAILED) {
            Cow::Owned(line.replace(" - ", " "))
        } else {
            line
        };
        let mut tokens = pystr::split(&line);
        let (Some(status), Some(test)) = (tokens.next(), tokens.next()) else {
            continue;
        };
        if grader == GraderVersion::V5_0_2 && is_skip_summary(status, test) {
            continue;
        }
        map.insert(&test_name(test), status);
    }
    map
}

fn unchanged(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}

fn buttons_as_numbers(line: &str) -> Cow<'_, str> {
    Cow::Owned(
        line.replace("MouseButton.LEFT", "1")
            .replace("MouseButton.RIGHT", "3"),
    )
}

/// `any(line.startswith(x.value) for x in TestStatus)`.
pub(super) fn starts_with_status(line: &str) -> bool {
    STATUSES.iter().any(|status| line.starts_with(status))
}

/// 5.x drops pytest's `SKIPPED [N] path:line: reason` summary lines, whose
/// second token is a count, not a test.
pub(super) fn is_skip_summary(status: &str, test: &str) -> bool {
    status == SKIPPED && crate::lazy_regex!(r"^\[\d+\]$").is_match(test)
}

/// `re.search(r"(.*?)\[(.*)\]", test)`: the parameter runs from the first `[`
/// to the last `]`, and anything after that `]` is dropped.
fn shorten_path_parameter(test: &str) -> Cow<'_, str> {
    let Some(open) = test.find('[') else {
        return Cow::Borrowed(test);
    };
    let Some(close) = test.rfind(']').filter(|&close| close > open) else {
        return Cow::Borrowed(test);
    };
    let (function, parameter) = (&test[..open], &test[open + 1..close]);
    if parameter.starts_with('/') && !parameter.starts_with("//") && !parameter.contains('*') {
        let file = parameter.rsplit('/').next().unwrap_or_default();
        Cow::Owned(format!("{function}[/{file}]"))
    } else {
        Cow::Owned(format!("{function}[{parameter}]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_lines_lose_their_message() {
        let map = parse_pytest(
            "FAILED a.py::t - assert 1 == 2\nPASSED a.py::u\nPASSED\n",
            GraderVersion::V4_1_0,
        );
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("a.py::t", "FAILED"), ("a.py::u", "PASSED")]
        );
    }

    #[test]
    fn only_5x_drops_skip_summaries() {
        let log = "SKIPPED [1] a.py:3: no network\n";
        assert_eq!(
            parse_pytest(log, GraderVersion::V4_1_0).get("[1]"),
            Some("SKIPPED")
        );
        assert!(parse_pytest(log, GraderVersion::V5_0_2).is_empty());
    }

    #[test]
    fn path_parameters_keep_their_last_component() {
        assert_eq!(shorten_path_parameter("t[/tmp/x/f.txt]"), "t[/f.txt]");
        assert_eq!(shorten_path_parameter("t[//host/x]"), "t[//host/x]");
        assert_eq!(shorten_path_parameter("t[/a/*]"), "t[/a/*]");
        assert_eq!(shorten_path_parameter("t[a]b]tail"), "t[a]b]");
        assert_eq!(shorten_path_parameter("t]x[y"), "t]x[y");
    }

    #[test]
    fn mouse_buttons_become_numbers() {
        let map = parse_matplotlib(
            "PASSED t.py::click[MouseButton.LEFT]\n",
            GraderVersion::V4_1_0,
        );
        assert_eq!(map.get("t.py::click[1]"), Some("PASSED"));
    }
}
