//! Building plugin projects by their READMEs, as a plugin author would:
//! `sandfleet plugin new`'s projects and the examples in `examples/plugins/`.
//! Shared by the end-to-end tests (`plugins_multilang`) and the language
//! benchmark (`host/cli/benches/plugin_languages.rs`).
//!
//! A README's "Build, check, test" section is a `sh` block; every line runs
//! as written, in the project, with this build's `sandfleet` first on
//! `PATH`, except the install lines (`pip install …`, `npm install`): those
//! install the pinned tools once into `<target>/plugin-tools/` (a cache
//! shared by runs, CI's included) instead of into each project. When a tool
//! cannot be installed because its registry is unreachable, building
//! returns `None` after saying so; any other failure panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `sandfleet` binary and the target directory the caches live in.
pub(crate) struct Builder {
    pub(crate) sandfleet: PathBuf,
    pub(crate) target: PathBuf,
}

/// What the README's install lines provide, from the shared tool cache.
#[derive(Default)]
pub(crate) struct Tools {
    path: Vec<PathBuf>,
    env: Vec<(String, PathBuf)>,
}

/// Stdout and stderr together, for messages.
pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The shell commands of a README's "Build, check, test" section.
pub(crate) fn readme_steps(project: &Path) -> Vec<String> {
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    let section = readme
        .split("## Build, check, test")
        .nth(1)
        .unwrap_or_else(|| panic!("{}: no build section", project.display()));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(String::from)
        .collect()
}

fn is_install(step: &str) -> bool {
    step.starts_with("pip install ") || step == "npm install"
}

impl Builder {
    /// Where compiled plugins are cached for every `sandfleet` this module
    /// runs, so each component compiles once per cache, not per command.
    pub(crate) fn plugin_cache(&self) -> PathBuf {
        self.target.join("plugin-tools/sandfleet-cache")
    }

    /// `sandfleet` with `args` in `dir`, sharing the plugin cache.
    pub(crate) fn sandfleet(&self, args: &[&str], dir: &Path) -> Output {
        Command::new(&self.sandfleet)
            .args(args)
            .current_dir(dir)
            .env("SANDFLEET_LOG", "warn")
            .env("XDG_CACHE_HOME", self.plugin_cache())
            .output()
            .expect("run sandfleet")
    }

    /// `sandfleet plugin new WORLD NAME --lang LANG --dir PARENT/NAME`.
    /// A Rust project's `target/` links to a directory shared by runs, so
    /// the SDK's dependencies compile once; the README's paths still hold.
    pub(crate) fn new_project(
        &self,
        world: &str,
        name: &str,
        lang: &str,
        parent: &Path,
    ) -> PathBuf {
        let project = parent.join(name);
        let args = ["plugin", "new", world, name, "--lang", lang, "--dir"];
        let mut command: Vec<&str> = args.to_vec();
        command.push(project.to_str().unwrap());
        let output = self.sandfleet(&command, parent);
        assert!(output.status.success(), "{}", text(&output));
        if lang == "rust" {
            let shared = self.target.join("plugin-tools/rust-target");
            std::fs::create_dir_all(&shared).unwrap();
            std::os::unix::fs::symlink(&shared, project.join("target")).unwrap();
        }
        project
    }

