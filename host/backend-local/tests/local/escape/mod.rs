//! The escape suite: commands an attacker would run in a sandbox, each
//! tried under the shipped quickstart's own cluster config (its relative
//! `state_dir`, resolved as `sandfleet run` resolves it, to a path with
//! `..` in it) and again with an absolute one, and each of those with the
//! quickstart's `calc` image as a directory over the host's system
//! directories and as an OCI image of its own (pulled from a registry on
//! loopback, with the same tree as its workdir: [`crate::oci_image`]).
//! Every attack must fail inside the sandbox and leave the host as it
//! was. A probe that could change the host only ever writes back the value
//! it read. Where the two kinds differ by design (an OCI image's root is
//! its own and writable, a directory image's `/` a sized tmpfs), the test
//! says what holds for each.
//!
//! Findings 1–8 are here; the later ones have a module each: the terminal
//! (`terminal`), forged process names and the reap (`reap`), sandboxes
//! reused after a task (`reuse`), and what the disk limit counts (`disk`).

mod disk;
mod reap;
mod reuse;
mod terminal;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use sandfleet_backend_local::{LimitOverrides, LocalBackend, LocalConfig, OciSource};
use sandfleet_core::{
    Backend, ExecResult, Recycling, RunId, SandboxHandle, TemplateRef, TemplateSpec,
};
use serde::Deserialize;

use crate::common::{self, init_of, pid_namespace_members};
use crate::oci_image::{self, Served};

/// What the escape image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The quickstart's directory, at the workdir over the host's system
    /// directories (read-only).
    Directory,
    /// An OCI image of the same tree and the host's programs: its root is
    /// its own, and writable in the sandbox's layer.
    Oci,
}

impl Kind {
    /// Whether the sandbox's system directories are the host's, read-only.
    pub(super) fn host_system_dirs(self) -> bool {
        self == Kind::Directory
    }
}

/// The repository's `examples/` directory, reached the way a user's path
/// might: through `..`.
pub(super) fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// `[clusters.local]` of `examples/quickstart.toml`, paths resolved against
/// the file's directory.
pub(super) fn quickstart_config() -> LocalConfig {
    let text = fs::read_to_string(examples_dir().join("quickstart.toml")).unwrap();
    let file: toml::Table = toml::from_str(&text).unwrap();
    let local = file["clusters"].as_array().unwrap()[0]["local"].clone();
    let mut config = LocalConfig::deserialize(local).unwrap();
    config.resolve_paths(&examples_dir());
    config
}

/// A backend under one of the two configs, and the quickstart's `calc`
/// image as a template.
pub(super) struct Setup {
    pub(super) label: String,
    pub(super) kind: Kind,
    pub(super) run_id: RunId,
    pub(super) backend: LocalBackend,
    pub(super) template: TemplateRef,
    pub(super) state_dir: PathBuf,
    _absolute: Option<tempfile::TempDir>,
    _registry: Option<Arc<Served>>,
}

impl Setup {
    pub(super) async fn claim(&self) -> SandboxHandle {
        self.backend
            .claim(
                &self.template,
                &self.run_id.labels(),
                Instant::now() + common::PATIENCE,
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.label))
    }

    pub(super) async fn sh(&self, sandbox: &SandboxHandle, script: &str) -> ExecResult {
        common::sh(&self.backend, sandbox, script).await
    }

    /// Runs `script`, which must fail, and returns its stderr.
    pub(super) async fn refused(&self, sandbox: &SandboxHandle, script: &str) -> String {
        let result = self.sh(sandbox, script).await;
        let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
        assert_ne!(
            result.exit_code, 0,
            "{}: `{script}` succeeded: {stderr}",
            self.label
        );
        stderr
    }

    pub(super) async fn sh_ok(&self, sandbox: &SandboxHandle, script: &str) -> String {
        common::sh_ok(&self.backend, sandbox, script).await
    }
}

