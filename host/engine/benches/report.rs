//! The picture of a large run: N no-op tasks (10,000 unless `--tasks N`)
//! through the whole engine on the local backend, then `report.html`'s
//! size, the time to draw it from `events.jsonl`, and the time headless
//! Chromium takes to render it: the page's own measures (script start to
//! the timeline in place; navigation start to everything drawn) and the
//! browser's whole start, load and dump, with an empty page's beside it.
//!
//! Run: `cargo bench -p sandfleet-engine --bench report` (about N/40 s of
//! tasks on 2 cores, then the measures). Needs `/usr/bin/chromium`.

use std::sync::Arc;
use std::time::Instant;

use sandfleet_core::RunId;
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, Plugins, RunSpec, Strategy,
};
use sandfleet_test_support::chromium;

mod support;

fn main() {
    let tasks: usize = std::env::args()
        .skip_while(|arg| arg != "--tasks")
        .nth(1)
        .map_or(10_000, |n| n.parse().expect("--tasks N"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let started = Instant::now();
    runtime.block_on(run_no_ops(dir.path(), tasks));
    println!(
        "report/{tasks} no-op tasks ran in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let events = std::fs::metadata(out.join("events.jsonl")).unwrap().len();
    let drawing = Instant::now();
    let written = sandfleet_report::write(&out).unwrap();
    let drawn = drawing.elapsed();
    let page = std::fs::metadata(&written.path).unwrap().len();
    println!(
        "report/events.jsonl {:.2} MB; report.html {:.2} MB ({} tasks, {} segments), drawn in {:.0} ms",
        events as f64 / 1e6,
        page as f64 / 1e6,
        written.tasks,
        written.segments,
        drawn.as_secs_f64() * 1e3
    );
    let empty = dir.path().join("empty.html");
    std::fs::write(&empty, "<!doctype html><title>empty</title>").unwrap();
    let loading = Instant::now();
    chromium::dump_dom(&format!("file://{}", empty.display()));
    println!(
        "report/chromium with an empty page: {:.0} ms to start the browser, load and dump",
        loading.elapsed().as_secs_f64() * 1e3
    );
    let url = format!("file://{}", written.path.display());
    for attempt in 1..=3 {
        let loading = Instant::now();
        let dom = chromium::dump_dom(&url);
        let load = loading.elapsed();
        let attribute = |name: &str| {
            dom.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .expect("the page records its times")
                .to_string()
        };
        println!(
            "report/chromium #{attempt}: timeline drawn {} ms after the script started, page done {} ms after navigation; {:.0} ms to start the browser, load and dump",
            attribute("data-render-ms"),
            attribute("data-page-ms"),
            load.as_secs_f64() * 1e3
        );
    }
}

async fn run_no_ops(dir: &std::path::Path, tasks: usize) {
    let registry = support::builtin_registry();
    let items = support::noop_tasks(&registry, tasks);
    let pool = 16;
    let spec = RunSpec {
        run_id: RunId::generate("bench-report"),
        settings: FleetSettings {
            strategy: Strategy::Naive,
            max_concurrent: 8,
            max_warmpool_size: pool,
            ..FleetSettings::default()
        },
        clusters: vec![Cluster {
            name: "local".into(),
            kind: "local".into(),
            weight: 1,
            backend: support::local_backend(dir, pool + 16, false, |_| {}),
            pace: None,
        }],
        plugins: Plugins::named(registry, "generic", "least-loaded", "proportional", None).unwrap(),
        out_dir: dir.join("out"),
        cancel: CancellationToken::new(),
        progress: Arc::new(LogProgress),
    };
    let report = sandfleet_engine::run(spec, items).await.unwrap();
    assert_eq!(report.tasks.ok, tasks, "{}", report.render());
}
