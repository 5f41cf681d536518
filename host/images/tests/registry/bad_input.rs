//! Bad input: each failure is one line naming the reference and what
//! failed, and leaves nothing complete and nothing outside the store.

use std::path::Path;

use sandfleet_images::spec::Compression;
use sandfleet_images::{Digest, Error, PullOptions, RetryPolicy, UnpackLimits};

use crate::support::image::{Layer, Tar, build, push};
use crate::support::proxy::{Fault, Proxy};
use crate::support::registry::{Auth, Registry, free_port};
use crate::support::*;

fn amd64() -> PullOptions {
    PullOptions {
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_references_and_a_registry_that_is_down() {
    let registry = Registry::start(Auth::None).await;
    push(
        &registry,
        "known/app",
        "1",
        &build(
            &[Layer::gzip(Tar::new().file("f", b"1").finish())],
            "amd64",
            None,
        ),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let host = registry.host.clone();
    for name in ["known/app:2", "unknown/app:1"] {
        let error = pull_fails(
            &store,
            &reference(&host, name),
            &amd64(),
            &["not found on", &host, "HTTP 404", "MANIFEST_UNKNOWN"],
        )
        .await;
        assert!(
            matches!(error, Error::NotFound { status: 404, .. }),
            "{error}"
        );
    }
    let down = format!("127.0.0.1:{}", free_port());
    let options = PullOptions {
        retry: RetryPolicy {
            retries: 0,
            ..RetryPolicy::default()
        },
        ..amd64()
    };
    let error = pull_fails(
        &store,
        &reference(&down, "any/app:1"),
        &options,
        &["unreachable", &down, "refused"],
    )
    .await;
    assert!(matches!(error, Error::Unreachable { .. }));
    let invalid = sandfleet_images::Reference::parse("bad/Name").unwrap_err();
    assert_eq!(
        invalid.to_string(),
        "\"bad/Name\" is not an image reference: repository \"bad/Name\" must be lowercase"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_mismatches_and_corrupt_layers_are_refused() {
    let registry = Registry::start(Auth::None).await;
    let content = Tar::new().file("data", &[5u8; 50_000]).finish();
    let honest = build(&[Layer::gzip(content.clone())], "amd64", None);
    push(&registry, "bad/flipped", "1", &honest).await;
    // The config promises other content than the layer holds.
    let lying = build(
        &[Layer::gzip(Tar::new().file("other", b"o").finish())],
        "amd64",
        Some(vec![Digest::of(b"something else")]),
    );
    push(&registry, "bad/diffid", "1", &lying).await;
    // A gzip blob cut in half, pushed as it is (its digest is its own).
    let mut truncated = Layer::gzip(
        Tar::new()
            .file(
                "t",
                &(0..200_000u32)
                    .map(|i| (i * 7 % 251) as u8)
                    .collect::<Vec<_>>(),
            )
            .finish(),
    );
    truncated.blob.truncate(truncated.blob.len() / 2);
    truncated.digest = Digest::of(&truncated.blob);
    push(
        &registry,
        "bad/truncated",
        "1",
        &build(&[truncated], "amd64", None),
    )
    .await;

    let proxy = Proxy::start(&registry.host).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    proxy.fault(honest.layers[0].digest.hex(), Fault::Flip, 100);
    let error = pull_fails(
        &store,
        &reference(&proxy.host, "bad/flipped:1"),
        &amd64(),
        &["(compressed)", "digest mismatch"],
    )
    .await;
    assert!(matches!(error, Error::DigestMismatch { .. }), "{error}");
    let error = pull_fails(
        &store,
        &reference(&proxy.host, "bad/diffid:1"),
        &amd64(),
        &["diff_id", "digest mismatch"],
    )
    .await;
    assert!(matches!(error, Error::DigestMismatch { .. }), "{error}");
    let error = pull_fails(
        &store,
        &reference(&proxy.host, "bad/truncated:1"),
        &amd64(),
        &["corrupt or truncated"],
    )
    .await;
    assert!(matches!(error, Error::CorruptLayer { .. }), "{error}");
    assert_eq!(layer_count(&store), 0);
}

/// Files and directories under `dir`, recursively (not following links).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            out.push(entry.path().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_layers_write_nothing_outside_their_directory() {
    let registry = Registry::start(Auth::None).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("target")).unwrap();
    let target = outside.path().join("target").display().to_string();
    let link = tar::EntryType::Link;
    let file = tar::EntryType::Regular;
    let symlink = tar::EntryType::Symlink;
    let cases: Vec<(&str, Tar, &str)> = vec![
        (
            "dotdot",
            Tar::new().raw(file, "a/../../../../../../pwned", "", b"x"),
            "climbs out of the layer",
        ),
        (
            "abs-symlink",
            Tar::new()
                .raw(symlink, "out", &target, b"")
                .raw(file, "out/pwned", "", b"x"),
            "symlink leading out",
        ),
        (
            "rel-symlink",
            Tar::new()
                .raw(symlink, "up", "../../../../../../../..", b"")
                .raw(file, "up/tmp/pwned", "", b"x"),
            "symlink leading out",
        ),
        (
            "host-hardlink",
            Tar::new().raw(link, "passwd", "/etc/passwd", b""),
            "not in the layer",
        ),
        (
            "hardlink-through-symlink",
            Tar::new()
                .raw(symlink, "etc", "/etc", b"")
                .raw(link, "passwd", "etc/passwd", b""),
            "outside the layer",
        ),
        (
            "dir-hardlink",
            Tar::new().dir("d", 0o755).raw(link, "d2", "d", b""),
            "hard-links the directory",
        ),
        (
            "many",
            (0..50).fold(Tar::new(), |t, i| t.file(&format!("f{i}"), b"")),
            "limit of 20 entries",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let options = PullOptions {
        limits: UnpackLimits {
            max_entries: 20,
            ..UnpackLimits::default()
        },
        ..amd64()
    };
    let store_before = tree(dir.path());
    for (name, tar, says) in cases {
        let built = build(&[Layer::gzip(tar.finish())], "amd64", None);
        push(&registry, &format!("hostile/{name}"), "1", &built).await;
        let error = pull_fails(
            &store,
            &reference(&registry.host, &format!("hostile/{name}:1")),
            &options,
            &[says],
        )
        .await;
        assert!(
            matches!(error, Error::HostileLayer { .. }),
            "{name}: {error}"
        );
        assert!(
            tree(outside.path()) == vec![target.clone()],
            "{name} wrote outside: {:?}",
            tree(outside.path())
        );
        assert!(!Path::new("/tmp/pwned").exists() && !Path::new("/pwned").exists());
    }
    // Only records of unfinished pulls were added; a prune takes them.
    store.prune(None).await.unwrap();
    let store_after = tree(dir.path());
    let added: Vec<_> = store_after
        .iter()
        .filter(|p| !store_before.contains(p) && !p.ends_with(".lock"))
        .collect();
    assert!(
        added
            .iter()
            .all(|p| p.contains("/blobs/") || p.contains("/layers/")),
        "left behind: {added:?}"
    );
    assert_eq!(layer_count(&store), 0);

    // An absolute entry path is the layer's own path, not the host's.
    let built = build(
        &[Layer::new(
            Tar::new().raw(file, "/abs/file", "", b"in").finish(),
            Compression::None,
        )],
        "amd64",
        None,
    );
    push(&registry, "hostile/absolute", "1", &built).await;
    let image = store
        .pull(
            &reference(&registry.host, "hostile/absolute:1"),
            &amd64(),
            &quiet,
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(image.layer_dirs()[0].join("abs/file")).unwrap(),
        "in"
    );
    assert!(!Path::new("/abs/file").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_named_and_leaves_nothing_half_unpacked() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let registry = Registry::start(Auth::None).await;
    let big: Vec<u8> = (0..2_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let built = build(
        &[Layer::gzip(Tar::new().file("big", &big).finish())],
        "amd64",
        None,
    );
    push(&registry, "full/disk", "1", &built).await;
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "sandfleet-test",
            dir.path().to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(mounted.success(), "mount tmpfs");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let store = store(dir.path());
    let error = pull_fails(
        &store,
        &reference(&registry.host, "full/disk:1"),
        &amd64(),
        &["disk full"],
    )
    .await;
    assert!(matches!(error, Error::DiskFull { .. }), "{error}");
    assert_eq!(layer_count(&store), 0);
}
