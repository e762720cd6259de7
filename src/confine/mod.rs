//! Confinement of the workload: capabilities, seccomp, Landlock.
//!
//! [`prepare`] runs in the supervisor before clone and does everything that
//! may allocate or fail on bad input: it compiles the seccomp profile to one
//! BPF program, probes the Landlock ABI (failing closed below the floor) and
//! computes the Landlock rules from the mount plan and network mode. The
//! sandbox then calls [`Confinement::apply_init`] in pid 1 after it forked
//! the workload; the workload's own steps (Landlock from
//! [`Confinement::landlock_plan`], then the seccomp filter, last before
//! `execve`) are performed by the launcher's child code through its
//! mockable syscall layer (`launch::child`), so that they allocate nothing.

pub mod caps;
pub mod landlock;
pub mod seccomp;
pub(crate) mod userns_lock;

use serde::Serialize;

use crate::spec::{Security, Spec, SpecError};
use crate::sys::SysError;

pub use landlock::{LandlockPlan, LandlockReport};
pub use seccomp::{CompiledFilter, ProfileError, SeccompReport};

/// The kernel's cap on a BPF program's length (`BPF_MAXINSNS`).
pub const BPF_MAXINSNS: usize = 4096;

/// A raw program of `security.seccomp_bpf` as instructions (validated:
/// a whole number of 8-byte `struct sock_filter`).
fn raw_program(bytes: &[u8]) -> Vec<libc::sock_filter> {
    bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

/// Check the security section of a Spec; errors name the key under
/// `security.`. A profile file is read and compiled, so its errors name the
/// failing filter and rule; a built-in profile is only named here (it is
/// compiled once, by [`prepare`]).
pub fn validate(sec: &Security) -> Result<(), SpecError> {
    let err = |key: &str, msg: String| Err(SpecError::new(format!("security.{key}"), msg));
    if let Err(e) = seccomp::validate(&sec.seccomp) {
        return err("seccomp", e.to_string());
    }
    if let Some(min) = sec.landlock.min_abi {
        if !sec.landlock.enabled {
            return err(
                "landlock.min_abi",
                "a minimum Landlock ABI needs security.landlock.enabled = true".into(),
            );
        }
        // Above hutch's own newest ABI is accepted here and refused by
        // `prepare`, which can name the kernel's ABI.
        if min == 0 || min > 64 {
            return err(
                "landlock.min_abi",
                format!("{min} is not a Landlock ABI version (1, 2, ...)"),
            );
        }
    }
    for (i, prog) in sec.seccomp_bpf.iter().enumerate() {
        if prog.is_empty() || prog.len() % 8 != 0 || prog.len() / 8 > BPF_MAXINSNS {
            return err(
                &format!("seccomp_bpf[{i}]"),
                format!(
                    "{} bytes is not a BPF program: 1 to {BPF_MAXINSNS} instructions of 8 bytes",
                    prog.len()
                ),
            );
        }
    }
    if let Err(m) = caps::parse_cap_list(&sec.cap_add) {
        return err("cap_add", m);
    }
    if let Some(sets) = &sec.capabilities {
        for (name, list) in caps::sets(sets) {
            if let Err(m) = caps::parse_cap_list(list) {
                return err(&format!("capabilities.{name}"), m);
            }
        }
    }
    Ok(())
}

/// Why confinement cannot be prepared or applied. Display is one line:
/// what failed, why, and the fix.
#[derive(thiserror::Error, Debug)]
pub enum ConfineError {
    #[error(
        "security.seccomp: profile {profile:?} is invalid: {error}; fix the profile or choose default, strict, log or unconfined"
    )]
    Profile {
        profile: String,
        error: ProfileError,
    },
    #[error(
        "security.landlock.min_abi: Landlock ABI {required} is required but this kernel provides ABI {available}; run on a newer kernel or lower the minimum"
    )]
    LandlockTooOld { required: u32, available: u32 },
    #[error(
        "security.landlock.min_abi: Landlock ABI {required} is required and this kernel provides ABI {available}, but this hutch enforces Landlock ABIs up to {max}; lower the minimum to {max} or less"
    )]
    LandlockBeyondHutch {
        required: u32,
        available: u32,
        max: u32,
    },
    #[error(
        "security.landlock.enabled: Landlock is requested but this kernel does not provide it (ABI 0: not built in, or missing from the lsm= boot parameter); enable it, or disable Landlock explicitly (security.landlock.enabled = false)"
    )]
    LandlockUnavailable,
    #[error("security.cap_add: {0}")]
    Caps(String),
    #[error("enforcing Landlock failed: {0}; the sandbox was not started")]
    Landlock(SysError),
    #[error("installing the seccomp filter failed: {0}; the sandbox was not started")]
    Seccomp(SysError),
}

/// Everything confinement needs, prepared before clone.
#[derive(Debug, Clone)]
pub struct Confinement {
    seccomp_profile: String,
    workload_filter: Option<CompiledFilter>,
    init_filter: CompiledFilter,
    landlock: Option<LandlockPlan>,
    landlock_min_abi: Option<u32>,
    landlock_available: u32,
    keep_caps: ::caps::CapsHashSet,
    /// `security.capabilities` as masks: bounding, effective, permitted,
    /// inheritable, ambient.
    cap_sets: Option<[u64; 5]>,
    no_new_privs: bool,
    /// `security.seccomp_bpf`, installed in order after `workload_filter`.
    raw_filters: Vec<Vec<libc::sock_filter>>,
}

/// What was enforced, for the exit report and `hutch check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConfinementReport {
    pub seccomp: SeccompReport,
    pub landlock: LandlockReport,
    /// Capabilities the workload keeps (sorted names), empty by default.
    pub caps_kept: Vec<String>,
}

