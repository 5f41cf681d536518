//! What the engine's benches share: a local backend serving one image,
//! `bench`, made from a directory the bench fills; a registry of the
//! built-in plugins; and no-op tasks of the bench image.

use std::path::Path;
use std::sync::Arc;

use sandfleet_backend_local::{ImageSource, LimitOverrides, LocalBackend, LocalConfig};
use sandfleet_engine::WorkItem;
use sandfleet_plugin::{HostConfig, PluginHost, Registry};

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

/// A registry of the built-in plugins.
pub(crate) fn builtin_registry() -> Arc<Registry> {
    let registry = Registry::new(PluginHost::new(HostConfig::default()).unwrap());
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    registry
}

/// `tasks` no-op tasks (`true`) of the bench image, by the `generic`
/// adapter.
pub(crate) fn noop_tasks(registry: &Registry, tasks: usize) -> Vec<WorkItem> {
    let adapter = registry.adapter("generic").unwrap();
    (0..tasks)
        .map(|i| {
            let row =
                serde_json::json!({"id": format!("noop-{i}"), "image": "bench", "test": "true"});
            WorkItem {
                task: adapter.load_blocking(&row.to_string(), &[]).unwrap(),
                solution: None,
                epoch: 0,
                member: None,
            }
        })
        .collect()
}
