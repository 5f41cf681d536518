//! The build steps of the layers that need more than a cache hit: the
//! base by `mmdebstrap`, the environment from wheels the host's pip
//! downloads, and the instance installed in a chroot of the two below it.

use std::path::Path;
use std::process::{Command, Stdio};

use super::commands::{chroot, contained, run, which};
use super::layer_tar::{Entry, snapshot, walk};
use super::{ACTIVATE_SHIM, ENV_DIR, Recipe};

impl Recipe {
    /// The base layer's root filesystem tar, by `mmdebstrap`.
    pub(super) fn debootstrap(&self, tar: &Path) -> Result<(), String> {
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
    pub(super) fn environment(&self, work: &Path, rootfs: &Path) -> Result<(), String> {
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
    pub(super) fn instance(&self, rootfs: &Path) -> Result<Vec<Entry>, String> {
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
