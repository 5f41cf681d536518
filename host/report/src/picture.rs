//! The data `report.html` draws, made from a run's events: lanes (one per
//! sandbox, grouped by cluster), tasks and their segments (columnar, so a
//! run of 10,000 tasks stays small), marks, warm-pool targets and claims
//! waiting over time, and the tables.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::events::{ClusterEvent, Event, Mark, Segment, SegmentKind, TaskEnd, TaskKey};

/// What the page draws.
#[derive(Debug, Serialize)]
pub struct Picture {
    run_id: String,
    started_at: String,
    wall_ms: u64,
    finished: bool,
    clusters: Vec<ClusterEvent>,
    images: Vec<String>,
    lanes: Vec<Lane>,
    kinds: Vec<&'static str>,
    tasks: Vec<TaskBar>,
    segments: Segments,
    marks: Vec<MarkGlyph>,
    pools: Vec<PoolSeries>,
    waiting: Vec<Series>,
    phases: Vec<PhaseRow>,
    by_image: Vec<TableRow>,
    by_cluster: Vec<TableRow>,
    plugins: Vec<PluginServed>,
}

#[derive(Debug, Serialize)]
struct Lane {
    cluster: usize,
    sandbox: String,
}

#[derive(Debug, Serialize)]
struct TaskBar {
    id: String,
    epoch: u32,
    member: Option<u32>,
    image: usize,
    cluster: Option<usize>,
    lane: Option<usize>,
    status: String,
    timed_out: bool,
    start: u64,
    end: u64,
    log: Option<String>,
    error: Option<String>,
    attempts: u32,
    detail: Option<String>,
}

/// One entry per segment in each column.
#[derive(Debug, Default, Serialize)]
struct Segments {
    task: Vec<usize>,
    lane: Vec<usize>,
    kind: Vec<usize>,
    start: Vec<u64>,
    end: Vec<u64>,
    ok: Vec<u8>,
}

#[derive(Debug, Serialize)]
struct MarkGlyph {
    at: u64,
    lane: Option<usize>,
    task: Option<usize>,
    kind: &'static str,
    detail: String,
}

/// Claims waiting for a sandbox of an image over time: `[at, claims]`
/// points of a step function.
#[derive(Debug, Serialize)]
struct Series {
    image: usize,
    points: Vec<[u64; 2]>,
}

/// A pool event's level.
enum Level {
    Target(u32),
    Ready(u32),
}

/// A warm pool over time: the replicas it was asked to keep, and the
/// sandboxes it had ready when sampled.
#[derive(Debug, Serialize)]
struct PoolSeries {
    image: usize,
    cluster: usize,
    points: Vec<[u64; 2]>,
    ready: Vec<[u64; 2]>,
}

#[derive(Debug, Serialize)]
struct PhaseRow {
    name: &'static str,
    count: usize,
    p50_s: f64,
    p90_s: f64,
    p99_s: f64,
    max_s: f64,
    total_s: f64,
}

#[derive(Debug, Default, Serialize)]
struct TableRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<usize>,
    tasks: usize,
    ok: usize,
    failed: usize,
    infra_error: usize,
    timed_out: usize,
    mean_s: f64,
    p90_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandboxes: Option<usize>,
}

#[derive(Debug, Serialize)]
struct PluginServed {
    role: String,
    name: String,
    version: String,
    from_ms: u64,
}

