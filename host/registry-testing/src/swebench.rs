//! A SWE-bench instance image built without Docker, in the harness's three
//! layers, from Debian packages and PyPI wheels: the recipe the end-to-end
//! test of a real instance pushes to its loopback registry under the
//! official name, so that a run resolves that name exactly as it would on
//! Docker Hub.
//!
//! The harness builds `sweb.base.*` (an OS with conda), `sweb.env.*` (a
//! conda environment `testbed` with the repository version's pinned
//! packages) and `sweb.eval.*` (the repository at the instance's base
//! commit in `/testbed`, installed into that environment). This recipe
//! makes the same three layers:
//!
//! 1. **base**: `mmdebstrap --variant=minbase --include=python3,python3-venv,git,patch
//!    bookworm`, Debian 12's Python 3.11 and the tools the eval script
//!    runs (`git apply`, the harness's `patch` fallback), as one layer;
//! 2. **environment**: `/opt/miniconda3/envs/testbed`, a venv of that
//!    Python with the pinned packages and the build tooling an offline
//!    `pip install -e .` needs (pip, setuptools, wheel, setuptools_scm),
//!    installed with `--no-index` from wheels the host's pip downloaded
//!    (`pip download --only-binary=:all:`; pip in the image cannot reach the
//!    index with the image's certificates); and `/opt/miniconda3/bin/activate`,
//!    a shim that, sourced, defines `conda activate NAME` (the venv
//!    `/opt/miniconda3/envs/NAME`) and `conda deactivate`;
//! 3. **instance**: `/testbed`, the repository at its base commit, installed
//!    editable (`python -m pip install -e .`, the spec's install command),
//!    with what the install changed in the environment.
//!
//! The image's config makes the eval script's `python -m pip install -e .`
//! work with the network off: `PIP_NO_INDEX=1`, `PIP_NO_BUILD_ISOLATION=0`
//! (which turns build isolation *off*: the build uses the environment's
//! setuptools and setuptools_scm) and the instance's own variables (pytest's
//! shallow clone has no tags, so `SETUPTOOLS_SCM_PRETEND_VERSION`).
//!
//! The second and third steps run in the unpacked image through `chroot`,
//! so building needs root (CI runs as root); pulling and running the
//! image does not.
//!
//! **Cache.** Each layer is cached under a directory named by a hash of
//! everything that went into it and into the layers below (this recipe's
//! version, the Debian suite and packages, the wheels' pins, the shim, the
//! repository's bytes and commit), so a run pays for `mmdebstrap` and pip
//! once, and a change to the instance rebuilds only the instance layer. A
//! layer is written into a temporary directory and renamed into place when
//! complete; a killed build leaves only temporary directories, which never
//! count as a cached layer and which the next build removes (mmdebstrap and
//! the chroot steps run in namespaces of their own and die with the build,
//! so nothing else is left: no process, no mount).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandfleet_images::Digest;
use sandfleet_images::spec;
use serde_json::json;

use crate::image::{Built, Layer, build_with};

/// Bumped whenever the steps below change what a layer holds, so that no
/// layer an older recipe cached is taken for a new one.
pub const RECIPE_VERSION: &str = "sandfleet-swebench-recipe/1";

/// The `activate` shim: sourced, it defines `conda activate NAME`, which
/// activates the venv `/opt/miniconda3/envs/NAME`, as the harness's
/// `source /opt/miniconda3/bin/activate; conda activate testbed` expects.
pub const ACTIVATE_SHIM: &str = r#"# /opt/miniconda3/bin/activate: not conda, a shim for the SWE-bench eval
# scripts (`source /opt/miniconda3/bin/activate; conda activate testbed`).
# Sourced, it defines `conda activate NAME`, which activates the venv
# /opt/miniconda3/envs/NAME, and `conda deactivate`.
conda() {
    case "${1:-}" in
        activate)
            if [ ! -f "/opt/miniconda3/envs/${2:-base}/bin/activate" ]; then
                echo "conda: no environment ${2:-base} in /opt/miniconda3/envs" >&2
                return 1
            fi
            . "/opt/miniconda3/envs/${2:-base}/bin/activate"
            ;;
        deactivate)
            if command -v deactivate >/dev/null 2>&1; then deactivate; fi
            ;;
        *)
            echo "conda: this image's shim knows only 'conda activate NAME' and 'conda deactivate'" >&2
            return 1
            ;;
    esac
}
"#;

