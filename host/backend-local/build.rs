//! Builds `sandfleet-jail` (`host/jail`), the helper that sets sandboxes up,
//! for the target being built, statically linked, and tells the crate where it is
//! (`SANDFLEET_JAIL`), so the binary is embedded and every program linking
//! this crate — `sandfleet`, tests, benchmarks — carries its own copy.

use std::env;

fn main() {
    let workspace = sandfleet_build_support::workspace_root();
    let target_dir = sandfleet_build_support::nested_target_dir(&workspace, "jail");
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("host/jail").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let mut cargo = sandfleet_build_support::nested_cargo_build(&workspace, &target_dir);
    cargo.args([
        "-p",
        "sandfleet-jail",
        "--bin",
        "sandfleet-jail",
        "--profile",
        "jail",
        "--target",
        &target,
    ]);
    // Linked statically: each start and exec skips the dynamic loader
    // (about 0.4 ms of the 4 ms an exec takes here), and the helper does not
    // depend on the host's shared libraries. With `--target`, the flag
    // reaches neither build scripts nor proc macros.
    cargo.env("RUSTFLAGS", "-C target-feature=+crt-static");
    let status = cargo.status().expect("run cargo to build sandfleet-jail");
    assert!(status.success(), "building sandfleet-jail failed");
    let binary = target_dir.join(&target).join("jail").join("sandfleet-jail");
    assert!(binary.exists(), "{} was not built", binary.display());
    println!("cargo:rustc-env=SANDFLEET_JAIL={}", binary.display());
}
