//! Pulls: what lands on disk, what a second pull asks, platforms,
//! sharing, retries, and what a failed pull leaves.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::sync::Mutex;
use std::time::Duration;

use sandfleet_images::spec::Compression;
use sandfleet_images::{Error, Platform, ProgressEvent, PullPolicy};

use crate::support::image::{Layer, MTIME, Tar, build, push, push_index};
use crate::support::proxy::{Fault, Proxy};
use crate::support::registry::{Auth, Registry};
use crate::support::*;

fn xattr(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 16];
    rustix::fs::lgetxattr(path, name, &mut buf)
        .ok()
        .map(|n| buf[..n].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layered_image_lands_as_overlay_lower_layers_and_a_second_pull_fetches_nothing() {
    let registry = Registry::start(Auth::None).await;
    let base = Tar::new()
        .dir("etc", 0o755)
        .file("etc/os-release", b"ID=sandfleet\n")
        .file("etc/gone", b"removed above")
        .dir("usr/bin", 0o755)
        .file_owned("usr/bin/tool", b"#!/bin/sh\n", 0o755, 0, 0)
        .file_owned("usr/bin/suid", b"x", 0o4755, 0, 0)
        .hardlink("usr/bin/tool2", "usr/bin/tool")
        .symlink("usr/bin/sh", "tool")
        .file_owned("home/u/secret", b"mine", 0o600, 1000, 1000)
        .dir("var/cache/old", 0o755)
        .file("var/cache/old/x", b"hidden above")
        .char_device("dev/null")
        .dir("ro", 0o555)
        .file("ro/f", b"read only dir")
        .finish();
    let middle = Tar::new()
        .file("etc/.wh.gone", b"")
        .file("var/cache/old/.wh..wh..opq", b"")
        .file("var/cache/old/y", b"new")
        .file_owned("etc/stranger", b"s", 0o644, 70_000, 70_000)
        .finish();
    let top = Tar::new()
        .dir("work", 0o755)
        .file("work/README", b"top layer")
        .finish();
    let layers = [
        Layer::new(base, Compression::Gzip),
        Layer::new(middle, Compression::Zstd),
        Layer::new(top, Compression::None),
    ];
    let built = build(&layers, &Platform::host().architecture, None);
    let manifest = push(&registry, "app/layered", "1", &built).await;

    let proxy = Proxy::start(&registry.host).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let reference = reference(&proxy.host, "app/layered:1");
    let events = Mutex::new(Vec::new());
    let record = |event: ProgressEvent| events.lock().unwrap().push(event);
    let image = store.pull(&reference, &options(), &record).await.unwrap();
    assert_eq!(image.manifest, manifest);
    assert_eq!(image.config.working_dir, "/work");
    assert_eq!(image.config.user, "1000:1000");
    assert_eq!(image.config.cmd, ["sh", "-c", "true"]);
    assert!(image.config.env.iter().any(|e| e.starts_with("PATH=")));
    let done = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, ProgressEvent::LayerDone { .. }))
        .count();
    assert_eq!(done, 3);

    let dirs = image.layer_dirs();
    assert_eq!(dirs.len(), 3);
    for (dir, layer) in dirs.iter().zip(&layers) {
        assert!(
            dir.ends_with(format!("{}/root", layer.diff_id.hex())),
            "lowest first: {dir:?}"
        );
    }
    let (a, b, c) = (&dirs[0], &dirs[1], &dirs[2]);
    assert_eq!(
        std::fs::read_to_string(a.join("etc/os-release")).unwrap(),
        "ID=sandfleet\n"
    );
    let release = std::fs::metadata(a.join("etc/os-release")).unwrap();
    assert_eq!(release.permissions().mode() & 0o7777, 0o644);
    assert_eq!(release.mtime(), MTIME as i64);
    assert_eq!(
        std::fs::metadata(a.join("usr/bin/suid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o4755
    );
    assert_eq!(
        std::fs::metadata(a.join("usr/bin/tool")).unwrap().ino(),
        std::fs::metadata(a.join("usr/bin/tool2")).unwrap().ino(),
        "a hard link shares its inode"
    );
    assert_eq!(
        std::fs::read_link(a.join("usr/bin/sh")).unwrap().to_str(),
        Some("tool")
    );
    assert!(!a.join("dev/null").exists(), "device nodes are skipped");
    assert_eq!(
        std::fs::metadata(a.join("ro"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o555
    );
    assert_eq!(
        std::fs::metadata(a.join("ro")).unwrap().mtime(),
        MTIME as i64
    );
    let gone = std::fs::symlink_metadata(b.join("etc/gone")).unwrap();
    assert!(
        gone.file_type().is_char_device() && gone.rdev() == 0,
        "a whiteout is a 0/0 char device"
    );
    assert_eq!(
        xattr(&b.join("var/cache/old"), "user.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(!b.join("var/cache/old/.wh..wh..opq").exists());
    assert_eq!(
        std::fs::read_to_string(c.join("work/README")).unwrap(),
        "top layer"
    );
    if is_root() {
        assert_eq!(
            xattr(&b.join("var/cache/old"), "trusted.overlay.opaque").as_deref(),
            Some(&b"y"[..])
        );
        let owner = |path: &std::path::Path| {
            let m = std::fs::symlink_metadata(path).unwrap();
            (m.uid(), m.gid())
        };
        assert_eq!(owner(&a.join("etc/os-release")), (100_000, 100_000));
        assert_eq!(owner(&a.join("home/u/secret")), (101_000, 101_000));
        assert_eq!(
            owner(&a.join("home/u")),
            (100_000, 100_000),
            "implied parents belong to root"
        );
        assert_eq!(
            owner(&b.join("etc/stranger")),
            (165_534, 165_534),
            "ids past the range are nobody"
        );
        assert_eq!(owner(&a.join("usr/bin/sh")), (100_000, 100_000));
    }

    proxy.clear();
    let again = store.pull(&reference, &options(), &quiet).await.unwrap();
    assert_eq!(again.manifest, manifest);
    assert_eq!(
        proxy.blob_gets(""),
        0,
        "a second pull fetches no blob: {:?}",
        proxy.requests()
    );
    proxy.clear();
    let cached = sandfleet_images::PullOptions {
        policy: PullPolicy::IfNotPresent,
        ..options()
    };
    store.pull(&reference, &cached, &quiet).await.unwrap();
    assert!(
        proxy.requests().is_empty(),
        "IfNotPresent asks nothing: {:?}",
        proxy.requests()
    );
    assert_eq!(store.image(&reference).unwrap().manifest, manifest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_resolves_to_the_asked_platform_or_lists_what_it_has() {
    let registry = Registry::start(Auth::None).await;
    let amd = build(
        &[Layer::gzip(Tar::new().file("arch", b"amd64").finish())],
        "amd64",
        None,
    );
    let arm = build(
        &[Layer::gzip(Tar::new().file("arch", b"arm64").finish())],
        "arm64",
        None,
    );
    push_index(
        &registry,
        "multi/arch",
        "1",
        &[(&amd, "amd64"), (&arm, "arm64")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let reference = reference(&registry.host, "multi/arch:1");
    for arch in ["amd64", "arm64"] {
        let options = sandfleet_images::PullOptions {
            platform: format!("linux/{arch}").parse().unwrap(),
            ..options()
        };
        let image = store.pull(&reference, &options, &quiet).await.unwrap();
        assert_eq!(image.platform.architecture, arch);
        assert_eq!(
            std::fs::read_to_string(image.layer_dirs()[0].join("arch")).unwrap(),
            arch
        );
    }
    let s390x = sandfleet_images::PullOptions {
        platform: "linux/s390x".parse().unwrap(),
        ..options()
    };
    let error = store.pull(&reference, &s390x, &quiet).await.unwrap_err();
    assert!(matches!(error, Error::NoPlatform { .. }));
    assert_eq!(
        error.to_string(),
        format!("{reference}: no image for linux/s390x (the index has linux/amd64, linux/arm64)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_in_two_stores_fetch_a_shared_layer_once() {
    let registry = Registry::start(Auth::None).await;
    // Incompressible, so the download takes a while and the pulls overlap.
    let noise: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let shared = Layer::gzip(Tar::new().file("base.bin", &noise).finish());
    let x = build(
        &[
            shared.clone(),
            Layer::gzip(Tar::new().file("x", b"x").finish()),
        ],
        "amd64",
        None,
    );
    let y = build(
        &[
            shared.clone(),
            Layer::gzip(Tar::new().file("y", b"y").finish()),
        ],
        "amd64",
        None,
    );
    push(&registry, "shared/x", "1", &x).await;
    push(&registry, "shared/y", "1", &y).await;
    let proxy = Proxy::start(&registry.host).await;
    let dir = tempfile::tempdir().unwrap();
    // Two stores on one state directory stand for two processes: they
    // share no memory, only the files and their locks.
    let (one, two) = (store(dir.path()), store(dir.path()));
    let (rx, ry) = (
        reference(&proxy.host, "shared/x:1"),
        reference(&proxy.host, "shared/y:1"),
    );
    let options = sandfleet_images::PullOptions {
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    };
    let results = tokio::join!(
        one.pull(&rx, &options, &quiet),
        one.pull(&ry, &options, &quiet),
        two.pull(&rx, &options, &quiet),
        two.pull(&ry, &options, &quiet),
    );
    for result in [results.0, results.1, results.2, results.3] {
        let image = result.unwrap();
        assert_eq!(
            std::fs::metadata(image.layer_dirs()[0].join("base.bin"))
                .unwrap()
                .len(),
            noise.len() as u64
        );
    }
    assert_eq!(
        proxy.blob_gets(shared.digest.hex()),
        1,
        "{:?}",
        proxy.requests()
    );
    assert_eq!(layer_count(&one), 3);
    assert_no_temporaries(&one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_and_a_failed_pull_leaves_nothing_complete() {
    let registry = Registry::start(Auth::None).await;
    let good = build(
        &[Layer::gzip(Tar::new().file("a", &[7u8; 100_000]).finish())],
        "amd64",
        None,
    );
    let bad = build(
        &[Layer::gzip(Tar::new().file("b", &[9u8; 100_000]).finish())],
        "amd64",
        None,
    );
    push(&registry, "flaky/good", "1", &good).await;
    push(&registry, "flaky/bad", "1", &bad).await;
    let proxy = Proxy::start(&registry.host).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let options = sandfleet_images::PullOptions {
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    };

    // 429 with Retry-After on the manifest, then a body cut short once.
    proxy.fault(
        "/flaky/good/manifests/",
        Fault::Status {
            status: 429,
            retry_after: Some(1),
        },
        1,
    );
    proxy.fault(good.layers[0].digest.hex(), Fault::Cut { after: 100 }, 1);
    let retried = Mutex::new(0);
    let count = |event: ProgressEvent| {
        if matches!(event, ProgressEvent::LayerRetrying { .. }) {
            *retried.lock().unwrap() += 1;
        }
    };
    let started = std::time::Instant::now();
    store
        .pull(&reference(&proxy.host, "flaky/good:1"), &options, &count)
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    let manifest_gets = proxy
        .requests()
        .iter()
        .filter(|(_, p)| p.contains("/flaky/good/manifests/"))
        .count();
    assert_eq!(manifest_gets, 2);
    assert_eq!(proxy.blob_gets(good.layers[0].digest.hex()), 2);
    assert_eq!(*retried.lock().unwrap(), 1);

    // A layer whose body always breaks: retried up to the bound, then one
    // line naming the reference and the registry.
    proxy.fault(bad.layers[0].digest.hex(), Fault::Cut { after: 1000 }, 100);
    let bad_ref = reference(&proxy.host, "flaky/bad:1");
    let error = pull_fails(&store, &bad_ref, &options, &["unreachable", &proxy.host]).await;
    assert!(matches!(error, Error::Unreachable { .. }), "{error}");
    assert_eq!(
        proxy.blob_gets(bad.layers[0].digest.hex()),
        3,
        "the first try and two retries"
    );
    assert_eq!(
        layer_count(&store),
        1,
        "only the good image's layer is complete"
    );

    // A leftover of a killed pull of that layer is cleared by the next one.
    let leftover = store.root().join("tmp").join(format!(
        "{}-{}.99999.0",
        ownership_key_for(&store),
        bad.layers[0].diff_id.hex()
    ));
    std::fs::create_dir_all(leftover.join("root/half")).unwrap();
    proxy.clear();
    store.pull(&bad_ref, &options, &quiet).await.unwrap();
    assert!(!leftover.exists());
    assert_no_temporaries(&store);
}

fn ownership_key_for(store: &sandfleet_images::Store) -> String {
    std::fs::read_dir(store.root().join("layers"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned()
}