/// Interns names (images, clusters, lanes) as indices in first-seen order.
struct Names<K> {
    index: HashMap<K, usize>,
    order: Vec<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Names<K> {
    fn new() -> Self {
        Names {
            index: HashMap::new(),
            order: Vec::new(),
        }
    }

    fn of(&mut self, key: &K) -> usize {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        self.order.push(key.clone());
        self.index.insert(key.clone(), self.order.len() - 1);
        self.order.len() - 1
    }
}

impl Picture {
    /// The picture of `events`, which begin with a `run` line (as
    /// [`crate::events::last_run`] returns them).
    pub fn of(events: &[Event]) -> Picture {
        let Some(Event::Run {
            run_id,
            started_at,
            clusters,
            plugins: plugins_at_start,
        }) = events.first()
        else {
            panic!("a run's events begin with its run line");
        };
        let mut segments: Vec<&Segment> = Vec::new();
        let mut ends: Vec<&TaskEnd> = Vec::new();
        let mut marks: Vec<&Mark> = Vec::new();
        let mut pool_events = Vec::new();
        let mut end_at = None;
        let mut took_over = Vec::new();
        for event in events {
            match event {
                Event::Segment(segment) => segments.push(segment),
                Event::Task(end) => ends.push(end),
                Event::Mark(mark) => marks.push(mark),
                Event::Pool {
                    at,
                    cluster,
                    image,
                    target,
                } => pool_events.push((*at, cluster, image, Level::Target(*target))),
                Event::PoolReady {
                    at,
                    cluster,
                    image,
                    ready,
                } => pool_events.push((*at, cluster, image, Level::Ready(*ready))),
                Event::Plugin {
                    at, role, plugin, ..
                } => took_over.push((role.clone(), plugin.clone(), *at)),
                Event::End { at } => end_at = Some(*at),
                Event::Run { .. } => {}
            }
        }
        let mut cluster_names = Names::new();
        for cluster in clusters {
            cluster_names.of(&cluster.name);
        }
        let mut images = Names::new();
        let mut lanes = Names::new();
        // Lanes grouped by cluster, each in the order its sandbox was first
        // seen; a cluster the configuration did not name goes last.
        let mut first_seen: Vec<(usize, u64, (String, String))> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut see = |cluster: &String, sandbox: &String, at: u64| {
            let key = (cluster.clone(), sandbox.clone());
            if seen.insert(key.clone()) {
                first_seen.push((cluster_names.of(cluster), at, key));
            }
        };
        for segment in &segments {
            see(&segment.cluster, &segment.sandbox, segment.at);
        }
        for end in &ends {
            if let (Some(cluster), Some(sandbox)) = (&end.cluster, &end.sandbox) {
                see(cluster, sandbox, end.at);
            }
        }
        first_seen.sort_by_key(|(cluster, at, _)| (*cluster, *at));
        for (_, _, key) in &first_seen {
            lanes.of(key);
        }

        let mut tasks: Vec<TaskBar> = Vec::new();
        let mut task_index: HashMap<&TaskKey, usize> = HashMap::new();
        for end in &ends {
            let lane = end
                .cluster
                .clone()
                .zip(end.sandbox.clone())
                .map(|key| lanes.of(&key));
            let bar = TaskBar {
                id: end.task.id.clone(),
                epoch: end.task.epoch,
                member: end.task.member,
                image: images.of(&end.image),
                cluster: end.cluster.as_ref().map(|c| cluster_names.of(c)),
                lane,
                status: end.status.clone(),
                timed_out: end.timed_out,
                start: end.at,
                end: end.end,
                log: Some(end.log.clone()),
                error: end.error.clone(),
                attempts: end.attempts,
                detail: end.detail.clone(),
            };
            match task_index.get(&end.task) {
                // A task recorded twice keeps its last record.
                Some(&i) => tasks[i] = bar,
                None => {
                    task_index.insert(&end.task, tasks.len());
                    tasks.push(bar);
                }
            }
        }
        // Tasks the run never finished: seen only in their segments.
        for segment in &segments {
            let Some(key) = &segment.task else { continue };
            let lane = lanes.of(&(segment.cluster.clone(), segment.sandbox.clone()));
            match task_index.get(key) {
                Some(&i) if tasks[i].status == "unfinished" => {
                    let bar = &mut tasks[i];
                    bar.start = bar.start.min(segment.at);
                    bar.end = bar.end.max(segment.end);
                    bar.lane = Some(lane);
                }
                Some(_) => {}
                None => {
                    task_index.insert(key, tasks.len());
                    tasks.push(TaskBar {
                        id: key.id.clone(),
                        epoch: key.epoch,
                        member: key.member,
                        image: images.of(&segment.image),
                        cluster: Some(cluster_names.of(&segment.cluster)),
                        lane: Some(lane),
                        status: "unfinished".into(),
                        timed_out: false,
                        start: segment.at,
                        end: segment.end,
                        log: None,
                        error: None,
                        attempts: 1,
                        detail: None,
                    });
                }
            }
        }

        // A segment of no task (a release, a prepare hook) belongs to the
        // task its sandbox served last before it, or first after it; one
        // on a sandbox that served none is not drawn.
        let mut lane_tasks: Vec<Vec<(u64, usize)>> = vec![Vec::new(); lanes.order.len()];
        for (i, task) in tasks.iter().enumerate() {
            if let Some(lane) = task.lane {
                lane_tasks[lane].push((task.start, i));
            }
        }
        for served in &mut lane_tasks {
            served.sort_unstable();
        }
        let mut columns = Segments::default();
        let mut durations: BTreeMap<SegmentKind, Vec<f64>> = BTreeMap::new();
        for segment in &segments {
            let lane = lanes.of(&(segment.cluster.clone(), segment.sandbox.clone()));
            let task = match &segment.task {
                Some(key) => task_index.get(key).copied(),
                None => {
                    let served = &lane_tasks[lane];
                    let after = served.partition_point(|&(start, _)| start <= segment.at);
                    served
                        .get(after.wrapping_sub(1))
                        .or_else(|| served.get(after))
                        .map(|&(_, i)| i)
                }
            };
            durations
                .entry(segment.kind)
                .or_default()
                .push(segment.end.saturating_sub(segment.at) as f64 / 1000.0);
            let Some(task) = task else { continue };
            columns.task.push(task);
            columns.lane.push(lane);
            columns.kind.push(
                SegmentKind::ALL
                    .iter()
                    .position(|&k| k == segment.kind)
                    .expect("every kind is listed"),
            );
            columns.start.push(segment.at);
            columns.end.push(segment.end.max(segment.at));
            columns.ok.push(u8::from(segment.ok));
        }

        let glyphs = marks
            .iter()
            .map(|mark| MarkGlyph {
                at: mark.at,
                lane: mark
                    .cluster
                    .clone()
                    .zip(mark.sandbox.clone())
                    .and_then(|key| lanes.index.get(&key).copied()),
                task: mark
                    .task
                    .as_ref()
                    .and_then(|key| task_index.get(key).copied()),
                kind: mark.kind.name(),
                detail: mark.detail.clone(),
            })
            .collect();

        let mut pools: BTreeMap<(usize, usize), PoolSeries> = BTreeMap::new();
        for (at, cluster, image, level) in pool_events {
            let (image, cluster) = (images.of(image), cluster_names.of(cluster));
            let series = pools.entry((image, cluster)).or_insert(PoolSeries {
                image,
                cluster,
                points: Vec::new(),
                ready: Vec::new(),
            });
            match level {
                Level::Target(target) => series.points.push([at, u64::from(target)]),
                Level::Ready(ready) => series.ready.push([at, u64::from(ready)]),
            }
        }
        let waiting = claims_waiting(&segments, &mut images);

        let wall_ms = end_at.unwrap_or_else(|| {
            let last_segment = segments.iter().map(|s| s.end);
            let last_task = ends.iter().map(|t| t.end);
            last_segment.chain(last_task).max().unwrap_or(0)
        });
        let phases = SegmentKind::ALL
            .iter()
            .filter_map(|kind| Some(phase_row(*kind, durations.get(kind)?)))
            .collect();
        let by_image = table(&tasks, |t| Some(t.image))
            .into_iter()
            .map(|(image, row)| TableRow {
                image: Some(image),
                ..row
            })
            .collect();
        let by_cluster = table(&tasks, |t| t.cluster)
            .into_iter()
            .map(|(cluster, row)| {
                let mut lanes_here = tasks
                    .iter()
                    .filter(|t| t.cluster == Some(cluster))
                    .filter_map(|t| t.lane)
                    .collect::<Vec<_>>();
                lanes_here.sort_unstable();
                lanes_here.dedup();
                TableRow {
                    cluster: Some(cluster),
                    sandboxes: Some(lanes_here.len()),
                    ..row
                }
            })
            .collect();
        let plugins = if took_over.is_empty() {
            plugins_served(plugins_at_start, &ends)
        } else {
            took_over.sort_by_key(|(_, _, at)| *at);
            rows_of(took_over)
        };

        let mut all_clusters = clusters.clone();
        for name in cluster_names.order.iter().skip(clusters.len()) {
            all_clusters.push(ClusterEvent {
                name: name.clone(),
                backend: "?".into(),
            });
        }
        Picture {
            run_id: run_id.clone(),
            started_at: started_at.clone(),
            wall_ms,
            finished: end_at.is_some(),
            clusters: all_clusters,
            images: images.order,
            lanes: lanes
                .order
                .into_iter()
                .map(|(cluster, sandbox)| Lane {
                    cluster: cluster_names.index[&cluster],
                    sandbox,
                })
                .collect(),
            kinds: SegmentKind::ALL.iter().map(|k| k.name()).collect(),
            tasks,
            segments: columns,
            marks: glyphs,
            pools: pools.into_values().collect(),
            waiting,
            phases,
            by_image,
            by_cluster,
            plugins,
        }
    }

