//! Finding and removing what a run left, from the state directory alone.

use sandfleet_backend_local::{IsolationMode, list_run, reap_run};
use sandfleet_core::{Backend, Reaped, RunId, WarmPools};

use crate::common::{
    self, Fixture, claim, is_running, marked_by_env, marked_inits, sandbox_dirs, sh_ok, template,
    wait_ready,
};

#[tokio::test]
async fn a_crashed_run_is_reaped_completely_and_idempotently() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    backend.warm(&template, 2).await.unwrap();
    wait_ready(&backend, &template, 2).await;
    let claimed = claim(&backend, &template).await;
    wait_ready(&backend, &template, 2).await;
    sh_ok(&backend, &claimed, "sleep 300 >/dev/null 2>&1 &").await;
    let inits = marked_inits(&fixture.run_id);
    assert_eq!(inits.len(), 3);
    let members: Vec<i32> = inits
        .iter()
        .flat_map(|&init| common::pid_namespace_members(init))
        .collect();
    assert_eq!(members.len(), 4, "three inits and the background sleep");

    // The owner dies without cleaning up.
    std::mem::forget(backend);

    let owned = list_run(&fixture.state_dir(), &fixture.run_id)
        .await
        .unwrap();
    assert_eq!(
        (
            owned.templates.len(),
            owned.pools.len(),
            owned.sandboxes.len()
        ),
        (1, 1, 3)
    );
    assert!(owned.sandboxes.contains(&claimed.id));

    let reaped = reap_run(&fixture.state_dir(), &fixture.run_id)
        .await
        .unwrap();
    assert_eq!(
        reaped,
        Reaped {
            templates: 1,
            pools: 1,
            sandboxes: 3,
            processes: 3,
            snapshots: 0,
        }
    );
    assert!(marked_inits(&fixture.run_id).is_empty());
    assert!(members.iter().all(|&pid| !is_running(pid)));
    assert!(sandbox_dirs(&fixture.state_dir(), &fixture.run_id).is_empty());
    assert!(
        !fixture
            .state_dir()
            .join("runs")
            .join(fixture.run_id.as_str())
            .exists()
    );

    assert_eq!(
        reap_run(&fixture.state_dir(), &fixture.run_id)
            .await
            .unwrap(),
        Reaped::default()
    );
    assert_eq!(
        list_run(&fixture.state_dir(), &fixture.run_id)
            .await
            .unwrap(),
        Default::default()
    );
}

#[tokio::test]
async fn two_runs_on_one_backend_each_reap_only_their_own() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    // The same backend instance serves a second run.
    let other_run = RunId::generate("other");
    let other_template = common::template_for(&backend, &other_run, "t").await;
    let survivor = claim(&backend, &other_template).await;

    let template = template(&backend, "t").await;
    backend.warm(&template, 1).await.unwrap();
    wait_ready(&backend, &template, 1).await;
    let claimed = claim(&backend, &template).await;
    wait_ready(&backend, &template, 1).await;
    let reaped = backend.reap(&fixture.run_id).await.unwrap();
    assert_eq!(
        reaped,
        Reaped {
            templates: 1,
            pools: 1,
            sandboxes: 2,
            processes: 2,
            snapshots: 0,
        }
    );
    assert!(marked_inits(&fixture.run_id).is_empty());
    assert!(
        backend
            .exec(&claimed, &common::request(["true"]), None)
            .await
            .is_err()
    );
    assert_eq!(
        backend.list_owned(&fixture.run_id).await.unwrap(),
        Default::default()
    );
    assert!(
        backend.pool_status(&template).await.is_err(),
        "the template was reaped too"
    );

    // The other run, on the same backend, is untouched.
    assert_eq!(sh_ok(&backend, &survivor, "echo alive").await, "alive\n");
    assert_eq!(
        backend.pool_status(&other_template).await.unwrap().desired,
        0
    );
    backend.release(&survivor).await.unwrap();
    assert_eq!(backend.reap(&other_run).await.unwrap().templates, 1);
}

#[tokio::test]
async fn a_crashed_plain_run_is_reaped_by_its_environment_marker() {
    let fixture = Fixture::new(IsolationMode::None);
    let backend = fixture.backend();
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    sh_ok(&backend, &sandbox, "sleep 300 >/dev/null 2>&1 &").await;
    let leftovers = marked_by_env(&fixture.run_id);
    assert_eq!(leftovers.len(), 1);
    std::mem::forget(backend);

    let reaped = reap_run(&fixture.state_dir(), &fixture.run_id)
        .await
        .unwrap();
    assert_eq!(
        reaped,
        Reaped {
            templates: 1,
            pools: 0,
            sandboxes: 1,
            processes: 1,
            snapshots: 0,
        }
    );
    assert!(!is_running(leftovers[0]));
    assert!(marked_by_env(&fixture.run_id).is_empty());
}
