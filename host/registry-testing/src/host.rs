//! Host files for test images: programs with every library the loader
//! loads for them, copied into a layer at the paths they have on the host,
//! with every symbolic link on the way (the merged-`/usr` links among
//! them), so that the program runs in a sandbox of nothing but the image.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::image::Tar;

/// Adds `host` (a program or library) at its host path, and every library
/// the loader would load for it.
pub fn add_with_libraries(tar: Tar, host: &Path, seen: &mut BTreeSet<PathBuf>) -> Tar {
    let tar = add_path(tar, host, seen);
    add_libraries(tar, host, seen)
}

/// Adds the libraries `ldd` names for `file`, with the loader.
pub fn add_libraries(mut tar: Tar, file: &Path, seen: &mut BTreeSet<PathBuf>) -> Tar {
    let output = Command::new("ldd").arg(file).output().unwrap();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            tar = add_path(tar, Path::new(path), seen);
        }
    }
    tar
}

/// Adds `host` at its own path: its parent directories, every link on the
/// way (and what it points to), and the entry itself.
pub fn add_path(mut tar: Tar, host: &Path, seen: &mut BTreeSet<PathBuf>) -> Tar {
    let mut prefix = PathBuf::from("/");
    let components: Vec<_> = host.components().skip(1).collect();
    for (index, component) in components.iter().enumerate() {
        prefix.push(component);
        let last = index + 1 == components.len();
        if seen.contains(&prefix) {
            if prefix.is_symlink() {
                // Already added: continue below its target.
                let resolved = resolve(&prefix);
                let rest: PathBuf = components[index + 1..].iter().collect();
                return add_path(tar, &resolved.join(rest), seen);
            }
            continue;
        }
        seen.insert(prefix.clone());
        let name = prefix.strip_prefix("/").unwrap().display().to_string();
        tar = tar.host_entry(&name, &prefix);
        if prefix.is_symlink() {
            let resolved = resolve(&prefix);
            let rest: PathBuf = components[index + 1..].iter().collect();
            let target = if last { resolved } else { resolved.join(rest) };
            return add_path(tar, &target, seen);
        }
    }
    tar
}

/// Where the link at `link` points, as an absolute path.
fn resolve(link: &Path) -> PathBuf {
    let target = std::fs::read_link(link).unwrap();
    let joined = link.parent().unwrap().join(target);
    // Lexically: `..` within the host's tree, without following more links.
    let mut out = PathBuf::from("/");
    for component in joined.components().skip(1) {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A tar of the host's `programs` (each found in `/usr/bin` or `/bin`)
/// with their libraries, after the host's merged-`/usr` links (`/bin` →
/// `usr/bin`, …) where it has them: enough for an image that runs them.
///
/// # Panics
///
/// When the host lacks one of `programs`.
pub fn programs(programs: &[&str]) -> Tar {
    let mut seen = BTreeSet::new();
    let mut tar = Tar::new();
    for top in ["/bin", "/sbin", "/lib", "/lib64"] {
        if Path::new(top).is_symlink() {
            tar = add_path(tar, Path::new(top), &mut seen);
        }
    }
    for program in programs {
        let host = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(program))
            .find(|path| path.exists())
            .unwrap_or_else(|| panic!("the host has no `{program}` to copy into the image"));
        tar = add_with_libraries(tar, &host, &mut seen);
    }
    tar
}
