//! Builds `sandfleet-jail` (`host/jail`), the helper that sets sandboxes up,
//! for the target being built, and tells the crate where it is
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
    let status = cargo.status().expect("run cargo to build sandfleet-jail");
    assert!(status.success(), "building sandfleet-jail failed");
    let binary = target_dir.join(&target).join("jail").join("sandfleet-jail");
    assert!(binary.exists(), "{} was not built", binary.display());
    println!("cargo:rustc-env=SANDFLEET_JAIL={}", binary.display());
}
