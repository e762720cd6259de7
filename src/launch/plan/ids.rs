//! Who the sandbox is: its ids inside and on the host, and the user
//! namespace's maps the supervisor writes.

/// Host id the workload runs as when root launches.
pub const DEFAULT_ROOT_HOST_ID: u32 = 65534;

/// Who the sandbox is, inside and on the host.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ids {
    /// The workload's ids (inside the sandbox's user namespace, if any).
    pub inside_uid: u32,
    pub inside_gid: u32,
    /// The host ids of the workload's ids.
    pub host_uid: u32,
    pub host_gid: u32,
    /// Root launched.
    pub root_launch: bool,
    /// hutch init drops root's supplementary groups (allowed only for root).
    pub clear_groups: bool,
    /// The ids hutch init switches to before building the root (None:
    /// it keeps the launcher's).
    pub init_ids: Option<(u32, u32)>,
    /// The ids (and groups) the workload switches to itself, after the
    /// bounding set is dropped and keeping its capabilities across.
    pub workload_ids: Option<WorkloadIds>,
    /// The maps the supervisor writes (None: no user namespace of the
    /// sandbox's own).
    pub maps: Option<IdMaps>,
    /// More than one id mapped (an image's owners or user need it).
    pub subordinate: Option<Subordinate>,
}

/// The ids a workload switches to itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkloadIds {
    pub uid: u32,
    pub gid: u32,
    /// setgroups(2) with these (None: leave the groups alone).
    pub groups: Option<Vec<libc::gid_t>>,
}

/// The user namespace's maps, as written to `/proc/PID/{uid,gid}_map`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IdMaps {
    pub uid_map: String,
    pub gid_map: String,
    /// Written to `/proc/PID/setgroups` first (unprivileged: `deny`).
    pub setgroups: Option<&'static str>,
}

impl Ids {
    /// An image run's ids (always a user namespace of the sandbox's own):
    /// hutch init becomes the inside ids, the supervisor writes the one-id
    /// maps unless a subordinate range is mapped.
    pub(crate) fn for_image(mut self) -> Ids {
        self.init_ids = Some((self.inside_uid, self.inside_gid));
        if self.subordinate.is_none() {
            self.maps = Some(IdMaps {
                uid_map: format!("{} {} 1", self.inside_uid, self.host_uid),
                gid_map: format!("{} {} 1", self.inside_gid, self.host_gid),
                setgroups: (!self.root_launch).then_some("deny"),
            });
        }
        self
    }

    /// hutch init is root inside before it switches to the workload's
    /// uid (an unprivileged caller mapped to 0 with a subordinate range):
    /// the switch must keep its capabilities, which it needs to build the
    /// root.
    pub(crate) fn keep_caps_on_setuid(&self) -> bool {
        self.subordinate.is_some_and(|s| s.helpers) && self.inside_uid != 0
    }
}

/// One line of a uid or gid map: `inside host count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Extent {
    pub inside: u32,
    pub host: u32,
    pub count: u32,
}

/// Maps with more than one id, from a subordinate range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subordinate {
    /// The extents of the uid and gid maps (`len` of each used).
    pub uid: [Extent; 2],
    pub gid: [Extent; 2],
    pub len: usize,
    /// Unprivileged: written by newuidmap/newgidmap, and the caller's own
    /// id is root inside (so hutch init keeps its capabilities when it
    /// switches to the workload's uid).
    pub helpers: bool,
}

impl Subordinate {
    /// The host id inside id `id` maps to, if any.
    pub(crate) fn host_of(extents: &[Extent], id: u32) -> Option<u32> {
        extents
            .iter()
            .find(|e| id >= e.inside && id - e.inside < e.count)
            .map(|e| e.host + (id - e.inside))
    }

    pub(crate) fn lines(extents: &[Extent]) -> String {
        extents
            .iter()
            .map(|e| format!("{} {} {}\n", e.inside, e.host, e.count))
            .collect()
    }
}
