//! seccomp profiles: embedded JSON (seccompiler's format) compiled into one
//! linked BPF program per sandbox. See `seccomp/README.md` for the profiles.

mod codegen;
#[doc(hidden)]
pub mod profile;
mod syscalls_x86_64;

use std::path::Path;

use crate::sys::sock_filter;
use serde::Serialize;

pub use profile::{ProfileError, syscall_nr};
// For the tests and fuzzers (cargo feature `internals`).
#[cfg(feature = "internals")]
pub use codegen::{MAX_INSTRUCTIONS, X32_SYSCALL_BIT};

/// The profiles built into hutch, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../../seccomp/default.json")),
    ("strict", include_str!("../../../seccomp/strict.json")),
    ("log", include_str!("../../../seccomp/log.json")),
];

/// The filter `hutch init` (pid 1) runs under once it has started the workload.
pub const INIT_PROFILE: &str = include_str!("../../../seccomp/init.json");

/// Largest profile file hutch reads.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A profile compiled and linked, ready for `seccomp(2)`.
#[derive(Clone)]
pub struct CompiledFilter {
    /// Profile name (`default`, ...) or the file path as given.
    pub profile: String,
    /// Names of the filters (stages) in evaluation order.
    pub stages: Vec<String>,
    pub program: Vec<sock_filter>,
}

impl std::fmt::Debug for CompiledFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledFilter")
            .field("profile", &self.profile)
            .field("stages", &self.stages)
            .field("instructions", &self.program.len())
            .finish()
    }
}

/// What the exit report says about seccomp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SeccompReport {
    /// `default`, `strict`, `log`, `unconfined`, or the profile file.
    pub profile: String,
    /// Whether a filter is installed at all (false for `unconfined`).
    pub enforced: bool,
    /// Architectures whose syscalls the profile filters.
    #[serde(deserialize_with = "crate::util::static_words::words")]
    pub architectures: Vec<crate::util::static_words::Word>,
    /// System call ABIs whose every call kills the process.
    #[serde(deserialize_with = "crate::util::static_words::words")]
    pub killed_abis: Vec<crate::util::static_words::Word>,
    /// Filters of the profile, in evaluation order.
    pub stages: Vec<String>,
    /// Length of the installed BPF program.
    pub instructions: usize,
}

impl SeccompReport {
    pub fn of(profile: &str, filter: Option<&CompiledFilter>) -> Self {
        match filter {
            Some(f) => SeccompReport {
                profile: profile.to_string(),
                enforced: true,
                architectures: vec!["x86_64"],
                killed_abis: vec!["i386", "x32"],
                stages: f.stages.clone(),
                instructions: f.program.len(),
            },
            None => SeccompReport {
                profile: profile.to_string(),
                enforced: false,
                architectures: Vec::new(),
                killed_abis: Vec::new(),
                stages: Vec::new(),
                instructions: 0,
            },
        }
    }
}

/// Compile profile text (`profile` names it in errors).
pub fn compile(profile: &str, json: &[u8]) -> Result<CompiledFilter, ProfileError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(ProfileError {
            location: String::new(),
            message: "seccomp profiles are only built for x86_64 hosts".into(),
        });
    }
    let stages = profile::compile_stages(json)?;
    let program = codegen::compile(&stages).map_err(|message| ProfileError {
        location: String::new(),
        message,
    })?;
    Ok(CompiledFilter {
        profile: profile.to_string(),
        stages: stages.into_iter().map(|s| s.name).collect(),
        program,
    })
}

/// Load the profile `name`: a built-in name, `unconfined` (None), or a path
/// to a JSON file (it must contain a `/` or end in `.json`).
pub fn load(name: &str) -> Result<Option<CompiledFilter>, ProfileError> {
    if name == "unconfined" {
        return Ok(None);
    }
    if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
        return compile(name, text.as_bytes()).map(Some);
    }
    if !is_path(name) {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(ProfileError {
            location: String::new(),
            message: format!(
                "unknown seccomp profile {name:?}: use one of {}, unconfined, or a path to a JSON profile",
                names.join(", ")
            ),
        });
    }
    let text = read_profile_file(Path::new(name))?;
    compile(name, &text).map(Some)
}

/// Check a `security.seccomp` value: a built-in name or `unconfined` is
/// accepted as is (the built-in profiles are compiled by the tests; a
/// `hutch run` validates its spec twice and should not pay for compiling
/// them three times), a file is read and compiled.
pub fn validate(name: &str) -> Result<(), ProfileError> {
    if name == "unconfined" || BUILTIN.iter().any(|(n, _)| *n == name) {
        return Ok(());
    }
    load(name).map(drop)
}

/// Whether a `security.seccomp` value names a file rather than a built-in.
pub fn is_path(name: &str) -> bool {
    name.contains('/') || name.ends_with(".json")
}

fn read_profile_file(path: &Path) -> Result<Vec<u8>, ProfileError> {
    use std::io::Read;
    let err = |m: String| ProfileError {
        location: String::new(),
        message: format!("cannot read seccomp profile {}: {m}", path.display()),
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut text = Vec::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(err(format!("larger than {MAX_PROFILE_BYTES} bytes")));
    }
    Ok(text)
}
