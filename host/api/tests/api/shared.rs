//! Shared pools over the daemon's HTTP API: sessions spread over K
//! sandboxes and keep their state there; a killed sandbox is evicted after
//! 3 failed probes and healed in its slot, its sessions lost; killing every
//! sandbox heals them no faster than `[fleet] create_rate` allows; on
//! OpenSandbox, a pool's sandboxes come from its image's server pool, and
//! from direct creates when that is full.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use reqwest::Method;
use sandfleet_emulator_opensandbox::Emulator;
use sandfleet_test_support::processes_running;
use serde_json::{Value, json};

use crate::{
    Served, eventually, fleet_file, fleet_file_on, online, opensandbox_cluster,
    opensandbox_emulator,
};

/// A daemon on the local backend with `[fleet] create_rate = rate` and
/// these `[[shared_pools]]`.
async fn serve_pools(rate: f64, pools: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file(dir.path(), "", "");
    serve_pools_in(dir, path, rate, pools).await
}

/// A daemon on the fleet file at `path` in `dir`, with `[fleet] create_rate
/// = rate` and these `[[shared_pools]]` added.
async fn serve_pools_in(
    dir: tempfile::TempDir,
    path: std::path::PathBuf,
    rate: f64,
    pools: &str,
) -> Served {
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("[fleet]\n", &format!("[fleet]\ncreate_rate = {rate}\n"));
    std::fs::write(&path, format!("{text}\n{pools}")).unwrap();
    Served::start_in(dir, path).await
}

fn pool(name: &str, size: u32, max: u32, probe_interval: &str) -> String {
    format!(
        "[[shared_pools]]\nname = \"{name}\"\nimage = \"calc\"\nsize = {size}\nmax_sessions_per_sandbox = {max}\nprobe_interval = \"{probe_interval}\"\n"
    )
}

impl Served {
    async fn pool(&self, name: &str) -> Value {
        let (status, view) = self.get(&format!("/v1/shared/{name}")).await;
        assert_eq!(status, 200, "{view}");
        view
    }

    async fn wait_healthy(&self, name: &str, size: u64) -> Value {
        eventually(&format!("shared pool {name} to be healthy"), || async {
            self.pool(name).await["healthy"] == size
        })
        .await;
        self.pool(name).await
    }

    async fn open(&self, name: &str) -> (String, String) {
        let (status, session) = self
            .post(&format!("/v1/shared/{name}/sessions"), json!({}))
            .await;
        assert_eq!(status, 201, "{session}");
        assert_eq!(session["pool"], name);
        (
            session["id"].as_str().unwrap().to_string(),
            session["sandbox"].as_str().unwrap().to_string(),
        )
    }

    async fn session_exec(&self, id: &str, command: &str) -> (u16, Value) {
        self.post(
            &format!("/v1/sessions/{id}/exec"),
            json!({ "command": command }),
        )
        .await
    }

    /// SIGKILLs the init of sandbox `id`, and with it everything in its pid
    /// namespace.
    pub(crate) fn kill_sandbox(&self, id: &str) {
        let found = processes_running(&format!("sandfleet-sandbox:{}:{id}", self.run_id()));
        assert!(!found.is_empty(), "no init process of sandbox {id}");
        for process in found {
            let pid = process.split(':').next().unwrap();
            let killed = std::process::Command::new("kill")
                .args(["-KILL", pid])
                .status()
                .unwrap();
            assert!(killed.success());
        }
    }
}

