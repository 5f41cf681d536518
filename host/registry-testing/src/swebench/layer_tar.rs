//! A layer's tar from a root filesystem the build steps changed: which
//! paths go in (a walk, or what a step changed against a snapshot taken
//! before it), and the tar itself, whiteouts included.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// What a layer's tar holds: a path of the root filesystem, or a whiteout.
pub(super) enum Entry {
    Path(PathBuf),
    Whiteout(PathBuf),
}

/// Every path beneath `top` (relative to `root`, not following links),
/// sorted, parents first.
pub(super) fn walk(root: &Path, top: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let full = root.join(&dir);
        let mut names: Vec<_> = std::fs::read_dir(&full)
            .map_err(|e| format!("{}: {e}", full.display()))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let meta = std::fs::symlink_metadata(root.join(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.is_dir() {
                subdirs.push(path.clone());
            }
            out.push(path);
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

/// What decides whether a path changed: type, mode, owners, size, mtime.
pub(super) type Stat = (u32, u32, u32, u64, i64, i64);

pub(super) fn snapshot(root: &Path, top: &Path) -> Result<BTreeMap<PathBuf, Stat>, String> {
    walk(root, top)?
        .into_iter()
        .map(|path| {
            let meta = std::fs::symlink_metadata(root.join(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let stat = (
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
            );
            Ok((path, stat))
        })
        .collect()
}

/// Writes `entries` of `root` into a tar at `out` (owners, modes and
/// times as they are; links not followed).
pub(super) fn write_tar(root: &Path, entries: &[Entry], out: &Path) -> Result<(), String> {
    let file = File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut builder = tar::Builder::new(BufWriter::new(file));
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    for entry in entries {
        let result = match entry {
            Entry::Path(path) => builder.append_path_with_name(root.join(path), path),
            Entry::Whiteout(path) => {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o644);
                header.set_size(0);
                header.set_mtime(crate::image::MTIME);
                builder.append_data(&mut header, path, &[][..])
            }
        };
        result.map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    builder
        .into_inner()
        .and_then(|mut writer| writer.flush())
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
