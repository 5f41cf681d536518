//! Whose ids a sandbox's are on the host.
//!
//! Run as root, a sandbox's uids and gids 0–65535 are host ids from
//! `sandbox_uid_base` on, a range no host user or group may fall in: the
//! sandbox's root is nobody on the host. Run unprivileged, the kernel lets
//! a user map only itself: the sandbox's root is the calling user, who
//! owns everything the sandbox writes, as it would own any process it ran.

use std::fs;
use std::ops::Range;

use sandfleet_jail::protocol::IdMap;

use crate::config::SANDBOX_IDS;

/// The id map for sandboxes made by this process.
pub(crate) fn sandbox_ids(uid_base: u32) -> Result<IdMap, String> {
    if !rustix::process::geteuid().is_root() {
        return Ok(IdMap {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            count: 1,
        });
    }
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
    fn the_default_base_is_free_on_this_machine() {
        let ids = sandbox_ids(crate::config::DEFAULT_UID_BASE).unwrap();
        if rustix::process::geteuid().is_root() {
            assert_eq!(ids.uid, crate::config::DEFAULT_UID_BASE);
            assert_eq!(ids.count, SANDBOX_IDS);
        } else {
            assert_eq!(ids.count, 1);
        }
    }
}