/// The template every probe uses, with `change` applied.
pub(super) fn spec(run_id: &RunId, change: impl Fn(&mut TemplateSpec)) -> TemplateSpec {
    let mut spec = TemplateSpec {
        name: "escape".into(),
        image: "calc".into(),
        cpu_milli: 1000,
        memory_mib: 512,
        disk_mib: 256,
        network: false,
        env: BTreeMap::new(),
        labels: run_id.labels(),
    };
    change(&mut spec);
    spec
}

/// Both setups (relative, then absolute `state_dir`), with `config` and
/// `template` changes applied.
pub(super) async fn setups_with(
    config: impl Fn(&mut LocalConfig),
    template: impl Fn(&mut TemplateSpec),
) -> Vec<Setup> {
    let served = Arc::new(oci_image::serve("escape/calc", &[], oci_image::escape_config()).await);
    let mut setups = Vec::new();
    let every = [Kind::Directory, Kind::Oci]
        .into_iter()
        .flat_map(|kind| ["relative state_dir", "absolute state_dir"].map(|dir| (kind, dir)));
    for (kind, dir) in every {
        let label = format!("{kind:?} image, {dir}");
        let mut local = quickstart_config();
        if kind == Kind::Oci {
            local.images.remove("calc");
            local.oci_images.insert(
                "calc".into(),
                OciSource {
                    reference: served.reference.clone(),
                    limits: LimitOverrides::default(),
                },
            );
        }
        let absolute = (dir == "absolute state_dir").then(|| tempfile::tempdir().unwrap());
        if let Some(dir) = &absolute {
            local.state_dir = Some(dir.path().canonicalize().unwrap());
        } else {
            let state_dir = local.state_dir.as_ref().unwrap();
            assert!(
                state_dir.components().any(|c| c.as_os_str() == ".."),
                "the quickstart's state_dir should resolve to a path with `..`: {}",
                state_dir.display()
            );
        }
        config(&mut local);
        let state_dir = local.state_dir.clone().unwrap();
        let run_id = RunId::generate("escape");
        let backend = LocalBackend::new("local", local).unwrap();
        let found = backend.preflight().await;
        assert!(found.failures.is_empty(), "{label}: {:?}", found.failures);
        let template = backend
            .ensure_template(&spec(&run_id, &template))
            .await
            .unwrap();
        setups.push(Setup {
            label,
            kind,
            run_id,
            backend,
            template,
            state_dir,
            _absolute: absolute,
            _registry: (kind == Kind::Oci).then(|| Arc::clone(&served)),
        });
    }
    setups
}

pub(super) async fn setups() -> Vec<Setup> {
    setups_with(|_| {}, |_| {}).await
}

/// A name no earlier run used.
pub(super) fn unique(setup: &Setup) -> String {
    format!("sandfleet-escape-{}", setup.run_id)
}

/// The host's root as this process's user namespace numbers it: 0 in the
/// host's own, none in a rootless user's namespace of its subordinate ids
/// (whose 0 is that user).
pub(super) fn host_root_here() -> Option<u64> {
    let map = fs::read_to_string("/proc/self/uid_map").unwrap();
    map.lines().find_map(|line| {
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        (fields[1] == 0).then_some(fields[0])
    })
}

/// Whether this process is root of its user namespace (the host's or a
/// rootless user's), which may enter its sandboxes' namespaces.
pub(super) fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
}

