//! The real `kubectl` (1.32, installed on these machines) against an emulator started
//! in-process, with a fresh HOME so discovery is not cached between tests.

use std::path::PathBuf;
use std::process::{Child, Output, Stdio};

use sandfleet_emulator_k8s::{Config, Emulator};

/// An emulator, its kubeconfig, and a directory for manifests.
pub(crate) struct Cluster {
    pub(crate) emulator: Emulator,
    pub(crate) dir: tempfile::TempDir,
    _image: Option<tempfile::TempDir>,
}

impl Cluster {
    /// An emulator as `config` says.
    pub(crate) async fn start(config: Config) -> Self {
        Self::start_with(config, None).await
    }

    /// An emulator whose pods can run image `python:3.12` (a directory with a marker).
    pub(crate) async fn with_image(config: Config) -> Self {
        let (dir, images) = super::image("python:3.12");
        Self::start_with(Config { images, ..config }, Some(dir)).await
    }

    async fn start_with(config: Config, image: Option<tempfile::TempDir>) -> Self {
        let emulator = Emulator::start(config).await.expect("emulator starts");
        let dir = tempfile::tempdir().expect("temp dir");
        emulator
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig written");
        Self {
            emulator,
            dir,
            _image: image,
        }
    }

    /// Write a manifest.
    pub(crate) fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write manifest");
        path
    }

    /// kubectl with this cluster's kubeconfig, a fresh HOME and `--request-timeout`.
    fn command(&self, args: &[&str], timeout: &str) -> std::process::Command {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let mut command = std::process::Command::new("kubectl");
        // The flag goes first: after `--` it would be the command's.
        command
            .arg(format!("--request-timeout={timeout}"))
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", home)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Run kubectl off the async runtime (it blocks for its whole run), with `stdin`.
    pub(crate) async fn kubectl_with(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        timeout: &str,
    ) -> Output {
        let mut command = self.command(args, timeout);
        let stdin = stdin.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            let mut child = command
                .stdin(if stdin.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .spawn()
                .expect("kubectl runs");
            if let Some(text) = stdin {
                use std::io::Write as _;
                let mut pipe = child.stdin.take().expect("stdin");
                pipe.write_all(text.as_bytes()).expect("write stdin");
            }
            child.wait_with_output().expect("kubectl output")
        })
        .await
        .expect("kubectl task")
    }

    /// Start kubectl and hand it back running (a stream it follows, say), its stdout
    /// and stderr piped. Its request timeout, 2 minutes, is past any test's own limits:
    /// it only ends a kubectl that a failed test left behind.
    pub(crate) fn kubectl_running(&self, args: &[&str]) -> Child {
        self.command(args, "120s")
            .stdin(Stdio::null())
            .spawn()
            .expect("kubectl runs")
    }

    /// What a `kubectl exec`'s command wrote to stderr. kubectl 1.32's
    /// websocket reader starts before its streams exist, so the empty frame
    /// an API server sends on the lowest output channel once the stream is
    /// up (`webSocketServerStreams` in k8s.io/apiserver) can reach it first;
    /// it then logs `Unknown stream id 1, discarding message` among the
    /// command's stderr (client-go later waits for its streams). That line
    /// is the client's, not the command's.
    pub(crate) fn exec_stderr(output: &Output) -> String {
        String::from_utf8_lossy(&output.stderr)
            .split_inclusive('\n')
            .filter(|line| !line.contains("] Unknown stream id "))
            .collect()
    }

    /// Run kubectl with `--request-timeout=10s`.
    pub(crate) async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(args, None, "10s").await
    }

    /// Run kubectl, which must succeed; its stdout.
    pub(crate) async fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run kubectl, which must fail; its stderr.
    pub(crate) async fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}
