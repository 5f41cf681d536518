//! Plain sandboxes (`isolation = "none"`): directories, and commands run
//! unisolated on the host.
//!
//! `<sandbox>/rootfs/<workdir>` holds a copy of the image and
//! `<sandbox>/rootfs/tmp` stands for `/tmp`. Commands run on the host, in
//! their own process group, with `HOME` and `TMPDIR` inside that directory;
//! the working directory and every argv item that is the workdir or `/tmp`
//! or starts with `<one of them>/` are rewritten into it. That is a best
//! effort: paths inside scripts or other strings are not rewritten, and a
//! command can reach anything on the host. Their commands carry the
//! sandbox's marker in their environment, by which they are found to be
//! killed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sandfleet_core::ExecRequest;
use tokio::process::Command;

use crate::error::{IoContext, LocalError};
use crate::namespace::SANDBOX_PATH;
use crate::process::{MARKER_ENV, run_tool};
use crate::templates::{ImageRoot, Template};

/// Where a plain sandbox's paths are on the host.
#[derive(Debug)]
pub(crate) struct PathMap {
    /// The directory standing for the sandbox's `/`.
    rootfs: PathBuf,
    /// Sandbox paths that are mapped: the workdir and `/tmp`.
    mapped: [String; 2],
}

impl PathMap {
    fn new(rootfs: PathBuf, workdir: &str) -> Self {
        PathMap {
            rootfs,
            mapped: [workdir.to_string(), "/tmp".to_string()],
        }
    }

    /// The host path of sandbox directory `dir`.
    fn host_dir(&self, dir: &str) -> String {
        format!("{}{dir}", self.rootfs.display())
    }

    /// The host path of `path`, when it is a mapped directory or inside one.
    pub(crate) fn to_host(&self, path: &str) -> Option<String> {
        self.mapped
            .iter()
            .any(|prefix| {
                path.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .then(|| self.host_dir(path))
    }

    /// `arg` with a mapped path rewritten; anything else unchanged.
    fn map_arg(&self, arg: &str) -> String {
        self.to_host(arg).unwrap_or_else(|| arg.to_string())
    }

    /// `request` as `env -i -C <workdir> VARS... ARGV...` would run it,
    /// paths mapped, with `vars` (`PATH` first) then `HOME`, `TMPDIR`, `env`
    /// and the sandbox's `marker`, last so that no command environment can
    /// drop it. A program named by its absolute path or found on that `PATH`,
    /// in a workdir that exists, is started as it is, without `env` in front:
    /// a process less to load per command.
    pub(crate) fn command(
        &self,
        request: &ExecRequest,
        workdir: &str,
        mut vars: Vec<(String, String)>,
        env: impl Iterator<Item = (String, String)>,
        marker: &str,
    ) -> Result<Command, String> {
        let program = request.argv.first().map_or("", String::as_str);
        if program.contains('=') {
            // `env` would take it for a variable.
            return Err(format!("program `{program}` contains `=`"));
        }
        vars.push(("HOME".to_string(), self.host_dir("/root")));
        vars.push(("TMPDIR".to_string(), self.host_dir("/tmp")));
        vars.extend(env);
        vars.push((MARKER_ENV.to_string(), marker.to_string()));
        let workdir = self.map_arg(workdir);
        let args = request.argv.iter().skip(1).map(|arg| self.map_arg(arg));
        let path = vars.iter().rev().find(|(name, _)| name == "PATH");
        let (found, arg0) = if program.starts_with('/') {
            let mapped = self.map_arg(program);
            (runnable(PathBuf::from(&mapped)), mapped)
        } else {
            let found = path.and_then(|(_, path)| crate::namespace::executable_on(path, program));
            (found.and_then(runnable), program.to_string())
        };
        if let Some(found) = found
            && Path::new(&workdir).is_dir()
        {
            let mut command = Command::new(found);
            command
                .arg0(arg0)
                .args(args)
                .env_clear()
                .envs(vars.iter().map(|(name, value)| (name, value)))
                .current_dir(workdir);
            return Ok(command);
        }
        // By its path: a child whose `PATH` differs from ours is searched
        // for by std in a fork of this whole process (a copy of its page
        // tables, the largest cost of a command in a busy devcluster);
        // a program given by path is started by posix_spawn, which copies
        // nothing.
        static ENV: std::sync::LazyLock<PathBuf> = std::sync::LazyLock::new(|| {
            crate::namespace::sandbox_tool("env").unwrap_or_else(|| PathBuf::from("env"))
        });
        let mut command = Command::new(&*ENV);
        command
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .args(["-i", "-C"])
            .arg(workdir)
            .args(vars.iter().map(|(name, value)| format!("{name}={value}")))
            .arg(self.map_arg(program))
            .args(args);
        Ok(command)
    }
}

/// `found`, when it is an executable file the kernel runs itself (`#!` or
/// ELF): `env` handles the rest (a script without `#!` is run by `sh`, a
/// missing program is exit 127, a directory exit 126).
fn runnable(found: PathBuf) -> Option<PathBuf> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let meta = std::fs::metadata(&found).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return None;
    }
    let mut magic = [0u8; 4];
    // Non-blocking: a task that swaps the file for a FIFO after the check
    // must not hang this thread in `open`.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&found)
        .and_then(|mut file| file.read_exact(&mut magic))
        .ok()?;
    (magic.starts_with(b"#!") || magic == *b"\x7fELF").then_some(found)
}

