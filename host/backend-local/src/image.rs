//! Images: named directories that sandboxes are copies of.
//!
//! A plain image is used where it is: the copy-on-write view never writes to
//! it. A git image is snapshotted into a git repository with one commit, so
//! tasks and reset checks can use git in the workdir. Snapshots are built
//! once into `<state>/images/<name>-<content-hash>/`: the hash covers the
//! tree's paths, modes, file contents and link targets (not times), so an
//! unchanged tree is reused across runs and a changed one rebuilds. The
//! source's own top-level `.git` is left out; repositories nested deeper are
//! committed as git does (gitlinks, without their files).

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::process::Command;

use crate::blocking;
use crate::config::ImageSource;
use crate::error::{IoContext, LocalError};
use crate::namespace::SANDBOX_PATH;
use crate::process::run_tool;
use crate::state::{file_stem, remove_tree};

/// Bound on each step of building a snapshot (copying, `git add`, ...).
const BUILD_STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// Hex digits of the content hash in a snapshot's directory name.
const HASH_DIGITS: usize = 16;

/// Author and committer of snapshot commits, with a fixed date so the same
/// tree always gets the same commit id.
const GIT_IDENTITY: [(&str, &str); 6] = [
    ("GIT_AUTHOR_NAME", "sandfleet"),
    ("GIT_AUTHOR_EMAIL", "sandfleet@localhost"),
    ("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z"),
    ("GIT_COMMITTER_NAME", "sandfleet"),
    ("GIT_COMMITTER_EMAIL", "sandfleet@localhost"),
    ("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z"),
];

/// Makes image `name` ready and returns the directory its sandboxes copy.
pub(crate) async fn prepare(
    name: &str,
    source: &ImageSource,
    cache: &Path,
) -> Result<PathBuf, LocalError> {
    if !source.path.is_dir() {
        return Err(LocalError::NotFound(format!(
            "image `{name}`: directory {}",
            source.path.display()
        )));
    }
    if !source.git {
        return Ok(source.path.clone());
    }
    let tree = source.path.clone();
    let hash = blocking(move || {
        content_hash(&tree).context(|| format!("hashing image tree {}", tree.display()))
    })
    .await?;
    let snapshot = cache.join(format!("{}-{}", file_stem(name), &hash[..HASH_DIGITS]));
    if !snapshot.is_dir() {
        build_snapshot(name, &source.path, &snapshot).await?;
    }
    Ok(snapshot)
}

/// The content hash of the tree at `root`, leaving out its top-level `.git`.
fn content_hash(root: &Path) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let entries = walkdir::WalkDir::new(root)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| !(entry.depth() == 1 && entry.file_name() == ".git"));
    for entry in entries {
        let entry = entry.map_err(io::Error::other)?;
        let relative = entry.path().strip_prefix(root).map_err(io::Error::other)?;
        let metadata = entry.metadata().map_err(io::Error::other)?;
        // Every field is length-prefixed or fixed-size, so no two trees
        // feed the same bytes.
        feed(&mut hasher, relative.as_os_str().as_encoded_bytes());
        hasher.update((metadata.mode() & 0o170_777).to_le_bytes());
        let file_type = entry.file_type();
        if file_type.is_symlink() {
            feed(
                &mut hasher,
                fs::read_link(entry.path())?.as_os_str().as_encoded_bytes(),
            );
        } else if file_type.is_file() {
            hasher.update(metadata.len().to_le_bytes());
            let mut file = File::open(entry.path())?;
            let mut buffer = vec![0; 1 << 16];
            loop {
                match file.read(&mut buffer)? {
                    0 => break,
                    n => hasher.update(&buffer[..n]),
                }
            }
        }
    }
    Ok(format!("{:x}", hasher.finalize()))
}

fn feed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// Copies `source` (without its `.git`) next to `snapshot`, commits it, and
/// renames it into place. Two builders racing for the same snapshot both
/// succeed: the second rename finds the first's result and discards its own.
async fn build_snapshot(name: &str, source: &Path, snapshot: &Path) -> Result<(), LocalError> {
    let cache = snapshot.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(cache).context(|| format!("creating image cache {}", cache.display()))?;
    let file_name = snapshot.file_name().unwrap_or_default().to_string_lossy();
    // Unique among concurrent builders, in this process and others.
    static BUILDS: AtomicU64 = AtomicU64::new(0);
    let building = cache.join(format!(
        ".building-{file_name}-{}-{}",
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    ));
    let result = build_into(name, source, &building).await.and_then(|()| {
        match fs::rename(&building, snapshot) {
            Ok(()) => Ok(()),
            Err(_) if snapshot.is_dir() => Ok(()),
            Err(error) => Err(error).context(|| {
                format!(
                    "moving snapshot of image `{name}` to {}",
                    snapshot.display()
                )
            }),
        }
    });
    let leftover = building.clone();
    blocking(move || remove_tree(&leftover)).await?;
    result
}

