//! The CNCF distribution registry (Debian's `docker-registry`), started
//! on a free loopback port with a config file written here, and the
//! distribution-API calls that push what the tests build.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sandfleet_images::Digest;

const BINARY: &str = "/usr/bin/docker-registry";

/// The service name a token registry expects in its tokens' audience.
pub const TOKEN_SERVICE: &str = "sandfleet-test";

/// The issuer a token registry expects of its tokens.
pub const TOKEN_ISSUER: &str = "sandfleet-test-issuer";

/// How the registry authenticates.
pub enum Auth {
    /// Anyone may pull and push.
    None,
    /// htpasswd basic auth with one user.
    Basic {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// Token auth against a token service.
    Token {
        /// The token service's URL.
        realm: String,
        /// The certificate the tokens are signed with.
        cert_pem: String,
    },
}

/// A running registry; killed when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub host: String,
    _dir: tempfile::TempDir,
    push_auth: Option<String>,
    http: reqwest::Client,
}

impl Registry {
    /// Starts a registry and waits (bounded) until it answers.
    pub async fn start(auth: Auth) -> Registry {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} is missing: apt-get install docker-registry (.ci/run does)"
        );
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let (auth_yaml, push_auth) = match &auth {
            Auth::None => (String::new(), None),
            Auth::Basic { user, password } => {
                let hash = bcrypt::hash(password, 4).unwrap();
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{user}:{hash}\n")).unwrap();
                let basic =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                (
                    format!(
                        "auth:\n  htpasswd:\n    realm: sandfleet-test\n    path: {}\n",
                        file.display()
                    ),
                    Some(format!("Basic {basic}")),
                )
            }
            Auth::Token { realm, cert_pem } => {
                let file = dir.path().join("token.pem");
                std::fs::write(&file, cert_pem).unwrap();
                (
                    format!(
                        "auth:\n  token:\n    realm: {realm}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                        TOKEN_SERVICE,
                        TOKEN_ISSUER,
                        file.display()
                    ),
                    None,
                )
            }
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: sandfleet-test\n{auth_yaml}",
            dir.path().join("data").display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut registry = Registry {
            child,
            host: format!("127.0.0.1:{port}"),
            _dir: dir,
            push_auth,
            http: reqwest::Client::builder()
                .tls_backend_rustls()
                .build()
                .unwrap(),
        };
        registry.wait_ready().await;
        registry
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("http://{}/v2/", self.host);
        loop {
            if let Ok(response) = self.http.get(&url).send().await {
                assert!(
                    response.status().as_u16() < 500,
                    "registry answered {}",
                    response.status()
                );
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("docker-registry exited at start: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Uses this `Authorization` value for pushes (a token registry's).
    pub fn set_push_auth(&mut self, authorization: String) {
        self.push_auth = Some(authorization);
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url);
        match &self.push_auth {
            Some(auth) => request.header("Authorization", auth),
            None => request,
        }
    }

    /// Pushes a blob (monolithic upload) and returns its digest.
    pub async fn push_blob(&self, repo: &str, bytes: &[u8]) -> Digest {
        let digest = Digest::of(bytes);
        let start = self
            .request(
                reqwest::Method::POST,
                &format!("http://{}/v2/{repo}/blobs/uploads/", self.host),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            start.status().as_u16(),
            202,
            "starting an upload to {repo}: {}",
            start.text().await.unwrap()
        );
        let location = start.headers()["location"].to_str().unwrap().to_string();
        let location = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.host)
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = self
            .request(
                reqwest::Method::PUT,
                &format!("{location}{sep}digest={digest}"),
            )
            .header("Content-Type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(
            put.status().as_u16(),
            201,
            "uploading a blob to {repo}: {}",
            put.text().await.unwrap()
        );
        digest
    }

    /// Pushes a manifest or index under `tag` and returns its digest.
    pub async fn push_manifest(
        &self,
        repo: &str,
        tag: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Digest {
        let response = self
            .request(
                reqwest::Method::PUT,
                &format!("http://{}/v2/{repo}/manifests/{tag}", self.host),
            )
            .header("Content-Type", media_type)
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status().as_u16(),
            201,
            "pushing {repo}:{tag}: {}",
            response.text().await.unwrap()
        );
        Digest::of(bytes)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Docker config file holding `auths` for `host`.
pub fn docker_config(dir: &Path, host: &str, user: &str, password: &str) -> PathBuf {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let path = dir.join(format!("config-{user}.json"));
    std::fs::write(
        &path,
        format!(r#"{{"auths":{{"{host}":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    path
}
