//! The parsers' result: test id to status, in the order a Python dict keeps.

use std::collections::HashMap;

/// `TestStatus.PASSED.value`.
pub(crate) const PASSED: &str = "PASSED";
/// `TestStatus.FAILED.value`.
pub(crate) const FAILED: &str = "FAILED";
/// `TestStatus.SKIPPED.value`.
pub(crate) const SKIPPED: &str = "SKIPPED";
/// `TestStatus.ERROR.value`.
pub(crate) const ERROR: &str = "ERROR";
/// `TestStatus.XFAIL.value`.
pub(crate) const XFAIL: &str = "XFAIL";

/// The `TestStatus` values, in the enum's order.
pub(crate) const STATUSES: [&str; 5] = [FAILED, PASSED, SKIPPED, ERROR, XFAIL];

/// A test's outcome, as the host's `test-status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestStatus {
    /// `PASSED`.
    Passed,
    /// `FAILED`.
    Failed,
    /// `SKIPPED`.
    Skipped,
    /// `ERROR`.
    Error,
    /// `XFAIL`.
    Xfail,
}

impl TestStatus {
    /// The outcome a raw status stands for. Parsers that record a line's
    /// first token can record more than the status (`ERROR:`), so a value
    /// that is not a status counts as the status it starts with; anything
    /// else (a stray token) is reported as an error.
    pub(crate) fn from_raw(raw: &str) -> Self {
        const BY_NAME: [(&str, TestStatus); 5] = [
            (PASSED, TestStatus::Passed),
            (FAILED, TestStatus::Failed),
            (SKIPPED, TestStatus::Skipped),
            (ERROR, TestStatus::Error),
            (XFAIL, TestStatus::Xfail),
        ];
        let exact = BY_NAME.iter().find(|(name, _)| raw == *name);
        let prefix = || BY_NAME.iter().find(|(name, _)| raw.starts_with(name));
        exact
            .or_else(prefix)
            .map_or(Self::Error, |&(_, status)| status)
    }
}

/// A status map with Python `dict` semantics: keys keep the position of their
/// first insertion, a repeated key only updates its value.
///
/// Values are the raw strings the parsers read. They are usually one of the
/// `TestStatus` values, but a parser that takes "the first token" can record
/// anything, and grading treats such a value as neither passing nor failing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StatusMap {
    entries: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl StatusMap {
    /// `map[test] = status`.
    pub(crate) fn insert(&mut self, test: &str, status: &str) {
        match self.index.get(test) {
            Some(&position) => status.clone_into(&mut self.entries[position].1),
            None => {
                self.index.insert(test.to_owned(), self.entries.len());
                self.entries.push((test.to_owned(), status.to_owned()));
            }
        }
    }

    /// `map.get(test)`.
    pub(crate) fn get(&self, test: &str) -> Option<&str> {
        self.index
            .get(test)
            .map(|&position| self.entries[position].1.as_str())
    }

    /// Entries in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(test, status)| (test.as_str(), status.as_str()))
    }

    /// Whether no test was recorded (a falsy dict).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_statuses_map_to_outcomes() {
        assert_eq!(TestStatus::from_raw("XFAIL"), TestStatus::Xfail);
        assert_eq!(TestStatus::from_raw("FAILED:"), TestStatus::Failed);
        assert_eq!(TestStatus::from_raw("[100%]"), TestStatus::Error);
    }

    #[test]
    fn a_repeated_key_keeps_its_first_position_and_takes_the_last_value() {
        let mut map = StatusMap::default();
        map.insert("a", PASSED);
        map.insert("b", FAILED);
        map.insert("a", ERROR);
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("a", ERROR), ("b", FAILED)]
        );
        assert_eq!(map.get("a"), Some(ERROR));
        assert_eq!(map.get("c"), None);
    }
}
