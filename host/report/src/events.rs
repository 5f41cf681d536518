//! `events.jsonl`: what a run did and when, one JSON object a line,
//! appended as it happens, so the picture of a run that crashed can still
//! be drawn up to its last line. A rerun into the same directory appends
//! a new `run` line; the picture is of the last run.
//!
//! Times are milliseconds since the run's `run` line.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, LineWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The file name inside a run's output directory.
pub const EVENTS_FILE: &str = "events.jsonl";

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Event {
    /// A run started.
    Run {
        /// Its id.
        run_id: String,
        /// When (RFC 3339).
        started_at: String,
        /// Its clusters, in configuration order.
        clusters: Vec<ClusterEvent>,
        /// Role → `name version` of the plugin serving it at the start.
        plugins: BTreeMap<String, String>,
    },
    /// A step on a sandbox, finished.
    Segment(Segment),
    /// A task finished.
    Task(TaskEnd),
    /// Something worth a glyph on the timeline.
    Mark(Mark),
    /// A warm pool's target changed.
    Pool {
        /// When.
        at: u64,
        /// The pool's cluster.
        cluster: String,
        /// Its image.
        image: String,
        /// Replicas it keeps from now on (0: unwarmed).
        target: u32,
    },
    /// Warm sandboxes a pool had ready, sampled while the run went.
    PoolReady {
        /// When.
        at: u64,
        /// The pool's cluster.
        cluster: String,
        /// Its image.
        image: String,
        /// Sandboxes ready to be claimed.
        ready: u32,
    },
    /// A plugin version took over a role (written when the run ends, from
    /// the registry's record of take-overs).
    Plugin {
        /// When: 0 for a version serving before the run started.
        at: u64,
        /// `adapter`, `placement`, `sizing` or `reset`.
        role: String,
        /// `name version`.
        plugin: String,
        /// Its calls during the run.
        calls: u64,
        /// Of those, the calls that faulted.
        faults: u64,
    },
    /// The run ended (absent when it crashed).
    End {
        /// When.
        at: u64,
    },
}

/// A cluster of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterEvent {
    /// Its name.
    pub name: String,
    /// Its backend kind.
    pub backend: String,
}

/// Which run of which task: a task, an epoch and, in a group, a member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskKey {
    /// The task's id.
    pub id: String,
    /// The pass over the dataset.
    pub epoch: u32,
    /// The group member, for a task run as a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
}

/// The steps drawn on a sandbox's lane, in the order a task meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// Waiting for a sandbox: placement, pacing and the claim.
    Claim,
    /// An image's prepare hook on a new sandbox.
    Prepare,
    /// The task's set-up commands.
    Setup,
    /// Its files and evaluate commands.
    Run,
    /// The adapter's grade.
    Grade,
    /// Resetting a recycled sandbox for the next task.
    Reset,
    /// Giving the sandbox back.
    Release,
}

impl SegmentKind {
    /// Every kind, in the order the picture lists them.
    pub const ALL: [SegmentKind; 7] = [
        SegmentKind::Claim,
        SegmentKind::Prepare,
        SegmentKind::Setup,
        SegmentKind::Run,
        SegmentKind::Grade,
        SegmentKind::Reset,
        SegmentKind::Release,
    ];

    /// The name in the picture.
    pub fn name(self) -> &'static str {
        match self {
            SegmentKind::Claim => "claim",
            SegmentKind::Prepare => "prepare",
            SegmentKind::Setup => "setup",
            SegmentKind::Run => "run",
            SegmentKind::Grade => "grade",
            SegmentKind::Reset => "reset",
            SegmentKind::Release => "release",
        }
    }
}

/// A step on a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Which step.
    pub kind: SegmentKind,
    /// When it started.
    pub at: u64,
    /// When it ended.
    pub end: u64,
    /// The sandbox's cluster.
    pub cluster: String,
    /// The sandbox.
    pub sandbox: String,
    /// Its image.
    pub image: String,
    /// The task it was for, when it was for one (a release or a prepare
    /// hook is the sandbox's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskKey>,
    /// False when the step failed.
    pub ok: bool,
}

/// A finished task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEnd {
    /// Which task.
    pub task: TaskKey,
    /// Its image.
    pub image: String,
    /// The cluster of its last attempt, if it got a sandbox.
    pub cluster: Option<String>,
    /// The sandbox of its last attempt, if it got one.
    pub sandbox: Option<String>,
    /// `ok`, `failed` or `infra_error`.
    pub status: String,
    /// A command overran its timeout.
    pub timed_out: bool,
    /// When it started.
    pub at: u64,
    /// When it finished.
    pub end: u64,
    /// Its log, relative to the output directory.
    pub log: String,
    /// What went wrong, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The grade's one-line detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Attempts it took (more than 1 when the infrastructure failed one).
    pub attempts: u32,
    /// Role → `name version` of the plugins that served it.
    #[serde(default)]
    pub plugins: BTreeMap<String, String>,
}

