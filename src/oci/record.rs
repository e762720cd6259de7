//! A container's record in its state directory (`state.json`): what
//! every verb after `create` knows of the container.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A container's record in its state directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// hutch init's pid, and its start time (`/proc/PID/stat` field 22).
    pub pid: i32,
    pub start_time: u64,
    pub bundle: String,
    pub annotations: BTreeMap<String, String>,
    /// The keeper (egress proxy, status file), when there is one.
    pub keeper: Option<(i32, u64)>,
    /// The container's cgroup (`linux.resources` asked for a limit), and
    /// the directories hutch-oci made for it: `delete` removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_made: Vec<PathBuf>,
    /// On a cgroup v1 host: the container's group in each hierarchy
    /// (controller, directory); `cgroup` is the memory one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_v1: Vec<(String, PathBuf)>,
    /// The id of the container's mount namespace (`NS_GET_MNTNS_ID`,
    /// never reused): `kill --all`, `delete` and `ps` find the container's
    /// processes by it, even once hutch init is gone ([`super::procs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mnt_ns: Option<u64>,
    /// The config joined a mount namespace by path: other processes live
    /// in it, so it never identifies the container's ([`super::procs`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mnt_ns_joined: bool,
}
