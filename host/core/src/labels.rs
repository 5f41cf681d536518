//! Labels every backend accepts: Kubernetes' rules for label keys and
//! values, which also satisfy OpenSandbox's metadata rules.
//!
//! A key is an optional prefix (a DNS subdomain: lowercase alphanumerics,
//! `-` and `.`, at most 253 characters) and `/`, then a name of 1–63
//! alphanumerics, `-`, `_` and `.` that starts and ends with an
//! alphanumeric. A value is empty or like a name.

use std::fmt;

use crate::run::Labels;

/// Why a label was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelError {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "label `{}`: {}", self.key, self.reason)
    }
}

impl std::error::Error for LabelError {}

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// Checks a name or a value's characters and ends; `what` names it.
fn check_name(text: &str, what: &str) -> Result<(), String> {
    if text.len() > NAME_MAX {
        return Err(format!(
            "the {what} is {} characters; at most {NAME_MAX}",
            text.len()
        ));
    }
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "the {what} has `{bad}`; only letters, digits, `-`, `_` and `.`"
        ));
    }
    let alnum_ends = text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !text.is_empty() && !alnum_ends {
        return Err(format!(
            "the {what} must start and end with a letter or digit"
        ));
    }
    Ok(())
}

/// Checks a key prefix: a DNS subdomain.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > PREFIX_MAX {
        return Err(format!("the prefix must have 1–{PREFIX_MAX} characters"));
    }
    for part in prefix.split('.') {
        let valid = !part.is_empty()
            && part.len() <= NAME_MAX
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-');
        if !valid {
            return Err(format!(
                "the prefix `{prefix}` is not a DNS subdomain (lowercase letters, digits, `-` and `.`)"
            ));
        }
    }
    Ok(())
}

/// Checks one label.
///
/// # Errors
///
/// The first rule the key or value breaks.
pub fn validate_label(key: &str, value: &str) -> Result<(), LabelError> {
    let refuse = |reason: String| LabelError {
        key: key.to_string(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            check_prefix(prefix).map_err(refuse)?;
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err(refuse("the name after the prefix is empty".into()));
    }
    check_name(name, "name").map_err(refuse)?;
    check_name(value, "value").map_err(|reason| LabelError {
        key: key.to_string(),
        reason: format!("value `{value}`: {reason}"),
    })
}

/// Checks every label.
///
/// # Errors
///
/// The first label that breaks a rule.
pub fn validate_labels(labels: &Labels) -> Result<(), LabelError> {
    labels
        .iter()
        .try_for_each(|(key, value)| validate_label(key, value))
}

/// `text` made into a valid label value: other characters become `_`, the
/// ends are trimmed to alphanumerics, and it is cut to 63 characters. For
/// values that only tag (a task id); identity needs no round trip.
pub fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut value: String = trimmed.chars().take(NAME_MAX).collect();
    while value.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        value.pop();
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kubernetes_rules() {
        for good in [
            "app",
            "sandfleet.io/run-id",
            "a.b-c_d",
            "x/y",
            &format!("example.com/{}", "n".repeat(63)),
        ] {
            validate_label(good, "v").unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let refused = |key: &str| validate_label(key, "v").unwrap_err().reason;
        assert!(refused("_lead").contains("start and end"));
        assert!(refused("trail.").contains("start and end"));
        assert!(refused("-x").contains("start and end"));
        assert!(refused(&"n".repeat(64)).contains("at most 63"));
        assert!(refused("Example.com/x").contains("DNS subdomain"));
        assert!(refused("-bad.io/x").contains("DNS subdomain"));
        assert!(refused("a..b/x").contains("DNS subdomain"));
        assert!(refused(&format!("{}/x", "a".repeat(254))).contains("1–253"));
        assert!(refused("sandfleet.io/").contains("empty"));
        assert!(refused("has space").contains("only letters"));
        assert!(refused("a/b/c").contains("only letters"));
    }

    #[test]
    fn values_may_be_empty_and_follow_the_name_rules() {
        validate_label("k", "").unwrap();
        validate_label("k", "django__django-16255").unwrap();
        validate_label("k", &"v".repeat(63)).unwrap();
        for bad in ["_x", "x_", ".x", "x.", "-x", "x-", "a/b", "é"] {
            let error = validate_label("k", bad).unwrap_err();
            assert!(
                error.reason.contains(&format!("value `{bad}`")),
                "{bad}: {error}"
            );
        }
        assert!(validate_label("k", &"v".repeat(64)).is_err());
    }

    #[test]
    fn any_text_becomes_a_valid_value() {
        for text in [
            "django__django-16255",
            "col/a b",
            "__x__",
            "-.-",
            &"y".repeat(100),
            "a_______________________________________________________________b",
            "évil\n",
        ] {
            let value = label_value(text);
            validate_label("k", &value).unwrap_or_else(|e| panic!("{text:?} -> {value:?}: {e}"));
        }
        assert_eq!(label_value("django__django-16255"), "django__django-16255");
        assert_eq!(label_value("col/a b"), "col_a_b");
        assert_eq!(label_value("-.-"), "");
    }
}