/// What a mark says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// The task runs again on another sandbox.
    Retry,
    /// A sandbox failed its reset and was replaced.
    Quarantined,
    /// A new sandbox failed its image's prepare hook and was replaced.
    Replaced,
}

impl MarkKind {
    /// The name in the picture.
    pub fn name(self) -> &'static str {
        match self {
            MarkKind::Retry => "retry",
            MarkKind::Quarantined => "quarantined",
            MarkKind::Replaced => "replaced",
        }
    }
}

/// A moment worth a glyph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// What happened.
    pub kind: MarkKind,
    /// When.
    pub at: u64,
    /// The sandbox's cluster, when it happened to a sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskKey>,
    /// Why.
    pub detail: String,
}

/// Why `events.jsonl` could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The file could not be opened, written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A line is not an event (only the last line of a crashed run may be
    /// cut short, and is skipped).
    #[error("{}:{line}: not an event: {source}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// Why.
        source: serde_json::Error,
    },
    /// The file holds no `run` line.
    #[error("{}: no run recorded", path.display())]
    NoRun {
        /// The file.
        path: PathBuf,
    },
}

/// Appends events to a run's `events.jsonl`, a whole line at a time.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: Mutex<LineWriter<File>>,
}

impl EventLog {
    /// Opens `dir/events.jsonl` for appending.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened.
    pub fn open(dir: &Path) -> Result<Self, EventsError> {
        let path = dir.join(EVENTS_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| EventsError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(EventLog {
            path,
            file: Mutex::new(LineWriter::new(file)),
        })
    }

    /// Appends `event`.
    ///
    /// # Errors
    ///
    /// When the line cannot be written.
    pub fn append(&self, event: &Event) -> Result<(), EventsError> {
        let mut line = serde_json::to_vec(event).expect("events serialize");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line).map_err(|source| EventsError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// The events of the last run recorded in `dir/events.jsonl`, from its
/// `run` line on.
///
/// # Errors
///
/// When the file cannot be read, holds no run, or a line other than the
/// last is not an event.
pub fn last_run(dir: &Path) -> Result<Vec<Event>, EventsError> {
    let path = dir.join(EVENTS_FILE);
    let io = |source| EventsError::Io {
        path: path.clone(),
        source,
    };
    let file = File::open(&path).map_err(io)?;
    let mut events = Vec::new();
    let mut cut_short = None;
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if let Some((line, source)) = cut_short.take() {
            return Err(EventsError::Corrupt {
                path: path.clone(),
                line,
                source,
            });
        }
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(event) => {
                if matches!(event, Event::Run { .. }) {
                    events.clear();
                }
                events.push(event);
            }
            Err(source) => cut_short = Some((index + 1, source)),
        }
    }
    if !matches!(events.first(), Some(Event::Run { .. })) {
        return Err(EventsError::NoRun { path });
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_line(id: &str) -> Event {
        Event::Run {
            run_id: id.into(),
            started_at: "2026-12-04T17:00:00Z".into(),
            clusters: vec![],
            plugins: BTreeMap::new(),
        }
    }

    #[test]
    fn the_last_run_is_read_and_a_line_cut_short_at_the_end_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path()).unwrap();
        log.append(&run_line("first")).unwrap();
        log.append(&Event::End { at: 5 }).unwrap();
        log.append(&run_line("second")).unwrap();
        log.append(&Event::End { at: 7 }).unwrap();
        drop(log);
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(EVENTS_FILE))
            .unwrap();
        file.write_all(br#"{"e":"segment","kind":"cl"#).unwrap();
        let events = last_run(dir.path()).unwrap();
        assert_eq!(events, vec![run_line("second"), Event::End { at: 7 }]);
    }

    #[test]
    fn a_corrupt_line_before_the_last_is_an_error_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(EVENTS_FILE),
            "{\"e\":\"end\",\"at\":1}\nnot json\n{\"e\":\"end\",\"at\":2}\n",
        )
        .unwrap();
        let error = last_run(dir.path()).unwrap_err().to_string();
        assert!(error.contains("events.jsonl:2: not an event"), "{error}");
    }

    #[test]
    fn a_file_without_a_run_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(EVENTS_FILE), "{\"e\":\"end\",\"at\":1}\n").unwrap();
        let error = last_run(dir.path()).unwrap_err().to_string();
        assert!(error.ends_with("no run recorded"), "{error}");
    }
}
