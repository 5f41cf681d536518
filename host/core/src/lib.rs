//! sandfleet's domain: run ids and labels, templates, sandbox handles, exec
//! requests and results, and the [`Backend`] trait that the local,
//! Kubernetes and OpenSandbox drivers implement. No I/O lives here.
//!
//! The engine drives every backend through [`Backend`] alone and never asks
//! which kind it is talking to.

mod backend;
mod error;
mod exec;
mod names;
mod run;
mod sandbox;

pub use backend::{Backend, Capacity, Owned, PoolStatus, Preflight, Reaped};
pub use error::BackendError;
pub use exec::{ExecRequest, ExecResult, OutputChunk, OutputSink, OutputStream, dropped_marker};
pub use names::file_stem;
pub use run::{LABEL_RUN_ID, LABEL_TASK, Labels, RunId};
pub use sandbox::{DEFAULT_TTL, SandboxHandle, TemplateRef, TemplateSpec};
