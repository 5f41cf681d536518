//! Shared pools against one sandbox per session, side by side in one run,
//! on the local backend with the quickstart's `calc` image: `SESSIONS`
//! concurrent clients each open a session, run `EXECS` × `true` in it and
//! close it —
//!
//! * shared: sessions on a pool of K sandboxes (`POST /v1/shared/bench/
//!   sessions`, `POST /v1/sessions/{id}/exec`, `DELETE`), the pool filled
//!   once before;
//! * leases: a lease each (`POST /v1/leases`, `…/exec`, `DELETE`), a
//!   sandbox made for every one.
//!
//! Opens, execs and closes run as three phases (every client finishes one
//! before any starts the next), so each has its own rate.
//!
//! `cargo bench -p sandfleet-api --bench shared_pools`; scale with
//! `SHARED_BENCH_SESSIONS` (256), `SHARED_BENCH_K` (8), `SHARED_BENCH_EXECS`
//! (4).

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sandfleet_api::{Daemon, Options};
use serde_json::{Value, json};

mod support;

use support::knob;

fn fleet_file(dir: &Path, sessions: usize, k: usize) -> std::path::PathBuf {
    let per_sandbox = sessions.div_ceil(k);
    let pool = format!(
        r#"[[shared_pools]]
name = "bench"
image = "calc"
size = {k}
max_sessions_per_sandbox = {per_sandbox}
probe_interval = "10s"
"#
    );
    support::fleet_file(dir, sessions + k + 16, &pool)
}

/// How one way of serving the workload went.
struct Measured {
    sandboxes: usize,
    fill: Duration,
    open: Duration,
    exec: Duration,
    close: Duration,
}

async fn post(http: &reqwest::Client, url: String, body: Value, want: u16) -> Value {
    let response = http.post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), want);
    response.json().await.unwrap()
}

/// The workload on `base`: `open` makes a session or lease and answers its
/// exec path and its delete path.
async fn workload(
    http: &reqwest::Client,
    base: &str,
    sessions: usize,
    execs: usize,
    shared: bool,
) -> (Duration, Duration, Duration, usize) {
    let started = Instant::now();
    let opened = join_all((0..sessions).map(|_| async {
        if shared {
            let session = post(
                http,
                format!("{base}/v1/shared/bench/sessions"),
                json!({}),
                201,
            )
            .await;
            format!("/v1/sessions/{}", session["id"].as_str().unwrap())
        } else {
            let lease = post(
                http,
                format!("{base}/v1/leases"),
                json!({"image": "calc"}),
                201,
            )
            .await;
            format!("/v1/leases/{}", lease["id"].as_str().unwrap())
        }
    }))
    .await;
    let open = started.elapsed();
    let live = std::collections::HashSet::<String>::from_iter(opened.iter().cloned()).len();
    assert_eq!(live, sessions);
    let started = Instant::now();
    join_all(opened.iter().map(|path| async move {
        for _ in 0..execs {
            let ran = post(
                http,
                format!("{base}{path}/exec"),
                json!({"argv": ["true"]}),
                200,
            )
            .await;
            assert_eq!(ran["exit_code"], 0);
        }
    }))
    .await;
    let exec = started.elapsed();
    let started = Instant::now();
    join_all(opened.iter().map(|path| async move {
        let deleted = http.delete(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(deleted.status().as_u16(), 204);
    }))
    .await;
    (open, exec, started.elapsed(), live)
}

async fn measure(sessions: usize, k: usize, execs: usize, shared: bool) -> Measured {
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let daemon = Daemon::start(Options {
        config: fleet_file(dir.path(), sessions, k),
        listen: Some("127.0.0.1:0".parse().unwrap()),
    })
    .await
    .unwrap();
    let base = format!("http://{}", daemon.addr());
    // Both daemons fill the pool and wait for it.
    loop {
        let pool: Value = http
            .get(format!("{base}/v1/shared/bench"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pool["healthy"] == k {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "{pool}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fill = started.elapsed();
    let state = dir.path().join("state");
    let run_id = daemon.run_id().to_string();
    let before = sandfleet_test_support::sandbox_dirs(&state, &run_id);
    let (open, exec, close, live) = workload(&http, &base, sessions, execs, shared).await;
    let made = if shared { 0 } else { live };
    assert!(sandfleet_test_support::sandbox_dirs(&state, &run_id) <= before + made);
    daemon.stop();
    daemon.wait().await.unwrap();
    Measured {
        sandboxes: if shared { k } else { live },
        fill,
        open,
        exec,
        close,
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sessions = knob("SHARED_BENCH_SESSIONS", 256);
        let k = knob("SHARED_BENCH_K", 8);
        let execs = knob("SHARED_BENCH_EXECS", 4);
        println!(
            "{sessions} concurrent sessions × {execs} `true` each; shared pool of K = {k} vs a lease (sandbox) per session"
        );
        println!(
            "{:<22} {:>9} {:>10} {:>12} {:>12} {:>10} {:>10}",
            "", "sandboxes", "fill s", "opened /s", "execs /s", "close s", "wall s"
        );
        for (name, shared) in [("shared (K sandboxes)", true), ("lease per session", false)] {
            let m = measure(sessions, k, execs, shared).await;
            // The lease daemon fills the same pool, unused, so both
            // workloads start from the same machine state.
            let fill = if shared { m.fill } else { Duration::ZERO };
            let wall = fill + m.open + m.exec + m.close;
            println!(
                "{name:<22} {:>9} {:>10.2} {:>12.0} {:>12.0} {:>10.2} {:>10.2}",
                m.sandboxes,
                fill.as_secs_f64(),
                sessions as f64 / m.open.as_secs_f64(),
                (sessions * execs) as f64 / m.exec.as_secs_f64(),
                m.close.as_secs_f64(),
                wall.as_secs_f64(),
            );
        }
    });
}
