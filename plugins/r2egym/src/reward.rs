//! R2E-Gym's reward, `DockerRuntime._calculate_reward_r2e`
//! (`agenthub/runtime/docker.py:539-569` at 69bc953): 1.0 when the parsed
//! status map equals the row's `expected_output_json`, else 0.0, and no
//! reward at all where that code raises.
//!
//! In the order R2E-Gym runs it:
//!
//! 1. `parse_logs` asks `parse_log_fn(repo_name)` for a parser, which raises
//!    `ValueError` for a repository outside its list
//!    (`repo_analysis/execution_log_parser.py:38-62`);
//! 2. the row's `expected_output_json` is read; without it R2E-Gym falls back
//!    to `self.read_file(...)`, which its `@DeprecationWarning` decorator
//!    turned into an exception instance, so the call raises `TypeError`
//!    (`docker.py:391`, `:545-548`);
//! 3. `json.loads` decodes it (`docker.py:550`): `TypeError` when it is not
//!    text, `JSONDecodeError` (or `ValueError`, `RecursionError`) when Python
//!    cannot decode it (see [`crate::pyjson`]);
//! 4. `decolor_dict_keys` calls `.items()` on it: `AttributeError` when it is
//!    not an object (`execution_log_parser.py:66-68`);
//! 5. both maps lose single-number colour codes from their names, are
//!    rebuilt in sorted name order with each name cut at its first `" - "`
//!    (names that collide keep the status of the last one), must have the
//!    same size, and then each parsed name in that order must have the same
//!    status in the expected map: a name the expected map lacks raises
//!    `KeyError` (`docker.py:556-565`).
//!
//! Expected names and values are Python strings as `json.loads` makes them
//! ([`PyStr`]); a value that is not a string never equals a status.

use std::borrow::Cow;

use serde::{Serialize, Serializer};

use crate::OrderedMap;
use crate::log_parser::StatusMap;
use crate::pyjson::{self, Document, Member, PyStr};
use crate::{ansi, python};

/// The repositories `parse_log_fn` has a parser for.
pub(crate) const PARSER_REPOS: [&str; 11] = [
    "sympy",
    "pandas",
    "pillow",
    "scrapy",
    "pyramid",
    "tornado",
    "datalad",
    "aiohttp",
    "coveragepy",
    "numpy",
    "orange3",
];

/// Test name to expected status, as `json.loads` decodes the row's
/// `expected_output_json`.
pub(crate) type ExpectedMap = Vec<(PyStr, Member)>;

/// The row's `expected_output_json`, as the task keeps it until grading,
/// where R2E-Gym reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "kebab-case")]
pub(crate) enum ExpectedField {
    /// Text, decoded when grading.
    Text(String),
    /// A JSON value that is not text, by its Python type name.
    NotText(String),
    /// The row has no such field.
    Missing,
}

/// An exception R2E-Gym's reward code raises instead of returning a reward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct R2eException {
    /// The Python exception type.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    /// `str(exception)`.
    pub(crate) message: String,
    /// Where in R2E-Gym it is raised.
    #[serde(rename = "raised_in")]
    pub(crate) at: &'static str,
}

impl R2eException {
    /// One line on what R2E-Gym would have done.
    pub(crate) fn describe(&self) -> String {
        format!(
            "R2E-Gym raises {}: {} ({}) and gives no reward",
            self.kind, self.message, self.at
        )
    }
}

/// `parse_log_fn(f"{repo_name}")`: raises for a repository it has no parser for.
pub(crate) fn check_parser(repo_name: &str) -> Result<(), R2eException> {
    if PARSER_REPOS.contains(&repo_name) {
        return Ok(());
    }
    Err(R2eException {
        kind: "ValueError",
        message: format!("Parser for {repo_name} not implemented"),
        at: "parse_log_fn, repo_analysis/execution_log_parser.py:62",
    })
}

