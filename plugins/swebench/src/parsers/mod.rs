//! The harness's log parsers, one behaviour per grader version.
//!
//! Each parser turns a test runner's output into a [`StatusMap`]. They are
//! reproduced quirk for quirk: which lines count, how ids are cut from them,
//! and where Python raises (the harness then fails the instance).

mod django;
mod marked;
mod pytest;
mod pytest_v2;
mod seaborn;
mod sympy;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grader::GraderVersion;
use crate::status_map::StatusMap;

/// A log parser, by the name of the function that implements it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ParserName {
    /// `parse_log_pytest`: pytest `-rA` summary lines.
    #[serde(rename = "parse_log_pytest")]
    Pytest,
    /// `parse_log_pytest_options`: as pytest, shortening path-like parameters.
    #[serde(rename = "parse_log_pytest_options")]
    PytestOptions,
    /// `parse_log_pytest_v2`: as pytest, after stripping colours, also reading
    /// status-last lines.
    #[serde(rename = "parse_log_pytest_v2")]
    PytestV2,
    /// `parse_log_django`: Django's runner at verbosity 2.
    #[serde(rename = "parse_log_django")]
    Django,
    /// `parse_log_seaborn`.
    #[serde(rename = "parse_log_seaborn")]
    Seaborn,
    /// `parse_log_sympy`: sympy's `bin/test`.
    #[serde(rename = "parse_log_sympy")]
    Sympy,
    /// `parse_log_matplotlib`: as pytest, with `MouseButton` names as numbers.
    #[serde(rename = "parse_log_matplotlib")]
    Matplotlib,
    /// `parse_log_marked`: jasmine failure lines (markedjs/marked).
    #[serde(rename = "parse_log_marked")]
    Marked,
}

/// Registry names that are aliases of a parser (`parse_log_astroid =
/// parse_log_pytest`, ...), as 5.x's `PARSER_REGISTRY` lists them.
const ALIASES: [(&str, ParserName); 13] = [
    ("parse_log_astroid", ParserName::Pytest),
    ("parse_log_flask", ParserName::Pytest),
    ("parse_log_marshmallow", ParserName::Pytest),
    ("parse_log_pvlib", ParserName::Pytest),
    ("parse_log_pyvista", ParserName::Pytest),
    ("parse_log_sqlfluff", ParserName::Pytest),
    ("parse_log_xarray", ParserName::Pytest),
    ("parse_log_pydicom", ParserName::PytestOptions),
    ("parse_log_requests", ParserName::PytestOptions),
    ("parse_log_pylint", ParserName::PytestOptions),
    ("parse_log_astropy", ParserName::PytestV2),
    ("parse_log_scikit", ParserName::PytestV2),
    ("parse_log_sphinx", ParserName::PytestV2),
];

impl ParserName {
    /// Every parser, in the registry's order.
    pub(crate) const ALL: [Self; 8] = [
        Self::Pytest,
        Self::PytestOptions,
        Self::Django,
        Self::PytestV2,
        Self::Seaborn,
        Self::Sympy,
        Self::Matplotlib,
        Self::Marked,
    ];

    /// The function's name, e.g. `parse_log_pytest`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Pytest => "parse_log_pytest",
            Self::PytestOptions => "parse_log_pytest_options",
            Self::PytestV2 => "parse_log_pytest_v2",
            Self::Django => "parse_log_django",
            Self::Seaborn => "parse_log_seaborn",
            Self::Sympy => "parse_log_sympy",
            Self::Matplotlib => "parse_log_matplotlib",
            Self::Marked => "parse_log_marked",
        }
    }

    /// Looks a parser up by a registry name, aliases included.
    pub(crate) fn from_registry_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|parser| parser.name() == name)
            .or_else(|| {
                ALIASES
                    .iter()
                    .find(|(alias, _)| *alias == name)
                    .map(|&(_, parser)| parser)
            })
    }

    /// Every name [`Self::from_registry_name`] accepts, for error messages.
    pub(crate) fn registry_names() -> impl Iterator<Item = &'static str> {
        Self::ALL
            .into_iter()
            .map(Self::name)
            .chain(ALIASES.iter().map(|(alias, _)| *alias))
    }

    /// Runs the parser as `grader` ships it on `log`, exactly as given (the
    /// parsers themselves do no newline translation).
    ///
    /// # Errors
    ///
    /// When the Python parser raises on this log.
    pub(crate) fn parse(self, grader: GraderVersion, log: &str) -> Result<StatusMap, ParserRaised> {
        match self {
            Self::Pytest => Ok(pytest::parse_pytest(log, grader)),
            Self::PytestOptions => Ok(pytest::parse_pytest_options(log, grader)),
            Self::Matplotlib => Ok(pytest::parse_matplotlib(log, grader)),
            Self::PytestV2 => Ok(pytest_v2::parse(log, grader)),
            Self::Django => django::parse(log),
            Self::Seaborn => seaborn::parse(log, grader),
            Self::Sympy => Ok(sympy::parse(log)),
            Self::Marked => Ok(marked::parse(log)),
        }
    }
}

/// A Python exception a parser raised. The harness does not catch it: the
/// instance ends without a report and counts as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParserRaised {
    /// `IndexError: list index out of range`, from `line.split()[1]` on a line
    /// with a single token.
    IndexError,
}

impl fmt::Display for ParserRaised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexError => f.write_str("IndexError: list index out of range"),
        }
    }
}

/// `line.split()[1]`.
fn second_token<'a>(tokens: &[&'a str]) -> Result<&'a str, ParserRaised> {
    tokens.get(1).copied().ok_or(ParserRaised::IndexError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_resolve_aliases() {
        assert_eq!(
            ParserName::from_registry_name("parse_log_sphinx"),
            Some(ParserName::PytestV2)
        );
        assert_eq!(
            ParserName::from_registry_name("parse_log_django"),
            Some(ParserName::Django)
        );
        assert_eq!(ParserName::from_registry_name("parse_log_jest"), None);
        assert_eq!(ParserName::registry_names().count(), 21);
    }
}
