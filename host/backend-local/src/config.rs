//! The configuration of a local cluster: where its state lives, how its
//! sandboxes are isolated, and which images it knows.
//!
//! ```toml
//! state_dir = "/var/lib/sandfleet"   # default: $XDG_STATE_HOME/sandfleet (as root: /var/lib/sandfleet)
//! workdir = "/workspace"             # where the image appears in a sandbox
//! isolation = "namespaces"           # or "none": no isolation at all
//! network = false                    # may templates ask for the host network?
//! max_sandboxes = 16                 # default: 4 per core
//! sandbox_uid_base = 1879048192      # as root: host uid/gid of the sandboxes' root (65536 ids)
//! cgroup_parent = "sandfleet"        # sandboxes' cgroups: <hierarchy>/<parent>/<run>/<sandbox>
//! etc = ["hosts.allow"]              # host /etc entries sandboxes see, beyond the defaults
//! hidden_paths = ["/home"]           # host paths sandboxes must not see (each sandbox is probed)
//! limits = { pids = 4096, root_mib = 64, shm_mib = 64 }
//!
//! [images]
//! django = { path = "images/django", git = true, pids = 8192 }   # per-image limits override
//! rootfs = "images/rootfs"           # short form: git = false
//! python = { oci = "python:3.11", pids = 8192 }                # an OCI image, pulled on first use
//!
//! [registries]
//! insecure = ["registry.lab:5000"]   # plain HTTP (loopback registries always may)
//! platform = "linux/arm64"           # from multi-platform images; default: the host's
//! ```
//!
//! Any other image name a template asks for is taken as an OCI reference
//! and pulled on first use (with namespaces; `isolation = "none"` runs
//! directory images only).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use sandfleet_images::Platform;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

/// Top-level directories of a sandbox that come from the host or the
/// sandbox's private mounts; the workdir may not be inside one of them.
const RESERVED_DIRS: &[&str] = &[
    "/bin", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sbin",
    "/tmp", "/usr",
];

/// Host directories sandboxes see (read-only); the state directory may not
/// be inside one.
const HOST_DIRS: &[&str] = &[
    "/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/sbin", "/usr",
];

/// The default `sandbox_uid_base`: `0x70000000`, far above the ids
/// distributions give users and the `/etc/subuid` ranges tools allocate.
pub(crate) const DEFAULT_UID_BASE: u32 = 0x7000_0000;

/// Ids a sandbox has when sandfleet runs as root.
pub(crate) const SANDBOX_IDS: u32 = 65536;

/// Entries of the host's `/etc` every sandbox sees, read-only: what
/// programs need to run (the loader's cache, users and groups, name
/// service, certificates, alternatives), and none of the host's secrets
/// (`shadow`, keys, credentials).
pub(crate) const DEFAULT_ETC: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "login.defs",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pip.conf",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "python3.11",
    "resolv.conf",
    "rpc",
    "services",
    "shells",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
];

/// Sandboxes per core when `max_sandboxes` is not set. Sandboxes in agent
/// rollouts spend most of their time waiting for the model, so the machine
/// holds several per core.
const DEFAULT_SANDBOXES_PER_CORE: u32 = 4;

