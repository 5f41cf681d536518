//! Issue 24's image benchmarks, side by side in one run against a real
//! registry on loopback (Debian's `docker-registry`) serving the real
//! SWE-bench image of `pytest-dev__pytest-11143` (the in-repo recipe's
//! three layers, built once and cached under `target/sandfleet-recipes`):
//!
//! 1. **pull**: pull and unpack the image into an empty store —
//!    sandfleet's layer store (`Store::pull`, what `sandfleet images pull`
//!    runs) against `skopeo copy` into an OCI layout + `umoci unpack`, and
//!    against `podman pull` into a fresh `--root`. The contenders take
//!    turns, each repetition in a rotated order; each time is followed by a
//!    `sync`, timed apart (sandfleet syncs its layers before it names them
//!    complete; the others leave dirty pages behind).
//! 2. **cold**: a cold sandbox of the cached image running `true` —
//!    sandfleet's local backend (claim, `exec true`, release) against
//!    `podman run --rm` (runc, cgroupfs, the ulimits this machine needs;
//!    with its default network and with `--network none`, which is what a
//!    sandfleet sandbox has), and against a cold claim of a directory image
//!    in the same backend. Taken in turns, one of each per round, in orders
//!    where each follows every other equally often.
//! 3. **shared**: 20 images sharing the base and environment layers, each
//!    with an instance layer of its own (the real instance layer with one
//!    file added), pushed under 20 repositories and pulled into one store:
//!    the store's size on disk against the sum of the 20 images' sizes,
//!    compressed and unpacked (podman's storage beside it).
//!
//! Run: `cargo bench -p sandfleet-backend-local --bench images` (as root:
//! the recipe builds in a chroot the first time, and the comparison runs
//! podman rootful). Options after `--`: `--reps N` (pulls per contender,
//! default 3), `--rounds N` (cold sandboxes per contender, default 20),
//! `--images N` (default 20), `--only pull|cold|shared`. Needs `skopeo`,
//! `umoci`, `podman` and `runc` (`apt-get install podman skopeo umoci
//! runc`); a contender whose tool is missing or fails is skipped with a
//! line saying so. Prints one line per measurement.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig, layer_ownership,
};
use sandfleet_core::{Backend, ExecRequest, RunId, TemplateRef, TemplateSpec};
use sandfleet_images::{PullOptions, Reference, Store};
use sandfleet_registry_testing::image::{Built, Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use sandfleet_registry_testing::swebench::{Recipe, default_cache};

const REPOSITORY: &str = "swebench/sweb.eval.x86_64.pytest-dev_1776_pytest-11143";
const PATIENCE: Duration = Duration::from_secs(120);
/// The flags `podman` needs on this machine (DESIGN.md): crun refuses its
/// hybrid cgroups.
const PODMAN_GLOBAL: &[&str] = &["--runtime", "runc", "--cgroup-manager=cgroupfs"];
const PODMAN_ULIMITS: &[&str] = &[
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=4096:4096",
];

struct Options {
    reps: usize,
    rounds: usize,
    images: usize,
    only: Option<String>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |name: &str, default: usize| {
        value(name).map_or(default, |n| {
            n.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
    };
    Options {
        reps: number("--reps", 3).max(1),
        rounds: number("--rounds", 20).max(1),
        images: number("--images", 20).max(1),
        only: value("--only"),
    }
}

fn main() {
    let options = options();
    let wanted = |part: &str| options.only.as_deref().is_none_or(|only| only == part);
    println!("images bench: load average at start {}", loadavg());
    let tools = Tools::find();

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/swebench");
    let recipe = Recipe::pytest_11143(&data).unwrap_or_else(|error| panic!("{error}"));
    let started = Instant::now();
    let built = recipe
        .build(&default_cache())
        .unwrap_or_else(|error| panic!("{error}"));
    println!(
        "image: {REPOSITORY}, {} layers, {} compressed (ready in {:.1?})",
        built.layers.len(),
        mib(built.layers.iter().map(|l| l.blob.len() as u64).sum()),
        started.elapsed()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = runtime.block_on(Registry::start(Auth::None));
    let started = Instant::now();
    runtime.block_on(push(&registry, REPOSITORY, "latest", &built));
    let reference = format!("{}/{REPOSITORY}:latest", registry.host);
    println!(
        "registry: {} on loopback, pushed {reference} in {:.1?}",
        registry.host,
        started.elapsed()
    );
    let work = tempfile::Builder::new()
        .prefix("sandfleet-images-bench-")
        .tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/var/tmp".into()))
        .unwrap();

    if wanted("pull") {
        pulls(&runtime, &tools, &reference, work.path(), options.reps);
    }
    if wanted("cold") {
        cold(&runtime, &tools, &reference, work.path(), options.rounds);
    }
    if wanted("shared") {
        shared(
            &runtime,
            &tools,
            &registry,
            &recipe,
            &built,
            work.path(),
            options.images,
        );
    }
    println!("images bench: load average at end {}", loadavg());
}

/// The external tools, each `None` with the reason when missing.
struct Tools {
    skopeo: Result<PathBuf, String>,
    umoci: Result<PathBuf, String>,
    podman: Result<PathBuf, String>,
}

impl Tools {
    fn find() -> Tools {
        let find = |program: &str| {
            which(program).ok_or_else(|| {
                format!("{program} is not installed (apt-get install podman skopeo umoci runc)")
            })
        };
        let podman = find("podman").and_then(|podman| {
            which("runc").map(|_| podman).ok_or_else(|| {
                "runc is not installed (podman needs it here: apt-get install runc)".to_string()
            })
        });
        let tools = Tools {
            skopeo: find("skopeo"),
            umoci: find("umoci"),
            podman,
        };
        for (name, tool) in [
            ("skopeo", &tools.skopeo),
            ("umoci", &tools.umoci),
            ("podman", &tools.podman),
        ] {
            match tool {
                Ok(path) => println!("tool: {name} {} ({})", version(path), path.display()),
                Err(why) => println!("tool: {name} missing: {why}"),
            }
        }
        tools
    }

    /// skopeo and umoci together, or why not.
    fn skopeo_umoci(&self) -> Result<(PathBuf, PathBuf), String> {
        Ok((self.skopeo.clone()?, self.umoci.clone()?))
    }
}

// ---------------------------------------------------------------- pull

#[derive(Clone, Copy, PartialEq)]
enum Puller {
    Sandfleet,
    SkopeoUmoci,
    Podman,
}

impl Puller {
    fn name(self) -> &'static str {
        match self {
            Puller::Sandfleet => "sandfleet",
            Puller::SkopeoUmoci => "skopeo+umoci",
            Puller::Podman => "podman",
        }
    }
}

/// One timed pull: the tool's time (and its parts), then `sync`'s.
struct Pulled {
    tool: Duration,
    sync: Duration,
    disk: u64,
}

fn pulls(
    runtime: &tokio::runtime::Runtime,
    tools: &Tools,
    reference: &str,
    work: &Path,
    reps: usize,
) {
    println!(
        "== pull: pull + unpack of the image into an empty store, {reps} each, in turns (load average {})",
        loadavg()
    );
    let mut contenders = vec![Puller::Sandfleet];
    match tools.skopeo_umoci() {
        Ok(_) => contenders.push(Puller::SkopeoUmoci),
        Err(why) => println!("pull/skopeo+umoci: skipped: {why}"),
    }
    match &tools.podman {
        Ok(_) => contenders.push(Puller::Podman),
        Err(why) => println!("pull/podman: skipped: {why}"),
    }
    let mut results: BTreeMap<&str, Vec<Pulled>> = BTreeMap::new();
    let mut failed: HashSet<&str> = HashSet::new();
    for rep in 0..reps {
        for k in 0..contenders.len() {
            let puller = contenders[(rep + k) % contenders.len()];
            if failed.contains(puller.name()) {
                continue;
            }
            let dir = work.join(format!("pull-{}-{rep}", puller.name()));
            std::fs::create_dir_all(&dir).unwrap();
            sync();
            let outcome = match puller {
                Puller::Sandfleet => pull_sandfleet(runtime, reference, &dir),
                Puller::SkopeoUmoci => {
                    let (skopeo, umoci) = tools.skopeo_umoci().unwrap();
                    pull_skopeo_umoci(&skopeo, &umoci, reference, &dir)
                }
                Puller::Podman => pull_podman(tools.podman.as_ref().unwrap(), reference, &dir),
            };
            match outcome {
                Ok((tool, parts)) => {
                    let start = Instant::now();
                    sync();
                    let sync = start.elapsed();
                    let disk = disk_usage(&dir);
                    println!(
                        "pull/{} #{}: {} (+ sync {}){parts}, {} on disk",
                        puller.name(),
                        rep + 1,
                        secs(tool),
                        secs(sync),
                        mib(disk)
                    );
                    results
                        .entry(puller.name())
                        .or_default()
                        .push(Pulled { tool, sync, disk });
                }
                Err(why) => {
                    println!(
                        "pull/{}: skipped from here on: it failed: {why}",
                        puller.name()
                    );
                    failed.insert(puller.name());
                }
            }
            remove(&dir);
        }
    }
    let mut fastest: Option<(&str, Duration)> = None;
    for (name, runs) in &results {
        let tool = median(runs.iter().map(|r| r.tool).collect());
        let with_sync = median(runs.iter().map(|r| r.tool + r.sync).collect());
        println!(
            "pull/{name}: median {} (with sync {}) of {} runs [{}], {} on disk",
            secs(tool),
            secs(with_sync),
            runs.len(),
            runs.iter()
                .map(|r| secs(r.tool))
                .collect::<Vec<_>>()
                .join(", "),
            mib(runs[0].disk)
        );
        if *name != "sandfleet" && fastest.is_none_or(|(_, best)| with_sync < best) {
            fastest = Some((name, with_sync));
        }
    }
    if let (Some(ours), Some((name, best))) = (results.get("sandfleet"), fastest) {
        let ours = median(ours.iter().map(|r| r.tool + r.sync).collect());
        println!(
            "pull: sandfleet {} against the fastest other, {name}, {} (with sync): {:.2}x its time — goal (no slower) {}",
            secs(ours),
            secs(best),
            ours.as_secs_f64() / best.as_secs_f64(),
            if ours <= best { "met" } else { "missed" }
        );
    }
}

fn pull_sandfleet(
    runtime: &tokio::runtime::Runtime,
    reference: &str,
    dir: &Path,
) -> Result<(Duration, String), String> {
    let reference = Reference::parse(reference).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let store = Store::open(
        dir,
        layer_ownership(LocalConfig::default().sandbox_uid_base)?,
    )
    .map_err(|e| e.to_string())?;
    runtime
        .block_on(store.pull(&reference, &PullOptions::default(), &|_| {}))
        .map_err(|e| e.to_string())?;
    Ok((start.elapsed(), String::new()))
}

fn pull_skopeo_umoci(
    skopeo: &Path,
    umoci: &Path,
    reference: &str,
    dir: &Path,
) -> Result<(Duration, String), String> {
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    let start = Instant::now();
    run(Command::new(skopeo)
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("oci:{}:latest", layout.display())))?;
    let copied = start.elapsed();
    run(Command::new(umoci)
        .args(["unpack", "--image"])
        .arg(format!("{}:latest", layout.display()))
        .arg(&bundle))?;
    let total = start.elapsed();
    Ok((
        total,
        format!(
            " [skopeo copy {}, umoci unpack {}]",
            secs(copied),
            secs(total - copied)
        ),
    ))
}

/// `podman` with its storage under `dir` (a fresh one per directory).
fn podman(podman: &Path, dir: &Path) -> Command {
    let mut command = Command::new(podman);
    command
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--runroot")
        .arg(podman_runroot(dir))
        .args(PODMAN_GLOBAL);
    command
}

/// Waits (at most 10 s) until no process names `dir` on its command line,
/// as podman's leftovers of a run do; returns how long that took.
fn wait_for_leftovers(dir: &Path) -> Duration {
    let needle = dir.to_string_lossy().into_owned();
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
            .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
    };
    let started = Instant::now();
    let mut waited = Duration::ZERO;
    while running() && waited < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
        waited = started.elapsed();
    }
    waited
}