    /// Tasks drawn.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Segments drawn.
    pub fn segments(&self) -> usize {
        self.segments.task.len()
    }
}

/// Claims in flight per image over time, from the claim segments: a
/// starved pool shows as claims waiting.
fn claims_waiting(segments: &[&Segment], images: &mut Names<String>) -> Vec<Series> {
    let mut steps: BTreeMap<usize, Vec<(u64, i64)>> = BTreeMap::new();
    for segment in segments.iter().filter(|s| s.kind == SegmentKind::Claim) {
        let image = steps.entry(images.of(&segment.image)).or_default();
        image.push((segment.at, 1));
        image.push((segment.end, -1));
    }
    steps
        .into_iter()
        .map(|(image, mut changes)| {
            // An end before a start at the same moment: a claim that took
            // no time is not counted as waiting.
            changes.sort_unstable();
            let mut points: Vec<[u64; 2]> = Vec::new();
            let mut waiting = 0i64;
            for (at, change) in changes {
                waiting += change;
                match points.last_mut() {
                    Some(last) if last[0] == at => last[1] = waiting.max(0) as u64,
                    _ => points.push([at, waiting.max(0) as u64]),
                }
            }
            Series { image, points }
        })
        .collect()
}

/// Nearest-rank percentile of sorted `samples`.
fn rank(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn phase_row(kind: SegmentKind, samples: &[f64]) -> PhaseRow {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    PhaseRow {
        name: kind.name(),
        count: sorted.len(),
        p50_s: rank(&sorted, 0.50),
        p90_s: rank(&sorted, 0.90),
        p99_s: rank(&sorted, 0.99),
        max_s: *sorted.last().expect("a row has samples"),
        total_s: sorted.iter().sum(),
    }
}

/// Rows of tasks grouped by `key`.
fn table(tasks: &[TaskBar], key: impl Fn(&TaskBar) -> Option<usize>) -> BTreeMap<usize, TableRow> {
    let mut rows: BTreeMap<usize, (TableRow, Vec<f64>)> = BTreeMap::new();
    for task in tasks {
        let Some(key) = key(task) else { continue };
        let (row, durations) = rows.entry(key).or_default();
        row.tasks += 1;
        match task.status.as_str() {
            "ok" => row.ok += 1,
            "failed" => row.failed += 1,
            "infra_error" => row.infra_error += 1,
            _ => {}
        }
        row.timed_out += usize::from(task.timed_out);
        durations.push(task.end.saturating_sub(task.start) as f64 / 1000.0);
    }
    rows.into_iter()
        .map(|(key, (row, mut durations))| {
            durations.sort_by(f64::total_cmp);
            let mean_s = durations.iter().sum::<f64>() / durations.len() as f64;
            (
                key,
                TableRow {
                    mean_s,
                    p90_s: rank(&durations, 0.90),
                    ..row
                },
            )
        })
        .collect()
}

/// Each role's versions in the order they served, when the run did not
/// record its take-overs (it crashed): the one serving at the start, then
/// each new one from the start of the first task it served.
fn plugins_served(at_start: &BTreeMap<String, String>, ends: &[&TaskEnd]) -> Vec<PluginServed> {
    let mut served: Vec<(String, String, u64)> = at_start
        .iter()
        .map(|(role, plugin)| (role.clone(), plugin.clone(), 0))
        .collect();
    let mut by_start: Vec<&&TaskEnd> = ends.iter().collect();
    by_start.sort_by_key(|end| end.at);
    for end in by_start {
        for (role, plugin) in &end.plugins {
            let known = served.iter().any(|(r, p, _)| r == role && p == plugin);
            if !known {
                served.push((role.clone(), plugin.clone(), end.at));
            }
        }
    }
    rows_of(served)
}

/// Rows of `(role, "name version", from)`.
fn rows_of(served: Vec<(String, String, u64)>) -> Vec<PluginServed> {
    served
        .into_iter()
        .map(|(role, plugin, from_ms)| {
            let (name, version) = plugin
                .split_once(' ')
                .map_or((plugin.as_str(), ""), |(n, v)| (n, v));
            PluginServed {
                role,
                name: name.to_string(),
                version: version.to_string(),
                from_ms,
            }
        })
        .collect()
}
