//! The live page (`/ui`) in a real browser: headless Chromium opens it with
//! the token in its query, and the page's own script fetches the daemon's
//! endpoints with it and draws what they answer (a lease, a warm pool, a
//! shared pool's session, a batch run with a link to its report, an
//! error), hostile strings as text.

use std::path::Path;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use sandfleet_test_support::chromium;
use serde_json::json;

use crate::{Served, eventually, fleet_file};

/// The token: cargo sets `CARGO_PKG_NAME` for every test, so the daemon
/// reads it from there and no test changes the environment.
const TOKEN: &str = env!("CARGO_PKG_NAME");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_live_page_shows_a_lease_made_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_file(dir.path(), r#"token_env = "CARGO_PKG_NAME""#, "");
    let fleet = std::fs::read_to_string(&config).unwrap();
    let mut text = fleet.clone();
    text.push_str("\n[[shared_pools]]\nname = \"py-tool\"\nimage = \"calc\"\nsize = 2\n");
    std::fs::write(&config, text).unwrap();
    let mut served = Served::start_in(dir, config).await;
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {TOKEN}")).unwrap(),
    );
    served.http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let lease = served
        .acquire(json!({"image": "calc", "run_id": "ui-trainer"}))
        .await;
    // A warm pool and a session on the shared pool, filled.
    let (status, warmed) = served.post("/v1/pools", json!({"images": ["calc"]})).await;
    assert_eq!(status, 202, "{warmed}");
    eventually("the shared pool's sandboxes and the warm pool", || async {
        let (_, shared) = served.get("/v1/shared/py-tool").await;
        let (_, pools) = served.get("/v1/pools").await;
        shared["healthy"] == 2
            && pools["pools"]
                .as_array()
                .is_some_and(|pools| pools.iter().all(|p| p["ready"] == p["desired"]))
    })
    .await;
    let (status, session) = served.post("/v1/shared/py-tool/sessions", json!({})).await;
    assert_eq!(status, 201, "{session}");
    // A batch run of one task, finished, whose report the page links to.
    let dataset = served.dir.path().join("one.jsonl");
    std::fs::write(
        &dataset,
        "{\"id\": \"t-ok\", \"image\": \"calc\", \"test\": \"true\"}\n",
    )
    .unwrap();
    let quickstart =
        sandfleet_test_support::quickstart::repo().join("examples/quickstart/tasks.jsonl");
    let one = fleet.replace(
        &format!("dataset = \"{}\"", quickstart.display()),
        &format!("dataset = \"{}\"", dataset.display()),
    );
    let (status, run) = served
        .post(
            "/v1/runs",
            json!({"config": one, "base_dir": served.dir.path(), "run_id": "ui-batch"}),
        )
        .await;
    assert_eq!(status, 202, "{run}");
    eventually("the batch run to finish", || async {
        served.get("/v1/runs/ui-batch").await.1["state"] == "finished"
    })
    .await;
    // An error whose message carries markup, which the page must show as
    // text.
    let (status, _) = served
        .get("/v1/leases/l-%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E")
        .await;
    assert_eq!(status, 404);

    let url = served.url(&format!("/ui?token={TOKEN}"));
    let opened = url.clone();
    let dom = tokio::task::spawn_blocking(move || chromium::dump_dom(&opened))
        .await
        .unwrap();
    assert!(
        dom.contains(r#"data-loaded="true""#),
        "the page never finished a refresh: {dom}"
    );
    assert!(dom.contains(&lease.id), "lease {} in {dom}", lease.id);
    assert!(dom.contains("ui-trainer"), "{dom}");
    assert!(dom.contains("1 pool, 1 session open"), "{dom}");
    assert!(
        dom.contains(session["sandbox"].as_str().unwrap()),
        "the session's sandbox in {dom}"
    );
    assert!(
        dom.contains(&served.run_id()),
        "the daemon's run id in {dom}"
    );
    assert!(
        dom.contains("lease `l-&lt;img src=x onerror=alert(1)&gt;` is not live"),
        "the error, as text, in {dom}"
    );
    assert!(!dom.contains("<img"), "markup from an error ran: {dom}");
    // The token is in the page only where a link needs it: the run's
    // report, which a browser opens without the header.
    let report = format!("/v1/runs/ui-batch/report.html?token={TOKEN}");
    assert!(
        dom.contains(&format!("href=\"{}\"", served.url(&report))),
        "{dom}"
    );
    assert_eq!(
        dom.matches(TOKEN).count(),
        1,
        "the token is in the page: {dom}"
    );
    let opened = reqwest::get(served.url(&report)).await.unwrap();
    assert_eq!(opened.status().as_u16(), 200, "{}", served.url(&report));
    assert_eq!(opened.headers()["content-type"], "text/html; charset=utf-8");
    assert!(opened.text().await.unwrap().contains("t-ok"));

    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&screenshots).unwrap();
    let shot = screenshots.join("daemon-ui.png");
    let path = shot.clone();
    tokio::task::spawn_blocking(move || chromium::screenshot(&url, &path, (1400, 1300)))
        .await
        .unwrap();
    println!("screenshot of the daemon's /ui: {}", shot.display());

    let session = session["id"].as_str().unwrap();
    assert_eq!(served.delete(&format!("/v1/sessions/{session}")).await, 204);
    served.release(&lease.id).await;
    served.stop().await;
}
