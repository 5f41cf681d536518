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

/// Installs the standard library for `target` when the toolchain lacks it
/// (rustup does not install `rust-toolchain.toml`'s targets when
/// `RUSTUP_AUTO_INSTALL=0`, as on CI), or panics naming the command to run.
pub fn ensure_target_installed(target: &str) {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .expect("run rustc --print sysroot");
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(target).exists() {
        return;
    }
    println!("cargo:warning=installing the {target} target: rustup target add {target}");
    let installed = Command::new("rustup")
        .args(["target", "add", target])
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        panic!(
            "the {target} target is missing and could not be installed; run `rustup target add {target}`"
        );
    }
}
