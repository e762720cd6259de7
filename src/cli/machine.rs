//! The machine interface: what `--json` prints, for programs that drive
//! hutch (the Python package, other languages). One JSON document per
//! invocation on stdout, versioned, errors included; see `docs/machine.md`.
//!
//! ```text
//! {"hutch": 1, "verb": "session.create", "ok": true,  "result": {...}}
//! {"hutch": 1, "verb": "session.diff",   "ok": false, "error": {"kind": "too-large", "what": "...", ...}}
//! ```
//! The human line still goes to stderr; the exit status is the same as
//! without `--json`.

use serde::Serialize;

use crate::cgroup::CgroupError;
use crate::launch::LaunchError;
use crate::net::NetError;
use crate::spec::SpecError;
use crate::sys::SysError;
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
    /// An image registry could not be reached, refused the credentials,
    /// or sent content that does not match its digest (`hutch image pull`).
    Registry,
    /// Anything else.
    Internal,
}

/// A failure that is hutch's own fault, not the caller's (kind
/// `internal`), e.g. a helper that answered outside its protocol.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InternalError(pub String);

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

    /// Classify an error chain by the typed errors in it. `what` is the
    /// chain as one line (`{e:#}`), without the program's prefix.
    pub fn classify(e: &anyhow::Error) -> Self {
        Self::classify_or(e, ErrorKind::Internal)
    }

    /// [`MachineError::classify`], with `kind` for an error no typed error
    /// explains (e.g. `Usage` for a command line the parser refused).
    pub fn classify_or(e: &anyhow::Error, kind: ErrorKind) -> Self {
        let what = format!("{e:#}");
        for cause in e.chain() {
            if let Some(s) = cause.downcast_ref::<SpecError>() {
                return Self::from_spec(s, what);
            }
            if let Some(w) = cause.downcast_ref::<WorkspaceError>() {
                return Self::from_workspace(w, what);
            }
            if let Some(l) = cause.downcast_ref::<LaunchError>() {
                return Self::from_launch(l, what);
            }
            if let Some(n) = cause.downcast_ref::<NetError>() {
                return Self::from_net(n, what);
            }
            if let Some(p) = cause.downcast_ref::<crate::image::pull::PullError>() {
                return Self::from_pull(p, what);
            }
            if let Some(i) = cause.downcast_ref::<crate::image::ImageError>() {
                return Self::from_image(i, what);
            }
            if cause.downcast_ref::<InternalError>().is_some() {
                return MachineError::new(ErrorKind::Internal, what);
            }
            if let Some(c) = cause.downcast_ref::<CgroupError>() {
                return Self::from_cgroup(c, what);
            }
            if let Some(s) = cause.downcast_ref::<SysError>() {
                return MachineError::new(ErrorKind::Io, what).with_sys(s);
            }
        }
        MachineError::new(kind, what)
    }

    /// A launch failure reported as one line by the sandbox's setup
    /// (`what: call => ERRNO: description (hint)`, the exit report's
    /// `error`): `where` is the call, `errno` its name, `hint` the text in
    /// the final parentheses. Lines of another shape keep only `what`.
    pub fn from_setup_line(line: &str) -> Self {
        let mut m = MachineError::new(ErrorKind::Setup, line);
        // The errno is the last " => EXXX:"; what precedes it ends with
        // ": call", where the call is the last ": "-separated part.
        if let Some((left, right)) = line.rsplit_once(" => ") {
            let name: String = right
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                .collect();
            if name.len() > 1 && name.starts_with('E') && right[name.len()..].starts_with(':') {
                m.errno = Some(name);
                m.location = Some(match left.split_once(": ") {
                    Some((_, call)) => call.to_string(),
                    None => left.to_string(),
                });
            }
        }
        if line.ends_with(')')
            && let Some(open) = matching_open_paren(line)
            && open > 0
            && line[..open].ends_with(' ')
        {
            m.hint = Some(line[open + 1..line.len() - 1].to_string());
        }
        m
    }

    /// Name the failed syscall and its errno.
    fn with_sys(mut self, s: &SysError) -> Self {
        self.location = Some(s.call.clone());
        self.errno = Some(format!("{:?}", s.errno));
        self
    }

    fn from_spec(s: &SpecError, what: String) -> Self {
        // The egress policy lives under `network`: its errors are the
        // policy's, whatever front end named it.
        let kind = if s.path == "network" || s.path.starts_with("network.") {
            ErrorKind::Policy
        } else {
            ErrorKind::Spec
        };
        let mut m = MachineError::new(kind, what);
        m.location = (!s.path.is_empty()).then(|| s.path.clone());
        m.hint = super::flags::flag_for(&s.path).map(|f| format!("set by {f}"));
        m
    }

    fn from_launch(l: &LaunchError, what: String) -> Self {
        match l {
            LaunchError::Spec(s) => Self::from_spec(s, what),
            LaunchError::Sys(s)
            | LaunchError::Clone(s)
            | LaunchError::Idmap { err: s, .. }
            | LaunchError::ProcessLimit { err: s, .. } => {
                MachineError::new(ErrorKind::Setup, what).with_sys(s)
            }
            LaunchError::Cgroup(c) => Self::from_cgroup(c, what),
            LaunchError::MultiThreaded(_) | LaunchError::IdRange(_) => {
                MachineError::new(ErrorKind::Setup, what)
            }
            LaunchError::Prepare(e) => {
                let mut m = Self::from_setup_line(&e.to_string());
                m.what = what;
                m
            }
            LaunchError::HelperNotFound | LaunchError::Helper { .. } => {
                MachineError::new(ErrorKind::Setup, what)
            }
            LaunchError::Setup { errno, .. } => {
                let mut m = MachineError::new(ErrorKind::Setup, what);
                m.errno = Some(format!("{errno:?}"));
                m
            }
            // The Spec's image: not in the store, refused by a check, or
            // a damaged store; the line says which and what to do.
            LaunchError::Image(_) => MachineError::new(ErrorKind::Refused, what),
            LaunchError::Failed(f) => {
                let kind = match f.kind {
                    crate::launch::FailureKind::InvalidSpec => ErrorKind::Spec,
                    crate::launch::FailureKind::Image => ErrorKind::Refused,
                    _ => ErrorKind::Setup,
                };
                let mut m = MachineError::new(kind, what);
                m.location = f.location.clone();
                m.errno = f.errno.clone();
                m.hint = f.hint.clone();
                m
            }
        }
    }

    /// A limit the host cannot enforce: `where` is its key, `hint` the fix.
    fn from_cgroup(c: &CgroupError, what: String) -> Self {
        let mut m = MachineError::new(ErrorKind::Setup, what);
        match c {
            CgroupError::Unavailable { limit, fix, .. } => {
                m.location = Some(format!("limits.{limit}"));
                m.hint = Some(fix.clone());
            }
            CgroupError::BadParent { fix, .. } => {
                m.location = Some("limits.cgroup_parent".to_string());
                m.hint = Some(fix.clone());
            }
            CgroupError::Io { path, hint, .. } => {
                m.location = Some(path.display().to_string());
                m.hint = Some(hint.clone());
            }
            CgroupError::IoDevice { index, .. } => {
                m.location = Some(format!("limits.io[{index}].device"));
            }
            CgroupError::RlimitAboveHard { name, .. } => {
                m.location = Some(format!("limits.rlimits.{name}"));
            }
        }
        m
    }

    fn from_pull(p: &crate::image::pull::PullError, what: String) -> Self {
        use crate::image::pull::PullError as P;
        let (kind, location) = match p {
            P::Image(i) => return Self::from_image(i, what),
            P::Reference { reference, .. } => (ErrorKind::Usage, Some(reference.clone())),
            P::Unpinned { reference } => (ErrorKind::Refused, Some(reference.clone())),
            P::AuthFile { path, .. } | P::Store { path, .. } => (ErrorKind::Io, Some(path.clone())),
            P::TrustStore(_) => (ErrorKind::Io, None),
            P::Registry { host, .. } => (ErrorKind::Registry, Some(host.clone())),
            P::Tampered { digest, .. } => (ErrorKind::Registry, Some(digest.clone())),
        };
        let mut m = MachineError::new(kind, what);
        m.location = location;
        m
    }

    fn from_image(i: &crate::image::ImageError, what: String) -> Self {
        use crate::image::ImageError as I;
        let (kind, location) = match i {
            I::Input { path, .. } | I::Store { path, .. } => (ErrorKind::Io, Some(path.clone())),
            I::Sys(s) => return MachineError::new(ErrorKind::Io, what).with_sys(s),
            I::NotFound(_) => (ErrorKind::NotFound, None),
            I::Blob { digest, .. } | I::Layer { digest, .. } => {
                (ErrorKind::Refused, Some(digest.clone()))
            }
            I::Refused(_) | I::Invalid(_) => (ErrorKind::Refused, None),
        };
        let mut m = MachineError::new(kind, what);
        m.location = location;
        m
    }

    fn from_net(n: &NetError, what: String) -> Self {
        match n {
            NetError::Policy { key, .. } => {
                let mut m = MachineError::new(ErrorKind::Policy, what);
                m.location = Some(key.clone());
                m
            }
            NetError::PolicyFile { path, .. } | NetError::NoProfileChosen { path, .. } => {
                let mut m = MachineError::new(ErrorKind::Policy, what);
                m.location = Some(path.display().to_string());
                m
            }
            NetError::Io { what: w, .. } => {
                let mut m = MachineError::new(ErrorKind::Io, what);
                m.location = Some(w.clone());
                m
            }
            NetError::Sys(s) => MachineError::new(ErrorKind::Io, what).with_sys(s),
        }
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
            WorkspaceError::Sys(s) => return MachineError::new(ErrorKind::Io, what).with_sys(s),
            WorkspaceError::State { path, .. } | WorkspaceError::StateDir { path, .. } => {
                (ErrorKind::Io, Some(path.display().to_string()))
            }
            WorkspaceError::Git(_) => (ErrorKind::Setup, None),
            // As `hutch run` classifies the Spec's image: not in the store,
            // refused by a check or the approved list.
            WorkspaceError::Image(_) => (ErrorKind::Refused, None),
            // Classified by their line, as when they were carried as text.
            WorkspaceError::Launch(_)
            | WorkspaceError::SetupFailed(_)
            | WorkspaceError::IdRange(_)
            | WorkspaceError::OtherImage { .. }
            | WorkspaceError::Registry(_)
            | WorkspaceError::MkfsMissing
            | WorkspaceError::MkfsFailed { .. }
            | WorkspaceError::DiskAttached { .. }
            | WorkspaceError::WriterFailed
            | WorkspaceError::WriterPanicked
            | WorkspaceError::EgressAuditNotFile
            | WorkspaceError::WarmClosed
            | WorkspaceError::WarmOversized
            | WorkspaceError::WarmRequest(_)
            | WorkspaceError::CommandThread(_) => {
                let mut m = Self::from_setup_line(&w.to_string());
                m.what = what;
                return m;
            }
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

/// The failure document of `verb` that also carries what was done before
/// the failure (e.g. the ids `gc` removed, the exit report of a run whose
/// setup failed), one line.
pub fn partial_line<T: Serialize>(verb: &str, result: &T, error: &MachineError) -> String {
    let env = Envelope {
        hutch: VERSION,
        verb,
        ok: false,
        result: Some(result),
        error: Some(error),
    };
    line(&env)
}

/// Bytes in a JSON document: UTF-8 text as is, anything else as base64
/// (`{"encoding": "utf-8"|"base64", "content": "..."}`), so file contents
/// and patches survive whole whatever their bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Content {
    pub encoding: &'static str,
    pub content: String,
}

