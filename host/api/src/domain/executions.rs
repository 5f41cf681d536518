//! A holder's commands by idempotency key: what each printed so far (when
//! someone may stream it) and how it ended, so a retried request gets the
//! first execution's answer, or attaches to it while it runs, instead of
//! running the command again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use sandfleet_core::{ExecRequest, ExecResult, OutputChunk};
use sandfleet_engine::{RunError, SessionError};
use tokio::sync::watch;

use super::Refusal;
use super::holder::Holder;

/// Idempotency keys remembered per holder; the oldest finished are dropped.
const KEYS_PER_HOLDER: usize = 256;

/// Executions by idempotency key, oldest first.
#[derive(Default)]
pub(crate) struct Executions(Mutex<Keyed>);

#[derive(Default)]
struct Keyed {
    by_key: HashMap<String, Arc<Execution>>,
    order: VecDeque<String>,
}

impl Executions {
    /// The execution under `key`, or `start()`'s, remembered under it;
    /// true when it was started now.
    pub(crate) fn get_or_start(
        &self,
        key: &str,
        start: impl FnOnce() -> Arc<Execution>,
    ) -> (Arc<Execution>, bool) {
        let mut keyed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = keyed.by_key.get(key) {
            return (known.clone(), false);
        }
        let started = start();
        keyed.by_key.insert(key.to_string(), started.clone());
        keyed.order.push_back(key.to_string());
        while keyed.order.len() > KEYS_PER_HOLDER {
            let Some(oldest) = keyed.order.front().cloned() else {
                break;
            };
            // A running execution stays: its retry must attach to it.
            if !keyed.by_key.get(&oldest).is_none_or(|e| e.finished()) {
                break;
            }
            keyed.order.pop_front();
            keyed.by_key.remove(&oldest);
        }
        (started, true)
    }
}

/// Why a command has no result, in the domain's terms; `crate::error`
/// gives each its status. Kept as the execution's outcome, so every retry
/// answers the same failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecFailure {
    /// Its holder refused it: released, or its sandbox gone for good and
    /// the holder's state with it.
    #[error(transparent)]
    Refused(Refusal),
    /// The session failed it; the backend's or plugin's error keeps its
    /// kind.
    #[error(transparent)]
    Session(SessionError),
    /// The task running it ended without an outcome (it panicked).
    #[error("the command's task ended without a result")]
    Abandoned,
}

impl ExecFailure {
    /// `holder` was released before the command could start.
    pub(crate) fn released(holder: &impl Holder) -> Self {
        ExecFailure::Refused(holder.lost(None).unwrap_or_else(|| Refusal::Released {
            holder: holder.name(),
        }))
    }

    /// The command failed with `error`: a holder whose sandbox is gone for
    /// good says so in its own terms.
    pub(crate) fn failed(holder: &impl Holder, error: SessionError) -> Self {
        let backend_says = sandbox_lost(&error).then(|| error.to_string());
        match holder.lost(backend_says.as_deref()) {
            Some(refusal) => ExecFailure::Refused(refusal),
            None => ExecFailure::Session(error),
        }
    }
}

/// Whether `error` says the sandbox is gone.
fn sandbox_lost(error: &SessionError) -> bool {
    match error {
        SessionError::Lost(_) => true,
        SessionError::Step(step) | SessionError::Run(RunError::Step(step)) => {
            step.is_sandbox_lost()
        }
        SessionError::Run(RunError::Backend(source)) => {
            source.kind() == sandfleet_core::ErrorKind::SandboxLost
        }
        SessionError::Invalid(_) | SessionError::Run(_) => false,
    }
}

/// One execution: its output so far (when someone may stream it) and its
/// outcome once it ends.
pub(crate) struct Execution {
    /// The request it ran, so a key reused for another request is refused.
    request: ExecRequest,
    chunks: Mutex<Vec<OutputChunk>>,
    record_chunks: bool,
    outcome: OnceLock<Result<ExecResult, ExecFailure>>,
    /// Bumped on every chunk and at the end.
    changes: watch::Sender<u64>,
}

impl Execution {
    /// An execution of `request`, keeping its output as it comes when
    /// `record_chunks` (someone may stream it).
    pub(crate) fn new(request: ExecRequest, record_chunks: bool) -> Arc<Self> {
        Arc::new(Execution {
            request,
            chunks: Mutex::new(Vec::new()),
            record_chunks,
            outcome: OnceLock::new(),
            changes: watch::Sender::new(0),
        })
    }

    pub(crate) fn request(&self) -> &ExecRequest {
        &self.request
    }

    /// Whether its output is kept as it comes; if not, a stream gets it
    /// whole from the result.
    pub(crate) fn records_chunks(&self) -> bool {
        self.record_chunks
    }

    /// Keeps `chunk` of its output, when it records chunks.
    pub(crate) fn record(&self, chunk: OutputChunk) {
        if self.record_chunks {
            self.chunks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(chunk);
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// The chunks recorded after the first `seen`.
    pub(crate) fn chunks_after(&self, seen: usize) -> Vec<OutputChunk> {
        let chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        chunks[seen.min(chunks.len())..].to_vec()
    }

    /// Changes on every chunk recorded and when it ends.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(crate) fn finished(&self) -> bool {
        self.outcome.get().is_some()
    }

    /// Its outcome, the first one given.
    pub(crate) fn finish(&self, outcome: Result<ExecResult, ExecFailure>) {
        let _ = self.outcome.set(outcome);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Its outcome, if it has ended.
    pub(crate) fn ended(&self) -> Option<&Result<ExecResult, ExecFailure>> {
        self.outcome.get()
    }

    /// Its outcome, once it ends.
    pub(crate) async fn outcome(&self) -> &Result<ExecResult, ExecFailure> {
        let mut changes = self.changes();
        loop {
            if let Some(outcome) = self.ended() {
                return outcome;
            }
            // The sender lives in `self`, so this only waits.
            let _ = changes.changed().await;
        }
    }
}

/// Finishes its execution as [`ExecFailure::Abandoned`] if the task
/// running the command ends without an outcome (a panic), so no waiter
/// waits forever.
pub(crate) struct Finisher(Arc<Execution>);

impl Finisher {
    pub(crate) fn new(execution: Arc<Execution>) -> Self {
        Finisher(execution)
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        if !self.0.finished() {
            self.0.finish(Err(ExecFailure::Abandoned));
        }
    }
}
