//! Platforms (`linux/amd64`, `linux/arm64/v8`): the host's, and which
//! entry of a manifest list or OCI index serves one.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::spec::{Descriptor, Index};

/// An OS, a CPU architecture in Go's names (as images use them) and
/// optionally a variant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Platform {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, `arm`, …
    pub architecture: String,
    /// `v8`, `v7`, … when the architecture has variants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this process runs on.
    pub fn host() -> Self {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "loongarch64" => "loong64",
            other => other,
        };
        Platform {
            os: "linux".to_string(),
            architecture: architecture.to_string(),
            variant: None,
        }
    }

    /// How well an index entry for `offered` serves this platform: `None`
    /// when it cannot, higher when it fits better (an exact variant over an
    /// entry that names none).
    pub(crate) fn fit(&self, offered: &Platform) -> Option<u8> {
        if self.os != offered.os || self.architecture != offered.architecture {
            return None;
        }
        match (self.variant.as_deref(), offered.variant.as_deref()) {
            (Some(want), Some(have)) if want == have => Some(3),
            (Some(_), Some(_)) => None,
            (None, Some(have)) if default_variant(&self.architecture) == Some(have) => Some(2),
            (None, Some(_)) => Some(0),
            (_, None) => Some(1),
        }
    }
}

/// The entry of `index` that serves `want` best; when none does, the
/// platforms it has. An index whose entries name no platform at all (an
/// OCI layout's `index.json` often) serves with its only entry.
pub(crate) fn choose<'a>(index: &'a Index, want: &Platform) -> Result<&'a Descriptor, Vec<String>> {
    if let [only] = index.manifests.as_slice()
        && only.platform.is_none()
    {
        return Ok(only);
    }
    index
        .manifests
        .iter()
        .filter_map(|d| Some((want.fit(d.platform.as_ref()?)?, d)))
        .max_by_key(|(fit, _)| *fit)
        .map(|(_, d)| d)
        .ok_or_else(|| {
            let mut available: Vec<String> = index
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .filter(|p| p.os != "unknown")
                .map(Platform::to_string)
                .collect();
            available.dedup();
            if available.is_empty() {
                available.push("no platforms".to_string());
            }
            available
        })
}

/// The variant an architecture means when none is named.
fn default_variant(architecture: &str) -> Option<&'static str> {
    match architecture {
        "arm64" => Some("v8"),
        "arm" => Some("v7"),
        _ => None,
    }
}

impl Default for Platform {
    fn default() -> Self {
        Platform::host()
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

impl FromStr for Platform {
    type Err = String;

    /// `os/arch` or `os/arch/variant`.
    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [os, arch] | [os, arch, _] if !os.is_empty() && !arch.is_empty() => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: parts
                    .get(2)
                    .filter(|v| !v.is_empty())
                    .map(|v| v.to_string()),
            }),
            _ => Err(format!(
                "{text:?} is not a platform like linux/amd64 or linux/arm64/v8"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Platform {
        text.parse().unwrap()
    }

    #[test]
    fn parses_and_prints() {
        assert_eq!(p("linux/arm64/v8").to_string(), "linux/arm64/v8");
        assert_eq!(p("linux/amd64").variant, None);
        assert!("linux".parse::<Platform>().is_err());
        assert!("linux//v8".parse::<Platform>().is_err());
    }

    #[test]
    fn an_exact_variant_fits_best_and_a_wrong_one_not_at_all() {
        let want = p("linux/arm64/v8");
        assert_eq!(want.fit(&p("linux/arm64/v8")), Some(3));
        assert_eq!(want.fit(&p("linux/arm64")), Some(1));
        assert_eq!(want.fit(&p("linux/arm64/v9")), None);
        assert_eq!(want.fit(&p("linux/amd64")), None);
        let plain = p("linux/arm64");
        assert!(plain.fit(&p("linux/arm64/v8")) > plain.fit(&p("linux/arm64")));
        assert_eq!(p("linux/amd64").fit(&p("windows/amd64")), None);
    }
}
