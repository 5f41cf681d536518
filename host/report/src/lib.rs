//! The picture of a run: the engine appends what it does to
//! `events.jsonl` as it goes ([`events`]), and [`write`] draws
//! `report.html` from that file — at the end of every run, and again with
//! `sandfleet report OUT_DIR` for a finished or crashed run.
//!
//! `report.html` is one self-contained file: the page (its CSS and
//! script inline, no fetches) with the run's [`Picture`] embedded as JSON.

pub mod events;
mod picture;

use std::path::{Path, PathBuf};

pub use picture::Picture;

/// The file name inside a run's output directory.
pub const REPORT_HTML: &str = "report.html";

/// The page; the picture's JSON goes where the placeholder is.
const PAGE: &str = include_str!("../assets/report.html");
const PLACEHOLDER: &str = "__SANDFLEET_REPORT_DATA__";

/// What [`write`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The file.
    pub path: PathBuf,
    /// Tasks drawn.
    pub tasks: usize,
    /// Segments drawn.
    pub segments: usize,
    /// The run recorded its end (false: it crashed, or runs still).
    pub finished: bool,
}

/// Why `report.html` could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The events could not be read.
    #[error(transparent)]
    Events(#[from] events::EventsError),
    /// The page could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Draws `dir/report.html` from `dir/events.jsonl` (its last run),
/// replacing it whole: a reader never sees half a page.
///
/// # Errors
///
/// When the events cannot be read or the page cannot be written.
pub fn write(dir: &Path) -> Result<Written, ReportError> {
    let events = events::last_run(dir)?;
    let picture = Picture::of(&events);
    let path = dir.join(REPORT_HTML);
    let io = |source| ReportError::Write {
        path: path.clone(),
        source,
    };
    let partial = dir.join(".report.html.partial");
    std::fs::write(&partial, page(&picture)).map_err(io)?;
    std::fs::rename(&partial, &path).map_err(io)?;
    Ok(Written {
        tasks: picture.tasks(),
        segments: picture.segments(),
        finished: events
            .iter()
            .any(|event| matches!(event, events::Event::End { .. })),
        path,
    })
}

/// The page with `picture` in it. The data comes from tasks, which are
/// hostile: with every `<` escaped, no string in it can close the script
/// element it sits in.
pub fn page(picture: &Picture) -> String {
    let json = serde_json::to_string(picture)
        .expect("pictures serialize")
        .replace('<', "\\u003c");
    PAGE.replacen(PLACEHOLDER, &json, 1)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::events::{
        ClusterEvent, Event, EventLog, Mark, MarkKind, Segment, SegmentKind, TaskEnd, TaskKey,
    };

    fn key(id: &str) -> TaskKey {
        TaskKey {
            id: id.into(),
            epoch: 0,
            member: None,
        }
    }

    fn segment(kind: SegmentKind, at: u64, end: u64, sandbox: &str, task: Option<&str>) -> Event {
        Event::Segment(Segment {
            kind,
            at,
            end,
            cluster: "local".into(),
            sandbox: sandbox.into(),
            image: "img".into(),
            task: task.map(key),
            ok: true,
        })
    }

    fn finished(id: &str, sandbox: &str, status: &str, at: u64, end: u64) -> Event {
        Event::Task(TaskEnd {
            task: key(id),
            image: "img".into(),
            cluster: Some("local".into()),
            sandbox: Some(sandbox.into()),
            status: status.into(),
            timed_out: false,
            at,
            end,
            log: format!("logs/{id}.log"),
            error: None,
            detail: None,
            attempts: 1,
            plugins: BTreeMap::from([("adapter".into(), "swebench sha256:new".into())]),
        })
    }

    fn run_of(events: &[Event]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path()).unwrap();
        log.append(&Event::Run {
            run_id: "r1".into(),
            started_at: "2026-12-04T17:00:00Z".into(),
            clusters: vec![ClusterEvent {
                name: "local".into(),
                backend: "local".into(),
            }],
            plugins: BTreeMap::from([("adapter".into(), "swebench sha256:old".into())]),
        })
        .unwrap();
        for event in events {
            log.append(event).unwrap();
        }
        dir
    }

    fn data(dir: &Path) -> serde_json::Value {
        let page = std::fs::read_to_string(dir.join(REPORT_HTML)).unwrap();
        let start = page.find("id=\"report-data\"").unwrap();
        let json_start = start + page[start..].find('>').unwrap() + 1;
        let json_end = json_start + page[json_start..].find("</script>").unwrap();
        serde_json::from_str(&page[json_start..json_end]).unwrap()
    }

    #[test]
    fn segments_of_no_task_go_to_the_task_their_sandbox_served() {
        let dir = run_of(&[
            segment(SegmentKind::Prepare, 0, 5, "a", None),
            segment(SegmentKind::Claim, 5, 10, "a", Some("t1")),
            segment(SegmentKind::Run, 10, 40, "a", Some("t1")),
            finished("t1", "a", "ok", 5, 50),
            segment(SegmentKind::Release, 50, 60, "a", None),
            // A sandbox that served no task is not drawn.
            segment(SegmentKind::Release, 70, 80, "idle", None),
            Event::End { at: 90 },
        ]);
        let written = write(dir.path()).unwrap();
        assert_eq!((written.tasks, written.segments), (1, 4));
        assert!(written.finished);
        let data = data(dir.path());
        assert_eq!(data["segments"]["task"], serde_json::json!([0, 0, 0, 0]));
        assert_eq!(data["segments"]["kind"], serde_json::json!([1, 0, 3, 6]));
        assert_eq!(data["wall_ms"], 90);
    }

    #[test]
    fn a_crashed_run_draws_its_unfinished_tasks() {
        let dir = run_of(&[
            segment(SegmentKind::Claim, 0, 10, "a", Some("done")),
            finished("done", "a", "failed", 0, 30),
            segment(SegmentKind::Claim, 12, 20, "b", Some("cut")),
            segment(SegmentKind::Setup, 20, 35, "b", Some("cut")),
        ]);
        let written = write(dir.path()).unwrap();
        assert!(!written.finished);
        let data = data(dir.path());
        assert_eq!(data["finished"], false);
        assert_eq!(data["wall_ms"], 35);
        let cut = &data["tasks"][1];
        assert_eq!(
            (&cut["id"], &cut["status"], &cut["start"], &cut["end"]),
            (&"cut".into(), &"unfinished".into(), &12.into(), &35.into())
        );
    }

    #[test]
    fn claims_waiting_count_the_claims_in_flight_per_image() {
        let dir = run_of(&[
            segment(SegmentKind::Claim, 0, 10, "a", Some("t1")),
            segment(SegmentKind::Claim, 5, 20, "b", Some("t2")),
            segment(SegmentKind::Claim, 20, 20, "c", Some("t3")),
        ]);
        write(dir.path()).unwrap();
        assert_eq!(
            data(dir.path())["waiting"][0]["points"],
            serde_json::json!([[0, 1], [5, 2], [10, 1], [20, 0]])
        );
    }

    #[test]
    fn a_pool_has_its_target_and_its_sampled_levels() {
        let pool = |at, target| Event::Pool {
            at,
            cluster: "local".into(),
            image: "img".into(),
            target,
        };
        let dir = run_of(&[
            pool(0, 4),
            Event::PoolReady {
                at: 1000,
                cluster: "local".into(),
                image: "img".into(),
                ready: 3,
            },
            pool(2000, 0),
        ]);
        write(dir.path()).unwrap();
        let pools = &data(dir.path())["pools"];
        assert_eq!(pools[0]["points"], serde_json::json!([[0, 4], [2000, 0]]));
        assert_eq!(pools[0]["ready"], serde_json::json!([[1000, 3]]));
    }

    #[test]
    fn a_plugin_version_takes_over_from_the_first_task_it_served() {
        let dir = run_of(&[
            finished("t1", "a", "ok", 100, 200),
            Event::Mark(Mark {
                kind: MarkKind::Retry,
                at: 150,
                cluster: Some("local".into()),
                sandbox: Some("a".into()),
                task: Some(key("t1")),
                detail: "sandbox_lost".into(),
            }),
        ]);
        write(dir.path()).unwrap();
        let data = data(dir.path());
        let plugins = &data["plugins"];
        assert_eq!(plugins[0]["version"], "sha256:old");
        assert_eq!(
            (&plugins[1]["version"], &plugins[1]["from_ms"]),
            (&"sha256:new".into(), &100.into())
        );
        assert_eq!(
            (&data["marks"][0]["lane"], &data["marks"][0]["task"]),
            (&0.into(), &0.into())
        );
    }

    #[test]
    fn take_overs_the_run_recorded_name_the_plugins_exactly() {
        let took_over = |at, plugin: &str| Event::Plugin {
            at,
            role: "placement".into(),
            plugin: plugin.into(),
            calls: 1,
            faults: 0,
        };
        let dir = run_of(&[
            finished("t1", "a", "ok", 100, 200),
            took_over(0, "mine sha256:one"),
            took_over(150, "mine sha256:two"),
        ]);
        write(dir.path()).unwrap();
        let plugins = &data(dir.path())["plugins"];
        assert_eq!(plugins.as_array().unwrap().len(), 2, "{plugins}");
        assert_eq!(
            (
                &plugins[1]["role"],
                &plugins[1]["version"],
                &plugins[1]["from_ms"]
            ),
            (&"placement".into(), &"sha256:two".into(), &150.into())
        );
    }

    #[test]
    fn hostile_strings_cannot_close_the_data_script() {
        let hostile = "</script><img src=x onerror=alert(1)>";
        let dir = run_of(&[finished(hostile, "a", "ok", 0, 1)]);
        write(dir.path()).unwrap();
        let page = std::fs::read_to_string(dir.path().join(REPORT_HTML)).unwrap();
        assert!(
            !page.contains("<img src=x"),
            "the task id went into the page unescaped"
        );
        assert_eq!(data(dir.path())["tasks"][0]["id"], hostile);
    }
}
