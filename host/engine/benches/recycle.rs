//! Recycling against fresh claims on the local backend, side by side in one
//! run: N no-op tasks on a git image at concurrency C, once claiming a fresh
//! sandbox per task, once recycling by restoring each sandbox's fresh
//! snapshot and once recycling through git-restore (wall, reset p50, CPU
//! per task); then 64 tasks of an image whose prepare hook takes 5 s,
//! prepared in each sandbox against prepared once and forked (wall, CPU);
//! then the cost of one reset on an idle sandbox,
//! its steps one exec each against one joined exec (wall and CPU per reset),
//! with the scrub, a bare `true` exec and a fresh sandbox's claim and
//! release for scale; and from those, the most CPU a reset may cost for
//! recycling to take half the fresh wall (the run is CPU-bound on 2 cores).
//!
//! Run: `cargo bench -p sandfleet-engine --bench recycle` (defaults: 600
//! tasks at concurrency 32, 30 resets; `-- --tasks N --concurrency C
//! --resets R` to change them, `--tasks 0` for the resets alone,
//! `--prepared 0` to leave out the prepare runs). CPU is
//! this process's and its reaped children's (the sandboxes' commands
//! included), from `/proc/self/stat`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_backend_local::LocalBackend;
use sandfleet_core::{Backend, ExecRequest, Recycling, RunId, SandboxHandle, TemplateSpec};
use sandfleet_engine::reset::{ExecContext, Joined};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, Plugins, PrepareHook, PrepareHooks,
    RunSpec, WorkItem,
};
use sandfleet_plugin::Registry;
use sandfleet_plugin::adapter::{Command, CommandOutput, Task};
use sandfleet_plugin::reset::Verdict;