/// Prepare the confinement of `spec` (in the supervisor, before clone).
pub fn prepare(spec: &Spec) -> Result<Confinement, ConfineError> {
    let sec = &spec.security;
    let workload_filter = seccomp::load(&sec.seccomp).map_err(|error| ConfineError::Profile {
        profile: sec.seccomp.clone(),
        error,
    })?;
    let init_filter =
        seccomp::compile("init", seccomp::INIT_PROFILE.as_bytes()).map_err(|error| {
            ConfineError::Profile {
                profile: "init".into(),
                error,
            }
        })?;
    let available = crate::sys::landlock_abi_version();
    let landlock = if sec.landlock.enabled {
        let required = sec.landlock.min_abi.unwrap_or(1);
        if available == 0 {
            return Err(ConfineError::LandlockUnavailable);
        }
        if available < required {
            return Err(ConfineError::LandlockTooOld {
                required,
                available,
            });
        }
        if required > landlock::HUTCH_MAX_ABI {
            return Err(ConfineError::LandlockBeyondHutch {
                required,
                available,
                max: landlock::HUTCH_MAX_ABI,
            });
        }
        Some(LandlockPlan::new(spec, available))
    } else {
        None
    };
    let keep_caps = caps::parse_cap_list(&sec.cap_add).map_err(ConfineError::Caps)?;
    let cap_sets = match &sec.capabilities {
        None => None,
        Some(sets) => {
            let mut masks = [0u64; 5];
            for (mask, (_, list)) in masks.iter_mut().zip(caps::sets(sets)) {
                *mask = caps::mask(&caps::parse_cap_list(list).map_err(ConfineError::Caps)?);
            }
            Some(masks)
        }
    };
    Ok(Confinement {
        seccomp_profile: sec.seccomp.clone(),
        workload_filter,
        init_filter,
        landlock,
        landlock_min_abi: sec.landlock.min_abi,
        landlock_available: available,
        keep_caps,
        cap_sets,
        no_new_privs: sec.no_new_privs,
        raw_filters: sec.seccomp_bpf.iter().map(|p| raw_program(p)).collect(),
    })
}

impl Confinement {
    #[cfg(feature = "internals")]
    /// Capabilities the workload keeps (`security.cap_add`).
    pub fn keep_caps(&self) -> &::caps::CapsHashSet {
        &self.keep_caps
    }

    /// The workload's capability sets as masks (bit N for capability N):
    /// bounding, effective, permitted, inheritable, ambient. With
    /// `security.cap_add`, every set holds the kept capabilities.
    pub fn cap_sets(&self) -> [u64; 5] {
        self.cap_sets.unwrap_or([caps::mask(&self.keep_caps); 5])
    }

    /// Whether the workload sets no-new-privs (`security.no_new_privs`).
    pub fn no_new_privs(&self) -> bool {
        self.no_new_privs
    }

    /// The compiled workload filter (None for `unconfined`).
    pub fn workload_filter(&self) -> Option<&CompiledFilter> {
        self.workload_filter.as_ref()
    }

    /// The raw programs of `security.seccomp_bpf`, in installation order.
    pub fn raw_filters(&self) -> &[Vec<libc::sock_filter>] {
        &self.raw_filters
    }

    /// The Landlock plan (None when Landlock is disabled).
    pub fn landlock_plan(&self) -> Option<&LandlockPlan> {
        self.landlock.as_ref()
    }

    /// In `hutch init` (pid 1), right after it forked the workload: install
    /// the minimal filter of `seccomp/init.json` (reaping, signals, the
    /// control socket, walking the overlay upper; everything else EPERM,
    /// foreign architectures and x32 killed). Does not allocate.
    pub fn apply_init(&self) -> Result<(), SysError> {
        crate::sys::set_no_new_privs()?;
        crate::sys::seccomp_set_mode_filter(&self.init_filter.program)
    }

    #[cfg(feature = "internals")]
    /// Confine the calling process as a workload is confined: Landlock, then
    /// seccomp (after no-new-privs and the capability drop). The launcher's
    /// workload performs the same steps through `launch::child`; this is for
    /// tests and for embedders confining a process of their own.
    pub fn apply_workload(&self) -> Result<(), ConfineError> {
        if self.landlock.is_some() || self.workload_filter.is_some() {
            crate::sys::set_no_new_privs().map_err(ConfineError::Seccomp)?;
        }
        if let Some(plan) = &self.landlock {
            plan.enforce().map_err(ConfineError::Landlock)?;
        }
        if let Some(filter) = &self.workload_filter {
            crate::sys::seccomp_set_mode_filter(&filter.program).map_err(ConfineError::Seccomp)?;
        }
        Ok(())
    }

    /// What is enforced.
    pub fn report(&self) -> ConfinementReport {
        let landlock = match &self.landlock {
            Some(plan) => plan.report(self.landlock_min_abi, self.landlock_available),
            None => LandlockReport {
                requested: false,
                min_abi: None,
                available: self.landlock_available,
                enforced_abi: None,
                filesystem: false,
                tcp: "unrestricted",
                scoped: Vec::new(),
            },
        };
        let mut caps_kept: Vec<String> = match self.cap_sets {
            None => self.keep_caps.iter().map(|c| c.to_string()).collect(),
            Some([_, _, permitted, _, _]) => ::caps::all()
                .into_iter()
                .filter(|c| permitted & c.bitmask() != 0)
                .map(|c| c.to_string())
                .collect(),
        };
        caps_kept.sort();
        ConfinementReport {
            seccomp: SeccompReport::of(&self.seccomp_profile, self.workload_filter.as_ref()),
            landlock,
            caps_kept,
        }
    }
}
