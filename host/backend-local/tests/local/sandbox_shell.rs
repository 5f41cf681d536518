//! Shell commands in a sandbox, and a sandbox of an OCI image on a state
//! directory of its own: what the suite's tests share with the ones that
//! run as an ordinary user in a binary of their own.

use std::path::Path;
use std::time::{Duration, Instant};

use sandfleet_backend_local::{IsolationMode, LocalBackend, LocalConfig};
use sandfleet_core::{Backend, ExecRequest, ExecResult, RunId, SandboxHandle, TemplateSpec};

/// Generous bound for claims and pool fills; never reached when things work.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// A namespaced backend on `state_dir`, which passed its preflight, and a
/// sandbox of `reference` claimed in a run named after `name`.
pub(crate) async fn claim_image(
    state_dir: &Path,
    reference: String,
    name: &str,
) -> (LocalBackend, RunId, SandboxHandle) {
    let config = LocalConfig {
        state_dir: Some(state_dir.to_path_buf()),
        isolation: IsolationMode::Namespaces,
        ..LocalConfig::default()
    };
    let backend = LocalBackend::new("local", config).unwrap();
    let found = backend.preflight().await;
    assert!(found.failures.is_empty(), "{:?}", found.failures);
    let run_id = RunId::generate(name);
    let spec = TemplateSpec {
        name: name.into(),
        image: reference,
        cpu_milli: 1000,
        memory_mib: 512,
        disk_mib: 256,
        network: false,
        env: Default::default(),
        labels: run_id.labels(),
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    let sandbox = backend
        .claim(&template, &run_id.labels(), Instant::now() + PATIENCE)
        .await
        .unwrap();
    (backend, run_id, sandbox)
}

/// Runs `script` with `sh -c` in the sandbox.
pub(crate) async fn sh(
    backend: &LocalBackend,
    sandbox: &SandboxHandle,
    script: &str,
) -> ExecResult {
    backend
        .exec(sandbox, &request(["sh", "-c", script]), None)
        .await
        .unwrap()
}

/// Like [`sh`], returning stdout as text and failing on a non-zero exit.
pub(crate) async fn sh_ok(backend: &LocalBackend, sandbox: &SandboxHandle, script: &str) -> String {
    let result = sh(backend, sandbox, script).await;
    assert_eq!(
        result.exit_code,
        0,
        "`{script}` failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    String::from_utf8(result.stdout).unwrap()
}

pub(crate) fn request<const N: usize>(argv: [&str; N]) -> ExecRequest {
    ExecRequest {
        argv: argv.map(String::from).to_vec(),
        timeout: PATIENCE,
        ..ExecRequest::default()
    }
}
