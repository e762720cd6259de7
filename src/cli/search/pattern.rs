//! Glob patterns of `hutch session glob` and `grep --glob`, matched against
//! workspace-relative paths one component at a time.
//!
//! `*` any run within a component, `?` one character, `[abc]` `[a-z]`
//! `[!x]` (or `[^x]`) one character of (not of) a set, `{a,b}` either
//! alternative (nested, at most [`MAX_ALTERNATIVES`] in all), `**` as a whole
//! component any number of directories (none included), `\x` a literal
//! `x`. Wildcards also match a leading `.`: hidden files are files.

/// The most patterns `{...}` may expand to.
pub const MAX_ALTERNATIVES: usize = 256;

/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(char),
    One,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Component {
    /// `**`: zero or more whole components.
    AnyDirs,
    Segment(Vec<Tok>),
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq)]
pub struct Glob {
    alternatives: Vec<Vec<Component>>,
    /// No `/` in the pattern: `grep --glob` matches it against file names.
    pub basename_only: bool,
}

impl Glob {
    /// Compile `pattern`; the error says what is wrong with it.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("the pattern is empty".into());
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "the pattern is longer than {MAX_PATTERN_BYTES} bytes"
            ));
        }
        if pattern.starts_with('/') {
            return Err("patterns are relative to the workspace (no leading /)".into());
        }
        let mut alternatives = Vec::new();
        for alt in expand_braces(pattern)? {
            let mut comps = Vec::new();
            for part in alt.split('/') {
                match part {
                    "" | "." => {}
                    ".." => return Err("a pattern may not contain `..`".into()),
                    "**" => {
                        // `**/**` is one `**`.
                        if comps.last() != Some(&Component::AnyDirs) {
                            comps.push(Component::AnyDirs);
                        }
                    }
                    _ => comps.push(Component::Segment(segment(part)?)),
                }
            }
            if comps.is_empty() {
                return Err("the pattern names no file".into());
            }
            alternatives.push(comps);
        }
        Ok(Glob {
            alternatives,
            basename_only: !pattern.contains('/'),
        })
    }

    /// Whether the path (its components) matches.
    pub fn matches(&self, path: &[&str]) -> bool {
        self.alternatives.iter().any(|p| match_components(p, path))
    }

    /// Whether anything below the directory `dir` (its components) could
    /// match: the walk skips directories that cannot.
    pub fn could_match_below(&self, dir: &[&str]) -> bool {
        self.alternatives.iter().any(|p| prefix_leaves_rest(p, dir))
    }
}

/// `{a,b}` alternatives, expanded outermost first.
fn expand_braces(pattern: &str) -> Result<Vec<String>, String> {
    let mut done = Vec::new();
    let mut todo = vec![pattern.to_string()];
    while let Some(p) = todo.pop() {
        match first_brace(&p)? {
            None => done.push(p),
            Some((open, close, commas)) => {
                let mut starts = vec![open + 1];
                starts.extend(commas.iter().map(|c| c + 1));
                let mut ends = commas.clone();
                ends.push(close);
                for (s, e) in starts.into_iter().zip(ends) {
                    todo.push(format!("{}{}{}", &p[..open], &p[s..e], &p[close + 1..]));
                }
            }
        }
        if done.len() + todo.len() > MAX_ALTERNATIVES {
            return Err(format!(
                "the pattern expands to more than {MAX_ALTERNATIVES} alternatives"
            ));
        }
    }
    done.reverse();
    Ok(done)
}

/// The first top-level `{...}`: its open and close byte offsets and the
/// offsets of its top-level commas.
fn first_brace(p: &str) -> Result<Option<(usize, usize, Vec<usize>)>, String> {
    let b = p.as_bytes();
    let mut i = 0;
    let mut in_class = false;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' if !in_class => in_class = true,
            b']' if in_class => in_class = false,
            b'{' if !in_class => {
                let mut depth = 0usize;
                let mut commas = Vec::new();
                let mut j = i;
                while j < b.len() {
                    match b[j] {
                        b'\\' => j += 1,
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                return Ok(Some((i, j, commas)));
                            }
                        }
                        b',' if depth == 1 => commas.push(j),
                        _ => {}
                    }
                    j += 1;
                }
                return Err("a `{` has no matching `}`".into());
            }
            b'}' if !in_class => return Err("a `}` has no matching `{`".into()),
            _ => {}
        }
        i += 1;
    }
    Ok(None)
}

