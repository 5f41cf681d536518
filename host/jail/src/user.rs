//! The user an image's `User` names, looked up in the sandbox's own
//! `/etc/passwd` and `/etc/group` as container runtimes do, and taken by a
//! command before it runs.

use std::fs;

use rustix::thread::{Gid, Uid};

/// Ids a command runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Supplementary groups: the primary one and every group that lists
    /// the user.
    pub(crate) groups: Vec<u32>,
}

/// Resolves `spec` (`user`, `user:group`, each a name or a number) against
/// the files' contents. A number that no entry names is used as it is,
/// with group 0, as Docker does.
pub(crate) fn resolve(spec: &str, passwd: &str, group: &str) -> Result<Ids, String> {
    let (user, group_spec) = match spec.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (spec, None),
    };
    let entries = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| line.split(':').map(str::to_string).collect())
            .collect()
    };
    let (users, groups) = (entries(passwd), entries(group));
    let by_name_or_id = |table: &[Vec<String>], wanted: &str| {
        table
            .iter()
            .find(|fields| {
                fields.first().map(String::as_str) == Some(wanted)
                    || fields.get(2).map(String::as_str) == Some(wanted)
            })
            .cloned()
    };
    let number = |text: &str| text.parse::<u32>().ok();
    let found = by_name_or_id(&users, user);
    let uid = match (&found, number(user)) {
        (_, Some(uid)) => uid,
        (Some(fields), None) => fields
            .get(2)
            .and_then(|id| number(id))
            .ok_or_else(|| format!("user `{user}`: its /etc/passwd entry has no uid"))?,
        (None, None) => return Err(format!("user `{user}` is not in the sandbox's /etc/passwd")),
    };
    let name = found.as_ref().and_then(|fields| fields.first().cloned());
    let gid = match group_spec {
        Some(wanted) => match (number(wanted), by_name_or_id(&groups, wanted)) {
            (Some(gid), _) => gid,
            (None, Some(fields)) => fields
                .get(2)
                .and_then(|id| number(id))
                .ok_or_else(|| format!("group `{wanted}`: its /etc/group entry has no gid"))?,
            (None, None) => {
                return Err(format!(
                    "group `{wanted}` is not in the sandbox's /etc/group"
                ));
            }
        },
        None => found
            .as_ref()
            .and_then(|fields| fields.get(3))
            .and_then(|id| number(id))
            .unwrap_or(0),
    };
    let mut supplementary = vec![gid];
    if group_spec.is_none()
        && let Some(name) = name
    {
        for fields in &groups {
            let member = fields
                .get(3)
                .is_some_and(|members| members.split(',').any(|m| m == name));
            if let Some(id) = fields.get(2).and_then(|id| number(id))
                && member
                && !supplementary.contains(&id)
            {
                supplementary.push(id);
            }
        }
    }
    Ok(Ids {
        uid,
        gid,
        groups: supplementary,
    })
}

/// Takes the ids `spec` names in the sandbox; run after confinement, which
/// keeps the capabilities to switch, and loses them all by switching.
pub(crate) fn switch(spec: &str) -> Result<(), String> {
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    let ids = resolve(spec, &read("/etc/passwd"), &read("/etc/group"))?;
    let unmapped = |what: &str, id: u32, error: rustix::io::Errno| {
        format!(
            "user `{spec}`: {what} {id} cannot be taken in this sandbox ({error}); run \
             unprivileged, a sandbox maps only its root"
        )
    };
    let groups: Vec<Gid> = ids.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    match rustix::thread::set_thread_groups(&groups) {
        // Unprivileged, `setgroups` is denied, and there are none to set.
        Ok(()) | Err(rustix::io::Errno::PERM) => {}
        Err(error) => return Err(unmapped("groups", ids.gid, error)),
    }
    let gid = Gid::from_raw(ids.gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(|e| unmapped("gid", ids.gid, e))?;
    let uid = Uid::from_raw(ids.uid);
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(|e| unmapped("uid", ids.uid, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1001::/home/agent:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nagent:x:1001:\ndocker:x:999:agent,other\nstaff:x:50:\n";

    fn ids(uid: u32, gid: u32, groups: &[u32]) -> Ids {
        Ids {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn names_numbers_and_groups_resolve_as_docker_does() {
        assert_eq!(
            resolve("agent", PASSWD, GROUP),
            Ok(ids(1000, 1001, &[1001, 999]))
        );
        assert_eq!(
            resolve("1000", PASSWD, GROUP),
            Ok(ids(1000, 1001, &[1001, 999]))
        );
        assert_eq!(
            resolve("agent:staff", PASSWD, GROUP),
            Ok(ids(1000, 50, &[50]))
        );
        assert_eq!(resolve("4242", PASSWD, GROUP), Ok(ids(4242, 0, &[0])));
        assert_eq!(resolve("4242:7", PASSWD, GROUP), Ok(ids(4242, 7, &[7])));
        assert_eq!(resolve("root", PASSWD, GROUP), Ok(ids(0, 0, &[0])));
    }

    #[test]
    fn unknown_names_are_errors() {
        let error = resolve("nobody-here", PASSWD, GROUP).unwrap_err();
        assert!(error.contains("nobody-here"), "{error}");
        let error = resolve("agent:nogroup", PASSWD, GROUP).unwrap_err();
        assert!(error.contains("nogroup"), "{error}");
    }
}
