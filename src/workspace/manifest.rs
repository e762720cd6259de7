//! The baseline's fingerprint manifest.
//!
//! One line per file or symlink, sorted bytewise by path:
//! `<git mode, octal> <sha256 hex> <size> <path, git-quoted>\n`, where a
//! symlink's digest and size are those of its target string. Directories are
//! not listed (git does not track them). The root digest (the session's
//! fingerprint) is the sha256 of the manifest text, so a caller can check it
//! with `sha256sum baseline/manifest`, and the same tree gives the same
//! fingerprint whether it came from a directory or a git commit.

use sha2::{Digest, Sha256};

use crate::util::quote::git_quote;

/// Git mode of a regular file.
pub const MODE_FILE: u32 = 0o100644;
/// Git mode of an executable file.
pub const MODE_EXEC: u32 = 0o100755;
/// Git mode of a symlink.
pub const MODE_LINK: u32 = 0o120000;

/// One manifest line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    pub path: Vec<u8>,
    pub mode: u32,
    pub size: u64,
    pub sha256: [u8; 32],
}

/// All entries of a baseline.
#[derive(Debug, Default, Clone)]
pub struct Manifest {
    pub entries: Vec<ManifestEntry>,
}

impl Manifest {
    /// The manifest text (entries sorted by path).
    pub fn render(&mut self) -> Vec<u8> {
        self.entries.sort_by(|a, b| a.path.cmp(&b.path));
        let mut out = Vec::with_capacity(self.entries.len() * 100);
        for e in &self.entries {
            out.extend_from_slice(
                format!(
                    "{:o} {} {} {}\n",
                    e.mode,
                    hex::encode(e.sha256),
                    e.size,
                    git_quote(&e.path)
                )
                .as_bytes(),
            );
        }
        out
    }
}

/// The fingerprint of a rendered manifest: sha256 hex of its bytes.
pub fn fingerprint(manifest_text: &[u8]) -> String {
    hex::encode(Sha256::digest(manifest_text))
}

/// Git's mode for a host permission mode: executable if the owner may
/// execute.
pub fn git_file_mode(perm: u32) -> u32 {
    if perm & 0o100 != 0 {
        MODE_EXEC
    } else {
        MODE_FILE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_is_sorted_and_quoted() {
        let mut m = Manifest::default();
        m.entries.push(ManifestEntry {
            path: b"b\nc".to_vec(),
            mode: MODE_FILE,
            size: 0,
            sha256: [0; 32],
        });
        m.entries.push(ManifestEntry {
            path: b"a".to_vec(),
            mode: MODE_EXEC,
            size: 3,
            sha256: [1; 32],
        });
        let text = String::from_utf8(m.render()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("100755 0101"));
        assert!(lines[0].ends_with(" 3 a"));
        assert!(lines[1].ends_with(" 0 \"b\\nc\""));
        assert_eq!(fingerprint(text.as_bytes()).len(), 64);
    }
}
