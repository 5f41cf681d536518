//! Image references, normalized as Docker does (`python:3.11` is
//! `docker.io/library/python:3.11`), and mirror rewrites applied before a
//! pull.

use std::fmt;
use std::str::FromStr;

use crate::digest::Digest;
use crate::error::Error;

/// Docker Hub's name in references, and the host its API is served from.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";
const MAX_NAME: usize = 255;
const MAX_TAG: usize = 128;

/// A normalized image reference: registry, repository, and a tag, a digest
/// or both (a digest wins when both are given; the tag is kept to name the
/// image).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses and normalizes `text`: a missing registry is Docker Hub, a
    /// one-part Docker Hub name is under `library/`, and a reference with
    /// neither tag nor digest means `:latest`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidReference`] naming `text` and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, Error> {
        parse(text).map_err(|reason| Error::InvalidReference {
            input: text.to_string(),
            reason,
        })
    }

    /// The registry as written in the reference (`docker.io`, `host:5000`).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The host (and port) whose distribution API serves this registry:
    /// Docker Hub's API lives at `registry-1.docker.io`.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// The repository path (`library/python`).
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if one was given or implied.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest, if one was given.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// What to ask the registry's manifest endpoint for: the digest when
    /// there is one, else the tag.
    pub(crate) fn manifest_key(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => digest.to_string(),
            (None, Some(tag)) => tag.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// This repository at `digest` (no tag): how an image pulled by tag is
    /// also known.
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest),
        }
    }
}

impl FromStr for Reference {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        Reference::parse(text)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn parse(text: &str) -> Result<Reference, String> {
    if text.is_empty() {
        return Err("it is empty".to_string());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains whitespace".to_string());
    }
    let (rest, digest) = match text.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest.parse::<Digest>()?)),
        None => (text, None),
    };
    // A tag's colon comes after the last slash; a colon before it is a
    // registry's port.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (
            &rest[..last_slash + i],
            Some(rest[last_slash + i + 1..].to_string()),
        ),
        None => (rest, None),
    };
    let (registry, repository) = split_registry(name);
    check_registry(&registry)?;
    check_repository(&repository)?;
    if registry.len() + 1 + repository.len() > MAX_NAME {
        return Err(format!("the name is longer than {MAX_NAME} characters"));
    }
    if let Some(tag) = &tag {
        check_tag(tag)?;
    }
    let tag = match (&tag, &digest) {
        (None, None) => Some("latest".to_string()),
        _ => tag,
    };
    Ok(Reference {
        registry,
        repository,
        tag,
        digest,
    })
}

/// The registry part is the first component when it looks like a host
/// (has a dot or a port, is `localhost`, or has capitals, which repository
/// paths cannot); otherwise the name is on Docker Hub.
fn split_registry(name: &str) -> (String, String) {
    let (registry, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    let registry = if registry == "index.docker.io" {
        DOCKER_HUB.to_string()
    } else {
        registry
    };
    let path = if registry == DOCKER_HUB && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    (registry, path)
}

fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = if let Some(bracketed) = registry.strip_prefix('[') {
        let (ip, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("registry {registry:?} has an unclosed '['"))?;
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("registry {registry:?} is not a valid IPv6 address"));
        }
        (None, after.strip_prefix(':'))
    } else {
        match registry.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(host) = host {
        let valid = !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !valid {
            return Err(format!("registry {registry:?} is not a host name"));
        }
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("registry {registry:?} has a bad port"));
    }
    Ok(())
}

/// Components are lowercase alphanumerics joined by `.`, `_`, `__` or runs
/// of `-`, as the distribution spec says.
fn check_repository(repository: &str) -> Result<(), String> {
    if repository.is_empty() {
        return Err("the repository name is empty".to_string());
    }
    for component in repository.split('/') {
        if component.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(format!("repository {repository:?} must be lowercase"));
        }
        let bytes = component.as_bytes();
        let mut valid = !bytes.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric();
        let mut i = 0;
        while valid && i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii_lowercase() || b.is_ascii_digit() {
                i += 1;
                continue;
            }
            let run = bytes[i..].iter().take_while(|&&c| c == b).count();
            valid = match b {
                b'.' => run == 1,
                b'_' => run <= 2,
                b'-' => true,
                _ => false,
            };
            i += run;
        }
        if !valid {
            return Err(format!(
                "repository component {component:?} is not lowercase letters and digits \
                 joined by '.', '_', '__' or '-'"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let valid = tag.len() <= MAX_TAG
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} is not 1 to {MAX_TAG} letters, digits, '_', '.' or '-' \
             (not starting with '.' or '-')"
        ))
    }
}

