//! `sandfleet plugin new` and `sandfleet plugin wit`: a ready-to-build
//! plugin project per world and language, and the contract's WIT on disk.
//!
//! Every project gets the contract from the SDK crate
//! (`sandfleet-plugin-sdk`), never from a checkout: a Rust project carries a
//! copy of the SDK (its WIT embedded) and depends on it by path, so it
//! builds anywhere without a registry publication; Python and JavaScript
//! projects get the WIT files their tools read. Projects are written into a
//! staging directory and renamed into place, so a failure leaves nothing
//! half-written.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use sandfleet_plugin_sdk::{vendor, wit};

/// A language `plugin new` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Python,
    Js,
}

impl Lang {
    const ALL: [(&'static str, Lang); 3] = [
        ("rust", Lang::Rust),
        ("python", Lang::Python),
        ("js", Lang::Js),
    ];

    fn parse(text: &str) -> anyhow::Result<Lang> {
        Lang::ALL
            .iter()
            .find(|(name, _)| *name == text)
            .map(|&(_, lang)| lang)
            .with_context(|| {
                format!(
                    "unknown language `{text}`: expected one of {}",
                    Lang::ALL.map(|(name, _)| name).join(", ")
                )
            })
    }

    fn name(self) -> &'static str {
        Lang::ALL.iter().find(|(_, l)| *l == self).unwrap().0
    }
}

/// The template files of one world in one language.
struct Template {
    world: &'static str,
    lang: Lang,
    /// The plugin's source and where it goes in the project.
    source: (&'static str, &'static str),
    cases: &'static str,
    /// Lines for the Rust manifest's `[dependencies]`.
    dependencies: &'static str,
    /// How a fleet file selects the plugin.
    fleet_config: &'static str,
}

const PLACEMENT_CASES: &str = include_str!("templates/cases/placement-policy.toml");
const SIZING_CASES: &str = include_str!("templates/cases/sizing-policy.toml");
const RESET_CASES: &str = include_str!("templates/cases/reset-check.toml");
const ADAPTER_CASES: &str = include_str!("templates/cases/task-adapter.toml");
const PLACEMENT_CONFIG: &str = "[plugins]\ndir = \"plugins\"\nplacement = \"{{name}}\"";
const SIZING_CONFIG: &str = "[plugins]\ndir = \"plugins\"\nsizing = \"{{name}}\"";
const RESET_CONFIG: &str = "[plugins]\ndir = \"plugins\"\nreset = \"{{name}}\"";
const ADAPTER_CONFIG: &str = "[plugins]\ndir = \"plugins\"\n\n[adapter]\nname = \"{{name}}\"";

const TEMPLATES: &[Template] = &[
    Template {
        world: "placement-policy",
        lang: Lang::Rust,
        source: (
            "src/lib.rs",
            include_str!("templates/rust/placement-policy.rs"),
        ),
        cases: PLACEMENT_CASES,
        dependencies: "",
        fleet_config: PLACEMENT_CONFIG,
    },
    Template {
        world: "sizing-policy",
        lang: Lang::Rust,
        source: (
            "src/lib.rs",
            include_str!("templates/rust/sizing-policy.rs"),
        ),
        cases: SIZING_CASES,
        dependencies: "",
        fleet_config: SIZING_CONFIG,
    },
    Template {
        world: "reset-check",
        lang: Lang::Rust,
        source: ("src/lib.rs", include_str!("templates/rust/reset-check.rs")),
        cases: RESET_CASES,
        dependencies: "",
        fleet_config: RESET_CONFIG,
    },
    Template {
        world: "task-adapter",
        lang: Lang::Rust,
        source: ("src/lib.rs", include_str!("templates/rust/task-adapter.rs")),
        cases: ADAPTER_CASES,
        dependencies: "serde_json = \"1\"\n",
        fleet_config: ADAPTER_CONFIG,
    },
    Template {
        world: "placement-policy",
        lang: Lang::Python,
        source: (
            "app.py",
            include_str!("templates/python/placement-policy.py"),
        ),
        cases: PLACEMENT_CASES,
        dependencies: "",
        fleet_config: PLACEMENT_CONFIG,
    },
    Template {
        world: "sizing-policy",
        lang: Lang::Python,
        source: ("app.py", include_str!("templates/python/sizing-policy.py")),
        cases: SIZING_CASES,
        dependencies: "",
        fleet_config: SIZING_CONFIG,
    },
    Template {
        world: "placement-policy",
        lang: Lang::Js,
        source: ("app.js", include_str!("templates/js/placement-policy.js")),
        cases: PLACEMENT_CASES,
        dependencies: "",
        fleet_config: PLACEMENT_CONFIG,
    },
    Template {
        world: "sizing-policy",
        lang: Lang::Js,
        source: ("app.js", include_str!("templates/js/sizing-policy.js")),
        cases: SIZING_CASES,
        dependencies: "",
        fleet_config: SIZING_CONFIG,
    },
];

