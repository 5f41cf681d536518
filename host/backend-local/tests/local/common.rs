//! Fixtures: a state directory and an image in temporary directories, a
//! backend over them, and host-side views of sandbox processes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig,
};
use sandfleet_core::{
    Backend, BackendError, Labels, RunId, SandboxHandle, TemplateRef, TemplateSpec, WarmPools,
};

/// The image every test uses: a small source tree.
pub(crate) const IMAGE: &str = "app";

pub(crate) use crate::sandbox_shell::{PATIENCE, request, sh, sh_ok};

/// A state directory, an image, and the config naming them.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) run_id: RunId,
    pub(crate) config: LocalConfig,
}

impl Fixture {
    pub(crate) fn new(isolation: IsolationMode) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        fs::create_dir_all(image.join("src")).unwrap();
        fs::write(image.join("src/app.py"), "print('hello')\n").unwrap();
        fs::write(image.join("README.md"), "# app\n").unwrap();
        let config = LocalConfig {
            state_dir: Some(dir.path().join("state")),
            isolation,
            images: BTreeMap::from([(
                IMAGE.to_string(),
                ImageSource {
                    path: image,
                    git: false,
                    limits: LimitOverrides::default(),
                },
            )]),
            ..LocalConfig::default()
        };
        Fixture {
            dir,
            run_id: RunId::generate("test"),
            config,
        }
    }

    pub(crate) fn image_dir(&self) -> PathBuf {
        self.dir.path().join("image")
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub(crate) fn backend(&self) -> TestBackend {
        TestBackend {
            backend: LocalBackend::new("local", self.config.clone()).unwrap(),
            run_id: self.run_id.clone(),
        }
    }
}

/// A local backend and the run the test makes things for. Dereferences to
/// the backend; `warm` and `labels` fill in the run.
pub(crate) struct TestBackend {
    pub(crate) backend: LocalBackend,
    pub(crate) run_id: RunId,
}

impl std::ops::Deref for TestBackend {
    type Target = LocalBackend;

    fn deref(&self) -> &LocalBackend {
        &self.backend
    }
}

impl TestBackend {
    /// The labels of the test's run.
    pub(crate) fn labels(&self) -> Labels {
        self.run_id.labels()
    }

    pub(crate) async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
    ) -> Result<(), BackendError> {
        self.backend
            .warm(template, replicas, &template.run_id.labels())
            .await
    }
}

/// A fixture with namespaced sandboxes and its backend, or `None` (after
/// saying why) on a machine whose preflight finds that sandboxes cannot be
/// isolated (no user namespaces for this user).
pub(crate) async fn namespaced() -> Option<(Fixture, TestBackend)> {
    let fixture = Fixture::new(IsolationMode::Namespaces);
    let backend = fixture.backend();
    let found = backend.preflight().await;
    match found.failures.as_slice() {
        [] => Some((fixture, backend)),
        [failure] if failure.contains("cannot be isolated") && !rustix_is_root() => {
            eprintln!("SKIPPED: {failure}");
            None
        }
        failures => panic!("preflight failed: {failures:?}"),
    }
}

/// Whether the tests run as root, where isolation must always work.
fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
}

/// A template of [`IMAGE`] for `run_id`.
pub(crate) fn spec(run_id: &RunId, name: &str) -> TemplateSpec {
    TemplateSpec {
        name: name.to_string(),
        image: IMAGE.to_string(),
        cpu_milli: 1000,
        memory_mib: 512,
        disk_mib: 1024,
        network: false,
        env: BTreeMap::new(),
        labels: run_id.labels(),
    }
}

pub(crate) async fn template(backend: &TestBackend, name: &str) -> TemplateRef {
    template_for(backend, &backend.run_id, name).await
}

pub(crate) async fn template_for(
    backend: &LocalBackend,
    run_id: &RunId,
    name: &str,
) -> TemplateRef {
    backend.ensure_template(&spec(run_id, name)).await.unwrap()
}

/// Claims a sandbox of `template` for the template's run.
pub(crate) async fn claim(backend: &LocalBackend, template: &TemplateRef) -> SandboxHandle {
    backend
        .claim(
            template,
            &template.run_id.labels(),
            Instant::now() + PATIENCE,
        )
        .await
        .unwrap()
}

