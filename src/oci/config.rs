//! The OCI runtime spec's `config.json` and state, as serde types: the
//! schema only (it imports nothing of the runtime), after
//! opencontainers/runtime-spec `config.md`, `config-linux.md` and
//! `runtime.md`.
//!
//! Per the spec, unknown properties are ignored. Properties hutch knows
//! but does not enforce are kept (as raw JSON where their shape does not
//! matter) so that the translation can refuse them by name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The newest runtime-spec version hutch reads, and the oldest.
pub const OCI_VERSION_MAX: &str = "1.2.0";
pub const OCI_VERSION_MIN: &str = "1.0.0";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    pub oci_version: String,
    pub process: Option<Process>,
    pub root: Option<Root>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub mounts: Vec<Mount>,
    pub hooks: Option<Hooks>,
    pub annotations: BTreeMap<String, String>,
    pub linux: Option<Linux>,
    pub solaris: Option<Value>,
    pub windows: Option<Value>,
    pub vm: Option<Value>,
    pub zos: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Process {
    pub terminal: bool,
    pub console_size: Option<ConsoleSize>,
    pub user: User,
    pub args: Vec<String>,
    pub command_line: Option<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub capabilities: Option<Capabilities>,
    pub rlimits: Vec<Rlimit>,
    pub no_new_privileges: bool,
    pub apparmor_profile: Option<String>,
    pub oom_score_adj: Option<i32>,
    pub selinux_label: Option<String>,
    pub io_priority: Option<Value>,
    pub scheduler: Option<Value>,
    #[serde(rename = "execCPUAffinity")]
    pub exec_cpu_affinity: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsoleSize {
    pub height: u32,
    pub width: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub umask: Option<u32>,
    pub additional_gids: Vec<u32>,
    pub username: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    pub bounding: Vec<String>,
    pub effective: Vec<String>,
    pub inheritable: Vec<String>,
    pub permitted: Vec<String>,
    pub ambient: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Root {
    pub path: String,
    pub readonly: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Mount {
    pub destination: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub source: Option<String>,
    pub options: Vec<String>,
    pub uid_mappings: Option<Value>,
    pub gid_mappings: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Hooks {
    pub prestart: Vec<Hook>,
    pub create_runtime: Vec<Hook>,
    pub create_container: Vec<Hook>,
    pub start_container: Vec<Hook>,
    pub poststart: Vec<Hook>,
    pub poststop: Vec<Hook>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hook {
    pub path: String,
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Linux {
    pub namespaces: Vec<Namespace>,
    pub uid_mappings: Vec<IdMapping>,
    pub gid_mappings: Vec<IdMapping>,
    pub time_offsets: Option<Value>,
    pub devices: Vec<Device>,
    pub cgroups_path: Option<String>,
    pub resources: Option<Resources>,
    pub rootfs_propagation: Option<String>,
    pub seccomp: Option<Seccomp>,
    pub sysctl: BTreeMap<String, String>,
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
    pub mount_label: Option<String>,
    pub intel_rdt: Option<Value>,
    pub personality: Option<Value>,
    pub memory_policy: Option<Value>,
    pub net_devices: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IdMapping {
    #[serde(rename = "containerID")]
    pub container_id: u32,
    #[serde(rename = "hostID")]
    pub host_id: u32,
    pub size: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Device {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: String,
    pub major: i64,
    pub minor: i64,
    pub file_mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Resources {
    pub devices: Vec<DeviceRule>,
    pub memory: Option<Memory>,
    pub cpu: Option<Cpu>,
    pub pids: Option<Pids>,
    #[serde(rename = "blockIO")]
    pub block_io: Option<BlockIo>,
    pub hugepage_limits: Vec<HugepageLimit>,
    pub network: Option<Value>,
    pub rdma: Option<Value>,
    pub unified: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceRule {
    pub allow: bool,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub access: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Memory {
    pub limit: Option<i64>,
    pub reservation: Option<i64>,
    pub swap: Option<i64>,
    pub kernel: Option<i64>,
    #[serde(rename = "kernelTCP")]
    pub kernel_tcp: Option<i64>,
    pub swappiness: Option<u64>,
    #[serde(rename = "disableOOMKiller")]
    pub disable_oom_killer: Option<bool>,
    pub use_hierarchy: Option<bool>,
    pub check_before_update: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cpu {
    pub shares: Option<u64>,
    pub quota: Option<i64>,
    pub burst: Option<u64>,
    pub period: Option<u64>,
    pub realtime_runtime: Option<i64>,
    pub realtime_period: Option<u64>,
    pub cpus: Option<String>,
    pub mems: Option<String>,
    pub idle: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pids {
    pub limit: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockIo {
    pub weight: Option<u16>,
    pub leaf_weight: Option<u16>,
    pub weight_device: Vec<WeightDevice>,
    pub throttle_read_bps_device: Vec<ThrottleDevice>,
    pub throttle_write_bps_device: Vec<ThrottleDevice>,
    #[serde(rename = "throttleReadIOPSDevice")]
    pub throttle_read_iops_device: Vec<ThrottleDevice>,
    #[serde(rename = "throttleWriteIOPSDevice")]
    pub throttle_write_iops_device: Vec<ThrottleDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WeightDevice {
    pub major: i64,
    pub minor: i64,
    pub weight: Option<u16>,
    pub leaf_weight: Option<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThrottleDevice {
    pub major: i64,
    pub minor: i64,
    pub rate: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HugepageLimit {
    pub page_size: String,
    pub limit: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Seccomp {
    pub default_action: String,
    pub default_errno_ret: Option<u32>,
    pub architectures: Vec<String>,
    pub flags: Vec<String>,
    pub listener_path: Option<String>,
    pub listener_metadata: Option<String>,
    pub syscalls: Vec<Syscall>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Syscall {
    pub names: Vec<String>,
    pub action: String,
    pub errno_ret: Option<u32>,
    pub args: Vec<SyscallArg>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyscallArg {
    pub index: u32,
    pub value: u64,
    pub value_two: u64,
    pub op: String,
}

/// The state of a container (`runtime.md`), as `state` prints it and
/// hooks read it on stdin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub oci_version: String,
    pub id: String,
    /// `creating`, `created`, `running` or `stopped`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub bundle: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