/// Steps 2 to 4: the expected map, or the exception R2E-Gym raises on the
/// way to it.
pub(crate) fn decode_expected(field: &ExpectedField) -> Result<ExpectedMap, R2eException> {
    let text = match field {
        ExpectedField::Text(text) => text,
        ExpectedField::Missing => {
            return Err(R2eException {
                kind: "TypeError",
                message: "'DeprecationWarning' object is not callable".into(),
                at: "the read_file fallback for a row without expected_output_json, \
                     agenthub/runtime/docker.py:391 and :548",
            });
        }
        ExpectedField::NotText(type_name) => {
            return Err(R2eException {
                kind: "TypeError",
                message: format!(
                    "the JSON object must be str, bytes or bytearray, not {type_name}"
                ),
                at: "json.loads, agenthub/runtime/docker.py:550",
            });
        }
    };
    match pyjson::loads(text) {
        Ok(Document::Object(members)) => Ok(members),
        Ok(Document::NotObject(type_name)) => Err(R2eException {
            kind: "AttributeError",
            message: format!("'{type_name}' object has no attribute 'items'"),
            at: "decolor_dict_keys, repo_analysis/execution_log_parser.py:68",
        }),
        Err(raised) => Err(R2eException {
            kind: raised.kind,
            message: raised.message,
            at: "json.loads, agenthub/runtime/docker.py:550",
        }),
    }
}

/// A status on either side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status<'a> {
    /// A string (the parser's, or an expected one).
    Text(&'a [u8]),
    /// An expected value that is not a string, as its JSON text.
    Other(&'a str),
}

impl Status<'_> {
    fn shown(self) -> String {
        match self {
            Status::Text(text) => String::from_utf8_lossy(text).into_owned(),
            Status::Other(json) => json.to_owned(),
        }
    }
}

/// How the parsed map compared with the expected one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub(crate) enum Verdict {
    /// Every test has its expected status: reward 1.0.
    Match,
    /// The maps differ in size.
    CountMismatch,
    /// The first test, in R2E-Gym's order, whose status differs.
    StatusMismatch {
        test: String,
        parsed: String,
        expected: String,
    },
    /// A parsed test the expected map lacks; R2E-Gym raises `KeyError` here.
    UnexpectedTest { test: String },
}

/// Both maps as R2E-Gym compares them, and the verdict. The report shows the
/// verdict and the sizes: the parsed map is in it already, the expected one in
/// the dataset.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison<'a> {
    #[serde(flatten)]
    pub(crate) verdict: Verdict,
    #[serde(rename = "parsed_count", serialize_with = "serialize_len")]
    pub(crate) parsed: NormalizedMap<'a>,
    #[serde(rename = "expected_count", serialize_with = "serialize_len")]
    pub(crate) expected: NormalizedMap<'a>,
}

/// Test name to status after R2E-Gym's normalization; names borrow from the
/// input unless a colour code had to go.
pub(crate) type NormalizedMap<'a> = OrderedMap<Cow<'a, [u8]>, Status<'a>>;

impl Comparison<'_> {
    /// The reward R2E-Gym pays; none where it raises.
    pub(crate) fn reward(&self) -> Option<f64> {
        match self.verdict {
            Verdict::Match => Some(1.0),
            Verdict::CountMismatch | Verdict::StatusMismatch { .. } => Some(0.0),
            Verdict::UnexpectedTest { .. } => None,
        }
    }

    /// The exception R2E-Gym raises instead of returning a reward.
    pub(crate) fn r2e_exception(&self) -> Option<R2eException> {
        match &self.verdict {
            Verdict::UnexpectedTest { test } => Some(R2eException {
                kind: "KeyError",
                message: python::repr(test),
                at: "the comparison in DockerRuntime._calculate_reward_r2e, \
                     agenthub/runtime/docker.py:562",
            }),
            _ => None,
        }
    }
}

fn serialize_len<S: Serializer>(map: &NormalizedMap<'_>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(map.len() as u64)
}

/// Compares `parsed` (from the log) with `expected` (from the row).
pub(crate) fn compare<'a>(parsed: &'a StatusMap, expected: &'a ExpectedMap) -> Comparison<'a> {
    let parsed = normalize(
        parsed
            .iter()
            .map(|(name, status)| (name.as_bytes(), Status::Text(status.as_str().as_bytes()))),
    );
    let expected = normalize(expected.iter().map(|(name, value)| {
        let status = match value {
            Member::Str(text) => Status::Text(text),
            Member::Other(json) => Status::Other(json),
        };
        (name.as_slice(), status)
    }));
    let verdict = verdict(&parsed, &expected);
    Comparison {
        verdict,
        parsed,
        expected,
    }
}

