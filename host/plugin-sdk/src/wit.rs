//! The contract's WIT text, every supported version, embedded in the crate.
//!
//! Tools that need the `.wit` files on disk (componentize-py, jco, a
//! `wit-bindgen` of another language) get them from here — `sandfleet
//! plugin wit --out DIR` writes [`Contract::files`] — so nobody copies them
//! from a checkout by hand, and a plugin is always built against the exact
//! text this SDK's bindings were generated from.

/// One published version of the contract: the `sandfleet:plugin` package
/// as it lies in `wit/since_v<version>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    /// The package version, e.g. `0.2.0`.
    pub version: &'static str,
    /// Every `.wit` file of the package, by file name.
    pub files: &'static [WitFile],
}

/// One `.wit` file of a contract version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WitFile {
    /// The file name, e.g. `placement.wit`.
    pub name: &'static str,
    /// Its text.
    pub text: &'static str,
}

impl Contract {
    /// The directory name the repository keeps this version in, e.g.
    /// `since_v0.2.0`.
    pub fn dir_name(&self) -> String {
        format!("since_v{}", self.version)
    }
}

macro_rules! contract {
    ($version:literal: $($file:literal),+ $(,)?) => {
        Contract {
            version: $version,
            files: &[$(WitFile {
                name: $file,
                text: include_str!(concat!("../wit/since_v", $version, "/", $file)),
            }),+],
        }
    };
}

/// Every contract version this SDK (and the host it ships with) serves,
/// newest first.
pub const CONTRACTS: &[Contract] = &[
    contract!("0.2.0": "adapter.wit", "host.wit", "placement.wit", "reset.wit", "sizing.wit", "types.wit", "worlds.wit"),
    contract!("0.1.0": "adapter.wit", "host.wit", "placement.wit", "reset.wit", "sizing.wit", "types.wit", "worlds.wit"),
];

/// The four worlds a plugin can implement, by their WIT names.
pub const WORLDS: [&str; 4] = [
    "placement-policy",
    "sizing-policy",
    "reset-check",
    "task-adapter",
];

/// The newest contract version, the one this crate's top-level modules and
/// export macros target.
pub fn latest() -> &'static Contract {
    &CONTRACTS[0]
}

/// The contract of `version` (`0.1.0` or `v0.1.0`), if this SDK has it.
pub fn contract(version: &str) -> Option<&'static Contract> {
    let version = version.strip_prefix('v').unwrap_or(version);
    CONTRACTS.iter().find(|c| c.version == version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The embedded lists are written by hand; a file or a version added to
    /// `wit/` without being embedded here fails this test.
    #[test]
    fn every_wit_file_of_the_repository_is_embedded_byte_for_byte() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(&wit)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = CONTRACTS.iter().map(Contract::dir_name).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        for contract in CONTRACTS {
            let dir = wit.join(contract.dir_name());
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let embedded: Vec<&str> = contract.files.iter().map(|f| f.name).collect();
            assert_eq!(embedded, names, "{}", dir.display());
            for file in contract.files {
                let text = std::fs::read_to_string(dir.join(file.name)).unwrap();
                assert!(text == file.text, "{}/{} differs", dir.display(), file.name);
                assert!(
                    file.name != "worlds.wit"
                        || text
                            .contains(&format!("package sandfleet:plugin@{};", contract.version)),
                    "{}: the package version is not {}",
                    dir.display(),
                    contract.version
                );
            }
        }
    }

    #[test]
    fn versions_are_found_with_or_without_a_v() {
        assert_eq!(contract("0.1.0").unwrap().version, "0.1.0");
        assert_eq!(contract("v0.2.0").unwrap().version, "0.2.0");
        assert!(contract("9.9.9").is_none());
        assert_eq!(latest().version, "0.2.0");
    }
}