impl Content {
    pub fn new(data: Vec<u8>) -> Self {
        match String::from_utf8(data) {
            Ok(text) => Content {
                encoding: "utf-8",
                content: text,
            },
            Err(e) => Content {
                encoding: "base64",
                content: base64(e.as_bytes()),
            },
        }
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64(data: &[u8]) -> String {
    crate::spec::base64_encode(data)
}

/// The index of the `(` that the final `)` of `line` closes.
fn matching_open_paren(line: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in line.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// One line of JSON with workload-chosen names escaped (controls, bidi).
fn line<T: Serialize>(value: &T) -> String {
    let mut bytes = crate::workspace::json_line(value).expect("machine documents serialize");
    bytes.pop(); // the newline: callers write the line their own way
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

    #[test]
    fn setup_lines_give_call_errno_and_hint() {
        let m = MachineError::from_setup_line(
            "opening host path /nonexistent: openat2(AT_FDCWD, \"/nonexistent\", 0o10000000, resolve=0x0) => ENOENT: No such file or directory (the host path does not exist; fix the path or use an optional bind)",
        );
        assert_eq!(m.kind, ErrorKind::Setup);
        assert_eq!(m.errno.as_deref(), Some("ENOENT"));
        assert_eq!(
            m.location.as_deref(),
            Some("openat2(AT_FDCWD, \"/nonexistent\", 0o10000000, resolve=0x0)")
        );
        assert_eq!(
            m.hint.as_deref(),
            Some("the host path does not exist; fix the path or use an optional bind")
        );
        // Another shape keeps the line, and invents nothing.
        let m = MachineError::from_setup_line("cannot write status file /x: denied");
        assert_eq!((m.errno, m.location, m.hint), (None, None, None));
        let m = MachineError::from_setup_line("mount(\"a\") => EPERM: Operation not permitted");
        assert_eq!(m.errno.as_deref(), Some("EPERM"));
        assert_eq!(m.location.as_deref(), Some("mount(\"a\")"));
        assert_eq!(m.hint, None);
    }

    #[test]
    fn typed_errors_get_their_kind() {
        let spec = anyhow::Error::new(SpecError::new("limits.pids", "must be 1 to 4194304"));
        let m = MachineError::classify(&spec);
        assert_eq!(m.kind, ErrorKind::Spec);
        assert_eq!(m.location.as_deref(), Some("limits.pids"));
        assert_eq!(m.hint.as_deref(), Some("set by --pids"));
        let policy = anyhow::Error::new(SpecError::new("network.allow[0]", "bad pattern"));
        assert_eq!(MachineError::classify(&policy).kind, ErrorKind::Policy);
        let launch = anyhow::Error::new(LaunchError::Sys(SysError::new(
            "clone3()",
            crate::sys::Errno::EPERM,
        )));
        let m = MachineError::classify(&launch);
        assert_eq!(m.kind, ErrorKind::Setup);
        assert_eq!(m.errno.as_deref(), Some("EPERM"));
        assert_eq!(m.location.as_deref(), Some("clone3()"));
        let helper = anyhow::Error::new(InternalError("bad helper line".into())).context("grep");
        assert_eq!(
            MachineError::classify_or(&helper, ErrorKind::Usage).kind,
            ErrorKind::Internal
        );
        let plain = anyhow::anyhow!("--memory needs a value");
        assert_eq!(MachineError::classify(&plain).kind, ErrorKind::Internal);
        assert_eq!(
            MachineError::classify_or(&plain, ErrorKind::Usage).kind,
            ErrorKind::Usage
        );
    }

    #[test]
    fn a_session_launch_failure_reads_and_classifies_as_its_line() {
        let launch = LaunchError::Sys(SysError::new("mount(\"a\")", crate::sys::Errno::EPERM));
        let line = launch.to_string();
        let w = WorkspaceError::from(launch);
        assert!(
            matches!(&w, WorkspaceError::Launch(f) if f.location.as_deref() == Some("mount(\"a\")"))
        );
        // The same line, once, also through a chain printed with `{:#}`.
        assert_eq!(w.to_string(), line);
        let e = anyhow::Error::new(w);
        assert_eq!(format!("{e:#}"), line);
        let mut by_line = MachineError::from_setup_line(&line);
        by_line.what = line.clone();
        assert_eq!(MachineError::classify(&e), by_line);
    }

    #[test]
    fn content_is_text_or_base64() {
        assert_eq!(
            Content::new(b"hi\n".to_vec()),
            Content {
                encoding: "utf-8",
                content: "hi\n".into()
            }
        );
        let c = Content::new(vec![0xff, 0, b'a']);
        assert_eq!((c.encoding, c.content.as_str()), ("base64", "/wBh"));
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
