//! Images: named directories that sandboxes are copies of.
//!
//! A plain image is used where it is: the copy-on-write view never writes to
//! it. A git image is snapshotted into a git repository with one commit, so
//! tasks and reset checks can use git in the workdir. When sandfleet runs as
//! root, every image is snapshotted with its owners shifted into the
//! sandboxes' id range (host uid `n` becomes `sandbox_uid_base + n`), so
//! that the sandbox's root owns what the host's root owned and can change
//! it in its copy-on-write view. Snapshots are built once into
//! `<state>/images/<name>-<content-hash>/`: the hash covers the recipe (git
//! or not, the id shift) and the tree's paths, modes, file contents, link
//! targets and, when shifted, owners (not times), so an unchanged tree is
//! reused across runs and a changed one rebuilds. A git snapshot leaves out
//! the source's own top-level `.git`; repositories nested deeper are
//! committed as git does (gitlinks, without their files).

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sandfleet_core::file_stem;
use sandfleet_jail::protocol::IdMap;
use sha2::{Digest, Sha256};
use tokio::process::Command;

use crate::blocking;
use crate::config::ImageSource;
use crate::error::{IoContext, LocalError};
use crate::namespace::SANDBOX_PATH;
use crate::process::run_tool;
use crate::remove::remove_tree;

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

/// How an image's snapshot is made.
#[derive(Debug, Clone, Copy)]
struct Recipe {
    /// Commit the tree (without its top-level `.git`) into a repository.
    git: bool,
    /// Shift owners into this id range.
    owners: Option<IdMap>,
}

/// Makes image `name` ready and returns the directory its sandboxes copy;
/// `owners` is the sandboxes' id map when it must be shifted into.
pub(crate) async fn prepare(
    name: &str,
    source: &ImageSource,
    cache: &Path,
    owners: Option<IdMap>,
) -> Result<PathBuf, LocalError> {
    if !source.path.is_dir() {
        return Err(LocalError::NotFound(format!(
            "image `{name}`: directory {}",
            source.path.display()
        )));
    }
    let recipe = Recipe {
        git: source.git,
        owners,
    };
    if !recipe.git && recipe.owners.is_none() {
        return Ok(source.path.clone());
    }
    let tree = source.path.clone();
    let hash = blocking(move || {
        content_hash(&tree, recipe).context(|| format!("hashing image tree {}", tree.display()))
    })
    .await?;
    let snapshot = cache.join(format!("{}-{}", file_stem(name), &hash[..HASH_DIGITS]));
    if !snapshot.is_dir() {
        build_snapshot(name, &source.path, &snapshot, recipe).await?;
    }
    Ok(snapshot)
}

