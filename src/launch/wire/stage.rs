//! The steps of the post-clone path ([`Stage`]), and the fixed-size
//! [`Failure`] record a step's failure becomes: sent to the supervisor
//! without allocating (the vfork'd workload shares its parent's heap), and
//! turned into words there.

use serde::{Deserialize, Serialize};

use crate::sys::Errno;

/// One step of the sandbox's setup, in the documented order (see
/// [`crate::launch::child`]). The workload's steps come after
/// [`Stage::StartWorkload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Stage {
    // hutch init (pid 1)
    ParentDeathSignal = 1,
    CloseInheritedFds,
    InitSession,
    /// `namespaces.join.mount`: entering it.
    JoinMountNamespace,
    MountPropagation,
    OpenHostSources,
    SetGroups,
    SetGid,
    SetUid,
    ParentDeathSignalAgain,
    LockUserNamespaces,
    Sysctl,
    BuildRoot,
    /// A created container with createContainer hooks: the root shown at
    /// its host directory, `RootBuilt` reported, waiting for `Pivot`.
    BeforePivot,
    Hostname,
    Loopback,
    ProxyDoors,
    /// `transparent` egress: route, resolver, capture listeners.
    TransparentEgress,
    /// A warm sandbox: waiting for the command that claims it.
    Claim,
    /// A warm sandbox: mounting the staged overlays for the claim.
    ClaimMounts,
    /// A resident sandbox: starting a command's own init.
    PerCommandInit,
    /// A resident sandbox: a command's own `/proc`, `/dev` and tmpfs.
    PerCommandMounts,
    Rlimits,
    Terminal,
    /// `namespaces.join.user_after_setup`: entering it.
    UserNamespaceAfterSetup,
    NonDumpable,
    BlockSignals,
    Hold,
    StartWorkload,
    CloseInitFds,
    InitSeccomp,
    // the workload, between clone and execve
    WorkloadSession,
    Stdio,
    ControllingTerminal,
    CloseFds,
    WorkingDirectory,
    NoNewPrivs,
    BoundingSet,
    WorkloadIds,
    Capabilities,
    AmbientCapabilities,
    LandlockRuleset,
    LandlockPathRule,
    LandlockPortRule,
    LandlockRestrict,
    Seccomp,
    Exec,
}

impl Stage {
    const ALL: [Stage; 47] = [
        Stage::ParentDeathSignal,
        Stage::CloseInheritedFds,
        Stage::InitSession,
        Stage::JoinMountNamespace,
        Stage::MountPropagation,
        Stage::OpenHostSources,
        Stage::SetGroups,
        Stage::SetGid,
        Stage::SetUid,
        Stage::ParentDeathSignalAgain,
        Stage::LockUserNamespaces,
        Stage::Sysctl,
        Stage::BuildRoot,
        Stage::BeforePivot,
        Stage::Hostname,
        Stage::Loopback,
        Stage::ProxyDoors,
        Stage::TransparentEgress,
        Stage::Claim,
        Stage::ClaimMounts,
        Stage::PerCommandInit,
        Stage::PerCommandMounts,
        Stage::Rlimits,
        Stage::Terminal,
        Stage::UserNamespaceAfterSetup,
        Stage::NonDumpable,
        Stage::BlockSignals,
        Stage::Hold,
        Stage::StartWorkload,
        Stage::CloseInitFds,
        Stage::InitSeccomp,
        Stage::WorkloadSession,
        Stage::Stdio,
        Stage::ControllingTerminal,
        Stage::CloseFds,
        Stage::WorkingDirectory,
        Stage::NoNewPrivs,
        Stage::BoundingSet,
        Stage::WorkloadIds,
        Stage::Capabilities,
        Stage::AmbientCapabilities,
        Stage::LandlockRuleset,
        Stage::LandlockPathRule,
        Stage::LandlockPortRule,
        Stage::LandlockRestrict,
        Stage::Seccomp,
        Stage::Exec,
    ];

    fn from_u8(b: u8) -> Option<Stage> {
        Stage::ALL.iter().copied().find(|s| *s as u8 == b)
    }

