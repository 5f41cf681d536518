//! swebench 4.1.0's per-repo tables, carried as data.
//!
//! `data/swebench-4.1.0-specs.json` is generated from the Python package by
//! `tools/gen_spec_table.py`; it holds, for every repo whose log parser this
//! adapter implements, the parser 4.1.0 picks by repo, whether the repo is
//! graded fail-only, and per version the spec fields the eval script reads.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::InvalidInput;
use crate::parsers::ParserName;

/// How the harness builds a repo's eval script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum Language {
    /// `make_eval_script_list_py`, which this adapter reproduces.
    #[serde(rename = "py")]
    Python,
    /// `make_eval_script_list_js`; such repos are graded but get no generated script.
    #[serde(rename = "js")]
    JavaScript,
}

/// One repo's row of the 4.1.0 tables.
#[derive(Debug, Deserialize)]
pub(crate) struct RepoSpec {
    /// How its eval script is built.
    pub(crate) language: Language,
    /// `MAP_REPO_TO_PARSER[repo]`.
    pub(crate) log_parser: ParserName,
    /// Whether the repo is in `FAIL_ONLY_REPOS`.
    pub(crate) fail_only: bool,
    /// `MAP_REPO_VERSION_TO_SPECS[repo]`, keyed by version.
    pub(crate) versions: HashMap<String, VersionSpec>,
}

/// The spec fields of one repo version that the eval script uses.
#[derive(Debug, Deserialize)]
pub(crate) struct VersionSpec {
    /// The test command; the test directives are appended to it.
    pub(crate) test_cmd: String,
    /// Reinstalls the package before the tests run.
    pub(crate) install: Option<String>,
    /// Extra commands run right after entering the repo (locale exports for old Django).
    #[serde(default)]
    pub(crate) eval_commands: Vec<String>,
}

#[derive(Deserialize)]
struct SpecTable {
    repos: HashMap<String, RepoSpec>,
}

fn table() -> &'static SpecTable {
    static TABLE: OnceLock<SpecTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_json::from_str(include_str!("../data/swebench-4.1.0-specs.json"))
            .expect("the embedded spec table matches its schema (checked by the spec tests)")
    })
}

/// The 4.1.0 table row for `repo`, when the adapter supports it.
pub(crate) fn repo_spec(repo: &str) -> Option<&'static RepoSpec> {
    table().repos.get(repo)
}

/// The 4.1.0 specs of `repo` at `version`, as `make_test_spec` looks them up.
///
/// # Errors
///
/// When the repo or the version is missing from the table; the message names both.
pub(crate) fn lookup(
    repo: &str,
    version: &str,
) -> Result<(&'static RepoSpec, &'static VersionSpec), InvalidInput> {
    let repo_spec = repo_spec(repo).ok_or_else(|| {
        InvalidInput::new(format!(
            "repo `{repo}` is not in the swebench 4.1.0 spec table this adapter supports (repos: {})",
            supported_repos().join(", ")
        ))
    })?;
    let version_spec = repo_spec.versions.get(version).ok_or_else(|| {
        InvalidInput::new(format!(
            "repo `{repo}` has no version `{version}` in the swebench 4.1.0 spec table (MAP_REPO_VERSION_TO_SPECS)"
        ))
    })?;
    Ok((repo_spec, version_spec))
}

fn supported_repos() -> Vec<&'static str> {
    let mut repos: Vec<_> = table().repos.keys().map(String::as_str).collect();
    repos.sort_unstable();
    repos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_parses_and_covers_the_swe_bench_repos() {
        assert_eq!(table().repos.len(), 19);
        let (repo, version) = lookup("django/django", "4.2").unwrap();
        assert_eq!(repo.log_parser, ParserName::Django);
        assert_eq!(repo.language, Language::Python);
        assert_eq!(
            version.test_cmd,
            "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
        );
        assert!(repo_spec("markedjs/marked").unwrap().fail_only);
    }

    #[test]
    fn misses_name_repo_and_version() {
        let error = lookup("django/django", "0.20").unwrap_err();
        assert!(
            error.0.contains("django/django") && error.0.contains("`0.20`"),
            "{error}"
        );
        let error = lookup("dbt-labs/dbt-core", "1.7").unwrap_err();
        assert!(error.0.contains("dbt-labs/dbt-core"), "{error}");
    }
}
