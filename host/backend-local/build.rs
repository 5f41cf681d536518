//! Builds `sandfleet-jail` (`host/jail`), the helper that sets sandboxes up,
//! for the target being built (its musl twin: see [`helper_target`]),
//! statically linked, and tells the crate where it is
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
    let target = helper_target(&env::var("TARGET").expect("cargo sets TARGET"));
    sandfleet_build_support::ensure_target_installed(&target);
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
    // reaches neither build scripts nor proc macros (musl targets link
    // statically anyway).
    cargo.env("RUSTFLAGS", "-C target-feature=+crt-static");
    let status = cargo.status().expect("run cargo to build sandfleet-jail");
    assert!(status.success(), "building sandfleet-jail failed");
    let binary = target_dir.join(&target).join("jail").join("sandfleet-jail");
    assert!(binary.exists(), "{} was not built", binary.display());
    println!("cargo:rustc-env=SANDFLEET_JAIL={}", binary.display());
}

/// The target the helper is built for: `target`'s musl twin where it has
/// one. The helper runs once per sandbox start, probe and exec, and static
/// glibc's start-up asks the processor for its caches with `cpuid`, which
/// every virtual machine traps: 0.82 ms of CPU a start on this project's
/// VMs against musl's 0.10 ms (`perf stat -r 300`, 2026-12-08). The helper
/// uses nothing of glibc that musl lacks (user names are looked up by the
/// host, through NSS).
fn helper_target(target: &str) -> String {
    match target.strip_suffix("-linux-gnu") {
        Some(arch) => format!("{arch}-linux-musl"),
        None => target.to_string(),
    }
}
