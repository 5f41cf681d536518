//! Builds every guest crate of the workspace for `wasm32-wasip2` and generates
//! `guests.rs`, which embeds the built-in plugins and names the test guests.
//!
//! A guest crate is a workspace member under `plugins/`, `policies/` or
//! `tests/guests/` whose manifest has
//!
//! ```toml
//! [package.metadata.sandfleet]
//! plugin = "least-loaded"   # the plugin's name
//! builtin = true            # embedded in the binary (false: tests only)
//! ```
//!
//! All guests build in one nested cargo invocation with the `guest` profile, in
//! `target/guests`, shared by debug, release and clippy builds of the host.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

const TARGET: &str = "wasm32-wasip2";
const GUEST_DIRS: [&str; 3] = ["plugins", "policies", "tests/guests"];

#[derive(serde::Deserialize)]
struct Manifest {
    package: Package,
}

#[derive(serde::Deserialize)]
struct Package {
    name: String,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(serde::Deserialize)]
struct Metadata {
    sandfleet: Option<GuestMetadata>,
}

#[derive(serde::Deserialize)]
struct GuestMetadata {
    plugin: String,
    builtin: bool,
}

struct Guest {
    package: String,
    plugin: String,
    builtin: bool,
}

fn main() {
    let workspace = sandfleet_build_support::workspace_root();
    let target_dir = sandfleet_build_support::nested_target_dir(&workspace, "guests");

    println!("cargo:rerun-if-changed={}", workspace.join("wit").display());
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );
    // Every guest is built on the SDK, which lies outside GUEST_DIRS.
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("host/plugin-sdk").display()
    );
    let guests = find_guests(&workspace);
    sandfleet_build_support::ensure_target_installed(TARGET);
    build(&workspace, &target_dir, &guests);

    let artifacts = target_dir.join(TARGET).join("guest");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("guests.rs");
    fs::write(&out, generate(&guests, &artifacts)).unwrap();
}

/// What in a guest crate's directory never goes into its component:
/// cargo's test, bench and example targets, the scripts that regenerate
/// test data, a policy's test cases, a build of its own. Watched, an edit
/// of a plugin's test would run this script again, and so rebuild every
/// test binary that embeds the guests (about two minutes of both cores).
const NOT_INPUTS: [&str; 6] = [
    "tests",
    "benches",
    "examples",
    "tools",
    "cases.toml",
    "target",
];

/// Asks cargo to run this script again when what builds `crate_dir`'s
/// component changes: its manifest, its sources and the files they include.
fn watch_inputs(crate_dir: &Path) {
    let entries =
        fs::read_dir(crate_dir).unwrap_or_else(|e| panic!("{}: {e}", crate_dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", crate_dir.display()))
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !NOT_INPUTS.contains(&name) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn find_guests(workspace: &Path) -> Vec<Guest> {
    let mut guests = Vec::new();
    for dir in GUEST_DIRS {
        let Ok(entries) = fs::read_dir(workspace.join(dir)) else {
            continue;
        };
        for entry in entries {
            let crate_dir = entry.unwrap().path();
            let manifest_path = crate_dir.join("Cargo.toml");
            let Ok(text) = fs::read_to_string(&manifest_path) else {
                continue;
            };
            watch_inputs(&crate_dir);
            let manifest: Manifest = toml::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
            let Some(meta) = manifest.package.metadata.and_then(|m| m.sandfleet) else {
                continue;
            };
            guests.push(Guest {
                package: manifest.package.name,
                plugin: meta.plugin,
                builtin: meta.builtin,
            });
        }
    }
    guests.sort_by(|a, b| a.plugin.cmp(&b.plugin));
    guests
}

fn build(workspace: &Path, target_dir: &Path, guests: &[Guest]) {
    let mut cmd = sandfleet_build_support::nested_cargo_build(workspace, target_dir);
    cmd.args(["--profile", "guest", "--target", TARGET]);
    for guest in guests {
        cmd.args(["-p", &guest.package]);
    }
    let status = cmd.status().expect("run cargo to build the guests");
    assert!(status.success(), "building the wasm guests failed");
}

fn generate(guests: &[Guest], artifacts: &Path) -> String {
    let mut code = String::new();
    let path_of = |guest: &Guest| {
        let file = artifacts.join(format!("{}.wasm", guest.package.replace('-', "_")));
        assert!(file.exists(), "{} was not built", file.display());
        file
    };

    code.push_str(
        "/// Plugins embedded in the host, by name.\npub const BUILTINS: &[Builtin] = &[\n",
    );
    for guest in guests.iter().filter(|g| g.builtin) {
        writeln!(
            code,
            "    Builtin {{ name: {:?}, wasm: include_bytes!({:?}) }},",
            guest.plugin,
            path_of(guest)
        )
        .unwrap();
    }
    code.push_str("];\n\n");

    let mut by_const = BTreeMap::new();
    for guest in guests {
        let constant = guest.plugin.to_uppercase().replace('-', "_");
        writeln!(
            code,
            "/// Path of the `{}` component.\npub const {constant}: &str = {:?};",
            guest.plugin,
            path_of(guest)
        )
        .unwrap();
        by_const.insert(guest.plugin.replace('-', "_"), constant);
    }

    code.push_str(
        "\n/// Calls `$mac!(name, PATH)` for every test guest, so a test suite can\n\
         /// require a test per guest.\n#[macro_export]\nmacro_rules! foreach_test_guest {\n    ($mac:ident) => {\n",
    );
    for guest in guests.iter().filter(|g| !g.builtin) {
        let ident = guest.plugin.replace('-', "_");
        writeln!(
            code,
            "        $mac!({ident}, $crate::{});",
            by_const[&ident]
        )
        .unwrap();
    }
    code.push_str("    };\n}\n");
    code
}
