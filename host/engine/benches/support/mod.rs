//! What the engine's benches share: a local backend serving one image,
//! `bench`, made from a directory the bench fills.

use std::path::Path;
use std::sync::Arc;

use sandfleet_backend_local::{ImageSource, LimitOverrides, LocalBackend, LocalConfig};

/// A local backend under `dir` of up to `max_sandboxes`, serving the image
/// `bench` from `dir/image` (created empty but for a README; `fill` adds
/// the rest), as a git repository when `git`.
pub(crate) fn local_backend(
    dir: &Path,
    max_sandboxes: u32,
    git: bool,
    fill: impl FnOnce(&Path),
) -> Arc<LocalBackend> {
    let image = dir.join("image");
    std::fs::create_dir_all(&image).unwrap();
    std::fs::write(image.join("README"), "bench\n").unwrap();
    fill(&image);
    let config = LocalConfig {
        state_dir: Some(dir.join("state")),
        max_sandboxes: Some(max_sandboxes),
        images: [(
            "bench".to_string(),
            ImageSource {
                path: image,
                git,
                limits: LimitOverrides::default(),
            },
        )]
        .into(),
        ..LocalConfig::default()
    };
    Arc::new(LocalBackend::new("local", config).unwrap())
}
