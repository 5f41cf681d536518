//! Registry credentials and challenges: `auths` entries of Docker's
//! `config.json` and of `REGISTRY_AUTH_FILE` (podman's `auth.json`, the
//! same format), and the `WWW-Authenticate` header a registry answers 401
//! with (`Basic`, or `Bearer` with the realm, service and scope of its
//! token service).

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use serde::Deserialize;

use crate::error::Error;

/// Where credentials come from.
#[derive(Clone, Debug, Default)]
pub enum CredentialSource {
    /// `REGISTRY_AUTH_FILE` if set, then `$DOCKER_CONFIG/config.json`
    /// (default `~/.docker/config.json`); a file that does not exist is
    /// skipped.
    #[default]
    Environment,
    /// These files, in order (same format).
    Files(Vec<PathBuf>),
    /// None: anonymous pulls only.
    Anonymous,
}

impl CredentialSource {
    fn files(&self) -> Vec<PathBuf> {
        match self {
            CredentialSource::Anonymous => Vec::new(),
            CredentialSource::Files(files) => files.clone(),
            CredentialSource::Environment => {
                let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
                let mut files: Vec<PathBuf> = var("REGISTRY_AUTH_FILE")
                    .map(PathBuf::from)
                    .into_iter()
                    .collect();
                let docker = var("DOCKER_CONFIG")
                    .map(PathBuf::from)
                    .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".docker")));
                files.extend(docker.map(|dir| dir.join("config.json")));
                files
            }
        }
    }

    /// Reads the files.
    ///
    /// # Errors
    ///
    /// A file that exists but cannot be read or is not such a config.
    pub(crate) fn load(&self) -> Result<Credentials, Error> {
        let mut files = Vec::new();
        for path in self.files() {
            let text = match std::fs::read(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("credentials", "reading", &path, e)),
            };
            let parsed: ConfigFile = serde_json::from_slice(&text).map_err(|e| {
                Error::io(
                    "credentials",
                    "parsing",
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                )
            })?;
            files.push((path, parsed));
        }
        Ok(Credentials { files })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default)]
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

/// The credential files read for one pull.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    files: Vec<(PathBuf, ConfigFile)>,
}

/// A user name and password for a registry.
#[derive(Clone)]
pub(crate) struct Basic {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for Basic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Basic({:?}, <password>)", self.user)
    }
}

/// What the files hold for a registry.
#[derive(Debug)]
pub(crate) enum Found {
    Basic(Basic),
    Helper { helper: String, file: PathBuf },
    IdentityToken { file: PathBuf },
    Nothing,
}

impl Credentials {
    /// The credentials for `repository` on `registry`: the first file with
    /// an entry wins; within a file a `host/path` entry (podman's
    /// per-repository entries) beats the host's.
    pub(crate) fn find(&self, registry: &str, repository: &str) -> Found {
        let registry = normalize_key(registry);
        let full = format!("{registry}/{repository}");
        for (file, config) in &self.files {
            let best = config
                .auths
                .iter()
                .map(|(key, entry)| (normalize_key(key), entry))
                .filter(|(key, _)| {
                    *key == registry
                        || full
                            .strip_prefix(key.as_str())
                            .is_some_and(|r| r.starts_with('/'))
                })
                .max_by_key(|(key, _)| key.len());
            let helper = config
                .cred_helpers
                .iter()
                .find(|(key, _)| normalize_key(key) == registry)
                .map(|(_, helper)| helper.clone());
            if let Some(helper) = helper {
                return Found::Helper {
                    helper,
                    file: file.clone(),
                };
            }
            let Some((_, entry)) = best else { continue };
            if entry
                .identitytoken
                .as_deref()
                .is_some_and(|t| !t.is_empty())
            {
                return Found::IdentityToken { file: file.clone() };
            }
            if let Some(basic) = entry.basic() {
                return Found::Basic(basic);
            }
            // An entry with nothing in it is how Docker records a login
            // whose secret went to the credential store.
            if let Some(helper) = &config.creds_store {
                return Found::Helper {
                    helper: helper.clone(),
                    file: file.clone(),
                };
            }
        }
        Found::Nothing
    }
}

