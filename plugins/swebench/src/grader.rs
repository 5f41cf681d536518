//! Which official harness the adapter reproduces.

use serde::{Deserialize, Serialize};

use crate::error::InvalidInput;

/// A version of the `swebench` package whose behaviour the adapter matches.
///
/// The two differ in where facts come from (4.1.0 derives the parser, eval type
/// and eval script from the repo; 5.0.2 reads them from the row) and in several
/// grading rules, each of which asks this type which side it is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum GraderVersion {
    /// `swebench==4.1.0`.
    #[serde(rename = "swebench-4.1.0")]
    V4_1_0,
    /// `swebench==5.0.2`.
    #[serde(rename = "swebench-5.0.2")]
    V5_0_2,
}

impl GraderVersion {
    /// Every supported version, oldest first.
    pub(crate) const ALL: [Self; 2] = [Self::V4_1_0, Self::V5_0_2];

    /// The setting value naming this version, e.g. `swebench-4.1.0`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::V4_1_0 => "swebench-4.1.0",
            Self::V5_0_2 => "swebench-5.0.2",
        }
    }

    /// Reads a setting value.
    ///
    /// # Errors
    ///
    /// When `value` names no supported version.
    pub(crate) fn parse(value: &str) -> Result<Self, InvalidInput> {
        Self::ALL
            .into_iter()
            .find(|version| version.name() == value)
            .ok_or_else(|| {
                InvalidInput::new(format!(
                    "grader-version `{value}` is not supported; use one of: {}",
                    Self::ALL.map(Self::name).join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for version in GraderVersion::ALL {
            assert_eq!(GraderVersion::parse(version.name()), Ok(version));
        }
        let error = GraderVersion::parse("5.0.2").unwrap_err();
        assert!(
            error.0.contains("swebench-4.1.0, swebench-5.0.2"),
            "{error}"
        );
    }
}