/// Makes a plain sandbox of `template` in `dir`: the mapped directories,
/// and the image copied into the workdir.
pub(crate) async fn make(
    template: &Template,
    workdir: &str,
    dir: &Path,
    deadline: Instant,
) -> Result<PathMap, LocalError> {
    let paths = PathMap::new(dir.join("rootfs"), workdir);
    let host_workdir = PathBuf::from(paths.host_dir(workdir));
    for created in [
        host_workdir.as_path(),
        Path::new(&paths.host_dir("/tmp")),
        Path::new(&paths.host_dir("/root")),
    ] {
        std::fs::create_dir_all(created).context(|| format!("creating {}", created.display()))?;
    }
    let ImageRoot::Directory(image_dir) = &template.source else {
        return Err(LocalError::Rejected(format!(
            "image `{}`: OCI images need isolation = \"namespaces\"",
            template.image
        )));
    };
    let mut copy = Command::new("cp");
    copy.args(["-a", "--reflink=auto"])
        .arg(image_dir.join("."))
        .arg(&host_workdir);
    let budget = deadline.saturating_duration_since(Instant::now());
    let what = format!(
        "copying image `{}` into {}",
        template.image,
        host_workdir.display()
    );
    run_tool(copy, &what, budget).await?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_map_the_workdir_and_tmp_only() {
        let paths = PathMap::new(PathBuf::from("/s/sb-1/rootfs"), "/workspace");
        assert_eq!(paths.map_arg("/workspace"), "/s/sb-1/rootfs/workspace");
        assert_eq!(
            paths.map_arg("/workspace/a/b.py"),
            "/s/sb-1/rootfs/workspace/a/b.py"
        );
        assert_eq!(paths.map_arg("/tmp/x"), "/s/sb-1/rootfs/tmp/x");
        assert_eq!(paths.map_arg("/workspacex"), "/workspacex");
        assert_eq!(paths.map_arg("/etc/hosts"), "/etc/hosts");
        assert_eq!(paths.map_arg("-c"), "-c");
        assert_eq!(paths.map_arg("cat /workspace/a"), "cat /workspace/a");
        assert_eq!(paths.to_host("/usr/bin"), None);
    }

    #[test]
    fn only_programs_the_kernel_runs_from_absolute_path_entries_skip_env() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for (name, text) in [
            ("script", "#!/bin/sh\ntrue\n"),
            ("bare", "true\n"),
            ("unrunnable", "#!/bin/sh\n"),
        ] {
            std::fs::write(bin.join(name), text).unwrap();
            let mode = if name == "unrunnable" { 0o644 } else { 0o755 };
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(mode))
                .unwrap();
        }
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let runnable_on = |path: &str, program: &str| {
            crate::namespace::executable_on(path, program).and_then(runnable)
        };
        assert_eq!(runnable_on(&path, "script"), Some(bin.join("script")));
        // A script without `#!` is for `env` (execvp runs it with sh).
        assert_eq!(runnable_on(&path, "bare"), None);
        assert_eq!(runnable_on(&path, "unrunnable"), None);
        assert_eq!(runnable_on(&path, "no-such-program"), None);
        assert_eq!(runnable_on(&path, "./script"), None);
        assert!(runnable_on("/usr/bin:/bin", "true").is_some());
        // By its path too, and only what the kernel runs.
        assert_eq!(runnable(bin.join("script")), Some(bin.join("script")));
        assert_eq!(runnable(bin.join("unrunnable")), None);
        assert_eq!(runnable(bin), None);
        // A relative entry searched first would be the workdir's.
        assert_eq!(runnable_on(&format!(":{path}"), "script"), None);
    }
}
