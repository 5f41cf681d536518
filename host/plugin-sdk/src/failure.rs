//! Building the contract's `failure`, a plugin's own deliberate error.

use crate::types::{Failure, FailureKind};

impl Failure {
    /// The arguments are malformed or contradict each other; the caller
    /// should fix its input. Name the offending field or value.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Failure {
            kind: FailureKind::InvalidInput,
            message: message.into(),
        }
    }

    /// The arguments are valid but no answer exists (every cluster is full,
    /// say); the caller may retry later with other inputs.
    pub fn unsatisfiable(message: impl Into<String>) -> Self {
        Failure {
            kind: FailureKind::Unsatisfiable,
            message: message.into(),
        }
    }

    /// The plugin itself is broken; the caller should report it.
    pub fn internal(message: impl Into<String>) -> Self {
        Failure {
            kind: FailureKind::Internal,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constructor_sets_its_kind_and_message() {
        let cases = [
            (
                Failure::invalid_input("row 3: no image"),
                FailureKind::InvalidInput,
            ),
            (
                Failure::unsatisfiable(String::from("full")),
                FailureKind::Unsatisfiable,
            ),
            (Failure::internal("bug"), FailureKind::Internal),
        ];
        for (failure, kind) in cases {
            assert_eq!(failure.kind, kind);
        }
        assert_eq!(
            Failure::invalid_input("row 3: no image").message,
            "row 3: no image"
        );
    }
}