fn slot_sandboxes(view: &Value) -> Vec<String> {
    view["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|slot| slot["sandbox"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn check_error(status: u16, body: &Value, want: u16, kind: &str, says: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["error"]["kind"], kind, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message} does not say {says}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_spread_over_the_pool_keep_their_state_and_close() {
    let pools = format!(
        "{}{}[[shared_pools]]\nname = \"idle\"\nimage = \"calc\"\nsize = 1\nidle_timeout = \"300ms\"\n",
        pool("py", 4, 64, "30s"),
        pool("tiny", 1, 2, "30s")
    );
    // One create a second: filling 6 sandboxes takes 5 s, and the daemon
    // answers long before.
    let served = serve_pools(1.0, &pools).await;
    let first = served.pool("py").await;
    assert_eq!(
        (
            first["size"].as_u64(),
            first["max_sessions_per_sandbox"].as_u64()
        ),
        (Some(4), Some(64))
    );
    assert!(
        first["healthy"].as_u64().unwrap() < 4,
        "the pool filled before the daemon served: {first}"
    );

    let view = served.wait_healthy("py", 4).await;
    let sandboxes = slot_sandboxes(&view);
    let sessions = join_all((0..64).map(|_| served.open("py"))).await;
    let mut per_sandbox: BTreeMap<String, usize> = BTreeMap::new();
    for (_, sandbox) in &sessions {
        assert!(sandboxes.contains(sandbox), "{sandbox} is not in the pool");
        *per_sandbox.entry(sandbox.clone()).or_default() += 1;
    }
    let (least, most) = (
        per_sandbox.values().min().unwrap(),
        per_sandbox.values().max().unwrap(),
    );
    assert_eq!(per_sandbox.len(), 4, "{per_sandbox:?}");
    assert!(most - least <= 1, "not spread within one: {per_sandbox:?}");
    let view = served.pool("py").await;
    assert_eq!(view["sessions_open"], 64);
    for slot in view["slots"].as_array().unwrap() {
        let sandbox = slot["sandbox"].as_str().unwrap();
        assert_eq!(
            slot["sessions"].as_u64().unwrap() as usize,
            per_sandbox[sandbox],
            "{view}"
        );
    }

    // Each session writes a file in its sandbox; on its next call it is
    // there, and the commands ran in the pinned sandbox.
    join_all(sessions.iter().map(|(id, sandbox)| {
        let served = &served;
        async move {
            let (status, wrote) = served
                .session_exec(id, &format!("echo {id} > /workspace/state-{id}; hostname"))
                .await;
            assert_eq!(status, 200, "{wrote}");
            assert_eq!(wrote["stdout"].as_str().unwrap().trim(), sandbox.as_str());
            let (status, read) = served
                .session_exec(id, &format!("cat /workspace/state-{id}"))
                .await;
            assert_eq!(status, 200, "{read}");
            assert_eq!(read["stdout"], format!("{id}\n"));
        }
    }))
    .await;
    // A session on another sandbox does not see it.
    let (id, sandbox) = &sessions[0];
    let elsewhere = sessions.iter().find(|(_, s)| s != sandbox).unwrap();
    let (_, seen) = served
        .session_exec(
            &elsewhere.0,
            &format!("test -e /workspace/state-{id}; echo $?"),
        )
        .await;
    assert_eq!(seen["stdout"], "1\n");

    // Closing: gone from its sandbox's count, its calls 404.
    assert_eq!(served.delete(&format!("/v1/sessions/{id}")).await, 204);
    let (status, body) = served.session_exec(id, "true").await;
    check_error(
        status,
        &body,
        404,
        "not_found",
        &format!("session `{id}` is not open"),
    );
    assert_eq!(served.delete(&format!("/v1/sessions/{id}")).await, 404);
    let view = served.pool("py").await;
    assert_eq!(view["sessions_open"], 63);
    assert_eq!(view["sessions_opened"], 64);
    let slot = view["slots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sandbox"] == sandbox.as_str())
        .unwrap();
    assert_eq!(
        slot["sessions"].as_u64().unwrap() as usize,
        per_sandbox[sandbox] - 1
    );

    // A full pool says so.
    served.wait_healthy("tiny", 1).await;
    served.open("tiny").await;
    served.open("tiny").await;
    let (status, body) = served.post("/v1/shared/tiny/sessions", json!({})).await;
    check_error(
        status,
        &body,
        429,
        "pool_full",
        "shared pool `tiny` is full",
    );

    // Bad input: an unknown pool or session is named.
    let (status, body) = served.post("/v1/shared/nope/sessions", json!({})).await;
    check_error(
        status,
        &body,
        404,
        "not_found",
        "no shared pool named `nope` (configured: py, tiny, idle)",
    );
    let (status, body) = served.get("/v1/shared/nope").await;
    check_error(status, &body, 404, "not_found", "`nope`");
    let (status, body) = served.session_exec("s-0000", "true").await;
    check_error(status, &body, 404, "not_found", "session `s-0000`");

    // An idle session is dropped by the sweep.
    served.wait_healthy("idle", 1).await;
    let (idle, _) = served.open("idle").await;
    eventually("the idle session to be dropped", || async {
        served.pool("idle").await["sessions_expired"] == 1
    })
    .await;
    let (status, body) = served.session_exec(&idle, "true").await;
    check_error(
        status,
        &body,
        404,
        "not_found",
        &format!("session `{idle}`"),
    );
    assert_eq!(served.pool("idle").await["sessions_open"], 0);

    let metrics = served.metrics().await;
    for line in [
        "sandfleet_shared_sessions_open{pool=\"py\"} 63",
        "sandfleet_shared_sessions_opened_total{pool=\"py\"} 64",
        "sandfleet_shared_sessions_lost{pool=\"py\"} 0",
        "sandfleet_shared_sessions_expired_total{pool=\"idle\"} 1",
        "sandfleet_shared_sandboxes_healthy{pool=\"py\"} 4",
    ] {
        assert!(metrics.contains(line), "no `{line}` in\n{metrics}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_sandbox_is_evicted_after_three_failed_probes_and_healed_in_its_slot() {
    let served = serve_pools(20.0, &pool("py", 4, 64, "400ms")).await;
    let before = slot_sandboxes(&served.wait_healthy("py", 4).await);
    let sessions = join_all((0..16).map(|_| served.open("py"))).await;
    for (id, _) in &sessions {
        let (status, wrote) = served
            .session_exec(id, &format!("echo kept > /workspace/state-{id}"))
            .await;
        assert_eq!(status, 200, "{wrote}");
    }

    let victim = before[0].clone();
    let on_victim = sessions.iter().filter(|(_, s)| *s == victim).count() as u64;
    assert!(on_victim > 0, "no session on {victim}: {sessions:?}");
    let view = served.pool("py").await;
    assert_eq!(
        (
            view["sessions_open"].as_u64(),
            view["sessions_lost"].as_u64()
        ),
        (Some(16), Some(0)),
        "{view}"
    );
    served.kill_sandbox(&victim);
    // Two failed probes leave it in its slot (unhealthy: no new session
    // lands there); the third evicts it.
    eventually("two failed probes of the killed sandbox", || async {
        let view = served.pool("py").await;
        view["slots"][0]["sandbox"] == victim.as_str() && view["slots"][0]["failed_probes"] == 2
    })
    .await;
    let view = served.pool("py").await;
    assert_eq!(
        (
            view["evictions"].as_u64(),
            view["slots"][0]["healthy"].as_bool()
        ),
        (Some(0), Some(false)),
        "{view}"
    );
    let view = served.wait_healthy("py", 4).await;
    let after = slot_sandboxes(&view);
    assert_ne!(after[0], victim, "slot 0 was not healed: {view}");
    assert_eq!(
        after[1..],
        before[1..],
        "only the killed sandbox is replaced: {view}"
    );
    assert_eq!(
        (view["evictions"].as_u64(), view["heals"].as_u64()),
        (Some(1), Some(1)),
        "{view}"
    );
    assert!(view["probes_failed"].as_u64().unwrap() >= 3, "{view}");
    // Its sessions no longer count as open: they are lost.
    assert_eq!(
        (
            view["sessions_open"].as_u64(),
            view["sessions_lost"].as_u64()
        ),
        (Some(16 - on_victim), Some(on_victim)),
        "{view}"
    );
    let metrics = served.metrics().await;
    for line in [
        format!(
            "sandfleet_shared_sessions_open{{pool=\"py\"}} {}",
            16 - on_victim
        ),
        format!("sandfleet_shared_sessions_lost{{pool=\"py\"}} {on_victim}"),
    ] {
        assert!(metrics.contains(&line), "no `{line}` in\n{metrics}");
    }
    let documented = sandfleet_api::openapi();
    assert!(
        documented["components"]["schemas"]["SharedPoolView"]["properties"]["sessions_lost"]
            .is_object(),
        "sessions_lost is not in the OpenAPI document"
    );
    let heal = &view["recent_heals"][0];
    assert_eq!(
        (
            heal["slot"].as_u64(),
            heal["evicted"].as_str(),
            heal["sandbox"].as_str()
        ),
        (Some(0), Some(victim.as_str()), Some(after[0].as_str()))
    );

    // Its sessions are lost, saying so; the others kept their state.
    for (id, sandbox) in &sessions {
        let (status, body) = served
            .session_exec(id, &format!("cat /workspace/state-{id}"))
            .await;
        if *sandbox == victim {
            check_error(
                status,
                &body,
                410,
                "session_lost",
                &format!("session `{id}`: its sandbox `{victim}`"),
            );
        } else {
            assert_eq!(
                (status, body["stdout"].as_str()),
                (200, Some("kept\n")),
                "{body}"
            );
        }
    }
    // Closing a lost session takes it off the lost count, once.
    for (id, _) in sessions.iter().filter(|(_, s)| *s == victim) {
        assert_eq!(served.delete(&format!("/v1/sessions/{id}")).await, 204);
        assert_eq!(served.delete(&format!("/v1/sessions/{id}")).await, 404);
    }
    let view = served.pool("py").await;
    assert_eq!(
        (
            view["sessions_open"].as_u64(),
            view["sessions_lost"].as_u64()
        ),
        (Some(16 - on_victim), Some(0)),
        "{view}"
    );
    // New sessions land on the healed sandbox, the least loaded.
    for _ in 0..4 {
        assert_eq!(served.open("py").await.1, after[0]);
    }
    let metrics = served.metrics().await;
    let open_now = format!(
        "sandfleet_shared_sessions_open{{pool=\"py\"}} {}",
        16 - on_victim + 4
    );
    for line in [
        open_now.as_str(),
        "sandfleet_shared_sessions_lost{pool=\"py\"} 0",
        "sandfleet_shared_evictions_total{pool=\"py\"} 1",
        "sandfleet_shared_heals_total{pool=\"py\"} 1",
        "sandfleet_shared_sessions_opened_total{pool=\"py\"} 20",
    ] {
        assert!(metrics.contains(line), "no `{line}` in\n{metrics}");
    }
    assert!(
        metrics.contains("sandfleet_shared_probes_failed_total{pool=\"py\"} "),
        "{metrics}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_every_sandbox_heals_them_no_faster_than_the_create_pacer() {
    const RATE: f64 = 4.0;
    let interval_ms = (1000.0 / RATE) as u64;
    let served = serve_pools(RATE, &pool("py", 4, 64, "300ms")).await;
    let before = slot_sandboxes(&served.wait_healthy("py", 4).await);
    for sandbox in &before {
        served.kill_sandbox(sandbox);
    }
    eventually("all four slots to be healed", || async {
        let view = served.pool("py").await;
        view["heals"] == 4 && view["healthy"] == 4
    })
    .await;
    let view = served.pool("py").await;
    assert_eq!(view["evictions"], 4, "{view}");
    let after = slot_sandboxes(&view);
    assert!(after.iter().all(|s| !before.contains(s)), "{view}");
    let heals = view["recent_heals"].as_array().unwrap();
    let began = heals
        .iter()
        .map(|h| h["requested_at_ms"].as_u64().unwrap())
        .min()
        .unwrap();
    let mut healed: Vec<u64> = heals
        .iter()
        .map(|h| h["healed_at_ms"].as_u64().unwrap())
        .collect();
    healed.sort_unstable();
    // The pacer starts the i-th create at least i intervals after the
    // first heal began (1 ms for the timestamps' rounding).
    for (i, at) in healed.iter().enumerate() {
        assert!(
            at - began + 1 >= i as u64 * interval_ms,
            "heal {i} done {} ms after the first eviction, sooner than the pacer's {} ms: {healed:?} from {began}",
            at - began,
            i as u64 * interval_ms
        );
    }
    // The evicted sandboxes are released; stopping removes the rest.
    eventually("the evicted sandboxes to be released", || async {
        served.sandboxes() == 4
    })
    .await;
    let dir = served.state_dir();
    let run_id = served.run_id();
    served.stop().await;
    assert_eq!(sandfleet_test_support::sandbox_dirs(&dir, &run_id), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_pool_of_an_image_no_cluster_makes_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file(dir.path(), "", "");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n[[shared_pools]]\nname = \"ghost\"\nimage = \"nosuch\"\nsize = 2\n"),
    )
    .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let refused = sandfleet_api::Daemon::start(sandfleet_api::Options {
        config: path.clone(),
        listen: Some("127.0.0.1:0".parse().unwrap()),
    })
    .await
    .err()
    .expect("a pool of an unknown image was served");
    let message = format!("{refused:#}");
    assert!(
        message.starts_with(&format!(
            "{}: shared pool `ghost`: image `nosuch`: no cluster can make it",
            path.display()
        )),
        "{message}"
    );
}

/// `method path` on `emulator`'s lifecycle API, as another client of the
/// server calls it: the status and the JSON answer.
async fn emulator_call(
    served: &Served,
    emulator: &Emulator,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = served
        .http
        .request(method, format!("{}/v1{path}", emulator.base_url()))
        .header("OPEN-SANDBOX-API-KEY", emulator.api_key());
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_opensandbox_shared_pool_fills_from_its_images_server_pool_and_heals_directly_when_it_is_full()
 {
    // The server pool holds two sandboxes: the shared pool's two.
    let emulator = opensandbox_emulator("pool-max=2").await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = opensandbox_cluster(&emulator, r#"pools = { calc = "py-pool" }"#);
    let path = fleet_file_on(dir.path(), "", "", &cluster);
    online(&path);
    let served = serve_pools_in(dir, path, 20.0, &pool("py", 2, 8, "2s")).await;
    let before = slot_sandboxes(&served.wait_healthy("py", 2).await);
    let pool_refs = emulator.pool_refs();
    for sandbox in &before {
        assert_eq!(
            pool_refs[sandbox].as_deref(),
            Some("py-pool"),
            "{pool_refs:?}"
        );
    }
    let (session, sandbox) = served.open("py").await;
    assert_eq!(sandbox, before[0], "not on the least-loaded, lowest slot");
    let (status, ran) = served.session_exec(&session, "echo hi").await;
    assert_eq!(
        (status, ran["stdout"].as_str()),
        (200, Some("hi\n")),
        "{ran}"
    );

    // Another client of the server deletes slot 0's sandbox and takes its
    // place in the server pool, so the pool is at its max when the slot
    // heals. (The slot is evicted only after three failed probes two
    // seconds apart, at least 4 s from now; a create takes under one.)
    let (status, body) = emulator_call(
        &served,
        &emulator,
        Method::DELETE,
        &format!("/sandboxes/{}", before[0]),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let (status, taken) = emulator_call(
        &served,
        &emulator,
        Method::POST,
        "/sandboxes",
        Some(json!({
            "image": {"uri": "calc"},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "extensions": {"poolRef": "py-pool"},
        })),
    )
    .await;
    assert_eq!(status, 202, "{taken}");
    let taken = taken["id"].as_str().unwrap().to_string();
    assert_eq!(
        served.pool("py").await["evictions"],
        0,
        "slot 0 was evicted before the server pool was full again"
    );

    eventually("slot 0 to be healed", || async {
        let view = served.pool("py").await;
        view["heals"] == 1 && view["healthy"] == 2
    })
    .await;
    let view = served.pool("py").await;
    let after = slot_sandboxes(&view);
    assert_ne!(after[0], before[0], "{view}");
    assert_eq!(after[1], before[1], "{view}");
    let pool_refs = emulator.pool_refs();
    assert_eq!(
        pool_refs[&after[0]], None,
        "not a direct create: {pool_refs:?}"
    );
    assert_eq!(pool_refs[&before[1]].as_deref(), Some("py-pool"));
    assert_eq!(pool_refs[&taken].as_deref(), Some("py-pool"));
    // The first session went with its sandbox; a new one runs on the
    // directly created sandbox.
    assert_eq!(
        (
            view["sessions_open"].as_u64(),
            view["sessions_lost"].as_u64()
        ),
        (Some(0), Some(1)),
        "{view}"
    );
    let (status, body) = served.session_exec(&session, "echo hi").await;
    check_error(status, &body, 410, "session_lost", &before[0]);
    let (healed, sandbox) = served.open("py").await;
    assert_eq!(sandbox, after[0]);
    let (status, ran) = served.session_exec(&healed, "echo healed").await;
    assert_eq!(
        (status, ran["stdout"].as_str()),
        (200, Some("healed\n")),
        "{ran}"
    );

    served.stop().await;
    // The daemon released its sandboxes; the other client's is left.
    assert_eq!(
        emulator.pool_refs().into_keys().collect::<Vec<_>>(),
        vec![taken]
    );
    emulator.shutdown().await;
}