async fn build_into(name: &str, source: &Path, building: &Path) -> Result<(), LocalError> {
    fs::create_dir(building).context(|| format!("creating {}", building.display()))?;
    let mut entries = Vec::new();
    for entry in fs::read_dir(source).context(|| format!("listing {}", source.display()))? {
        let entry = entry.context(|| format!("listing {}", source.display()))?;
        if entry.file_name() != ".git" {
            entries.push(entry.path());
        }
    }
    let what = |step: &str| format!("image `{name}`: {step}");
    if !entries.is_empty() {
        let mut copy = Command::new("cp");
        copy.args(["-a", "--reflink=auto", "-t"])
            .arg(building)
            .args(&entries);
        run_tool(copy, &what("copying the tree"), BUILD_STEP_TIMEOUT).await?;
    }
    let git_steps: [&[&str]; 3] = [
        &["init", "--quiet", "--initial-branch=main"],
        &["add", "--all", "--force"],
        &[
            "commit",
            "--quiet",
            "--allow-empty",
            "--no-verify",
            "--message",
        ],
    ];
    let message = format!("sandfleet image {name}");
    for args in git_steps {
        let mut git = Command::new("git");
        git.args(args)
            .current_dir(building)
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            // No system or user configuration: hooks, templates, signing and
            // line-ending rules would make snapshots differ by machine.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .envs(GIT_IDENTITY);
        if args[0] == "commit" {
            git.arg(&message);
        }
        run_tool(git, &what(&format!("git {}", args[0])), BUILD_STEP_TIMEOUT).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/pkg")).unwrap();
        fs::write(dir.path().join("src/pkg/a.py"), "print(1)\n").unwrap();
        fs::write(dir.path().join("README"), "hi\n").unwrap();
        symlink("src", dir.path().join("link")).unwrap();
        dir
    }

    #[test]
    fn the_hash_follows_content_not_times_or_the_source_git_dir() {
        let dir = tree();
        let first = content_hash(dir.path()).unwrap();
        fs::create_dir(dir.path().join(".git")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref: x\n").unwrap();
        fs::write(dir.path().join("README"), "hi\n").unwrap();
        assert_eq!(content_hash(dir.path()).unwrap(), first);

        fs::write(dir.path().join("README"), "changed\n").unwrap();
        let changed = content_hash(dir.path()).unwrap();
        assert_ne!(changed, first);

        let script = dir.path().join("src/pkg/a.py");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(content_hash(dir.path()).unwrap(), changed);
    }

    #[tokio::test]
    async fn a_git_image_is_built_once_and_rebuilt_when_the_tree_changes() {
        let source = tree();
        let cache = tempfile::tempdir().unwrap();
        let image = ImageSource {
            path: source.path().to_path_buf(),
            git: true,
        };
        let built = prepare("py", &image, cache.path()).await.unwrap();
        assert!(built.join(".git").is_dir());
        assert_eq!(
            fs::read_to_string(built.join("src/pkg/a.py")).unwrap(),
            "print(1)\n"
        );
        assert!(
            fs::symlink_metadata(built.join("link"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(prepare("py", &image, cache.path()).await.unwrap(), built);

        fs::write(source.path().join("new.txt"), "x").unwrap();
        let rebuilt = prepare("py", &image, cache.path()).await.unwrap();
        assert_ne!(rebuilt, built);
        // Only finished snapshots remain in the cache.
        assert_eq!(fs::read_dir(cache.path()).unwrap().count(), 2);
    }

    #[tokio::test]
    async fn a_plain_image_is_used_in_place_and_a_missing_one_is_named() {
        let source = tree();
        let cache = tempfile::tempdir().unwrap();
        let plain = ImageSource {
            path: source.path().to_path_buf(),
            git: false,
        };
        assert_eq!(
            prepare("p", &plain, cache.path()).await.unwrap(),
            source.path()
        );
        let missing = ImageSource {
            path: source.path().join("nope"),
            git: true,
        };
        let error = prepare("gone", &missing, cache.path())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("image `gone`") && error.contains("nope"),
            "{error}"
        );
    }
}