/// Writes a new `world` plugin project named `name` in `lang` into `dir`
/// (default `./<name>`), which must not exist; returns the directory.
pub(super) fn new_project(
    world: &str,
    name: &str,
    lang: &str,
    dir: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    if !wit::WORLDS.contains(&world) {
        bail!(
            "unknown world `{world}`: expected one of {}",
            wit::WORLDS.join(", ")
        );
    }
    let lang = Lang::parse(lang)?;
    check_name(name)?;
    let Some(template) = TEMPLATES
        .iter()
        .find(|t| t.world == world && t.lang == lang)
    else {
        let worlds: Vec<&str> = TEMPLATES
            .iter()
            .filter(|t| t.lang == lang)
            .map(|t| t.world)
            .collect();
        bail!(
            "no {} template for {world}: {} projects can be {} (rust has every world)",
            lang.name(),
            lang.name(),
            worlds.join(" or ")
        );
    };
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir.symlink_metadata().is_ok() {
        bail!(
            "{} already exists: `plugin new` writes a new directory (choose another name or --dir)",
            dir.display()
        );
    }
    let files = project_files(template, name);
    write_atomically(&dir, &files)?;
    Ok(dir)
}

/// Crate, package and module names all follow from the plugin's name, and
/// so does its `.wasm` file and the name a fleet file selects it by.
fn check_name(name: &str) -> anyhow::Result<()> {
    const RESERVED: &[&str] = &[
        "std",
        "core",
        "alloc",
        "test",
        "proc_macro",
        "self",
        "super",
        "crate",
        "sandfleet-plugin-sdk",
        "node_modules",
        "favicon.ico",
    ];
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with(['-', '_'])
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` is not a valid plugin name: use at most 64 lowercase letters, digits, `-` and `_`, starting with a letter (it names the crate or package and the .wasm file)"
        );
    }
    if RESERVED.contains(&name) || is_rust_keyword(name) {
        bail!("`{name}` is not a valid plugin name: it is reserved in Rust, Cargo or npm");
    }
    Ok(())
}

fn is_rust_keyword(name: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "box", "break", "const", "continue", "do", "dyn", "else", "enum",
        "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
        "move", "mut", "priv", "pub", "ref", "return", "static", "struct", "trait", "true", "try",
        "type", "typeof", "unsafe", "use", "where", "while", "yield",
    ];
    KEYWORDS.contains(&name)
}

/// Every file of a new project: relative path and text.
fn project_files(template: &Template, name: &str) -> Vec<(String, String)> {
    let contract = wit::latest();
    let fill = |text: &str| {
        text.replace("{{use_config}}", template.fleet_config)
            .replace("{{extra_dependencies}}", template.dependencies)
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{world}}", template.world)
            .replace("{{contract}}", contract.version)
    };
    let (readme, gitignore) = match template.lang {
        Lang::Rust => (
            include_str!("templates/rust/README.md"),
            include_str!("templates/rust/gitignore"),
        ),
        Lang::Python => (
            include_str!("templates/python/README.md"),
            include_str!("templates/python/gitignore"),
        ),
        Lang::Js => (
            include_str!("templates/js/README.md"),
            include_str!("templates/js/gitignore"),
        ),
    };
    let mut files = vec![
        (template.source.0.to_string(), fill(template.source.1)),
        ("cases.toml".to_string(), fill(template.cases)),
        ("README.md".to_string(), fill(readme)),
        (".gitignore".to_string(), gitignore.to_string()),
    ];
    match template.lang {
        Lang::Rust => {
            files.push((
                "Cargo.toml".to_string(),
                fill(include_str!("templates/rust/Cargo.toml")),
            ));
            files.extend(
                vendor::files()
                    .into_iter()
                    .map(|file| (format!("sandfleet-plugin-sdk/{}", file.path), file.text)),
            );
        }
        Lang::Python | Lang::Js => {
            if template.lang == Lang::Js {
                files.push((
                    "package.json".to_string(),
                    fill(include_str!("templates/js/package.json")),
                ));
            }
            files.extend(
                contract
                    .files
                    .iter()
                    .map(|file| (format!("wit/{}", file.name), file.text.to_string())),
            );
        }
    }
    files
}

/// Writes `files` under a staging directory beside `dir`, then renames it
/// to `dir`; on any failure the staging directory is removed.
fn write_atomically(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("{}: cannot create", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".sandfleet-plugin-new-")
        .tempdir_in(&parent)
        .with_context(|| format!("{}: cannot write", parent.display()))?;
    for (path, text) in files {
        let target = staging.path().join(path);
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("{}: cannot create", folder.display()))?;
        }
        std::fs::write(&target, text)
            .with_context(|| format!("{}: cannot write", target.display()))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dir).map_err(|error| {
        let _ = std::fs::remove_dir_all(&staged);
        anyhow::Error::new(error).context(format!("{}: cannot create", dir.display()))
    })
}

/// Writes the `.wit` files of contract `version` (default: the newest)
/// into `out`, which is created if missing; returns the contract.
pub(super) fn write_wit(
    version: Option<&str>,
    out: &Path,
) -> anyhow::Result<&'static wit::Contract> {
    let contract = match version {
        None => wit::latest(),
        Some(version) => wit::contract(version).with_context(|| {
            format!(
                "unknown contract version `{version}`: this sandfleet serves {}",
                wit::CONTRACTS
                    .iter()
                    .map(|c| c.version)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
    };
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    for file in contract.files {
        let path = out.join(file.name);
        std::fs::write(&path, file.text)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(contract)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_a_crate_a_package_and_a_file_are_refused() {
        for good in ["my-policy", "p2", "fewest_live"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "My-Policy",
            "2fast",
            "my policy",
            "a/b",
            "-x",
            "x-",
            "fn",
            "std",
            "é",
        ] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(error.contains("not a valid plugin name"), "{bad}: {error}");
        }
        assert!(check_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn every_template_fills_every_placeholder() {
        for template in TEMPLATES {
            let written = project_files(template, "my-policy");
            // The SDK's copy is written as it is (its sources use `{{`).
            let filled = written
                .iter()
                .filter(|(path, _)| !path.starts_with("sandfleet-plugin-sdk/"));
            for (path, text) in filled {
                assert!(
                    !text.contains("{{"),
                    "{} {}: {path} keeps a placeholder",
                    template.world,
                    template.lang.name()
                );
            }
        }
    }

    #[test]
    fn each_world_has_a_rust_template_and_cases_naming_it() {
        for world in wit::WORLDS {
            let template = TEMPLATES
                .iter()
                .find(|t| t.world == world && t.lang == Lang::Rust)
                .unwrap_or_else(|| panic!("{world}: no rust template"));
            assert!(
                template.cases.contains(&format!("world = \"{world}\"")),
                "{world}"
            );
        }
    }
}
