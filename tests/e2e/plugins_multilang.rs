//! Plugins written outside this repository, in Rust, Python and JavaScript:
//! `sandfleet plugin new`'s projects and the examples in `examples/plugins/`,
//! each built in a directory outside the repository by the commands its
//! README gives, must pass `plugin check` and `plugin test` and serve the
//! quickstart as its placement policy.
//!
//! The READMEs' install lines (`pip install …`, `npm install`) install the
//! pinned tools once into `target/plugin-tools/` (a cache shared by test
//! runs, CI's included) instead of each project; every other line runs as
//! written, with this build's `sandfleet` first on `PATH`. A test skips, with
//! a message saying so, only when the registry its tools come from cannot
//! be reached.

use std::path::{Path, PathBuf};
use std::process::Output;

use sandfleet_test_support::quickstart::{expected_statuses, statuses};

use crate::plugin_projects::{Builder, Checked, checked_component, readme_steps, step, text};
use crate::{repo, run_id, sandfleet, stderr, stdout};

pub(crate) fn builder() -> Builder {
    Builder {
        sandfleet: PathBuf::from(env!("CARGO_BIN_EXE_sandfleet")),
        target: std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target")),
    }
}

/// Asserts what the README's `plugin check` printed for a placement policy.
fn checked_as_placement(outputs: &[(String, Output)]) {
    let check = stdout(step(outputs, "sandfleet plugin check").1);
    assert!(
        check.contains("world      placement-policy (sandfleet:plugin@0.2.0)"),
        "{check}"
    );
    assert!(
        check.contains("sandfleet:plugin/placement@0.2.0 { place }"),
        "{check}"
    );
}

/// A run of the quickstart with `component` as its placement policy `name`:
/// the output, the run id, the output directory and what holds them.
pub(crate) struct QuickstartRun {
    pub(crate) output: Output,
    pub(crate) id: String,
    pub(crate) out: PathBuf,
    _scratch: tempfile::TempDir,
}

/// What the runs below give a placement call: 5 s, not the default
/// 100 ms. A Python or JavaScript policy's first call builds its
/// interpreter's state; when deadlines counted wall time, the JavaScript
/// policy's run once stopped on "exceeded its deadline" while Cranelift held
/// both cores. Deadlines now count the call's CPU time, but how much of it
/// that first call takes on a slow machine is not measured, and these runs
/// test that a policy serves, not how fast.
const PATIENT_PLACEMENT: &str = "limits.placement = { deadline = \"5s\" }";

/// Runs the quickstart with `component` as its placement policy `name`,
/// and `plugin_lines` as more lines of its `[plugins]` table.
pub(crate) fn run_quickstart_with(
    builder: &Builder,
    component: &Path,
    name: &str,
    plugin_lines: &str,
) -> QuickstartRun {
    let scratch = tempfile::tempdir().unwrap();
    let plugins = scratch.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(component, plugins.join(format!("{name}.wasm"))).unwrap();
    let examples = repo().join("examples");
    let quickstart = std::fs::read_to_string(examples.join("quickstart.toml")).unwrap();
    let placement = "placement = \"least-loaded\"";
    assert!(
        quickstart.contains(placement),
        "the quickstart changed its policy"
    );
    let fleet = quickstart
        .replace(
            "\"quickstart/",
            &format!("\"{}/quickstart/", examples.display()),
        )
        .replace("\"../target/", &format!("\"{}/", builder.target.display()))
        .replace(
            placement,
            &format!(
                "placement = \"{name}\"\ndir = \"{}\"\n{PATIENT_PLACEMENT}\n{plugin_lines}",
                plugins.display()
            ),
        );
    let fleet_path = scratch.path().join("quickstart.toml");
    std::fs::write(&fleet_path, fleet).unwrap();
    let out = scratch.path().join("out");
    let id = run_id(name);
    let (fleet_arg, out_arg) = (fleet_path.to_str().unwrap(), out.to_str().unwrap());
    let args = ["run", fleet_arg, "--out", out_arg, "--run-id", &id];
    let output = builder.sandfleet(&args, scratch.path());
    QuickstartRun {
        output,
        id,
        out,
        _scratch: scratch,
    }
}

/// Runs the quickstart with `component` as its placement policy `name`;
/// asserts the run's statuses and that the report names the component the
/// check checked.
fn serves_the_quickstart(builder: &Builder, component: &Checked, name: &str) {
    // Bound whole: the run's directory lives as long as `run`.
    let run = run_quickstart_with(builder, &component.path, name, "");
    let (output, id, out) = (&run.output, &run.id, &run.out);
    assert!(output.status.success(), "{}", text(output));
    assert!(
        stdout(output).contains(&format!("run {id}: 8 ok, 5 failed, 0 infra_error")),
        "{}",
        stdout(output)
    );
    assert_eq!(statuses(out), expected_statuses());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        report["environment"]["plugins"]["placement"],
        format!("{name} sha256:{}", &component.sha256[..12]).as_str(),
        "the run was not served by {}",
        component.path.display()
    );
}

