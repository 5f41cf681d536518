//! Plugins in `sandfleet run`: a placement policy that faults part-way is
//! answered by the built-in when `[plugins] fallback = "builtin"` and stops
//! the run, in one line naming it, when not; the plugin directory is
//! watched during the run, so a file replaced mid-run serves the next
//! decisions, while the task in flight keeps the adapter that prepared it;
//! a corrupt file shows in `plugin list` and leaves the built-in serving.

use std::path::Path;
use std::process::{Command, Stdio};

use sandfleet_test_support::quickstart::{expected_statuses, statuses};
use sandfleet_test_support::{install_plugin, processes_running, salted};

use crate::plugins_multilang::{builder, run_quickstart_with};
use crate::{Scratch, eventually, results, run_id, sandfleet, stderr, stdout};

#[test]
fn a_placement_that_traps_on_its_third_decision_is_answered_by_the_builtin_or_stops_the_run() {
    let builder = builder();
    let trap = Path::new(sandfleet_guests::TRAP_THIRD);
    let run = run_quickstart_with(&builder, trap, "trap-third", "fallback = \"builtin\"");
    let output = &run.output;
    assert!(output.status.success(), "{}", stderr(output));
    assert!(
        stdout(output).contains(&format!("run {}: 8 ok, 5 failed, 0 infra_error", run.id)),
        "{}",
        stdout(output)
    );
    assert_eq!(statuses(&run.out), expected_statuses());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.out.join("report.json")).unwrap()).unwrap();
    let served = report["plugins"].as_array().unwrap();
    let of = |name: &str| served.iter().find(|p| p["name"] == name).unwrap();
    let trapping = of("trap-third");
    assert_eq!(trapping["calls"], 3, "two answers and the trap: {trapping}");
    assert_eq!(trapping["faults"], 1, "{trapping}");
    let fallbacks = trapping["fallbacks"].as_u64().unwrap();
    assert!(
        fallbacks >= 11,
        "the trap and every later claim: {trapping}"
    );
    assert_eq!(of("least-loaded")["calls"], fallbacks, "{served:?}");
    assert!(
        stdout(output).contains("plugin trap-third sha256:"),
        "{}",
        stdout(output)
    );

    let stopped = run_quickstart_with(&builder, trap, "trap-third", "");
    assert_eq!(
        stopped.output.status.code(),
        Some(1),
        "{}",
        stderr(&stopped.output)
    );
    let errors: Vec<String> = stderr(&stopped.output)
        .lines()
        .filter(|line| line.starts_with("error:"))
        .map(str::to_string)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("plugin `trap-third` (sha256:") && errors[0].contains("place: trapped"),
        "{errors:?}"
    );
}