fn verdict(parsed: &NormalizedMap<'_>, expected: &NormalizedMap<'_>) -> Verdict {
    if parsed.len() != expected.len() {
        return Verdict::CountMismatch;
    }
    for (test, status) in parsed {
        let test_name = || String::from_utf8_lossy(test).into_owned();
        match expected.get(test) {
            None => return Verdict::UnexpectedTest { test: test_name() },
            Some(wanted) if wanted != status => {
                return Verdict::StatusMismatch {
                    test: test_name(),
                    parsed: status.shown(),
                    expected: wanted.shown(),
                };
            }
            Some(_) => {}
        }
    }
    Verdict::Match
}

/// `decolor_dict_keys`, then `{k.split(" - ")[0]: m[k] for k in sorted(m)}`,
/// with Python's dict semantics: a repeated name keeps its first place and
/// takes the last value.
fn normalize<'a>(entries: impl Iterator<Item = (&'a [u8], Status<'a>)>) -> NormalizedMap<'a> {
    let mut decolored = NormalizedMap::default();
    for (name, status) in entries {
        decolored.insert(ansi::strip_key_codes(name), status);
    }
    // WTF-8 byte order is code point order, which is what `sorted` uses.
    decolored.sort_unstable_keys();
    let mut normalized =
        NormalizedMap::with_capacity_and_hasher(decolored.len(), Default::default());
    for (name, status) in decolored {
        let cut = match name {
            Cow::Borrowed(name) => Cow::Borrowed(before(name)),
            Cow::Owned(name) => Cow::Owned(before(&name).to_vec()),
        };
        normalized.insert(cut, status);
    }
    normalized
}

