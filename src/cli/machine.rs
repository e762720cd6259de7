//! The machine interface: what `--json` prints, for programs that drive
//! hutch (the Python package, other languages). One JSON document per
//! invocation on stdout, versioned, errors included; see `docs/machine.md`.
//!
//! ```text
//! {"hutch": 1, "verb": "session.create", "ok": true,  "result": {...}}
//! {"hutch": 1, "verb": "session.diff",   "ok": false, "error": {"kind": "diff-too-large", "what": "...", ...}}
//! ```
//! The human line still goes to stderr; the exit status is the same as
//! without `--json`.

use serde::Serialize;

use crate::spec::SpecError;
use crate::workspace::WorkspaceError;

/// Version of the envelope and of every `result` shape. Adding a field is
/// not a new version; renaming or removing one is.
pub const VERSION: u32 = 1;

/// What kind of failure: the stable key a client maps to an exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Bad command line (unknown option, missing value).
    Usage,
    /// The Spec (profile, options) is invalid; `where` is its key path.
    Spec,
    /// hutch could not build the sandbox (exit 125 of a run).
    Setup,
    /// The egress policy (file, profile) is invalid or refuses the request.
    Policy,
    /// No such session, image or sandbox.
    NotFound,
    /// Another operation holds the session's lock.
    SessionBusy,
    /// The session's budget or deadline is used up, or it refuses the request
    /// (e.g. egress after `seal --network none`).
    Refused,
    /// A byte or entry limit would be exceeded; nothing was produced.
    TooLarge,
    /// A baseline fingerprint did not match the expected one.
    FingerprintMismatch,
    /// A host file or directory could not be read or written.
    Io,
    /// Anything else.
    Internal,
}

/// One failure, with the fields of hutch's one-line errors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineError {
    pub kind: ErrorKind,
    /// The whole human line (what is printed on stderr).
    pub what: String,
    /// Where: a key path, a path, a session id, a syscall.
    #[serde(rename = "where")]
    pub location: Option<String>,
    /// The errno name (`EPERM`), when a syscall failed.
    pub errno: Option<String>,
    /// What to do about it.
    pub hint: Option<String>,
}

impl MachineError {
    pub fn new(kind: ErrorKind, what: impl Into<String>) -> Self {
        MachineError {
            kind,
            what: what.into(),
            location: None,
            errno: None,
            hint: None,
        }
    }

    /// Classify an error chain by the typed errors in it.
    pub fn classify(e: &anyhow::Error) -> Self {
        let what = format!("{e:#}");
        for cause in e.chain() {
            if let Some(s) = cause.downcast_ref::<SpecError>() {
                let mut m = MachineError::new(ErrorKind::Spec, what);
                m.location = (!s.path.is_empty()).then(|| s.path.clone());
                return m;
            }
            if let Some(w) = cause.downcast_ref::<WorkspaceError>() {
                return Self::from_workspace(w, what);
            }
            if let Some(s) = cause.downcast_ref::<crate::sys::SysError>() {
                let mut m = MachineError::new(ErrorKind::Io, what);
                m.location = Some(s.call.clone());
                m.errno = Some(format!("{:?}", s.errno));
                return m;
            }
        }
        MachineError::new(ErrorKind::Internal, what)
    }

    fn from_workspace(w: &WorkspaceError, what: String) -> Self {
        let (kind, location) = match w {
            WorkspaceError::Busy(id) => (ErrorKind::SessionBusy, Some(id.clone())),
            WorkspaceError::NoSession { id, .. } => (ErrorKind::NotFound, Some(id.clone())),
            WorkspaceError::BadId(id) => (ErrorKind::Usage, Some(id.clone())),
            WorkspaceError::TooLarge { .. } => (ErrorKind::TooLarge, None),
            WorkspaceError::Budget { id, .. } => (ErrorKind::Refused, Some(id.clone())),
            WorkspaceError::Refused(..) => (ErrorKind::Refused, None),
            WorkspaceError::FingerprintMismatch { .. } => (ErrorKind::FingerprintMismatch, None),
            WorkspaceError::BadPath { path, .. } | WorkspaceError::Unsupported { path, .. } => {
                (ErrorKind::Usage, Some(path.clone()))
            }
            WorkspaceError::Io { what, .. } => (ErrorKind::Io, Some(what.clone())),
            WorkspaceError::Sys(s) => {
                let mut m = MachineError::new(ErrorKind::Io, what);
                m.location = Some(s.call.clone());
                m.errno = Some(format!("{:?}", s.errno));
                return m;
            }
            WorkspaceError::State { path, .. } | WorkspaceError::StateDir { path, .. } => {
                (ErrorKind::Io, Some(path.display().to_string()))
            }
            WorkspaceError::Git(_) | WorkspaceError::Launch(_) => (ErrorKind::Setup, None),
        };
        let mut m = MachineError::new(kind, what);
        m.location = location;
        m
    }
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    hutch: u32,
    verb: &'a str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a MachineError>,
}

/// The success document of `verb` (e.g. `session.create`), one line.
pub fn ok_line<T: Serialize>(verb: &str, result: &T) -> String {
    let env = Envelope {
        hutch: VERSION,
        verb,
        ok: true,
        result: Some(result),
        error: None,
    };
    line(&env)
}

/// The failure document of `verb`, one line.
pub fn error_line(verb: &str, error: &MachineError) -> String {
    let env: Envelope<'_, ()> = Envelope {
        hutch: VERSION,
        verb,
        ok: false,
        result: None,
        error: Some(error),
    };
    line(&env)
}

/// One line of JSON with workload-chosen names escaped (controls, bidi).
fn line<T: Serialize>(value: &T) -> String {
    let bytes = crate::workspace::json_line(value).expect("machine documents serialize");
    String::from_utf8(bytes).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_carry_version_verb_and_kind() {
        let ok = ok_line("session.create", &serde_json::json!({"id": "ab"}));
        let v: serde_json::Value = serde_json::from_str(&ok).unwrap();
        assert_eq!(v["hutch"], 1);
        assert_eq!(v["verb"], "session.create");
        assert_eq!(v["ok"], true);
        assert_eq!(v["result"]["id"], "ab");
        assert!(v.get("error").is_none());

        let err = anyhow::Error::new(WorkspaceError::Busy("ab".into())).context("session run");
        let m = MachineError::classify(&err);
        assert_eq!(m.kind, ErrorKind::SessionBusy);
        let line = error_line("session.run", &m);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["kind"], "session-busy");
        assert_eq!(v["error"]["where"], "ab");
        assert!(
            v["error"]["what"]
                .as_str()
                .unwrap()
                .starts_with("session run: ")
        );
    }
}
