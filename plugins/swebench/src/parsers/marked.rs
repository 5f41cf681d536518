//! `parse_log_marked`: jasmine's numbered failure list (markedjs/marked).

use crate::pystr;
use crate::status_map::{FAILED, StatusMap};

/// `parse_log_marked`: every `N) description` line is a failed spec; passing
/// specs are not listed, which is why marked is graded fail-only.
pub(super) fn parse(log: &str) -> StatusMap {
    let mut map = StatusMap::for_log(log);
    let failure = crate::lazy_regex!(&format!(r"^\d+\){}(.*)", pystr::SPACE_CLASS));
    for line in log.split('\n') {
        if let Some(captures) = failure.captures(line) {
            map.insert(pystr::strip(&captures[1]), FAILED);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_lines_are_failures() {
        let map = parse("1) Marked should work \n  2) indented\n3)missing space\n");
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("Marked should work", "FAILED")]
        );
    }
}
