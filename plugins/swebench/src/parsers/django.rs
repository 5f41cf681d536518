//! `parse_log_django`: Django's test runner at `--verbosity 2`, one
//! `test_name (module.Class) ... ok|FAIL|ERROR|skipped` line per test.

use std::sync::OnceLock;

use regex::Regex;

use crate::pystr;
use crate::status_map::{ERROR, FAILED, PASSED, SKIPPED, StatusMap};

use super::{ParserRaised, second_token};

const PASS_SUFFIXES: [&str; 3] = [" ... ok", " ... OK", " ...  OK"];

/// A migration message printed on the test's own line (django__django-7188).
const MIGRATION_PREFIX: &str = "Applying sites.0002_alter_domain_unique...test_no_migrations";

/// A test whose `ok` lands on a later line because another message (system
/// checks, a logged server error) interrupted it. `[\s\x1C-\x1F]` is Python's `\s`.
fn interrupted_passes() -> &'static [Regex; 3] {
    static PATTERNS: OnceLock<[Regex; 3]> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            r"(?m)^(.*?)[\s\x1C-\x1F]\.\.\.[\s\x1C-\x1F]Testing against Django installed in ((?s:.*?)) silenced\)\.\nok$",
            r"(?m)^(.*?)[\s\x1C-\x1F]\.\.\.[\s\x1C-\x1F]Internal Server Error: /(.*)/\nok$",
            r"(?m)^(.*?)[\s\x1C-\x1F]\.\.\.[\s\x1C-\x1F]System check identified no issues \(0 silenced\)\nok$",
        ]
        .map(|pattern| Regex::new(pattern).expect("a valid pattern"))
    })
}

/// `parse_log_django`. Both versions raise on a `FAIL:` or `ERROR:` line
/// without a test name.
pub(super) fn parse(log: &str) -> Result<StatusMap, ParserRaised> {
    let mut map = StatusMap::for_log(log);
    let mut previous_test = None;
    for line in log.split('\n') {
        let mut line = pystr::strip(line);
        if line.contains("--version is equivalent to version") {
            map.insert("--version is equivalent to version", PASSED);
        }
        if let Some((test, _)) = line.split_once(" ... ") {
            previous_test = Some(test);
        }
        if let Some(suffix) = PASS_SUFFIXES
            .into_iter()
            .find(|suffix| line.ends_with(suffix))
        {
            if line.starts_with(MIGRATION_PREFIX) {
                line = pystr::strip(line.split_once("...").map_or(line, |(_, rest)| rest));
            }
            map.insert(
                line.rsplit_once(suffix).map_or(line, |(test, _)| test),
                PASSED,
            );
        }
        if let Some((test, _)) = line.split_once(" ... skipped") {
            map.insert(test, SKIPPED);
        }
        if line.ends_with(" ... FAIL") {
            map.insert(before(line, " ... FAIL"), FAILED);
        }
        if line.starts_with("FAIL:") {
            map.insert(
                second_token(&pystr::split(line).collect::<Vec<_>>())?,
                FAILED,
            );
        }
        if line.ends_with(" ... ERROR") {
            map.insert(before(line, " ... ERROR"), ERROR);
        }
        if line.starts_with("ERROR:") {
            map.insert(
                second_token(&pystr::split(line).collect::<Vec<_>>())?,
                ERROR,
            );
        }
        if let Some(test) = previous_test.filter(|_| pystr::lstrip(line).starts_with("ok")) {
            map.insert(test, PASSED);
        }
    }
    for pattern in interrupted_passes() {
        for interrupted in pattern.captures_iter(log) {
            map.insert(&interrupted[1], PASSED);
        }
    }
    Ok(map)
}

/// `line.split(separator)[0]`.
fn before<'a>(line: &'a str, separator: &str) -> &'a str {
    line.split_once(separator).map_or(line, |(head, _)| head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_result_lines_and_failure_headers() {
        let log = "test_a (m.T) ... ok\ntest_b (m.T) ... FAIL\ntest_c (m.T) ... skipped 'x'\nERROR: test_d (m.T)\n";
        let map = parse(log).unwrap();
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [
                ("test_a (m.T)", "PASSED"),
                ("test_b (m.T)", "FAILED"),
                ("test_c (m.T)", "SKIPPED"),
                ("test_d", "ERROR")
            ]
        );
    }

    #[test]
    fn an_ok_on_a_later_line_passes_the_previous_test() {
        let map = parse("test_a (m.T) ... some output\nok\n").unwrap();
        assert_eq!(map.get("test_a (m.T)"), Some("PASSED"));
    }

    #[test]
    fn a_bare_failure_header_raises() {
        assert_eq!(parse("FAIL:\n"), Err(ParserRaised::IndexError));
    }
}
