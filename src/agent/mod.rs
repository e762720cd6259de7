//! Agent profiles: what an agent CLI (Claude Code, Codex, ...) needs to run
//! unchanged inside a sandbox, as one TOML file per CLI (`agents/*.toml`,
//! built in; any other file by path). `hutch run --agent NAME` applies one
//! to the Spec before the caller's own flags, which win. The format and
//! the reasons behind the shipped profiles: docs/agents.md.

mod apply;
mod profile;

pub use profile::{AgentProfile, builtin_names, load, show, user_profiles};

/// Why an agent profile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "no agent profile {name:?}: the built-in ones are {known}; add {name}.toml to a directory of HUTCH_AGENTS_PATH, or give a profile file's path (docs/agents.md)"
    )]
    Unknown { name: String, known: String },
    #[error("cannot read agent profile {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("agent profile {origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error(
        "agent profile {origin} has no `prompt` (how its CLI takes a prompt): add one (docs/agents.md) or give the command after -- instead of --prompt"
    )]
    NoPrompt { origin: String },
}