fn segment(part: &str) -> Result<Vec<Tok>, String> {
    let mut toks = Vec::new();
    let mut chars = part.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => toks.push(Tok::Lit(chars.next().ok_or("a pattern ends with `\\`")?)),
            '?' => toks.push(Tok::One),
            '*' => {
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
            }
            '[' => {
                let negated = matches!(chars.peek(), Some('!' | '^'));
                if negated {
                    chars.next();
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let c = chars.next().ok_or("a `[` has no matching `]`")?;
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    let lo = if c == '\\' {
                        chars.next().ok_or("a pattern ends with `\\`")?
                    } else {
                        c
                    };
                    let mut hi = lo;
                    if chars.peek() == Some(&'-') {
                        let mut ahead = chars.clone();
                        ahead.next();
                        if let Some(&h) = ahead.peek()
                            && h != ']'
                        {
                            chars.next();
                            hi = chars.next().unwrap_or(h);
                            if hi == '\\' {
                                hi = chars.next().ok_or("a pattern ends with `\\`")?;
                            }
                        }
                    }
                    if hi < lo {
                        return Err(format!("the range {lo}-{hi} is reversed"));
                    }
                    ranges.push((lo, hi));
                }
                toks.push(Tok::Class { negated, ranges });
            }
            c => toks.push(Tok::Lit(c)),
        }
    }
    Ok(toks)
}

fn tok_matches(t: &Tok, c: char) -> bool {
    match t {
        Tok::Lit(l) => *l == c,
        Tok::One => true,
        Tok::Star => unreachable!("stars are handled by the matcher"),
        Tok::Class { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
        }
    }
}

/// One component against one segment: the usual wildcard matcher with
/// backtracking to the last star (linear in practice, O(n·m) at worst).
fn match_segment(toks: &[Tok], name: &str) -> bool {
    let name: Vec<char> = name.chars().collect();
    let (mut t, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if t < toks.len() && toks[t] == Tok::Star {
            star = Some((t, n));
            t += 1;
        } else if t < toks.len() && tok_matches(&toks[t], name[n]) {
            t += 1;
            n += 1;
        } else if let Some((st, sn)) = star {
            t = st + 1;
            n = sn + 1;
            star = Some((st, sn + 1));
        } else {
            return false;
        }
    }
    toks[t..].iter().all(|x| *x == Tok::Star)
}

/// The states (pattern positions) reachable after matching `path`, as a
/// table over pattern positions: `**` may take any number of components.
fn reachable(pattern: &[Component], path: &[&str]) -> Vec<bool> {
    let mut cur = vec![false; pattern.len() + 1];
    cur[0] = true;
    close(pattern, &mut cur);
    for name in path {
        let mut next = vec![false; pattern.len() + 1];
        for (i, on) in cur.iter().enumerate() {
            if !on || i == pattern.len() {
                continue;
            }
            match &pattern[i] {
                Component::AnyDirs => next[i] = true,
                Component::Segment(toks) => {
                    if match_segment(toks, name) {
                        next[i + 1] = true;
                    }
                }
            }
        }
        close(pattern, &mut next);
        cur = next;
        if !cur.iter().any(|x| *x) {
            break;
        }
    }
    cur
}

/// `**` also matches no component: a state before it reaches past it.
fn close(pattern: &[Component], states: &mut [bool]) {
    for i in 0..pattern.len() {
        if states[i] && pattern[i] == Component::AnyDirs {
            states[i + 1] = true;
        }
    }
}

fn match_components(pattern: &[Component], path: &[&str]) -> bool {
    reachable(pattern, path)[pattern.len()]
}

fn prefix_leaves_rest(pattern: &[Component], dir: &[&str]) -> bool {
    let r = reachable(pattern, dir);
    r[..pattern.len()].iter().any(|x| *x)
}

/// An `--exclude` pattern of glob and grep: gitignore's shape. Without a
/// `/` (a trailing one aside) it names a file or directory anywhere
/// (`.deps`, `*.min.js`); with one, a path from the workspace's root
/// (`vendor/lib`, `build/**`). A trailing `/` is accepted and ignored.
pub fn exclusion(pattern: &str) -> Result<Glob, String> {
    let p = pattern.strip_suffix('/').unwrap_or(pattern);
    let p = p.strip_prefix('/').unwrap_or(p);
    if p.is_empty() {
        return Err("an empty pattern".into());
    }
    Glob::new(p)
}