/// podman refuses a run root longer than 50 characters: one in `/tmp`
/// named by the bench's process and `dir`'s name.
fn podman_runroot(dir: &Path) -> PathBuf {
    PathBuf::from(format!(
        "/tmp/sfb-{}-{}",
        std::process::id(),
        dir.file_name().unwrap().to_string_lossy()
    ))
}

fn pull_podman(
    podman_bin: &Path,
    reference: &str,
    dir: &Path,
) -> Result<(Duration, String), String> {
    let start = Instant::now();
    run(podman(podman_bin, dir)
        .args(["pull", "--quiet", "--tls-verify=false"])
        .arg(reference))?;
    Ok((start.elapsed(), String::new()))
}

// ---------------------------------------------------------------- cold

/// The local backend with a directory image and the OCI image.
struct Local {
    backend: LocalBackend,
    run_id: RunId,
    oci: TemplateRef,
    directory: TemplateRef,
}

impl Local {
    fn new(runtime: &tokio::runtime::Runtime, reference: &str, dir: &Path) -> Local {
        let image = dir.join("app");
        std::fs::create_dir_all(image.join("src")).unwrap();
        std::fs::write(image.join("src/app.py"), "print('hello')\n").unwrap();
        let config = LocalConfig {
            state_dir: Some(dir.join("state")),
            isolation: IsolationMode::Namespaces,
            images: BTreeMap::from([(
                "app".to_string(),
                ImageSource {
                    path: image,
                    git: false,
                    limits: LimitOverrides::default(),
                },
            )]),
            ..LocalConfig::default()
        };
        let run_id = RunId::generate("bench-images");
        let backend = LocalBackend::new("local", config).unwrap();
        let spec = |name: &str, image: &str| TemplateSpec {
            name: name.into(),
            image: image.into(),
            cpu_milli: 1000,
            memory_mib: 512,
            disk_mib: 1024,
            network: false,
            env: BTreeMap::new(),
            labels: run_id.labels(),
        };
        sync();
        let started = Instant::now();
        let oci = runtime
            .block_on(backend.ensure_template(&spec("oci", reference)))
            .unwrap();
        println!(
            "cold: the local backend pulled the image in {} (untimed setup)",
            secs(started.elapsed())
        );
        let directory = runtime
            .block_on(backend.ensure_template(&spec("directory", "app")))
            .unwrap();
        Local {
            backend,
            run_id,
            oci,
            directory,
        }
    }

