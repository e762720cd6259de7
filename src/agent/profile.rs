//! The agent profile file: its schema, the built-in profiles, loading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::AgentError;
use crate::spec::{ByteSize, Duration, Gateway, Secret};

/// One agent CLI's needs (a TOML file; every key optional but
/// `description` and `command`). Unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// Where the profile came from: its built-in name or its file's path
    /// (not a key of the file).
    #[serde(skip)]
    pub origin: String,
    /// One line for `hutch agent list`.
    pub description: String,
    /// The CLI's executable name, looked up in PATH by `hutch agent check`.
    pub command: String,
    /// The uid and gid the CLI runs as inside (non-root: Claude Code
    /// refuses to skip its permission prompts as root).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// A fresh, writable HOME (a tmpfs private to the invocation), where
    /// [`AgentProfile::files`] are placed.
    pub home: Option<PathBuf>,
    /// Wall-clock limit (a CLI without network retries for ever).
    pub timeout: Option<Duration>,
    /// Memory cap, preferred: reported unenforced where the host has no
    /// memory controller (`--memory` makes it required).
    pub memory: Option<ByteSize>,
    /// Hosts the CLI may reach (the model API): `--allow-host` patterns.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The variable holding the model API key, for `hutch agent check`
    /// (the profile never reads or places the key itself).
    pub key_env: Option<String>,
    /// Environment of the CLI.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files made in HOME before the CLI starts: path relative to HOME →
    /// content (the CLI's own configuration).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Model-API gateways (`[[gateways]]`, the policy file's schema:
    /// docs/egress.md): the CLI's base URL on hutch's proxy instead of the
    /// model's host.
    #[serde(default)]
    pub gateways: Vec<Gateway>,
    /// Secrets (`[[secrets]]`, docs/secrets.md): the key stays on the host,
    /// the CLI holds a placeholder.
    #[serde(default)]
    pub secrets: Vec<Secret>,
    /// How the CLI takes one prompt and runs it unattended: the words after
    /// [`AgentProfile::command`], one of them exactly `{prompt}` (replaced
    /// by the prompt, as one argument: no shell). `hutch run --agent NAME
    /// --prompt TEXT` builds the command line from it.
    #[serde(default)]
    pub prompt: Vec<String>,
}

/// The element of [`AgentProfile::prompt`] the prompt replaces.
const PROMPT_SLOT: &str = "{prompt}";

/// The variable naming directories of the caller's own profiles
/// (`NAME.toml`), searched before the built-in ones.
const AGENTS_PATH_VAR: &str = "HUTCH_AGENTS_PATH";

/// The profiles shipped with hutch: name → TOML.
const BUILTIN: &[(&str, &str)] = &[
    ("claude-code", include_str!("../../agents/claude-code.toml")),
    ("codex", include_str!("../../agents/codex.toml")),
];

/// The built-in profiles' names.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|(n, _)| *n)
}

/// The directories of `HUTCH_AGENTS_PATH` (`:`-separated; empty entries
/// skipped), in order.
fn user_dirs() -> Vec<PathBuf> {
    std::env::var_os(AGENTS_PATH_VAR)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The caller's own profile of this name: `NAME.toml` in the first
/// directory of `HUTCH_AGENTS_PATH` that has one.
fn user_file(name: &str) -> Option<PathBuf> {
    if name.is_empty() || name.starts_with('.') {
        return None;
    }
    user_dirs()
        .into_iter()
        .map(|d| d.join(format!("{name}.toml")))
        .find(|p| p.is_file())
}

/// The caller's own profiles (`HUTCH_AGENTS_PATH`): name → file, the first
/// directory's winning, sorted by name.
pub fn user_profiles() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for dir in user_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let (Some(stem), Some("toml")) = (
                path.file_stem().and_then(|s| s.to_str()),
                path.extension().and_then(|s| s.to_str()),
            ) else {
                continue;
            };
            if !stem.starts_with('.') && path.is_file() {
                out.entry(stem.to_string()).or_insert(path);
            }
        }
    }
    out
}

/// A profile by name (the caller's own in `HUTCH_AGENTS_PATH` first, then
/// the built-in one), or a profile file when `name_or_path` contains a `/`
/// or ends in `.toml`.
pub fn load(name_or_path: &str) -> Result<AgentProfile, AgentError> {
    let user = user_file(name_or_path);
    let file = user.as_deref().map(Path::to_str);
    let name_or_path = match file {
        Some(Some(f)) => f,
        _ => name_or_path,
    };
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| AgentError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        return parse(&text, &path.display().to_string());
    }
    let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) else {
        return Err(AgentError::Unknown {
            name: name_or_path.to_string(),
            known: builtin_names().collect::<Vec<_>>().join(", "),
        });
    };
    parse(text, name_or_path)
}