#[tokio::test]
async fn finding_1_host_system_directories_cannot_be_written() {
    let dirs = [
        "/usr",
        "/usr/bin",
        "/usr/lib",
        "/usr/local",
        "/etc",
        "/etc/ssl/certs",
        "/opt",
        "/bin",
        "/lib",
        "/lib64",
        "/sbin",
    ];
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let name = unique(&setup);
        for dir in dirs {
            let target = format!("{dir}/{name}");
            let attempt = setup.sh(&sandbox, &format!("touch {target}")).await;
            assert!(
                !Path::new(&target).exists(),
                "{}: `touch {target}` in a sandbox created it on the host ({attempt:?})",
                setup.label
            );
        }
        // Existing host files cannot be changed either: they are the
        // host's, read-only, or the image's, changed in the sandbox's own
        // layer only.
        let host_files = ["/usr/bin/env", "/etc/passwd"].map(|f| fs::read(f).unwrap());
        for file in ["/usr/bin/env", "/etc/passwd"] {
            let append = format!("echo x >> {file}");
            if setup.kind.host_system_dirs() {
                setup.refused(&sandbox, &append).await;
            } else {
                setup.sh_ok(&sandbox, &append).await;
            }
        }
        assert_eq!(
            ["/usr/bin/env", "/etc/passwd"].map(|f| fs::read(f).unwrap()),
            host_files,
            "{}",
            setup.label
        );
        let other = setup.claim().await;
        let tail = setup.sh_ok(&other, "tail -c 2 /etc/passwd").await;
        assert_ne!(
            tail, "x\n",
            "{}: another sandbox saw the change",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
        setup.backend.release(&other).await.unwrap();
    }
}

#[tokio::test]
async fn finding_2_read_only_cannot_be_undone_from_inside() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let name = unique(&setup);
        let host_file = format!("/usr/{name}");
        for attack in [
            format!("mount -o remount,bind,rw /usr && touch {host_file}"),
            format!("mount -o remount,rw /usr && touch {host_file}"),
            "umount /usr".to_string(),
            "umount -l /proc/sys".to_string(),
            "mount -t tmpfs none /mnt".to_string(),
            // A user namespace of its own would hold every capability again.
            format!("unshare -Urm sh -c 'mount -o remount,bind,rw /usr && touch {host_file}'"),
            "unshare -U true".to_string(),
            "unshare -m true".to_string(),
        ] {
            setup.refused(&sandbox, &attack).await;
        }
        assert!(!Path::new(&host_file).exists(), "{}", setup.label);
        // The host's directories are still there, and still read-only (an
        // image's are its own, and what is written there stays in it).
        setup.sh_ok(&sandbox, "test -x /usr/bin/env").await;
        if setup.kind.host_system_dirs() {
            setup.refused(&sandbox, &format!("touch {host_file}")).await;
        } else {
            setup.sh_ok(&sandbox, &format!("touch {host_file}")).await;
            assert!(!Path::new(&host_file).exists(), "{}", setup.label);
        }
        // Commands hold none of the capabilities that reach mounts.
        let status = setup
            .sh_ok(
                &sandbox,
                "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
            )
            .await;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .unwrap()
                .to_string()
        };
        for set in ["CapEff:", "CapBnd:"] {
            let bits = u64::from_str_radix(&field(set), 16).unwrap();
            assert_eq!(
                bits & (1 << 21),
                0,
                "{}: {set} has CAP_SYS_ADMIN",
                setup.label
            );
        }
        assert_eq!(field("NoNewPrivs:"), "1", "{}", setup.label);
        assert_eq!(field("Seccomp:"), "2", "{}", setup.label);
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_3_host_kernel_settings_are_out_of_reach() {
    let settings = [
        "/proc/sys/vm/stat_interval",
        "/proc/sys/kernel/core_pattern",
    ];
    let before: Vec<String> = settings
        .iter()
        .map(|s| fs::read_to_string(s).unwrap())
        .collect();
    for setup in setups().await {
        let sandbox = setup.claim().await;
        for setting in settings {
            // The value it read, written back: a change would be no change.
            setup
                .refused(
                    &sandbox,
                    &format!("v=$(cat {setting}) && echo \"$v\" > {setting}"),
                )
                .await;
        }
        // Masked as container runtimes mask them: the kernel's memory, keys
        // and timers are /dev/null (character device 1:3) wherever the host
        // has them, and read nothing.
        for masked in [
            "/proc/kcore",
            "/proc/keys",
            "/proc/timer_list",
            "/proc/sched_debug",
        ] {
            if !Path::new(masked).exists() {
                continue;
            }
            let seen = setup
                .sh_ok(
                    &sandbox,
                    &format!("stat -c %t:%T {masked}; cat {masked} | wc -c"),
                )
                .await;
            assert_eq!(seen, "1:3\n0\n", "{}: {masked}", setup.label);
        }
        // The sandbox's root is not the host's: host uid 0 is mapped to
        // nothing, and what the sandbox writes is not root's on the host.
        let map = setup.sh_ok(&sandbox, "cat /proc/self/uid_map").await;
        let host_root_mapped = host_root_here().is_some_and(|root| {
            map.lines().any(|line| {
                let fields: Vec<u64> = line
                    .split_whitespace()
                    .map(|f| f.parse().unwrap())
                    .collect();
                (fields[1]..fields[1] + fields[2]).contains(&root)
            })
        });
        assert!(!host_root_mapped, "{}: {map}", setup.label);
        let name = unique(&setup);
        setup
            .sh_ok(&sandbox, &format!("echo x > /workspace/{name}"))
            .await;
        let written = find_named(&setup.state_dir, &name);
        assert_eq!(written.len(), 1, "{}: {written:?}", setup.label);
        if let Some(root) = host_root_here() {
            let owner = fs::metadata(&written[0]).unwrap().uid();
            assert_ne!(u64::from(owner), root, "{}", setup.label);
        }
        setup.backend.release(&sandbox).await.unwrap();
    }
    let after: Vec<String> = settings
        .iter()
        .map(|s| fs::read_to_string(s).unwrap())
        .collect();
    assert_eq!(before, after);
}

