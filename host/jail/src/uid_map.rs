//! The text of `/proc/<pid>/uid_map` and `gid_map`: one extent a line,
//! read by the jail (to cut a sandbox's map, to probe it) and by the
//! backend (to know whose ids it holds).

/// `count` ids from `inside` in a namespace, which are `outside` on in its
/// parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The first id in the namespace.
    pub inside: u64,
    /// The first id in the parent's namespace.
    pub outside: u64,
    /// How many ids.
    pub count: u64,
}

impl Extent {
    /// The id in the namespace of the parent's `outside`, if this extent
    /// maps it.
    pub fn inside_of(&self, outside: u64) -> Option<u64> {
        (self.outside..self.outside + self.count)
            .contains(&outside)
            .then(|| self.inside + outside - self.outside)
    }

    /// The parent's id of the namespace's `inside`, if this extent maps it.
    pub fn outside_of(&self, inside: u64) -> Option<u64> {
        (self.inside..self.inside + self.count)
            .contains(&inside)
            .then(|| self.outside + inside - self.inside)
    }
}

/// The extents of a map's text; a line that is not three numbers is
/// skipped.
pub fn extents(map: &str) -> Vec<Extent> {
    map.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
            Some(Extent {
                inside: fields.next()??,
                outside: fields.next()??,
                count: fields.next()??,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_through_their_extent_either_way() {
        let rootless =
            "         0        999          1\n         1 1000000000      65535\nnoise\n";
        let extents = extents(rootless);
        assert_eq!(extents.len(), 2);
        assert_eq!(extents[1].outside_of(1000), Some(1_000_000_999));
        assert_eq!(extents[1].inside_of(1_000_000_999), Some(1000));
        assert_eq!(extents[0].inside_of(0), None);
        assert_eq!(extents[1].outside_of(65536), None);
    }
}
