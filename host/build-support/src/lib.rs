//! What sandfleet's build scripts share. Two crates embed artifacts built
//! from other workspace crates — the plugin guests (`host/guests`) and the
//! sandbox helper (`host/backend-local`) — by running a nested `cargo
//! build` in a target directory of their own, so it never waits on the
//! outer build's lock.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root, from a build script's `CARGO_MANIFEST_DIR` (crates
/// live two levels down, in `host/<crate>`).
pub fn workspace_root() -> PathBuf {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("run from a build script"));
    manifest_dir
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// `<target>/<name>`: the nested build's own target directory, inside the
/// outer build's (`CARGO_TARGET_DIR` or the workspace's `target/`), and
/// shared by its debug, release and clippy builds.
pub fn nested_target_dir(workspace: &Path, name: &str) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join(name)
}

/// `cargo build --target-dir <target_dir>` in `workspace`, without the
/// outer build's flags and wrappers (clippy, coverage, profile overrides),
/// which are for the host crates, not for what the nested build makes.
pub fn nested_cargo_build(workspace: &Path, target_dir: &Path) -> Command {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .arg("build")
        .arg("--target-dir")
        .arg(target_dir);
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_TARGET_")
            || key.starts_with("CARGO_ENCODED_")
            || matches!(
                key.as_ref(),
                "RUSTFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "CARGO_TARGET_DIR"
            )
        {
            command.env_remove(key.as_ref());
        }
    }
    command
}