/// One local cluster's configuration (`[clusters.local]` in a fleet file).
/// Every key may be left out; unknown keys are errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Where runs, sandboxes and the image cache live. Default:
    /// `$XDG_STATE_HOME/sandfleet`, else `~/.local/state/sandfleet`.
    pub state_dir: Option<PathBuf>,
    /// The absolute path, inside a sandbox, where its image appears and
    /// commands start.
    pub workdir: String,
    /// How sandboxes are isolated from the host and from each other.
    pub isolation: IsolationMode,
    /// Whether templates may ask for the host's network. Sandboxes get it
    /// only when this is true and their template asks.
    pub network: bool,
    /// Sandboxes that may exist at once, warm or claimed. Default: 4 per
    /// core.
    pub max_sandboxes: Option<u32>,
    /// When sandfleet runs as root, the host uid and gid of the sandboxes'
    /// root: sandbox ids 0–65535 are host ids from here, so no file a
    /// sandbox writes is the host root's. Run unprivileged, the sandbox's
    /// root is the calling user.
    pub sandbox_uid_base: u32,
    /// The cgroup (under each hierarchy) that sandboxes' cgroups are made
    /// in.
    pub cgroup_parent: String,
    /// Host `/etc` entries sandboxes see, besides the defaults (what
    /// programs need to run, and none of the host's secrets).
    pub etc: Vec<String>,
    /// Host paths no sandbox may see (credentials, other users' homes):
    /// the probe every sandbox passes before it is offered checks each, as
    /// it checks the state directory and the image's directory.
    pub hidden_paths: Vec<PathBuf>,
    /// Limits of every sandbox (the template's cpu, memory and disk come
    /// from the fleet file).
    pub limits: SandboxLimits,
    /// Image names and the directories they come from.
    pub images: BTreeMap<String, ImageSource>,
    /// Image names and the OCI references they stand for (`{ oci = "REF"
    /// }` entries of `[images]`).
    pub oci_images: BTreeMap<String, OciSource>,
    /// How OCI images are pulled (`[clusters.<name>.registries]`).
    pub registries: RegistrySettings,
    /// The most the snapshots this cluster holds may take on disk
    /// together (their own layers' file data), in MiB; a snapshot past it
    /// is refused (`Unavailable`, naming the budget). Default: no bound
    /// but the disk's.
    pub snapshot_budget_mib: Option<u64>,
}

/// How a local cluster reaches registries.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistrySettings {
    /// Registries (`host` or `host:port`) spoken to over plain HTTP;
    /// loopback ones always are.
    pub insecure: Vec<String>,
    /// The platform taken from a multi-platform image, `os/arch` or
    /// `os/arch/variant`. Default: the host's.
    #[serde(deserialize_with = "platform")]
    pub platform: Platform,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        RegistrySettings {
            insecure: Vec::new(),
            platform: Platform::host(),
        }
    }
}

fn platform<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<Platform, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse()
        .map_err(|e: String| de::Error::custom(format!("platform `{text}`: {e}")))
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            state_dir: None,
            workdir: default_workdir(),
            isolation: IsolationMode::default(),
            network: false,
            max_sandboxes: None,
            sandbox_uid_base: DEFAULT_UID_BASE,
            cgroup_parent: default_cgroup_parent(),
            etc: Vec::new(),
            hidden_paths: Vec::new(),
            limits: SandboxLimits::default(),
            images: BTreeMap::new(),
            oci_images: BTreeMap::new(),
            registries: RegistrySettings::default(),
            snapshot_budget_mib: None,
        }
    }
}

impl<'de> Deserialize<'de> for LocalConfig {
    /// Reads the table key by key onto the defaults, so `[images]` can hold
    /// directory and OCI entries side by side; each value keeps its own
    /// errors (and their positions).
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const FIELDS: &[&str] = &[
            "state_dir",
            "workdir",
            "isolation",
            "network",
            "max_sandboxes",
            "sandbox_uid_base",
            "cgroup_parent",
            "etc",
            "hidden_paths",
            "limits",
            "images",
            "registries",
            "snapshot_budget_mib",
        ];

        struct ConfigVisitor;

        impl<'de> Visitor<'de> for ConfigVisitor {
            type Value = LocalConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a local cluster's table")
            }

            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<LocalConfig, M::Error> {
                let mut config = LocalConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "state_dir" => config.state_dir = map.next_value()?,
                        "workdir" => config.workdir = map.next_value()?,
                        "isolation" => config.isolation = map.next_value()?,
                        "network" => config.network = map.next_value()?,
                        "max_sandboxes" => config.max_sandboxes = map.next_value()?,
                        "sandbox_uid_base" => config.sandbox_uid_base = map.next_value()?,
                        "cgroup_parent" => config.cgroup_parent = map.next_value()?,
                        "etc" => config.etc = map.next_value()?,
                        "hidden_paths" => config.hidden_paths = map.next_value()?,
                        "limits" => config.limits = map.next_value()?,
                        "registries" => config.registries = map.next_value()?,
                        "snapshot_budget_mib" => {
                            config.snapshot_budget_mib = map.next_value()?;
                        }
                        "images" => {
                            let entries: BTreeMap<String, ImageEntry> = map.next_value()?;
                            for (name, entry) in entries {
                                match entry {
                                    ImageEntry::Directory(source) => {
                                        config.images.insert(name, source);
                                    }
                                    ImageEntry::Oci(source) => {
                                        config.oci_images.insert(name, source);
                                    }
                                }
                            }
                        }
                        other => return Err(de::Error::unknown_field(other, FIELDS)),
                    }
                }
                Ok(config)
            }
        }

        deserializer.deserialize_struct("LocalConfig", FIELDS, ConfigVisitor)
    }
}

