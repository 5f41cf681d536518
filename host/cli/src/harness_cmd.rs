//! `sandfleet prepare`, `grade` and `parse-log`: a task adapter's scripts,
//! grades and log parsers on files, with no sandboxes involved — for teams
//! that run the harness themselves and want sandfleet's parity grading.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail};
use clap::Args;
use sandfleet_core::file_stem;
use sandfleet_plugin::adapter::{
    CommandOutput, GradeStatus, Graded, Setting, SolutionState, Task, TaskAdapter, TestTable,
};
use sandfleet_plugin::{CallErrorKind, HostConfig, PluginHost, Registry};
use serde_json::{Map, Value, json};

/// Which adapter, with which settings.
#[derive(Args)]
pub(crate) struct AdapterArgs {
    /// The task adapter: `swebench`, `r2egym`, `generic` or a plugin's name.
    #[arg(long)]
    adapter: String,
    /// The harness version to reproduce (sets the adapter's `grader-version`),
    /// e.g. `swebench-4.1.0` or `swebench-5.0.2`.
    #[arg(long)]
    grader_version: Option<String>,
    /// Another adapter setting, `KEY=VALUE` (repeatable), e.g. `namespace=none`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// A plugin directory whose `<name>.wasm` files override the built-ins.
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
}

impl AdapterArgs {
    fn open(&self) -> anyhow::Result<(TaskAdapter, Vec<Setting>)> {
        let mut limits = sandfleet_plugin::KindLimits::default();
        // Grading a multi-megabyte log takes far longer than a decision.
        limits.adapter.deadline = std::time::Duration::from_secs(30);
        let registry = Registry::new(PluginHost::new(HostConfig {
            limits,
            cache_dir: sandfleet_fleet::default_cache_dir(),
            ..HostConfig::default()
        })?);
        if let Err(errors) =
            registry.add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        {
            bail!("built-in plugins failed to load: {}", errors[0]);
        }
        if let Some(dir) = &self.plugin_dir
            && let Err(errors) = registry.load_dir(dir)
        {
            bail!(
                "{}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let adapter = registry.adapter(&self.adapter)?;
        let mut settings = Vec::new();
        if let Some(version) = &self.grader_version {
            settings.push(Setting {
                key: "grader-version".into(),
                value: version.clone(),
            });
        }
        for pair in &self.settings {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--set {pair}: expected KEY=VALUE"))?;
            settings.push(Setting {
                key: key.to_string(),
                value: value.to_string(),
            });
        }
        sandfleet_fleet::setup::check_settings(&adapter, &settings, "command line")?;
        self.check_values(&adapter, &settings)?;
        Ok((adapter, settings))
    }

    /// Rejects setting values the adapter cannot work with before any
    /// instance is read, naming the flag that gave the value. `summarize`
    /// of no results is the adapter's one call that takes the settings and
    /// nothing else, so its refusal is the settings'.
    fn check_values(&self, adapter: &TaskAdapter, settings: &[Setting]) -> anyhow::Result<()> {
        let Err(error) = adapter.summarize_blocking(&[], settings) else {
            return Ok(());
        };
        let CallErrorKind::Declined { message, .. } = &error.kind else {
            return Err(error.into());
        };
        let named = |key: &str| {
            message.contains(&format!("{key} `")) || message.contains(&format!("`{key}`"))
        };
        let flag = match &self.grader_version {
            Some(version) if named("grader-version") => format!("--grader-version {version}"),
            _ => self
                .settings
                .iter()
                .find(|pair| pair.split_once('=').is_some_and(|(key, _)| named(key)))
                .map_or_else(
                    || format!("adapter `{}` settings", self.adapter),
                    |pair| format!("--set {pair}"),
                ),
        };
        bail!("{flag}: {message}")
    }
}

#[derive(Args)]
pub(crate) struct PrepareArgs {
    #[command(flatten)]
    adapter: AdapterArgs,
    /// Dataset rows (JSONL).
    #[arg(long)]
    instances: PathBuf,
    /// Writes `<out>/<id>/task.json` and each script file by its base name
    /// (SWE-bench: `eval.sh`).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub(crate) struct GradeArgs {
    #[command(flatten)]
    adapter: AdapterArgs,
    /// Dataset rows (JSONL).
    #[arg(long)]
    instances: PathBuf,
    /// Predictions (JSONL, `{instance_id, model_name_or_path, model_patch}`);
    /// without them every solution counts as missing.
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Holds `<id>/test_output.txt` (and optionally `<id>/exit_code`); gets
    /// `<id>/report.json`, `status_map.json`, `grade.json` and a run-level
    /// `run_report.json`.
    #[arg(long)]
    log_dir: PathBuf,
    /// Logs graded at once (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
}

#[derive(Args)]
pub(crate) struct ParseLogArgs {
    #[command(flatten)]
    adapter: AdapterArgs,
    /// The parser, e.g. `parse_log_pytest`.
    #[arg(long)]
    parser: String,
    /// The raw log.
    file: PathBuf,
}

/// A dataset row with its line number.
struct Row {
    line: usize,
    text: String,
}

fn rows(path: &Path) -> anyhow::Result<Vec<Row>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| Row {
            line: index + 1,
            text: line.to_string(),
        })
        .collect())
}

