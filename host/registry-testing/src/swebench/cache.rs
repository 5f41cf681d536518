//! The layer cache: a directory per layer named by a hash of all that
//! went into it, written whole under a temporary name and renamed into
//! place, and checked against its digest when read.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandfleet_images::Digest;
use sandfleet_images::spec;
use serde_json::json;

use crate::image::Layer;

use super::RECIPE_VERSION;
use super::commands::run;

/// The name of a cached layer's blob in its directory.
pub(super) const BLOB: &str = "layer.tar.gz";
/// The name of a cached layer's digests in its directory.
pub(super) const META: &str = "layer.json";

/// A hex digest naming the inputs.
pub(super) fn key(parts: &[String]) -> String {
    let joined = parts.join("\n\u{0}");
    Digest::of(joined.as_bytes()).hex()[..24].to_string()
}

/// A layer cached in `dir`, when it is there and whole.
pub(super) fn cached_layer(dir: &Path) -> Option<Layer> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(META)).ok()?).ok()?;
    let blob = std::fs::read(dir.join(BLOB)).ok()?;
    let digest = Digest::of(&blob);
    if meta["digest"].as_str() != Some(digest.to_string().as_str()) {
        eprintln!(
            "swebench recipe: {} does not match its digest; building it again",
            dir.display()
        );
        let _ = std::fs::remove_dir_all(dir);
        return None;
    }
    Some(Layer {
        blob,
        digest,
        diff_id: meta["diff_id"].as_str()?.parse().ok()?,
        media_type: spec::OCI_LAYER_GZIP,
    })
}

/// Compresses `tar` into a new cache directory, renamed to `dir` when
/// complete; returns the layer.
pub(super) fn store(cache: &Path, dir: &Path, tar: &Path) -> Result<Layer, String> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".tmp-{}-", std::process::id()))
        .tempdir_in(cache)
        .map_err(|e| format!("cannot make a directory in {}: {e}", cache.display()))?;
    let tar_bytes = std::fs::read(tar).map_err(|e| format!("{}: {e}", tar.display()))?;
    let diff_id = Digest::of(&tar_bytes);
    drop(tar_bytes);
    let blob_path = tmp.path().join(BLOB);
    let out = File::create(&blob_path).map_err(|e| format!("{}: {e}", blob_path.display()))?;
    run(
        Command::new("gzip")
            .args(["-n", "-1", "-c"])
            .arg(tar)
            .stdout(out),
        "gzip",
    )?;
    let blob = std::fs::read(&blob_path).map_err(|e| format!("{}: {e}", blob_path.display()))?;
    let digest = Digest::of(&blob);
    let meta = json!({"digest": digest, "diff_id": diff_id, "recipe": RECIPE_VERSION});
    let write = |path: PathBuf, bytes: &[u8]| -> std::io::Result<()> {
        let mut file = File::create(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write(tmp.path().join(META), meta.to_string().as_bytes())
        .and_then(|()| File::open(&blob_path)?.sync_all())
        .map_err(|e| format!("writing the cache in {}: {e}", tmp.path().display()))?;
    let tmp = tmp.keep();
    if let Err(error) = std::fs::rename(&tmp, dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another build finished the same layer first: take that one.
        if cached_layer(dir).is_none() {
            return Err(format!(
                "cannot move a layer into {}: {error}",
                dir.display()
            ));
        }
    }
    eprintln!(
        "swebench recipe: cached {} ({:.1} MiB)",
        dir.display(),
        blob.len() as f64 / (1024.0 * 1024.0)
    );
    Ok(Layer {
        blob,
        digest,
        diff_id,
        media_type: spec::OCI_LAYER_GZIP,
    })
}

/// Removes the work and temporary directories of builds whose process is
/// gone (killed): they never count as cached layers.
pub(super) fn remove_abandoned(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(".work-")
            .or_else(|| name.strip_prefix(".tmp-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
