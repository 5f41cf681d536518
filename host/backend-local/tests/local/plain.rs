//! `isolation = "none"`: plain directories and host processes.

use std::time::Duration;

use sandfleet_backend_local::IsolationMode;
use sandfleet_core::{Backend, ErrorKind, ExecRequest, WarmPools};

use crate::common::{
    Fixture, claim, is_running, request, sandbox_dirs, sh, sh_ok, snapshot, template,
};

#[tokio::test]
async fn the_round_trip_works_with_mapped_paths() {
    let fixture = Fixture::new(IsolationMode::None);
    let backend = fixture.backend();
    let preflight = backend.preflight().await;
    assert!(
        preflight
            .warnings
            .iter()
            .any(|w| w.contains("isolation = \"none\"")),
        "{preflight:?}"
    );
    let before = snapshot(&fixture.image_dir());
    let template = template(&backend, "plain").await;
    backend.warm(&template, 1).await.unwrap();
    crate::common::wait_ready(&backend, &template, 1).await;
    let sandbox = claim(&backend, &template).await;
    let root = fixture
        .state_dir()
        .join("runs")
        .join(fixture.run_id.as_str())
        .join("sandboxes")
        .join(&sandbox.id)
        .join("rootfs");

    // The workdir, argv items under it or /tmp, HOME and TMPDIR are mapped.
    let pwd = sh_ok(&backend, &sandbox, "pwd").await;
    assert_eq!(pwd.trim(), root.join("workspace").display().to_string());
    let cat = backend
        .exec(&sandbox, &request(["cat", "/workspace/README.md"]), None)
        .await
        .unwrap();
    assert_eq!(cat.stdout, b"# app\n");
    sh_ok(&backend, &sandbox, "echo t > $TMPDIR/t; echo h > $HOME/h").await;
    assert_eq!(backend.get_file(&sandbox, "/tmp/t").await.unwrap(), b"t\n");
    assert!(root.join("root/h").is_file());

    backend
        .put_file(
            &sandbox,
            "/workspace/a/b/c.sh",
            b"#!/bin/sh\necho ran\n",
            0o700,
        )
        .await
        .unwrap();
    let run = backend
        .exec(&sandbox, &request(["/workspace/a/b/c.sh"]), None)
        .await
        .unwrap();
    assert_eq!(run.stdout, b"ran\n");
    assert_eq!(
        sh_ok(&backend, &sandbox, "stat -c %a a/b/c.sh").await,
        "700\n"
    );
    let error = backend
        .put_file(&sandbox, "/etc/sandfleet-test", b"x", 0o644)
        .await
        .unwrap_err();
    assert!(error.kind() == ErrorKind::Invalid, "{error}");
    assert!(!std::path::Path::new("/etc/sandfleet-test").exists());

    // Timeouts kill the group here too.
    let slow = ExecRequest {
        timeout: Duration::from_millis(500),
        ..request(["sh", "-c", "sleep 300 & echo $!; sleep 300"])
    };
    let result = backend.exec(&sandbox, &slow, None).await.unwrap();
    assert!(result.timed_out);
    let background: i32 = String::from_utf8_lossy(&result.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(!is_running(background));

    // Release kills what the commands left running, by their marker.
    let daemon = sh_ok(&backend, &sandbox, "sleep 300 >/dev/null 2>&1 & echo $!").await;
    let daemon: i32 = daemon.trim().parse().unwrap();
    assert!(is_running(daemon));
    sh(&backend, &sandbox, "echo changed > README.md").await;
    backend.release(&sandbox).await.unwrap();
    assert!(!is_running(daemon));
    assert!(!root.exists());
    assert_eq!(snapshot(&fixture.image_dir()), before);
    backend.unwarm(&template).await.unwrap();
    assert!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).is_empty());
}
