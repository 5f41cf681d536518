//! The parsers' result: test id to status, in the order a Python dict keeps.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use hashbrown::HashTable;

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

/// What a raw status counts as, as the host's `test-status` names it.
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
    /// Anything else a parser recorded (a line's first token such as
    /// `ERROR:`, or a status-last line's second word): the harness's grading
    /// counts it as neither passing nor failing.
    Other,
}

impl TestStatus {
    /// What `raw` counts as: the status it equals, else [`TestStatus::Other`]
    /// (grading compares values for equality, so `FAILED:` is no failure).
    pub(crate) fn of(raw: &str) -> Self {
        match raw {
            PASSED => Self::Passed,
            FAILED => Self::Failed,
            SKIPPED => Self::Skipped,
            ERROR => Self::Error,
            XFAIL => Self::Xfail,
            _ => Self::Other,
        }
    }
}

/// Test names are hashed with SipHash under fixed keys: the same on every
/// run, as a plugin must be.
type NameHasher = BuildHasherDefault<DefaultHasher>;

/// A status map with Python `dict` semantics: keys keep the position of their
/// first insertion, a repeated key only updates its value.
///
/// Values are the raw strings the parsers read. They are usually one of the
/// `TestStatus` values, but a parser that takes "the first token" can record
/// anything, and grading treats such a value as neither passing nor failing.
///
/// Laid out for logs of millions of tests, and as the contract's test table
/// wants it: every name once, end to end in one string, each distinct value
/// once, and per test a name end and a value index (8 bytes), found through a
/// table of test indices (about 5 bytes per test).
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusMap {
    names: String,
    ends: Vec<u32>,
    statuses: Vec<u32>,
    values: Vec<String>,
    index: HashTable<u32>,
}

/// The parts of a [`StatusMap`], for the contract's test table.
pub(crate) struct Columns {
    /// Every name, in first-insertion order, end to end.
    pub(crate) names: String,
    /// Where each name ends in `names`.
    pub(crate) ends: Vec<u32>,
    /// Each test's value, as an index into `values`.
    pub(crate) statuses: Vec<u32>,
    /// The distinct values.
    pub(crate) values: Vec<String>,
}

/// No parser records a test from fewer bytes of log than this (a status
/// word, a space, one character of name and the newline).
const MIN_TEST_LINE: usize = 8;

impl StatusMap {
    /// An empty map with room for every test `log` can hold, so filling it
    /// never copies what it has (a copy would leave the old buffer resident:
    /// a component's memory does not shrink). Room that stays unused is
    /// address space only, as memory is committed when written: names get
    /// the log's length (no name is longer than its line), the rest one
    /// entry per line that could hold a test.
    pub(crate) fn for_log(log: &str) -> Self {
        let lines = log.bytes().filter(|&byte| byte == b'\n').count() + 1;
        let tests = lines.min(log.len() / MIN_TEST_LINE + 1);
        StatusMap {
            names: String::with_capacity(log.len()),
            ends: Vec::with_capacity(tests),
            statuses: Vec::with_capacity(tests),
            values: Vec::new(),
            index: HashTable::with_capacity(tests),
        }
    }

    fn hash(name: &str) -> u64 {
        NameHasher::default().hash_one(name)
    }

    fn name(&self, test: usize) -> &str {
        let start = test.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.names[start as usize..self.ends[test] as usize]
    }

    fn find(&self, hash: u64, test: &str) -> Option<usize> {
        self.index
            .find(hash, |&entry| self.name(entry as usize) == test)
            .map(|&entry| entry as usize)
    }

    fn value_index(&mut self, status: &str) -> u32 {
        let index = match self.values.iter().position(|known| known == status) {
            Some(index) => index,
            None => {
                self.values.push(status.to_owned());
                self.values.len() - 1
            }
        };
        index as u32
    }

