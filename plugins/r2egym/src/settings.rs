//! The settings the adapter accepts. The contract passes settings to `load`
//! only, so `load` copies them into the task's data for later calls.

use serde::{Deserialize, Serialize};

use crate::{Failure, Setting, SettingInfo};

/// Where the evaluate commands run; see [`crate::script`] for the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Grading {
    /// In the sandbox the agent worked in, as R2E-Gym computes its reward.
    #[default]
    InPlace,
    /// In a sandbox nobody worked in, from the image and the solution patch.
    Fresh,
}

impl Grading {
    const CHOICES: [(&'static str, Grading); 2] =
        [("in-place", Grading::InPlace), ("fresh", Grading::Fresh)];

    /// The setting's spelling of this mode.
    pub(crate) fn name(self) -> &'static str {
        Self::CHOICES
            .iter()
            .find(|(_, mode)| *mode == self)
            .map_or("in-place", |(name, _)| name)
    }

    fn parse(value: &str) -> Result<Grading, Failure> {
        Self::CHOICES
            .iter()
            .find(|(name, _)| *name == value)
            .map(|(_, mode)| *mode)
            .ok_or_else(|| {
                Failure::invalid_input(format!(
                    "setting `{GRADING}` is `{value}`; expected `in-place` or `fresh`"
                ))
            })
    }
}

const GRADING: &str = "grading";

/// The parsed settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Settings {
    pub(crate) grading: Grading,
}

impl Settings {
    /// Reads `settings`; unknown keys and bad values are `invalid-input`.
    pub(crate) fn parse(settings: &[Setting]) -> Result<Settings, Failure> {
        let mut parsed = Settings::default();
        for setting in settings {
            match setting.key.as_str() {
                GRADING => parsed.grading = Grading::parse(&setting.value)?,
                other => {
                    return Err(Failure::invalid_input(format!(
                        "unknown setting `{other}`; r2egym accepts `{GRADING}`"
                    )));
                }
            }
        }
        Ok(parsed)
    }

    /// What `describe` lists.
    pub(crate) fn infos() -> Vec<SettingInfo> {
        vec![SettingInfo {
            key: GRADING.to_owned(),
            summary: "where evaluation runs: `in-place` (the agent's sandbox, as R2E-Gym) or \
                      `fresh` (a new sandbox from the image plus the solution patch)"
                .to_owned(),
            default_value: Some(Grading::default().name().to_owned()),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(key: &str, value: &str) -> Setting {
        Setting {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn grading_defaults_to_in_place() {
        assert_eq!(Settings::parse(&[]).unwrap().grading, Grading::InPlace);
        let fresh = Settings::parse(&[setting("grading", "fresh")]).unwrap();
        assert_eq!(fresh.grading, Grading::Fresh);
    }

    #[test]
    fn bad_values_and_unknown_keys_name_themselves() {
        let bad = Settings::parse(&[setting("grading", "inplace")]).unwrap_err();
        assert!(bad.message.contains("`inplace`"), "{}", bad.message);
        let unknown = Settings::parse(&[setting("timeout", "1")]).unwrap_err();
        assert!(unknown.message.contains("`timeout`"), "{}", unknown.message);
    }

    #[test]
    fn the_default_is_described() {
        let infos = Settings::infos();
        assert_eq!(infos[0].default_value.as_deref(), Some("in-place"));
    }
}
