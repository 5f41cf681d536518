//! The real `kubectl` (1.32, installed on these machines) against an emulator started
//! in-process, with a fresh HOME so discovery is not cached between tests.

use std::path::PathBuf;
use std::process::{Output, Stdio};

use sandfleet_emulator_k8s::{Config, Emulator};

/// An emulator, its kubeconfig, and a directory for manifests.
pub struct Cluster {
    pub emulator: Emulator,
    pub dir: tempfile::TempDir,
    _image: Option<tempfile::TempDir>,
}

impl Cluster {
    /// An emulator as `config` says.
    pub async fn start(config: Config) -> Self {
        Self::start_with(config, None).await
    }

    /// An emulator whose pods can run image `python:3.12` (a directory with a marker).
    pub async fn with_image(config: Config) -> Self {
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
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write manifest");
        path
    }

    /// Run kubectl off the async runtime (it blocks for its whole run), with `stdin`.
    pub async fn kubectl_with(&self, args: &[&str], stdin: Option<&str>, timeout: &str) -> Output {
        let kubeconfig = self.dir.path().join("kubeconfig");
        let home = self.dir.path().join("home");
        let args: Vec<String> = args.iter().map(|s| (*s).to_string()).collect();
        let stdin = stdin.map(str::to_string);
        let timeout = format!("--request-timeout={timeout}");
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&home).expect("home");
            // The flag goes first: after `--` it would be the command's.
            let mut child = std::process::Command::new("kubectl")
                .arg(timeout)
                .args(&args)
                .env("KUBECONFIG", kubeconfig)
                .env("HOME", home)
                .stdin(if stdin.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
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

    /// Run kubectl with `--request-timeout=10s`.
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(args, None, "10s").await
    }

    /// Run kubectl, which must succeed; its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
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
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}