/// Where the environment lives, as in every SWE-bench image.
const ENV_DIR: &str = "/opt/miniconda3/envs/testbed";

/// `PATH` of the image and of every build step.
const PATH: &str =
    "/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything that goes into one instance's image.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The instance, e.g. `pytest-dev__pytest-11143`.
    pub instance_id: String,
    /// The commit `/testbed` is checked out at.
    pub base_commit: String,
    /// A `.tar.gz` of the repository's `.git` directory holding
    /// `base_commit` (unpacked into `/testbed`).
    pub repo_git: PathBuf,
    /// The Debian suite of the base layer.
    pub suite: String,
    /// The Debian mirror, when not mmdebstrap's default.
    pub mirror: Option<String>,
    /// Debian packages of the base layer besides `--variant=minbase`.
    pub debs: Vec<String>,
    /// The Python version the wheels are downloaded for (the suite's).
    pub python: String,
    /// Build tooling installed into the environment (pinned).
    pub tooling: Vec<String>,
    /// The repository version's pinned packages (the harness's `pip_packages`).
    pub pins: Vec<String>,
    /// Variables of the image's config for this instance, set during the
    /// install too.
    pub env: Vec<(String, String)>,
}

impl Recipe {
    /// `pytest-dev__pytest-11143` from `data` (the shared SWE-bench data:
    /// its row in `instances-sample.jsonl`, its repository in `repos/`),
    /// with the harness's pins for pytest 8.0.
    ///
    /// # Errors
    ///
    /// One line, when the data is missing or the row lacks its base commit.
    pub fn pytest_11143(data: &Path) -> Result<Recipe, String> {
        let id = "pytest-dev__pytest-11143";
        let row = instance_row(&data.join("instances-sample.jsonl"), id)?;
        let base_commit = row["base_commit"]
            .as_str()
            .ok_or_else(|| format!("the row of {id} has no base_commit"))?
            .to_string();
        let repo_git = data.join(format!("repos/{id}.git.tar.gz"));
        if !repo_git.is_file() {
            return Err(format!(
                "{} is missing: the repository of {id} at its base commit",
                repo_git.display()
            ));
        }
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Ok(Recipe {
            instance_id: id.to_string(),
            base_commit,
            repo_git,
            suite: "bookworm".into(),
            mirror: None,
            debs: strings(&["python3", "python3-venv", "git", "patch"]),
            python: "3.11".into(),
            tooling: strings(&[
                "pip==24.0",
                "setuptools==69.5.1",
                "wheel==0.43.0",
                "setuptools_scm==8.1.0",
            ]),
            pins: strings(&["iniconfig==2.0.0", "packaging==23.1", "pluggy==1.3.0"]),
            env: vec![("SETUPTOOLS_SCM_PRETEND_VERSION".into(), "8.0.0.dev0".into())],
        })
    }

    /// The image config's `config` object: offline pip, the instance's
    /// variables, `/testbed` as the working directory.
    pub fn run_config(&self) -> serde_json::Value {
        let mut env = vec![
            format!("PATH={PATH}"),
            "LANG=C.UTF-8".to_string(),
            "PIP_NO_INDEX=1".to_string(),
            "PIP_NO_BUILD_ISOLATION=0".to_string(),
            "PIP_DISABLE_PIP_VERSION_CHECK=1".to_string(),
        ];
        env.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        json!({"Env": env, "WorkingDir": "/testbed", "Cmd": ["/bin/bash"]})
    }

    fn keys(&self) -> Result<[String; 3], String> {
        let mut base = vec![
            RECIPE_VERSION.to_string(),
            "base".into(),
            self.suite.clone(),
        ];
        base.push(self.mirror.clone().unwrap_or_default());
        base.extend(self.debs.iter().cloned());
        let base = key(&base);
        let mut env = vec![base.clone(), "environment".into(), self.python.clone()];
        env.extend(self.tooling.iter().cloned());
        env.push("--".into());
        env.extend(self.pins.iter().cloned());
        env.push(ACTIVATE_SHIM.into());
        let env = key(&env);
        let repo = std::fs::read(&self.repo_git)
            .map_err(|e| format!("cannot read {}: {e}", self.repo_git.display()))?;
        let mut instance = vec![
            env.clone(),
            "instance".into(),
            self.instance_id.clone(),
            self.base_commit.clone(),
            Digest::of(&repo).to_string(),
        ];
        instance.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        Ok([base, env, key(&instance)])
    }