/// Files named `name` anywhere under `dir`.
fn find_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(find_named(&path, name));
        }
    }
    found
}

#[tokio::test]
async fn finding_4_no_setuid_file_a_host_user_can_reach() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let name = unique(&setup);
        setup
            .sh_ok(
                &sandbox,
                &format!("cp /bin/sh /workspace/{name} && chmod 4755 /workspace/{name}"),
            )
            .await;
        // Inside, the setuid bit gives nothing (nosuid, no_new_privs): a
        // user running it stays that user.
        let uid = setup
            .sh_ok(
                &sandbox,
                &format!(
                    "setpriv --reuid 1000 --regid 1000 --clear-groups /workspace/{name} -p -c 'id -u'"
                ),
            )
            .await;
        assert_eq!(uid.trim(), "1000", "{}", setup.label);
        // On the host, the copy is not root's, and no other user can reach
        // it: some directory above it is closed to others.
        let copies = find_named(&setup.state_dir, &name);
        assert_eq!(copies.len(), 1, "{}: {copies:?}", setup.label);
        let copy = &copies[0];
        let meta = fs::metadata(copy).unwrap();
        assert_ne!(meta.permissions().mode() & 0o4000, 0, "the copy is setuid");
        if let Some(root) = host_root_here() {
            assert_ne!(
                u64::from(meta.uid()),
                root,
                "{}: a root-owned setuid file on the host",
                setup.label
            );
        }
        let closed = copy
            .ancestors()
            .skip(1)
            .take_while(|dir| dir.starts_with(&setup.state_dir))
            .any(|dir| fs::metadata(dir).unwrap().permissions().mode() & 0o001 == 0);
        assert!(
            closed,
            "{}: {} is reachable by any host user",
            setup.label,
            copy.display()
        );
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_5_inherited_descriptors_do_not_reach_sandboxes() {
    use rustix::fs::{Mode, OFlags};
    // What whatever started sandfleet might leave open: the host's root
    // directory, without close-on-exec, as a shell's `exec 7</` would.
    let leaked = rustix::fs::open("/", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    assert!(
        !rustix::io::fcntl_getfd(&leaked)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC)
    );
    for setup in setups().await {
        let sandbox = setup.claim().await;
        // `ls` lists its own descriptor for the directory as well.
        let open = setup.sh_ok(&sandbox, "ls /proc/self/fd").await;
        assert_eq!(
            open.split_whitespace().collect::<Vec<_>>(),
            ["0", "1", "2", "3"],
            "{}",
            setup.label
        );
        // Nor do the sandbox's init and its supervisor hold it.
        let init = init_of(&setup.run_id, &sandbox.id);
        let supervisor = parent_of(init);
        for pid in [init, supervisor] {
            let fds: Vec<PathBuf> = fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .flatten()
                .filter_map(|entry| fs::read_link(entry.path()).ok())
                .collect();
            assert!(
                !fds.contains(&PathBuf::from("/")),
                "{}: pid {pid} holds {fds:?}",
                setup.label
            );
        }
        setup.backend.release(&sandbox).await.unwrap();
    }
    drop(leaked);
}

