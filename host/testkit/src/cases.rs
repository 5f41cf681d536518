//! Table-driven plugin tests: cases in TOML, run against a component.
//!
//! ```toml
//! world = "placement-policy"        # optional; checked against the plugin
//!
//! [[case]]
//! name = "the emptiest healthy cluster wins"
//! call = "place"
//! args.demand = { kind = "claim", image = 0, count = 1 }
//! args.clusters = [{ healthy = true, free-slots = 1 }, { healthy = true, free-slots = 5 }]
//! expect.ok = 1
//!
//! [[case]]
//! name = "no clusters is the caller's mistake"
//! call = "place"
//! args.demand = { kind = "claim" }
//! args.clusters = []
//! expect.error = "invalid-input"     # the plugin's own failure kind
//! expect.message = "no clusters"     # optional: a substring of its message
//! ```
//!
//! Arguments are named as in the WIT; record fields left out take their zero
//! value. `place` also takes its cluster table as one row per cluster,
//! `args.clusters = [{ free-slots = 1 }, { free-slots = 5, healthy = false }]`,
//! where a row's fields are those of `ClusterState` in kebab-case and default
//! to a healthy, empty cluster of weight 1. `expect` holds exactly one of `ok` (compared with the answer;
//! tables compare only the keys they list), `error` (the plugin's `failure`
//! kind) or `fault` (`deadline`, `memory-cap`, `out-of-fuel`, `trap` or
//! `contract`: the host stopped or rejected the call; `host` when the host
//! itself failed, which no case should expect).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sandfleet_plugin::{CallErrorKind, DynamicPlugin, FunctionType, Type, Val, VersionInfo};
use serde::Deserialize;
use serde_json::Value as Json;
use toml::Value as Toml;

use crate::values::{differences, to_json, to_val, toml_to_json, zero};

/// A case file that cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    /// The file cannot be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid case TOML.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The cases are written for another world.
    #[error("{path}: the cases are for a {expected}, but the plugin is a {found}")]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// The `world` the file names.
        expected: String,
        /// The plugin's world.
        found: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    world: Option<String>,
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    call: String,
    #[serde(default)]
    args: toml::Table,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    ok: Option<Toml>,
    error: Option<String>,
    fault: Option<String>,
    message: Option<String>,
}

/// How one case went.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// The case's name.
    pub name: String,
    /// Whether the answer met the expectation.
    pub passed: bool,
    /// For a failed case: what differs, one line each.
    pub problems: Vec<String>,
    /// For a failed case: the whole answer, as pretty JSON.
    pub answer: Option<String>,
}

/// The outcome of a case file.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plugin that ran.
    pub plugin: VersionInfo,
    /// One outcome per case, in file order.
    pub outcomes: Vec<CaseOutcome>,
}

impl Report {
    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| !o.passed).count()
    }

    /// A human-readable report: one line per case, details under failures,
    /// a summary line last.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for outcome in &self.outcomes {
            let mark = if outcome.passed { "ok  " } else { "FAIL" };
            writeln!(out, "{mark}  {}", outcome.name).expect("write to String");
            for problem in &outcome.problems {
                writeln!(out, "        {problem}").expect("write to String");
            }
            if let Some(answer) = &outcome.answer {
                writeln!(out, "        the answer was:").expect("write to String");
                for line in answer.lines() {
                    writeln!(out, "          {line}").expect("write to String");
                }
            }
        }
        let total = self.outcomes.len();
        writeln!(
            out,
            "{total} case{}: {} passed, {} failed",
            if total == 1 { "" } else { "s" },
            total - self.failed(),
            self.failed()
        )
        .expect("write to String");
        out
    }
}

/// Runs the case file `cases` against the component `wasm` and panics with
/// the rendered report when any case fails — the one-line body of a plugin
/// crate's case-table test.
///
/// # Panics
///
/// When the component does not load, the file is unusable, or a case fails.
pub fn assert_pass(wasm: impl AsRef<Path>, cases: impl AsRef<Path>) {
    let plugin = crate::TestPlugin::load(wasm.as_ref())
        .and_then(|plugin| plugin.dynamic())
        .unwrap_or_else(|e| panic!("{e}"));
    let report = run(&plugin, cases.as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.failed() == 0, "{}", report.render());
    assert!(
        !report.outcomes.is_empty(),
        "{}: no cases",
        cases.as_ref().display()
    );
}

