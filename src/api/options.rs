//! What [`super::Command`] and [`super::PoolCommand`] share: the options
//! that are not in a Spec ([`CommandOptions`]), the parts of a Spec that
//! a pooled command may change too ([`CommandParts`]), and the setters of
//! both, written once ([`shared_setters!`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::launch::claim::ClaimCommand;
use crate::spec::{ByteSize, Duration, Spec};

/// How the supervisor reports on a command, set by the builder.
pub(super) struct CommandOptions {
    /// Also write the status events here.
    pub(super) status_file: Option<PathBuf>,
    /// No notices on stderr.
    pub(super) quiet: bool,
}

impl Default for CommandOptions {
    fn default() -> Self {
        CommandOptions {
            status_file: None,
            quiet: true,
        }
    }
}

/// Where a builder keeps what a command brings: [`super::Command`] in its
/// whole Spec, [`super::PoolCommand`] in the claim of a warm sandbox.
pub(super) trait CommandParts {
    fn argv(&mut self) -> &mut Vec<String>;
    fn env(&mut self) -> &mut BTreeMap<String, String>;
    fn unset_env(&mut self) -> &mut BTreeSet<String>;
    fn cwd(&mut self) -> &mut Option<PathBuf>;
    fn wall_clock(&mut self) -> &mut Option<Duration>;
    fn output_bytes(&mut self) -> &mut Option<ByteSize>;
}

impl CommandParts for Spec {
    fn argv(&mut self) -> &mut Vec<String> {
        &mut self.command
    }
    fn env(&mut self) -> &mut BTreeMap<String, String> {
        &mut self.env
    }
    fn unset_env(&mut self) -> &mut BTreeSet<String> {
        &mut self.unset_env
    }
    fn cwd(&mut self) -> &mut Option<PathBuf> {
        &mut self.cwd
    }
    fn wall_clock(&mut self) -> &mut Option<Duration> {
        &mut self.limits.wall_clock
    }
    fn output_bytes(&mut self) -> &mut Option<ByteSize> {
        &mut self.limits.output_bytes
    }
}

impl CommandParts for ClaimCommand {
    fn argv(&mut self) -> &mut Vec<String> {
        &mut self.command
    }
    fn env(&mut self) -> &mut BTreeMap<String, String> {
        &mut self.env
    }
    fn unset_env(&mut self) -> &mut BTreeSet<String> {
        &mut self.unset_env
    }
    fn cwd(&mut self) -> &mut Option<PathBuf> {
        &mut self.cwd
    }
    fn wall_clock(&mut self) -> &mut Option<Duration> {
        &mut self.wall_clock
    }
    fn output_bytes(&mut self) -> &mut Option<ByteSize> {
        &mut self.output_bytes
    }
}

/// The setters [`super::Command`] and [`super::PoolCommand`] share, as
/// inherent methods (what users call, documented on each type). `$parts`
/// names the field that implements [`CommandParts`]; the type has an
/// `options: CommandOptions` field. The wall-clock setters take their
/// docs from the caller: a pooled command's clock starts at its claim.
macro_rules! shared_setters {
    (
        $parts:ident;
        $(#[$timeout_doc:meta])* fn timeout;
        $(#[$no_timeout_doc:meta])* fn no_timeout;
    ) => {
        pub fn arg(&mut self, arg: impl AsRef<str>) -> &mut Self {
            options::CommandParts::argv(&mut self.$parts).push(arg.as_ref().to_string());
            self
        }

        pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(&mut self, args: I) -> &mut Self {
            for a in args {
                self.arg(a);
            }
            self
        }

        pub fn env(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
            let key = key.into();
            options::CommandParts::unset_env(&mut self.$parts).remove(&key);
            options::CommandParts::env(&mut self.$parts).insert(key, value.into());
            self
        }

        /// Also keeps hutch's own variable of that name (a proxy
        /// variable) out of the command's environment.
        pub fn env_remove(&mut self, key: &str) -> &mut Self {
            options::CommandParts::env(&mut self.$parts).remove(key);
            options::CommandParts::unset_env(&mut self.$parts).insert(key.to_string());
            self
        }

        pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
            *options::CommandParts::cwd(&mut self.$parts) = Some(dir.as_ref().to_path_buf());
            self
        }

        $(#[$timeout_doc])*
        pub fn timeout(&mut self, limit: std::time::Duration) -> &mut Self {
            *options::CommandParts::wall_clock(&mut self.$parts) = Some(Duration(limit));
            self
        }

        $(#[$no_timeout_doc])*
        pub fn no_timeout(&mut self) -> &mut Self {
            *options::CommandParts::wall_clock(&mut self.$parts) = None;
            self
        }

        pub fn output_limit(&mut self, bytes: u64) -> &mut Self {
            *options::CommandParts::output_bytes(&mut self.$parts) = Some(ByteSize(bytes));
            self
        }

        /// Also write the status events (JSON lines) to this file.
        pub fn status_file(&mut self, path: impl AsRef<Path>) -> &mut Self {
            self.options.status_file = Some(path.as_ref().into());
            self
        }

        /// Print the notices (changed paths, limits not enforced here) on
        /// stderr (off by default).
        pub fn notify_changes(&mut self, on: bool) -> &mut Self {
            self.options.quiet = !on;
            self
        }
    };
}
pub(super) use shared_setters;
