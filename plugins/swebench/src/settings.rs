//! The run configuration the adapter accepts.

use crate::error::InvalidInput;
use crate::grader::GraderVersion;
use crate::image::Arch;

/// One accepted setting, as `describe` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SettingDoc {
    /// The key in the run's configuration.
    pub(crate) key: &'static str,
    /// One line on what it does and which values it takes.
    pub(crate) summary: &'static str,
    /// The value used when the key is left out; `None` when it is required.
    pub(crate) default: Option<&'static str>,
}

const GRADER_VERSION: &str = "grader-version";
const NAMESPACE: &str = "namespace";
const ARCH: &str = "arch";
const TAG: &str = "tag";
const TIMEOUT_S: &str = "timeout-s";
const EVALUATION: &str = "evaluation";

/// The harnesses' defaults: images from Docker Hub's `swebench` namespace,
/// tagged `latest`, tests killed after 1,800 s (`--timeout 1_800`).
const DEFAULT_NAMESPACE: &str = "swebench";
const DEFAULT_TAG: &str = "latest";
const DEFAULT_TIMEOUT_S: u64 = 1_800;

/// Every setting the adapter understands.
pub(crate) const SETTING_DOCS: [SettingDoc; 6] = [
    SettingDoc {
        key: GRADER_VERSION,
        summary: "Harness whose behaviour grading reproduces: swebench-4.1.0 or swebench-5.0.2.",
        default: None,
    },
    SettingDoc {
        key: NAMESPACE,
        summary: "Registry namespace of instance images; `none` for local names without one.",
        default: Some(DEFAULT_NAMESPACE),
    },
    SettingDoc {
        key: ARCH,
        summary: "Image architecture: x86_64 (alias amd64) or arm64.",
        default: Some("x86_64"),
    },
    SettingDoc {
        key: TAG,
        summary: "Instance image tag.",
        default: Some(DEFAULT_TAG),
    },
    SettingDoc {
        key: TIMEOUT_S,
        summary: "Seconds before the evaluation is killed; a timeout is an error, not a failed test.",
        default: Some("1800"),
    },
    SettingDoc {
        key: EVALUATION,
        summary: "Where the patch is evaluated: in-place (the sandbox the work ran in) or fresh \
                  (a new sandbox of the image that receives only the work's diff, as the \
                  harness's new container does).",
        default: Some("in-place"),
    },
];

/// Where the evaluation runs (the `evaluation` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Evaluation {
    /// In the sandbox the work ran in.
    #[default]
    InPlace,
    /// In a new sandbox of the same image.
    Fresh,
}

impl Evaluation {
    fn parse(value: &str) -> Result<Self, InvalidInput> {
        match value {
            "in-place" => Ok(Self::InPlace),
            "fresh" => Ok(Self::Fresh),
            _ => Err(InvalidInput::new(format!(
                "setting `{EVALUATION}` must be `in-place` or `fresh`, not `{value}`"
            ))),
        }
    }
}

/// The settings `load` needs; everything later calls need travels in the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Which harness to reproduce.
    pub(crate) grader: GraderVersion,
    /// Image namespace; `None` names local images (`--namespace none`).
    pub(crate) namespace: Option<String>,
    /// Image architecture.
    pub(crate) arch: Arch,
    /// Image tag.
    pub(crate) tag: String,
    /// Evaluation timeout in seconds.
    pub(crate) timeout_s: u64,
    pub(crate) evaluation: Evaluation,
}

impl Settings {
    /// Reads `key = value` pairs; a later pair overrides an earlier one with
    /// the same key, and keys the adapter does not know are the host's concern.
    ///
    /// # Errors
    ///
    /// When `grader-version` is missing or a value is malformed.
    pub(crate) fn parse(pairs: &[(&str, &str)]) -> Result<Self, InvalidInput> {
        Ok(Self {
            grader: grader_version(pairs)?,
            namespace: namespace(lookup(pairs, NAMESPACE).unwrap_or(DEFAULT_NAMESPACE)),
            arch: lookup(pairs, ARCH).map_or(Ok(Arch::X86_64), Arch::parse)?,
            tag: lookup(pairs, TAG).unwrap_or(DEFAULT_TAG).to_owned(),
            timeout_s: lookup(pairs, TIMEOUT_S).map_or(Ok(DEFAULT_TIMEOUT_S), timeout_s)?,
            evaluation: lookup(pairs, EVALUATION)
                .map_or(Ok(Evaluation::InPlace), Evaluation::parse)?,
        })
    }
}

/// Reads just `grader-version`, for calls that need nothing else.
///
/// # Errors
///
/// When it is missing or names no supported version.
pub(crate) fn grader_version(pairs: &[(&str, &str)]) -> Result<GraderVersion, InvalidInput> {
    let value = lookup(pairs, GRADER_VERSION).ok_or_else(|| {
        InvalidInput::new(format!(
            "setting `{GRADER_VERSION}` is required: {}",
            GraderVersion::ALL.map(GraderVersion::name).join(" or ")
        ))
    })?;
    GraderVersion::parse(value)
}

/// The value of the last pair with `key`.
fn lookup<'a>(pairs: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| *k == key)
        .map(|(_, value)| *value)
}

/// The harness's `optional_str`: `none`, `null` and the empty string (any case)
/// mean no namespace.
fn namespace(value: &str) -> Option<String> {
    let none = ["none", "null", ""]
        .iter()
        .any(|word| value.eq_ignore_ascii_case(word));
    (!none).then(|| value.to_owned())
}

fn timeout_s(value: &str) -> Result<u64, InvalidInput> {
    value
        .parse()
        .ok()
        .filter(|&seconds| seconds > 0)
        .ok_or_else(|| {
            InvalidInput::new(format!(
                "setting `{TIMEOUT_S}` must be a positive number of seconds, not `{value}`"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_harness() {
        let settings = Settings::parse(&[("grader-version", "swebench-4.1.0")]).unwrap();
        assert_eq!(
            settings,
            Settings {
                grader: GraderVersion::V4_1_0,
                namespace: Some("swebench".into()),
                arch: Arch::X86_64,
                tag: "latest".into(),
                timeout_s: 1_800,
                evaluation: Evaluation::InPlace,
            }
        );
    }

    #[test]
    fn values_override_defaults_and_none_clears_the_namespace() {
        let settings = Settings::parse(&[
            ("grader-version", "swebench-5.0.2"),
            ("namespace", "NONE"),
            ("arch", "arm64"),
            ("tag", "v2"),
            ("timeout-s", "60"),
            ("evaluation", "fresh"),
        ])
        .unwrap();
        assert_eq!(settings.grader, GraderVersion::V5_0_2);
        assert_eq!(settings.namespace, None);
        assert_eq!(settings.arch, Arch::Arm64);
        assert_eq!(settings.tag, "v2");
        assert_eq!(settings.timeout_s, 60);
        assert_eq!(settings.evaluation, Evaluation::Fresh);
    }

    #[test]
    fn malformed_values_name_the_setting() {
        let missing = Settings::parse(&[("tag", "x")]).unwrap_err();
        assert!(missing.0.contains("grader-version"), "{missing}");
        let timeout = Settings::parse(&[("grader-version", "swebench-4.1.0"), ("timeout-s", "0")])
            .unwrap_err();
        assert!(timeout.0.contains("timeout-s"), "{timeout}");
        let arch = Settings::parse(&[("grader-version", "swebench-4.1.0"), ("arch", "riscv")])
            .unwrap_err();
        assert!(arch.0.contains("arch"), "{arch}");
    }
}
