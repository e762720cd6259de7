//! Paths given by a caller (`read`, `write`, `export`): relative to the
//! workspace, split into single components, never `..`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::util::quote::display_name;

use super::error::{Result, WorkspaceError};

/// Mount point of the workspace inside a session's sandboxes.
pub const WORKSPACE_DIR: &str = "/workspace";

/// A validated path inside the workspace: non-empty components without
/// `/`, NUL, `.` or `..`. The empty path is the workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    components: Vec<CString>,
}

impl RelPath {
    /// Parse a caller's path. Relative paths and absolute paths under
    /// `/workspace` are accepted; `.` components are dropped; `..`, NUL and
    /// other absolute paths are refused.
    pub fn parse(path: &Path) -> Result<RelPath> {
        Self::parse_in(path, Path::new(WORKSPACE_DIR))
    }

    /// [`RelPath::parse`] for a workspace mounted at `workspace`: absolute
    /// paths must be under it.
    pub fn parse_in(path: &Path, workspace: &Path) -> Result<RelPath> {
        let bytes = path.as_os_str().as_bytes();
        let bad = |reason: &str| WorkspaceError::BadPath {
            path: display_name(bytes),
            reason: reason.into(),
        };
        if bytes.contains(&0) {
            return Err(bad("contains a NUL byte"));
        }
        let rest: &[u8] = if bytes.first() == Some(&b'/') {
            let ws = workspace.as_os_str().as_bytes();
            if bytes == ws {
                b""
            } else if bytes.starts_with(ws) && bytes.get(ws.len()) == Some(&b'/') {
                &bytes[ws.len() + 1..]
            } else {
                return Err(WorkspaceError::BadPath {
                    path: display_name(bytes),
                    reason: format!("absolute paths must be under {}", workspace.display()),
                });
            }
        } else {
            bytes
        };
        let mut components = Vec::new();
        for part in rest.split(|&b| b == b'/') {
            match part {
                b"" | b"." => continue,
                b".." => return Err(bad("`..` is not allowed")),
                _ => components.push(CString::new(part).map_err(|_| bad("contains a NUL byte"))?),
            }
        }
        Ok(RelPath { components })
    }

    pub fn components(&self) -> &[CString] {
        &self.components
    }

    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The path as bytes joined with `/` (no leading slash).
    pub fn to_bytes(&self) -> Vec<u8> {
        join(&self.components)
    }
}

/// Join components with `/`.
pub(crate) fn join(components: &[CString]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, c) in components.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(c.as_bytes());
    }
    out
}

/// `prefix/name` for walks (prefix may be empty).
pub(crate) fn child_path(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(prefix.len() + name.len() + 1);
    if !prefix.is_empty() {
        p.extend_from_slice(prefix);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        RelPath::parse(Path::new(p))
            .unwrap()
            .components()
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn accepts_relative_and_workspace_paths() {
        assert_eq!(parts("a/./b//c"), ["a", "b", "c"]);
        assert_eq!(parts("/workspace/a"), ["a"]);
        assert!(parts("/workspace").is_empty());
    }

    #[test]
    fn refuses_escapes() {
        assert!(RelPath::parse(Path::new("a/../../etc")).is_err());
        assert!(RelPath::parse(Path::new("/etc/passwd")).is_err());
        assert!(RelPath::parse(Path::new("/workspacex/a")).is_err());
    }
}