/// A project built outside the repository, with the README's tools.
struct Built {
    _home: tempfile::TempDir,
    project: PathBuf,
    tools: crate::plugin_projects::Tools,
    outputs: Vec<(String, Output)>,
}

/// The steps `docs/writing-plugins.md` gives for `heading`'s language:
/// `plugin new` and `cd`, then exactly the project README's steps.
fn assert_docs_match_readme(heading: &str, lang: &str, project: &Path) {
    let docs = std::fs::read_to_string(repo().join("docs/writing-plugins.md")).unwrap();
    let section = docs
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("the docs have no {heading} section"));
    let steps: Vec<&str> = section
        .split("```sh\n")
        .map(|block| block.split("```").next().unwrap())
        .find(|block| block.starts_with("sandfleet plugin new"))
        .unwrap_or_else(|| panic!("the docs' {heading} section starts no project"))
        .lines()
        .collect();
    let new = format!("sandfleet plugin new placement-policy my-policy --lang {lang}");
    assert_eq!(steps[..2], [new.as_str(), "cd my-policy"], "{heading}");
    assert_eq!(
        steps[2..],
        readme_steps(project),
        "{heading}: the docs and the README differ"
    );
}

/// `plugin new placement-policy my-policy --lang <lang>` in a directory
/// outside the repository, built, checked and tested by its README, then
/// the quickstart's placement policy; `None` when the test must skip.
fn new_project_serves_the_quickstart(builder: &Builder, lang: &str) -> Option<Built> {
    let home = tempfile::tempdir().unwrap();
    assert!(!home.path().starts_with(repo()));
    let project = builder.new_project("placement-policy", "my-policy", lang, home.path());
    let heading = match lang {
        "rust" => "Rust",
        "python" => "Python",
        _ => "JavaScript",
    };
    assert_docs_match_readme(heading, lang, &project);
    let (tools, outputs) = builder.build_by_readme(&project)?;
    let tested = stdout(step(&outputs, "sandfleet plugin test").1);
    assert!(tested.contains("2 cases: 2 passed, 0 failed"), "{tested}");
    checked_as_placement(&outputs);
    serves_the_quickstart(builder, &checked_component(&project, &outputs), "my-policy");
    Some(Built {
        _home: home,
        project,
        tools,
        outputs,
    })
}

#[test]
fn a_new_rust_policy_builds_outside_the_repository_and_serves_the_quickstart() {
    let Some(built) = new_project_serves_the_quickstart(&builder(), "rust") else {
        return;
    };
    // The project built its own copy of the SDK, not the repository's.
    let cargo = stderr(step(&built.outputs, "cargo build").1);
    let copy = built.project.join("sandfleet-plugin-sdk");
    let compiled = format!("Compiling sandfleet-plugin-sdk v0.1.0 ({})", copy.display());
    assert!(cargo.contains(&compiled), "{cargo}");
    assert!(copy.join("wit/since_v0.2.0/placement.wit").exists());
}

#[test]
fn a_new_python_policy_builds_outside_the_repository_and_serves_the_quickstart() {
    let builder = builder();
    let Some(built) = new_project_serves_the_quickstart(&builder, "python") else {
        return;
    };
    // A plain exception (not `Err(Failure(...))`) traps: the host reports a
    // trap of this plugin, logs the traceback, and goes on.
    let app = std::fs::read_to_string(built.project.join("app.py")).unwrap();
    let broken = app.replacen(
        "count = len(clusters.free_slots)",
        "raise ValueError(\"deliberately broken\")",
        1,
    );
    assert_ne!(broken, app);
    std::fs::write(built.project.join("app.py"), broken).unwrap();
    let (componentize, _) = step(&built.outputs, "componentize-py");
    builder.run_step(componentize, &built.project, &built.tools);
    std::fs::write(
        built.project.join("trap.toml"),
        "[[case]]\nname = \"a plain exception traps\"\ncall = \"place\"\n\
         args.demand = { kind = \"claim\" }\nargs.clusters = [{ free-slots = 1 }]\n\
         expect.fault = \"trap\"\n",
    )
    .unwrap();
    let run = |cases: &str| {
        let args = ["plugin", "test", "my-policy.wasm", cases];
        builder.sandfleet(&args, &built.project)
    };
    let trapped = run("trap.toml");
    assert!(trapped.status.success(), "{}", text(&trapped));
    let failed = run("cases.toml");
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    let report = stdout(&failed);
    assert!(
        report.contains("plugin `my-policy` (sha256:") && report.contains("place: trapped"),
        "{report}"
    );
    assert!(
        stderr(&failed).contains("ValueError"),
        "{}",
        stderr(&failed)
    );
    // A run it places for stops with that trap in one line, after tearing
    // down what it made.
    let wasm = built.project.join("my-policy.wasm");
    let run = run_quickstart_with(&builder, &wasm, "my-policy", "");
    assert_eq!(run.output.status.code(), Some(1), "{}", text(&run.output));
    let error = stderr(&run.output);
    assert!(
        error.contains("error: placement: plugin `my-policy` (sha256:")
            && error.contains("place: trapped"),
        "{error}"
    );
    assert!(error.contains("tearing down"), "{error}");
}