    /// A cold claim, `exec true`, release: the claim's time, then claim +
    /// `true`, then all three.
    async fn round(&self, template: &TemplateRef) -> [Duration; 3] {
        let start = Instant::now();
        let sandbox = self
            .backend
            .claim(template, &self.run_id.labels(), start + PATIENCE)
            .await
            .unwrap();
        let claimed = start.elapsed();
        let request = ExecRequest {
            argv: vec!["true".into()],
            timeout: PATIENCE,
            ..ExecRequest::default()
        };
        let result = self.backend.exec(&sandbox, &request, None).await.unwrap();
        assert_eq!(result.exit_code, 0, "true failed in the sandbox");
        let ran = start.elapsed();
        self.backend.release(&sandbox).await.unwrap();
        [claimed, ran, start.elapsed()]
    }
}

fn cold(
    runtime: &tokio::runtime::Runtime,
    tools: &Tools,
    reference: &str,
    work: &Path,
    rounds: usize,
) {
    println!(
        "== cold: a cold sandbox of the cached image running `true`, {rounds} rounds of each, in turns (load average {})",
        loadavg()
    );
    let dir = work.join("cold");
    std::fs::create_dir_all(&dir).unwrap();
    let local = Local::new(runtime, reference, &dir);
    let podman_dir = dir.join("podman");
    let podman_bin = match &tools.podman {
        Ok(path) => {
            let started = Instant::now();
            match pull_podman(path, reference, &podman_dir) {
                Ok(_) => {
                    println!(
                        "cold: podman pulled the image in {} (untimed setup)",
                        secs(started.elapsed())
                    );
                    Some(path.clone())
                }
                Err(why) => {
                    println!("cold/podman: skipped: podman pull failed: {why}");
                    None
                }
            }
        }
        Err(why) => {
            println!("cold/podman: skipped: {why}");
            None
        }
    };
    // podman's `--rm` finishes in processes it leaves behind (conmon's
    // cleanup), which would otherwise run into the next contender's time.
    let mut lingered: Vec<Duration> = Vec::new();
    let mut podman_run = |network: bool| -> Result<Duration, String> {
        let mut command = podman(podman_bin.as_ref().unwrap(), &podman_dir);
        command.args(["run", "--rm"]).args(PODMAN_ULIMITS);
        if !network {
            command.args(["--network", "none"]);
        }
        command.arg(reference).arg("true");
        let start = Instant::now();
        run(&mut command)?;
        let took = start.elapsed();
        lingered.push(wait_for_leftovers(&podman_dir));
        Ok(took)
    };
    // Untimed warm-up: one of each.
    runtime.block_on(local.round(&local.oci));
    runtime.block_on(local.round(&local.directory));
    let mut podman_ok = [podman_bin.is_some(), podman_bin.is_some()];
    for (i, network) in [true, false].into_iter().enumerate() {
        if podman_ok[i]
            && let Err(why) = podman_run(network)
        {
            println!(
                "cold/podman-run{}: skipped: it failed: {why}",
                if network { "" } else { "-network-none" }
            );
            podman_ok[i] = false;
        }
    }
    let mut oci: Vec<[Duration; 3]> = Vec::new();
    let mut directory: Vec<[Duration; 3]> = Vec::new();
    let mut podman_runs: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    // A Williams square: over four rounds each contender follows every
    // other once. A plain rotation had the OCI claim follow a podman run
    // three times in four, and a claim right after one is slower: 17 ms
    // against 9 ms with no podman run between claims. No process of the
    // run is left by then and a sync does not help: what slows it is
    // finished by the kernel after podman exits.
    const ORDERS: [[usize; 4]; 4] = [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]];
    for round in 0..rounds {
        for contender in ORDERS[round % 4] {
            match contender {
                0 => oci.push(runtime.block_on(local.round(&local.oci))),
                1 => directory.push(runtime.block_on(local.round(&local.directory))),
                n => {
                    let i = n - 2;
                    if podman_ok[i] {
                        match podman_run(i == 0) {
                            Ok(time) => podman_runs[i].push(time),
                            Err(why) => {
                                println!("cold/podman: skipped from here on: it failed: {why}");
                                podman_ok[i] = false;
                            }
                        }
                    }
                }
            }
        }
    }
    let column = |runs: &[[Duration; 3]], i: usize| median(runs.iter().map(|r| r[i]).collect());
    for (name, runs) in [("oci", &oci), ("directory", &directory)] {
        println!(
            "cold/sandfleet-{name}: claim {}, claim + true {}, claim + true + release {} (medians of {}; claims p90 {})",
            ms(column(runs, 0)),
            ms(column(runs, 1)),
            ms(column(runs, 2)),
            runs.len(),
            ms(percentile(runs.iter().map(|r| r[0]).collect(), 0.9)),
        );
    }
    let ours = column(&oci, 2);
    for (i, name) in ["podman-run", "podman-run-network-none"].iter().enumerate() {
        if podman_runs[i].is_empty() {
            continue;
        }
        let theirs = median(podman_runs[i].clone());
        println!(
            "cold/{name}: {} (median of {}, p90 {}); sandfleet's claim + true + release of the OCI image is {:.1}x faster — goal (10x) {}",
            ms(theirs),
            podman_runs[i].len(),
            ms(percentile(podman_runs[i].clone(), 0.9)),
            theirs.as_secs_f64() / ours.as_secs_f64(),
            if theirs.as_secs_f64() >= 10.0 * ours.as_secs_f64() {
                "met"
            } else {
                "missed"
            }
        );
        println!(
            "cold/{name}: against sandfleet's claim + true (release off the task's path, as the engine does it): {:.1}x faster",
            theirs.as_secs_f64() / column(&oci, 1).as_secs_f64()
        );
    }
    if !lingered.is_empty() {
        let left = lingered.iter().filter(|d| !d.is_zero()).count();
        println!(
            "cold/podman: {left} of {} runs left processes behind for up to {} (waited out, untimed)",
            lingered.len(),
            ms(lingered.iter().copied().max().unwrap_or_default()),
        );
    }
    let ratio = column(&oci, 0).as_secs_f64() / column(&directory, 0).as_secs_f64();
    println!(
        "cold: the OCI image's cold claim is {ratio:.2}x the directory image's — goal (within 1.5x) {}; with true + release {:.2}x",
        if ratio <= 1.5 { "met" } else { "missed" },
        column(&oci, 2).as_secs_f64() / column(&directory, 2).as_secs_f64(),
    );
    runtime.block_on(local.backend.reap(&local.run_id)).unwrap();
    drop(local);
    remove(&podman_dir);
    remove(&dir);
}

