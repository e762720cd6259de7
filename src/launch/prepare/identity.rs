//! Who the sandbox is when it is not hutch's usual single-id user
//! namespace: explicit id maps (hutch init works as the namespace's root,
//! the workload switches to its ids itself), or no user namespace of its
//! own (shared or joined: the workload switches from the launcher's
//! credentials, keeping the capabilities `security` asks for).

use crate::launch::error::LaunchError;
use crate::launch::plan::{IdMaps, Ids, WorkloadIds};
use crate::spec::{IdMapping, Spec, SpecError};

fn spec_err(path: &str, msg: impl Into<String>) -> LaunchError {
    LaunchError::Spec(SpecError::new(path, msg))
}

/// The host id `inside` maps to, if it is mapped.
fn host_of(map: &[IdMapping], inside: u32) -> Option<u32> {
    map.iter()
        .find(|m| inside >= m.inside && inside - m.inside < m.count)
        .map(|m| m.host + (inside - m.inside))
}

fn map_text(map: &[IdMapping]) -> String {
    map.iter()
        .map(|m| format!("{} {} {}\n", m.inside, m.host, m.count))
        .collect()
}

/// `caller_uid`/`caller_gid`: the launching process's ids.
pub(crate) fn ids(spec: &Spec, caller_uid: u32, caller_gid: u32) -> Result<Ids, LaunchError> {
    let id = &spec.identity;
    let root = caller_uid == 0;
    if id.host_uid.is_some() || id.host_gid.is_some() {
        return Err(spec_err(
            "identity.host_uid",
            "host_uid/host_gid choose hutch's single-id map; with uid_map/gid_map or without a user namespace of the sandbox's own they do not apply",
        ));
    }
    let groups = || id.groups.clone().or(root.then(Vec::new));
    if spec.namespaces.user {
        let (uid, gid) = (id.uid.unwrap_or(0), id.gid.unwrap_or(0));
        let (Some(host_uid), Some(host_gid)) =
            (host_of(&id.uid_map, uid), host_of(&id.gid_map, gid))
        else {
            return Err(spec_err(
                "identity.uid",
                format!("uid {uid} / gid {gid} must be mapped by identity.uid_map / gid_map"),
            ));
        };
        let single_own =
            |map: &[IdMapping], own: u32| map.len() == 1 && map[0].count == 1 && map[0].host == own;
        let own_ids = single_own(&id.uid_map, caller_uid) && single_own(&id.gid_map, caller_gid);
        if !root && !own_ids {
            return Err(spec_err(
                "identity.uid_map",
                "an unprivileged launch can only map its own uid and gid (one id each)",
            ));
        }
        // hutch init builds the root as the namespace's root when it has
        // one; the workload then becomes its own ids.
        let ns_root = host_of(&id.uid_map, 0).is_some() && host_of(&id.gid_map, 0).is_some();
        let init = if ns_root { (0, 0) } else { (uid, gid) };
        // Root clears the launcher's groups (or sets those asked for); an
        // unprivileged launch cannot call setgroups (denied) and has no
        // group of its own to drop.
        let groups = if root {
            groups()
        } else {
            id.groups.clone().filter(|g| !g.is_empty())
        };
        let workload_ids =
            (init != (uid, gid) || groups.is_some()).then_some(WorkloadIds { uid, gid, groups });
        if !root && id.groups.as_ref().is_some_and(|g| !g.is_empty()) {
            return Err(spec_err(
                "identity.groups",
                "an unprivileged launch cannot set supplementary groups (setgroups is denied)",
            ));
        }
        return Ok(Ids {
            inside_uid: uid,
            inside_gid: gid,
            host_uid,
            host_gid,
            root_launch: root,
            clear_groups: false,
            init_ids: Some(init),
            workload_ids,
            subordinate: None,
            maps: Some(IdMaps {
                uid_map: map_text(&id.uid_map),
                gid_map: map_text(&id.gid_map),
                setgroups: (!root).then_some("deny"),
            }),
        });
    }
    let joined = spec.namespaces.join.user.is_some();
    // In a joined user namespace hutch init becomes its root (the
    // launcher's ids may not be mapped there); otherwise it keeps the
    // launcher's credentials.
    let init_ids = joined.then_some((0, 0));
    let (cur_uid, cur_gid) = if joined {
        (0, 0)
    } else {
        (caller_uid, caller_gid)
    };
    let (uid, gid) = (id.uid.unwrap_or(cur_uid), id.gid.unwrap_or(cur_gid));
    if !root && !joined {
        if (uid, gid) != (caller_uid, caller_gid) {
            return Err(spec_err(
                "identity.uid",
                "without a user namespace of its own an unprivileged sandbox keeps the launcher's uid and gid",
            ));
        }
        if id.groups.is_some() {
            return Err(spec_err(
                "identity.groups",
                "without a user namespace of its own an unprivileged sandbox keeps the launcher's groups",
            ));
        }
    }
    let groups = if joined { id.groups.clone() } else { groups() };
    let workload_ids = ((uid, gid) != (cur_uid, cur_gid) || groups.is_some())
        .then_some(WorkloadIds { uid, gid, groups });
    Ok(Ids {
        inside_uid: uid,
        inside_gid: gid,
        host_uid: uid,
        host_gid: gid,
        root_launch: root,
        clear_groups: false,
        init_ids,
        workload_ids,
        maps: None,
        subordinate: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_maps_make_init_the_namespace_root_and_the_workload_switch() {
        let mut spec = Spec::default();
        spec.identity.uid_map = vec![IdMapping::new(0, 100_000, 65536)];
        spec.identity.gid_map = vec![IdMapping::new(0, 100_000, 65536)];
        spec.identity.uid = Some(1000);
        spec.identity.gid = Some(1000);
        let ids = ids(&spec, 0, 0).unwrap();
        assert_eq!(ids.init_ids, Some((0, 0)));
        assert_eq!((ids.host_uid, ids.host_gid), (101_000, 101_000));
        let w = ids.workload_ids.unwrap();
        assert_eq!((w.uid, w.gid), (1000, 1000));
        assert_eq!(ids.maps.unwrap().uid_map, "0 100000 65536\n");
        spec.identity.uid = Some(70_000);
        assert!(super::ids(&spec, 0, 0).is_err(), "an unmapped uid");
        spec.identity.uid = Some(0);
        assert!(
            super::ids(&spec, 1000, 1000).is_err(),
            "unprivileged ranges"
        );
    }

    #[test]
    fn without_a_user_namespace_root_clears_groups_and_others_keep_their_ids() {
        let mut spec = Spec::default();
        spec.namespaces.user = false;
        spec.identity.uid = Some(1000);
        let ids = ids(&spec, 0, 0).unwrap();
        assert_eq!(ids.init_ids, None);
        assert!(ids.maps.is_none());
        let w = ids.workload_ids.unwrap();
        assert_eq!((w.uid, w.gid, w.groups), (1000, 0, Some(vec![])));
        assert!(super::ids(&spec, 2000, 2000).is_err());
        spec.identity.uid = None;
        assert!(
            super::ids(&spec, 1000, 1000)
                .unwrap()
                .workload_ids
                .is_none()
        );
    }
}