fn default_cgroup_parent() -> String {
    "sandfleet".to_string()
}

/// Limits every sandbox of a cluster has, unless its image overrides them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxLimits {
    /// Processes and threads (the cgroup's `pids.max`).
    pub pids: u32,
    /// Size of the sandbox's root filesystem (a tmpfs holding `/root`).
    pub root_mib: u32,
    /// Size of `/dev/shm`.
    pub shm_mib: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            pids: 4096,
            root_mib: 64,
            shm_mib: 64,
        }
    }
}

/// Per-image overrides of [`SandboxLimits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// Overrides [`SandboxLimits::pids`].
    pub pids: Option<u32>,
    /// Overrides [`SandboxLimits::root_mib`].
    pub root_mib: Option<u32>,
    /// Overrides [`SandboxLimits::shm_mib`].
    pub shm_mib: Option<u32>,
}

impl SandboxLimits {
    /// These limits with `overrides` applied.
    pub fn with(self, overrides: LimitOverrides) -> SandboxLimits {
        SandboxLimits {
            pids: overrides.pids.unwrap_or(self.pids),
            root_mib: overrides.root_mib.unwrap_or(self.root_mib),
            shm_mib: overrides.shm_mib.unwrap_or(self.shm_mib),
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
    /// Linux namespaces, cgroups, dropped capabilities and seccomp; every
    /// sandbox is probed before it is offered, and one that fails is never
    /// served. Where namespaces are not available, preflight fails and says
    /// why: there is no silent fallback.
    #[default]
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
    /// Limits of this image's sandboxes that differ from the cluster's.
    pub limits: LimitOverrides,
}

/// An OCI image a name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciSource {
    /// The reference, like `python:3.11` or `host:5000/repo@sha256:…`.
    pub reference: String,
    /// Limits of this image's sandboxes that differ from the cluster's.
    pub limits: LimitOverrides,
}

/// One entry of `[images]`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ImageEntry {
    Directory(ImageSource),
    Oci(OciSource),
}

