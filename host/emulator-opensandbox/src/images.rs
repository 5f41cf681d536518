//! Which images the emulator can make sandboxes of: names mapped to local
//! directories (`--image REF=DIR`) or to OCI references, from the
//! `[clusters.<name>.images]` tables of a fleet file (`--images-from`,
//! relative paths relative to that file; `name = { oci = "REF" }` beside
//! directory entries). Any other image that names a reference (a registry,
//! a repository path, a tag or a digest) is pulled as it is, with isolated
//! sandboxes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandfleet_backend_local::{ImageSource, LimitOverrides, LocalConfig, OciSource};

/// Image names and the directories they come from.
pub type ImageMap = BTreeMap<String, ImageSource>;

/// Image names and the OCI references they stand for.
pub type OciMap = BTreeMap<String, OciSource>;

/// The images of a fleet file: names of directories and names of OCI
/// references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetImages {
    /// Directory images.
    pub directories: ImageMap,
    /// OCI images (`{ oci = "REF" }`).
    pub oci: OciMap,
}

impl FleetImages {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.directories.is_empty() && self.oci.is_empty()
    }

    /// Every name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .directories
            .keys()
            .chain(self.oci.keys())
            .cloned()
            .collect();
        names.sort();
        names
    }
}

impl From<ImageMap> for FleetImages {
    fn from(directories: ImageMap) -> Self {
        FleetImages {
            directories,
            oci: OciMap::new(),
        }
    }
}

/// One `[clusters.<name>.images]` entry, read as the local backend reads it.
fn image_entry(name: &str, value: &toml::Value) -> anyhow::Result<Entry> {
    let mut images = toml::Table::new();
    images.insert(name.to_string(), value.clone());
    let mut table = toml::Table::new();
    table.insert("images".into(), toml::Value::Table(images));
    let mut config: LocalConfig = toml::Value::Table(table).try_into()?;
    if let Some(source) = config.oci_images.remove(name) {
        if let Err(error) = sandfleet_images::Reference::parse(&source.reference) {
            bail!("{error}");
        }
        return Ok(Entry::Oci(source));
    }
    match config.images.remove(name) {
        Some(source) => Ok(Entry::Directory(source)),
        None => bail!("not an image entry"),
    }
}

enum Entry {
    Directory(ImageSource),
    Oci(OciSource),
}

/// Parses `REF=DIR` (a directory, snapshotted into git so tasks can use
/// it, as the fleet file's `git = true` does).
///
/// # Errors
///
/// When there is no `=`, or either side is empty.
pub fn parse_image_arg(text: &str) -> Result<(String, ImageSource), String> {
    let (reference, dir) = text
        .split_once('=')
        .ok_or_else(|| format!("--image `{text}`: expected REF=DIR"))?;
    if reference.trim().is_empty() || dir.trim().is_empty() {
        return Err(format!(
            "--image `{text}`: expected REF=DIR, both non-empty"
        ));
    }
    let path = PathBuf::from(dir.trim());
    let path = if path.is_relative() {
        std::env::current_dir()
            .map(|cwd| cwd.join(&path))
            .unwrap_or(path)
    } else {
        path
    };
    Ok((
        reference.trim().to_string(),
        ImageSource {
            path,
            git: true,
            limits: LimitOverrides::default(),
        },
    ))
}

