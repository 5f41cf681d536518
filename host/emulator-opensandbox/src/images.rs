//! Which image references the emulator can make sandboxes of, and the local
//! directories they come from: `--image REF=DIR` and the
//! `[clusters.<name>.images]` tables of a fleet file (`--images-from`),
//! whose relative paths are relative to that file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandfleet_backend_local::{ImageSource, LimitOverrides};

/// Image references and their sources.
pub type ImageMap = BTreeMap<String, ImageSource>;

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
/// at `path`, relative paths resolved against its directory.
///
/// # Errors
///
/// When the file cannot be read or parsed, an image entry is malformed,
/// or two clusters map the same reference to different directories.
pub fn images_from_fleet(path: &Path) -> anyhow::Result<ImageMap> {
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
    let mut images = ImageMap::new();
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
            let mut source: ImageSource = value.clone().try_into().with_context(|| {
                format!(
                    "--images-from {}: clusters.{cluster}.images.{reference}",
                    path.display()
                )
            })?;
            if source.path.is_relative() {
                source.path = base.join(&source.path);
            }
            if let Some(known) = images.get(reference)
                && known.path != source.path
            {
                bail!(
                    "--images-from {}: image `{reference}` is {} in one cluster and {} in \
                     clusters.{cluster}",
                    path.display(),
                    known.path.display(),
                    source.path.display()
                );
            }
            images.insert(reference.clone(), source);
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
        let images = images_from_fleet(&fleet).unwrap();
        assert_eq!(images["calc"].path, dir.path().join("images/calc"));
        assert!(images["calc"].git);
        assert_eq!(images["plain"].path, PathBuf::from("/abs/plain"));
    }

    #[test]
    fn the_quickstart_fleet_file_has_its_three_images() {
        let fleet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
        let images = images_from_fleet(&fleet).unwrap();
        assert_eq!(
            images.keys().map(String::as_str).collect::<Vec<_>>(),
            ["calc", "shellutils", "textkit"]
        );
        assert!(images["calc"].path.join("calc.py").exists() || images["calc"].path.exists());
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
