//! A pod's `emptyDir` volumes: a directory on the node each, made when the
//! pod starts and removed with its sandbox, mounted into every container
//! (init containers included) at the paths its `volumeMounts` name. That is
//! how an init container hands files to the main one: agent-sandbox's
//! clients and sandfleet's driver bring tools into images that lack them
//! this way.
//!
//! Other volume sources (claims, config maps, secrets) are not mounted: the
//! emulator has no storage behind them, and a mount of one is skipped.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandfleet_backend_local::Volume;
use serde_json::Value;

/// An `emptyDir` is world-writable, as the kubelet makes it, so a
/// container running as any user can fill it.
const EMPTY_DIR_MODE: u32 = 0o777;

/// The node's directories of one pod's volumes.
#[derive(Debug, Default)]
pub(crate) struct PodVolumes {
    /// Volume name → its directory.
    dirs: BTreeMap<String, PathBuf>,
}

impl PodVolumes {
    /// The directories under `root/uid` for the `emptyDir`s of `pod`, not
    /// yet made.
    ///
    /// # Errors
    ///
    /// A sentence naming a volume whose name is no directory's.
    pub(crate) fn of(root: &Path, uid: &str, pod: &Value) -> Result<PodVolumes, String> {
        let mut dirs = BTreeMap::new();
        let empty_dirs = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|volume| volume.get("emptyDir").is_some());
        for volume in empty_dirs {
            let name = volume["name"].as_str().unwrap_or_default();
            // Names are DNS labels once validated; checked here too, as
            // they become paths.
            if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
                return Err(format!("volume `{name}` is not a DNS label"));
            }
            dirs.insert(name.to_string(), root.join(uid).join(name));
        }
        Ok(PodVolumes { dirs })
    }

    /// Makes the directories.
    ///
    /// # Errors
    ///
    /// A sentence naming the volume that could not be made.
    pub(crate) fn create(&self) -> Result<(), String> {
        for (name, dir) in &self.dirs {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(dir)
                .and_then(|()| {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(EMPTY_DIR_MODE))
                })
                .map_err(|e| format!("making volume {name} at {}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// The mounts of `container`: each `volumeMount` of an `emptyDir`.
    pub(crate) fn mounts(&self, container: &Value) -> Vec<Volume> {
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|mount| {
                let source = self.dirs.get(mount["name"].as_str()?)?;
                Some(Volume {
                    source: source.clone(),
                    target: mount["mountPath"]
                        .as_str()?
                        .trim_end_matches('/')
                        .to_string(),
                    read_only: mount["readOnly"].as_bool().unwrap_or(false),
                })
            })
            .collect()
    }

    /// Whether `containers` mount any of these volumes.
    pub(crate) fn mounted_by(&self, containers: &[Value]) -> bool {
        containers.iter().any(|c| !self.mounts(c).is_empty())
    }
}

/// Removes the volumes of pod `uid` under `root` (whatever its containers
/// wrote there, links included, without following any).
pub(crate) fn remove(root: &Path, uid: &str) {
    if let Err(error) = sandfleet_backend_local::remove_tree(&root.join(uid)) {
        tracing::warn!(%error, pod = uid, "removing a pod's volumes failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_dirs_are_made_and_mounted_where_each_container_asks() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let pod = json!({"spec": {"volumes": [
            {"name": "tools", "emptyDir": {}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
        ]}});
        let volumes = PodVolumes::of(&root, "u1", &pod).unwrap();
        volumes.create().unwrap();
        let tools = root.join("u1/tools");
        let mode = std::fs::metadata(&tools).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, EMPTY_DIR_MODE);
        assert!(!root.join("u1/data").exists(), "a claim got a directory");
        let container = json!({"volumeMounts": [
            {"name": "tools", "mountPath": "/.sandfleet/", "readOnly": true},
            {"name": "data", "mountPath": "/data"},
        ]});
        assert_eq!(
            volumes.mounts(&container),
            vec![Volume {
                source: tools,
                target: "/.sandfleet".into(),
                read_only: true
            }]
        );
        assert!(volumes.mounted_by(&[json!({}), container]));
        assert!(!volumes.mounted_by(&[json!({})]));
        remove(&root, "u1");
        assert!(!root.join("u1").exists());
    }

    #[test]
    fn a_volume_name_that_would_leave_the_pods_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        for name in ["..", "a/b", ""] {
            let pod = json!({"spec": {"volumes": [{"name": name, "emptyDir": {}}]}});
            assert!(PodVolumes::of(root.path(), "u", &pod).is_err(), "{name}");
        }
    }
}