    /// What the step does, as the start of an error line.
    pub fn what(self) -> &'static str {
        match self {
            Stage::ParentDeathSignal | Stage::ParentDeathSignalAgain => {
                "setting the parent-death signal"
            }
            Stage::CloseInheritedFds => "closing the file descriptors hutch init does not need",
            Stage::InitSession => "starting a new session",
            Stage::JoinMountNamespace => "entering the mount namespace of namespaces.join.mount",
            Stage::MountPropagation => "making / a slave mount",
            Stage::OpenHostSources => "opening a host path",
            Stage::SetGroups => "dropping supplementary groups",
            Stage::SetGid => "switching to the sandbox's group",
            Stage::SetUid => "switching to the sandbox's user",
            Stage::LockUserNamespaces => "locking nested user namespaces",
            Stage::Sysctl => "writing a sysctl",
            Stage::Terminal => "handing the terminal to the console socket",
            Stage::Hold => "waiting for the start request",
            Stage::ControllingTerminal => "making the terminal the controlling terminal",
            Stage::WorkloadIds => "switching to the workload's user and groups",
            Stage::BuildRoot => "building the new root",
            Stage::BeforePivot => {
                "showing the new root to the createContainer hooks before pivot_root"
            }
            Stage::Hostname => "setting the hostname",
            Stage::Loopback => "bringing up lo",
            Stage::ProxyDoors => "handing the egress proxy's doors over",
            Stage::TransparentEgress => {
                "setting up transparent egress in the sandbox's network namespace"
            }
            Stage::Claim => "receiving the command that claims the warm sandbox",
            Stage::ClaimMounts => "mounting the workspace for the claim",
            Stage::PerCommandInit => "starting the command's own init in the resident sandbox",
            Stage::PerCommandMounts => "mounting the command's own /proc, /dev and tmpfs",
            Stage::Rlimits => "setting resource limits",
            Stage::UserNamespaceAfterSetup => {
                "entering the user namespace of namespaces.join.user_after_setup"
            }
            Stage::NonDumpable => "making hutch init non-dumpable",
            Stage::BlockSignals => "blocking signals",
            Stage::StartWorkload => "starting the workload",
            Stage::CloseInitFds => "closing hutch init's file descriptors",
            Stage::InitSeccomp => "confining hutch init (seccomp)",
            Stage::WorkloadSession => "starting the workload's session",
            Stage::Stdio => "setting up stdio",
            Stage::CloseFds => "closing inherited file descriptors",
            Stage::WorkingDirectory => "entering the working directory",
            Stage::NoNewPrivs => "setting no-new-privs",
            Stage::BoundingSet | Stage::Capabilities | Stage::AmbientCapabilities => {
                "dropping capabilities"
            }
            Stage::LandlockRuleset
            | Stage::LandlockPathRule
            | Stage::LandlockPortRule
            | Stage::LandlockRestrict => "enforcing Landlock",
            Stage::Seccomp => "installing the seccomp filter",
            Stage::Exec => "executing the command",
        }
    }

    /// Whether the step runs in the workload (after the vfork).
    pub fn in_workload(self) -> bool {
        self as u8 >= Stage::WorkloadSession as u8
    }
}

/// A failed step: fixed-size, built and sent without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub stage: Stage,
    pub errno: Errno,
    /// Which item of the step failed (an fs operation, an rlimit, a
    /// capability, a Landlock rule, an execve candidate), when it has
    /// several.
    pub index: u32,
    /// Exec: the file exists but its ELF or `#!` interpreter does not
    /// (execve says ENOENT).
    pub interpreter_missing: bool,
}

impl Failure {
    pub fn new(stage: Stage, errno: Errno) -> Failure {
        Failure {
            stage,
            errno,
            index: 0,
            interpreter_missing: false,
        }
    }

    pub fn at(mut self, index: usize) -> Failure {
        self.index = index as u32;
        self
    }

    /// The exit status of the process that failed: 126/127 for exec
    /// failures, 125 for everything else.
    pub fn exit_status(&self) -> i32 {
        match self.stage {
            Stage::Exec => exec_failure_status(self.errno, self.interpreter_missing),
            _ => 125,
        }
    }
}