/// Whether the workspace-relative path `comps` is excluded by one of
/// `patterns`: the path itself or a directory above it matches.
pub fn excluded(patterns: &[Glob], comps: &[&str]) -> bool {
    patterns.iter().any(|g| {
        if g.basename_only {
            comps.iter().any(|c| g.matches(&[c]))
        } else {
            (1..=comps.len()).any(|k| g.matches(&comps[..k]))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_name_anywhere_or_from_the_root_and_cover_what_is_below() {
        let x = |p: &[&str]| -> Vec<Glob> { p.iter().map(|p| exclusion(p).unwrap()).collect() };
        let deps = x(&[".deps/"]);
        assert!(excluded(&deps, &[".deps"]));
        assert!(excluded(&deps, &["sub", ".deps", "m.py"]));
        assert!(!excluded(&deps, &["sub", "deps.py"]));
        let build = x(&["build/**"]);
        assert!(excluded(&build, &["build", "o", "a.o"]));
        assert!(!excluded(&build, &["src", "build", "a.o"]));
        let one = x(&["sub/k.py"]);
        assert!(excluded(&one, &["sub", "k.py"]) && !excluded(&one, &["k.py"]));
        assert!(exclusion("").is_err() && exclusion("/").is_err());
    }

    fn m(p: &str, path: &str) -> bool {
        let comps: Vec<&str> = path.split('/').collect();
        Glob::new(p).unwrap().matches(&comps)
    }

    #[test]
    fn wildcards_stay_within_a_component() {
        assert!(m("*.py", "a.py"));
        assert!(!m("*.py", "src/a.py"));
        assert!(m("src/*.py", "src/a.py"));
        assert!(m("?.py", "a.py"));
        assert!(!m("?.py", "ab.py"));
        assert!(m("*", ".hidden"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("ä?", "äö"));
    }

    #[test]
    fn double_star_takes_any_number_of_directories() {
        assert!(m("**/*.py", "a.py"));
        assert!(m("**/*.py", "src/x/y/a.py"));
        assert!(m("src/**", "src/a/b"));
        assert!(m("src/**/t.rs", "src/t.rs"));
        assert!(m("src/**/t.rs", "src/a/b/t.rs"));
        assert!(!m("src/**/t.rs", "lib/a/t.rs"));
        assert!(m("**", "x"));
        assert!(m("./src/*.rs", "src/a.rs"));
    }

    #[test]
    fn classes_braces_and_escapes() {
        assert!(m("[ab].txt", "a.txt"));
        assert!(!m("[!ab].txt", "a.txt"));
        assert!(m("[^ab].txt", "c.txt"));
        assert!(m("[a-c]x", "bx"));
        assert!(m("[]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("*.{rs,toml}", "Cargo.toml"));
        assert!(m("{src,tests}/**/*.rs", "tests/a/b.rs"));
        assert!(!m("{src,tests}/**/*.rs", "benches/b.rs"));
        assert!(m("{a,{b,c}}x", "cx"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
    }

    #[test]
    fn pruning_keeps_only_directories_that_can_hold_a_match() {
        let g = Glob::new("src/**/*.rs").unwrap();
        assert!(g.could_match_below(&[]));
        assert!(g.could_match_below(&["src"]));
        assert!(g.could_match_below(&["src", "deep", "er"]));
        assert!(!g.could_match_below(&["target"]));
        let g = Glob::new("*.py").unwrap();
        assert!(g.could_match_below(&[]));
        assert!(!g.could_match_below(&["src"]));
        assert!(g.basename_only);
        assert!(!Glob::new("src/*.py").unwrap().basename_only);
    }

    /// Agent-chosen patterns: any string compiles or is refused, and
    /// matching never panics.
    #[test]
    fn arbitrary_patterns_never_panic() {
        let alphabet: Vec<char> = "ab*?[]!^-{},/\\.é".chars().collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 12) as usize;
            let p: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if let Ok(g) = Glob::new(&p) {
                for path in [&["a"][..], &["a", "b"], &["é", "ab", "b"], &[]] {
                    let _ = g.matches(path);
                    let _ = g.could_match_below(path);
                }
            }
        }
    }

    #[test]
    fn bad_patterns_say_why() {
        for (p, why) in [
            ("", "empty"),
            ("/etc/*", "relative"),
            ("../x", ".."),
            ("{a,b", "no matching `}`"),
            ("a}", "no matching `{`"),
            ("[ab", "no matching `]`"),
            ("x\\", "ends with"),
            ("[z-a]", "reversed"),
            (
                "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}",
                "alternatives",
            ),
        ] {
            let e = Glob::new(p).unwrap_err();
            assert!(e.contains(why), "{p:?}: {e}");
        }
    }
}