    /// Installs what an install line asks for; `None` when its registry is
    /// unreachable.
    pub(crate) fn install(&self, tools: &mut Tools, line: &str, project: &Path) -> Option<()> {
        if let Some(spec) = line.strip_prefix("pip install ") {
            let spec = spec.trim();
            assert!(spec.contains("=="), "the README pins its tool: {line}");
            let dir = self.cached_install(
                &format!("python/{}", spec.replace("==", "-")),
                "bin/componentize-py",
                |partial| {
                    Command::new("python3")
                        .args(["-m", "pip", "install", "--quiet"])
                        .arg("--disable-pip-version-check")
                        .arg("--target")
                        .arg(partial)
                        .arg(spec)
                        .output()
                        .expect("run python3 -m pip")
                },
                || {
                    let scratch = tempfile::tempdir().unwrap();
                    Command::new("python3")
                        .args(["-m", "pip", "download", "--quiet", "--no-deps", "-d"])
                        .arg(scratch.path())
                        .arg(spec)
                        .output()
                        .is_ok_and(|o| o.status.success())
                },
            )?;
            tools.path.push(dir.join("bin"));
            tools.env.push(("PYTHONPATH".to_string(), dir));
            return Some(());
        }
        assert_eq!(
            line,
            "npm install",
            "{}: unknown install line",
            project.display()
        );
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(project.join("package.json")).unwrap()).unwrap();
        let wanted = manifest["devDependencies"]
            .as_object()
            .expect("devDependencies");
        let key: Vec<String> = wanted
            .iter()
            .map(|(name, version)| {
                format!("{}-{}", name.replace('/', "+"), version.as_str().unwrap())
            })
            .collect();
        let package = serde_json::json!({ "private": true, "devDependencies": wanted });
        let dir = self.cached_install(
            &format!("js/{}", key.join(",")),
            "node_modules/.bin/jco",
            |partial| {
                std::fs::write(partial.join("package.json"), package.to_string()).unwrap();
                Command::new("npm")
                    .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(partial)
                    .output()
                    .expect("run npm")
            },
            || {
                Command::new("npm")
                    .args(["view", "@bytecodealliance/jco", "version"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            },
        )?;
        std::os::unix::fs::symlink(dir.join("node_modules"), project.join("node_modules")).unwrap();
        Some(())
    }

    /// Installs with `install` (into a scratch directory, renamed into
    /// place) unless `<target>/plugin-tools/<key>/<ready>` exists.
    fn cached_install(
        &self,
        key: &str,
        ready: &str,
        install: impl FnOnce(&Path) -> Output,
        reachable: impl FnOnce() -> bool,
    ) -> Option<PathBuf> {
        let dir = self.target.join("plugin-tools").join(key);
        if dir.join(ready).exists() {
            return Some(dir);
        }
        let parent = dir.parent().unwrap();
        std::fs::create_dir_all(parent).unwrap();
        let partial = tempfile::tempdir_in(parent).unwrap();
        let output = install(partial.path());
        if !output.status.success() {
            if !reachable() {
                eprintln!(
                    "skipping: cannot install {key}, its registry is unreachable: {}",
                    text(&output)
                );
                return None;
            }
            panic!("installing {key} failed: {}", text(&output));
        }
        // Another test may have installed it meanwhile; either copy does,
        // and ours goes.
        let installed = partial.keep();
        if std::fs::rename(&installed, &dir).is_err() {
            std::fs::remove_dir_all(&installed).unwrap();
            assert!(
                dir.join(ready).exists(),
                "{}: {ready} missing",
                dir.display()
            );
        }
        Some(dir)
    }

    /// Runs one README step in `project`; panics when it fails.
    pub(crate) fn run_step(&self, step: &str, project: &Path, tools: &Tools) -> Output {
        let mut path = vec![self.sandfleet.parent().unwrap().to_path_buf()];
        path.extend(tools.path.iter().cloned());
        path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
        let output = Command::new("bash")
            .args(["-c", step])
            .current_dir(project)
            // A step runs in the shell of a user who follows the README:
            // the suite's own build settings (a target directory elsewhere,
            // CI's lint wrapper) would move or lint the project's build.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS")
            .env("PATH", std::env::join_paths(path).unwrap())
            .envs(tools.env.iter().map(|(k, v)| (k, v)))
            .env("SANDFLEET_LOG", "warn")
            .env("XDG_CACHE_HOME", self.plugin_cache())
            .output()
            .expect("run bash");
        assert!(
            output.status.success(),
            "{}: `{step}` failed: {}",
            project.display(),
            text(&output)
        );
        output
    }

    /// Runs the README's build, check and test steps in `project`; returns
    /// the tools and each step with its output, or `None` to skip.
    pub(crate) fn build_by_readme(&self, project: &Path) -> Option<(Tools, Vec<(String, Output)>)> {
        let mut tools = Tools::default();
        let mut outputs = Vec::new();
        for step in readme_steps(project) {
            if is_install(&step) {
                self.install(&mut tools, &step, project)?;
            } else {
                let output = self.run_step(&step, project, &tools);
                outputs.push((step, output));
            }
        }
        Some((tools, outputs))
    }
}

/// The output of the step starting with `command`, and its full line.
pub(crate) fn step<'a>(outputs: &'a [(String, Output)], command: &str) -> (&'a str, &'a Output) {
    outputs
        .iter()
        .find(|(line, _)| line.starts_with(command))
        .map(|(line, output)| (line.as_str(), output))
        .unwrap_or_else(|| panic!("no `{command}` step"))
}

/// A component the README's `sandfleet plugin check` step checked.
pub(crate) struct Checked {
    pub(crate) path: PathBuf,
    /// The sha256 the check printed.
    pub(crate) sha256: String,
}

/// The component the README's `sandfleet plugin check` step checked.
pub(crate) fn checked_component(project: &Path, outputs: &[(String, Output)]) -> Checked {
    let (line, output) = step(outputs, "sandfleet plugin check");
    let printed = String::from_utf8_lossy(&output.stdout);
    let sha256 = printed
        .lines()
        .find_map(|line| line.strip_prefix("sha256"))
        .map(|sha| sha.trim().to_string())
        .unwrap_or_else(|| panic!("the check printed no sha256: {printed}"));
    Checked {
        path: project.join(line.split_whitespace().nth(3).expect("a component path")),
        sha256,
    }
}
