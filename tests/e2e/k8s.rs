//! The README's Kubernetes commands: `sandfleet devcluster k8s
//! --with-agent-sandbox --images-from examples/quickstart.toml` in one
//! process and `sandfleet run examples/quickstart-k8s.toml` against it —
//! every strategy, recycling, the production faults, kill -9 then reap, two
//! clusters placed by capacity, a kubeconfig that is not there, and the
//! devcluster's memory over many claim cycles.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandfleet_test_support::quickstart::{expected_statuses, statuses};

use crate::signals::wait;
use crate::{repo, results, run_id, stderr};

/// How long a devcluster or a run may take to get where a test waits for it.
const PATIENCE: Duration = Duration::from_secs(120);

/// A `sandfleet devcluster k8s` process, stopped (SIGTERM) when dropped.
pub(crate) struct Devcluster {
    child: Child,
    kubeconfig: PathBuf,
}

impl Devcluster {
    pub(crate) fn start(dir: &Path, name: &str, extra: &[&str]) -> Self {
        let kubeconfig = dir.join(format!("{name}.yaml"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
            .args([
                "devcluster",
                "k8s",
                "--with-agent-sandbox",
                "--images-from",
                "examples/quickstart.toml",
                "--write-kubeconfig",
            ])
            .arg(&kubeconfig)
            .args(extra)
            .current_dir(repo())
            .env("SANDFLEET_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Ready once it has printed the kubeconfig's path.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), kubeconfig.display().to_string());
        Devcluster { child, kubeconfig }
    }

    /// Its resident memory now, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// `kubectl` against it.
    pub(crate) fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&self.kubeconfig, args)
    }

    /// Names of the agent-sandbox objects and pods carrying `selector`.
    fn objects(&self, selector: &str) -> Vec<String> {
        let listed = self.kubectl(&[
            "get",
            "sandboxclaims,sandboxwarmpools,sandboxtemplates,pods",
            "-A",
            "-l",
            selector,
            "-o",
            "name",
        ]);
        listed.lines().map(str::to_string).collect()
    }

    /// Every Sandbox in the cluster (they carry no run label of ours).
    fn sandboxes(&self) -> Vec<String> {
        let listed = self.kubectl(&["get", "sandboxes", "-A", "-o", "name"]);
        listed.lines().map(str::to_string).collect()
    }

    /// Waits until every Sandbox left satisfies `keep`: a deleted claim's
    /// Sandbox goes with it through the garbage collector (a background
    /// deletion, as the driver sends), so it may outlive the run by a pass.
    fn wait_for_sandboxes(&self, what: &str, keep: impl Fn(&str) -> bool) {
        crate::eventually_none(what, || {
            let mut left = self.sandboxes();
            left.retain(|s| !keep(s));
            left
        });
    }

    /// Waits until nothing carries `selector`: pods go with their Sandbox
    /// through the garbage collector too.
    fn wait_until_none_labelled(&self, selector: &str) {
        crate::eventually_none(&format!("nothing labelled {selector} to be left"), || {
            self.objects(selector)
        });
    }

    fn wait_until_no_sandboxes(&self) {
        self.wait_for_sandboxes("every Sandbox to be collected", |_| false);
    }
}

/// `kubectl` with `kubeconfig`; its standard output, once it succeeded.
pub(crate) fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        stderr(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Drop for Devcluster {
    fn drop(&mut self) {
        crate::signals::signal(&self.child, "-TERM");
        wait(&mut self.child);
    }
}

/// The shipped example with `edits` applied, written beside the scratch
/// directory with its dataset paths made absolute.
fn example(dir: &Path, name: &str, edits: &[(&str, &str)]) -> PathBuf {
    let examples = repo().join("examples");
    let mut text = std::fs::read_to_string(examples.join("quickstart-k8s.toml")).unwrap();
    text = text.replace(
        "\"quickstart/",
        &format!("\"{}/quickstart/", examples.display()),
    );
    for (from, to) in edits {
        assert!(text.contains(from), "{from}");
        text = text.replacen(from, to, 1);
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run(fleet: &Path, out: &Path, id: &str, kubeconfig: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["run", fleet.to_str().unwrap(), "--run-id", id, "--out"])
        .arg(out)
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn the_quickstart_on_devcluster_k8s_gives_the_local_runs_statuses_with_every_strategy_and_recycling()
 {
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Devcluster::start(scratch.path(), "dev", &[]);
    // The README's pre-pull: every image on every node, nothing left.
    let pulled = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["prepull", "examples/quickstart-k8s.toml"])
        .current_dir(repo())
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("SANDFLEET_LOG", "warn")
        .output()
        .unwrap();
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    let pulls = |output: &Output| {
        stderr(output)
            .lines()
            .filter(|line| line.starts_with("pull: k8s: pulled "))
            .count()
    };
    assert_eq!(pulls(&pulled), 3, "{}", stderr(&pulled));
    assert!(
        cluster
            .kubectl(&["get", "daemonsets", "-A", "-o", "name"])
            .trim()
            .is_empty()
    );
    let recycle = ("max_concurrent = 4", "max_concurrent = 4\nrecycle = true");
    let variants: [(&str, &[(&str, &str)]); 6] = [
        ("none", &[("strategy = \"sliding\"", "strategy = \"none\"")]),
        (
            "naive",
            &[("strategy = \"sliding\"", "strategy = \"naive\"")],
        ),
        // The sliding run pulls first, as `[fleet] prepull` asks.
        (
            "sliding",
            &[(
                "strategy = \"sliding\"",
                "strategy = \"sliding\"\nprepull = true",
            )],
        ),
        (
            "pipelined",
            &[("strategy = \"sliding\"", "strategy = \"pipelined\"")],
        ),
        // The reset check's commands over the persistent session (the
        // default), whose shell is the only process an exec adds to a pod.
        ("recycle", &[recycle]),
        (
            "recycle-oneshot",
            &[
                recycle,
                ("lease = \"10m\"", "lease = \"10m\"\nexec = \"oneshot\""),
            ],
        ),
    ];
    for (name, edits) in variants {
        let fleet = example(scratch.path(), name, edits);
        let out = scratch.path().join(format!("out-{name}"));
        let id = run_id(&format!("k8s-{name}"));
        let output = run(&fleet, &out, &id, &cluster.kubeconfig);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        let pulled_first = if name == "sliding" { 3 } else { 0 };
        assert_eq!(pulls(&output), pulled_first, "{name}: {}", stderr(&output));
        assert_eq!(
            statuses(&out),
            expected_statuses(),
            "{name}: {}",
            stderr(&output)
        );
        assert_eq!(report(&out)["releases"]["failed"], 0, "{name}");
        if name.starts_with("recycle") {
            // Fewer claims than tasks: sandboxes served several, every reset
            // clean (nothing but the session's shell ran in a pod beside
            // the task's own processes).
            let report = report(&out);
            let claims = report["claims"].as_u64().unwrap();
            assert!(claims < 13, "{name}: {report}");
            assert_eq!(report["recycle"]["quarantined"], 0, "{name}: {report}");
        }
        cluster.wait_until_none_labelled(&format!("sandfleet.io/run-id={id}"));
    }
    cluster.wait_until_no_sandboxes();

    // A kubeconfig that is not there: one line naming the cluster, before
    // anything is created.
    let fleet = example(scratch.path(), "missing", &[]);
    let missing = scratch.path().join("nowhere.yaml");
    let output = run(
        &fleet,
        &scratch.path().join("out-missing"),
        &run_id("k8s-missing"),
        &missing,
    );
    assert!(!output.status.success());
    let said = stderr(&output);
    let line = said
        .lines()
        .find(|l| l.contains("nowhere.yaml"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(line.trim_start().starts_with("k8s: kubeconfig"), "{said}");
    assert!(cluster.sandboxes().is_empty());
}

#[test]
fn under_the_production_faults_the_quickstart_gives_the_same_statuses_and_leaves_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Devcluster::start(
        scratch.path(),
        "faulty",
        &[
            "--faults",
            "conflict=0.2,watch-drop=3,gone-burst,flaky=0.02,throttle=50",
        ],
    );
    let fleet = example(scratch.path(), "faulty", &[]);
    let out = scratch.path().join("out");
    let id = run_id("k8s-faults");
    let output = run(&fleet, &out, &id, &cluster.kubeconfig);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(statuses(&out), expected_statuses(), "{}", stderr(&output));
    let truncate = results(&out)
        .into_iter()
        .find(|r| r["task_id"] == "textkit-truncate")
        .unwrap();
    assert_eq!(truncate["timed_out"], true);
    assert_eq!(report(&out)["releases"]["failed"], 0);
    cluster.wait_until_none_labelled(&format!("sandfleet.io/run-id={id}"));
    cluster.wait_until_no_sandboxes();
}

/// Another run's template and pool, applied by hand in the same namespace.
const OTHER_RUN: &str = "apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: other-calc
  labels: {sandfleet.io/run-id: other-run}
spec:
  podTemplate:
    metadata:
      labels: {sandfleet.io/run-id: other-run}
    spec:
      containers: [{name: sandbox, image: calc, command: [tail, -f, /dev/null]}]
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: other-calc
  labels: {sandfleet.io/run-id: other-run}
spec:
  replicas: 1
  sandboxTemplateRef: {name: other-calc}
";

#[test]
fn kill_9_mid_run_then_reap_leaves_nothing_of_that_run_and_another_run_whole() {
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Devcluster::start(scratch.path(), "reap", &[]);
    let manifest = scratch.path().join("other.yaml");
    std::fs::write(&manifest, OTHER_RUN).unwrap();
    cluster.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let other = "sandfleet.io/run-id=other-run";
    // Its template and pool (its pod comes and goes with the controller).
    let other_objects = || {
        let mut objects = cluster.objects(other);
        objects.retain(|o| !o.starts_with("pod/"));
        objects
    };
    let before = other_objects();
    assert_eq!(before.len(), 2, "{before:?}");

    let fleet = example(scratch.path(), "killed", &[]);
    let id = run_id("k8s-kill");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["run", fleet.to_str().unwrap(), "--run-id", &id, "--out"])
        .arg(scratch.path().join("out"))
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("SANDFLEET_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mine = format!("sandfleet.io/run-id={id}");
    let until = Instant::now() + PATIENCE;
    while !cluster
        .objects(&mine)
        .iter()
        .any(|o| o.starts_with("sandboxclaim"))
    {
        assert!(Instant::now() < until, "the run never claimed");
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::signals::signal(&child, "-KILL");
    wait(&mut child);
    assert!(!cluster.objects(&mine).is_empty());

    let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["reap", "--run-id", &id, fleet.to_str().unwrap()])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("SANDFLEET_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    cluster.wait_until_none_labelled(&mine);
    // Only the other run's warm sandbox is left, and its objects are whole.
    cluster.wait_for_sandboxes("only the other run's Sandbox to be left", |s| {
        s.contains("other-calc")
    });
    assert_eq!(other_objects(), before);
}

#[test]
fn two_devclusters_split_pools_and_claims_by_capacity() {
    let scratch = tempfile::tempdir().unwrap();
    let big = Devcluster::start(scratch.path(), "big", &["--nodes", "3"]);
    let small = Devcluster::start(scratch.path(), "small", &["--nodes", "1"]);
    let examples = repo().join("examples");
    let fleet = scratch.path().join("two.toml");
    std::fs::write(
        &fleet,
        format!(
            r#"[run]
dataset = "{dir}/quickstart/tasks.jsonl"
solutions = "{dir}/quickstart/solutions.jsonl"

[adapter]
name = "generic"

[fleet]
strategy = "naive"
max_concurrent = 4
max_warmpool_size = 2
cpu_milli = 250
memory_mib = 256

[plugins]
placement = "capacity-weighted"

[[clusters]]
name = "big"
backend = "k8s"
[clusters.k8s]
kubeconfig = "{big}"

[[clusters]]
name = "small"
backend = "k8s"
[clusters.k8s]
kubeconfig = "{small}"
"#,
            dir = examples.display(),
            big = big.kubeconfig.display(),
            small = small.kubeconfig.display(),
        ),
    )
    .unwrap();
    let out = scratch.path().join("out");
    let id = run_id("k8s-two");
    let output = run(&fleet, &out, &id, Path::new("/nonexistent"));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(statuses(&out), expected_statuses(), "{}", stderr(&output));
    let on = |name: &str| {
        results(&out)
            .iter()
            .filter(|r| r["cluster"] == name)
            .count()
    };
    let (on_big, on_small) = (on("big"), on("small"));
    assert_eq!(on_big + on_small, 13);
    assert!(
        on_big > on_small && on_small > 0,
        "big {on_big}, small {on_small}"
    );
    for cluster in [&big, &small] {
        cluster.wait_until_none_labelled(&format!("sandfleet.io/run-id={id}"));
    }
}

/// A soak of the devcluster: the quickstart run again and again (every run
/// 26 claims, each made, bound, exec'd into and deleted), with events kept
/// 2 s and a watch cache of 1,000 changes, full after the second run; its
/// resident memory after the last run stays within a few MiB of after the
/// second, so nothing a finished claim leaves behind accumulates. (With the
/// default cache of 10,000 the same runs grow it 18 MiB a run until the
/// cache is full, at about 235 MiB after ten runs.)
#[test]
fn the_devclusters_memory_stays_bounded_over_many_claim_cycles() {
    let scratch = tempfile::tempdir().unwrap();
    let cluster = Devcluster::start(
        scratch.path(),
        "soak",
        &[
            "--runtime",
            "plain",
            "--event-ttl",
            "2s",
            "--watch-cache-size",
            "1000",
        ],
    );
    let fleet = example(
        scratch.path(),
        "soak",
        &[(
            "name = \"quickstart-k8s\"",
            "name = \"quickstart-k8s\"\nepochs = 2",
        )],
    );
    const RUNS: usize = 5;
    let mut rss = Vec::new();
    for round in 0..RUNS {
        let out = scratch.path().join(format!("out-{round}"));
        let id = run_id(&format!("k8s-soak-{round}"));
        let output = run(&fleet, &out, &id, &cluster.kubeconfig);
        assert!(
            output.status.success(),
            "round {round}: {}",
            stderr(&output)
        );
        assert_eq!(report(&out)["claims"], 26, "round {round}");
        rss.push(cluster.rss_kib());
    }
    println!("devcluster RSS after each of {RUNS} runs (KiB): {rss:?}");
    let growth = rss[RUNS - 1].saturating_sub(rss[1]);
    assert!(
        growth < 8 * 1024,
        "the devcluster grew {growth} KiB over {} claim cycles: {rss:?}",
        26 * (RUNS - 2)
    );
    cluster.wait_until_no_sandboxes();
}
