//! Imports for machines with no registry: `docker save` tarballs (legacy
//! and Docker 25's OCI-in-tar) and OCI layout directories, sharing layers
//! with pulled images.

use std::path::Path;
use std::sync::Mutex;

use sandfleet_images::spec::{self, Compression};
use sandfleet_images::{Digest, Error, ImportOptions, ProgressEvent, Reference};
use serde_json::json;

use crate::support::image::{Built, Layer, Tar, build, push};
use crate::support::registry::{Auth, Registry};
use crate::support::*;

fn base() -> Layer {
    Layer::new(
        Tar::new().file("etc/base", b"shared base").finish(),
        Compression::None,
    )
}

fn app(name: &str) -> Layer {
    Layer::new(
        Tar::new().file("app", name.as_bytes()).finish(),
        Compression::None,
    )
}

/// A tar archive of `(name, bytes)` files and `(name, target)` symlinks.
fn archive(path: &Path, files: &[(String, Vec<u8>)], links: &[(String, String)]) {
    let mut builder = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, name, &bytes[..]).unwrap();
    }
    for (name, target) in links {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        builder.append_link(&mut header, name, target).unwrap();
    }
    builder.finish().unwrap();
}

/// The blobs of an image in `blobs/sha256/`, plus an `index.json` entry.
fn oci_files(
    built: &Built,
    annotations: serde_json::Value,
) -> (Vec<(String, Vec<u8>)>, serde_json::Value) {
    let blob = |d: &Digest| format!("blobs/sha256/{}", d.hex());
    let mut files = vec![
        (blob(&Digest::of(&built.manifest)), built.manifest.clone()),
        (blob(&Digest::of(&built.config)), built.config.clone()),
    ];
    files.extend(
        built
            .layers
            .iter()
            .map(|l| (blob(&l.digest), l.blob.clone())),
    );
    let entry = json!({
        "mediaType": spec::OCI_MANIFEST,
        "digest": Digest::of(&built.manifest),
        "size": built.manifest.len(),
        "annotations": annotations,
    });
    (files, entry)
}