fn main() {
    let arg = |name: &str, default: usize| {
        std::env::args()
            .skip_while(|arg| arg != name)
            .nth(1)
            .map_or(default, |n| n.parse().expect(name))
    };
    let (tasks, concurrency, resets) = (
        arg("--tasks", 600),
        arg("--concurrency", 32),
        arg("--resets", 30),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = support::builtin_registry();
    let fresh = (tasks > 0).then(|| {
        let run = |label, settings| {
            let items = support::noop_tasks(&registry, tasks);
            runtime.block_on(engine_run(&registry, label, items, concurrency, settings))
        };
        let fresh = run("fresh claims", FleetSettings::default());
        let recycling = FleetSettings {
            recycle: true,
            ..FleetSettings::default()
        };
        let restored = run("recycling by restore", recycling.clone());
        let checked = run(
            "recycling by git-restore",
            FleetSettings {
                reset_by_snapshot: false,
                ..recycling
            },
        );
        for (label, recycled) in [("restore", &restored), ("git-restore", &checked)] {
            println!(
                "engine/recycle: {tasks} no-op tasks at concurrency {concurrency}: recycling by \
                 {label} {:.1} s is {:.2}x fresh claims {:.1} s",
                recycled.wall.as_secs_f64(),
                recycled.wall.as_secs_f64() / fresh.wall.as_secs_f64(),
                fresh.wall.as_secs_f64()
            );
        }
        fresh
    });
    if arg("--prepared", 64) > 0 {
        let run = |label, each_sandbox| {
            let items = support::noop_tasks(&registry, arg("--prepared", 64));
            let settings = FleetSettings {
                prepare: five_second_hook(each_sandbox),
                ..FleetSettings::default()
            };
            runtime.block_on(engine_run(&registry, label, items, 8, settings))
        };
        let each = run("a 5 s prepare in each sandbox", true);
        let once = run("a 5 s prepare once, forked", false);
        println!(
            "engine/prepare: prepared once and forked {:.1} s, {:.1} ms CPU per task; in each \
             sandbox {:.1} s, {:.1} ms CPU per task ({:.2}x the wall)",
            once.wall.as_secs_f64(),
            once.cpu_per_task * 1e3,
            each.wall.as_secs_f64(),
            each.cpu_per_task * 1e3,
            each.wall.as_secs_f64() / once.wall.as_secs_f64(),
        );
    }
    let costs = runtime.block_on(one_reset(&registry, resets));
    if let Some(fresh) = fresh {
        print_reset_budget(fresh.cpu_per_task, &costs);
    }
}

/// An engine run's wall and its CPU per task.
struct RunCost {
    wall: Duration,
    cpu_per_task: f64,
}

/// CPU seconds of the steps one recycled task pays or saves.
struct StepCosts {
    bare_exec: f64,
    scrub: f64,
    reset: f64,
    claim_and_release: f64,
}

/// A recycled task saves a fresh sandbox's claim and release and pays a
/// scrub and a reset instead; everything else it costs (its own commands,
/// the engine's work) is the same either way. With the run CPU-bound, half
/// the fresh wall is half its CPU per task, which leaves a reset
/// `claim_and_release - fresh / 2 - scrub`.
fn print_reset_budget(fresh_per_task: f64, costs: &StepCosts) {
    let budget = costs.claim_and_release - fresh_per_task / 2.0 - costs.scrub;
    let ms = |seconds: f64| seconds * 1e3;
    println!(
        "engine/recycle: for recycling at 0.5x fresh, a reset may cost {:.1} ms of CPU (fresh task \
         {:.1} ms, of which claim + release {:.1} ms; scrub {:.2} ms); a bare exec costs {:.1} ms, \
         the git-restore reset {:.1} ms",
        ms(budget),
        ms(fresh_per_task),
        ms(costs.claim_and_release),
        ms(costs.scrub),
        ms(costs.bare_exec),
        ms(costs.reset),
    );
}

mod support;

/// A git image of a README and 50 small source files.
fn backend(dir: &std::path::Path, max_sandboxes: u32) -> Arc<LocalBackend> {
    support::local_backend(dir, max_sandboxes, true, |image| {
        std::fs::create_dir_all(image.join("src")).unwrap();
        for n in 0..50 {
            std::fs::write(image.join(format!("src/m{n}.py")), format!("x = {n}\n")).unwrap();
        }
    })
}

/// A prepare hook of the bench image that takes 5 s.
fn five_second_hook(each_sandbox: bool) -> PrepareHooks {
    let hook = PrepareHook {
        commands: vec![vec![
            "sh".into(),
            "-c".into(),
            "sleep 5; echo ready > prepared".into(),
        ]],
        timeout: Duration::from_secs(60),
        workdir: None,
        expected: None,
        each_sandbox,
    };
    PrepareHooks::new([("bench".to_string(), hook)].into(), None)
}

/// Runs `items` with `settings` at `concurrency` and prints one line.
async fn engine_run(
    registry: &Arc<Registry>,
    label: &str,
    items: Vec<WorkItem>,
    concurrency: usize,
    settings: FleetSettings,
) -> RunCost {
    let dir = tempfile::tempdir().unwrap();
    let tasks = items.len();
    let concurrency = u32::try_from(concurrency).unwrap();
    let spec = RunSpec {
        run_id: RunId::generate("bench-recycle"),
        settings: FleetSettings {
            max_concurrent: concurrency,
            ..settings
        },
        clusters: vec![Cluster {
            name: "local".into(),
            kind: "local".into(),
            weight: 1,
            backend: backend(dir.path(), 2 * concurrency + 40),
            pace: None,
        }],
        plugins: Plugins::named(
            registry.clone(),
            "generic",
            "least-loaded",
            "proportional",
            Some("git-restore"),
        )
        .unwrap(),
        out_dir: dir.path().join("out"),
        cancel: CancellationToken::new(),
        progress: Arc::new(LogProgress),
    };
    let cpu = cpu_seconds();
    let started = Instant::now();
    let report = sandfleet_engine::run(spec, items).await.unwrap();
    let wall = started.elapsed();
    let cpu = cpu_seconds() - cpu;
    assert_eq!(report.tasks.ok, tasks, "{}", report.render());
    let reset = report.phases.get("reset");
    println!(
        "engine/recycle ({label}): wall {:.1} s, {:.1} tasks/s, CPU {:.1} ms per task, {} claims, \
         {} reuses ({} restores), {} quarantined, {} prepared, {} forked; reset phase (baselines \
         included) p50 {:.0} ms, p95 {:.0} ms over {}",
        wall.as_secs_f64(),
        tasks as f64 / wall.as_secs_f64(),
        cpu * 1e3 / tasks as f64,
        report.claims,
        report.recycle.reused,
        report.recycle.restored,
        report.recycle.quarantined,
        report.prepared,
        report.forked,
        reset.map_or(0.0, |r| r.p50_s * 1e3),
        reset.map_or(0.0, |r| r.p95_s * 1e3),
        reset.map_or(0, |r| r.count),
    );
    RunCost {
        wall,
        cpu_per_task: cpu / tasks as f64,
    }
}

/// One sandbox, reset `count` times each way, one at a time; and as many
/// fresh sandboxes claimed and released.
async fn one_reset(registry: &Registry, count: usize) -> StepCosts {
    let dir = tempfile::tempdir().unwrap();
    let backend = backend(dir.path(), 4);
    let run_id = RunId::generate("bench-reset");
    let template = backend
        .ensure_template(&TemplateSpec {
            name: "bench".into(),
            image: "bench".into(),
            cpu_milli: 1000,
            memory_mib: 512,
            disk_mib: 512,
            network: false,
            env: Default::default(),
            labels: run_id.labels(),
        })
        .await
        .unwrap();
    let claim = || async {
        backend
            .claim(
                &template,
                &run_id.labels(),
                Instant::now() + Duration::from_secs(60),
            )
            .await
            .unwrap()
    };
    let sandbox = claim().await;
    let check = registry.reset_check("git-restore").unwrap();
    let task = Task {
        id: "bench".into(),
        image: "bench".into(),
        workdir: "/workspace".into(),
        data: String::new(),
    };
    let baseline = run(
        &*backend,
        &sandbox,
        &check.baseline(&task).await.unwrap(),
        true,
    )
    .await;
    let reset = check.reset(&task, &baseline).await.unwrap();
    // Prints the samples' spread and returns the CPU of one.
    let timed = |label: &str, samples: &mut Vec<f64>, cpu: f64| {
        samples.sort_by(f64::total_cmp);
        let each = cpu / samples.len() as f64;
        println!(
            "backend-local/{label}: p50 {:.1} ms, max {:.1} ms, CPU {:.1} ms each ({} runs)",
            samples[samples.len() / 2] * 1e3,
            samples[samples.len() - 1] * 1e3,
            each * 1e3,
            samples.len()
        );
        each
    };
    let mut bare = Vec::new();
    let cpu = cpu_seconds();
    for _ in 0..count {
        let started = Instant::now();
        backend
            .exec(&sandbox, &request(vec!["true".into()]), None)
            .await
            .unwrap();
        bare.push(started.elapsed().as_secs_f64());
    }
    let bare_exec = timed("exec `true`", &mut bare, cpu_seconds() - cpu);
    let mut scrubs = Vec::new();
    let cpu = cpu_seconds();
    for _ in 0..count {
        let started = Instant::now();
        backend.scrub(&sandbox).await.unwrap();
        scrubs.push(started.elapsed().as_secs_f64());
    }
    let scrub = timed("scrub", &mut scrubs, cpu_seconds() - cpu);
    let mut lifecycles = Vec::new();
    let cpu = cpu_seconds();
    for _ in 0..count {
        let started = Instant::now();
        let fresh = claim().await;
        backend.release(&fresh).await.unwrap();
        lifecycles.push(started.elapsed().as_secs_f64());
    }
    let claim_and_release = timed(
        "claim + release of a fresh sandbox",
        &mut lifecycles,
        cpu_seconds() - cpu,
    );
    // Joined last: the CPU kept is that of the reset the engine runs.
    let mut reset_cpu = 0.0;
    for joined in [false, true] {
        let mut walls = Vec::new();
        let cpu = cpu_seconds();
        for _ in 0..count {
            let started = Instant::now();
            let outputs = run(&*backend, &sandbox, &reset, joined).await;
            walls.push(started.elapsed().as_secs_f64());
            let verdict = check.verify(&task, &baseline, &outputs).await.unwrap();
            assert!(matches!(verdict, Verdict::Clean), "{verdict:?}");
        }
        let label = if joined {
            "git-restore reset, one joined exec".to_owned()
        } else {
            format!("git-restore reset, {} execs", reset.len())
        };
        reset_cpu = timed(&label, &mut walls, cpu_seconds() - cpu);
    }
    // Where a reset's time goes: each step alone.
    for command in &reset {
        let mut walls = Vec::new();
        let cpu = cpu_seconds();
        for _ in 0..count.min(10) {
            let started = Instant::now();
            run(&*backend, &sandbox, std::slice::from_ref(command), false).await;
            walls.push(started.elapsed().as_secs_f64());
        }
        timed(
            &format!("reset step {}", command.argv[3]),
            &mut walls,
            cpu_seconds() - cpu,
        );
    }
    backend.reap(&run_id).await.unwrap();
    StepCosts {
        bare_exec,
        scrub,
        reset: reset_cpu,
        claim_and_release,
    }
}

/// Runs `commands` in one joined exec or one exec each.
async fn run(
    backend: &dyn Backend,
    sandbox: &SandboxHandle,
    commands: &[Command],
    joined: bool,
) -> Vec<CommandOutput> {
    if joined {
        let joined = Joined::new(commands).unwrap();
        let context = ExecContext {
            workdir: "/workspace",
            env: &[],
            max_output: 16 << 20,
        };
        let result = backend
            .exec(sandbox, &joined.request(&context), None)
            .await
            .unwrap();
        return joined.split(&result).unwrap();
    }
    let mut outputs = Vec::new();
    for command in commands {
        let mut request = request(command.argv.clone());
        request.timeout = Duration::from_millis(command.timeout_ms);
        let result = backend.exec(sandbox, &request, None).await.unwrap();
        outputs.push(CommandOutput {
            exit_code: result.exit_code,
            stdout: String::from_utf8_lossy(&result.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
            timed_out: result.timed_out,
            duration_ms: 0,
        });
    }
    outputs
}

fn request(argv: Vec<String>) -> ExecRequest {
    ExecRequest {
        argv,
        workdir: Some("/workspace".into()),
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        merge_stderr: false,
        stdin: None,
        max_output: Some(16 << 20),
    }
}

/// CPU seconds of this process and its reaped children so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime, stime, cutime, cstime: fields 14 to 17 of proc(5), in ticks
    // of 100 Hz.
    fields[11..15]
        .iter()
        .map(|ticks| ticks.parse::<f64>().unwrap())
        .sum::<f64>()
        / 100.0
}