/// Tag a step's bare errno with its [`Stage`].
pub trait At<T> {
    fn at(self, stage: Stage) -> Result<T, Failure>;
}

impl<T> At<T> for Result<T, Errno> {
    fn at(self, stage: Stage) -> Result<T, Failure> {
        self.map_err(|e| Failure::new(stage, e))
    }
}

/// First bytes of a failure record (a JSON message starts with `{`).
const MAGIC: [u8; 2] = *b"HF";
/// Bumped whenever the record changes shape.
pub const FAILURE_VERSION: u8 = 3;
/// Size of the encoded record (text, from pid 1 only, follows it).
pub const FAILURE_LEN: usize = 16;

impl Failure {
    /// The wire form: magic, version, stage, errno, index, flags.
    pub fn encode(&self) -> [u8; FAILURE_LEN] {
        let mut b = [0u8; FAILURE_LEN];
        b[..2].copy_from_slice(&MAGIC);
        b[2] = FAILURE_VERSION;
        b[3] = self.stage as u8;
        b[4..8].copy_from_slice(&(self.errno as i32).to_le_bytes());
        b[8..12].copy_from_slice(&self.index.to_le_bytes());
        b[12..16].copy_from_slice(&u32::from(self.interpreter_missing).to_le_bytes());
        b
    }

    /// Whether a datagram is a failure record (rather than a message).
    pub fn is_record(bytes: &[u8]) -> bool {
        bytes.starts_with(&MAGIC)
    }

    /// Decode a record and the text after it.
    pub fn decode(bytes: &[u8]) -> Result<(Failure, Option<String>), String> {
        if bytes.len() < FAILURE_LEN || !Failure::is_record(bytes) {
            return Err("a truncated failure record".into());
        }
        if bytes[2] != FAILURE_VERSION {
            return Err(format!(
                "failure record version {} (this hutch speaks {FAILURE_VERSION})",
                bytes[2]
            ));
        }
        let stage = Stage::from_u8(bytes[3]).ok_or("a failure record of an unknown stage")?;
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[r]);
            w
        };
        let failure = Failure {
            stage,
            errno: Errno::from_raw(i32::from_le_bytes(word(4..8))),
            index: u32::from_le_bytes(word(8..12)),
            interpreter_missing: u32::from_le_bytes(word(12..16)) != 0,
        };
        let text = &bytes[FAILURE_LEN..];
        let text = (!text.is_empty()).then(|| String::from_utf8_lossy(text).into_owned());
        Ok((failure, text))
    }
}

/// 126 (cannot execute) or 127 (not found), as a shell says.
pub fn exec_failure_status(errno: Errno, interpreter_missing: bool) -> i32 {
    if !interpreter_missing && matches!(errno, Errno::ENOENT | Errno::ENOTDIR) {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_round_trips_through_the_record() {
        for (i, stage) in Stage::ALL.iter().enumerate() {
            assert_eq!(*stage as u8, i as u8 + 1, "stages are numbered in order");
            let f = Failure {
                stage: *stage,
                errno: Errno::EACCES,
                index: 7,
                interpreter_missing: i % 2 == 0,
            };
            assert_eq!(Failure::decode(&f.encode()), Ok((f, None)));
        }
        let mut with_text = Failure::new(Stage::BuildRoot, Errno::ENOENT)
            .encode()
            .to_vec();
        with_text.extend_from_slice(b"fs[2] (bind /x): mount(...)");
        assert_eq!(
            Failure::decode(&with_text).unwrap().1.as_deref(),
            Some("fs[2] (bind /x): mount(...)")
        );
        let mut bad = Failure::new(Stage::Exec, Errno::ENOENT).encode();
        bad[2] = 99;
        assert!(Failure::decode(&bad).unwrap_err().contains("version 99"));
        bad[2] = FAILURE_VERSION;
        bad[3] = 200;
        assert!(Failure::decode(&bad).is_err());
        assert!(Failure::decode(b"HF").is_err());
        assert!(!Failure::is_record(b"{\"v\":3}"));
    }
}
