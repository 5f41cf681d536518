//! OCI images of real files for the tests, pushed to a real registry
//! (Debian's `docker-registry`) on loopback: the host's own programs, the
//! libraries they load and Python's standard library, copied into layers
//! at the paths they have on the host, with `/etc` and the quickstart's
//! `calc` tree as the workdir of the image's own.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use sandfleet_images::spec::Compression;
use sandfleet_registry_testing::host::{add_libraries, add_path, add_with_libraries};
use sandfleet_registry_testing::image::{Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use serde_json::json;

/// Programs the tests run inside sandboxes (the escape suite's tools).
const PROGRAMS: &[&str] = &[
    "sh",
    "dash",
    "bash",
    "cat",
    "cp",
    "chmod",
    "cut",
    "dirname",
    "basename",
    "echo",
    "env",
    "false",
    "grep",
    "head",
    "id",
    "kill",
    "ln",
    "ls",
    "mkdir",
    "mknod",
    "mount",
    "mv",
    "readlink",
    "rm",
    "rmdir",
    "sed",
    "seq",
    "setpriv",
    "setsid",
    "sleep",
    "stat",
    "tail",
    "tee",
    "test",
    "touch",
    "tr",
    "true",
    "umount",
    "unshare",
    "wc",
    "du",
    "fallocate",
    "find",
    "printf",
    "python3",
    "python3.11",
];

/// The `PATH` of the images.
pub(crate) const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A running registry holding an image.
pub(crate) struct Served {
    /// Keeps the registry running.
    pub(crate) registry: Registry,
    /// `127.0.0.1:<port>/<repo>:<tag>`.
    pub(crate) reference: String,
}

/// The layers every test image starts with: programs and their libraries,
/// then Python's standard library, then `/etc` and the workdir. Built once
/// per test process.
pub(crate) fn base_layers() -> &'static [Layer] {
    static LAYERS: OnceLock<Vec<Layer>> = OnceLock::new();
    LAYERS.get_or_init(|| {
        let mut seen = BTreeSet::new();
        let mut programs = Tar::new();
        // The merged-/usr links (`/bin` → `usr/bin`, …), as the host has
        // them.
        for top in ["/bin", "/sbin", "/lib", "/lib64"] {
            if Path::new(top).is_symlink() {
                programs = add_path(programs, Path::new(top), &mut seen);
            }
        }
        for program in PROGRAMS {
            let host = ["/usr/bin", "/usr/sbin", "/bin"]
                .iter()
                .map(|dir| Path::new(dir).join(program))
                .find(|path| path.exists())
                .unwrap_or_else(|| panic!("the host has no `{program}` to copy into the image"));
            programs = add_with_libraries(programs, &host, &mut seen);
        }
        let mut python = Tar::new();
        let stdlib = Path::new("/usr/lib/python3.11");
        for entry in walkdir::WalkDir::new(stdlib)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|entry| !skipped_stdlib(entry.path()))
        {
            let entry = entry.unwrap();
            python = add_path(python, entry.path(), &mut seen);
            if entry.path().extension().is_some_and(|ext| ext == "so") {
                python = add_libraries(python, entry.path(), &mut seen);
            }
        }
        let calc =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/images/calc");
        let mut own = Tar::new()
            .dir("etc", 0o755)
            .file(
                "etc/passwd",
                b"root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
            )
            .file("etc/group", b"root:x:0:\nagent:x:1000:\n")
            .dir("root", 0o700)
            .dir("home", 0o755)
            .dir("home/agent", 0o755)
            .dir("workspace", 0o755);
        for entry in walkdir::WalkDir::new(&calc)
            .min_depth(1)
            .sort_by_file_name()
        {
            let entry = entry.unwrap();
            let relative = entry.path().strip_prefix(&calc).unwrap();
            own = own.host_entry(&format!("workspace/{}", relative.display()), entry.path());
        }
        [programs, python, own]
            .into_iter()
            .map(|tar| Layer::new(tar.finish(), Compression::None))
            .collect()
    })
}

/// Test suites, caches and tools that no test runs.
fn skipped_stdlib(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    matches!(
        name,
        "__pycache__"
            | "test"
            | "idlelib"
            | "tkinter"
            | "lib2to3"
            | "ensurepip"
            | "turtledemo"
            | "site-packages"
            | "dist-packages"
    ) || name.starts_with("config-3")
}

/// Starts a registry and pushes an image of the base layers and `extra`
/// to it as `repo:1`, with `run` as its config.
pub(crate) async fn serve(repo: &str, extra: &[Layer], run: serde_json::Value) -> Served {
    let registry = Registry::start(Auth::None).await;
    let layers: Vec<Layer> = base_layers().iter().chain(extra).cloned().collect();
    let built = build_with(&layers, host_architecture(), None, run);
    push(&registry, repo, "1", &built).await;
    let reference = format!("{}/{repo}:1", registry.host);
    Served {
        registry,
        reference,
    }
}

/// The run config of the escape suite's image: the workdir is the
/// quickstart's `calc` tree, and commands run as root.
pub(crate) fn escape_config() -> serde_json::Value {
    json!({
        "Env": [format!("PATH={IMAGE_PATH}"), "IMAGE_VAR=from-image"],
        "WorkingDir": "/workspace",
    })
}

/// The image architecture of this machine, as registries name it.
fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
