//! Run identity. Everything a run creates carries its run id, so whatever a
//! crashed run leaves behind can be found and removed (`sandfleet reap`).

use std::collections::BTreeMap;
use std::fmt;

/// The label key carrying the run id on everything a run creates.
pub const LABEL_RUN_ID: &str = "sandfleet.io/run-id";
/// The label key carrying the task a sandbox was claimed for.
pub const LABEL_TASK: &str = "sandfleet.io/task";

/// Labels attached to created objects.
pub type Labels = BTreeMap<String, String>;

/// Identifies one run. Lowercase letters, digits and `-`, at most 40
/// characters, so it is a valid Kubernetes label value and directory name.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// Parses a run id.
    ///
    /// # Errors
    ///
    /// When `id` is empty, longer than 40 characters, or has characters other
    /// than lowercase letters, digits and `-` (or starts or ends with `-`).
    pub fn new(id: impl Into<String>) -> Result<Self, String> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 40
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !id.starts_with('-')
            && !id.ends_with('-');
        if valid {
            Ok(RunId(id))
        } else {
            Err(format!(
                "`{id}` is not a valid run id (1-40 of a-z, 0-9 and `-`, not starting or ending with `-`)"
            ))
        }
    }

    /// A fresh id: `prefix-` followed by the time in seconds and 6 hex digits
    /// of process-local entropy, e.g. `quickstart-1764478080-3fa9c2`.
    pub fn generate(prefix: &str) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(now.as_nanos());
        hasher.write_u32(std::process::id());
        let clean: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(20)
            .collect();
        let clean = clean.trim_matches('-');
        let prefix = if clean.is_empty() { "run" } else { clean };
        RunId(format!(
            "{prefix}-{}-{:06x}",
            now.as_secs(),
            hasher.finish() & 0xff_ffff
        ))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Labels every object of this run carries.
    pub fn labels(&self) -> Labels {
        Labels::from([(LABEL_RUN_ID.to_string(), self.0.clone())])
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RunId {
    type Error = String;
    fn try_from(id: String) -> Result<Self, String> {
        RunId::new(id)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = RunId::generate("Quick Start!");
        let b = RunId::generate("Quick Start!");
        assert!(RunId::new(a.as_str()).is_ok(), "{a}");
        assert!(a.as_str().starts_with("quick-start-"), "{a}");
        assert_ne!(a, b);
        assert!(RunId::generate("").as_str().starts_with("run-"));
    }

    #[test]
    fn invalid_ids_are_refused_with_the_rule() {
        for bad in ["", "UPPER", "has space", "-lead", "trail-", &"x".repeat(41)] {
            let error = RunId::new(bad).unwrap_err();
            assert!(error.contains("not a valid run id"), "{error}");
        }
        assert_eq!(RunId::new("ok-1").unwrap().labels()[LABEL_RUN_ID], "ok-1");
    }
}
