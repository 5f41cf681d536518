//! Rootless with subordinate ids: an ordinary user with a range in
//! `/etc/subuid` and `/etc/subgid` pulls, unpacks, runs, snapshots and
//! forks an OCI image whose files have several owners, and every owner is
//! kept: inside, as the image says; on the host, as the user's subordinate
//! ids.
//!
//! The user is `sandfleet-subids`, a system user `.ci/run` makes with 65536
//! ids from 1000000000. Run as root, the test drops to it for real
//! (`setpriv`) and runs this binary again as that user. The binary has its
//! own `main` (no libtest harness) because the kernel moves only a
//! single-threaded process into a user namespace: the child enters its ids
//! first thing, as `sandfleet`'s `main` does. Two children before it must
//! stay as they are and say why: one started with `no_new_privs` (as in a
//! container that forbids privilege escalation), where the setuid
//! `newuidmap` cannot map its ids, and one told to stay out
//! (`SANDFLEET_SUBORDINATE_IDS=off`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use libtest_mimic::{Arguments, Failed, Trial};
use sandfleet_backend_local::subordinate::{self, Entered, Range};
use sandfleet_core::{Backend, snapshots_of};
use sandfleet_images::spec::Compression;
use sandfleet_registry_testing::image::{Layer, Tar};

#[path = "local/oci_image.rs"]
mod oci_image;
#[path = "local/sandbox_shell.rs"]
mod sandbox_shell;

use sandbox_shell::{PATIENCE, claim_image, sh, sh_ok};

const USER: &str = "sandfleet-subids";

/// Where the child keeps its state, and the image it runs.
const DIR_VAR: &str = "SANDFLEET_SUBIDS_DIR";
const REFERENCE_VAR: &str = "SANDFLEET_SUBIDS_REFERENCE";
/// Set for a child that must stay out of its ids, to the words its reason
/// must hold.
const STAYS_OUT_VAR: &str = "SANDFLEET_SUBIDS_STAYS_OUT";

/// Why a child must stay out.
#[derive(Debug, Clone, Copy)]
enum StaysOut {
    /// Started with `no_new_privs`: the setuid helpers cannot gain root.
    NoNewPrivs,
    /// Told to, with `SANDFLEET_SUBORDINATE_IDS=off`.
    OptedOut,
}

/// The image's `agent` (uid and gid 1000) and a file with a gid of its own.
fn owned_layer() -> Layer {
    let tar = Tar::new()
        .file_owned("home/agent/notes", b"mine\n", 0o600, 1000, 1000)
        .file_owned("srv/shared", b"ours\n", 0o640, 0, 4242);
    Layer::new(tar.finish(), Compression::None)
}

fn main() -> ExitCode {
    if std::env::var_os(DIR_VAR).is_some() {
        return child();
    }
    let args = Arguments::from_args();
    let trial = Trial::test(
        "a_user_with_subordinate_ids_keeps_every_owner_of_an_image_inside_and_shifts_them_on_the_host",
        parent,
    );
    libtest_mimic::run(&args, vec![trial]).exit_code()
}

/// The user's uid and gid and its ranges, or why the machine lacks them.
fn subids_user() -> Result<(u32, u32, Range, Range), String> {
    let setup = "run .ci/run, which makes it, or: useradd --system sandfleet-subids and give it \
                 `sandfleet-subids:1000000000:65536` in /etc/subuid and /etc/subgid";
    let id = |flag: &str| -> Result<u32, String> {
        let output = Command::new("id")
            .args([flag, USER])
            .output()
            .map_err(|e| e.to_string())?;
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("no user {USER} on this machine: {setup}"))
    };
    let (uid, gid) = (id("-u")?, id("-g")?);
    let range = |file: &str| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        subordinate::range_of(&text, Some(USER), uid)
            .ok_or_else(|| format!("{file} gives {USER} no range: {setup}"))
    };
    Ok((uid, gid, range("/etc/subuid")?, range("/etc/subgid")?))
}

