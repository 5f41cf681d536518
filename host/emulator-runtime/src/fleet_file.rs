//! The one reader of `--images-from FLEET.toml`, for both emulators: the
//! images of every `[clusters.<name>.images]` table of a fleet file,
//! directories (relative paths relative to that file) beside OCI references
//! (`name = { oci = "REF" }`), each entry read as the local backend reads
//! it. Everything else in the file is the fleet's business and ignored.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandfleet_backend_local::{ImageSource, LocalConfig, OciSource};
use serde::Deserialize;

use crate::images::FleetImages;

/// The part of a fleet file this reads.
#[derive(Deserialize)]
struct FleetFile {
    clusters: Option<Clusters>,
}

/// A fleet file writes `[[clusters]]` entries (name, backend) with the
/// settings in a sub-table of each (`[clusters.local]`); a table keyed by
/// cluster name is read too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Clusters {
    Entries(Vec<toml::Value>),
    ByName(toml::Table),
}

impl Clusters {
    /// Each settings table, with the name it sits under.
    fn settings(&self) -> Vec<(&str, &toml::Table)> {
        match self {
            Clusters::Entries(entries) => entries
                .iter()
                .filter_map(toml::Value::as_table)
                .flat_map(tables)
                .collect(),
            Clusters::ByName(by_name) => tables(by_name).collect(),
        }
    }
}

/// The tables among `entry`'s values, with their keys.
fn tables(entry: &toml::Table) -> impl Iterator<Item = (&str, &toml::Table)> {
    entry
        .iter()
        .filter_map(|(key, value)| value.as_table().map(|table| (key.as_str(), table)))
}

/// One `[clusters.<name>.images]` entry.
enum Entry {
    Directory(ImageSource),
    Oci(OciSource),
}

impl Entry {
    /// Reads `name = value` as the local backend reads its `images` table,
    /// so an entry the emulators accept is one a local cluster accepts.
    fn read(name: &str, value: &toml::Value) -> anyhow::Result<Entry> {
        let images = toml::Table::from_iter([(name.to_string(), value.clone())]);
        let table = toml::Table::from_iter([("images".to_string(), toml::Value::Table(images))]);
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
}

/// The images of every `[clusters.<name>.images]` table in the fleet file
/// at `path`: directories (relative paths resolved against its directory)
/// and OCI references (`{ oci = "REF" }`).
///
/// # Errors
///
/// When the file cannot be read or parsed, an image entry is malformed
/// (the error names the file, the cluster and the entry), two clusters
/// map the same name to different images, or there are no images.
pub fn images_from_fleet(path: &Path) -> anyhow::Result<FleetImages> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--images-from {shown}: cannot read it"))?;
    let document: toml::Table = toml::from_str(&text)
        .with_context(|| format!("--images-from {shown}: not a TOML fleet file"))?;
    let file: FleetFile = toml::Value::Table(document).try_into().map_err(|_| {
        anyhow::anyhow!("--images-from {shown}: `clusters` is neither a table nor an array")
    })?;
    let Some(clusters) = file.clusters else {
        bail!("--images-from {shown}: it has no [clusters.<name>.images] table");
    };
    // Image directories are relative to the fleet file, wherever the
    // emulator was started.
    let absolute = std::path::absolute(path)
        .with_context(|| format!("--images-from {shown}: cannot resolve it"))?;
    let base = absolute
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut images = FleetImages::default();
    for (cluster, settings) in clusters.settings() {
        let Some(entries) = settings.get("images").and_then(toml::Value::as_table) else {
            continue;
        };
        for (reference, value) in entries {
            let entry = Entry::read(reference, value).with_context(|| {
                format!("--images-from {shown}: clusters.{cluster}.images.{reference}")
            })?;
            let (known, this) = match entry {
                Entry::Oci(source) => {
                    let this = source.reference.clone();
                    let known = images.image(reference);
                    images.oci.insert(reference.clone(), source);
                    (known, this)
                }
                Entry::Directory(mut source) => {
                    if source.path.is_relative() {
                        source.path = base.join(&source.path);
                    }
                    let this = source.path.display().to_string();
                    let known = images.image(reference);
                    images.directories.insert(reference.clone(), source);
                    (known, this)
                }
            };
            if let Some(known) = known.filter(|known| *known != this) {
                bail!(
                    "--images-from {shown}: image `{reference}` is {known} in one cluster and \
                     {this} in clusters.{cluster}"
                );
            }
        }
    }
    if images.is_empty() {
        bail!("--images-from {shown}: no [clusters.<name>.images] entries");
    }
    Ok(images)
}

impl FleetImages {
    /// What `name` stands for so far, as an error shows it: a directory or
    /// a reference.
    fn image(&self, name: &str) -> Option<String> {
        self.oci.get(name).map(|o| o.reference.clone()).or_else(|| {
            self.directories
                .get(name)
                .map(|d| d.path.display().to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("py = { path = 3 }", "string"),
            ("py = { path = \"x\", gti = true }", "gti"),
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
    fn two_clusters_that_disagree_on_an_image_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        std::fs::write(
            &fleet,
            "[clusters.a.images]\npy = { oci = \"reg/py:3.11\" }\n\
             [clusters.b.images]\npy = \"/srv/py\"\n",
        )
        .unwrap();
        let error = format!("{:#}", images_from_fleet(&fleet).unwrap_err());
        assert!(
            error.contains(&format!(
                "--images-from {}: image `py` is reg/py:3.11 in one cluster and /srv/py in \
                 clusters.b",
                fleet.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn a_file_without_images_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        std::fs::write(&fleet, "[run]\nname = \"x\"\n").unwrap();
        let error = format!("{:#}", images_from_fleet(&fleet).unwrap_err());
        assert!(error.contains("no [clusters.<name>.images]"), "{error}");
        std::fs::write(&fleet, "clusters = 3\n").unwrap();
        let error = format!("{:#}", images_from_fleet(&fleet).unwrap_err());
        assert!(
            error.contains(&format!(
                "--images-from {}: `clusters` is neither a table nor an array",
                fleet.display()
            )),
            "{error}"
        );
    }
}