impl AuthEntry {
    fn basic(&self) -> Option<Basic> {
        if let Some(auth) = self.auth.as_deref().filter(|a| !a.is_empty()) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (user, password) = text.split_once(':')?;
            return Some(Basic {
                user: user.to_string(),
                password: password.to_string(),
            });
        }
        match (&self.username, &self.password) {
            (Some(user), Some(password)) if !user.is_empty() => Some(Basic {
                user: user.clone(),
                password: password.clone(),
            }),
            _ => None,
        }
    }
}

/// `https://index.docker.io/v1/` and `registry-1.docker.io` are
/// `docker.io`; a scheme and an API path (`/v1/`, `/v2/`) are dropped; a
/// repository path is kept.
fn normalize_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key.trim_end_matches('/');
    let (host, path) = match key.split_once('/') {
        Some((host, path)) if path == "v1" || path == "v2" => (host, None),
        Some((host, path)) => (host, Some(path)),
        None => (key, None),
    };
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        other => other,
    };
    match path {
        Some(path) => format!("{host}/{path}"),
        None => host.to_string(),
    }
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// Parses `Bearer realm="…",service="…",scope="…"` or `Basic
    /// realm="…"`; `None` for anything else.
    pub(crate) fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        let params = parse_params(rest);
        let get = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        if scheme.eq_ignore_ascii_case("basic") {
            Some(Challenge::Basic)
        } else if scheme.eq_ignore_ascii_case("bearer") {
            Some(Challenge::Bearer {
                realm: get("realm")?,
                service: get("service"),
                scope: get("scope"),
            })
        } else {
            None
        }
    }
}

/// `key=value` and `key="quoted, \"value\""` pairs separated by commas.
fn parse_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
        }
        params.push((key.trim().to_string(), value.trim().to_string()));
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(json: &str) -> Credentials {
        Credentials {
            files: vec![(
                PathBuf::from("/c.json"),
                serde_json::from_str(json).unwrap(),
            )],
        }
    }

    #[test]
    fn challenges_parse() {
        let header = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull""#;
        assert_eq!(
            Challenge::parse(header),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".to_string(),
                service: Some("registry.docker.io".to_string()),
                scope: Some("repository:library/python:pull".to_string()),
            })
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(Challenge::parse("Negotiate"), None);
        assert_eq!(
            Challenge::parse("Bearer realm=http://a/t, scope=\"x\\\"y\""),
            Some(Challenge::Bearer {
                realm: "http://a/t".to_string(),
                service: None,
                scope: Some("x\"y".to_string()),
            })
        );
    }

    #[test]
    fn docker_hub_keys_and_per_repository_entries() {
        let auth = base64::engine::general_purpose::STANDARD.encode("hub:secret");
        let repo = base64::engine::general_purpose::STANDARD.encode("team:t0ken");
        let creds = credentials(&format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},
                "docker.io/team":{{"auth":"{repo}"}}}}}}"#
        ));
        let Found::Basic(basic) = creds.find("docker.io", "library/python") else {
            panic!("no credentials for Docker Hub");
        };
        assert_eq!(
            (basic.user.as_str(), basic.password.as_str()),
            ("hub", "secret")
        );
        let Found::Basic(basic) = creds.find("docker.io", "team/app") else {
            panic!("no credentials for team/");
        };
        assert_eq!(basic.user, "team");
        assert!(matches!(creds.find("quay.io", "a/b"), Found::Nothing));
    }

    #[test]
    fn helpers_are_reported_not_run() {
        let creds = credentials(
            r#"{"auths":{"ghcr.io":{}},"credsStore":"desktop","credHelpers":{"123.dkr.ecr.us-east-1.amazonaws.com":"ecr-login"}}"#,
        );
        assert!(
            matches!(creds.find("ghcr.io", "a/b"), Found::Helper { helper, .. } if helper == "desktop")
        );
        assert!(matches!(
            creds.find("123.dkr.ecr.us-east-1.amazonaws.com", "a"),
            Found::Helper { helper, .. } if helper == "ecr-login"
        ));
        assert!(matches!(creds.find("quay.io", "a"), Found::Nothing));
    }
}