/// A profile's text: the caller's own file (`HUTCH_AGENTS_PATH`), the
/// built-in file, or the file at the path.
pub fn show(name_or_path: &str) -> Result<String, AgentError> {
    let user = user_file(name_or_path);
    let file = user.as_deref().map(Path::to_str);
    let name_or_path = match file {
        Some(Some(f)) => f,
        _ => name_or_path,
    };
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        let path = Path::new(name_or_path);
        return std::fs::read_to_string(path).map_err(|source| AgentError::Read {
            path: path.to_path_buf(),
            source,
        });
    }
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name_or_path)
        .map(|(_, t)| t.to_string())
        .ok_or_else(|| AgentError::Unknown {
            name: name_or_path.to_string(),
            known: builtin_names().collect::<Vec<_>>().join(", "),
        })
}

/// Parse and check a profile's text; `origin` names it in errors.
pub(crate) fn parse(text: &str, origin: &str) -> Result<AgentProfile, AgentError> {
    let invalid = |message: String| AgentError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let de = toml::Deserializer::parse(text).map_err(|e| invalid(one_line(e.message())))?;
    let mut profile: AgentProfile = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        invalid(format!("{path}: {}", one_line(e.inner().message())))
    })?;
    profile.origin = origin.to_string();
    profile.check().map_err(invalid)?;
    Ok(profile)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl AgentProfile {
    /// What serde cannot say: absolute HOME, files inside it, names that
    /// are names.
    fn check(&self) -> Result<(), String> {
        if self.command.is_empty() || self.command.contains('/') {
            return Err(format!(
                "command: {:?} must be an executable's name (no /)",
                self.command
            ));
        }
        if let Some(home) = &self.home
            && (!home.is_absolute() || home == Path::new("/"))
        {
            return Err(format!(
                "home: {} must be an absolute path other than /",
                home.display()
            ));
        }
        if !self.files.is_empty() && self.home.is_none() {
            return Err("files: are placed in home, which is not set".to_string());
        }
        for path in self.files.keys() {
            let p = Path::new(path);
            let inside = p.is_relative()
                && p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !inside {
                return Err(format!(
                    "files.{path:?}: a path relative to home, without .. or ."
                ));
            }
        }
        if !self.prompt.is_empty() && self.prompt.iter().filter(|w| *w == PROMPT_SLOT).count() != 1
        {
            return Err(format!(
                "prompt: {:?} must have exactly one element \"{PROMPT_SLOT}\" (where the prompt goes)",
                self.prompt
            ));
        }
        for name in self.env.keys().chain(self.key_env.iter()) {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(format!("env: {name:?} is not a variable name"));
            }
        }
        Ok(())
    }
}

