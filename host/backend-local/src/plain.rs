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
use crate::sandbox::{ImageRoot, Template};

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

    /// `env -i -C <workdir> VARS... ARGV...` for `request`, paths mapped,
    /// with `vars` (`PATH` first) then `HOME`, `TMPDIR`, `env` and the
    /// sandbox's `marker`, last so that no command environment can drop it.
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
        let mut command = Command::new("env");
        command
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .args(["-i", "-C"])
            .arg(self.map_arg(workdir))
            .args(vars.iter().map(|(name, value)| format!("{name}={value}")))
            .args(request.argv.iter().map(|arg| self.map_arg(arg)));
        Ok(command)
    }
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
}