// ---------------------------------------------------------------- shared

fn shared(
    runtime: &tokio::runtime::Runtime,
    tools: &Tools,
    registry: &Registry,
    recipe: &Recipe,
    built: &Built,
    work: &Path,
    count: usize,
) {
    println!(
        "== shared: {count} images sharing the base and environment layers, each with an instance layer of its own (load average {})",
        loadavg()
    );
    let [base, environment, instance] = &built.layers[..] else {
        panic!(
            "the recipe's image has {} layers, not 3",
            built.layers.len()
        );
    };
    let instance_tar = gunzip(&instance.blob, work);
    // The recipe's tars end with the tar crate's two zero blocks, exactly.
    let end = instance_tar.len() - 1024;
    assert!(
        instance_tar[end..].iter().all(|&b| b == 0),
        "the instance layer's tar does not end with two zero blocks"
    );
    let started = Instant::now();
    let mut references = Vec::new();
    let mut compressed_sum = 0u64;
    for i in 0..count {
        // The real instance layer with one file of its own: a distinct
        // layer of the size an instance's repository has.
        let mut tar = instance_tar[..end].to_vec();
        tar.extend(
            Tar::new()
                .file(
                    &format!("testbed/.sandfleet-bench-{i:02}"),
                    format!("image {i}\n").as_bytes(),
                )
                .finish(),
        );
        let layers = [base.clone(), environment.clone(), Layer::gzip(tar)];
        compressed_sum += layers.iter().map(|l| l.blob.len() as u64).sum::<u64>();
        let image = build_with(&layers, architecture(), None, recipe.run_config());
        let repository = format!("bench/sweb.eval.shared-{i:02}");
        runtime.block_on(push(registry, &repository, "latest", &image));
        references.push(format!("{}/{repository}:latest", registry.host));
    }
    println!(
        "shared: pushed {count} images in {} (untimed setup)",
        secs(started.elapsed())
    );

    let dir = work.join("shared");
    let store = Store::open(
        &dir,
        layer_ownership(LocalConfig::default().sandbox_uid_base).unwrap(),
    )
    .unwrap();
    let mut times = Vec::new();
    sync();
    for text in &references {
        let reference = Reference::parse(text).unwrap();
        let start = Instant::now();
        runtime
            .block_on(store.pull(&reference, &PullOptions::default(), &|_| {}))
            .unwrap();
        times.push(start.elapsed());
    }
    sync();
    println!(
        "shared/sandfleet: pulled the first image in {}, each of the other {} in {} (median)",
        secs(times[0]),
        count - 1,
        secs(median(times[1..].to_vec()))
    );
    let images = store.list().unwrap();
    assert_eq!(images.len(), count, "the store does not hold every image");
    let unpacked_sum: u64 = images.iter().map(|i| i.unpacked_size()).sum();
    let mut seen = HashSet::new();
    let unique_unpacked: u64 = images
        .iter()
        .flat_map(|i| &i.layers)
        .filter(|l| seen.insert(l.diff_id.clone()))
        .filter_map(|l| l.unpacked_size)
        .sum();
    let one_image = images[0].unpacked_size();
    let disk = disk_usage(store.root());
    println!(
        "shared/sandfleet: store {} on disk ({} layers, {} of files) for {count} images of {} compressed and {} unpacked in sum (one image: {} unpacked): {:.1}% of the unpacked sum, {:.2}x one image",
        mib(disk),
        seen.len(),
        mib(unique_unpacked),
        mib(compressed_sum),
        mib(unpacked_sum),
        mib(one_image),
        100.0 * disk as f64 / unpacked_sum as f64,
        disk as f64 / one_image as f64,
    );
    drop(store);
    remove(&dir);

    match &tools.podman {
        Ok(podman_bin) => {
            let dir = work.join("shared-podman");
            let start = Instant::now();
            let mut outcome = Ok(Duration::ZERO);
            for reference in &references {
                if let Err(why) = pull_podman(podman_bin, reference, &dir) {
                    outcome = Err(why);
                    break;
                }
            }
            match outcome {
                Ok(_) => {
                    let elapsed = start.elapsed();
                    sync();
                    println!(
                        "shared/podman: {} on disk for the same {count} images (pulled in {})",
                        mib(disk_usage(&dir.join("root"))),
                        secs(elapsed)
                    );
                }
                Err(why) => println!("shared/podman: skipped: podman pull failed: {why}"),
            }
            remove(&dir);
        }
        Err(why) => println!("shared/podman: skipped: {why}"),
    }
}

