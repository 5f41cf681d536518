//! What a namespaced sandbox can and cannot see or change.

use std::net::TcpListener;

use sandfleet_core::{Backend, TemplateSpec};

use crate::common::{self, claim, sh, sh_ok, snapshot, template};

#[tokio::test]
async fn sandboxes_do_not_see_each_other_or_the_host() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let a = claim(&backend, &template).await;
    let b = claim(&backend, &template).await;

    sh_ok(
        &backend,
        &a,
        "echo a > secret-from-a; echo a > /tmp/secret-from-a; echo a > /root/secret-from-a",
    )
    .await;
    assert_eq!(
        sh_ok(&backend, &a, "cat /workspace/secret-from-a").await,
        "a\n"
    );
    let seen = sh(
        &backend,
        &b,
        "ls /workspace/secret-from-a /tmp/secret-from-a /root/secret-from-a",
    )
    .await;
    assert_ne!(seen.exit_code, 0);
    // Anywhere in B's filesystem (the host's read-only /usr and /proc aside).
    // (Directories of other host users are unreadable even to the sandbox's
    // root, hence the silenced errors.)
    let search = "find / -path /proc -prune -o -path /usr -prune -o -name 'secret-from-*' -print";
    let found = sh(&backend, &b, &format!("{search} 2>/dev/null")).await;
    assert_eq!(String::from_utf8_lossy(&found.stdout), "");
    // The same search in A finds all three, so it can fail.
    let in_a = sh(&backend, &a, &format!("{search} 2>/dev/null | sort")).await;
    assert_eq!(
        String::from_utf8_lossy(&in_a.stdout),
        "/root/secret-from-a\n/tmp/secret-from-a\n/workspace/secret-from-a\n"
    );
    // Nor the host's: the test's state directory is not there.
    let state = fixture.state_dir().display().to_string();
    assert_ne!(sh(&backend, &b, &format!("ls {state}")).await.exit_code, 0);

    // Processes: only the sandbox's own, with its init as pid 1.
    let procs = sh_ok(
        &backend,
        &b,
        "echo /proc/[0-9]*; tr '\\0' ' ' </proc/1/cmdline",
    )
    .await;
    let lines: Vec<&str> = procs.lines().collect();
    assert_eq!(lines[0].split(' ').count(), 2, "{procs}");
    assert!(
        lines[1].starts_with(&format!("sandfleet-sandbox:{}:{}", fixture.run_id, b.id)),
        "{procs}"
    );
    let cmdlines = sh_ok(&backend, &b, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    let test_binary = std::env::args().next().unwrap();
    assert!(!cmdlines.contains(&test_binary), "{cmdlines}");

    // The host's system directories are read-only (the sandbox's /etc is
    // its own, with the host's entries bound read-only).
    let write = sh(
        &backend,
        &a,
        "touch /usr/sandfleet-test; touch /etc/passwd; touch /etc/sandfleet-test",
    )
    .await;
    assert!(!std::path::Path::new("/etc/sandfleet-test").exists());
    let stderr = String::from_utf8_lossy(&write.stderr);
    assert!(
        stderr.contains("'/usr/sandfleet-test': Read-only file system")
            && stderr.contains("cannot touch '/etc/passwd'")
            && !stderr.contains("/etc/sandfleet-test"),
        "{write:?}"
    );
    backend.release(&a).await.unwrap();
    backend.release(&b).await.unwrap();
}

#[tokio::test]
async fn the_network_is_off_unless_the_config_and_template_allow_it() {
    let Some((mut fixture, backend)) = common::namespaced().await else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    let template = template(&backend, "offline").await;
    let offline = claim(&backend, &template).await;
    let interfaces = sh_ok(
        &backend,
        &offline,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!(interfaces, "lo\n");
    let result = backend
        .exec(&offline, &common::request(["bash", "-c", &connect]), None)
        .await
        .unwrap();
    assert_ne!(result.exit_code, 0, "{result:?}");
    backend.release(&offline).await.unwrap();

    // The same probe succeeds with the network allowed, so it can fail.
    fixture.config.network = true;
    let backend = fixture.backend();
    let spec = TemplateSpec {
        network: true,
        ..common::spec(&fixture.run_id, "online")
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    let online = claim(&backend, &template).await;
    let result = backend
        .exec(&online, &common::request(["bash", "-c", &connect]), None)
        .await
        .unwrap();
    assert_eq!(result.stdout, b"connected\n", "{result:?}");
    backend.release(&online).await.unwrap();
}

#[tokio::test]
async fn writes_stay_in_the_sandbox_and_the_image_is_unchanged() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let before = snapshot(&fixture.image_dir());
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    sh_ok(
        &backend,
        &sandbox,
        "echo changed > README.md; rm src/app.py; mkdir new; echo x > new/file",
    )
    .await;
    assert_eq!(
        sh_ok(&backend, &sandbox, "cat README.md; ls src new").await,
        "changed\nnew:\nfile\n\nsrc:\n"
    );
    assert_eq!(snapshot(&fixture.image_dir()), before);
    // A second sandbox starts from the image, not from the first's changes.
    let fresh = claim(&backend, &template).await;
    assert_eq!(
        sh_ok(&backend, &fresh, "cat README.md src/app.py").await,
        "# app\nprint('hello')\n"
    );
    backend.release(&sandbox).await.unwrap();
    backend.release(&fresh).await.unwrap();
    assert_eq!(snapshot(&fixture.image_dir()), before);
}
