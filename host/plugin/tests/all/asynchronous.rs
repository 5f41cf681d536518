//! The async form of every typed call runs on tokio's blocking pool: it works
//! on either runtime flavor, a guest writing to stdout neither blocks nor
//! panics there, and its future is `Send + 'static` (that its log lines follow the
//! caller's span and subscriber is in `tests/logging.rs`).

use std::sync::Arc;
use std::time::Duration;

use sandfleet_plugin::sizing::{Limits, Strategy};
use sandfleet_plugin::{CallError, Registry};

use crate::{demand, load, patient_registry, three_clusters};

/// The `misbehave` guest's image that writes to stdout, stderr and the host log.
const TALK: u32 = 6;

/// Long enough for a loaded machine, short enough to fail a hung call.
const NO_HANG: Duration = Duration::from_secs(60);

fn with_builtins() -> Arc<Registry> {
    let registry = patient_registry();
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    registry
}

async fn place_on_least_loaded() {
    let registry = patient_registry();
    load(&registry, "policy", sandfleet_guests::LEAST_LOADED);
    let policy = registry.placement("policy").unwrap();
    assert_eq!(
        policy.place(&demand(0), &three_clusters()).await.unwrap(),
        1
    );
}

#[tokio::test]
async fn an_async_call_works_on_a_current_thread_runtime() {
    place_on_least_loaded().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_call_works_on_a_multi_thread_runtime() {
    place_on_least_loaded().await;
}

#[tokio::test]
async fn a_guest_writing_to_stdout_neither_blocks_nor_panics_on_a_current_thread_runtime() {
    let registry = patient_registry();
    load(&registry, "talker", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("talker").unwrap();
    for _ in 0..3 {
        let answer = tokio::time::timeout(NO_HANG, policy.place(&demand(TALK), &three_clusters()))
            .await
            .expect("the call returned");
        assert_eq!(answer.unwrap(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_writing_to_stdout_neither_blocks_nor_panics_on_a_multi_thread_runtime() {
    let registry = patient_registry();
    load(&registry, "talker", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("talker").unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| tokio::spawn(policy.place(&demand(TALK), &three_clusters())))
        .collect();
    for call in calls {
        let answer = tokio::time::timeout(NO_HANG, call)
            .await
            .expect("the call returned")
            .expect("the task did not panic");
        assert_eq!(answer.unwrap(), 0);
    }
}

/// Every world's async calls, spawned with arguments that are gone before
/// the calls run: the futures own what they need.
#[tokio::test]
async fn async_calls_of_every_world_are_send_and_static() {
    let registry = with_builtins();
    let placement = registry.placement("least-loaded").unwrap();
    let sizing = registry.sizing("proportional").unwrap();
    let reset = registry.reset_check("git-restore").unwrap();
    let adapter = registry.adapter("generic").unwrap();

    let placed = tokio::spawn(placement.place(&demand(0), &three_clusters()));
    let limits = Limits {
        strategy: Strategy::None,
        max_concurrent: 4,
        max_warmpool_size: 4,
        warm_per_task: false,
        disk: None,
    };
    let planned = tokio::spawn(sizing.plan(&[3, 1], &limits));
    let row = String::from(r#"{"id": "t", "image": "i", "test": "true"}"#);
    let described = tokio::spawn(adapter.describe());
    let loaded = tokio::spawn(adapter.load(&row, &[]));
    drop((row, limits));

    assert_eq!(placed.await.unwrap().unwrap(), 1);
    assert_eq!(planned.await.unwrap().unwrap().replicas.len(), 2);
    assert_eq!(described.await.unwrap().unwrap().name, "generic");
    let task = loaded.await.unwrap().unwrap();
    let script = tokio::spawn(adapter.prepare(&task, Some("diff")))
        .await
        .unwrap();
    assert!(!script.unwrap().evaluate.is_empty());
    let baseline = tokio::spawn(reset.baseline(&task)).await.unwrap();
    assert!(!baseline.unwrap().is_empty());
}

/// A failed call comes back as the same error through either form.
#[tokio::test]
async fn an_async_call_fails_like_the_blocking_one() {
    let registry = with_builtins();
    let adapter = registry.adapter("generic").unwrap();
    let asynchronous: CallError = adapter.load("not json", &[]).await.unwrap_err();
    let blocking = tokio::task::spawn_blocking(move || adapter.load_blocking("not json", &[]))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(asynchronous.to_string(), blocking.to_string());
    assert_eq!(asynchronous.function, "load");
}