/// A gzip blob's content, by `gzip -dc`.
fn gunzip(blob: &[u8], work: &Path) -> Vec<u8> {
    let path = work.join("instance.tar.gz");
    std::fs::write(&path, blob).unwrap();
    let output = Command::new("gzip")
        .arg("-dc")
        .arg(&path)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "gzip -dc failed");
    std::fs::remove_file(&path).unwrap();
    output.stdout
}

fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

// ---------------------------------------------------------------- helpers

/// Runs a command to its end (their own timeouts bound them: pulls from a
/// loopback registry); an error carries its status and last line.
fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stderr
        .lines()
        .chain(stdout.lines())
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_string();
    Err(format!(
        "{:?} exited with {}: {last}",
        command.get_program(),
        output.status
    ))
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

fn version(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default()
}

fn sync() {
    rustix::fs::sync();
}

/// Blocks allocated under `dir`, each inode once, not following links.
fn disk_usage(dir: &Path) -> u64 {
    let mut seen = HashSet::new();
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| seen.insert((meta.dev(), meta.ino())))
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// Removes a directory the bench made (and podman's run root for it);
/// a failure is said, not fatal.
fn remove(dir: &Path) {
    for dir in [dir.to_path_buf(), podman_runroot(dir)] {
        if let Err(error) = std::fs::remove_dir_all(&dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            println!("note: cannot remove {}: {error}", dir.display());
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn median(values: Vec<Duration>) -> Duration {
    percentile(values, 0.5)
}

fn percentile(mut values: Vec<Duration>, p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    let rank = ((values.len() - 1) as f64 * p).round() as usize;
    values[rank]
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
