//! gitignore matching, so that a session's diff leaves out what `git add
//! -A` would: build outputs, caches, virtualenvs the repository's own
//! `.gitignore` files name.
//!
//! The rules are the baseline's (never the workspace's: a command cannot
//! hide its changes by writing a `.gitignore`): every `.gitignore` of the
//! baseline tree, and the `.git/info/exclude` of a git import, collected
//! at `session create` into `baseline/ignore` (JSON). Semantics follow
//! gitignore(5): `#` comments, `!` negation, a trailing `/` for
//! directories only, a `/` elsewhere anchoring the pattern to its file's
//! directory, `*`, `?`, `[...]` classes, `**` as a leading `**/`, a
//! trailing `/**` or an inner `/**/`, `\` escapes; deeper files take
//! precedence over shallower ones, the last matching line of a file wins,
//! `info/exclude` comes below the root `.gitignore`. A path inside an
//! ignored directory is ignored (it cannot be re-included), and tracked
//! paths (in the baseline) are never left out, as in git.
//!
//! Matching is dynamic programming over pattern and path (no
//! backtracking blow-up); a pattern line longer than 4096 bytes or a file
//! over 1 MiB is not used.

use serde::{Deserialize, Serialize};

/// Largest `.gitignore` (or `info/exclude`) whose rules are used.
pub const IGNORE_FILE_MAX_BYTES: u64 = 1 << 20;
/// Longest pattern line used.
const PATTERN_MAX_BYTES: usize = 4096;

/// The ignore files of a baseline, as stored in `baseline/ignore`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoreFiles {
    /// `(directory, content)`: the directory holding a `.gitignore`
    /// (empty for the root), `/`-separated, and its text (lossy UTF-8).
    pub gitignore: Vec<(String, String)>,
    /// The content of `.git/info/exclude` of a git import.
    pub exclude: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `?`: one byte other than `/`.
    One,
    /// `[...]`: one byte other than `/` in (or, negated, not in) the set.
    Class(Vec<(u8, u8)>, bool),
    /// `*`: any bytes other than `/`.
    Star,
    /// `**/` (leading or inner): nothing, or any path ending in `/`.
    AnyDirs,
    /// A trailing `**`: anything, `/` included.
    AnyAll,
}

#[derive(Debug, Clone)]
struct Pattern {
    tokens: Vec<Token>,
    /// The pattern without wildcards, for a plain comparison.
    literal: Option<Vec<u8>>,
    negated: bool,
    dir_only: bool,
    /// Matched against the path relative to its file's directory (else
    /// against the last component).
    anchored: bool,
}

/// One file's patterns, applying below `dir`.
#[derive(Debug, Clone)]
struct RuleFile {
    dir: Vec<u8>,
    patterns: Vec<Pattern>,
}

/// Compiled rules of a baseline.
#[derive(Debug, Clone, Default)]
pub struct IgnoreRules {
    /// Shallowest first (`info/exclude` first of all): a later file wins.
    files: Vec<RuleFile>,
    /// Extra patterns (`--exclude GLOB`), above everything.
    extra: Vec<Pattern>,
}

fn tokenize(p: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        let c = p[i];
        match c {
            b'\\' if i + 1 < p.len() => {
                out.push(Token::Byte(p[i + 1]));
                i += 2;
                continue;
            }
            b'?' => out.push(Token::One),
            b'*' => {
                let mut j = i;
                while j < p.len() && p[j] == b'*' {
                    j += 1;
                }
                let double = j - i >= 2;
                let at_start = i == 0 || p[i - 1] == b'/';
                if double && at_start && j < p.len() && p[j] == b'/' {
                    out.push(Token::AnyDirs);
                    i = j + 1;
                    continue;
                }
                if double && at_start && j == p.len() {
                    out.push(Token::AnyAll);
                    i = j;
                    continue;
                }
                out.push(Token::Star);
                i = j;
                continue;
            }
            b'[' => {
                if let Some((tok, next)) = class(p, i) {
                    out.push(tok);
                    i = next;
                    continue;
                }
                out.push(Token::Byte(b'['));
            }
            _ => out.push(Token::Byte(c)),
        }
        i += 1;
    }
    out
}