/// Mirror rewrites: `prefix → replacement`, matched against the normalized
/// reference (`docker.io/library/python:3.11`, so Docker Hub's official
/// images are under `docker.io/library/`), the longest prefix first.
#[derive(Clone, Debug, Default)]
pub struct Rewrites(Vec<(String, String)>);

impl Rewrites {
    /// The rules `prefix → replacement`.
    pub fn new(rules: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut rules: Vec<(String, String)> = rules.into_iter().collect();
        rules.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Rewrites(rules)
    }

    /// `reference` with its longest matching prefix replaced (unchanged
    /// when none matches).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidReference`] when the rewritten text is not a
    /// reference (a rule with a bad replacement).
    pub fn apply(&self, reference: &Reference) -> Result<Reference, Error> {
        let text = reference.to_string();
        match self
            .0
            .iter()
            .find_map(|(prefix, mirror)| text.strip_prefix(prefix.as_str()).map(|r| (mirror, r)))
        {
            Some((mirror, rest)) => Reference::parse(&format!("{mirror}{rest}")),
            None => Ok(reference.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(text: &str) -> String {
        Reference::parse(text).unwrap().to_string()
    }

    #[test]
    fn docker_hub_names_are_normalized() {
        assert_eq!(norm("python:3.11"), "docker.io/library/python:3.11");
        assert_eq!(norm("python"), "docker.io/library/python:latest");
        assert_eq!(norm("namanjain12/foo:bar"), "docker.io/namanjain12/foo:bar");
        assert_eq!(
            norm("index.docker.io/library/x"),
            "docker.io/library/x:latest"
        );
        let hub = Reference::parse("python:3.11").unwrap();
        assert_eq!(hub.api_host(), "registry-1.docker.io");
        assert_eq!(hub.repository(), "library/python");
    }

    #[test]
    fn registries_ports_and_digests() {
        let digest = format!("sha256:{}", "0f".repeat(32));
        let r = Reference::parse(&format!("host:5000/a/b@{digest}")).unwrap();
        assert_eq!(r.registry(), "host:5000");
        assert_eq!(r.repository(), "a/b");
        assert_eq!(r.tag(), None);
        assert_eq!(r.manifest_key(), digest);
        assert_eq!(norm("localhost/x"), "localhost/x:latest");
        assert_eq!(norm("127.0.0.1:5000/x:1"), "127.0.0.1:5000/x:1");
        assert_eq!(norm("[::1]:5000/x:1"), "[::1]:5000/x:1");
        let both = Reference::parse(&format!("python:3.11@{digest}")).unwrap();
        assert_eq!(both.tag(), Some("3.11"));
        assert_eq!(both.manifest_key(), digest);
        assert_eq!(
            both.to_string(),
            format!("docker.io/library/python:3.11@{digest}")
        );
    }

    #[test]
    fn bad_references_name_the_input_and_the_fault() {
        for (input, says) in [
            ("", "empty"),
            ("Python:3", "lowercase"),
            ("a/b:bad tag", "whitespace"),
            ("a/b:-x", "tag"),
            ("a//b", "component"),
            ("a/b@sha256:12", "digest"),
            ("a/b@md5:12", "only sha256"),
            ("host:99999/a", "bad port"),
            ("a/b..c", "component"),
        ] {
            let error = Reference::parse(input).unwrap_err().to_string();
            assert!(error.contains(&format!("{input:?}")), "{error}");
            assert!(error.contains(says), "{input}: {error}");
        }
    }

    #[test]
    fn rewrites_take_the_longest_prefix_of_the_normalized_name() {
        let rewrites = Rewrites::new([
            ("docker.io/".to_string(), "mirror:5000/hub/".to_string()),
            (
                "docker.io/library/".to_string(),
                "mirror:5000/official/".to_string(),
            ),
        ]);
        let python = Reference::parse("python:3.11").unwrap();
        assert_eq!(
            rewrites.apply(&python).unwrap().to_string(),
            "mirror:5000/official/python:3.11"
        );
        let other = Reference::parse("namanjain12/foo:bar").unwrap();
        assert_eq!(
            rewrites.apply(&other).unwrap().to_string(),
            "mirror:5000/hub/namanjain12/foo:bar"
        );
        let untouched = Reference::parse("quay.io/a/b:c").unwrap();
        assert_eq!(rewrites.apply(&untouched).unwrap(), untouched);
    }
}