    /// The image: its three layers from `cache` where built before, else
    /// built (and cached). Progress goes to stderr.
    ///
    /// # Errors
    ///
    /// One line saying which step failed and what is missing (`mmdebstrap`,
    /// the host's pip, root, the Debian mirror or PyPI).
    pub fn build(&self, cache: &Path) -> Result<Built, String> {
        std::fs::create_dir_all(cache)
            .map_err(|e| format!("cannot create the recipe cache {}: {e}", cache.display()))?;
        // One build at a time per cache, across threads and processes (the
        // tests of several backends start together): the others wait, then
        // find the layers cached. The lock goes with its holder, killed too.
        let lock_path = cache.join(".lock");
        let lock = File::create(&lock_path)
            .and_then(|file| file.lock().map(|()| file))
            .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        remove_abandoned(cache);
        let [base_key, env_key, instance_key] = self.keys()?;
        let dirs = [
            cache.join(format!("base-{base_key}")),
            cache.join(format!("environment-{env_key}")),
            cache.join(format!("instance-{instance_key}")),
        ];
        let cached: Vec<Option<Layer>> = dirs.iter().map(|dir| cached_layer(dir)).collect();
        if let [Some(base), Some(env), Some(instance)] = &cached[..] {
            eprintln!("swebench recipe: {} from the cache", self.instance_id);
            return Ok(self.image(vec![base.clone(), env.clone(), instance.clone()]));
        }
        if !is_root() {
            return Err(format!(
                "building the SWE-bench image of {} needs root (its steps run in a chroot); \
                 run as root, as .ci/run does, or build it once as root into {}",
                self.instance_id,
                cache.display()
            ));
        }
        let work = tempfile::Builder::new()
            .prefix(&format!(".work-{}-", std::process::id()))
            .tempdir_in(cache)
            .map_err(|e| format!("cannot make a work directory in {}: {e}", cache.display()))?;
        let rootfs = work.path().join("rootfs");
        std::fs::create_dir(&rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))?;

        let base = match &cached[0] {
            Some(layer) => layer.clone(),
            None => {
                let tar = work.path().join("base.tar");
                self.debootstrap(&tar)?;
                store(cache, &dirs[0], &tar)?
            }
        };
        untar(&dirs[0].join(BLOB), &rootfs)?;

        let env = match &cached[1] {
            Some(layer) => {
                untar(&dirs[1].join(BLOB), &rootfs)?;
                layer.clone()
            }
            None => {
                self.environment(work.path(), &rootfs)?;
                let tar = work.path().join("environment.tar");
                let mut entries = vec![Entry::Path("opt".into())];
                entries.extend(
                    walk(&rootfs, Path::new("opt"))?
                        .into_iter()
                        .map(Entry::Path),
                );
                write_tar(&rootfs, &entries, &tar)?;
                store(cache, &dirs[1], &tar)?
            }
        };

