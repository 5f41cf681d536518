//! Who owns an unpacked layer's files on the host.

use std::fmt;

/// The owner a tar entry recorded as `uid`/`gid` gets on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Shifted into a sandbox id range (`uid_base..uid_base + count`),
    /// which a user namespace maps back to `0..count`: entry id `u` is
    /// `uid_base + u` when `u < count`, and otherwise the range's nobody
    /// (`65534`, or the range's last id in a range that small). Needs root
    /// (or `CAP_CHOWN`).
    Shift {
        /// The host uid of the sandbox's root.
        uid_base: u32,
        /// The host gid of the sandbox's root.
        gid_base: u32,
        /// The size of the range.
        count: u32,
    },
    /// Everything owned by the calling user, as rootless runtimes without
    /// a subordinate id range do; the tar's owners are dropped.
    Caller,
}

/// The id an image runs unknown owners as.
const NOBODY: u32 = 65534;

impl Ownership {
    /// The host `(uid, gid)` for an entry's; `None` means "leave it to
    /// the caller" (nothing is chowned).
    pub(crate) fn map(&self, uid: u64, gid: u64) -> Option<(u32, u32)> {
        match *self {
            Ownership::Caller => None,
            Ownership::Shift {
                uid_base,
                gid_base,
                count,
            } => {
                let nobody = NOBODY.min(count.saturating_sub(1));
                let shift = |id: u64, base: u32| {
                    let inside = if id < u64::from(count) {
                        id as u32
                    } else {
                        nobody
                    };
                    base.saturating_add(inside)
                };
                Some((shift(uid, uid_base), shift(gid, gid_base)))
            }
        }
    }

    /// The store's directory name for layers unpacked this way: layers
    /// unpacked with different owners are different directories.
    pub(crate) fn key(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Ownership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ownership::Shift {
                uid_base,
                gid_base,
                count,
            } => write!(f, "shift-{uid_base}-{gid_base}-{count}"),
            Ownership::Caller => write!(
                f,
                "caller-{}-{}",
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_shift_into_the_range_and_strangers_become_nobody() {
        let shift = Ownership::Shift {
            uid_base: 100_000,
            gid_base: 200_000,
            count: 65536,
        };
        assert_eq!(shift.map(0, 0), Some((100_000, 200_000)));
        assert_eq!(shift.map(1000, 50), Some((101_000, 200_050)));
        assert_eq!(shift.map(70_000, 1 << 40), Some((165_534, 265_534)));
        let small = Ownership::Shift {
            uid_base: 10,
            gid_base: 10,
            count: 100,
        };
        assert_eq!(small.map(500, 5), Some((109, 15)));
        assert_eq!(Ownership::Caller.map(0, 0), None);
        assert_eq!(shift.key(), "shift-100000-200000-65536");
        assert!(Ownership::Caller.key().starts_with("caller-"));
    }
}
