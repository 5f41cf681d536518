//! Templates, warm pools, claims and releases.

use std::time::{Duration, Instant};

use sandfleet_core::{Backend, BackendError, ErrorKind, PoolStatus, TemplateSpec, WarmPools};

use crate::common::{self, claim, sandbox_dirs, sh_ok, template, wait_ready};

#[tokio::test]
async fn warm_claim_exec_release_round_trip() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "py").await;
    backend.warm(&template, 2).await.unwrap();
    wait_ready(&backend, &template, 2).await;

    let sandbox = claim(&backend, &template).await;
    assert_eq!(sandbox.cluster, "local");
    assert_eq!(sandbox.template, "py");
    assert!(sandbox.id.starts_with("py-"), "{}", sandbox.id);
    // The pool refills behind the claim.
    wait_ready(&backend, &template, 2).await;
    assert_eq!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).len(), 3);

    assert_eq!(
        sh_ok(&backend, &sandbox, "pwd; hostname; cat README.md").await,
        format!("/workspace\n{}\n# app\n", sandbox.id)
    );
    backend
        .renew(&sandbox, Duration::from_secs(60))
        .await
        .unwrap();

    backend.release(&sandbox).await.unwrap();
    backend.release(&sandbox).await.unwrap();
    assert_eq!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).len(), 2);
    let error = backend
        .exec(&sandbox, &common::request(["true"]), None)
        .await
        .unwrap_err();
    assert!(error.kind() == ErrorKind::NotFound, "{error}");
    let error = backend
        .renew(&sandbox, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(error.kind() == ErrorKind::NotFound, "{error}");

    backend.unwarm(&template).await.unwrap();
    backend.unwarm(&template).await.unwrap();
    assert_eq!(
        backend.pool_status(&template).await.unwrap(),
        PoolStatus {
            desired: 0,
            ready: 0
        }
    );
    assert!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).is_empty());

    // No pool: the claim makes a sandbox (cold).
    let cold = claim(&backend, &template).await;
    assert_eq!(
        sh_ok(&backend, &cold, "cat src/app.py").await,
        "print('hello')\n"
    );
    assert_eq!(
        backend.pool_status(&template).await.unwrap(),
        PoolStatus {
            desired: 0,
            ready: 0
        }
    );
    let owned = backend.list_owned(&fixture.run_id).await.unwrap();
    assert_eq!(owned.templates, ["py"]);
    assert!(owned.pools.is_empty());
    assert_eq!(owned.sandboxes, std::slice::from_ref(&cold.id));
    backend.release(&cold).await.unwrap();
}

#[tokio::test]
async fn pools_shrink_and_respect_max_sandboxes() {
    let Some((mut fixture, _)) = common::namespaced().await else {
        return;
    };
    fixture.config.max_sandboxes = Some(2);
    let backend = fixture.backend();
    let template = template(&backend, "small").await;
    let error = backend.warm(&template, 3).await.unwrap_err();
    assert!(error.to_string().contains("max_sandboxes = 2"), "{error}");

    backend.warm(&template, 2).await.unwrap();
    wait_ready(&backend, &template, 2).await;
    backend.warm(&template, 1).await.unwrap();
    assert_eq!(
        backend.pool_status(&template).await.unwrap(),
        PoolStatus {
            desired: 1,
            ready: 1
        }
    );

    // Two claimed from the pool: every slot is taken, so the pool stays
    // empty and a cold claim times out, naming the limit.
    let first = claim(&backend, &template).await;
    wait_ready(&backend, &template, 1).await;
    let second = claim(&backend, &template).await;
    assert_eq!(
        backend.pool_status(&template).await.unwrap(),
        PoolStatus {
            desired: 1,
            ready: 0
        }
    );
    let error = backend
        .claim(
            &template,
            &backend.labels(),
            Instant::now() + Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert!(
        error.kind() == ErrorKind::Timeout && error.to_string().contains("max_sandboxes"),
        "{error}"
    );
    // A release frees a slot, and the pool takes it.
    backend.release(&first).await.unwrap();
    wait_ready(&backend, &template, 1).await;
    backend.release(&second).await.unwrap();
    backend.unwarm(&template).await.unwrap();
}

#[tokio::test]
async fn templates_are_checked_against_the_config() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let unknown = TemplateSpec {
        image: "nope".into(),
        ..common::spec(&fixture.run_id, "t")
    };
    let error = backend.ensure_template(&unknown).await.unwrap_err();
    assert!(error.kind() == ErrorKind::NotFound, "{error}");
    assert!(
        error.to_string().contains("image `nope`") && error.to_string().contains("app"),
        "{error}"
    );

    let networked = TemplateSpec {
        network: true,
        ..common::spec(&fixture.run_id, "t")
    };
    let error = backend.ensure_template(&networked).await.unwrap_err();
    assert!(error.to_string().contains("network = true"), "{error}");

    let first = template(&backend, "t").await;
    assert_eq!(template(&backend, "t").await, first);
    let changed = TemplateSpec {
        env: [("A".into(), "1".into())].into(),
        ..common::spec(&fixture.run_id, "t")
    };
    fn kind<T: std::fmt::Debug>(result: Result<T, BackendError>) -> ErrorKind {
        result.unwrap_err().kind()
    }
    assert_eq!(
        kind(backend.ensure_template(&changed).await),
        ErrorKind::Invalid
    );
    // Labels every backend accepts, and the run among them.
    let unlabelled = TemplateSpec {
        labels: Default::default(),
        ..common::spec(&fixture.run_id, "u")
    };
    let error = backend.ensure_template(&unlabelled).await.unwrap_err();
    assert!(error.to_string().contains("sandfleet.io/run-id"), "{error}");
    let badly_labelled = TemplateSpec {
        labels: [("sandfleet.io/run-id".into(), "_bad".into())].into(),
        ..common::spec(&fixture.run_id, "u")
    };
    assert_eq!(
        kind(backend.ensure_template(&badly_labelled).await),
        ErrorKind::Invalid
    );

    let missing = sandfleet_core::TemplateRef {
        name: "never".into(),
        image: "app".into(),
        run_id: fixture.run_id.clone(),
    };
    assert_eq!(
        kind(backend.pool_status(&missing).await),
        ErrorKind::NotFound
    );
    assert_eq!(kind(backend.warm(&missing, 1).await), ErrorKind::NotFound);
    backend.unwarm(&missing).await.unwrap();
    assert_eq!(
        backend.list_owned(&fixture.run_id).await.unwrap().templates,
        ["t"]
    );
}