impl AgentProfile {
    /// The command line that runs `prompt` unattended: the CLI's name,
    /// `cli_args` (the CLI's own options), then the profile's `prompt`
    /// words with the prompt in its slot, as one argument.
    pub fn prompt_command(
        &self,
        prompt: &str,
        cli_args: &[String],
    ) -> Result<Vec<String>, AgentError> {
        if self.prompt.is_empty() {
            return Err(AgentError::NoPrompt {
                origin: self.origin.clone(),
            });
        }
        let mut argv = vec![self.command.clone()];
        argv.extend(cli_args.iter().cloned());
        argv.extend(self.prompt.iter().map(|w| {
            if w == PROMPT_SLOT {
                prompt.to_string()
            } else {
                w.clone()
            }
        }));
        Ok(argv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_profiles_load() {
        for name in builtin_names() {
            let p = load(name).unwrap();
            assert_eq!(p.origin, name);
            assert!(p.uid.is_some_and(|u| u != 0), "{name}: a non-root uid");
            assert!(p.home.is_some() && p.timeout.is_some() && p.memory.is_some());
            assert!(!p.allow_hosts.is_empty() && p.key_env.is_some());
        }
    }

    #[test]
    fn mistakes_are_named() {
        let err = |text: &str| parse(text, "t.toml").unwrap_err().to_string();
        let base = "description = \"x\"\ncommand = \"x\"\n";
        assert!(err(&format!("{base}colour = 1")).contains("unknown field `colour`"));
        assert!(err(&format!("{base}timeout = \"soon\"")).contains("timeout"));
        assert!(err(&format!("{base}home = \"rel\"")).contains("home"));
        assert!(
            err(&format!("{base}home = \"/h\"\n[files]\n\"../x\" = \"\""))
                .contains("files.\"../x\"")
        );
        assert!(err(&format!("{base}[files]\n\"a\" = \"\"")).contains("home, which is not set"));
        assert!(err("description = \"x\"\ncommand = \"/bin/x\"").contains("command"));
        assert!(matches!(
            load("no-such-agent"),
            Err(AgentError::Unknown { .. })
        ));
        assert!(err(&format!("{base}prompt = [\"-p\"]")).contains("exactly one element"));
        assert!(
            err(&format!("{base}prompt = [\"{{prompt}}\", \"{{prompt}}\"]"))
                .contains("exactly one element")
        );
    }

    /// The prompt is one argument in the profile's slot, whatever it holds
    /// (no shell); the caller's words go between the CLI and the prompt's.
    #[test]
    fn the_prompt_goes_where_the_profile_says() {
        let p = load("claude-code").unwrap();
        let argv = p
            .prompt_command("-x; rm -rf / $(id)", &["--verbose".to_string()])
            .unwrap();
        assert_eq!(argv, ["claude", "--verbose", "-p", "--", "-x; rm -rf / $(id)"]);
        let p = load("codex").unwrap();
        assert_eq!(
            p.prompt_command("hi", &[]).unwrap(),
            ["codex", "exec", "--skip-git-repo-check", "--", "hi"]
        );
        let none = parse("description = \"x\"\ncommand = \"x\"\n", "t.toml").unwrap();
        assert!(matches!(
            none.prompt_command("hi", &[]),
            Err(AgentError::NoPrompt { .. })
        ));
    }
}

#[cfg(test)]
mod gateway_tests {
    use super::*;
    use crate::spec::Network;

    /// A profile's `[[gateways]]` and `[[secrets]]` are the policy file's
    /// own tables, and land in the Spec as if given there.
    #[test]
    fn gateways_and_secrets_reach_the_spec() {
        let p = parse(
            r#"
description = "x"
command = "claude"
allow_hosts = ["api.anthropic.com"]
[[gateways]]
name = "anthropic"
upstream = "https://api.anthropic.com"
env = ["ANTHROPIC_BASE_URL"]
methods = ["POST"]
paths = ["/v1/messages"]
[[secrets]]
name = "anthropic"
env = "ANTHROPIC_API_KEY"
from = { env = "ANTHROPIC_API_KEY" }
hosts = ["api.anthropic.com"]
inject = { header = "x-api-key" }
"#,
            "t.toml",
        )
        .unwrap();
        let mut spec = crate::spec::default_profile();
        p.apply_to(&mut spec);
        let Network::Proxy(policy) = &spec.network else {
            panic!("no proxy network: {:?}", spec.network)
        };
        assert_eq!(policy.allow, ["api.anthropic.com"]);
        assert_eq!(policy.gateways.len(), 1);
        assert_eq!(policy.gateways[0].upstream, "https://api.anthropic.com");
        assert_eq!(spec.secrets.len(), 1);
        assert_eq!(spec.secrets[0].env.as_deref(), Some("ANTHROPIC_API_KEY"));
        let bad = parse(
            "description = \"x\"\ncommand = \"x\"\n[[secrets]]\nname = \"k\"\nfrom = { argv = \"x\" }\nhosts = []\n",
            "t.toml",
        );
        assert!(bad.unwrap_err().to_string().contains("secrets[0].from"));
    }

    /// The shipped profiles keep the key on the host: a gateway to the
    /// vendor's API and the key as a secret read from the caller's
    /// variable; a caller's gateway and secret of the same name replace
    /// them (another model host), and only those.
    #[test]
    fn shipped_profiles_put_the_key_behind_the_gateway() {
        for (name, gateway, host) in [
            ("claude-code", "anthropic", "https://api.anthropic.com"),
            ("codex", "openai", "https://api.openai.com"),
        ] {
            let p = load(name).unwrap();
            let mut spec = crate::spec::default_profile();
            p.apply_to(&mut spec);
            let Network::Proxy(policy) = &spec.network else {
                panic!("{name}: no proxy network")
            };
            assert_eq!(policy.gateways.len(), 1, "{name}");
            assert_eq!(policy.gateways[0].name, gateway, "{name}");
            assert_eq!(policy.gateways[0].upstream, host, "{name}");
            assert_eq!(spec.secrets.len(), 1, "{name}");
            assert_eq!(spec.secrets[0].name, gateway, "{name}");
            assert_eq!(spec.secrets[0].env.as_deref(), p.key_env.as_deref());

            // The caller's own, of the same name, after the profile's.
            let mut theirs = spec.secrets[0].clone();
            theirs.hosts = vec!["model.test:8443".to_string()];
            spec.secrets.push(theirs);
            let Network::Proxy(policy) = &mut spec.network else {
                unreachable!()
            };
            let mut other = policy.gateways[0].clone();
            other.upstream = "https://model.test:8443".to_string();
            policy.gateways.push(other);
            p.yield_to_caller(&mut spec);
            let Network::Proxy(policy) = &spec.network else {
                unreachable!()
            };
            assert_eq!(policy.gateways.len(), 1, "{name}");
            assert_eq!(policy.gateways[0].upstream, "https://model.test:8443");
            assert_eq!(spec.secrets.len(), 1, "{name}");
            assert_eq!(spec.secrets[0].hosts, ["model.test:8443"], "{name}");
        }
    }
}
