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
//!
//! The layer cache is in `cache`, the steps in `steps`, the host programs
//! they run in `commands`, and the layers' tars in `layer_tar`.

mod cache;
mod commands;
mod layer_tar;
mod steps;

use std::fs::File;
use std::path::{Path, PathBuf};

use sandfleet_images::Digest;
use serde_json::json;

use crate::image::{Built, Layer, build_with};

use cache::{BLOB, cached_layer, key, remove_abandoned, store};
use commands::{is_root, untar};
use layer_tar::{Entry, walk, write_tar};

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

fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