/// The content hash of the tree at `root` as `recipe` makes it.
fn content_hash(root: &Path, recipe: Recipe) -> io::Result<String> {
    let mut hasher = Sha256::new();
    hasher.update([u8::from(recipe.git)]);
    if let Some(ids) = recipe.owners {
        hasher.update(ids.uid.to_le_bytes());
        hasher.update(ids.gid.to_le_bytes());
        hasher.update(ids.count.to_le_bytes());
    }
    let entries = walkdir::WalkDir::new(root)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| !(recipe.git && entry.depth() == 1 && entry.file_name() == ".git"));
    for entry in entries {
        let entry = entry.map_err(io::Error::other)?;
        let relative = entry.path().strip_prefix(root).map_err(io::Error::other)?;
        let metadata = entry.metadata().map_err(io::Error::other)?;
        // Every field is length-prefixed or fixed-size, so no two trees
        // feed the same bytes.
        feed(&mut hasher, relative.as_os_str().as_encoded_bytes());
        hasher.update((metadata.mode() & 0o170_777).to_le_bytes());
        if recipe.owners.is_some() {
            hasher.update(metadata.uid().to_le_bytes());
            hasher.update(metadata.gid().to_le_bytes());
        }
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

/// Copies `source` next to `snapshot`, commits it and shifts its owners as
/// `recipe` says, and renames it into place. Two builders racing for the
/// same snapshot both succeed: the second rename finds the first's result
/// and discards its own.
async fn build_snapshot(
    name: &str,
    source: &Path,
    snapshot: &Path,
    recipe: Recipe,
) -> Result<(), LocalError> {
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
    let result = build_into(name, source, &building, recipe)
        .await
        .and_then(|()| match fs::rename(&building, snapshot) {
            Ok(()) => Ok(()),
            Err(_) if snapshot.is_dir() => Ok(()),
            Err(error) => Err(error).context(|| {
                format!(
                    "moving snapshot of image `{name}` to {}",
                    snapshot.display()
                )
            }),
        });
    let leftover = building.clone();
    blocking(move || remove_tree(&leftover)).await?;
    result
}

async fn build_into(
    name: &str,
    source: &Path,
    building: &Path,
    recipe: Recipe,
) -> Result<(), LocalError> {
    fs::create_dir(building).context(|| format!("creating {}", building.display()))?;
    let mut entries = Vec::new();
    for entry in fs::read_dir(source).context(|| format!("listing {}", source.display()))? {
        let entry = entry.context(|| format!("listing {}", source.display()))?;
        if !(recipe.git && entry.file_name() == ".git") {
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
    let git_steps = if recipe.git { &git_steps[..] } else { &[] };
    for &args in git_steps {
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
    if let Some(ids) = recipe.owners {
        let tree = building.to_path_buf();
        blocking(move || {
            shift_owners(&tree, &ids)
                .context(|| format!("shifting the owners of {}", tree.display()))
        })
        .await?;
    }
    Ok(())
}

/// Gives every entry under `root` (itself included) the owner and group
/// `ids` maps its current ones to; ids outside the map stay as they are
/// (and appear as `nobody` in sandboxes).
fn shift_owners(root: &Path, ids: &IdMap) -> io::Result<()> {
    for entry in walkdir::WalkDir::new(root) {
        let entry = entry.map_err(io::Error::other)?;
        let metadata = entry.path().symlink_metadata()?;
        let uid = ids.host_uid(metadata.uid()).unwrap_or(metadata.uid());
        let gid = ids.host_gid(metadata.gid()).unwrap_or(metadata.gid());
        std::os::unix::fs::lchown(entry.path(), Some(uid), Some(gid))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;
    use crate::config::LimitOverrides;

    #[tokio::test]
    async fn a_shifted_snapshot_gives_each_owner_its_sandbox_id() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: only root may give files away");
            return;
        }
        let source = tree();
        let cache = tempfile::tempdir().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let ids = IdMap {
            uid: 3_000_000,
            gid: 3_000_000,
            count: me + 1,
        };
        let image = ImageSource {
            path: source.path().to_path_buf(),
            git: false,
            limits: LimitOverrides::default(),
        };
        let built = prepare("shifted", &image, cache.path(), Some(ids))
            .await
            .unwrap();
        assert_ne!(built, source.path());
        for path in ["", "README", "src/pkg/a.py", "link"] {
            let meta = built.join(path).symlink_metadata().unwrap();
            assert_eq!(meta.uid(), 3_000_000 + me, "{path}");
        }
        assert_eq!(fs::read_to_string(built.join("README")).unwrap(), "hi\n");
        // The source is untouched.
        assert_eq!(source.path().join("README").metadata().unwrap().uid(), me);
    }

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
        let git = Recipe {
            git: true,
            owners: None,
        };
        let first = content_hash(dir.path(), git).unwrap();
        fs::create_dir(dir.path().join(".git")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref: x\n").unwrap();
        fs::write(dir.path().join("README"), "hi\n").unwrap();
        assert_eq!(content_hash(dir.path(), git).unwrap(), first);
        // A copy keeps the .git the snapshot leaves out.
        let copy = Recipe {
            git: false,
            owners: None,
        };
        assert_ne!(content_hash(dir.path(), copy).unwrap(), first);

        fs::write(dir.path().join("README"), "changed\n").unwrap();
        let changed = content_hash(dir.path(), git).unwrap();
        assert_ne!(changed, first);

        let script = dir.path().join("src/pkg/a.py");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(content_hash(dir.path(), git).unwrap(), changed);
    }

    #[tokio::test]
    async fn a_git_image_is_built_once_and_rebuilt_when_the_tree_changes() {
        let source = tree();
        let cache = tempfile::tempdir().unwrap();
        let image = ImageSource {
            path: source.path().to_path_buf(),
            git: true,
            limits: LimitOverrides::default(),
        };
        let built = prepare("py", &image, cache.path(), None).await.unwrap();
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
        assert_eq!(
            prepare("py", &image, cache.path(), None).await.unwrap(),
            built
        );

        fs::write(source.path().join("new.txt"), "x").unwrap();
        let rebuilt = prepare("py", &image, cache.path(), None).await.unwrap();
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
            limits: LimitOverrides::default(),
        };
        assert_eq!(
            prepare("p", &plain, cache.path(), None).await.unwrap(),
            source.path()
        );
        let missing = ImageSource {
            path: source.path().join("nope"),
            git: true,
            limits: LimitOverrides::default(),
        };
        let error = prepare("gone", &missing, cache.path(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("image `gone`") && error.contains("nope"),
            "{error}"
        );
    }
}
