//! Whose ids a sandbox's are on the host.
//!
//! Run as root, a sandbox's uids and gids 0–65535 are host ids from
//! `sandbox_uid_base` on, a range no host user or group may fall in: the
//! sandbox's root is nobody on the host. Run as root of a user namespace
//! (an ordinary user's process that entered its subordinate ids, see
//! [`sandfleet_jail::subordinate`]), they are that namespace's ids from 0:
//! the sandbox's root is the user, its other ids the user's subordinate
//! ids. Run unprivileged otherwise, the kernel lets a user map only itself:
//! the sandbox's root is the calling user, who owns everything the sandbox
//! writes, as it would own any process it ran.

use std::fs;
use std::ops::Range;

use sandfleet_images::Ownership;
use sandfleet_jail::protocol::IdMap;
use sandfleet_jail::uid_map::extents;

use crate::config::SANDBOX_IDS;

/// Who this process is, as far as giving ids away goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Root of the host's own user namespace.
    HostRoot,
    /// Root of a user namespace that maps `ids` uids and gids from 0.
    NamespaceRoot { ids: u32 },
    /// Anyone else.
    User,
}

fn standing() -> Standing {
    if !rustix::process::geteuid().is_root() {
        return Standing::User;
    }
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    let uid_map = read("/proc/self/uid_map");
    if uid_map.split_whitespace().eq(["0", "0", "4294967295"]) {
        return Standing::HostRoot;
    }
    let ids = mapped_from_zero(&uid_map).min(mapped_from_zero(&read("/proc/self/gid_map")));
    Standing::NamespaceRoot { ids }
}

/// The id outside that `inside` is mapped to.
fn outside_of(map: &str, inside: u64) -> Option<u64> {
    extents(map)
        .iter()
        .find_map(|extent| extent.outside_of(inside))
}

/// How many ids from 0 a `/proc/<pid>/uid_map` maps without a gap.
fn mapped_from_zero(map: &str) -> u32 {
    let mut extents = extents(map);
    extents.sort_unstable_by_key(|extent| extent.inside);
    let mut end = 0;
    for extent in extents {
        if extent.inside != end {
            break;
        }
        end += extent.count;
    }
    u32::try_from(end).unwrap_or(u32::MAX)
}

/// The host's root as this process's user namespace numbers it, if it
/// maps it: 0 in the host's own namespace, none in a rootless user's.
pub(crate) fn host_root_uid() -> Option<u32> {
    // Unreadable, it is taken to be the host's: the probe then checks the
    // most it can.
    let Ok(map) = fs::read_to_string("/proc/self/uid_map") else {
        return Some(0);
    };
    extents(&map)
        .iter()
        .find_map(|extent| extent.inside_of(0))
        .and_then(|inside| u32::try_from(inside).ok())
}

/// The id map for sandboxes made by this process.
pub(crate) fn sandbox_ids(uid_base: u32) -> Result<IdMap, String> {
    match standing() {
        Standing::HostRoot => host_range(uid_base),
        Standing::NamespaceRoot { ids } => Ok(IdMap {
            uid: 0,
            gid: 0,
            count: ids.clamp(1, SANDBOX_IDS),
        }),
        Standing::User => Ok(IdMap {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            count: 1,
        }),
    }
}

/// Who a sandbox's root and other ids are on the host, for the operator's
/// record.
pub(crate) fn describe(ids: &IdMap) -> String {
    match standing() {
        Standing::HostRoot => format!(
            "host uids {}..{} (sandbox_uid_base)",
            ids.uid,
            u64::from(ids.uid) + u64::from(ids.count)
        ),
        Standing::NamespaceRoot { .. } => {
            let map = fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
            match (outside_of(&map, 0), outside_of(&map, 1)) {
                (Some(user), Some(start)) => format!(
                    "the calling user (uid {user}); their ids 1..{} are its subordinate uids \
                     {start}..{}",
                    ids.count,
                    start + u64::from(ids.count) - 1
                ),
                _ => format!("ids 0..{} of this process's user namespace", ids.count),
            }
        }
        Standing::User => format!("the calling user (uid {})", ids.uid),
    }
}

/// Who owns an image's files in the layer store of sandboxes made by this
/// process: shifted into their ids, or all the caller's where a sandbox
/// has one id.
///
/// # Errors
///
/// As root of the host, when `uid_base`'s range holds a host user, group
/// or subordinate range.
pub fn layer_ownership(uid_base: u32) -> Result<Ownership, String> {
    sandbox_ids(uid_base).map(|ids| ownership_of(&ids))
}

/// Who owns the layers of sandboxes that map `ids`.
pub(crate) fn ownership_of(ids: &IdMap) -> Ownership {
    if ids.count == 1 {
        Ownership::Caller
    } else {
        Ownership::Shift {
            uid_base: ids.uid,
            gid_base: ids.gid,
            count: ids.count,
        }
    }
}

