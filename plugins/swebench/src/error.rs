//! The adapter's one kind of refusal.

use std::fmt;

/// Input the adapter cannot work with: a malformed row, an unknown setting
/// value, a task from another adapter. The message names the offending field
/// or value, and the instance when one is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidInput(pub String);

impl InvalidInput {
    /// An error with this message.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidInput {}