/// The class starting at `p[at] == '['`, and the index after it.
fn class(p: &[u8], at: usize) -> Option<(Token, usize)> {
    let mut i = at + 1;
    let negated = matches!(p.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < p.len() {
        let mut c = p[i];
        if c == b']' && !first {
            return Some((Token::Class(ranges, negated), i + 1));
        }
        first = false;
        if c == b'\\' && i + 1 < p.len() {
            i += 1;
            c = p[i];
        }
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&e| e != b']') {
            let mut end = p[i + 2];
            let mut skip = 3;
            if end == b'\\' && i + 3 < p.len() {
                end = p[i + 3];
                skip = 4;
            }
            ranges.push((c.min(end), c.max(end)));
            i += skip;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    None
}

impl Pattern {
    /// One gitignore line, `None` for blanks, comments and unusable lines.
    fn parse(line: &[u8]) -> Option<Pattern> {
        let mut line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b'#' || line.len() > PATTERN_MAX_BYTES {
            return None;
        }
        // Trailing spaces go unless escaped.
        while line.len() >= 2 && line.ends_with(b" ") && line[line.len() - 2] != b'\\' {
            line = &line[..line.len() - 1];
        }
        if line == b" " {
            return None;
        }
        let mut negated = false;
        if line[0] == b'!' {
            negated = true;
            line = &line[1..];
        }
        let mut dir_only = false;
        if line.len() > 1 && line.ends_with(b"/") {
            dir_only = true;
            line = &line[..line.len() - 1];
        }
        if line.is_empty() || line == b"/" {
            return None;
        }
        let anchored = line.contains(&b'/');
        let line = line.strip_prefix(b"/").unwrap_or(line);
        let tokens = tokenize(line);
        let literal = tokens
            .iter()
            .map(|t| match t {
                Token::Byte(b) => Some(*b),
                _ => None,
            })
            .collect();
        Some(Pattern {
            tokens,
            literal,
            negated,
            dir_only,
            anchored,
        })
    }

    /// A `--exclude GLOB`: gitignore syntax without negation.
    fn glob(text: &str) -> Option<Pattern> {
        let mut p = Pattern::parse(text.as_bytes())?;
        p.negated = false;
        Some(p)
    }

    /// Whether it matches `rel` (relative to its file's directory).
    fn matches(&self, rel: &[u8], is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let subject = if self.anchored {
            rel
        } else {
            rel.rsplit(|&b| b == b'/').next().unwrap_or(rel)
        };
        match &self.literal {
            Some(l) => l == subject,
            None => wildmatch(&self.tokens, subject),
        }
    }
}

/// Whether `tokens` match all of `s`, by dynamic programming: `row[j]`
/// is whether the tokens so far match `s[..j]`.
fn wildmatch(tokens: &[Token], s: &[u8]) -> bool {
    let n = s.len();
    let mut row = vec![false; n + 1];
    row[0] = true;
    let mut next = vec![false; n + 1];
    for t in tokens {
        next.iter_mut().for_each(|v| *v = false);
        match t {
            Token::Star => {
                // Any run of non-slash bytes after a matched prefix.
                let mut reach = false;
                for j in 0..=n {
                    if j > 0 && s[j - 1] == b'/' {
                        reach = false;
                    }
                    reach |= row[j];
                    next[j] = reach;
                }
            }
            Token::AnyAll => {
                let first = row.iter().position(|&v| v);
                if let Some(f) = first {
                    next[f..].iter_mut().for_each(|v| *v = true);
                }
            }
            Token::AnyDirs => {
                // Nothing, or anything ending in '/'.
                let mut reach = false;
                for j in 0..=n {
                    reach |= row[j];
                    next[j] = row[j] || (reach && j > 0 && s[j - 1] == b'/');
                }
            }
            one => {
                for j in 1..=n {
                    if !row[j - 1] {
                        continue;
                    }
                    let c = s[j - 1];
                    next[j] = match one {
                        Token::Byte(b) => c == *b,
                        Token::One => c != b'/',
                        Token::Class(ranges, negated) => {
                            c != b'/'
                                && (ranges.iter().any(|(a, b)| (*a..=*b).contains(&c)) != *negated)
                        }
                        _ => unreachable!("handled above"),
                    };
                }
            }
        }
        std::mem::swap(&mut row, &mut next);
        if !row.iter().any(|&v| v) {
            return false;
        }
    }
    row[n]
}

fn patterns(text: &str) -> Vec<Pattern> {
    text.as_bytes()
        .split(|&b| b == b'\n')
        .filter_map(Pattern::parse)
        .collect()
}

impl IgnoreRules {
    /// Compile the stored ignore files, plus `excludes` (`--exclude`).
    pub fn new(files: &IgnoreFiles, excludes: &[String]) -> IgnoreRules {
        let mut out = Vec::new();
        if let Some(text) = &files.exclude {
            out.push(RuleFile {
                dir: Vec::new(),
                patterns: patterns(text),
            });
        }
        let mut sorted: Vec<&(String, String)> = files.gitignore.iter().collect();
        sorted.sort_by_key(|(dir, _)| {
            (
                dir.bytes().filter(|&b| b == b'/').count(),
                !dir.is_empty(),
                dir.clone(),
            )
        });
        for (dir, text) in sorted {
            out.push(RuleFile {
                dir: dir.as_bytes().to_vec(),
                patterns: patterns(text),
            });
        }
        IgnoreRules {
            files: out,
            extra: excludes.iter().filter_map(|g| Pattern::glob(g)).collect(),
        }
    }

    /// Whether `path` matches an `--exclude` pattern (left out even when
    /// tracked: the caller asked for it by name).
    pub fn is_excluded(&self, path: &[u8], is_dir: bool) -> bool {
        self.extra.iter().any(|p| p.matches(path, is_dir))
    }

    /// Whether `path` (`/`-separated, relative to the workspace) itself is
    /// ignored by the ignore files (or excluded); its parents are the
    /// caller's to check.
    pub fn is_ignored(&self, path: &[u8], is_dir: bool) -> bool {
        if self.is_excluded(path, is_dir) {
            return true;
        }
        let mut verdict = false;
        for f in &self.files {
            let rel = if f.dir.is_empty() {
                path
            } else {
                match path
                    .strip_prefix(f.dir.as_slice())
                    .and_then(|r| r.strip_prefix(b"/"))
                {
                    Some(r) => r,
                    None => continue,
                }
            };
            if let Some(p) = f.patterns.iter().rev().find(|p| p.matches(rel, is_dir)) {
                verdict = !p.negated;
            }
        }
        verdict
    }

    /// Whether no rule could ever match.
    pub fn is_empty(&self) -> bool {
        self.extra.is_empty() && self.files.iter().all(|f| f.patterns.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(root: &str) -> IgnoreRules {
        IgnoreRules::new(
            &IgnoreFiles {
                gitignore: vec![(String::new(), root.into())],
                exclude: None,
            },
            &[],
        )
    }

    #[test]
    fn basenames_dirs_and_anchors() {
        let r = rules("__pycache__/\n*.pyc\n/build\ndocs/*.html\n# c\n\n.venv\n");
        assert!(r.is_ignored(b"__pycache__", true));
        assert!(r.is_ignored(b"pkg/__pycache__", true));
        assert!(!r.is_ignored(b"pkg/__pycache__", false));
        assert!(r.is_ignored(b"a/b/c.pyc", false));
        assert!(r.is_ignored(b"build", true));
        assert!(!r.is_ignored(b"src/build", true));
        assert!(r.is_ignored(b"docs/x.html", false));
        assert!(!r.is_ignored(b"docs/sub/x.html", false));
        assert!(r.is_ignored(b".venv", true));
        assert!(!r.is_ignored(b"src/main.py", false));
    }

    #[test]
    fn negation_and_precedence() {
        let r = IgnoreRules::new(
            &IgnoreFiles {
                gitignore: vec![
                    ("sub".into(), "!keep.log\n".into()),
                    (String::new(), "*.log\n".into()),
                ],
                exclude: Some("*.tmp\n".into()),
            },
            &["*.bak".into()],
        );
        assert!(r.is_ignored(b"a.log", false));
        assert!(!r.is_ignored(b"sub/keep.log", false));
        assert!(r.is_ignored(b"sub/other.log", false));
        assert!(r.is_ignored(b"x/y.tmp", false));
        assert!(r.is_ignored(b"z.bak", false));
        let r = rules("*.log\n!important.log\n");
        assert!(!r.is_ignored(b"important.log", false));
    }

    #[test]
    fn double_stars_and_classes() {
        let r = rules("**/logs\nfoo/**/bar\nout/**\n[abc]x\n\\#lit\nq?z\n");
        assert!(r.is_ignored(b"logs", true));
        assert!(r.is_ignored(b"a/b/logs", false));
        assert!(r.is_ignored(b"foo/bar", false));
        assert!(r.is_ignored(b"foo/a/b/bar", false));
        assert!(!r.is_ignored(b"foox/bar", false));
        assert!(r.is_ignored(b"out/a/b", false));
        assert!(!r.is_ignored(b"out", true));
        assert!(r.is_ignored(b"bx", false));
        assert!(!r.is_ignored(b"dx", false));
        assert!(r.is_ignored(b"#lit", false));
        assert!(r.is_ignored(b"qaz", false));
        assert!(!r.is_ignored(b"q/z", false));
        assert!(wildmatch(&tokenize(b"a*b*c"), b"axxbyyc"));
        assert!(!wildmatch(&tokenize(b"a*b"), b"a/b"));
        assert!(wildmatch(&tokenize(b"[!a-c]"), b"d"));
        // No exponential backtracking.
        let long = vec![b'a'; 4000];
        assert!(!wildmatch(&tokenize(b"*a*a*a*a*a*a*a*a*a*a*b"), &long));
    }
}