/// Runs the cases in the file at `path` against `plugin`.
///
/// # Errors
///
/// When the file cannot be read or parsed, or names another world. A bad
/// case (unknown function, ill-typed argument) fails that case only.
pub fn run(plugin: &DynamicPlugin, path: &Path) -> Result<Report, CasesError> {
    let text = std::fs::read_to_string(path).map_err(|source| CasesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    run_text(plugin, &text, path)
}

/// Runs cases given as TOML text; `path` names them in errors.
///
/// # Errors
///
/// As [`run`].
pub fn run_text(plugin: &DynamicPlugin, text: &str, path: &Path) -> Result<Report, CasesError> {
    let file: CaseFile = toml::from_str(text).map_err(|e| CasesError::Parse {
        path: path.to_path_buf(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let world = plugin.info().kind.world();
    if let Some(expected) = file.world
        && expected != world
    {
        return Err(CasesError::WrongWorld {
            path: path.to_path_buf(),
            expected,
            found: world.to_string(),
        });
    }
    let outcomes = file
        .cases
        .iter()
        .map(|case| run_case(plugin, case))
        .collect();
    Ok(Report {
        plugin: plugin.info().clone(),
        outcomes,
    })
}

fn run_case(plugin: &DynamicPlugin, case: &Case) -> CaseOutcome {
    let failed = |problems: Vec<String>, answer: Option<Json>| CaseOutcome {
        name: case.name.clone(),
        passed: false,
        problems,
        answer: answer.map(|a| serde_json::to_string_pretty(&a).expect("JSON values serialize")),
    };
    let Some(signature) = plugin.functions().iter().find(|f| f.name == case.call) else {
        let known: Vec<&str> = plugin.functions().iter().map(|f| f.name).collect();
        return failed(
            vec![format!(
                "no function `{}` (the plugin has: {})",
                case.call,
                known.join(", ")
            )],
            None,
        );
    };
    let args = match arguments(signature, &case.args) {
        Ok(args) => args,
        Err(problem) => return failed(vec![problem], None),
    };
    let expectation = match Expectation::of(&case.expect, signature) {
        Ok(expectation) => expectation,
        Err(problem) => return failed(vec![problem], None),
    };
    let answer = plugin.call(signature, &args);
    let (problems, shown) = expectation.check(answer);
    if problems.is_empty() {
        CaseOutcome {
            name: case.name.clone(),
            passed: true,
            problems,
            answer: None,
        }
    } else {
        failed(problems, shown)
    }
}

fn arguments(signature: &FunctionType, given: &toml::Table) -> Result<Vec<Val>, String> {
    if let Some(unknown) = given
        .keys()
        .find(|key| signature.params.iter().all(|(name, _)| name != *key))
    {
        return Err(format!(
            "`{}` takes no argument `{unknown}` (its arguments: {})",
            signature.name,
            signature
                .params
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    signature
        .params
        .iter()
        .map(|(name, ty)| match given.get(name) {
            Some(Toml::Array(rows)) if signature.name == "place" && name == "clusters" => {
                crate::values::cluster_rows(ty, rows, "args.clusters")
            }
            Some(value) => to_val(ty, value, &format!("args.{name}")),
            None if matches!(ty, Type::Option(_)) => Ok(zero(ty)),
            None => Err(format!("missing argument `args.{name}`")),
        })
        .collect()
}

enum Expectation {
    Ok(Json),
    Declined(String, Option<String>),
    Fault(String, Option<String>),
}

const FAULTS: [&str; 6] = [
    "deadline",
    "memory-cap",
    "out-of-fuel",
    "trap",
    "contract",
    "invalid-arguments",
];

impl Expectation {
    fn of(expect: &Expect, signature: &FunctionType) -> Result<Self, String> {
        let message = expect.message.clone();
        match (&expect.ok, &expect.error, &expect.fault) {
            (Some(ok), None, None) => {
                if message.is_some() {
                    return Err("`expect.message` goes with `error` or `fault`, not `ok`".into());
                }
                Ok(Expectation::Ok(toml_to_json(ok)))
            }
            (None, Some(kind), None) => {
                if !matches!(signature.result, Some(Type::Result(_))) {
                    return Err(format!(
                        "`{}` cannot decline; expect `ok` or a `fault`",
                        signature.name
                    ));
                }
                Ok(Expectation::Declined(kind.clone(), message))
            }
            (None, None, Some(fault)) if FAULTS.contains(&fault.as_str()) => {
                Ok(Expectation::Fault(fault.clone(), message))
            }
            (None, None, Some(fault)) => Err(format!(
                "unknown fault `{fault}` (one of {})",
                FAULTS.join(", ")
            )),
            _ => Err("`expect` needs exactly one of `ok`, `error` and `fault`".into()),
        }
    }

    /// Problems (empty when met) and the answer worth showing.
    fn check(
        &self,
        answer: Result<Option<Val>, sandfleet_plugin::CallError>,
    ) -> (Vec<String>, Option<Json>) {
        let answer = answer.map(|value| value.as_ref().map(to_json));
        match (self, answer) {
            (Expectation::Ok(want), Ok(Some(Json::Object(case))))
                if case.len() == 1 && (case.contains_key("ok") || case.contains_key("err")) =>
            {
                let got = Json::Object(case);
                match got.get("ok") {
                    Some(value) => {
                        let mut problems = Vec::new();
                        differences(want, value, "", &mut problems);
                        (problems, Some(value.clone()))
                    }
                    None => (
                        vec![format!("expected ok {want}, but the plugin declined")],
                        Some(got),
                    ),
                }
            }
            (Expectation::Ok(want), Ok(got)) => {
                let got = got.unwrap_or(Json::Null);
                let mut problems = Vec::new();
                differences(want, &got, "", &mut problems);
                (problems, Some(got))
            }
            (Expectation::Declined(kind, message), Ok(Some(got))) => {
                let failure = got.get("err");
                let found_kind = failure.and_then(|f| f.get("kind")).and_then(Json::as_str);
                let found_message = failure
                    .and_then(|f| f.get("message"))
                    .and_then(Json::as_str);
                let mut problems = Vec::new();
                if found_kind != Some(kind.as_str()) {
                    problems.push(match found_kind {
                        Some(found) => format!("expected the plugin to decline with `{kind}`, it declined with `{found}`"),
                        None => format!("expected the plugin to decline with `{kind}`, it answered"),
                    });
                }
                if let (Some(want), Some(found)) = (message, found_message)
                    && !found.contains(want.as_str())
                {
                    problems.push(format!(
                        "expected a message containing {want:?}, got {found:?}"
                    ));
                }
                (problems, Some(got))
            }
            (Expectation::Fault(fault, message), Err(error)) => {
                let found = match &error.kind {
                    CallErrorKind::Deadline(_) => "deadline",
                    CallErrorKind::MemoryCap(_) => "memory-cap",
                    CallErrorKind::OutOfFuel(_) => "out-of-fuel",
                    CallErrorKind::Trap(_) | CallErrorKind::Instantiate(_) => "trap",
                    CallErrorKind::Contract(_) => "contract",
                    CallErrorKind::InvalidArguments(_) => "invalid-arguments",
                    CallErrorKind::Declined { .. } => "declined",
                    CallErrorKind::HostPanic(_) | CallErrorKind::Cancelled => "host",
                };
                let mut problems = Vec::new();
                if found != fault {
                    problems.push(format!("expected a `{fault}` fault, got: {error}"));
                }
                if let Some(want) = message
                    && !error.to_string().contains(want.as_str())
                {
                    problems.push(format!(
                        "expected a message containing {want:?}, got: {error}"
                    ));
                }
                (problems, None)
            }
            (Expectation::Fault(fault, _), Ok(got)) => (
                vec![format!("expected a `{fault}` fault, but the call returned")],
                got,
            ),
            (_, Err(error)) => (vec![format!("the call failed: {error}")], None),
            (Expectation::Declined(kind, _), Ok(None)) => (
                vec![format!(
                    "expected the plugin to decline with `{kind}`, it returned nothing"
                )],
                None,
            ),
        }
    }
}
