//! Errors at the plugin boundary. Every error names the plugin and, for calls,
//! its version and the function, so a log line alone says what failed.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::Kind;

/// Identifies one loaded version of a plugin: its name and the first 12 hex
/// digits of the component's sha256.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginRef {
    /// The plugin's name (the file stem, or the built-in's name).
    pub name: Arc<str>,
    /// `sha256:` and a 12-digit prefix of the component's content hash.
    pub version: Arc<str>,
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({})", self.name, self.version)
    }
}

/// Where a plugin's bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Embedded in the host binary.
    Builtin,
    /// A file, usually in the watched plugin directory.
    File(PathBuf),
    /// Bytes handed over by the embedder (tests, the daemon API).
    Memory,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin => f.write_str("built-in"),
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Memory => f.write_str("in-memory"),
        }
    }
}

/// A plugin call that did not produce a valid answer.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin} {function}: {kind}")]
pub struct CallError {
    /// The plugin version that was called.
    pub plugin: PluginRef,
    /// The WIT function, e.g. `place`.
    pub function: &'static str,
    /// What went wrong.
    #[source]
    pub kind: CallErrorKind,
}

impl CallError {
    /// True when the plugin itself misbehaved (trap, overrun, broken
    /// contract), as opposed to declining with its own `failure`. The engine
    /// may fall back to the built-in plugin on these.
    pub fn is_plugin_fault(&self) -> bool {
        !matches!(
            self.kind,
            CallErrorKind::Declined { .. }
                | CallErrorKind::InvalidArguments(_)
                | CallErrorKind::HostPanic(_)
                | CallErrorKind::Cancelled
        )
    }
}

/// The ways a plugin call fails.
#[derive(Debug, thiserror::Error)]
pub enum CallErrorKind {
    /// The call used up its deadline of CPU time, or of wall time
    /// [`crate::WALL_CEILING_FACTOR`] times as long, and was interrupted.
    #[error(
        "exceeded its deadline of {0:?} of CPU time (or {wall:?} of wall time)",
        wall = *.0 * crate::WALL_CEILING_FACTOR
    )]
    Deadline(Duration),
    /// The plugin tried to grow its memory past the cap.
    #[error("exceeded its memory cap of {} MiB", .0 / (1024 * 1024))]
    MemoryCap(u64),
    /// The call used up its fuel.
    #[error("ran out of fuel ({0} units)")]
    OutOfFuel(u64),
    /// The plugin trapped (a panic, an invalid memory access, ...).
    #[error("trapped: {0}")]
    Trap(String),
    /// The plugin answered, but the answer breaks the contract.
    #[error("broke the contract: {0}")]
    Contract(String),
    /// The caller's arguments break the contract; the plugin was not called.
    #[error("was called with arguments that break the contract: {0}")]
    InvalidArguments(String),
    /// The plugin declined with its own `failure`.
    #[error("declined ({kind}): {message}")]
    Declined {
        /// `invalid-input`, `unsatisfiable` or `internal`.
        kind: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// A fresh instance could not be created.
    #[error("could not be instantiated: {0}")]
    Instantiate(String),
    /// The host panicked while running the call: a bug in sandfleet, not
    /// in the plugin. The panic's message.
    #[error("panicked the host: {0}")]
    HostPanic(String),
    /// The async runtime shut down before the call could run.
    #[error("was cancelled: the runtime shut down before it ran")]
    Cancelled,
}

/// A component that could not be loaded. The running host is unaffected: the
/// previous version, if any, keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The bytes are not a WebAssembly component.
    #[error("{origin}: not a WebAssembly component: {detail}")]
    NotComponent {
        /// The file or built-in.
        origin: String,
        /// What the bytes are instead.
        detail: String,
    },
    /// The component failed to compile or to link against the host.
    #[error("{origin}: {detail}")]
    Invalid {
        /// The file or built-in.
        origin: String,
        /// The compiler's or linker's message.
        detail: String,
    },
    /// The component exports no sandfleet plugin interface.
    #[error("{origin}: implements no sandfleet plugin world (its exports: {exports})")]
    NoWorld {
        /// The file or built-in.
        origin: String,
        /// The component's export names.
        exports: String,
    },
    /// The component was built against a contract version this host does not serve.
    #[error(
        "{origin}: built against plugin contract {found}, which this host does not serve (it serves {supported})"
    )]
    UnknownVersion {
        /// The file or built-in.
        origin: String,
        /// The version the component names.
        found: String,
        /// The versions this host serves.
        supported: String,
    },
    /// The component implements a different world than the one required.
    #[error("{origin}: implements {found}, but `{name}` must be a {expected}")]
    WrongWorld {
        /// The file or built-in.
        origin: String,
        /// The plugin name.
        name: String,
        /// The world found.
        found: Kind,
        /// The world required.
        expected: Kind,
    },
    /// The file name does not make a valid plugin name.
    #[error("{path}: `{stem}` is not a valid plugin name (use letters, digits, `-` and `_`)")]
    BadName {
        /// The file.
        path: PathBuf,
        /// The file stem.
        stem: String,
    },
}

/// A plugin asked for by name that cannot be served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    /// No plugin by that name.
    #[error("no plugin named `{name}` (available: {available})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The names that exist.
        available: String,
    },
    /// The plugin exists but implements another world.
    #[error("plugin `{name}` is a {found}, not a {expected}")]
    WrongKind {
        /// The plugin.
        name: String,
        /// What it is.
        found: Kind,
        /// What was asked for.
        expected: Kind,
    },
    /// The plugin never loaded successfully.
    #[error("plugin `{name}` failed to load: {error}")]
    Failed {
        /// The plugin.
        name: String,
        /// The last load error.
        error: String,
    },
}