        let instance = match &cached[2] {
            Some(layer) => layer.clone(),
            None => {
                let entries = self.instance(&rootfs)?;
                let tar = work.path().join("instance.tar");
                write_tar(&rootfs, &entries, &tar)?;
                store(cache, &dirs[2], &tar)?
            }
        };
        drop(work);
        drop(lock);
        Ok(self.image(vec![base, env, instance]))
    }

    fn image(&self, layers: Vec<Layer>) -> Built {
        build_with(&layers, host_architecture(), None, self.run_config())
    }

    /// The base layer's root filesystem tar, by `mmdebstrap`.
    fn debootstrap(&self, tar: &Path) -> Result<(), String> {
        if !Path::new("/usr/bin/mmdebstrap").exists() {
            return Err(
                "mmdebstrap is missing: apt-get install mmdebstrap (.ci/run does); \
                 it builds the base layer of the SWE-bench image"
                    .into(),
            );
        }
        eprintln!(
            "swebench recipe: mmdebstrap --variant=minbase {} (the base layer; needs the Debian mirror)",
            self.suite
        );
        let mut command = contained("/usr/bin/mmdebstrap");
        command
            .env("TMPDIR", tar.parent().unwrap())
            .arg("--variant=minbase")
            .arg(format!("--include={}", self.debs.join(",")))
            .arg("--format=tar")
            .arg(&self.suite)
            .arg(tar);
        if let Some(mirror) = &self.mirror {
            command.arg(mirror);
        }
        run(&mut command, "mmdebstrap (is the Debian mirror reachable?)")
    }

    /// The environment: a venv with the pins and the tooling, from wheels
    /// the host's pip downloads; the activate shim.
    fn environment(&self, work: &Path, rootfs: &Path) -> Result<(), String> {
        let python = which("python3").ok_or(
            "python3 is missing on the host: apt-get install python3-pip (its pip downloads \
             the wheels of the SWE-bench image's environment)",
        )?;
        let has_pip = Command::new(&python)
            .args(["-m", "pip", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_pip {
            return Err(
                "the host's pip is missing: apt-get install python3-pip (.ci/run does); it \
                 downloads the wheels of the SWE-bench image's environment"
                    .into(),
            );
        }
        let wheels = rootfs.join("tmp/wheels");
        std::fs::create_dir_all(&wheels).map_err(|e| format!("{}: {e}", wheels.display()))?;
        eprintln!(
            "swebench recipe: pip download {} {} (needs PyPI)",
            self.tooling.join(" "),
            self.pins.join(" ")
        );
        run(
            Command::new(&python)
                .args(["-m", "pip", "download", "--disable-pip-version-check"])
                .args(["--only-binary=:all:", "--no-deps", "--python-version"])
                .arg(&self.python)
                .arg("--dest")
                .arg(&wheels)
                .args(&self.tooling)
                .args(&self.pins)
                .env("PIP_CACHE_DIR", work.join("pip-cache")),
            "pip download (is PyPI reachable?)",
        )?;
        eprintln!("swebench recipe: the environment {ENV_DIR} (offline, in a chroot)");
        let packages: Vec<&str> = self
            .tooling
            .iter()
            .chain(&self.pins)
            .map(String::as_str)
            .collect();
        chroot(
            rootfs,
            &[],
            &format!(
                "set -eu\npython3 -m venv {ENV_DIR}\n\
                 {ENV_DIR}/bin/python -m pip install --no-index --find-links /tmp/wheels {}\n\
                 rm -rf /tmp/wheels\n",
                packages.join(" ")
            ),
            "creating the environment",
        )?;
        let shim = rootfs.join("opt/miniconda3/bin/activate");
        std::fs::create_dir_all(shim.parent().unwrap())
            .and_then(|()| std::fs::write(&shim, ACTIVATE_SHIM))
            .map_err(|e| format!("{}: {e}", shim.display()))
    }

    /// `/testbed` at the base commit, installed editable; returns the
    /// layer's entries: `/testbed` and what the install changed in `/opt`.
    fn instance(&self, rootfs: &Path) -> Result<Vec<Entry>, String> {
        eprintln!(
            "swebench recipe: /testbed at {} of {}, installed editable",
            &self.base_commit[..12.min(self.base_commit.len())],
            self.instance_id
        );
        let testbed = rootfs.join("testbed");
        std::fs::create_dir(&testbed).map_err(|e| format!("{}: {e}", testbed.display()))?;
        run(
            Command::new("tar")
                .arg("-xzf")
                .arg(&self.repo_git)
                .arg("-C")
                .arg(&testbed),
            "unpacking the repository",
        )?;
        let before = snapshot(rootfs, Path::new("opt"))?;
        chroot(
            rootfs,
            &self.env,
            &format!(
                "set -eu\ncd /testbed\ngit reset --quiet --hard {commit}\n\
                 test \"$(git rev-parse HEAD)\" = {commit}\n\
                 source /opt/miniconda3/bin/activate\nconda activate testbed\n\
                 python -m pip install -e .\n",
                commit = self.base_commit
            ),
            "installing the repository (python -m pip install -e .)",
        )?;
        let after = snapshot(rootfs, Path::new("opt"))?;
        let mut entries = vec![Entry::Path("testbed".into())];
        entries.extend(
            walk(rootfs, Path::new("testbed"))?
                .into_iter()
                .map(Entry::Path),
        );
        for (path, now) in &after {
            if before.get(path) != Some(now) {
                entries.push(Entry::Path(path.clone()));
            }
        }
        for path in before.keys() {
            let parent_gone = path.parent().is_some_and(|p| !after.contains_key(p));
            if !after.contains_key(path) && !parent_gone {
                let name = path.file_name().unwrap().to_string_lossy();
                entries.push(Entry::Whiteout(
                    path.parent().unwrap().join(format!(".wh.{name}")),
                ));
            }
        }
        Ok(entries)
    }
}

/// The default cache of built layers: `$SANDFLEET_RECIPE_CACHE`, else
/// `sandfleet-recipes/swebench` in the target directory
/// (`$CARGO_TARGET_DIR`, else the workspace's `target/`).
pub fn default_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDFLEET_RECIPE_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("sandfleet-recipes/swebench")
}

