//! The configuration of a local cluster: where its state lives, how its
//! sandboxes are isolated, and which images it knows.
//!
//! ```toml
//! state_dir = "/var/lib/sandfleet"   # default: $XDG_STATE_HOME/sandfleet
//! workdir = "/workspace"             # where the image appears in a sandbox
//! isolation = "auto"                 # or "namespaces", "none"
//! network = false                    # may templates ask for the host network?
//! max_sandboxes = 16                 # default: 4 per core
//!
//! [images]
//! django = { path = "images/django", git = true }
//! rootfs = "images/rootfs"           # short form: git = false
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

/// Top-level directories of a sandbox that come from the host or the
/// sandbox's private mounts; the workdir may not be inside one of them.
const RESERVED_DIRS: &[&str] = &[
    "/bin", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sbin",
    "/tmp", "/usr",
];

/// Sandboxes per core when `max_sandboxes` is not set. Sandboxes in agent
/// rollouts spend most of their time waiting for the model, so the machine
/// holds several per core.
const DEFAULT_SANDBOXES_PER_CORE: u32 = 4;

/// One local cluster's configuration (`[clusters.local]` in a fleet file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalConfig {
    /// Where runs, sandboxes and the image cache live. Default:
    /// `$XDG_STATE_HOME/sandfleet`, else `~/.local/state/sandfleet`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The absolute path, inside a sandbox, where its image appears and
    /// commands start.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// How sandboxes are isolated from the host and from each other.
    #[serde(default)]
    pub isolation: IsolationMode,
    /// Whether templates may ask for the host's network. Sandboxes get it
    /// only when this is true and their template asks.
    #[serde(default)]
    pub network: bool,
    /// Sandboxes that may exist at once, warm or claimed. Default: 4 per
    /// core.
    #[serde(default)]
    pub max_sandboxes: Option<u32>,
    /// Image names and the directories they come from.
    #[serde(default)]
    pub images: BTreeMap<String, ImageSource>,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            state_dir: None,
            workdir: default_workdir(),
            isolation: IsolationMode::default(),
            network: false,
            max_sandboxes: None,
            images: BTreeMap::new(),
        }
    }
}

fn default_workdir() -> String {
    "/workspace".to_string()
}

/// How sandboxes are isolated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// Linux namespaces where this machine allows them (probed once at
    /// startup), else plain directories with a warning.
    #[default]
    Auto,
    /// Linux namespaces, or the backend refuses to start.
    Namespaces,
    /// Plain directories and processes: no isolation at all. Sandbox paths
    /// (the workdir, `/tmp`) are mapped into the sandbox's directory as a
    /// best effort.
    None,
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSource {
    /// A source tree or root filesystem.
    pub path: PathBuf,
    /// Snapshot the tree into a git repository with one commit, so tasks and
    /// reset checks can use git in the workdir.
    pub git: bool,
}

impl<'de> Deserialize<'de> for ImageSource {
    /// Accepts `"path"` or `{ path = "...", git = true }`, with the table's
    /// own errors (unknown keys, missing `path`) kept intact.
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: PathBuf,
            #[serde(default)]
            git: bool,
        }

        struct SourceVisitor;

        impl<'de> Visitor<'de> for SourceVisitor {
            type Value = ImageSource;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a directory path or a table { path = \"...\", git = true }")
            }

            fn visit_str<E: de::Error>(self, path: &str) -> Result<ImageSource, E> {
                Ok(ImageSource {
                    path: PathBuf::from(path),
                    git: false,
                })
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<ImageSource, M::Error> {
                let table = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ImageSource {
                    path: table.path,
                    git: table.git,
                })
            }
        }

        deserializer.deserialize_any(SourceVisitor)
    }
}