#[tokio::test]
async fn preflight_and_capacity_describe_this_machine() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let preflight = backend.preflight().await;
    assert!(preflight.failures.is_empty(), "{preflight:?}");
    assert!(preflight.warnings.is_empty(), "{preflight:?}");
    let capacity = backend.capacity().await.unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(capacity.nodes, Some(1));
    assert_eq!(capacity.cpu_milli, Some(cores * 1000));
    assert_eq!(capacity.sandbox_slots.map(u64::from), Some(4 * cores));
    assert!(capacity.memory_mib > Some(0) && capacity.disk_mib_per_node > Some(0));
}

#[tokio::test]
async fn a_sandbox_that_cannot_start_fails_cleanly() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    // What the template's sandboxes are made from (a snapshot, as root).
    let image = common::template_image_dir(&fixture, "t");
    std::fs::remove_dir_all(&image).unwrap();
    let error = backend
        .claim(
            &template,
            &backend.labels(),
            Instant::now() + common::PATIENCE,
        )
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(error.kind() == ErrorKind::Failed, "{message}");
    // The helper's own words: the image it could not mount.
    assert!(
        message.contains("setting it up failed") && message.contains(&image.display().to_string()),
        "{message}"
    );
    assert!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).is_empty());
    assert!(common::run_processes(&fixture).is_empty());
}

#[tokio::test]
async fn a_cancelled_claim_leaves_no_process_running() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let labels = backend.labels();
    // Cancelled at several points of a sandbox's making.
    let mut cancelled = 0;
    for delay_ms in [0, 1, 2, 4, 8, 16, 32] {
        let claim = backend.claim(&template, &labels, Instant::now() + common::PATIENCE);
        match tokio::time::timeout(Duration::from_millis(delay_ms), claim).await {
            Ok(made) => backend.release(&made.unwrap()).await.unwrap(),
            Err(_) => cancelled += 1,
        }
    }
    assert!(cancelled >= 2, "only {cancelled} claims were cancelled");
    let deadline = Instant::now() + common::PATIENCE;
    while !common::run_processes(&fixture).is_empty() {
        assert!(
            Instant::now() < deadline,
            "processes of cancelled sandboxes survived: {:?}",
            common::describe(&common::run_processes(&fixture))
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Their directories are left for reap, which finds nothing running.
    let reaped = backend.reap(&fixture.run_id).await.unwrap();
    assert!(reaped.sandboxes >= 1, "{reaped:?}");
    assert_eq!(reaped.processes, 0);
}

#[tokio::test]
async fn a_released_sandboxs_files_are_gone_once_the_run_is_reaped() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "py").await;
    let mut sandboxes = Vec::new();
    for _ in 0..4 {
        sandboxes.push(claim(&backend, &template).await);
    }
    for sandbox in &sandboxes {
        // Enough files that removing them takes a while.
        sh_ok(
            &backend,
            sandbox,
            "mkdir -p /workspace/many && cd /workspace/many && touch $(seq 8000)",
        )
        .await;
    }
    for sandbox in &sandboxes {
        backend.release(sandbox).await.unwrap();
    }
    // Released: no longer a sandbox of the run, whether or not its files
    // are still being removed.
    assert!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).is_empty());
    backend.reap(&fixture.run_id).await.unwrap();
    let run = fixture
        .state_dir()
        .join("runs")
        .join(fixture.run_id.as_str());
    assert!(!run.exists(), "{} is left", run.display());
}