/// Waits until the pool of `template` has `ready` sandboxes (exactly: a
/// pool that overshot is a failure).
pub(crate) async fn wait_ready(backend: &LocalBackend, template: &TemplateRef, ready: u32) {
    let status = backend
        .wait_pool_ready(template, ready, Instant::now() + PATIENCE)
        .await
        .unwrap();
    assert_eq!(status.ready, ready, "{status:?}");
}

/// Host pids of processes whose argv[0] is the marker of a sandbox of
/// `run_id` (namespaced sandboxes' inits).
pub(crate) fn marked_inits(run_id: &RunId) -> Vec<i32> {
    let prefix = format!("sandfleet-sandbox:{run_id}:");
    pids()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(prefix.as_bytes()))
        })
        .collect()
}

/// The host pid of the init of sandbox `id`.
pub(crate) fn init_of(run_id: &RunId, id: &str) -> i32 {
    let marker = format!("sandfleet-sandbox:{run_id}:{id}\0");
    pids()
        .find(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(marker.as_bytes()))
        })
        .unwrap_or_else(|| panic!("no init for sandbox {id}"))
}

/// Host pids of every process (zombies included) in the pid namespace of
/// process `pid`; none when it is gone.
pub(crate) fn pid_namespace_members(pid: i32) -> Vec<i32> {
    // A process that is gone has no namespace, and no members.
    let Ok(namespace) = fs::read_link(format!("/proc/{pid}/ns/pid")) else {
        return Vec::new();
    };
    pids()
        .filter(|other| {
            fs::read_link(format!("/proc/{other}/ns/pid")).is_ok_and(|ns| ns == namespace)
        })
        .collect()
}

/// `/proc/<pid>/stat` of each of `pids`, for failure messages.
pub(crate) fn describe(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|pid| fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
        .collect()
}

/// Whether process `pid` is running (not gone, not a zombie).
pub(crate) fn is_running(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Processes carrying `SANDFLEET_SANDBOX=sandfleet-sandbox:<run_id>:…` in
/// their environment (plain sandboxes' commands).
pub(crate) fn marked_by_env(run_id: &RunId) -> Vec<i32> {
    let wanted = format!("SANDFLEET_SANDBOX=sandfleet-sandbox:{run_id}:");
    pids()
        .filter(|&pid| is_running(pid))
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|entry| entry.starts_with(wanted.as_bytes()))
            })
        })
        .collect()
}

fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
}

/// The directory template `name`'s sandboxes are made from, from its record.
pub(crate) fn template_image_dir(fixture: &Fixture, name: &str) -> PathBuf {
    let record = fixture
        .state_dir()
        .join("runs")
        .join(fixture.run_id.as_str())
        .join("templates")
        .join(format!("{name}.json"));
    let record: serde_json::Value = serde_json::from_slice(&fs::read(record).unwrap()).unwrap();
    PathBuf::from(record["image_dir"].as_str().unwrap())
}

/// Running processes of the fixture's run: sandbox inits (by their marker)
/// and sandbox supervisors (whose stderr is a log in the run's directory).
pub(crate) fn run_processes(fixture: &Fixture) -> Vec<i32> {
    let marker = format!("sandfleet-sandbox:{}:", fixture.run_id);
    let run_dir = fixture
        .state_dir()
        .canonicalize()
        .unwrap()
        .join("runs")
        .join(fixture.run_id.as_str());
    pids()
        .filter(|&pid| is_running(pid))
        .filter(|pid| {
            let marked = fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(marker.as_bytes()));
            let logs_into_run = fs::read_link(format!("/proc/{pid}/fd/2"))
                .is_ok_and(|target| target.starts_with(&run_dir));
            marked || logs_into_run
        })
        .collect()
}

/// Sandbox directories of the run.
pub(crate) fn sandbox_dirs(state: &Path, run_id: &RunId) -> Vec<String> {
    let dir = state.join("runs").join(run_id.as_str()).join("sandboxes");
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| Some(entry.ok()?.file_name().to_str()?.to_string()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Every file under `dir` with its contents, for before/after comparisons.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(relative, Vec::new());
                walk(&path, root, out);
            } else {
                out.insert(relative, fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}