#[test]
fn a_new_javascript_policy_builds_outside_the_repository_and_serves_the_quickstart() {
    new_project_serves_the_quickstart(&builder(), "js");
}

/// An example of `examples/plugins/`, copied outside the repository (the
/// contract's WIT comes from its README's `sandfleet plugin wit`), built,
/// checked and tested by its README, then the quickstart's placement policy.
fn example_serves_the_quickstart(example: &str, name: &str) {
    let builder = builder();
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join(example);
    std::fs::create_dir(&project).unwrap();
    let source = repo().join("examples/plugins").join(example);
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, project.join(path.file_name().unwrap())).unwrap();
        }
    }
    let Some((_, outputs)) = builder.build_by_readme(&project) else {
        return;
    };
    let cases = std::fs::read_to_string(project.join("cases.toml")).unwrap();
    let count = cases.matches("[[case]]").count();
    let tested = stdout(step(&outputs, "sandfleet plugin test").1);
    let all_passed = format!("{count} cases: {count} passed, 0 failed");
    assert!(tested.contains(&all_passed), "{tested}");
    checked_as_placement(&outputs);
    serves_the_quickstart(&builder, &checked_component(&project, &outputs), name);
}

#[test]
fn the_python_example_builds_passes_its_cases_and_serves_the_quickstart() {
    example_serves_the_quickstart("python-warm-first", "warm-first");
}

#[test]
fn the_javascript_example_builds_passes_its_cases_and_serves_the_quickstart() {
    example_serves_the_quickstart("js-rotate", "rotate");
}

#[test]
fn plugin_new_refuses_bad_input_in_one_line_and_touches_nothing() {
    let home = tempfile::tempdir().unwrap();
    let existing = home.path().join("taken");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("keep.txt"), "mine").unwrap();
    let dir = |name: &str| home.path().join(name).to_str().unwrap().to_string();
    for (args, expected) in [
        (
            vec!["no-such-world", "p", "--dir", &dir("a")],
            "unknown world `no-such-world`: expected one of placement-policy, sizing-policy, reset-check, task-adapter",
        ),
        (
            vec!["placement-policy", "p", "--lang", "go", "--dir", &dir("b")],
            "unknown language `go`: expected one of rust, python, js",
        ),
        (
            vec!["placement-policy", "My Policy", "--dir", &dir("c")],
            "`My Policy` is not a valid plugin name",
        ),
        (
            vec!["placement-policy", "fn", "--dir", &dir("d")],
            "`fn` is not a valid plugin name: it is reserved",
        ),
        (
            vec!["placement-policy", "p", "--dir", existing.to_str().unwrap()],
            "already exists",
        ),
        (
            vec!["task-adapter", "p", "--lang", "python", "--dir", &dir("e")],
            "no python template for task-adapter",
        ),
    ] {
        let mut command = vec!["plugin", "new"];
        command.extend(args.iter().copied());
        let output = sandfleet(&command);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {}", text(&output));
        let message = stderr(&output);
        assert!(message.contains(expected), "{args:?}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{args:?}: {message}");
    }
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["taken"], "bad input left files behind");
    assert_eq!(
        std::fs::read_to_string(existing.join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn plugin_wit_writes_each_contract_version_byte_for_byte() {
    let out = tempfile::tempdir().unwrap();
    for (version, dir) in [(None, "since_v0.2.0"), (Some("0.1.0"), "since_v0.1.0")] {
        let target = out.path().join(dir);
        let mut args = vec!["plugin", "wit", "--out", target.to_str().unwrap()];
        args.extend(version.iter().flat_map(|v| ["--version", v]));
        let output = sandfleet(&args);
        assert!(output.status.success(), "{}", text(&output));
        let wit = repo().join("wit").join(dir);
        let mut written: Vec<_> = std::fs::read_dir(&target)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        written.sort();
        let mut expected: Vec<_> = std::fs::read_dir(&wit)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        expected.sort();
        assert_eq!(written, expected);
        for name in written {
            assert!(
                std::fs::read(target.join(&name)).unwrap()
                    == std::fs::read(wit.join(&name)).unwrap(),
                "{dir}/{name:?} differs"
            );
        }
    }
    let unknown = sandfleet(&[
        "plugin",
        "wit",
        "--version",
        "9.9.9",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown)
            .contains("unknown contract version `9.9.9`: this sandfleet serves 0.2.0, 0.1.0"),
        "{}",
        stderr(&unknown)
    );
}