/// The adapter's message for a declined call; the whole error otherwise.
fn message(error: &sandfleet_plugin::CallError) -> String {
    match &error.kind {
        CallErrorKind::Declined { message, .. } => message.clone(),
        _ => error.to_string(),
    }
}

pub(crate) fn prepare(args: &PrepareArgs) -> anyhow::Result<ExitCode> {
    let (adapter, settings) = args.adapter.open()?;
    let mut failed = 0;
    let mut written = 0;
    for row in rows(&args.instances)? {
        let at = format!("{}:{}", args.instances.display(), row.line);
        let prepared = adapter
            .load_blocking(&row.text, &settings)
            .map_err(|e| message(&e))
            .and_then(|task| {
                adapter
                    .prepare_blocking(&task, None)
                    .map(|script| (task, script))
                    .map_err(|e| message(&e))
            });
        let (task, script) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                eprintln!("{at}: {error}");
                failed += 1;
                continue;
            }
        };
        let dir = args.out.join(file_stem(&task.id));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for file in &script.files {
            let name = Path::new(&file.path)
                .file_name()
                .map_or_else(|| "file".into(), |n| n.to_owned());
            std::fs::write(dir.join(name), &file.contents)?;
        }
        let command = |c: &sandfleet_plugin::adapter::Command| json!({"argv": c.argv, "timeout_ms": c.timeout_ms, "merge_stderr": c.merge_stderr});
        let description = json!({
            "id": task.id,
            "image": task.image,
            "workdir": script.workdir,
            "files": script.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
            "setup": script.setup.iter().map(command).collect::<Vec<_>>(),
            "evaluate": script.evaluate.iter().map(command).collect::<Vec<_>>(),
            "env": script.env.iter().map(|s| (s.key.clone(), Value::String(s.value.clone()))).collect::<Map<_, _>>(),
            "timeout_rule": script.timeout_rule.name(),
        });
        std::fs::write(
            dir.join("task.json"),
            serde_json::to_vec_pretty(&description)?,
        )?;
        written += 1;
    }
    println!("prepared {written} instance(s) in {}", args.out.display());
    finish(failed)
}