    /// `map[test] = status`.
    ///
    /// # Panics
    ///
    /// When the names outgrow 4 GiB, which no 32-bit component can hold.
    pub(crate) fn insert(&mut self, test: &str, status: &str) {
        let value = self.value_index(status);
        let hash = Self::hash(test);
        if let Some(entry) = self.find(hash, test) {
            self.statuses[entry] = value;
            return;
        }
        let entry = self.ends.len() as u32;
        self.names.push_str(test);
        self.ends
            .push(u32::try_from(self.names.len()).expect("test names fit in 4 GiB"));
        self.statuses.push(value);
        let Self {
            names, ends, index, ..
        } = self;
        let name_of = |entry: u32| {
            let entry = entry as usize;
            let start = entry.checked_sub(1).map_or(0, |before| ends[before]);
            Self::hash(&names[start as usize..ends[entry] as usize])
        };
        index.insert_unique(hash, entry, |&other| name_of(other));
    }

    /// `map.get(test)`.
    pub(crate) fn get(&self, test: &str) -> Option<&str> {
        self.find(Self::hash(test), test)
            .map(|entry| self.values[self.statuses[entry] as usize].as_str())
    }

    /// Entries in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.ends.len()).map(|entry| {
            (
                self.name(entry),
                self.values[self.statuses[entry] as usize].as_str(),
            )
        })
    }

    /// Whether no test was recorded (a falsy dict).
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The map's columns, without copying them.
    pub(crate) fn into_columns(self) -> Columns {
        Columns {
            names: self.names,
            ends: self.ends,
            statuses: self.statuses,
            values: self.values,
        }
    }
}

impl PartialEq for StatusMap {
    /// Equal entries in equal order (the index is derived from them).
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for StatusMap {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_statuses_count_as_the_status_they_equal() {
        assert_eq!(TestStatus::of("XFAIL"), TestStatus::Xfail);
        assert_eq!(TestStatus::of("FAILED:"), TestStatus::Other);
        assert_eq!(TestStatus::of("[100%]"), TestStatus::Other);
        assert_eq!(TestStatus::of("passed"), TestStatus::Other);
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
        let columns = map.into_columns();
        assert_eq!(columns.names, "ab");
        assert_eq!(columns.ends, [1, 2]);
        assert_eq!(columns.values, [PASSED, FAILED, ERROR]);
        assert_eq!(columns.statuses, [2, 1]);
    }

    #[test]
    fn names_that_prefix_each_other_stay_apart() {
        let mut map = StatusMap::default();
        for (test, status) in [("t", PASSED), ("t[", FAILED), ("", SKIPPED), ("t", XFAIL)] {
            map.insert(test, status);
        }
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("t", XFAIL), ("t[", FAILED), ("", SKIPPED)]
        );
        assert_eq!(map.get(""), Some(SKIPPED));
    }

    #[test]
    fn a_map_for_a_log_never_moves_what_it_holds() {
        let log = "PASSED t::a\nFAILED t::bb - x\nnoise\nPASSED t::a\n";
        let mut map = StatusMap::for_log(log);
        let capacities = |map: &StatusMap| {
            (
                map.names.capacity(),
                map.ends.capacity(),
                map.index.capacity(),
            )
        };
        let before = capacities(&map);
        assert!(before.0 >= log.len() && before.1 >= 4, "{before:?}");
        for (test, status) in [("t::a", PASSED), ("t::bb", FAILED), ("t::a", PASSED)] {
            map.insert(test, status);
        }
        assert_eq!(capacities(&map), before);
        // A log of empty lines does not reserve a test per line.
        let blank = "\n".repeat(8_000);
        assert!(StatusMap::for_log(&blank).ends.capacity() < 2_000);
    }

    #[test]
    fn many_tests_are_found_after_the_table_grows() {
        let mut map = StatusMap::default();
        for i in 0..10_000 {
            map.insert(
                &format!("test_{i}"),
                if i % 3 == 0 { FAILED } else { PASSED },
            );
        }
        assert_eq!(map.get("test_9999"), Some(FAILED));
        assert_eq!(map.get("test_9998"), Some(PASSED));
        assert_eq!(map.get("test_10000"), None);
        assert_eq!(map.iter().count(), 10_000);
    }
}