#[test]
fn sandfleet_run_reloads_a_replaced_placement_and_keeps_the_adapter_of_the_task_in_flight() {
    let scratch = Scratch::new();
    let plugins = scratch.path("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(
        plugins.join("mine.wasm"),
        sandfleet_guests::builtin("least-loaded").unwrap(),
    )
    .unwrap();
    std::fs::write(
        plugins.join("generic.wasm"),
        salted(sandfleet_guests::builtin("generic").unwrap(), 1, 0),
    )
    .unwrap();
    let victim = "echo \"running in $(hostname) .\"; sleep 39.375 || true";
    let rows = [
        serde_json::json!({"id": "t0", "image": "a", "test": victim, "timeout_s": 120}),
        serde_json::json!({"id": "t1", "image": "a", "test": "true"}),
        serde_json::json!({"id": "t2", "image": "a", "test": "true"}),
    ];
    let fleet = scratch.fleet(
        &rows,
        "strategy = \"none\"\n\n[plugins]\ndir = \"plugins\"\nplacement = \"mine\"\n",
    );
    let text = std::fs::read_to_string(&fleet)
        .unwrap()
        .replace("max_concurrent = 4", "max_concurrent = 1");
    std::fs::write(&fleet, text).unwrap();
    let out = scratch.path("out");
    let log = scratch.path("sandfleet.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args([
            "run",
            fleet.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--run-id", &run_id("reload")])
        .env("SANDFLEET_LOG", "sandfleet_plugin=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();

    let t0_log = out.join("logs/t0.log");
    eventually("t0 to run", || {
        std::fs::read_to_string(&t0_log).is_ok_and(|text| text.contains("running in"))
    });
    let loaded = || std::fs::read_to_string(&log).unwrap_or_default();
    let loads = |text: &str| text.matches("plugin loaded").count();
    let before = loads(&loaded());
    for (name, bytes) in [
        ("mine", std::fs::read(sandfleet_guests::PICK_LAST).unwrap()),
        (
            "generic",
            salted(sandfleet_guests::builtin("generic").unwrap(), 2, 0),
        ),
    ] {
        install_plugin(&plugins, name, &bytes);
    }
    eventually("both files to reload in the run", || {
        loads(&loaded()) >= before + 2
    });
    eventually("t0's sleep to run", || {
        !processes_running("sleep 39.375").is_empty()
    });
    for process in processes_running("sleep 39.375") {
        let pid = process.split(':').next().unwrap().to_string();
        Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", loaded());

    let adapters: Vec<(String, String)> = results(&out)
        .iter()
        .map(|r| {
            (
                r["task_id"].as_str().unwrap().to_string(),
                r["plugins"]["adapter"]["version"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(adapters.len(), 3);
    assert_ne!(
        adapters[0].1, adapters[1].1,
        "t0 kept the version it started with"
    );
    assert_eq!(adapters[1].1, adapters[2].1);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let placements: Vec<u64> = report["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "mine")
        .map(|p| p["calls"].as_u64().unwrap())
        .collect();
    assert_eq!(placements, [1, 2], "{}", report["plugins"]);
}

#[test]
fn plugin_check_reports_the_component_as_json_and_leaves_it_compiled_for_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let component = dir.path().join("least-loaded.wasm");
    std::fs::write(
        &component,
        sandfleet_guests::builtin("least-loaded").unwrap(),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let check = |json: bool| {
        let mut args = vec!["plugin", "check", component.to_str().unwrap()];
        args.extend(json.then_some("--json"));
        let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
            .args(&args)
            .env("XDG_CACHE_HOME", &cache)
            .env("SANDFLEET_LOG", "warn")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let report: serde_json::Value = serde_json::from_str(&check(true)).unwrap();
    assert_eq!(report["world"], "placement-policy");
    assert_eq!(report["functions"], serde_json::json!(["place"]));
    assert!(report["compile_ms"].as_f64().unwrap() > 0.0, "{report}");
    let sha256 = report["sha256"].as_str().unwrap();
    assert_eq!(sha256.len(), 64, "{report}");
    let first_compiled = report["functions_compiled"].as_u64().unwrap();
    assert!(first_compiled > 0, "{report}");
    // The text form names the same component. It is compiled again, its
    // functions mostly from what the first check compiled.
    let text = check(false);
    assert!(text.contains(&format!("sha256     {sha256}")), "{text}");
    let counts = text
        .lines()
        .find_map(|line| line.strip_prefix("compile "))
        .and_then(|line| line.split_once(" ms ("))
        .map(|(_, counts)| counts.split(' ').filter_map(|w| w.parse::<u64>().ok()))
        .map(Iterator::collect::<Vec<_>>);
    let Some([compiled, reused]) = counts.as_deref() else {
        panic!("no function counts: {text}");
    };
    assert!(reused > compiled && *reused > 0, "{text}");
    // The compiled form is kept for the `plugin test` or run after it.
    let entries: Vec<_> = std::fs::read_dir(cache.join("sandfleet/plugins"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].starts_with(sha256), "{entries:?}");
    // `plugin cache` shows that entry and the function cache, and
    // `--clear` empties both.
    let plugin_cache = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
            .args(["plugin", "cache"])
            .args(args)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let held: serde_json::Value = serde_json::from_str(&plugin_cache(&["--json"])).unwrap();
    assert_eq!(held["components"], 1, "{held}");
    assert!(held["function_bytes"].as_u64().unwrap() > 0, "{held}");
    let cleared = plugin_cache(&["--clear"]);
    assert!(
        cleared.contains("removed 1 compiled component(s)")
            && cleared.contains("the function cache"),
        "{cleared}"
    );
    let empty: serde_json::Value = serde_json::from_str(&plugin_cache(&["--json"])).unwrap();
    assert_eq!(
        (&empty["components"], &empty["bytes"]),
        (&0.into(), &0.into()),
        "{empty}"
    );
    // Compiled again mostly anew (only functions of a body compiled a
    // moment before are reused), where the check above reused most.
    let again: serde_json::Value = serde_json::from_str(&check(true)).unwrap();
    let count = |name: &str| again[name].as_u64().unwrap();
    assert!(
        count("functions_compiled") > count("functions_reused"),
        "{again}"
    );
}

#[test]
fn plugin_list_shows_a_corrupt_file_and_the_builtin_it_would_replace_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut corrupt = sandfleet_guests::builtin("least-loaded").unwrap().to_vec();
    corrupt.truncate(corrupt.len() / 3);
    std::fs::write(dir.path().join("least-loaded.wasm"), corrupt).unwrap();
    let listed = sandfleet(&["plugin", "list", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(listed.status.code(), Some(1), "{}", stderr(&listed));
    let text = stdout(&listed);
    let row = text
        .lines()
        .position(|line| line.starts_with("least-loaded "))
        .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[row].ends_with("built-in"), "{text}");
    assert!(
        lines[row + 1].contains("error:") && lines[row + 1].contains("least-loaded.wasm"),
        "{text}"
    );
}

#[test]
fn plugin_cache_ignores_an_empty_or_relative_xdg_cache_home_as_the_xdg_specification_says() {
    let home = tempfile::tempdir().unwrap();
    for xdg in ["", "relative/cache"] {
        let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
            .args(["plugin", "cache", "--json"])
            .env("HOME", home.path())
            .env("XDG_CACHE_HOME", xdg)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let shown: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        let expected = home.path().join(".cache/sandfleet/plugins");
        assert_eq!(
            shown["dir"],
            expected.to_str().unwrap(),
            "XDG_CACHE_HOME={xdg:?}"
        );
    }
}
