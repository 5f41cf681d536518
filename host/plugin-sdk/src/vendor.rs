//! This crate as a self-contained copy, for a plugin project to carry.
//!
//! `sandfleet plugin new --lang rust` writes the SDK into the new project
//! (`sandfleet-plugin-sdk/`) and depends on it by path: until the crate is
//! published, a project outside this repository builds with no registry
//! publication and no path into a checkout, and its SDK is exactly the one
//! of the `sandfleet` binary that made it (same contract versions). Once
//! published, the dependency becomes `sandfleet-plugin-sdk = "<version>"`.

use crate::wit::CONTRACTS;

/// The `wit-bindgen` requirement the copy's manifest carries; the same as
/// the workspace's (a test holds them equal).
pub const WIT_BINDGEN: &str = "0.60";

/// One file of the copy, relative to its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendoredFile {
    /// A relative path with `/` separators, e.g. `src/lib.rs`.
    pub path: String,
    /// Its text.
    pub text: String,
}

macro_rules! sources {
    ($($file:literal),+ $(,)?) => {
        &[$(($file, include_str!(concat!("../", $file)))),+]
    };
}

/// The crate's own files, as they are in the repository.
const SOURCES: &[(&str, &str)] = sources!(
    "README.md",
    "src/bindings.rs",
    "src/clusters.rs",
    "src/failure.rs",
    "src/lib.rs",
    "src/vendor.rs",
    "src/wit.rs",
);

/// Every file of the copy: a standalone `Cargo.toml` (no workspace
/// inheritance), the sources, and each contract version's WIT under
/// `wit/since_v<version>/`.
pub fn files() -> Vec<VendoredFile> {
    let mut files = vec![VendoredFile {
        path: "Cargo.toml".to_string(),
        text: manifest(),
    }];
    files.extend(SOURCES.iter().map(|(path, text)| VendoredFile {
        path: path.to_string(),
        text: text.to_string(),
    }));
    for contract in CONTRACTS {
        files.extend(contract.files.iter().map(|file| VendoredFile {
            path: format!("wit/{}/{}", contract.dir_name(), file.name),
            text: file.text.to_string(),
        }));
    }
    files
}

fn manifest() -> String {
    format!(
        r#"# A copy of sandfleet-plugin-sdk {version}, written by `sandfleet plugin new`.
[package]
name = "sandfleet-plugin-sdk"
version = "{version}"
edition = "2024"
rust-version = "{rust_version}"
license = "{license}"
description = "{description}"
publish = false

[features]
default = ["bindings"]
bindings = ["dep:wit-bindgen"]

[dependencies]
wit-bindgen = {{ version = "{WIT_BINDGEN}", default-features = false, features = ["macros", "realloc"], optional = true }}
"#,
        version = env!("CARGO_PKG_VERSION"),
        rust_version = env!("CARGO_PKG_RUST_VERSION"),
        license = env!("CARGO_PKG_LICENSE"),
        description = env!("CARGO_PKG_DESCRIPTION"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The source list is written by hand; a module added to `src/`
    /// without being listed here fails this test.
    #[test]
    fn every_source_file_is_in_the_copy() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk: Vec<String> = std::fs::read_dir(root.join("src"))
            .unwrap()
            .map(|e| format!("src/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.push("README.md".to_string());
        on_disk.sort();
        let listed: Vec<&str> = SOURCES.iter().map(|(path, _)| *path).collect();
        assert_eq!(listed, on_disk);
    }

    #[test]
    fn the_copy_asks_for_the_workspace_wit_bindgen() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let text = std::fs::read_to_string(workspace).unwrap();
        let line = text
            .lines()
            .find(|line| line.starts_with("wit-bindgen ="))
            .expect("the workspace depends on wit-bindgen");
        assert!(
            line.contains(&format!("version = \"{WIT_BINDGEN}\"")),
            "the copy asks for wit-bindgen {WIT_BINDGEN}, the workspace: {line}"
        );
    }

    #[test]
    fn the_copy_has_a_standalone_manifest_and_every_contract() {
        let files = files();
        let manifest = &files[0];
        assert_eq!(manifest.path, "Cargo.toml");
        assert!(!manifest.text.contains("workspace"), "{}", manifest.text);
        assert!(
            manifest
                .text
                .contains(&format!("version = \"{}\"", env!("CARGO_PKG_VERSION")))
        );
        for contract in CONTRACTS {
            let worlds = format!("wit/since_v{}/worlds.wit", contract.version);
            assert!(
                files.iter().any(|f| f.path == worlds),
                "{worlds} is missing"
            );
        }
    }
}
