//! `parse_log_sympy`: sympy's `bin/test --verbose`.

use crate::pystr;
use crate::status_map::{ERROR, FAILED, PASSED, StatusMap};

/// `parse_log_sympy`. Failure headers (`___ path.py:test_name ___`) anywhere
/// in the log mark tests failed, then per-test lines (`test_name ok|F|E`)
/// override them. The header regex is loose: any line with a space before
/// `something.py:` and a later space matches, noise included.
pub(super) fn parse(log: &str) -> StatusMap {
    let mut map = StatusMap::for_log(log);
    for header in crate::lazy_regex!(r"(_*) (.*)\.py:(.*) (_*)").captures_iter(log) {
        map.insert(&format!("{}.py:{}", &header[2], &header[3]), FAILED);
    }
    for line in log.split('\n') {
        let line = pystr::strip(line);
        if !line.starts_with("test_") {
            continue;
        }
        let test = pystr::split(line).next().unwrap_or_default();
        if line.ends_with(" E") {
            map.insert(test, ERROR);
        }
        if line.ends_with(" F") {
            map.insert(test, FAILED);
        }
        if line.ends_with(" ok") {
            map.insert(test, PASSED);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_fail_tests_and_result_lines_override_them() {
        let log = "test_a ok\ntest_b F\n___ sympy/core/tests/test_x.py:test_b ___\n  test_c E\n";
        let map = parse(log);
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [
                ("sympy/core/tests/test_x.py:test_b", "FAILED"),
                ("test_a", "PASSED"),
                ("test_b", "FAILED"),
                ("test_c", "ERROR")
            ]
        );
    }
}
