//! Host files for test images: programs with every library the loader
//! loads for them, copied into a layer at the paths they have on the host,
//! with every symbolic link on the way (the merged-`/usr` links among
//! them), so that the program runs in a sandbox of nothing but the image.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::image::Tar;

/// Adds `host` (a program or library) at its host path, and every library
/// the loader would load for it.
pub fn add_with_libraries(tar: Tar, host: &Path, seen: &mut BTreeSet<PathBuf>) -> Tar {
    let tar = add_path(tar, host, seen);
    add_libraries(tar, host, seen)
}

/// Adds the libraries `ldd` names for `file`, with the loader.
pub fn add_libraries(mut tar: Tar, file: &Path, seen: &mut BTreeSet<PathBuf>) -> Tar {
    let output = match loader() {
        Some(loader) => Command::new(loader).arg("--list").arg(file).output(),
        None => Command::new("ldd").arg(file).output(),
    }
    .unwrap();
    for path in listed_paths(&output.stdout) {
        tar = add_path(tar, &path, seen);
    }
    tar
}

/// The paths in the loader's list (`ldd`'s format): `name => path (address)`,
/// or `path (address)` for the loader itself; names it did not find, and
/// the vDSO, have none.
fn listed_paths(list: &[u8]) -> Vec<PathBuf> {
    String::from_utf8_lossy(list)
        .lines()
        .filter_map(|line| match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        })
        .filter(|path| path.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// The host's dynamic loader, as `ldd` names it for this process's own
/// program. Asking the loader directly (`--list`, what `ldd` runs) costs a
/// tenth of `ldd`, a shell script that starts the loader twice per file;
/// a test image asks for about seventy files in every test process.
fn loader() -> Option<&'static Path> {
    static LOADER: OnceLock<Option<PathBuf>> = OnceLock::new();
    LOADER
        .get_or_init(|| {
            let program = std::env::current_exe().ok()?;
            let output = Command::new("ldd").arg(program).output().ok()?;
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|line| !line.contains("=>"))
                .filter_map(|line| line.split_whitespace().next())
                .find(|path| path.starts_with('/'))
                .map(PathBuf::from)
        })
        .as_deref()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_lists_the_libraries_ldd_names() {
        let loader = loader().expect("this test's own program is dynamically linked");
        for program in [std::env::current_exe().unwrap(), "/bin/sh".into()] {
            let ldd = Command::new("ldd").arg(&program).output().unwrap();
            let direct = Command::new(loader)
                .arg("--list")
                .arg(&program)
                .output()
                .unwrap();
            let named = listed_paths(&ldd.stdout);
            assert!(
                named
                    .iter()
                    .any(|p| p.ends_with(loader.file_name().unwrap())),
                "{named:?}"
            );
            assert!(named.len() > 1, "{}: {named:?}", program.display());
            assert_eq!(listed_paths(&direct.stdout), named, "{}", program.display());
        }
    }
}
