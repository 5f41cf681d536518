//! The kubeconfig a client uses to reach the emulator: one cluster, user and context,
//! all named `sandfleet-devcluster`, with the CA embedded and the bearer token.

use std::path::Path;

use anyhow::Context;
use base64::Engine as _;

/// The name of the cluster, user and context.
pub const CONTEXT: &str = "sandfleet-devcluster";

/// What a kubeconfig needs to say.
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The bearer token.
    pub token: String,
}

impl Kubeconfig {
    /// The kubeconfig as YAML text.
    pub fn render(&self) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {CONTEXT}\n  user:\n    token: {token}\ncontexts:\n- name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    user: {CONTEXT}\n    namespace: default\ncurrent-context: {CONTEXT}\npreferences: {{}}\n",
            server = self.server,
            token = self.token,
        )
    }

    /// Write the kubeconfig to `path` (mode 0600: it holds the token).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("writing kubeconfig {}", path.display()))?;
        file.write_all(self.render().as_bytes())
            .with_context(|| format!("writing kubeconfig {}", path.display()))?;
        Ok(())
    }
}
