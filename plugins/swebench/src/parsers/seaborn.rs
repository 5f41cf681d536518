//! `parse_log_seaborn`: pytest output read from `FAILED id`, `id PASSED ...`
//! and `PASSED id` lines.

use crate::grader::GraderVersion;
use crate::pystr;
use crate::status_map::{FAILED, PASSED, StatusMap};

use super::{ParserRaised, second_token};

/// `parse_log_seaborn`. 4.1.0 indexes the second token of any matching line
/// and raises on a bare `FAILED` or `PASSED`; 5.0.2 skips lines with fewer
/// than two tokens.
pub(super) fn parse(log: &str, grader: GraderVersion) -> Result<StatusMap, ParserRaised> {
    let mut map = StatusMap::for_log(log);
    for line in log.split('\n') {
        let tokens: Vec<&str> = pystr::split(line).collect();
        if grader == GraderVersion::V5_0_2 && tokens.len() < 2 {
            continue;
        }
        if line.starts_with(FAILED) {
            map.insert(second_token(&tokens)?, FAILED);
        } else if line.contains(" PASSED ") {
            if second_token(&tokens)? == PASSED {
                map.insert(tokens[0], PASSED);
            }
        } else if line.starts_with(PASSED) {
            map.insert(second_token(&tokens)?, PASSED);
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_all_three_line_shapes() {
        let log = "FAILED t.py::a - boom\nt.py::b PASSED [ 50%]\nPASSED t.py::c\nx y PASSED z\n";
        let map = parse(log, GraderVersion::V4_1_0).unwrap();
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [
                ("t.py::a", "FAILED"),
                ("t.py::b", "PASSED"),
                ("t.py::c", "PASSED")
            ]
        );
    }

    #[test]
    fn a_bare_status_raises_only_in_4_1_0() {
        assert_eq!(
            parse("FAILED\n", GraderVersion::V4_1_0),
            Err(ParserRaised::IndexError)
        );
        assert_eq!(
            parse(" PASSED \n", GraderVersion::V4_1_0),
            Err(ParserRaised::IndexError)
        );
        assert!(parse("FAILED\n", GraderVersion::V5_0_2).unwrap().is_empty());
    }
}