/// The row of `id` in a JSONL dataset.
fn instance_row(path: &Path, id: &str) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|row| row["instance_id"] == id)
        .ok_or_else(|| format!("{} has no row for {id}", path.display()))
}

/// The name of a cached layer's blob in its directory.
const BLOB: &str = "layer.tar.gz";
/// The name of a cached layer's digests in its directory.
const META: &str = "layer.json";

/// A hex digest naming the inputs.
fn key(parts: &[String]) -> String {
    let joined = parts.join("\n\u{0}");
    Digest::of(joined.as_bytes()).hex()[..24].to_string()
}

/// A layer cached in `dir`, when it is there and whole.
fn cached_layer(dir: &Path) -> Option<Layer> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(META)).ok()?).ok()?;
    let blob = std::fs::read(dir.join(BLOB)).ok()?;
    let digest = Digest::of(&blob);
    if meta["digest"].as_str() != Some(digest.to_string().as_str()) {
        eprintln!(
            "swebench recipe: {} does not match its digest; building it again",
            dir.display()
        );
        let _ = std::fs::remove_dir_all(dir);
        return None;
    }
    Some(Layer {
        blob,
        digest,
        diff_id: meta["diff_id"].as_str()?.parse().ok()?,
        media_type: spec::OCI_LAYER_GZIP,
    })
}

