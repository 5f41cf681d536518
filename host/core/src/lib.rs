//! sandfleet's domain: run ids and labels, templates, sandbox handles, exec
//! requests and results, typed backend errors, and the [`Backend`] trait
//! that the local, Kubernetes and OpenSandbox drivers implement. No I/O
//! lives here.
//!
//! The engine drives every backend through [`Backend`] alone, reading what
//! differs between them from [`Capabilities`], and never asks which kind
//! it is talking to.

mod backend;
mod error;
mod exec;
mod labels;
mod names;
mod run;
mod sandbox;
mod snapshot;

pub use backend::{
    Backend, Capabilities, Capacity, ExecGuarantees, ImagePulls, ImageToPull, Images, Owned,
    PoolStatus, Preflight, PullEvent, PullProgress, Reaped, Recycling, WarmPools,
    names_a_reference,
};
pub use error::{BackendError, ErrorKind};
pub use exec::{
    CappedOutput, ExecRequest, ExecResult, OutputChunk, OutputSink, OutputStream, dropped_marker,
    stopped_marker,
};
pub use labels::{LabelError, label_value, validate_label, validate_labels};
pub use names::{file_stem, template_name};
pub use run::{LABEL_RUN_ID, LABEL_TASK, Labels, RunId};
pub use sandbox::{DEFAULT_TTL, SandboxHandle, TemplateRef, TemplateSpec};
pub use snapshot::{SnapshotRef, Snapshots, snapshots_of};