fn parent() -> Result<(), Failed> {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: only root can drop to {USER}");
        return Ok(());
    }
    let (uid, gid, uids, gids) = subids_user()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let served = runtime.block_on(oci_image::serve(
        "subids/calc",
        &[owned_layer()],
        oci_image::escape_config(),
    ));
    let dir = tempfile::tempdir()?;
    std::os::unix::fs::chown(dir.path(), Some(uid), None)?;
    // The children that must stay out, then the one that enters.
    let child = |stays_out: Option<StaysOut>| {
        let mut command = Command::new("setpriv");
        command.args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
        ]);
        match stays_out {
            Some(StaysOut::NoNewPrivs) => {
                command
                    .arg("--no-new-privs")
                    .env(STAYS_OUT_VAR, "no_new_privs");
            }
            Some(StaysOut::OptedOut) => {
                command
                    .env(subordinate::OPT_OUT, "off")
                    .env(STAYS_OUT_VAR, subordinate::OPT_OUT);
            }
            None => {}
        }
        command
            .arg("--")
            .arg(std::env::current_exe()?)
            .env(DIR_VAR, dir.path())
            .env(REFERENCE_VAR, &served.reference)
            .env("HOME", dir.path())
            .output()
    };
    for case in [StaysOut::NoNewPrivs, StaysOut::OptedOut] {
        let stayed = child(Some(case))?;
        if !stayed.status.success() {
            let said = String::from_utf8_lossy(&stayed.stderr);
            return Err(format!("the run that must stay out ({case:?}) did not:\n{said}").into());
        }
    }
    let output = child(None)?;
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        let registry = &served.registry.host;
        return Err(format!("the run as {USER}, pulling from {registry}, failed:\n{said}").into());
    }
    // On the host the image's files are the user's (the sandbox's root)
    // or its subordinate ids, shifted by one: id 1 inside is the range's
    // first.
    let mut owners = std::collections::BTreeMap::new();
    for entry in walkdir::WalkDir::new(dir.path().join("state")) {
        let entry = entry?;
        let meta = entry.metadata()?;
        let path = entry.path().to_string_lossy().into_owned();
        for suffix in [
            "home/agent/notes",
            "srv/shared",
            "workspace/calc/__init__.py",
        ] {
            if path.ends_with(suffix) {
                owners.insert(suffix, (meta.uid(), meta.gid()));
            }
        }
        let host_uid = meta.uid();
        if host_uid != uid && !(uids.start..uids.start + uids.count).contains(&host_uid) {
            return Err(format!("{path} is owned by {host_uid}, outside {USER}'s ids").into());
        }
    }
    let expected = std::collections::BTreeMap::from([
        ("home/agent/notes", (uids.start + 999, gids.start + 999)),
        ("srv/shared", (uid, gids.start + 4241)),
        ("workspace/calc/__init__.py", (uid, gid)),
    ]);
    if owners != expected {
        return Err(format!("host owners {owners:?}, expected {expected:?}\n{said}").into());
    }
    drop(served);
    Ok(())
}

/// The unprivileged side: enters the ids, then runs the image.
fn child() -> ExitCode {
    if let Ok(reason) = std::env::var(STAYS_OUT_VAR) {
        // Where the setuid helpers cannot gain root, the process must stay
        // as it is rather than unshare and find no one to map its ids.
        return match subordinate::enter() {
            Ok(Entered::Unavailable(why) | Entered::NotNeeded(why)) if why.contains(&reason) => {
                println!("stayed out: {why}");
                ExitCode::SUCCESS
            }
            other => {
                eprintln!("the child did not stay out for `{reason}`: {other:?}");
                ExitCode::FAILURE
            }
        };
    }
    match subordinate::enter() {
        Ok(Entered::Namespace { uids, gids }) => {
            println!("entered: uids {uids:?}, gids {gids:?}");
        }
        other => {
            eprintln!("the child did not enter its subordinate ids: {other:?}");
            return ExitCode::FAILURE;
        }
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(run_image());
    println!("the child passed");
    ExitCode::SUCCESS
}

async fn run_image() {
    let dir = std::env::var(DIR_VAR).unwrap();
    let reference = std::env::var(REFERENCE_VAR).unwrap();
    let state = Path::new(&dir).join("state");
    let (backend, run_id, sandbox) = claim_image(&state, reference, "subids").await;
    let deadline = Instant::now() + PATIENCE;
    // Inside: the image's owners as it gave them, and the sandbox's root
    // gives files to any id, as root does.
    let seen = sh_ok(
        &backend,
        &sandbox,
        "id -u; stat -c %u:%g /home/agent/notes /srv/shared; \
         echo x > given; python3 -c 'import os; os.chown(\"given\", 123, 456); os.chown(\"/home/agent\", 1000, 1000)'; \
         stat -c %u:%g given; \
         setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'cat /home/agent/notes; \
         echo b > /home/agent/by-agent'; stat -c %u:%g /home/agent/by-agent",
    )
    .await;
    assert_eq!(seen, "0\n1000:1000\n0:4242\n123:456\nmine\n1000:1000\n");
    // The agent cannot read what root keeps from it: the ids are distinct.
    let refused = sh(
        &backend,
        &sandbox,
        "setpriv --reuid=1000 --regid=1000 --clear-groups cat /srv/shared",
    )
    .await;
    assert_ne!(
        refused.exit_code, 0,
        "uid 1000 read a file of root's group 4242"
    );
    // A snapshot keeps the owners, and a fork of it has them.
    let snapshots = snapshots_of(&backend).unwrap();
    let snapshot = snapshots
        .snapshot(&sandbox, &run_id.labels(), deadline)
        .await
        .unwrap();
    let forks = snapshots
        .fork(&snapshot, 1, &run_id.labels(), deadline)
        .await
        .unwrap();
    let owners = "stat -c %u:%g given /home/agent/by-agent /home/agent/notes";
    assert_eq!(
        sh_ok(&backend, &forks[0], owners).await,
        "123:456\n1000:1000\n1000:1000\n"
    );
    backend.release(&forks[0]).await.unwrap();
    snapshots.delete_snapshot(&snapshot).await.unwrap();
    backend.release(&sandbox).await.unwrap();
}