/// Compresses `tar` into a new cache directory, renamed to `dir` when
/// complete; returns the layer.
fn store(cache: &Path, dir: &Path, tar: &Path) -> Result<Layer, String> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".tmp-{}-", std::process::id()))
        .tempdir_in(cache)
        .map_err(|e| format!("cannot make a directory in {}: {e}", cache.display()))?;
    let tar_bytes = std::fs::read(tar).map_err(|e| format!("{}: {e}", tar.display()))?;
    let diff_id = Digest::of(&tar_bytes);
    drop(tar_bytes);
    let blob_path = tmp.path().join(BLOB);
    let out = File::create(&blob_path).map_err(|e| format!("{}: {e}", blob_path.display()))?;
    run(
        Command::new("gzip")
            .args(["-n", "-1", "-c"])
            .arg(tar)
            .stdout(out),
        "gzip",
    )?;
    let blob = std::fs::read(&blob_path).map_err(|e| format!("{}: {e}", blob_path.display()))?;
    let digest = Digest::of(&blob);
    let meta = json!({"digest": digest, "diff_id": diff_id, "recipe": RECIPE_VERSION});
    let write = |path: PathBuf, bytes: &[u8]| -> std::io::Result<()> {
        let mut file = File::create(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write(tmp.path().join(META), meta.to_string().as_bytes())
        .and_then(|()| File::open(&blob_path)?.sync_all())
        .map_err(|e| format!("writing the cache in {}: {e}", tmp.path().display()))?;
    let tmp = tmp.keep();
    if let Err(error) = std::fs::rename(&tmp, dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another build finished the same layer first: take that one.
        if cached_layer(dir).is_none() {
            return Err(format!(
                "cannot move a layer into {}: {error}",
                dir.display()
            ));
        }
    }
    eprintln!(
        "swebench recipe: cached {} ({:.1} MiB)",
        dir.display(),
        blob.len() as f64 / (1024.0 * 1024.0)
    );
    Ok(Layer {
        blob,
        digest,
        diff_id,
        media_type: spec::OCI_LAYER_GZIP,
    })
}

/// Removes the work and temporary directories of builds whose process is
/// gone (killed): they never count as cached layers.
fn remove_abandoned(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(".work-")
            .or_else(|| name.strip_prefix(".tmp-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Unpacks a layer blob into `rootfs`, owners kept.
fn untar(blob: &Path, rootfs: &Path) -> Result<(), String> {
    run(
        Command::new("tar")
            .args(["--numeric-owner", "-xpzf"])
            .arg(blob)
            .arg("-C")
            .arg(rootfs),
        "unpacking a layer",
    )
}

/// Runs `script` with bash in `rootfs` through `chroot`, with a clean
/// environment (`PATH`, `HOME`, `LANG`, pip offline, and `env`).
fn chroot(rootfs: &Path, env: &[(String, String)], script: &str, what: &str) -> Result<(), String> {
    let mut command = contained("/usr/sbin/chroot");
    command.arg(rootfs).args([
        "/usr/bin/env",
        "-i",
        &format!("PATH={PATH}"),
        "HOME=/root",
        "LANG=C.UTF-8",
        "PIP_NO_INDEX=1",
        "PIP_NO_CACHE_DIR=1",
        "PIP_NO_BUILD_ISOLATION=0",
        "PIP_DISABLE_PIP_VERSION_CHECK=1",
    ]);
    command.args(env.iter().map(|(k, v)| format!("{k}={v}")));
    command.args(["/bin/bash", "-c", script]);
    run(&mut command, what)
}

/// `program` in a mount and a pid namespace of its own, killed with
/// everything it started when the build is (`setpriv --pdeathsig`,
/// `unshare --kill-child`): a killed build leaves no process writing into
/// its work directory and none of mmdebstrap's mounts (`/proc`, `/sys`,
/// `/dev/pts` of its chroot) on the host.
fn contained(program: &str) -> Command {
    let mut command = Command::new("/usr/bin/setpriv");
    command.args([
        "--pdeathsig",
        "KILL",
        "/usr/bin/unshare",
        "--pid",
        "--kill-child",
    ]);
    command.args(["--mount", "--propagation", "private", "--", program]);
    command
}

/// Runs `command`; an error names `what`, the exit status and the first
/// error line the command printed (else its last line).
fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", command.get_program()))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The first error apt, mmdebstrap or pip reports says what failed (a
    // mirror that cannot be reached); the last line says that it did.
    let lines = || stderr.lines().chain(stdout.lines());
    let said = lines()
        .find(|l| l.starts_with("E: ") || l.starts_with("ERROR: "))
        .or_else(|| lines().rfind(|l| !l.trim().is_empty()))
        .unwrap_or("(no output)")
        .trim();
    Err(format!("{what} failed ({}): {said}", output.status))
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// What a layer's tar holds: a path of the root filesystem, or a whiteout.
enum Entry {
    Path(PathBuf),
    Whiteout(PathBuf),
}

/// Every path beneath `top` (relative to `root`, not following links),
/// sorted, parents first.
fn walk(root: &Path, top: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let full = root.join(&dir);
        let mut names: Vec<_> = std::fs::read_dir(&full)
            .map_err(|e| format!("{}: {e}", full.display()))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let meta = std::fs::symlink_metadata(root.join(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.is_dir() {
                subdirs.push(path.clone());
            }
            out.push(path);
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

/// What decides whether a path changed: type, mode, owners, size, mtime.
type Stat = (u32, u32, u32, u64, i64, i64);

fn snapshot(root: &Path, top: &Path) -> Result<BTreeMap<PathBuf, Stat>, String> {
    walk(root, top)?
        .into_iter()
        .map(|path| {
            let meta = std::fs::symlink_metadata(root.join(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let stat = (
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
            );
            Ok((path, stat))
        })
        .collect()
}

/// Writes `entries` of `root` into a tar at `out` (owners, modes and
/// times as they are; links not followed).
fn write_tar(root: &Path, entries: &[Entry], out: &Path) -> Result<(), String> {
    let file = File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut builder = tar::Builder::new(BufWriter::new(file));
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    for entry in entries {
        let result = match entry {
            Entry::Path(path) => builder.append_path_with_name(root.join(path), path),
            Entry::Whiteout(path) => {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o644);
                header.set_size(0);
                header.set_mtime(crate::image::MTIME);
                builder.append_data(&mut header, path, &[][..])
            }
        };
        result.map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    builder
        .into_inner()
        .and_then(|mut writer| writer.flush())
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
