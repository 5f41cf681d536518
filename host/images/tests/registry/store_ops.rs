//! Pins, removal and pruning under a budget.

use sandfleet_images::{Error, PullOptions};

use crate::support::image::{Layer, Tar, build, push};
use crate::support::registry::{Auth, Registry};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_images_survive_prune_and_remove_and_the_lru_goes_first() {
    let registry = Registry::start(Auth::None).await;
    let base = Layer::gzip(Tar::new().file("base", &[1u8; 30_000]).finish());
    let one = build(
        &[
            base.clone(),
            Layer::gzip(Tar::new().file("one", &[2u8; 10_000]).finish()),
        ],
        "amd64",
        None,
    );
    let two = build(
        &[
            base.clone(),
            Layer::gzip(Tar::new().file("two", &[3u8; 20_000]).finish()),
        ],
        "amd64",
        None,
    );
    let three = build(
        &[Layer::gzip(
            Tar::new().file("three", &[4u8; 40_000]).finish(),
        )],
        "amd64",
        None,
    );
    push(&registry, "lru/one", "1", &one).await;
    push(&registry, "lru/two", "1", &two).await;
    push(&registry, "lru/three", "1", &three).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let options = PullOptions {
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    };
    let (r1, r2, r3) = (
        reference(&registry.host, "lru/one:1"),
        reference(&registry.host, "lru/two:1"),
        reference(&registry.host, "lru/three:1"),
    );
    let i1 = store.pull(&r1, &options, &quiet).await.unwrap();
    let i2 = store.pull(&r2, &options, &quiet).await.unwrap();
    let i3 = store.pull(&r3, &options, &quiet).await.unwrap();
    assert_eq!(store.list().unwrap().len(), 3);
    assert_eq!(layer_count(&store), 4);
    assert_eq!(i1.unpacked_size(), 40_000);

    // Used in order 3, 1, 2 (oldest first): pinning marks use.
    drop(store.pin(&i3).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let pin1 = store.pin(&i1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    drop(store.pin(&i2).unwrap());

    let error = store.remove(&r1).await.unwrap_err();
    assert!(matches!(error, Error::InUse { .. }));
    assert_eq!(
        error.to_string(),
        format!("{r1}: in use by a sandbox (pinned); release it first")
    );

    // A budget of 70 kB: three (40 kB, least recently used) goes; one is
    // pinned and two fits.
    let report = store.prune(Some(70_000)).await.unwrap();
    assert_eq!(report.images, vec![r3.to_string()]);
    assert_eq!(report.bytes, 40_000);
    assert_eq!(report.remaining, 60_000);
    assert!(matches!(store.image(&r3), Err(Error::NotPulled { .. })));
    // A budget of nothing: two goes, one stays while pinned.
    let report = store.prune(Some(0)).await.unwrap();
    assert_eq!(report.images, vec![r2.to_string()]);
    assert_eq!(report.layers, 1, "the shared base stays with one");
    store.image(&r1).unwrap();
    drop(pin1);

    store.remove(&r1).await.unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(layer_count(&store), 0);
    assert!(matches!(
        store.remove(&r1).await,
        Err(Error::NotPulled { .. })
    ));
    let _ = i2;

    // What a killed pull left is cleared by prune.
    let leftover = store
        .root()
        .join("tmp")
        .join(format!("shift-1-1-1-{}.424242.0", "ab".repeat(32)));
    std::fs::create_dir_all(leftover.join("root/x")).unwrap();
    let report = store.prune(None).await.unwrap();
    assert_eq!(report.temporaries, 1);
    assert!(!leftover.exists());
}