/// The host range from `uid_base`, checked against the host's users,
/// groups and subordinate ranges.
fn host_range(uid_base: u32) -> Result<IdMap, String> {
    let range = uid_base..uid_base + SANDBOX_IDS;
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    for (file, kind) in [("/etc/passwd", "user"), ("/etc/group", "group")] {
        if let Some((name, id)) = ids_in(&read(file), &range) {
            return Err(format!(
                "sandbox_uid_base = {uid_base}: host {kind} `{name}` ({kind} id {id}, {file}) is inside the \
                 sandboxes' ids {}..{}; choose a base whose {SANDBOX_IDS} ids no host user or group has",
                range.start, range.end
            ));
        }
    }
    for file in ["/etc/subuid", "/etc/subgid"] {
        if let Some((owner, start, count)) = ranges_overlapping(&read(file), &range) {
            return Err(format!(
                "sandbox_uid_base = {uid_base}: {file} gives {owner} ids {start}..{}, which overlap the \
                 sandboxes' ids {}..{}; choose another base",
                start + count,
                range.start,
                range.end
            ));
        }
    }
    Ok(IdMap {
        uid: uid_base,
        gid: uid_base,
        count: SANDBOX_IDS,
    })
}

/// The first entry of a passwd or group file whose id is in `range`.
fn ids_in(file: &str, range: &Range<u32>) -> Option<(String, u32)> {
    file.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        range.contains(&id).then(|| (name.to_string(), id))
    })
}

/// The first `owner:start:count` line of a subuid or subgid file that
/// overlaps `range`.
fn ranges_overlapping(file: &str, range: &Range<u32>) -> Option<(String, u64, u64)> {
    file.lines().find_map(|line| {
        let mut fields = line.split(':');
        let owner = fields.next()?;
        let start: u64 = fields.next()?.parse().ok()?;
        let count: u64 = fields.next()?.parse().ok()?;
        let overlaps = start < u64::from(range.end) && start + count > u64::from(range.start);
        overlaps.then(|| (owner.to_string(), start, count))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_users_inside_the_range_are_found() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nalice:x:100500:100500::/home/alice:/bin/sh\n";
        assert_eq!(
            ids_in(passwd, &(100_000..165_536)),
            Some(("alice".to_string(), 100_500))
        );
        assert_eq!(ids_in(passwd, &(200_000..265_536)), None);
        assert_eq!(ids_in("garbage\n::\n", &(0..10)), None);
    }

    #[test]
    fn subordinate_ranges_that_touch_the_range_overlap() {
        let subuid = "alice:100000:65536\n";
        let starts_inside = 165_535..231_071;
        assert!(ranges_overlapping(subuid, &starts_inside).is_some());
        assert!(ranges_overlapping(subuid, &(165_536..231_072)).is_none());
        assert!(ranges_overlapping(subuid, &(34_465..100_001)).is_some());
        assert!(ranges_overlapping(subuid, &(34_464..100_000)).is_none());
    }

    #[test]
    fn an_id_is_found_outside_through_its_extent() {
        let rootless = "0 999 1\n1 1000000000 65535\n";
        assert_eq!(outside_of(rootless, 0), Some(999));
        assert_eq!(outside_of(rootless, 1000), Some(1_000_000_999));
        assert_eq!(outside_of(rootless, 65536), None);
    }

    #[test]
    fn a_map_counts_the_ids_it_gives_from_zero_without_a_gap() {
        assert_eq!(mapped_from_zero("0 0 4294967295\n"), u32::MAX);
        let rootless = "         0       1000          1\n         1     100000      65535\n";
        assert_eq!(mapped_from_zero(rootless), 65536);
        assert_eq!(
            mapped_from_zero("1 100000 65535\n0 1000 1\n"),
            65536,
            "in any order"
        );
        assert_eq!(
            mapped_from_zero("0 1000 1\n2 100000 10\n"),
            1,
            "a gap ends it"
        );
        assert_eq!(mapped_from_zero("5 1000 1\n"), 0);
        assert_eq!(mapped_from_zero(""), 0);
    }

    #[test]
    fn the_default_base_is_free_on_this_machine() {
        let ids = sandbox_ids(crate::config::DEFAULT_UID_BASE).unwrap();
        match standing() {
            Standing::HostRoot => {
                assert_eq!(ids.uid, crate::config::DEFAULT_UID_BASE);
                assert_eq!(ids.count, SANDBOX_IDS);
            }
            Standing::NamespaceRoot { .. } => assert_eq!(ids.uid, 0),
            Standing::User => assert_eq!(ids.count, 1),
        }
    }
}