pub(crate) fn grade(args: &GradeArgs) -> anyhow::Result<ExitCode> {
    let (adapter, settings) = args.adapter.open()?;
    let predictions = match &args.predictions {
        Some(path) => sandfleet_fleet::setup::solutions(Some(path))?,
        None => HashMap::new(),
    };
    let rows = rows(&args.instances)?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let next = AtomicUsize::new(0);
    let graded: Mutex<Vec<(usize, Graded)>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(row) = rows.get(index) else { break };
                    match grade_one(&adapter, &settings, &predictions, &args.log_dir, row) {
                        Ok(done) => graded.lock().expect("not poisoned").push((index, done)),
                        Err(error) => failures.lock().expect("not poisoned").push((
                            index,
                            format!("{}:{}: {error:#}", args.instances.display(), row.line),
                        )),
                    }
                }
            });
        }
    });
    let mut graded = graded.into_inner().expect("not poisoned");
    graded.sort_by_key(|(index, _)| *index);
    let graded: Vec<Graded> = graded.into_iter().map(|(_, g)| g).collect();
    let mut failures = failures.into_inner().expect("not poisoned");
    failures.sort();
    for (_, failure) in &failures {
        eprintln!("{failure}");
    }
    let summary = adapter.summarize_blocking(&graded, &settings)?;
    let summary: Value = serde_json::from_str(&summary).unwrap_or(Value::String(summary));
    std::fs::write(
        args.log_dir.join("run_report.json"),
        serde_json::to_vec_pretty(&summary)?,
    )?;
    let count = |status: GradeStatus| graded.iter().filter(|g| g.status == status).count();
    println!(
        "graded {} instance(s): {} passed, {} failed, {} error; {} could not be graded",
        graded.len(),
        count(GradeStatus::Passed),
        count(GradeStatus::Failed),
        count(GradeStatus::Error),
        failures.len()
    );
    finish(failures.len())
}

/// `path` as text: the adapters take UTF-8, and guessing at another
/// encoding (or replacing bytes) would grade a log other than the one given.
fn read_utf8(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    String::from_utf8(bytes).map_err(|error| {
        let at = error.utf8_error().valid_up_to();
        anyhow::anyhow!(
            "{}: not UTF-8 (the byte at offset {at} starts no UTF-8 character); \
             the adapters grade text",
            path.display()
        )
    })
}

/// The test command's exit status recorded next to the log, 0 when there is
/// no `exit_code` file.
fn read_exit_code(dir: &Path) -> anyhow::Result<i32> {
    let path = dir.join("exit_code");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            anyhow::anyhow!(
                "{}: holds `{}`, not an integer exit status",
                path.display(),
                text.trim().escape_debug()
            )
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(anyhow::anyhow!("{}: cannot read: {error}", path.display())),
    }
}

/// Grades one instance and writes its files.
fn grade_one(
    adapter: &TaskAdapter,
    settings: &[Setting],
    predictions: &HashMap<String, Option<String>>,
    log_dir: &Path,
    row: &Row,
) -> anyhow::Result<Graded> {
    let task: Task = adapter
        .load_blocking(&row.text, settings)
        .map_err(|e| anyhow::anyhow!(message(&e)))?;
    let dir = log_dir.join(file_stem(&task.id));
    let log = read_utf8(&dir.join("test_output.txt"))?;
    let exit_code = read_exit_code(&dir)?;
    let solution = predictions.get(&task.id).cloned().flatten();
    let outputs = [CommandOutput {
        exit_code,
        stdout: log,
        stderr: String::new(),
        timed_out: false,
        duration_ms: 0,
    }];
    let grade = adapter
        .grade_blocking(&task, solution.as_deref(), &outputs)
        .map_err(|e| anyhow::anyhow!("instance `{}`: {}", task.id, message(&e)))?;
    drop(outputs);
    // The adapter's report is the harness's own file, byte for byte; `null`
    // where the harness writes none.
    if grade.report.trim() != "null" {
        write_file(&dir.join("report.json"), grade.report.as_bytes())?;
    }
    write_json(&dir.join("status_map.json"), |out| {
        write_status_map(out, &grade.tests)
    })?;
    write_json(&dir.join("grade.json"), |out| {
        let mut head = json!({"status": grade.status.name()});
        // No reward where the reference implementation gives none.
        if let Some(reward) = grade.reward {
            head["reward"] = json!(reward);
        }
        head["detail"] = json!(grade.detail);
        if let Some(infra) = &grade.infra {
            head["infra_failure"] = json!({"reason": infra.reason, "certain": infra.certain});
        }
        write_grade(out, &head, &grade.tests)
    })?;
    let solution = match predictions.get(&task.id) {
        None | Some(None) => SolutionState::Missing,
        Some(Some(patch)) if patch.is_empty() => SolutionState::Empty,
        Some(Some(_)) => SolutionState::Present,
    };
    Ok(Graded {
        task_id: task.id,
        status: grade.status,
        solution,
        infra: grade.infra,
    })
}

