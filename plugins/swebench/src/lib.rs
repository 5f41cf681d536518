//! `swebench`: a task adapter that evaluates SWE-bench instances the way the
//! official `swebench` harness does, version for version (`grader-version`
//! `swebench-4.1.0` or `swebench-5.0.2`).
//!
//! The entry points below mirror the WIT `adapter` interface with plain Rust
//! types; `guest` converts between the two and is their only caller (tests
//! and benchmarks call the built component through `sandfleet-testkit`).
//! Everything is pure: the host runs the commands `prepare` returns and hands
//! their output to `grade`.
//!
//! - `load` reads a row and fixes every version-specific choice (parser, eval
//!   type, image) into `task::TaskData`, the task's `data`, together with
//!   the settings later calls cannot see (`timeout-s`).
//! - `prepare` writes the model patch to `/tmp/patch.diff` and the eval script
//!   to `/eval.sh`, and returns one evaluate command: the harness's patch-apply
//!   chain followed by `/bin/bash /eval.sh`, stderr merged, so its output is
//!   the harness's `test_output.txt` (or a `>>>>> Patch Apply Failed` notice).
//! - `grade` takes that one output and returns the harness's `report.json`:
//!   passed when resolved, failed when graded and unresolved, error when the
//!   instance was not evaluated (no patch, patch not applied, unusable log,
//!   timeout, parser exception). Where the harness writes no report (timeout,
//!   parser exception) the report is `null`.

/// A `regex::Regex` compiled once, on first use, from a pattern known to be valid.
macro_rules! lazy_regex {
    ($pattern:expr) => {{
        static REGEX: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        REGEX.get_or_init(|| regex::Regex::new($pattern).expect("a valid pattern"))
    }};
}
pub(crate) use lazy_regex;

mod diff;
mod error;
mod eval_script;
mod grade;
mod grader;
mod grading;
mod guest;
mod image;
mod infra;
mod parsers;
mod pystr;
mod python_json;
mod report;
mod row;
mod script;
mod settings;
mod spec;
mod status_map;
mod summary;
mod task;

use error::InvalidInput;
use parsers::ParserName;
use settings::{SETTING_DOCS, SettingDoc, Settings};
use status_map::StatusMap;
use summary::Graded;
use task::Task;

/// What `describe` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdapterInfo {
    /// `swebench`.
    pub(crate) name: &'static str,
    /// This crate's version.
    pub(crate) version: &'static str,
    /// One line on what the adapter does.
    pub(crate) summary: &'static str,
    /// The settings it accepts.
    pub(crate) settings: &'static [SettingDoc],
}

/// `describe`.
pub(crate) fn describe() -> AdapterInfo {
    AdapterInfo {
        name: "swebench",
        version: env!("CARGO_PKG_VERSION"),
        summary: "SWE-bench instances, prepared and graded like the official swebench harness (4.1.0 or 5.0.2)",
        settings: &SETTING_DOCS,
    }
}

/// `load`: one dataset row (a JSON object) into a task.
///
/// # Errors
///
/// When a setting or the row is malformed; the message names the field.
pub(crate) fn load(row: &str, settings: &[(&str, &str)]) -> Result<Task, InvalidInput> {
    row::load(row, &Settings::parse(settings)?)
}

/// `parse-log`: runs a parser (registry name, aliases included) of the
/// configured grader version on `log`, exactly as given, and returns its
/// status map with every value as the parser stored it.
///
/// # Errors
///
/// When the parser is unknown (the message lists the known ones), the grader
/// version is missing, or the Python parser raises on this log.
pub(crate) fn parse_log(
    parser: &str,
    log: &str,
    settings: &[(&str, &str)],
) -> Result<StatusMap, InvalidInput> {
    let grader = settings::grader_version(settings)?;
    let name = ParserName::from_registry_name(parser).ok_or_else(|| {
        InvalidInput::new(format!(
            "unknown log parser `{parser}`; valid parsers: {}",
            ParserName::registry_names().collect::<Vec<_>>().join(", ")
        ))
    })?;
    name.parse(grader, log).map_err(|raised| {
        InvalidInput::new(format!(
            "{parser} ({}) raised {raised} on this log",
            grader.name()
        ))
    })
}

/// `summarize`: the run report of the configured grader version.
///
/// # Errors
///
/// When the grader version is missing or unknown.
pub(crate) fn summarize(
    results: &[Graded],
    settings: &[(&str, &str)],
) -> Result<String, InvalidInput> {
    Ok(summary::run_report(
        settings::grader_version(settings)?,
        results,
    ))
}