impl LocalConfig {
    /// Resolves a relative `state_dir` and relative image paths against
    /// `base`, the directory of the config file they were written in.
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(state_dir) = &mut self.state_dir {
            *state_dir = base.join(&*state_dir);
        }
        for source in self.images.values_mut() {
            source.path = base.join(&source.path);
        }
    }

    /// The state directory: `state_dir` when set, else the per-user default
    /// (`$XDG_STATE_HOME/sandfleet`, else `~/.local/state/sandfleet`).
    ///
    /// # Errors
    ///
    /// When no `state_dir` is set and neither variable is.
    pub fn state_dir(&self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.state_dir {
            return Ok(dir.clone());
        }
        let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            Some(xdg) => PathBuf::from(xdg),
            None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join(".local/state"),
                None => {
                    return Err(
                        "no state_dir configured and neither XDG_STATE_HOME nor HOME is set"
                            .to_string(),
                    );
                }
            },
        };
        Ok(base.join("sandfleet"))
    }

    /// `max_sandboxes`, or its default for a machine with `cores` cores.
    pub(crate) fn max_sandboxes(&self, cores: u32) -> u32 {
        self.max_sandboxes
            .unwrap_or(DEFAULT_SANDBOXES_PER_CORE * cores.max(1))
    }

    /// Checks what serde cannot: the workdir is a plain absolute path outside
    /// the host-provided directories, and every path is absolute (relative
    /// ones must have been resolved by [`LocalConfig::resolve_paths`]).
    pub(crate) fn validate(&self) -> Result<(), String> {
        let workdir = Path::new(&self.workdir);
        let plain = workdir
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !workdir.is_absolute()
            || !plain
            || workdir == Path::new("/")
            || self.workdir.ends_with('/')
        {
            return Err(format!(
                "workdir `{}` must be an absolute path like /workspace, without `.`, `..` or a trailing `/`",
                self.workdir
            ));
        }
        if let Some(reserved) = RESERVED_DIRS.iter().find(|dir| workdir.starts_with(dir)) {
            return Err(format!(
                "workdir `{}` is inside {reserved}, which sandboxes take from the host or mount privately",
                self.workdir
            ));
        }
        // The init script splices the workdir into mount options.
        if self.workdir.contains([',', ':', '\\']) {
            return Err(format!(
                "workdir `{}` may not contain `,`, `:` or `\\`",
                self.workdir
            ));
        }
        if self.max_sandboxes == Some(0) {
            return Err("max_sandboxes must be at least 1".to_string());
        }
        if let Some(dir) = self.state_dir.as_ref().filter(|dir| dir.is_relative()) {
            return Err(format!(
                "state_dir `{}` is relative; resolve it against the config file's directory",
                dir.display()
            ));
        }
        for (name, source) in &self.images {
            if name.is_empty() {
                return Err("an image has an empty name".to_string());
            }
            if source.path.is_relative() {
                return Err(format!(
                    "image `{name}`: path `{}` is relative; resolve it against the config file's directory",
                    source.path.display()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LocalConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn both_image_forms_parse_and_defaults_apply() {
        let config = parse(
            r#"
            isolation = "none"
            [images]
            django = { path = "images/django", git = true }
            rootfs = "images/rootfs"
            "#,
        )
        .unwrap();
        assert_eq!(config.isolation, IsolationMode::None);
        assert_eq!(config.workdir, "/workspace");
        assert!(!config.network);
        assert_eq!(
            config.images["django"],
            ImageSource {
                path: "images/django".into(),
                git: true
            }
        );
        assert_eq!(
            config.images["rootfs"],
            ImageSource {
                path: "images/rootfs".into(),
                git: false
            }
        );
        assert_eq!(config.max_sandboxes(2), 8);
    }

    #[test]
    fn unknown_keys_are_errors_at_both_levels() {
        let error = parse("netwrok = true").unwrap_err();
        assert!(error.contains("netwrok"), "{error}");
        let error = parse("[images]\nx = { path = \"a\", gti = true }").unwrap_err();
        assert!(error.contains("gti"), "{error}");
        let error = parse("isolation = \"docker\"").unwrap_err();
        assert!(error.contains("docker"), "{error}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_directory() {
        let mut config =
            parse("state_dir = \"state\"\n[images]\na = \"src/a\"\nb = \"/abs/b\"").unwrap();
        assert!(
            config
                .validate()
                .unwrap_err()
                .contains("state_dir `state` is relative")
        );
        config.resolve_paths(Path::new("/etc/fleet"));
        assert_eq!(
            config.state_dir.as_deref(),
            Some(Path::new("/etc/fleet/state"))
        );
        assert_eq!(config.images["a"].path, Path::new("/etc/fleet/src/a"));
        assert_eq!(config.images["b"].path, Path::new("/abs/b"));
        config.validate().unwrap();
    }

    #[test]
    fn workdirs_outside_the_host_directories_only() {
        for bad in [
            "workspace",
            "/",
            "/usr/src",
            "/tmp/w",
            "/a/../b",
            "/w/",
            "/a,b",
        ] {
            let config = LocalConfig {
                workdir: bad.to_string(),
                ..LocalConfig::default()
            };
            assert!(config.validate().is_err(), "{bad} was accepted");
        }
        for good in ["/workspace", "/testbed", "/home/agent/repo", "/usrx"] {
            let config = LocalConfig {
                workdir: good.to_string(),
                ..LocalConfig::default()
            };
            config.validate().unwrap();
        }
    }
}