fn parent_of(pid: i32) -> i32 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn finding_6_a_hidden_process_does_not_outlive_the_scrub() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let init = init_of(&setup.run_id, &sandbox.id);
        // A background process out of the command's process group, with
        // nothing open, that would tamper with the workdir later.
        setup
            .sh_ok(
                &sandbox,
                "setsid sh -c 'sleep 30; echo tampered > /workspace/tests/test_ops.py' </dev/null >/dev/null 2>&1 &",
            )
            .await;
        assert!(
            pid_namespace_members(init).len() > 1,
            "{}: the tamperer did not start",
            setup.label
        );
        setup.backend.scrub(&sandbox).await.unwrap();
        // Found from the host, by pid namespace: the sandbox was started
        // again, and only its new init is in it.
        assert!(pid_namespace_members(init).is_empty(), "{}", setup.label);
        let new_init = init_of(&setup.run_id, &sandbox.id);
        assert_ne!(new_init, init, "{}", setup.label);
        assert_eq!(
            pid_namespace_members(new_init),
            [new_init],
            "{}",
            setup.label
        );
        let tests = setup.sh_ok(&sandbox, "head -c 100 tests/test_ops.py").await;
        assert!(!tests.contains("tampered"), "{}", setup.label);
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_6_a_changed_mount_table_does_not_outlive_the_scrub() {
    if !running_as_root() {
        eprintln!("SKIPPED: only root can change a sandbox's mounts from outside it");
        return;
    }
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let init = init_of(&setup.run_id, &sandbox.id);
        // What a command that found a way to mount would leave: done from
        // the host, since no command can.
        let mounted = std::process::Command::new("nsenter")
            .args([
                &format!("--target={init}"),
                "--mount",
                "--",
                "mount",
                "-t",
                "tmpfs",
                "hidden",
                "/root",
            ])
            .status()
            .unwrap();
        assert!(mounted.success());
        let mounts = "grep -c ' /root .* hidden ' /proc/self/mountinfo || true";
        assert_eq!(
            setup.sh_ok(&sandbox, mounts).await,
            "1\n",
            "{}",
            setup.label
        );
        setup.backend.scrub(&sandbox).await.unwrap();
        assert_eq!(
            setup.sh_ok(&sandbox, mounts).await,
            "0\n",
            "{}",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_7_a_fork_bomb_stops_at_the_pids_limit() {
    let setups = setups_with(|config| config.limits.pids = 64, |_| {}).await;
    for setup in setups {
        let sandbox = setup.claim().await;
        let init = init_of(&setup.run_id, &sandbox.id);
        // Bounded: 200 forks at most, each a sleep that would last 30 s.
        let bomb = setup
            .sh(
                &sandbox,
                "for i in $(seq 200); do sleep 30 </dev/null >/dev/null 2>&1 & done; echo done",
            )
            .await;
        let stderr = String::from_utf8_lossy(&bomb.stderr);
        assert!(
            stderr.contains("fork") || stderr.contains("Resource temporarily unavailable"),
            "{}: {stderr}",
            setup.label
        );
        let members = pid_namespace_members(init).len();
        assert!(members <= 64, "{}: {members} processes", setup.label);
        // The host can still start processes.
        assert!(
            std::process::Command::new("true")
                .status()
                .unwrap()
                .success()
        );
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_7_a_memory_hog_is_killed_inside_the_sandbox() {
    for setup in setups_with(|_| {}, |spec| spec.memory_mib = 64).await {
        let sandbox = setup.claim().await;
        let hog = setup
            .sh(
                &sandbox,
                "python3 -c 'b = bytearray(512 << 20); print(\"survived\")'",
            )
            .await;
        assert_ne!(hog.exit_code, 0, "{}", setup.label);
        assert!(
            !String::from_utf8_lossy(&hog.stdout).contains("survived"),
            "{}",
            setup.label
        );
        // The OOM kill stayed inside: the sandbox still works.
        assert_eq!(
            setup.sh_ok(&sandbox, "echo alive").await,
            "alive\n",
            "{}",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_7_writes_are_bounded_by_the_disk_and_tmpfs_sizes() {
    let setups = setups_with(
        |config| {
            config.limits.shm_mib = 8;
            config.limits.root_mib = 8;
        },
        |spec| spec.disk_mib = 16,
    )
    .await;
    for setup in setups {
        let sandbox = setup.claim().await;
        // One file over the disk: cut at the limit (RLIMIT_FSIZE).
        let big = setup
            .sh(
                &sandbox,
                "head -c 32M /dev/zero > /workspace/big; r=$?; rm -f /workspace/big; exit $r",
            )
            .await;
        assert_ne!(big.exit_code, 0, "{}: {big:?}", setup.label);
        // Many files over the disk: the command is stopped, and fails
        // saying why.
        let many = setup
            .sh(
                &sandbox,
                "for i in $(seq 40); do head -c 1M /dev/zero > /tmp/f$i; done",
            )
            .await;
        assert_eq!(many.exit_code, -1, "{}: {many:?}", setup.label);
        let stderr = String::from_utf8_lossy(&many.stderr);
        assert!(
            stderr.contains("was stopped") && stderr.contains("disk limit (16 MiB"),
            "{}: {stderr}",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
        // /dev/shm and the root filesystem are sized: a directory image's
        // root is a tmpfs, an OCI image's writes count against the disk.
        let sandbox = setup.claim().await;
        for target in ["/dev/shm/x", "/root/x"] {
            let stderr = setup
                .refused(&sandbox, &format!("head -c 32M /dev/zero > {target}"))
                .await;
            let sized = if target == "/root/x" && !setup.kind.host_system_dirs() {
                stderr.contains("File size limit exceeded") || stderr.contains("disk limit")
            } else {
                stderr.contains("No space left on device")
            };
            assert!(sized, "{}: {target}: {stderr}", setup.label);
        }
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn finding_7_cpu_is_a_quota_of_the_templates_millicores() {
    if !Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() {
        eprintln!("SKIPPED: no cgroup v1 cpu controller to read the quota from");
        return;
    }
    for setup in setups_with(|_| {}, |spec| spec.cpu_milli = 500).await {
        let sandbox = setup.claim().await;
        let quota = Path::new("/sys/fs/cgroup/cpu/sandfleet")
            .join(setup.run_id.as_str())
            .join(&sandbox.id)
            .join("cpu.cfs_quota_us");
        assert_eq!(
            fs::read_to_string(&quota).unwrap().trim(),
            "50000",
            "{}",
            setup.label
        );
        let procs = fs::read_to_string(quota.with_file_name("cgroup.procs")).unwrap();
        let init = init_of(&setup.run_id, &sandbox.id);
        assert!(
            procs.lines().any(|pid| pid == init.to_string()),
            "{}: {procs}",
            setup.label
        );
        setup.backend.release(&sandbox).await.unwrap();
        assert!(
            !quota.exists(),
            "{}: the cgroup outlived the sandbox",
            setup.label
        );
    }
}

#[tokio::test]
async fn finding_8_a_flood_of_output_is_capped_and_counted() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let request = sandfleet_core::ExecRequest {
            max_output: Some(1 << 20),
            ..common::request(["sh", "-c", "head -c 500M /dev/zero; echo done >&2"])
        };
        let result = setup.backend.exec(&sandbox, &request, None).await.unwrap();
        assert_eq!(result.exit_code, 0, "{}", setup.label);
        assert_eq!(
            result.stdout_dropped,
            (500 << 20) - (1 << 20),
            "{}",
            setup.label
        );
        assert!(result.stdout.len() < (1 << 20) + 200, "{}", setup.label);
        assert!(
            String::from_utf8_lossy(&result.stdout)
                .ends_with("dropped past the limit of 1048576 bytes]\n")
        );
        assert_eq!(result.stderr, b"done\n", "{}", setup.label);
        setup.backend.release(&sandbox).await.unwrap();
    }
}

#[tokio::test]
async fn host_secrets_processes_and_state_are_out_of_reach() {
    let host_pid = std::process::id();
    for setup in setups().await {
        let sandbox = setup.claim().await;
        let other = setup.claim().await;
        let other_init = init_of(&setup.run_id, &other.id);
        setup.refused(&sandbox, "cat /etc/shadow").await;
        setup
            .refused(&sandbox, "ls /etc/ssh /etc/ssl/private")
            .await;
        setup.sh_ok(&sandbox, "grep -q '^root:' /etc/passwd").await;
        // Host processes, this test and another sandbox's init among them,
        // can be neither seen nor signalled.
        for pid in [host_pid as i32, other_init] {
            setup.refused(&sandbox, &format!("kill -0 {pid}")).await;
            setup.refused(&sandbox, &format!("ls /proc/{pid}/")).await;
        }
        let init_cmdline = setup
            .sh_ok(&sandbox, "tr '\\0' ' ' < /proc/1/cmdline")
            .await;
        assert!(
            init_cmdline.starts_with("sandfleet-sandbox:"),
            "{}: {init_cmdline}",
            setup.label
        );
        // Devices cannot be made.
        setup.refused(&sandbox, "mknod /tmp/mem c 1 1").await;
        // The state directory (with every sandbox's files) is not there.
        let state = setup.state_dir.canonicalize().unwrap();
        setup
            .refused(&sandbox, &format!("ls {}", state.display()))
            .await;
        setup
            .refused(&sandbox, &format!("ls {}", setup.state_dir.display()))
            .await;
        setup.backend.release(&sandbox).await.unwrap();
        setup.backend.release(&other).await.unwrap();
    }
}

#[tokio::test]
async fn a_sandbox_that_fails_its_probe_is_never_served() {
    let mut local = quickstart_config();
    let state = tempfile::tempdir().unwrap();
    local.state_dir = Some(state.path().to_path_buf());
    // A path every sandbox sees, declared one no sandbox may see.
    local.hidden_paths = vec![PathBuf::from("/usr/bin")];
    let run_id = RunId::generate("escape");
    let backend = LocalBackend::new("local", local).unwrap();
    let found = backend.preflight().await;
    assert!(
        found
            .failures
            .iter()
            .any(|f| f.contains("isolation probe") && f.contains("/usr/bin is visible")),
        "{:?}",
        found.failures
    );
    let template = backend
        .ensure_template(&spec(&run_id, |_| {}))
        .await
        .unwrap();
    let error = backend
        .claim(
            &template,
            &run_id.labels(),
            Instant::now() + common::PATIENCE,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("failed its isolation probe") && error.contains("/usr/bin"),
        "{error}"
    );
    // Destroyed: nothing of it is left.
    assert!(common::sandbox_dirs(state.path(), &run_id).is_empty());
    assert!(common::marked_inits(&run_id).is_empty());
}