pub(crate) fn parse_log(args: &ParseLogArgs) -> anyhow::Result<ExitCode> {
    let (adapter, settings) = args.adapter.open()?;
    let log = read_utf8(&args.file)?;
    let tests = adapter
        .parse_log_blocking(&args.parser, &log, &settings)
        .map_err(|e| {
            let origin = if is_unknown_parser(&e) {
                format!("--parser {}", args.parser)
            } else {
                args.file.display().to_string()
            };
            anyhow::anyhow!("{origin}: {}", message(&e))
        })?;
    drop(log);
    let mut out = BufWriter::new(std::io::stdout().lock());
    let written = write_status_map(&mut out, &tests)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Whether the adapter declined because it has no parser of that name.
fn is_unknown_parser(error: &sandfleet_plugin::CallError) -> bool {
    matches!(&error.kind, CallErrorKind::Declined { message, .. } if message.contains("unknown log parser"))
}

/// The harness's status map, `{test: status}` in log order with each status
/// exactly as the parser recorded it (`PASSED`, ..., or a stray token such
/// as `ERROR:`), as `serde_json`'s pretty printer lays it out. Written
/// test by test, so a log of millions of tests needs no second copy.
fn write_status_map(out: &mut impl Write, tests: &TestTable) -> std::io::Result<()> {
    if tests.is_empty() {
        return out.write_all(b"{}");
    }
    out.write_all(b"{")?;
    for (index, test) in tests.iter().enumerate() {
        out.write_all(if index == 0 { b"\n  " } else { b",\n  " })?;
        serde_json::to_writer(&mut *out, test.name)?;
        out.write_all(b": ")?;
        serde_json::to_writer(&mut *out, test.value)?;
    }
    out.write_all(b"\n}")
}

/// `grade.json`: `head`'s fields, then `tests` as `{name, status[, value]}`
/// records (`value` only where the parser's value is not the status word),
/// written test by test.
fn write_grade(out: &mut impl Write, head: &Value, tests: &TestTable) -> std::io::Result<()> {
    let head = serde_json::to_string_pretty(head)?;
    // Only the object's own closing brace: a last field that is an object
    // (`infra_failure`) ends in one too.
    let fields = head.strip_suffix("\n}").ok_or_else(|| {
        std::io::Error::other(format!(
            "grade.json's head is not an object with fields: {head}"
        ))
    })?;
    out.write_all(fields.as_bytes())?;
    out.write_all(b",\n  \"tests\": [")?;
    for (index, test) in tests.iter().enumerate() {
        out.write_all(if index == 0 { b"\n    " } else { b",\n    " })?;
        let status = test.status.name();
        out.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut *out, test.name)?;
        write!(out, ",\"status\":\"{status}\"")?;
        if !test.value.eq_ignore_ascii_case(status) {
            out.write_all(b",\"value\":")?;
            serde_json::to_writer(&mut *out, test.value)?;
        }
        out.write_all(b"}")?;
    }
    out.write_all(if tests.is_empty() {
        b"]\n}"
    } else {
        b"\n  ]\n}"
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes `path` through a buffer with `write`.
fn write_json(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    let mut out = BufWriter::new(file);
    write(&mut out)
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {}", path.display()))
}

fn finish(failed: usize) -> anyhow::Result<ExitCode> {
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
