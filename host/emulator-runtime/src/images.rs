//! Which images an emulator can run: names mapped to local directories
//! (`--image REF=DIR`, or directory entries of a fleet file) or to OCI
//! references (`name = { oci = "REF" }` entries). Any other image that names
//! a reference (a registry, a repository path, a tag or a digest) is pulled
//! as it is, with isolated sandboxes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandfleet_backend_local::{ImageSource, LimitOverrides, OciSource};

/// Image names and the directories they come from.
pub type ImageMap = BTreeMap<String, ImageSource>;

/// Image names and the OCI references they stand for.
pub type OciMap = BTreeMap<String, OciSource>;

/// Image names and what they stand for: directories and OCI references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetImages {
    /// Directory images.
    pub directories: ImageMap,
    /// OCI images (`{ oci = "REF" }`).
    pub oci: OciMap,
}

impl FleetImages {
    /// The images of `--images-from` (none without it) with each `--image`
    /// on top: a name given on the command line is the directory it says,
    /// whatever the fleet file maps it to.
    ///
    /// # Errors
    ///
    /// When the fleet file cannot be read (see [`crate::images_from_fleet`]).
    pub fn from_args(
        images_from: Option<&Path>,
        images: &[(String, ImageSource)],
    ) -> anyhow::Result<Self> {
        let mut resolved = match images_from {
            Some(fleet) => crate::images_from_fleet(fleet)?,
            None => FleetImages::default(),
        };
        for (name, source) in images {
            resolved.oci.remove(name);
            resolved.directories.insert(name.clone(), source.clone());
        }
        Ok(resolved)
    }

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

    /// Checks that every directory image is a directory, before anything is
    /// made of one.
    ///
    /// # Errors
    ///
    /// Names the first image whose path is not a directory.
    pub fn check_directories(&self) -> anyhow::Result<()> {
        for (reference, source) in &self.directories {
            anyhow::ensure!(
                source.path.is_dir(),
                "image `{reference}`: {} is not a directory",
                source.path.display()
            );
        }
        Ok(())
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
    fn a_command_line_image_wins_over_the_fleet_files_oci_entry() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.toml");
        std::fs::write(
            &fleet,
            "[clusters.dev.images]\npy = { oci = \"127.0.0.1:5000/py:3.11\" }\ncalc = \"calc\"\n",
        )
        .unwrap();
        let arg = parse_image_arg("py=/srv/py").unwrap();
        let images = FleetImages::from_args(Some(&fleet), &[arg]).unwrap();
        assert_eq!(images.directories["py"].path, PathBuf::from("/srv/py"));
        assert!(images.oci.is_empty());
        assert_eq!(images.names(), ["calc", "py"]);
        assert!(FleetImages::from_args(None, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_missing_directory_is_named() {
        let images = FleetImages::from(ImageMap::from([(
            "calc".to_string(),
            parse_image_arg("calc=/nonexistent/calc").unwrap().1,
        )]));
        let error = images.check_directories().unwrap_err().to_string();
        assert_eq!(error, "image `calc`: /nonexistent/calc is not a directory");
    }
}