/// `name.split(" - ")[0]`.
fn before(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|window| window == b" - ")
        .map_or(name, |at| &name[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_parser::Status;

    /// Compares `parsed` with the expected JSON and hands the result to `check`.
    fn comparing(parsed: &[(&str, Status)], expected: &str, check: impl FnOnce(&Comparison<'_>)) {
        let parsed: StatusMap = parsed
            .iter()
            .map(|(name, status)| (name.to_string(), *status))
            .collect();
        let expected = decode_expected(&ExpectedField::Text(expected.into())).unwrap();
        check(&compare(&parsed, &expected));
    }

    #[test]
    fn equal_maps_match_whatever_their_order() {
        let parsed = [("b", Status::Passed), ("a", Status::Failed)];
        comparing(&parsed, r#"{"a": "FAILED", "b": "PASSED"}"#, |comparison| {
            assert_eq!(comparison.verdict, Verdict::Match);
            assert_eq!(comparison.reward(), Some(1.0));
            assert_eq!(comparison.r2e_exception(), None);
        });
    }

    #[test]
    fn the_first_differing_status_in_sorted_order_is_reported() {
        let parsed = [("z", Status::Failed), ("m", Status::Error)];
        comparing(&parsed, r#"{"z": "PASSED", "m": "PASSED"}"#, |comparison| {
            assert_eq!(
                comparison.verdict,
                Verdict::StatusMismatch {
                    test: "m".into(),
                    parsed: "ERROR".into(),
                    expected: "PASSED".into()
                }
            );
            assert_eq!(comparison.reward(), Some(0.0));
        });
    }

    #[test]
    fn a_status_mismatch_before_an_unknown_name_stops_without_raising() {
        let parsed = [("a", Status::Failed), ("b", Status::Passed)];
        comparing(&parsed, r#"{"a": "PASSED", "c": "PASSED"}"#, |comparison| {
            assert!(matches!(comparison.verdict, Verdict::StatusMismatch { .. }));
            assert_eq!(comparison.r2e_exception(), None);
        });
    }

    #[test]
    fn an_unknown_name_with_equal_counts_is_r2e_gyms_key_error() {
        let parsed = [("a", Status::Passed), ("b", Status::Passed)];
        comparing(&parsed, r#"{"a": "PASSED", "c": "PASSED"}"#, |comparison| {
            assert_eq!(
                comparison.verdict,
                Verdict::UnexpectedTest { test: "b".into() }
            );
            let raised = comparison.r2e_exception().unwrap();
            assert_eq!((raised.kind, raised.message.as_str()), ("KeyError", "'b'"));
            assert_eq!(comparison.reward(), None);
        });
    }

    #[test]
    fn counts_are_compared_after_names_collapse() {
        // "t[a - b]" and "t[a - c]" both become "t[a"; the sorted-last wins.
        let parsed = [("t[a - b]", Status::Passed), ("t[a", Status::Failed)];
        let expected = r#"{"t[a - b]": "PASSED", "t[a - c]": "FAILED"}"#;
        comparing(&parsed, expected, |comparison| {
            let key: &[u8] = b"t[a";
            let text = |status: &'static [u8]| Some(super::Status::Text(status));
            assert_eq!(comparison.parsed.get(key).copied(), text(b"PASSED"));
            assert_eq!(comparison.expected.get(key).copied(), text(b"FAILED"));
            assert_eq!(comparison.parsed.len(), 1);
            assert!(matches!(comparison.verdict, Verdict::StatusMismatch { .. }));
        });
    }

    #[test]
    fn only_single_number_colour_codes_are_removed_from_names() {
        let plain = [("a", Status::Passed)];
        comparing(
            &plain,
            r#"{"\u001b[31ma\u001b[0m": "PASSED"}"#,
            |comparison| {
                assert_eq!(comparison.verdict, Verdict::Match);
            },
        );
        comparing(&plain, r#"{"\u001b[1;31ma": "PASSED"}"#, |comparison| {
            assert_eq!(
                comparison.verdict,
                Verdict::UnexpectedTest { test: "a".into() }
            );
        });
    }

    #[test]
    fn an_empty_expected_map_matches_an_empty_parse() {
        comparing(&[], "{}", |comparison| {
            assert_eq!(comparison.reward(), Some(1.0))
        });
    }

    #[test]
    fn the_report_shows_the_verdict_and_sizes() {
        let parsed = [("a", Status::Passed)];
        comparing(&parsed, r#"{"a": "FAILED"}"#, |comparison| {
            assert_eq!(
                serde_json::to_value(comparison).unwrap(),
                serde_json::json!({
                    "verdict": "status-mismatch",
                    "test": "a",
                    "parsed": "PASSED",
                    "expected": "FAILED",
                    "parsed_count": 1,
                    "expected_count": 1,
                })
            );
        });
    }

    #[test]
    fn values_that_are_not_strings_never_match() {
        let parsed = [("a", Status::Passed)];
        comparing(&parsed, r#"{"a": 1}"#, |comparison| {
            assert_eq!(
                comparison.verdict,
                Verdict::StatusMismatch {
                    test: "a".into(),
                    parsed: "PASSED".into(),
                    expected: "1".into()
                }
            );
            assert_eq!(comparison.reward(), Some(0.0));
        });
    }

    #[test]
    fn each_raising_expected_field_names_python_s_exception() {
        let raised = |field: ExpectedField| {
            let exception = decode_expected(&field).unwrap_err();
            (exception.kind, exception.message)
        };
        assert_eq!(
            raised(ExpectedField::Missing),
            (
                "TypeError",
                "'DeprecationWarning' object is not callable".into()
            )
        );
        assert_eq!(
            raised(ExpectedField::NotText("NoneType".into())),
            (
                "TypeError",
                "the JSON object must be str, bytes or bytearray, not NoneType".into()
            )
        );
        assert_eq!(
            raised(ExpectedField::Text("[\"a\"]".into())),
            (
                "AttributeError",
                "'list' object has no attribute 'items'".into()
            )
        );
        assert_eq!(
            raised(ExpectedField::Text("{\"a\": }".into())).0,
            "JSONDecodeError"
        );
        assert_eq!(
            check_parser("django").unwrap_err().message,
            "Parser for django not implemented"
        );
        assert!(check_parser("orange3").is_ok());
    }
}
