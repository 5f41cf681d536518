//! Instance image names, as each harness version derives them.

use crate::error::InvalidInput;
use crate::grader::GraderVersion;

/// The architecture segment of an image name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    /// `x86_64`; 5.x calls it `amd64` but still names images `x86_64`.
    X86_64,
    /// `arm64`.
    Arm64,
}

impl Arch {
    /// Reads the `arch` setting.
    ///
    /// # Errors
    ///
    /// When `value` is none of `x86_64`, `amd64`, `arm64`.
    pub(crate) fn parse(value: &str) -> Result<Self, InvalidInput> {
        match value {
            "x86_64" | "amd64" => Ok(Self::X86_64),
            "arm64" => Ok(Self::Arm64),
            _ => Err(InvalidInput::new(format!(
                "setting `arch` must be x86_64, amd64 or arm64, not `{value}`"
            ))),
        }
    }

    fn segment(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Arm64 => "arm64",
        }
    }
}

/// The instance image the harness runs `instance_id` in.
///
/// Both versions build `sweb.eval.<arch>.<id>:<tag>` and, under a namespace,
/// prefix it and replace every `__` with `_1776_` (Docker Hub rejects dunders;
/// the replacement covers namespace and tag too). They differ in case: 4.1.0
/// lowercases only the instance id, 5.0.2 lowercases the whole name.
pub(crate) fn instance_image(
    grader: GraderVersion,
    instance_id: &str,
    namespace: Option<&str>,
    arch: Arch,
    tag: &str,
) -> String {
    let id = match grader {
        GraderVersion::V4_1_0 => instance_id.to_lowercase(),
        GraderVersion::V5_0_2 => instance_id.to_owned(),
    };
    let local = format!("sweb.eval.{}.{id}:{tag}", arch.segment());
    let name = match namespace {
        Some(namespace) => format!("{namespace}/{local}").replace("__", "_1776_"),
        None => local,
    };
    match grader {
        GraderVersion::V4_1_0 => name,
        GraderVersion::V5_0_2 => name.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_differ_in_what_they_lowercase() {
        let name =
            |grader| instance_image(grader, "Django__Django-1", Some("ns"), Arch::X86_64, "Tag");
        assert_eq!(
            name(GraderVersion::V4_1_0),
            "ns/sweb.eval.x86_64.django_1776_django-1:Tag"
        );
        assert_eq!(
            name(GraderVersion::V5_0_2),
            "ns/sweb.eval.x86_64.django_1776_django-1:tag"
        );
    }

    #[test]
    fn local_names_keep_their_dunders() {
        let name = instance_image(GraderVersion::V4_1_0, "a__b-1", None, Arch::Arm64, "latest");
        assert_eq!(name, "sweb.eval.arm64.a__b-1:latest");
    }
}
