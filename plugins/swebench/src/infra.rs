//! 5.x's post-hoc classification of logs that produced no usable results:
//! signatures of a broken environment, as opposed to a bad patch. Advisory
//! only; it never changes whether an instance resolved.

use std::sync::OnceLock;

use regex::Regex;

/// A signature that matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InfraFailure {
    /// The signature's name, e.g. `out_of_memory`.
    pub(crate) reason: &'static str,
    /// True for the `environment` tier (a patch cannot plausibly cause it);
    /// false for `ambiguous` (environment or patch).
    pub(crate) environment: bool,
}

/// `(reason, environment tier, pattern)`, tried in order; the first match wins.
const SIGNATURES: [(&str, bool, &str); 8] = [
    (
        "browser_launch_failed",
        true,
        r"Failed to launch|Failed to connect to the bus",
    ),
    (
        "display_unavailable",
        true,
        r"cannot open display|Missing X server|unable to open X display",
    ),
    (
        "out_of_memory",
        true,
        r"Cannot allocate memory|OutOfMemoryError|^Killed$",
    ),
    (
        "container_unavailable",
        true,
        r"Error response from daemon|Cannot connect to the Docker daemon",
    ),
    (
        "network_unreachable",
        true,
        r"Could not resolve host|Temporary failure in name resolution",
    ),
    (
        "missing_module",
        false,
        r"Cannot find module|MODULE_NOT_FOUND|ModuleNotFoundError",
    ),
    (
        "no_tests_collected",
        false,
        r"no tests ran|collected 0 items",
    ),
    (
        "tests_timed_out",
        false,
        r"Timeout error: \d+ seconds exceeded",
    ),
];

fn signatures() -> &'static [(&'static str, bool, Regex)] {
    static COMPILED: OnceLock<Vec<(&str, bool, Regex)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        SIGNATURES
            .iter()
            .map(|&(reason, environment, pattern)| {
                (
                    reason,
                    environment,
                    Regex::new(&format!("(?m){pattern}")).expect("a valid pattern"),
                )
            })
            .collect()
    })
}

/// `classify_text(log)`.
pub(crate) fn classify(log: &str) -> Option<InfraFailure> {
    signatures()
        .iter()
        .find(|(_, _, pattern)| pattern.is_match(log))
        .map(|&(reason, environment, _)| InfraFailure {
            reason,
            environment,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signature_in_order_wins() {
        let log = "collected 0 items\nKilled\n";
        assert_eq!(
            classify(log),
            Some(InfraFailure {
                reason: "out_of_memory",
                environment: true
            })
        );
        assert_eq!(
            classify("no tests ran"),
            Some(InfraFailure {
                reason: "no_tests_collected",
                environment: false
            })
        );
        assert_eq!(classify("Killed by signal"), None);
        assert_eq!(classify(""), None);
    }
}