impl<'de> Deserialize<'de> for ImageEntry {
    /// Accepts `"path"`, `{ path = "...", git = true }` or `{ oci = "REF"
    /// }`, with the table's own errors (unknown keys, a missing `path`)
    /// kept intact.
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: Option<PathBuf>,
            oci: Option<String>,
            git: Option<bool>,
            pids: Option<u32>,
            root_mib: Option<u32>,
            shm_mib: Option<u32>,
        }

        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = ImageEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a directory path, a table { path = \"...\", git = true } or a table { oci = \"REF\" }",
                )
            }

            fn visit_str<E: de::Error>(self, path: &str) -> Result<ImageEntry, E> {
                Ok(ImageEntry::Directory(ImageSource {
                    path: PathBuf::from(path),
                    git: false,
                    limits: LimitOverrides::default(),
                }))
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<ImageEntry, M::Error> {
                let table = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let limits = LimitOverrides {
                    pids: table.pids,
                    root_mib: table.root_mib,
                    shm_mib: table.shm_mib,
                };
                match (table.path, table.oci) {
                    (Some(path), None) => Ok(ImageEntry::Directory(ImageSource {
                        path,
                        git: table.git.unwrap_or(false),
                        limits,
                    })),
                    (None, Some(reference)) if table.git.is_none() => {
                        Ok(ImageEntry::Oci(OciSource { reference, limits }))
                    }
                    (None, Some(_)) => Err(de::Error::custom(
                        "`git` is for directory images; an `oci` image is used as it is",
                    )),
                    (Some(_), Some(_)) => Err(de::Error::custom(
                        "an image is either a directory (`path`) or an OCI reference (`oci`), not both",
                    )),
                    (None, None) => Err(de::Error::missing_field("path")),
                }
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

impl<'de> Deserialize<'de> for ImageSource {
    /// A directory entry of `[images]`; an `oci` one is refused here.
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match ImageEntry::deserialize(deserializer)? {
            ImageEntry::Directory(source) => Ok(source),
            ImageEntry::Oci(source) => Err(de::Error::custom(format!(
                "`{}` is an OCI image; a directory was expected here",
                source.reference
            ))),
        }
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

    /// The state directory: `state_dir` when set, else `/var/lib/sandfleet`
    /// for root that may write there (whose home sandboxes' root cannot
    /// enter) and the per-user
    /// default (`$XDG_STATE_HOME/sandfleet`, else
    /// `~/.local/state/sandfleet`) for everyone else.
    ///
    /// # Errors
    ///
    /// When no `state_dir` is set and neither variable is.
    pub fn state_dir(&self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.state_dir {
            return Ok(dir.clone());
        }
        // Root of a user namespace counts when the machine's state is its
        // own (a container's); an ordinary user's namespace of its
        // subordinate ids sees the host's `/var/lib` as nobody's.
        let system = rustix::fs::access("/var/lib", rustix::fs::Access::WRITE_OK).is_ok();
        if rustix::process::geteuid().is_root() && system {
            return Ok(PathBuf::from("/var/lib/sandfleet"));
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

    /// The `/etc` entries sandboxes see.
    pub(crate) fn etc_entries(&self) -> Vec<String> {
        let mut entries: Vec<String> = DEFAULT_ETC.iter().map(|e| e.to_string()).collect();
        entries.extend(self.etc.iter().cloned());
        entries.sort();
        entries.dedup();
        entries
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
        if self.max_sandboxes == Some(0) {
            return Err("max_sandboxes must be at least 1".to_string());
        }
        if let Some(dir) = self.state_dir.as_ref().filter(|dir| dir.is_relative()) {
            return Err(format!(
                "state_dir `{}` is relative; resolve it against the config file's directory",
                dir.display()
            ));
        }
        if let Some(dir) = &self.state_dir
            && let Some(host) = HOST_DIRS.iter().find(|host| dir.starts_with(host))
        {
            return Err(format!(
                "state_dir `{}` is inside {host}, which every sandbox sees",
                dir.display()
            ));
        }
        if self.sandbox_uid_base == 0
            || self
                .sandbox_uid_base
                .checked_add(SANDBOX_IDS)
                .is_none_or(|end| end > u32::MAX - 1)
        {
            return Err(format!(
                "sandbox_uid_base = {}: the sandboxes' {SANDBOX_IDS} ids must lie between 1 and {}",
                self.sandbox_uid_base,
                u32::MAX - 1
            ));
        }
        for (name, value) in [
            ("limits.pids", self.limits.pids),
            ("limits.root_mib", self.limits.root_mib),
            ("limits.shm_mib", self.limits.shm_mib),
        ] {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        let cgroup_parent = Path::new(&self.cgroup_parent);
        if self.cgroup_parent.is_empty()
            || !cgroup_parent
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(format!(
                "cgroup_parent `{}` must be a relative path like sandfleet or user.slice/sandfleet",
                self.cgroup_parent
            ));
        }
        if let Some(path) = self.hidden_paths.iter().find(|path| path.is_relative()) {
            return Err(format!(
                "hidden_paths entry `{}` must be an absolute path",
                path.display()
            ));
        }
        for entry in &self.etc {
            let plain = !entry.is_empty()
                && Path::new(entry)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_)));
            if !plain {
                return Err(format!(
                    "etc entry `{entry}` must be a path relative to /etc, like hosts.allow or ssl/certs"
                ));
            }
        }
        let every_image = self
            .images
            .iter()
            .map(|(name, source)| (name, source.limits))
            .chain(
                self.oci_images
                    .iter()
                    .map(|(name, source)| (name, source.limits)),
            );
        for (name, limits) in every_image {
            if name.is_empty() {
                return Err("an image has an empty name".to_string());
            }
            let overrides = [
                ("pids", limits.pids),
                ("root_mib", limits.root_mib),
                ("shm_mib", limits.shm_mib),
            ];
            if let Some((key, _)) = overrides.iter().find(|(_, value)| *value == Some(0)) {
                return Err(format!("image `{name}`: {key} must be at least 1"));
            }
        }
        for (name, source) in &self.oci_images {
            if self.images.contains_key(name) {
                return Err(format!(
                    "image `{name}` is both a directory and an OCI image"
                ));
            }
            if let Err(error) = sandfleet_images::Reference::parse(&source.reference) {
                return Err(format!("image `{name}`: {error}"));
            }
        }
        for (name, source) in &self.images {
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
                git: true,
                limits: LimitOverrides::default(),
            }
        );
        assert_eq!(
            config.images["rootfs"],
            ImageSource {
                path: "images/rootfs".into(),
                git: false,
                limits: LimitOverrides::default(),
            }
        );
        assert_eq!(config.max_sandboxes(2), 8);
    }

    #[test]
    fn registries_name_insecure_hosts_and_a_platform() {
        let config = parse(
            "[registries]\ninsecure = [\"registry.lab:5000\"]\nplatform = \"linux/arm64/v8\"",
        )
        .unwrap();
        assert_eq!(config.registries.insecure, ["registry.lab:5000"]);
        assert_eq!(config.registries.platform.to_string(), "linux/arm64/v8");
        assert_eq!(parse("").unwrap().registries.platform, Platform::host());
        let error = parse("[registries]\nplatform = \"arm64\"").unwrap_err();
        assert!(error.contains("platform `arm64`"), "{error}");
        let error = parse("[registries]\nmirror = \"x\"").unwrap_err();
        assert!(error.contains("mirror"), "{error}");
    }

    #[test]
    fn oci_entries_sit_beside_directories() {
        let config = parse(
            r#"
            [images]
            app = "images/app"
            py = { oci = "python:3.11", pids = 100 }
            "#,
        )
        .unwrap();
        assert_eq!(config.images.len(), 1);
        assert_eq!(
            config.oci_images["py"],
            OciSource {
                reference: "python:3.11".into(),
                limits: LimitOverrides {
                    pids: Some(100),
                    ..LimitOverrides::default()
                },
            }
        );
        for bad in [
            "[images]\nx = { oci = \"a\", path = \"b\" }",
            "[images]\nx = { oci = \"a\", git = true }",
            "[images]\nx = { git = true }",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let mut config = parse("[images]\nx = { oci = \"UPPER/Case\" }").unwrap();
        let error = config.validate().unwrap_err();
        assert!(error.contains("image `x`"), "{error}");
        config.oci_images.clear();
        config.validate().unwrap();
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
        config.resolve_paths(Path::new("/srv/fleet"));
        assert_eq!(
            config.state_dir.as_deref(),
            Some(Path::new("/srv/fleet/state"))
        );
        assert_eq!(config.images["a"].path, Path::new("/srv/fleet/src/a"));
        assert_eq!(config.images["b"].path, Path::new("/abs/b"));
        config.validate().unwrap();
    }

    #[test]
    fn workdirs_outside_the_host_directories_only() {
        for bad in ["workspace", "/", "/usr/src", "/tmp/w", "/a/../b", "/w/"] {
            let config = LocalConfig {
                workdir: bad.to_string(),
                ..LocalConfig::default()
            };
            assert!(config.validate().is_err(), "{bad} was accepted");
        }
        for good in [
            "/workspace",
            "/testbed",
            "/home/agent/repo",
            "/usrx",
            "/a,b:c",
        ] {
            let config = LocalConfig {
                workdir: good.to_string(),
                ..LocalConfig::default()
            };
            config.validate().unwrap();
        }
    }
}
