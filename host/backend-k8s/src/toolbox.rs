//! Images without a shell (distroless and `FROM scratch` images): the
//! driver brings its own programs instead of using the image's.
//!
//! With `toolbox = "IMAGE"`, every pod the driver asks for (the sandboxes'
//! and the pre-pull DaemonSets') starts with an init container of IMAGE,
//! which must hold a statically linked busybox at `/bin/busybox`, as the
//! official `busybox:*-musl` and `busybox:*-uclibc` images do. It copies
//! busybox into an `emptyDir` and links every applet beside it; the other
//! containers mount that volume read-only at [`MOUNT`]. This is the pattern
//! of Tekton's and Argo's entrypoint copies: it needs nothing of the image
//! and no feature gate (image volumes need Kubernetes 1.33's beta, and
//! ephemeral containers see the image's files only through `/proc`).
//!
//! Then the container's keep-alive process, the exec session, the driver's
//! own scripts (files, kills, scrubs) and the pre-pull pods all run the
//! toolbox's programs, and a task's commands find them on `PATH` after the
//! image's own, so `python` is still the image's.

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, PodSpec, Volume, VolumeMount};

/// Where the toolbox is mounted in a sandbox's container.
pub(crate) const MOUNT: &str = "/.sandfleet";
/// The toolbox's programs: busybox and a link per applet.
pub(crate) const BIN: &str = "/.sandfleet/bin";
/// The pod volume holding it.
const VOLUME: &str = "sandfleet-toolbox";
/// The init container that fills it.
const INIT: &str = "sandfleet-toolbox";

/// How the driver's shell scripts and sessions run in a pod: the shells
/// they run, and whether the toolbox's programs must be put on `PATH` first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shell {
    /// The configuration's `shell`: it reads the session's commands.
    session: String,
    /// What runs the driver's one-off scripts: the image's `sh`, or the
    /// toolbox's.
    scripts: String,
    toolbox: bool,
}

impl Shell {
    /// The shells of a configuration whose `shell` is `session`: with a
    /// toolbox, its programs on `PATH` and its `sh` for scripts.
    pub(crate) fn new(session: &str, toolbox: bool) -> Shell {
        Shell {
            session: session.to_string(),
            scripts: if toolbox { shell() } else { "sh".into() },
            toolbox,
        }
    }

    /// The argv that runs `script` with `args` as `$1`…
    pub(crate) fn script(&self, script: &str, args: &[String]) -> Vec<String> {
        let mut argv = vec![
            self.scripts.clone(),
            "-c".into(),
            format!("{}{script}", self.prelude()),
            "sf".into(),
        ];
        argv.extend(args.iter().cloned());
        argv
    }

    /// The argv of a session: a shell reading commands from its stdin.
    pub(crate) fn session(&self) -> Vec<String> {
        if self.toolbox {
            let exec = format!("{}exec {}", self.prelude(), self.session);
            vec![self.scripts.clone(), "-c".into(), exec]
        } else {
            vec![self.session.clone()]
        }
    }

    /// Puts the toolbox's programs on `PATH`, after the image's.
    fn prelude(&self) -> String {
        if self.toolbox {
            format!("PATH=\"${{PATH:+$PATH:}}{BIN}\"; export PATH; ")
        } else {
            String::new()
        }
    }
}

/// The keep-alive command of a sandbox's container when the toolbox
/// provides it.
pub(crate) fn entrypoint() -> Vec<String> {
    vec![format!("{BIN}/tail"), "-f".into(), "/dev/null".into()]
}

/// The shell the toolbox provides.
pub(crate) fn shell() -> String {
    format!("{BIN}/sh")
}

/// Adds the toolbox of `image` to `pod`: the volume, the init container
/// that fills it (first, before any of the pod's own), and a read-only
/// mount of it in every container.
pub(crate) fn equip(pod: &mut PodSpec, image: &str, pull_policy: Option<&String>) {
    let fill = format!(
        "mkdir -p {BIN} && cp /bin/busybox {BIN}/busybox && {BIN}/busybox --install -s {BIN}"
    );
    let init = Container {
        name: INIT.into(),
        image: Some(image.to_string()),
        image_pull_policy: pull_policy.cloned(),
        command: Some(vec!["/bin/busybox".into(), "sh".into(), "-c".into(), fill]),
        volume_mounts: Some(vec![VolumeMount {
            name: VOLUME.into(),
            mount_path: MOUNT.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let read_only = VolumeMount {
        name: VOLUME.into(),
        mount_path: MOUNT.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    for container in pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten())
    {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(read_only.clone());
    }
    pod.init_containers
        .get_or_insert_with(Vec::new)
        .insert(0, init);
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toolbox_fills_a_volume_first_and_every_other_container_reads_it() {
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "sandbox".into(),
                ..Container::default()
            }],
            init_containers: Some(vec![Container {
                name: "pull".into(),
                ..Container::default()
            }]),
            ..PodSpec::default()
        };
        equip(&mut pod, "busybox:1.37-musl", Some(&"IfNotPresent".into()));
        let init = pod.init_containers.as_ref().unwrap();
        assert_eq!(init[0].name, INIT);
        assert_eq!(init[0].image.as_deref(), Some("busybox:1.37-musl"));
        assert_eq!(init[0].volume_mounts.as_ref().unwrap()[0].read_only, None);
        for container in pod.containers.iter().chain(&init[1..]) {
            let mounts = container.volume_mounts.as_ref().unwrap();
            assert_eq!(mounts[0].mount_path, MOUNT);
            assert_eq!(mounts[0].read_only, Some(true), "{}", container.name);
        }
        let volume = &pod.volumes.as_ref().unwrap()[0];
        assert_eq!(volume.name, VOLUME);
        assert!(volume.empty_dir.is_some());
    }

    #[test]
    fn with_a_toolbox_scripts_find_its_programs_after_the_images() {
        let plain = Shell::new("/bin/sh", false);
        assert_eq!(
            plain.script("kill -KILL \"$1\"", &["7".into()]),
            ["sh", "-c", "kill -KILL \"$1\"", "sf", "7"]
        );
        assert_eq!(plain.session(), ["/bin/sh"]);
        let toolbox = Shell::new(&shell(), true);
        let argv = toolbox.script("cat -- \"$1\"", &["/f".into()]);
        assert_eq!(argv[0], "/.sandfleet/bin/sh");
        assert_eq!(
            argv[2],
            "PATH=\"${PATH:+$PATH:}/.sandfleet/bin\"; export PATH; cat -- \"$1\""
        );
        assert_eq!(
            toolbox.session(),
            [
                "/.sandfleet/bin/sh",
                "-c",
                "PATH=\"${PATH:+$PATH:}/.sandfleet/bin\"; export PATH; exec /.sandfleet/bin/sh"
            ]
        );
    }
}
