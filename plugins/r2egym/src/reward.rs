//! R2E-Gym's reward, `DockerRuntime._calculate_reward_r2e`: 1.0 when the parsed
//! status map equals the row's `expected_output_json`, else 0.0.
//!
//! "Equals" follows R2E-Gym's rules, quirks included:
//!
//! * both maps lose single-number colour codes from their names
//!   (`decolor_dict_keys`), so compound codes such as `ESC[1;31m` stay;
//! * both are then rebuilt in sorted name order with each name cut at its
//!   first `" - "`, so names that collide keep the status of the last one;
//! * the maps must have the same size; then each parsed name, in that order,
//!   must have the same status in the expected map (the empty name of a
//!   collection error included).
//!
//! Where R2E-Gym stops with a `KeyError` (a parsed name the expected map lacks,
//! with the sizes equal) the verdict is [`Verdict::UnexpectedTest`] and the
//! reward 0.0.

use std::borrow::Cow;

use serde::{Serialize, Serializer};

use crate::OrderedMap;
use crate::log_parser::StatusMap;
use crate::{ansi, python};

/// Test name to expected status, as the row's `expected_output_json` holds it.
pub(crate) type ExpectedMap = OrderedMap<String, String>;

/// Reads `expected_output_json`: a JSON object of strings.
pub(crate) fn parse_expected(json: &str) -> Result<ExpectedMap, String> {
    serde_json::from_str(json)
        .map_err(|error| format!("is not a JSON object of test name to status string: {error}"))
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
pub(crate) type NormalizedMap<'a> = OrderedMap<Cow<'a, str>, &'a str>;

impl Comparison<'_> {
    /// The reward R2E-Gym pays (0.0 where it raises).
    pub(crate) fn reward(&self) -> f64 {
        if self.verdict == Verdict::Match {
            1.0
        } else {
            0.0
        }
    }

    /// The exception R2E-Gym raises instead of returning a reward, as
    /// `(type, message)`.
    pub(crate) fn r2e_exception(&self) -> Option<(&'static str, String)> {
        match &self.verdict {
            Verdict::UnexpectedTest { test } => Some(("KeyError", python::repr(test))),
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
            .map(|(name, status)| (name.as_str(), status.as_str())),
    );
    let expected = normalize(
        expected
            .iter()
            .map(|(name, status)| (name.as_str(), status.as_str())),
    );
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
        match expected.get(test) {
            None => {
                return Verdict::UnexpectedTest {
                    test: test.to_string(),
                };
            }
            Some(wanted) if wanted != status => {
                return Verdict::StatusMismatch {
                    test: test.to_string(),
                    parsed: (*status).to_owned(),
                    expected: (*wanted).to_owned(),
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
fn normalize<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> NormalizedMap<'a> {
    let mut decolored = NormalizedMap::default();
    for (name, status) in entries {
        decolored.insert(ansi::strip_key_codes(name), status);
    }
    // Byte order of UTF-8 is code point order, which is what `sorted` uses.
    decolored.sort_unstable_keys();
    let mut normalized =
        NormalizedMap::with_capacity_and_hasher(decolored.len(), Default::default());
    for (name, status) in decolored {
        let cut = match name {
            Cow::Borrowed(name) => Cow::Borrowed(python::before(name, " - ")),
            Cow::Owned(name) => Cow::Owned(python::before(&name, " - ").to_owned()),
        };
        normalized.insert(cut, status);
    }
    normalized
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
        let expected = parse_expected(expected).unwrap();
        check(&compare(&parsed, &expected));
    }

    #[test]
    fn equal_maps_match_whatever_their_order() {
        let parsed = [("b", Status::Passed), ("a", Status::Failed)];
        comparing(&parsed, r#"{"a": "FAILED", "b": "PASSED"}"#, |comparison| {
            assert_eq!(comparison.verdict, Verdict::Match);
            assert_eq!(comparison.reward(), 1.0);
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
            assert_eq!(comparison.reward(), 0.0);
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
            assert_eq!(comparison.r2e_exception(), Some(("KeyError", "'b'".into())));
            assert_eq!(comparison.reward(), 0.0);
        });
    }

    #[test]
    fn counts_are_compared_after_names_collapse() {
        // "t[a - b]" and "t[a - c]" both become "t[a"; the sorted-last wins.
        let parsed = [("t[a - b]", Status::Passed), ("t[a", Status::Failed)];
        let expected = r#"{"t[a - b]": "PASSED", "t[a - c]": "FAILED"}"#;
        comparing(&parsed, expected, |comparison| {
            assert_eq!(comparison.parsed.get("t[a").copied(), Some("PASSED"));
            assert_eq!(comparison.expected.get("t[a").copied(), Some("FAILED"));
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
        comparing(&[], "{}", |comparison| assert_eq!(comparison.reward(), 1.0));
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
    fn expected_must_be_an_object_of_strings() {
        assert!(parse_expected(r#"["a"]"#).is_err());
        assert!(parse_expected(r#"{"a": 1}"#).is_err());
        assert!(parse_expected("not json").is_err());
    }
}