fn layout_files(entries: Vec<serde_json::Value>) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        (
            "index.json".to_string(),
            serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": entries})).unwrap(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_save_tarballs_and_oci_layouts_import_and_share_layers_with_pulls() {
    let registry = Registry::start(Auth::None).await;
    let pulled = build(&[base(), app("pulled")], "amd64", None);
    push(&registry, "imports/pulled", "1", &pulled).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let options = sandfleet_images::PullOptions {
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    };
    store
        .pull(
            &reference(&registry.host, "imports/pulled:1"),
            &options,
            &quiet,
        )
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();

    // Legacy `docker save`: <id>/layer.tar and <config id>.json.
    let legacy = build(&[base(), app("legacy")], "amd64", None);
    let mut files = vec![(
        format!("{}.json", Digest::of(&legacy.config).hex()),
        legacy.config.clone(),
    )];
    let mut layer_paths = Vec::new();
    for (i, layer) in legacy.layers.iter().enumerate() {
        let path = format!("layer{i}/layer.tar");
        files.push((path.clone(), layer.blob.clone()));
        layer_paths.push(path);
    }
    let manifest = json!([{
        "Config": format!("{}.json", Digest::of(&legacy.config).hex()),
        "RepoTags": ["sandfleet.test/legacy:1"],
        "Layers": layer_paths,
    }]);
    files.push((
        "manifest.json".to_string(),
        serde_json::to_vec(&manifest).unwrap(),
    ));
    let legacy_tar = work.path().join("legacy.tar");
    archive(&legacy_tar, &files, &[]);
    let events = Mutex::new(Vec::new());
    let record = |event: ProgressEvent| events.lock().unwrap().push(event);
    let images = store
        .import(&legacy_tar, &ImportOptions::default(), &record)
        .await
        .unwrap();
    assert_eq!(images.len(), 1);
    let image = &images[0];
    assert_eq!(image.reference.to_string(), "sandfleet.test/legacy:1");
    assert_eq!(
        std::fs::read_to_string(image.layer_dirs()[1].join("app")).unwrap(),
        "legacy"
    );
    let exists = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, ProgressEvent::LayerExists { .. }))
        .count();
    assert_eq!(exists, 1, "the base layer pulled before is shared");
    assert_eq!(layer_count(&store), 3);

    // Docker 25: an OCI layout inside the tarball, with manifest.json
    // naming the blobs and <id>/layer.tar symlinks to them.
    let modern = build(&[base(), app("modern")], "amd64", None);
    let (mut files, entry) = oci_files(
        &modern,
        json!({"io.containerd.image.name": "sandfleet.test/modern:2", "org.opencontainers.image.ref.name": "2"}),
    );
    files.extend(layout_files(vec![entry]));
    let blob_of = |d: &Digest| format!("blobs/sha256/{}", d.hex());
    let manifest = json!([{
        "Config": blob_of(&Digest::of(&modern.config)),
        "RepoTags": ["sandfleet.test/modern:2"],
        "Layers": modern.layers.iter().map(|l| blob_of(&l.digest)).collect::<Vec<_>>(),
    }]);
    files.push((
        "manifest.json".to_string(),
        serde_json::to_vec(&manifest).unwrap(),
    ));
    let links: Vec<(String, String)> = modern
        .layers
        .iter()
        .map(|l| {
            (
                format!("{}/layer.tar", l.diff_id.hex()),
                format!("../blobs/sha256/{}", l.digest.hex()),
            )
        })
        .collect();
    let modern_tar = work.path().join("modern.tar");
    archive(&modern_tar, &files, &links);
    let images = store
        .import(&modern_tar, &ImportOptions::default(), &quiet)
        .await
        .unwrap();
    assert_eq!(images[0].reference.to_string(), "sandfleet.test/modern:2");
    assert_eq!(images[0].manifest, Digest::of(&modern.manifest));

    // An OCI layout directory (gzip and zstd layers), by the full name in
    // its ref.name annotation.
    let layout = build(
        &[
            Layer::gzip(Tar::new().file("g", b"gzip").finish()),
            Layer::new(Tar::new().file("z", b"zstd").finish(), Compression::Zstd),
        ],
        "amd64",
        None,
    );
    let (files, entry) = oci_files(
        &layout,
        json!({"org.opencontainers.image.ref.name": "sandfleet.test/layout:3"}),
    );
    let root = work.path().join("layout");
    for (name, bytes) in files.iter().chain(&layout_files(vec![entry])) {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let images = store
        .import(&root, &ImportOptions::default(), &quiet)
        .await
        .unwrap();
    let image = &images[0];
    assert_eq!(
        std::fs::read_to_string(image.layer_dirs()[1].join("z")).unwrap(),
        "zstd"
    );
    let found = store
        .image(&Reference::parse("sandfleet.test/layout:3").unwrap())
        .unwrap();
    assert_eq!(found.manifest, image.manifest);

    // A layout that names nothing needs a name, and takes one.
    let (files, entry) = oci_files(
        &layout,
        json!({"org.opencontainers.image.ref.name": "latest"}),
    );
    let nameless = work.path().join("nameless");
    for (name, bytes) in files.iter().chain(&layout_files(vec![entry])) {
        let path = nameless.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let error = store
        .import(&nameless, &ImportOptions::default(), &quiet)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Import { .. }));
    assert_eq!(
        error.to_string(),
        format!(
            "{}: names no image (pass a name to import it as)",
            nameless.display()
        )
    );
    let named = ImportOptions {
        name: Some(Reference::parse("sandfleet.test/named:1").unwrap()),
        ..ImportOptions::default()
    };
    store.import(&nameless, &named, &quiet).await.unwrap();
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 4, "one image under two names is listed once");
    assert!(listed.iter().any(|i| i.references.len() == 2));

    // Neither format.
    let junk = work.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    let error = store
        .import(&junk, &ImportOptions::default(), &quiet)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("is neither an OCI layout"),
        "{error}"
    );
}