/// The images of every `[clusters.<name>.images]` table in the fleet file
/// at `path`: directories (relative paths resolved against its directory)
/// and OCI references (`{ oci = "REF" }`).
///
/// # Errors
///
/// When the file cannot be read or parsed, an image entry is malformed
/// (the error names the file, the cluster and the entry), or two clusters
/// map the same name to different images.
pub fn images_from_fleet(path: &Path) -> anyhow::Result<FleetImages> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--images-from {}: cannot read it", path.display()))?;
    let document: toml::Table = toml::from_str(&text)
        .with_context(|| format!("--images-from {}: not a TOML fleet file", path.display()))?;
    // Image directories are relative to the fleet file, wherever the
    // emulator was started.
    let absolute = std::path::absolute(path)
        .with_context(|| format!("--images-from {}: cannot resolve it", path.display()))?;
    let base = absolute
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut images = FleetImages::default();
    let Some(clusters) = document.get("clusters") else {
        bail!(
            "--images-from {}: it has no [clusters.<name>.images] table",
            path.display()
        );
    };
    // A fleet file writes `[[clusters]]` entries (name, backend) with the
    // settings in a sub-table named after the cluster, `[clusters.<name>]`;
    // a table keyed by cluster name is read too.
    let tables: Vec<(String, &toml::Table)> = match clusters {
        toml::Value::Table(by_name) => by_name
            .iter()
            .filter_map(|(name, v)| v.as_table().map(|t| (name.clone(), t)))
            .collect(),
        toml::Value::Array(entries) => entries
            .iter()
            .filter_map(toml::Value::as_table)
            .flat_map(|entry| {
                entry
                    .iter()
                    .filter_map(|(key, v)| v.as_table().map(|t| (key.clone(), t)))
            })
            .collect(),
        _ => bail!(
            "--images-from {}: `clusters` is neither a table nor an array",
            path.display()
        ),
    };
    for (cluster, table) in tables {
        let Some(entries) = table.get("images").and_then(toml::Value::as_table) else {
            continue;
        };
        for (reference, value) in entries {
            let entry = image_entry(reference, value).with_context(|| {
                format!(
                    "--images-from {}: clusters.{cluster}.images.{reference}",
                    path.display()
                )
            })?;
            let mut source = match entry {
                Entry::Directory(source) => source,
                Entry::Oci(source) => {
                    let elsewhere = images
                        .directories
                        .get(reference)
                        .map(|d| d.path.display().to_string());
                    let known = images
                        .oci
                        .get(reference)
                        .map(|o| o.reference.clone())
                        .or(elsewhere);
                    if let Some(known) = known.filter(|known| *known != source.reference) {
                        bail!(
                            "--images-from {}: image `{reference}` is {known} in one cluster and {} in \
                             clusters.{cluster}",
                            path.display(),
                            source.reference
                        );
                    }
                    images.oci.insert(reference.clone(), source);
                    continue;
                }
            };
            if source.path.is_relative() {
                source.path = base.join(&source.path);
            }
            let known = images
                .directories
                .get(reference)
                .map(|d| d.path.display().to_string())
                .or_else(|| images.oci.get(reference).map(|o| o.reference.clone()));
            if let Some(known) = known.filter(|known| *known != source.path.display().to_string()) {
                bail!(
                    "--images-from {}: image `{reference}` is {known} in one cluster and {} in \
                     clusters.{cluster}",
                    path.display(),
                    source.path.display()
                );
            }
            images.directories.insert(reference.clone(), source);
        }
    }
    if images.is_empty() {
        bail!(
            "--images-from {}: no [clusters.<name>.images] entries",
            path.display()
        );
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_args_split_at_the_first_equals() {
        let (reference, source) = parse_image_arg("python:3.11=/srv/py").unwrap();
        assert_eq!(reference, "python:3.11");
        assert_eq!(source.path, PathBuf::from("/srv/py"));
        assert!(parse_image_arg("nodir").unwrap_err().contains("REF=DIR"));
        assert!(parse_image_arg("=/x").is_err());
    }

    #[test]
    fn fleet_images_resolve_against_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        std::fs::write(
            &fleet,
            r#"
[run]
name = "x"

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "../state"

[clusters.local.images]
calc = { path = "images/calc", git = true }
plain = "/abs/plain"
"#,
        )
        .unwrap();
        let images = images_from_fleet(&fleet).unwrap().directories;
        assert_eq!(images["calc"].path, dir.path().join("images/calc"));
        assert!(images["calc"].git);
        assert_eq!(images["plain"].path, PathBuf::from("/abs/plain"));
    }

    #[test]
    fn the_quickstart_fleet_file_has_its_three_images() {
        let fleet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
        let images = images_from_fleet(&fleet).unwrap().directories;
        assert_eq!(
            images.keys().map(String::as_str).collect::<Vec<_>>(),
            ["calc", "shellutils", "textkit"]
        );
        assert!(images["calc"].path.join("calc.py").exists() || images["calc"].path.exists());
    }

    #[test]
    fn oci_entries_sit_beside_directories_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        let write = |images: &str| {
            std::fs::write(
                &fleet,
                format!(
                    "[[clusters]]\nname = \"dev\"\nbackend = \"local\"\n\n\
                     [clusters.dev.images]\n{images}"
                ),
            )
            .unwrap();
        };
        write("calc = \"images/calc\"\npy = { oci = \"127.0.0.1:5000/py:3.11\", pids = 64 }\n");
        let images = images_from_fleet(&fleet).unwrap();
        assert_eq!(
            images.directories["calc"].path,
            dir.path().join("images/calc")
        );
        assert_eq!(images.oci["py"].reference, "127.0.0.1:5000/py:3.11");
        assert_eq!(images.oci["py"].limits.pids, Some(64));
        assert_eq!(images.names(), ["calc", "py"]);
        for (entry, why) in [
            ("py = { oci = \"Bad Ref!\" }", "is not an image reference"),
            ("py = { oci = \"a:1\", path = \"x\" }", "not both"),
            (
                "py = { oci = \"a:1\", git = true }",
                "`git` is for directory images",
            ),
            ("py = { oci = \"a:1\", colour = 1 }", "colour"),
            ("py = { oci = 3 }", "string"),
        ] {
            write(&format!("{entry}\n"));
            let error = format!("{:#}", images_from_fleet(&fleet).unwrap_err());
            assert!(
                error.contains(&format!(
                    "--images-from {}: clusters.dev.images.py",
                    fleet.display()
                )),
                "{entry}: {error}"
            );
            assert!(error.contains(why), "{entry}: {error}");
        }
    }

    #[test]
    fn a_file_without_images_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        std::fs::write(&fleet, "[run]\nname = \"x\"\n").unwrap();
        let error = format!("{:#}", images_from_fleet(&fleet).unwrap_err());
        assert!(error.contains("no [clusters.<name>.images]"), "{error}");
    }
}
